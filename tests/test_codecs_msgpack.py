"""The msgpack envelope: exact bytes, zero-copy decode, layouts, strict checks, the bounded reader,
and the envelope's own writer (``codecs/_msgpack_writer.py``).

The writer needs no msgpack package; msgpack-python is the reference it is compared with: every value
and every envelope shape the codec writes has msgpack-python's bytes (``msgpack.packb(msgpack.unpackb(
data), use_bin_type=True)`` repacks an envelope), the conformance vectors' payloads (packed by
msgpack-python) are rewritten identically, and the codec works in a fresh interpreter where ``import
msgpack`` is refused.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

msgpack = pytest.importorskip("msgpack")  # the reference the writer is compared with

from mask_examples import sample_mask  # noqa: E402

import sampling_mask as sm  # noqa: E402
from sampling_mask import DEFAULT_LIMITS, ErrorCode, SamplingMask, SamplingMaskError, codecs  # noqa: E402
from sampling_mask.codecs import _msgpack_reader, _msgpack_writer  # noqa: E402
from sampling_mask.codecs import msgpack as envelope  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: The worked example of spec/v1/SPEC.md (sections 10 and 14): the annotated dump there is these bytes.
SPEC_EXAMPLE_HEX = (
    "8bad73616d706c696e675f6d61736b01a66c61796f7574a6726167676564aa766f6361625f73697a650aa869645f6f726465"
    "72ab756e737065636966696564a86e756d5f726f777303a36e6e7a03a369647383a56474797065a5696e743332a573686170"
    "659103a464617461c40c050000000100000007000000a76f66667365747383a56474797065a5696e743634a5736861706591"
    "04a464617461c4200000000000000000020000000000000002000000000000000300000000000000aa63755f7365716c656e"
    "7383a56474797065a5696e743634a573686170659103a464617461c418000000000000000002000000000000000300000000"
    "000000b173616d706c65645f746f6b656e5f69647383a56474797065a5696e743332a573686170659103a464617461c40c05"
    "000000ffffffff07000000a86d6574616461746181a5746f705f6b02"
)


def spec_example() -> SamplingMask:
    return SamplingMask.from_rows(
        [[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3], sampled_token_ids=[5, -1, 7], metadata={"top_k": 2}
    )


def envelope_dict(mask: SamplingMask, **opts) -> dict:
    return msgpack.unpackb(codecs.encode(mask, "msgpack", **opts), raw=False)


def pack(env: dict) -> bytes:
    return msgpack.packb(env, use_bin_type=True)


def error_code(data, **kwargs) -> ErrorCode:
    with pytest.raises(SamplingMaskError) as err:
        envelope.decode(data, **kwargs)
    return err.value.code


def test_spec_example_bytes_are_exact() -> None:
    data = codecs.encode(spec_example(), "msgpack", offsets_dtype="int64")
    assert data.hex() == SPEC_EXAMPLE_HEX
    assert codecs.decode(bytes.fromhex(SPEC_EXAMPLE_HEX)) == spec_example()


def test_envelope_structure() -> None:
    env = envelope_dict(sample_mask(), offsets_dtype="int64")
    assert list(env)[:6] == ["sampling_mask", "layout", "vocab_size", "id_order", "num_rows", "nnz"]
    assert env["sampling_mask"] == 1 and env["layout"] == "ragged" and env["vocab_size"] == 10
    assert env["ids"]["dtype"] == "int32" and env["ids"]["shape"] == [6]
    assert np.frombuffer(env["ids"]["data"], "<i4").tolist() == [7, 3, 5, 1, 2, 9]
    assert np.frombuffer(env["offsets"]["data"], "<i8").tolist() == [0, 2, 2, 3, 6]
    assert np.frombuffer(env["cu_seqlens"]["data"], "<i8").tolist() == [0, 2, 2, 4]
    assert env["support_logprobs"]["dtype"] == "float32"
    assert env["metadata"] == {"top_k": 3, "top_p": 0.95, "producer": "test"}
    one_segment = envelope_dict(SamplingMask.from_rows([[1]]))
    assert "cu_seqlens" not in one_segment and "metadata" not in one_segment and one_segment["vocab_size"] is None


def test_decode_is_zero_copy() -> None:
    data = codecs.encode(sample_mask(), "msgpack", offsets_dtype="int64")
    mask = codecs.decode(data)
    whole = np.frombuffer(data, np.uint8)
    for arr in (mask.ids, mask.offsets, mask.cu_seqlens, *mask.companions.values()):
        assert np.shares_memory(arr, whole)
        assert not arr.flags.writeable
    trusted = envelope.decode(bytearray(data), validate=False)
    assert trusted == mask


def test_default_ragged_wire_writes_int32_offsets_valid_under_spec_1_0() -> None:
    mask = sample_mask()
    env = envelope_dict(mask)
    assert "counts" not in env and env["offsets"]["dtype"] == "int32"
    assert np.frombuffer(env["offsets"]["data"], "<i4").tolist() == [0, 2, 2, 3, 6]
    assert codecs.decode(pack(env)) == mask
    with pytest.raises(SamplingMaskError) as info:
        codecs.encode(mask, "msgpack", counts=True, offsets_dtype="int64")
    assert info.value.code is ErrorCode.E_SCHEMA


def test_counts_option_writes_the_narrowest_counts() -> None:
    mask = sample_mask()
    env = envelope_dict(mask, counts=True)
    assert "offsets" not in env and env["counts"]["dtype"] == "uint8"
    assert np.frombuffer(env["counts"]["data"], np.uint8).tolist() == [2, 0, 1, 3]
    assert np.frombuffer(env["cu_seqlens"]["data"], "<i4").tolist() == [0, 2, 2, 4]
    assert codecs.decode(pack(env)) == mask
    wide = SamplingMask.from_rows([list(range(300)), [7]], vocab_size=400)
    env = envelope_dict(wide, counts=True)
    assert env["counts"]["dtype"] == "uint16" and len(env["counts"]["data"]) == 4
    assert codecs.decode(pack(env)) == wide
    whole = np.frombuffer(codecs.encode(wide, "msgpack", counts=True), np.uint8)
    assert np.shares_memory(codecs.decode(whole).ids, whole)  # ids are still read in place
    # Old payloads (offsets) still decode; offsets and counts together are refused.
    both = envelope_dict(mask, offsets_dtype="int64")
    both["counts"] = env["counts"]
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(pack(both))
    assert (info.value.code, info.value.field) == (ErrorCode.E_SCHEMA, "counts")
    env = envelope_dict(mask, counts=True)
    env["counts"]["data"] = np.array([2, 0, 1, 2], np.uint8).tobytes()  # sums to 5, not 6
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(pack(env))
    assert info.value.code is ErrorCode.E_OFFSETS
    env["counts"] = {"dtype": "int32", "shape": [4], "data": np.array([2, 0, -1, 5], "<i4").tobytes()}
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(pack(env))
    assert (info.value.code, info.value.row) == (ErrorCode.E_OFFSETS, 2)
    env["counts"] = {"dtype": "int64", "shape": [4], "data": np.array([2, 0, 1, 3], "<i8").tobytes()}
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(pack(env))
    assert info.value.code is ErrorCode.E_DTYPE


@pytest.mark.parametrize("opts", [{"layout": "dense"}, {"layout": "compact"}, {"offsets_dtype": "int32"}])
def test_layouts(opts: dict) -> None:
    if opts.get("layout") == "compact":
        pytest.importorskip("sampling_mask.codecs.compact")
    mask = sample_mask()
    env = envelope_dict(mask, **opts)
    assert env["layout"] == opts.get("layout", "ragged")
    if opts.get("layout") == "dense":
        assert env["dense"]["shape"] == [4, 3]
        assert np.frombuffer(env["dense"]["data"], "<i4").reshape(4, 3)[1].tolist() == [-1, -1, -1]
    if opts.get("layout") == "compact":
        assert isinstance(env["compact"], bytes) and env["num_rows"] == 4 and env["nnz"] == 6
        assert env["id_order"] == "ascending"
    if "offsets_dtype" in opts:
        assert env["offsets"]["dtype"] == "int32" and len(env["offsets"]["data"]) == 20
    assert codecs.decode(pack(env)) == mask


def test_unknown_keys_are_ignored() -> None:
    env = envelope_dict(sample_mask())
    env["future_field"] = {"nested": [1, 2, {"x": b"\x00"}]}
    env["ids"]["byte_order"] = "little"
    assert codecs.decode(pack(env)) == sample_mask()


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"sampling_mask": 2}, ErrorCode.E_VERSION),
        ({"sampling_mask": "1"}, ErrorCode.E_SCHEMA),
        ({"sampling_mask": True}, ErrorCode.E_SCHEMA),
        ({"layout": "bitmask"}, ErrorCode.E_SCHEMA),
        ({"id_order": "random"}, ErrorCode.E_SCHEMA),
        ({"vocab_size": "10"}, ErrorCode.E_SCHEMA),
        ({"vocab_size": 4}, ErrorCode.E_RANGE),
        ({"num_rows": 5}, ErrorCode.E_SHAPE),
        ({"nnz": 1 << 40}, ErrorCode.E_LIMIT),
        ({"ids": None}, ErrorCode.E_SCHEMA),
        ({"ids": [1, 2]}, ErrorCode.E_SCHEMA),
        ({"ids": {"dtype": "float32", "shape": [6], "data": bytes(24)}}, ErrorCode.E_DTYPE),
        ({"ids": {"dtype": "int64", "shape": [6], "data": bytes(48)}}, ErrorCode.E_DTYPE),
        ({"ids": {"dtype": "int32", "shape": [6], "data": bytes(20)}}, ErrorCode.E_BYTES),
        ({"ids": {"dtype": "int32", "shape": [3, 2], "data": bytes(24)}}, ErrorCode.E_SHAPE),
        ({"ids": {"dtype": "int32", "shape": [-6], "data": bytes(24)}}, ErrorCode.E_SHAPE),
        ({"ids": {"dtype": "int32", "shape": [6], "data": "text"}}, ErrorCode.E_SCHEMA),
        ({"ids": {"dtype": "int32", "shape": [1 << 62], "data": bytes(24)}}, ErrorCode.E_LIMIT),
        (
            {"offsets": {"dtype": "int64", "shape": [5], "data": np.array([0, 3, 2, 3, 6], "<i8").tobytes()}},
            ErrorCode.E_OFFSETS,
        ),
        (
            {"cu_seqlens": {"dtype": "int64", "shape": [3], "data": np.array([0, 4, 3], "<i8").tobytes()}},
            ErrorCode.E_SEGMENTS,
        ),
        ({"sampled_token_ids": {"dtype": "int32", "shape": [3], "data": bytes(12)}}, ErrorCode.E_SHAPE),
        ({"temperature": {"dtype": "float32", "shape": [4], "data": np.zeros(4, "<f4").tobytes()}}, ErrorCode.E_RANGE),
        ({"metadata": [1]}, ErrorCode.E_SCHEMA),
        ({"metadata": {"k": [1]}}, ErrorCode.E_SCHEMA),
        ({"metadata": {"k": b"\x00"}}, ErrorCode.E_SCHEMA),
        ({"id_order": "ascending"}, ErrorCode.E_SCHEMA),  # rows 0 is [7, 3]
    ],
)
def test_bad_fields(change: dict, code: ErrorCode) -> None:
    env = envelope_dict(sample_mask(), offsets_dtype="int64")
    env.update(change)
    assert error_code(pack(env)) == code


def test_missing_version_and_non_map() -> None:
    env = envelope_dict(sample_mask())
    del env["sampling_mask"]
    assert error_code(pack(env)) == ErrorCode.E_SCHEMA
    assert error_code(pack([1, 2])) == ErrorCode.E_SCHEMA


def test_compact_layout_needs_counts() -> None:
    pytest.importorskip("sampling_mask.codecs.compact")
    env = envelope_dict(sample_mask(), layout="compact")
    del env["nnz"]
    assert error_code(pack(env)) == ErrorCode.E_SCHEMA
    env = envelope_dict(sample_mask(), layout="compact")
    env["num_rows"] = 1 << 40
    assert error_code(pack(env)) == ErrorCode.E_LIMIT


def test_compact_layout_checks_ids_against_vocab_size() -> None:
    # Compact rows are ascending by construction, so the decoder skips the duplicate scan; the
    # range check must still name the row of an id >= vocab_size.
    mask = SamplingMask.from_rows([[1, 2], [], [3, 9]], vocab_size=10)
    decoded = codecs.decode(codecs.encode(mask, "msgpack", layout="compact"))
    assert decoded == mask and decoded.is_canonical
    env = envelope_dict(mask, layout="compact")
    env["vocab_size"] = 9
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(pack(env))
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_RANGE, 2, 9)


def test_forged_sizes_allocate_nothing() -> None:
    env = envelope_dict(sample_mask(), layout="dense")
    env["dense"] = {"dtype": "int32", "shape": [1 << 20, 1 << 10], "data": bytes(16)}  # 4 GiB declared
    tracemalloc.start()
    try:
        assert error_code(pack(env)) == ErrorCode.E_BYTES
        limited = DEFAULT_LIMITS.replace(max_bytes=1 << 20)
        assert error_code(pack(env), limits=limited) == ErrorCode.E_LIMIT
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    forged_bin = b"\x81\xadsampling_mask\xc6\xff\xff\xff\xf0"  # a bin claiming 4 GiB in a 20-byte payload
    assert error_code(forged_bin) == ErrorCode.E_ENCODING
    forged_array = b"\x81\xadsampling_mask\xdd\xff\xff\xff\xff"  # an array claiming 2**32 - 1 entries
    assert error_code(forged_array) == ErrorCode.E_ENCODING


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.E_ENCODING),
        (b"\xc1", ErrorCode.E_ENCODING),
        (b"\x81\xa1a\xd4\x01\x00", ErrorCode.E_ENCODING),  # ext type
        (b"\x81\xa1a\xc7\x00\x05", ErrorCode.E_ENCODING),  # ext 8
        (b"\x81\x01\x02", ErrorCode.E_SCHEMA),  # integer key
        (b"\x82\xa1a\x01\xa1a\x02", ErrorCode.E_SCHEMA),  # duplicate key
        (b"\x81\xa1a\xa2\xff\xfe", ErrorCode.E_ENCODING),  # invalid UTF-8
        (b"\x80\x00", ErrorCode.E_ENCODING),  # trailing byte
        (b"\x91" * 40 + b"\x00", ErrorCode.E_LIMIT),  # nesting deeper than max_json_depth
        (b"\x81\x91\x00\x00", ErrorCode.E_SCHEMA),  # array as key
    ],
)
def test_reader_rejects(data: bytes, code: ErrorCode) -> None:
    assert error_code(data) == code


def test_reader_object_budget() -> None:
    data = msgpack.packb(list(range(100)))
    with pytest.raises(SamplingMaskError) as err:
        _msgpack_reader.read(data, max_depth=4, max_objects=50)
    assert err.value.code == ErrorCode.E_LIMIT
    assert _msgpack_reader.read(data, max_depth=4) == list(range(100))


def _plain(value):
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 64) - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.binary(max_size=300)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=8), inner, max_size=8),
    max_leaves=60,
)


@given(value=values)
def test_reader_matches_msgpack(value) -> None:
    data = msgpack.packb(value, use_bin_type=True)
    assert _plain(_msgpack_reader.read(data, max_depth=64)) == msgpack.unpackb(data, raw=False, strict_map_key=True)


@given(data=st.binary(max_size=64))
def test_reader_on_arbitrary_bytes_agrees_with_msgpack_or_rejects(data: bytes) -> None:
    try:
        ours = _plain(_msgpack_reader.read(data, max_depth=64))
    except SamplingMaskError:
        return  # a rejection is always allowed (ext types, duplicate keys are stricter than msgpack)
    assert ours == msgpack.unpackb(data, raw=False, strict_map_key=True, timestamp=0)


def test_float32_scalars_and_big_ints() -> None:
    data = msgpack.packb({"f": 1.5, "u": (1 << 64) - 1, "n": -(1 << 63)}, use_single_float=True)
    assert _msgpack_reader.read(data, max_depth=2) == {"f": 1.5, "u": (1 << 64) - 1, "n": -(1 << 63)}


# ---------------------------------------------------------------------------- frames
@pytest.mark.parametrize(
    "opts",
    [
        {"offsets_dtype": "int64"},
        {"offsets_dtype": None},
        {"offsets_dtype": "int32"},
        {"counts": True},
        {"layout": "compact"},
    ],
)
def test_frames_concatenate_to_the_envelope_and_decode_back(opts: dict) -> None:
    mask = sample_mask()
    frames = codecs.encode_frames(mask, **opts)
    expected = opts if "counts" in opts else {"offsets_dtype": "int64", **opts}
    assert b"".join(frames) == codecs.encode(mask, "msgpack", **expected)
    assert codecs.decode(frames) == mask
    assert codecs.decode(tuple(frames), format="msgpack", validate=False) == mask


def test_frames_share_memory_with_the_mask_both_ways() -> None:
    mask = spec_example()
    frames = codecs.encode_frames(mask)
    views = [f for f in frames if isinstance(f, memoryview)]
    assert len(views) == 4  # ids, offsets, cu_seqlens, sampled ids: no copy on the way out
    assert np.shares_memory(np.frombuffer(views[0], np.uint8), mask.ids)
    back = codecs.decode(frames)
    assert np.shares_memory(back.ids, np.frombuffer(views[0], np.uint8))  # nor on the way in


def test_frames_split_anywhere_still_decode_with_the_same_checks() -> None:
    data = codecs.encode(spec_example(), "msgpack")
    for size in (1, 2, 7, 50):
        parts = [data[i : i + size] for i in range(0, len(data), size)]
        assert codecs.decode(parts) == spec_example()
        with pytest.raises(SamplingMaskError) as info:
            codecs.decode(parts[:-1])
        assert info.value.code is ErrorCode.E_ENCODING
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode([data, b"\x00"])  # a trailing byte in an extra frame
    assert info.value.code is ErrorCode.E_ENCODING
    with pytest.raises(SamplingMaskError):
        codecs.decode([data, 5])  # not bytes-like
    with pytest.raises(SamplingMaskError):
        codecs.decode([data], format="arrow")


def test_encode_into_writes_the_envelope_or_nothing() -> None:
    mask = spec_example()
    data = codecs.encode(mask, "msgpack")
    buffer = np.full(len(data) + 5, 0xAA, np.uint8)
    assert codecs.encode_into(mask, buffer) == len(data)
    assert bytes(buffer[: len(data)]) == data and buffer[-1] == 0xAA
    small = bytearray(len(data) - 1)
    with pytest.raises(SamplingMaskError) as info:
        codecs.encode_into(mask, small)
    assert info.value.code is ErrorCode.E_LIMIT and small == bytearray(len(data) - 1)
    with pytest.raises(SamplingMaskError):
        codecs.encode_into(mask, bytes(len(data)))  # read-only


def _large_mask(num_rows: int = 3000) -> SamplingMask:
    rng = np.random.default_rng(7)
    rows = [np.unique(rng.integers(0, 500, size=int(rng.integers(0, 6)))).tolist() for _ in range(num_rows)]
    sampled = [row[0] if row else -1 for row in rows]
    return SamplingMask.from_rows(
        rows,
        vocab_size=500,
        cu_seqlens=[0, num_rows // 3, num_rows],
        sampled_token_ids=sampled,
        support_logprobs=-rng.random(sum(map(len, rows)), dtype=np.float32),
    )


@pytest.mark.parametrize("offsets_dtype", [None, "int32", "int64", "counts"])
def test_arrays_of_4_kib_and_more_are_padded_to_64_bytes(offsets_dtype) -> None:
    mask = _large_mask()
    opts = {"counts": True} if offsets_dtype == "counts" else {"offsets_dtype": offsets_dtype}
    data = codecs.encode(mask, "msgpack", **opts)
    assert b"".join(bytes(f) for f in codecs.encode_frames(mask, **opts)) == data
    env = msgpack.unpackb(data, raw=False)
    base = np.frombuffer(data, np.uint8).ctypes.data
    decoded = envelope.decode(data)
    assert decoded == mask
    views = {"ids": decoded.ids, "support_logprobs": decoded.companions["support_logprobs"]}
    views["sampled_token_ids"] = decoded.companions["sampled_token_ids"]
    if offsets_dtype != "counts":
        views["offsets"] = decoded.stored_offsets
    padded = set()
    for key, value in env.items():
        if isinstance(value, dict) and "data" in value:
            if len(value["data"]) >= envelope.PAD_FROM:
                assert list(value)[-2:] == ["pad", "data"] and value["pad"] == bytes(len(value["pad"]))
                assert len(value["pad"]) < envelope.ALIGN
                padded.add(key)
            else:
                assert "pad" not in value
    assert padded >= {"ids", "support_logprobs"}
    for key in padded & set(views):
        assert (views[key].ctypes.data - base) % envelope.ALIGN == 0, key
        assert views[key].flags.aligned


def test_readers_ignore_any_pad() -> None:
    mask = _large_mask(50)
    env = msgpack.unpackb(codecs.encode(mask, "msgpack"), raw=False)
    for value in env.values():
        if isinstance(value, dict):
            value["pad"] = b"not zero"
    assert envelope.decode(pack(env)) == mask


def test_counts_wider_than_the_limit_name_the_widest_row() -> None:
    # Offsets summed from counts need no scan: the widest row is the largest count.
    rows = [[1], [0, 1, 2, 3], [5], [0, 1, 2, 3, 4, 5], []]
    data = codecs.encode(SamplingMask.from_rows(rows), "msgpack", counts=True)
    assert "counts" in msgpack.unpackb(data, raw=False)
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(data, limits=DEFAULT_LIMITS.replace(max_width=3))
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_LIMIT, 3, 6)
    assert codecs.decode(data, limits=DEFAULT_LIMITS.replace(max_width=6)).to_rows() == rows


def test_msgpack_encoder_refuses_a_bin_over_4_gib_naming_arrow() -> None:
    """Checked from the declared size: a 4 GiB + 1 zero-stride view allocates nothing."""
    from sampling_mask.codecs import msgpack as msgpack_codec

    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape=((1 << 32) + 1,), strides=(0,))
    env = {"sampling_mask": 1, "ids": msgpack_codec._Array("int32", [huge.size // 4], memoryview(huge))}
    with pytest.raises(SamplingMaskError) as info:
        msgpack_codec._frames(env)
    assert info.value.code.value == "E_LIMIT" and "arrows" in info.value.message and info.value.field == "ids"


def test_msgpack_file_that_is_no_envelope_says_so(tmp_path: Path) -> None:
    path = tmp_path / "hello.msgpack"
    path.write_bytes(b"hello")
    with pytest.raises(SamplingMaskError) as info:
        sm.load(path)
    assert info.value.code is ErrorCode.E_ENCODING
    assert "not a msgpack sampling-mask envelope" in info.value.message
    assert "trailing" not in info.value.message


# ---------------------------------------------------------------------------- the envelope's own writer
#: Integers where msgpack-python changes the width of its encoding, and one past each.
INT_EDGES = sorted(
    {e + d for e in (0, 127, 255, 65535, 2**32 - 1, 2**63 - 1, 2**64 - 1) for d in (-1, 0, 1) if 0 <= e + d < 2**64}
    | {e + d for e in (-32, -128, -(2**15), -(2**31), -(2**63)) for d in (-1, 0, 1) if e + d >= -(2**63)}
)
#: Lengths where a str / bin / array / map header changes width.
LENGTH_EDGES = (0, 15, 16, 31, 32, 255, 256, 65535, 65536)
#: In a fresh interpreter: ``import msgpack`` fails, as where the package is not installed.
BLOCK_MSGPACK = textwrap.dedent(
    """
    import sys

    class RefuseMsgpack:
        def find_spec(self, name, path=None, target=None):
            if name == "msgpack" or name.startswith("msgpack."):
                raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
            return None

    sys.meta_path.insert(0, RefuseMsgpack())
    for name in [m for m in sys.modules if m == "msgpack" or m.startswith("msgpack.")]:
        del sys.modules[name]
    try:
        import msgpack
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("msgpack imported despite the block")
    """
)


def reference(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def repacked(data: bytes) -> bytes:
    """msgpack-python's bytes for the same envelope: parsed (key order kept) and packed again."""
    return reference(msgpack.unpackb(data, raw=False))


# ---------------------------------------------------------------------------- single values
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(INT_EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(max_size=300),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=20), st.tuples(inner, inner), st.dictionaries(st.text(max_size=8), inner, max_size=20)
    ),
    max_leaves=40,
)


@given(VALUES)
def test_every_value_is_written_as_msgpack_python_writes_it(value: Any) -> None:
    assert _msgpack_writer.pack(value) == reference(value)


@pytest.mark.parametrize("value", INT_EDGES, ids=str)
def test_integer_width_edges(value: int) -> None:
    assert _msgpack_writer.pack(value) == reference(value)
    assert msgpack.unpackb(_msgpack_writer.pack(value)) == value


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, 1e-310, 3.4028235e38, 1e300, math.inf, -math.inf, math.nan])
def test_every_float_is_float64(value: float) -> None:
    data = _msgpack_writer.pack(value)
    assert data == reference(value) and data[0] == 0xCB and len(data) == 9


@pytest.mark.parametrize("size", LENGTH_EDGES)
def test_length_header_edges(size: int) -> None:
    for value in ("x" * size, "é" * (size // 2), b"\x00" * size, list(range(size)), {str(i): i for i in range(size)}):
        assert _msgpack_writer.pack(value) == reference(value)
    assert _msgpack_writer.map_header(size) + b"".join(
        reference(str(i)) + reference(i) for i in range(size)
    ) == reference({str(i): i for i in range(size)})
    assert _msgpack_writer.bin_header(size) + b"\x00" * size == reference(b"\x00" * size)


def test_subclasses_are_written_as_their_base_type() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 300

    class Name(str):
        pass

    for value in (
        Level.HIGH,
        Name("top_k"),
        np.float64(0.25),
        {Name("k"): Level.HIGH},
        memoryview(b"ab"),
        bytearray(b"c"),
    ):
        assert _msgpack_writer.pack(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, 10**30, "\ud800", "a\udfffb", object(), {1, 2}, np.int64(3), [1, object()], {"k": {"x": 1j}}],
    ids=repr,
)
def test_what_msgpack_python_refuses_is_e_range(value: Any) -> None:
    with pytest.raises((OverflowError, TypeError, ValueError)):
        reference(value)  # msgpack-python refuses it too
    with pytest.raises(SamplingMaskError) as info:
        _msgpack_writer.pack(value, field="metadata")
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "metadata"


def test_nesting_depth_matches_msgpack_python_and_uses_no_recursion() -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for level in range(depth):
            value = [value] if level % 2 else {"k": value}
        return value

    deepest = nested(_msgpack_writer.MAX_DEPTH)
    assert _msgpack_writer.pack(deepest) == reference(deepest)
    for depth in (_msgpack_writer.MAX_DEPTH + 1, 50_000):  # far past Python's recursion limit
        with pytest.raises(ValueError):
            reference(nested(depth))
        with pytest.raises(SamplingMaskError) as info:
            _msgpack_writer.pack(nested(depth))
        assert info.value.code is ErrorCode.E_RANGE


# ---------------------------------------------------------------------------- whole envelopes
METADATA_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(INT_EDGES),
    st.floats(),
    st.text(st.characters(blacklist_categories=("Cs",))),  # lone surrogates: refused by the model
)
#: Keys with no type the model prescribes (``top_k`` must be an int, ...).
METADATA = st.dictionaries(st.text(max_size=40).map(lambda k: f"x-{k}"), METADATA_VALUES, max_size=20)
ROWS = st.lists(st.lists(st.integers(0, 40), max_size=6, unique=True), max_size=12)


@st.composite
def masks(draw: st.DrawFn) -> SamplingMask:
    rows = draw(ROWS)
    n = len(rows)
    fields: dict[str, Any] = {"vocab_size": draw(st.sampled_from([None, 41, 70_000, 16_777_216]))}
    if n and draw(st.booleans()):
        cut = draw(st.integers(0, n))
        fields["cu_seqlens"] = [0, cut, n]
    floats = st.floats(-100, 0, width=32)
    if draw(st.booleans()):
        fields["sampled_token_ids"] = [draw(st.sampled_from(r)) if r else -1 for r in rows]
    if draw(st.booleans()):
        fields["sampled_logprobs"] = np.array(draw(st.lists(floats, min_size=n, max_size=n)), np.float32)
    if draw(st.booleans()):
        fields["temperature"] = np.array(
            draw(st.lists(st.floats(0.125, 2, width=32), min_size=n, max_size=n)), np.float32
        )
    if draw(st.booleans()):
        nnz = sum(map(len, rows))
        fields["support_logprobs"] = np.array(draw(st.lists(floats, min_size=nnz, max_size=nnz)), np.float32)
    return SamplingMask.from_rows(rows, metadata=draw(METADATA), **fields)


OPTIONS = st.sampled_from(
    [
        {},
        {"offsets_dtype": "int64"},
        {"offsets_dtype": "int32"},
        {"counts": True},
        {"layout": "dense"},
        {"layout": "dense", "width": 8},
        {"layout": "compact"},
    ]
)


@given(masks(), OPTIONS)
def test_every_envelope_is_what_msgpack_python_writes(mask: SamplingMask, options: dict[str, Any]) -> None:
    data = envelope.encode(mask, **options)
    assert data == repacked(data)
    frames = envelope.encode_frames(mask, **{"offsets_dtype": None, **options})
    assert b"".join(bytes(f) for f in frames) == data
    buffer = bytearray(len(data) + 7)
    assert envelope.encode_into(mask, buffer, **options) == len(data) and bytes(buffer[: len(data)]) == data
    assert sm.decode(data) == mask


def test_large_arrays_padding_and_every_bin_width() -> None:
    """Arrays of bin 8, 16 and 32 (over 64 KiB), padded from 4 KiB, and metadata at the edges."""
    rng = np.random.default_rng(37)
    lengths = rng.integers(0, 9, 30_000)
    ids = np.concatenate([rng.choice(151_936, k, replace=False) for k in lengths]).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    metadata = {"x-max": 2**64 - 1, "x-min": -(2**63), "x-nan": math.nan, "x-text": "é" * 300, "x-none": None}
    big = SamplingMask(ids, offsets, cu_seqlens=[0, 10, 3000, 30_000], vocab_size=151_936, metadata=metadata)
    masks = [big, big.segment(0), big.segment(1), SamplingMask.from_rows([[]] * 2000)]
    for mask in masks:
        for options in ({}, {"offsets_dtype": "int64"}, {"counts": True}, {"layout": "compact"}):
            data = envelope.encode(mask, **options)
            assert data == repacked(data)
    assert {_msgpack_writer.bin_header(m.ids.nbytes)[0] for m in masks[:3]} == {0xC4, 0xC5, 0xC6}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (2**64 - 1, True),
        (-(2**63), True),
        (2**64, False),
        (-(2**63) - 1, False),
        (True, True),
        (None, True),
        (math.inf, True),
        ("🙂", True),
    ],
    ids=repr,
)
def test_metadata_values_at_the_edges(value: Any, ok: bool) -> None:
    """What msgpack-python wrote is written the same; what it refused is ``E_RANGE`` on metadata."""
    mask = SamplingMask.from_rows([[1]], metadata={"x-value": value})
    if ok:
        data = envelope.encode(mask)
        assert data == repacked(data) and sm.decode(data) == mask
        return
    with pytest.raises(SamplingMaskError) as info:
        envelope.encode(mask)
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "metadata"
    with pytest.raises(OverflowError):
        reference({"x-value": value})


def test_the_model_refuses_what_no_writer_sees() -> None:
    """Surrogates, nested maps and lists never reach the writer: the model refuses them first."""
    for metadata, code in (({"k": "\ud800"}, ErrorCode.E_ENCODING), ({"k": {"a": 1}}, ErrorCode.E_SCHEMA)):
        with pytest.raises(SamplingMaskError) as info:
            SamplingMask.from_rows([[1]], metadata=metadata)
        assert info.value.code is code
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_rows([[1]], metadata={"k": [1]})
    assert info.value.code is ErrorCode.E_SCHEMA


# ---------------------------------------------------------------------------- conformance vectors
def _vector_payloads() -> list[tuple[str, bytes]]:
    found = []
    for path in sorted((ROOT / "conformance" / "v1").rglob("*.json")):
        suite = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(suite, dict) or suite.get("form") != "msgpack":
            continue
        for case in suite["cases"]:
            if isinstance(case.get("input"), dict) and "hex" in case["input"]:
                found.append((case["id"], bytes.fromhex(case["input"]["hex"])))
    return found


VECTORS = _vector_payloads()
#: Payloads that are not one msgpack value, or that msgpack-python parses into something else.
NOT_REPACKABLE = {"msgpack.truncated", "msgpack.not-msgpack", "msgpack.trailing-bytes", "msgpack.invalid-utf8"}
NOT_REPACKABLE |= {"msgpack.ext-type", "msgpack.duplicate-key"}  # an ext value; a map that parses shorter


def test_the_vectors_hold_msgpack_payloads() -> None:
    ids = {case_id for case_id, _ in VECTORS}
    assert len(VECTORS) >= 40 and NOT_REPACKABLE <= ids


REPACKABLE = [(case_id, data) for case_id, data in VECTORS if case_id not in NOT_REPACKABLE]


@pytest.mark.parametrize(("case_id", "data"), REPACKABLE, ids=[case_id for case_id, _ in REPACKABLE])
def test_every_vector_payload_is_rewritten_byte_for_byte(case_id: str, data: bytes) -> None:
    """The vectors were packed by msgpack-python: parsed and written again here, they are unchanged."""
    value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    assert _msgpack_writer.pack(value) == data


def test_valid_vector_envelopes_reencode_identically() -> None:
    """A vector the encoder writes itself (decoded and encoded again with the options it names, it
    parses to the same map) is byte-identical; the others carry keys, dtypes or orders that no
    encoder option writes."""
    matched = []
    for case_id, data in VECTORS:
        try:
            mask = sm.decode(data, format="msgpack")
        except SamplingMaskError:
            continue
        env = msgpack.unpackb(data, raw=False)
        options: dict[str, Any] = {}
        if "offsets" in env and isinstance(env["offsets"], dict):
            options["offsets_dtype"] = env["offsets"]["dtype"]
        if env.get("layout") in envelope.LAYOUTS:
            options["layout"] = env["layout"]
        if env.get("counts") is not None:
            options["counts"] = True
        ours = envelope.encode(mask, **options)
        if msgpack.unpackb(ours, raw=False) == env:
            assert ours == data, case_id
            matched.append(case_id)
    assert len(matched) >= 3, matched


# ---------------------------------------------------------------------------- without msgpack
def _run_blocked(code: str, *, cwd: Path, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter where ``import msgpack`` fails (``-I``: this checkout not on the path)."""
    args = [sys.executable, *(["-I"] if isolated else []), "-c", BLOCK_MSGPACK + code]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


MASK_CODE = """
import numpy as np
rng = np.random.default_rng(5)
lengths = rng.integers(0, 6, 3000)
ids = np.concatenate([rng.choice(1000, k, replace=False) for k in lengths]).astype(np.int32)
offsets = np.concatenate([[0], np.cumsum(lengths)])
sampled = np.where(lengths > 0, ids[np.minimum(offsets[:-1], ids.size - 1)], -1).astype(np.int32)
fields = dict(cu_seqlens=[0, 1000, 3000], vocab_size=1000, sampled_token_ids=sampled,
              temperature=np.full(3000, 0.7, np.float32), metadata={"top_k": 5, "top_p": 0.9, "producer": "t"})
"""


def _expected() -> SamplingMask:
    namespace: dict[str, Any] = {}
    exec(MASK_CODE, namespace)  # the test's own constant: the code the child runs
    return SamplingMask(namespace["ids"], namespace["offsets"], **namespace["fields"])


@pytest.mark.slow
def test_the_package_encodes_msgpack_without_msgpack(tmp_path: Path) -> None:
    code = MASK_CODE + textwrap.dedent(
        """
        import sampling_mask
        from sampling_mask.codecs import msgpack as envelope
        mask = sampling_mask.SamplingMask(ids, offsets, **fields)
        data = sampling_mask.encode(mask, "msgpack")
        assert b"".join(bytes(f) for f in sampling_mask.codecs.encode_frames(mask)) == envelope.encode(
            mask, offsets_dtype="int64")
        buffer = bytearray(len(data))
        assert envelope.encode_into(mask, buffer) == len(data) and bytes(buffer) == data
        assert sampling_mask.decode(data) == mask
        sampling_mask.save(mask, "m.msgpack")
        assert "msgpack" not in sys.modules
        print(data.hex())
        """
    )
    proc = _run_blocked(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = bytes.fromhex(proc.stdout.strip())
    mask = _expected()
    assert data == sm.encode(mask, "msgpack") == repacked(data) == (tmp_path / "m.msgpack").read_bytes()


@pytest.mark.slow
def test_a_vendored_msgpack_copy_encodes_without_msgpack(tmp_path: Path) -> None:
    from sampling_mask.cli import main

    assert main(["-q", "vendor", str(tmp_path / "srv" / "_sm"), "--package", "srv._sm", "--codecs", "msgpack"]) == 0
    manifest = json.loads((tmp_path / "srv" / "_sm" / "VENDORED.json").read_text())
    assert manifest["needs"] == {"core": ["numpy"], "msgpack": ["numpy"]}
    code = MASK_CODE + textwrap.dedent(
        f"""
        sys.path.insert(0, {str(tmp_path)!r})
        from srv._sm import SamplingMask, decode, encode
        from srv._sm.codecs import msgpack as envelope
        mask = SamplingMask(ids, offsets, **fields)
        data = encode(mask, "msgpack")
        assert data == envelope.encode(mask) and decode(data) == mask
        assert "msgpack" not in sys.modules and "sampling_mask" not in sys.modules
        from srv._sm.core.optional import UnavailableError
        print(UnavailableError("pyarrow", what="parquet encoding"))
        print(data.hex())
        """
    )
    proc = _run_blocked(code, cwd=tmp_path, isolated=True)
    assert proc.returncode == 0, proc.stderr
    message, hexdata = proc.stdout.strip().splitlines()
    assert message.endswith("(pip install pyarrow)") and "sampling-mask[" not in message
    data = bytes.fromhex(hexdata)
    mask = _expected()
    assert data == sm.encode(mask, "msgpack") == repacked(data)
    assert sm.decode(data) == mask


def test_msgpack_reader_charges_what_it_builds() -> None:
    data = pack({"sampling_mask": 1, "junk": [{}] * 1000})
    obj, held = _msgpack_reader.read_counted(data, max_depth=16)
    assert len(obj["junk"]) == 1000
    assert held >= 1000 * (_msgpack_reader.MAP_BYTES[0] + _msgpack_reader.LIST_BYTES[1])
    with pytest.raises(SamplingMaskError) as info:
        _msgpack_reader.read(data, max_depth=16, max_bytes=held - 1)
    assert info.value.code is ErrorCode.E_LIMIT


def test_msgpack_nil_offsets_with_counts_read_as_counts() -> None:
    data = pack(
        {
            "sampling_mask": 1,
            "ids": {"dtype": "int32", "shape": [1], "data": b"\x05\x00\x00\x00"},
            "counts": {"dtype": "uint8", "shape": [2], "data": b"\x01\x00"},
            "offsets": None,
        }
    )
    mask = sm.decode(data)
    assert mask.to_rows() == [[5], []]


def test_msgpack_needs_no_msgpack_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """The envelope is written by the codec's own writer and read by its own reader: with ``import
    msgpack`` failing, the registry lists no package for it and encode, frames and decode still work
    (a fresh interpreter that refuses the import: ``test_the_package_encodes_msgpack_without_msgpack``)."""
    from sampling_mask.codecs import registry

    mask = spec_example()
    data = sm.encode(mask, "msgpack")
    monkeypatch.setitem(sys.modules, "msgpack", None)  # import of it now fails
    assert registry.CODECS["msgpack"].packages == ()
    assert sm.encode(mask, "msgpack") == data and sm.decode(data) == mask
    assert b"".join(bytes(f) for f in sm.codecs.encode_frames(mask, offsets_dtype=None)) == data
