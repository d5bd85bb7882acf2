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

Each row also gets one named class (``row_class``, codes into :data:`ROW_CLASSES`; counts in
:meth:`SupportAudit.summary` under ``row_classes``), so an engine's known behaviour is told apart
from an unexplained difference:

- ``equal``: S == R;
- ``vllm_triton_top_p_drop``: S is R minus its least likely id(s) (the ids of R at its lowest logit),
  nothing extra: vLLM's Triton top-p kernel (``_topk_topp_kernel``, vLLM 0.28+ where Triton runs)
  when top-p should keep every id min-p left; ``rule="vllm-triton"`` reproduces it;
- ``sampled_forced_in``: the sampled id y is S's only extra id (y not in R) and S lacks exactly one
  id of R, a least likely one: the sampled id was forced into a full row by overwriting its weakest
  id (SkyRL's ``_sample_support_from_flat_logprobs``, NovaSky-AI/SkyRL #2237 / #2238);
- ``cut_at_cap``: S is a strict subset of R and |S| is one of ``caps``: a support cut at a fixed
  width (vLLM's compact width ``min(max top_k, V, MAX_COMPACT_SUPPORT = 2048)`` read without its
  bitmask, SGLang's ``--sampling-mask-max-tokens``);
- ``empty_over_cap``: S is empty while |R| exceeds the smallest cap (prime-rl / verifiers write
  count 0 for a support wider than their 512 capture cap);
- ``other``: any other difference; ``not_compared``: an empty S that is not over a cap.

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

from ..core.checks import is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, as_sampling_mask
from .inputs import accumulation_dtype
from .row_stats import HiddenSource
from .support import as_logits, default_chunk_rows, kept_block, sampler_arguments, support_params

__all__ = ["DEFAULT_CAPS", "ROW_CLASSES", "SupportAudit", "audit", "audit_from_hidden"]

#: The row classes, in code order (``SupportAudit.row_class`` holds the codes).
ROW_CLASSES = (
    "not_compared",
    "equal",
    "vllm_triton_top_p_drop",
    "sampled_forced_in",
    "cut_at_cap",
    "empty_over_cap",
    "other",
)
#: Support widths at which engines cut or drop rows: prime-rl / verifiers' capture cap (512), vLLM's
#: MAX_COMPACT_SUPPORT (2048), SGLang's default ``--sampling-mask-max-tokens`` (4096).
DEFAULT_CAPS = (512, 2048, 4096)

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
    #: int8 [T]: each row's class, an index into :data:`ROW_CLASSES`.
    row_class: np.ndarray | None = None

    def rows_of_class(self, name: str) -> np.ndarray:
        """The indices of the rows of class ``name`` (one of :data:`ROW_CLASSES`)."""
        if name not in ROW_CLASSES:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"row class must be one of {ROW_CLASSES}", field="name")
        if self.row_class is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.row_class == ROW_CLASSES.index(name))

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
            "row_classes": {
                name: (0 if self.row_class is None else int((self.row_class == code).sum()))
                for code, name in enumerate(ROW_CLASSES)
            },
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
    raise_at_first(
        (arr < -1) | (arr >= vocab), ErrorCode.E_RANGE, f"sampled id outside [0, {vocab})", field="sampled", values=arr
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
    caps: Any = DEFAULT_CAPS,
) -> SupportAudit:
    cap_values = _caps(caps)
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
    if not is_int(step) or step < 1:
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
        missing_here, extra_here = recomputed & ~recorded, recorded & ~recomputed
        missing_parts.append(_ids_and_counts(missing_here))
        extra_parts.append(_ids_and_counts(extra_here))
        put("recorded_size", recorded.sum(dim=1))
        put("recomputed_size", recomputed.sum(dim=1))
        put("common_size", common.sum(dim=1))
        u = z.to(dtype) / params.temperature[start:stop].to(dtype)[:, None]
        lowest = u.masked_fill(~recomputed, float("inf")).amin(dim=1)
        at_lowest = recomputed & (u == lowest[:, None])  # R's least likely id(s)
        n_missing, n_extra = missing_here.sum(dim=1), extra_here.sum(dim=1)
        put("lowest_dropped", (n_extra == 0) & (missing_here == at_lowest).all(dim=1) & (n_missing > 0))
        put("one_lowest_swapped", (n_missing == 1) & (n_extra == 1) & (missing_here & at_lowest).any(dim=1))
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
            put("sampled_is_extra", extra_here.gather(1, yc)[:, 0] & has)
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
    equal = compared & (recorded_size == common_size) & (recomputed_size == common_size)
    subset = compared & (recorded_size == common_size) & (recomputed_size > common_size)
    forced = col("one_lowest_swapped", bool) & (False if y is None else col("sampled_is_extra", bool))
    over_cap = (~compared) & (recomputed_size > min(cap_values)) if cap_values else np.zeros_like(compared)
    row_class = np.full(num_rows, ROW_CLASSES.index("other"), dtype=np.int8)
    for name, rows in reversed(
        (  # first match wins: assigned in reverse
            ("not_compared", ~compared & ~over_cap),
            ("empty_over_cap", over_cap),
            ("equal", equal),
            ("vllm_triton_top_p_drop", compared & col("lowest_dropped", bool) & (recorded_size > 0)),
            ("sampled_forced_in", compared & forced),
            ("cut_at_cap", subset & np.isin(recorded_size, cap_values)),
        )
    ):
        row_class[rows] = ROW_CLASSES.index(name)
    return SupportAudit(
        rule=rule,
        compared=compared,
        recorded_size=recorded_size,
        recomputed_size=recomputed_size,
        common_size=common_size,
        equal=equal,
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
        row_class=row_class,
    )


def _caps(caps: Any) -> tuple[int, ...]:
    values = tuple(caps) if isinstance(caps, (list, tuple, np.ndarray)) else None
    if values is None or not all(is_int(c) and c > 0 for c in values):
        raise SamplingMaskError(ErrorCode.E_RANGE, "caps must be a sequence of integers > 0", field="caps")
    return tuple(int(c) for c in values)


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
    caps: Any = DEFAULT_CAPS,
) -> SupportAudit:
    """Audit ``mask`` against the support ``rule`` recomputes from the trainer's raw ``logits`` [T, V].

    ``temperature``: scalar or [T], default the mask's companion, else 1. ``top_k`` / ``top_p`` /
    ``min_p``: the sampler's parameters (see :func:`support_from_logits`). ``sampled``: default the
    mask's ``sampled_token_ids``; ``rollout_logprobs``: default its ``sampled_logprobs``.
    ``generation_config`` (``rule="hf"``, instead of the four parameters): the transformers config
    ``generate()`` ran with, filled with transformers' own defaults; the processors the rule cannot
    reproduce are named in ``unseen_processors`` and the summary (the audit still runs). ``caps``:
    the support widths at which the engine cuts or drops rows (``cut_at_cap`` / ``empty_over_cap``;
    default :data:`DEFAULT_CAPS`; pass vLLM's compact width ``min(max top_k, V, 2048)`` for a
    consumer that reads only vLLM's compact ids).
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
        caps=caps,
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
    caps: Any = DEFAULT_CAPS,
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
        caps=caps,
    )
