"""What ``generate()`` of Hugging Face transformers really samples with: its generation config, resolved.

Read in transformers 5.23.0 (huggingface/transformers, ``src/transformers/generation/utils.py``
``GenerationMixin._prepare_generation_config`` and ``_get_logits_processor``;
``generation/configuration_utils.py`` ``GenerationConfig._get_default_generation_params``;
``generation/logits_process.py`` the warpers).

- :func:`resolve_generation_config` applies ``generate()``'s own priority: keyword arguments, then the
  given config, then the model's ``generation_config``, then the global defaults, which are read from
  the installed transformers at run time (5.x: an unset ``top_k`` is 50). The global ``max_length``
  / ``min_length`` stay unset, as in ``generate()`` (a set ``max_length`` beside ``max_new_tokens``
  is a warning on every call), so the result can be passed to ``generate()``.
- :func:`sampler_settings` gives what ``support_from_logits(rule="hf")`` needs from a config;
  :func:`unseen_processors` names the processors it cannot see (``repetition_penalty``,
  ``min_new_tokens``, bad words, ...), :func:`unseen_warpers` the warpers no recorder builds.
- :func:`eos_token_ids` reads the EOS ids a config or a caller gives.

transformers is imported only inside the functions that need it (:func:`transformers_module`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.checks import get_field, is_int
from ..core.errors import ErrorCode, SamplingMaskError

__all__ = [
    "SAMPLER_FIELDS",
    "config_dict",
    "config_error",
    "eos_token_ids",
    "generation_defaults",
    "positive_temperature",
    "resolve_generation_config",
    "sampler_settings",
    "transformers_module",
    "unseen_processors",
    "unseen_warpers",
]

# Warpers generate() applies after the user's processors that no rule here reproduces (name, test).
_UNSEEN_WARPERS = (
    ("top_h", lambda v: v is not None),
    ("typical_p", lambda v: v is not None and v < 1.0),
    ("epsilon_cutoff", lambda v: v is not None and 0.0 < v < 1.0),
    ("eta_cutoff", lambda v: v is not None and 0.0 < v < 1.0),
    ("watermarking_config", lambda v: v is not None),
)
# Processors generate() runs before the warpers: the recorded support includes their effect, but a
# trainer that replays with temperature alone does not reproduce the sampled distribution.
_UNSEEN_PROCESSORS = (
    ("repetition_penalty", lambda v: v is not None and v != 1.0),
    ("encoder_repetition_penalty", lambda v: v is not None and v != 1.0),
    ("no_repeat_ngram_size", lambda v: v is not None and v > 0),
    ("encoder_no_repeat_ngram_size", lambda v: v is not None and v > 0),
    ("bad_words_ids", lambda v: v is not None),
    ("sequence_bias", lambda v: v is not None),
    ("min_length", lambda v: v is not None and v > 0),
    ("min_new_tokens", lambda v: v is not None and v > 0),
    ("forced_bos_token_id", lambda v: v is not None),
    ("forced_eos_token_id", lambda v: v is not None),
    ("suppress_tokens", lambda v: v is not None),
    ("begin_suppress_tokens", lambda v: v is not None),
    ("exponential_decay_length_penalty", lambda v: v is not None),
    ("guidance_scale", lambda v: v is not None and v != 1),
    ("num_beams", lambda v: v is not None and v > 1),
)
# The fields that decide which warpers generate() builds (the recorder builds the same from them).
SAMPLER_FIELDS = ("do_sample", "temperature", "top_k", "top_p", "min_p", "num_beams") + tuple(
    name for name, _ in _UNSEEN_WARPERS
)
# Global defaults resolve_generation_config leaves unset: generate() treats an unset length as "not
# given by the user" (a set max_length next to max_new_tokens is a warning on every call).
_LENGTH_DEFAULTS = ("max_length", "min_length")
_INT64_MAX = 2**63 - 1


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "this needs transformers: pip install 'sampling-mask[transformers]'",
            field="generation_config",
        ) from None
    return transformers


def generation_defaults() -> dict[str, Any]:
    """The values ``generate()`` fills in for unset (``None``) fields, read from the installed
    transformers: ``GenerationConfig._get_default_generation_params()`` (5.x), else the fields of a
    fresh ``GenerationConfig()`` (4.x sets them in ``__init__``)."""
    config_class = transformers_module().GenerationConfig
    defaults = getattr(config_class, "_get_default_generation_params", None)  # transformers' own table
    if callable(defaults):
        return dict(defaults())
    return {key: value for key, value in vars(config_class()).items() if not key.startswith("_")}


def config_dict(config: Any, field: str) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a GenerationConfig or a mapping", field=field)


def config_error(exc: Exception, field: str) -> SamplingMaskError:
    """transformers' own refusal of a config value (its ``validate()``), as ``E_SCHEMA``."""
    return SamplingMaskError(ErrorCode.E_SCHEMA, f"transformers refuses the config: {exc}", field=field)


def resolve_generation_config(generation_config: Any = None, *, model: Any = None, **kwargs: Any) -> Any:
    """The ``GenerationConfig`` ``generate(generation_config=..., **kwargs)`` of ``model`` really uses:
    ``kwargs`` > ``generation_config`` > ``model.generation_config`` > :func:`generation_defaults`
    (``_prepare_generation_config``: only ``None`` fields are filled from the lower levels). The
    global ``max_length`` / ``min_length`` defaults stay unset, as ``generate()`` treats an unset
    length (``max_new_tokens`` wins silently), so the result can be passed to ``generate()``."""
    config_class = transformers_module().GenerationConfig
    try:
        if generation_config is None:
            config = config_class()
        elif isinstance(generation_config, Mapping):
            config = config_class(**generation_config)
        elif isinstance(generation_config, config_class):
            config = copy.deepcopy(generation_config)
        else:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"expected a GenerationConfig or a mapping, got {type(generation_config).__name__}",
                field="generation_config",
            )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SamplingMaskError):
            raise
        raise config_error(exc, "generation_config") from None
    lower = (
        [config_dict(get_field(model, "generation_config", None), "model.generation_config")]
        if model is not None
        else []
    )
    lower.append({k: v for k, v in generation_defaults().items() if k not in _LENGTH_DEFAULTS})
    for level in lower:
        for key, value in level.items():
            if not key.startswith("_") and getattr(config, key, None) is None and value is not None:
                setattr(config, key, value)
    for key, value in kwargs.items():
        setattr(config, key, value)
    return config


def _is_on(name: str, on: Any, value: Any) -> bool:
    try:
        return bool(on(value))
    except TypeError:  # a string where a number belongs
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"{name}={value!r} is not a number", field=f"generation_config.{name}"
        ) from None


def unseen_warpers(generation_config: Any) -> list[str]:
    """``name=value`` of each sampling warper a config turns on that no recorder or rule here builds
    (``typical_p``, ``epsilon_cutoff``, ``eta_cutoff``, ``top_h``, a watermark)."""
    cfg = config_dict(generation_config, "generation_config")
    return [f"{name}={cfg.get(name)!r}" for name, on in _UNSEEN_WARPERS if _is_on(name, on, cfg.get(name))]


def unseen_processors(generation_config: Any) -> list[str]:
    """``name=value`` of each processor a resolved config turns on that ``rule="hf"`` (temperature,
    top-k, top-p, min-p) does not reproduce; ``do_sample=False`` (greedy) is named too."""
    cfg = config_dict(generation_config, "generation_config")
    named = [] if cfg.get("do_sample") else [f"do_sample={cfg.get('do_sample')!r} (greedy: no warpers)"]
    for name, on in _UNSEEN_WARPERS + _UNSEEN_PROCESSORS:
        value = cfg.get(name)
        if _is_on(name, on, value):
            named.append(f"{name}={value!r}")
    return named


def _real(value: Any, field: str) -> float:
    """A finite real number (int or float, never a bool or a string), as a float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"expected a number, got {type(value).__name__}", field=field)
    number = float(value)
    if not np.isfinite(number):
        raise SamplingMaskError(ErrorCode.E_RANGE, f"expected a finite number, got {number}", field=field)
    return number


def positive_temperature(value: Any, field: str) -> float:
    temperature = _real(value, field)
    if temperature <= 0.0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"temperature must be > 0, got {temperature}", field=field)
    return temperature


def _unit(value: Any, field: str) -> float | None:
    if value is None:
        return None
    number = _real(value, field)
    if not 0.0 <= number <= 1.0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"expected a value in [0, 1], got {number}", field=field)
    return number


def sampler_settings(generation_config: Any, *, resolve: bool = True) -> dict[str, Any]:
    """``temperature``, ``top_k``, ``top_p``, ``min_p`` of a config after ``generate()``'s defaults
    (:func:`resolve_generation_config` unless ``resolve=False``), ready for ``support_from_logits``.
    ``E_SCHEMA`` / ``E_RANGE`` naming the field for a value that is not a number in its domain."""
    config = resolve_generation_config(generation_config) if resolve else generation_config
    cfg = config_dict(config, "generation_config")
    temperature = cfg.get("temperature")
    top_k = cfg.get("top_k")
    if top_k is not None and (not is_int(top_k) or int(top_k) < 0):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"top_k={top_k!r} is not an integer >= 0", field="generation_config.top_k"
        )
    return {
        "temperature": 1.0
        if temperature is None
        else positive_temperature(temperature, "generation_config.temperature"),
        "top_k": int(top_k) if top_k else None,
        "top_p": _unit(cfg.get("top_p"), "generation_config.top_p"),
        "min_p": _unit(cfg.get("min_p"), "generation_config.min_p"),
    }


def eos_token_ids(generation_config: Any = None, eos_token_id: Any = None) -> list[int]:
    """The EOS ids: ``eos_token_id`` (an int, a list or a 1-D tensor), else the config's; ``[]`` when
    none is set. ``E_SCHEMA`` for anything else (bools included), ``E_RANGE`` for an id that no token
    id can equal (negative, or beyond int64)."""
    value = (
        eos_token_id
        if eos_token_id is not None
        else config_dict(generation_config, "generation_config").get("eos_token_id")
    )
    if value is None:
        return []
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        if getattr(getattr(value, "device", None), "type", None) == "meta":
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a meta tensor holds no values", field="eos_token_id")
        value = value.tolist()
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(is_int(v) for v in values):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "eos_token_id must be an int or a list of ints", field="eos_token_id"
        )
    bad = [int(v) for v in values if not 0 <= int(v) <= _INT64_MAX]
    if bad:
        raise SamplingMaskError(
            ErrorCode.E_RANGE, f"eos_token_id {bad[0]} is outside [0, 2**63)", field="eos_token_id", value=bad[0]
        )
    return [int(v) for v in values]
