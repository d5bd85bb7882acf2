"""``sampling-mask audit MASKFILE --logits LOGITS``: check a rollout's masks against the support an
engine's sampler keeps for the given logits (:func:`sampling_mask.reference_scorer.audit`).

Logits come from a ``.npy`` file (its header parsed without pickle, the array a view of the mapped
file) or a ``.safetensors`` file (:func:`sampling_mask.codecs.safetensors.read_tensors`: an 8-byte
little-endian length, a JSON header, the raw buffer; every size is checked against the file before
anything is read). Only regular files are read: a FIFO or a device is refused at once. Sampler parameters default to the mask's metadata (``temperature``, ``top_k``,
``top_p``, ``min_p``). Exit status 0: every compared row equals the recomputed support and holds its
sampled id; 1: the audit found a difference; 2: usage / input errors (as every command).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core.errors import SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ._common import (
    FORMAT_HELP,
    CliError,
    add_command,
    error_text,
    out,
    print_json,
    require_matplotlib,
    save_png,
)
from ._source import check_input, open_input, read_all, read_npy, read_sampled, side_limits

__all__ = ["add_parser", "plot_panels", "read_logits", "run"]

#: safetensors dtypes a logits tensor may have.
_LOGITS_DTYPES = ("F64", "F32", "F16", "BF16")


def _logits_tensor(path: Path, key: str | None, limits: Limits) -> Any:
    """One tensor of a safetensors file (:func:`sampling_mask.codecs.safetensors.read_tensors`:
    a regular file only, every size checked against the file before anything is viewed), copied."""
    import numpy as np
    import torch

    from ..codecs import safetensors as st

    entries = st.tensor_dtypes(path, limits=limits)
    names = list(entries)
    if key is None:
        key = "logits" if "logits" in names else (names[0] if len(names) == 1 else None)
        if key is None:
            raise CliError("E_USAGE", f"{str(path)!r} holds {len(names)} tensors; name one with --logits-key")
    if key not in entries:
        raise CliError("E_SCHEMA", f"{str(path)!r} has no tensor {key!r} (it has {names[:8]})")
    if entries[key] not in _LOGITS_DTYPES:
        raise CliError("E_DTYPE", f"tensor {key!r} has dtype {entries[key]!r}; logits must be F64, F32, F16 or BF16")
    arr = st.read_tensors(path, [key], limits=limits)[0][key]
    if arr.ndim != 2:
        raise CliError("E_SCHEMA", f"tensor {key!r}: shape must be [T, V], got {list(arr.shape)}")
    if entries[key] == "BF16":
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(arr.copy())


def read_logits(path: Path, key: str | None = None, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Logits [T, V] as a torch tensor from ``.npy`` or ``.safetensors`` (never pickle / torch.load),
    read under ``limits`` (a safetensors header's JSON parse included); a FIFO or device is refused
    at once (``E_ENCODING``), never opened for a blocking read."""
    import numpy as np
    import torch

    check_input(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".safetensors"):
        raise CliError("E_USAGE", f"--logits takes a .npy or a .safetensors file, not {str(path)!r}")
    try:
        if suffix == ".safetensors":
            return _logits_tensor(path, key, limits)
        arr = read_npy(path, ndim=2, kinds="f", field="logits", limits=limits)
        if arr.dtype.itemsize not in (2, 4, 8):  # float16 / 32 / 64: what torch takes (not float128)
            raise CliError("E_DTYPE", f"{str(path)!r} must hold float16, float32 or float64 logits, not {arr.dtype}")
        return torch.from_numpy(np.array(arr))  # a writable copy of the mapped file
    except SamplingMaskError as exc:
        raise CliError(exc.code.value, f"cannot read logits from {str(path)!r}: {error_text(exc)}") from None
    except OSError as exc:
        raise CliError("E_IO", f"cannot read logits from {str(path)!r}: {exc.strerror or exc}") from None


def _param(args: argparse.Namespace, mask: Any, name: str) -> Any:
    value = getattr(args, name)
    if value is None and name == "temperature" and mask.temperature is not None:
        return None  # the audit takes the per-row companion, before the metadata (as --help says)
    if value is None:
        value = mask.metadata.get(name)
    return None if value == "unknown" else value


def _temperature_used(args: argparse.Namespace, mask: Any, params: dict[str, Any]) -> tuple[Any, str]:
    """(the temperature the audit used: a number, or {"min", "max"} of a varying companion; its source)."""
    if args.temperature is not None:
        return params["temperature"], "--temperature"
    if mask.temperature is not None:
        import numpy as np

        tau = mask.temperature
        if tau.size == 0 or float(np.min(tau)) == float(np.max(tau)):
            return (float(tau[0]) if tau.size else None), "the mask's temperature companion"
        return {"min": float(np.min(tau)), "max": float(np.max(tau))}, "the mask's temperature companion, per row"
    if params["temperature"] is not None:
        return params["temperature"], "the file's metadata"
    return 1.0, "the default"


def _notes(mask: Any, params: dict[str, Any], vocab: int) -> list[str]:
    """What the audit assumed without being told: no truncation, a vocabulary wider than the logits."""
    notes = []
    if all(params[name] is None for name in ("top_k", "top_p", "min_p")):
        notes.append(
            "no top_k, top_p or min_p given (--top-k / --top-p / --min-p) or in the file's metadata: "
            "compared against no truncation (the recomputed support is every id with a finite logit)"
        )
    if mask.vocab_size is not None and mask.vocab_size != vocab:
        notes.append(f"the mask's vocab_size is {mask.vocab_size:,}, the logits have {vocab:,} columns")
    return notes


def _check_width(mask: Any, vocab: int, logits_path: str) -> None:
    """Mask ids that reach beyond the logits' columns: a one-line error naming both widths."""
    if mask.nnz and int(mask.ids.max()) >= vocab:
        import numpy as np

        k = int(np.argmax(mask.ids >= vocab))
        row = int(np.searchsorted(mask.offsets, k, side="right") - 1)
        declared = "" if mask.vocab_size is None else f" (the mask's vocab_size is {mask.vocab_size:,})"
        raise CliError(
            "E_RANGE",
            f"row {row} holds id {int(mask.ids[k]):,}, but the logits in {logits_path!r} have {vocab:,} columns "
            f"(ids 0 .. {vocab - 1:,}){declared}",
        )


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _fmt_param(name: str, value: Any) -> str:
    if name == "temperature" and isinstance(value, dict):
        return f"temperature {value['min']:g} .. {value['max']:g} per row"
    return f"{name} {'off' if value is None else (f'{value:g}' if isinstance(value, float) else value)}"


def _report_lines(path: Path, summary: dict[str, Any], params: dict[str, Any], report: Any) -> list[str]:
    """The text report's lines, unescaped: :func:`run` prints each through :func:`out`."""
    given = ", ".join(_fmt_param(k, v) for k, v in params.items() if k != "temperature_source")
    n = summary["rows_compared"]
    lines = [
        f"audit of {path.name} against rule {summary['rule']} ({given}; temperature from {params['temperature_source']})",
        f"rows: {summary['rows']:,}, compared {n:,} (rows with an empty recorded support are skipped)",
        f"equal supports: {summary['rows_equal']:,} of {n:,}; mean Jaccard {_fmt(summary['mean_jaccard'])}",
        f"rows missing ids: {summary['rows_missing_ids']:,} ({summary['missing_ids']:,} ids); "
        f"rows with extra ids: {summary['rows_extra_ids']:,} ({summary['extra_ids']:,} ids)",
        f"rows wider than top_k: recorded {summary['rows_recorded_wider_than_top_k']:,}, "
        f"recomputed {summary['rows_recomputed_wider_than_top_k']:,} (ties)",
        f"recorded support mass under the recomputed distribution: mean {_fmt(summary['mean_recorded_mass'], 4)}, "
        f"min {_fmt(summary['min_recorded_mass'], 4)}",
    ]
    if summary["rows_sampled_not_in_recorded"] is not None:
        lines.append(
            f"sampled id outside the recorded support: {summary['rows_sampled_not_in_recorded']:,} rows; "
            f"outside the recomputed support: {summary['rows_sampled_not_in_recomputed']:,} rows"
        )
    m = summary["mismatch"]
    if m["mean_full_minus_rollout"] is not None:
        lines.append(
            f"log-prob mismatch, trainer full vocabulary - rollout: mean {_fmt(m['mean_full_minus_rollout'], 4)} "
            f"= support part {_fmt(m['mean_support_part'], 4)} + logit drift {_fmt(m['mean_drift_part'], 4)}"
        )
    elif m["mean_support_part"] is not None:
        lines.append(f"support part of the log-prob mismatch (no rollout log-probs): {_fmt(m['mean_support_part'], 4)}")
    classes = summary["row_classes"]
    named = [f"{name} {classes[name]:,}" for name in _CLASS_HINTS if classes[name]]
    if named:
        lines.append("row classes: " + ", ".join(named))
        lines.extend(f"  {name}: {_CLASS_HINTS[name]}" for name in _CLASS_HINTS if classes[name] and name != "equal")
    differ = [int(t) for t in (~report.equal & report.compared).nonzero()[0][:5]]
    if differ:
        missing, extra = report.missing, report.extra
        parts = [f"row {t}: missing {missing.row(t).tolist()[:6]} extra {extra.row(t).tolist()[:6]}" for t in differ]
        lines.append("first differing rows: " + "; ".join(parts))
    return lines


#: What each named row class means (``sampling_mask.reference_scorer.ROW_CLASSES``), in print order.
_CLASS_HINTS = {
    "equal": "",
    "vllm_triton_top_p_drop": "the recorded support is the rule's minus its least likely id: vLLM's Triton top-p "
    "kernel (_topk_topp_kernel) drops it when top-p should keep every id min-p left (--rule vllm-triton "
    "reproduces it); replay over these rows is exact",
    "sampled_forced_in": "the sampled id was forced into a full row in place of its least likely id (SkyRL's "
    "_sample_support_from_flat_logprobs repair, NovaSky-AI/SkyRL #2237)",
    "cut_at_cap": "the recorded support is a strict subset of the rule's, its size at a cap (--caps)",
    "empty_over_cap": "an empty recorded row whose recomputed support is wider than the smallest cap (prime-rl "
    "and verifiers record count 0 above 512)",
    "other": "differences no named engine behaviour explains",
}


def plot_panels(report: Any) -> list[tuple[str, Any]]:
    """(title, values over the compared rows) of each histogram: Jaccard, recorded mass, then the
    logit-drift part of the log-prob mismatch (replay - rollout) when the rollout's log-probs are
    known; without them, the support part (full - replay), titled so."""
    c = report.compared
    panels = [("Jaccard(recorded, recomputed)", report.jaccard[c]), ("recorded mass", report.recorded_mass[c])]
    if report.drift_part is not None:
        panels.append(("logit drift part (replay - rollout log-prob)", report.drift_part[c]))
    elif report.support_part is not None:
        panels.append(("support part (full - replay log-prob; no rollout log-probs: no drift)", report.support_part[c]))
    return panels


def _plot(out: Path, report: Any, source: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = plot_panels(report)
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4))
    for ax, (title, values) in zip(np.atleast_1d(axes), panels, strict=True):
        finite = values[np.isfinite(values)]
        if finite.size:
            ax.hist(finite, bins=40, color="#3465a4")
            ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.set_ylabel("rows")
    fig.suptitle(f"{source.name}: audit against rule {report.rule}")
    fig.tight_layout()
    save_png(fig, out)


def run(args: argparse.Namespace) -> int:
    """Audit the masks of ``args.file`` against ``args.rule`` on ``args.logits``; exit 1 on a difference."""
    if args.plot is not None:
        require_matplotlib()
    import numpy as np

    from ..reference_scorer import audit
    from ..reference_scorer.support_audit import DEFAULT_CAPS

    mask = read_all(open_input(args))
    logits = read_logits(Path(args.logits), args.logits_key, side_limits(args, Path(args.logits)))
    params = {name: _param(args, mask, name) for name in ("temperature", "top_k", "top_p", "min_p")}
    sampled = None if args.sampled is None else read_sampled(Path(args.sampled), side_limits(args, Path(args.sampled)))
    vocab = int(logits.shape[1])  # read_logits gives [T, V]
    _check_width(mask, vocab, args.logits)
    caps = DEFAULT_CAPS if args.caps is None else tuple(args.caps)
    report = audit(mask, logits, rule=args.rule, sampled=sampled, chunk_rows=args.chunk_rows, caps=caps, **params)
    summary = report.summary()
    used, source = _temperature_used(args, mask, params)
    parameters = {**params, "temperature": used, "temperature_source": source}
    notes = _notes(mask, params, vocab)
    if args.plot is not None:
        _plot(Path(args.plot), report, Path(args.file))
    if args.json:
        print_json({"file": args.file, "logits": args.logits, "parameters": parameters, "notes": notes, **summary})
    else:
        for line in _report_lines(Path(args.file), summary, parameters, report):
            out("{line}", line=line)
        for note in notes:
            out("note: {note}", note=note)
        if args.plot is not None:
            out("wrote {file}", file=args.plot)
    sampled_ok = report.sampled_in_recorded is None or bool(np.all(report.sampled_in_recorded | ~report.compared))
    return 0 if summary["rows_equal"] == summary["rows_compared"] and sampled_ok else 1


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(
        sub,
        common,
        "audit",
        "check masks against the support an engine's sampler keeps for given logits; exit 1 on a difference",
        run,
    )
    p.add_argument("file", metavar="MASKFILE")
    p.add_argument("--logits", required=True, metavar="FILE", help="raw logits [T, V]: .npy or .safetensors")
    p.add_argument("--logits-key", metavar="NAME", help="the tensor's name in a .safetensors file (default: logits)")
    p.add_argument("--format", help=FORMAT_HELP)
    p.add_argument(
        "--rule",
        choices=("vllm", "vllm-triton", "sglang", "hf"),
        default="vllm",
        help="whose sampler (default vllm: its PyTorch path; vllm-triton: where Triton runs, e.g. GPUs)",
    )
    p.add_argument(
        "--caps",
        type=int,
        nargs="+",
        metavar="N",
        help="support widths at which the engine cuts or drops rows (default 512 2048 4096)",
    )
    p.add_argument("--temperature", type=float, help="default: the mask's temperature companion / metadata, else 1")
    p.add_argument("--top-k", dest="top_k", type=int, help="default: the mask's metadata (off: -1 or 0)")
    p.add_argument("--top-p", dest="top_p", type=float, help="default: the mask's metadata (off: 1)")
    p.add_argument("--min-p", dest="min_p", type=float, help="default: the mask's metadata (off: 0)")
    p.add_argument("--sampled", metavar="FILE", help="sampled ids (.npy / .json; default: the mask's companion)")
    p.add_argument("--chunk-rows", type=int, metavar="N", help="rows of logits processed at a time")
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="write histograms (needs matplotlib): Jaccard, recorded mass, and the logit-drift part of the "
        "log-prob mismatch (replay - rollout; without rollout log-probs in the file: the support part)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
