# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/compact.py, vendorable (docs/serving-and-vendoring.md)
"""The ``compact`` layout: each row's ids as a set, sorted deltas bit-packed in blocks of 32 values.

Wire format (spec/v1/SPEC.md, section "compact"). ``T`` rows and ``nnz`` ids are known from the
enclosing container; the buffer is four sections back to back and nothing else::

    row_lengths   T bytes            min(k_t, 255)
    long_lengths  LEB128 varints     k_t - 255 for every row whose byte is 255, in row order
    block_widths  ceil(nnz/32) bytes w_b in [0, 31]
    words         4 * sum(w_b) bytes per width w = 1..31: its blocks as a w x m_w uint32 LE matrix

Row t holding ids ``x_0 < x_1 < ... < x_{k-1}`` contributes the values ``x_0, x_1 - x_0 - 1, ...``;
the values of all rows, back to back and zero-padded to a multiple of 32, form the blocks. Block b
stores its 32 values at ``w_b`` bits each (value j at bits ``[j*w, j*w + w)`` of the block's ``w``
words, least significant first). Blocks are stored grouped by width, and within a width group word
q of every block is contiguous, so the decoder unpacks a whole group with 32 whole-array shifts.
Encoders use the smallest width that holds a block's largest value (0 for an all-zero block).

Rows are *sets*: the encoder requires ascending rows (``E_SCHEMA`` otherwise, so that a caller
carrying ``support_logprobs`` cannot silently lose their alignment; call ``mask.canonical()`` first)
and the decoder always yields ascending rows. Decoding is whole-array numpy; every declared size is
checked against the limits and the real buffer length before anything of that size is allocated,
and bad bytes raise :class:`~sampling_mask.core.errors.SamplingMaskError` only.

>>> import numpy as np
>>> buf = encode_ragged(np.array([5, 1, 2, 7], np.int32), np.array([0, 1, 1, 4], np.int64))
>>> buf.hex(" ")
'01 00 03 03 0d 08 00 00 00 00 00 00 00 00 00 00'
>>> ids, offsets = decode_ragged(buf, 3, 4)
>>> ids.tolist(), offsets.tolist()
([5, 1, 2, 7], [0, 1, 1, 4])
"""

from __future__ import annotations

import functools

import numpy as np

from ..core import layouts
from ..core.checks import is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count, check_output, checked_nbytes

__all__ = ["BLOCK", "LAYOUT", "decode_ragged", "encode_ragged", "encoded_size"]

LAYOUT = "compact"
BLOCK = 32  # values per block
_MAX_BITS = 31  # ids are int32 >= 0, so no value needs more than 31 bits
_LONG = 255  # row_lengths byte meaning "k_t - 255 follows in long_lengths"
_MAX_VARINT_BYTES = 5
_INT32_LIMIT = 1 << 31
_FIELD = "compact"
# Up to this many blocks, (un)packing goes value by value (a fixed number of numpy calls) instead of
# width group by width group (up to 31 x 32 calls, each cheap only on many blocks).
_SMALL_BLOCKS = 512
#: Values per decode window: the decoder unpacks a window's blocks straight into the returned ids,
#: then sums them into ids while they are in cache (4 MiB of int32).
DECODE_BLOCK = 1 << 20
_PIECE = 2040  # blocks unpacked at once; not a power of two (see _unpack_piece)
_SUM_BLOCK = 1 << 17  # values summed at once
_BLOCK_ITEM = np.dtype((np.void, 4 * BLOCK))  # a block's 32 uint32 values as one item


def _bit_length(values: np.ndarray) -> np.ndarray:
    """Bits needed for each non-negative value below 2**53 (0 for 0), as int64."""
    return np.frexp(values.astype(np.float64))[1].astype(np.int64)


def _block_slots(width: int) -> list[tuple[int, int, bool]]:
    """For each of the 32 values of a ``width``-bit block: (word, shift, spills into the next word)."""
    return [((j * width) >> 5, (j * width) & 31, (j * width) % 32 + width > 32) for j in range(BLOCK)]


# ---------------------------------------------------------------------------------------------- encode
def _leb128(values: np.ndarray) -> np.ndarray:
    """Unsigned LEB128 of every value (< 2**35), concatenated, as uint8."""
    if values.size == 0:
        return np.zeros(0, dtype=np.uint8)
    nbytes = np.maximum((_bit_length(values) + 6) // 7, 1)
    column = np.arange(_MAX_VARINT_BYTES, dtype=np.int64)
    groups = (values[:, None] >> (7 * column)) & 0x7F
    more = (column < nbytes[:, None] - 1).astype(np.int64) << 7
    return (groups | more)[column < nbytes[:, None]].astype(np.uint8)


def _row_values(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """int64 [nnz]: each row's first id, then the gaps minus one.

    ``E_RANGE`` for a negative id, ``E_DUPLICATE`` / ``E_SCHEMA`` for a row not strictly ascending.
    """
    ids64 = ids.astype(np.int64)
    lengths = np.diff(offsets)

    def row_of(pos: int) -> int:
        return int(np.searchsorted(offsets, pos, side="right")) - 1

    if ids64.size and int(ids64.min()) < 0:
        raise_at_first(ids64 < 0, ErrorCode.E_RANGE, "id is negative", field="ids", values=ids64, row=row_of)
    values = np.empty_like(ids64)
    if ids64.size:
        values[0] = ids64[0]
        np.subtract(ids64[1:], ids64[:-1] + 1, out=values[1:])
        firsts = offsets[:-1][lengths > 0]
        values[firsts] = ids64[firsts]
        if int(values.min()) < 0:  # the first negative gap names the fault: -1 a repeat, below a descent
            descent = values < -1
            repeat = (values == -1) & (np.cumsum(descent) == 0)
            raise_at_first(
                repeat, ErrorCode.E_DUPLICATE, "id repeated within a row", field="ids", values=ids64, row=row_of
            )
            raise_at_first(
                descent,
                ErrorCode.E_SCHEMA,
                "the compact layout stores rows in ascending order; canonicalize the mask first",
                field="ids",
                values=ids64,
                row=row_of,
            )
    return values


def _blocks(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths int64 [T], blocks uint32 [nb, 32], widths int64 [nb]) of a checked ragged mask."""
    ids_arr = layouts.as_int_array(ids, np.int32, field="ids")
    offsets_arr = layouts.as_int_array(offsets, np.int64, field="offsets")
    layouts.check_offsets(offsets_arr, ids_arr.size)
    values = _row_values(ids_arr, offsets_arr)
    num_blocks = -(-values.size // BLOCK)
    blocks = np.zeros((num_blocks, BLOCK), dtype=np.uint32)
    blocks.reshape(-1)[: values.size] = values
    widths = _bit_length(blocks.max(axis=1)) if num_blocks else np.zeros(0, dtype=np.int64)
    return np.diff(offsets_arr), blocks, widths


def _slot_words(widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Where every value of every block lives in ``words`` (12.2), for small inputs.

    Returns ``(low, shift, high, spills, word_count)``, each ``[nb, 32]``: value j of block b starts at
    bit ``shift`` of word ``low`` and, where ``spills``, continues at the bottom of word ``high``.
    Width-0 blocks point at index ``word_count`` (one past the end: a zero word the callers add).
    """
    counts = np.bincount(widths, minlength=_MAX_BITS + 1)
    group_start = np.concatenate(([0], np.cumsum(counts * np.arange(_MAX_BITS + 1))))[:-1]
    first_block = np.concatenate(([0], np.cumsum(counts)))[:-1]
    order = np.argsort(widths, kind="stable")
    rank = np.empty(widths.size, dtype=np.int64)
    rank[order] = np.arange(widths.size) - first_block[widths[order]]
    bit = np.arange(BLOCK, dtype=np.int64)[None, :] * widths[:, None]
    shift = bit & 31
    low = group_start[widths][:, None] + (bit >> 5) * counts[widths][:, None] + rank[:, None]
    word_count = int(np.dot(counts, np.arange(_MAX_BITS + 1)))
    low[widths == 0] = word_count
    spills = shift + widths[:, None] > 32
    high = np.where(spills, low + counts[widths][:, None], word_count)
    return low, shift, high, spills, word_count


def _pack_small(blocks: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The ``words`` section as uint32, value by value (no loop over widths): for few blocks."""
    low, shift, high, spills, word_count = _slot_words(widths)
    values = blocks.astype(np.uint64)
    words = np.zeros(word_count + 1, dtype=np.uint64)
    np.bitwise_or.at(words, low, (values << shift.astype(np.uint64)) & np.uint64(0xFFFFFFFF))
    np.bitwise_or.at(words, high[spills], values[spills] >> (32 - shift[spills]).astype(np.uint64))
    return words[:word_count].astype(np.uint32)


def _pack_group(blocks: np.ndarray, width: int) -> np.ndarray:
    """uint32 [width, m]: word q of each of the m blocks (rows of ``blocks``), ``width`` bits a value."""
    words = np.zeros((width, blocks.shape[0]), dtype=np.uint32)
    for j, (q, shift, spills) in enumerate(_block_slots(width)):
        column = blocks[:, j]
        words[q] |= column << np.uint32(shift)  # bits past 32 fall off here and spill below
        if spills:
            words[q + 1] |= column >> np.uint32(32 - shift)
    return words


def encode_ragged(ids: np.ndarray, offsets: np.ndarray) -> bytes:
    """The compact bytes of ascending ragged rows (``ids`` int32 [nnz], ``offsets`` int64 [T+1]).

    ``E_OFFSETS`` for offsets that do not tile ``ids``; ``E_RANGE`` for a negative id;
    ``E_DUPLICATE`` for a repeated id; ``E_SCHEMA`` for a row that is not ascending.
    """
    lengths, blocks, widths = _blocks(ids, offsets)
    parts = [
        np.minimum(lengths, _LONG).astype(np.uint8).tobytes(),
        _leb128(lengths[lengths >= _LONG] - _LONG).tobytes(),
        widths.astype(np.uint8).tobytes(),
    ]
    if widths.size <= _SMALL_BLOCKS:
        parts.append(_pack_small(blocks, widths).astype("<u4").tobytes())
        return b"".join(parts)
    order = np.argsort(widths, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(widths, minlength=_MAX_BITS + 1))))
    for width in range(1, _MAX_BITS + 1):
        group = order[bounds[width] : bounds[width + 1]]
        if group.size:
            parts.append(_pack_group(blocks[group], width).astype("<u4").tobytes())
    return b"".join(parts)


def encoded_size(ids: np.ndarray, offsets: np.ndarray) -> int:
    """Length in bytes of :func:`encode_ragged`'s output, without building it."""
    lengths, _, widths = _blocks(ids, offsets)
    long_lengths = lengths[lengths >= _LONG] - _LONG
    varint_bytes = int(np.maximum((_bit_length(long_lengths) + 6) // 7, 1).sum()) if long_lengths.size else 0
    return lengths.size + varint_bytes + widths.size + 4 * int(widths.sum())


# ---------------------------------------------------------------------------------------------- decode
def _error(code: ErrorCode, message: str, *, field: str = _FIELD, **context: int) -> SamplingMaskError:
    return SamplingMaskError(code, message, field=field, **context)  # type: ignore[arg-type]


def _read_long_lengths(data: np.ndarray, start: int, count: int) -> tuple[np.ndarray, int]:
    """``count`` LEB128 varints from ``data[start:]``: (values int64, position after the last)."""
    if count == 0:
        return np.zeros(0, dtype=np.int64), start
    field = "compact.long_lengths"
    region = data[start : start + _MAX_VARINT_BYTES * count + 1]  # + 1: see a varint that is too long
    last_bytes = np.flatnonzero(region < 0x80)[:count]
    if last_bytes.size < count:
        raise _error(
            ErrorCode.E_BYTES, f"{last_bytes.size} complete varints, the row lengths announce {count}", field=field
        )
    firsts = np.empty(count, dtype=np.int64)
    firsts[0] = 0
    firsts[1:] = last_bytes[:-1] + 1
    sizes = last_bytes - firsts + 1
    if int(sizes.max()) > _MAX_VARINT_BYTES:
        which = int(np.argmax(sizes > _MAX_VARINT_BYTES))
        raise _error(ErrorCode.E_ENCODING, f"varint {which} is longer than {_MAX_VARINT_BYTES} bytes", field=field)
    overlong = (region[last_bytes] == 0) & (sizes > 1)
    if overlong.any():
        raise _error(ErrorCode.E_ENCODING, f"varint {int(np.argmax(overlong))} is not minimal", field=field)
    end = int(last_bytes[-1]) + 1
    payload = (region[:end] & 0x7F).astype(np.int64)
    column = np.arange(end, dtype=np.int64) - np.repeat(firsts, sizes)
    return np.add.reduceat(payload << (7 * column), firsts), start + end


def _as_words(section: np.ndarray) -> np.ndarray:
    """The bytes of ``section`` as aligned little-endian uint32 (a view when already aligned)."""
    if section.ctypes.data % 4 == 0 and np.dtype("<u4") == np.dtype(np.uint32):
        return section.view(np.uint32)
    return np.frombuffer(section.tobytes(), dtype="<u4").astype(np.uint32)


def _unpack_small(words: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """uint32 [nb * 32]: every block's values, value by value (no loop over widths): for few blocks."""
    low, shift, high, spills, word_count = _slot_words(widths.astype(np.int64))
    padded = np.zeros(word_count + 1, dtype=np.uint64)
    padded[:word_count] = words
    values = padded[low] >> shift.astype(np.uint64)
    values |= (padded[high] << (32 - shift).astype(np.uint64)) * spills
    values &= (np.uint64(1) << widths.astype(np.uint64))[:, None] - np.uint64(1)
    return values.astype(np.uint32).reshape(-1)


@functools.cache
def _slot_arrays(width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.uint32]:
    """For the 32 values of a ``width``-bit block: (word, next word, shift, 32 - shift, value mask)."""
    slots = np.array(_block_slots(width), dtype=np.intp)
    shift = slots[:, 1:2].astype(np.uint32)
    return slots[:, 0], slots[:, 0] + 1, shift, np.uint32(32) - shift, np.uint32((1 << width) - 1)


def _decode_ids(
    values: np.ndarray, section: np.ndarray, widths: np.ndarray, offsets: np.ndarray, checked: bool
) -> None:
    """ids into ``values`` (uint32 [nnz]) from the ``words`` section (uint8, any alignment), a window
    of :data:`DECODE_BLOCK` values at a time: the window's blocks are unpacked width by width
    (:func:`_unpack_piece`) and scattered to their place, then summed into ids (:func:`_sum_rows`)
    while in cache. ``checked``: sum in int64 and check the range. ``E_ENCODING`` when the last
    block holds a non-zero value past ``nnz``. No temporary is larger than a window's block order.
    """
    nnz = values.size
    full = nnz // BLOCK  # blocks that lie wholly inside ``values``
    blocks = values[: full * BLOCK].reshape(full, BLOCK)
    block_items = blocks.reshape(-1).view(_BLOCK_ITEM)  # one item per block: a fast scatter
    last = np.zeros(BLOCK, dtype=np.uint32)  # the final block, when it is partial
    counts = sum(  # in steps: bincount makes an intp copy of its input
        (np.bincount(widths[i : i + _SUM_BLOCK], minlength=_MAX_BITS + 1) for i in range(0, widths.size, _SUM_BLOCK)),
        np.zeros(_MAX_BITS + 1, dtype=np.intp),
    )
    group_words = np.concatenate(([0], np.cumsum(counts * np.arange(_MAX_BITS + 1)))).tolist()
    seen = [0] * (_MAX_BITS + 1)  # blocks of each width in the windows before
    window = max(DECODE_BLOCK // BLOCK, 1)
    # Scratch of the fixed sizes, or about 1/32 of the output each for masks under 1M ids, but not
    # below 100 kB (odd piece sizes: see _unpack_piece).
    piece = min(window, _PIECE, int(counts[1:].max()), max(widths.size >> 5, 255) | 1)
    scratch = [np.empty(rows * piece, dtype=np.uint32) for rows in (_MAX_BITS, BLOCK, BLOCK)]
    sums = np.empty(min(_SUM_BLOCK, DECODE_BLOCK, max(nnz >> 5, 16384)), dtype=np.int64 if checked else np.int32)
    for b0 in range(0, widths.size, window):
        window_widths = widths[b0 : b0 + window]
        order = np.argsort(window_widths, kind="stable")
        order += b0
        window_counts = np.bincount(window_widths, minlength=_MAX_BITS + 1)
        ends = np.cumsum(window_counts).tolist()
        for width in np.flatnonzero(window_counts).tolist():
            group = order[ends[width - 1] if width else 0 : ends[width]]
            rank, seen[width] = seen[width], seen[width] + group.size
            if width == 0:
                blocks[group[group < full]] = 0
                continue
            words = section[4 * group_words[width] : 4 * group_words[width + 1]].reshape(width, -1)
            for r0 in range(0, group.size, piece):
                r1 = min(r0 + piece, group.size)
                block_major = _unpack_piece(words[:, 4 * (rank + r0) : 4 * (rank + r1)], width, scratch)
                part = group[r0:r1]
                if int(part[-1]) >= full:  # only the final block can be partial, and it ends its group
                    last[:] = block_major[-1]
                    part, block_major = part[:-1], block_major[:-1]
                np.put(block_items, part, block_major.reshape(-1).view(_BLOCK_ITEM))
        stop = min(BLOCK * (b0 + window), nnz)
        if stop == nnz and nnz > full * BLOCK:
            values[full * BLOCK :] = last[: nnz - full * BLOCK]
            _check_padding(last[nnz - full * BLOCK :])
        _sum_rows(values.view(np.int32), offsets, BLOCK * b0, stop, sums)


def _unpack_piece(words: np.ndarray, width: int, scratch: list[np.ndarray]) -> np.ndarray:
    """uint32 [n, 32], a view of ``scratch``: the values of n blocks of width ``width`` whose words
    are ``words`` (uint8 [width, 4 * n], any alignment: row q holds word q of each block).

    A fixed number of numpy calls on preallocated scratch (a fresh allocation this size costs more
    than the work): copy the words to aligned memory; gather the word that holds each value slot's
    low bits and shift; the same for the word its high bits spill into; or; mask while transposing
    to block-major. Scratch rows a multiple of 1 KiB apart make the transpose thrash the cache, 10x
    slower: hence ``_PIECE`` = 2040, not 2048.
    """
    n = words.shape[1] // 4
    word, spill_word, shift, spill_shift, low_bits = _slot_arrays(width)
    matrix = scratch[0][: width * n].reshape(width, n)
    np.copyto(matrix.view(np.uint8), words)
    if np.dtype("<u4") != np.dtype(np.uint32):  # pragma: no cover - big-endian hosts only
        matrix.byteswap(inplace=True)
    low = scratch[1][: BLOCK * n].reshape(BLOCK, n)
    high = scratch[2][: BLOCK * n].reshape(BLOCK, n)
    np.take(matrix, word, axis=0, out=low, mode="clip")  # mode "raise" would buffer ``out``
    np.right_shift(low, shift, out=low)
    np.take(matrix, spill_word, axis=0, out=high, mode="clip")  # clipped only where nothing spills
    np.left_shift(high, spill_shift, out=high)  # by 32 (no spill): numpy gives 0
    np.bitwise_or(low, high, out=low)
    block_major = scratch[2][: BLOCK * n].reshape(n, BLOCK)
    np.bitwise_and(low.T, low_bits, out=block_major)
    return block_major


def decode_ragged(
    buf: bytes | bytearray | memoryview,
    num_rows: int,
    nnz: int,
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32 [nnz], offsets int64 [num_rows + 1]) from compact bytes; every row ascending.

    ``E_LIMIT`` for sizes past ``limits``; ``E_BYTES`` for a buffer shorter or longer than its
    sections announce; ``E_OFFSETS`` when the row lengths do not sum to ``nnz``; ``E_ENCODING`` for
    a malformed varint, a width over 31 or non-zero padding; ``E_RANGE`` for an id past int32.
    Values are unpacked straight into the returned ids and summed there, a window of
    :data:`DECODE_BLOCK` values at a time: temporaries are a few hundred KiB (1/16 of the output
    for small masks), whatever the size of the mask.
    """
    try:
        data = np.frombuffer(buf, dtype=np.uint8)
    except (TypeError, ValueError) as exc:
        raise _error(ErrorCode.E_ENCODING, f"compact data must be bytes ({exc})") from None
    for name, count in (("num_rows", num_rows), ("nnz", nnz)):
        if not is_int(count):
            raise _error(ErrorCode.E_SCHEMA, f"{name} must be an integer", field=name)
    num_rows = check_count(num_rows, limits.max_rows, "row count", field="num_rows")
    nnz = check_count(nnz, limits.max_nnz, "id count", field="nnz")
    check_output(limits, num_rows, nnz, field=_FIELD)
    if data.size < num_rows:
        raise _error(
            ErrorCode.E_BYTES, f"{data.size} bytes cannot hold {num_rows} row lengths", field="compact.row_lengths"
        )
    offsets, widest, pos = _read_offsets(data, num_rows, limits)
    if int(offsets[-1]) != nnz:
        raise _error(
            ErrorCode.E_OFFSETS,
            f"row lengths sum to {int(offsets[-1])}, expected nnz = {nnz}",
            field="compact.row_lengths",
        )
    num_blocks = -(-nnz // BLOCK)
    widths = data[pos : pos + num_blocks]
    if widths.size < num_blocks:
        raise _error(
            ErrorCode.E_BYTES, f"{widths.size} block widths, expected {num_blocks}", field="compact.block_widths"
        )
    widest_block = int(widths.max()) if num_blocks else 0
    if widest_block > _MAX_BITS:
        block = int(np.argmax(widths > _MAX_BITS))
        raise _error(
            ErrorCode.E_ENCODING,
            f"block {block} has width {int(widths[block])} > {_MAX_BITS}",
            field="compact.block_widths",
        )
    word_count = int(widths.sum(dtype=np.int64))
    section = data[pos + num_blocks :]
    if section.size != 4 * word_count:
        raise _error(
            ErrorCode.E_BYTES,
            f"words section is {section.size} bytes, the block widths announce {4 * word_count}",
            field="compact.words",
        )
    if nnz == 0:
        return np.zeros(0, dtype=np.int32), offsets
    checked_nbytes((num_blocks, BLOCK), 4, limits, field="ids")
    ids = np.empty(nnz, dtype=np.int32)
    values = ids.view(np.uint32)
    # Every value is below 2**widest_block, so no id exceeds k * 2**widest_block - 1: when that fits
    # int32 the modular int32 sums are exact; otherwise sum in int64 and check.
    checked = widest > _INT32_LIMIT >> widest_block
    if num_blocks > _SMALL_BLOCKS:
        _decode_ids(values, section, widths, offsets, checked)
        return ids, offsets
    unpacked = _unpack_small(_as_words(section), widths)
    _check_padding(unpacked[nnz:])
    values[:] = unpacked[:nnz]
    _sum_rows(ids, offsets, 0, nnz, np.empty(min(_SUM_BLOCK, nnz), dtype=np.int64 if checked else np.int32))
    return ids, offsets


def _read_offsets(data: np.ndarray, num_rows: int, limits: Limits) -> tuple[np.ndarray, int, int]:
    """(offsets int64 [num_rows + 1], the widest row, position after ``long_lengths``) from the
    ``row_lengths`` and ``long_lengths`` sections; ``E_LIMIT`` for a row wider than ``limits``."""
    row_bytes = data[:num_rows]
    long_rows = np.concatenate(
        [np.zeros(0, dtype=np.int64)]
        + [np.flatnonzero(row_bytes[r : r + _SUM_BLOCK] == _LONG) + r for r in range(0, num_rows, _SUM_BLOCK)]
    )
    long_lengths, pos = _read_long_lengths(data, num_rows, long_rows.size)
    long_lengths += _LONG
    widest = int(long_lengths.max()) if long_lengths.size else int(row_bytes.max()) if num_rows else 0
    if widest > limits.max_width:
        row = int(long_rows[np.argmax(long_lengths)]) if long_lengths.size else int(np.argmax(row_bytes))
        raise _error(ErrorCode.E_LIMIT, f"row width {widest} exceeds the limit {limits.max_width}", row=row)
    offsets = np.empty(num_rows + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = row_bytes  # widen first: a cumsum that casts as it goes runs 20-30x slower
    offsets[long_rows + 1] = long_lengths
    np.cumsum(offsets[1:], out=offsets[1:])
    return offsets, widest, pos


def _check_padding(values: np.ndarray) -> None:
    if values.any():
        raise _error(ErrorCode.E_ENCODING, "padding values after the last id must be zero", field="compact.words")


def _sum_rows(values: np.ndarray, offsets: np.ndarray, start: int, stop: int, sums: np.ndarray) -> None:
    """ids from ``values[start:stop]`` (int32 holding uint32 values), in place, ``sums.size`` values
    at a time: a row's first id is its first value, each later id the previous one plus its value
    plus one.

    ``value + 1`` goes to the scratch ``sums``, then two cumulative sums of it into ``values`` (a
    ``cumsum`` onto its own input runs 3-4x slower): the first gives the running total before each
    row, which the second takes away at the row's first value, so that it restarts there. A range that begins inside a row
    continues from the id before it. With int64 ``sums``, ``E_RANGE`` (naming the row) for an id
    past int32; with int32 ``sums`` the caller knows that the modular sums are exact (numpy's
    integer arithmetic wraps, and its int32 ``cumsum`` runs 1.5x faster than the uint32 one).
    """
    dtype = sums.dtype.type
    checked = dtype is np.int64
    wide = np.empty(sums.size if checked else 0, dtype=dtype)  # the ids, before the range check
    for a in range(start, stop, sums.size):
        b = min(a + sums.size, stop)
        starts = offsets[np.searchsorted(offsets, a) : np.searchsorted(offsets, b)] - a
        keep = np.empty(starts.size, dtype=bool)  # each non-empty row's start once (empty rows repeat it)
        keep[:1] = True
        np.not_equal(starts[1:], starts[:-1], out=keep[1:])
        firsts = starts[keep]
        carry = 0  # the first id is the first value plus ``carry``
        if not firsts.size or firsts[0] != 0:
            firsts = np.concatenate(([0], firsts))
            carry = int(values[a - 1]) + 1
        step = sums[: b - a]  # value + 1
        np.add(values[a:b].view(np.uint32) if checked else values[a:b], dtype(1), out=step)
        running = wide[: b - a] if checked else values[a:b]
        np.cumsum(step, out=running)
        before = np.empty(firsts.size, dtype=dtype)  # each run's total before it, plus one
        before[0] = 1 - carry
        np.take(running, firsts[1:] - 1, out=before[1:], mode="clip")
        before[1:] += dtype(1)
        restart = before.copy()
        restart[1:] -= before[:-1]
        step[firsts] -= restart
        np.cumsum(step, out=running)
        if checked:
            if int(running.max()) >= _INT32_LIMIT:
                at = int(np.argmax(running >= _INT32_LIMIT))
                row = int(np.searchsorted(offsets, a + at, side="right") - 1)
                raise _error(ErrorCode.E_RANGE, "id does not fit int32", row=row, value=int(running[at]))
            values[a:b] = running
