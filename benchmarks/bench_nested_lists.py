"""Nested Python lists (vLLM ``sampling_mask.token_ids``) -> SamplingMask, validation included.

Baseline: ``np.array([i for row in rows for i in row])`` plus a cumulative sum of the row lengths
(no validation at all). Measured: ``adapters.vllm.from_token_ids`` (the adapters' list path) and, for
reference, the core ``SamplingMask.from_rows``; both validate (ids in range, no duplicates, strict
integer types). Rows are ascending and unique per row, with realistic lengths: ~46% singletons,
median 2, mean ~8, p99 ~80 (lognormal tail). Prints medians of several interleaved runs and ratios.

    python benchmarks/bench_nested_lists.py [--rows 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sampling_mask import SamplingMask
from sampling_mask.adapters import vllm

VOCAB = 151_936


def realistic_rows(num_rows: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    singleton = rng.random(num_rows) < 0.46
    tail = 2 + np.floor(np.exp(rng.normal(1.64, 1.3, num_rows)))
    lengths = np.where(singleton, 1, np.minimum(tail, 4096)).astype(np.int64)
    offsets = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    gaps = rng.integers(1, 32, int(offsets[-1]))  # a row spans < 4096 * 31 < VOCAB: unique after the wrap
    running = np.cumsum(gaps)
    row_base = np.repeat(running[offsets[:-1]] - gaps[offsets[:-1]], lengths)
    starts = np.repeat(rng.integers(0, VOCAB // 2, num_rows), lengths)
    ids = (starts + running - row_base) % VOCAB  # ascending within a row unless it wraps
    mask = SamplingMask(ids.astype(np.int32), offsets, validate=False).canonical()
    return mask.to_rows()


def baseline(rows: list[list[int]]) -> Any:
    return np.array([i for row in rows for i in row]), np.cumsum([len(row) for row in rows])


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rows = realistic_rows(args.rows, args.seed)
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    print(
        f"rows={len(rows):,} ids={int(lengths.sum()):,} singletons={np.mean(lengths == 1):.1%} "
        f"median={np.median(lengths):.0f} mean={lengths.mean():.2f} p99={np.percentile(lengths, 99):.0f}"
    )
    check = vllm.from_token_ids(rows, vocab_size=VOCAB)
    assert check.to_rows() == rows, "the adapter must reproduce the rows"

    candidates: dict[str, Callable[[], Any]] = {
        "baseline (list comprehension + np.array + cumsum, no validation)": lambda: baseline(rows),
        "adapters.vllm.from_token_ids (validated)": lambda: vllm.from_token_ids(rows, vocab_size=VOCAB),
        "SamplingMask.from_rows (validated, core path)": lambda: SamplingMask.from_rows(rows, vocab_size=VOCAB),
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.repeats):
        for name, fn in candidates.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base = medians[next(iter(candidates))]
    for name, seconds in medians.items():
        print(f"{name:68s} {seconds * 1e3:9.1f} ms   speedup vs baseline {base / seconds:5.2f}x")


if __name__ == "__main__":
    main()
