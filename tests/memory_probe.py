"""Peak-memory probe shared by the memory tests (imported as ``from memory_probe import ...``).

A test module runs itself as a script in a child process (:func:`run_child`); the child warms every
decoder up, then runs each case in a *fork* of itself. A fork's high-water marks start at its size
when forked, so the growth it reports is that case's alone: neither the pytest process, nor the
warm-up, nor earlier cases can hide it. Reported per case: the error code (``"OK"`` when it
decoded), the payload size, the peak RSS growth (``getrusage``) and, on Linux, the peak
virtual-size growth (``VmPeak``), in MiB. POSIX only (``fork``, ``resource``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MiB = 1 << 20


def untrusted_bound_mb(size: int) -> float:
    """The promise of ``Limits.for_untrusted_input``: peak RSS grows at most max(16 x input, 64 MiB)."""
    return max(16 * size, 64 * MiB) / MiB


def peaks() -> tuple[int, int]:
    """(peak RSS in MiB from getrusage, peak virtual size in MiB or 0 where /proc is missing)."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // (1024 if sys.platform != "darwin" else 1 << 20)
    vm = 0
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmPeak:"):
                    vm = int(line.split()[1]) // 1024
    except OSError:
        pass
    return rss, vm


def _measure(call: Callable[[], Any]) -> dict[str, Any]:
    from sampling_mask import SamplingMaskError

    base_rss, base_vm = peaks()
    try:
        call()
        code = "OK"
    except SamplingMaskError as exc:
        code = exc.code.value
    except BaseException as exc:  # reported, not raised: the parent names the case
        code = f"{type(exc).__name__}: {exc}"[:300]
    rss, vm = peaks()
    return {"code": code, "rss": rss - base_rss, "vm": vm - base_vm}


def in_fork(call: Callable[[], Any]) -> dict[str, Any]:
    """Run ``call`` in a fork of this process; its code and peak growth (see the module docstring)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork: run one case, report, leave without cleanup
        os.close(read_end)
        with os.fdopen(write_end, "w") as out:
            out.write(json.dumps(_measure(call)))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as report:
        text = report.read()
    _, status = os.waitpid(pid, 0)
    return json.loads(text) if text else {"code": f"the fork died (status {status})", "rss": 0, "vm": 0}


def _built_in_fork(build: Callable[[], bytes]) -> bytes:
    """``build()`` run in a fork, its bytes passed back through a temporary file: building a large
    payload must not leave pages in this process's allocators (numpy's, pyarrow's pool) that a case
    would then reuse without its peak RSS growing."""
    with tempfile.NamedTemporaryFile() as out:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                with open(out.name, "wb") as fh:
                    fh.write(build())
                status = 0
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        if status:
            raise RuntimeError(f"building a payload failed in its fork (status {status})")
        return Path(out.name).read_bytes()


def child_main(
    cases: Iterable[tuple[str, Callable[[], bytes], Callable[[bytes], Any]]], warm_up: Callable[[], None]
) -> None:
    """In the child: build the payloads (each in a fork), warm up, then print one JSON line per case
    (label, size, code, growth), each case run in a fork."""
    built = [(label, _built_in_fork(build), call) for label, build, call in cases]
    warm_up()
    for label, data, call in built:
        event = in_fork(lambda: call(data))  # noqa: B023 - called before the loop moves on
        event.update(case=label, size=len(data))
        print(json.dumps(event), flush=True)


def run_child(script: str | Path, *, timeout: float = 300) -> dict[str, dict[str, Any]]:
    """Run the test module ``script`` as a child process; its events by case label."""
    root = Path(script).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=root, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {event["case"]: event for event in map(json.loads, proc.stdout.splitlines())}


def child_results(script: str | Path) -> dict[str, dict[str, Any]]:
    """:func:`run_child` of a test module, skipped where ``fork``, pyarrow or msgpack is missing (the
    body of such a module's ``results`` fixture)."""
    import pytest

    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    pytest.importorskip("pyarrow")
    pytest.importorskip("msgpack")
    return run_child(script)
