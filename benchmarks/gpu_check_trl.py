"""ReplayGRPOTrainer on a GPU, against the CPU: ``python benchmarks/gpu_check_trl.py``.

Two checks of what needs a GPU, each in its own process under ``--timeout`` (default 240 s; both
together take about 2 minutes on one H200). Exit status 0 when every verdict holds, 1 otherwise.

1. **device_map split.** The engine suite's random Qwen2 (``integration/helpers.py``, ``tiny_qwen2``:
   V = 151,936 unless ``--vocab``, d = 64, 2 layers, fp32) dispatched by accelerate with its backbone
   on the CPU and its head on the GPU (``dispatch_model(model, {"model": "cpu", "lm_head": 0},
   main_device="cpu", force_hooks=True)``: the hooks ``from_pretrained(device_map=...)`` installs).
   The replay forward (``sampling_mask.trainers.trl.fused.replay_forward``, what ``ReplayGRPOTrainer``
   routes TRL's fused calls to) moves the hidden states to the head's device, as TRL's fused head
   does. Verdict: log-probs and entropies within 1e-5 of the same model on the CPU, every gradient
   within 1e-4 (relative to the largest of its tensor), the log-probs on the head's device.
2. **TRL's loop under accelerate's FSDP2.** ``accelerate launch --use_fsdp --fsdp_version 2
   --fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP --num_processes 1`` of ``integration/trl_distributed.py
   --cuda``: FSDP2 shards the model (decoder layers, embedding, the tail group ``[norm, lm_head]``, the
   root; ``DTensor`` parameters) and ``ReplayGRPOTrainer`` trains one GRPO step (transformers
   generation, ``top_k=20, top_p=0.8``, fp32, TF32 off by torch's default). Verdict: accelerate ran
   FSDP2, the step-0 mean of ``exp(trainer logp - sampler logp)`` is 1 within 1e-4 (the sampler's
   log-probs come from generation with a KV cache, the trainer's from one forward, on the GPU) while
   over the full vocabulary it is below 0.99, ``grad_norm`` > 0 and the head moved.

Without CUDA it says so and exits 0. ``--device cpu`` runs both dry on the CPU (the split on one
device through accelerate's hooks; accelerate then runs the loop as ``MULTI_CPU``, which the verdict
accepts only there): what the test suite does not, since it launches processes.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RATIO_TOL = 1e-4


def _batch(vocab: int, keep: int = 6) -> tuple[Any, Any, Any, list[Any]]:
    """4 completions of up to ``keep`` tokens after 5 prompt tokens, rollout-like masks with empty rows."""
    import numpy as np
    import torch

    from sampling_mask import SamplingMask
    from sampling_mask.trainers.trl import completion_masks

    rng = np.random.default_rng(0)
    rows, prompt = 4, 5
    input_ids = torch.from_numpy(rng.integers(3, vocab, (rows, prompt + keep)))
    attention = torch.ones_like(input_ids)
    attention[1, -2:] = 0
    labels = input_ids.masked_fill(attention == 0, -100)
    labels[:, :-keep] = -100
    support, cu_seqlens = [], [0]
    for b in range(rows):
        n = int(attention[b, prompt:].sum())
        for t in range(n):
            ids = set(rng.choice(vocab, int(rng.integers(1, 300)), replace=False).tolist())
            support.append([] if t == 2 else sorted(ids | {int(input_ids[b, prompt + t])}))
        cu_seqlens.append(cu_seqlens[-1] + n)
    sampled = labels[:, prompt:][attention[:, prompt:].bool()].numpy()
    mask = SamplingMask.from_rows(support, cu_seqlens=cu_seqlens, vocab_size=vocab, sampled_token_ids=sampled)
    return input_ids, attention, labels, completion_masks(mask)


def _replay(model: Any, batch: tuple[Any, Any, Any, list[Any]]) -> tuple[Any, dict[str, Any]]:
    """(output, gradients) of a loss on the replayed log-probs and entropies."""
    import torch

    from sampling_mask.trainers.trl.fused import replay_forward

    input_ids, attention, labels, parts = batch
    model.zero_grad()
    out = replay_forward(
        model,
        parts,
        input_ids,
        labels,
        logits_to_keep=6,
        temperature=0.7,
        with_entropy=True,
        kwargs=dict(input_ids=input_ids, attention_mask=attention),
    )
    weights = torch.linspace(0.5, 1.5, out.log_probs.numel(), device=out.log_probs.device)
    ((out.log_probs * weights.view_as(out.log_probs)).sum() + 0.3 * out.entropy.sum()).backward()
    return out, {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}


def check_device_map(device: str, vocab: int) -> dict[str, Any]:
    """Part 1: the backbone on the CPU, the head on ``device``, against the whole model on the CPU."""
    import torch
    from accelerate import dispatch_model

    sys.path.insert(0, str(ROOT / "integration"))
    from helpers import tiny_qwen2  # the engine suite's tiny model: the one part 2 trains

    base = tiny_qwen2(vocab)
    reference = copy.deepcopy(base)
    split = dispatch_model(base, {"model": "cpu", "lm_head": device}, main_device="cpu", force_hooks=True)
    batch = _batch(vocab)
    want, want_grads = _replay(reference, batch)
    got, got_grads = _replay(split, batch)
    logprob_error = float((got.log_probs.cpu() - want.log_probs).abs().max())
    entropy_error = float((got.entropy.cpu() - want.entropy).abs().max())
    grad_error = max(
        float((got_grads[n] - g).abs().max() / g.abs().max().clamp(min=1e-30)) for n, g in want_grads.items()
    )
    head_device = str(split.lm_head.weight.device)
    ok = (
        logprob_error <= 1e-5
        and entropy_error <= 1e-5
        and grad_error <= 1e-4
        and set(got_grads) == set(want_grads)
        and str(got.log_probs.device) == head_device
        and torch.device(head_device).type == torch.device(device).type
    )
    return {
        "ok": ok,
        "head_device": head_device,
        "backbone_device": str(split.model.embed_tokens.weight.device),
        "max_abs_logprob_error": logprob_error,
        "max_abs_entropy_error": entropy_error,
        "max_rel_grad_error": grad_error,
    }


def check_fsdp2_loop(cuda: bool, vocab: int, timeout: float) -> dict[str, Any]:
    """Part 2: TRL's loop under accelerate's FSDP2 on one process (``integration/trl_distributed.py``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        command = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
            "--fsdp_cpu_ram_efficient_loading", "false", "--fsdp_reshard_after_forward", "true",
            "--num_processes", "1", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()),
            str(ROOT / "integration" / "trl_distributed.py"), str(out), "--vocab", str(vocab),
            *(["--cuda"] if cuda else []),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            return {"ok": False, "error": (done.stdout[-1500:] + "\n" + done.stderr[-4000:]).strip()}
        result = json.loads((out / "rank0.json").read_text())
    first = result["replay_log"][0]
    fsdp = result["distributed_type"] == "DistributedType.FSDP"
    ok = (
        (fsdp or not cuda)
        and abs(first["ratio_replay"] - 1) <= RATIO_TOL
        and first["ratio_full"] < 0.99
        and result["log_history"][0]["grad_norm"] > 0
        and result["head_max_change"] > 0
    )
    return {
        "ok": ok,
        "distributed_type": result["distributed_type"],
        "wrapped": result["wrapped"],
        "head_outside_forward": result["head_outside_forward"],
        "ratio_replay": first["ratio_replay"],
        "ratio_full": first["ratio_full"],
        "grad_norm": result["log_history"][0]["grad_norm"],
        "head_max_change": result["head_max_change"],
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _part(name: str, argv: list[str], timeout: float) -> dict[str, Any]:
    """Run one part in its own process (``--part``), bounded by ``timeout``."""
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--part", name, *argv], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"ok": False, "error": (done.stdout[-1500:] + "\n" + done.stderr[-4000:]).strip()}
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (a dry run)")
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per part")
    parser.add_argument("--part", choices=("device_map", "fsdp2"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    import torch

    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("gpu_check_trl: CUDA is not available on this machine (torch.cuda.is_available() is False): nothing run")
        return 0
    if args.part == "device_map":
        print(json.dumps(check_device_map(args.device, args.vocab)))
        return 0
    if args.part == "fsdp2":
        print(json.dumps(check_fsdp2_loop(cuda, args.vocab, args.timeout)))
        return 0
    start = time.perf_counter()
    name = torch.cuda.get_device_name(torch.device(args.device)) if cuda else "cpu"
    print(f"gpu_check_trl on {name}, torch {torch.__version__}: V = {args.vocab:,}, d = 64")
    forwarded = ["--device", args.device, "--vocab", str(args.vocab), "--timeout", str(args.timeout)]
    failures = []
    for part in ("device_map", "fsdp2"):
        result = _part(part, forwarded, args.timeout + 30)
        print(
            f"  {part}: {'ok' if result['ok'] else 'FAILS'} {json.dumps({k: v for k, v in result.items() if k != 'ok'})}"
        )
        if not result["ok"]:
            failures.append(part)
    verdict = "every check holds" if not failures else f"FAILS: {', '.join(failures)}"
    print(f"{verdict}; {time.perf_counter() - start:.1f} s in all")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
