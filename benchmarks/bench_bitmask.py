"""Bitmask <-> ragged at engine batch sizes (section 2) and the other conversions (section 5).

A thin wrapper over ``python -m sampling_mask.cli.bench --sections bitmask,conversions`` (see sampling_mask/cli/bench.py)::

    python benchmarks/bench_bitmask.py [--quick] [--rows N ...] [--repeats R]
"""

from __future__ import annotations

import sys

from sampling_mask.cli import bench

if __name__ == "__main__":
    sys.exit(bench.main(["--sections", "bitmask,conversions", *sys.argv[1:]]))
