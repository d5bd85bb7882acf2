"""The model's offsets: int32 offsets are held as they are. ``SamplingMask.stored_offsets`` keeps the int32
offsets of an Arrow ``list`` column or of int32 wire offsets without a copy, ``offsets`` still reads
int64, derived masks widen before int32 could overflow, and validation gives the codes int64 gives.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from mask_examples import sample_mask

from sampling_mask import SamplingMask, SamplingMaskError, as_sampling_mask, codecs, concat
from sampling_mask.codecs import safetensors
from sampling_mask.core import layouts
from sampling_mask.core.errors import ErrorCode


def _int32(mask: SamplingMask) -> SamplingMask:
    """``mask`` with its offsets held as int32 (validated)."""
    fields = {name: getattr(mask, name) for name in ("cu_seqlens", "vocab_size", "metadata")}
    return SamplingMask(mask.ids, mask.offsets.astype(np.int32), **fields, **mask.companions)


def _source(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


@pytest.mark.parametrize(
    ("fmt", "opts"), [("msgpack", {"offsets_dtype": "int32"}), ("arrows", {}), ("arrow", {"large_lists": False})]
)
def test_trusted_decode_keeps_int32_offsets_in_the_payload(fmt: str, opts: dict[str, object]) -> None:
    mask = sample_mask()
    data = codecs.encode(mask, fmt, **opts)
    trusted = codecs.decode(data, format=fmt, validate=False)
    assert trusted.stored_offsets.dtype == np.int32
    assert np.shares_memory(trusted.stored_offsets, _source(data))  # read in place, not widened
    assert trusted.offsets.dtype == np.int64 and not trusted.offsets.flags.writeable
    assert trusted.offsets is trusted.offsets  # widened once, then cached
    np.testing.assert_array_equal(trusted.offsets, mask.offsets)
    assert trusted.row_lengths.dtype == np.int64
    np.testing.assert_array_equal(trusted.row_lengths, mask.row_lengths)
    validated = codecs.decode(data, format=fmt)
    assert validated.stored_offsets.dtype == np.int32 and validated == mask == trusted


def test_int64_and_large_list_offsets_stay_int64_and_in_place() -> None:
    mask = sample_mask()
    for fmt, opts in (("msgpack", {"offsets_dtype": "int64"}), ("arrows", {"large_lists": True})):
        data = codecs.encode(mask, fmt, **opts)
        decoded = codecs.decode(data, format=fmt, validate=False)
        assert decoded.stored_offsets.dtype == np.int64 and decoded.offsets is decoded.stored_offsets
        assert np.shares_memory(decoded.offsets, _source(data))


def test_constructor_keeps_int32_and_widens_other_widths() -> None:
    offsets = np.array([0, 2, 2, 3], np.int32)
    mask = SamplingMask(np.array([4, 1, 0], np.int32), offsets)
    assert mask.stored_offsets.dtype == np.int32 and np.shares_memory(mask.stored_offsets, offsets)
    for other in (np.array([0, 2, 2, 3], np.uint32), np.array([0, 2, 2, 3], np.int16), [0, 2, 2, 3]):
        assert SamplingMask(np.array([4, 1, 0], np.int32), other).stored_offsets.dtype == np.int64
    big_endian = np.array([0, 2, 2, 3], ">i4")
    assert SamplingMask(np.array([4, 1, 0], np.int32), big_endian).stored_offsets.dtype == np.int64
    assert _int32(mask).to_ragged()[1].dtype == np.int64


@pytest.mark.parametrize("fmt", codecs.FORMATS)
def test_int32_masks_round_trip_through_every_codec(fmt: str) -> None:
    full = _int32(sample_mask())
    rows_only = fmt in ("json-rows", "base64")
    mask = _int32(SamplingMask.from_ragged(full.ids, full.offsets)) if rows_only else full
    assert mask.stored_offsets.dtype == np.int32
    variants = [{}] if fmt != "msgpack" else [{}, {"offsets_dtype": "int32"}, {"offsets_dtype": "int64"}]
    variants += [{"layout": "compact"}] if fmt in ("arrow", "msgpack", "parquet") else []
    for opts in variants:
        for validate in (True, False) if fmt != "json" and not rows_only else (True,):
            decoded = codecs.decode(codecs.encode(mask, fmt, **opts), format=fmt, validate=validate)
            assert decoded == mask, (opts, validate)
    tensors, meta = safetensors.to_tensors(full)
    assert tensors[safetensors.OFFSETS].dtype == np.int64
    assert safetensors.from_tensors(tensors, meta) == full


def test_encoders_write_int32_offsets_without_widening() -> None:
    mask = _int32(sample_mask())
    frames = codecs.encode_frames(mask, offsets_dtype="int32")
    assert any(np.shares_memory(np.frombuffer(f, np.uint8), mask.stored_offsets) for f in frames)
    assert codecs.decode(frames) == mask
    assert codecs.decode(codecs.encode(mask, "arrows")).stored_offsets.dtype == np.int32


def test_slices_segments_and_derived_masks_keep_int32() -> None:
    mask = _int32(sample_mask())
    reference = sample_mask()
    for a, b in ((0, 4), (1, 3), (2, 2), (3, 4)):
        part = mask[a:b]
        assert part.stored_offsets.dtype == np.int32 and part == reference[a:b]
        assert part.stored_offsets[0] == 0
    assert all(mask.segment(i) == reference.segment(i) for i in range(mask.num_segments))
    assert mask.canonical().stored_offsets.dtype == np.int32 and mask.canonical() == reference.canonical()
    assert mask.replace(metadata=None).stored_offsets.dtype == np.int32
    taken = mask.take([2, 0, 2])
    assert taken == reference.take([2, 0, 2]) and taken.offsets.dtype == np.int64
    again = pickle.loads(pickle.dumps(mask, protocol=5))
    assert again == mask and again.stored_offsets.dtype == np.int32
    exported = mask.__sampling_mask__()
    assert exported["offsets"] is mask.stored_offsets
    assert as_sampling_mask(type("Other", (), {"__sampling_mask__": lambda self: exported})()) == mask
    np.testing.assert_array_equal(mask.to_dense(), reference.to_dense())
    np.testing.assert_array_equal(mask.to_bitmask(), reference.to_bitmask())
    assert mask.to_rows() == reference.to_rows() and mask.is_canonical == reference.is_canonical


def test_concat_keeps_int32_while_the_ids_fit_and_widens_past_them(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [_int32(sample_mask()), _int32(sample_mask()[1:4])]
    reference = concat([sample_mask(), sample_mask()[1:4]])
    joined = concat(parts)
    assert joined.stored_offsets.dtype == np.int32 and joined == reference
    mixed = concat([parts[0], sample_mask()[1:4]])
    assert mixed.stored_offsets.dtype == np.int64 and mixed == reference
    # Past the int32 bound (lowered here instead of allocating 2**31 ids) every part is widened.
    monkeypatch.setattr(layouts, "INT32_OFFSETS_MAX", parts[0].nnz + parts[1].nnz - 1)
    widened = concat(parts)
    assert widened.stored_offsets.dtype == np.int64 and widened == reference
    np.testing.assert_array_equal(widened.stored_offsets, reference.offsets)


@pytest.mark.parametrize(
    ("offsets", "nnz", "code", "row"),
    [
        ([0, 2, 1, 3], 3, ErrorCode.E_OFFSETS, 1),  # decreasing
        ([1, 2, 2, 3], 3, ErrorCode.E_OFFSETS, None),  # offsets[0] != 0
        ([0, 1, 2, 2], 3, ErrorCode.E_OFFSETS, None),  # offsets[T] != nnz
        ([0, 2**31 - 1, -2, 0], 0, ErrorCode.E_OFFSETS, 1),  # an int32 difference would wrap to a step
        ([0, 5, -(2**31), 3], 3, ErrorCode.E_OFFSETS, 1),
    ],
)
def test_bad_int32_offsets_fail_as_int64_ones_do(
    offsets: list[int], nnz: int, code: ErrorCode, row: int | None
) -> None:
    ids = np.arange(7, 7 + nnz, dtype=np.int32)
    errors = []
    for dtype in (np.int64, np.int32):
        with pytest.raises(SamplingMaskError) as err:
            SamplingMask(ids, np.array(offsets, dtype), vocab_size=10)
        errors.append((err.value.code, err.value.row))
        # The same offsets on the wire: a valid envelope whose offsets bytes are swapped for them.
        valid = np.minimum(np.arange(len(offsets)), nnz).astype(dtype)
        valid[-1] = nnz
        data = codecs.encode(SamplingMask(ids, valid, vocab_size=10), "msgpack", offsets_dtype=np.dtype(dtype).name)
        assert data.count(valid.tobytes()) == 1
        with pytest.raises(SamplingMaskError) as err:
            codecs.decode(data.replace(valid.tobytes(), np.array(offsets, dtype).tobytes()))
        errors.append((err.value.code, err.value.row))
    assert errors == [(code, row)] * 4


@pytest.mark.parametrize("scan_block", [7, 1000, layouts.SCAN_BLOCK])
def test_steps_scan_and_row_blocks_on_unaligned_int32(scan_block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layouts, "SCAN_BLOCK", scan_block)  # the descent inside a block and at its edge
    offsets = layouts.counts_to_offsets(np.random.default_rng(0).integers(0, 9, size=3000)).astype(np.int32)
    raw = np.zeros(offsets.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.int32)
    unaligned[...] = offsets
    assert not unaligned.flags.aligned
    assert layouts.steps_scan(unaligned) == layouts.steps_scan(offsets) == (None, int(np.diff(offsets).max()))
    for block in (7, 100, 1000, 1 << 16):
        assert layouts.row_blocks(unaligned, block) == layouts.row_blocks(offsets, block)
    bad = offsets.copy()
    bad[1500] = bad[1499] - 1
    unaligned[...] = bad
    assert layouts.steps_scan(unaligned)[0] == layouts.steps_scan(bad)[0] == 1499


def test_offsets_dtype_for() -> None:
    i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
    assert layouts.offsets_dtype_for(10, i32, i32) == i32
    assert layouts.offsets_dtype_for(10, i32, i64) == i64
    assert layouts.offsets_dtype_for(2**31, i32) == i64
    assert layouts.offsets_dtype_for(10) == i64
