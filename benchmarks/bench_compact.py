"""The compact layout against the information bound, raw ragged and zstd (section 3).

A thin wrapper over ``python -m sampling_mask.cli.bench --sections compact`` (see sampling_mask/cli/bench.py)::

    python benchmarks/bench_compact.py [--quick] [--rows N ...] [--repeats R]
"""

from __future__ import annotations

import sys

from sampling_mask.cli import bench

if __name__ == "__main__":
    sys.exit(bench.main(["--sections", "compact", *sys.argv[1:]]))
