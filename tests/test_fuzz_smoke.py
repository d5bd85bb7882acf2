"""Every atheris fuzz target runs a fixed number of inputs without a finding (CI budget: a few minutes).

Each target runs in its own process (``fuzz/run.py --runs N``, libFuzzer's ``-runs``,
``-rss_limit_mb`` and ``-timeout``): an exception other than ``SamplingMaskError``, a crash, a hang
or a memory blow-up makes the process exit non-zero and fails that target's case, and the process
must report exactly N inputs run, each both ways. The count, not a time, bounds the work, so a
busy machine takes longer but runs the same test (a time limit that a count reached in 5 s on quiet
cores failed at 98 of 100 under load). N per target (:func:`runs_for`) is about 5 s of fuzzing on two quiet cores,
the time budget of the earlier timed runs; ``SAMPLING_MASK_FUZZ_SCALE`` multiplies it (default 1).
Two targets run at a time (two cores). Each target runs with ``--both``: every input as is, then
under ``Limits.for_untrusted_input`` with the memory bound asserted per execution, in one process
per target (start-up is about 1.5 s a process). Skipped without atheris.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Slow; and the first case also runs every target (the fixture): room for a machine several times
# slower than a quiet one (about 2 minutes there), where pyproject's 600 s per test would not be.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

pytest.importorskip("atheris")

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "fuzz" / "run.py"
SCALE = float(os.environ.get("SAMPLING_MASK_FUZZ_SCALE", "1"))
#: Inputs per target: at most about 5 s of fuzzing (both ways) on two quiet cores, from counts
#: measured per target in 5 s on a busy machine (load 3): 1,193 for parquet, 2,246-3,321 for the
#: Arrow family, msgpack and dense, 4,864-17,428 for the others, 89-95 for the dataset targets,
#: which write and scan a folder per input.
RUNS = 3000
SLOWER_TARGETS = {"dense": 1500, "arrow": 1500, "arrows": 1500, "arrows_partial": 1500, "msgpack": 1500}
SLOWER_TARGETS |= {"parquet": 800, "dataset": 100, "sequence_dataset": 100}
RSS_LIMIT_MB = 1536
PARALLEL = 2
#: A process that runs longer than this is stuck (a quiet machine needs about 10 s a target).
PROCESS_TIMEOUT = 900


def runs_for(name: str) -> int:
    return max(1, round(SLOWER_TARGETS.get(name, RUNS) * SCALE))


def _names() -> list[str]:
    out = subprocess.run([sys.executable, str(RUNNER), "--list"], capture_output=True, text=True, check=True)
    return out.stdout.split()


NAMES = _names()


def _fuzz(name: str) -> tuple[int, str, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            sys.executable,
            str(RUNNER),
            name,
            "--both",
            f"--runs={runs_for(name)}",
            f"--rss-limit-mb={RSS_LIMIT_MB}",
            "--timeout=20",
            f"--artifacts={tmp}",
            f"--corpus={Path(tmp) / 'corpus'}",
        ]
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=PROCESS_TIMEOUT, cwd=ROOT)
        except subprocess.TimeoutExpired as exc:
            return -1, f"did not finish in {PROCESS_TIMEOUT} s:\n{exc.stderr!s}"[-4000:], []
        artifacts = sorted(p.name for p in Path(tmp).iterdir() if p.is_file())
        return proc.returncode, proc.stdout + proc.stderr, artifacts


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[int, str, list[str]]]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(NAMES, pool.map(_fuzz, NAMES), strict=True))


def test_every_decoder_has_a_target() -> None:
    expected = {"dense", "packed", "ragged", "counts", "bitmask", "compact", "arrow", "arrows", "msgpack"}
    expected |= {"json", "json_rows", "base64"}
    assert expected <= set(NAMES), sorted(expected - set(NAMES))
    assert any(name.startswith("adapter_") for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_fuzz_target_finds_nothing(runs: dict[str, tuple[int, str, list[str]]], name: str) -> None:
    code, log, artifacts = runs[name]
    interesting = [line for line in log.splitlines() if not line.startswith("INFO: Instrumenting")]
    tail = "\n".join(interesting[-60:])
    assert code == 0 and not artifacts, f"{name}: exit {code}, artifacts {artifacts}\n{tail}"
    assert "Uncaught Python exception" not in log, tail
    executed = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    assert executed is not None, f"{name}: no libFuzzer stats\n{tail}"
    assert int(executed.group(1)) == runs_for(name), (
        f"{name}: {executed.group(1)} inputs ran, not {runs_for(name)}\n{tail}"
    )
    untrusted = re.search(r"untrusted-preset executions: (\d+)", log)
    assert untrusted is not None and untrusted.group(1) == executed.group(1), f"{name}: not every input ran both ways"


def test_a_parents_peak_memory_does_not_count_against_a_target() -> None:
    """Linux carries a parent's peak RSS over exec, and libFuzzer's ``-rss_limit_mb`` reads the peak:
    run.py fuzzes in a fork, so a target started by a process that once held more than the limit runs.
    Fuzzing for 3 s (libFuzzer checks the peak once a second) asserts nothing about speed: any count
    of inputs in that time passes, and only a peak counted against the target fails."""
    code = (
        "import subprocess, sys, numpy as np\n"
        "held = np.ones(1 << 28); del held  # a 2 GiB peak in the parent\n"
        f"args = [sys.executable, {str(RUNNER)!r}, 'dense', '--seconds=3', '--rss-limit-mb=1536', '--timeout=20']\n"
        "sys.exit(subprocess.run(args, capture_output=True).returncode)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=PROCESS_TIMEOUT)
    assert proc.returncode == 0
