"""Hugging Face transformers adapter: the sampling mask of ``generate()``.

Read in transformers 5.23.0 (huggingface/transformers, ``src/transformers/generation/utils.py``
``GenerationMixin._prepare_generation_config``, ``_get_logits_processor`` and ``_sample``;
``generation/configuration_utils.py`` ``GenerationConfig._get_default_generation_params``;
``generation/logits_process.py`` the warpers). In ``_sample`` every step computes
``next_token_scores = logits_processor(input_ids, logits.float())`` and samples from
``softmax(next_token_scores)``: the support of a generated token is the set of ids whose *processed*
score is finite, and the sampler's log-prob is ``log_softmax(next_token_scores)[token]``.

- :func:`from_generate_output` reads ``generate(..., do_sample=True, output_scores=True,
  return_dict_in_generate=True)``: ``output.sequences`` [N, prompt + steps] (N = batch x
  ``num_return_sequences``, left-padded prompts share one ``prompt_length``) and ``output.scores``
  (``steps`` tensors [N, V], the processed scores). One segment per returned sequence, one row per
  generated token up to and including its first EOS (any of ``eos_token_id``'s ids); the padding
  after it has no row. Companions: ``sampled_token_ids``, ``sampled_logprobs`` (the sampler's own)
  and ``temperature``.
- :class:`SamplingMaskRecorder` is a ``LogitsProcessor`` that records the same during generation,
  O(kept ids) memory instead of ``[steps, N, V]`` scores. ``generate()`` runs a user's processors
  *before* its sampling warpers (``_get_logits_processor`` merges them first), so the recorder runs
  transformers' own warpers (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``,
  ``MinPLogitsWarper``, instantiated from the same resolved config in ``generate()``'s order) on the
  scores it receives and returns those scores unchanged; ``generate()`` then applies the very same
  warpers. Steps that ``generate()`` undoes at the end (its deferred stop check) are dropped by
  :meth:`SamplingMaskRecorder.mask`, which reads the row counts from the returned sequences.
- :func:`resolve_generation_config` applies ``generate()``'s own priority: keyword arguments, then the
  given config, then the model's ``generation_config``, then the global defaults, which are read from
  the installed transformers at run time (5.x: an unset ``top_k`` is 50).
- :func:`sampler_settings` gives what ``support_from_logits(rule="hf")`` needs from a config, and the
  processors it cannot see (``repetition_penalty``, ``min_new_tokens``, bad words, ...).

transformers is imported only inside the functions that need it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from ._common import get_field

__all__ = [
    "SamplingMaskRecorder",
    "eos_token_ids",
    "from_generate_output",
    "generation_defaults",
    "resolve_generation_config",
    "sampler_settings",
    "unseen_processors",
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


def _transformers() -> Any:
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
    config_class = _transformers().GenerationConfig
    defaults = getattr(config_class, "_get_default_generation_params", None)  # transformers' own table
    if callable(defaults):
        return dict(defaults())
    return {key: value for key, value in vars(config_class()).items() if not key.startswith("_")}


def _as_dict(config: Any, field: str) -> dict[str, Any]:
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a GenerationConfig or a mapping", field=field)


def resolve_generation_config(generation_config: Any = None, *, model: Any = None, **kwargs: Any) -> Any:
    """The ``GenerationConfig`` ``generate(generation_config=..., **kwargs)`` of ``model`` really uses:
    ``kwargs`` > ``generation_config`` > ``model.generation_config`` > :func:`generation_defaults`
    (``_prepare_generation_config``: only ``None`` fields are filled from the lower levels)."""
    config_class = _transformers().GenerationConfig
    if generation_config is None:
        config = config_class()
    elif isinstance(generation_config, Mapping):
        config = config_class(**generation_config)
    else:
        config = copy.deepcopy(generation_config)
    lower = (
        [_as_dict(get_field(model, "generation_config", None), "model.generation_config")] if model is not None else []
    )
    lower.append(generation_defaults())
    for level in lower:
        for key, value in level.items():
            if not key.startswith("_") and getattr(config, key, None) is None and value is not None:
                setattr(config, key, value)
    for key, value in kwargs.items():
        setattr(config, key, value)
    return config


def unseen_processors(generation_config: Any) -> list[str]:
    """``name=value`` of each processor a resolved config turns on that ``rule="hf"`` (temperature,
    top-k, top-p, min-p) does not reproduce; ``do_sample=False`` (greedy) is named too."""
    cfg = _as_dict(generation_config, "generation_config")
    named = [] if cfg.get("do_sample") else [f"do_sample={cfg.get('do_sample')!r} (greedy: no warpers)"]
    for name, on in _UNSEEN_WARPERS + _UNSEEN_PROCESSORS:
        value = cfg.get(name)
        if on(value):
            named.append(f"{name}={value!r}")
    return named


def sampler_settings(generation_config: Any, *, resolve: bool = True) -> dict[str, Any]:
    """``temperature``, ``top_k``, ``top_p``, ``min_p`` of a config after ``generate()``'s defaults
    (:func:`resolve_generation_config` unless ``resolve=False``), ready for ``support_from_logits``."""
    config = resolve_generation_config(generation_config) if resolve else generation_config
    cfg = _as_dict(config, "generation_config")
    temperature = cfg.get("temperature")
    return {
        "temperature": 1.0 if temperature is None else float(temperature),
        "top_k": cfg.get("top_k") or None,
        "top_p": cfg.get("top_p"),
        "min_p": cfg.get("min_p"),
    }


def eos_token_ids(generation_config: Any = None, eos_token_id: Any = None) -> list[int]:
    """The EOS ids: ``eos_token_id`` (an int or a list), else the config's; ``[]`` when none is set."""
    value = (
        eos_token_id
        if eos_token_id is not None
        else _as_dict(generation_config, "generation_config").get("eos_token_id")
    )
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    values = value if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "eos_token_id must be an int or a list of ints", field="eos_token_id"
        )
    return [int(v) for v in values]


def _sequences(sequences: Any, prompt_length: Any) -> Any:
    import torch

    if isinstance(sequences, np.ndarray):
        sequences = torch.from_numpy(sequences)
    if not isinstance(sequences, torch.Tensor) or sequences.ndim != 2 or sequences.dtype.is_floating_point:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "sequences must be an integer tensor [N, L]", field="sequences")
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, (int, np.integer)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "prompt_length must be an integer", field="prompt_length")
    if not 0 <= int(prompt_length) <= sequences.shape[1]:
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            f"prompt_length {int(prompt_length)} outside [0, {sequences.shape[1]}]",
            field="prompt_length",
        )
    return sequences[:, int(prompt_length) :].to("cpu", torch.int64)


def _row_lengths(generated: Any, eos: list[int]) -> np.ndarray:
    """Rows per sequence: up to and including the first EOS, else every generated token."""
    import torch

    steps = generated.shape[1]
    lengths = np.full(generated.shape[0], steps, dtype=np.int64)
    if eos and steps:
        is_eos = torch.isin(generated, torch.tensor(eos, dtype=torch.int64)).numpy()
        has = is_eos.any(axis=1)
        lengths[has] = is_eos[has].argmax(axis=1) + 1
    return lengths


def _assemble(
    step_parts: list[tuple[np.ndarray, np.ndarray]],
    lengths: np.ndarray,
    generated: np.ndarray,
    sampled_logprobs: np.ndarray,
    *,
    vocab: int,
    temperature: float,
    metadata: dict[str, Any],
    limits: Limits,
) -> SamplingMask:
    """One segment per sequence from per-step ``(sequence index, id)`` pairs (row-major per step)."""
    cu = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=cu[1:])
    num_rows = int(cu[-1])
    if step_parts:
        seq = np.concatenate([p[0] for p in step_parts])
        ids = np.concatenate([p[1] for p in step_parts]).astype(np.int32, copy=False)
        step = np.repeat(np.arange(len(step_parts), dtype=np.int64), [p[0].size for p in step_parts])
    else:
        seq = step = np.zeros(0, dtype=np.int64)
        ids = np.zeros(0, dtype=np.int32)
    row = cu[seq] + step
    order = np.argsort(row, kind="stable")  # within a (step, sequence) the ids stay ascending
    ids, row = ids[order], row[order]
    offsets = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=num_rows), out=offsets[1:])
    seq_of_row = np.repeat(np.arange(lengths.size), lengths)
    t_of_row = np.arange(num_rows) - cu[seq_of_row]
    return SamplingMask(
        ids,
        offsets,
        cu_seqlens=cu,
        vocab_size=vocab,
        sampled_token_ids=generated[seq_of_row, t_of_row].astype(np.int32),
        sampled_logprobs=sampled_logprobs[seq_of_row, t_of_row].astype(np.float32),
        temperature=np.full(num_rows, temperature, dtype=np.float32),
        metadata=metadata,
        limits=limits,
    )


def _metadata(config: Any, producer: str, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"producer": producer}
    if config is not None:
        unseen = unseen_processors(config)
        if unseen:
            out["processors_not_replayed"] = ", ".join(unseen)  # metadata values are scalars
    out.update(metadata or {})
    return out


def from_generate_output(
    output: Any,
    *,
    prompt_length: int,
    generation_config: Any = None,
    eos_token_id: Any = None,
    temperature: float | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """The mask of ``generate(..., output_scores=True, return_dict_in_generate=True)``'s ``output``
    (see the module doc). ``prompt_length``: ``input_ids.shape[1]`` of the (left-padded) prompts.
    ``generation_config``: what ``generate()`` ran with (:func:`resolve_generation_config`), for the
    EOS ids, the ``temperature`` companion and ``metadata["processors_not_replayed"]`` (the
    processors temperature replay does not reproduce, comma-separated);
    ``eos_token_id`` / ``temperature`` override it. ``E_SCHEMA`` without scores, ``E_SHAPE`` when the
    scores and the sequences disagree, ``E_MISSING_SAMPLED`` naming the row if a sampled id has no
    finite score."""
    import torch

    scores = get_field(output, "scores", None)
    if scores is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "no scores: call generate(..., output_scores=True, return_dict_in_generate=True)",
            field="scores",
        )
    generated = _sequences(get_field(output, "sequences", where="output"), prompt_length)
    num_seq, steps = generated.shape
    if len(scores) != steps:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(scores)} score steps for {steps} generated tokens", field="scores"
        )
    lengths = _row_lengths(generated, eos_token_ids(generation_config, eos_token_id))
    vocab = None
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    logprobs = np.zeros((num_seq, steps), dtype=np.float32)
    gen = generated.numpy()
    for t, step_scores in enumerate(scores):
        s = torch.as_tensor(step_scores)
        if s.ndim != 2 or s.shape[0] != num_seq or (vocab is not None and s.shape[1] != vocab):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"scores[{t}] must be [{num_seq}, V], got {list(s.shape)}", field="scores"
            )
        vocab = int(s.shape[1])
        active = np.flatnonzero(lengths > t)
        if active.size == 0:
            continue
        if int(gen[active].max(initial=0)) >= vocab or int(gen[active].min(initial=0)) < 0:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, f"a generated id at step {t} is outside [0, {vocab})", field="sequences"
            )
        sub = s[torch.from_numpy(active)].to("cpu", torch.float32)
        keep = torch.isfinite(sub)
        y = torch.from_numpy(gen[active, t])
        hit = keep.gather(1, y[:, None])[:, 0]
        if not bool(hit.all()):
            b = int(active[int(torch.nonzero(~hit)[0, 0])])
            raise SamplingMaskError(
                ErrorCode.E_MISSING_SAMPLED,
                f"sequence {b} step {t}: the sampled id has no finite score",
                segment=b,
                row=t,
                field="scores",
            )
        logprobs[active, t] = (sub.gather(1, y[:, None])[:, 0] - torch.logsumexp(sub, dim=1)).numpy()
        nz = torch.nonzero(keep).numpy()
        parts.append((active[nz[:, 0]], nz[:, 1]))
    if temperature is None:
        temperature = (
            sampler_settings(generation_config, resolve=False)["temperature"] if generation_config is not None else 1.0
        )
    return _assemble(
        parts,
        lengths,
        gen,
        logprobs,
        vocab=vocab if vocab is not None else 0,
        temperature=float(temperature),
        metadata=_metadata(generation_config, "sampling_mask.adapters.transformers.from_generate_output", metadata),
        limits=limits,
    )


class SamplingMaskRecorder:
    """A ``LogitsProcessor`` recording the sampling mask while ``generate()`` runs (see the module doc).

    ``generation_config``: the config ``generate()`` runs with (resolved here with ``model``'s and
    transformers' defaults, see :func:`resolve_generation_config`; pass the same ``**kwargs`` you give
    ``generate()``). Use: ``rec = SamplingMaskRecorder(cfg, model=model)``, ``out =
    model.generate(..., generation_config=cfg, logits_processor=[rec])``, ``mask =
    rec.mask(out.sequences)`` (or ``out`` itself). Memory: the kept ids and their scores, not
    ``[steps, N, V]``. A warper the recorder cannot run (``typical_p``, ``epsilon_cutoff``, ...) is
    refused (``E_SCHEMA`` naming it). Each ``generate()`` call starts a new recording (the recorder
    notices a new prompt by its length); :meth:`reset` forces one.
    """

    def __init__(self, generation_config: Any = None, *, model: Any = None, **kwargs: Any) -> None:
        transformers = _transformers()
        self.generation_config = resolve_generation_config(generation_config, model=model, **kwargs)
        cfg = _as_dict(self.generation_config, "generation_config")
        blocked = [f"{n}={cfg.get(n)!r}" for n, on in _UNSEEN_WARPERS if on(cfg.get(n))]
        if cfg.get("num_beams") not in (None, 1):
            blocked.append(f"num_beams={cfg.get('num_beams')!r}")
        if blocked:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "the recorder cannot reproduce: " + ", ".join(blocked), field="generation_config"
            )
        self._warpers: list[Any] = []
        if cfg.get("do_sample"):
            settings = sampler_settings(self.generation_config, resolve=False)
            if settings["temperature"] != 1.0:
                self._warpers.append(transformers.TemperatureLogitsWarper(settings["temperature"]))
            if settings["top_k"]:
                self._warpers.append(transformers.TopKLogitsWarper(top_k=settings["top_k"], min_tokens_to_keep=1))
            if settings["top_p"] is not None and settings["top_p"] < 1.0:
                self._warpers.append(transformers.TopPLogitsWarper(top_p=settings["top_p"], min_tokens_to_keep=1))
            if settings["min_p"] is not None:
                self._warpers.append(transformers.MinPLogitsWarper(min_p=settings["min_p"], min_tokens_to_keep=1))
        self.temperature = (
            sampler_settings(self.generation_config, resolve=False)["temperature"] if cfg.get("do_sample") else 1.0
        )
        #: per row of the last :meth:`mask`: the probability mass the sampler kept (the support under the
        #: temperature-scaled distribution before truncation), what a trainer without replay is off by.
        self.kept_mass: np.ndarray | None = None
        self.reset()

    def reset(self) -> None:
        """Forget what was recorded."""
        self.prompt_length: int | None = None
        self.num_sequences: int | None = None
        self.vocab_size: int | None = None
        # per step: kept (sequence, id) pairs, their log-probs, each sequence's kept mass
        self._steps: list[tuple[Any, Any, Any, Any]] = []

    @property
    def num_steps(self) -> int:
        """Steps recorded so far."""
        return len(self._steps)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        n, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if self.prompt_length is None or n != self.num_sequences or length != self.prompt_length + len(self._steps):
            self.reset()
            self.prompt_length, self.num_sequences = length, n
        self.vocab_size = int(scores.shape[-1])
        with torch.no_grad():
            processed = scores
            for warper in self._warpers:
                processed = warper(input_ids, processed)
            keep = torch.isfinite(processed)
            lse = torch.logsumexp(processed.float(), dim=-1)
            lse_full = torch.logsumexp(scores.float() / self.temperature, dim=-1)  # before truncation
            nz = torch.nonzero(keep)
            values = processed.float()[keep] - lse[nz[:, 0]]
            kept = torch.exp(lse - lse_full)
            self._steps.append((nz[:, 0].cpu(), nz[:, 1].to(torch.int32).cpu(), values.cpu(), kept.cpu()))
        return scores

    def mask(
        self,
        sequences: Any,
        *,
        eos_token_id: Any = None,
        metadata: Mapping[str, Any] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> SamplingMask:
        """The recorded mask for ``sequences`` (``generate()``'s output or its ``.sequences``): one
        segment per sequence, rows up to and including the first EOS; ``E_SHAPE`` when they do not
        belong to the recording."""
        import torch

        seq_tensor = (
            get_field(sequences, "sequences", sequences) if not isinstance(sequences, torch.Tensor) else sequences
        )
        if self.prompt_length is None:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "nothing recorded: pass the recorder to generate()", field="recorder"
            )
        generated = _sequences(seq_tensor, self.prompt_length)
        num_seq, steps = generated.shape
        if num_seq != self.num_sequences or steps > len(self._steps):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"sequences [{num_seq}, {steps} generated] do not match the recording "
                f"[{self.num_sequences}, {len(self._steps)} steps]",
                field="sequences",
            )
        lengths = _row_lengths(generated, eos_token_ids(self.generation_config, eos_token_id))
        gen = generated.numpy()
        vocab = int(self.vocab_size or 0)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        logprobs = np.zeros((num_seq, steps), dtype=np.float32)
        kept_mass = np.ones((num_seq, steps), dtype=np.float64)
        for t in range(steps):
            seq_t, ids_t, values_t, kept_t = self._steps[t]
            kept_mass[:, t] = kept_t.numpy()
            seq_np, ids_np, values_np = seq_t.numpy(), ids_t.numpy(), values_t.numpy()
            live = lengths[seq_np] > t
            seq_np, ids_np, values_np = seq_np[live], ids_np[live], values_np[live]
            active = np.flatnonzero(lengths > t)
            # the sampled id's position among the step's pairs: key = sequence * V + id, ascending
            keys = seq_np.astype(np.int64) * vocab + ids_np
            want = active.astype(np.int64) * vocab + gen[active, t]
            pos = np.searchsorted(keys, want)
            found = (
                (pos < keys.size) & (keys[np.minimum(pos, max(keys.size - 1, 0))] == want)
                if keys.size
                else np.zeros(active.size, bool)
            )
            if not found.all():
                b = int(active[int(np.argmin(found))])
                raise SamplingMaskError(
                    ErrorCode.E_MISSING_SAMPLED,
                    f"sequence {b} step {t}: the sampled id is outside the recorded support",
                    segment=b,
                    row=t,
                    field="sequences",
                )
            logprobs[active, t] = values_np[pos]
            parts.append((seq_np, ids_np))
        valid = np.arange(steps)[None, :] < lengths[:, None]  # row-major: sequence, then step
        self.kept_mass = kept_mass[valid]
        return _assemble(
            parts,
            lengths,
            gen,
            logprobs,
            vocab=vocab,
            temperature=self.temperature,
            metadata=_metadata(
                self.generation_config, "sampling_mask.adapters.transformers.SamplingMaskRecorder", metadata
            ),
            limits=limits,
        )
