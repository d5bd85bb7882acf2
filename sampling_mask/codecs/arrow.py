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
full validation of every other column (user columns included); pyarrow exceptions never escape.
All of it is the codecs' one batch reader (:mod:`.batch_reader`), which also reads for datasets,
``torch_data`` and the command line; the functions here wrap it. Ids and companions are
zero-copy views of the Arrow buffers, so a memory-mapped ``.arrow`` file gives ids that view the
mapped file. User columns: :func:`read_table` returns the whole ``pyarrow.Table``;
:func:`mask_from_table` builds the mask from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from ..core.optional import require
from ._common import check_layout, id_order_of
from .batch_reader import (
    COMPACT_COLUMN,
    COMPACT_NNZ_COLUMN,
    COMPACT_ROWS_COLUMN,
    MASK_COLUMN,
    RESERVED_COLUMNS,
    BatchReader,
    MappedFile,
    arrow_errors,
    join,
    mask_from_batch,
    read_header,
)
from .batch_reader import METADATA_PREFIX as METADATA_PREFIX
from .batch_reader import PREFIX as PREFIX
from .batch_reader import header_metadata as _header_metadata
from .buffers import input_view
from .registry import own_format, sniff

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
COMPRESSIONS = (None, "zstd", "lz4")
#: Writer layouts: list columns (``"ragged"``) or one :mod:`~sampling_mask.codecs.compact` blob per segment.
LAYOUTS = ("ragged", "compact")
#: Largest offset a 32-bit ``list`` may hold; beyond it the level becomes ``large_list``.
INT32_OFFSET_MAX = (1 << 31) - 1


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


def _numpy_array(values: np.ndarray) -> Any:
    """A numeric numpy array as an Arrow array over the same memory. Not ``pa.array``: handed a numpy
    array, it imports pandas to inspect it (some 50 MiB of memory for a conversion that needs none)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _list_array(offsets: np.ndarray, values: Any, large: bool) -> Any:
    import pyarrow as pa

    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(_numpy_array(offsets.astype(np.int64 if large else np.int32, copy=False)), values)


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
        arrays += [pa.array(blobs, type=binary), _numpy_array(np.diff(cu)), _numpy_array(np.diff(seg_offsets))]
    else:
        inner = _list_array(mask.stored_offsets, _numpy_array(mask.ids), plan.inner_large)
        names.append(MASK_COLUMN)
        arrays.append(_list_array(cu, inner, plan.outer_large))
    for name in plan.companions:
        values = _numpy_array(mask.companions[name])
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
) -> Any:
    """A ``pyarrow.Table`` of one record batch, one row per segment (zero-copy over the mask's arrays).

    ``layout``: ``"ragged"`` (list columns) or ``"compact"``; ``extra_columns``: name -> one value per
    segment (any ``pyarrow.array`` input).
    """
    mask = as_sampling_mask(mask)
    import pyarrow as pa

    is_compact = check_layout(layout, LAYOUTS) == "compact"
    plan = _plan(mask, large_lists=large_lists, compact=is_compact, id_order=None)
    return pa.Table.from_batches([_batch(mask, plan, extra_columns)])


def _ipc_options(compression: str | None) -> Any:
    import pyarrow as pa

    if compression not in COMPRESSIONS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"compression must be one of {list(COMPRESSIONS)}", value=short_repr(compression)
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
    ) -> None:
        if fmt not in FORMATS:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)
        if fmt != "parquet":
            self._options = _ipc_options(compression)
        self._sink = sink
        self._fmt = fmt
        self._compression = compression
        self._large_lists = large_lists
        self._compact = check_layout(layout, LAYOUTS) == "compact"
        self._id_order = id_order
        self._plan: _Plan | None = None
        self._schema: Any = None
        self._writer: Any = None
        self._owned_sink: Any = None
        self._closed = False
        self.batches_written = 0

    @classmethod
    def to_path(cls, path: Any, fmt: str, *, root: Any = None, **opts: Any) -> Writer:
        """A writer to a temporary file next to ``path``, renamed over it by :meth:`close` and removed
        instead when the ``with`` block raises (or on :meth:`abort`): a reader never sees a partial file.
        ``root``: the destination folder ``path`` must stay inside (:func:`.files.atomic_path`)."""
        import pyarrow as pa

        from .files import atomic_path

        files = contextlib.ExitStack()
        tmp = files.enter_context(atomic_path(path, root=root))
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
    *,
    format: str = "arrow",
    compression: str | None = None,
    large_lists: bool | None = None,
    layout: str = "ragged",
    extra_columns: Mapping[str, Any] | None = None,
) -> bytes:
    """``mask`` as one record batch of an IPC file / stream, or one row group of Parquet (``layout``:
    ``"ragged"`` or ``"compact"``)."""
    mask = as_sampling_mask(mask)
    pa = require("pyarrow", what="Arrow encoding")

    layout = check_layout(layout, LAYOUTS)
    fmt = own_format(format, "arrow")
    sink = pa.BufferOutputStream()
    with Writer(sink, fmt, compression=compression, large_lists=large_lists, layout=layout) as writer:
        writer.write(mask, extra_columns=extra_columns)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------- read
# Every read goes through the one batch reader (regular files only, costs checked before pyarrow
# allocates, every column validated before a byte is handed out): see .batch_reader.


def mask_from_table(table: Any, *, limits: Limits = DEFAULT_LIMITS, validate: bool = True) -> SamplingMask:
    """The mask of a ``pyarrow.Table`` or ``RecordBatch`` read from (or shaped like) our files.

    User columns are ignored here (validated in full when ``validate``); select them from the
    table. A single-batch table gives views of its buffers; several batches are concatenated.
    """
    with arrow_errors("Arrow table"):
        header = read_header(table.schema.metadata, limits)
        batches = table.to_batches() if hasattr(table, "to_batches") else [table]
        masks = [mask_from_batch(batch, header, limits, validate) for batch in batches]
        return join(masks, header, table.schema, limits)


def _buffer(data: Any, *, copy: bool = False) -> Any:
    import pyarrow as pa

    return data if isinstance(data, pa.Buffer) and not copy else pa.py_buffer(input_view(data, copy=copy))


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{fmt!r} is not an Arrow format", value=fmt)


def iter_masks(
    source: Any,
    fmt: str,
    *,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    batch_size: int | None = None,
) -> Iterator[SamplingMask]:
    """One mask per record batch (Parquet: per row group, or per ``batch_size`` segments).

    ``source``: a path (memory-mapped; the pages of a batch are dropped from memory once the next
    one is asked for, so a large file never sits in memory whole) or bytes. An error after some
    batches says how many complete batches came before it (``value``); those were already yielded.
    A stream without its end-of-stream marker is such an error, after its last complete batch.
    """
    _check_format(fmt)
    if isinstance(source, (str, os.PathLike)):
        mapped = MappedFile(source)
        reader = BatchReader(mapped.buffer, fmt, limits, batch_size=batch_size)
        yield from reader.masks(validate, after_each=mapped.release)
    else:
        yield from BatchReader(_buffer(source), fmt, limits, batch_size=batch_size).masks(validate)


def decode(
    data: Any,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    copy: bool = False,
) -> SamplingMask:
    """A mask from IPC file / stream / Parquet bytes (``format`` None: told by the first bytes):
    read-only views of ``data`` where the format allows and ``data`` is immutable, of a private
    copy when it is writable or ``copy=True``."""
    fmt = own_format(format, "arrow")
    if fmt is None:
        fmt = own_format(sniff(data), "arrow")
    require("pyarrow", what="Arrow decoding")
    return _read_all(_buffer(data, copy=copy), fmt, limits, validate)


def load(path: Any, fmt: str = "arrow", *, limits: Limits = DEFAULT_LIMITS, validate: bool = True) -> SamplingMask:
    """A mask from a file, memory-mapped: with an uncompressed IPC file the ids view the mapping."""
    _check_format(fmt)
    return _read_all(MappedFile(path).buffer, fmt, limits, validate)


def _read_all(data: Any, fmt: str, limits: Limits, validate: bool) -> SamplingMask:
    reader = BatchReader(data, fmt, limits)
    # The batches are joined into one mask: together they are one decode's output.
    reader.check_all()
    return join(list(reader.masks(validate)), reader.header, reader.schema, limits)


def read_table(source: Any, fmt: str | None = None, *, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The whole ``pyarrow.Table`` (user columns included): pass it to :func:`mask_from_table`, which
    validates it. ``source``: a path (memory-mapped) or bytes; ``fmt`` defaults to the one the bytes
    show. What the batches declare they decompress to is checked against ``limits.max_bytes`` first
    (``E_LIMIT``), and the file is read through the one batch reader."""
    import pyarrow as pa

    data = MappedFile(source).buffer if isinstance(source, (str, os.PathLike)) else _buffer(source)
    if fmt is None:
        fmt = own_format(sniff(bytes(memoryview(data)[:32])), "arrow")
    _check_format(fmt)
    reader = BatchReader(data, fmt, limits)
    reader.check_all("the table")
    with arrow_errors(f"{fmt} input"):
        batches: list[Any] = []
        while (batch := reader.read(len(batches))) is not None:
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema)
