"""OpenRLHF adapter: sampling replay for OpenRLHF 0.11.2 (OpenRLHF/OpenRLHF release 0.11.2, the PyPI wheel).

Read in ``openrlhf==0.11.2``:

- ``openrlhf/utils/agent.py`` (single-turn executor): ``request_output.outputs[0]`` gives
  ``action_token_ids``; ``observation_tokens = prompt_token_ids + action_token_ids`` and
  ``rollout_log_probs`` is one value per observation token (0.0 on the prompt).
- ``openrlhf/trainer/ppo_utils/samples_generator.py``: the ``Experience`` of a sample holds
  ``sequences`` [1, T], ``action_mask`` = ``mask[1:truncate_length]`` and ``rollout_log_probs`` =
  ``rollout_log_probs[1:truncate_length]``: per-token fields are label-aligned (entry j is token
  j + 1, the label of ``sequences[:, 1:]``).
- ``openrlhf/models/utils.py`` ``log_probs_from_logits(logits, labels, temperature=1.0)``: full-vocabulary
  log-probs (``logits.div_(temperature)`` in place, flash-attn cross entropy or a chunked logsumexp;
  bf16 row by row). The module imports deepspeed, so it does not import on a CPU-only machine.

:func:`observation_rows` builds a sample's mask the same way (empty rows for the prompt, the
completion's rows from vLLM's ``CompletionOutput.sampling_mask``), :func:`experience_mask` aligns it
like ``rollout_log_probs`` (``[1:truncate_length]``) as int32 [1, T - 1, W] (``-1`` padding) to store on
the ``Experience`` (e.g. ``experience.sampling_mask``), :func:`pad_experience_masks` right-pads several
for a batch, and :func:`log_probs_from_logits` is the drop-in replacement with the mask as one more
argument (it does not modify ``logits`` in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask
from . import vllm as vllm_adapter
from .verl import dense_rows, replay_logprobs

__all__ = ["experience_mask", "log_probs_from_logits", "observation_rows", "pad_experience_masks"]


def observation_rows(prompt_length: int, completion_output: Any, *, vocab_size: int | None = None) -> SamplingMask:
    """One row per observation token: ``prompt_length`` empty rows, then the completion's rows (a vLLM
    ``CompletionOutput`` with ``sampling_mask``; ``E_SCHEMA`` when vLLM ran without it)."""
    if isinstance(prompt_length, bool) or not isinstance(prompt_length, (int, np.integer)) or prompt_length < 0:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "prompt_length must be an integer >= 0", field="prompt_length")
    completion = vllm_adapter.from_completion_output(completion_output, vocab_size=vocab_size)
    assert completion is not None  # on_missing="raise"
    offsets = np.concatenate([np.zeros(int(prompt_length), np.int64), completion.offsets])
    return SamplingMask(completion.ids, offsets, vocab_size=vocab_size)


def experience_mask(rows: SamplingMask, truncate_length: int | None = None) -> Any:
    """int32 [1, T - 1, W]: rows ``[1:truncate_length]`` of :func:`observation_rows`, label-aligned
    like OpenRLHF's ``action_mask`` and ``rollout_log_probs``."""
    stop = rows.num_rows if truncate_length is None else min(int(truncate_length), rows.num_rows)
    start = min(1, stop)
    offsets = rows.offsets[start : stop + 1]
    kept = SamplingMask(rows.ids[offsets[0] : offsets[-1]], offsets - offsets[0], vocab_size=rows.vocab_size)
    return dense_rows(kept, kept.num_rows)


def pad_experience_masks(masks: Sequence[Any]) -> Any:
    """Stack [1, T_i, W_i] masks into [n, max T, max W] with ``-1`` (as ``zero_pad_sequences`` pads right)."""
    import torch

    if not masks:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "no masks to pad", field="masks")
    length = max(int(m.shape[1]) for m in masks)
    width = max(int(m.shape[2]) for m in masks)
    out = torch.full((sum(int(m.shape[0]) for m in masks), length, width), -1, dtype=torch.int32)
    at = 0
    for m in masks:
        out[at : at + m.shape[0], : m.shape[1], : m.shape[2]] = m
        at += int(m.shape[0])
    return out


def log_probs_from_logits(logits: Any, labels: Any, temperature: float = 1.0, *, sampling_mask: Any = None) -> Any:
    """OpenRLHF's ``log_probs_from_logits`` with the mask: ``logits`` [..., V] (raw), ``labels`` [...],
    ``sampling_mask`` int [..., W] label-aligned (``-1`` padding; None: OpenRLHF's full-vocabulary
    result). Each row's log-prob of its label over its ids at ``temperature``; rows without ids
    (prompt, padding) over the full vocabulary."""
    return replay_logprobs(logits, labels, sampling_mask, temperature=temperature)
