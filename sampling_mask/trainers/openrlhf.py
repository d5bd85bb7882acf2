"""OpenRLHF adapter: sampling replay for OpenRLHF 0.11.2 (OpenRLHF/OpenRLHF release 0.11.2, the PyPI wheel).

Read in ``openrlhf==0.11.2``:

- ``openrlhf/utils/agent.py`` (single-turn executor): ``request_output.outputs[0]`` gives
  ``action_token_ids``; ``observation_tokens = prompt_token_ids + action_token_ids``.
- ``openrlhf/trainer/ppo_utils/samples_generator.py`` ``_process_response_into_experience``: one
  ``Experience`` per sample, ``sequences`` = ``observation_tokens[:truncate_length]`` [1, T]; its
  ``info`` dict is the only place with room for a per-sample object (``Experience`` has no mask field).
- ``openrlhf/trainer/ppo_utils/experience.py``: ``concat_experiences`` chains ``info`` lists,
  ``split_experience_batch`` indexes them per sample, ``make_experience_batch`` collects the non-numeric
  ``info`` values of a batch into a list; step tensors are right-padded along their last dimension, so a
  dense [T, W] mask cannot be a step field. ``PPOActor.training_step`` logs every ``info`` list as a
  float tensor, so the mask is popped from ``info`` before that (the replay buffer keeps its own copy).
- ``openrlhf/models/actor.py`` ``Actor.forward``: ``output["logits"].div_(self.temperature)`` in place,
  then ``log_probs_from_logits(output["logits"], rolled_sequences)`` with ``rolled_sequences =
  torch.roll(sequences, -1, 1)`` [B, S] and logits [B, S, V]; with ``packing_samples``,
  ``unpad_and_slice_tensor`` (``models/ring_attn_utils.py``) keeps the ``attention_mask`` positions in
  row-major order: logits [1, nnz, V], rolled labels [1, nnz]; with ring attention it pads them to a
  multiple of the ring's size and keeps this rank's equal contiguous chunk
  (``get_tensor_in_current_ring_attn_rank``), and ``gather_and_pad_tensor`` all-gathers the log-probs.
- ``openrlhf/models/utils.py`` ``log_probs_from_logits(logits, labels, temperature=1.0)``: full-vocabulary
  log-probs (the module imports deepspeed, so it does not import on a CPU-only machine).

So: :func:`observation_rows` builds a sample's mask (empty rows for the prompt, then the completion's
rows from vLLM's ``CompletionOutput.sampling_mask``), cut to ``truncate_length`` like ``sequences``; it
rides in ``experience.info["sampling_mask"]`` as a one-element list; :func:`rolled_mask` aligns a batch
of them with ``rolled_sequences`` (padded [B, S], packed [1, nnz], or this rank's chunk of it under ring
attention); :func:`log_probs_from_logits` is the drop-in replacement with the mask as one more argument
(temperature 1: the actor has already divided the logits; it does not modify ``logits`` in place).
:func:`experience_mask` / :func:`pad_experience_masks` give the dense label-aligned form ([1, T - 1, W],
like ``rollout_log_probs``) for code that wants it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..adapters import vllm as vllm_adapter
from ..core.checks import INTEGER_DTYPES, checked_tensor, is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import SamplingMask, as_sampling_mask, concat
from .verl import batch_segments, dense_rows, integer_matrix, replay_logprobs, sequence_shard

__all__ = [
    "MASK_KEY",
    "experience_mask",
    "log_probs_from_logits",
    "observation_rows",
    "pad_experience_masks",
    "rolled_mask",
]

#: The ``Experience.info`` key the mask rides under (a list: one :class:`SamplingMask` per sample).
MASK_KEY = "sampling_mask"


def _truncate_length(value: Any) -> int | None:
    if value is not None and (not is_int(value) or value < 0):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "truncate_length must be an integer >= 0 or None",
            field="truncate_length",
            value=short_repr(value),
        )
    return None if value is None else int(value)


def observation_rows(
    prompt_length: int, completion_output: Any, *, truncate_length: int | None = None, vocab_size: int | None = None
) -> SamplingMask:
    """One row per observation token: ``prompt_length`` empty rows, then the completion's rows (a vLLM
    ``CompletionOutput`` with ``sampling_mask``; ``E_SCHEMA`` when vLLM ran without it), cut to the
    first ``truncate_length`` rows as ``sequences[:truncate_length]`` is."""
    if not is_int(prompt_length) or prompt_length < 0:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "prompt_length must be an integer >= 0", field="prompt_length")
    stop = _truncate_length(truncate_length)
    completion = vllm_adapter.from_completion_output(completion_output, vocab_size=vocab_size)
    assert completion is not None  # on_missing="raise"
    offsets = np.concatenate([np.zeros(int(prompt_length), np.int64), completion.offsets])
    rows = SamplingMask(completion.ids, offsets, vocab_size=vocab_size)
    return rows if stop is None else rows[:stop]


def experience_mask(rows: SamplingMask, truncate_length: int | None = None) -> Any:
    """int32 [1, T - 1, W]: rows ``[1:truncate_length]`` of :func:`observation_rows`, label-aligned
    like OpenRLHF's ``action_mask`` and ``rollout_log_probs``."""
    rows = as_sampling_mask(rows, field="rows")
    stop = _truncate_length(truncate_length)
    stop = rows.num_rows if stop is None else min(stop, rows.num_rows)
    start = min(1, stop)
    offsets = rows.offsets[start : stop + 1]
    kept = SamplingMask(rows.ids[offsets[0] : offsets[-1]], offsets - offsets[0], vocab_size=rows.vocab_size)
    return dense_rows(kept, kept.num_rows)


def pad_experience_masks(masks: Sequence[Any]) -> Any:
    """Stack [1, T_i, W_i] integer masks into int32 [n, max T, max W] with ``-1`` (as ``zero_pad_sequences``
    pads right). Each mask is a tensor of integer ids (:func:`~sampling_mask.core.checks.checked_tensor`
    with the integer dtypes: a float mask is ``E_DTYPE``, never truncated) whose values fit int32."""
    import torch

    if not isinstance(masks, (list, tuple)) or not masks:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a non-empty list of masks to pad", field="masks")
    for i, m in enumerate(masks):
        if not isinstance(m, torch.Tensor):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "each mask must be a tensor [1, T, W]", field="masks", segment=i)
        checked_tensor(m, field=f"masks[{i}]", dtypes=INTEGER_DTYPES)
        if m.ndim != 3:
            raise SamplingMaskError(ErrorCode.E_SHAPE, "each mask must be a tensor [1, T, W]", field="masks", segment=i)
        if m.numel() and (int(m.min()) < -1 or int(m.max()) > np.iinfo(np.int32).max):
            raise SamplingMaskError(ErrorCode.E_RANGE, "ids must lie in [-1, 2**31)", field="masks", segment=i)
    length = max(int(m.shape[1]) for m in masks)
    width = max(int(m.shape[2]) for m in masks)
    out = torch.full((sum(int(m.shape[0]) for m in masks), length, width), -1, dtype=torch.int32)
    at = 0
    for m in masks:
        out[at : at + m.shape[0], : m.shape[1], : m.shape[2]] = m
        at += int(m.shape[0])
    return out


def rolled_mask(
    sampling_mask: Any, attention_mask: Any, *, packed: bool = False, ring_attn_group: Any = None
) -> SamplingMask | None:
    """The batch's mask aligned with ``Actor.forward``'s ``rolled_sequences``: row (b, s) scores token
    s + 1 of sample b. ``sampling_mask``: ``experience.info["sampling_mask"]`` (a list of per-sample
    :class:`SamplingMask`, rows aligned with that sample's tokens, as :func:`observation_rows` makes
    them), a :class:`SamplingMask` of B segments, or None (returned as None). ``attention_mask`` [B, S]:
    each sample's tokens are one contiguous run of ones (right or left padding).

    ``packed=False``: B * S rows, row-major (logits [B, S, V]); ``packed=True`` (``packing_samples``):
    one row per ``attention_mask`` one, as ``unpad_and_slice_tensor`` keeps them (logits [1, nnz, V]).
    ``ring_attn_group`` (ring attention, which needs ``packed=True``): ``unpad_and_slice_tensor`` pads
    the nnz rows to a multiple of the group's size P and gives rank r the r-th of P equal chunks; the
    mask is padded and cut the same way (:func:`~sampling_mask.trainers.verl.sequence_shard`): this
    rank's rows of the padded [1, (nnz + pad) / P] logits.

    A sample's first row (no logits score its first token) must be empty, and a row past the sample's
    tokens may not hold ids: ``E_SHAPE`` naming the segment and row. A dense [B, T, W] mask (W may be
    0) is read as T rows per sample.
    """
    if sampling_mask is None:
        return None
    if not isinstance(packed, (bool, np.bool_)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "packed must be a bool", field="packed", value=short_repr(packed))
    if ring_attn_group is not None and not packed:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "ring attention slices packed samples: pass packed=True", field="ring_attn_group"
        )
    am = integer_matrix(attention_mask, field="attention_mask", binary=True).astype(np.int64)
    batch, width = am.shape
    if isinstance(sampling_mask, (list, tuple)):
        if len(sampling_mask) != batch:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"{len(sampling_mask)} masks for {batch} samples", field=MASK_KEY
            )
        if batch == 0:
            return SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64))
        mask = concat([_one_sample(m, i) for i, m in enumerate(sampling_mask)])
    else:
        mask = batch_segments(sampling_mask, batch)
    tokens = am.sum(axis=1)
    first = np.argmax(am, axis=1) if width else np.zeros(batch, np.int64)
    last = width - 1 - np.argmax(am[:, ::-1], axis=1) if width else first - 1
    raise_at_first(
        (tokens > 0) & (last - first + 1 != tokens),
        ErrorCode.E_SHAPE,
        "a sample's tokens are not one contiguous run of attention_mask ones",
        field="attention_mask",
    )
    seg_rows = np.diff(mask.cu_seqlens)
    seg = np.repeat(np.arange(batch), seg_rows)
    t = np.arange(mask.num_rows) - mask.cu_seqlens[seg]
    lengths = mask.row_lengths
    bad = (lengths > 0) & ((t >= tokens[seg]) | (t == 0))
    if bad.any():
        k = int(np.argmax(bad))
        why = "a mask row past the sample's tokens" if t[k] >= tokens[seg[k]] else "a sample's first row must be empty"
        raise SamplingMaskError(ErrorCode.E_SHAPE, why, segment=int(seg[k]), row=int(t[k]), field=MASK_KEY)
    if packed:
        base = np.concatenate([[0], np.cumsum(tokens)[:-1]]).astype(np.int64)
        num_rows = int(tokens.sum())
        cu = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int64)
    else:
        base = np.arange(batch, dtype=np.int64) * width + first
        num_rows = batch * width
        cu = np.arange(batch + 1, dtype=np.int64) * width
    used = lengths > 0
    out_lengths = np.zeros(num_rows, np.int64)
    out_lengths[base[seg[used]] + t[used] - 1] = lengths[used]
    offsets = np.concatenate([[0], np.cumsum(out_lengths)]).astype(np.int64)
    rows = SamplingMask(mask.ids, offsets, cu_seqlens=cu, vocab_size=mask.vocab_size)
    if ring_attn_group is None:
        return rows
    return sequence_shard(rows, ring_attn_group, field="ring_attn_group", pad=True)


def _one_sample(value: Any, index: int) -> SamplingMask:
    if not hasattr(value, "__sampling_mask__"):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"expected a SamplingMask per sample, got {type(value).__name__}",
            field=MASK_KEY,
            segment=index,
        )
    mask = as_sampling_mask(value, field=MASK_KEY)
    return SamplingMask(mask.ids, mask.offsets, vocab_size=mask.vocab_size, validate=False)


def log_probs_from_logits(logits: Any, labels: Any, temperature: float = 1.0, *, sampling_mask: Any = None) -> Any:
    """OpenRLHF's ``log_probs_from_logits`` with the mask: ``logits`` [..., V], ``labels`` [...]
    (``Actor.forward`` passes logits already divided by its temperature, so leave ``temperature`` at 1),
    ``sampling_mask``: :func:`rolled_mask`'s result (one row per label, row-major), a dense int
    [..., W] (``-1`` padding), or None (OpenRLHF's full-vocabulary result). Each row's log-prob of its
    label over its ids; rows without ids (prompt, padding) over the full vocabulary."""
    return replay_logprobs(logits, labels, sampling_mask, temperature=temperature)
