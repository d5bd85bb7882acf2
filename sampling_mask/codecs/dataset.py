"""Datasets of many mask files: Parquet or Arrow IPC files, hive partitions, projection and filters.

A dataset is a directory (searched recursively), a glob or a list of paths, all of one format
(``"parquet"`` or ``"arrow"``: IPC *files*; streams cannot be indexed). Directory names
``key=value`` (hive partitioning, e.g. ``step=12/worker=3/``) become columns.

Invariants:

* Every file is read through the codecs' one batch reader (``.batch_reader``), as
  :func:`sampling_mask.codecs.arrow.iter_masks` reads it: a regular file only, its schema header
  (version, vocab size, id order, layout, metadata) checked before any batch is trusted, each
  batch's size bounded before it is read, the mask and every user column validated before a value
  is handed out. ``pyarrow.dataset`` is not used.
* Files are found by ``.walk``: nothing is opened to find them, symlinks to directories are never
  followed, FIFOs / devices / dangling or looping links / links to files outside the root (unless
  ``follow_symlinks=True``) are reported by path, not read.
* One table row is one segment (sequence), so a row filter keeps or drops whole sequences: filters on
  user or partition columns (``step``, ``reward``, ``request_id``, ...) never cut a sequence. A
  filter on partition columns only leaves files out unopened; another is evaluated per batch read.
* Each file is read with its own schema (plus the partition columns), so a file's companions are
  never dropped because another file lacks them.
* With ``on_error="report"`` every bad entry is recorded in :attr:`MaskDataset.errors` by path with a
  code and skipped: one the walk refused, a file of the other format (the format most files have
  wins), a file whose partition keys differ from most files' or name a mask column
  (``sampling_mask=7/``), a file of another spec version or a corrupt file; the other files'
  sequences still arrive. With ``on_error="raise"`` (the default) the first such error is raised,
  its message naming the path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from . import arrow
from .batch_reader import (
    PREFIX,
    RESERVED_COLUMNS,
    BatchReader,
    MappedFile,
    arrow_errors,
    check_columns,
    column_names,
    column_of,
    mask_from_batch,
    read_schema,
    user_values,
)
from .walk import find_files, located, split_by_format

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


def _file_error(path: str, exc: BaseException) -> FileError:
    return FileError(path, located(path, exc))


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
        follow_symlinks: bool = False,
    ) -> None:
        if partitioning not in ("hive", None):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "partitioning is 'hive' or None", value=partitioning)
        exts = _EXTENSIONS[format] if format in _EXTENSIONS else sum(_EXTENSIONS.values(), ())
        found = find_files(source, exts, follow_outside=follow_symlinks)
        #: Files not read: at construction the entries the walk refused (FIFOs, dangling links, files
        #: of another format or partition layout); each ``batches(on_error="report")`` adds the files
        #: whose content it rejected.
        self.errors: list[FileError] = [FileError(s.path, s.error) for s in found.skipped]
        if not found.files:
            if self.errors:
                raise self.errors[0].error
            raise FileNotFoundError(f"no .parquet or .arrow files in {source!r}")
        self.format, others = split_by_format(found.files, format, _EXTENSIONS)
        for path in others:
            error = SamplingMaskError(
                ErrorCode.E_SCHEMA, f"{path}: not a {self.format} file, as the rest of the dataset", field="path"
            )
            self.errors.append(FileError(path, error))
        other = set(others)
        files = [p for p in found.files if p not in other]
        self.limits = limits
        self.validate = validate
        root = found.root if partitioning == "hive" else None
        self.partition_schema, self._partitions, bad = _partitions(files, root)
        self.errors += bad
        rejected = {e.path for e in bad}
        self.files = [p for p in files if p not in rejected]
        self._construction_errors = len(self.errors)

    def _fragments(self, expr: Any) -> tuple[list[str], bool]:
        """The files to read, and whether ``expr`` names partition columns only. Files whose partition
        values cannot satisfy ``expr`` are left out unopened; an expression on other columns cannot
        prune and keeps every file (its rows are filtered as each batch is read)."""
        import pyarrow as pa

        if expr is None:
            return list(self.files), True
        keep = []
        verdicts: dict[tuple[tuple[str, Any], ...], bool] = {}  # files of one directory share values
        for path in self.files:
            values = self._partitions[path]
            key = tuple(values.items())
            if key not in verdicts:
                table = pa.table(
                    {f.name: pa.array([values.get(f.name)], type=f.type) for f in self.partition_schema}
                    or {"_": pa.array([0])}
                )
                try:
                    verdicts[key] = table.filter(expr).num_rows > 0
                except (pa.ArrowException, TypeError, ValueError):
                    return list(self.files), False
            if verdicts[key]:
                keep.append(path)
        return keep, True

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
        Every file is read batch by batch through the codecs' one reader (each batch's size bounded
        before it is read, every column validated before it is used); a filter on partition
        columns leaves files out unopened, one on other columns selects rows of each batch read.
        ``on_error="report"``: a bad file is recorded in :attr:`errors` and skipped; ``"raise"``:
        the first bad file (including those the walk refused) is raised, naming its path.
        """
        if on_error not in ("raise", "report"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "on_error is 'raise' or 'report'", value=on_error)
        if on_error == "raise" and self._construction_errors:
            raise self.errors[0].error
        expr = _expression(filter)
        files, partition_only = self._fragments(expr)
        for path in files:
            try:
                yield from self._read_file(path, columns, None if partition_only else expr, batch_size)
            except (SamplingMaskError, OSError) as exc:
                error = _file_error(path, exc)
                if on_error == "raise":
                    raise error.error from None
                self.errors.append(error)

    def _user_columns(self, physical: Any, columns: Sequence[str] | None) -> list[str]:
        """The user and partition columns to return for a file of schema ``physical``."""
        names = [n for n in column_names(physical) if n not in RESERVED_COLUMNS]
        names += [n for n in self.partition_schema.names if n not in names]
        if columns is None:
            return names
        unknown = [name for name in columns if name not in names]
        if unknown:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "no such user or partition column", field=unknown[0])
        return list(columns)

    def _read_file(
        self, path: str, columns: Sequence[str] | None, expr: Any, batch_size: int | None
    ) -> Iterator[MaskBatch]:
        """Every batch of one file (the rows ``expr`` selects), partition values as constant columns."""
        keys = self._partitions[path]
        mapped = MappedFile(path)
        reader = BatchReader(mapped.buffer, self.format, self.limits, batch_size=batch_size)
        extra = self._user_columns(reader.schema, columns)
        index = 0
        while True:
            with arrow_errors("dataset file", batches=index):
                batch = reader.read(index)
                if batch is None:
                    return
                mask = mask_from_batch(batch, reader.header, self.limits, self.validate)
                values = {name: self._values(batch, name, keys) for name in extra}
                if expr is not None:
                    rows = self._selected(batch, keys, expr)
                    if rows.size == 0:
                        index += 1
                        continue
                    if rows.size < batch.num_rows:
                        mask = mask.take(rows)
                        values = {name: column[rows] for name, column in values.items()}
            index += 1
            step = batch_size or max(mask.num_segments, 1)  # IPC batches are as written: split them
            for start in range(0, mask.num_segments, step):
                stop = min(start + step, mask.num_segments)
                part = mask if stop - start == mask.num_segments else mask.take(np.arange(start, stop))
                yield MaskBatch(part, {name: column[start:stop] for name, column in values.items()}, path)
            mapped.release()

    def _values(self, batch: Any, name: str, keys: Mapping[str, Any]) -> np.ndarray:
        if name in keys and batch.schema.get_field_index(name) < 0:
            dtype = self.partition_schema.field(name).type.to_pandas_dtype()
            return np.full(batch.num_rows, keys[name], dtype)
        return user_values(batch, name)

    def _selected(self, batch: Any, keys: Mapping[str, Any], expr: Any) -> np.ndarray:
        """The rows of ``batch`` that ``expr`` keeps (evaluated on its user and partition columns,
        each validated first)."""
        import pyarrow as pa

        names = [n for n in column_names(batch.schema) if n not in RESERVED_COLUMNS]
        check_columns(batch, names)
        table = pa.table({n: column_of(batch, n) for n in names})
        for field in self.partition_schema:
            if field.name in keys and field.name not in names:
                table = table.append_column(field, pa.array(np.full(batch.num_rows, keys[field.name]), type=field.type))
        table = table.append_column("__sampling_mask_row__", pa.array(np.arange(batch.num_rows, dtype=np.int64)))
        try:
            kept = table.filter(expr)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, f"the filter cannot be applied: {exc}"[:300], field="filter"
            ) from None
        return kept.column("__sampling_mask_row__").to_numpy()

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


def _partitions(files: Sequence[str], root: str | None) -> tuple[Any, dict[str, dict[str, Any]], list[FileError]]:
    """The hive partition columns (int32 where every value is a small integer, else string), each
    file's partition values, from the ``key=value`` directories below ``root`` alone, and the files
    whose directories do not fit: keys other than most files have (in order), a key that is a mask
    column, or a directory name that does not decode."""
    import pyarrow as pa

    prefix = os.path.join(root, "") if root is not None else None
    found: dict[str, dict[str, str]] = {}
    errors: list[FileError] = []
    for path in files:
        relative = os.path.dirname(path[len(prefix) :]) if prefix and path.startswith(prefix) else ""
        pairs = [part.partition("=") for part in relative.split(os.sep) if "=" in part]
        keys = {urllib.parse.unquote(key): urllib.parse.unquote(value) for key, _, value in pairs}
        reserved = [key for key in keys if key in RESERVED_COLUMNS or not key]
        if reserved or len(keys) != len(pairs):
            bad = reserved[0] if reserved else "a repeated key"
            error = SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"{path}: the partition directory {bad!r} names a column of the mask, or none, or twice",
                field=bad,
            )
            errors.append(FileError(path, error))
            continue
        found[path] = keys
    layouts_seen: dict[tuple[str, ...], int] = {}
    for keys in found.values():
        layouts_seen[tuple(keys)] = layouts_seen.get(tuple(keys), 0) + 1
    layout = max(layouts_seen, key=lambda k: layouts_seen[k]) if layouts_seen else ()
    for path, keys in list(found.items()):
        if tuple(keys) != layout:
            error = SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"{path}: partition keys {list(keys)} differ from the dataset's {list(layout)}",
                field="partitioning",
            )
            errors.append(FileError(path, error))
            del found[path]
    integer = {name: all(re.fullmatch(r"-?[0-9]{1,9}", keys[name]) for keys in found.values()) for name in layout}
    schema = pa.schema([(name, pa.int32() if integer[name] else pa.string()) for name in layout])
    values = {
        path: {name: int(value) if integer[name] else value for name, value in keys.items()}
        for path, keys in found.items()
    }
    for path in files:
        values.setdefault(path, {})
    return schema, values, errors


def _expression(filter: Any) -> Any:
    """A ``pyarrow.compute.Expression`` from an expression or a ``{column: value or [values]}`` mapping."""
    if filter is None:
        return None
    import pyarrow.compute as pc

    if isinstance(filter, pc.Expression):
        return filter
    if not isinstance(filter, Mapping) or not filter:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "filter is a pyarrow expression or a non-empty {column: value} mapping", field="filter"
        )
    expr = None
    for name, value in filter.items():
        if isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
            term = pc.field(name).isin(list(value))
        else:
            term = pc.field(name) == value
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
    metadata) is then used. The mask is read by :func:`sampling_mask.codecs.arrow.mask_from_table`;
    the user columns are validated in full before they are converted.
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
    if like is not None and (PREFIX + "version").encode() not in declared:
        if isinstance(like, (str, os.PathLike)):
            path = os.fspath(like)
            schema = read_schema(path, "parquet" if path.endswith(".parquet") else "arrow", limits)
        else:
            schema = like
        table = table.replace_schema_metadata(schema.metadata)
    mask = arrow.mask_from_table(table, limits=limits, validate=validate)
    extra = [name for name in column_names(table.schema) if name not in RESERVED_COLUMNS]
    columns = {name: user_values(table, name) for name in extra}
    return MaskBatch(mask, columns, "")


def open_dataset(
    source: Any,
    *,
    format: str | None = None,
    partitioning: str | None = "hive",
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    follow_symlinks: bool = False,
) -> MaskDataset:
    """A :class:`MaskDataset` over a directory (recursive), a glob or a list of ``.parquet`` / ``.arrow``
    files. ``follow_symlinks=True`` also reads symlinks to files outside the directory (by default
    they are reported in :attr:`MaskDataset.errors`, not read); symlinks to directories are never
    followed."""
    return MaskDataset(
        source,
        format=format,
        partitioning=partitioning,
        limits=limits,
        validate=validate,
        follow_symlinks=follow_symlinks,
    )


#: The longest file or folder name written (bytes of its UTF-8), what POSIX file systems allow.
_NAME_MAX = 255


def _partition_directory(keys: Sequence[str], values: Sequence[Any]) -> str:
    """``key=value/...`` for one group (values percent-quoted); ``E_DTYPE`` for a value that is not an
    integer or string, ``E_SCHEMA`` naming a key or value that cannot be a folder name."""
    parts = []
    for key, value in zip(keys, values, strict=True):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, str, np.integer, np.str_)):
            raise SamplingMaskError(
                ErrorCode.E_DTYPE, "partition values are integers or strings", field=key, value=short_repr(value)
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
                value=short_repr(key),
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
    from . import files

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
            created.extend(files.make_dirs(base, directory))
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
                files.remove_file(base, path)
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
