"""``sampling-mask stats FILE``: the support-size distribution overall and per segment (the numbers of
:mod:`sampling_mask.stats`); ``--plot`` writes a PNG histogram (matplotlib)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stats import SupportSummary
from ._common import (
    FORMAT_HELP,
    CliError,
    add_command,
    finite,
    fmt_num,
    histogram_lines,
    out,
    print_json,
    require_matplotlib,
    save_png,
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
    import numpy as np

    from ..codecs._walk import Skipped


def run(args: argparse.Namespace) -> int:
    """Support-size distribution overall and per segment; optional PNG histogram."""
    if args.plot is not None:
        require_matplotlib()
    listed = input_files(args.file)
    if listed is not None:
        return _run_many(args, *listed)
    source = open_input(args)
    summary = summarize_file(source, args, "stats")
    path, fmt = source.path, source.fmt
    document = summary.to_dict()
    if args.plot is not None:
        _plot(Path(args.plot), summary, path)
    if args.json:
        print_json({"file": str(path), "format": fmt, **document, "plot": args.plot})
        return 0
    support, per_segment = document["support"], summary.per_segment()
    out(
        f"{path}: {summary.rows:,} rows in {summary.segments:,} segments, {summary.nnz:,} ids, "
        f"{summary.empty_rows:,} empty rows (no support recorded)"
    )
    out(f"support size  {support_line(support)}")
    for line in histogram_lines(document["histogram"]):
        out(f"  {line}")
    if summary.segments:
        _print_segments(per_segment, args.segments)
    if args.plot is not None:
        out(f"wrote {args.plot}")
    return 0


def _run_many(args: argparse.Namespace, paths: list[Path], skipped: list[Skipped]) -> int:
    """Per file: counts and support sizes (or the file's error); then the whole set together. Entries
    that look like mask files but are not read (a FIFO, a dangling link) are listed as failed."""
    total = SupportSummary()
    files: list[dict[str, Any]] = []
    for entry in skipped:
        files.append(not_read(entry))
        if not args.json:
            out(f"{entry.path}: not read: {entry.error.code.value}: {files[-1]['error']['message']}")
    for path in paths:
        summary = SupportSummary()
        try:
            source = open_input(argparse.Namespace(**{**vars(args), "file": str(path)}))
            for batch in read_batches(source):
                summary.add(batch)
        except CliError as exc:
            files.append({"file": str(path), "error": {"code": exc.code, "message": exc.message}})
            if not args.json:
                out(f"{path}: {exc.code}: {exc.message}")
            continue
        total.merge(summary)
        document = summary.to_dict()
        keys = ("rows", "segments", "nnz", "empty_rows", "support")
        files.append({"file": str(path), "format": source.fmt, **{k: document[k] for k in keys}})
        if not args.json:
            out(
                f"{path}: {summary.rows:,} rows, {summary.segments:,} segments, {summary.nnz:,} ids; "
                f"support {support_line(document['support'])}"
            )
    document = {k: v for k, v in total.to_dict().items() if k != "per_segment"}
    failed = sum("error" in f for f in files)
    if args.plot is not None:
        _plot(Path(args.plot), total, Path(args.file))
    if args.json:
        print_json({"files": files, "total": document, "failed_files": failed, "plot": args.plot})
    else:
        out(
            f"total: {len(files) - failed:,} of {len(files):,} files, {total.rows:,} rows in {total.segments:,} "
            f"segments, {total.nnz:,} ids, {total.empty_rows:,} empty rows"
        )
        out(f"support size  {support_line(document['support'])}")
        for line in histogram_lines(document["histogram"]):
            out(f"  {line}")
        if args.plot is not None:
            out(f"wrote {args.plot}")
    return 0 if failed == 0 else 1


def _print_segments(per_segment: dict[str, np.ndarray], limit: int) -> None:
    import numpy as np

    seg_rows = per_segment["rows"]
    out(
        f"segments      rows per segment: min {int(seg_rows.min()):,}  median {fmt_num(float(np.median(seg_rows)))}"
        f"  max {int(seg_rows.max()):,}"
    )
    out(f"  {'segment':>8} {'rows':>8} {'empty':>7} {'ids':>10} {'mean':>7} {'median':>7} {'max':>7}")
    shown = min(limit, seg_rows.size)
    for b in range(shown):
        out(
            f"  {b:>8} {int(seg_rows[b]):>8,} {int(per_segment['empty_rows'][b]):>7,} {int(per_segment['ids'][b]):>10,}"
            f" {fmt_num(finite(float(per_segment['mean_support'][b]))):>7}"
            f" {fmt_num(finite(float(per_segment['median_support'][b]))):>7}"
            f" {int(per_segment['max_support'][b]):>7,}"
        )
    if seg_rows.size > shown:
        out(f"  ... {seg_rows.size - shown:,} more segments (--segments N shows more, --json shows all)")


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
    per_segment = summary.per_segment()
    if per_segment and per_segment["rows"].size:
        means = per_segment["mean_support"]
        right.hist(means[np.isfinite(means)], bins=40, color="#73d216")
    right.set_xlabel("mean support size per segment")
    right.set_ylabel("segments")
    right.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole segments, never 0.5
    right.set_title(f"{summary.segments:,} segments")
    fig.suptitle(source.name)
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
