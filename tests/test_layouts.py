"""Unit tests of the vectorized layout helpers against plain per-row Python references."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sampling_mask import DEFAULT_LIMITS, ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.core import layouts

ROWS = [[5, 1], [], [7], [0, 9, 3, 8], [], [2]]
VOCAB = 10


def ragged(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([i for r in rows for i in r], dtype=np.int32)
    offsets = np.cumsum([0] + [len(r) for r in rows], dtype=np.int64)
    return ids, offsets


def dense_reference(rows: list[list[int]], width: int) -> np.ndarray:
    return np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int32).reshape(len(rows), width)


def bitmask_reference(rows: list[list[int]], vocab: int) -> np.ndarray:
    out = np.zeros((len(rows), (vocab + 7) // 8), dtype=np.uint8)
    for t, row in enumerate(rows):
        for i in row:
            out[t, i // 8] |= 1 << (i % 8)
    return out


def test_range_indices_concatenates_ranges() -> None:
    got = layouts.range_indices(np.array([5, 0, 9]), np.array([2, 0, 3]))
    assert got.tolist() == [5, 6, 9, 10, 11]
    assert got.dtype == np.int64
    assert layouts.range_indices(np.array([3]), np.array([0])).size == 0


def test_row_of_ids_and_counts_to_offsets() -> None:
    ids, offsets = ragged(ROWS)
    assert layouts.row_of_ids(offsets).tolist() == [t for t, r in enumerate(ROWS) for _ in r]
    counts = np.array([len(r) for r in ROWS])
    assert layouts.counts_to_offsets(counts).tolist() == offsets.tolist()
    assert layouts.counts_to_offsets(np.zeros(0, np.int64)).tolist() == [0]


def test_check_offsets_accepts_a_tiling_and_names_the_bad_row() -> None:
    layouts.check_offsets(np.array([0, 2, 2, 3]), 3)
    layouts.check_offsets(np.array([0]), 0)  # zero rows
    with pytest.raises(SamplingMaskError) as info:
        layouts.check_offsets(np.array([0, 2, 1, 3]), 3)
    assert (info.value.code, info.value.row) == (ErrorCode.E_OFFSETS, 1)


def test_check_segments_allows_empty_segments() -> None:
    layouts.check_segments(np.array([0, 0, 2, 2, 3, 3]), 3, DEFAULT_LIMITS)
    layouts.check_segments(np.array([0]), 0, DEFAULT_LIMITS)  # zero rows, zero segments
    with pytest.raises(SamplingMaskError) as info:
        layouts.check_segments(np.array([0]), 1, DEFAULT_LIMITS)
    assert info.value.code is ErrorCode.E_SEGMENTS


def test_check_ids_reports_order_and_duplicates() -> None:
    ids, offsets = ragged([[1, 5], [], [7]])
    assert layouts.check_ids(ids, offsets, VOCAB) is True
    ids, offsets = ragged(ROWS)
    assert layouts.check_ids(ids, offsets, VOCAB) is False
    # A descent across a row boundary is still ascending within rows.
    ids, offsets = ragged([[8, 9], [1, 2]])
    assert layouts.check_ids(ids, offsets, None) is True
    # The same id in two rows is no duplicate.
    ids, offsets = ragged([[3], [3], [4, 3]])
    assert layouts.check_ids(ids, offsets, None) is False
    ids, offsets = ragged([[3], [1, 4, 1]])
    with pytest.raises(SamplingMaskError) as info:
        layouts.check_ids(ids, offsets, None)
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_DUPLICATE, 1, 1)
    ids, offsets = ragged([[3], [1], [4, 10]])
    with pytest.raises(SamplingMaskError) as info:
        layouts.check_ids(ids, offsets, VOCAB)
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_RANGE, 2, 10)


def _reference_rows_check(rows: list[list[int]], vocab: int, sampled: list[int]) -> tuple[object, ...]:
    """What check_rows must report, computed row by row: the first error, else (ascending, missing)."""
    for t, row in enumerate(rows):
        bad = [i for i in row if not 0 <= i < vocab]
        if bad:
            return ("raise", ErrorCode.E_RANGE, t)
        if len(set(row)) != len(row):
            return ("raise", ErrorCode.E_DUPLICATE, t)
    missing = next((t for t, row in enumerate(rows) if row and sampled[t] not in row), None)
    return (all(r == sorted(r) for r in rows), missing)


@pytest.mark.parametrize("seed", range(40))
def test_check_rows_in_small_blocks_agrees_with_a_row_by_row_check(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Blocks of 3 ids put block boundaries everywhere: in rows, at empty rows, between rows.
    monkeypatch.setattr(layouts, "BLOCK", 3)
    monkeypatch.setattr(layouts, "SCAN_BLOCK", 2)  # and the offsets scan in blocks of 2 steps
    rng = np.random.default_rng(seed)
    vocab = 12
    rows = [sorted(rng.choice(vocab, size=int(rng.integers(0, 5)), replace=False).tolist()) for _ in range(15)]
    sampled = [int(rng.choice(r)) if r else -1 for r in rows]
    kind = seed % 5
    t = int(rng.integers(0, len(rows)))
    if kind == 1 and len(rows[t]) > 1:
        rows[t].reverse()  # unsorted, still valid
    elif kind == 2 and rows[t]:
        rows[t].append(rows[t][0])  # duplicate
    elif kind == 3 and rows[t]:
        rows[t][-1] = vocab  # out of range
    elif kind == 4 and rows[t]:
        sampled[t] = next(i for i in range(vocab) if i not in rows[t])  # sampled id missing
    expected = _reference_rows_check(rows, vocab, sampled)
    ids, offsets = ragged(rows)
    sampled_arr = np.array(sampled, dtype=np.int32)
    if expected[0] == "raise":
        with pytest.raises(SamplingMaskError) as info:
            layouts.check_rows(ids, offsets, vocab, sampled=sampled_arr)
        assert (info.value.code, info.value.row) == expected[1:]
    else:
        assert layouts.check_rows(ids, offsets, vocab, sampled=sampled_arr) == expected
        assert layouts.check_offsets(offsets, ids.size) == max(map(len, rows))


def test_sampled_membership_is_exact_where_steps_between_rows_wrap() -> None:
    # Each row's sampled id is spread over its ids by a running sum of the steps between rows. The
    # step from 2^31 - 1 to -2^31 wraps in int32; over int64 ids it must not become +2^31.
    top = 2**31 - 1
    ids, offsets = ragged([[top], [0, 3], [], [top, 1]])
    for dtype in (np.int32, np.int64):
        ok = np.array([top, 3, -1, 1], dtype=np.int32)
        assert layouts.check_rows(ids.astype(dtype), offsets, None, sampled=ok) == (False, None)
        lacking = np.array([top, 0, -1, 0], dtype=np.int32)  # row 3 lacks 0, after an empty row
        assert layouts.check_rows(ids.astype(dtype), offsets, None, sampled=lacking) == (False, 3)
    wide = np.array([top, 2**31], dtype=np.int64)  # int64 ids may hold 2^31 where no vocab is set
    sampled = np.array([top, -(2**31)], dtype=np.int32)
    assert layouts.check_rows(wide, np.array([0, 1, 2]), None, sampled=sampled) == (True, 1)


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_check_rows_reads_unaligned_ids(shift: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Payload arrays are read in place at any byte offset; the blocks are copied to aligned scratch.
    monkeypatch.setattr(layouts, "BLOCK", 4)
    rows = [[1, 5], [], [7, 2, 9], [3], [0, 4, 6, 8, 10]]
    ids, offsets = ragged(rows)
    raw = np.frombuffer(bytes(shift) + ids.tobytes(), np.uint8)[shift:].view(np.int32)
    assert not raw.flags.aligned
    raw_offsets = np.frombuffer(bytes(shift) + offsets.tobytes(), np.uint8)[shift:].view(np.int64)
    assert layouts.row_blocks(raw_offsets) == layouts.row_blocks(offsets)
    monkeypatch.setattr(layouts, "BLOCK", 1)
    assert layouts.row_blocks(raw_offsets) == layouts.row_blocks(offsets)
    monkeypatch.setattr(layouts, "BLOCK", 4)
    assert layouts.check_rows(raw, offsets, 11, sampled=np.array([5, -1, 9, 3, 10], np.int32)) == (False, None)
    assert layouts.check_rows(raw, offsets, 11, sampled=np.array([5, -1, 9, 4, 10], np.int32)) == (False, 3)
    with pytest.raises(SamplingMaskError) as info:
        layouts.check_rows(raw, offsets, 10)
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_RANGE, 4, 10)


def test_canonical_permutation_sorts_within_rows_only() -> None:
    ids, offsets = ragged(ROWS)
    got = ids[layouts.canonical_permutation(ids, offsets)]
    assert got.tolist() == [i for r in ROWS for i in sorted(r)]


@pytest.mark.parametrize("width", [4, 6])
def test_ragged_to_dense_and_back(width: int) -> None:
    ids, offsets = ragged(ROWS)
    dense = layouts.ragged_to_dense(ids, offsets, width)
    assert dense.dtype == np.int32 and dense.flags.c_contiguous
    assert np.array_equal(dense, dense_reference(ROWS, width))
    back_ids, back_offsets = layouts.dense_to_ragged(dense)
    assert back_ids.tolist() == ids.tolist() and back_offsets.tolist() == offsets.tolist()


def test_dense_edge_shapes() -> None:
    assert layouts.ragged_to_dense(np.zeros(0, np.int32), np.zeros(4, np.int64), 0).shape == (3, 0)
    ids, offsets = layouts.dense_to_ragged(np.zeros((3, 0), np.int32))
    assert ids.size == 0 and offsets.tolist() == [0, 0, 0, 0]
    ids, offsets = layouts.dense_to_ragged(np.zeros((0, 5), np.int32))
    assert ids.size == 0 and offsets.tolist() == [0]
    ids, offsets = layouts.dense_to_ragged(np.full((2, 3), -1, np.int32))
    assert offsets.tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("dense", "row", "column"),
    [([[1, -1, 2]], 0, 2), ([[1, 2, 3], [-1, -1, 4]], 1, 2), ([[0, 1], [-1, 4]], 1, 1), ([[4, -1, -1, 5, -1]], 0, 3)],
)
def test_dense_gap_is_padding_error_at_the_first_late_id(dense: list[list[int]], row: int, column: int) -> None:
    arr = np.array(dense, dtype=np.int32)
    with pytest.raises(SamplingMaskError) as info:
        layouts.dense_to_ragged(arr)
    assert info.value.code is ErrorCode.E_PADDING
    assert info.value.row == row and info.value.value == arr[row, column]
    assert f"column {column}" in info.value.message


@pytest.mark.parametrize("vocab", [1, 7, 8, 10, 16, 17])
def test_bitmask_matches_the_bit_diagram(vocab: int) -> None:
    rows = [[i for i in r if i < vocab] for r in ROWS]
    ids, offsets = ragged(rows)
    bits = layouts.ragged_to_bitmask(ids, offsets, vocab, ascending=False)
    assert np.array_equal(bits, bitmask_reference(rows, vocab))
    back_ids, back_offsets = layouts.bitmask_to_ragged(bits, vocab)
    assert back_ids.tolist() == [i for r in rows for i in sorted(r)]
    assert back_offsets.tolist() == offsets.tolist()


def test_bitmask_byte_values_little_bit_order() -> None:
    ids, offsets = ragged([[0], [7], [8], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    bits = layouts.ragged_to_bitmask(ids, offsets, 9, ascending=True)
    assert bits.tolist() == [[0b00000001, 0], [0b10000000, 0], [0, 0b1], [0xFF, 0b1]]


def test_bitmask_padding_bits_rejected() -> None:
    bits = np.zeros((2, 2), np.uint8)
    bits[1, 1] = 0b100  # id 10 with vocab 10
    with pytest.raises(SamplingMaskError) as info:
        layouts.bitmask_to_ragged(bits, 10)
    assert (info.value.code, info.value.row) == (ErrorCode.E_PADDING, 1)
    bits[1, 1] = 0b10  # id 9: fine
    assert layouts.bitmask_to_ragged(bits, 10)[0].tolist() == [9]


def test_as_int_array_casts_safely() -> None:
    arr = np.array([1, 2, 3], dtype=np.int64)
    out = layouts.as_int_array(arr, np.int32, field="ids")
    assert out.dtype == np.int32 and out.tolist() == [1, 2, 3]
    same = np.array([4, 5], dtype=np.int32)
    assert layouts.as_int_array(same, np.int32, field="ids") is same  # no copy when already right
    assert layouts.as_int_array(np.array([1, 2], dtype=">i4"), np.int32, field="ids").dtype == np.dtype("<i4")
    assert layouts.as_int_array(np.arange(6)[::2], np.int64, field="ids").flags.c_contiguous
    assert layouts.as_int_array([], np.int32, field="ids").shape == (0,)
    with pytest.raises(SamplingMaskError) as info:
        layouts.as_int_array(np.array([2**31]), np.int32, field="ids")
    assert (info.value.code, info.value.value) == (ErrorCode.E_RANGE, 2**31)
    with pytest.raises(SamplingMaskError) as info:
        layouts.as_int_array(np.array([1.0]), np.int32, field="ids")
    assert info.value.code is ErrorCode.E_DTYPE


@pytest.mark.parametrize("ids_per_row", [0, 1, 3, 40, 400])
def test_bitmask_sparse_and_dense_paths_match_the_bit_diagram(ids_per_row: int) -> None:
    # 3 ids in 1003 take the byte path of ragged_to_bitmask; 40 and 400 take the packbits path.
    vocab, rng = 1003, np.random.default_rng(ids_per_row)
    rows = [sorted(rng.choice(vocab, ids_per_row, replace=False).tolist()) for _ in range(5)] + [[]]
    ids, offsets = ragged(rows)
    bits = layouts.ragged_to_bitmask(ids, offsets, vocab, ascending=True)
    assert np.array_equal(bits, bitmask_reference(rows, vocab))
    # An unaligned buffer (as np.frombuffer at an odd offset gives) decodes the same.
    unaligned = np.frombuffer(bytes(3) + bits.tobytes(), dtype=np.uint8, offset=3).reshape(bits.shape)
    back_ids, back_offsets = layouts.bitmask_to_ragged(unaligned, vocab)
    assert back_ids.tolist() == ids.tolist() and back_ids.dtype == np.int32
    assert back_offsets.tolist() == offsets.tolist() and back_offsets.dtype == np.int64


@given(
    st.integers(0, 12),
    st.integers(1, 70),
    st.sampled_from([1, 2, 5, 1 << 21]),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.02, 0.3, 1.0]),
)
@settings(max_examples=60, deadline=None)
def test_bitmask_to_ragged_equals_a_per_row_reference(
    num_rows: int, vocab: int, block: int, seed: int, density: float
) -> None:
    # Random bits (padding bits cleared) against the per-row unpackbits + flatnonzero reference;
    # ``block`` (bytes per conversion step) from one row at a time to all rows at once.
    rng = np.random.default_rng(seed)
    row_bytes = (vocab + 7) // 8
    flags = rng.random((num_rows, row_bytes * 8)) < density
    flags[:, vocab:] = False
    bits = np.packbits(flags, axis=1, bitorder="little")
    reference = [np.flatnonzero(np.unpackbits(row, count=vocab, bitorder="little")) for row in bits]
    saved = layouts.BITMASK_BLOCK
    layouts.BITMASK_BLOCK = block
    try:
        ids, offsets = layouts.bitmask_to_ragged(bits, vocab)
    finally:
        layouts.BITMASK_BLOCK = saved
    assert ids.dtype == np.int32 and offsets.dtype == np.int64
    assert offsets.tolist() == np.cumsum([0] + [r.size for r in reference]).tolist()
    assert ids.tolist() == [int(i) for r in reference for i in r]
    if vocab % 8 and num_rows:  # a padding bit in the last row is still refused, naming that row
        bits[-1, -1] |= 0x80
        layouts.BITMASK_BLOCK = block
        try:
            with pytest.raises(SamplingMaskError) as info:
                layouts.bitmask_to_ragged(bits, vocab)
        finally:
            layouts.BITMASK_BLOCK = saved
        assert (info.value.code, info.value.row) == (ErrorCode.E_PADDING, num_rows - 1)


# ---------------------------------------------------------------------------------------- duplicate test
def _first_repeat(rows: list[list[int]]) -> tuple[int, int] | None:
    """(row, smallest repeated id) of the first row that repeats an id, row by row."""
    for t, row in enumerate(rows):
        repeated = [i for i in set(row) if row.count(i) > 1]
        if repeated:
            return t, min(repeated)
    return None


def _check_duplicates(rows: list[list[int]], vocab: int | None) -> tuple[int, int] | None:
    ids, offsets = ragged(rows)
    try:
        layouts.check_ids(ids, offsets, vocab)
    except SamplingMaskError as exc:
        assert exc.code is ErrorCode.E_DUPLICATE
        return exc.row, exc.value
    return None


#: (chunk, block) sizes: the default, and tiny ones that put chunk tilings, block boundaries and the
#: wide-row path (rows over chunk // 2 + 1 ids; over chunk ids: the full sort) on every few ids.
_TILINGS = [(512, 1 << 16), (4, 1 << 16), (8, 7), (2, 5), (16, 3)]


@settings(max_examples=150)
@given(
    st.lists(st.lists(st.integers(0, 9), max_size=12), min_size=1, max_size=30),
    st.sampled_from([10, 2**23, 2**23 + 1, 2**31 - 1]),
    st.randoms(use_true_random=False),
)
def test_duplicate_test_agrees_with_a_row_by_row_check(rows: list[list[int]], vocab: int, rnd: random.Random) -> None:
    # Ids spread over the vocabulary (scaled from 0..9, so repeats stay likely): wide ids take
    # the full sort (over 2^23), narrow ones the chunked one; with 2^23 the row tag keeps 9 bits.
    rows = [[i * (vocab - 1) // 9 for i in row] for row in rows]
    if rnd.random() < 0.5:
        rows = [list(dict.fromkeys(row)) for row in rows]  # mostly valid, then one planted repeat
        long = [t for t, row in enumerate(rows) if len(row) > 1]
        if long and rnd.random() < 0.5:
            t = rnd.choice(long)
            rows[t][rnd.randrange(1, len(rows[t]))] = rows[t][0]
    expected = _first_repeat(rows)
    for chunk, block in _TILINGS:
        for simd in (True, False):  # the chunked test, or (numpy without SIMD sorts) the full sort
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(layouts, "_CHUNK", chunk)
                patch.setattr(layouts, "BLOCK", block)
                patch.setattr(layouts, "_SIMD_SORT", simd)
                assert _check_duplicates(rows, vocab) == expected, (chunk, block, simd)


@pytest.mark.parametrize("chunk", [8, 512])
def test_duplicate_test_covers_rows_across_chunk_boundaries_and_wide_rows(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layouts, "_CHUNK", chunk)
    monkeypatch.setattr(layouts, "_SIMD_SORT", True)
    rng = np.random.default_rng(chunk)
    for width in (2, chunk // 2, chunk // 2 + 1, chunk // 2 + 2, chunk, chunk + 3):
        for lead in (0, 1, chunk // 2 - 1, chunk // 2, chunk - 1):  # where the row starts in the tiling
            row = rng.permutation(10 * width)[:width].tolist()
            rows = [[int(i)] for i in rng.permutation(1000)[:lead]] + [row, [5, 3]]
            assert _check_duplicates(rows, None) is None
            rows[lead] = row[:-1] + [row[0]]  # the repeat as far apart as the row allows
            assert _check_duplicates(rows, None) == (lead, row[0]), (width, lead)


def test_duplicate_test_edges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layouts, "_SIMD_SORT", True)
    # The same id in neighbouring rows (across chunks and blocks too) is no duplicate.
    same = [[7, 3] for _ in range(2000)]
    assert _check_duplicates(same, 10) is None
    # Empty rows add no row tag; a repeat right after them is still found.
    rows: list[list[int]] = [[], [4, 2], [], [], [1, 0, 1], []]
    assert _check_duplicates(rows, 5) == (4, 1)
    # First and last rows of a block, first and last ids of a row.
    rows = [[9, 1, 9]] + [[2, 1]] * 40_000 + [[3, 5, 4, 3]]
    assert _check_duplicates(rows, 10) == (0, 9)
    assert _check_duplicates(rows[1:], 10) == (40_000, 3)
    # Ids near the int32 bound take the full sort; 2^23 - 1 the chunked one with a 9-bit row tag:
    # 600 one-id rows put tags a full cycle (512 rows) apart next to each other across chunks.
    for top in (2**31 - 2, 2**23 - 1):
        rows = [[top]] * 600 + [[top, 0]]
        assert _check_duplicates(rows, None) is None
        assert _check_duplicates(rows + [[0, top, top]], None) == (601, top)


def test_duplicate_test_of_a_512_wide_row_under_the_default_limits() -> None:
    row = np.random.default_rng(0).permutation(151_936)[:512].astype(np.int32)
    mask = SamplingMask.from_rows([row.tolist(), row[::-1].tolist()], vocab_size=151_936)
    assert mask.num_rows == 2
    row[300] = row[7]
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_rows([[1], row.tolist()], vocab_size=151_936)
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_DUPLICATE, 1, int(row[7]))


@pytest.mark.parametrize("vocab", [151_936, 1 << 22])
def test_duplicate_test_of_top_p_rows_wider_than_a_chunk(vocab: int) -> None:
    # Unsorted rows of 513-3000 ids (top-p sampling without top_k) among short ones: checked row by
    # row against a table indexed by id (ids below 2^20), else by the exact sort.
    rng = np.random.default_rng(vocab)
    rows = []
    for width in rng.integers(513, 3000, size=12):
        rows += [rng.choice(vocab, size=int(width), replace=False).tolist(), [1, 2], []]
    ids, offsets = ragged(rows)
    assert layouts.check_ids(ids, offsets, vocab) is False
    for t in (0, 9, 33):
        bad = [list(r) for r in rows]
        bad[t][-1] = bad[t][0]  # the repeat as far apart as the row allows
        with pytest.raises(SamplingMaskError) as info:
            layouts.check_ids(*ragged(bad), vocab)
        assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_DUPLICATE, t, bad[t][0])


@pytest.mark.parametrize("vocab", [None, 1, 10, 2**31 - 1, 2**31, 2**31 + 5])
@pytest.mark.parametrize("bad", [-1, -(2**31), 10, 2**31 - 1])
def test_range_check_names_the_first_bad_row_negatives_first(vocab: int | None, bad: int) -> None:
    # One max over the ids read as uint32 finds both ends; the message still names the first
    # negative id's row when there is one, else the first id at or past the vocabulary.
    rows = [[0], [bad, 0], [2**31 - 1 if vocab is None or vocab >= 2**31 else vocab - 1], [-5 if bad >= 0 else 0]]
    ids, offsets = ragged(rows)
    for block in (1, 1 << 16):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(layouts, "BLOCK", block)
            expected = _reference_range(rows, vocab, whole_mask=block > 1)
            if expected is None:
                assert layouts.check_ids(ids, offsets, vocab) is True
                continue
            with pytest.raises(SamplingMaskError) as info:
                layouts.check_ids(ids, offsets, vocab)
            assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_RANGE, *expected)


def _reference_range(rows: list[list[int]], vocab: int | None, whole_mask: bool) -> tuple[int, int] | None:
    """(row, id) check_ids reports: within one block, a negative id before any id past the vocabulary."""
    flat = [(t, i) for t, row in enumerate(rows) for i in row]
    if not whole_mask:  # a block per row: the first bad row, negative or not
        return next(((t, i) for t, i in flat if i < 0 or (vocab is not None and i >= vocab)), None)
    return next(((t, i) for t, i in flat if i < 0), None) or next(
        ((t, i) for t, i in flat if vocab is not None and i >= vocab), None
    )


@pytest.mark.parametrize("seed", range(12))
def test_check_rows_in_blocks_grown_with_nnz_agrees_with_a_row_by_row_check(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Blocks grow with nnz (a sixteenth) from BLOCK to MAX_BLOCK: here from 2 to 9 ids.
    monkeypatch.setattr(layouts, "BLOCK", 2)
    monkeypatch.setattr(layouts, "MAX_BLOCK", 9)
    rng = np.random.default_rng(seed)
    rows = [rng.permutation(rng.choice(40, size=int(rng.integers(0, 7)), replace=False)).tolist() for _ in range(60)]
    if seed % 3 == 0:
        rows = [sorted(r) for r in rows]
    t = int(rng.integers(0, len(rows)))
    if seed % 3 == 1 and rows[t]:
        rows[t].insert(int(rng.integers(0, len(rows[t]))), rows[t][-1])  # a duplicate, anywhere in the row
    sampled = [r[0] if r else -1 for r in rows]
    expected = _reference_rows_check(rows, 40, sampled)
    ids, offsets = ragged(rows)
    assert ids.size >> 4 > layouts.BLOCK
    call = lambda: layouts.check_rows(ids, offsets, 40, sampled=np.array(sampled, np.int32))  # noqa: E731
    if expected[0] == "raise":
        with pytest.raises(SamplingMaskError) as info:
            call()
        assert (info.value.code, info.value.row) == expected[1:]
    else:
        assert call() == expected


@pytest.mark.parametrize("block", [1, 3, 1000])
def test_check_rows_checks_widths_when_asked(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # max_width: offsets known ordered (pyarrow checked them), widths checked with the ids: the same
    # error as check_offsets + check_width, naming the first of the widest rows.
    monkeypatch.setattr(layouts, "BLOCK", block)
    rows = [[1], [0, 2, 4], [3], [], [0, 1, 2, 3], [6], [0, 1, 2, 3]]
    ids, offsets = ragged(rows)
    assert layouts.check_rows(ids, offsets, 10, max_width=4) == (True, None)
    for limit in (2, 3):
        with pytest.raises(SamplingMaskError) as info:
            layouts.check_rows(ids, offsets, 10, max_width=limit)
        assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_LIMIT, 4, 4)
        with pytest.raises(SamplingMaskError) as direct:
            layouts.check_width(offsets, layouts.check_offsets(offsets, ids.size), limit)
        assert str(direct.value) == str(info.value)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_check_rows_checks_unordered_offsets_like_check_offsets(
    seed: int, dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With max_width only the end points are checked before: offsets anywhere (negative, past nnz,
    # descending, wrapping as int32) give check_offsets' error, whatever the blocks.
    monkeypatch.setattr(layouts, "BLOCK", 3)
    rng = np.random.default_rng(seed)
    nnz, rows = 30, 12
    ids = rng.permutation(nnz).astype(np.int32)  # one fault only: no row (whatever the offsets) repeats an id
    offsets = np.sort(rng.integers(0, nnz + 1, size=rows + 1)).astype(dtype)
    offsets[0], offsets[-1] = 0, nnz
    bad = int(rng.integers(1, rows))
    offsets[bad] = rng.choice([-5, nnz + 7, int(offsets[bad - 1]) - 1, np.iinfo(dtype).max, np.iinfo(dtype).min])
    with pytest.raises(SamplingMaskError) as expected:
        layouts.check_offsets(offsets, nnz)
    with pytest.raises(SamplingMaskError) as got:
        layouts.check_rows(ids, offsets, 50, max_width=nnz)
    assert (got.value.code, got.value.row, got.value.value) == (
        expected.value.code,
        expected.value.row,
        expected.value.value,
    )
