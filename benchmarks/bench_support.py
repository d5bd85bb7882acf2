"""``support_from_logits`` against each engine's own function, and the audit's memory (a script, not a test).

    PYTHONPATH=$PWD:/work/upstream/site python benchmarks/bench_support.py [--tokens 512] [--repeats 3]

Speed: per rule, the engine's own code on a [T, V] fp32 batch with one set of parameters (temperature
0.8, top_k 50, top_p 0.95, min_p 0.05; vLLM without min-p, whose kernel is Triton) against
``support_from_logits`` with the same parameters, V = 151936, run round-robin after a warm-up; the
median of ``--repeats``. The engine side is its function as the engine calls it (loaded from the
installed package by ``tests/fixtures/upstream/make_support_rules.py``):

- vllm: ``z = logits / t`` then ``apply_top_k_top_p_pytorch(z, k, p)`` and ``isfinite``;
- sglang: ``logits.div_(t)``, ``softmax``, ``top_k_top_p_min_p_sampling_from_probs_torch(...,
  return_filtered_probs=True)`` (it also draws the sample) and ``weights > 0`` scattered back;
- hf: ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``, ``MinPLogitsWarper``
  on the batch and ``!= -inf``.

Ours returns a ragged SamplingMask (ids + offsets), the engine side a bool [T, V]. T = 8192 would need
about 15 GiB for one engine's sort at V = 151936 (logits, sorted values and int64 indices): there
``--engine-rows 1024`` calls the engine's function on slices of rows (every rule is per row, so the
result is the same). The ratio is per row, so it does not depend on T.

Memory (``--memory``): ``audit_from_hidden`` (d = 1024) against forming ``hidden @ W.T`` [T, V] and
calling ``audit`` on it, each once in a fresh process; peak RSS beyond the inputs as
``benchmarks/bench_scorer.py`` measures it (``VmHWM`` after ``clear_refs``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sampling_mask.data import synthetic
from sampling_mask.reference_scorer import audit, audit_from_hidden, support_from_logits

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 151936
PARAMS = {"temperature": 0.8, "top_k": 50, "top_p": 0.95, "min_p": 0.05}


def _module(name: str, path: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES_SCRIPT = _module(
    "make_support_rules", os.path.join(HERE, "..", "tests", "fixtures", "upstream", "make_support_rules.py")
)


def logits(tokens: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """Heavy-tailed fp32 logits [tokens, vocab], drawn 256 rows at a time (no float64 [T, V])."""
    g = np.random.default_rng(seed)
    out = np.empty((tokens, vocab), np.float32)
    for start in range(0, tokens, 256):
        out[start : start + 256] = g.standard_t(2.5, size=(min(256, tokens - start), vocab)) * 2
    return torch.from_numpy(out)


def in_row_slices(fn: Callable[[torch.Tensor], Any], z: torch.Tensor, rows: int | None) -> Callable[[], Any]:
    """``fn`` on all of ``z`` or, with ``rows``, on slices of that many rows (every rule is per row, so
    the result is the same; it lets the engines' functions, which sort [T, V] at once, fit in memory)."""
    if rows is None:
        return lambda: fn(z)
    return lambda: [fn(z[start : start + rows]) for start in range(0, z.shape[0], rows)]


def engine_method(rule: str, z: torch.Tensor, engine_rows: int | None = None) -> Callable[[], Any]:
    return in_row_slices(_engine_fn(rule), z, engine_rows)


def _engine_fn(rule: str) -> Callable[[torch.Tensor], Any]:
    fns = RULES_SCRIPT.load_engine(rule)
    t, k, p, mp = PARAMS["temperature"], PARAMS["top_k"], PARAMS["top_p"], PARAMS["min_p"]
    if rule == "vllm":

        def run_vllm(z: torch.Tensor) -> torch.Tensor:
            rows = z.shape[0]
            kt, pt, tt = torch.full((rows,), k, dtype=torch.int32), torch.full((rows,), p), torch.full((rows,), t)
            return torch.isfinite(fns["apply_top_k_top_p_pytorch"](z / tt[:, None], kt, pt, allow_cpu_sync=True))

        return run_vllm
    if rule == "sglang":

        def run(z: torch.Tensor) -> torch.Tensor:
            rows = z.shape[0]
            ks, ps, mps = torch.full((rows,), k, dtype=torch.int32), torch.full((rows,), p), torch.full((rows,), mp)
            temps = torch.full((rows, 1), t)
            x = z.clone()
            x.div_(temps)
            probs = torch.softmax(x, dim=-1)
            _, weights, ids, _ = fns["top_k_top_p_min_p_sampling_from_probs_torch"](
                probs, ks, ps, mps, True, None, None, return_filtered_probs=True
            )
            return torch.zeros(z.shape, dtype=torch.bool).scatter_(1, ids.long(), weights > 0)

        return run
    warpers = [
        fns["TemperatureLogitsWarper"](t),
        fns["TopKLogitsWarper"](top_k=k),
        fns["TopPLogitsWarper"](top_p=p),
        fns["MinPLogitsWarper"](min_p=mp),
    ]

    def run_hf(z: torch.Tensor) -> torch.Tensor:
        scores = z
        for warper in warpers:
            scores = warper(None, scores)
        return scores != float("-inf")

    return run_hf


def ours_method(rule: str, z: torch.Tensor) -> Callable[[], Any]:
    params = dict(PARAMS, min_p=0.0) if rule == "vllm" else PARAMS
    return lambda: support_from_logits(z, rule=rule, **params)


def speed(tokens: int, repeats: int, engine_rows: int | None) -> None:
    z = logits(tokens, VOCAB)
    print(f"support_from_logits vs the engine's own function: T = {tokens}, V = {VOCAB}, fp32, {PARAMS}")
    if engine_rows is not None:
        print(f"the engines' functions run on slices of {engine_rows} rows (whole [T, V] sorts do not fit)")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")
    print("| rule | engine's own function | support_from_logits | ratio (ours / engine) |")
    print("|---|---|---|---|")
    for rule in RULES_SCRIPT.RULES:
        if not RULES_SCRIPT.available(rule):
            print(f"| {rule} | not installed | | |")
            continue
        methods = {"engine": engine_method(rule, z, engine_rows), "ours": ours_method(rule, z)}
        small = z[:4]
        engine_method(rule, small)(), ours_method(rule, small)()  # warm-up
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(repeats):
            for name, fn in methods.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        engine, ours = statistics.median(times["engine"]), statistics.median(times["ours"])
        print(f"| {rule} | {engine:.2f} s | {ours:.2f} s | {ours / engine:.2f} |", flush=True)
    print(f"load at the end {os.getloadavg()[0]:.2f}")


# ----------------------------------------------------------------------------- memory, one process each
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def child(method: str, tokens: int, dim: int) -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, dim, generator=g)
    weight = torch.randn(VOCAB, dim, generator=g) / dim**0.5
    mask = synthetic.rollout(tokens, seed=0, vocab_size=VOCAB, top_k=512)
    kwargs = dict(rule="vllm", temperature=0.8, top_k=50, top_p=0.95)
    run = {
        "hidden": lambda: audit_from_hidden(mask, hidden, weight, **kwargs),
        "formed": lambda: audit(mask, hidden @ weight.T, **kwargs),
    }[method]
    audit_from_hidden(mask[:2], hidden[:2], weight, **kwargs)  # code and thread pools resident
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    report = run()
    seconds = time.perf_counter() - start
    print(f"{(_status_kib('VmHWM') - before) / 1024:.1f} {seconds:.2f} {report.summary()['rows_compared']}")


def memory(tokens: int, dim: int) -> None:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    print(f"audit memory: T = {tokens}, d = {dim}, V = {VOCAB}, fp32, rule vllm (top_k 50, top_p 0.95)")
    print("| path | peak RSS beyond the inputs | time |")
    print("|---|---|---|")
    for method, label in (("hidden", "audit_from_hidden (chunked)"), ("formed", "hidden @ W.T [T, V], then audit")):
        out = subprocess.run(
            [sys.executable, __file__, "--child", method, "--tokens", str(tokens), "--dim", str(dim)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        mib, seconds, _ = out.stdout.split()
        print(f"| {label} | {float(mib):.0f} MiB | {float(seconds):.1f} s |", flush=True)
    print(f"[T, V] fp32 itself: {tokens * VOCAB * 4 / 2**20:.0f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="only the audit memory comparison")
    parser.add_argument("--memory-tokens", type=int, default=512, help="0: skip the memory comparison")
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument(
        "--engine-rows", type=int, metavar="N", help="call the engines' functions on slices of N rows (large T)"
    )
    parser.add_argument("--child", choices=("hidden", "formed"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.tokens, args.dim)
        return 0
    if not args.memory:
        speed(args.tokens, args.repeats, args.engine_rows)
    if args.memory_tokens > 0:
        memory(args.memory_tokens, args.dim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
