"""Reference scorer speed and memory (a script, not a test): ``python benchmarks/bench_scorer.py``.

Hidden-state path: forward + backward of ``masked_logprobs_from_hidden`` against the full-vocabulary
``log_softmax(hidden @ W.T).gather(targets)`` at V = 151936, d = 1024, T = 2048 (``--small``:
V = 32768, d = 256, T = 512), fp32, temperature 1. Logits path (``--logits``): ``masked_logprobs`` on
given logits against the dense formulation ``logits.masked_fill(~support, -inf)``, gather, logsumexp.

Supports are drawn like real runs by ``sampling_mask.synthetic.rollout`` (top_k 512, top_p 0.95: about
46% singletons, median 2, mean about 8); the printed line shows the drawn statistics.

Time: median of ``--repeats`` runs of forward + backward, gradients reset to None before each run.

Peak memory: every method runs once in a fresh subprocess started with ``MALLOC_MMAP_THRESHOLD_=65536``,
so every block above 64 KiB is its own mapping, returned to the OS when freed, and the resident set
size follows live memory (torch's CPU allocator does not cache). The child runs the method once on a
tiny case (so that code pages and thread pools are already resident), builds its inputs, resets the
kernel's peak RSS (``/proc/self/clear_refs`` = 5), runs once, and reads ``VmHWM``:
``peak beyond = VmHWM - VmRSS before the run - gradient buffer``, the gradient buffer being the
weight's gradient (hidden path) or the logits' gradient (logits path), which a trainer holds either
way. Linux only.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import sampling_mask
from sampling_mask import SamplingMask, synthetic
from sampling_mask.core import layouts
from sampling_mask.reference_scorer import masked_logprobs, masked_logprobs_from_hidden

SIZES = {
    "full": dict(vocab=151936, dim=1024, tokens=2048),
    "small": dict(vocab=32768, dim=256, tokens=512),
    "warmup": dict(vocab=2048, dim=32, tokens=64),
}
CAP = 512


# --------------------------------------------------------------------------- workload
def draw_mask(tokens: int, vocab: int, seed: int) -> SamplingMask:
    """A rollout-like mask with sampled ids (``sampling_mask.synthetic``, fitted to real runs)."""
    return synthetic.rollout(tokens, seed=seed, vocab_size=vocab, top_k=CAP)


def support_summary(mask: SamplingMask) -> str:
    stats = synthetic.support_stats(mask)
    return (
        f"{mask.num_rows} rows, {mask.nnz} ids: singletons {stats['singleton_fraction']:.0%}, "
        f"median {stats['median']:g}, mean {stats['mean']:.1f}, p99 {stats['p99']:g}, max {stats['max']:g}"
    )


def build(size: str, seed: int = 0) -> dict[str, Any]:
    cfg = SIZES[size]
    gen = torch.Generator().manual_seed(seed)
    mask = draw_mask(cfg["tokens"], cfg["vocab"], seed)
    hidden = torch.randn(cfg["tokens"], cfg["dim"], generator=gen).requires_grad_()
    weight = (torch.randn(cfg["vocab"], cfg["dim"], generator=gen) * (3.0 / cfg["dim"] ** 0.5)).requires_grad_()
    targets = torch.from_numpy(mask.sampled_token_ids.astype(np.int64))
    return dict(mask=mask, hidden=hidden, weight=weight, targets=targets, **cfg)


def with_logits(case: dict[str, Any]) -> dict[str, Any]:
    with torch.no_grad():
        logits = case["hidden"] @ case["weight"].T
    mask: SamplingMask = case["mask"]
    rows = torch.from_numpy(layouts.row_of_ids(mask.offsets))
    return dict(case, logits=logits.requires_grad_(), rows=rows, ids=torch.from_numpy(mask.ids.astype(np.int64)))


# --------------------------------------------------------------------------- methods (forward + backward)
def hidden_ours(c: dict[str, Any]) -> None:
    out = masked_logprobs_from_hidden(c["hidden"], c["weight"], c["mask"], c["targets"], temperature=1.0)
    out.logprobs.sum().backward()


def hidden_full_vocab(c: dict[str, Any]) -> None:
    logp = torch.log_softmax(c["hidden"] @ c["weight"].T, dim=-1).gather(1, c["targets"][:, None])
    logp.sum().backward()


def logits_ours(c: dict[str, Any]) -> None:
    masked_logprobs(c["logits"], c["mask"], c["targets"], temperature=1.0).logprobs.sum().backward()


def logits_dense_mask(c: dict[str, Any]) -> None:
    logits = c["logits"]
    support = torch.zeros(logits.shape, dtype=torch.bool)
    support[c["rows"], c["ids"]] = True
    z = logits.masked_fill(~support, float("-inf"))
    logp = z.gather(1, c["targets"][:, None])[:, 0] - torch.logsumexp(z, dim=-1)
    logp.sum().backward()


METHODS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "hidden_ours": (hidden_ours, "weight"),
    "hidden_full_vocab": (hidden_full_vocab, "weight"),
    "logits_ours": (logits_ours, "logits"),
    "logits_dense_mask": (logits_dense_mask, "logits"),
}


def reset_grads(c: dict[str, Any]) -> None:
    for key in ("hidden", "weight", "logits"):
        if key in c:
            c[key].grad = None


def median_seconds(method: str, c: dict[str, Any], repeats: int) -> float:
    fn = METHODS[method][0]
    times = []
    for _ in range(repeats):
        reset_grads(c)
        gc.collect()
        start = time.perf_counter()
        fn(c)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# --------------------------------------------------------------------------- memory (child process)
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child_peak(method: str, size: str) -> None:
    fn, buffer = METHODS[method]
    warm = build("warmup")
    fn(with_logits(warm) if method.startswith("logits") else warm)  # fault in code pages and thread pools
    del warm
    c = build(size)
    if method.startswith("logits"):
        c = with_logits(c)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # peak RSS := current RSS
    before = _status_kib("VmRSS") * 1024
    fn(c)
    peak = _status_kib("VmHWM") * 1024
    grad = c[buffer].grad
    excluded = grad.numel() * grad.element_size()
    print(json.dumps({"peak_beyond": peak - before - excluded, "excluded": excluded}))


def measure_peak(method: str, size: str) -> int:
    # The child imports the same sampling_mask as this process, installed or not.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sampling_mask.__file__)))
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=path)
    out = subprocess.run(
        [sys.executable, __file__, "--child", method, "--size", size, "--threads", str(torch.get_num_threads())],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_beyond"])


# --------------------------------------------------------------------------- report
def compare(
    label: str, ours: str, base: str, c: dict[str, Any], size: str, repeats: int, base_repeats: int | None = None
) -> None:
    t_ours = median_seconds(ours, c, repeats)
    t_base = median_seconds(base, c, base_repeats or repeats)
    m_ours, m_base = measure_peak(ours, size), measure_peak(base, size)
    mib = 1 << 20
    print(f"{label}")
    print(
        f"  time   (fwd+bwd, median of {repeats} / {base_repeats or repeats}): ours {t_ours:.3f} s, "
        f"baseline {t_base:.3f} s"
    )
    print(f"  peak memory beyond the gradient buffer: ours {m_ours / mib:.1f} MiB, baseline {m_base / mib:.1f} MiB")
    print(
        f"  time ratio {t_ours / t_base:.4f} (target <= 0.2), peak-memory ratio {m_ours / m_base:.4f} (target <= 0.1)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="V=32768, d=256, T=512")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--baseline-repeats", type=int, default=None, help="runs of the (20-40x slower) baselines (default: --repeats)"
    )
    parser.add_argument("--logits", action="store_true", help="also the logits path against a dense -inf mask")
    parser.add_argument("--child", choices=sorted(METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--size", choices=sorted(SIZES), default="full", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    size = "small" if args.small else args.size
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        child_peak(args.child, size)
        return 0
    c = build(size)
    print(
        f"V={c['vocab']} d={c['dim']} T={c['tokens']} fp32, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"supports: {support_summary(c['mask'])}")
    compare(
        "hidden states: masked_logprobs_from_hidden vs log_softmax(hidden @ W.T) + gather",
        "hidden_ours",
        "hidden_full_vocab",
        c,
        size,
        args.repeats,
        args.baseline_repeats,
    )
    if args.logits:
        compare(
            "logits: masked_logprobs vs masked_fill(-inf) + gather + logsumexp",
            "logits_ours",
            "logits_dense_mask",
            with_logits(c),
            size,
            args.repeats,
            args.baseline_repeats,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
