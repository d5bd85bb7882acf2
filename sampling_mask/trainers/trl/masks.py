"""The sampling masks of TRL's GRPO generation paths: read, carried per completion, laid out for scoring;
and what TRL's sampling settings mean for them (numpy; torch only in :func:`completion_support`).

Read in the ``trl==1.16.0`` wheel (huggingface/trl release 1.16.0): ``trl/generation/vllm_generation.py``
(colocate: ``LLM(..., logprobs_mode="processed_logprobs")`` then ``self.llm.generate``; server:
``vllm_client.generate``; ``generation_kwargs`` update the ``SamplingParams``) and ``trl/trainer/utils.py``
(``shuffle_sequence_dict`` / ``split_tensor_dict``: tensors and lists are permuted and sliced along the batch).

- Readers: :func:`masks_from_request_outputs` (vLLM colocate's ``RequestOutput``s) and
  :func:`masks_from_server_response` (a ``vllm_client.generate`` response carrying ``"sampling_mask"``):
  one segment per completion, in TRL's order.
- Carry: :func:`completion_masks` (one one-segment mask per completion, the value of
  ``inputs["sampling_mask"]``) and :func:`completion_support` (the ragged rows of a batch's scored positions).
- Settings: :func:`vllm_top_k` (the ``top_k`` vLLM needs to return masks), :func:`vllm_processors_not_replayed`
  and :func:`hf_processors_not_replayed` (what changes logit values the masks cannot replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Sized
from typing import Any

import numpy as np

from ...adapters import vllm as vllm_adapter
from ...core.checks import get_field
from ...core.errors import ErrorCode, SamplingMaskError, short_repr
from ...core.model import SamplingMask, concat

__all__ = [
    "MASK_KEY",
    "completion_masks",
    "completion_support",
    "config_value",
    "hf_processors_not_replayed",
    "masks_from_request_outputs",
    "masks_from_server_response",
    "temperature_mismatch",
    "vllm_processors_not_replayed",
    "vllm_top_k",
]

#: The key of ``inputs`` (TRL's per-batch dict) under which the masks travel: one mask per completion.
MASK_KEY = "sampling_mask"


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
            ErrorCode.E_SCHEMA, f"expected a sequence, got {type(value).__name__}", field=field, value=short_repr(value)
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
            value=short_repr(value),
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


def config_value(config: Any, name: str, default: Any) -> Any:
    """``config.name`` (a ``GRPOConfig``, a ``GenerationConfig`` or a mapping), ``default`` when the
    config is None or the field is missing or None."""
    got = get_field(config, name, default) if config is not None else default
    return default if got is None else got


def _vllm_sampling(config: Any) -> dict[str, Any]:
    """The sampling fields TRL 1.16 sends to vLLM for a ``GRPOConfig``: its ``temperature`` / ``top_k``
    / ``top_p`` / ``min_p`` / ``repetition_penalty``, then ``generation_kwargs`` over them
    (``VLLMGeneration.generate``: ``generation_kwargs.update(self.generation_kwargs)``)."""
    sent = {
        "temperature": config_value(config, "temperature", 1.0),
        "top_k": config_value(config, "top_k", 0),
        "top_p": config_value(config, "top_p", 1.0),
        "min_p": config_value(config, "min_p", 0.0),
        "repetition_penalty": config_value(config, "repetition_penalty", 1.0),
    }
    extra = config_value(config, "generation_kwargs", {})
    if not isinstance(extra, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "generation_kwargs must be a mapping", field="generation_kwargs")
    sent.update(extra)
    return sent


def vllm_top_k(config: Any) -> int | None:
    """The ``top_k`` to send to vLLM for a ``GRPOConfig`` (``None``: the default config): vLLM returns
    masks only for ``top_k > 0`` (``vllm/v1/engine/input_processor.py``), so an unset ``top_k`` with
    top-p / min-p becomes :func:`sampling_mask.sampler.check_sampler`'s bound (512); ``None`` when
    nothing truncates (full-vocabulary scoring is then exact and no mask is requested)."""
    from ...sampler import check_sampler

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
    named = temperature_mismatch(_vllm_sampling(config).get("temperature"), config_value(config, "temperature", 1.0))
    for name, value in _vllm_sampling(config).items():
        if name in _VLLM_NEUTRAL:
            if value is not None and value != _VLLM_NEUTRAL[name]:
                named.append(f"{name}={value!r}")
        elif name not in _VLLM_REPLAYED and value not in (None, {}, [], ()):
            named.append(f"{name}={value!r}")
    return named


def temperature_mismatch(sampled: Any, scored: Any) -> list[str]:
    """``generation_kwargs`` may override the temperature TRL samples at, not the one it scores at."""
    if sampled is None or scored is None or float(sampled) == float(scored):
        return []
    return [f"temperature={sampled!r} (generation_kwargs; the trainer scores at temperature={scored!r})"]


def hf_processors_not_replayed(generation_config: Any) -> list[str]:
    """``name=value`` of each processor of a resolved ``GenerationConfig`` that replay cannot reproduce:
    :func:`~sampling_mask.sampler.generation_config.unseen_processors` (transformers' processors and
    warpers beyond temperature / top-k / top-p / min-p, and greedy decoding) less the processors that
    only mask ids to -inf (the recorded support carries them), plus ``remove_invalid_values``."""
    from ...sampler.generation_config import unseen_processors

    named = [n for n in unseen_processors(generation_config) if n.split("=", 1)[0] not in _HF_MASKING]
    if config_value(generation_config, "remove_invalid_values", False):
        named.append("remove_invalid_values=True")
    return named
