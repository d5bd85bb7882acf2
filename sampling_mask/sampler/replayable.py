"""Is this sampler replayable? The check a rollout framework runs before requesting sampling masks.

A mask replays the sampling distribution exactly when the engine sampled from
``softmax(z / T)`` restricted to the recorded support S_t, where z are the model's logits: the
trainer then computes ``logp = z_y/T - logsumexp_{j in S_t}(z_j/T)``. That holds for temperature
T > 0 combined with any *truncation* (top_k, top_p, min_p, and -inf masks such as allowed ids or
bad words, which the support records). It fails for anything that changes logit *values* the trainer
does not see: repetition / frequency / presence penalties, logit bias, custom logits processors; and
for greedy decoding (T <= 0), which has no distribution to replay.

Bounded support: top_p / min_p supports are data-dependent and can be large, so the engine must be
sent a finite ``top_k``. :func:`check_sampler` computes it: an explicit ``top_k`` is used as is (it
must not exceed ``max_top_k``, default 512, unless the caller raises the cap); when only top_p /
min_p truncate, ``top_k = max_top_k`` is added. Sending that ``top_k`` makes the engine's distribution
the one the mask records. ``top_k`` of ``None``, ``0`` or ``-1`` (or >= ``vocab_size``) means off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr

__all__ = ["DEFAULT_MAX_TOP_K", "Reason", "ReplayCheck", "check_sampler", "check_sampling_params", "require_replayable"]

DEFAULT_MAX_TOP_K = 512


@dataclasses.dataclass(frozen=True)
class Reason:
    """Why a mask cannot represent the distribution: the offending ``parameter``, an error ``code``."""

    parameter: str
    code: ErrorCode
    message: str

    def to_error(self) -> SamplingMaskError:
        return SamplingMaskError(self.code, self.message, field=self.parameter)


@dataclasses.dataclass(frozen=True)
class ReplayCheck:
    """The verdict. ``replayable``: the mask (with temperature) represents the distribution exactly.
    ``effective_top_k``: the top_k to send to the engine (None when nothing truncates: the support is
    the whole vocabulary and full-vocabulary scoring is already exact). ``truncates``: a mask is needed."""

    replayable: bool
    effective_top_k: int | None
    truncates: bool
    reasons: tuple[Reason, ...]

    def raise_if_not_replayable(self) -> ReplayCheck:
        if self.reasons:
            raise self.reasons[0].to_error()
        return self


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{name} must be a number", field=name, value=short_repr(value))
    number = float(value)
    if math.isnan(number):
        raise SamplingMaskError(ErrorCode.E_RANGE, f"{name} is NaN", field=name)
    return number


def check_sampler(
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repetition_penalty: float = 1.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    logit_bias: Mapping[Any, float] | None = None,
    logits_processors: Any = None,
    greedy: bool = False,
    vocab_size: int | None = None,
    max_top_k: int = DEFAULT_MAX_TOP_K,
) -> ReplayCheck:
    """Check sampler parameters (vLLM / SGLang names and neutral defaults). Malformed values (NaN,
    ``top_p`` outside (0, 1], ``min_p`` outside [0, 1], ``top_k < -1``) raise ``E_RANGE`` / ``E_SCHEMA``;
    a valid but non-replayable setting is reported in ``reasons`` (each naming its parameter)."""
    reasons: list[Reason] = []
    t = _number(temperature, "temperature")
    p = _number(top_p, "top_p")
    mp = _number(min_p, "min_p")
    if not 0.0 < p <= 1.0:
        raise SamplingMaskError(ErrorCode.E_RANGE, "top_p must be in (0, 1]", field="top_p", value=p)
    if not 0.0 <= mp <= 1.0:
        raise SamplingMaskError(ErrorCode.E_RANGE, "min_p must be in [0, 1]", field="min_p", value=mp)
    if not is_int(max_top_k) or max_top_k < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "max_top_k must be an integer >= 1", field="max_top_k")
    k: int | None = None
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int) and not hasattr(top_k, "__index__"):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "top_k must be an integer", field="top_k", value=short_repr(top_k)
            )
        k = int(top_k)
        if k < -1:
            raise SamplingMaskError(ErrorCode.E_RANGE, "top_k must be >= -1", field="top_k", value=k)
        if k <= 0 or (vocab_size is not None and k >= vocab_size):
            k = None  # off
    if greedy:
        reasons.append(Reason("greedy", ErrorCode.E_SCHEMA, "greedy decoding has no distribution to replay"))
    if not t > 0.0 or math.isinf(t):
        reasons.append(Reason("temperature", ErrorCode.E_RANGE, f"temperature {t} is not > 0 and finite"))
    for name, value, neutral in (
        ("repetition_penalty", repetition_penalty, 1.0),
        ("frequency_penalty", frequency_penalty, 0.0),
        ("presence_penalty", presence_penalty, 0.0),
    ):
        if _number(value, name) != neutral:
            reasons.append(
                Reason(
                    name,
                    ErrorCode.E_SCHEMA,
                    f"{name} {value} changes logits the trainer does not see (neutral: {neutral})",
                )
            )
    if logit_bias:
        reasons.append(Reason("logit_bias", ErrorCode.E_SCHEMA, "logit bias changes logits the trainer does not see"))
    if logits_processors:
        reasons.append(
            Reason(
                "logits_processors",
                ErrorCode.E_SCHEMA,
                "custom logits processors change logits the trainer does not see",
            )
        )
    truncates = k is not None or p < 1.0 or mp > 0.0
    effective: int | None = None
    if k is not None:
        if k > max_top_k:
            reasons.append(
                Reason(
                    "top_k",
                    ErrorCode.E_LIMIT,
                    f"top_k {k} exceeds the support cap max_top_k={max_top_k} (raise max_top_k to allow it)",
                )
            )
        effective = k
    elif truncates:
        effective = max_top_k if vocab_size is None else min(max_top_k, vocab_size)
    return ReplayCheck(replayable=not reasons, effective_top_k=effective, truncates=truncates, reasons=tuple(reasons))


_ALIASES = {
    "logits_processors": ("logits_processors", "custom_logit_processor", "logits_processor"),
}


def check_sampling_params(
    params: Any, *, vocab_size: int | None = None, max_top_k: int = DEFAULT_MAX_TOP_K
) -> ReplayCheck:
    """:func:`check_sampler` on a sampling-params object or mapping (vLLM ``SamplingParams``, SGLang
    ``sampling_params`` dicts): reads the fields by name, treats absent ones as neutral, reads
    ``custom_logit_processor`` as ``logits_processors`` and ``do_sample=False`` as greedy."""

    def read(name: str, default: Any) -> Any:
        for key in _ALIASES.get(name, (name,)):
            if isinstance(params, Mapping):
                if key in params and params[key] is not None:
                    return params[key]
            elif getattr(params, key, None) is not None:
                return getattr(params, key)
        return default

    greedy = read("greedy", False) or read("do_sample", True) is False
    return check_sampler(
        temperature=read("temperature", 1.0),
        top_k=read("top_k", None),
        top_p=read("top_p", 1.0),
        min_p=read("min_p", 0.0),
        repetition_penalty=read("repetition_penalty", 1.0),
        frequency_penalty=read("frequency_penalty", 0.0),
        presence_penalty=read("presence_penalty", 0.0),
        logit_bias=read("logit_bias", None),
        logits_processors=read("logits_processors", None),
        greedy=bool(greedy),
        vocab_size=vocab_size,
        max_top_k=max_top_k,
    )


def require_replayable(**kwargs: Any) -> int | None:
    """:func:`check_sampler`, raising the first reason as a :class:`SamplingMaskError` (its ``field``
    is the offending parameter); returns the effective top_k."""
    return check_sampler(**kwargs).raise_if_not_replayable().effective_top_k
