"""``benchmarks/gpu_check.py``: without CUDA it says so and exits 0; its checks run dry on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_it_says_so_and_exits_0(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _module().main([]) == 0
    assert "CUDA is not available" in capsys.readouterr().out


def test_every_path_runs_dry_on_the_cpu(capsys):
    threads = torch.get_num_threads()
    try:
        status = _module().main(["--device", "cpu", "--quick", "--repeats", "1"])
    finally:
        torch.set_num_threads(threads)
    text = capsys.readouterr().out
    assert status == 0, text
    for path in ("masked_logprobs", "masked_entropy,", "from_hidden", "vocab_group", "audit", "audit_from_hidden"):
        for dtype in ("float32", "bfloat16"):
            assert any(line.strip().startswith(f"{dtype} ") and path in line for line in text.splitlines()), (
                path,
                dtype,
            )
    assert "every check holds" in text and "FAILS" not in text
