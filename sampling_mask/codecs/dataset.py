"""Datasets of many mask files: Parquet or Arrow IPC files, hive partitions, projection and filters.

Built on ``pyarrow.dataset``. A dataset is a directory (searched recursively), a glob or a list of
paths, all of one format (``"parquet"`` or ``"arrow"``: IPC *files*; streams cannot be scanned in
place). Directory names ``key=value`` (hive partitioning, e.g. ``step=12/worker=3/``) become columns.

Invariants:

* Every file is one of our files (spec section ``arrow``): its schema header (version, vocab size,
  id order, layout, metadata) is checked before any of its batches is trusted, and each batch is
  validated like :func:`sampling_mask.codecs.arrow.iter_masks` validates it.
* One table row is one segment (sequence), so a row filter keeps or drops whole sequences: filters on
  user or partition columns (``step``, ``reward``, ``request_id``, ...) never cut a sequence.
* Each file is scanned with its own schema (plus the partition columns), so a file's companions are
  never dropped because another file lacks them.
* With ``on_error="report"`` a file of another spec version or a corrupt file is recorded in
  :attr:`MaskDataset.errors` by path and skipped; the other files' batches still arrive. With
  ``on_error="raise"`` (the default) the first such error is raised, its message naming the path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import operator
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from . import arrow

__all__ = [
    "FileError",
    "MaskBatch",
    "MaskDataset",
    "MaskSequence",
    "batch_from_table",
    "open_dataset",
    "write_dataset",
]

_EXTENSIONS = {"parquet": (".parquet",), "arrow": (".arrow",)}
_ROWS = 1 << 24  # sequences per scanned batch unless batch_size says fewer
_MASK_COLUMNS = (arrow.MASK_COLUMN, arrow.COMPACT_COLUMN, arrow.COMPACT_ROWS_COLUMN, arrow.COMPACT_NNZ_COLUMN)


@dataclasses.dataclass(frozen=True)
class FileError:
    """A file the dataset skipped (``on_error="report"``): its path and the error."""

    path: str
    error: SamplingMaskError


@dataclasses.dataclass(frozen=True)
class MaskSequence:
    """One sequence: a one-segment mask and its column values (user and partition columns)."""

    mask: SamplingMask
    columns: Mapping[str, Any]
    path: str


@dataclasses.dataclass(frozen=True)
class MaskBatch:
    """One record batch of one file: ``mask`` has one segment per table row; ``columns`` holds the
    projected user and partition columns, one numpy value per segment."""

    mask: SamplingMask
    columns: Mapping[str, np.ndarray]
    path: str

    def sequences(self) -> Iterator[MaskSequence]:
        """The batch one sequence at a time."""
        values = {name: column.tolist() for name, column in self.columns.items()}  # Python scalars
        for i in range(self.mask.num_segments):
            yield MaskSequence(self.mask.segment(i), {k: v[i] for k, v in values.items()}, self.path)


def _format_of(paths: Sequence[str], format: str | None) -> str:
    if format is not None:
        if format not in _EXTENSIONS:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, f"a dataset is 'parquet' or 'arrow' files, not {format!r}", value=format
            )
        return format
    found = {fmt for path in paths for fmt, exts in _EXTENSIONS.items() if path.endswith(exts)}
    if len(found) != 1:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "cannot tell the dataset's format from its files' extensions (.parquet or .arrow): pass format=",
            value=sorted(found) or None,
        )
    return found.pop()


def _expand(source: Any, format: str | None) -> tuple[list[str], str | None]:
    """The files of ``source`` (sorted within a directory or glob) and the root of their partitions."""
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if os.path.isdir(source):
            exts = _EXTENSIONS[format] if format in _EXTENSIONS else sum(_EXTENSIONS.values(), ())
            found = [
                os.path.join(top, name)
                for top, _dirs, names in os.walk(source)
                for name in names
                if name.endswith(exts) and not name.startswith((".", "_"))
            ]
            return sorted(found), source
        if glob.has_magic(source):
            return sorted(p for p in glob.glob(source, recursive=True) if os.path.isfile(p)), None
        return [source], None
    return [os.fspath(p) for p in source], None


class MaskDataset:
    """Many mask files read as one dataset; see the module docstring. Build with :func:`open_dataset`."""

    def __init__(
        self,
        source: Any,
        *,
        format: str | None = None,
        partitioning: str | None = "hive",
        limits: Limits = DEFAULT_LIMITS,
        validate: bool = True,
    ) -> None:
        import pyarrow.dataset as ds

        files, root = _expand(source, format)
        if not files:
            raise FileNotFoundError(f"no .parquet or .arrow files in {source!r}")
        self.format = _format_of(files, format)
        self.files = files
        self.limits = limits
        self.validate = validate
        self.errors: list[FileError] = []
        if partitioning not in ("hive", None):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "partitioning is 'hive' or None", value=partitioning)
        self.partition_schema, partitions = _partitions(files, root if partitioning == "hive" else None)
        self._dataset = ds.FileSystemDataset.from_paths(
            files,
            schema=self.partition_schema,
            format=ds.IpcFileFormat() if self.format == "arrow" else ds.ParquetFileFormat(),
            filesystem=_local_filesystem(),
            partitions=partitions,
        )

    def _fragments(self, expr: Any) -> tuple[list[Any], bool]:
        """The files to scan, and whether ``expr`` names partition columns only. Files whose partition
        values cannot satisfy ``expr`` are left out unopened; an expression on other columns cannot
        prune and keeps every file (its rows are filtered while scanning)."""
        import pyarrow as pa

        if expr is None:
            return list(self._dataset.get_fragments()), True
        try:
            return list(self._dataset.get_fragments(filter=expr)), True
        except (pa.ArrowInvalid, TypeError):
            return list(self._dataset.get_fragments()), False

    def batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: Any = None,
        batch_size: int | None = None,
        on_error: str = "raise",
    ) -> Iterator[MaskBatch]:
        """The dataset one record batch at a time, file by file in path order.

        ``columns``: user / partition columns to carry (default: all); the mask and its companions
        always come. ``filter``: a ``pyarrow.compute.Expression`` or a mapping ``{column: value or
        [values]}``; it selects sequences. ``batch_size``: at most this many sequences per batch.
        With no filter or one on partition columns only, each remaining file is read batch by batch
        through the codec's own reader (as :func:`sampling_mask.codecs.arrow.iter_masks`: each
        batch's size bounded before it is read); a filter on other columns goes through
        ``pyarrow.dataset``'s scanner, which bounds a batch only after reading it.
        """
        if on_error not in ("raise", "report"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "on_error is 'raise' or 'report'", value=on_error)
        expr = _expression(filter)
        fragments, partition_only = self._fragments(expr)
        for fragment in fragments:
            try:
                if partition_only:
                    yield from self._read_file(fragment, columns, batch_size)
                else:
                    yield from self._scan_file(fragment, columns, expr, batch_size)
            except SamplingMaskError as exc:
                error = SamplingMaskError(
                    exc.code, f"{fragment.path}: {exc.message}", **{k: getattr(exc, k) for k in _LOCATION}
                )
                if on_error == "raise":
                    raise error from None
                self.errors.append(FileError(fragment.path, error))

    def _user_columns(self, physical: Any, columns: Sequence[str] | None) -> list[str]:
        """The user and partition columns to return for a file of schema ``physical``."""
        names = [n for n in physical.names if n not in arrow.RESERVED_COLUMNS]
        names += [n for n in self.partition_schema.names if n not in names]
        if columns is None:
            return names
        unknown = [name for name in columns if name not in names]
        if unknown:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "no such user or partition column", field=unknown[0])
        return list(columns)

    def _read_file(self, fragment: Any, columns: Sequence[str] | None, batch_size: int | None) -> Iterator[MaskBatch]:
        """Every batch of one file, with its partition values as constant columns."""
        import pyarrow.dataset as pads

        keys = pads.get_partition_keys(fragment.partition_expression)
        with arrow._map_file(fragment.path) as stream:
            reader = arrow._BatchSource(stream, self.format, self.limits, batch_size)
            extra = self._user_columns(reader.schema, columns)
            index = 0
            while True:
                with arrow._arrow_errors("dataset file", batches=index):
                    batch = reader.batch(index)
                    if batch is None:
                        return
                    mask = arrow._mask_from_batch(batch, reader.header, self.limits, self.validate)
                index += 1
                values = {
                    name: np.full(batch.num_rows, keys[name], self.partition_schema.field(name).type.to_pandas_dtype())
                    if name in keys and batch.schema.get_field_index(name) < 0
                    else arrow._column(batch, name).to_numpy(zero_copy_only=False)
                    for name in extra
                }
                yield MaskBatch(mask, values, fragment.path)

    def _scan_file(
        self, fragment: Any, columns: Sequence[str] | None, expr: Any, batch_size: int | None
    ) -> Iterator[MaskBatch]:
        """The batches of one file that ``expr`` selects rows of (pyarrow's scanner)."""
        import pyarrow as pa

        with arrow._arrow_errors("dataset file"):
            physical = fragment.physical_schema
        header = arrow._read_header(physical, self.limits)
        schema = physical
        for field in self.partition_schema:
            if physical.get_field_index(field.name) < 0:
                schema = schema.append(field)
        mask_columns = [name for name in (*_MASK_COLUMNS, *arrow.COMPANIONS) if physical.get_field_index(name) >= 0]
        extra = self._user_columns(physical, columns)
        # pyarrow's default scan batch (2^17 rows) re-slices nested lists: at most a row group per batch instead.
        options = {"schema": schema, "columns": mask_columns + extra, "filter": expr, "batch_size": batch_size or _ROWS}
        with arrow._arrow_errors("dataset file"):
            for batch in fragment.to_batches(**options):
                if batch.num_rows == 0:
                    continue
                batch = pa.RecordBatch.from_arrays(batch.columns, schema=batch.schema.with_metadata(physical.metadata))
                mask = arrow._mask_from_batch(batch, header, self.limits, self.validate)
                values = {name: arrow._column(batch, name).to_numpy(zero_copy_only=False) for name in extra}
                yield MaskBatch(mask, values, fragment.path)

    def sequences(self, **options: Any) -> Iterator[MaskSequence]:
        """The dataset one sequence at a time (same options as :meth:`batches`)."""
        for batch in self.batches(**options):
            yield from batch.sequences()

    def read(self, **options: Any) -> MaskBatch:
        """Everything selected as one mask (segments in file order) with its columns concatenated."""
        from ..core.model import concat

        parts = list(self.batches(**options))
        if not parts:
            raise SamplingMaskError(ErrorCode.E_SHAPE, "the selection holds no sequence", field="filter")
        names = parts[0].columns.keys()
        columns = {name: np.concatenate([p.columns[name] for p in parts]) for name in names}
        return MaskBatch(concat([p.mask for p in parts]), columns, os.path.commonpath([p.path for p in parts]))


_LOCATION = ("row", "segment", "field", "value")


def _local_filesystem() -> Any:
    import pyarrow.fs

    return pyarrow.fs.LocalFileSystem()


def _partitions(files: Sequence[str], root: str | None) -> tuple[Any, list[Any]]:
    """The hive partition columns (int32 where every value is a small integer, else string) and each
    file's partition expression, from the ``key=value`` directories below ``root`` alone."""
    import pyarrow as pa
    import pyarrow.compute as pc

    prefix = os.path.join(root, "") if root is not None else None
    found: list[dict[str, str]] = []
    for path in files:
        relative = os.path.dirname(path[len(prefix) :]) if prefix and path.startswith(prefix) else ""
        pairs = (part.partition("=") for part in relative.split(os.sep) if "=" in part)
        found.append({key: urllib.parse.unquote(value) for key, _, value in pairs})
    names = list(dict.fromkeys(key for keys in found for key in keys))
    integer = {name: all(re.fullmatch(r"-?[0-9]{1,9}", keys[name]) for keys in found if name in keys) for name in names}
    schema = pa.schema([(name, pa.int32() if integer[name] else pa.string()) for name in names])
    always = pc.scalar(True)
    expressions = []
    cache: dict[tuple[tuple[str, str], ...], Any] = {}  # files of one directory share one expression
    for keys in found:
        key = tuple(keys.items())
        if key not in cache:
            terms = [pc.field(n) == (int(v) if integer[n] else v) for n, v in key]
            cache[key] = functools.reduce(operator.and_, terms) if terms else always
        expressions.append(cache[key])
    return schema, expressions


def _expression(filter: Any) -> Any:
    """A ``pyarrow.compute.Expression`` from an expression or a ``{column: value or [values]}`` mapping."""
    if filter is None:
        return None
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    if isinstance(filter, pc.Expression):
        return filter
    if not isinstance(filter, Mapping) or not filter:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "filter is a pyarrow expression or a non-empty {column: value} mapping", field="filter"
        )
    expr = None
    for name, value in filter.items():
        if isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
            term = ds.field(name).isin(list(value))
        else:
            term = ds.field(name) == value
        expr = term if expr is None else expr & term
    return expr


def batch_from_table(
    table: Any, *, like: Any = None, limits: Limits = DEFAULT_LIMITS, validate: bool = True
) -> MaskBatch:
    """The mask and user columns of an Arrow table that another tool made from our files.

    ``table``: a ``pyarrow.Table`` or ``RecordBatch`` (Ray Data ``batch_format="pyarrow"``, DuckDB
    ``.arrow()``, Polars ``.to_arrow()``) or a Hugging Face ``datasets.Dataset``. Tools that drop the
    schema metadata (Hugging Face ``datasets`` does) lose the header: pass ``like``, one of the
    dataset's files (path) or its ``pyarrow.Schema``, whose header (version, vocab size, id order,
    metadata) is then used. The mask is read by :func:`sampling_mask.codecs.arrow.mask_from_table`.
    """
    import pyarrow as pa

    inner = getattr(getattr(table, "data", None), "table", None)  # datasets.Dataset -> pyarrow.Table
    if inner is not None:
        table = inner
    if not isinstance(table, (pa.Table, pa.RecordBatch)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "expected a pyarrow Table or RecordBatch", value=type(table).__name__
        )
    declared = {bytes(k) for k in table.schema.metadata or {}}
    if like is not None and (arrow.PREFIX + "version").encode() not in declared:
        schema = _file_schema(os.fspath(like)) if isinstance(like, (str, os.PathLike)) else like
        table = table.replace_schema_metadata(schema.metadata)
    mask = arrow.mask_from_table(table, limits=limits, validate=validate)
    extra = [name for name in table.schema.names if name not in arrow.RESERVED_COLUMNS]
    columns = {name: arrow._column(table, name).to_numpy(zero_copy_only=False) for name in extra}
    return MaskBatch(mask, columns, "")


def _file_schema(path: str) -> Any:
    """The schema (with its metadata) of one of our Parquet or Arrow IPC files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with arrow._arrow_errors("schema of " + path):
        if path.endswith(".parquet"):
            return pq.read_schema(path)
        with pa.memory_map(path) as source:
            return pa.ipc.open_file(source).schema


def open_dataset(
    source: Any,
    *,
    format: str | None = None,
    partitioning: str | None = "hive",
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
) -> MaskDataset:
    """A :class:`MaskDataset` over a directory (recursive), a glob or a list of ``.parquet`` / ``.arrow`` files."""
    return MaskDataset(source, format=format, partitioning=partitioning, limits=limits, validate=validate)


#: The longest file or folder name written (bytes of its UTF-8), what POSIX file systems allow.
_NAME_MAX = 255


def _partition_directory(keys: Sequence[str], values: Sequence[Any]) -> str:
    """``key=value/...`` for one group (values percent-quoted); ``E_DTYPE`` for a value that is not an
    integer or string, ``E_SCHEMA`` naming a key or value that cannot be a folder name."""
    parts = []
    for key, value in zip(keys, values, strict=True):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, str, np.integer, np.str_)):
            raise SamplingMaskError(
                ErrorCode.E_DTYPE, "partition values are integers or strings", field=key, value=repr(value)[:80]
            )
        name = f"{key}={urllib.parse.quote(str(value), safe='')}"
        if len(name.encode()) > _NAME_MAX:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"partition folder name {name[:60]!r}... is {len(name.encode())} bytes, over {_NAME_MAX}",
                field=key,
                value=str(value)[:80],
            )
        parts.append(name)
    return os.path.join(*parts) if parts else ""


def _check_partition_keys(partition_by: Sequence[str]) -> None:
    """A partition key names a folder ``key=value``: non-empty, no separator, ``=`` or NUL (``E_SCHEMA``)."""
    for key in partition_by:
        if not isinstance(key, str) or not key or any(ch in key for ch in "/\\=\0") or key in (".", ".."):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "a partition key must be a plain folder-name part",
                field="partition_by",
                value=repr(key)[:80],
            )


def write_dataset(
    base_dir: str | os.PathLike[str],
    parts: Iterable[tuple[SamplingMask, Mapping[str, Any]]] | tuple[SamplingMask, Mapping[str, Any]],
    *,
    partition_by: Sequence[str] = (),
    format: str = "parquet",
    max_file_bytes: int = 256 << 20,
    **writer_options: Any,
) -> list[str]:
    """Write masks and their per-segment columns as a hive-partitioned dataset; returns the new files.

    ``parts``: ``(mask, columns)`` pairs (or one pair); ``columns`` maps a name to one value per
    segment and must hold every ``partition_by`` column, whose values (integers or strings) name the
    directories (``step=12/worker=3/``) and are not stored in the files. A file is closed and a new
    one started once the id, offset and companion bytes written to it reach ``max_file_bytes``, so a
    file holds at most ``max_file_bytes`` plus one mask's worth. Files are named
    ``part-<random>-<n>.<ext>`` so that writers of one dataset never collide; each is written
    atomically (:func:`sampling_mask.codecs.open_writer`). ``writer_options``: ``compression`` etc.

    All or nothing: when anything fails (a bad value, a partition folder name over 255 bytes:
    ``E_SCHEMA`` naming it), the files and folders this call made are removed again and the error
    raised. Nothing is written through a symlink below ``base_dir`` (``E_ENCODING``): the files stay
    inside it.
    """
    from . import _files

    if format not in _EXTENSIONS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "write_dataset writes 'parquet' or 'arrow'", value=format)
    if max_file_bytes < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "max_file_bytes must be positive", field="max_file_bytes")
    _check_partition_keys(partition_by)
    if isinstance(parts, tuple) and len(parts) == 2 and hasattr(parts[0], "__sampling_mask__"):  # (mask, columns)
        parts = [parts]  # type: ignore[list-item]
    base = os.fspath(base_dir)
    token = secrets.token_hex(4)
    open_files: dict[str, tuple[Any, int]] = {}  # directory -> (writer, bytes written)
    written: list[str] = []
    created: list[str] = []  # folders this call made, outermost first
    counter = 0

    def new_writer(directory: str) -> Any:
        nonlocal counter
        os.makedirs(base, exist_ok=True)
        if directory != base:
            created.extend(_files.make_dirs(base, directory))
        path = os.path.join(directory, f"part-{token}-{counter:05d}.{format}")
        counter += 1
        writer = arrow.Writer.to_path(path, format, root=base, **writer_options)
        written.append(path)
        return writer

    try:
        for mask, columns in parts:  # type: ignore[misc]
            table = {name: np.asarray(values) for name, values in columns.items()}
            for name, values in table.items():
                if values.shape != (mask.num_segments,):
                    raise SamplingMaskError(
                        ErrorCode.E_SHAPE, "a column holds one value per segment", field=name, value=values.shape
                    )
            missing = [name for name in partition_by if name not in table]
            if missing:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "partition column missing", field=missing[0])
            keys = [table[name] for name in partition_by]
            groups = _groups(keys, mask.num_segments)
            # Every folder name of this mask is checked before anything of it is written.
            folders = [
                os.path.join(base, _partition_directory(partition_by, [k[int(g[0])] for k in keys])) for g in groups
            ]
            stored = {name: values for name, values in table.items() if name not in partition_by}
            sizes = _segment_bytes(mask)
            for group, directory in zip(groups, folders, strict=True):
                directory = directory.rstrip(os.sep) or base
                writer, size = open_files.pop(directory, (None, 0))
                start = 0
                while start < group.size:
                    if writer is None:
                        writer, size = new_writer(directory), 0
                    # As many segments as fit the file's remaining budget (at least one).
                    room = np.cumsum(sizes[group[start:]]) <= max_file_bytes - size
                    stop = start + max(1, int(np.count_nonzero(room)))
                    chunk = group[start:stop]
                    writer.write(mask.take(chunk), extra_columns={n: v[chunk] for n, v in stored.items()})
                    size += int(sizes[chunk].sum())
                    start = stop
                    if size >= max_file_bytes or start < group.size:
                        writer.close()
                        writer = None
                if writer is not None:
                    open_files[directory] = (writer, size)
        while open_files:
            _, (writer, _size) = open_files.popitem()
            writer.close()
    except BaseException as exc:
        for writer, _size in open_files.values():
            writer.abort(exc)
        for path in written:
            with contextlib.suppress(OSError, SamplingMaskError):
                _files.remove_file(base, path)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    return written


def _groups(keys: Sequence[np.ndarray], count: int) -> list[np.ndarray]:
    """Segment indices grouped by their partition values, each group in segment order."""
    if not keys:
        return [np.arange(count)] if count else []
    codes = np.zeros(count, np.int64)
    for values in keys:
        _, inverse = np.unique(values, return_inverse=True)
        codes = codes * (int(inverse.max(initial=0)) + 1) + inverse.reshape(-1)
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    return np.split(order, bounds)


def _segment_bytes(mask: SamplingMask) -> np.ndarray:
    """Bytes of ids, offsets and companions each segment adds to a file (before compression)."""
    per_id = 4 + (4 if "support_logprobs" in mask.companions else 0)
    per_row = 8 + sum(values.dtype.itemsize for name, values in mask.companions.items() if name != "support_logprobs")
    rows = np.diff(mask.cu_seqlens)
    ids = np.diff(mask.stored_offsets[mask.cu_seqlens].astype(np.int64))
    return ids * per_id + rows * per_row
