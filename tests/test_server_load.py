"""A small run of the server load test (benchmarks/bench_server_load.py): the example server answers
every request of the mixed, partly hostile traffic correctly, stays up, and keeps its peak RSS within
``mask_server.memory_bound()`` (its documented bound) above its idle size. The full run (32 clients, 20,000
requests, the floods, and the replaced server beside it) is ``python benchmarks/bench_server_load.py``;
its figures are in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("pyarrow")
pytest.importorskip("msgpack")


def test_server_answers_mixed_hostile_traffic_correctly() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS from /proc")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_server_load
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    args = argparse.Namespace(
        requests=240,
        clients=12,
        decoders=2,
        read_timeout=10.0,  # far beyond a slow (240 ms) sender on a loaded machine
        max_body=8 << 20,
        max_seconds=240.0,
        rss_bound_mib=0.0,
        seed=1,
        floods=False,  # each flood has its test: tests/test_server_floods.py, tests/test_server_hostile.py
    )
    figures = bench_server_load.run(args)
    assert figures["server_alive"]
    assert figures["errors"] == 0, figures["error_examples"]
    assert figures["requests"] == 240
    assert figures["by_kind"].get("amplification", 0) > 0 and figures["by_kind"].get("valid", 0) > 100
    assert figures["peak_growth_mib"] <= figures["rss_bound_mib"], figures
