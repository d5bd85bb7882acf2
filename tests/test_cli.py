"""The ``sampling-mask`` console script, driven in a subprocess for every command and error path.

Subprocess start-up costs about 0.3 s, so each invocation checks as much as it can; the pure
helpers (quantiles from a histogram, re-batching) are tested in-process.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sampling_mask
from sampling_mask import SamplingMask
from sampling_mask.cli import _rebatch, histogram_buckets, support_from_counts

SCRIPT = shutil.which("sampling-mask")


def run(*args: str | Path, stderr_tty: bool = False) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the console script is not installed: pip install -e ."
    cmd = [SCRIPT, *map(str, args)]
    if not stderr_tty:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=follower, text=True, timeout=300)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout, b"".join(chunks).decode())


def one_error_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    """A person's error: exit 2, exactly one line on stderr naming the code, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"sampling-mask: error: {code}: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def tiny_mask(seed: int = 0, rows: int = 40) -> SamplingMask:
    """Rows of 0..6 ids (some empty) in 5 segments, one of them empty, with companions and metadata."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 7, size=rows)
    lengths[:3] = [1, 0, 6]
    rows_list = [sorted(rng.choice(100, size=k, replace=False).tolist()) for k in lengths]
    sampled = np.array([r[len(r) // 2] if r else -1 for r in rows_list], dtype=np.int32)
    return SamplingMask.from_rows(
        rows_list,
        cu_seqlens=[0, 7, 7, 20, 33, rows],
        vocab_size=100,
        sampled_token_ids=sampled,
        sampled_logprobs=np.full(rows, -0.5, dtype=np.float32),
        metadata={"top_k": 6, "producer": "test_cli"},
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli")
    mask = tiny_mask()
    arrows = folder / "mask.arrows"
    sampling_mask.save(arrows, mask)
    data = arrows.read_bytes()
    corrupt = folder / "corrupt.arrows"
    corrupt.write_bytes(data[: len(data) // 2])
    unknown = folder / "mask.bin"
    unknown.write_bytes(data)
    return {"folder": folder, "arrows": arrows, "corrupt": corrupt, "unknown": unknown}


# ---------------------------------------------------------------------------- pure helpers (in-process)
def test_support_figures_from_a_histogram_match_numpy() -> None:
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(0, 50, size=997), [0, 0, 1, 300]])
    got = support_from_counts(np.bincount(lengths))
    supported = lengths[lengths > 0]
    assert got["rows"] == supported.size
    assert got["singleton_fraction"] == pytest.approx(np.mean(supported == 1))
    assert got["mean"] == pytest.approx(supported.mean())
    for key, q in (("median", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert got[key] == pytest.approx(np.quantile(supported, q)), key
    assert got["max"] == 300
    buckets = histogram_buckets(np.bincount(lengths))
    assert sum(b["rows"] for b in buckets) == supported.size
    assert [b["sizes"] for b in buckets[:4]] == ["1", "2", "3-4", "5-8"]
    assert buckets[2]["rows"] == np.count_nonzero((supported >= 3) & (supported <= 4))
    assert support_from_counts(np.array([5]))["median"] is None  # only empty rows: no support figure


def test_rebatch_cuts_between_segments_and_keeps_every_row() -> None:
    mask = tiny_mask(rows=40)
    parts = list(_rebatch([mask, mask[:10]], 12))
    assert sampling_mask.concat(parts) == sampling_mask.concat([mask, mask[:10]])
    assert all(p.num_rows >= 12 for p in parts[:-1])
    # Input segments have 7, 0, 13, 13, 7 rows, then 7, 0, 3: cuts fall only between segments.
    assert [(p.num_rows, p.num_segments) for p in parts] == [(20, 3), (13, 1), (14, 2), (3, 2)]
