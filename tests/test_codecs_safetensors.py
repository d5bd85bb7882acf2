"""``codecs.safetensors``: masks round-trip through the codec's own bounded reader; float companions
in BF16 / F16 / F32 / F64 load exactly (BF16 by its bits) or are refused with a code; forged header
shapes, 70 dimensions, a lone surrogate in ``__metadata__``, bad offsets, missing ids and odd
``from_tensors`` inputs are ``SamplingMaskError``. Most files are written by hand (8-byte length,
JSON header, raw buffer), so no safetensors package is needed for them."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.codecs import safetensors as st
from sampling_mask.data import synthetic

MASK = sm.SamplingMask.from_rows([[1, 2], [3]], vocab_size=8)
HEADER = {"sampling_mask.version": "1", "sampling_mask.vocab_size": "8", "sampling_mask.id_order": "ascending"}


def _write(path: Path, tensors: dict[str, tuple[str, bytes, list[int]]], metadata: Any = HEADER) -> Path:
    """A safetensors file of ``name: (dtype, raw bytes, shape)``; the header written as JSON text."""
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, (dtype, raw, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))
    return path


def _mask_tensors(**companions: tuple[str, bytes, list[int]]) -> dict[str, tuple[str, bytes, list[int]]]:
    base = {
        st.IDS: ("I32", MASK.ids.astype("<i4").tobytes(), [3]),
        st.OFFSETS: ("I64", MASK.offsets.astype("<i8").tobytes(), [3]),
        st.CU_SEQLENS: ("I64", MASK.cu_seqlens.astype("<i8").tobytes(), [2]),
    }
    return {**base, **companions}


def _bf16_words(values: list[float]) -> bytes:
    """BF16 as stored: the high 16 bits of each float32 (these values are exact in BF16)."""
    return (np.array(values, "<f4").view("<u4") >> 16).astype("<u2").tobytes()


@pytest.mark.parametrize(
    ("dtype", "raw"),
    [
        ("BF16", _bf16_words([1.0, 0.703125])),
        ("F16", np.array([1.0, 0.703125], "<f2").tobytes()),
        ("F32", np.array([1.0, 0.703125], "<f4").tobytes()),
        ("F64", np.array([1.0, 0.703125], "<f8").tobytes()),
    ],
)
def test_float_companions_load_exactly(tmp_path: Path, dtype: str, raw: bytes) -> None:
    """Row "load_file": a temperature [1.0, 0.7] stored as BF16 loads as its BF16 values (1.0,
    0.703125), never as the raw words 16256, 16179; the other float dtypes load alike."""
    path = _write(tmp_path / "t.safetensors", _mask_tensors(temperature=(dtype, raw, [2])))
    mask = st.load_file(path)
    assert mask.temperature is not None and mask.temperature.dtype == np.float32
    assert mask.temperature.tolist() == [1.0, 0.703125]


def test_bf16_log_probs_load_by_their_bits(tmp_path: Path) -> None:
    raw = _bf16_words([-0.5, -2.0, -0.125])
    path = _write(tmp_path / "l.safetensors", _mask_tensors(support_logprobs=("BF16", raw, [3])))
    assert st.load_file(path).companions["support_logprobs"].tolist() == [-0.5, -2.0, -0.125]


@pytest.mark.parametrize(
    ("companions", "code"),
    [
        ({"temperature": ("F64", np.array([1.0, 0.1], "<f8").tobytes(), [2])}, ErrorCode.E_RANGE),  # 0.1: no float32
        ({"temperature": ("I32", np.array([1, 1], "<i4").tobytes(), [2])}, ErrorCode.E_DTYPE),
        ({"temperature": ("BOOL", b"\x01\x01", [2])}, ErrorCode.E_DTYPE),
        ({"sampled_token_ids": ("BF16", _bf16_words([1.0, 3.0]), [2])}, ErrorCode.E_DTYPE),
        ({"sampled_token_ids": ("F32", np.array([1, 3], "<f4").tobytes(), [2])}, ErrorCode.E_DTYPE),
        ({st.IDS: ("BF16", _bf16_words([1.0, 2.0, 3.0]), [3])}, ErrorCode.E_DTYPE),
    ],
)
def test_inexact_or_foreign_dtypes_are_refused(tmp_path: Path, companions: dict[str, Any], code: ErrorCode) -> None:
    path = _write(tmp_path / "x.safetensors", _mask_tensors(**companions))
    with pytest.raises(SamplingMaskError) as info:
        st.load_file(path)
    assert info.value.code is code


@pytest.mark.parametrize(
    "shape",
    [[0, 1 << 64], [1 << 63, 0], [0] * 70, [0, 1 << 62, 1 << 62], [-1, 0], [1.5]],
    ids=["0x2^64", "2^63x0", "70 dims", "0x2^62x2^62", "negative", "float"],
)
def test_forged_header_shapes_are_mask_errors(tmp_path: Path, shape: list[Any]) -> None:
    """Row "safetensors header": load_file, read_tensors and tensor_dtypes raise SamplingMaskError."""
    tensors = _mask_tensors(temperature=("F32", b"", shape))
    path = _write(tmp_path / "s.safetensors", tensors)
    for call in (lambda: st.load_file(path), lambda: st.read_tensors(path, ["temperature"])):
        with pytest.raises(SamplingMaskError) as info:
            call()
        assert info.value.code in (ErrorCode.E_LIMIT, ErrorCode.E_SHAPE, ErrorCode.E_SCHEMA, ErrorCode.E_BYTES)


def test_a_lone_surrogate_in_metadata_is_an_encoding_error(tmp_path: Path) -> None:
    for key, value in (("sampling_mask.metadata.x", '"\ud800"'), ("sampling_mask.vocab_size", "8\ud800")):
        path = _write(tmp_path / "u.safetensors", _mask_tensors(), metadata={**HEADER, key: value})
        assert b"\\ud800" in path.read_bytes()  # json.dumps writes the lone surrogate as an escape
        with pytest.raises(SamplingMaskError) as info:
            st.load_file(path)
        assert info.value.code is ErrorCode.E_ENCODING, key
    with pytest.raises(SamplingMaskError) as info:
        st.from_tensors(st.to_tensors(MASK)[0], {"sampling_mask.version": "1\ud800"})
    assert info.value.code is ErrorCode.E_ENCODING


@pytest.mark.parametrize("metadata", [["sampling_mask.version", "1"], {"sampling_mask.version": 1}, "x"])
def test_from_tensors_refuses_metadata_that_is_not_a_mapping_of_strings(metadata: Any) -> None:
    with pytest.raises(SamplingMaskError) as info:
        st.from_tensors(st.to_tensors(MASK)[0], metadata)
    assert info.value.code is ErrorCode.E_SCHEMA


def test_from_tensors_with_torch_bf16_and_meta_tensors() -> None:
    torch = pytest.importorskip("torch")
    tensors: dict[str, Any] = {k: torch.from_numpy(np.array(v)) for k, v in st.to_tensors(MASK)[0].items()}
    header = dict(HEADER)
    tau = torch.tensor([1.0, 0.7], dtype=torch.bfloat16)
    mask = st.from_tensors({**tensors, "temperature": tau}, header)
    assert mask.temperature is not None and mask.temperature.tolist() == tau.float().tolist()
    assert mask.temperature.tolist() != [16256.0, 16179.0]
    refused = {
        "bf16 ids": {**tensors, st.IDS: tensors[st.IDS].to(torch.bfloat16)},
        "complex temperature": {**tensors, "temperature": torch.zeros(2, dtype=torch.complex64)},
    }
    for label, bad in refused.items():
        with pytest.raises(SamplingMaskError) as info:
            st.from_tensors(bad, header)
        assert info.value.code is ErrorCode.E_DTYPE, label


def _not_dense(torch: Any, dense: Any, kind: str) -> Any:
    if kind == "meta":
        return torch.empty(dense.shape, dtype=dense.dtype, device="meta")
    if kind == "nested":
        return torch.nested.nested_tensor([dense])
    return dense.to_sparse() if kind == "sparse" else dense.reshape(1, -1).to_sparse_csr()


@pytest.mark.parametrize("kind", ["meta", "sparse", "sparse_csr", "nested"])
@pytest.mark.parametrize("name", [st.IDS, st.OFFSETS, st.CU_SEQLENS, "temperature", "bf16 temperature"])
def test_from_tensors_refuses_tensors_that_are_not_dense_by_name(kind: str, name: str) -> None:
    """A meta, sparse or nested torch tensor is refused by the one tensor check (``E_SCHEMA``,
    the tensor named), whatever its dtype: never a TypeError or RuntimeError from torch."""
    torch = pytest.importorskip("torch")
    tensors: dict[str, Any] = {k: torch.from_numpy(np.array(v)) for k, v in st.to_tensors(MASK)[0].items()}
    tensors["temperature"] = torch.tensor([1.0, 0.5])
    field = name.removeprefix("bf16 ")
    if name.startswith("bf16"):
        tensors[field] = tensors[field].to(torch.bfloat16)
    assert st.from_tensors(tensors, HEADER).temperature.tolist() == [1.0, 0.5]
    with pytest.raises(SamplingMaskError) as info:
        st.from_tensors({**tensors, field: _not_dense(torch, tensors[field], kind)}, HEADER)
    assert info.value.code is ErrorCode.E_SCHEMA and info.value.field == field


@pytest.mark.parametrize("dtype", [["I32"], {"name": "I32"}, 32, None, True, "i32", [[[["I32"]]]]], ids=repr)
def test_a_header_dtype_of_another_json_type_is_refused(tmp_path: Path, dtype: Any) -> None:
    """Every header value is checked for its type before use: a tensor's ``dtype`` that is a list,
    an object, a number, null or an unknown name is ``E_DTYPE`` naming the tensor (a list or an
    object was a TypeError: unhashable); ``tensor_dtypes`` names what was declared."""
    path = _write(tmp_path / "d.safetensors", _mask_tensors())
    header = json.loads(path.read_bytes()[8 : 8 + struct.unpack_from("<Q", path.read_bytes())[0]])
    header[st.IDS]["dtype"] = dtype
    path = _rewrite_header(path, header)
    for call in (lambda: st.load_file(path), lambda: st.read_tensors(path), lambda: st.read_tensors(path, [st.IDS])):
        with pytest.raises(SamplingMaskError) as info:
            call()
        assert info.value.code is ErrorCode.E_DTYPE and info.value.field == st.IDS
    declared = st.tensor_dtypes(path)[st.IDS]
    assert isinstance(declared, str) and len(declared) <= 80


def _rewrite_header(path: Path, header: dict[str, Any]) -> Path:
    data = path.read_bytes()
    (size,) = struct.unpack_from("<Q", data)
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + size :])
    return path


@pytest.mark.parametrize("text", ["1e999", "-1e999", "[1e999]"])
def test_a_metadata_number_past_float64_is_out_of_range(tmp_path: Path, text: str) -> None:
    """``sampling_mask.metadata.x: 1e999`` parses as an infinity: ``E_RANGE`` as the JSON document
    answers (``[1e999]`` is not a metadata value: ``E_SCHEMA``), never a mask holding ``inf``."""
    code = ErrorCode.E_SCHEMA if text.startswith("[") else ErrorCode.E_RANGE
    metadata = {**HEADER, "sampling_mask.metadata.x": text}
    path = _write(tmp_path / "m.safetensors", _mask_tensors(), metadata=metadata)
    for call in (lambda: st.load_file(path), lambda: st.from_tensors(st.to_tensors(MASK)[0], metadata)):
        with pytest.raises(SamplingMaskError) as info:
            call()
        assert info.value.code is code and info.value.field == "metadata.x"
    json_text = '{"sampling_mask": 1, "rows": [[1]], "metadata": {"x": ' + text + "}}"
    with pytest.raises(SamplingMaskError) as info:
        sm.codecs.decode(json_text, format="json")
    assert info.value.code is code


def test_safetensors_masks_are_read_without_the_package(tmp_path: Path) -> None:
    """``codecs.safetensors`` reads through its own bounded reader: a round trip, and forged headers
    are one SamplingMaskError each (never a package error or an allocation sized by the header)."""
    pytest.importorskip("safetensors")
    path = tmp_path / "m.safetensors"
    st.save_file(MASK, path)
    assert st.load_file(path) == MASK
    tensors, meta = st.read_tensors(path, ["sampling_mask.ids"])
    assert not tensors["sampling_mask.ids"].flags.writeable and meta["sampling_mask.version"] == "1"
    header = {"sampling_mask.ids": {"dtype": "I32", "shape": [1 << 40], "data_offsets": [0, 4]}}
    blob = json.dumps(header).encode()
    (tmp_path / "forged.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + b"\0" * 4)
    with pytest.raises(sm.SamplingMaskError) as err:
        st.read_tensors(tmp_path / "forged.safetensors")
    assert err.value.code is sm.ErrorCode.E_BYTES


def test_safetensors_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    from sampling_mask.codecs import safetensors as st_codec

    mask = synthetic.rollout(50, seed=5, segment_length=25).replace(metadata={"top_p": 0.9, "engine": "vllm"})
    path = tmp_path / "mask.safetensors"
    st_codec.save_file(mask, path)
    back = st_codec.load_file(path)
    assert back == mask and back.metadata == {"top_p": 0.9, "engine": "vllm"}
    from safetensors.numpy import load_file

    raw = load_file(str(path))
    assert raw["sampling_mask.ids"].dtype == np.int32 and raw["sampling_mask.offsets"].dtype == np.int64


def test_safetensors_bad_files(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.numpy import save_file

    from sampling_mask.codecs import safetensors as st_codec

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 40)
    with pytest.raises(sm.SamplingMaskError) as err:
        st_codec.load_file(bad)
    assert err.value.code is sm.ErrorCode.E_ENCODING
    tensors, header = st_codec.to_tensors(synthetic.rollout(20, seed=6, segment_length=10))
    tensors["sampling_mask.offsets"] = tensors["sampling_mask.offsets"][::-1].copy()
    save_file(tensors, str(tmp_path / "offsets.safetensors"), metadata=header)
    with pytest.raises(sm.SamplingMaskError) as err:
        st_codec.load_file(tmp_path / "offsets.safetensors")
    assert err.value.code is sm.ErrorCode.E_OFFSETS
    del tensors["sampling_mask.ids"]
    save_file(tensors, str(tmp_path / "noids.safetensors"), metadata={**header, "sampling_mask.version": "2"})
    with pytest.raises(sm.SamplingMaskError) as err:
        st_codec.load_file(tmp_path / "noids.safetensors")
    assert err.value.code is sm.ErrorCode.E_SCHEMA and err.value.field == "sampling_mask.ids"
