"""``sampling-mask demo``: generate a realistic rollout, write it in every format, read each back and
validate, score it with the reference scorer (when torch is installed), summarize; exit 1 on a failure."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import SamplingMaskError
from ..data.stats import SupportSummary
from ._common import (
    OPTIONAL_EXTRAS,
    PROG,
    ROWS_ONLY_FORMATS,
    CliError,
    add_command,
    fmt_num,
    missing_dependency,
    out,
    plural,
    support_line,
)
from ._source import (
    load_codecs,
)

if TYPE_CHECKING:
    from ..core.model import SamplingMask


def _demo_rollout(tokens: int, seed: int) -> SamplingMask:
    """A rollout from the calibrated synthetic workload (support sizes fitted to real runs)."""
    from ..data import synthetic

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
        result.update(ok=None, problem=missing_dependency(exc.name))
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
        from ..reference_scorer import masked_logprobs_from_hidden
    except ImportError as exc:
        return f"scoring skipped: the reference scorer is not available ({exc})", True
    sampled = mask.sampled_token_ids
    if sampled is None or mask.nnz == 0 or mask.vocab_size is None:
        return "scoring skipped: the rollout has no sampled ids or no vocab_size", True
    from ..core import layouts

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
        f"renormalized over their mask, {scores.empty_rows_full_vocab:,} empty rows over the full vocabulary\n"
        f"first {int(scored.sum()):,} rows: mean log-prob of the sampled id {float(ours[scored].mean()):.3f} "
        f"over the mask vs {float(full[scored].mean()):.3f} over the full vocabulary; "
        f"equal to a float64 recomputation: {'OK' if exact else 'NO'}; masked >= full: {'OK' if above else 'NO'}"
    )
    return text, exact and above


def run(args: argparse.Namespace) -> int:
    """Generate a rollout, write it in every format, read each back and validate, score, summarize."""
    codecs = load_codecs()
    if args.tokens < 1:
        raise CliError("E_USAGE", f"--tokens must be >= 1, got {args.tokens}")
    t0 = time.perf_counter()
    mask = _demo_rollout(args.tokens, args.seed)
    gen_s = time.perf_counter() - t0
    summary = SupportSummary()
    summary.add(mask)
    from ..data.synthetic import TARGETS as real

    out(
        "rollout: {rows:,} tokens in {segments}, {nnz:,} ids, vocab {vocab} (sampling_mask.data.synthetic, seed {seed}, "
        "{seconds:.2f} s)",
        rows=mask.num_rows,
        segments=plural(mask.num_segments, "sequence"),
        nnz=mask.nnz,
        vocab=mask.vocab_size or "unknown",
        seed=args.seed,
        seconds=gen_s,
    )
    out("support sizes: {support}", support=support_line(summary.support()))
    out(
        "  real RL runs: singletons {singletons:.0%}  median {median}  mean ~{mean}  p99 ~{p99}",
        singletons=real["singleton_fraction"],
        median=fmt_num(real["median"]),
        mean=fmt_num(real["mean"]),
        p99=fmt_num(real["p99"]),
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
    out("\nformat                 bytes  B/token  write ms  read ms  round trip  keeps")
    for r in results:
        if "bytes" in r and r["ok"] is not None:
            out(
                "{format:<16} {bytes:>11,} {per_token:>8.2f} {write:>9.1f} {read:>8.1f}  {result:<10}  {keeps}",
                format=r["format"],
                bytes=r["bytes"],
                per_token=r["bytes"] / mask.num_rows,
                write=r["write_s"] * 1e3,
                read=r["read_s"] * 1e3,
                result="OK" if r["ok"] else "FAILED",
                keeps=r["keeps"],
            )
        else:
            result = "skipped" if r["ok"] is None else "FAILED"
            out(
                "{format:<16} {dash:>11} {dash:>8} {dash:>9} {dash:>8}  {result:<10}  {keeps}",
                format=r["format"],
                dash="-",
                result=result,
                keeps=r["keeps"],
            )
    companion_bytes = sum(values.dtype.itemsize for values in mask.companions.values())
    out(
        "  B/token is the whole file: the mask, its {companions} ({names}: {bytes} B/token) and fixed headers, which "
        "weigh on small rollouts; the bytes per token in BENCHMARKS.md (wire size) are the mask alone at 1M tokens",
        companions=plural(len(mask.companions), "companion"),
        names=", ".join(mask.companions),
        bytes=companion_bytes,
    )
    for r in results:
        if r["ok"] is False:
            out("  {format}: {problem}", format=r["format"], problem=r["problem"])
    reasons: dict[str, list[str]] = {}
    for r in results:
        if r["ok"] is None:
            reasons.setdefault(r["problem"], []).append(r["format"])
    for reason, labels in reasons.items():
        out("  skipped {labels}: {reason}", labels=", ".join(labels), reason=reason)
    out()
    score_text, score_ok = _demo_score(mask, args.score_rows, args.seed)
    for line in score_text.split("\n"):
        out("{line}", line=line)
    failed = [r["format"] for r in results if r["ok"] is False] + ([] if score_ok else ["scoring"])
    skipped = [r["format"] for r in results if r["ok"] is None]
    out(
        "round trips: {ok} of {count} OK{skipped}{failed}",
        ok=sum(r["ok"] is True for r in results),
        count=len(results),
        skipped=f", {len(skipped)} skipped" if skipped else "",
        failed=f"; FAILED: {', '.join(failed)}" if failed else "",
    )
    if args.out is not None:
        kept = sorted(p.name for p in folder.glob("rollout*"))
        first = "rollout.arrows" if "rollout.arrows" in kept else (kept or [""])[0]
        if kept:
            out(
                "files kept in {folder}: {kept}; next: {prog} inspect {first}",
                folder=folder,
                kept=", ".join(kept),
                prog=PROG,
                first=folder / first,
            )
        else:
            out("files kept in {folder}: none", folder=folder)
    return 1 if failed else 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(
        sub, common, "demo", "write a realistic rollout in every format, read each back, validate, score", run
    )
    p.add_argument("--tokens", type=int, default=8192, help="rows (generated tokens) in the rollout (default 8192)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", metavar="DIR", help="keep the files in DIR (default: a temporary folder)")
    p.add_argument(
        "--score-rows", type=int, default=128, help="rows also scored over the full vocabulary (default 128)"
    )
