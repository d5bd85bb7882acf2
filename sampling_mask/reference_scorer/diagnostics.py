"""What a trainer logs about the rollout / trainer mismatch: importance ratios and mismatch KL.

With q the rollout policy (``sampled_logprobs`` the engine reported) and p the trainer's policy
(our log-probs), tokens y ~ q and ``log r = log p(y) - log q(y)``:

- importance ratio ``r = exp(log r)`` per row;
- ``kl_k1 = mean(-log r)`` and ``kl_k3 = mean(r - 1 - log r)``: unbiased estimators of KL(q || p)
  (k3 is non-negative per sample, lower variance);
- ``fraction_replayed``: share of the rows considered that were scored over their recorded support.

Means run over rows that are considered (``loss_mask``, default all), valid, and finite on both
sides. With ``group`` (context parallel: each rank holds some rows) sums and counts are all-reduced,
so every rank gets the global figures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..core.errors import ErrorCode, SamplingMaskError
from .scoring import MaskedScores

__all__ = ["ReplayDiagnostics", "replay_diagnostics"]


@dataclasses.dataclass(frozen=True)
class ReplayDiagnostics:
    """Per-row ratios ([T], NaN where not compared) and scalar (0-d tensor) summaries."""

    log_ratio: torch.Tensor
    importance_ratio: torch.Tensor
    kl_k1: torch.Tensor
    kl_k3: torch.Tensor
    fraction_replayed: torch.Tensor
    rows_compared: torch.Tensor


def _as_float(value: Any, like: torch.Tensor, *, field: str) -> torch.Tensor:
    # A copy of a read-only array (a mask's companion): torch warns on views it cannot write.
    out = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.array(value))
    if out.shape != like.shape:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"expected shape {list(like.shape)}, got {list(out.shape)}", field=field
        )
    return out.to(device=like.device, dtype=like.dtype)


def replay_diagnostics(
    trainer: MaskedScores | torch.Tensor,
    rollout_logprobs: Any,
    *,
    replayed: Any = None,
    loss_mask: Any = None,
    group: Any = None,
) -> ReplayDiagnostics:
    """Mismatch diagnostics between trainer log-probs and the rollout's ``sampled_logprobs``.

    ``trainer``: a :class:`MaskedScores` (its ``logprobs``, ``valid`` and ``replayed`` are used) or a
    [T] tensor of log-probs (then ``replayed`` may be given; default all True). No gradient.
    """
    if isinstance(trainer, MaskedScores):
        if trainer.logprobs is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "scores carry no log-probs", field="trainer")
        logp, valid = trainer.logprobs.detach(), trainer.valid
        replayed_t = trainer.replayed
    else:
        logp = trainer.detach()
        if logp.dtype not in (torch.float32, torch.float64):
            logp = logp.float()
        valid = torch.ones(logp.shape, dtype=torch.bool, device=logp.device)
        replayed_t = valid if replayed is None else _as_float(replayed, logp, field="replayed") != 0
    if logp.ndim != 1:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "trainer log-probs must be 1-D [T]", field="trainer")
    rollout = _as_float(rollout_logprobs, logp, field="rollout_logprobs")
    considered = torch.ones_like(valid) if loss_mask is None else _as_float(loss_mask, logp, field="loss_mask") != 0
    compared = considered & valid & torch.isfinite(logp) & torch.isfinite(rollout)
    nan = torch.full_like(logp, float("nan"))
    log_ratio = torch.where(compared, logp - rollout, nan)
    ratio = torch.exp(log_ratio)
    zero = torch.zeros_like(logp)
    k1 = torch.where(compared, -log_ratio, zero)
    k3 = torch.where(compared, ratio - 1 - log_ratio, zero)
    sums = torch.stack(
        [
            k1.sum(),
            k3.sum(),
            compared.sum().to(logp.dtype),
            (considered & replayed_t).sum().to(logp.dtype),
            considered.sum().to(logp.dtype),
        ]
    )
    if group is not None:
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=group)
    k1_sum, k3_sum, n_compared, n_replayed, n_considered = sums.unbind(0)
    return ReplayDiagnostics(
        log_ratio=log_ratio,
        importance_ratio=ratio,
        kl_k1=k1_sum / n_compared,
        kl_k3=k3_sum / n_compared,
        fraction_replayed=n_replayed / n_considered,
        rows_compared=n_compared,
    )
