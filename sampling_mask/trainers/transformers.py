"""Capture from Hugging Face transformers: the sampling mask of ``generate()``.

Read in transformers 5.23.0 (huggingface/transformers, ``src/transformers/generation/utils.py``
``GenerationMixin._prepare_generation_config``, ``_get_logits_processor``, ``_sample`` and
``_assisted_decoding``; ``generation/candidate_generator.py``;
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
  scores it receives. Beside ``generate()``'s warpers it returns those scores unchanged and
  ``generate()`` applies the very same warpers again; through :meth:`SamplingMaskRecorder.generate`
  ``generate()`` builds no warper (each is off by an explicit value) and the recorder returns the
  processed scores: the same warpers in the same place, run once. Assisted generation
  (``_assisted_decoding``, transformers 5.23) calls the processors for each candidate position with
  ``candidate_input_ids[:, :cur_len + i]``, and its candidate generators (the assistant's own
  ``generate()``, prompt lookup's probe with ones) call them before that: a later call for a
  position replaces the earlier ones. Steps that ``generate()`` undoes at the end (its deferred stop
  check, rejected candidates) are dropped by :meth:`SamplingMaskRecorder.mask`, which reads the row
  counts from the returned sequences.
- The configuration ``generate()`` really runs with is read by
  :mod:`sampling_mask.sampler.generation_config` (its priority of keyword arguments, the given config,
  the model's ``generation_config`` and transformers' own defaults).

transformers is imported only inside the functions that need it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.checks import get_field, is_int
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from ..sampler.generation_config import (
    SAMPLER_FIELDS,
    config_dict,
    config_error,
    eos_token_ids,
    positive_temperature,
    resolve_generation_config,
    sampler_settings,
    transformers_module,
    unseen_processors,
    unseen_warpers,
)

__all__ = ["SamplingMaskRecorder", "from_generate_output"]


def _tensor(value: Any, field: str) -> Any:
    """A strided torch tensor with values (numpy arrays are wrapped): ``E_SCHEMA`` for anything else,
    meta and sparse tensors included."""
    import torch

    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected numbers, got {value.dtype}", field=field)
        value = torch.from_numpy(np.array(value, dtype=value.dtype.newbyteorder("=")))
    if not isinstance(value, torch.Tensor):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"expected a tensor, got {type(value).__name__}", field=field)
    if value.device.type == "meta":
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "a meta tensor holds no values", field=field)
    if value.layout != torch.strided:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"expected a dense tensor, got {value.layout}", field=field)
    return value


def _sequences(sequences: Any, prompt_length: Any) -> Any:
    """``sequences`` [N, L] as int64 on the CPU; ``E_DTYPE`` unless they hold integers (bools are
    not token ids)."""
    import torch

    tensor = _tensor(sequences, "sequences")
    if tensor.dtype == torch.bool or tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"token ids must be integers, got {tensor.dtype}", field="sequences")
    if tensor.ndim != 2:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"sequences must be [N, L], got {list(tensor.shape)}", field="sequences"
        )
    if not is_int(prompt_length):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "prompt_length must be an integer", field="prompt_length")
    if not 0 <= int(prompt_length) <= tensor.shape[1]:
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            f"prompt_length {int(prompt_length)} outside [0, {tensor.shape[1]}]",
            field="prompt_length",
        )
    return tensor.detach().to("cpu", torch.int64)


def _step_scores(value: Any, t: int, num_seq: int, vocab: int | None) -> Any:
    """``scores[t]``: a float tensor [N, V] with V the same at every step."""
    field = f"scores[{t}]"
    s = _tensor(value, field)
    if not s.dtype.is_floating_point:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"scores must be floats, got {s.dtype}", field=field)
    if s.ndim != 2 or s.shape[0] != num_seq or s.shape[1] == 0 or (vocab is not None and s.shape[1] != vocab):
        want = f"[{num_seq}, {'V' if vocab is None else vocab}]"
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"scores[{t}] must be {want}, got {list(s.shape)}", field="scores")
    return s


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
    (see the module doc); assisted and prompt-lookup generation too (their ``scores`` hold the target
    model's processed scores of each accepted token). ``prompt_length``: ``input_ids.shape[1]`` of
    the (left-padded) prompts. ``generation_config``: what ``generate()`` ran with
    (:func:`resolve_generation_config`), for the EOS ids, the ``temperature`` companion and
    ``metadata["processors_not_replayed"]`` (the processors temperature replay does not reproduce,
    comma-separated); ``eos_token_id`` / ``temperature`` override it.

    A row's support is its finite scores; ``-inf`` is a filtered id. Log-probs are computed in
    float64 after subtracting the row's maximum, so huge scores stay exact. Errors, each naming the
    field (and the sequence as ``segment``, the step as ``row``): ``E_SCHEMA`` without scores or for a
    value that is not a tensor (meta and sparse tensors included) or a number; ``E_DTYPE`` for
    non-integer (bool) sequences or non-float scores; ``E_SHAPE`` when the scores and the sequences
    disagree; ``E_RANGE`` for a NaN or ``+inf`` score of a generated token's row (not a valid score),
    an id outside the vocabulary, an EOS id beyond int64, a temperature <= 0; ``E_MISSING_SAMPLED``
    if a sampled id has no finite score."""
    import torch

    scores = get_field(output, "scores", None)
    if scores is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "no scores: call generate(..., output_scores=True, return_dict_in_generate=True)",
            field="scores",
        )
    if not isinstance(scores, (tuple, list)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"scores must be a tuple of [N, V] tensors, got {type(scores).__name__}", field="scores"
        )
    if temperature is None:
        temperature = (
            sampler_settings(generation_config, resolve=False)["temperature"] if generation_config is not None else 1.0
        )
    temperature = positive_temperature(temperature, "temperature")
    generated = _sequences(get_field(output, "sequences", where="output"), prompt_length)[:, int(prompt_length) :]
    num_seq, steps = generated.shape
    if len(scores) != steps:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(scores)} score steps for {steps} generated tokens", field="scores"
        )
    lengths = _row_lengths(generated, eos_token_ids(generation_config, eos_token_id))
    vocab = None
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    logprobs = np.zeros((num_seq, steps), dtype=np.float64)
    gen = generated.numpy()
    for t, step_scores in enumerate(scores):
        s = _step_scores(step_scores, t, num_seq, vocab)
        vocab = int(s.shape[1])
        active = np.flatnonzero(lengths > t)
        if active.size == 0:
            continue
        if int(gen[active, t].max()) >= vocab or int(gen[active, t].min()) < 0:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, f"a generated id at step {t} is outside [0, {vocab})", field="sequences"
            )
        sub = s.detach()[torch.from_numpy(active).to(s.device)].to("cpu", torch.float64)
        invalid = torch.isnan(sub).any(1) | torch.isposinf(sub).any(1)
        if bool(invalid.any()):
            b = int(active[int(torch.nonzero(invalid)[0, 0])])
            raise SamplingMaskError(
                ErrorCode.E_RANGE,
                f"sequence {b} step {t}: a NaN or +inf score (a score is finite, or -inf for a filtered id)",
                segment=b,
                row=t,
                field="scores",
            )
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
        shifted = sub - sub.amax(1, keepdim=True)  # every row has a finite score (its sampled id)
        logprobs[active, t] = (shifted.gather(1, y[:, None])[:, 0] - torch.logsumexp(shifted, dim=1)).numpy()
        nz = torch.nonzero(keep).numpy()
        parts.append((active[nz[:, 0]], nz[:, 1]))
    return _assemble(
        parts,
        lengths,
        gen,
        logprobs,
        vocab=vocab if vocab is not None else 0,
        temperature=temperature,
        metadata=_metadata(generation_config, "sampling_mask.trainers.transformers.from_generate_output", metadata),
        limits=limits,
    )


class SamplingMaskRecorder:
    """A ``LogitsProcessor`` recording the sampling mask while ``generate()`` runs (see the module doc).

    ``generation_config``: the config ``generate()`` runs with (resolved here with ``model``'s and
    transformers' defaults, see :func:`resolve_generation_config`; pass the same ``**kwargs`` you give
    ``generate()``). A warper the recorder cannot run (``typical_p``, ``epsilon_cutoff``, ...) is
    refused (``E_SCHEMA`` naming it). Memory: the kept ids and their log-probs, not ``[steps, N, V]``.

    Two ways to use it:

    - ``out = rec.generate(model, input_ids=..., attention_mask=..., max_new_tokens=...)`` calls
      ``model.generate`` with the recorder and its config; the recorder then applies the sampling
      warpers itself and ``generate()`` builds none (the same warpers, in the same place, run once
      instead of twice: ``generate()``'s result is unchanged). Each call starts a new recording.
    - ``model.generate(..., generation_config=cfg, logits_processor=[rec])``: the recorder sees the
      scores before ``generate()``'s own warpers and runs the same warpers on them a second time.

    Then ``mask = rec.mask(out)`` (``out`` or ``out.sequences``). A recording is one ``generate()``
    call: each call's input must be the recorded prompt plus the tokens sampled so far, or the same
    with fewer tokens (assisted / speculative / prompt-lookup generation scores candidate tokens and
    then goes back to the last accepted one: a later score of a position replaces the earlier ones,
    so every row is the target model's, exactly what its warpers kept). :meth:`mask` ends the
    recording (the next call starts a new one) and checks that the sequences are the recorded
    prompt and tokens. A call that continues nothing while a recording is unread (a second
    ``generate()`` before :meth:`mask` or :meth:`reset`, or an assistant with its own tokenizer)
    raises ``E_SCHEMA`` naming the cause; so does a NaN or ``+inf`` score (``E_RANGE``).
    """

    def __init__(self, generation_config: Any = None, *, model: Any = None, **kwargs: Any) -> None:
        self.generation_config = resolve_generation_config(generation_config, model=model, **kwargs)
        self._temperature_warper, self._filters = self._warpers(self.generation_config)
        self.temperature = float(getattr(self._temperature_warper, "temperature", 1.0))
        #: per row of the last :meth:`mask`: the probability mass the sampler kept (the support under the
        #: temperature-scaled distribution before truncation), what a trainer without replay is off by.
        self.kept_mass: np.ndarray | None = None
        self._applies_warpers = False  # set by generate(): the recorder is generate()'s warper stage
        self.reset()

    @staticmethod
    def _warpers(config: Any) -> tuple[Any, list[Any]]:
        """``generate()``'s sampling warpers for ``config`` (``_get_logits_processor``, same order):
        the temperature warper (or None) and the filters after it."""
        transformers = transformers_module()
        cfg = config_dict(config, "generation_config")
        blocked = unseen_warpers(cfg)
        if cfg.get("num_beams") not in (None, 1):
            blocked.append(f"num_beams={cfg.get('num_beams')!r}")
        if blocked:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "the recorder cannot reproduce: " + ", ".join(blocked), field="generation_config"
            )
        if not cfg.get("do_sample"):
            return None, []
        settings = sampler_settings(config, resolve=False)
        temperature = None
        if settings["temperature"] != 1.0:
            temperature = transformers.TemperatureLogitsWarper(settings["temperature"])
        filters = []
        if settings["top_k"]:
            filters.append(transformers.TopKLogitsWarper(top_k=settings["top_k"], min_tokens_to_keep=1))
        if settings["top_p"] is not None and settings["top_p"] < 1.0:
            filters.append(transformers.TopPLogitsWarper(top_p=settings["top_p"], min_tokens_to_keep=1))
        if settings["min_p"] is not None:
            filters.append(transformers.MinPLogitsWarper(min_p=settings["min_p"], min_tokens_to_keep=1))
        return temperature, filters

    def reset(self) -> None:
        """Forget what was recorded; the next call starts a new recording."""
        self.prompt_length: int | None = None
        self.num_sequences: int | None = None
        self.vocab_size: int | None = None
        self._seen: Any = None  # the input of the last recorded step: the prompt + the tokens before it
        self._ended = False  # mask() read the recording
        self._run_config: Any = None  # the config of generate() when it runs through self.generate()
        # per step: kept (sequence, id) pairs, their log-probs, each sequence's kept mass, the vocabulary size
        self._steps: list[tuple[Any, Any, Any, Any, int]] = []

    @property
    def num_steps(self) -> int:
        """Steps recorded so far."""
        return len(self._steps)

    def generate(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        """``model.generate(*args, **kwargs)`` recording its mask, the recorder applying the sampling
        warpers (class doc); ``model`` may also be a ``generate`` function (a bound method). Generation
        fields in ``kwargs`` (``max_new_tokens``, ``output_scores``, ...) and a ``generation_config``
        are merged as ``generate()`` merges them; ``E_SCHEMA`` if they change what is sampled
        (temperature, top-k, top-p, min-p, ...): those belong to the recorder's config."""
        run = getattr(model, "generate", model)
        if not callable(run):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a model or its generate function", field="model")
        owner = getattr(run, "__self__", model)
        processors = [p for p in (kwargs.pop("logits_processor", None) or []) if p is not self]
        given = kwargs.pop("generation_config", None)
        # what generate() would fill from the model too (a min_p of its own): compared below
        config = resolve_generation_config(self.generation_config if given is None else given, model=owner)
        try:
            model_kwargs = config.update(**kwargs)  # generate()'s own split of its keyword arguments
        except (TypeError, ValueError) as exc:
            raise config_error(exc, "generation_config") from None
        mine, theirs = (
            config_dict(self.generation_config, "generation_config"),
            config_dict(config, "generation_config"),
        )
        changed = [
            f"{k}={theirs.get(k)!r} (recorder: {mine.get(k)!r})" for k in SAMPLER_FIELDS if mine.get(k) != theirs.get(k)
        ]
        if changed:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "generate() would sample with other settings than the recorder's: " + ", ".join(changed),
                field="generation_config",
            )
        run_config = copy.deepcopy(config)
        if config.do_sample:  # generate() builds no warper: each is off by an explicit value, not None
            run_config.temperature, run_config.top_k, run_config.top_p = 1.0, 0, 1.0
            run_config.min_p = None if config.min_p is None else 0.0  # None would take the model's min_p
        self.reset()
        self._run_config = config
        self._applies_warpers = True
        try:
            return run(*args, generation_config=run_config, logits_processor=[*processors, self], **model_kwargs)
        finally:
            self._applies_warpers = False

    def _position(self, input_ids: Any) -> int:
        """The step ``input_ids`` (prompt + tokens so far) scores; a new recording when none is open."""
        import torch

        n, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        if self.prompt_length is None or self._ended or self._seen is None:
            run_config = self._run_config if self._applies_warpers else None  # kept inside generate() only
            self.reset()
            self._run_config = run_config
            self.prompt_length, self.num_sequences = length, n
            return 0
        step = length - self.prompt_length
        follows = n == self.num_sequences and 0 <= step <= len(self._steps)
        if follows:
            known = self.prompt_length + max(step - 1, 0)  # the tokens a recorded step already saw
            follows = torch.equal(input_ids[:, :known].to(self._seen.device), self._seen[:, :known])
        if not follows:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"a call with {n} sequences of length {length} does not continue the unread recording "
                f"({self.num_sequences} sequences, prompt length {self.prompt_length}, {len(self._steps)} steps): "
                "a second generate() before mask() or reset() (call one of them between generate() calls, "
                "or use recorder.generate(model, ...)), or an assistant that re-tokenizes (assistant_tokenizer=), "
                "which the recorder does not follow",
                field="recorder",
            )
        del self._steps[step:]  # a candidate position scored again (assisted generation): the later score counts
        return step

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        step = self._position(input_ids)
        with torch.no_grad():
            scaled = scores if self._temperature_warper is None else self._temperature_warper(input_ids, scores)
            processed = scaled
            for warper in self._filters:  # they mask ids with -inf, the kept ones keep their scaled value
                processed = warper(input_ids, processed)
            peak = scaled.float().amax(dim=-1, keepdim=True)
            if not bool(torch.isfinite(peak).all()):  # one check per step; the details only when it fails
                bad = torch.isnan(peak[:, 0]) | torch.isposinf(peak[:, 0])
                if bool(bad.any()):
                    b = int(torch.nonzero(bad)[0, 0])
                    raise SamplingMaskError(
                        ErrorCode.E_RANGE,
                        f"sequence {b} step {step}: a NaN or +inf score (a score is finite, or -inf for a filtered id)",
                        segment=b,
                        row=step,
                        field="scores",
                    )
                peak = torch.where(torch.isinf(peak), torch.zeros_like(peak), peak)  # a row of -inf: nothing kept
            # every sum is shifted by the row's maximum, so huge scores stay exact
            full = torch.exp(scaled.float() - peak).sum(dim=-1)
            keep = torch.isfinite(processed)
            nz = torch.nonzero(keep)
            rows = nz[:, 0]
            shifted = processed.float()[keep] - peak[rows, 0]  # the kept ids only, row-major
            kept = torch.zeros_like(full).index_add_(0, rows, torch.exp(shifted))
            values = shifted - torch.log(kept)[rows]
            pairs = nz.to(torch.int32).cpu()  # (sequence, id) of each kept id: one copy
            self._steps.append((pairs[:, 0], pairs[:, 1], values.cpu(), (kept / full).cpu(), int(scores.shape[-1])))
            self._seen = input_ids.detach().clone()
            self.vocab_size = int(scores.shape[-1])
        return processed if self._applies_warpers else scores

    def mask(
        self,
        sequences: Any,
        *,
        eos_token_id: Any = None,
        metadata: Mapping[str, Any] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> SamplingMask:
        """The recorded mask for ``sequences`` (``generate()``'s output or its ``.sequences``): one
        segment per sequence, rows up to and including the first EOS. Ends the recording. ``E_SHAPE``
        when their size does not match the recording, ``E_SCHEMA`` naming the sequence and position
        where they differ from the recorded prompt and tokens, ``E_MISSING_SAMPLED`` for a last token
        outside its recorded support."""
        import torch

        seq_tensor = (
            get_field(sequences, "sequences", sequences) if not isinstance(sequences, torch.Tensor) else sequences
        )
        if self.prompt_length is None or self._seen is None:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "nothing recorded: pass the recorder to generate()", field="recorder"
            )
        self._ended = True
        prompt = self.prompt_length
        full = _sequences(seq_tensor, prompt)
        generated = full[:, prompt:]
        num_seq, steps = generated.shape
        if num_seq != self.num_sequences or steps > len(self._steps):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"sequences [{num_seq}, {steps} generated] do not match the recording "
                f"[{self.num_sequences}, {len(self._steps)} steps]",
                field="sequences",
            )
        known = prompt + max(steps - 1, 0)  # the last token was never an input: its support is checked below
        differ = (full[:, :known] != self._seen[:, :known].to("cpu", torch.int64)).numpy()
        if differ.any():
            b, j = (int(v) for v in np.argwhere(differ)[0])
            where = f"prompt position {j}" if j < prompt else f"generated token {j - prompt}"
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"sequence {b} is not the recorded generation: its {where} differs",
                segment=b,
                field="sequences",
            )
        vocabs = {record[4] for record in self._steps[:steps]}
        if len(vocabs) > 1:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"the recorded steps have vocabularies {sorted(vocabs)}", field="scores"
            )
        config = self._run_config if self._run_config is not None else self.generation_config
        lengths = _row_lengths(generated, eos_token_ids(config, eos_token_id))
        gen = generated.numpy()
        vocab = vocabs.pop() if vocabs else int(self.vocab_size or 0)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        logprobs = np.zeros((num_seq, steps), dtype=np.float32)
        kept_mass = np.ones((num_seq, steps), dtype=np.float64)
        for t in range(steps):
            seq_t, ids_t, values_t, kept_t, _ = self._steps[t]
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
            metadata=_metadata(config, "sampling_mask.trainers.transformers.SamplingMaskRecorder", metadata),
            limits=limits,
        )
