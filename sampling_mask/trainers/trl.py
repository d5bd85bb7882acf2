"""TRL adapter: sampling replay for ``GRPOTrainer`` (TRL 1.16.0 as released).

Read in the ``trl==1.16.0`` wheel (huggingface/trl release 1.16.0): ``trl/trainer/grpo_trainer.py``
(``__init__``, ``_generate_single_turn``, ``_generate_and_score_completions``, ``_prepare_inputs``,
``_get_per_token_logps_and_entropies``, ``_compute_loss``), ``trl/trainer/utils.py``
(``add_fused_lm_head``: the forward with ``fused_lm_head=True`` returns per-token ``log_probs`` /
``entropy`` over the full vocabulary, from hidden states, at ``args.temperature``;
``shuffle_sequence_dict`` / ``split_tensor_dict``: tensors and lists are permuted and sliced along the
batch) and ``trl/generation/vllm_generation.py`` (colocate: ``LLM(..., logprobs_mode="processed_logprobs")``
then ``self.llm.generate``; server: ``vllm_client.generate``; ``generation_kwargs`` update the
``SamplingParams``).

TRL asks vLLM for processed log-probs (over the support the sampler kept) but scores its own per-token
log-probs over the full vocabulary, so its importance-sampling ratio is biased by the kept mass when
top-p / top-k / min-p truncate. :class:`ReplayGRPOTrainer` (a ``GRPOTrainer`` subclass; the only
change a user makes) fixes that:

- **Only when something truncates.** With TRL's defaults (``top_k=0``, ``top_p=1``, ``min_p=None``;
  for transformers generation, the config ``generate()`` really resolves) the support is the whole
  vocabulary: no mask is requested, captured or carried, and the trainer is plain ``GRPOTrainer``
  (``replay_enabled`` is False).
- **Capture.** transformers generation: a :class:`~sampling_mask.trainers.transformers.SamplingMaskRecorder`
  is added to the ``generate()`` call, and the sampler's own log-probs are returned with the
  completions. vLLM colocate: the engine is built with ``return_sampling_mask=True`` (vLLM >= 0.28) and
  each ``CompletionOutput.sampling_mask`` is read. vLLM server: ``vllm_client.generate``'s response
  must carry ``"sampling_mask"`` (one list of rows per completion; ``trl vllm-serve`` 1.16.0 does not
  return it, so a server that does is needed: the trainer raises ``E_SCHEMA`` naming the field).
  Each capture must give one segment per completion and one row per completion token (``E_SHAPE``).
- **Carry.** ``inputs["sampling_mask"]`` is a list of one-segment :class:`SamplingMask` (one per
  completion, :func:`completion_masks`), so TRL's shuffling and splitting keep each with its
  completion. Memory O(kept ids + rows): never a dense ``[B, L, W]``.
- **Renormalize.** While masks are active, the fused forward of the policy *and of the reference
  model* (``beta > 0``; a PEFT reference is the policy with its adapter off) scores each completion
  token over its row with :func:`~sampling_mask.reference_scorer.masked_logprobs_from_hidden`
  (ragged rows from :func:`completion_support`, never ``[T, V]``): ``old_per_token_logps`` (so the
  vLLM importance-sampling ratio is computed after renormalization), ``ref_per_token_logps`` (so the
  KL is 0 where policy == reference) and the loss's log-probs. A mask that is active but not consumed
  raises rather than fall back to full-vocabulary scores.
- **Entropy.** The per-token entropies TRL uses (its metric, ``top_entropy_quantile``, the entropy
  bonus) are those of the renormalized distribution, and the metric is logged as ``entropy_replay``
  instead of ``entropy`` (which keeps TRL's meaning, full vocabulary, whenever replay is off).
- **Processors.** Settings that change logit values the trainer does not see
  (``repetition_penalty``, ``sequence_bias``, ``guidance_scale``, vLLM's penalties / ``logit_bias`` /
  custom processors, greedy decoding, a ``generation_kwargs`` temperature other than the one TRL
  scores at; :func:`hf_processors_not_replayed`,
  :func:`vllm_processors_not_replayed`) are refused at construction (``E_SCHEMA``, ``field`` the
  first one), or, with ``allow_processors_not_replayed=True``, named in a ``UserWarning`` and the
  log, kept in ``processors_not_replayed`` and counted per batch as
  ``sampling_replay/processors_not_replayed``. Processors that only set ids to -inf
  (``no_repeat_ngram_size``, bad words, ``min_new_tokens``, suppressed / forced tokens; vLLM's
  ``bad_words``, ``allowed_token_ids``, ``min_tokens``, structured outputs) are replayed exactly: the
  recorded support carries them.

Refused at construction, before any generation (``E_SCHEMA`` naming the option): transformers
continuous batching (``use_transformers_continuous_batching``: ``generate_batch`` builds its own
processors and takes none), tools / environments (several generation turns per completion), a custom
``rollout_func``; also models with ``final_logit_softcapping`` / a logit scale, MoE router aux-loss
outputs, vLLM tensor parallel > 1. ``replay_diagnostics=True`` logs, per generation batch,
``sampling_replay/ratio_replay`` (mean over tokens of ``exp(trainer logp - sampler logp)`` with
replay), ``sampling_replay/ratio_full`` (the same over the full vocabulary) and, with transformers
generation, ``sampling_replay/kept_mass`` (the sampler's mean kept probability mass); also kept in
``trainer.replay_log``.

trl is imported when ``ReplayGRPOTrainer`` (built on first access by the module's ``__getattr__``, so
it is not in ``__all__``) or :func:`replay_trainer` is first used.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import types
import warnings
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

import numpy as np

from ..adapters import vllm as vllm_adapter
from ..core.checks import get_field
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, concat

__all__ = [
    "MASK_KEY",
    "completion_masks",
    "completion_support",
    "hf_processors_not_replayed",
    "masks_from_request_outputs",
    "masks_from_server_response",
    "replay_trainer",
    "vllm_processors_not_replayed",
    "vllm_top_k",
]

MASK_KEY = "sampling_mask"
logger = logging.getLogger(__name__)


def masks_from_request_outputs(outputs: Sequence[Any], *, vocab_size: int | None = None) -> SamplingMask:
    """One segment per completion of vLLM ``RequestOutput``s, in TRL's order (``for outputs in
    all_outputs for output in outputs.outputs``). A null ``sampling_mask`` is ``E_SCHEMA``, except on
    a completion without tokens (an aborted request): its segment is empty, as its completion."""
    masks = []
    for r, request in enumerate(_sequence(outputs, "outputs")):
        completions = _sequence(get_field(request, "outputs", where=f"outputs[{r}]"), f"outputs[{r}].outputs")
        for c, output in enumerate(completions):
            token_ids = get_field(output, "token_ids", None)
            empty_ids = isinstance(token_ids, Sized) and not isinstance(token_ids, (str, bytes)) and len(token_ids) == 0
            if get_field(output, "sampling_mask", None) is None and empty_ids:
                empty = np.zeros(0, np.int32)
                masks.append(
                    SamplingMask(
                        empty, np.zeros(1, np.int64), cu_seqlens=[0, 0], vocab_size=vocab_size, sampled_token_ids=empty
                    )
                )
                continue
            try:
                mask = vllm_adapter.from_completion_output(output, vocab_size=vocab_size)
            except SamplingMaskError as exc:
                raise SamplingMaskError(
                    exc.code, f"request {r} completion {c}: {exc.message}", field=exc.field, row=exc.row
                ) from None
            assert mask is not None  # on_missing="raise"
            masks.append(mask)
    return _segments(masks)


def _sequence(value: Any, field: str) -> Sequence[Any]:
    """``value`` if it is a sequence (not text), else ``E_SCHEMA`` naming ``field``."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes, bytearray)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"expected a sequence, got {type(value).__name__}", field=field, value=repr(value)[:80]
        )
    return value


def _json_list(value: Any, field: str, segment: int | None = None) -> list[Any] | tuple[Any, ...]:
    """``value`` if it is a JSON array (a list or tuple), else ``E_SCHEMA`` naming ``field``."""
    if not isinstance(value, (list, tuple)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"expected a list, got {type(value).__name__}",
            field=field,
            segment=segment,
            value=repr(value)[:80],
        )
    return value


def masks_from_server_response(response: Any, *, vocab_size: int | None = None) -> SamplingMask:
    """One segment per completion of a ``vllm_client.generate`` response carrying ``"sampling_mask"``
    (a list, per completion, of rows, each a list of ids) next to ``"completion_ids"`` (a list, per
    completion, of token ids). Network JSON: anything else (a number or null where a list belongs,
    non-integer ids, a count mismatch) is a :class:`SamplingMaskError` whose ``field`` names the
    place (``sampling_mask[i]``, ``completion_ids[i]``) and whose ``segment`` is the completion.
    A completion whose rows are all empty is valid (width 0: nothing recorded, see the spec)."""
    rows = get_field(response, MASK_KEY, None)
    if rows is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "the vLLM server returned no sampling_mask: run a server that returns it (trl vllm-serve 1.16.0 does not)",
            field=MASK_KEY,
        )
    rows = _json_list(rows, MASK_KEY)
    completions = _json_list(get_field(response, "completion_ids", where="response"), "completion_ids")
    if len(rows) != len(completions):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(rows)} masks for {len(completions)} completions", field=MASK_KEY
        )
    masks = []
    for i, (completion_rows, ids) in enumerate(zip(rows, completions, strict=True)):
        completion_rows = _json_list(completion_rows, f"{MASK_KEY}[{i}]", i)
        ids = _json_list(ids, f"completion_ids[{i}]", i)
        try:
            masks.append(vllm_adapter.from_token_ids(completion_rows, sampled_token_ids=ids, vocab_size=vocab_size))
        except SamplingMaskError as exc:
            field = f"completion_ids[{i}]" if exc.field in ("token_ids", "sampled_token_ids") else f"{MASK_KEY}[{i}]"
            raise SamplingMaskError(
                exc.code, f"completion {i}: {exc.message}", field=field, row=exc.row, segment=i, value=exc.value
            ) from None
    return _segments(masks)


def _segments(masks: list[SamplingMask]) -> SamplingMask:
    if not masks:
        return SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=[0])
    return concat(masks)


def completion_masks(mask: SamplingMask) -> list[SamplingMask]:
    """``inputs["sampling_mask"]`` as the trainer carries it: one one-segment :class:`SamplingMask`
    per completion (views, no copy), a list, so TRL's ``shuffle_sequence_dict`` and
    ``split_tensor_dict`` permute and slice it with ``completion_ids``. Memory O(kept ids + rows)."""
    return [mask.segment(i) for i in range(mask.num_segments)]


def completion_support(parts: Sequence[Any], valid: Any) -> tuple[Any, Any]:
    """Ragged ``(ids int64 [P], offsets int64 [N + 1])`` for the ``N = valid.sum()`` scored positions of
    a batch, row-major: ``parts`` holds one mask per completion (:func:`completion_masks`), ``valid``
    is bool ``[completions, completion_length]`` (TRL's labels != -100). Row t of completion b
    belongs to position ``[b, t]``; a scored position past its completion's rows gets an empty row
    (scored over the full vocabulary); rows at unscored positions are dropped. ``E_SCHEMA`` if an
    entry is not a mask of one segment, ``E_SHAPE`` if the counts or lengths disagree."""
    import torch

    valid_np = np.asarray(valid.detach().cpu().numpy() if isinstance(valid, torch.Tensor) else valid, dtype=bool)
    if valid_np.ndim != 2 or len(parts) != valid_np.shape[0]:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{len(parts)} completion masks for a batch of shape {list(valid_np.shape)}",
            field=MASK_KEY,
        )
    for b, part in enumerate(parts):
        if not isinstance(part, SamplingMask) or part.num_segments != 1:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "each completion's mask must be a SamplingMask of one segment",
                field=MASK_KEY,
                segment=b,
            )
    n, width = valid_np.shape
    seg_lens = np.array([p.num_rows for p in parts], dtype=np.int64)
    if seg_lens.size and int(seg_lens.max()) > width:
        b = int(np.argmax(seg_lens))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{int(seg_lens[b])} mask rows for a completion of at most {width} tokens",
            segment=b,
            field=MASK_KEY,
        )
    row_lengths = np.concatenate([p.row_lengths for p in parts]) if parts else np.zeros(0, np.int64)
    ids = np.concatenate([p.ids for p in parts]) if parts else np.zeros(0, np.int32)
    seg = np.repeat(np.arange(n), seg_lens)
    t = np.arange(seg.size) - np.repeat(np.cumsum(seg_lens) - seg_lens, seg_lens)
    grid = np.zeros((n, width), dtype=np.int64)
    grid[seg, t] = row_lengths
    kept_ids = ids[np.repeat(valid_np[seg, t], row_lengths)]
    offsets = np.zeros(int(valid_np.sum()) + 1, dtype=np.int64)
    np.cumsum(grid[valid_np], out=offsets[1:])
    return torch.from_numpy(kept_ids.astype(np.int64)), torch.from_numpy(offsets)


class _ReplayState:
    """The completion masks of the batch being scored, consumed chunk by chunk by the patched forwards."""

    def __init__(self) -> None:
        self.parts: list[SamplingMask] | None = None
        self.offset = 0
        self.logits_to_keep = 0
        self.with_entropy = False

    @contextlib.contextmanager
    def active(self, parts: list[SamplingMask], logits_to_keep: int, with_entropy: bool) -> Iterator[None]:
        self.parts, self.offset, self.logits_to_keep, self.with_entropy = parts, 0, logits_to_keep, with_entropy
        try:
            yield
        finally:
            self.parts, self.offset = None, 0

    def take(self, rows: int) -> list[SamplingMask] | None:
        if self.parts is None:
            return None
        part = self.parts[self.offset : self.offset + rows]
        self.offset += rows
        return part


def _check_model(model: Any) -> None:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    names = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    scaled = [f"{n}={getattr(config, n)!r}" for n in names if getattr(config, n, None) not in (None, 1, 1.0)]
    if scaled:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "replay does not cover scaled / soft-capped logits: " + ", ".join(scaled), field="model"
        )


def _install_replay_forward(model: Any, state: _ReplayState, temperature: float) -> None:
    """Wrap TRL's fused forward (``add_fused_lm_head``): with masks active, score the completion tokens
    over their rows from hidden states (ragged support, never ``[T, V]`` nor ``[B, L, W]``)."""
    from ..reference_scorer import masked_logprobs_from_hidden

    _check_model(model)
    original = model.forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, **kwargs: Any) -> Any:
        import torch

        input_ids: Any = kwargs.get("input_ids", args[0] if args else None)
        parts = None
        if fused_lm_head and state.parts is not None and input_ids is not None:
            parts = state.take(int(input_ids.shape[0]))
        if parts is None:
            return original(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)
        if kwargs.get("output_router_logits"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "replay does not cover MoE aux losses", field="model")
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state
        length, keep = int(input_ids.shape[1]), state.logits_to_keep
        hidden = hidden[:, length - 1 - keep : length - 1]  # position t predicts token t + 1
        target = labels[:, length - keep :]
        valid = target != -100
        ids, offsets = completion_support(parts, valid)
        head = self.get_output_embeddings()
        scores = masked_logprobs_from_hidden(
            hidden[valid],
            head.weight,
            (ids.to(hidden.device), offsets.to(hidden.device)),
            target[valid],
            bias=head.bias,
            temperature=temperature,
            with_entropy=state.with_entropy,
            fill_value=0.0,
        )
        assert scores.logprobs is not None  # asked for
        full = torch.zeros(labels.shape[0], length - 1, dtype=scores.logprobs.dtype, device=hidden.device)
        logps = full.clone()
        logps[:, length - 1 - keep :] = logps[:, length - 1 - keep :].masked_scatter(valid, scores.logprobs)
        entropy = None
        if scores.entropy is not None:
            entropy = full.clone()
            entropy[:, length - 1 - keep :] = entropy[:, length - 1 - keep :].masked_scatter(valid, scores.entropy)
        return types.SimpleNamespace(log_probs=logps, entropy=entropy, aux_loss=None, loss=-scores.logprobs.sum())

    model.forward = types.MethodType(forward, model)


@contextlib.contextmanager
def _vllm_engine_returns_masks() -> Iterator[None]:
    """While TRL builds its colocated ``LLM``, build it with ``return_sampling_mask=True``."""
    try:
        from trl.generation import vllm_generation
    except ImportError:  # pragma: no cover - trl without its generation module
        yield
        return
    llm = getattr(vllm_generation, "LLM", None)
    if llm is None:
        yield
        return
    vllm_generation.LLM = functools.partial(llm, return_sampling_mask=True)
    try:
        yield
    finally:
        vllm_generation.LLM = llm


def _config_value(config: Any, name: str, default: Any) -> Any:
    got = get_field(config, name, default) if config is not None else default
    return default if got is None else got


def _vllm_sampling(config: Any) -> dict[str, Any]:
    """The sampling fields TRL 1.16 sends to vLLM for a ``GRPOConfig``: its ``temperature`` / ``top_k``
    / ``top_p`` / ``min_p`` / ``repetition_penalty``, then ``generation_kwargs`` over them
    (``VLLMGeneration.generate``: ``generation_kwargs.update(self.generation_kwargs)``)."""
    sent = {
        "temperature": _config_value(config, "temperature", 1.0),
        "top_k": _config_value(config, "top_k", 0),
        "top_p": _config_value(config, "top_p", 1.0),
        "min_p": _config_value(config, "min_p", 0.0),
        "repetition_penalty": _config_value(config, "repetition_penalty", 1.0),
    }
    extra = _config_value(config, "generation_kwargs", {})
    if not isinstance(extra, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "generation_kwargs must be a mapping", field="generation_kwargs")
    sent.update(extra)
    return sent


def vllm_top_k(config: Any) -> int | None:
    """The ``top_k`` to send to vLLM for a ``GRPOConfig`` (``None``: the default config): vLLM returns
    masks only for ``top_k > 0`` (``vllm/v1/engine/input_processor.py``), so an unset ``top_k`` with
    top-p / min-p becomes :func:`sampling_mask.sampler.check_sampler`'s bound (512); ``None`` when
    nothing truncates (full-vocabulary scoring is then exact and no mask is requested)."""
    from ..sampler import check_sampler

    sent = _vllm_sampling(config)
    top_k = sent["top_k"]
    check = check_sampler(
        temperature=float(sent["temperature"]),
        top_k=int(top_k) if top_k and top_k > 0 else None,
        top_p=float(sent["top_p"]),
        min_p=float(sent["min_p"]),
    )
    return check.effective_top_k


# vLLM SamplingParams fields that do not change the sampled distribution, or only mask ids to -inf
# (the recorded support carries that: bad words, allowed ids, min_tokens, structured outputs).
_VLLM_REPLAYED = frozenset(
    {
        "n", "seed", "max_tokens", "stop", "stop_token_ids", "ignore_eos", "logprobs", "prompt_logprobs",
        "detokenize", "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output",
        "truncate_prompt_tokens", "output_kind", "temperature", "top_k", "top_p", "min_p",
        "bad_words", "allowed_token_ids", "min_tokens", "structured_outputs",
    }
)  # fmt: skip
_VLLM_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}

# transformers processors that only set scores to -inf: the recorder sees their effect in the support
# (it runs after them), so replay over the recorded rows is exact (``generation/logits_process.py``:
# ``NoRepeatNGramLogitsProcessor``, ``NoBadWordsLogitsProcessor``, ``MinLengthLogitsProcessor``, ...).
_HF_MASKING = frozenset(
    {
        "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "min_length", "min_new_tokens",
        "forced_bos_token_id", "forced_eos_token_id", "suppress_tokens", "begin_suppress_tokens",
    }
)  # fmt: skip


def vllm_processors_not_replayed(config: Any) -> list[str]:
    """``name=value`` of each setting TRL would send to vLLM that changes logit values the trainer does
    not see (penalties, ``logit_bias``, custom ``logits_processors``) or that this adapter does not
    know; settings that only mask ids (``bad_words``, ``allowed_token_ids``, ``min_tokens``,
    structured outputs) are replayed exactly, since the recorded support carries them."""
    named = _temperature_mismatch(_vllm_sampling(config).get("temperature"), _config_value(config, "temperature", 1.0))
    for name, value in _vllm_sampling(config).items():
        if name in _VLLM_NEUTRAL:
            if value is not None and value != _VLLM_NEUTRAL[name]:
                named.append(f"{name}={value!r}")
        elif name not in _VLLM_REPLAYED and value not in (None, {}, [], ()):
            named.append(f"{name}={value!r}")
    return named


def _temperature_mismatch(sampled: Any, scored: Any) -> list[str]:
    """``generation_kwargs`` may override the temperature TRL samples at, not the one it scores at."""
    if sampled is None or scored is None or float(sampled) == float(scored):
        return []
    return [f"temperature={sampled!r} (generation_kwargs; the trainer scores at temperature={scored!r})"]


def hf_processors_not_replayed(generation_config: Any) -> list[str]:
    """``name=value`` of each processor of a resolved ``GenerationConfig`` that replay cannot reproduce:
    :func:`~sampling_mask.trainers.transformers.unseen_processors` (transformers' processors and
    warpers beyond temperature / top-k / top-p / min-p, and greedy decoding) less the processors that
    only mask ids to -inf (the recorded support carries them), plus ``remove_invalid_values``."""
    from ..sampler.generation_config import unseen_processors

    named = [n for n in unseen_processors(generation_config) if n.split("=", 1)[0] not in _HF_MASKING]
    if _config_value(generation_config, "remove_invalid_values", False):
        named.append("remove_invalid_values=True")
    return named


def _capture_after(obj: Any, name: str, read: Any, sink: Any) -> None:
    """Wrap ``obj.name`` (an engine's or client's generate): ``sink().append(read(result))`` after each call."""
    original = getattr(obj, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        sink().append(read(result))
        return result

    setattr(obj, name, wrapped)


def _float_lists(mask: SamplingMask) -> list[list[float]]:
    values = mask.sampled_logprobs
    if values is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the recorded mask has no sampled_logprobs", field="sampled_logprobs"
        )
    return [values[a:b].tolist() for a, b in zip(mask.cu_seqlens[:-1], mask.cu_seqlens[1:], strict=True)]


def _check_capture(mask: SamplingMask, completion_ids: Sequence[Sequence[int]]) -> None:
    """The captured mask has one segment per completion and one row per completion token."""
    lengths = np.fromiter((len(ids) for ids in completion_ids), dtype=np.int64, count=len(completion_ids))
    if mask.num_segments != lengths.size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{mask.num_segments} captured masks for {lengths.size} completions",
            field=MASK_KEY,
        )
    rows = np.diff(mask.cu_seqlens)
    if not np.array_equal(rows, lengths):
        b = int(np.argmax(rows != lengths))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"completion {b}: {int(rows[b])} mask rows for {int(lengths[b])} tokens",
            segment=b,
            field=MASK_KEY,
        )


def replay_trainer(base: type | None = None) -> type:
    """A subclass of ``base`` (default TRL's ``GRPOTrainer``) with sampling replay (module doc)."""
    from ..sampler import check_sampler
    from ..sampler.generation_config import resolve_generation_config, sampler_settings
    from .transformers import SamplingMaskRecorder

    if base is None:
        from trl import GRPOTrainer

        base = GRPOTrainer
    parent: Any = base

    class ReplayGRPOTrainerClass(parent):  # type: ignore[misc, valid-type]
        """``GRPOTrainer`` with sampling replay (``sampling_mask.trainers.trl``). Extra keywords:
        ``replay_diagnostics`` (default False): log the importance ratios with and without replay;
        ``allow_processors_not_replayed`` (default False): train with processors replay cannot
        reproduce (warned at construction, named in ``processors_not_replayed``, counted in the logs)
        instead of refusing them."""

        def __init__(
            self,
            *args: Any,
            replay_diagnostics: bool = False,
            allow_processors_not_replayed: bool = False,
            **kwargs: Any,
        ) -> None:
            self.replay_diagnostics = replay_diagnostics
            self.replay_log: list[dict[str, float]] = []
            self._replay_state = _ReplayState()
            self._replay_generated: list[SamplingMask] = []
            self._replay_kept: list[np.ndarray] = []
            self._replay_current: Any = None
            self._replay_models: list[Any] = []
            self.replay_enabled = False
            config = kwargs.get("args", args[2] if len(args) > 2 else None)
            self.replay_vllm_top_k = vllm_top_k(config)
            use_vllm = bool(_config_value(config, "use_vllm", False))
            with _vllm_engine_returns_masks() if use_vllm and self.replay_vllm_top_k else contextlib.nullcontext():
                super().__init__(*args, **kwargs)
            policy = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
            if self.use_vllm:
                truncates = self.replay_vllm_top_k is not None
                named = vllm_processors_not_replayed(config)
            else:
                resolved = resolve_generation_config(self.generation_config, model=policy)
                named = hf_processors_not_replayed(resolved)
                if resolved.do_sample:
                    named += _temperature_mismatch(resolved.temperature, self.temperature)
                settings = sampler_settings(resolved, resolve=False)
                truncates = (
                    bool(resolved.do_sample)
                    and check_sampler(
                        temperature=settings["temperature"],
                        top_k=settings["top_k"],
                        top_p=1.0 if settings["top_p"] is None else settings["top_p"],
                        min_p=0.0 if settings["min_p"] is None else settings["min_p"],
                    ).truncates
                )
            self.processors_not_replayed = named
            if named and not allow_processors_not_replayed:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    "replay cannot reproduce " + ", ".join(named) + " (they change logits the trainer does not see);"
                    " remove them, or pass allow_processors_not_replayed=True to train with a warning",
                    field=named[0].split("=", 1)[0],
                )
            if named:
                message = "sampling replay does not reproduce " + ", ".join(named) + ": the ratios are not exact"
                warnings.warn(message, stacklevel=2)
                logger.warning(message)
            #: whether masks are requested and carried: only when the sampler truncates (else full-vocabulary
            #: scoring is already exact and the trainer runs as plain GRPOTrainer, nothing carried)
            self.replay_enabled = truncates
            if not truncates:
                return
            self._refuse_uncovered(config)
            _install_replay_forward(policy, self._replay_state, float(self.temperature))
            # the models whose forward replays, as TRL passes them unwrapped (DDP / DeepSpeed wrap them)
            self._replay_models = [self.accelerator.unwrap_model(self.model)]
            if self.ref_model is not None:
                ref = self.accelerator.unwrap_model(self.ref_model)
                _install_replay_forward(ref, self._replay_state, float(self.temperature))
                self._replay_models.append(ref)
            if self.use_vllm:
                self.vllm_generation.top_k = self.replay_vllm_top_k  # vLLM needs top_k > 0 for masks
                self._wrap_vllm()

        def _refuse_uncovered(self, config: Any) -> None:
            """Setups whose masks cannot be captured or aligned, refused before any generation."""
            uncovered = {
                "use_transformers_continuous_batching": "transformers' generate_batch builds its own logits "
                "processors and takes none from the caller, so the support it sampled from cannot be recorded",
                "tools": "tool-calling turns generate several times per completion",
                "environment_factory": "environments generate several turns per completion",
                "rollout_func": "a custom rollout_func generates outside the trainer's capture",
            }
            set_ = {
                "use_transformers_continuous_batching": getattr(self, "use_transformers_continuous_batching", False),
                "tools": getattr(self, "tools", None),
                "environment_factory": getattr(self, "environment_factories", None),
                "rollout_func": getattr(self, "rollout_func", None),
            }
            for name, reason in uncovered.items():
                if set_[name]:
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA, f"sampling replay does not cover {name}: {reason}", field=name
                    )

        # ------------------------------------------------------------------ capture
        def _wrap_vllm(self) -> None:
            generation = self.vllm_generation
            if getattr(generation, "tensor_parallel_size", 1) != 1:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, "replay covers vllm_tensor_parallel_size=1", field="vllm_tensor_parallel_size"
                )
            if getattr(generation, "mode", None) == "colocate":
                _capture_after(generation.llm, "generate", masks_from_request_outputs, lambda: self._replay_generated)
            else:
                if self.accelerator.num_processes != 1:
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA,
                        "vLLM server mode is covered for one training process (the response reaches rank 0 only)",
                        field="vllm_mode",
                    )
                sink = lambda: self._replay_generated  # noqa: E731
                _capture_after(generation.vllm_client, "generate", masks_from_server_response, sink)

        def _generate_single_turn(
            self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: Any, *args: Any, **kwargs: Any
        ) -> Any:
            if not self.replay_enabled:
                return super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
                )
            if self.use_vllm:
                captured = len(self._replay_generated)
                completion_ids, logprobs = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
                )
                if len(self._replay_generated) != captured + 1:
                    raise SamplingMaskError(ErrorCode.E_SCHEMA, "no sampling mask was captured", field=MASK_KEY)
                _check_capture(self._replay_generated[-1], completion_ids)
                return completion_ids, logprobs
            target = self.accelerator.unwrap_model(self.model_wrapped)
            original = target.generate
            eos = list(self.eos_token_ids)
            named_at_init = self.processors_not_replayed

            def generate(*g_args: Any, **g_kwargs: Any) -> Any:
                recorder = SamplingMaskRecorder(g_kwargs.get("generation_config"), model=target)
                unexpected = set(hf_processors_not_replayed(recorder.generation_config)) - set(named_at_init)
                if unexpected:  # generate() got processors the construction check did not see: never silent
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA,
                        "generate() runs processors replay cannot reproduce: " + ", ".join(sorted(unexpected)),
                        field="processors_not_replayed",
                    )
                # the recorder as generate()'s warper stage: transformers' warpers run once
                out = recorder.generate(original, *g_args, **g_kwargs)
                self._replay_generated.append(recorder.mask(out, eos_token_id=eos))
                self._replay_kept.append(np.asarray(recorder.kept_mass))
                return out

            target.generate = generate
            try:
                completion_ids, logprobs = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
                )
            finally:
                del target.generate  # the class's method again
            if not self._replay_generated:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "no sampling mask was captured", field=MASK_KEY)
            mask = self._replay_generated[-1]
            _check_capture(mask, completion_ids)
            if logprobs is None:
                logprobs = _float_lists(mask)
            return completion_ids, logprobs

        # ------------------------------------------------------------------ carry and renormalize
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            if not self.replay_enabled:  # nothing truncates: full-vocabulary scoring is exact, nothing carried
                return super()._generate_and_score_completions(inputs)
            self._replay_generated, self._replay_kept = [], []
            pending = _PendingMask(self._replay_generated)
            self._replay_current = pending
            try:
                output = super()._generate_and_score_completions(inputs)
                carried = pending.completions(int(output["completion_ids"].shape[0]))
            finally:
                self._replay_current = None
            output[MASK_KEY] = carried
            mode = "train" if self.model.training else "eval"
            if self.processors_not_replayed:
                self._metrics[mode]["sampling_replay/processors_not_replayed"].append(
                    float(len(self.processors_not_replayed))
                )
            if self.replay_diagnostics:
                self._log_replay(output)
            return output

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            parts = inputs.get(MASK_KEY)
            if parts is not None and not self.replay_enabled:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    "inputs carry a sampling mask but replay is off (nothing truncates)",
                    field=MASK_KEY,
                )
            self._replay_current = parts
            try:
                loss = super()._compute_loss(model, inputs)
            finally:
                self._replay_current = None
            if parts is not None:  # TRL logged the entropy of the renormalized distribution: say so
                metrics = self._metrics["train" if self.model.training else "eval"]
                values = metrics.get("entropy")
                if values:
                    metrics["entropy_replay"].append(values.pop())
                if not values:
                    metrics.pop("entropy", None)
            return loss

        def _get_per_token_logps_and_entropies(
            self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any, **kwargs: Any
        ) -> Any:
            current = self._replay_current
            if current is None:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )
            rows = int(input_ids.shape[0])
            if isinstance(current, _PendingMask):
                current = current.completions(rows)
            if not isinstance(current, list) or len(current) != rows:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"inputs[{MASK_KEY!r}] must be a list of {rows} completion masks",
                    field=MASK_KEY,
                )
            scored = self.accelerator.unwrap_model(model)
            if not any(scored is m for m in self._replay_models):
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, "a mask is active but the model scored is not the policy or the reference",
                    field="model",
                )  # fmt: skip
            with_entropy = bool(kwargs.get("compute_entropy", args[1] if len(args) > 1 else False))
            with self._replay_state.active(current, int(logits_to_keep), with_entropy):
                result = super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )
                if self._replay_state.offset != rows:  # never a silent full-vocabulary score
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA,
                        f"the replay forward scored {self._replay_state.offset} of {rows} completions "
                        "(the model's forward was replaced after ReplayGRPOTrainer was built)",
                        field="model",
                    )
            return result

        def _log_replay(self, output: dict[str, Any]) -> None:
            import torch

            sampler = output.get("sampling_per_token_logps")
            if sampler is None:
                return
            input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            keep = output["completion_ids"].shape[1]
            with torch.no_grad():
                self._replay_current = output[MASK_KEY]
                try:
                    replay, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
                finally:
                    self._replay_current = None
                full, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
            valid = output["completion_mask"].bool()
            entry = {
                "step": float(self.state.global_step),
                "ratio_replay": float(torch.exp(replay - sampler)[valid].double().mean()),
                "ratio_full": float(torch.exp(full - sampler)[valid].double().mean()),
                "kept_mass": float(np.concatenate(self._replay_kept).mean()) if self._replay_kept else float("nan"),
            }
            self.replay_log.append(entry)
            mode = "train" if self.model.training else "eval"
            for key in ("ratio_replay", "ratio_full", "kept_mass"):
                self._metrics[mode][f"sampling_replay/{key}"].append(entry[key])

    ReplayGRPOTrainerClass.__name__ = ReplayGRPOTrainerClass.__qualname__ = "ReplayGRPOTrainer"
    return ReplayGRPOTrainerClass


class _PendingMask:
    """The masks captured during one generation batch, split per completion on first use."""

    def __init__(self, parts: list[SamplingMask]) -> None:
        self.parts = parts  # filled by the capture hooks while the batch is generated
        self._completions: list[SamplingMask] | None = None

    def completions(self, count: int) -> list[SamplingMask]:
        if self._completions is None:
            if not self.parts:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "no sampling mask was captured", field=MASK_KEY)
            mask = _segments(self.parts)
            if mask.num_segments != count:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"{mask.num_segments} captured masks for {count} completions "
                    "(several generation turns per completion, as with tools, are not covered)",
                    field=MASK_KEY,
                )
            self._completions = completion_masks(mask)
        return self._completions


@functools.cache
def _replay_class() -> type:
    return replay_trainer()


def __getattr__(name: str) -> Any:
    if name == "ReplayGRPOTrainer":
        return _replay_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
