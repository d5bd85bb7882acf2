"""torch.distributed pieces: vocabulary-parallel reductions and context-parallel row splitting.

Vocabulary parallel: rank r holds the contiguous id range ``[start_r, start_r + V_r)`` of the lm-head
weight (or of the logits), shards in rank order. Outputs (log-probs, entropy) are replicated on
every rank of the group, so a loss computed from them is replicated too. :class:`ReduceSum`
all-reduces in forward and passes the gradient through unchanged in backward, which makes each
rank's gradient of its own shard exact; :class:`CopyToGroup` is its mirror (identity forward,
all-reduce backward) for the hidden states every rank multiplies by its shard.

Context parallel: rows are split across ranks (``sampling_mask.data.alignment``, contiguous or
zig-zag); scoring is row-local, so each rank scores its rows alone and per-row results
equal the unsplit computation. :func:`gather_rows` reassembles per-row results for logging.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..core.model import SamplingMask

__all__ = [
    "CopyToGroup",
    "ReduceSum",
    "all_reduce_max",
    "context_parallel_split",
    "gather_rows",
    "vocab_shard",
]


class ReduceSum(torch.autograd.Function):
    """Forward: sum over the group. Backward: identity (the loss is replicated on every rank)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        return grad, None


class CopyToGroup(torch.autograd.Function):
    """Forward: identity. Backward: sum of the gradients every rank computed from its shard."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


def all_reduce_max(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Element-wise maximum over the group (no gradient)."""
    out = x.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.MAX, group=group)
    return out


def vocab_shard(local_width: int, group: Any, device: torch.device) -> tuple[int, int]:
    """(first id of this rank's shard, total vocabulary size): shards are contiguous in rank order."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    widths = torch.zeros(world, dtype=torch.int64, device=device)
    widths[rank] = local_width
    dist.all_reduce(widths, op=dist.ReduceOp.SUM, group=group)
    return int(widths[:rank].sum()), int(widths.sum())


def context_parallel_split(
    mask: SamplingMask, world_size: int, rank: int, mode: str = "contiguous"
) -> tuple[np.ndarray, SamplingMask]:
    """(row indices of ``rank``, the mask of those rows, one segment per sequence) for context
    parallelism: ``sampling_mask.data.alignment.context_parallel_rows`` and ``shard_mask``, which split
    rows and mask the same way (contiguous, or zig-zag: chunks r and 2P-1-r of each sequence)."""
    from ..data.alignment import context_parallel_rows, shard_mask

    rows = context_parallel_rows(mask.cu_seqlens, world_size, rank, mode)
    return rows, shard_mask(mask, world_size, rank, mode)


def gather_rows(local: torch.Tensor, rows: Any, num_rows: int, group: Any = None) -> torch.Tensor:
    """Per-row values from every rank put back in global row order: ``out[rows_r] = local_r``.

    ``local`` is ``[T_r, ...]``; every rank receives the full ``[num_rows, ...]`` tensor. Not
    differentiable (for metrics and checks).
    """
    device = local.device
    rows_t = torch.as_tensor(np.asarray(rows, dtype=np.int64) if not isinstance(rows, torch.Tensor) else rows)
    rows_t = rows_t.to(device=device, dtype=torch.int64)
    world = dist.get_world_size(group)
    counts = torch.zeros(world, dtype=torch.int64, device=device)
    counts[dist.get_rank(group)] = rows_t.numel()
    dist.all_reduce(counts, group=group)
    width = int(counts.max())
    tail = tuple(local.shape[1:])
    pad_vals = torch.zeros((width, *tail), dtype=local.dtype, device=device)
    pad_vals[: local.shape[0]] = local.detach()
    pad_rows = torch.full((width,), -1, dtype=torch.int64, device=device)
    pad_rows[: rows_t.numel()] = rows_t
    all_vals = [torch.empty_like(pad_vals) for _ in range(world)]
    all_rows = [torch.empty_like(pad_rows) for _ in range(world)]
    dist.all_gather(all_vals, pad_vals, group=group)
    dist.all_gather(all_rows, pad_rows, group=group)
    fill = float("nan") if local.dtype.is_floating_point else 0
    out = torch.full((num_rows, *tail), fill, dtype=local.dtype, device=device)
    for r in range(world):  # one step per rank, not per row
        n = int(counts[r])
        out[all_rows[r][:n]] = all_vals[r][:n]
    return out
