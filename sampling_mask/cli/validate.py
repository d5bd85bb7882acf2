"""``sampling-mask validate FILE``: every invariant of the spec, record batch by record batch; exit 0
valid, 1 invalid with the first error (rows and segments numbered across the whole file)."""

from __future__ import annotations

import argparse
import json
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
    Source,
    check_input,
    open_input,
)

if TYPE_CHECKING:
    import numpy as np

    from ..core.model import SamplingMask


def _read_sampled(path: Path) -> np.ndarray:
    """Sampled ids from a ``.npy`` integer array (no pickle) or a ``.json`` list of integers."""
    import numpy as np

    check_input(path)
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


def _unvalidated_segments(source: Source, batch_index: int) -> np.ndarray | None:
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

            from ..codecs import json as json_codec

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
    if source.streaming:
        report["record_batch"] = position.batches
    return report


def _check_file(
    source: Source, vocab_size: int | None, sampled: np.ndarray | None, position: _Position
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


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the file (and the given vocab size / sampled ids) is valid, else 1 with the first error.

    Streaming formats are checked record batch by record batch; rows and segments in the report are
    numbered across the whole file.
    """
    source = open_input(args)
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
        print_json(doc)
    elif error is None:
        out(
            f"valid: {path} ({fmt}, {plural(position.rows, 'row')}, {plural(position.segments, 'segment')}, "
            f"{plural(position.nnz, 'id')}; "
            f"checked {', '.join(checked)})"
        )
    else:
        keys = ("record_batch", "segment", "row", "row_in_segment", "field")
        where = [f"{k.replace('_', ' ')} {error[k]}" for k in keys if k in error]
        if "value" in error:
            where.append(f"offending value {error['value']!r}")
        out(f"invalid: {path}: {error['code']}: {error['message']}" + (f" ({', '.join(where)})" if where else ""))
    return 0 if valid else 1


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, common, "validate", "check every invariant of the spec; exit 0 valid, 1 invalid", run)
    p.add_argument("file", metavar="FILE")
    p.add_argument("--format", help=FORMAT_HELP)
    p.add_argument("--vocab-size", type=int, metavar="N", help="also check every id is < N")
    p.add_argument(
        "--sampled",
        metavar="FILE",
        help="also check each non-empty row holds its sampled id: a .npy integer array or a .json list, one id per row",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
