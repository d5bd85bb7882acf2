"""Capture from Hugging Face transformers: the sampling mask of ``generate()``.

Read in transformers 5.23.0 (huggingface/transformers, ``src/transformers/generation/utils.py``
``GenerationMixin.generate``, ``_prepare_generation_config``, ``_prepare_special_tokens``,
``_get_logits_processor``, ``_merge_criteria_processor_list``, ``_sample`` and ``_assisted_decoding``;
``generation/candidate_generator.py`` ``AssistedCandidateGenerator`` and
``PromptLookupCandidateGenerator.get_candidates``; ``generation/configuration_utils.py``
``GenerationConfig.get_generation_mode``; ``generation/logits_process.py`` ``LogitsProcessorList`` and
the processors). In ``_sample`` every step computes ``next_token_scores = logits_processor(input_ids,
logits.float())`` and samples from ``softmax(next_token_scores)``: the support of a generated token is
the set of ids whose *processed* score is finite, and the sampler's log-prob is
``log_softmax(next_token_scores)[token]``. Once a stopping criterion has ended a sequence
(``unfinished_sequences`` 0), ``_sample`` writes ``pad_token_id`` in place of its next tokens when it
has an EOS criterion (``has_eos_stopping_criteria``; ``_prepare_special_tokens`` takes the first EOS id
when ``pad_token_id`` is unset): those tokens were never sampled.

**What is accepted** (each has an exactness test against ``generate()``'s own processed scores,
``tests/test_trainers_transformers*.py``); everything else is a
:class:`SamplingMaskError` (``E_SCHEMA``) naming what it refused:

- decoding: multinomial sampling (``do_sample=True``, ``GenerationMixin._sample``), and assisted
  sampling (``_assisted_decoding``) with an ``assistant_model`` of the same tokenizer
  (``AssistedCandidateGenerator``) or with ``prompt_lookup_num_tokens``
  (``PromptLookupCandidateGenerator``), as ``GenerationConfig.get_generation_mode`` and the call
  itself say (:func:`~sampling_mask.sampler.generation_config.decoding_refusals`);
- sampling warpers: temperature, top-k, top-p, min-p (``TemperatureLogitsWarper``,
  ``TopKLogitsWarper``, ``TopPLogitsWarper``, ``MinPLogitsWarper``), and ``renormalize_logits``
  (``LogitNormalization``, a shift per row);
- processors, from the config or the caller's ``logits_processor=`` (by exact class): those that only
  set scores to -inf (:data:`~sampling_mask.sampler.generation_config.BANNING_PROCESSORS`:
  ``no_repeat_ngram_size``, bad words, ``min_length`` / ``min_new_tokens``, ``suppress_tokens``,
  ``begin_suppress_tokens``, forced BOS / EOS, ``prefix_allowed_tokens_fn``, top-k / top-p / min-p
  placed before the temperature). Any other processor (``repetition_penalty``, ``sequence_bias``, a
  caller's bias, ...) is refused, or with ``allow_processors_not_replayed=True`` recorded, warned and
  named in ``metadata["processors_not_replayed"]``: the rows and log-probs are then still the
  sampler's own, but replay by temperature over them does not reproduce the sampler;
- ``num_return_sequences``, left-padded prompts, streamers, EOS ids and ``stopping_criteria=``: a
  sequence has rows for the tokens ``generate()`` sampled, up to and including its first EOS; the
  ``pad_token_id`` that ``generate()`` writes after a stopping criterion ended a sequence gets none
  (without an EOS id ``generate()`` writes none and keeps sampling: every token has its row).

- :func:`from_generate_output` reads ``generate(..., do_sample=True, output_scores=True,
  return_dict_in_generate=True)``: ``output.sequences`` [N, prompt + steps] (N = batch x
  ``num_return_sequences``, left-padded prompts share one ``prompt_length``) and ``output.scores``
  (``steps`` tensors [N, V], the processed scores). It sees the output and the config only: a
  caller's processors are not in them (the recorder checks those), and a stop by a caller's criterion
  is read from the pad tokens ``generate()`` wrote after it: exact where the pad id was filtered at
  the stop, refused where the sampler could have drawn it; a pad id that is also an EOS id counts as
  the sampled EOS (the recorder, which sees the stop, is exact there).
- :class:`SamplingMaskRecorder` is a ``LogitsProcessor`` that records the same during generation,
  O(kept ids) memory instead of ``[steps, N, V]`` scores. Called by ``generate()``, it reads what
  ``generate()`` runs from the call itself: the ``LogitsProcessorList`` calling it (its
  ``__call__`` calls each processor from its own frame) and the decoding function calling that list
  (``_sample``, ``_assisted_decoding``), whose ``generation_config`` (the resolved one, the model's
  ``generation_config`` included) and ``unfinished_sequences`` say how it samples and which sequences
  it has stopped. The processors before the recorder in that list must be on the list above (their
  effect is in the scores it receives); the ones after it must be sampling warpers or banning
  processors, which it runs on a copy of the scores: its rows are what ``generate()`` samples from,
  by construction. A call from any other function is refused by its name. An assistant model's
  ``generate()`` (its config has ``is_assistant``) and prompt lookup's probe (ones as logits) call the
  processors before the target model scores the same positions: the recorder leaves those calls
  alone. Steps that ``generate()`` undoes at the end (its deferred stop check, rejected candidates)
  are dropped by :meth:`SamplingMaskRecorder.mask`, which reads the row counts from the returned
  sequences.
- The configuration a recorder builds its own warpers from (through
  :meth:`SamplingMaskRecorder.generate`, and when called outside ``generate()``) is read by
  :mod:`sampling_mask.sampler.generation_config` (its priority of keyword arguments, the given config,
  the model's ``generation_config`` and transformers' own defaults).

transformers is imported only inside the functions that need it.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import warnings
from collections.abc import Mapping
from types import FrameType
from typing import Any

import numpy as np

from ..core.checks import get_field, is_int
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from ..sampler.generation_config import (
    BANNING_PROCESSORS,
    SAMPLER_FIELDS,
    VALUE_PROCESSORS,
    config_dict,
    config_error,
    decoding_refusals,
    eos_token_ids,
    fill_token_id,
    positive_temperature,
    processors_not_replayed,
    resolve_generation_config,
    sampler_settings,
    transformers_module,
    unseen_warpers,
)

__all__ = ["SamplingMaskRecorder", "from_generate_output"]

# what may run after the recorder in generate()'s processor list besides the banning processors: the temperature
# (the rows' temperature companion) and LogitNormalization (log_softmax: a shift per row)
_FOLLOWING = ("TemperatureLogitsWarper", "LogitNormalization")


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


def _eos_lengths(generated: Any, eos: list[int]) -> np.ndarray:
    """Rows per sequence: up to and including the first EOS, else every generated token."""
    import torch

    steps = generated.shape[1]
    lengths = np.full(generated.shape[0], steps, dtype=np.int64)
    if eos and steps:
        is_eos = torch.isin(generated, torch.tensor(eos, dtype=torch.int64)).numpy()
        has = is_eos.any(axis=1)
        lengths[has] = is_eos[has].argmax(axis=1) + 1
    return lengths


def _refuse(refused: list[tuple[str, str]]) -> None:
    """Raise the first ``(field, reason)`` of a config as ``E_SCHEMA`` (the message names them all)."""
    if refused:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "the capture accepts sampling only (module doc): " + "; ".join(reason for _, reason in refused),
            field=f"generation_config.{refused[0][0]}",
        )


def _refuse_config(config: Any, *, assisted: bool = False, sampling_known: bool = True) -> None:
    """A resolved config a capture cannot follow: a decoding other than sampling, a warper not on the
    list. ``sampling_known=False``: ``do_sample`` may still come from a model's config (checked later)."""
    refused = decoding_refusals(config, assisted=assisted)
    if not sampling_known:
        refused = [r for r in refused if r[0] != "do_sample"]
    refused += [(name.split("=", 1)[0], f"the warper {name}") for name in unseen_warpers(config)]
    _refuse(refused)


def _not_replayed(names: list[str], allow: bool) -> list[str]:
    """``names`` of processors replay by temperature does not reproduce (``field=value`` from a config, or a
    caller's class): refused (``E_SCHEMA``, ``field`` the first: ``generation_config.<field>`` or
    ``logits_processor``) unless ``allow``, then warned."""
    if names and not allow:
        first = names[0]
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "replay does not reproduce " + ", ".join(names) + " (they change scores, not only ban ids);"
            " remove them, or pass allow_processors_not_replayed=True to record them knowingly",
            field="generation_config." + first.split("=", 1)[0] if "=" in first else "logits_processor",
        )
    if names:
        warnings.warn(
            "sampling replay does not reproduce " + ", ".join(names) + ": named in metadata['processors_not_replayed']",
            stacklevel=3,
        )
    return names


def _fill_lengths(gen: np.ndarray, lengths: np.ndarray, eos: list[int], fill: int | None, scores: Any) -> np.ndarray:
    """``lengths`` (EOS rows) less the tokens ``generate()`` wrote after a stop: a sequence ending in a run of
    ``fill`` (the pad id) from step ``r``, before its EOS rows end, was stopped at ``r - 1`` when ``fill``
    has no finite score at ``r`` (the sampler could not have drawn it). Where it has one, a sampled pad
    cannot be told from a written one: a fill that is an EOS id counts as the sampled EOS, any other
    fill is refused."""
    import torch

    if fill is None or gen.shape[1] == 0 or not 0 <= fill < scores[0].shape[1]:
        return lengths  # a fill id outside the vocabulary: the range check refuses any token equal to it
    trailing = np.flip(np.cumprod(np.flip(gen == fill, axis=1), axis=1), axis=1).sum(axis=1)
    starts = gen.shape[1] - trailing
    out = lengths.copy()
    for b in np.flatnonzero(starts < lengths):
        r = int(starts[b])
        if bool(torch.isneginf(scores[r][b, fill])):  # filtered: written by generate(), not sampled
            out[b] = r
        elif fill not in eos:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"sequence {b} ends in {int(trailing[b])} pad tokens (pad_token_id={fill}) from step {r}: generate() "
                "writes them after a stopping criterion ended the sequence, and the sampler could also have drawn "
                "them here; record with SamplingMaskRecorder, which sees where generate() stopped each sequence",
                segment=int(b),
                row=r,
                field="sequences",
            )
    return out


def _assemble(
    step_parts: list[tuple[np.ndarray, np.ndarray]],
    lengths: np.ndarray,
    generated: np.ndarray,
    sampled_logprobs: np.ndarray,
    *,
    vocab: int,
    temperature: np.ndarray,
    metadata: dict[str, Any],
    limits: Limits,
) -> SamplingMask:
    """One segment per sequence from per-step ``(sequence index, id)`` pairs (row-major per step);
    ``temperature`` per step."""
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
        temperature=np.asarray(temperature, dtype=np.float32)[t_of_row],
        metadata=metadata,
        limits=limits,
    )


def _metadata(producer: str, not_replayed: list[str], metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"producer": producer}
    if not_replayed:
        out["processors_not_replayed"] = ", ".join(not_replayed)  # metadata values are scalars
    out.update(metadata or {})
    return out


def from_generate_output(
    output: Any,
    *,
    prompt_length: int,
    generation_config: Any,
    model: Any = None,
    eos_token_id: Any = None,
    temperature: float | None = None,
    allow_processors_not_replayed: bool = False,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """The mask of ``generate(..., output_scores=True, return_dict_in_generate=True)``'s ``output``
    (see the module doc for what is accepted); assisted and prompt-lookup generation too (their
    ``scores`` hold the target model's processed scores of each accepted token). ``prompt_length``:
    ``input_ids.shape[1]`` of the (left-padded) prompts. ``generation_config``: the config (or mapping)
    ``generate()`` ran with; with ``model=`` it is resolved as ``generate()`` resolves it (the model's
    ``generation_config`` fills what it leaves unset), without one it is taken as complete (as
    :func:`resolve_generation_config` or ``recorder.generation_config`` give it). It gives the decoding
    (refused unless sampling), the EOS ids, the pad id, the ``temperature`` companion and the processors;
    ``eos_token_id`` / ``temperature`` override it. ``allow_processors_not_replayed``: record a config
    whose processors change score values (``repetition_penalty``, ...), warned and named in
    ``metadata["processors_not_replayed"]``, instead of refusing it.

    Rows: per sequence, up to and including its first EOS, less the pad tokens ``generate()`` wrote
    after a stop (module doc). A row's support is its finite scores; ``-inf`` is a filtered id.
    Log-probs are computed in float64 after subtracting the row's maximum, so huge scores stay exact.
    Errors, each naming the field (and the sequence as ``segment``, the step as ``row``): ``E_SCHEMA``
    for a beam search output (``beam_indices`` / ``sequences_scores``), a config that does not sample
    (``generation_config.<field>``), a processor not replayed, a pad run that may have been sampled,
    no scores, or a value that is not a tensor (meta and sparse tensors included) or a number;
    ``E_DTYPE`` for non-integer (bool) sequences or non-float scores; ``E_SHAPE`` when the scores and
    the sequences disagree; ``E_RANGE`` for a NaN or ``+inf`` score of a generated token's row (not a
    valid score), an id outside the vocabulary, an EOS id beyond int64, a temperature <= 0;
    ``E_MISSING_SAMPLED`` if a sampled id has no finite score."""
    import torch

    for name in ("beam_indices", "sequences_scores"):
        if get_field(output, name, None) is not None:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"a beam search output ({name}): a beam's tokens come from several beams' rows, none sampled",
                field=f"output.{name}",
            )
    if generation_config is None and model is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "pass the generation_config generate() ran with (and model=, whose generation_config fills it)",
            field="generation_config",
        )
    config = resolve_generation_config(generation_config, model=model)
    _refuse_config(config)
    not_replayed = _not_replayed(processors_not_replayed(config), allow_processors_not_replayed)
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
        temperature = sampler_settings(config, resolve=False)["temperature"]
    temperature = positive_temperature(temperature, "temperature")
    generated = _sequences(get_field(output, "sequences", where="output"), prompt_length)[:, int(prompt_length) :]
    num_seq, steps = generated.shape
    if len(scores) != steps:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(scores)} score steps for {steps} generated tokens", field="scores"
        )
    eos = eos_token_ids(config, eos_token_id)
    gen = generated.numpy()
    checked: list[Any] = []
    vocab: int | None = None
    for t, step_scores in enumerate(scores):
        checked.append(_step_scores(step_scores, t, num_seq, vocab))
        vocab = int(checked[-1].shape[1])
    lengths = _fill_lengths(gen, _eos_lengths(generated, eos), eos, fill_token_id(config, eos), checked)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    logprobs = np.zeros((num_seq, steps), dtype=np.float64)
    for t, s in enumerate(checked):
        active = np.flatnonzero(lengths > t)
        if active.size == 0:
            continue
        if int(gen[active, t].max()) >= s.shape[1] or int(gen[active, t].min()) < 0:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, f"a generated id at step {t} is outside [0, {s.shape[1]})", field="sequences"
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
        temperature=np.full(steps, temperature),
        metadata=_metadata("sampling_mask.trainers.transformers.from_generate_output", not_replayed, metadata),
        limits=limits,
    )


@dataclasses.dataclass(frozen=True)
class _Caller:
    """What ``generate()`` runs when its processor list calls the recorder (module doc)."""

    #: "sample" / "assisted": the target model's step (``_sample`` / ``_assisted_decoding``); "assistant" /
    #: "probe": an assistant model's step or prompt lookup's probe, whose positions the target scores again
    kind: str
    processors: Any  # the LogitsProcessorList calling the recorder
    config: Any  # the GenerationConfig generate() runs with (None for the probe)
    finished: Any  # [N] bool on the CPU: sequences generate() has stopped and now fills (None: it fills none)


_CODES: dict[Any, str] = {}


def _codes() -> dict[Any, str]:
    """The code objects of the functions that may call a recorder in ``generate()``: the processor list's
    ``__call__`` ("list") and the functions that call the list."""
    if not _CODES:
        transformers_module()
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
        from transformers.generation.logits_process import LogitsProcessorList
        from transformers.generation.utils import GenerationMixin

        _CODES[LogitsProcessorList.__call__.__code__] = "list"
        # transformers' decoding functions are private: their code objects say which one is running
        _CODES[GenerationMixin._sample.__code__] = "sample"  # noqa: SLF001
        _CODES[GenerationMixin._assisted_decoding.__code__] = "assisted"  # noqa: SLF001
        _CODES[PromptLookupCandidateGenerator.get_candidates.__code__] = "probe"
    return _CODES


def _caller(frame: FrameType | None) -> _Caller | None:
    """What called the recorder from ``frame``: None unless a ``LogitsProcessorList`` (a direct call);
    ``E_SCHEMA`` naming the function when that list is called by anything but ``_sample``,
    ``_assisted_decoding`` with a candidate generator the capture follows (an assistant model of the
    same tokenizer, prompt lookup) or prompt lookup's probe: beam search, ``custom_generate``, a
    model's own loop."""
    codes = _codes()
    if frame is None or codes.get(frame.f_code) != "list":
        return None
    decoder = frame.f_back
    kind = codes.get(decoder.f_code) if decoder is not None else None
    if decoder is None or kind is None or kind == "list":
        name = getattr(decoder.f_code, "co_qualname", decoder.f_code.co_name) if decoder is not None else "?"
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"generate()'s processors were called by {name}: the recorder follows sampling only "
            "(GenerationMixin._sample, _assisted_decoding); beam search and other decoding loops are refused",
            field="decoding",
        )
    processors, local = frame.f_locals.get("self"), decoder.f_locals
    if kind == "probe":
        return _Caller("probe", processors, None, None)
    config = local.get("generation_config")
    if getattr(config, "is_assistant", False):
        return _Caller("assistant", processors, config, None)
    finished = None
    if kind == "assisted":
        from transformers.generation.candidate_generator import (
            AssistedCandidateGenerator,
            PromptLookupCandidateGenerator,
        )

        generator = type(local.get("candidate_generator"))
        if generator not in (AssistedCandidateGenerator, PromptLookupCandidateGenerator):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"assisted generation by {generator.__name__}: the recorder follows an assistant model of the "
                "same tokenizer (AssistedCandidateGenerator) or prompt lookup, not an assistant_tokenizer's "
                "re-tokenized candidates or other generators",
                field="assistant_model",
            )
    elif local.get("has_eos_stopping_criteria") and local.get("unfinished_sequences") is not None:
        finished = (local["unfinished_sequences"] == 0).cpu()  # _sample fills these with its pad id
    return _Caller(kind, processors, config, finished)


def _is_one_of(processor: Any, names: tuple[str, ...]) -> bool:
    """``processor`` is an instance of exactly one of transformers' processor classes ``names`` (a
    subclass may change what its parent does: it is not on the list)."""
    from transformers.generation import logits_process

    name = type(processor).__name__
    return name in names and type(processor) is getattr(logits_process, name, None)


def _processor_name(processor: Any, config: Any) -> str:
    """How ``processors_not_replayed`` names a processor: ``field=value`` when generate() built it from its
    config (:data:`VALUE_PROCESSORS`), else its class."""
    for field, class_name, on in VALUE_PROCESSORS:
        value = getattr(config, field, None)
        if _is_one_of(processor, (class_name,)) and on(value):
            return f"{field}={value!r}"
    return f"{type(processor).__qualname__} (logits_processor)"


def _temperature(processors: list[Any]) -> float:
    """The temperature ``processors`` scale the scores by (their temperature warpers in turn)."""
    temperature = 1.0
    for processor in processors:
        if _is_one_of(processor, ("TemperatureLogitsWarper",)):
            temperature *= float(processor.temperature)
    return temperature


class SamplingMaskRecorder:
    """A ``LogitsProcessor`` recording the sampling mask while ``generate()`` runs (the module doc says
    what it accepts and how it reads what ``generate()`` runs).

    ``generation_config`` and ``**kwargs``: the config the recorder builds its own warpers from
    (resolved with ``model``'s ``generation_config`` and transformers' defaults, see
    :func:`resolve_generation_config`). Without ``model=`` it is resolved again with the model of each
    :meth:`generate` call, as ``generate()`` resolves it. A decoding other than sampling or a warper
    not on the list is refused (``E_SCHEMA`` naming it); so is a processor that changes scores, unless
    ``allow_processors_not_replayed=True`` (then warned and named in the mask's
    ``metadata["processors_not_replayed"]``, and in :attr:`processors_not_replayed`). Memory: the kept
    ids and their log-probs, not ``[steps, N, V]``.

    Two ways to use it:

    - ``out = rec.generate(model, input_ids=..., attention_mask=..., max_new_tokens=...)`` calls
      ``model.generate`` with the recorder and its config. For sampling the recorder applies the
      sampling warpers itself and ``generate()`` builds none (the same warpers, in the same place, run
      once instead of twice: ``generate()``'s result is unchanged). With ``assistant_model=`` or
      ``prompt_lookup_num_tokens``, ``generate()`` runs its own warpers as without the recorder (an
      assistant's ``generate()`` runs the target's processors, the recorder among them, and its own
      warpers: the recorder returns its scores unchanged) and the recorder runs them on a copy: the
      same tokens as plain ``generate()``.
      Each call starts a new recording.
    - ``model.generate(..., logits_processor=[rec])``: the recorder runs ``generate()``'s warpers (the
      processors after it in ``generate()``'s list) on a copy of the scores it receives, whatever
      config ``generate()`` was given; the recorder must come after every processor of the caller's.

    Then ``mask = rec.mask(out)`` (``out`` or ``out.sequences``). A recording is one ``generate()``
    call: each call's input must be the recorded prompt plus the tokens sampled so far, or the same
    with fewer tokens (assisted and prompt-lookup generation score candidate tokens and then go back
    to the last accepted one: a later score of a position replaces the earlier ones, so every row is
    the target model's, exactly what its warpers kept). :meth:`mask` ends the recording (the next call
    starts a new one) and checks that the sequences are the recorded prompt and tokens. A call that
    continues nothing while a recording is unread (a second ``generate()`` before :meth:`mask` or
    :meth:`reset`) raises ``E_SCHEMA`` naming the cause; so does a NaN or ``+inf`` score (``E_RANGE``).
    Called directly (not by ``generate()``'s processor list), the recorder records the support its own
    config's warpers keep of the scores it is given, and returns them unchanged.
    """

    def __init__(
        self,
        generation_config: Any = None,
        *,
        model: Any = None,
        allow_processors_not_replayed: bool = False,
        **kwargs: Any,
    ) -> None:
        self.allow_processors_not_replayed = bool(allow_processors_not_replayed)
        #: the names of the processors this recorder was allowed to record although replay does not reproduce them
        self.processors_not_replayed: list[str] = []
        self._requested = (copy.deepcopy(generation_config), dict(kwargs))  # resolved again with generate()'s model
        self._model_known = model is not None
        sampling_known = (
            self._model_known
            or config_dict(generation_config, "generation_config").get("do_sample", kwargs.get("do_sample")) is not None
        )
        self._configure(resolve_generation_config(generation_config, model=model, **kwargs), sampling_known)
        #: per row of the last :meth:`mask`: the probability mass the sampler kept (the support under the
        #: temperature-scaled distribution before truncation), what a trainer without replay is off by.
        self.kept_mass: np.ndarray | None = None
        self._stage = False  # set by generate(): the recorder is generate()'s warper stage
        self.reset()

    def _configure(self, config: Any, sampling_known: bool = True) -> None:
        """Check ``config`` (do_sample only when known: a model's config may set it) and build its warpers."""
        _refuse_config(config, sampling_known=sampling_known)
        self._config_names = self._accept(processors_not_replayed(config))
        self.generation_config = config
        self._own = self._warpers(config)
        self.temperature = _temperature(self._own)

    def _accept(self, names: list[str]) -> list[str]:
        """Processors replay does not reproduce: refused unless allowed, then warned once per recorder."""
        new = [name for name in names if name not in self.processors_not_replayed]
        _not_replayed(new, self.allow_processors_not_replayed)
        self.processors_not_replayed += new
        return names

    @staticmethod
    def _warpers(config: Any) -> list[Any]:
        """``generate()``'s sampling warpers for ``config`` (``_get_logits_processor``, same order), built
        from transformers' own classes; none without ``do_sample``."""
        transformers = transformers_module()
        if not config_dict(config, "generation_config").get("do_sample"):
            return []
        settings = sampler_settings(config, resolve=False)
        warpers: list[Any] = []
        if settings["temperature"] != 1.0:
            warpers.append(transformers.TemperatureLogitsWarper(settings["temperature"]))
        if settings["top_k"]:
            warpers.append(transformers.TopKLogitsWarper(top_k=settings["top_k"], min_tokens_to_keep=1))
        if settings["top_p"] is not None and settings["top_p"] < 1.0:
            warpers.append(transformers.TopPLogitsWarper(top_p=settings["top_p"], min_tokens_to_keep=1))
        if settings["min_p"] is not None:
            warpers.append(transformers.MinPLogitsWarper(min_p=settings["min_p"], min_tokens_to_keep=1))
        return warpers

    def reset(self) -> None:
        """Forget what was recorded; the next call starts a new recording."""
        self.prompt_length: int | None = None
        self.num_sequences: int | None = None
        self.vocab_size: int | None = None
        self._seen: Any = None  # the input of the last recorded step: the prompt + the tokens before it
        self._ended = False  # mask() read the recording
        self._list: Any = None  # generate()'s processor list this recording follows (None: direct calls)
        self._pipeline: tuple[list[Any], list[Any]] = ([], [])  # the recorder's own warpers, the processors after it
        self._step_temperature = 1.0
        self._eos: list[int] = []  # the EOS ids of the decoding this recording follows
        self._named: list[str] = []  # processors_not_replayed of this recording
        self._stopped: np.ndarray | None = None  # per sequence: the first step generate() filled (it stopped before)
        # per step: kept (sequence, id) pairs, their log-probs, each sequence's kept mass, the vocabulary size,
        # the temperature
        self._steps: list[tuple[Any, Any, Any, Any, int, float]] = []

    @property
    def num_steps(self) -> int:
        """Steps recorded so far."""
        return len(self._steps)

    def generate(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        """``model.generate(*args, **kwargs)`` recording its mask (class doc); ``model`` may also be a
        ``generate`` function (a bound method). Generation fields in ``kwargs`` (``max_new_tokens``,
        ``output_scores``, ...) and a ``generation_config`` are merged as ``generate()`` merges them;
        ``E_SCHEMA`` if they change what is sampled (temperature, top-k, top-p, min-p, ...): those belong
        to the recorder's config. A recorder built without ``model=`` resolves its config with this one."""
        run = getattr(model, "generate", model)
        if not callable(run):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a model or its generate function", field="model")
        owner = getattr(run, "__self__", model)
        processors = [p for p in (kwargs.pop("logits_processor", None) or []) if p is not self]
        given = kwargs.pop("generation_config", None)
        mine = self.generation_config
        if not self._model_known:  # generate() fills what the recorder's config leaves unset from this model's
            requested, requested_kwargs = self._requested
            mine = resolve_generation_config(requested, model=owner, **requested_kwargs)
        # what generate() would fill from the model too (a min_p of its own): compared below
        config = resolve_generation_config(mine if given is None else given, model=owner)
        try:
            model_kwargs = config.update(**kwargs)  # generate()'s own split of its keyword arguments
        except (TypeError, ValueError) as exc:
            raise config_error(exc, "generation_config") from None
        ours, theirs = config_dict(mine, "generation_config"), config_dict(config, "generation_config")
        changed = [
            f"{k}={theirs.get(k)!r} (recorder: {ours.get(k)!r})" for k in SAMPLER_FIELDS if ours.get(k) != theirs.get(k)
        ]
        if changed:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "generate() would sample with other settings than the recorder's: " + ", ".join(changed),
                field="generation_config",
            )
        assisted = model_kwargs.get("assistant_model") is not None or config.prompt_lookup_num_tokens is not None
        _refuse_config(config, assisted=assisted)
        if mine is not self.generation_config:
            self._configure(mine)
        run_config = copy.deepcopy(config)
        if not assisted:  # generate() builds no warper: each is off by an explicit value, not None
            run_config.temperature, run_config.top_k, run_config.top_p = 1.0, 0, 1.0
            run_config.min_p = None if config.min_p is None else 0.0  # None would take the model's min_p
        self.reset()
        self._stage = not assisted
        try:
            return run(*args, generation_config=run_config, logits_processor=[*processors, self], **model_kwargs)
        finally:
            self._stage = False

    def _follow(self, caller: _Caller | None) -> None:
        """Set up a new recording: the processors that turn the scores the recorder receives into what is
        sampled, and the checks of what ``generate()`` runs (module doc)."""
        if caller is None:  # a direct call: the recorder's own config is the sampler
            _refuse_config(self.generation_config)
            self._pipeline, self._named = (self._own, []), list(self._config_names)
            self._eos = eos_token_ids(self.generation_config)
        else:
            _refuse(decoding_refusals(caller.config, assisted=caller.kind == "assisted"))  # its warpers: below
            processors = list(caller.processors)  # generate()'s merge holds each of the caller's once
            place = next(i for i, p in enumerate(processors) if p is self)
            head, tail = processors[:place], processors[place + 1 :]
            after = [type(p).__qualname__ for p in tail if not _is_one_of(p, BANNING_PROCESSORS + _FOLLOWING)]
            if after:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    f"{', '.join(after)} runs after the recorder in generate()'s processors: the recorder must come "
                    "after every processor of the caller's, and generate()'s warpers be temperature, top-k, top-p "
                    "and min-p",
                    field="logits_processor",
                )
            self._named = self._accept(
                [_processor_name(p, caller.config) for p in head if not _is_one_of(p, BANNING_PROCESSORS)]
            )
            self._pipeline = (self._own if self._stage else [], tail)
            self._list = caller.processors
            self._eos = eos_token_ids({"eos_token_id": getattr(caller.config, "eos_token_id", None)})
        self._step_temperature = _temperature(self._pipeline[0] + self._pipeline[1])

    def _position(self, input_ids: Any, caller: _Caller | None) -> int:
        """The step ``input_ids`` (prompt + tokens so far) scores; a new recording when none is open."""
        import torch

        n, length = int(input_ids.shape[0]), int(input_ids.shape[1])
        prompt = self.prompt_length
        open_ = prompt is not None and not self._ended and self._seen is not None
        step = length - prompt if prompt is not None else -1
        follows = open_ and n == self.num_sequences and 0 <= step <= len(self._steps)
        if follows and prompt is not None:
            known = prompt + max(step - 1, 0)  # the tokens a recorded step already saw
            follows = torch.equal(input_ids[:, :known].to(self._seen.device), self._seen[:, :known])
        same_call = (caller.processors if caller is not None else None) is self._list
        if not open_ or (follows and step == 0):
            self.reset()  # a new recording (the same prompts scored again by another call start one too)
            self.prompt_length, self.num_sequences = length, n
            self._follow(caller)
            return 0
        if not follows or not same_call:
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

        frame = inspect.currentframe()
        caller = _caller(frame.f_back if frame is not None else None)
        del frame  # no reference cycle through this frame
        if caller is not None and caller.kind in ("assistant", "probe"):
            return scores  # candidates: generate() scores these positions again with the target model
        step = self._position(input_ids, caller)
        with torch.no_grad():
            processed = scaled = scores
            for stage, processors in enumerate(self._pipeline):
                for processor in processors:  # the sampler's own: the recorder's warpers, then generate()'s after it
                    processed = processor(input_ids, processed)
                    if _is_one_of(processor, ("TemperatureLogitsWarper",)):
                        scaled = processor(input_ids, scaled)
                if stage == 0:
                    returned = processed if self._stage else scores
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
            # every sum is shifted by the row's maximum, so huge scores stay exact; the values are the scaled
            # scores (a LogitNormalization after the recorder shifts what is sampled from, not its log-probs)
            full = torch.exp(scaled.float() - peak).sum(dim=-1)
            keep = torch.isfinite(processed)
            nz = torch.nonzero(keep)
            rows = nz[:, 0]
            shifted = scaled.float()[keep] - peak[rows, 0]  # the kept ids only, row-major
            kept = torch.zeros_like(full).index_add_(0, rows, torch.exp(shifted))
            values = shifted - torch.log(kept)[rows]
            pairs = nz.to(torch.int32).cpu()  # (sequence, id) of each kept id: one copy
            vocab = int(scores.shape[-1])
            self._steps.append(
                (pairs[:, 0], pairs[:, 1], values.cpu(), (kept / full).cpu(), vocab, self._step_temperature)
            )
            self._seen = input_ids.detach().clone()
            self.vocab_size = vocab
        if caller is not None and caller.finished is not None and bool(caller.finished.any()):
            if self._stopped is None:
                self._stopped = np.full(self.num_sequences or 0, np.iinfo(np.int64).max, dtype=np.int64)
            newly = caller.finished.numpy().astype(bool) & (self._stopped > step)
            self._stopped[newly] = step  # generate() writes its pad id from this step on: no row
        return returned

    def mask(
        self,
        sequences: Any,
        *,
        eos_token_id: Any = None,
        metadata: Mapping[str, Any] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> SamplingMask:
        """The recorded mask for ``sequences`` (``generate()``'s output or its ``.sequences``): one
        segment per sequence, rows up to and including its first EOS (``eos_token_id``, else those of the
        decoding recorded), none for the tokens ``generate()`` wrote after it stopped a sequence. Ends the
        recording. ``E_SHAPE`` when their size does not match the recording, ``E_SCHEMA`` naming the
        sequence and position where they differ from the recorded prompt and tokens,
        ``E_MISSING_SAMPLED`` for a last token outside its recorded support."""
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
        lengths = _eos_lengths(generated, eos_token_ids(None, eos_token_id) if eos_token_id is not None else self._eos)
        if self._stopped is not None:
            lengths = np.minimum(lengths, self._stopped)
        gen = generated.numpy()
        vocab = vocabs.pop() if vocabs else int(self.vocab_size or 0)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        logprobs = np.zeros((num_seq, steps), dtype=np.float32)
        kept_mass = np.ones((num_seq, steps), dtype=np.float64)
        for t in range(steps):
            seq_t, ids_t, values_t, kept_t, _, _ = self._steps[t]
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
            temperature=np.array([record[5] for record in self._steps[:steps]], dtype=np.float64),
            metadata=_metadata("sampling_mask.trainers.transformers.SamplingMaskRecorder", self._named, metadata),
            limits=limits,
        )
