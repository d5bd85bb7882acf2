"""Reference scorer speed and memory (a script, not a test): ``python benchmarks/bench_scorer.py``.

Default (BENCHMARKS.md, "Scorer"; about 70 s on two idle cores):

- against a naive pair-gather (target: at most 1.2x its time, and at most 0.1x the full vocabulary's
  memory): forward + backward of ``masked_logprobs_from_hidden`` against a naive
  pair-gather in plain autograd (:func:`hidden_pair_gather`: gather ``hidden[row]`` and
  ``weight[id]`` for every (row, id) pair of the mask, dot products, a segment log-sum-exp per row;
  pairs extracted beforehand, untimed) at V = 151936, d = 1024, T = 2048 and T = 8192, timed
  round-robin (``sampling_mask.cli.bench.race``); then the peak memory beyond the gradients of both at
  T = 8192, against the full-vocabulary path's, taken as ``2 T V 4`` bytes (fp32 logits plus their
  gradient, a lower bound: ``log_softmax(hidden @ W.T)`` measured 2977 MiB at T = 2048, 1.25x that
  bound), because running it at T = 8192 takes minutes.
- against the full vocabulary, at T = 512 (same V, d; target: at most 0.2x its time): time of ``masked_logprobs_from_hidden`` against the
  full-vocabulary ``log_softmax(hidden @ W.T).gather(targets)``, and of ``masked_logprobs`` on given
  logits against the dense formulation ``logits.masked_fill(~support, -inf)``, gather, logsumexp;
  each baseline runs once.

``--full-vocab`` runs the full-vocabulary comparisons at T = 2048 (``--small``: V = 32768, d = 256, T = 512)
with measured peak memory, as before (several minutes; the baselines take 20-50 s a run here).
``--quick`` runs the default on tiny sizes (V = 2048, d = 32, T = 64 / 256) without memory figures.
``--against REV`` times today's scorer against its ``row_stats.py`` at git revision REV (loaded
beside it, ``RowStats`` swapped round-robin in one process) at the default's sizes plus rows as wide
as the vocabulary and empty rows, with the peak RSS growth of each (``--against 1798eb0``: the scorer before its row sums ran in
float64; run with ``MALLOC_MMAP_THRESHOLD_=65536``).

Supports are drawn like real runs by ``sampling_mask.data.synthetic.rollout`` (top_k 512, top_p 0.95: about
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
from sampling_mask import SamplingMask
from sampling_mask.cli.bench import race
from sampling_mask.core import layouts
from sampling_mask.data import synthetic
from sampling_mask.reference_scorer import masked_logprobs, masked_logprobs_from_hidden

SIZES = {
    "full": dict(vocab=151936, dim=1024, tokens=2048),
    "full8k": dict(vocab=151936, dim=1024, tokens=8192),
    "full512": dict(vocab=151936, dim=1024, tokens=512),
    "small": dict(vocab=32768, dim=256, tokens=512),
    "warmup": dict(vocab=2048, dim=32, tokens=64),
    "tiny4x": dict(vocab=2048, dim=32, tokens=256),
}
#: Targets: the hidden path's time over the naive pair-gather's, and its peak memory beyond
#: the gradients over the full-vocabulary path's, at most.
PAIR_GATHER_TIME_TARGET = 1.2
FULL_VOCAB_MEMORY_TARGET = 0.1
CAP = 512


# --------------------------------------------------------------------------- workload
def draw_mask(tokens: int, vocab: int, seed: int) -> SamplingMask:
    """A rollout-like mask with sampled ids (``sampling_mask.data.synthetic``, fitted to real runs)."""
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
    rows = torch.from_numpy(layouts.row_of_ids(mask.offsets).astype(np.int64))
    ids = torch.from_numpy(mask.ids.astype(np.int64))
    is_target = ids == targets[rows]
    return dict(
        mask=mask, hidden=hidden, weight=weight, targets=targets, rows=rows, ids=ids, is_target=is_target, **cfg
    )


def with_logits(case: dict[str, Any]) -> dict[str, Any]:
    with torch.no_grad():
        logits = case["hidden"] @ case["weight"].T
    return dict(case, logits=logits.requires_grad_())


# --------------------------------------------------------------------------- methods (forward + backward)
def hidden_ours(c: dict[str, Any]) -> None:
    out = masked_logprobs_from_hidden(c["hidden"], c["weight"], c["mask"], c["targets"], temperature=1.0)
    out.logprobs.sum().backward()


def hidden_pair_gather(c: dict[str, Any]) -> None:
    """The naive baseline: every (row, id) pair gathered at once in plain autograd ([P, d] twice)."""
    rows, ids, hit, tau = c["rows"], c["ids"], c["is_target"], 1.0
    z = (c["hidden"][rows] * c["weight"][ids]).sum(-1) / tau
    m = torch.full((c["tokens"],), float("-inf")).scatter_reduce(0, rows, z.detach(), "amax")
    lse = m + torch.zeros_like(m).index_add(0, rows, torch.exp(z - m[rows])).log()
    logp = torch.zeros_like(m).index_add(0, rows[hit], z[hit]) - lse
    logp.sum().backward()


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
    "hidden_pair_gather": (hidden_pair_gather, "weight"),
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
    """The full-vocabulary comparison with measured peak memory (``--full-vocab``)."""
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


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def race_methods(names: list[str], c: dict[str, Any], repeats: int) -> dict[str, float]:
    """Median fwd+bwd seconds of each method, round-robin (``sampling_mask.cli.bench.race``)."""

    def run(fn: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
        def once() -> None:
            reset_grads(c)
            fn(c)

        return once

    return race({name: run(METHODS[name][0]) for name in names}, repeats)


def full_vocab_bytes(tokens: int, vocab: int) -> int:
    """fp32 logits ``[T, V]`` plus their gradient: the least the full-vocabulary path holds."""
    return 2 * tokens * vocab * 4


def report(quick: bool, repeats: int) -> dict[str, Any]:
    """The pair-gather and full-vocabulary time ratios (see the module docstring); prints, returns figures."""
    mib = 1 << 20
    figures: dict[str, Any] = {"pair_gather": {}}
    sizes = ("warmup", "tiny4x") if quick else ("full", "full8k")
    head = SIZES[sizes[0]]
    print(
        f"pair-gather: masked_logprobs_from_hidden vs a naive pair-gather in plain autograd, fwd+bwd, "
        f"fp32, V={head['vocab']} d={head['dim']}, {torch.get_num_threads()} threads, medians of {repeats} "
        "round-robin"
    )
    for size in sizes:
        c = build(size)
        t = race_methods(["hidden_ours", "hidden_pair_gather"], c, repeats)
        ratio = t["hidden_ours"] / t["hidden_pair_gather"]
        figures["pair_gather"][c["tokens"]] = dict(ours_s=t["hidden_ours"], pair_gather_s=t["hidden_pair_gather"])
        figures["pair_gather"][c["tokens"]]["ratio"] = ratio
        print(
            f"  T={c['tokens']} ({support_summary(c['mask'])}): ours {t['hidden_ours']:.3f} s, "
            f"pair-gather {t['hidden_pair_gather']:.3f} s, ratio {ratio:.2f} (target <= {PAIR_GATHER_TIME_TARGET}: "
            + ("no verdict at quick sizes)" if quick else f"{_verdict(ratio <= PAIR_GATHER_TIME_TARGET)})")
        )
        del c
    if quick:
        print("  quick: no peak-memory figures")
    else:
        cfg = SIZES[sizes[-1]]
        ours, naive = measure_peak("hidden_ours", sizes[-1]), measure_peak("hidden_pair_gather", sizes[-1])
        full = full_vocab_bytes(cfg["tokens"], cfg["vocab"])
        ratio = ours / full
        figures["memory"] = dict(tokens=cfg["tokens"], ours=ours, pair_gather=naive, full_vocab=full, ratio=ratio)
        print(
            f"  peak memory beyond the gradients at T={cfg['tokens']}: ours {ours / mib:.1f} MiB, pair-gather "
            f"{naive / mib:.1f} MiB (measured); full vocabulary {full / mib:.0f} MiB (2 T V 4 bytes: fp32 logits "
            f"+ their gradient, computed); ratio {ratio:.4f} "
            f"(target <= {FULL_VOCAB_MEMORY_TARGET}: {_verdict(ratio <= FULL_VOCAB_MEMORY_TARGET)})"
        )
    size = "warmup" if quick else "full512"
    c = with_logits(build(size))
    t = race_methods(["hidden_ours", "logits_ours"], c, repeats)
    t.update({name: median_seconds(name, c, 1) for name in ("hidden_full_vocab", "logits_dense_mask")})
    figures["full_vocab"] = dict(tokens=c["tokens"], **t)
    print(
        f"full vocabulary at T={c['tokens']} (ours: medians of {repeats} round-robin; full-vocabulary baselines run once; "
        "--full-vocab: T=2048 with memory): "
        f"hidden ours {t['hidden_ours']:.3f} s vs log_softmax(hidden @ W.T) {t['hidden_full_vocab']:.3f} s, "
        f"ratio {t['hidden_ours'] / t['hidden_full_vocab']:.3f}; logits ours {t['logits_ours']:.3f} s vs "
        f"masked_fill(-inf) {t['logits_dense_mask']:.3f} s, ratio {t['logits_ours'] / t['logits_dense_mask']:.3f} "
        "(targets <= 0.2)"
    )
    return figures


# --------------------------------------------------------------------------- against an older scorer
def _old_row_stats(rev: str) -> Any:
    """``reference_scorer/row_stats.py`` as of git revision ``rev``, loaded as a module beside today's."""
    import importlib.util

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = subprocess.run(
        ["git", "show", f"{rev}:sampling_mask/reference_scorer/row_stats.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    spec = importlib.util.spec_from_loader(f"row_stats_{rev}", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(src, f"row_stats@{rev}", "exec"), module.__dict__)  # noqa: S102 - this repository's own history
    return module


def _rss_growth(fn: Callable[[dict[str, Any]], None], c: dict[str, Any]) -> int:
    """Peak resident set growth of one run (``VmHWM`` after resetting it; see the module docstring)."""
    reset_grads(c)
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS") * 1024
    fn(c)
    return _status_kib("VmHWM") * 1024 - before


def _wide_case(path: str, rows: int, vocab: int, dim: int, empty: bool = False) -> dict[str, Any]:
    """``rows`` rows of width ``vocab`` (or empty rows, scored over the vocabulary through tiles)."""
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, dim, generator=gen).requires_grad_()
    weight = (torch.randn(vocab, dim, generator=gen) * (3.0 / dim**0.5)).requires_grad_()
    width = 0 if empty else vocab
    ids = torch.arange(width).repeat(rows)
    c = dict(hidden=hidden, weight=weight, mask=(ids, torch.arange(rows + 1) * width), targets=torch.arange(rows) * 7)
    if path == "logits":
        with torch.no_grad():
            c["logits"] = (hidden @ weight.T).requires_grad_()
    return c


def against(rev: str, quick: bool, repeats: int) -> None:
    """Today's scorer against its ``row_stats`` at ``rev``, side by side in this process: time (round-robin
    medians of ``RowStats`` swapped in and out) and peak RSS growth of one run each (the smaller of two;
    run with ``MALLOC_MMAP_THRESHOLD_=65536`` so that freed memory leaves, as ``measure_peak`` does)."""
    from sampling_mask.reference_scorer import row_stats, scoring

    variants = {"old": _old_row_stats(rev).RowStats, "new": row_stats.RowStats}

    def use(name: str) -> None:
        scoring.RowStats = variants[name]  # type: ignore[misc]

    def wide(path: str) -> Callable[[dict[str, Any]], None]:
        def run(c: dict[str, Any]) -> None:
            if path == "logits":
                out = masked_logprobs(c["logits"], c["mask"], c["targets"], temperature=1.0)
            else:
                out = masked_logprobs_from_hidden(c["hidden"], c["weight"], c["mask"], c["targets"], temperature=1.0)
            out.logprobs.sum().backward()

        return run

    cfg = SIZES["tiny4x" if quick else "full512"]
    cases: list[tuple[str, Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]]] = [
        (f"hidden, T={SIZES[size]['tokens']} (pair-gather sizes)", lambda size=size: build(size), hidden_ours)
        for size in (("warmup", "tiny4x") if quick else ("full", "full8k"))
    ]
    cases += [
        (f"hidden, T={cfg['tokens']} (full vocabulary)", lambda: build("tiny4x" if quick else "full512"), hidden_ours),
        (
            f"logits, T={cfg['tokens']} (full vocabulary)",
            lambda: with_logits(build("tiny4x" if quick else "full512")),
            logits_ours,
        ),
    ]
    for path in ("logits", "hidden"):
        cases.append(
            (
                f"{path}, 4 rows of width {cfg['vocab']}",
                lambda p=path: _wide_case(p, 4, cfg["vocab"], cfg["dim"]),
                wide(path),
            )
        )
    cases.append(
        (
            "hidden, 4 empty rows (tiles)",
            lambda: _wide_case("hidden", 4, cfg["vocab"], cfg["dim"], True),
            wide("hidden"),
        )
    )
    print(
        f"scorer now vs row_stats at {rev}, fwd+bwd fp32, V={cfg['vocab']} d={cfg['dim']}, "
        f"{torch.get_num_threads()} threads, medians of {repeats} round-robin; peak RSS growth of one run"
    )
    mib = 1 << 20
    for label, make, fn in cases:
        c = make()

        def timed(name: str, c: dict[str, Any] = c, fn: Callable[[dict[str, Any]], None] = fn) -> Callable[[], None]:
            def once() -> None:
                use(name)
                reset_grads(c)
                fn(c)

            return once

        t = race({"old": timed("old"), "new": timed("new")}, repeats)
        peak: dict[str, int] = {}
        for name in ("old", "new", "old", "new"):
            use(name)
            grown = _rss_growth(fn, c)
            peak[name] = min(peak.get(name, grown), grown)
        use("new")
        print(
            f"  {label}: time {t['old']:.4f} s -> {t['new']:.4f} s (ratio {t['new'] / t['old']:.3f}); "
            f"peak {peak['old'] / mib:.1f} -> {peak['new'] / mib:.1f} MiB (ratio {peak['new'] / max(peak['old'], 1):.3f})"
        )
        del c


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, no memory figures")
    parser.add_argument(
        "--full-vocab",
        action="store_true",
        help="the full-vocabulary comparisons at T=2048 with measured memory (slow)",
    )
    parser.add_argument("--small", action="store_true", help="with --full-vocab: V=32768, d=256, T=512")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--baseline-repeats", type=int, default=None, help="runs of the (20-40x slower) baselines (default: --repeats)"
    )
    parser.add_argument("--logits", action="store_true", help="with --full-vocab: also the logits path")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="compare with the scorer's row_stats.py at git revision REV, side by side (e.g. 1798eb0)",
    )
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
    if args.against:
        against(args.against, args.quick, args.repeats)
        return 0
    if not args.full_vocab:
        report(args.quick, args.repeats)
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
