# sampling-mask 0.1.0, Apache-2.0 (see LICENSE): sampling_mask/codecs/compact.py, vendorable (README: Vendoring)
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

import numpy as np

from ..core import layouts
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
    if ids64.size and int(ids64.min()) < 0:
        pos = int(np.flatnonzero(ids64 < 0)[0])
        row = int(np.searchsorted(offsets, pos, side="right") - 1)
        raise SamplingMaskError(ErrorCode.E_RANGE, "id is negative", field="ids", row=row, value=int(ids64[pos]))
    values = np.empty_like(ids64)
    if ids64.size:
        values[0] = ids64[0]
        np.subtract(ids64[1:], ids64[:-1] + 1, out=values[1:])
        firsts = offsets[:-1][lengths > 0]
        values[firsts] = ids64[firsts]
        if int(values.min()) < 0:
            pos = int(np.flatnonzero(values < 0)[0])
            row = int(np.searchsorted(offsets, pos, side="right") - 1)
            if values[pos] == -1:
                raise SamplingMaskError(
                    ErrorCode.E_DUPLICATE, "id repeated within a row", field="ids", row=row, value=int(ids64[pos])
                )
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "the compact layout stores rows in ascending order; canonicalize the mask first",
                field="ids",
                row=row,
                value=int(ids64[pos]),
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
    """:func:`_unpack_blocks` value by value (no loop over widths): for few blocks."""
    low, shift, high, spills, word_count = _slot_words(widths.astype(np.int64))
    padded = np.zeros(word_count + 1, dtype=np.uint64)
    padded[:word_count] = words
    values = padded[low] >> shift.astype(np.uint64)
    values |= (padded[high] << (32 - shift).astype(np.uint64)) * spills
    values &= (np.uint64(1) << widths.astype(np.uint64))[:, None] - np.uint64(1)
    return values.astype(np.uint32).reshape(-1)


def _unpack_blocks(words: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """uint32 [nb * 32]: every block's values, in block order. ``words`` holds exactly the groups."""
    num_blocks = widths.size
    if num_blocks <= _SMALL_BLOCKS:
        return _unpack_small(words, widths)
    out = np.zeros((num_blocks, BLOCK), dtype=np.uint32)
    rows = out.view(np.dtype((np.void, 4 * BLOCK))).reshape(num_blocks)  # one item per block: fast scatter
    counts = np.bincount(widths, minlength=_MAX_BITS + 1)
    order = np.argsort(widths, kind="stable")
    first_block = np.concatenate(([0], np.cumsum(counts)))
    first_word = 0
    for width in np.flatnonzero(counts[1:]).tolist():
        width += 1
        group = order[first_block[width] : first_block[width + 1]]
        size = group.size
        matrix = words[first_word : first_word + width * size].reshape(width, size)
        first_word += width * size
        values = np.empty((BLOCK, size), dtype=np.uint32)
        spill = np.empty(size, dtype=np.uint32)
        low_bits = np.uint32((1 << width) - 1)
        for j, (q, shift, spills) in enumerate(_block_slots(width)):
            column = values[j]
            np.right_shift(matrix[q], np.uint32(shift), out=column)
            if spills:
                np.left_shift(matrix[q + 1], np.uint32(32 - shift), out=spill)
                column |= spill
            if shift + width != 32:
                column &= low_bits
        rows[group] = np.ascontiguousarray(values.T).view(rows.dtype).reshape(size)
    return out.reshape(-1)


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
    """
    try:
        data = np.frombuffer(buf, dtype=np.uint8)
    except (TypeError, ValueError) as exc:
        raise _error(ErrorCode.E_ENCODING, f"compact data must be bytes ({exc})") from None
    for name, count in (("num_rows", num_rows), ("nnz", nnz)):
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
            raise _error(ErrorCode.E_SCHEMA, f"{name} must be an integer", field=name)
    num_rows = check_count(num_rows, limits.max_rows, "row count", field="num_rows")
    nnz = check_count(nnz, limits.max_nnz, "id count", field="nnz")
    check_output(limits, num_rows, nnz, field=_FIELD)
    if data.size < num_rows:
        raise _error(
            ErrorCode.E_BYTES, f"{data.size} bytes cannot hold {num_rows} row lengths", field="compact.row_lengths"
        )
    lengths = data[:num_rows].astype(np.int64)
    is_long = lengths == _LONG
    long_lengths, pos = _read_long_lengths(data, num_rows, int(np.count_nonzero(is_long)))
    if long_lengths.size:
        lengths[np.flatnonzero(is_long)] = long_lengths + _LONG
    widest = int(lengths.max()) if num_rows else 0
    if widest > limits.max_width:
        row = int(np.argmax(lengths))
        raise _error(ErrorCode.E_LIMIT, f"row width {widest} exceeds the limit {limits.max_width}", row=row)
    offsets = layouts.counts_to_offsets(lengths, field="compact.row_lengths")
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
    if num_blocks and int(widths.max()) > _MAX_BITS:
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
    checked_nbytes((num_blocks, BLOCK, 2), 4, limits, field="ids")
    values = _unpack_blocks(_as_words(section), widths)
    if values[nnz:].any():
        raise _error(ErrorCode.E_ENCODING, "padding values after the last id must be zero", field="compact.words")
    values = values[:nnz]
    firsts = offsets[:-1][lengths > 0]
    # Every value is below 2**widest_block, so no id exceeds k * 2**widest_block - 1: when that fits
    # int32 the modular uint32 sums are exact; otherwise sum in int64 and check.
    if widest <= _INT32_LIMIT >> int(widths.max()):
        return _prefix_sums_per_row(values, firsts, np.uint32).view(np.int32), offsets
    ids64 = _prefix_sums_per_row(values.astype(np.int64), firsts, np.int64)
    if int(ids64.max()) >= _INT32_LIMIT:
        at = int(np.argmax(ids64 >= _INT32_LIMIT))
        row = int(np.searchsorted(offsets, at, side="right") - 1)
        raise _error(ErrorCode.E_RANGE, "id does not fit int32", row=row, value=int(ids64[at]))
    return ids64.astype(np.int32), offsets


def _prefix_sums_per_row(values: np.ndarray, firsts: np.ndarray, dtype: type) -> np.ndarray:
    """ids from values: a running sum of ``value + 1`` restarting at every row's first id, minus one.

    Works in place on ``values`` (``firsts``: position of every non-empty row's first value). Two
    flat cumulative sums: the first gives each row's total (its last id + 1), which is then taken
    away at the next row's first value so that the second sum restarts there.
    """
    values += dtype(1)
    running: np.ndarray = np.cumsum(values, dtype=dtype)
    row_ends = running[firsts[1:] - 1]
    restart: np.ndarray = np.empty(firsts.size, dtype=dtype)
    restart[0] = 1  # the first row only undoes its +1
    if row_ends.size:
        restart[1] = row_ends[0]
        np.subtract(row_ends[1:], row_ends[:-1], out=restart[2:])
    values[firsts] -= restart
    return np.cumsum(values, dtype=dtype, out=running)
