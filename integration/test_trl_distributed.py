"""TRL 1.16's GRPO loop on two CPU processes launched by accelerate (``trl_distributed.py``): DDP
(accelerate's ``MULTI_CPU`` on gloo: the model wrapped in ``DistributedDataParallel``) and DeepSpeed
0.19.8 ZeRO-3 (accelerate's DeepSpeed plugin, ``zero_stage: 3``, every parameter partitioned:
``stage3_param_persistence_threshold: 0``). With ``ReplayGRPOTrainer`` the step-0 mean of
``exp(trainer logp - sampler logp)`` is 1 within 1e-5 on every rank (over the full vocabulary it is the
kept mass, far from 1); the gradients flow (``grad_norm`` > 0, the head moved) and are the same under
both (the grad norm and the new head agree); the ranks hold the same head after the step.

Runs in the engine suite's environment (``integration/run.sh``) or in the development one
(``python -m pytest integration/test_trl_distributed.py``: the test extra has DeepSpeed). About 40 s
on 2 cores; DeepSpeed builds its CPU shared-memory op once (about a minute, cached after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port, record_figures

pytest.importorskip("trl")
pytest.importorskip("accelerate")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: The ZeRO-3 settings (what ``accelerate config`` writes for a DeepSpeed config file); "auto" values come
#: from the trainer's arguments. A persistence threshold of 0 partitions even the tiny model's head.
ZERO3 = {
    "train_micro_batch_size_per_gpu": "auto",
    "train_batch_size": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
}
LAUNCH = {
    "ddp": ["--multi_gpu"],  # on a machine without GPUs accelerate runs it as MULTI_CPU (use_cpu=True)
    "zero3": ["--use_deepspeed", "--deepspeed_config_file", "{config}"],
}


def launch(kind: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Run ``trl_distributed.py`` on 2 processes (127.0.0.1) with accelerate; each rank's result."""
    out = tmp_path / kind
    out.mkdir()
    config = tmp_path / "zero3.json"
    config.write_text(json.dumps(ZERO3))
    env = {k: v for k, v in os.environ.items() if k not in ("SAMPLING_MASK_TRITON_CPU_SHIM", "TRITON_INTERPRET")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        *[a.format(config=config) for a in LAUNCH[kind]],
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        str(HERE / "trl_distributed.py"), str(out),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{kind} run failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def check_step(kind: str, ranks: list[dict[str, Any]]) -> dict[str, float]:
    """The checks every launch passes; its figures."""
    errors = []
    for rank in ranks:
        assert rank["world_size"] == 2 and rank["replay_enabled"]
        first = rank["replay_log"][0]  # generated before any update
        errors.append(abs(first["ratio_replay"] - 1))
        assert errors[-1] <= 1e-5, f"{kind} rank {rank['rank']}: step-0 ratio {first['ratio_replay']!r}"
        assert first["ratio_full"] < 0.99  # the sampler truncated: over the full vocabulary it is not 1
        assert abs(first["ratio_full"] - first["kept_mass"]) <= 1e-5
        assert rank["log_history"][0]["grad_norm"] > 0 and rank["head_max_change"] > 0  # gradients flowed
    assert ranks[0]["head_checksum"] == pytest.approx(ranks[1]["head_checksum"], abs=1e-9)  # one model
    return {
        "max_abs_ratio_minus_1": max(errors),
        "ratio_full": ranks[0]["replay_log"][0]["ratio_full"],
        "grad_norm": ranks[0]["log_history"][0]["grad_norm"],
    }


@pytest.mark.timeout(1800)
def test_ddp_and_zero3_step_zero_ratios_are_one(tmp_path: Path) -> None:
    ddp = launch("ddp", tmp_path)
    assert {r["distributed_type"] for r in ddp} == {"DistributedType.MULTI_CPU"}
    assert {r["wrapped"] for r in ddp} == {"DistributedDataParallel"}
    figures = {"ddp": check_step("ddp", ddp)}
    pytest.importorskip("deepspeed")
    zero3 = launch("zero3", tmp_path)
    assert {r["distributed_type"] for r in zero3} == {"DistributedType.DEEPSPEED"}
    assert {(r["wrapped"], r["zero_stage"]) for r in zero3} == {("DeepSpeedEngine", 3)}
    assert all(r["head_outside_forward"]["shape"] == [0] for r in zero3)  # the head really was partitioned
    figures["zero3"] = check_step("zero3", zero3)
    # the same step under both: the same gradient norm and the same new head (the ranks' mean gradient)
    assert figures["zero3"]["grad_norm"] == pytest.approx(figures["ddp"]["grad_norm"], rel=1e-5)
    assert zero3[0]["head_checksum"] == pytest.approx(ddp[0]["head_checksum"], abs=1e-5)
    record_figures("trl two processes", figures)
