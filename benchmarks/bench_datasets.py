"""Datasets of many files: write a partitioned rollout, filter it, check it, time the scan.

Writes ``--tokens`` rows (default 2M) as ``--steps`` x ``--workers`` hive partitions (default 20 x 10
= 200 Parquet files), then:

* reads ``step in --select`` back through :func:`sampling_mask.codecs.open_dataset` and checks it
  equals the same sequences of the original mask;
* computes support-size statistics of the selection with the library (``sampling_mask.data.stats``), with
  ``pyarrow.dataset``, DuckDB and Polars (each skipped when absent) and checks they agree;
* times the filtered dataset scan against reading the same files one by one with
  ``sampling_mask.load`` (median of ``--repeats``), and prints the ratio.

    python benchmarks/bench_datasets.py [--tokens 2000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np

import sampling_mask as sm
from sampling_mask.codecs import dataset as ds_codec
from sampling_mask.data import synthetic
from sampling_mask.data.stats import summarize

KEYS = ("rows", "singleton_fraction", "mean", "median", "p99", "max")


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2_000_000)
    parser.add_argument("--seqlen", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--select", type=int, nargs="+", default=[3, 7])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    base_mask = synthetic.rollout(args.tokens, seed=0)
    mask = sm.SamplingMask.from_ragged(
        base_mask.ids,
        base_mask.offsets,
        cu_seqlens=np.arange(0, args.tokens + 1, args.seqlen),
        vocab_size=base_mask.vocab_size,
        sampled_token_ids=base_mask.sampled_token_ids,
    )
    n = mask.num_segments
    columns = {
        "step": np.arange(n) % args.steps,
        "worker": (np.arange(n) // args.steps) % args.workers,
        "seq": np.arange(n),
    }
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        files = ds_codec.write_dataset(root, (mask, columns), partition_by=("step", "worker"))
        print(f"wrote {len(files)} files, {args.tokens} tokens, {n} sequences in {time.perf_counter() - start:.2f} s")

        dataset = sm.codecs.open_dataset(root)
        got = dataset.read(filter={"step": args.select})
        keep = np.flatnonzero(np.isin(columns["step"], args.select))
        order = np.argsort(got.columns["seq"], kind="stable")
        assert got.mask.take(order) == mask.take(keep), "filtered read differs from the original"
        print(f"filter step in {args.select}: {got.mask.num_segments} sequences read back equal")

        figures = {"library": {k: summarize([got.mask]).support()[k] for k in KEYS}}
        import pyarrow.compute as pc
        import pyarrow.dataset as pads

        table = pads.dataset(root, format="parquet", partitioning="hive").to_table(
            columns=["sampling_mask"], filter=pads.field("step").isin(args.select)
        )
        lengths = pc.list_value_length(pc.list_flatten(table.column("sampling_mask"))).to_numpy()
        lengths = lengths[lengths > 0]
        figures["pyarrow.dataset"] = {
            "rows": lengths.size,
            "singleton_fraction": float(np.mean(lengths == 1)),
            "mean": float(lengths.mean()),
            "median": float(np.quantile(lengths, 0.5)),
            "p99": float(np.quantile(lengths, 0.99)),
            "max": int(lengths.max()),
        }
        selected = ", ".join(str(s) for s in args.select)
        try:
            import duckdb

            row = duckdb.sql(
                f"SELECT count(*), avg(CAST(n = 1 AS DOUBLE)), avg(n), quantile_cont(n, 0.5), "
                f"quantile_cont(n, 0.99), max(n) FROM (SELECT len(unnest(sampling_mask)) AS n FROM "
                f"read_parquet('{root}/**/*.parquet', hive_partitioning = true) WHERE step IN ({selected})) "
                f"WHERE n > 0"
            ).fetchall()[0]
            figures["duckdb"] = dict(zip(KEYS, row, strict=True))
        except ImportError:
            print("duckdb: skipped (pip install duckdb)")
        try:
            import polars as pl

            frame = (
                pl.scan_parquet(f"{root}/**/*.parquet", hive_partitioning=True)
                .filter(pl.col("step").is_in(args.select))
                .explode("sampling_mask")
                .select(pl.col("sampling_mask").list.len().alias("n"))
                .filter(pl.col("n") > 0)
                .select(
                    pl.len().alias("rows"),
                    (pl.col("n") == 1).mean().alias("singleton_fraction"),
                    pl.col("n").mean().alias("mean"),
                    pl.col("n").quantile(0.5, "linear").alias("median"),
                    pl.col("n").quantile(0.99, "linear").alias("p99"),
                    pl.col("n").max().alias("max"),
                )
                .collect()
            )
            figures["polars"] = dict(zip(KEYS, frame.row(0), strict=True))
        except ImportError:
            print("polars: skipped (pip install polars)")
        print(f"{'tool':<16}" + "".join(f"{k:>20}" for k in KEYS))
        for tool, values in figures.items():
            print(f"{tool:<16}" + "".join(f"{float(values[k]):>20.6g}" for k in KEYS))
            for key in KEYS:
                assert abs(float(values[key]) - float(figures["library"][key])) <= 1e-9 * max(
                    1.0, abs(float(figures["library"][key]))
                ), (tool, key)
        print("support-size statistics agree across tools")

        chosen = [f for f in files if any(f"/step={s}/" in f for s in args.select)]

        def scan() -> None:
            for _batch in sm.codecs.open_dataset(root).batches(filter={"step": args.select}):
                pass

        def one_by_one() -> None:
            for path in chosen:
                sm.load(path)

        scan_s = _median_seconds(scan, args.repeats)
        files_s = _median_seconds(one_by_one, args.repeats)
        print(
            f"filtered scan of {len(chosen)} of {len(files)} files: {scan_s * 1e3:.1f} ms; "
            f"the same files one by one with sampling_mask.load: {files_s * 1e3:.1f} ms; "
            f"ratio {scan_s / files_s:.2f} (median of {args.repeats})"
        )


if __name__ == "__main__":
    main()
