"""``sampling-mask inspect FILE``: format, version, sizes, support-size figures and histogram, bytes per
token, metadata (``--json``: one document)."""

from __future__ import annotations

import argparse
from typing import Any

from ..data.stats import histogram_buckets
from ._common import (
    FORMAT_HELP,
    STREAMING_FORMATS,
    add_command,
    finite,
    fmt_bytes,
    fmt_num,
    histogram_lines,
    out,
    plural,
    print_json,
    support_line,
)
from ._source import (
    open_input,
    spec_version,
    summarize_file,
)


def _per_token(nbytes: int, rows: int) -> float | None:
    return nbytes / rows if rows else None


def run(args: argparse.Namespace) -> int:
    """Format, version, sizes, support-size figures and histogram, bytes per token, metadata."""
    source = open_input(args)
    summary = summarize_file(source, args, "inspect")
    path, fmt = source.path, source.fmt
    file_bytes = path.stat().st_size
    support = summary.support()
    buckets = histogram_buckets(summary.length_counts)
    report = {
        "file": str(path),
        "format": fmt,
        "spec_version": spec_version(source),
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
        "support": {k: finite(v) if isinstance(v, float) else v for k, v in support.items()},
        "histogram": buckets,
        "metadata": summary.metadata,
    }
    if args.json:
        print_json(report)
        return 0
    rows = summary.rows
    batches = f", {plural(summary.batches, 'record batch', 'record batches')}" if fmt in STREAMING_FORMATS else ""
    version = report["spec_version"]
    lines = [
        ("file", path),
        ("format", f"{fmt}{batches}"),
        ("spec version", str(version) if version is not None else "not stored in this format"),
        ("vocab size", fmt_num(summary.vocab_size) if summary.vocab_size is not None else "unknown"),
        ("rows", f"{rows:,} in {plural(summary.segments, 'segment')}"),
        ("ids (nnz)", f"{summary.nnz:,}"),
        ("empty rows", f"{summary.empty_rows:,}" + (f" ({summary.empty_rows / rows:.1%})" if rows else "")),
        ("id order", report["id_order"]),
        ("companions", ", ".join(summary.companions) or "none"),
        (
            "size",
            f"{file_bytes:,} bytes ({fmt_bytes(file_bytes)})"
            + (f", {file_bytes / rows:.2f} bytes per token" if rows else "")
            + (f", {file_bytes / summary.nnz:.2f} per id" if summary.nnz else ""),
        ),
        ("support size", support_line(support)),
    ]
    for name, value in lines:
        out("{name:<13} {value}", name=name, value=value)
    for line in histogram_lines(buckets):
        out("  {line}", line=line)
    _print_metadata(summary.metadata)
    return 0


def _print_metadata(metadata: dict[str, Any]) -> None:
    """One line per key: ``key='text'`` for a string, else the value as Python prints it; keys and
    values escaped and cut as every value from a file is (:func:`out`)."""
    if not metadata:
        out("metadata      none")
    for i, (key, value) in enumerate(metadata.items()):
        label = "" if i else "metadata"
        if isinstance(value, str):
            out("{label:<13} {key}='{value}'", label=label, key=key, value=value)
        else:
            out("{label:<13} {key}={value}", label=label, key=key, value=value)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(
        sub, common, "inspect", "format, version, sizes, support-size figures, bytes per token, metadata", run
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", help=FORMAT_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON document")
