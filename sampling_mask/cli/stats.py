"""``sampling-mask stats FILE``: the support-size distribution overall and per segment (the numbers of
:mod:`sampling_mask.data.stats`); ``--plot`` writes a PNG histogram (matplotlib)."""

from __future__ import annotations

import argparse
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..data.stats import SEGMENT_FIELDS, SupportSummary
from ._common import (
    FORMAT_HELP,
    CliError,
    JsonArray,
    add_command,
    finite,
    fmt_num,
    histogram_lines,
    out,
    print_json,
    require_matplotlib,
    save_png,
    shown,
    support_line,
)
from ._source import (
    input_files,
    not_read,
    open_input,
    read_batches,
    summarize_file,
)

if TYPE_CHECKING:
    from ..codecs.walk import Skipped


def run(args: argparse.Namespace) -> int:
    """Support-size distribution overall and per segment; optional PNG histogram."""
    if args.plot is not None:
        require_matplotlib()
    listed = input_files(args.file)
    if listed is not None:
        return _run_many(args, *listed)
    source = open_input(args)
    # Per-segment figures: the first --segments kept for the text; every one spooled to disk for
    # --json and --plot, read back a chunk at a time (memory O(batch), never O(segments)).
    spool = args.json or args.plot is not None
    summary = summarize_file(source, args, "stats", keep=0 if args.json else max(args.segments, 0), spool=spool)
    path, fmt = source.path, source.fmt
    document = summary.to_dict(per_segment=False)
    if args.plot is not None:
        _plot(Path(args.plot), summary, path)
    if args.json:
        per_segment = {
            key: JsonArray(summary.segments, functools.partial(summary.per_segment_chunks, key))
            for key in SEGMENT_FIELDS
        }
        print_json(
            {
                "file": str(path),
                "format": fmt,
                **document,
                "per_segment": per_segment if summary.batches else {},
                "plot": args.plot,
            }
        )
        return 0
    out(
        "{file}: {rows:,} rows in {segments:,} segments, {nnz:,} ids, {empty:,} empty rows (no support recorded)",
        file=path,
        rows=summary.rows,
        segments=summary.segments,
        nnz=summary.nnz,
        empty=summary.empty_rows,
    )
    _print_support(document)
    if summary.segments:
        _print_segments(summary, args.segments)
    if args.plot is not None:
        out("wrote {file}", file=args.plot)
    return 0


def _run_many(args: argparse.Namespace, paths: list[Path], skipped: list[Skipped]) -> int:
    """Per file: counts and support sizes (or the file's error); then the whole set together. Entries
    that look like mask files but are not read (a FIFO, a dangling link) are listed as failed.

    One file at a time: a file's summary keeps counts only (per-segment figures are spooled to disk
    for ``--plot``), so the folder's peak memory is that of its largest file, not the sum."""
    spool = args.plot is not None
    total = SupportSummary(keep=0, spool=spool)
    files: list[dict[str, Any]] = []
    for entry in skipped:
        files.append(not_read(entry))
        if not args.json:
            out("{file}: not read: {code}: {message}", file=entry.path, **files[-1]["error"])
    for path in paths:
        summary = SupportSummary(keep=0, spool=spool)
        try:
            source = open_input(argparse.Namespace(**{**vars(args), "file": str(path)}))
            for batch in read_batches(source):
                summary.add(batch)
        except CliError as exc:
            files.append({"file": str(path), "error": {"code": exc.code, "message": exc.message}})
            if not args.json:
                out("{file}: {code}: {message}", file=path, code=exc.code, message=exc.message)
            continue
        total.merge(summary)
        summary.close()
        document = summary.to_dict(per_segment=False)
        keys = ("rows", "segments", "nnz", "empty_rows", "support")
        files.append({"file": str(path), "format": source.fmt, **{k: document[k] for k in keys}})
        if not args.json:
            out(
                "{file}: {rows:,} rows, {segments:,} segments, {nnz:,} ids; support {support}",
                file=path,
                rows=summary.rows,
                segments=summary.segments,
                nnz=summary.nnz,
                support=support_line(document["support"]),
            )
    document = total.to_dict(per_segment=False)
    failed = sum("error" in f for f in files)
    if args.plot is not None:
        _plot(Path(args.plot), total, Path(args.file))
    if args.json:
        print_json({"files": files, "total": document, "failed_files": failed, "plot": args.plot})
    else:
        out(
            "total: {read:,} of {files:,} files, {rows:,} rows in {segments:,} segments, {nnz:,} ids, "
            "{empty:,} empty rows",
            read=len(files) - failed,
            files=len(files),
            rows=total.rows,
            segments=total.segments,
            nnz=total.nnz,
            empty=total.empty_rows,
        )
        _print_support(document)
        if args.plot is not None:
            out("wrote {file}", file=args.plot)
    return 0 if failed == 0 else 1


def _print_support(document: dict[str, Any]) -> None:
    """The support-size line and the histogram of a summary's ``to_dict()``."""
    out("support size  {support}", support=support_line(document["support"]))
    for line in histogram_lines(document["histogram"]):
        out("  {line}", line=line)


def _print_segments(summary: SupportSummary, limit: int) -> None:
    seg_rows = summary.segment_rows()
    out(
        "segments      rows per segment: min {min:,}  median {median}  max {max:,}",
        min=seg_rows["min"],
        median=fmt_num(seg_rows["median"]),
        max=seg_rows["max"],
    )
    out(
        "  {b:>8} {rows:>8} {empty:>7} {ids:>10} {mean:>7} {median:>7} {max:>7}",
        b="segment",
        rows="rows",
        empty="empty",
        ids="ids",
        mean="mean",
        median="median",
        max="max",
    )
    per_segment = summary.per_segment(first=max(limit, 0))
    listed = per_segment["rows"]
    for b in range(listed.size):
        out(
            "  {b:>8} {rows:>8,} {empty:>7,} {ids:>10,} {mean:>7} {median:>7} {max:>7,}",
            b=b,
            rows=int(listed[b]),
            empty=int(per_segment["empty_rows"][b]),
            ids=int(per_segment["ids"][b]),
            mean=fmt_num(finite(float(per_segment["mean_support"][b]))),
            median=fmt_num(finite(float(per_segment["median_support"][b]))),
            max=int(per_segment["max_support"][b]),
        )
    if summary.segments > listed.size:
        out(
            "  ... {more:,} more segments (--segments N shows more, --json shows all)",
            more=summary.segments - listed.size,
        )


def _mean_support_histogram(summary: SupportSummary, bins: int = 40) -> tuple[Any, Any] | None:
    """(counts, edges) of the per-segment mean support sizes, as ``numpy.histogram(means, bins)``
    gives them, read from the spool a chunk at a time (two passes: the range, then the counts)."""
    import numpy as np

    lo, hi = np.inf, -np.inf
    for chunk in summary.per_segment_chunks("mean_support"):
        finite_means = chunk[np.isfinite(chunk)]
        if finite_means.size:
            lo, hi = min(lo, float(finite_means.min())), max(hi, float(finite_means.max()))
    if lo > hi:
        return None
    counts = np.zeros(bins, dtype=np.int64)
    edges = None
    for chunk in summary.per_segment_chunks("mean_support"):
        part, edges = np.histogram(chunk[np.isfinite(chunk)], bins=bins, range=(lo, hi))
        counts += part
    return counts, edges


def _plot(out: Path, summary: SupportSummary, source: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    counts = summary.length_counts[1:]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if counts.sum():
        sizes = np.arange(1, counts.size + 1)
        left.hist(sizes, bins=_size_edges(counts.size), weights=counts, color="#3465a4")
        _integer_size_axis(left, counts.size)
        left.set_yscale("log")
    left.set_xlabel("support size |S_t| (ids per row)")
    left.set_ylabel("rows")
    left.set_title(f"support sizes, {int(counts.sum()):,} rows with a support")
    means = _mean_support_histogram(summary)
    if means is not None:
        per_bin, edges = means
        right.hist(edges[:-1], bins=edges, weights=per_bin, color="#73d216")
    right.set_xlabel("mean support size per segment")
    right.set_ylabel("segments")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole segments, never 0.5
    right.set_title(f"{summary.segments:,} segments")
    fig.suptitle(shown(source.name))  # a figure, not a line of text: escaped and cut as text is
    fig.tight_layout()
    save_png(fig, out)


def _size_edges(widest: int) -> Any:
    """Bin edges of the text histogram's buckets 1, 2, 3-4, 5-8, ...: each bucket runs from its first
    size to the next bucket's (``[1, 2, 3, 5, 9, ...]``), so the axis starts at size 1."""
    import numpy as np

    return np.concatenate(([1.0], 2.0 ** np.arange(0, int(np.log2(widest)) + 2) + 1))


def _integer_size_axis(ax: Any, widest: int) -> None:
    """A log-2 x-axis of support sizes from 1, with integer ticks at the powers of two (1, 2, 4, ...)."""
    import numpy as np
    from matplotlib.ticker import NullLocator

    edges = _size_edges(widest)
    ax.set_xscale("log", base=2)
    ticks = 2 ** np.arange(0, int(np.log2(edges[-1])) + 1)
    ax.set_xticks(ticks, labels=[f"{int(t):,}" for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(1, edges[-1])


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, common, "stats", "support-size distribution overall and per segment", run)
    p.add_argument("file", metavar="FILE", help="a mask file, or a directory / glob of them (per file, then in total)")
    p.add_argument("--format", help=FORMAT_HELP)
    p.add_argument("--plot", metavar="PNG", help="write a PNG histogram (needs matplotlib)")
    p.add_argument("--segments", type=int, default=20, metavar="N", help="segments listed (default 20)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
