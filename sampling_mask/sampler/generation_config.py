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
- What a capture of ``generate()`` accepts (``sampling_mask.trainers.transformers``):
  :func:`decoding_refusals` names the settings that select a decoding other than sampling
  (``GenerationConfig.get_generation_mode``: beam search of every kind, greedy, DoLa, assisted
  variants other than an assistant model or prompt lookup), :data:`BANNING_PROCESSORS` lists the
  processors that only set scores to -inf (exact under replay), :func:`processors_not_replayed`
  names the config's processors that change score values.
- :func:`eos_token_ids` reads the EOS ids a config or a caller gives; :func:`fill_token_id` the id
  ``generate()`` writes after a sequence's stop.

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
    "BANNING_PROCESSORS",
    "SAMPLER_FIELDS",
    "VALUE_PROCESSORS",
    "config_dict",
    "config_error",
    "decoding_refusals",
    "eos_token_ids",
    "fill_token_id",
    "generation_defaults",
    "positive_temperature",
    "processors_not_replayed",
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
# transformers' processors (``generation/logits_process.py``, by exact class name) that only set scores to -inf and
# leave every other score as it is: the support recorded after them carries their effect, and replay over it
# reproduces the sampler (``ForcedBOSTokenLogitsProcessor`` / ``ForcedEOSTokenLogitsProcessor`` keep a single id,
# whose log-prob is 0 whatever its score). The truncating warpers are among them: before the temperature they cut
# on unscaled scores, still only to -inf.
BANNING_PROCESSORS = (
    "MinLengthLogitsProcessor",
    "MinNewTokensLengthLogitsProcessor",
    "NoRepeatNGramLogitsProcessor",
    "EncoderNoRepeatNGramLogitsProcessor",
    "NoBadWordsLogitsProcessor",
    "PrefixConstrainedLogitsProcessor",
    "ForcedBOSTokenLogitsProcessor",
    "ForcedEOSTokenLogitsProcessor",
    "SuppressTokensLogitsProcessor",
    "SuppressTokensAtBeginLogitsProcessor",
    "TopKLogitsWarper",
    "TopPLogitsWarper",
    "MinPLogitsWarper",
)
# The config fields whose processor (``_get_logits_processor``: field, the class it builds, whether it is on) changes
# score values: the sampled distribution is then not ``softmax(z / T)`` over the support, whatever replays it.
VALUE_PROCESSORS = (
    ("repetition_penalty", "RepetitionPenaltyLogitsProcessor", lambda v: v is not None and v != 1.0),
    ("encoder_repetition_penalty", "EncoderRepetitionPenaltyLogitsProcessor", lambda v: v is not None and v != 1.0),
    ("sequence_bias", "SequenceBiasLogitsProcessor", lambda v: v is not None),
    ("exponential_decay_length_penalty", "ExponentialDecayLengthPenalty", lambda v: v is not None),
    ("guidance_scale", "UnbatchedClassifierFreeGuidanceLogitsProcessor", lambda v: v is not None and v != 1),
    ("remove_invalid_values", "InfNanRemoveLogitsProcessor", lambda v: v is True),
)
# Processors generate() runs before the warpers: the recorded support includes their effect, but a
# rule that recomputes the support from raw logits does not see them, and of the value-changing ones a trainer
# that replays with temperature alone does not reproduce the sampled distribution. (``remove_invalid_values``,
# which changes only NaN and inf scores, is named by processors_not_replayed only.)
_UNSEEN_PROCESSORS = (
    *((name, on) for name, _, on in VALUE_PROCESSORS if name != "remove_invalid_values"),
    ("no_repeat_ngram_size", lambda v: v is not None and v > 0),
    ("encoder_no_repeat_ngram_size", lambda v: v is not None and v > 0),
    ("bad_words_ids", lambda v: v is not None),
    ("min_length", lambda v: v is not None and v > 0),
    ("min_new_tokens", lambda v: v is not None and v > 0),
    ("forced_bos_token_id", lambda v: v is not None),
    ("forced_eos_token_id", lambda v: v is not None),
    ("suppress_tokens", lambda v: v is not None),
    ("begin_suppress_tokens", lambda v: v is not None),
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


def processors_not_replayed(generation_config: Any) -> list[str]:
    """``name=value`` of each processor a resolved config turns on that changes score values
    (:data:`VALUE_PROCESSORS`: ``repetition_penalty``, ``sequence_bias``, ``remove_invalid_values``, ...):
    a capture records the sampler's own support and log-probs, but replay by temperature over that support
    does not reproduce them. Processors that only set scores to -inf are not named."""
    cfg = config_dict(generation_config, "generation_config")
    return [f"{name}={cfg.get(name)!r}" for name, _, on in VALUE_PROCESSORS if _is_on(name, on, cfg.get(name))]


def decoding_refusals(generation_config: Any, *, assisted: bool = False) -> list[tuple[str, str]]:
    """``(field, reason)`` of each setting of a resolved config that makes ``generate()`` decode other than
    by sampling: transformers' own ``GenerationConfig.get_generation_mode`` (``configuration_utils.py``, as
    ``generate()`` calls it) must give ``SAMPLE`` (``GenerationMixin._sample`` with ``do_sample=True``) or,
    with ``assisted`` (an ``assistant_model``) or ``prompt_lookup_num_tokens``, ``ASSISTED_GENERATION``
    (``_assisted_decoding``) with ``do_sample=True`` and a candidate generator this capture follows (an
    assistant model of the same tokenizer, or prompt lookup): not multi-token prediction
    (``use_mtp``), early exit, ``speculation_type`` or an ensemble verification weight (refused in any
    mode: an assistant model is not in the config). Also refused:
    ``token_healing`` (rewrites the prompt) and ``cache_implementation="paged"`` (continuous batching
    takes no logits processor). Beam search of every kind, greedy and contrastive search and DoLa
    have no sampling distribution a mask replays."""
    transformers = transformers_module()
    config = generation_config
    if not isinstance(config, transformers.GenerationConfig):
        config = resolve_generation_config(generation_config)
    mode = transformers.generation.configuration_utils.GenerationMode
    got = config.get_generation_mode(assistant_model=True if assisted else None)
    refused: list[tuple[str, str]] = []
    if got in (mode.BEAM_SEARCH, mode.BEAM_SAMPLE, mode.GROUP_BEAM_SEARCH, mode.CONSTRAINED_BEAM_SEARCH):
        field = "num_beams"
        if got == mode.CONSTRAINED_BEAM_SEARCH:
            field = "constraints" if config.constraints is not None else "force_words_ids"
        refused.append(
            (field, f"{got.value} (num_beams={config.num_beams!r}): a beam's tokens are not sampled from its rows")
        )
    elif got == mode.DOLA_GENERATION:
        refused.append(("dola_layers", f"DoLa decoding (dola_layers={config.dola_layers!r}) contrasts layers"))
    elif config.do_sample is not True:
        refused.append(
            ("do_sample", f"do_sample={config.do_sample!r}: {got.value} picks the argmax, there is no distribution")
        )
    for name in ("use_mtp", "assistant_early_exit", "speculation_type", "assistant_ensemble_weight"):
        value = getattr(config, name, None)
        if value not in (None, False):
            refused.append((name, f"{name}={value!r}: a candidate generator or verification not shown exact"))
    if getattr(config, "token_healing", None):
        refused.append(("token_healing", "token_healing=True rewrites the prompt"))
    if getattr(config, "cache_implementation", None) == "paged":
        refused.append(("cache_implementation", "cache_implementation='paged' (continuous batching) runs no processor"))
    return refused


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


def fill_token_id(generation_config: Any, eos: list[int]) -> int | None:
    """The id ``generate()`` writes in place of a stopped sequence's tokens when it has an EOS id
    (``GenerationMixin._prepare_special_tokens``: ``pad_token_id``, else the first EOS id); None without
    an EOS id (``_sample`` then fills nothing: ``has_eos_stopping_criteria`` is False)."""
    if not eos:
        return None
    pad = config_dict(generation_config, "generation_config").get("pad_token_id")
    if pad is None:
        return eos[0]
    value = pad.tolist() if hasattr(pad, "tolist") and not isinstance(pad, (list, tuple)) else pad
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]  # a tensor of one id, as _prepare_special_tokens makes it
    if not is_int(value) or not 0 <= int(value) <= _INT64_MAX:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"pad_token_id={pad!r} is not a token id", field="generation_config.pad_token_id"
        )
    return int(value)


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
