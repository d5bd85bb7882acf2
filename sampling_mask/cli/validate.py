"""``sampling-mask validate FILE``: every invariant of the spec, record batch by record batch; exit 0
valid, 1 invalid with the first error (rows and segments numbered across the whole file)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import SamplingMaskError
from ._common import (
    FORMAT_HELP,
    ROWS_ONLY_FORMATS,
    CliError,
    add_command,
    out,
    plural,
    print_json,
)
from ._source import (
    SidecarError,
    Source,
    input_files,
    not_read,
    open_input,
    read_sampled,
    side_limits,
)

if TYPE_CHECKING:
    import numpy as np

    from ..core.model import SamplingMask


def _segment_of_row(cu_seqlens: np.ndarray, row: int) -> int | None:
    """The segment b with ``cu[b] <= row < cu[b+1]`` (None when ``cu_seqlens`` does not place the row)."""
    import numpy as np

    segment = int(np.searchsorted(cu_seqlens, row, side="right")) - 1
    if 0 <= segment < cu_seqlens.size - 1 and cu_seqlens[segment] <= row < cu_seqlens[segment + 1]:
        return segment
    return None


def _unvalidated_segments(source: Source, batch_index: int) -> np.ndarray | None:
    """cu_seqlens of record batch ``batch_index`` read without content checks (sizes are still checked),
    to name the segment of a row the checks rejected; None when the format or the bytes do not allow it."""
    codecs = source.codecs
    try:
        if source.streaming:
            for i, batch in enumerate(
                codecs.iter_masks(source.path, format=source.fmt, validate=False, limits=source.limits)
            ):
                if i == batch_index:
                    return batch.cu_seqlens  # type: ignore[no-any-return]
        elif source.fmt == "msgpack":
            mask = codecs.load(source.path, format="msgpack", validate=False, limits=source.limits)
            return mask.cu_seqlens  # type: ignore[no-any-return]
        elif source.fmt == "json":
            import numpy as np

            from ..codecs import files
            from ..codecs import json as json_codec

            doc = json_codec.parse(files.read_bounded(source.path, source.limits.max_bytes), limits=source.limits)
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
    exc: SamplingMaskError, source: Source, position: _Position, batch: SamplingMask | None
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
    # A fault in a batch names it; one in the file itself (its footer, its schema) does not.
    if source.streaming and (position.batches or exc.row is not None or exc.segment is not None):
        report["record_batch"] = position.batches
    return report


def _check_file(
    source: Source, vocab_size: int | None, sampled: np.ndarray | None, sidecar: str | None, position: _Position
) -> tuple[int | None, dict[str, Any] | None]:
    """Every check, batch by batch; (the file's vocab_size, the first error as data or None). An error
    in the sampled ids' file ``sidecar`` carries ``file``: that file's name."""
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
                    raise SidecarError(
                        "E_SHAPE",
                        f"holds {sampled.size} sampled ids, but {str(source.path)!r} has more rows",
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
            raise SidecarError(
                "E_SHAPE",
                f"holds {sampled.size} sampled ids for the {position.rows} rows of {str(source.path)!r}",
                field="sampled_token_ids",
                value=sampled.size,
            )
    except SidecarError as exc:
        return file_vocab, {"file": sidecar, **exc.to_dict()}
    except SamplingMaskError as exc:
        return file_vocab, _error_report(exc, source, position, batch)
    return file_vocab, None


def _checks(fmt: str) -> list[str]:
    """What a valid report says was checked in a file of ``fmt`` (every invariant of the spec)."""
    checks = ["header", "offsets", "segments", "ids", "companions"]
    if fmt in ROWS_ONLY_FORMATS:
        checks = ["offsets", "ids"]
    elif fmt in ("arrow", "arrows", "parquet"):
        checks.append("user columns")
    return checks


def _validate(args: argparse.Namespace) -> dict[str, Any]:
    """The report on ``args.file``: {file, format, valid, checked} plus counts or the first error."""
    source = open_input(args)
    checked = _checks(source.fmt) + (["vocab_size"] if args.vocab_size is not None else [])
    checked += ["sampled_token_ids"] if args.sampled is not None else []
    position = _Position()
    error: dict[str, Any] | None
    try:
        side = Path(args.sampled) if args.sampled is not None else None
        sampled = read_sampled(side, side_limits(args, side)) if side is not None else None
    except SidecarError as exc:
        vocab, error = None, {"file": args.sampled, **exc.to_dict()}
    else:
        vocab, error = _check_file(source, args.vocab_size, sampled, args.sampled, position)
    doc: dict[str, Any] = {"file": str(source.path), "format": source.fmt, "valid": error is None, "checked": checked}
    if error is None:
        doc.update(rows=position.rows, segments=position.segments, nnz=position.nnz, vocab_size=vocab)
    else:
        doc["error"] = error
    return doc


def _print_report(doc: dict[str, Any]) -> None:
    """One line for a report of :func:`_validate`."""
    error = doc.get("error")
    if error is None:
        out(
            "valid: {file} ({format}, {rows}, {segments}, {ids}; checked every invariant of the spec: {checked})",
            file=doc["file"],
            format=doc["format"],
            rows=plural(doc["rows"], "row"),
            segments=plural(doc["segments"], "segment"),
            ids=plural(doc["nnz"], "id"),
            checked=", ".join(doc["checked"]),
        )
        return
    keys = ("record_batch", "segment", "row", "row_in_segment", "field")
    where = [f"{k.replace('_', ' ')} {error[k]}" for k in keys if k in error]
    if "value" in error:
        where.append(f"offending value {error['value']!r}")
    culprit = error.get("file", doc["file"])  # the sampled ids' file when it is at fault
    if where:
        out(
            "invalid: {file}: {code}: {message} ({where})",
            file=culprit,
            code=error["code"],
            message=error["message"],
            where=", ".join(where),
        )
    else:
        out("invalid: {file}: {code}: {message}", file=culprit, code=error["code"], message=error["message"])


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the file (and the given vocab size / sampled ids) is valid, else 1 with the first error.

    Streaming formats are checked record batch by record batch; rows and segments in the report are
    numbered across the whole file. A directory or glob is checked file by file, each reported.
    """
    listed = input_files(args.file)
    if listed is None:
        doc = _validate(args)
        if args.json:
            print_json(doc)
        else:
            _print_report(doc)
        return 0 if doc["valid"] else 1
    if args.sampled is not None:
        raise CliError("E_USAGE", "--sampled checks one file, not a directory or glob")
    paths, skipped = listed
    docs = []
    for entry in skipped:  # in the directory, looking like mask files, but not read
        doc = {**not_read(entry), "valid": False, "read": False}
        docs.append(doc)
        if not args.json:
            out("not read: {file}: {code}: {message}", file=entry.path, **doc["error"])
    for path in paths:
        try:
            doc = _validate(argparse.Namespace(**{**vars(args), "file": str(path)}))
        except CliError as exc:  # a file no format is known for, for instance
            doc = {"file": str(path), "valid": False, "error": {"code": exc.code, "message": exc.message}}
        docs.append(doc)
        if not args.json:
            _print_report(doc)
    invalid = sum(not d["valid"] for d in docs)
    if args.json:
        print_json({"files": docs, "valid": invalid == 0, "invalid_files": invalid})
    else:
        unread = f" ({len(skipped)} not read)" if skipped else ""
        out(
            "{files} checked, {invalid} invalid{unread}",
            files=plural(len(docs), "file"),
            invalid=invalid,
            unread=unread,
        )
    return 0 if invalid == 0 else 1


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, common, "validate", "check every invariant of the spec; exit 0 valid, 1 invalid", run)
    p.add_argument("file", metavar="FILE", help="a mask file, or a directory / glob of them (checked one by one)")
    p.add_argument("--format", help=FORMAT_HELP)
    p.add_argument("--vocab-size", type=int, metavar="N", help="also check every id is < N")
    p.add_argument(
        "--sampled",
        metavar="FILE",
        help="also check each non-empty row holds its sampled id: a .npy integer array or a .json list, one id per row",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
