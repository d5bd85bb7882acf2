"""TRL's vLLM colocate path run for real: ``ReplayGRPOTrainer(use_vllm=True,
vllm_mode="colocate")`` takes its masks from the real engine, and TRL's own
``vllm_importance_sampling_correction`` sees ratios of 1 at step 0 with replay, and the kept mass
without (plain ``GRPOTrainer``). Each trainer runs in its own process (``trl_colocate.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import record_figures

pytest.importorskip("vllm")
pytest.importorskip("trl")

HERE = Path(__file__).resolve().parent


def run_step(mode: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / f"{mode}.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "trl_colocate.py"), mode, str(out)],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"{mode} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(out.read_text())


def test_replay_ratios_are_one_at_step_zero(tmp_path: Path) -> None:
    result = run_step("replay", tmp_path)
    assert result["engine_rows_null"] == 0 and result["mask_is_engine_rows"]  # the engine's own rows
    ratio = np.array(result["importance_sampling_ratio"])
    kept = np.array(result["kept_mass"])
    assert ratio.size == result["tokens"] > 0
    error = float(np.max(np.abs(ratio - 1)))
    assert error < 1e-4, f"TRL's importance-sampling ratio with replay is off 1 by {error:.2e}"
    assert float(kept.mean()) < 0.999  # the sampler truncated: without replay the ratio would not be 1
    record_figures(
        "trl colocate replay",
        {
            "tokens": int(ratio.size),
            "max_abs_ratio_minus_1": error,
            "mean_kept_mass": float(kept.mean()),
            "construct_s": result["construct_s"],
            "train_s": result["train_s"],
            "peak_rss_mib": result["peak_rss_mib"],
        },
    )


def test_plain_ratios_are_the_kept_mass(tmp_path: Path) -> None:
    result = run_step("plain", tmp_path)
    ratio = np.array(result["importance_sampling_ratio"])
    kept = np.array(result["kept_mass"])
    assert ratio.size == kept.size == result["tokens"] > 0
    error = float(np.max(np.abs(ratio - kept)))
    assert error < 1e-4, f"TRL's ratio without replay differs from the kept mass by {error:.2e}"
    assert float(np.max(np.abs(ratio - 1))) > 1e-3
    record_figures(
        "trl colocate plain",
        {
            "tokens": int(ratio.size),
            "max_abs_ratio_minus_kept_mass": error,
            "mean_ratio": float(ratio.mean()),
            "train_s": result["train_s"],
            "peak_rss_mib": result["peak_rss_mib"],
        },
    )
