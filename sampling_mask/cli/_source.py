"""Input files for the commands: the format from the flag or the extension, whole or batch by batch,
schema metadata read from the footer, read errors as one line naming the file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, LOCAL_FILE_LIMITS, Limits, check_count
from ..stats import SupportSummary
from ._common import ROWS_ONLY_FORMATS, STREAMING_FORMATS, CliError, Progress, error_text, progress_enabled

if TYPE_CHECKING:
    from ..core.model import SamplingMask


def load_codecs() -> Any:
    """:mod:`sampling_mask.codecs` (numpy only at import; pyarrow / msgpack load when a format needs them)."""
    from .. import codecs

    return codecs


def check_input(path: Path) -> None:
    if not path.exists():
        raise CliError("E_IO", f"no such file: {str(path)!r}")
    if path.is_dir():
        raise CliError("E_IO", f"{str(path)!r} is a directory, not a file")


def resolve_format(codecs: Any, path: Path, fmt: str | None, *, flag: str = "--format") -> str:
    """``fmt`` when given (checked against the known formats), else the one ``path``'s extension names."""
    if fmt is not None:
        if fmt not in codecs.FORMATS:
            raise CliError("E_USAGE", f"unknown format {fmt!r} for {flag}; choose from {', '.join(codecs.FORMATS)}")
        return fmt
    try:
        return str(codecs.format_for_path(path))
    except SamplingMaskError as exc:
        raise CliError(
            exc.code.value,
            f"cannot tell the format of {str(path)!r} from its extension {path.suffix!r}; pass {flag} "
            f"({', '.join(codecs.FORMATS)})",
        ) from None


class Source:
    """An input file and its format. A ``.json`` file may hold any JSON form: unless ``--format``
    names one, the form is read from the content (``json_family``) when the file is loaded.
    ``limits``: :data:`DEFAULT_LIMITS`, or :data:`LOCAL_FILE_LIMITS` with ``--local-limits``."""

    def __init__(
        self, codecs: Any, path: Path, fmt: str, *, json_family: bool, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.codecs, self.path, self.fmt, self.json_family = codecs, path, fmt, json_family
        self.limits = limits

    @property
    def streaming(self) -> bool:
        return self.fmt in STREAMING_FORMATS

    def load(self) -> SamplingMask:
        """The whole mask (``self.fmt`` becomes the detected JSON form); SamplingMaskError on bad content."""
        codecs = self.codecs
        if self.json_family:
            check_count(self.path.stat().st_size, self.limits.max_bytes, "file size", field="path")
            data = self.path.read_bytes()
            self.fmt = str(codecs.detect_format(data))
            self.json_family = False
            mask: SamplingMask = codecs.decode(data, format=self.fmt, limits=self.limits)
            return mask
        mask = codecs.load(self.path, format=self.fmt, limits=self.limits)
        return mask

    def batches(self) -> Iterator[SamplingMask]:
        """One mask per record batch for the streaming formats, else the whole file as one mask."""
        if not self.streaming:
            yield self.load()
            return
        mapped = _map_readonly(self.path)
        if mapped is None:
            yield from self.codecs.iter_masks(self.path, format=self.fmt, limits=self.limits)
            return
        import mmap

        # The codecs read record batches as views of the mapping (no copy). Once the consumer asks
        # for the next batch it is done with the last one, so we drop the mapped pages from the
        # resident set: they stay in the page cache (and fault back in if touched), and the process
        # stays near one batch of memory however large the file is.
        for batch in self.codecs.iter_masks(memoryview(mapped), format=self.fmt, limits=self.limits):
            yield batch
            mapped.madvise(mmap.MADV_DONTNEED)
            _release_arrow_memory()

    def read_error(self, exc: SamplingMaskError) -> CliError:
        hint = ""
        if exc.code is ErrorCode.E_LIMIT and self.limits is not LOCAL_FILE_LIMITS:
            hint = " (a trusted local file of a large run may be read with --local-limits)"
        return CliError(
            exc.code.value, f"{str(self.path)!r} is not a valid sampling-mask file: {error_text(exc)}{hint}"
        )


def _release_arrow_memory() -> None:
    """Hand memory pyarrow's allocator keeps for reuse back to the OS (mimalloc keeps tens of MiB)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _map_readonly(path: Path) -> Any:
    """``path`` memory-mapped read-only, or None where mapping or ``madvise`` is unavailable (or the
    file is empty: the codecs report that)."""
    import mmap

    if not hasattr(mmap, "MADV_DONTNEED"):  # pragma: no cover - not Linux / BSD
        return None
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return None
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def input_paths(pattern: str) -> list[Path] | None:
    """The files a directory (searched recursively) or a glob names, sorted; None for a single path.

    A directory keeps the files whose extension names a format (hidden files and ``_``-prefixed ones,
    such as ``_SUCCESS``, are left out). Nothing found is ``E_IO``.
    """
    import glob

    path = Path(pattern)
    if path.is_dir():
        extensions = tuple(load_codecs().EXTENSIONS)
        found = sorted(
            p for p in path.rglob("*") if p.is_file() and p.suffix in extensions and not p.name.startswith((".", "_"))
        )
    elif not path.exists() and glob.has_magic(pattern):
        found = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    else:
        return None
    if not found:
        raise CliError("E_IO", f"no mask files in {pattern!r}")
    return found


def open_input(args: argparse.Namespace, name: str = "file") -> Source:
    path = Path(getattr(args, name))
    check_input(path)
    codecs = load_codecs()
    fmt = resolve_format(codecs, path, args.format)
    if fmt in STREAMING_FORMATS and "pyarrow" not in sys.modules:
        # Streaming holds one record batch at a time, but Arrow's default allocator (mimalloc) keeps
        # the arenas of finished batches: measured, 30-40 MiB more peak memory in a conversion. Arrow
        # reads this variable once, when pyarrow first allocates; the user's own choice wins.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    limits = LOCAL_FILE_LIMITS if getattr(args, "local_limits", False) else DEFAULT_LIMITS
    return Source(codecs, path, fmt, json_family=args.format is None and fmt == "json", limits=limits)


def read_all(source: Source) -> SamplingMask:
    try:
        return source.load()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def read_batches(source: Source) -> Iterator[SamplingMask]:
    try:
        yield from source.batches()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def _arrow_schema(path: Path, fmt: str) -> Any:
    """The Arrow schema of an IPC file / stream or Parquet file (footer or first message only)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(path)
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source) if fmt == "arrow" else pa.ipc.open_stream(source)
        return reader.schema


def schema_value(path: Path, fmt: str, key: str) -> str | None:
    """``sampling_mask.<key>`` from the schema metadata of an Arrow / Parquet file, None when absent."""
    if fmt not in STREAMING_FORMATS:
        return None
    try:
        raw = (_arrow_schema(path, fmt).metadata or {}).get(f"sampling_mask.{key}".encode())
        return raw.decode() if raw is not None else None
    except Exception:  # noqa: BLE001 - the decoder has judged the file already; this is informative only
        return None


def spec_version(source: Source) -> int | None:
    """The spec major version the file declares; None for the forms that carry none (rows only)."""
    if source.fmt in ROWS_ONLY_FORMATS:
        return None
    if source.streaming:
        raw = schema_value(source.path, source.fmt, "version")
        return int(raw) if raw is not None and raw.isdigit() else None
    # msgpack and the JSON document must carry the version, and the decoder accepted only this one.
    from .. import SPEC_VERSION

    return SPEC_VERSION


def count_segments(path: Path, fmt: str) -> int | None:
    """Segments (table rows) in an Arrow file or Parquet file from its footer alone; None when unknown."""
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if fmt == "arrow":
            import pyarrow as pa

            with pa.memory_map(str(path)) as source:
                return int(pa.ipc.open_file(source).count_rows())  # message headers only, no data
    except Exception:  # noqa: BLE001 - a footer we cannot read only costs the progress total
        return None
    return None


def summarize_file(source: Source, args: argparse.Namespace, label: str) -> SupportSummary:
    """Statistics of the whole file, batch by batch (a streaming file never sits in memory whole)."""
    summary = SupportSummary()
    enabled = progress_enabled(args) and source.streaming
    progress = Progress(label, count_segments(source.path, source.fmt) if enabled else None, enabled=enabled)
    try:
        for batch in read_batches(source):
            summary.add(batch)
            progress.update(batch.num_segments, batch.num_rows)
    finally:
        progress.close()
    return summary
