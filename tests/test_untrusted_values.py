"""Odd values from Python callers and odd bytes get a clean ``SamplingMaskError`` (issue 18, part 3):
booleans are never ids, targets or counts; bytes-like rows are refused; metadata text is valid
Unicode; only bytes-like input is decoded; base64 padding is canonical; a stream cut at a batch
boundary is reported; a decoded mask cannot be changed through the caller's buffer.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

import sampling_mask
from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.adapters import miles, sglang, skyrl, vllm


def _code(call: Any) -> str:
    with pytest.raises(SamplingMaskError) as info:
        call()
    return info.value.code.value


# ---------------------------------------------------------------------------------------------- booleans
@pytest.mark.parametrize(
    "call",
    [
        lambda: SamplingMask.from_rows([[True, False]]),
        lambda: SamplingMask.from_rows([[3, True]]),
        lambda: SamplingMask.from_rows([[3], [True]], vocab_size=10),
        lambda: SamplingMask.from_ragged([1, True], [0, 2]),
        lambda: SamplingMask.from_ragged([1, 2], [0, 1, True]),
        lambda: SamplingMask.from_counts([1, 2], [True, 1]),
        lambda: SamplingMask.from_dense([[1, True]]),
        lambda: SamplingMask.from_rows([[1], [2]], sampled_token_ids=[1, True]),
        lambda: SamplingMask.from_rows([[1], [2]], cu_seqlens=[0, True, 2]),
        lambda: vllm.from_token_ids([[True, False]]),
        lambda: vllm.from_token_ids([[1], [2]], sampled_token_ids=[1, True]),
        lambda: vllm.from_generate_choice({"sampling_mask": [[True, False]]}),
        lambda: vllm.from_generate_choice({"sampling_mask": [[1], [2]], "token_ids": [1, True]}),
        lambda: sglang.from_meta_info({"output_token_sampling_mask": [[True, 3]]}),
        lambda: skyrl.from_dense([[1, True]]),
        lambda: miles.from_sample({"rollout_sampling_mask_ids": [1, True], "rollout_sampling_mask_offsets": [0, 2]}),
        lambda: miles.from_sample({"rollout_sampling_mask_ids": [1, 2], "rollout_sampling_mask_offsets": [0, True, 2]}),
    ],
)
def test_booleans_are_not_ids_targets_or_counts(call: Any) -> None:
    assert _code(call) == "E_DTYPE"


def test_json_and_python_agree_on_booleans() -> None:
    assert _code(lambda: sampling_mask.decode(b"[[true, false]]", format="json-rows")) == "E_DTYPE"
    assert _code(lambda: SamplingMask.from_rows(json.loads("[[true, false]]"))) == "E_DTYPE"


@pytest.mark.parametrize("row", [b"\x01\x02", bytearray(b"\x01\x02"), memoryview(b"\x01\x02")])
def test_bytes_like_rows_are_refused(row: Any) -> None:
    """One rule: a row is a sequence of ids, never bytes (their items would be read as ids 1 and 2)."""
    assert _code(lambda: SamplingMask.from_rows([[5], row])) == "E_SCHEMA"
    assert _code(lambda: SamplingMask.from_rows([row])) == "E_SCHEMA"


def test_integer_rows_of_every_kind_still_work() -> None:
    expected = SamplingMask.from_rows([[1, 2], [3]])
    assert SamplingMask.from_rows([(1, 2), (3,)]) == expected
    assert SamplingMask.from_rows([np.array([1, 2]), np.array([3])]) == expected
    assert SamplingMask.from_rows([[np.int64(1), 2], [3]]) == expected


# ---------------------------------------------------------------------------------------------- text
def test_lone_surrogate_in_json_metadata_is_refused() -> None:
    doc = b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"\\ud800": 1}}'
    assert _code(lambda: sampling_mask.decode(doc)) == "E_ENCODING"
    value = b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "\\udfff"}}'
    assert _code(lambda: sampling_mask.decode(value)) == "E_ENCODING"
    assert _code(lambda: SamplingMask.from_rows([[1]], metadata={"\ud800": 1})) == "E_ENCODING"


def test_valid_unicode_metadata_round_trips_through_arrow() -> None:
    mask = SamplingMask.from_rows([[1]], metadata={"modèle": "😀"})
    assert sampling_mask.decode(sampling_mask.encode(mask, "arrow"), format="arrow") == mask


# ---------------------------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("fmt", ["msgpack", "arrow", "arrows", "parquet", None])
@pytest.mark.parametrize("data", [[1, 2, 3], 12, None, {"a": 1}])
def test_only_bytes_like_input_is_decoded(fmt: str | None, data: Any) -> None:
    assert _code(lambda: sampling_mask.decode(data, format=fmt)) == "E_ENCODING"


@pytest.mark.parametrize("text", ["AAAAAB==", "AAAAAAB=", "AAAAAA9="])
def test_non_canonical_base64_padding_bits_are_refused(text: str) -> None:
    nbytes = 4 if text.endswith("==") else 5
    shape = [1, 1] if nbytes == 4 else None
    if shape is None:  # five bytes: not a dense int32 shape; check the helper directly
        from sampling_mask.codecs.buffers import decode_base64

        assert _code(lambda: decode_base64(text, 5, sampling_mask.DEFAULT_LIMITS, field="data")) == "E_ENCODING"
        return
    env = json.dumps({"data": text, "shape": shape, "dtype": "int32"}).encode()
    assert _code(lambda: sampling_mask.decode(env, format="base64")) == "E_ENCODING"
    good = json.dumps({"data": "AAAAAA==", "shape": shape, "dtype": "int32"}).encode()
    assert sampling_mask.decode(good, format="base64").to_rows() == [[0]]


def test_msgpack_encoder_refuses_a_bin_over_4_gib_naming_arrow() -> None:
    """Checked from the declared size: a 4 GiB + 1 zero-stride view allocates nothing."""
    from sampling_mask.codecs import msgpack as msgpack_codec

    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=((1 << 32) + 1,), strides=(0,))
    env = {"sampling_mask": 1, "ids": msgpack_codec._Array("int32", [huge.size // 4], memoryview(huge))}
    with pytest.raises(SamplingMaskError) as info:
        msgpack_codec._frames(env)
    assert info.value.code.value == "E_LIMIT" and "arrows" in info.value.message and info.value.field == "ids"


# ---------------------------------------------------------------------------------------------- streams
def _stream(masks: list[SamplingMask]) -> bytes:
    import pyarrow as pa

    from sampling_mask.codecs import arrow

    sink = pa.BufferOutputStream()
    with arrow.Writer(sink, "arrows") as writer:
        for mask in masks:
            writer.write(mask)
    return bytes(sink.getvalue().to_pybytes())


def test_stream_cut_at_a_batch_boundary_is_not_complete(tmp_path: Any) -> None:
    pytest.importorskip("pyarrow")
    batches = [SamplingMask.from_rows([[1, 2], [3]]), SamplingMask.from_rows([[4]])]
    data = _stream(batches)
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    cut = data[:-8]  # exactly at the end of the last batch: no end-of-stream marker
    got: list[SamplingMask] = []
    with pytest.raises(SamplingMaskError) as info:
        got.extend(sampling_mask.codecs.iter_masks(cut, format="arrows"))
    assert got == batches
    assert info.value.code.value == "E_ENCODING" and info.value.value == 2
    assert "end-of-stream" in info.value.message and "after 2 complete record batches" in str(info.value)
    assert _code(lambda: sampling_mask.decode(cut, format="arrows")) == "E_ENCODING"
    assert sampling_mask.decode(data, format="arrows") == sampling_mask.concat(batches)
    path = tmp_path / "cut.arrows"
    path.write_bytes(cut)
    from sampling_mask.cli import main

    assert main(["validate", str(path)]) == 1


def test_pre_0_15_end_marker_counts_as_complete() -> None:
    pytest.importorskip("pyarrow")
    from sampling_mask.codecs import ipc_bounds

    data = _stream([SamplingMask.from_rows([[1]])])
    assert ipc_bounds.batch_costs(data, "arrows").complete
    assert not ipc_bounds.batch_costs(data[:-8], "arrows").complete
    assert not ipc_bounds.batch_costs(data[:-4], "arrows").complete  # a continuation without its length


# ---------------------------------------------------------------------------------------------- buffers
@pytest.mark.parametrize("fmt", ["msgpack", "arrow", "arrows"])
def test_a_writable_input_buffer_cannot_change_a_decoded_mask(fmt: str) -> None:
    if fmt != "msgpack":
        pytest.importorskip("pyarrow")
    mask = SamplingMask.from_rows([[1000001, 1000002], [1000003]])
    data = sampling_mask.encode(mask, fmt)
    buf = bytearray(data)
    decoded = sampling_mask.decode(buf, format=fmt)
    at = bytes(buf).find(struct.pack("<3i", 1000001, 1000002, 1000003))
    assert at > 0
    buf[at : at + 4] = struct.pack("<i", 7)
    assert decoded == mask and not decoded.ids.flags.writeable
    with pytest.raises(ValueError):
        decoded.ids[0] = 7
    # bytes are immutable: zero-copy views; copy=True: the mask owns its arrays
    view = np.frombuffer(data, np.uint8)
    assert np.shares_memory(sampling_mask.decode(data, format=fmt).ids, view)
    assert not np.shares_memory(sampling_mask.decode(data, format=fmt, copy=True).ids, view)
