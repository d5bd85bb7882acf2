"""The one reader of Arrow IPC files, IPC streams and Parquet files: every read in the package goes
through it (:mod:`.arrow`'s ``load`` / ``decode`` / ``iter_masks`` / ``read_table`` /
``mask_from_table``, :mod:`.dataset`, :mod:`sampling_mask.data.torch_data`, :mod:`.safetensors`'s header,
and the command line through those). No other module opens these formats itself.

Invariants:

* **Regular files only.** A path is opened non-blocking and checked on the open descriptor: a FIFO,
  device, socket or directory is ``E_ENCODING`` at once (nothing blocks, nothing is read), an empty
  file too; then the file is memory-mapped read-only. A symlink loop is the usual ``OSError``.
* **Bounded before allocated.** What reading each record batch / row group may allocate (its
  *cost*, :mod:`.ipc_bounds` / :mod:`._parquet_bounds`, from the metadata alone, a fixed part per
  batch included) is checked against ``limits.max_bytes`` before pyarrow reads it, and so are the
  rows each declares (:attr:`BatchReader.rows` comes from the metadata, never from reading a batch).
  A batch whose rows differ from what the metadata declared is ``E_ENCODING``.
* **Validated before handed out.** A batch's bytes leave this module only after its structure
  (``RecordBatch.validate``), the mask columns (types exact, no nulls, offsets inside their children
  and monotonic, companions aligned, then the mask's own checks) and every other column in full
  (``validate(full=True)``: bad offsets or UTF-8 in a user column are ``E_ENCODING`` naming the
  column and the table row) have been checked. Without ``validate`` the mask's O(nnz) content checks
  are skipped, but a column whose values are handed out (:func:`user_values`) is still checked in full.
* pyarrow exceptions never escape (:func:`arrow_errors`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import mmap
import os
import re
import stat
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import Limits, check_count, check_output, output_nbytes, remaining
from ..core.model import COMPANIONS, SamplingMask, concat
from . import _parquet_bounds, ipc_bounds
from ._common import (
    SPEC_MAJOR,
    check_id_order,
    check_version,
    metadata_to_json,
    metadata_value_from_json,
    parse_id_order,
)
from .walk import file_kind

__all__ = [
    "column_names",
    "COMPACT_COLUMN",
    "COMPACT_NNZ_COLUMN",
    "COMPACT_ROWS_COLUMN",
    "MASK_COLUMN",
    "MASK_COLUMNS",
    "METADATA_PREFIX",
    "PREFIX",
    "RESERVED_COLUMNS",
    "BatchReader",
    "Header",
    "MappedFile",
    "arrow_errors",
    "check_columns",
    "column_of",
    "empty_mask",
    "header_metadata",
    "join",
    "mask_from_batch",
    "read_header",
    "read_schema",
    "user_values",
]

MASK_COLUMN = "sampling_mask"
COMPACT_COLUMN = "sampling_mask_compact"
COMPACT_ROWS_COLUMN = "sampling_mask_num_rows"
COMPACT_NNZ_COLUMN = "sampling_mask_nnz"
#: The columns that hold the mask itself (either layout).
MASK_COLUMNS = (MASK_COLUMN, COMPACT_COLUMN, COMPACT_ROWS_COLUMN, COMPACT_NNZ_COLUMN)
RESERVED_COLUMNS = frozenset({*MASK_COLUMNS, *COMPANIONS})
PREFIX = "sampling_mask."
METADATA_PREFIX = PREFIX + "metadata."
_DIGITS = re.compile(r"0|[1-9][0-9]{0,29}")  # more digits than any limit: E_LIMIT / E_VERSION follow
_LEAF_TYPES = {
    MASK_COLUMN: "int32",
    "sampled_token_ids": "int32",
    "sampled_logprobs": "float",
    "temperature": "float",
    "support_logprobs": "float",
}
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)


@contextlib.contextmanager
def arrow_errors(context: str, *, batches: int | None = None) -> Iterator[None]:
    """Turn pyarrow / I/O failures into ``E_ENCODING`` (``E_LIMIT`` for allocation failures)."""
    import pyarrow as pa

    where = f" after {batches} complete record batches" if batches is not None else ""
    try:
        yield
    except SamplingMaskError as exc:
        if batches is None:
            raise
        raise SamplingMaskError(
            exc.code, f"{exc.message}{where}", row=exc.row, segment=exc.segment, field=exc.field, value=exc.value
        ) from None
    except MemoryError as exc:
        raise SamplingMaskError(ErrorCode.E_LIMIT, f"{context}: allocation failed{where}: {exc}") from None
    except (pa.ArrowException, OSError, EOFError, ValueError) as exc:  # ValueError: e.g. bad UTF-8 names
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"{context}: {exc}{where}"[:500], value=batches) from None


# ---------------------------------------------------------------------------------------------- schema
@dataclasses.dataclass(frozen=True)
class Header:
    """What the schema metadata declares."""

    vocab_size: int | None
    id_order: str
    compact: bool
    metadata: dict[str, Any]


def _decode_meta(raw: bytes, key: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "schema metadata is not UTF-8", field=key) from None


def _parse_int(text: str, key: str) -> int:
    if _DIGITS.fullmatch(text) is None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a decimal integer", field=key, value=text[:80])
    return int(text)


def read_header(schema_metadata: Mapping[bytes, bytes] | None, limits: Limits) -> Header:
    """The header that schema metadata (``schema.metadata``: bytes to bytes) declares; ``E_SCHEMA`` /
    ``E_VERSION`` / ``E_LIMIT`` / ``E_ENCODING`` for a missing version, bad values or bad UTF-8."""
    raw = schema_metadata or {}
    values: dict[str, str] = {}
    for key_bytes, value_bytes in raw.items():
        if key_bytes.startswith(PREFIX.encode()):
            key = _decode_meta(key_bytes, "schema metadata")
            values[key] = _decode_meta(value_bytes, key)
    version_key = PREFIX + "version"
    if version_key not in values:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "schema metadata lacks the version", field=version_key)
    check_version(_parse_int(values[version_key], version_key), field=version_key)
    vocab_size = None
    if PREFIX + "vocab_size" in values:
        vocab_size = _parse_int(values[PREFIX + "vocab_size"], PREFIX + "vocab_size")
        check_count(vocab_size, limits.max_vocab, "vocab_size", field="vocab_size")
    id_order = parse_id_order(values.get(PREFIX + "id_order"), field=PREFIX + "id_order")
    layout = values.get(PREFIX + "layout", "list")
    if layout not in ("list", "compact"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "layout must be list or compact", field=PREFIX + "layout")
    metadata: dict[str, Any] = {}
    for key, text in values.items():
        if key.startswith(METADATA_PREFIX):
            from . import json as json_codec

            name = key[len(METADATA_PREFIX) :]
            parsed = json_codec.parse(text, limits=limits)
            metadata[name] = metadata_value_from_json(parsed, field=f"metadata.{name}")
    return Header(vocab_size, id_order, layout == "compact", metadata)


def header_metadata(mask: SamplingMask, *, compact: bool, id_order: str) -> dict[str, str]:
    """The schema metadata that declares ``mask``'s header (the inverse of :func:`read_header`)."""
    out = {PREFIX + "version": str(SPEC_MAJOR)}
    if mask.vocab_size is not None:
        out[PREFIX + "vocab_size"] = str(mask.vocab_size)
    out[PREFIX + "id_order"] = id_order
    out[PREFIX + "layout"] = "compact" if compact else "list"
    for key, value in metadata_to_json(mask.metadata).items():
        out[METADATA_PREFIX + key] = json.dumps(value, allow_nan=False)
    return out


# ---------------------------------------------------------------------------------------------- read
def _leaf_ok(arrow_type: Any, expected: str) -> bool:
    import pyarrow as pa

    return arrow_type == (pa.int32() if expected == "int32" else pa.float32())


def _levels(arrow_type: Any, nested: bool, name: str) -> tuple[bool, ...]:
    """Check a column type: ``(large_)list<leaf>`` or ``(large_)list<(large_)list<leaf>>``; return which levels are large."""
    import pyarrow as pa

    larges = []
    current = arrow_type
    for _ in range(2 if nested else 1):
        if pa.types.is_list(current):
            larges.append(False)
        elif pa.types.is_large_list(current):
            larges.append(True)
        else:
            leaf = _LEAF_TYPES[name]
            expected = f"list<list<{leaf}>>" if nested else f"list<{leaf}>"
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"column must be {expected}, got {arrow_type}", field=name)
        current = current.value_type
    if not _leaf_ok(current, _LEAF_TYPES[name]):
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, f"values must be {_LEAF_TYPES[name]}, got {current}", field=name, value=str(current)
        )
    return tuple(larges)


def _offsets_view(list_array: Any, *, code: ErrorCode, field: str, monotonic: bool = True) -> tuple[np.ndarray, Any]:
    """Checked offsets (rebased to 0, int32 for ``list``, int64 for ``large_list``) of a list array and
    its child sliced to what they cover.

    The end points are always checked (O(1)); ``monotonic`` adds the O(rows) scan (validated reads).
    Offsets that start at 0 (every column we write) are returned as they are: no copy, O(1).
    """
    child = list_array.values
    if len(list_array) == 0:  # Arrow lets a zero-length list carry an empty offsets buffer
        return np.zeros(1, np.int32), child.slice(0, 0)
    raw = list_array.offsets.to_numpy(zero_copy_only=True)
    if raw.size == 0:  # pragma: no cover - a validated array of length n has n + 1 offsets
        raise SamplingMaskError(code, "missing offsets", field=field)
    i = layouts.steps_scan(raw)[0] if monotonic else None
    if i is not None:
        where = {"segment": i} if code == ErrorCode.E_SEGMENTS else {"row": i}
        raise SamplingMaskError(code, "offsets decrease", field=field, value=int(raw[i + 1]), **where)  # type: ignore[arg-type]
    first, last = int(raw[0]), int(raw[-1])
    if first < 0 or last > len(child):
        raise SamplingMaskError(code, f"offsets run outside the child array of {len(child)}", field=field, value=last)
    # Checked offsets lie in [first, last]: rebased in their own dtype they cannot wrap.
    rebased = np.subtract(raw, first, dtype=raw.dtype if monotonic else np.int64) if first else raw
    return rebased, child.slice(first, last - first)


def _no_nulls(array: Any, field: str) -> None:
    if array.null_count:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "nulls are not allowed", field=field, value=array.null_count)


def _values(array: Any, field: str) -> np.ndarray:
    _no_nulls(array, field)
    return array.to_numpy(zero_copy_only=True)  # type: ignore[no-any-return]


def column_of(batch: Any, name: str) -> Any:
    """Column ``name`` of a record batch or table, or None; ``E_SCHEMA`` for a duplicate name or a
    type pyarrow has no array class for (a forged type id, e.g. INTERVAL_MONTHS)."""
    index = batch.schema.get_all_field_indices(name)
    if len(index) > 1:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "duplicate column", field=name)
    if not index:
        return None
    try:
        return batch.column(index[0])
    except KeyError:  # pyarrow's get_array_class_from_type
        kind = str(batch.schema.field(index[0]).type)[:80]
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unsupported Arrow type {kind}", field=name) from None


def _compact_column(batch: Any, cu_rows: Any, limits: Limits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, offsets, cu_seqlens) from the compact columns, decoding one blob per segment."""
    import pyarrow as pa

    from . import compact

    blobs, rows, nnzs = cu_rows
    if not (pa.types.is_binary(blobs.type) or pa.types.is_large_binary(blobs.type)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "must be binary", field=COMPACT_COLUMN)
    for column, name in ((rows, COMPACT_ROWS_COLUMN), (nnzs, COMPACT_NNZ_COLUMN)):
        if column.type != pa.int64():
            raise SamplingMaskError(ErrorCode.E_DTYPE, "must be int64", field=name)
    for column, name in ((blobs, COMPACT_COLUMN), (rows, COMPACT_ROWS_COLUMN), (nnzs, COMPACT_NNZ_COLUMN)):
        _no_nulls(column, name)
    # Reading one blob follows the binary offsets: they must be checked first (a forged offset
    # would read outside the buffer; found by fuzz/regressions/arrow/c87cf9c61cfee263.bin).
    try:
        blobs.validate(full=True)
    except pa.ArrowException as exc:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, f"invalid Arrow data: {exc}"[:500], field=COMPACT_COLUMN
        ) from None
    row_counts = rows.to_numpy(zero_copy_only=True)
    nnz_counts = nnzs.to_numpy(zero_copy_only=True)
    if row_counts.size and min(int(row_counts.min()), int(nnz_counts.min())) < 0:
        raise SamplingMaskError(ErrorCode.E_RANGE, "counts must be >= 0", field=COMPACT_ROWS_COLUMN)
    # Python ints: the sums cannot overflow, and are checked before anything is allocated.
    total_rows = check_count(sum(row_counts.tolist()), limits.max_rows, "row count", field=COMPACT_ROWS_COLUMN)
    total_nnz = check_count(sum(nnz_counts.tolist()), limits.max_nnz, "id count", field=COMPACT_NNZ_COLUMN)
    check_output(limits, total_rows, total_nnz, segments=len(row_counts), field=COMPACT_COLUMN)
    # One segment: its arrays are the result. More: each is copied into the result at once and
    # dropped, so the peak is the result plus one segment (not every part plus their concatenation).
    ids: np.ndarray | None = None
    offsets: np.ndarray | None = None
    if len(blobs) != 1:
        ids, offsets = np.empty(total_nnz, np.int32), np.zeros(total_rows + 1, np.int64)
    row = nnz = 0
    for b in range(len(blobs)):
        buf = blobs[b].as_buffer()
        seg_ids, seg_offsets = compact.decode_ragged(
            memoryview(buf) if buf is not None else b"", int(row_counts[b]), int(nnz_counts[b]), limits=limits
        )
        if seg_offsets.size != int(row_counts[b]) + 1 or seg_ids.size != int(nnz_counts[b]):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "compact blob disagrees with its counts", segment=b)
        if ids is None or offsets is None:
            ids, offsets = seg_ids, seg_offsets
            break
        ids[nnz : nnz + seg_ids.size] = seg_ids
        np.add(seg_offsets[1:], nnz, out=offsets[row + 1 : row + seg_offsets.size])
        row += seg_offsets.size - 1
        nnz += seg_ids.size
        del seg_ids, seg_offsets
    assert ids is not None and offsets is not None
    cu = np.zeros(len(row_counts) + 1, np.int64)
    np.cumsum(row_counts, out=cu[1:])
    return ids.astype(np.int32, copy=False), offsets, cu


def mask_from_batch(batch: Any, header: Header, limits: Limits, validate: bool, *, counted: int = 0) -> SamplingMask:
    """The mask of one record batch; every check of the module docstring, in that order. ``counted``:
    the bytes its decode has counted already (SPEC 8.5: one count per decode), which the compact
    layout's rows and ids add to."""
    import pyarrow as pa

    try:
        batch.validate()
    except pa.ArrowException as exc:
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"invalid Arrow data: {exc}"[:500]) from None
    check_count(batch.num_rows, limits.max_segments, "segment count", field=MASK_COLUMN)
    # No bound on the buffers the batch stores (SPEC 8.5.6): what it produces was bounded from its
    # declared counts and decompressed lengths before pyarrow read it, and the stored buffers are
    # the input itself (a user column, padding), never counted.
    if header.compact:
        parts = [column_of(batch, n) for n in (COMPACT_COLUMN, COMPACT_ROWS_COLUMN, COMPACT_NNZ_COLUMN)]
        if any(p is None for p in parts):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "the compact layout needs its three columns", field=COMPACT_COLUMN
            )
        ids, offsets, cu = _compact_column(batch, parts, remaining(limits, counted))
    else:
        column = column_of(batch, MASK_COLUMN)
        if column is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing column", field=MASK_COLUMN)
        _levels(column.type, True, MASK_COLUMN)
        _no_nulls(column, MASK_COLUMN)
        cu, inner = _offsets_view(column, code=ErrorCode.E_SEGMENTS, field=MASK_COLUMN, monotonic=validate)
        check_count(len(inner), limits.max_rows, "row count", field=MASK_COLUMN)
        _no_nulls(inner, MASK_COLUMN)
        # The rows' order and widths are checked with the ids (SamplingMask._validate), which read
        # the offsets once; that leaves nothing for pyarrow's full validation of this column.
        offsets, leaf = _offsets_view(inner, code=ErrorCode.E_OFFSETS, field=MASK_COLUMN, monotonic=False)
        check_count(len(leaf), limits.max_nnz, "id count", field=MASK_COLUMN)
        ids = _values(leaf, MASK_COLUMN)
    kwargs: dict[str, Any] = {}
    for name in COMPANIONS:
        column = column_of(batch, name)
        if column is None:
            continue
        nested = name == "support_logprobs"
        _levels(column.type, nested, name)
        _no_nulls(column, name)
        # A companion's offsets must equal the mask's, whose order is checked: no scan of their own.
        comp_cu, child = _offsets_view(column, code=ErrorCode.E_SHAPE, field=name, monotonic=False)
        if not np.array_equal(comp_cu, cu):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "row counts per segment differ from the mask's", field=name)
        if nested:
            _no_nulls(child, name)
            comp_offsets, child = _offsets_view(child, code=ErrorCode.E_SHAPE, field=name, monotonic=False)
            if not np.array_equal(comp_offsets, offsets):
                raise SamplingMaskError(ErrorCode.E_SHAPE, "row lengths differ from the mask's", field=name)
        kwargs[name] = _values(child, name)
    mask = SamplingMask(
        ids,
        offsets,
        cu_seqlens=cu,
        vocab_size=header.vocab_size,
        metadata=header.metadata,
        validate=False,
        limits=limits,
        **kwargs,
    )
    if not validate:
        return mask
    mask.validate(limits, rows_ascending=header.compact)  # compact.decode_ragged yields ascending rows
    # After the mask's checks, which name the row of a fault in the offsets: the companions and
    # every user column in full (the compact blobs were checked before they were decoded).
    check_columns(batch, [n for n in column_names(batch.schema) if n not in (MASK_COLUMN, COMPACT_COLUMN)])
    return check_id_order(mask, header.id_order)


def empty_mask(header: Header, schema: Any, limits: Limits) -> SamplingMask:
    """The mask of a file with no record batches: zero segments, the declared companions (empty)."""
    present: dict[str, Any] = {
        name: np.zeros(0, dtype) for name, dtype in COMPANIONS.items() if schema.get_field_index(name) >= 0
    }
    return SamplingMask(
        np.zeros(0, np.int32),
        np.zeros(1, np.int64),
        cu_seqlens=np.zeros(1, np.int64),
        vocab_size=header.vocab_size,
        metadata=header.metadata,
        limits=limits,
        **present,
    )


def join(masks: list[SamplingMask], header: Header, schema: Any, limits: Limits) -> SamplingMask:
    """The concatenation of the batches' masks; the limits bound the joined mask (SPEC 8.5)."""
    if not masks:
        return empty_mask(header, schema, limits)
    for total, limit, what in (
        (sum(m.num_rows for m in masks), limits.max_rows, "row count"),
        (sum(m.nnz for m in masks), limits.max_nnz, "id count"),
        (sum(m.num_segments for m in masks), limits.max_segments, "segment count"),
    ):
        check_count(total, limit, f"{what} of all record batches", field=MASK_COLUMN)
    return masks[0] if len(masks) == 1 else concat(masks)


# ---------------------------------------------------------------------------------------------- columns
def _offset_fault(array: Any) -> int | None:
    """The first table row whose offsets decrease or run outside the data, for the variable-width
    types (strings, binaries, lists, maps), or whose string is not UTF-8; None when the fault is
    elsewhere (a child, a dictionary)."""
    import pyarrow as pa

    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_list(kind) or pa.types.is_map(kind):
        dtype: Any = np.int32
    elif pa.types.is_large_string(kind) or pa.types.is_large_binary(kind) or pa.types.is_large_list(kind):
        dtype = np.int64
    else:
        return None
    buffers = array.buffers()
    if len(buffers) < 2 or buffers[1] is None:
        return None
    # The structural validation before this sized the offsets buffer for the array's slots.
    whole = np.frombuffer(buffers[1], dtype=dtype, count=buffers[1].size // np.dtype(dtype).itemsize)
    raw = whole[array.offset : array.offset + len(array) + 1]
    if raw.size != len(array) + 1:
        return None
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        end = len(array.values)
    else:
        end = buffers[2].size if len(buffers) > 2 and buffers[2] is not None else 0
    bad = np.flatnonzero((raw[1:] < raw[:-1]) | (raw[1:] > end) | (raw[1:] < 0))
    if bad.size:
        return int(bad[0])
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):  # offsets fine: bad UTF-8
        lo, hi = 0, len(array)  # the first row r with rows [0, r] invalid: log2(n) validations
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                array.slice(0, mid + 1).validate(full=True)
                lo = mid + 1
            except pa.ArrowException:
                hi = mid
        return lo if lo < len(array) else None
    return None


def column_names(schema: Any) -> list[str]:
    """The column names of an Arrow schema, or ``E_ENCODING`` for one that is not UTF-8 (pyarrow
    would raise a bare ``UnicodeDecodeError`` on ``schema.names``)."""
    try:
        return list(schema.names)
    except UnicodeDecodeError as exc:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, f"a column name is not UTF-8: {exc.reason}", field="schema", value=exc.start
        ) from None


def check_columns(batch: Any, names: list[str]) -> None:
    """Columns ``names`` of ``batch`` validated in full (offsets monotonic and inside their data,
    UTF-8, dictionary indices, children), else ``E_ENCODING`` naming the column and, where the fault
    is in its offsets, the table row (``segment``). Nothing of a column is read before this."""
    import pyarrow as pa

    for name in names:
        array = column_of(batch, name)
        if array is None:
            continue
        chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
        base = 0
        for chunk in chunks:
            try:
                chunk.validate(full=True)
            except pa.ArrowException as exc:
                row = _offset_fault(chunk)
                where = f", table row {base + row}" if row is not None else ""
                raise SamplingMaskError(
                    ErrorCode.E_ENCODING,
                    f"invalid Arrow data in column {name!r}{where}: {exc}"[:500],
                    field=name,
                    segment=None if row is None else base + row,
                ) from None
            base += len(chunk)


def user_values(batch: Any, name: str) -> np.ndarray:
    """Column ``name`` of a batch as numpy values (one per table row), checked in full first."""
    check_columns(batch, [name])
    with arrow_errors(f"column {name!r}"):
        return column_of(batch, name).to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------- files
class MappedFile:
    """A regular file memory-mapped read-only (see the module docstring); :attr:`buffer` is a
    zero-copy ``pyarrow.Buffer`` over it. Missing files and symlink loops raise the usual ``OSError``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import pyarrow as pa

        self.path = os.fspath(path)
        info = os.stat(self.path)  # never opens: a FIFO is refused before anything could block
        if not stat.S_ISREG(info.st_mode):
            raise self._refuse(info.st_mode)
        fd = os.open(self.path, os.O_RDONLY | _NONBLOCK | _BINARY)
        try:
            info = os.fstat(fd)  # the file opened, whatever the path names by now
            if not stat.S_ISREG(info.st_mode):
                raise self._refuse(info.st_mode)
            if info.st_size == 0:
                raise SamplingMaskError(ErrorCode.E_ENCODING, "empty file", field="path", value=self.path[-80:])
            self._map: mmap.mmap | None = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.buffer = pa.py_buffer(self._map)

    def _refuse(self, mode: int) -> SamplingMaskError:
        return SamplingMaskError(
            ErrorCode.E_ENCODING, f"{file_kind(mode)}, not a regular file", field="path", value=self.path[-80:]
        )

    def release(self) -> None:
        """Drop the file's resident pages (a read-only mapping: views stay valid and fault back in)."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


def _empty_batch(schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


class BatchReader:
    """The record batches of an IPC file (``"arrow"``), IPC stream (``"arrows"``) or Parquet file.

    ``data``: the whole input as a ``pyarrow.Buffer`` (a :class:`MappedFile`'s, or bytes');
    ``costs``: what reading each batch may allocate and ``rows``: the rows each declares, both from
    the metadata before any batch is read (a stream's only as far as its complete messages go);
    ``complete``: False for an IPC stream without its end-of-stream marker. Parquet with
    ``batch_size``: batches of at most that many rows, every row group's cost checked up front.
    """

    def __init__(self, data: Any, fmt: str, limits: Limits, *, batch_size: int | None = None) -> None:
        import pyarrow as pa

        self.fmt = fmt
        self.limits = limits
        self.complete = True
        self._pieces: Any = None
        self._counted: int | None = None  # the joined decode's count (check_all), None when streaming
        source = pa.BufferReader(data)
        if fmt == "arrow" and data[:6].to_pybytes() != b"ARROW1":  # SPEC 8.5.6; pyarrow checks only the trailing magic
            raise SamplingMaskError(
                ErrorCode.E_ENCODING, "the file does not start with the magic ARROW1", field="magic"
            )
        if fmt in ("arrow", "arrows"):
            costs = ipc_bounds.batch_costs(data, fmt)
            ipc_bounds.check(costs.dictionaries, limits, "the dictionary batches")
            self.costs, self.rows, self.complete = list(costs.batches), list(costs.rows), costs.complete
        with arrow_errors(f"{fmt} input"):
            if fmt == "arrow":
                self._reader = pa.ipc.open_file(source)
                self.schema = self._reader.schema
                column_names(self.schema)
                if len(self.costs) != self._reader.num_record_batches:
                    raise SamplingMaskError(
                        ErrorCode.E_ENCODING, "the file footer's record batches cannot all be read", field="footer"
                    )
            elif fmt == "arrows":
                self._reader = pa.ipc.open_stream(source)
                self.schema = self._reader.schema
                column_names(self.schema)
            else:
                import pyarrow.parquet as pq

                # Costs first, from our own reading of the footer (see _parquet_bounds).
                groups = _parquet_bounds.row_groups(data)
                self.costs, self.rows = [c for c, _ in groups], [r for _, r in groups]
                self._reader = pq.ParquetFile(source)
                self.schema = self._reader.schema_arrow
                column_names(self.schema)
                if len(self.costs) != self._reader.num_row_groups:  # pragma: no cover - one footer, two readers
                    raise SamplingMaskError(ErrorCode.E_ENCODING, "the Parquet footer's row groups disagree")
                if batch_size is not None:
                    for index, cost in enumerate(self.costs):
                        ipc_bounds.check(cost, limits, f"row group {index}")
                    self._pieces = self._reader.iter_batches(batch_size=batch_size)
            self.header = read_header(self.schema.metadata, limits)

    def check_all(self, what: str = "all record batches together") -> None:
        """``E_LIMIT`` unless every batch together fits ``limits.max_bytes`` (one joined mask); the
        batches :meth:`masks` reads then count on from there (SPEC 8.5: one count per decode)."""
        self._counted = sum(self.costs)
        ipc_bounds.check(self._counted, self.limits, what)

    def read(self, index: int) -> Any:
        """Batch ``index`` (called with 0, 1, 2, ... or, for a file, in any order), or None after the
        last one. Its cost is checked before it is read, its rows against the declared after."""
        if index < len(self.costs) and self._pieces is None:
            what = f"row group {index}" if self.fmt == "parquet" else f"record batch {index}"
            ipc_bounds.check(self.costs[index], self.limits, what)
        if self.fmt == "arrow":
            batch = self._reader.get_batch(index) if index < self._reader.num_record_batches else None
        elif self.fmt == "arrows":
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                batch = None
        elif self._pieces is not None:
            return next(self._pieces, None)
        elif index >= self._reader.num_row_groups:
            batch = None
        else:
            batches = self._reader.read_row_group(index).combine_chunks().to_batches()
            batch = batches[0] if batches else _empty_batch(self.schema)
        if batch is not None and index < len(self.rows) and batch.num_rows != self.rows[index]:
            raise SamplingMaskError(
                ErrorCode.E_ENCODING,
                f"the batch holds {batch.num_rows} rows, its metadata declared {self.rows[index]}",
                value=index,
            )
        return batch

    def masks(self, validate: bool, *, after_each: Any = None) -> Iterator[SamplingMask]:
        """One mask per batch, each validated (see the module docstring). An error after some batches
        says how many complete ones came before it (``value``). ``after_each``: called when the
        consumer asks for the next one (releases a mapping's pages)."""
        done = 0
        while True:
            with arrow_errors(f"{self.fmt} input", batches=done):
                batch = self.read(done)
                if batch is None:
                    if not self.complete:
                        raise SamplingMaskError(
                            ErrorCode.E_ENCODING,
                            "the stream ends without its end-of-stream marker (cut short?)",
                            field="end-of-stream",
                            value=done,
                        )
                    return
                mask = mask_from_batch(batch, self.header, self.limits, validate, counted=self._counted or 0)
                if self._counted is not None and self.header.compact:  # rows and ids the costs did not hold
                    self._counted += output_nbytes(mask.num_rows, mask.nnz, segments=mask.num_segments)
            done += 1
            yield mask
            if after_each is not None:
                after_each()


def read_schema(path: str | os.PathLike[str], fmt: str, limits: Limits) -> Any:
    """The Arrow schema (with its metadata) of an IPC file / stream or Parquet file at ``path``,
    read like everything else here (a regular file, bounded, the header checked)."""
    reader = BatchReader(MappedFile(path).buffer, fmt, limits)
    return reader.schema
