"""The reference scorer on CUDA, against a CPU float64 computation: ``python benchmarks/gpu_check.py``.

Runs every scorer path in fp32 and bf16 at V = 151,936 (d = 1024): ``masked_logprobs`` (log-probs and
entropy, forward + backward), ``masked_entropy``, ``masked_logprobs_from_hidden`` (with a bias),
``masked_entropy_from_hidden``, both with ``vocab_group`` over a one-rank process group (NCCL, else
gloo), and the mask audit (``audit``, ``audit_from_hidden``). The mask holds rollout-like rows
(``synthetic.rollout``), rows of width 20,000, 60,000 and the whole vocabulary, and empty rows with a
target (scored over the full vocabulary through tiles).

For each path it prints the median time of 3 runs after a warm-up (``torch.cuda.synchronize``),
``torch.cuda.max_memory_allocated`` during one run beyond what was allocated before it, and the
largest error against float64 on the CPU (from the same fp32 / bf16 values): log-probs, entropy and
the gradient (logits, or hidden states), next to the error of the fp32 ``masked_fill`` +
``torch.logsumexp`` reference on the same device. Verdict per path: fp32 errors at most 2x
the reference's plus 1e-6, bf16 at most the reference's plus 1e-6, logits-gradient rows summing to 0
within 1e-5 (fp32; a bf16 gradient is rounded to bf16, so only its values are judged), the audit's
log-probs within 1e-4 of float64. Exit status 0 when every verdict
holds, 1 otherwise.

Without CUDA it says so and exits 0. ``--device cpu --quick`` runs the same checks on the CPU at tiny
sizes (what the test suite does). About a minute on one GPU and 16 cores (the float64 references
dominate); ``--rows`` scales the rollout part.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from sampling_mask import SamplingMask
from sampling_mask.data import synthetic
from sampling_mask.reference_scorer import (
    audit,
    audit_from_hidden,
    masked_entropy,
    masked_entropy_from_hidden,
    masked_logprobs,
    masked_logprobs_from_hidden,
)

FULL = dict(vocab=151_936, dim=1024, rows=128, wide=(20_000, 60_000, 151_936), empty=4)
QUICK = dict(vocab=2048, dim=32, rows=16, wide=(300, 1000, 2048), empty=2)
AUDIT = dict(top_k=512, top_p=0.95)


# --------------------------------------------------------------------------- workload
def workload(cfg: dict[str, Any], seed: int = 0) -> tuple[SamplingMask, dict[str, torch.Tensor]]:
    """(mask with sampled ids, CPU fp32 tensors: hidden, weight, bias, logits)."""
    vocab, dim = cfg["vocab"], cfg["dim"]
    rollout = synthetic.rollout(cfg["rows"], seed=seed, vocab_size=vocab, top_k=min(512, vocab))
    rng = np.random.default_rng(seed)
    rows = [list(r) for r in rollout.to_rows()]
    sampled = list(rollout.sampled_token_ids)
    for width in cfg["wide"]:
        for _ in range(2):
            row = rng.permutation(vocab)[:width]
            rows.append(list(row))
            sampled.append(int(row[width // 2]))
    for _ in range(cfg["empty"]):
        rows.append([])
        sampled.append(int(rng.integers(vocab)))
    mask = SamplingMask.from_rows(rows, vocab_size=vocab, sampled_token_ids=sampled, temperature=0.9)
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(mask.num_rows, dim, generator=gen)
    weight = torch.randn(vocab, dim, generator=gen) * (3.0 / dim**0.5)
    bias = torch.randn(vocab, generator=gen) * 0.1
    return mask, dict(hidden=hidden, weight=weight, bias=bias, logits=hidden @ weight.T + bias)


def support_matrix(mask: SamplingMask) -> torch.Tensor:
    """bool [T, V]: the support of each row, the whole vocabulary for empty rows (scored over it)."""
    vocab = mask.vocab_size
    assert vocab is not None
    keep = torch.zeros(mask.num_rows, vocab, dtype=torch.bool)
    rows = torch.from_numpy(np.repeat(np.arange(mask.num_rows), mask.row_lengths))
    keep[rows, torch.from_numpy(mask.ids.astype(np.int64))] = True
    keep[torch.from_numpy(mask.row_lengths == 0)] = True
    return keep


def reference(z: torch.Tensor, keep: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Log-probs, entropy and d log-probs / d z by ``masked_fill`` + ``torch.logsumexp`` in z's dtype."""
    masked = z.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(masked, dim=1)
    logp = masked - lse[:, None]
    p = logp.exp()
    entropy = -torch.where(keep, p * logp, torch.zeros_like(p)).sum(dim=1)
    grad = -p
    grad[torch.arange(z.shape[0], device=z.device), targets.to(z.device)] += 1
    return dict(logprobs=logp.gather(1, targets[:, None])[:, 0], entropy=entropy, grad=grad)


# --------------------------------------------------------------------------- timing and memory
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn: Callable[[], Any], device: torch.device, repeats: int) -> tuple[Any, float, int | None]:
    """(the result of one run, median seconds of ``repeats`` runs after a warm-up, peak bytes of one run)."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    peak = None
    if device.type == "cuda":
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    result = fn()
    sync(device)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    return result, statistics.median(times), peak


@contextlib.contextmanager
def one_rank_group(device: torch.device) -> Iterator[Any]:
    """The default process group over this process alone (NCCL on CUDA when available, else gloo)."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield dist.group.WORLD
        return
    backend = "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{os.path.join(tmp, 'rendezvous')}", rank=0, world_size=1)
        try:
            yield dist.group.WORLD
        finally:
            dist.destroy_process_group()


# --------------------------------------------------------------------------- checks
def error(value: torch.Tensor, exact: torch.Tensor) -> float:
    """Largest |value - exact| over finite entries of exact (NaN where value is NaN and exact is not)."""
    value = value.detach().double().cpu()
    ok = torch.isfinite(exact)
    if not bool(ok.any()):
        return 0.0
    return float((value[ok] - exact[ok]).abs().max())


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def line(self, text: str) -> None:
        print(text, flush=True)

    def row(self, name: str, seconds: float, peak: int | None, errors: dict[str, tuple[float, float | None]], ok: bool):
        shown = ", ".join(f"{k} {e:.1e}" + ("" if r is None else f" (ref {r:.1e})") for k, (e, r) in errors.items())
        mem = "n/a" if peak is None else f"{peak / (1 << 20):.1f} MiB"
        self.line(f"  {name:<58} {seconds * 1e3:9.2f} ms  peak {mem:>12}  {shown}  {'OK' if ok else 'FAILS'}")
        if not ok:
            self.failures.append(name)


def within(ours: float, ref: float, factor: float) -> bool:
    return ours <= factor * ref + 1e-6


def check_dtype(
    report: Report,
    mask: SamplingMask,
    cpu: dict[str, torch.Tensor],
    dtype: torch.dtype,
    device: torch.device,
    repeats: int,
) -> None:
    label = str(dtype).replace("torch.", "")
    factor = 2.0 if dtype == torch.float32 else 1.0
    keep = support_matrix(mask)
    targets = torch.from_numpy(mask.sampled_token_ids.astype(np.int64))
    tau = 0.9
    # inputs rounded to dtype, then the exact (float64, CPU) and the fp32 reference (device) from those values
    logits_r = cpu["logits"].to(dtype)
    h_r, w_r, b_r = (cpu[k].to(dtype) for k in ("hidden", "weight", "bias"))
    exact_logits = reference(logits_r.double() / tau, keep, targets)
    z_hidden = (h_r.double() @ w_r.double().T + b_r.double()) / tau
    exact_hidden = reference(z_hidden, keep, targets)
    exact_hidden["grad_hidden"] = (exact_hidden["grad"] @ w_r.double()) / tau
    del z_hidden
    keep_d, targets_d = keep.to(device), targets.to(device)
    ref_logits = reference(logits_r.to(device).float() / tau, keep_d, targets_d)
    h32, w32, b32 = (t.to(device).float() for t in (h_r, w_r, b_r))
    ref_hidden = reference((h32 @ w32.T + b32) / tau, keep_d, targets_d)
    ref_hidden["grad_hidden"] = (ref_hidden["grad"] @ w32) / tau
    del h32, w32, b32, keep_d
    logits = logits_r.to(device)
    hidden, weight, bias = (t.to(device) for t in (h_r, w_r, b_r))

    def logits_run(**kw: Any) -> Callable[[], Any]:
        def run() -> Any:
            leaf = logits.detach().requires_grad_()
            out = masked_logprobs(leaf, mask, with_entropy=True, **kw)
            out.logprobs.sum().backward()
            return out, leaf.grad

        return run

    def hidden_run(**kw: Any) -> Callable[[], Any]:
        def run() -> Any:
            h = hidden.detach().requires_grad_()
            w = weight.detach().requires_grad_()
            out = masked_logprobs_from_hidden(h, w, mask, bias=bias, with_entropy=True, **kw)
            out.logprobs.sum().backward()
            return out, h.grad

        return run

    def judge(name: str, run: Callable[[], Any], path: str) -> None:
        """Log-probs, entropy and the gradient (logits, or hidden states) of ``path`` against float64."""
        (out, grad), seconds, peak = measure(run, device, repeats)
        exact, ref = (exact_logits, ref_logits) if path == "logits" else (exact_hidden, ref_hidden)
        key = "grad" if path == "logits" else "grad_hidden"
        scaled = grad * tau if path == "logits" else grad  # d / d logits, not d / d (logits / tau)
        errors = {
            "logp": (error(out.logprobs, exact["logprobs"]), error(ref["logprobs"], exact["logprobs"])),
            "H": (error(out.entropy, exact["entropy"]), error(ref["entropy"], exact["entropy"])),
            key: (error(scaled, exact[key]), error(ref[key], exact[key])),
        }
        # a bf16 gradient is rounded to bf16 on the way out: judge its values only
        ok = all(within(e, r, factor) for k, (e, r) in errors.items() if k != key or factor == 2.0)
        if path == "logits" and dtype == torch.float32:
            row_sum = float(grad.double().sum(dim=1).abs().max())
            errors["grad row sum"] = (row_sum, None)
            ok = ok and row_sum <= 1e-5
        report.row(f"{label} {name}", seconds, peak, errors, ok)

    def judge_entropy(name: str, run: Callable[[], Any], exact: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]):
        out, seconds, peak = measure(run, device, repeats)
        errors = {"H": (error(out.entropy, exact["entropy"]), error(ref["entropy"], exact["entropy"]))}
        report.row(f"{label} {name}", seconds, peak, errors, all(within(e, r, factor) for e, r in errors.values()))

    judge("masked_logprobs (+ entropy), fwd+bwd", logits_run(), "logits")
    judge_entropy("masked_entropy, fwd", lambda: masked_entropy(logits, mask), exact_logits, ref_logits)
    judge("masked_logprobs_from_hidden (+ H, bias), fwd+bwd", hidden_run(), "hidden")
    judge_entropy(
        "masked_entropy_from_hidden, fwd",
        lambda: masked_entropy_from_hidden(hidden, weight, mask, bias=bias),
        exact_hidden,
        ref_hidden,
    )
    with one_rank_group(device) as group:
        judge("masked_logprobs, vocab_group (1 rank)", logits_run(vocab_group=group), "logits")
        judge("from_hidden, vocab_group (1 rank)", hidden_run(vocab_group=group), "hidden")
    check_audit(report, label, mask, logits, hidden, weight, bias, logits_r, device, repeats)


def check_audit(
    report: Report,
    label: str,
    mask: SamplingMask,
    logits: torch.Tensor,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    logits_r: torch.Tensor,
    device: torch.device,
    repeats: int,
) -> None:
    """The audit's log-probs (full vocabulary, over the recorded support) against the float64 audit."""
    exact = audit(mask, logits_r.double(), temperature=0.9, **AUDIT)
    h_r, w_r, b_r = (t.cpu().double() for t in (hidden, weight, bias))
    exact_hidden = audit_from_hidden(mask, h_r, w_r, bias=b_r, temperature=0.9, **AUDIT)
    for name, run, want in (
        ("audit", lambda: audit(mask, logits, temperature=0.9, **AUDIT), exact),
        (
            "audit_from_hidden",
            lambda: audit_from_hidden(mask, hidden, weight, bias=bias, temperature=0.9, **AUDIT),
            exact_hidden,
        ),
    ):
        got, seconds, peak = measure(run, device, max(1, repeats // 3))
        errors = {
            key: (float(np.nanmax(np.abs(getattr(got, key) - getattr(want, key)))), None)
            for key in ("full_logprobs", "replay_logprobs")
        }
        equal = float(np.mean(got.equal[got.compared] == want.equal[want.compared]))
        errors["same verdict"] = (equal, None)
        ok = all(e <= 1e-4 for k, (e, _) in errors.items() if k != "same verdict")
        report.row(f"{label} {name}", seconds, peak, errors, ok)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (a dry run of the checks)")
    parser.add_argument("--quick", action="store_true", help=f"tiny sizes ({QUICK['vocab']} ids, d = {QUICK['dim']})")
    parser.add_argument("--rows", type=int, help="rollout-like rows (default 128; --quick 16)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: CUDA is not available on this machine (torch.cuda.is_available() is False): nothing run")
        return 0
    torch.set_num_threads(os.cpu_count() or 1)
    cfg = dict(QUICK if args.quick else FULL)
    if args.rows:
        cfg["rows"] = args.rows
    start = time.perf_counter()
    mask, cpu = workload(cfg)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = Report()
    report.line(
        f"gpu_check on {name}, torch {torch.__version__}: V = {cfg['vocab']:,}, d = {cfg['dim']}, "
        f"{mask.num_rows} rows ({cfg['rows']} rollout-like, widths {cfg['wide']} x 2, {cfg['empty']} empty), "
        f"{mask.nnz:,} ids; median of {args.repeats}; errors against float64 on the CPU (ref: masked_fill + "
        "logsumexp in fp32 on the device)"
    )
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 here, as on the CPU
    for dtype in (torch.float32, torch.bfloat16):
        check_dtype(report, mask, cpu, dtype, device, args.repeats)
    verdict = "every check holds" if not report.failures else f"FAILS: {', '.join(report.failures)}"
    report.line(f"{verdict}; {time.perf_counter() - start:.1f} s in all")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
