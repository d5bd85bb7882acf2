"""Arrow IPC file (``"arrow"``), Arrow IPC stream (``"arrows"``) and Parquet (``"parquet"``).

One table row per **segment**. Columns (spec/v1/SPEC.md, section ``arrow``)::

    sampling_mask:     list<list<int32>>    outer offsets = cu_seqlens, inner offsets = offsets, values = ids
    sampled_token_ids: list<int32>          optional companions, one list entry per row
    sampled_logprobs:  list<float>          (float = float32)
    temperature:       list<float>
    support_logprobs:  list<list<float>>    optional, parallel to the ids
    <anything else>                          user columns, kept in the table, ignored by the mask

``large_list`` replaces ``list`` only where the offsets overflow int32 (rows for the outer level,
ids for the inner level). Schema metadata carries ``sampling_mask.version`` (``"1"``),
``sampling_mask.vocab_size``, ``sampling_mask.id_order``, ``sampling_mask.layout`` and one
``sampling_mask.metadata.<key>`` per metadata entry (its JSON value). With ``layout="compact"`` the list
column is replaced by ``sampling_mask_compact: binary`` (one :mod:`sampling_mask.codecs.compact`
blob per segment, rows ascending) plus ``sampling_mask_num_rows`` / ``sampling_mask_nnz``: int64.

Reading validates before trusting: buffer sizes (``E_ENCODING``), column types exact (``E_SCHEMA``
/ ``E_DTYPE``), no nulls (``E_SCHEMA``), the end offsets of every list inside its child, the segments'
offsets monotonic (``E_SEGMENTS``), companions' offsets equal to the mask's (``E_SHAPE``), then the
mask's checks, whose pass over the ids checks the rows' offsets first (``E_OFFSETS``), then Arrow's
full validation of the other columns; pyarrow exceptions never escape. Ids and companions are
zero-copy views of the Arrow buffers, so a memory-mapped ``.arrow`` file gives ids that view the
mapped file. User columns: :func:`read_table` returns the whole ``pyarrow.Table``;
:func:`mask_from_table` builds the mask from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count, check_output
from ..core.model import COMPANIONS, SamplingMask, as_sampling_mask, concat
from . import _ipc_bounds, _parquet_bounds
from ._buffers import input_view
from ._common import (
    SPEC_MAJOR,
    check_id_order,
    check_version,
    compact_layout,
    id_order_of,
    metadata_to_json,
    metadata_value_from_json,
    parse_id_order,
)

__all__ = [
    "COMPACT_COLUMN",
    "FORMATS",
    "MASK_COLUMN",
    "Writer",
    "decode",
    "encode",
    "iter_masks",
    "load",
    "mask_from_table",
    "read_table",
    "table_from_mask",
]

FORMATS = ("arrow", "arrows", "parquet")
MASK_COLUMN = "sampling_mask"
COMPACT_COLUMN = "sampling_mask_compact"
COMPACT_ROWS_COLUMN = "sampling_mask_num_rows"
COMPACT_NNZ_COLUMN = "sampling_mask_nnz"
RESERVED_COLUMNS = frozenset({MASK_COLUMN, COMPACT_COLUMN, COMPACT_ROWS_COLUMN, COMPACT_NNZ_COLUMN, *COMPANIONS})
PREFIX = "sampling_mask."
METADATA_PREFIX = PREFIX + "metadata."
COMPRESSIONS = (None, "zstd", "lz4")
#: Writer layouts: list columns (``"ragged"``) or one :mod:`~sampling_mask.codecs.compact` blob per segment.
LAYOUTS = ("ragged", "compact")
#: Largest offset a 32-bit ``list`` may hold; beyond it the level becomes ``large_list``.
INT32_OFFSET_MAX = (1 << 31) - 1
_DIGITS = re.compile(r"0|[1-9][0-9]{0,29}")  # more digits than any limit: E_LIMIT / E_VERSION follow
_LEAF_TYPES = {
    MASK_COLUMN: "int32",
    "sampled_token_ids": "int32",
    "sampled_logprobs": "float",
    "temperature": "float",
    "support_logprobs": "float",
}


@contextlib.contextmanager
def _arrow_errors(context: str, *, batches: int | None = None) -> Iterator[None]:
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
class _Header:
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


def _read_header(schema: Any, limits: Limits) -> _Header:
    raw = schema.metadata or {}
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
    return _Header(vocab_size, id_order, layout == "compact", metadata)


def _header_metadata(mask: SamplingMask, *, compact: bool, id_order: str) -> dict[str, str]:
    out = {PREFIX + "version": str(SPEC_MAJOR)}
    if mask.vocab_size is not None:
        out[PREFIX + "vocab_size"] = str(mask.vocab_size)
    out[PREFIX + "id_order"] = id_order
    out[PREFIX + "layout"] = "compact" if compact else "list"
    for key, value in metadata_to_json(mask.metadata).items():
        out[METADATA_PREFIX + key] = json.dumps(value, allow_nan=False)
    return out


# ---------------------------------------------------------------------------------------------- write
@dataclasses.dataclass(frozen=True)
class _Plan:
    """Everything a file's schema fixes: list widths, layout, companions, vocab_size, metadata, id order."""

    outer_large: bool
    inner_large: bool
    compact: bool
    companions: tuple[str, ...]
    header: dict[str, str]
    vocab_size: int | None
    metadata: Mapping[str, Any]
    id_order: str


def _plan(mask: SamplingMask, *, large_lists: bool | None, compact: bool, id_order: str | None) -> _Plan:
    order = id_order if id_order is not None else ("ascending" if compact else id_order_of(mask))
    if order not in ("ascending", "unspecified"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "id_order must be ascending or unspecified", value=order)
    if large_lists is None:
        outer, inner = mask.num_rows > INT32_OFFSET_MAX, mask.nnz > INT32_OFFSET_MAX
    else:
        outer = inner = bool(large_lists)
    header = _header_metadata(mask, compact=compact, id_order=order)
    return _Plan(outer, inner, compact, tuple(mask.companions), header, mask.vocab_size, mask.metadata, order)


def _list_array(offsets: np.ndarray, values: Any, large: bool) -> Any:
    import pyarrow as pa

    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(pa.array(offsets.astype(np.int64 if large else np.int32, copy=False)), values)


def _check_fits(mask: SamplingMask, plan: _Plan) -> None:
    if (not plan.outer_large and mask.num_rows > INT32_OFFSET_MAX) or (
        not plan.inner_large and mask.nnz > INT32_OFFSET_MAX
    ):
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, "offsets overflow the int32 lists of this file; open it with large_lists=True"
        )


def _batch(mask: SamplingMask, plan: _Plan, extra_columns: Mapping[str, Any] | None, schema: Any = None) -> Any:
    """One RecordBatch for ``mask`` following ``plan`` (arrays are zero-copy views of the mask's)."""
    import pyarrow as pa

    _check_fits(mask, plan)
    if plan.compact:
        mask = mask.canonical()
    cu = mask.cu_seqlens
    names: list[str] = []
    arrays: list[Any] = []
    if plan.compact:
        from . import compact

        ids, offsets = mask.ids, mask.offsets
        blobs = []
        for b in range(mask.num_segments):  # one call per segment (a sequence), not per row
            r0, r1 = int(cu[b]), int(cu[b + 1])
            lo = int(offsets[r0])
            blobs.append(compact.encode_ragged(ids[lo : int(offsets[r1])], offsets[r0 : r1 + 1] - lo))
        total = sum(len(blob) for blob in blobs)
        binary = pa.large_binary() if total > INT32_OFFSET_MAX else pa.binary()
        seg_offsets = mask.stored_offsets[cu].astype(np.int64)  # the count columns are exactly int64
        names += [COMPACT_COLUMN, COMPACT_ROWS_COLUMN, COMPACT_NNZ_COLUMN]
        arrays += [pa.array(blobs, type=binary), pa.array(np.diff(cu)), pa.array(np.diff(seg_offsets))]
    else:
        inner = _list_array(mask.stored_offsets, pa.array(mask.ids), plan.inner_large)
        names.append(MASK_COLUMN)
        arrays.append(_list_array(cu, inner, plan.outer_large))
    for name in plan.companions:
        values = pa.array(mask.companions[name])
        if name == "support_logprobs":
            values = _list_array(mask.stored_offsets, values, plan.inner_large)
        names.append(name)
        arrays.append(_list_array(cu, values, plan.outer_large))
    for name, column in (extra_columns or {}).items():
        if name in RESERVED_COLUMNS or name in names:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "extra column name is reserved", field=name)
        try:
            arr = column if isinstance(column, (pa.Array, pa.ChunkedArray)) else pa.array(column)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, f"extra column is not an Arrow array: {exc}", field=name
            ) from None
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if len(arr) != mask.num_segments:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"extra column needs one value per segment ({mask.num_segments})", field=name
            )
        names.append(name)
        arrays.append(arr)
    if schema is None:
        batch = pa.RecordBatch.from_arrays(arrays, names=names)
        return batch.replace_schema_metadata(plan.header)
    if [f.name for f in schema] != names:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "the batch's columns differ from the file's", value=names[:8])
    try:
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    except (pa.ArrowException, TypeError, ValueError) as exc:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"the batch does not match the file's schema: {exc}") from None


def table_from_mask(
    mask: SamplingMask,
    *,
    large_lists: bool | None = None,
    layout: str = "ragged",
    extra_columns: Mapping[str, Any] | None = None,
    compact: bool | None = None,
) -> Any:
    """A ``pyarrow.Table`` of one record batch, one row per segment (zero-copy over the mask's arrays).

    ``layout``: ``"ragged"`` (list columns) or ``"compact"``; ``extra_columns``: name -> one value per
    segment (any ``pyarrow.array`` input). ``compact=True`` is the deprecated spelling of ``layout="compact"``.
    """
    mask = as_sampling_mask(mask)
    import pyarrow as pa

    is_compact = compact_layout(layout, compact, LAYOUTS) == "compact"
    plan = _plan(mask, large_lists=large_lists, compact=is_compact, id_order=None)
    return pa.Table.from_batches([_batch(mask, plan, extra_columns)])


def _ipc_options(compression: str | None) -> Any:
    import pyarrow as pa

    if compression not in COMPRESSIONS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"compression must be one of {list(COMPRESSIONS)}", value=repr(compression)
        )
    return pa.ipc.IpcWriteOptions(compression=compression)


class Writer:
    """Streaming writer: :meth:`write` appends one mask as one record batch (Parquet: one row group).

    The first mask fixes the schema (companions, vocab_size, metadata, list widths, id order); later
    masks must match (``E_SCHEMA``). Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        sink: Any,
        fmt: str,
        *,
        compression: str | None = None,
        large_lists: bool | None = None,
        layout: str = "ragged",
        id_order: str | None = None,
        compact: bool | None = None,
    ) -> None:
        if fmt not in FORMATS:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
        if fmt != "parquet":
            self._options = _ipc_options(compression)
        self._sink = sink
        self._fmt = fmt
        self._compression = compression
        self._large_lists = large_lists
        self._compact = compact_layout(layout, compact, LAYOUTS) == "compact"
        self._id_order = id_order
        self._plan: _Plan | None = None
        self._schema: Any = None
        self._writer: Any = None
        self._owned_sink: Any = None
        self._closed = False
        self.batches_written = 0

    @classmethod
    def to_path(cls, path: Any, fmt: str, **opts: Any) -> Writer:
        """A writer to a temporary file next to ``path``, renamed over it by :meth:`close` and removed
        instead when the ``with`` block raises (or on :meth:`abort`): a reader never sees a partial file."""
        import pyarrow as pa

        from ._files import atomic_path

        files = contextlib.ExitStack()
        tmp = files.enter_context(atomic_path(path))
        try:
            sink = files.enter_context(contextlib.closing(pa.OSFile(tmp, "wb")))
            writer = cls(sink, fmt, **opts)
        except BaseException as exc:
            files.__exit__(type(exc), exc, exc.__traceback__)
            raise
        writer._owned_sink = files
        return writer

    def _open(self, pa: Any) -> None:
        if self._fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                self._writer = pq.ParquetWriter(self._sink, self._schema, compression=self._compression or "snappy")
            except (pa.ArrowException, ValueError) as exc:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, f"cannot write Parquet: {exc}") from None
        elif self._fmt == "arrow":
            self._writer = pa.ipc.new_file(self._sink, self._schema, options=self._options)
        else:
            self._writer = pa.ipc.new_stream(self._sink, self._schema, options=self._options)

    def write(self, mask: SamplingMask, *, extra_columns: Mapping[str, Any] | None = None) -> None:
        """Append ``mask`` as one record batch."""
        mask = as_sampling_mask(mask)
        import pyarrow as pa

        first = self._plan is None
        if self._plan is None:
            self._plan = _plan(mask, large_lists=self._large_lists, compact=self._compact, id_order=self._id_order)
        plan = self._plan
        if not first:
            if set(mask.companions) != set(plan.companions):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "the mask's companions differ from the file's")
            if mask.vocab_size != plan.vocab_size:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "vocab_size differs from the file's", field="vocab_size")
            if _header_metadata(mask, compact=plan.compact, id_order=plan.id_order) != plan.header:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata differs from the file's", field="metadata")
        if plan.id_order == "ascending" and not plan.compact and not mask.is_canonical:
            if first:
                self._plan = None
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "the file declares ascending rows; pass mask.canonical()", field="id_order"
            )
        try:
            batch = _batch(mask, plan, extra_columns, self._schema)
        except BaseException:
            if first:
                self._plan = None
            raise
        if first:
            self._schema = batch.schema
            self._open(pa)
        if self._fmt == "parquet":
            self._writer.write_table(pa.Table.from_batches([batch]))
        else:
            self._writer.write_batch(batch)
        self.batches_written += 1

    def close(self) -> None:
        """Finish the file (an IPC file needs its footer). A writer that wrote nothing writes a valid
        file with no batches (the empty mask, spec 9.3)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._writer is None and self._plan is None:
                import pyarrow as pa

                empty = SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=np.zeros(1, np.int64))
                plan = _plan(empty, large_lists=self._large_lists, compact=self._compact, id_order=self._id_order)
                self._schema = _batch(empty, plan, None).schema
                self._open(pa)
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        except BaseException as exc:
            self.abort(exc)
            raise
        if self._owned_sink is not None:
            self._owned_sink, files = None, self._owned_sink
            files.close()

    def abort(self, exc: BaseException | None = None) -> None:
        """Give up: a file opened with :meth:`to_path` is removed, the old file at the path stays."""
        self._closed = True
        self._writer = None
        if self._owned_sink is not None:
            self._owned_sink, files = None, self._owned_sink
            error = exc if exc is not None else RuntimeError("writer aborted")
            files.__exit__(type(error), error, error.__traceback__)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)


def encode(
    mask: SamplingMask,
    fmt: str = "arrow",
    *,
    compression: str | None = None,
    large_lists: bool | None = None,
    layout: str = "ragged",
    extra_columns: Mapping[str, Any] | None = None,
    compact: bool | None = None,
) -> bytes:
    """``mask`` as one record batch of an IPC file / stream, or one row group of Parquet (``layout``:
    ``"ragged"`` or ``"compact"``; ``compact=True`` is its deprecated spelling)."""
    mask = as_sampling_mask(mask)
    import pyarrow as pa

    layout = compact_layout(layout, compact, LAYOUTS)
    sink = pa.BufferOutputStream()
    with Writer(sink, fmt, compression=compression, large_lists=large_lists, layout=layout) as writer:
        writer.write(mask, extra_columns=extra_columns)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


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


def _column(batch: Any, name: str) -> Any:
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
    ids_parts, offset_parts = [], [np.zeros(1, np.int64)]
    base = 0
    for b in range(len(blobs)):
        buf = blobs[b].as_buffer()
        seg_ids, seg_offsets = compact.decode_ragged(
            memoryview(buf) if buf is not None else b"", int(row_counts[b]), int(nnz_counts[b]), limits=limits
        )
        if seg_offsets.size != int(row_counts[b]) + 1 or seg_ids.size != int(nnz_counts[b]):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "compact blob disagrees with its counts", segment=b)
        ids_parts.append(seg_ids)
        offset_parts.append(seg_offsets[1:] + base)
        base += seg_ids.size
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
    cu = np.zeros(len(row_counts) + 1, np.int64)
    np.cumsum(row_counts, out=cu[1:])
    return ids.astype(np.int32, copy=False), np.concatenate(offset_parts), cu


def _mask_from_batch(batch: Any, header: _Header, limits: Limits, validate: bool) -> SamplingMask:
    """The mask of one record batch; every check of the module docstring, in that order."""
    import pyarrow as pa

    try:
        batch.validate()
    except pa.ArrowException as exc:
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"invalid Arrow data: {exc}"[:500]) from None
    check_count(batch.num_rows, limits.max_segments, "segment count", field=MASK_COLUMN)
    # Decompressed buffers are only known after pyarrow read them: bound one batch at least.
    check_count(batch.get_total_buffer_size(), limits.max_bytes, "record batch bytes", field=MASK_COLUMN)
    checked: list[Any] = []
    if header.compact:
        parts = [_column(batch, n) for n in (COMPACT_COLUMN, COMPACT_ROWS_COLUMN, COMPACT_NNZ_COLUMN)]
        if any(p is None for p in parts):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "the compact layout needs its three columns", field=COMPACT_COLUMN
            )
        ids, offsets, cu = _compact_column(batch, parts, limits)
        checked += parts
    else:
        column = _column(batch, MASK_COLUMN)
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
        column = _column(batch, name)
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
        checked.append(column)
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
    mask._validate(limits, rows_ascending=header.compact)  # compact.decode_ragged yields ascending rows
    for column in checked:  # after the mask's checks, which name the row of a fault in the offsets
        try:
            column.validate(full=True)
        except pa.ArrowException as exc:
            raise SamplingMaskError(ErrorCode.E_ENCODING, f"invalid Arrow data: {exc}"[:500]) from None
    return check_id_order(mask, header.id_order)


def _empty_mask(header: _Header, schema: Any, limits: Limits) -> SamplingMask:
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


def mask_from_table(table: Any, *, limits: Limits = DEFAULT_LIMITS, validate: bool = True) -> SamplingMask:
    """The mask of a ``pyarrow.Table`` or ``RecordBatch`` read from (or shaped like) our files.

    User columns are ignored here; select them from the table. A single-batch table gives views of
    its buffers; several batches are concatenated.
    """
    with _arrow_errors("Arrow table"):
        header = _read_header(table.schema, limits)
        batches = table.to_batches() if hasattr(table, "to_batches") else [table]
        masks = [_mask_from_batch(batch, header, limits, validate) for batch in batches]
        return _join(masks, header, table.schema, limits)


def _join(masks: list[SamplingMask], header: _Header, schema: Any, limits: Limits) -> SamplingMask:
    if not masks:
        return _empty_mask(header, schema, limits)
    return masks[0] if len(masks) == 1 else concat(masks)


def _source(data: Any, *, copy: bool = False) -> Any:
    import pyarrow as pa

    buf = data if isinstance(data, pa.Buffer) and not copy else pa.py_buffer(input_view(data, copy=copy))
    return pa.BufferReader(buf)


def _map_file(path: Any) -> Any:
    """The file memory-mapped. Missing / unreadable files raise the usual ``OSError``."""
    import pyarrow as pa

    from ._files import check_regular

    path = os.fspath(path)
    if check_regular(path).st_size == 0:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "empty file", field=str(path)[-80:])
    with _arrow_errors("memory map"):
        return pa.memory_map(path)


def _whole(source: Any) -> Any:
    """All bytes of a ``BufferReader`` / memory map as a ``pyarrow.Buffer`` (zero-copy), position kept."""
    position = source.tell()
    source.seek(0)
    whole = source.read_buffer()
    source.seek(position)
    return whole


def _check_leading_magic(source: Any, fmt: str) -> None:
    """SPEC 9.5: an IPC file starts with ``ARROW1`` (pyarrow checks only the trailing magic)."""
    if fmt == "arrow" and source.read_at(6, 0) != b"ARROW1":
        raise SamplingMaskError(ErrorCode.E_ENCODING, "the file does not start with the magic ARROW1", field="magic")


def _empty_batch(schema: Any) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


class _BatchSource:
    """Opens an IPC file / IPC stream / Parquet source and hands out its record batches in order.

    ``costs``: what reading each batch may allocate, known before it is read (:mod:`._ipc_bounds`,
    :mod:`._parquet_bounds`); ``complete``: False for an IPC stream without its end-of-stream marker.
    """

    def __init__(self, source: Any, fmt: str, limits: Limits, batch_size: int | None) -> None:
        import pyarrow as pa

        self.fmt = fmt
        self._limits = limits
        self.costs: list[int] = []
        self.complete = True
        if fmt in ("arrow", "arrows"):
            _check_leading_magic(source, fmt)
            costs = _ipc_bounds.batch_costs(_whole(source), fmt)
            _ipc_bounds.check(costs.dictionaries, limits, "the dictionary batches")
            self.costs, self.complete = costs.batches, costs.complete
        with _arrow_errors(f"{fmt} input"):
            if fmt == "arrow":
                self._reader = pa.ipc.open_file(source)
                self.schema = self._reader.schema
            elif fmt == "arrows":
                self._reader = pa.ipc.open_stream(source)
                self.schema = self._reader.schema
            else:
                import pyarrow.parquet as pq

                # Costs first, from our own reading of the footer (see _parquet_bounds).
                self.costs = _parquet_bounds.row_group_costs(_whole(source))
                self._reader = pq.ParquetFile(source)
                self.schema = self._reader.schema_arrow
                if len(self.costs) != self._reader.num_row_groups:  # pragma: no cover - one footer, two readers
                    raise SamplingMaskError(ErrorCode.E_ENCODING, "the Parquet footer's row groups disagree")
                if batch_size is not None:
                    for index, cost in enumerate(self.costs):
                        _ipc_bounds.check(cost, limits, f"row group {index}")
                self._pieces = None if batch_size is None else self._reader.iter_batches(batch_size=batch_size)
            self.header = _read_header(self.schema, limits)

    def batch(self, index: int) -> Any:
        """Batch ``index`` (called with 0, 1, 2, ...), or None after the last one."""
        if index < len(self.costs) and (self.fmt != "parquet" or self._pieces is None):
            what = f"row group {index}" if self.fmt == "parquet" else f"record batch {index}"
            _ipc_bounds.check(self.costs[index], self._limits, what)
        if self.fmt == "arrow":
            return self._reader.get_batch(index) if index < self._reader.num_record_batches else None
        if self.fmt == "arrows":
            try:
                return self._reader.read_next_batch()
            except StopIteration:
                return None
        if self._pieces is not None:
            return next(self._pieces, None)
        if index >= self._reader.num_row_groups:
            return None
        batches = self._reader.read_row_group(index).combine_chunks().to_batches()
        return batches[0] if batches else _empty_batch(self.schema)


def _masks(reader: _BatchSource, limits: Limits, validate: bool) -> Iterator[SamplingMask]:
    done = 0
    while True:
        with _arrow_errors(f"{reader.fmt} input", batches=done):
            batch = reader.batch(done)
            if batch is None:
                if not reader.complete:
                    raise SamplingMaskError(
                        ErrorCode.E_ENCODING,
                        "the stream ends without its end-of-stream marker (cut short?)",
                        field="end-of-stream",
                        value=done,
                    )
                return
            mask = _mask_from_batch(batch, reader.header, limits, validate)
        done += 1
        yield mask


def iter_masks(
    source: Any,
    fmt: str,
    *,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    batch_size: int | None = None,
) -> Iterator[SamplingMask]:
    """One mask per record batch (Parquet: per row group, or per ``batch_size`` segments).

    ``source``: a path (memory-mapped) or bytes. An error after some batches says how many complete
    batches came before it (``value``); those were already yielded. A stream without its
    end-of-stream marker is such an error, after its last complete batch (it was cut).
    """
    if fmt not in FORMATS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
    stream = _map_file(source) if isinstance(source, (str, os.PathLike)) else _source(source)
    with stream:
        yield from _masks(_BatchSource(stream, fmt, limits, batch_size), limits, validate)


def decode(
    data: Any, fmt: str = "arrow", *, limits: Limits = DEFAULT_LIMITS, validate: bool = True, copy: bool = False
) -> SamplingMask:
    """A mask from IPC file / stream / Parquet bytes: read-only views of ``data`` where the format
    allows and ``data`` is immutable, of a private copy when it is writable or ``copy=True``."""
    if fmt not in FORMATS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
    return _read_all(_source(data, copy=copy), fmt, limits, validate)


def load(path: Any, fmt: str = "arrow", *, limits: Limits = DEFAULT_LIMITS, validate: bool = True) -> SamplingMask:
    """A mask from a file, memory-mapped: with an uncompressed IPC file the ids view the mapping."""
    if fmt not in FORMATS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
    return _read_all(_map_file(path), fmt, limits, validate)


def _read_all(source: Any, fmt: str, limits: Limits, validate: bool) -> SamplingMask:
    reader = _BatchSource(source, fmt, limits, None)
    # The batches are joined into one mask: together they are one decode's output.
    _ipc_bounds.check(sum(reader.costs), limits, "all record batches together")
    return _join(list(_masks(reader, limits, validate)), reader.header, reader.schema, limits)


def read_table(source: Any, fmt: str | None = None, *, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The whole ``pyarrow.Table`` (user columns included), unvalidated: pass it to :func:`mask_from_table`.

    ``source``: a path (memory-mapped) or bytes; ``fmt`` defaults to the one the bytes show. What
    the batches declare they decompress to is checked against ``limits.max_bytes`` first (``E_LIMIT``).
    """
    import pyarrow as pa

    from . import _sniff

    stream = _map_file(source) if isinstance(source, (str, os.PathLike)) else _source(source)
    if fmt is None:
        fmt = _sniff(stream.read_at(32, 0))
    if fmt in ("arrow", "arrows"):
        _check_leading_magic(stream, fmt)
        costs = _ipc_bounds.batch_costs(_whole(stream), fmt)
        _ipc_bounds.check(costs.dictionaries + sum(costs.batches), limits, "the table")
    elif fmt == "parquet":
        _ipc_bounds.check(sum(_parquet_bounds.row_group_costs(_whole(stream))), limits, "the table")
    with _arrow_errors(f"{fmt} input"):
        if fmt == "arrow":
            return pa.ipc.open_file(stream).read_all()
        if fmt == "arrows":
            return pa.ipc.open_stream(stream).read_all()
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(stream)
    raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
