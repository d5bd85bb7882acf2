"""Core conversion speed on a realistic mask (a script, not a test): ``python benchmarks/bench_core.py``.

Row lengths are drawn like real RL runs: 46% singletons, median 2, mean about 8,
capped at ``--cap`` so that the dense layout fits in memory. Prints the median of ``--repeats`` runs
for each conversion, and the speed-up over a per-row Python loop timed on a slice of the same mask.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from sampling_mask import SamplingMask
from sampling_mask.core import layouts


def row_lengths(num_rows: int, cap: int, rng: np.random.Generator) -> np.ndarray:
    """46% singletons; the rest 1 + ceil(lognormal), which gives median 2 and mean about 8 overall."""
    single = rng.random(num_rows) < 0.46
    tail = 1 + np.ceil(rng.lognormal(1.85, 1.35, num_rows)).astype(np.int64)
    return np.where(single, 1, np.minimum(tail, cap))


def unique_row_ids(lengths: np.ndarray, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """Distinct ids per row, in random (unsorted) order: row t draws from a random window of the vocab."""
    offsets = layouts.counts_to_offsets(lengths)
    cap = int(lengths.max())
    base = rng.integers(0, vocab - 4 * cap, lengths.size)
    # Distinct within a row: strictly increasing steps of 1..4 from a random base, then shuffled per row.
    steps = rng.integers(1, 5, int(offsets[-1]))
    starts = offsets[:-1][lengths > 0]
    steps[starts] = 0
    run = np.cumsum(steps)
    run -= np.repeat(run[starts], lengths[lengths > 0])
    ids = (np.repeat(base, lengths) + run).astype(np.int32)
    shuffle = np.argsort(layouts.row_of_ids(offsets) * 2.0 + rng.random(ids.size), kind="stable")
    return ids[shuffle]


def median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def python_dense_to_rows(dense: np.ndarray) -> list[list[int]]:
    """The per-row loop a naive reader writes (the baseline for the speed-up ratio)."""
    out = []
    for row in dense.tolist():
        k = row.index(-1) if -1 in row else len(row)
        out.append(row[:k])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cap", type=int, default=64, help="longest row (dense width)")
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--bitmask-rows", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    lengths = row_lengths(args.rows, args.cap, rng)
    ids = unique_row_ids(lengths, args.vocab, rng)
    offsets = layouts.counts_to_offsets(lengths)
    mask = SamplingMask.from_ragged(ids, offsets, vocab_size=args.vocab)
    canon = mask.canonical()
    width = int(lengths.max())
    dense = mask.to_dense()
    rows = mask.to_rows()
    print(
        f"mask: {args.rows:,} rows, {mask.nnz:,} ids; singletons {np.mean(lengths == 1):.0%}, "
        f"median {np.median(lengths):g}, mean {lengths.mean():.2f}, p99 {np.percentile(lengths, 99):g}, "
        f"max {width}; dense {dense.nbytes / 2**20:.0f} MiB"
    )

    results: list[tuple[str, float]] = []

    def bench(name: str, fn: Callable[[], Any], repeats: int = args.repeats) -> float:
        seconds = median_seconds(fn, repeats)
        results.append((name, seconds))
        print(f"{name:<44} {seconds * 1e3:9.1f} ms")
        return seconds

    d2r = bench("dense -> ragged (layouts.dense_to_ragged)", lambda: layouts.dense_to_ragged(dense))
    r2d = bench("ragged -> dense (layouts.ragged_to_dense)", lambda: layouts.ragged_to_dense(ids, offsets, width))
    bench("SamplingMask.from_dense (validated)", lambda: SamplingMask.from_dense(dense, vocab_size=args.vocab))
    bench("SamplingMask.to_dense", mask.to_dense)
    bench("SamplingMask.from_ragged (validated)", lambda: SamplingMask.from_ragged(ids, offsets, vocab_size=args.vocab))
    bench("canonical() of unsorted rows", mask.canonical)
    bench("SamplingMask.from_rows (nested lists)", lambda: SamplingMask.from_rows(rows), repeats=3)
    bench("SamplingMask.to_rows", mask.to_rows, repeats=3)

    small = canon[: args.bitmask_rows]
    bits = small.to_bitmask()
    print(f"bitmask: {small.num_rows:,} rows x {bits.shape[1]:,} bytes ({bits.nbytes / 2**20:.0f} MiB)")
    bench(f"ragged -> bitmask ({small.num_rows} rows)", small.to_bitmask)
    bench(f"bitmask -> ragged ({small.num_rows} rows)", lambda: SamplingMask.from_bitmask(bits, args.vocab))

    # Baseline: a per-row Python loop over a slice, scaled to the whole mask.
    part = max(args.rows // 20, 1)
    loop = median_seconds(lambda: python_dense_to_rows(dense[:part]), 3) * (args.rows / part)
    print(f"{'per-row Python loop, dense -> rows (scaled)':<44} {loop * 1e3:9.1f} ms")
    print(f"speed-up of vectorized dense -> ragged over the loop: {loop / d2r:.0f}x")
    print(f"dense <-> ragged round trip: {(d2r + r2d) * 1e3:.0f} ms (target: well under 1 s)")


if __name__ == "__main__":
    main()
