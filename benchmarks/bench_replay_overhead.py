"""Replay's overhead inside one trainer step (target: time and peak memory <= 1.1x).

``python benchmarks/bench_replay_overhead.py [--tokens 4096] [--vocab 151936] [--dim 256] [--repeats 3]``

One trainer step's log-prob stage, forward + backward, on the same hidden states and lm-head weight
(fp32, CPU), with the trainer's own full-vocabulary log-probs against replay over a rollout-like mask
(``sampling_mask.data.synthetic.rollout``, top_k 512, top_p 0.95):

- **TRL 1.16.0** (``GRPOTrainer``'s fused head): ``trl.kernels.ChunkedLogProbFunction`` (log-probs and
  entropy from hidden states, never ``[T, V]``) against what ``sampling_mask.trainers.trl`` runs
  instead, ``masked_logprobs_from_hidden(..., with_entropy=True)``. Skipped without trl.
- **verl 0.9.1 / OpenRLHF 0.11.2** (logits formed by the lm head): ``logits = hidden @ W.T``, then
  the trainers' CPU path (a logsumexp per row and a gather: verl ``logprobs_from_logits_v2`` /
  OpenRLHF ``log_probs_from_logits`` without flash-attn) against
  ``sampling_mask.trainers.verl.logprobs_from_logits`` with the mask, both through the matmul's backward.

Time: median of ``--repeats`` rounds, the two methods of a pair interleaved (``sampling_mask.cli.bench.race``).
Peak memory: each method once in a fresh subprocess (``MALLOC_MMAP_THRESHOLD_=65536`` so freed blocks
return to the OS); ``VmHWM`` after resetting it (``/proc/self/clear_refs``) minus ``VmRSS`` before the
run: everything the step allocates, gradients included. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import torch

from sampling_mask.cli.bench import race
from sampling_mask.data import synthetic
from sampling_mask.reference_scorer import masked_logprobs_from_hidden
from sampling_mask.trainers import verl as verl_adapter

TARGET = 1.1


def build(tokens: int, vocab: int, dim: int, seed: int = 0) -> dict[str, Any]:
    mask = synthetic.rollout(tokens, seed=seed, vocab_size=vocab, top_k=512)
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, dim, generator=gen).requires_grad_()
    weight = (torch.randn(vocab, dim, generator=gen) * (3.0 / dim**0.5)).requires_grad_()
    targets = torch.from_numpy(mask.sampled_token_ids.astype(np.int64))
    dense = torch.from_numpy(mask.to_dense())
    return dict(mask=mask, dense=dense, hidden=hidden, weight=weight, targets=targets)


def trl_full(c: dict[str, Any]) -> None:
    from trl.kernels import ChunkedLogProbFunction

    logps, entropy, *_ = ChunkedLogProbFunction.apply(
        c["hidden"], c["weight"], None, c["targets"], 1.0, 32768, None, 1.0, ("log_probs", "entropy")
    )
    (logps.sum() + 0.0 * entropy.sum()).backward()


def trl_replay(c: dict[str, Any]) -> None:
    out = masked_logprobs_from_hidden(c["hidden"], c["weight"], c["dense"], c["targets"], with_entropy=True)
    (out.logprobs.sum() + 0.0 * out.entropy.sum()).backward()


def logits_full(c: dict[str, Any]) -> None:
    logits = c["hidden"] @ c["weight"].T
    picked = torch.gather(logits, 1, c["targets"][:, None])[:, 0]
    lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # verl logprobs_from_logits_v2
    (picked - lse).sum().backward()


def logits_replay(c: dict[str, Any]) -> None:
    logits = c["hidden"] @ c["weight"].T
    verl_adapter.logprobs_from_logits(logits, c["targets"], sampling_mask=c["dense"]).sum().backward()


METHODS = {"trl_full": trl_full, "trl_replay": trl_replay, "logits_full": logits_full, "logits_replay": logits_replay}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(method: str, tokens: int, vocab: int, dim: int) -> None:
    METHODS[method](build(16, 1024, 8))  # fault in code pages and thread pools
    c = build(tokens, vocab, dim)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _status_kib("VmRSS") * 1024
    METHODS[method](c)
    print(json.dumps({"peak": _status_kib("VmHWM") * 1024 - before}))


def peak(method: str, args: argparse.Namespace) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, __file__, "--child", method, "--tokens", str(args.tokens), "--vocab", str(args.vocab)]
    out = subprocess.run([*command, "--dim", str(args.dim)], env=env, check=True, capture_output=True, text=True)
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=sorted(METHODS))
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.tokens, args.vocab, args.dim)
        return 0
    try:
        import trl.kernels  # noqa: F401
    except ImportError:
        pairs = [("verl / OpenRLHF (logits)", "logits_full", "logits_replay")]
        print("trl is not installed: the TRL pair is skipped")
    else:
        pairs = [
            ("TRL 1.16.0 fused head", "trl_full", "trl_replay"),
            ("verl / OpenRLHF (logits)", "logits_full", "logits_replay"),
        ]
    c = build(args.tokens, args.vocab, args.dim)
    lengths = c["mask"].row_lengths
    print(
        f"T = {args.tokens}, V = {args.vocab}, d = {args.dim}, fp32, {torch.get_num_threads()} threads; mask: "
        f"{c['mask'].nnz} ids, mean {lengths.mean():.1f}, max {lengths.max()} per row"
    )
    mib = 1 << 20
    ok = True
    for label, full, replay in pairs:

        def step(name: str) -> Any:
            def once() -> None:
                c["hidden"].grad = c["weight"].grad = None
                METHODS[name](c)

            return once

        times = race({full: step(full), replay: step(replay)}, args.repeats)
        m_full, m_replay = peak(full, args), peak(replay, args)
        t_ratio, m_ratio = times[replay] / times[full], m_replay / m_full
        ok &= t_ratio <= TARGET and m_ratio <= TARGET
        print(f"{label}:")
        print(
            f"  time  (fwd + bwd, median of {args.repeats}): trainer {times[full]:.3f} s, replay {times[replay]:.3f} s"
        )
        print(f"  peak memory of the step: trainer {m_full / mib:.1f} MiB, replay {m_replay / mib:.1f} MiB")
        print(f"  ratios replay / trainer: time {t_ratio:.3f}x, peak memory {m_ratio:.3f}x (target <= {TARGET}x each)")
    print("meets the target" if ok else "MISSES the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
