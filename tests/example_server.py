"""The example server (examples/mask_server.py) as a child process on 127.0.0.1, shared by the server
tests (imported as ``from example_server import serve``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def serve(*flags: str) -> Iterator[int]:
    """Start the server with ``flags`` on a free port, yield the port, kill it at the end."""
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS from /proc")
    command = [sys.executable, str(ROOT / "examples" / "mask_server.py"), "--port=0", *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on"), line
        yield int(line.rsplit(":", 1)[1])
    finally:
        proc.kill()
        proc.wait(timeout=10)
