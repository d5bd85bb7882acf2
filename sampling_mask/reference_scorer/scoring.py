"""Masked log-probs and entropy from logits or from hidden states (spec section ``scoring``).

For row t with support S_t, logits z_t, temperature tau_t and target y_t::

    log p_t = z_{t,y}/tau_t - logsumexp_{j in S_t} (z_{t,j}/tau_t)
    H_t     = -sum_{j in S_t} p_j log p_j,   p_j renormalized over S_t

Every function returns :class:`MaskedScores`. Values are in the accumulation dtype (float64 for
float64 inputs, else float32); gradients reach the inputs in their own dtypes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from .distributed import CopyToGroup, ReduceSum, all_reduce_max, vocab_shard
from .inputs import MaskLike, RowPlan, accumulation_dtype, plan_rows
from .row_stats import DEFAULT_MAX_CHUNK_BYTES, LocalPlan, RowStats, finish, rescale

__all__ = [
    "MaskedScores",
    "full_logprobs",
    "masked_entropy",
    "masked_entropy_from_hidden",
    "masked_logprobs",
    "masked_logprobs_from_hidden",
    "masked_support_logprobs",
]


@dataclasses.dataclass(frozen=True)
class MaskedScores:
    """Per-row results of one scoring call.

    ``logprobs`` / ``entropy``: [T] (None when not asked for); ``fill_value`` (default NaN) where
    ``valid`` is False, with a zero gradient there;
    ``logprobs`` is ``-inf`` on rows under ``missing_target="neg_inf"``.
    ``valid``: bool [T], the row has a value. ``replayed``: bool [T], the row was scored over its
    recorded support (False: full vocabulary, or not scored).
    Row counts (a row may count in several; all 0 where they cannot apply):
    ``empty_rows``: rows whose recorded support is empty, with or without a target (0 without a
    mask: :func:`full_logprobs`); ``empty_rows_full_vocab``: of those, the rows scored over the full
    vocabulary because their row was empty (``empty_rows="full"`` and a target, or entropy alone);
    ``no_target_rows``: rows without a target (``-1``, or ``ignore_index``), not scored, whatever
    their support; ``missing_target_rows``: rows whose target is outside their non-empty support,
    the rows the ``missing_target`` policy applied to.
    """

    logprobs: torch.Tensor | None
    entropy: torch.Tensor | None
    valid: torch.Tensor
    replayed: torch.Tensor
    empty_rows: int
    missing_target_rows: int
    empty_rows_full_vocab: int = 0
    no_target_rows: int = 0


def _check_fill(fill_value: Any) -> float:
    if isinstance(fill_value, bool) or not isinstance(fill_value, (int, float)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "fill_value must be a number", field="fill_value", value=short_repr(fill_value)
        )
    return float(fill_value)


def _check_chunking(chunk_size: Any, max_chunk_bytes: Any) -> tuple[int | None, int]:
    """(``chunk_size``: None or an int >= 1, ``max_chunk_bytes``: an int >= 1), else ``E_RANGE``."""
    for field, value in (("chunk_size", chunk_size), ("max_chunk_bytes", max_chunk_bytes)):
        if value is None and field == "chunk_size":
            continue
        if not is_int(value) or value < 1:
            raise SamplingMaskError(
                ErrorCode.E_RANGE,
                f"{field} must be an integer >= 1{' or None' if field == 'chunk_size' else ''}",
                field=field,
                value=short_repr(value),
            )
    return chunk_size, max_chunk_bytes


def _local_plan(
    plan: RowPlan, start: int, width: int, chunk_size: int | None, max_chunk_bytes: int, dtype: torch.dtype
) -> LocalPlan:
    """This rank's pairs (ids in ``[start, start + width)``), sorted by (row, column)."""
    ids = plan.pair_ids
    mine = (ids >= start) & (ids < start + width)
    rows, cols, is_target = plan.pair_rows[mine], ids[mine] - start, plan.pair_is_target[mine]
    key = rows * width + cols
    if key.numel() > 1 and not bool((key[1:] > key[:-1]).all()):  # unsorted rows (SGLang, SkyRL rank order)
        order = torch.argsort(key)
        rows, cols, is_target = rows[order], cols[order], is_target[order]
    offsets = torch.zeros(plan.num_rows + 1, dtype=torch.int64, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=plan.num_rows), 0, out=offsets[1:])
    targets = plan.full_targets
    in_shard = (targets >= start) & (targets < start + width)
    return LocalPlan(
        num_rows=plan.num_rows,
        pair_rows=rows,
        pair_cols=cols,
        pair_offsets=offsets,
        pair_is_target=is_target,
        full_rows=plan.full_rows,
        full_target_cols=torch.where(in_shard, targets - start, torch.full_like(targets, -1)),
        tau=plan.tau,
        width=width,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
        dtype=dtype,
    )


def _row_statistics(
    kind: str, tensors: tuple[torch.Tensor, ...], local: LocalPlan, group: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logsumexp, entropy, zy, defined) per row, combined over the vocabulary-parallel group."""
    m, s, a, zy = RowStats.apply(local, kind, *tensors)
    if group is not None:
        m_all = all_reduce_max(m, group)
        s, a = rescale(m, s, a, m_all)
        s, a, zy = ReduceSum.apply(torch.stack([s, a, zy]), group).unbind(0)
        m = m_all
    lse, entropy, defined = finish(m, s, a)
    return lse, entropy, zy, defined


@dataclasses.dataclass(frozen=True)
class _Source:
    """What the row statistics read: ``kind`` ("logits" or "hidden") and its tensors (the first is
    [T, ...]), this rank's vocabulary width and the accumulation dtype."""

    kind: str
    tensors: tuple[torch.Tensor, ...]
    width: int
    dtype: torch.dtype


def _statistics(
    source: _Source,
    mask: MaskLike | None,
    *,
    targets: Any = None,
    need_targets: bool,
    temperature: Any,
    empty_rows: str,
    missing_target: str = "error",
    ignore_index: int | None = -100,
    vocab_group: Any,
    chunk_size: int | None,
    max_chunk_bytes: int,
) -> tuple[RowPlan, int, tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The row plan, this rank's first vocabulary id and :func:`_row_statistics` of ``source``."""
    chunk_size, max_chunk_bytes = _check_chunking(chunk_size, max_chunk_bytes)
    lead = source.tensors[0]
    device, num_rows, width = lead.device, lead.shape[0], source.width
    start, vocab = vocab_shard(width, vocab_group, device) if vocab_group is not None else (0, width)
    plan = plan_rows(
        mask,
        num_rows=num_rows,
        vocab_size=vocab,
        device=device,
        dtype=source.dtype,
        targets=targets,
        need_targets=need_targets,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target=missing_target,
        ignore_index=ignore_index,
    )
    local = _local_plan(plan, start, width, chunk_size, max_chunk_bytes, source.dtype)
    return plan, start, _row_statistics(source.kind, source.tensors, local, vocab_group)


def _score(
    source: _Source,
    *,
    mask: MaskLike | None,
    targets: Any,
    want_logprobs: bool,
    with_entropy: bool,
    temperature: Any,
    empty_rows: str,
    missing_target: str,
    ignore_index: int | None = -100,
    fill_value: float = math.nan,
    vocab_group: Any,
    chunk_size: int | None,
    max_chunk_bytes: int,
) -> MaskedScores:
    fill_value = _check_fill(fill_value)
    plan, _, (lse, entropy, zy, defined) = _statistics(
        source,
        mask,
        targets=targets,
        need_targets=want_logprobs,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target=missing_target,
        ignore_index=ignore_index,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )
    valid = plan.valid & defined
    fill = torch.full_like(lse, fill_value)
    logprobs = None
    if want_logprobs:
        logprobs = torch.where(valid, zy - lse, fill)
        logprobs = torch.where(plan.neg_inf, torch.full_like(lse, float("-inf")), logprobs)
    return MaskedScores(
        logprobs=logprobs,
        entropy=torch.where(valid, entropy, fill) if with_entropy else None,
        valid=valid,
        replayed=plan.replayed & valid,
        empty_rows=plan.empty_rows if mask is not None else 0,
        missing_target_rows=plan.missing_target_rows,
        empty_rows_full_vocab=plan.empty_rows_full_vocab if mask is not None else 0,
        no_target_rows=plan.no_target_rows,
    )


def _logits_source(logits: torch.Tensor) -> _Source:
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "logits must be a 2-D tensor [T, V]", field="logits")
    return _Source("logits", (logits,), logits.shape[1], accumulation_dtype(logits))


def masked_logprobs(
    logits: torch.Tensor,
    mask: MaskLike,
    targets: Any = None,
    *,
    temperature: Any = None,
    empty_rows: str = "full",
    missing_target: str = "error",
    ignore_index: int | None = -100,
    fill_value: float = math.nan,
    with_entropy: bool = False,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> MaskedScores:
    """Log-probs of ``targets`` (default: the mask's ``sampled_token_ids``) renormalized over each
    row's support, from raw ``logits`` [T, V] (divided here by ``temperature``: a scalar or [T];
    default the mask's ``temperature`` companion, else 1).

    ``mask``: a SamplingMask, a dense ``-1``-padded [T, W] tensor, or ``(ids, offsets)``.
    ``empty_rows``: ``"full"`` (score over the vocabulary) or ``"exclude"`` (NaN, ``valid`` False).
    ``missing_target``: ``"error"`` (``E_MISSING_SAMPLED`` naming the row), ``"full"`` (score that row
    over the vocabulary) or ``"neg_inf"``. ``ignore_index`` (default -100, as torch's
    ``cross_entropy``): rows with that target have no target and are not scored. ``fill_value``: the
    value of rows not scored (``valid`` False; default NaN), with a zero gradient, so that with
    ``fill_value=0.0`` a loss ``-(out.logprobs * loss_mask).sum()`` stays finite.
    ``with_entropy`` adds the entropy of the same rows.
    With ``vocab_group``, ``logits`` is this rank's contiguous vocabulary shard (rank order).
    """
    return _score(
        _logits_source(logits),
        mask=mask,
        targets=targets,
        want_logprobs=True,
        with_entropy=with_entropy,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target=missing_target,
        ignore_index=ignore_index,
        fill_value=fill_value,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )


def masked_entropy(
    logits: torch.Tensor,
    mask: MaskLike,
    *,
    temperature: Any = None,
    empty_rows: str = "full",
    fill_value: float = math.nan,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> MaskedScores:
    """Entropy of each row's distribution renormalized over its support (``.entropy``); empty rows per
    ``empty_rows``. Arguments as :func:`masked_logprobs`."""
    return _score(
        _logits_source(logits),
        mask=mask,
        targets=None,
        want_logprobs=False,
        with_entropy=True,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target="error",
        fill_value=fill_value,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )


def full_logprobs(
    logits: torch.Tensor,
    targets: Any,
    *,
    temperature: Any = 1.0,
    ignore_index: int | None = -100,
    fill_value: float = math.nan,
    with_entropy: bool = False,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> MaskedScores:
    """Full-vocabulary log-probs (and entropy) of ``targets``: what a trainer without replay computes.
    A target of ``-1`` or ``ignore_index`` leaves its row unscored (``fill_value``, default NaN)."""
    return _score(
        _logits_source(logits),
        mask=None,
        targets=targets,
        want_logprobs=True,
        with_entropy=with_entropy,
        temperature=temperature,
        empty_rows="full",
        missing_target="error",
        ignore_index=ignore_index,
        fill_value=fill_value,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )


def masked_support_logprobs(
    logits: torch.Tensor,
    mask: MaskLike,
    *,
    temperature: Any = None,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> torch.Tensor:
    """Renormalized log-prob of every id of the mask, [nnz] in the mask's own id order (what the
    ``support_logprobs`` companion holds). Differentiable."""
    source = _logits_source(logits)
    plan, start, (lse, _, _, _) = _statistics(
        source,
        mask,
        need_targets=False,
        temperature=temperature,
        empty_rows="exclude",
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )
    dtype, width = source.dtype, source.width
    rows, ids = plan.pair_rows, plan.pair_ids
    mine = (ids >= start) & (ids < start + width)
    cols = torch.where(mine, ids - start, torch.zeros_like(ids))
    u = logits[rows, cols].to(dtype) / plan.tau[rows]
    u = torch.where(mine, u, torch.zeros_like(u))
    if vocab_group is not None:
        u = ReduceSum.apply(u, vocab_group)
    return u - lse[rows]


def _refuse_dtensors(**tensors: Any) -> None:
    """``E_SCHEMA`` naming the first ``DTensor`` (a shard of a sharded parameter: its shape is global,
    its data local)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - a torch without distributed tensors
        return
    for field, value in tensors.items():
        if isinstance(value, DTensor):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"{field} is a DTensor: pass the whole tensor (an FSDP2 head inside its module's forward), or this"
                " rank's vocabulary shard with vocab_group",
                field=field,
            )


def _hidden_source(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, vocab_group: Any) -> _Source:
    _refuse_dtensors(hidden=hidden, weight=weight, bias=bias)
    if not isinstance(hidden, torch.Tensor) or hidden.ndim != 2:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "hidden must be a 2-D tensor [T, d]", field="hidden")
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or weight.shape[1] != hidden.shape[1]:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"weight must be [V, {hidden.shape[1]}], got {list(weight.shape)}", field="weight"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (weight.shape[0],)):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"bias must be [{weight.shape[0]}]", field="bias")
    dtype = accumulation_dtype(hidden, weight, bias)
    if vocab_group is not None:
        hidden = CopyToGroup.apply(hidden, vocab_group)
    return _Source("hidden", (hidden, weight) if bias is None else (hidden, weight, bias), weight.shape[0], dtype)


def masked_logprobs_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    mask: MaskLike,
    targets: Any = None,
    *,
    bias: torch.Tensor | None = None,
    temperature: Any = None,
    empty_rows: str = "full",
    missing_target: str = "error",
    ignore_index: int | None = -100,
    fill_value: float = math.nan,
    with_entropy: bool = False,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> MaskedScores:
    """:func:`masked_logprobs` of the logits ``hidden [T, d] @ weight[V, d].T (+ bias [V])`` without
    forming them: only the T x |S_t| candidate logits (a sampled matrix product, [P] values); rows
    scored over the full vocabulary go through vocabulary tiles with an online log-sum-exp.
    Memory beyond the gradients: O(T + P) plus one chunk of at most ``max_chunk_bytes`` (default
    256 MiB; a single row or pair larger than that is its own chunk): weight-gradient blocks of ids,
    tiles, and pair chunks of a bf16 / fp16 weight. ``chunk_size`` (optional) also caps the ids, pairs,
    tile rows and tile columns of a chunk (small values exercise chunk boundaries).
    With ``vocab_group``, ``weight`` / ``bias`` are this rank's vocabulary shard and the gradient of
    ``hidden`` is summed over the group.
    """
    return _score(
        _hidden_source(hidden, weight, bias, vocab_group),
        mask=mask,
        targets=targets,
        want_logprobs=True,
        with_entropy=with_entropy,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target=missing_target,
        ignore_index=ignore_index,
        fill_value=fill_value,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )


def masked_entropy_from_hidden(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    mask: MaskLike,
    *,
    bias: torch.Tensor | None = None,
    temperature: Any = None,
    empty_rows: str = "full",
    fill_value: float = math.nan,
    vocab_group: Any = None,
    chunk_size: int | None = None,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> MaskedScores:
    """:func:`masked_entropy` from hidden states, as :func:`masked_logprobs_from_hidden`."""
    return _score(
        _hidden_source(hidden, weight, bias, vocab_group),
        mask=mask,
        targets=None,
        want_logprobs=False,
        with_entropy=True,
        temperature=temperature,
        empty_rows=empty_rows,
        missing_target="error",
        fill_value=fill_value,
        vocab_group=vocab_group,
        chunk_size=chunk_size,
        max_chunk_bytes=max_chunk_bytes,
    )
