"""``sampling-mask convert IN OUT``: between formats; Arrow file / stream and Parquet go batch by batch,
and the output appears only when complete (a temporary file renamed at the end)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import SamplingMaskError
from ._common import (
    FORMAT_HELP,
    ROWS_ONLY_FORMATS,
    STREAMING_FORMATS,
    CliError,
    Progress,
    add_command,
    error_text,
    out,
    progress_enabled,
)
from ._source import (
    Source,
    count_segments,
    open_input,
    read_all,
    read_batches,
    resolve_format,
    schema_value,
)

if TYPE_CHECKING:
    from ..core.model import SamplingMask


def _rebatch(batches: Iterable[SamplingMask], target_rows: int) -> Iterator[SamplingMask]:
    """Batches of at least ``target_rows`` rows (the last may be smaller), cut at segment boundaries.

    A segment longer than ``target_rows`` becomes a batch of its own. No segment is ever split.
    """
    import numpy as np

    from ..core.model import concat

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
    layout = args.layout
    if layout is not None:
        if out_fmt not in (*STREAMING_FORMATS, "msgpack"):
            raise CliError("E_USAGE", f"--layout applies to {streaming} and msgpack output, not {out_fmt}")
        if layout == "dense" and out_fmt != "msgpack":
            raise CliError("E_USAGE", f"--layout dense applies to msgpack output, not {out_fmt}")
        opts["layout"] = layout
    if args.allow_loss:
        if out_fmt not in ROWS_ONLY_FORMATS:
            raise CliError("E_USAGE", f"--allow-loss applies to {', '.join(ROWS_ONLY_FORMATS)} output, not {out_fmt}")
        opts["allow_loss"] = True
    return opts


def _convert_streaming(
    source: Source, path: Path, out_fmt: str, opts: dict[str, Any], batch_rows: int | None, progress: Progress
) -> tuple[int, int]:
    """Batch in, batch out: memory stays near one record batch whatever the file size."""
    if opts.get("layout") != "compact":
        # Declare the input's id order up front: the first batch alone would not tell it.
        declared = schema_value(source.path, source.fmt, "id_order") if source.streaming else None
        if declared in ("ascending", "unspecified"):
            opts = {**opts, "id_order": declared}
    batches: Iterable[SamplingMask] = read_batches(source)
    if not source.streaming:
        whole = read_all(source)
        opts.setdefault("id_order", "ascending" if whole.is_canonical else "unspecified")
        batches = [whole]
        batch_rows = batch_rows or 1 << 16  # give a one-piece input record batches a reader can stream
    if batch_rows is not None:
        batches = _rebatch(batches, batch_rows)
    rows = segments = 0
    with source.codecs.open_writer(path, format=out_fmt, **opts) as writer:
        for batch in batches:
            writer.write(batch)
            rows += batch.num_rows
            segments += batch.num_segments
            progress.update(batch.num_segments, batch.num_rows)
    return rows, segments


def run(args: argparse.Namespace) -> int:
    """IN -> OUT; Arrow file / stream and Parquet go batch by batch (files larger than memory convert)."""
    from ..codecs.files import check_target

    source = open_input(args, "input")
    dst = Path(args.output)
    out_fmt = resolve_format(source.codecs, dst, args.to, flag="--to")
    opts = _writer_options(args, out_fmt)
    if dst.is_dir():
        raise CliError("E_IO", f"{str(dst)!r} is a directory; name the output file")
    if not dst.parent.is_dir():
        raise CliError("E_IO", f"no such directory: {str(dst.parent)!r}")
    try:  # refused before any work: OUT is absent or a regular file (a symlink: what it points to)
        check_target(dst)
    except SamplingMaskError as exc:
        raise CliError(exc.code.value, f"cannot write {str(dst)!r}: {error_text(exc)}") from None
    # The one atomic writer (codecs.files.atomic_path, as save() uses): the output goes to a temporary
    # file next to OUT renamed at the end, so a failed conversion never leaves half a file, and
    # converting a file onto itself reads all of the old one first.
    enabled = progress_enabled(args) and source.streaming
    progress = Progress("convert", count_segments(source.path, source.fmt) if enabled else None, enabled=enabled)
    try:
        if out_fmt in STREAMING_FORMATS:
            rows, segments = _convert_streaming(source, dst, out_fmt, opts, args.batch_rows, progress)
        else:
            mask = read_all(source)
            source.codecs.save(mask, dst, format=out_fmt, **opts)
            rows, segments = _written_counts(mask, out_fmt)
    except SamplingMaskError as exc:
        hint = (
            "; --allow-loss keeps the rows only" if out_fmt in ROWS_ONLY_FORMATS and "allow_loss" in exc.message else ""
        )
        raise CliError(exc.code.value, f"cannot write {out_fmt}: {error_text(exc)}{hint}") from None
    except OSError as exc:
        raise CliError("E_IO", f"cannot write {str(dst)!r}: {exc.strerror or exc}") from None
    finally:
        progress.close()
    if not args.quiet:
        size = dst.stat().st_size
        extras = "".join(f", {k}={v}" for k, v in opts.items() if k != "id_order")
        out(
            "{source} ({fmt}) -> {target} ({out_fmt}{extras}): {rows:,} rows, {segments:,} segments, {size:,} bytes"
            "{per_token}",
            source=source.path,
            fmt=source.fmt,
            target=dst,
            out_fmt=out_fmt,
            extras=extras,
            rows=rows,
            segments=segments,
            size=size,
            per_token=f" ({size / rows:.2f} per token)" if rows else "",
        )
    return 0


def _written_counts(mask: SamplingMask, out_fmt: str) -> tuple[int, int]:
    """(rows, segments) of what ``out_fmt`` holds: json-rows and base64 keep the rows as one segment."""
    return mask.num_rows, (1 if out_fmt in ROWS_ONLY_FORMATS else mask.num_segments)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, common, "convert", "convert between formats (Arrow and Parquet batch by batch)", run)
    p.add_argument("input", metavar="IN")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--format", help=FORMAT_HELP)
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
        choices=("ragged", "compact", "dense"),
        help="ragged (default) or compact (arrow, arrows, parquet, msgpack); dense (msgpack)",
    )
    p.add_argument(
        "--allow-loss", action="store_true", help="json-rows / base64: keep the rows only, drop everything else"
    )
