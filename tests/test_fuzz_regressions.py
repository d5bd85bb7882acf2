"""Every input that ever made a fuzz target fail is replayed through that target.

``fuzz/regressions/<target>/<file>``: the target must reject the input with ``SamplingMaskError`` or
accept it and pass its own checks; any other exception fails. Each input runs twice: under the
targets' small limits, and under ``Limits.for_untrusted_input`` with its memory bound asserted. Inputs run in a child process, so an
input that crashes the interpreter (a segfault in a native library) fails its own case only.
Needs no atheris: this replays, it does not fuzz.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "fuzz"
REGRESSIONS = FUZZ / "regressions"

# The child: runs each (target, path) and prints one JSON line per input before and after it.
_CHILD = r"""
import json, sys, traceback
sys.path.insert(0, sys.argv[1])
import targets
for item in sys.argv[2:]:
    name, _, path = item.partition("=")
    mode, _, name = name.rpartition(":")
    print(json.dumps({"start": item}), flush=True)
    try:
        with open(path, "rb") as fh:
            targets.run_one(name, fh.read(), untrusted=mode == "untrusted")
        result = {"done": item, "ok": True}
    except BaseException as exc:
        result = {"done": item, "ok": False, "error": "".join(traceback.format_exception(exc))[-3000:]}
    print(json.dumps(result), flush=True)
"""


def _cases() -> list[tuple[str, Path]]:
    return sorted((p.parent.name, p) for p in REGRESSIONS.glob("*/*") if p.is_file())


def _replay(cases: list[tuple[str, Path]]) -> dict[str, str | None]:
    """``{"target=path": None (passed) | failure text}``; a crashed child is restarted after its input."""
    results: dict[str, str | None] = {}
    pending = [f"{mode}{name}={path}" for name, path in cases for mode in ("", "untrusted:")]
    while pending:
        proc = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", _CHILD, str(FUZZ), *pending],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if "start" in event:
                started = event["start"]
            elif "done" in event:
                results[event["done"]] = None if event["ok"] else event["error"]
                started = None
        if started is not None:  # the child died inside this input
            results[started] = f"the process died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        elif proc.returncode != 0 and len(results) < len(pending):
            raise AssertionError(f"replay child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        pending = [item for item in pending if item not in results]
    return results


@pytest.fixture(scope="module")
def replayed() -> dict[str, str | None]:
    return _replay(_cases())


def test_regressions_exist_and_name_known_targets() -> None:
    sys.path.insert(0, str(FUZZ))
    try:
        import targets
    finally:
        sys.path.remove(str(FUZZ))
    cases = _cases()
    assert cases, "fuzz/regressions/ holds no inputs"
    unknown = {name for name, _ in cases} - set(targets.TARGETS)
    assert not unknown, f"regression folders name no fuzz target: {sorted(unknown)}"


@pytest.mark.parametrize("mode", ["", "untrusted:"])
@pytest.mark.parametrize("name,path", _cases(), ids=[f"{n}/{p.name}" for n, p in _cases()])
def test_regression_input_only_raises_sampling_mask_error(
    replayed: dict[str, str | None], name: str, path: Path, mode: str
) -> None:
    failure = replayed[f"{mode}{name}={path}"]
    assert failure is None, f"{mode}{name} on {path.relative_to(ROOT)}:\n{failure}"
