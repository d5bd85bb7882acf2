# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/layouts.py, vendorable (docs/serving-and-vendoring.md)
"""Vectorized numpy conversions and checks between the array layouts of spec v1.

The canonical in-memory layout is *ragged* (CSR): ``ids`` int32 [nnz] and ``offsets`` [T+1], int64
or int32 (:data:`OFFSETS_DTYPES`; int32 only while nnz fits it), with ``offsets[0] == 0``,
``offsets`` non-decreasing and ``offsets[T] == nnz``; row t is ``ids[offsets[t]:offsets[t+1]]``.
Every function here is whole-array numpy: no per-row Python loop. Functions named ``check_*`` raise
:class:`SamplingMaskError` and return nothing useful; the rest assume their inputs were checked.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from .checks import as_host_array, raise_at_first
from .errors import ErrorCode, SamplingMaskError
from .limits import Limits, check_count

__all__ = [
    "OFFSETS_DTYPES",
    "PAD",
    "as_host_array",
    "as_int_array",
    "as_offsets_array",
    "bitmask_to_ragged",
    "canonical_permutation",
    "check_ids",
    "check_offset_ends",
    "check_offsets",
    "check_rows",
    "check_segments",
    "check_width",
    "counts_to_offsets",
    "offsets_dtype_for",
    "dense_to_ragged",
    "range_indices",
    "ragged_to_bitmask",
    "ragged_to_dense",
    "row_blocks",
    "row_of_ids",
    "steps_scan",
]

PAD = -1  # dense padding value
_INT32_MAX = np.iinfo(np.int32).max
#: The dtypes offsets are held in, as given (no copy): int32 as Arrow ``list`` columns and int32 wire
#: offsets carry them, int64 otherwise. Any other integer dtype is widened to int64.
OFFSETS_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
#: The largest id count int32 offsets can index; derived offsets past it are int64.
INT32_OFFSETS_MAX = _INT32_MAX


def as_int_array(
    value: Any, dtype: np.dtype[Any] | type, *, field: str, ndim: int = 1, allow_negative_one: bool = False
) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` (int32 / int64), without a copy when it already is one.

    Any integer dtype is accepted when every value fits ``dtype``; other dtypes are ``E_DTYPE``.
    """
    arr = as_host_array(value, field=field)
    if arr.dtype == object and arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.ndim != ndim:
        if arr.size == 0 and ndim == 1 and arr.dtype.kind in "iuf":
            arr = arr.reshape(0)
        else:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {ndim} dimension(s), got {arr.ndim}", field=field)
    if arr.dtype.kind == "f" and arr.size == 0:
        arr = arr.astype(dtype)
    if arr.dtype.kind not in "iu":
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected an integer array, got {arr.dtype}", field=field)
    target = np.dtype(dtype)
    if arr.dtype != target:
        if arr.size and not np.can_cast(arr.dtype, target, casting="safe"):
            info = np.iinfo(target)
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                bad = lo if lo < info.min else hi
                raise SamplingMaskError(ErrorCode.E_RANGE, f"value does not fit {target}", field=field, value=bad)
        arr = arr.astype(target)
    arr = np.ascontiguousarray(arr)
    if arr.dtype.byteorder == ">":  # pragma: no cover - big-endian hosts only
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def as_offsets_array(value: Any, *, field: str = "offsets") -> np.ndarray:
    """``value`` as offsets: an int32 or int64 array as it is (no copy, read-only views stay views; a
    C-contiguous little-endian copy otherwise), any other integer array widened to int64 (``E_RANGE``
    when a value does not fit it). O(1) for int32 / int64 input."""
    if isinstance(value, np.ndarray) and value.dtype in OFFSETS_DTYPES and value.dtype.isnative and value.ndim == 1:
        return np.ascontiguousarray(value)
    return as_int_array(value, np.int64, field=field)


def offsets_dtype_for(nnz: int, *dtypes: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype of offsets derived from offsets of ``dtypes`` that index ``nnz`` ids: int32 only when
    every source is int32 and ``nnz`` <= :data:`INT32_OFFSETS_MAX`, else int64 (widen, never overflow)."""
    if dtypes and all(d == np.int32 for d in dtypes) and nnz <= INT32_OFFSETS_MAX:
        return np.dtype(np.int32)
    return np.dtype(np.int64)


def counts_to_offsets(counts: np.ndarray, *, field: str = "counts") -> np.ndarray:
    """int64 offsets [T+1] from per-row lengths; negative lengths are ``E_OFFSETS``."""
    if counts.size and counts.dtype.kind != "u" and int(counts.min()) < 0:
        raise_at_first(counts < 0, ErrorCode.E_OFFSETS, "row length is negative", field=field, values=counts)
    offsets = np.empty(counts.size + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = counts  # widen first: a cumsum that casts as it goes runs 20-30x slower
    np.cumsum(offsets[1:], out=offsets[1:])
    return offsets


#: Ids (and rows) per validation block: each check runs over a block that stays in cache, so
#: temporaries are O(block), not O(nnz), and every id is read from memory about once.
BLOCK = 1 << 16
#: The largest block of :func:`check_rows` and :func:`steps_scan`: their blocks grow with the input
#: (a sixteenth of it) from :data:`BLOCK` / :data:`SCAN_BLOCK` up to this (1 MiB of int32 ids, in a
#: 2 MiB L2 cache): fewer numpy calls per id, while temporaries stay a small fraction of the input.
MAX_BLOCK = BLOCK << 2
#: Bounds per block of :func:`steps_scan`: a row holds about 8 ids, so offsets blocks of BLOCK / 8
#: entries cover about as many ids as a block of ids, and keep its temporaries as small (64 KiB).
SCAN_BLOCK = BLOCK // 8


def steps_scan(bounds: np.ndarray) -> tuple[int | None, int]:
    """(first i with ``bounds[i + 1] < bounds[i]`` or None, the largest step) of a 1-D array, in blocks
    of :data:`SCAN_BLOCK` entries or more (a sixteenth of ``bounds``, at most :data:`MAX_BLOCK`): no
    temporary as large as ``bounds``. Exact for int32 bounds too: a block holding a negative bound,
    where an int32 difference could wrap (``0, 2**31 - 1, -2``), is compared."""
    widest = 0
    step = min(max(SCAN_BLOCK, bounds.size >> 4), MAX_BLOCK)
    # Unaligned bounds (int32 offsets read in place from a payload): numpy is several times slower
    # on those, so each block is first copied into an aligned scratch buffer (it stays in cache).
    span = min(bounds.size, step + 1)
    scratch = None if bounds.flags.aligned else np.empty(span + 4096 // bounds.itemsize, bounds.dtype)
    for start in range(0, bounds.size - 1, step):
        block = bounds[start : start + step + 1]
        if scratch is not None:
            block = _aligned_copy(block, scratch)
        steps = np.diff(block)
        if int(steps.min()) < 0 or (block.itemsize < 8 and int(block.min()) < 0):
            # A descent, or a negative int32 bound (a difference may then wrap): compare instead.
            descents = np.flatnonzero(block[1:] < block[:-1])
            if descents.size:
                return start + int(descents[0]), widest
            steps = np.subtract(block[1:], block[:-1], dtype=np.int64)
        widest = max(widest, int(steps.max()))
    return None, widest


def check_offset_ends(offsets: np.ndarray, nnz: int, *, field: str = "offsets") -> None:
    """``offsets`` holds ``T+1 >= 1`` entries, ``offsets[0] == 0`` and ``offsets[-1] == nnz``, else
    ``E_OFFSETS``: O(1)."""
    if offsets.size == 0:
        raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets must hold T+1 >= 1 entries", field=field)
    if int(offsets[0]) != 0:
        raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets[0] must be 0", field=field, value=int(offsets[0]))
    if int(offsets[-1]) != nnz:
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS, f"offsets[T] must equal nnz = {nnz}", field=field, value=int(offsets[-1])
        )


def check_offsets(offsets: np.ndarray, nnz: int, *, field: str = "offsets") -> int:
    """:func:`check_offset_ends` and non-decreasing, else ``E_OFFSETS``; returns the widest row.

    Works in blocks of :data:`SCAN_BLOCK` rows or more: no O(T) temporary.
    """
    check_offset_ends(offsets, nnz, field=field)
    descent, widest = steps_scan(offsets)
    if descent is not None:
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS, "offsets decrease", field=field, row=descent, value=int(offsets[descent + 1])
        )
    return widest


def check_width(offsets: np.ndarray, widest: int, max_width: int) -> None:
    """``E_LIMIT`` naming the first of the widest rows when ``widest`` (the widest row of the checked
    ``offsets``) exceeds ``max_width``."""
    if widest > max_width:
        lengths = np.diff(offsets)
        message = f"row width {widest} exceeds the limit {max_width}"
        raise_at_first(lengths == widest, ErrorCode.E_LIMIT, message, field="ids", values=lengths)


def check_segments(cu_seqlens: np.ndarray, num_rows: int, limits: Limits, *, field: str = "cu_seqlens") -> None:
    """``0 = cu[0] <= ... <= cu[B] = T``, else ``E_SEGMENTS``; ``B`` within ``limits.max_segments``."""
    if cu_seqlens.size == 0:
        raise SamplingMaskError(ErrorCode.E_SEGMENTS, "cu_seqlens must hold B+1 >= 1 entries", field=field)
    check_count(cu_seqlens.size - 1, limits.max_segments, "segment count", field=field)
    if int(cu_seqlens[0]) != 0:
        raise SamplingMaskError(ErrorCode.E_SEGMENTS, "cu_seqlens[0] must be 0", field=field, value=int(cu_seqlens[0]))
    seg, _ = steps_scan(cu_seqlens)
    if seg is not None:
        raise SamplingMaskError(
            ErrorCode.E_SEGMENTS, "cu_seqlens decrease", field=field, segment=seg, value=int(cu_seqlens[seg + 1])
        )
    if int(cu_seqlens[-1]) != num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SEGMENTS,
            f"cu_seqlens[B] must equal the row count T = {num_rows}",
            field=field,
            value=int(cu_seqlens[-1]),
        )


def row_of_ids(offsets: np.ndarray) -> np.ndarray:
    """int64 [nnz]: the row index of every id."""
    lengths = np.diff(offsets)
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


def range_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + n)`` for each (s, n), vectorized (int64)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.asarray(starts, dtype=np.int64) - (ends - lengths)
    return np.arange(total, dtype=np.int64) + np.repeat(shift, lengths)


def row_blocks(offsets: np.ndarray, block: int | None = None) -> list[tuple[int, int]]:
    """Row ranges ``[r0, r1)`` tiling all rows, each holding about ``block`` (:data:`BLOCK`) ids and at
    least one row, for offsets whose end points are checked; on unordered offsets the ranges still
    tile the rows (their sizes mean nothing then)."""
    block = block or BLOCK
    num_rows = offsets.size - 1
    nnz = int(offsets[-1]) if num_rows else 0
    if nnz <= block:
        return [(0, num_rows)] if num_rows else []
    targets = np.arange(block, nnz, block, dtype=offsets.dtype)  # offsets' dtype: searchsorted copies on a mismatch
    if offsets.flags.aligned:
        cuts = np.searchsorted(offsets, targets, side="right") - 1
    else:  # searchsorted would first copy all of an unaligned array: search every 64th, then refine
        lo = (np.searchsorted(np.ascontiguousarray(offsets[::64]), targets, side="right") - 1) * 64
        window = offsets[np.minimum(lo[:, None] + np.arange(65), num_rows)]  # past the end: nnz > target
        cuts = lo + np.count_nonzero(window <= targets[:, None], axis=1) - 1
    bounds = np.unique(np.concatenate(([0], np.clip(cuts, 0, num_rows), [num_rows])))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def check_ids(ids: np.ndarray, offsets: np.ndarray, vocab_size: int | None, *, field: str = "ids") -> bool:
    """Ids in ``[0, vocab_size)`` with no duplicate inside a row; returns whether every row is ascending.

    ``E_RANGE`` for an id out of range, ``E_DUPLICATE`` for a repeated id, both naming the row.
    """
    return check_rows(ids, offsets, vocab_size, field=field)[0]


def check_rows(
    ids: np.ndarray,
    offsets: np.ndarray,
    vocab_size: int | None,
    *,
    field: str = "ids",
    sampled: np.ndarray | None = None,
    ascending: bool = False,
    max_width: int | None = None,
) -> tuple[bool, int | None]:
    """:func:`check_ids` and more: returns (every row ascending, the first non-empty row lacking its
    ``sampled`` id or None); ``sampled`` int32 [T] is checked only where given.
    ``ascending=True``: the caller built every row strictly ascending, so the order is not checked.
    ``max_width``: only the offsets' end points are checked yet; their order (``E_OFFSETS``) and the
    row widths (``E_LIMIT``), the errors of :func:`check_offsets` and :func:`check_width`, are
    checked here, each block's before its ids are read (the offsets are read once).

    ``E_RANGE`` for an id out of range, ``E_DUPLICATE`` for a repeated id, both naming the row. One
    pass in blocks of a sixteenth of the ids (from :data:`BLOCK` to :data:`MAX_BLOCK`): range,
    order, then (unsorted blocks only) the chunked duplicate test :func:`_may_repeat`, then
    membership of the sampled id. Offsets must already be checked (with ``max_width``: their ends).
    """
    all_ascending, missing = True, None
    nnz = int(offsets[-1]) if offsets.size else 0
    blocks = row_blocks(offsets, min(max(BLOCK, nnz >> 4), MAX_BLOCK))
    # Ids read in place from a payload may be unaligned; numpy is many times slower on those, so
    # each block is first copied into one aligned scratch buffer (it stays in cache).
    span = int(np.diff(offsets[[r for r, _ in blocks] + [blocks[-1][1]]]).max()) if blocks else 0  # widest block
    span = min(max(span, 0), nnz)  # unchecked offsets: within [0, nnz] once checked
    scratch = None if ids.flags.aligned else np.empty(span + 4096 // ids.itemsize, dtype=ids.dtype)
    # descents[i], 0 < i < n: ids i - 1 and i of a block of n ids do not ascend; the pairs that
    # straddle two rows are then cleared at the rows' starts (descents[0] and [n] are cleared too).
    descents = np.empty(span + 1, bool)
    wanted = np.empty(0 if sampled is None else span, ids.dtype)  # each id's row's sampled id
    for r0, r1 in blocks:
        base, end = int(offsets[r0]), int(offsets[r1])
        edges = np.subtract(offsets[r0 : r1 + 1], base, dtype=np.intp)  # intp: int32 indices index slowly
        # Unchecked offsets: as unsigned, a negative length (a descent) is larger than any width.
        if max_width is not None and (
            not 0 <= base <= end <= nnz or int(np.diff(edges).view(np.uintp).max()) > max_width
        ):
            check_width(offsets, check_offsets(offsets, nnz), max_width)  # raises E_OFFSETS or E_LIMIT
            raise SamplingMaskError(
                ErrorCode.E_OFFSETS, "offsets out of order", field="offsets", row=r0
            )  # pragma: no cover
        block = ids[base:end]
        n = block.size
        if n == 0:
            continue
        if scratch is not None:
            block = _aligned_copy(block, scratch)
        starts = edges[:-1]
        pairs = descents[: n + 1]
        if not ascending:  # compare first: the pass that reads the block from memory then does work
            np.less_equal(block[1:], block[:-1], out=pairs[1:n])
        if block.dtype == np.int32:  # as uint32 a negative id is >= 2^31: one max finds both ends
            hi = int(block.view(np.uint32).max())
            bad = hi >= min(vocab_size if vocab_size is not None else _INT32_MAX + 1, _INT32_MAX + 1)
        else:
            hi = int(block.max())
            bad = int(block.min()) < 0 or (vocab_size is not None and hi >= vocab_size)
        if bad:
            negative = block < 0
            limit = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
            raise_at_first(
                negative if negative.any() else block >= vocab_size,
                ErrorCode.E_RANGE,
                f"id outside {limit}",
                field=field,
                values=block,
                row=lambda pos: r0 + np.searchsorted(starts, pos, side="right") - 1,  # noqa: B023 (called here)
            )
        if not ascending:
            pairs[starts] = False
            pairs[n] = False
            if pairs.any():
                all_ascending = False
                id_bits = max(hi, 1).bit_length()
                # uint32 keys keep 9 bits of the row for ids below 2^23; wider ids take the full sort
                quick = _SIMD_SORT and id_bits <= 23 and block.dtype == np.int32
                first = _first_duplicate(block, starts) if not quick or _may_repeat(block, starts, id_bits) else None
                if first is not None:
                    raise SamplingMaskError(
                        ErrorCode.E_DUPLICATE,
                        "id repeated within a row",
                        field=field,
                        row=r0 + first[0],
                        value=first[1],
                    )
        if sampled is not None and missing is None:
            firsts, want, nonempty = starts, sampled[r0:r1], edges[1:] > starts
            if not nonempty.all():  # where each non-empty row of the block begins, and its id
                firsts, want = starts[nonempty], want[nonempty]
            at = _first_missing(block, firsts, want, wanted, pairs) if firsts.size else None
            if at is not None:
                missing = r0 + int(np.nonzero(nonempty)[0][at])
    return all_ascending, missing


def _aligned_copy(src: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``src`` copied into ``scratch`` (4 KiB longer than ``src``) at a start 2 KiB away from the
    source modulo 4 KiB: a copy between addresses equal modulo 4 KiB (two page-aligned buffers,
    one off by a byte) stalls on 4K aliasing and runs 50-80x slower."""
    start = (src.ctypes.data + 2048 - scratch.ctypes.data) % 4096 // 64 * 64 // scratch.itemsize
    out = scratch[start : start + src.size]
    np.copyto(out, src)
    return out


def _simd_sort() -> bool:
    """Whether numpy runs with SIMD kernels beyond its build baseline. Only then does it sort short
    rows with a sorting network (5-10x faster than a merge sort); without them the chunked
    duplicate test runs about 2x slower than one stable sort of the block, which it then uses."""
    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")
        return any(umath.__cpu_features__.get(name) for name in umath.__cpu_dispatch__)
    except (ImportError, AttributeError):  # pragma: no cover - numpy 1.x or another layout
        return True


_SIMD_SORT = _simd_sort()
#: Ids per sorted chunk of the duplicate test: numpy sorts rows of up to 512 uint32 keys with a
#: sorting network, under 1 ns per id here (longer rows run 5-15x slower per id, as does a 1-D sort).
_CHUNK = 512
#: Ids below 2^_STAMP_BITS let :func:`_wide_rows_repeat` use a table of one int32 per id (4 MiB).
_STAMP_BITS = 20


def _may_repeat(block: np.ndarray, starts: np.ndarray, id_bits: int) -> bool:
    """False when no row of ``block`` (int32 ids in ``[0, 2^id_bits)``, ``id_bits <= 23``; rows begin
    at ``starts``) repeats an id; True when one may (:func:`_first_duplicate` tells). Sorts only
    short rows of a 2-D array, which numpy does with a sorting network: no 1-D sort of the block.

    The ids are sorted in chunks of :data:`_CHUNK` (:func:`_repeats_in_chunks`), which tests every
    row that lies inside one chunk. The rows that straddle a chunk boundary (at most one per
    boundary: 8% of the ids on the calibrated workload) are gathered back to back and tested by
    two tilings, the second shifted by half a chunk: two positions at most ``_CHUNK // 2`` apart
    share a chunk in one of them (separating them needs a boundary of each tiling between them,
    and those are ``_CHUNK // 2`` apart), which covers every row of up to ``_CHUNK // 2 + 1`` ids.
    Wider ones are padded with distinct negative ids and sorted whole. Rows wider than a chunk
    (top-p rows) are tested one by one against a table indexed by id (:func:`_wide_rows_repeat`).
    """
    n = block.size
    if n == 0:
        return False
    lengths = np.diff(starts, append=n)
    wide = np.flatnonzero(lengths > _CHUNK)
    if wide.size and (id_bits > _STAMP_BITS or _wide_rows_repeat(block, starts[wide], lengths[wide], id_bits)):
        return True
    if _repeats_in_chunks(block, starts, id_bits, (0,)):
        return True
    # The row holding the first id of each chunk but the first, where it begins before that id and
    # is no wider than a chunk (so it straddles that boundary only).
    boundaries = np.arange(_CHUNK, n, _CHUNK)
    straddle = np.searchsorted(starts, boundaries, side="right") - 1
    straddle = straddle[(starts[straddle] < boundaries) & (lengths[straddle] <= _CHUNK)]
    if straddle.size == 0:
        return False
    lengths = lengths[straddle]
    block = block[range_indices(starts[straddle], lengths)]
    starts = np.cumsum(lengths) - lengths
    if _repeats_in_chunks(block, starts, id_bits, (0, _CHUNK // 2)):
        return True
    wide = np.flatnonzero(lengths > _CHUNK // 2 + 1)
    if wide.size == 0:
        return False
    cols = np.arange(int(lengths[wide].max()), dtype=np.int32)
    rows = block.take(np.minimum(starts[wide, None] + cols, block.size - 1))
    rows = np.where(cols < lengths[wide, None], rows, -1 - cols)
    rows.sort(axis=1)
    return bool(np.any(rows[:, 1:] == rows[:, :-1]))


def _wide_rows_repeat(block: np.ndarray, starts: np.ndarray, lengths: np.ndarray, id_bits: int) -> bool:
    """Whether a row of ``block`` (ids in ``[0, 2^id_bits)``) beginning at ``starts`` with ``lengths``
    ids repeats an id. Each row writes its positions into a table indexed by id, then reads them
    back: a repeated id keeps one of its positions, so another reads back wrong. Exact; one loop
    step per row, and the rows are wider than :data:`_CHUNK` (about 6 ns per id here, against
    about 35 for the stable sort of the (row, id) key)."""
    stamp = np.empty(1 << id_bits, np.int32)  # never cleared: a row reads back only what it wrote
    positions = np.arange(int(lengths.max()), dtype=np.int32)
    for start, width in zip(starts.tolist(), lengths.tolist(), strict=True):
        # As intp once: numpy casts int32 indices on every use (this row is indexed twice).
        row, wrote = block[start : start + width].astype(np.intp), positions[:width]
        stamp[row] = wrote
        if not np.array_equal(stamp[row], wrote):
            return True
    return False


def _repeats_in_chunks(block: np.ndarray, starts: np.ndarray, id_bits: int, tilings: tuple[int, ...]) -> bool:
    """Whether two equal keys end adjacent when the keys of ``block`` are sorted in chunks of
    :data:`_CHUNK` ids, for each tiling (chunks starting at each offset in ``tilings``).

    Each id becomes the uint32 key ``tag << id_bits | id``, where ``tag`` counts the non-empty rows
    begun before it, modulo 2^(32 - id_bits) >= 512: distinct within :data:`_CHUNK` ids. A
    duplicate's two keys are equal, so they end adjacent if they share a chunk.
    """
    n = block.size
    key = np.zeros(n, np.uint32)
    inner = starts[np.searchsorted(starts, 1) : np.searchsorted(starts, n)]  # starts are sorted
    key[inner] = np.uint32(1 << id_bits)  # an empty row adds no tag
    tags = key.view(np.int32)  # numpy's int32 running sum is 1.4x its uint32 one; the bits are the same
    np.cumsum(tags, out=tags, dtype=np.int32)  # wraps modulo 2^32: the tag modulo 2^(32 - id_bits)
    key |= block.view(np.uint32)
    tilings = tilings if n > _CHUNK else (0,)  # one chunk (or less) holds every pair
    for lo in tilings:
        body = (n - lo) // _CHUNK * _CHUNK
        chunks, tail = key[lo : lo + body].reshape(-1, _CHUNK), key[lo + body :]
        if lo == tilings[-1]:  # the keys' last use: sort in place
            chunks.sort(axis=1)
            tail.sort()
        else:
            chunks, tail = np.sort(chunks, axis=1), np.sort(tail)
        # Flat: the last key of a chunk and the first of the next may also match (a duplicate, or
        # tags a full cycle apart); either way the caller's exact check decides.
        flat = chunks.reshape(-1)
        if np.any(flat[1:] == flat[:-1]) or np.any(tail[1:] == tail[:-1]):
            return True
    return False


def _first_duplicate(block: np.ndarray, starts: np.ndarray) -> tuple[int, int] | None:
    """(row within the block, id) of the first row of ``block`` that repeats an id, with its smallest
    repeated id, or None. Sorts the whole (row, id) key: the error path of :func:`check_rows`, and
    its whole duplicate test without SIMD sorts or for ids of 2^23 and more. The key is already
    ordered by row, so a stable sort (a merge of runs) is several times faster than the default one."""
    lengths = np.diff(starts, append=block.size)
    key = np.repeat(np.arange(lengths.size, dtype=np.int64) << 32, lengths)
    key |= block
    key.sort(kind="stable")
    dup = np.flatnonzero(key[1:] == key[:-1])
    if dup.size == 0:
        return None
    k = int(key[dup[0]])
    return k >> 32, k & 0xFFFFFFFF


def _first_missing(
    block: np.ndarray, firsts: np.ndarray, want: np.ndarray, wanted: np.ndarray, hits: np.ndarray
) -> int | None:
    """The index into ``firsts`` (the starts of non-empty rows) of the first row whose ids lack its
    ``want``, or None. ``wanted`` (``block``'s dtype) and ``hits`` (bool) are scratch of at least
    ``block.size``.

    Each row's ``want`` is spread over its ids by a running sum of the steps between rows (exact
    modulo 2^bits, so wrapping is harmless): one scan, 3-4x faster than ``np.repeat`` of short
    rows. Ids are unique per row, so there is exactly one hit per row when none is missing.
    """
    n = block.size
    spread, hit = wanted[:n], hits[:n]
    spread.fill(0)
    spread[firsts] = np.diff(want.astype(spread.dtype, copy=False), prepend=spread.dtype.type(0))
    np.cumsum(spread, out=spread, dtype=spread.dtype)
    np.equal(block, spread, out=hit)
    if int(np.count_nonzero(hit)) == firsts.size:
        return None
    return int(np.argmin(np.add.reduceat(hit, firsts)))  # at most one hit per row: the first row with none


def canonical_permutation(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Permutation of ``ids`` that sorts every row ascending and keeps rows in place."""
    key = (row_of_ids(offsets) << 32) | ids.astype(np.int64)
    return np.argsort(key, kind="stable")


def dense_to_ragged(dense: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, offsets) from a ``[T, W]`` dense array: ids first, then ``-1`` trailing padding.

    ``E_PADDING`` for ``-1`` before an id; ``E_RANGE`` for any other negative value.
    """
    width = dense.shape[1]
    if dense.size and int(dense.min()) < PAD:
        flat = dense.reshape(-1)
        message = "negative id other than the -1 padding"
        raise_at_first(flat < PAD, ErrorCode.E_RANGE, message, field="dense", values=flat, row=lambda i: i // width)
    present = dense != PAD
    counts = np.count_nonzero(present, axis=1).astype(np.int64)
    if width:
        # Valid rows are a run of ids then only padding: the first -1 sits exactly at the row's count.
        first_pad = np.argmin(present, axis=1)  # 0 also when a row has no -1 at all
        first_pad[present[np.arange(present.shape[0]), first_pad]] = width
        bad_rows = np.flatnonzero(first_pad != counts)
        if bad_rows.size:
            row = int(bad_rows[0])
            col = int(first_pad[row]) + int(np.argmax(present[row, int(first_pad[row]) :]))
            raise SamplingMaskError(
                ErrorCode.E_PADDING,
                f"-1 padding before an id at column {col}",
                field="dense",
                row=row,
                value=int(dense[row, col]),
            )
    ids = dense[present].astype(np.int32, copy=False)
    return np.ascontiguousarray(ids), counts_to_offsets(counts)


def ragged_to_dense(ids: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    """int32 ``[T, width]``: each row's ids in stored order, then ``-1``. ``width`` >= the widest row."""
    lengths = np.diff(offsets)
    num_rows = lengths.size
    dense = np.full((num_rows, width), PAD, dtype=np.int32)
    if ids.size:
        # Flat position of id j in row t: t * width + (j - offsets[t]); one repeat, one scatter.
        shift = np.arange(num_rows, dtype=np.int64) * width - offsets[:-1]
        dense.reshape(-1)[np.arange(ids.size, dtype=np.int64) + np.repeat(shift, lengths)] = ids
    return dense


#: Bytes of bitmask converted at once by :func:`bitmask_to_ragged` (whole rows, at least one): its
#: temporaries (a flag per byte, an index per non-zero byte and per id) stay near this size.
BITMASK_BLOCK = 1 << 21


def bitmask_to_ragged(bits: np.ndarray, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids ascending, offsets) from uint8 ``[T, ceil(V/8)]``; id i is bit ``i % 8`` of byte ``i // 8``.

    Works on the non-zero bytes only, so cost follows the ids, not ``T * V``; rows go
    :data:`BITMASK_BLOCK` bytes at a time (2x faster at 512 rows of 3000 ids than all at once, whose
    temporaries outgrow the caches). A set bit at or past ``vocab_size`` is ``E_PADDING``.
    """
    num_rows, row_bytes = bits.shape
    if vocab_size % 8 and num_rows:
        tail = bits[:, row_bytes - 1] >> (vocab_size % 8)
        raise_at_first(tail != 0, ErrorCode.E_PADDING, f"bit set at or past vocab_size {vocab_size}", field="bitmask")
    step = max(BITMASK_BLOCK // max(row_bytes, 1), 1)
    if step >= num_rows:
        return _bitmask_rows(bits)
    parts = [_bitmask_rows(bits[r : r + step]) for r in range(0, num_rows, step)]
    offsets = np.empty(num_rows + 1, dtype=np.int64)
    offsets[0] = 0
    row, base = 0, 0
    for ids, part_offsets in parts:
        offsets[row + 1 : row + part_offsets.size] = part_offsets[1:] + base
        row, base = row + part_offsets.size - 1, base + ids.size
    return np.concatenate([ids for ids, _ in parts]), offsets


def _bitmask_rows(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`bitmask_to_ragged` of a few rows, padding already checked."""
    num_rows, row_bytes = bits.shape
    flat = bits.reshape(-1)
    nonzero = np.flatnonzero(flat != 0)  # a bool scan: several times faster than on uint8
    byte_bounds = np.searchsorted(nonzero, np.arange(num_rows + 1, dtype=np.int64) * row_bytes)
    row_start = np.repeat(np.arange(num_rows, dtype=np.int64) * row_bytes, np.diff(byte_bounds))
    byte_base = ((nonzero - row_start) << 3).astype(np.int32)  # first id of each non-zero byte
    set_bits = np.flatnonzero(np.unpackbits(flat[nonzero], bitorder="little").view(bool))
    ids = byte_base[set_bits >> 3]
    ids |= (set_bits & 7).astype(np.int32)
    return ids, np.searchsorted(set_bits, byte_bounds * 8).astype(np.int64)


def ragged_to_bitmask(ids: np.ndarray, offsets: np.ndarray, vocab_size: int, *, ascending: bool) -> np.ndarray:
    """uint8 ``[T, ceil(V/8)]`` little bit order. Ids must be unique per row and below ``vocab_size``."""
    num_rows = offsets.size - 1
    row_bytes = (vocab_size + 7) // 8
    bits = np.zeros((num_rows, row_bytes), dtype=np.uint8)
    if ids.size == 0:
        return bits
    if ids.size * 64 > num_rows * vocab_size:
        # Dense supports (more than 1 id in 64): one flag per id, then a single packbits.
        flags = np.zeros(num_rows * row_bytes * 8, dtype=bool)
        flags[row_of_ids(offsets) * (row_bytes * 8) + ids] = True
        return np.packbits(flags, bitorder="little").reshape(num_rows, row_bytes)
    if not ascending:
        ids = ids[canonical_permutation(ids, offsets)]
    byte_pos = row_of_ids(offsets) * row_bytes + (ids >> 3)
    values = np.left_shift(1, ids & 7).astype(np.uint8)
    # Rows are ascending, so ids sharing a byte are neighbours; distinct bits add without carry.
    starts = np.flatnonzero(np.concatenate(([True], byte_pos[1:] != byte_pos[:-1])))
    bits.reshape(-1)[byte_pos[starts]] = np.add.reduceat(values, starts)
    return bits
