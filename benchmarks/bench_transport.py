"""Engine -> trainer transport against JSON nested lists (section 1) and bytes per token (section 4).

A thin wrapper over ``python -m sampling_mask.cli.bench --sections transport,bytes`` (see sampling_mask/cli/bench.py)::

    python benchmarks/bench_transport.py [--quick] [--rows N ...] [--repeats R]
"""

from __future__ import annotations

import sys

from sampling_mask.cli import bench

if __name__ == "__main__":
    sys.exit(bench.main(["--sections", "transport,bytes", *sys.argv[1:]]))
