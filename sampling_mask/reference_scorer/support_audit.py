"""The mask audit: does a rollout's recorded support match what the sampler should have kept, and how
much of the rollout / trainer log-prob mismatch comes from the support versus the logits?

For every row t with recorded support S_t, the support R_t that ``rule`` recomputes from the trainer's
logits z_t (:mod:`.support`), u = z / tau, sampled id y_t and the rollout's reported log-prob q_t:

- ``missing``: R \\ S (ids the rule keeps that the recording lacks); ``extra``: S \\ R; ``jaccard``
  |S n R| / |S u R|; ``equal``: S == R;
- ``recorded_mass``: probability of S under the recomputed distribution, softmax of u over R;
- ``sampled_in_recorded`` / ``sampled_in_recomputed``: y in S / y in R;
- ``recorded_wider_than_top_k`` / ``recomputed_wider_than_top_k``: |S| / |R| > top_k (ties);
- log-probs of y: ``full_logprobs`` (u_y - logsumexp over V: a trainer without replay),
  ``replay_logprobs`` (over S: a trainer with replay), ``recomputed_logprobs`` (over R). The
  replay / recomputed log-prob is ``-inf`` when y is outside S / R. The
  mismatch ``full - q`` splits exactly into ``support_part = full - replay`` (= log of the mass of S
  under the trainer's full distribution; what replay removes) and ``drift_part = replay - q`` (what is
  left: trainer logits differ from engine logits).

Rows with an empty recorded support are not compared (``compared`` False; NaN / False / 0). Logits
are formed ``chunk_rows`` rows at a time: from a [T, V] tensor, or from hidden states and the lm-head
weight through the scorer's hidden-state source, so memory is O(chunk_rows x V), never [T, V].
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, as_sampling_mask
from .inputs import accumulation_dtype
from .row_stats import HiddenSource
from .support import as_logits, default_chunk_rows, kept_block, sampler_arguments, support_params

__all__ = ["SupportAudit", "audit", "audit_from_hidden"]

_VOCAB_TILE = 16384  # lm-head rows per matmul when forming logits from hidden states
_AUDIT_BLOCK = 1 << 22  # logits per block: the audit keeps about 10 block-sized temporaries


@dataclasses.dataclass(frozen=True)
class SupportAudit:
    """Per-row results (numpy [T]) of :func:`audit`; :meth:`summary` aggregates them.
    ``missing`` / ``extra`` hold the differing ids per row (ascending). Log-prob fields are None
    without sampled ids; ``rollout_logprobs`` / ``drift_part`` are None without rollout log-probs."""

    rule: str
    compared: np.ndarray
    recorded_size: np.ndarray
    recomputed_size: np.ndarray
    common_size: np.ndarray
    equal: np.ndarray
    jaccard: np.ndarray
    missing: SamplingMask
    extra: SamplingMask
    recorded_mass: np.ndarray
    top_k: np.ndarray
    recorded_wider_than_top_k: np.ndarray
    recomputed_wider_than_top_k: np.ndarray
    sampled_in_recorded: np.ndarray | None
    sampled_in_recomputed: np.ndarray | None
    full_logprobs: np.ndarray | None
    replay_logprobs: np.ndarray | None
    recomputed_logprobs: np.ndarray | None
    rollout_logprobs: np.ndarray | None
    #: ``name=value`` of the processors the sampler also ran that ``rule`` does not reproduce (from a
    #: ``generation_config``: ``repetition_penalty``, ``min_new_tokens``, bad words, ...).
    unseen_processors: tuple[str, ...] = ()

    @property
    def support_part(self) -> np.ndarray | None:
        """``full - replay`` per row: the share of the mismatch the recorded support explains."""
        if self.full_logprobs is None or self.replay_logprobs is None:
            return None
        return self.full_logprobs - self.replay_logprobs

    @property
    def drift_part(self) -> np.ndarray | None:
        """``replay - rollout`` per row: the mismatch left to logit drift."""
        if self.replay_logprobs is None or self.rollout_logprobs is None:
            return None
        return self.replay_logprobs - self.rollout_logprobs

    def summary(self) -> dict[str, Any]:
        """Aggregates over the compared rows (JSON-ready: ints, floats, None)."""
        c = self.compared
        n = int(c.sum())

        def mean(values: np.ndarray | None, rows: np.ndarray = c) -> float | None:
            if values is None:
                return None
            ok = rows & np.isfinite(values)
            return float(values[ok].mean()) if ok.any() else None

        out: dict[str, Any] = {
            "rule": self.rule,
            "unseen_processors": list(self.unseen_processors),
            "rows": int(c.size),
            "rows_compared": n,
            "rows_equal": int((self.equal & c).sum()),
            "rows_missing_ids": int(((self.recomputed_size > self.common_size) & c).sum()),
            "rows_extra_ids": int(((self.recorded_size > self.common_size) & c).sum()),
            "missing_ids": int(self.missing.nnz),
            "extra_ids": int(self.extra.nnz),
            "mean_jaccard": mean(self.jaccard),
            "mean_recorded_mass": mean(self.recorded_mass),
            "min_recorded_mass": float(self.recorded_mass[c].min()) if n else None,
            "rows_recorded_wider_than_top_k": int((self.recorded_wider_than_top_k & c).sum()),
            "rows_recomputed_wider_than_top_k": int((self.recomputed_wider_than_top_k & c).sum()),
            "rows_sampled_not_in_recorded": None,
            "rows_sampled_not_in_recomputed": None,
        }
        if self.sampled_in_recorded is not None and self.sampled_in_recomputed is not None:
            out["rows_sampled_not_in_recorded"] = int((~self.sampled_in_recorded & c).sum())
            out["rows_sampled_not_in_recomputed"] = int((~self.sampled_in_recomputed & c).sum())
        support, drift = self.support_part, self.drift_part
        total = None if drift is None or support is None else support + drift
        out["mismatch"] = {
            "mean_full_minus_rollout": mean(total),
            "mean_support_part": mean(support),
            "mean_drift_part": mean(drift),
            "mean_abs_full_minus_rollout": mean(None if total is None else np.abs(total)),
            "mean_abs_drift_part": mean(None if drift is None else np.abs(drift)),
        }
        return out


def _float_rows(value: Any, num_rows: int, *, field: str) -> np.ndarray:
    arr = np.asarray(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value, dtype=np.float64)
    if arr.shape != (num_rows,):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"{field} must be [{num_rows}], got {list(arr.shape)}", field=field)
    return arr


def _sampled_rows(value: Any, num_rows: int, vocab: int) -> np.ndarray:
    arr = np.asarray(value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value)
    if arr.dtype.kind not in "iu" or arr.shape != (num_rows,):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"sampled must be int [{num_rows}]", field="sampled")
    bad = (arr < -1) | (arr >= vocab)
    if bad.any():
        row = int(np.argmax(bad))
        raise SamplingMaskError(
            ErrorCode.E_RANGE, f"sampled id outside [0, {vocab})", field="sampled", row=row, value=int(arr[row])
        )
    return arr.astype(np.int64)


def _lse(u: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """logsumexp over the kept entries of each row (-inf where none is kept)."""
    return torch.logsumexp(u.masked_fill(~keep, float("-inf")), dim=1)


def _ids_and_counts(keep: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """A block's kept ids (row-major, ascending within a row) and per-row counts, on the CPU."""
    return torch.nonzero(keep)[:, 1].to(torch.int32).cpu().numpy(), keep.sum(dim=1).cpu().numpy()


def _ragged(parts: list[tuple[np.ndarray, np.ndarray]], vocab: int) -> SamplingMask:
    counts = np.concatenate([c for _, c in parts]) if parts else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    ids = np.concatenate([i for i, _ in parts]) if parts else np.zeros(0, dtype=np.int32)
    return SamplingMask(ids, offsets, vocab_size=vocab)


def _audit(
    mask: SamplingMask,
    block: Callable[[int, int], torch.Tensor],
    num_rows: int,
    vocab: int,
    dtype: torch.dtype,
    device: torch.device,
    *,
    temperature: Any,
    top_k: Any,
    top_p: Any,
    min_p: Any,
    rule: str,
    sampled: Any,
    rollout_logprobs: Any,
    chunk_rows: int | None,
    generation_config: Any = None,
) -> SupportAudit:
    settings, unseen = sampler_arguments(
        rule, generation_config, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p
    )
    temperature, top_k, top_p, min_p = (settings[k] for k in ("temperature", "top_k", "top_p", "min_p"))
    mask = as_sampling_mask(mask)  # a SamplingMask, or one of another copy (the mask protocol); else E_SCHEMA
    if mask.num_rows != num_rows:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"mask has {mask.num_rows} rows, logits {num_rows}", field="mask")
    if mask.nnz and int(mask.ids.max()) >= vocab:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"mask ids reach beyond V = {vocab}", field="ids")
    if temperature is None:
        temp = mask.temperature
        temperature = 1.0 if temp is None else temp
    params = support_params(
        num_rows, vocab, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, rule=rule, device=device
    )
    sampled = mask.sampled_token_ids if sampled is None else sampled
    y = None if sampled is None else _sampled_rows(sampled, num_rows, vocab)
    rollout = mask.sampled_logprobs if rollout_logprobs is None else rollout_logprobs
    q = None if rollout is None else _float_rows(rollout, num_rows, field="rollout_logprobs")
    step = default_chunk_rows(vocab, _AUDIT_BLOCK) if chunk_rows is None else chunk_rows
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "chunk_rows must be an integer >= 1", field="chunk_rows")

    offsets, ids = mask.offsets, mask.ids
    lengths = np.diff(offsets)
    cols: dict[str, list[np.ndarray]] = {}
    missing_parts: list[tuple[np.ndarray, np.ndarray]] = []
    extra_parts: list[tuple[np.ndarray, np.ndarray]] = []

    def put(name: str, value: torch.Tensor) -> None:
        cols.setdefault(name, []).append(value.detach().cpu().numpy())

    for start in range(0, num_rows, step):
        stop = min(start + step, num_rows)
        n = stop - start
        z = block(start, stop)
        recomputed = kept_block(z, params, start)
        recorded = torch.zeros((n, vocab), dtype=torch.bool, device=device)
        local_rows = torch.from_numpy(np.repeat(np.arange(n), lengths[start:stop])).to(device)
        local_ids = torch.from_numpy(ids[offsets[start] : offsets[stop]].astype(np.int64)).to(device)
        recorded[local_rows, local_ids] = True
        common = recorded & recomputed
        missing_parts.append(_ids_and_counts(recomputed & ~recorded))
        extra_parts.append(_ids_and_counts(recorded & ~recomputed))
        put("recorded_size", recorded.sum(dim=1))
        put("recomputed_size", recomputed.sum(dim=1))
        put("common_size", common.sum(dim=1))
        u = z.to(dtype) / params.temperature[start:stop].to(dtype)[:, None]
        lse_recomputed = _lse(u, recomputed)
        put("recorded_mass", torch.exp(_lse(u, common) - lse_recomputed))
        if y is not None:
            yt = torch.from_numpy(y[start:stop]).to(device)
            has = yt >= 0
            yc = torch.where(has, yt, 0)[:, None]
            uy = u.gather(1, yc)[:, 0]
            nan = torch.full_like(uy, float("nan"))
            in_recorded = recorded.gather(1, yc)[:, 0] & has
            in_recomputed = recomputed.gather(1, yc)[:, 0] & has
            put("sampled_in_recorded", in_recorded)
            put("sampled_in_recomputed", in_recomputed)
            neg_inf = torch.full_like(uy, float("-inf"))
            put("full_logprobs", torch.where(has, uy - torch.logsumexp(u, dim=1), nan))
            put("replay_logprobs", torch.where(has, torch.where(in_recorded, uy - _lse(u, recorded), neg_inf), nan))
            put("recomputed_logprobs", torch.where(has, torch.where(in_recomputed, uy - lse_recomputed, neg_inf), nan))

    def col(name: str, dtype_np: Any) -> np.ndarray:
        parts = cols.get(name)
        return np.concatenate(parts).astype(dtype_np) if parts else np.zeros(0, dtype=dtype_np)

    compared = lengths > 0
    recorded_size = col("recorded_size", np.int64)
    recomputed_size = col("recomputed_size", np.int64)
    common_size = col("common_size", np.int64)
    union = recorded_size + recomputed_size - common_size
    with np.errstate(invalid="ignore", divide="ignore"):
        jaccard = np.where(compared & (union > 0), common_size / np.maximum(union, 1), np.nan)
    k = params.top_k.cpu().numpy()
    recorded_mass = np.where(compared, col("recorded_mass", np.float64), np.nan)

    def logprob(name: str) -> np.ndarray | None:
        return None if y is None else np.where(compared, col(name, np.float64), np.nan)

    replay = logprob("replay_logprobs")
    return SupportAudit(
        rule=rule,
        compared=compared,
        recorded_size=recorded_size,
        recomputed_size=recomputed_size,
        common_size=common_size,
        equal=compared & (recorded_size == common_size) & (recomputed_size == common_size),
        jaccard=jaccard,
        missing=_ragged(missing_parts, vocab),
        extra=_ragged(extra_parts, vocab),
        recorded_mass=recorded_mass,
        top_k=k,
        recorded_wider_than_top_k=compared & (k > 0) & (recorded_size > k),
        recomputed_wider_than_top_k=compared & (k > 0) & (recomputed_size > k),
        sampled_in_recorded=None if y is None else col("sampled_in_recorded", bool) & compared,
        sampled_in_recomputed=None if y is None else col("sampled_in_recomputed", bool) & compared,
        full_logprobs=logprob("full_logprobs"),
        replay_logprobs=replay,
        recomputed_logprobs=logprob("recomputed_logprobs"),
        rollout_logprobs=None if q is None else np.where(compared, q, np.nan),
        unseen_processors=tuple(unseen),
    )


def audit(
    mask: SamplingMask,
    logits: torch.Tensor,
    *,
    temperature: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    rule: str = "vllm",
    sampled: Any = None,
    rollout_logprobs: Any = None,
    chunk_rows: int | None = None,
    generation_config: Any = None,
) -> SupportAudit:
    """Audit ``mask`` against the support ``rule`` recomputes from the trainer's raw ``logits`` [T, V].

    ``temperature``: scalar or [T], default the mask's companion, else 1. ``top_k`` / ``top_p`` /
    ``min_p``: the sampler's parameters (see :func:`support_from_logits`). ``sampled``: default the
    mask's ``sampled_token_ids``; ``rollout_logprobs``: default its ``sampled_logprobs``.
    ``generation_config`` (``rule="hf"``, instead of the four parameters): the transformers config
    ``generate()`` ran with, filled with transformers' own defaults; the processors the rule cannot
    reproduce are named in ``unseen_processors`` and the summary (the audit still runs).
    """
    logits = as_logits(logits)
    num_rows, vocab = logits.shape
    return _audit(
        mask,
        lambda a, b: logits[a:b],
        num_rows,
        vocab,
        accumulation_dtype(logits),
        logits.device,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        rule=rule,
        sampled=sampled,
        rollout_logprobs=rollout_logprobs,
        chunk_rows=chunk_rows,
        generation_config=generation_config,
    )


def audit_from_hidden(
    mask: SamplingMask,
    hidden: torch.Tensor,
    weight: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    rule: str = "vllm",
    sampled: Any = None,
    rollout_logprobs: Any = None,
    chunk_rows: int | None = None,
    generation_config: Any = None,
) -> SupportAudit:
    """:func:`audit` of the logits ``hidden [T, d] @ weight[V, d].T (+ bias)``, formed ``chunk_rows``
    rows at a time in the accumulation dtype (fp32 for bf16 / fp16 inputs) by the scorer's hidden-state
    source: memory O(chunk_rows x V), never [T, V]."""
    if not isinstance(hidden, torch.Tensor) or hidden.ndim != 2:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "hidden must be a 2-D tensor [T, d]", field="hidden")
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2 or weight.shape[1] != hidden.shape[1]:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"weight must be [V, {hidden.shape[1]}]", field="weight")
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (weight.shape[0],)):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"bias must be [{weight.shape[0]}]", field="bias")
    dtype = accumulation_dtype(hidden, weight, bias)
    source = HiddenSource((hidden, weight) if bias is None else (hidden, weight, bias), dtype)
    vocab = weight.shape[0]
    device = hidden.device

    def block(a: int, b: int) -> torch.Tensor:
        """Rows [a, b) of the logits, in vocabulary tiles (a bf16 weight is widened one tile at a time)."""
        rows = torch.arange(a, b, device=device)
        out = torch.empty((b - a, vocab), dtype=dtype, device=device)
        with torch.no_grad():
            for c0 in range(0, vocab, _VOCAB_TILE):
                c1 = min(c0 + _VOCAB_TILE, vocab)
                out[:, c0:c1] = source.tile_logits(rows, c0, c1)
        return out

    return _audit(
        mask,
        block,
        hidden.shape[0],
        vocab,
        dtype,
        device,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        rule=rule,
        sampled=sampled,
        rollout_logprobs=rollout_logprobs,
        chunk_rows=chunk_rows,
        generation_config=generation_config,
    )
