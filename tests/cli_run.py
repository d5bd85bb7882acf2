"""Running the command line in the tests (imported as ``from cli_run import ...``): the console script
in a subprocess, a person's error line, and the small masks and files the commands are run on.

Subprocess start-up costs about 0.3 s, so each invocation checks as much as it can.
"""

from __future__ import annotations

import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import sampling_mask
from sampling_mask import SamplingMask

SCRIPT = shutil.which("sampling-mask")


def run(
    *args: str | Path, stderr_tty: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the console script is not installed: pip install -e ."
    cmd = [SCRIPT, *map(str, args)]
    if not stderr_tty:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
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


def mask_files(folder: Path) -> dict[str, Path]:
    """:func:`tiny_mask` saved in ``folder`` as an Arrow stream (``arrows``), the first half of that
    stream (``corrupt``), the same bytes under an unknown extension (``unknown``) and as JSON (``json``)."""
    mask = tiny_mask()
    arrows = folder / "mask.arrows"
    sampling_mask.save(mask, arrows)
    data = arrows.read_bytes()
    corrupt = folder / "corrupt.arrows"
    corrupt.write_bytes(data[: len(data) // 2])
    unknown = folder / "mask.bin"
    unknown.write_bytes(data)
    as_json = folder / "mask.json"
    sampling_mask.save(mask, as_json)
    return {"folder": folder, "arrows": arrows, "corrupt": corrupt, "unknown": unknown, "json": as_json}


def run_module(*args: object, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m sampling_mask ARGS`` with this checkout first on the path (a call that could block
    on a FIFO or a symlink loop fails at ``timeout`` instead of hanging)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "sampling_mask", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
