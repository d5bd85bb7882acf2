"""The ``sampling-mask`` command line: demo, inspect, validate, convert, stats, conformance, bench.

Exit status: 0 success; 1 the answer is "no" (``validate`` found the file invalid, a ``demo``
round trip or check failed); 2 a usage error (a bad flag, a missing file, an unknown extension, a corrupt or
unreadable input, a missing optional dependency), reported as ONE line on stderr
``sampling-mask: error: CODE: message``; 3 an internal error (a bug). ``--debug`` adds tracebacks.

CODE is a spec error code (``E_ENCODING``, ``E_SCHEMA``...) when the data is at fault, else one of the
command line's own: ``E_USAGE`` (flags), ``E_IO`` (a file cannot be read or written), ``E_UNAVAILABLE``
(an optional part is not installed). Only the standard library and numpy load at import; pyarrow,
torch and matplotlib load inside the commands that need them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from .core.errors import SamplingMaskError

if TYPE_CHECKING:
    import numpy as np

    from .core.model import SamplingMask

__all__ = ["main"]

PROG = "sampling-mask"
#: Formats written and read batch by batch (one record batch / row group at a time).
STREAMING_FORMATS = ("arrow", "arrows", "parquet")
#: Formats that carry the rows only (no segments, companions, vocab_size or metadata).
ROWS_ONLY_FORMATS = ("json-rows", "base64")
#: Subcommands handed whole to another module's ``main(argv)``.
DELEGATED = {
    "conformance": ("sampling_mask.conformance.runner", "run the conformance vectors (see its --help)"),
    "bench": ("sampling_mask.bench", "run the benchmark report (see its --help)"),
}
#: Optional dependencies and the extra that installs each.
OPTIONAL_EXTRAS = {"pyarrow": "arrow", "msgpack": "msgpack", "torch": "torch", "matplotlib": "plot"}


class CliError(Exception):
    """An error a person made (or an environment lacking something): one line, exit status 2."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line with the code ``E_USAGE`` (exit 2), not usage + error."""

    def error(self, message: str) -> NoReturn:
        hint = f" (see {self.prog} --help)"
        self.exit(2, f"{PROG}: error: E_USAGE: {message}{hint}\n")


# ---------------------------------------------------------------------------- output helpers
def _missing_dependency(name: str) -> str:
    extra = OPTIONAL_EXTRAS[name]
    return f"this needs {name}, which is not installed (pip install 'sampling-mask[{extra}]')"


def _warn(text: str) -> None:
    """One line on stderr: ``sampling-mask: warning: text`` (deprecated flags)."""
    sys.stderr.write(f"{PROG}: warning: {text}\n")


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return _finite(float(value))
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _finite(value: float | None) -> float | None:
    """NaN / inf become None so the JSON output stays strict JSON."""
    if value is None or not math.isfinite(value):
        return None
    return value


def _print_json(document: Any) -> None:
    _out(json.dumps(document, indent=2, default=_json_default, allow_nan=False))


def _fmt_num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def _fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def _fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{int(n)}"


class _Progress:
    """A one-line progress bar on stderr; drawn only when stderr is a terminal and ``-q`` is off.

    Counts segments (table rows) against ``total`` when it is known, else shows a running count.
    Redraws at most ten times a second.
    """

    def __init__(self, label: str, total: int | None, *, enabled: bool, stream: IO[str] | None = None) -> None:
        self.label, self.total = label, total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.segments = self.rows = 0
        self.start = self.last = time.perf_counter()
        self.drawn = False

    def update(self, segments: int, rows: int) -> None:
        self.segments += segments
        self.rows += rows
        now = time.perf_counter()
        if self.enabled and (not self.drawn or now - self.last >= 0.1):
            self.last = now
            self._draw(now)

    def close(self) -> None:
        if self.enabled:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, now: float) -> None:
        elapsed = f"{now - self.start:.1f} s"
        rows = f"{_fmt_count(self.rows)} rows"
        if self.total:
            frac = min(self.segments / self.total, 1.0)
            done = f"{_fmt_count(self.segments)}/{_fmt_count(self.total)} segments"
            line = f"{self.label} [{'#' * int(frac * 30):<30}] {frac:4.0%}  {done}, {rows}, {elapsed}"
        else:
            line = f"{self.label}  {_fmt_count(self.segments)} segments, {rows}, {elapsed}"
        self.stream.write("\r" + line + "\x1b[K")
        self.stream.flush()
        self.drawn = True


def _progress_enabled(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


# ---------------------------------------------------------------------------- codecs and files
def _codecs() -> Any:
    """:mod:`sampling_mask.codecs` (numpy only at import; pyarrow / msgpack load when a format needs them)."""
    from . import codecs

    return codecs


def _check_input(path: Path) -> None:
    if not path.exists():
        raise CliError("E_IO", f"no such file: {str(path)!r}")
    if path.is_dir():
        raise CliError("E_IO", f"{str(path)!r} is a directory, not a file")


def _resolve_format(codecs: Any, path: Path, fmt: str | None, *, flag: str = "--format") -> str:
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


class _Source:
    """An input file and its format. A ``.json`` file may hold any JSON form: unless ``--format``
    names one, the form is read from the content (``json_family``) when the file is loaded."""

    def __init__(self, codecs: Any, path: Path, fmt: str, *, json_family: bool) -> None:
        self.codecs, self.path, self.fmt, self.json_family = codecs, path, fmt, json_family

    @property
    def streaming(self) -> bool:
        return self.fmt in STREAMING_FORMATS

    def load(self) -> SamplingMask:
        """The whole mask (``self.fmt`` becomes the detected JSON form); SamplingMaskError on bad content."""
        codecs = self.codecs
        if self.json_family:
            from .core.limits import DEFAULT_LIMITS, check_count

            check_count(self.path.stat().st_size, DEFAULT_LIMITS.max_bytes, "file size", field="path")
            data = self.path.read_bytes()
            self.fmt = str(codecs.detect_format(data))
            self.json_family = False
            mask: SamplingMask = codecs.decode(data, format=self.fmt)
            return mask
        mask = codecs.load(self.path, format=self.fmt)
        return mask

    def batches(self) -> Iterator[SamplingMask]:
        """One mask per record batch for the streaming formats, else the whole file as one mask."""
        if not self.streaming:
            yield self.load()
            return
        mapped = _map_readonly(self.path)
        if mapped is None:
            yield from self.codecs.iter_masks(self.path, format=self.fmt)
            return
        import mmap

        # The codecs read record batches as views of the mapping (no copy). Once the consumer asks
        # for the next batch it is done with the last one, so we drop the mapped pages from the
        # resident set: they stay in the page cache (and fault back in if touched), and the process
        # stays near one batch of memory however large the file is.
        for batch in self.codecs.iter_masks(memoryview(mapped), format=self.fmt):
            yield batch
            mapped.madvise(mmap.MADV_DONTNEED)
            _release_arrow_memory()

    def read_error(self, exc: SamplingMaskError) -> CliError:
        return CliError(exc.code.value, f"{str(self.path)!r} is not a valid sampling-mask file: {_error_text(exc)}")


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


def _input(args: argparse.Namespace, name: str = "file") -> _Source:
    path = Path(getattr(args, name))
    _check_input(path)
    codecs = _codecs()
    fmt = _resolve_format(codecs, path, args.format)
    if fmt in STREAMING_FORMATS and "pyarrow" not in sys.modules:
        # Streaming holds one record batch at a time, but Arrow's default allocator (mimalloc) keeps
        # the arenas of finished batches: measured, 30-40 MiB more peak memory in a conversion. Arrow
        # reads this variable once, when pyarrow first allocates; the user's own choice wins.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    return _Source(codecs, path, fmt, json_family=args.format is None and fmt == "json")


def _read_all(source: _Source) -> SamplingMask:
    try:
        return source.load()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def _read_batches(source: _Source) -> Iterator[SamplingMask]:
    try:
        yield from source.batches()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def _error_text(exc: SamplingMaskError) -> str:
    """The message and its context, without the code prefix (the caller prints the code)."""
    text = str(exc)
    prefix = f"{exc.code.value}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def _arrow_schema(path: Path, fmt: str) -> Any:
    """The Arrow schema of an IPC file / stream or Parquet file (footer or first message only)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_schema(path)
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source) if fmt == "arrow" else pa.ipc.open_stream(source)
        return reader.schema


def _schema_value(path: Path, fmt: str, key: str) -> str | None:
    """``sampling_mask.<key>`` from the schema metadata of an Arrow / Parquet file, None when absent."""
    if fmt not in STREAMING_FORMATS:
        return None
    try:
        raw = (_arrow_schema(path, fmt).metadata or {}).get(f"sampling_mask.{key}".encode())
        return raw.decode() if raw is not None else None
    except Exception:  # noqa: BLE001 - the decoder has judged the file already; this is informative only
        return None


def _spec_version(source: _Source) -> int | None:
    """The spec major version the file declares; None for the forms that carry none (rows only)."""
    if source.fmt in ROWS_ONLY_FORMATS:
        return None
    if source.streaming:
        raw = _schema_value(source.path, source.fmt, "version")
        return int(raw) if raw is not None and raw.isdigit() else None
    # msgpack and the JSON document must carry the version, and the decoder accepted only this one.
    from . import SPEC_VERSION

    return SPEC_VERSION


def _count_segments(path: Path, fmt: str) -> int | None:
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


# ---------------------------------------------------------------------------- support statistics
class SupportSummary:
    """Support-size statistics accumulated batch by batch; exact (a histogram of row lengths).

    ``length_counts[k]`` = rows with k ids; an empty row (k = 0) means "no support recorded" and is
    left out of every support-size figure. Per-segment arrays are kept for ``stats``.
    """

    def __init__(self) -> None:
        import numpy as np

        self.rows = self.segments = self.nnz = self.batches = 0
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.vocab_size: int | None = None
        self.companions: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.ascending = True
        self._per_segment: list[dict[str, np.ndarray]] = []

    def add(self, mask: SamplingMask) -> None:
        import numpy as np

        lengths = mask.row_lengths
        counts = np.bincount(lengths, minlength=1) if lengths.size else np.zeros(1, dtype=np.int64)
        if counts.size > self.length_counts.size:
            counts[: self.length_counts.size] += self.length_counts
            self.length_counts = counts
        else:
            self.length_counts[: counts.size] += counts
        if self.batches == 0:
            self.vocab_size = mask.vocab_size
            self.companions = list(mask.companions)
            self.metadata = dict(mask.metadata)
        self.rows += mask.num_rows
        self.segments += mask.num_segments
        self.nnz += mask.nnz
        self.batches += 1
        self.ascending = self.ascending and mask.is_canonical
        self._per_segment.append(_segment_stats(mask))

    @property
    def empty_rows(self) -> int:
        return int(self.length_counts[0])

    def support(self) -> dict[str, Any]:
        """singleton_fraction, mean, median, p90, p99, max over the rows with a support."""
        return support_from_counts(self.length_counts)

    def per_segment(self) -> dict[str, np.ndarray]:
        import numpy as np

        keys = ("rows", "empty_rows", "ids", "mean_support", "median_support", "max_support")
        return {k: np.concatenate([p[k] for p in self._per_segment]) for k in keys} if self._per_segment else {}


def _segment_stats(mask: SamplingMask) -> dict[str, np.ndarray]:
    """Per segment: rows, empty rows, ids, and mean / median / max support size over non-empty rows."""
    import numpy as np

    cu, offsets, lengths = mask.cu_seqlens, mask.offsets, mask.row_lengths
    seg_rows = np.diff(cu)
    seg_of_row = np.repeat(np.arange(seg_rows.size), seg_rows)
    empty = np.bincount(seg_of_row[lengths == 0], minlength=seg_rows.size).astype(np.int64)
    ids = offsets[cu[1:]] - offsets[cu[:-1]]
    nonempty = seg_rows - empty
    # Sorting rows by (segment, length) puts each segment's empty rows first, then its supports ascending.
    ordered = lengths[np.lexsort((lengths, seg_of_row))].astype(np.float64)
    have = nonempty > 0
    first = cu[:-1] + empty  # first non-empty row of each segment in sorted order
    lo = np.where(have, first + (nonempty - 1) // 2, 0)
    hi = np.where(have, first + nonempty // 2, 0)
    last = np.where(have, cu[1:] - 1, 0)
    pick = ordered if ordered.size else np.zeros(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(have, ids / np.maximum(nonempty, 1), np.nan)
    median = np.where(have, (pick[lo] + pick[hi]) / 2, np.nan)
    widest = np.where(have, pick[last], 0).astype(np.int64)
    return {
        "rows": seg_rows,
        "empty_rows": empty,
        "ids": ids,
        "mean_support": mean,
        "median_support": median,
        "max_support": widest,
    }


def _value_at_rank(cumulative: np.ndarray, rank: int) -> int:
    import numpy as np

    return int(np.searchsorted(cumulative, rank, side="right")) + 1


def support_from_counts(length_counts: np.ndarray) -> dict[str, Any]:
    """Support-size figures from ``length_counts[k]`` = rows with k ids (row 0 = empty rows, ignored).

    Quantiles interpolate linearly between order statistics, like ``numpy.quantile``'s default.
    """
    import numpy as np

    counts = np.asarray(length_counts[1:], dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return {
            "rows": 0,
            "singleton_fraction": None,
            "mean": None,
            "median": None,
            "p90": None,
            "p99": None,
            "max": None,
        }
    sizes = np.arange(1, counts.size + 1, dtype=np.float64)
    cumulative = np.cumsum(counts)

    def quantile(q: float) -> float:
        h = (total - 1) * q
        lo, hi = math.floor(h), math.ceil(h)
        a, b = _value_at_rank(cumulative, lo), _value_at_rank(cumulative, hi)
        return a + (h - lo) * (b - a)

    return {
        "rows": total,
        "singleton_fraction": int(counts[0]) / total,
        "mean": float((sizes * counts).sum() / total),
        "median": quantile(0.5),
        "p90": quantile(0.9),
        "p99": quantile(0.99),
        "max": int(np.flatnonzero(counts)[-1]) + 1,
    }


def histogram_buckets(length_counts: np.ndarray) -> list[dict[str, Any]]:
    """Rows per power-of-two support-size bucket: 1, 2, 3-4, 5-8, 9-16, ... (empty rows left out)."""
    import numpy as np

    counts = np.asarray(length_counts, dtype=np.int64)
    total = int(counts[1:].sum())
    if total == 0:
        return []
    sizes = np.arange(1, counts.size)
    bucket = np.ceil(np.log2(sizes)).astype(np.int64)
    per_bucket = np.bincount(bucket, weights=counts[1:], minlength=int(bucket.max()) + 1).astype(np.int64)
    out = []
    for b, rows in enumerate(per_bucket.tolist()):
        lo, hi = (1, 1) if b == 0 else (2 ** (b - 1) + 1, 2**b)
        out.append(
            {"sizes": f"{lo}" if lo == hi else f"{lo}-{hi}", "lo": lo, "hi": hi, "rows": rows, "fraction": rows / total}
        )
    return out


def _histogram_lines(buckets: list[dict[str, Any]], width: int = 40) -> list[str]:
    peak = max((b["rows"] for b in buckets), default=0)
    lines = []
    for b in buckets:
        bar = "#" * (math.ceil(b["rows"] / peak * width) if b["rows"] else 0)
        lines.append(f"{b['sizes']:>11}  {bar:<{width}}  {b['rows']:,} ({b['fraction']:.1%})")
    return lines


def _summarize(source: _Source, args: argparse.Namespace, label: str) -> SupportSummary:
    """Statistics of the whole file, batch by batch (a streaming file never sits in memory whole)."""
    summary = SupportSummary()
    enabled = _progress_enabled(args) and source.streaming
    progress = _Progress(label, _count_segments(source.path, source.fmt) if enabled else None, enabled=enabled)
    try:
        for batch in _read_batches(source):
            summary.add(batch)
            progress.update(batch.num_segments, batch.num_rows)
    finally:
        progress.close()
    return summary


def _support_line(support: dict[str, Any]) -> str:
    if not support["rows"]:
        return "no row has a support"
    return (
        f"singletons {support['singleton_fraction']:.1%}  median {_fmt_num(support['median'])}  "
        f"mean {_fmt_num(support['mean'])}  p90 {_fmt_num(support['p90'])}  p99 {_fmt_num(support['p99'])}  "
        f"max {_fmt_num(support['max'])}"
    )


def _per_token(nbytes: int, rows: int) -> float | None:
    return nbytes / rows if rows else None


# ---------------------------------------------------------------------------- inspect
def cmd_inspect(args: argparse.Namespace) -> int:
    """Format, version, sizes, support-size figures and histogram, bytes per token, metadata."""
    source = _input(args)
    summary = _summarize(source, args, "inspect")
    path, fmt = source.path, source.fmt
    file_bytes = path.stat().st_size
    support = summary.support()
    buckets = histogram_buckets(summary.length_counts)
    report = {
        "file": str(path),
        "format": fmt,
        "spec_version": _spec_version(source),
        "file_bytes": file_bytes,
        "bytes_per_token": _per_token(file_bytes, summary.rows),
        "bytes_per_id": _per_token(file_bytes, summary.nnz),
        "record_batches": summary.batches if fmt in STREAMING_FORMATS else None,
        "vocab_size": summary.vocab_size,
        "rows": summary.rows,
        "segments": summary.segments,
        "nnz": summary.nnz,
        "empty_rows": summary.empty_rows,
        "id_order": "ascending" if summary.ascending else "unspecified",
        "companions": summary.companions,
        "support": {k: _finite(v) if isinstance(v, float) else v for k, v in support.items()},
        "histogram": buckets,
        "metadata": summary.metadata,
    }
    if args.json:
        _print_json(report)
        return 0
    rows = summary.rows
    batches = f", {_plural(summary.batches, 'record batch', 'record batches')}" if fmt in STREAMING_FORMATS else ""
    version = report["spec_version"]
    lines = [
        ("file", str(path)),
        ("format", f"{fmt}{batches}"),
        ("spec version", str(version) if version is not None else "not stored in this format"),
        ("vocab size", _fmt_num(summary.vocab_size) if summary.vocab_size is not None else "unknown"),
        ("rows", f"{rows:,} in {_plural(summary.segments, 'segment')}"),
        ("ids (nnz)", f"{summary.nnz:,}"),
        ("empty rows", f"{summary.empty_rows:,}" + (f" ({summary.empty_rows / rows:.1%})" if rows else "")),
        ("id order", report["id_order"]),
        ("companions", ", ".join(summary.companions) or "none"),
        (
            "size",
            f"{file_bytes:,} bytes ({_fmt_bytes(file_bytes)})"
            + (f", {file_bytes / rows:.2f} bytes per token" if rows else "")
            + (f", {file_bytes / summary.nnz:.2f} per id" if summary.nnz else ""),
        ),
        ("support size", _support_line(support)),
    ]
    for name, value in lines:
        _out(f"{name:<13} {value}")
    for line in _histogram_lines(buckets):
        _out(f"{'':<2}{line}")
    meta = "  ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in summary.metadata.items())
    _out(f"{'metadata':<13} {meta or 'none'}")
    return 0


# ---------------------------------------------------------------------------- stats
def cmd_stats(args: argparse.Namespace) -> int:
    """Support-size distribution overall and per segment; optional PNG histogram."""
    source = _input(args)
    if args.plot is not None:
        _require_matplotlib()
    summary = _summarize(source, args, "stats")
    path, fmt = source.path, source.fmt
    support = summary.support()
    per_segment = summary.per_segment()
    buckets = histogram_buckets(summary.length_counts)
    sizes = {str(k): int(c) for k, c in enumerate(summary.length_counts.tolist()) if k and c}
    if args.plot is not None:
        _plot(Path(args.plot), summary, path)
    if args.json:
        _print_json(
            {
                "file": str(path),
                "format": fmt,
                "rows": summary.rows,
                "segments": summary.segments,
                "nnz": summary.nnz,
                "empty_rows": summary.empty_rows,
                "support": support,
                "histogram": buckets,
                "support_size_counts": sizes,
                "per_segment": {k: [_finite(x) for x in v.tolist()] for k, v in per_segment.items()},
                "plot": args.plot,
            }
        )
        return 0
    _out(
        f"{path}: {summary.rows:,} rows in {summary.segments:,} segments, {summary.nnz:,} ids, "
        f"{summary.empty_rows:,} empty rows (no support recorded)"
    )
    _out(f"support size  {_support_line(support)}")
    for line in _histogram_lines(buckets):
        _out(f"  {line}")
    if summary.segments:
        _print_segments(per_segment, args.segments)
    if args.plot is not None:
        _out(f"wrote {args.plot}")
    return 0


def _print_segments(per_segment: dict[str, np.ndarray], limit: int) -> None:
    import numpy as np

    seg_rows = per_segment["rows"]
    _out(
        f"segments      rows per segment: min {int(seg_rows.min()):,}  median {_fmt_num(float(np.median(seg_rows)))}"
        f"  max {int(seg_rows.max()):,}"
    )
    _out(f"  {'segment':>8} {'rows':>8} {'empty':>7} {'ids':>10} {'mean':>7} {'median':>7} {'max':>7}")
    shown = min(limit, seg_rows.size)
    for b in range(shown):
        _out(
            f"  {b:>8} {int(seg_rows[b]):>8,} {int(per_segment['empty_rows'][b]):>7,} {int(per_segment['ids'][b]):>10,}"
            f" {_fmt_num(_finite(float(per_segment['mean_support'][b]))):>7}"
            f" {_fmt_num(_finite(float(per_segment['median_support'][b]))):>7}"
            f" {int(per_segment['max_support'][b]):>7,}"
        )
    if seg_rows.size > shown:
        _out(f"  ... {seg_rows.size - shown:,} more segments (--segments N shows more, --json shows all)")


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError("E_UNAVAILABLE", "--plot needs matplotlib (pip install 'sampling-mask[plot]')") from None


def _plot(out: Path, summary: SupportSummary, source: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    counts = summary.length_counts[1:]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if counts.sum():
        sizes = np.arange(1, counts.size + 1)
        # The text histogram's buckets: 1, 2, 3-4, 5-8, ... (edges halfway between sizes).
        edges = np.concatenate(([0.5, 1.5], 2.0 ** np.arange(1, int(np.log2(counts.size)) + 2) + 0.5))
        left.hist(sizes, bins=edges, weights=counts, color="#3465a4")
        left.set_xscale("log", base=2)
        left.set_yscale("log")
    left.set_xlabel("support size |S_t| (ids per row)")
    left.set_ylabel("rows")
    left.set_title(f"support sizes, {int(counts.sum()):,} rows with a support")
    per_segment = summary.per_segment()
    if per_segment and per_segment["rows"].size:
        means = per_segment["mean_support"]
        right.hist(means[np.isfinite(means)], bins=40, color="#73d216")
    right.set_xlabel("mean support size per segment")
    right.set_ylabel("segments")
    right.set_title(f"{summary.segments:,} segments")
    fig.suptitle(source.name)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as exc:
        raise CliError("E_IO", f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------- validate
def _read_sampled(path: Path) -> np.ndarray:
    """Sampled ids from a ``.npy`` integer array (no pickle) or a ``.json`` list of integers."""
    import numpy as np

    _check_input(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
        elif suffix == ".json":
            data = json.loads(path.read_bytes())
            if not isinstance(data, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in data):
                raise CliError("E_DTYPE", f"{str(path)!r} must hold a JSON list of integers (the sampled ids)")
            arr = np.array(data, dtype=np.int64) if data else np.zeros(0, dtype=np.int64)
        else:
            raise CliError("E_USAGE", f"--sampled takes a .npy or a .json file, not {str(path)!r}")
    except (ValueError, OSError) as exc:
        raise CliError("E_ENCODING", f"cannot read sampled ids from {str(path)!r}: {exc}") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise CliError("E_DTYPE", f"{str(path)!r} must hold a 1-D integer array, got {arr.dtype} {list(arr.shape)}")
    return arr


def _segment_of_row(cu_seqlens: np.ndarray, row: int) -> int | None:
    """The segment b with ``cu[b] <= row < cu[b+1]`` (None when ``cu_seqlens`` does not place the row)."""
    import numpy as np

    segment = int(np.searchsorted(cu_seqlens, row, side="right")) - 1
    if 0 <= segment < cu_seqlens.size - 1 and cu_seqlens[segment] <= row < cu_seqlens[segment + 1]:
        return segment
    return None


def _unvalidated_segments(source: _Source, batch_index: int) -> np.ndarray | None:
    """cu_seqlens of record batch ``batch_index`` read without content checks (sizes are still checked),
    to name the segment of a row the checks rejected; None when the format or the bytes do not allow it."""
    codecs = source.codecs
    try:
        if source.streaming:
            for i, batch in enumerate(codecs.iter_masks(source.path, format=source.fmt, validate=False)):
                if i == batch_index:
                    return batch.cu_seqlens  # type: ignore[no-any-return]
        elif source.fmt == "msgpack":
            return codecs.load(source.path, format="msgpack", validate=False).cu_seqlens  # type: ignore[no-any-return]
        elif source.fmt == "json":
            import numpy as np

            from .codecs import json as json_codec

            doc = json_codec.parse(source.path.read_bytes())
            rows = doc.get("rows")
            cu = doc.get("cu_seqlens", [0, len(rows)] if isinstance(rows, list) else None)
            return np.asarray(cu, dtype=np.int64) if isinstance(cu, list) else None
        elif source.fmt in ROWS_ONLY_FORMATS:
            import numpy as np

            return np.array([0, np.iinfo(np.int64).max], dtype=np.int64)  # one segment holds every row
    except Exception:  # noqa: BLE001 - best effort: without it the report names the row only
        return None
    return None


class _Position:
    """Where a batch-by-batch check stands: rows / segments / batches already accepted."""

    def __init__(self) -> None:
        self.rows = self.segments = self.nnz = self.batches = 0


def _error_report(
    exc: SamplingMaskError, source: _Source, position: _Position, batch: SamplingMask | None
) -> dict[str, Any]:
    """The error as data with file-wide row / segment numbers (the codecs number them within a batch)."""
    report = exc.to_dict()
    if exc.row is not None:
        report["row"] = position.rows + exc.row
        if exc.segment is None:
            cu = batch.cu_seqlens if batch is not None else _unvalidated_segments(source, position.batches)
            local = _segment_of_row(cu, exc.row) if cu is not None else None
            if local is not None and cu is not None:
                report["segment"] = position.segments + local
                report["row_in_segment"] = exc.row - int(cu[local])
    if exc.segment is not None:
        report["segment"] = position.segments + exc.segment
    if source.streaming:
        report["record_batch"] = position.batches
    return report


def _check_file(
    source: _Source, vocab_size: int | None, sampled: np.ndarray | None, position: _Position
) -> tuple[int | None, dict[str, Any] | None]:
    """Every check, batch by batch; (the file's vocab_size, the first error as data or None)."""
    batch: SamplingMask | None = None
    file_vocab: int | None = None
    try:
        for batch in source.batches():
            file_vocab = batch.vocab_size
            if vocab_size is not None:
                if batch.vocab_size is not None and batch.vocab_size != vocab_size:
                    raise SamplingMaskError(
                        "E_SCHEMA",
                        f"the file declares vocab_size {batch.vocab_size}, not {vocab_size}",
                        field="vocab_size",
                        value=batch.vocab_size,
                    )
                batch = batch.replace(vocab_size=vocab_size)
            if sampled is not None:
                part = sampled[position.rows : position.rows + batch.num_rows]
                if part.size != batch.num_rows:
                    raise SamplingMaskError(
                        "E_SHAPE",
                        f"the sampled-ids file holds {sampled.size} ids but the mask has more rows",
                        field="sampled_token_ids",
                        value=sampled.size,
                    )
                batch.replace(sampled_token_ids=part)
            position.rows += batch.num_rows
            position.segments += batch.num_segments
            position.nnz += batch.nnz
            position.batches += 1
            batch = None
        if sampled is not None and sampled.size != position.rows:
            raise SamplingMaskError(
                "E_SHAPE",
                f"the sampled-ids file holds {sampled.size} ids for {position.rows} rows",
                field="sampled_token_ids",
                value=sampled.size,
            )
    except SamplingMaskError as exc:
        return file_vocab, _error_report(exc, source, position, batch)
    return file_vocab, None


def cmd_validate(args: argparse.Namespace) -> int:
    """Exit 0 when the file (and the given vocab size / sampled ids) is valid, else 1 with the first error.

    Streaming formats are checked record batch by record batch; rows and segments in the report are
    numbered across the whole file.
    """
    source = _input(args)
    sampled = _read_sampled(Path(args.sampled)) if args.sampled is not None else None
    checked = ["structure"] + (["vocab_size"] if args.vocab_size is not None else [])
    checked += ["sampled_token_ids"] if sampled is not None else []
    position = _Position()
    vocab, error = _check_file(source, args.vocab_size, sampled, position)
    path, fmt = source.path, source.fmt
    valid = error is None
    if args.json:
        doc: dict[str, Any] = {"file": str(path), "format": fmt, "valid": valid, "checked": checked}
        if valid:
            doc.update(rows=position.rows, segments=position.segments, nnz=position.nnz, vocab_size=vocab)
        else:
            doc["error"] = error
        _print_json(doc)
    elif error is None:
        _out(
            f"valid: {path} ({fmt}, {_plural(position.rows, 'row')}, {_plural(position.segments, 'segment')}, "
            f"{_plural(position.nnz, 'id')}; "
            f"checked {', '.join(checked)})"
        )
    else:
        keys = ("record_batch", "segment", "row", "row_in_segment", "field")
        where = [f"{k.replace('_', ' ')} {error[k]}" for k in keys if k in error]
        if "value" in error:
            where.append(f"offending value {error['value']!r}")
        _out(f"invalid: {path}: {error['code']}: {error['message']}" + (f" ({', '.join(where)})" if where else ""))
    return 0 if valid else 1


# ---------------------------------------------------------------------------- convert
def _rebatch(batches: Iterable[SamplingMask], target_rows: int) -> Iterator[SamplingMask]:
    """Batches of at least ``target_rows`` rows (the last may be smaller), cut at segment boundaries.

    A segment longer than ``target_rows`` becomes a batch of its own. No segment is ever split.
    """
    import numpy as np

    from .core.model import concat

    pending: list[SamplingMask] = []
    pending_rows = 0
    for mask in batches:
        cu = mask.cu_seqlens
        start = 0
        while start < mask.num_segments:
            need = target_rows - pending_rows
            stop = int(np.searchsorted(cu, cu[start] + need, side="left"))
            stop = min(max(stop, start + 1), mask.num_segments)
            piece = mask if (start, stop) == (0, mask.num_segments) else mask.take(np.arange(start, stop))
            pending.append(piece)
            pending_rows += piece.num_rows
            start = stop
            if pending_rows >= target_rows:
                yield pending[0] if len(pending) == 1 else concat(pending)
                pending, pending_rows = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else concat(pending)


def _writer_options(args: argparse.Namespace, out_fmt: str) -> dict[str, Any]:
    """Codec options from the flags; a flag the output format cannot honour is ``E_USAGE``."""
    opts: dict[str, Any] = {}
    streaming = ", ".join(STREAMING_FORMATS)
    if args.compression is not None:
        if out_fmt not in STREAMING_FORMATS:
            raise CliError("E_USAGE", f"--compression applies to {streaming} output, not {out_fmt}")
        opts["compression"] = args.compression
    if args.batch_rows is not None:
        if out_fmt not in STREAMING_FORMATS:
            raise CliError("E_USAGE", f"--batch-rows applies to {streaming} output, not {out_fmt}")
        if args.batch_rows < 1:
            raise CliError("E_USAGE", f"--batch-rows must be >= 1, got {args.batch_rows}")
    if args.compact:
        _warn("--compact is deprecated; use --layout compact")
    layout = "compact" if args.compact else args.layout
    if layout is not None:
        if out_fmt not in (*STREAMING_FORMATS, "msgpack"):
            raise CliError("E_USAGE", f"--layout applies to {streaming} and msgpack output, not {out_fmt}")
        opts["layout"] = layout
    if args.allow_loss:
        if out_fmt not in ROWS_ONLY_FORMATS:
            raise CliError("E_USAGE", f"--allow-loss applies to {', '.join(ROWS_ONLY_FORMATS)} output, not {out_fmt}")
        opts["allow_loss"] = True
    return opts


def _convert_streaming(
    source: _Source, tmp: Path, out_fmt: str, opts: dict[str, Any], batch_rows: int | None, progress: _Progress
) -> tuple[int, int]:
    """Batch in, batch out: memory stays near one record batch whatever the file size."""
    if opts.get("layout") != "compact":
        # Declare the input's id order up front: the first batch alone would not tell it.
        declared = _schema_value(source.path, source.fmt, "id_order") if source.streaming else None
        if declared in ("ascending", "unspecified"):
            opts = {**opts, "id_order": declared}
    batches: Iterable[SamplingMask] = _read_batches(source)
    if not source.streaming:
        whole = _read_all(source)
        opts.setdefault("id_order", "ascending" if whole.is_canonical else "unspecified")
        batches = [whole]
        batch_rows = batch_rows or 1 << 16  # give a one-piece input record batches a reader can stream
    if batch_rows is not None:
        batches = _rebatch(batches, batch_rows)
    rows = segments = 0
    with source.codecs.open_writer(tmp, format=out_fmt, **opts) as writer:
        for batch in batches:
            writer.write(batch)
            rows += batch.num_rows
            segments += batch.num_segments
            progress.update(batch.num_segments, batch.num_rows)
    return rows, segments


def _chmod_like_new_file(path: Path) -> None:
    """The mode an ordinary new file gets (0666 less the umask); mkstemp makes files 0600."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def cmd_convert(args: argparse.Namespace) -> int:
    """IN -> OUT; Arrow file / stream and Parquet go batch by batch (files larger than memory convert)."""
    source = _input(args, "input")
    dst = Path(args.output)
    out_fmt = _resolve_format(source.codecs, dst, args.to, flag="--to")
    opts = _writer_options(args, out_fmt)
    if dst.is_dir():
        raise CliError("E_IO", f"{str(dst)!r} is a directory; name the output file")
    if not dst.parent.is_dir():
        raise CliError("E_IO", f"no such directory: {str(dst.parent)!r}")
    # Write next to the target and rename at the end: a failed conversion never leaves half a file,
    # and converting a file onto itself reads all of the old one first.
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent)
    except OSError as exc:
        raise CliError("E_IO", f"cannot write in {str(dst.parent)!r}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    enabled = _progress_enabled(args) and source.streaming
    progress = _Progress("convert", _count_segments(source.path, source.fmt) if enabled else None, enabled=enabled)
    try:
        if out_fmt in STREAMING_FORMATS:
            rows, segments = _convert_streaming(source, tmp, out_fmt, opts, args.batch_rows, progress)
        else:
            mask = _read_all(source)
            rows, segments = mask.num_rows, mask.num_segments
            source.codecs.save(mask, tmp, format=out_fmt, **opts)
        _chmod_like_new_file(tmp)
        os.replace(tmp, dst)
    except SamplingMaskError as exc:
        hint = (
            "; --allow-loss keeps the rows only" if out_fmt in ROWS_ONLY_FORMATS and "allow_loss" in exc.message else ""
        )
        raise CliError(exc.code.value, f"cannot write {out_fmt}: {_error_text(exc)}{hint}") from None
    except OSError as exc:
        raise CliError("E_IO", f"cannot write {str(dst)!r}: {exc.strerror or exc}") from None
    finally:
        progress.close()
        tmp.unlink(missing_ok=True)
    if not args.quiet:
        size = dst.stat().st_size
        extras = "".join(f", {k}={v}" for k, v in opts.items() if k != "id_order")
        _out(
            f"{source.path} ({source.fmt}) -> {dst} ({out_fmt}{extras}): {rows:,} rows, {segments:,} segments, "
            f"{size:,} bytes" + (f" ({size / rows:.2f} per token)" if rows else "")
        )
    return 0


# ---------------------------------------------------------------------------- demo
def _demo_rollout(tokens: int, seed: int) -> SamplingMask:
    """A rollout from the calibrated synthetic workload (support sizes fitted to real runs)."""
    from . import synthetic

    return synthetic.rollout(tokens, seed=seed)


def _same_rows(a: SamplingMask, b: SamplingMask) -> bool:
    import numpy as np

    return np.array_equal(a.offsets, b.offsets) and np.array_equal(a.canonical().ids, b.canonical().ids)


#: What the demo writes: (label, format, codec options). Rows-only formats need ``allow_loss``.
def _demo_variants(formats: Sequence[str]) -> list[tuple[str, str, dict[str, Any]]]:
    out: list[tuple[str, str, dict[str, Any]]] = []
    for fmt in formats:
        out.append((fmt, fmt, {"allow_loss": True} if fmt in ROWS_ONLY_FORMATS else {}))
    extras: list[tuple[str, str, dict[str, Any]]] = [
        ("arrows+zstd", "arrows", {"compression": "zstd"}),
        ("arrows+compact", "arrows", {"layout": "compact"}),
        ("msgpack+compact", "msgpack", {"layout": "compact"}),
    ]
    return out + [e for e in extras if e[1] in formats]


def _demo_round_trip(
    mask: SamplingMask, label: str, fmt: str, opts: dict[str, Any], folder: Path, codecs: Any
) -> dict[str, Any]:
    """Write ``mask`` as ``fmt``, read it back, validate it and compare it (rows only for rows-only formats)."""
    extension = {v: k for k, v in reversed(list(codecs.EXTENSIONS.items()))}.get(fmt, ".json")
    path = folder / f"rollout{'' if label == fmt else '-' + label.split('+')[1]}{extension}"
    if fmt in ROWS_ONLY_FORMATS:
        path = path.with_name(f"rollout-{fmt}.json")
    result: dict[str, Any] = {"format": label, "file": path.name}
    result["keeps"] = "rows only" if fmt in ROWS_ONLY_FORMATS else "everything"
    try:
        t0 = time.perf_counter()
        codecs.save(mask, path, format=fmt, **opts)
        t1 = time.perf_counter()
        back = codecs.load(path, format=fmt)
        t2 = time.perf_counter()
        back.validate()
        ok = _same_rows(back, mask) if fmt in ROWS_ONLY_FORMATS else back == mask
        result.update(bytes=path.stat().st_size, write_s=t1 - t0, read_s=t2 - t1, ok=ok)
        if not ok:
            result["problem"] = "what was read back differs from what was written"
    except SamplingMaskError as exc:
        result.update(ok=False, problem=str(exc))
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL_EXTRAS:
            raise
        result.update(ok=None, problem=_missing_dependency(exc.name))
    return result


def _demo_score(mask: SamplingMask, compare_rows: int, seed: int) -> tuple[str, bool]:
    """Renormalized log-probs of the sampled ids under a tiny random model, from hidden states and an
    lm-head (never [T, V] logits), checked on the first rows against an independent float64
    computation from full logits, next to the full-vocabulary log-probs. (report, checks passed)."""
    try:
        import torch
    except ImportError:
        return "scoring skipped: torch is not installed (pip install 'sampling-mask[torch]')", True
    try:
        from .reference_scorer import masked_logprobs_from_hidden
    except ImportError as exc:
        return f"scoring skipped: the reference scorer is not available ({exc})", True
    sampled = mask.sampled_token_ids
    if sampled is None or mask.nnz == 0 or mask.vocab_size is None:
        return "scoring skipped: the rollout has no sampled ids or no vocab_size", True
    from .core import layouts

    generator = torch.Generator().manual_seed(seed)
    dim = 64
    hidden = torch.randn(mask.num_rows, dim, generator=generator)
    weight = torch.randn(mask.vocab_size, dim, generator=generator) * (3.0 / dim**0.5)
    temps = mask.temperature if mask.temperature is not None else [1.0] * mask.num_rows
    temperature = torch.tensor(temps, dtype=torch.float32)
    t0 = time.perf_counter()
    scores = masked_logprobs_from_hidden(hidden, weight, mask, temperature=temperature)
    elapsed = time.perf_counter() - t0
    assert scores.logprobs is not None
    # Independently, in float64, on the first rows: full logits, then the rule written out.
    part = mask[: min(compare_rows, mask.num_rows)]
    n = part.num_rows
    targets = torch.from_numpy(sampled[:n].astype("int64"))
    logits = (hidden[:n].double() @ weight.T.double()) / temperature[:n].double()[:, None]
    full = torch.log_softmax(logits, dim=-1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
    rows = torch.from_numpy(layouts.row_of_ids(part.offsets))
    support_logits = logits[rows, torch.from_numpy(part.ids.astype("int64"))]
    top = logits.max(dim=1).values
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, rows, torch.exp(support_logits - top[rows]))
    reference = logits.gather(1, targets.clamp(min=0)[:, None])[:, 0] - (torch.log(sums) + top)
    scored = torch.from_numpy(part.row_lengths > 0) & (targets >= 0)
    ours = scores.logprobs[:n].double()
    exact = bool(torch.allclose(ours[scored], reference[scored], rtol=0, atol=1e-4))
    above = bool((ours[scored] >= full[scored] - 1e-4).all())
    text = (
        f"scored {int(scores.valid.sum()):,} rows with a random model (d = {dim}, V = {mask.vocab_size:,}) from "
        f"hidden states in {elapsed:.2f} s, never forming [T, V] logits; {int(scores.replayed.sum()):,} rows "
        f"renormalized over their mask, {scores.empty_rows:,} empty rows over the full vocabulary\n"
        f"first {int(scored.sum()):,} rows: mean log-prob of the sampled id {float(ours[scored].mean()):.3f} "
        f"over the mask vs {float(full[scored].mean()):.3f} over the full vocabulary; "
        f"equal to a float64 recomputation: {'OK' if exact else 'NO'}; masked >= full: {'OK' if above else 'NO'}"
    )
    return text, exact and above


def cmd_demo(args: argparse.Namespace) -> int:
    """Generate a rollout, write it in every format, read each back and validate, score, summarize."""
    codecs = _codecs()
    if args.tokens < 1:
        raise CliError("E_USAGE", f"--tokens must be >= 1, got {args.tokens}")
    t0 = time.perf_counter()
    mask = _demo_rollout(args.tokens, args.seed)
    gen_s = time.perf_counter() - t0
    summary = SupportSummary()
    summary.add(mask)
    from .synthetic import TARGETS as real

    _out(
        f"rollout: {mask.num_rows:,} tokens in {_plural(mask.num_segments, 'sequence')}, {mask.nnz:,} ids, "
        f"vocab {mask.vocab_size or 'unknown'} (sampling_mask.synthetic, seed {args.seed}, {gen_s:.2f} s)"
    )
    _out(f"support sizes: {_support_line(summary.support())}")
    _out(
        f"  real RL runs: singletons {real['singleton_fraction']:.0%}  median {_fmt_num(real['median'])}"
        f"  mean ~{_fmt_num(real['mean'])}  p99 ~{_fmt_num(real['p99'])}"
    )
    with contextlib.ExitStack() as stack:
        if args.out is not None:
            folder = Path(args.out)
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CliError("E_IO", f"cannot create {str(folder)!r}: {exc.strerror or exc}") from None
        else:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sampling-mask-demo-")))
        variants = _demo_variants(codecs.FORMATS)
        results = [_demo_round_trip(mask, label, fmt, opts, folder, codecs) for label, fmt, opts in variants]
    _out(f"\n{'format':<16} {'bytes':>11} {'B/token':>8} {'write ms':>9} {'read ms':>8}  {'round trip':<10}  keeps")
    for r in results:
        if r["ok"] is None:
            _out(f"{r['format']:<16} {'-':>11} {'-':>8} {'-':>9} {'-':>8}  {'skipped':<10}  {r['keeps']}")
        elif "bytes" in r:
            _out(
                f"{r['format']:<16} {r['bytes']:>11,} {r['bytes'] / mask.num_rows:>8.2f} {r['write_s'] * 1e3:>9.1f}"
                f" {r['read_s'] * 1e3:>8.1f}  {'OK' if r['ok'] else 'FAILED':<10}  {r['keeps']}"
            )
        else:
            _out(f"{r['format']:<16} {'-':>11} {'-':>8} {'-':>9} {'-':>8}  {'FAILED':<10}  {r['keeps']}")
    for r in results:
        if r["ok"] is False:
            _out(f"  {r['format']}: {r['problem']}")
    reasons: dict[str, list[str]] = {}
    for r in results:
        if r["ok"] is None:
            reasons.setdefault(r["problem"], []).append(r["format"])
    for reason, labels in reasons.items():
        _out(f"  skipped {', '.join(labels)}: {reason}")
    _out("")
    score_text, score_ok = _demo_score(mask, args.score_rows, args.seed)
    _out(score_text)
    failed = [r["format"] for r in results if r["ok"] is False] + ([] if score_ok else ["scoring"])
    skipped = [r["format"] for r in results if r["ok"] is None]
    _out(
        f"round trips: {sum(r['ok'] is True for r in results)} of {len(results)} OK"
        + (f", {len(skipped)} skipped" if skipped else "")
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    if args.out is not None:
        kept = sorted(p.name for p in folder.glob("rollout*"))
        first = "rollout.arrows" if "rollout.arrows" in kept else (kept or [""])[0]
        _out(
            f"files kept in {folder}: {', '.join(kept)}" + (f"; next: {PROG} inspect {folder / first}" if kept else "")
        )
    return 1 if failed else 0


# ---------------------------------------------------------------------------- parser and dispatch
def _delegate(command: str, argv: list[str]) -> int:
    """``main(argv)`` of the module that owns ``command``; its exit status (argparse's included)."""
    import importlib

    entry: Callable[[list[str]], int | None] = importlib.import_module(DELEGATED[command][0]).main
    try:
        status = entry(argv)
    except SystemExit as exc:  # --help or a usage error inside the delegate's argparse
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    return int(status or 0)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    common.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar or chatter"
    )
    from . import __version__

    parser = _Parser(
        prog=PROG,
        parents=[common],
        description="Sampling masks for LLM reinforcement learning: inspect, validate, convert and "
        "benchmark files in the sampling-mask format (spec v1).",
        epilog="Exit status: 0 ok, 1 invalid (validate) or a failed round trip (demo), 2 usage error, "
        "3 internal error.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def add(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    p = add("demo", "write a realistic rollout in every format, read each back, validate, score", cmd_demo)
    p.add_argument("--tokens", type=int, default=8192, help="rows (generated tokens) in the rollout (default 8192)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", metavar="DIR", help="keep the files in DIR (default: a temporary folder)")
    p.add_argument(
        "--score-rows", type=int, default=128, help="rows also scored over the full vocabulary (default 128)"
    )

    fmt_help = "input format when the extension does not say it (arrow, arrows, parquet, msgpack, json, ...)"
    p = add("inspect", "format, version, sizes, support-size figures, bytes per token, metadata", cmd_inspect)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", help=fmt_help)
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = add("validate", "check every invariant of the spec; exit 0 valid, 1 invalid", cmd_validate)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", help=fmt_help)
    p.add_argument("--vocab-size", type=int, metavar="N", help="also check every id is < N")
    p.add_argument(
        "--sampled",
        metavar="FILE",
        help="also check each non-empty row holds its sampled id: a .npy integer array or a .json list, one id per row",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = add("convert", "convert between formats (Arrow and Parquet batch by batch)", cmd_convert)
    p.add_argument("input", metavar="IN")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--format", help=fmt_help)
    p.add_argument("--to", metavar="FORMAT", help="output format (default: from OUT's extension)")
    p.add_argument("--compression", choices=("zstd", "lz4"), help="buffer compression (arrow, arrows, parquet)")
    p.add_argument(
        "--batch-rows",
        type=int,
        metavar="N",
        help="regroup into record batches of about N rows, cut between segments (default: keep the input's)",
    )
    p.add_argument(
        "--layout",
        choices=("ragged", "compact"),
        help="ragged (default) or compact (arrow, arrows, parquet, msgpack)",
    )
    p.add_argument("--compact", action="store_true", help="deprecated: --layout compact")
    p.add_argument(
        "--allow-loss", action="store_true", help="json-rows / base64: keep the rows only, drop everything else"
    )

    p = add("stats", "support-size distribution overall and per segment", cmd_stats)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", help=fmt_help)
    p.add_argument("--plot", metavar="PNG", help="write a PNG histogram (needs matplotlib)")
    p.add_argument("--segments", type=int, default=20, metavar="N", help="segments listed (default 20)")
    p.add_argument("--json", action="store_true", help="print one JSON document")

    for name, (_module, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _split_delegated(argv: Sequence[str]) -> tuple[list[str], str, list[str]] | None:
    """(global flags, command, rest) when the command is handed to another module, else None."""
    for i, token in enumerate(argv):
        if token in ("--debug", "-q", "--quiet"):
            continue
        if token in DELEGATED:
            return list(argv[:i]), token, list(argv[i + 1 :])
        return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    delegated = _split_delegated(args_list)
    debug = "--debug" in (delegated[0] if delegated else args_list)
    try:
        if delegated is not None:
            return _delegate(delegated[1], delegated[2])
        parser = build_parser()
        try:
            args = parser.parse_args(args_list)
        except SystemExit as exc:  # --help, --version and usage errors
            return exc.code if isinstance(exc.code, int) else 0
        debug = bool(getattr(args, "debug", False))
        args.quiet = bool(getattr(args, "quiet", False))
        status: int = args.func(args)
        sys.stdout.flush()
        return status
    except CliError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    except SamplingMaskError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL_EXTRAS:
            return _internal_error(exc, debug)
        if debug:
            import traceback

            traceback.print_exc()
        sys.stderr.write(f"{PROG}: error: E_UNAVAILABLE: {_missing_dependency(exc.name)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): not an error; silence the flush at exit.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, traceback on --debug
        return _internal_error(exc, debug)


def _internal_error(exc: BaseException, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    sys.stderr.write(
        f"{PROG}: internal error: {type(exc).__name__}: {exc} (a bug; rerun with --debug for the traceback)\n"
    )
    return 3
