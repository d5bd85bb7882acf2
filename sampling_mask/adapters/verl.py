"""verl adapter: sampling replay for verl 0.9.1 (volcengine/verl release 0.9.1, the PyPI wheel).

Read in ``verl==0.9.1``:

- ``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` ``generate``: one ``TokenOutput`` per
  request from ``final_res.outputs[0]`` (``token_ids``, ``log_probs`` from the processed logprobs,
  ``extra_fields``); ``verl/workers/rollout/replica.py`` ``TokenOutput``.
- ``verl/experimental/agent_loop/agent_loop.py`` ``_postprocess``: every ``extra_fields`` key becomes
  ``DataProto.non_tensor_batch[key]`` (an object array, one entry per sample); ``responses`` /
  ``response_mask`` [bsz, response_length] are right-padded, so response position t is token t.
- ``verl/utils/torch_functional.py`` ``logprobs_from_logits(logits, labels, inplace_backward=True)``
  (flash-attn cross entropy, NPU, else ``logprobs_from_logits_v2``): full-vocabulary log-probs of the
  already temperature-scaled logits (``dp_actor`` divides them by the temperature first).

So: the rollout server adds the mask to ``extra_fields`` (:func:`token_output_fields`, from vLLM's
``CompletionOutput`` with ``return_sampling_mask``), it reaches ``non_tensor_batch["sampling_mask"]``
by verl's own postprocessing, :func:`add_to_data_proto` turns it into ``batch["sampling_mask"]``
(int32 [bsz, response_length, W], ``-1`` padding, aligned with ``responses``) so that verl's
``DataProto`` splitting and concatenation carry it, and :func:`logprobs_from_logits` is the drop-in
replacement of verl's function with the mask as one more argument: rows with ids are renormalized over
them, rows without (padding, prompts, tool tokens) are scored over the full vocabulary as verl does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, concat
from . import vllm as vllm_adapter
from ._common import get_field

__all__ = [
    "MASK_KEY",
    "add_to_data_proto",
    "dense_rows",
    "from_non_tensor_batch",
    "logprobs_from_logits",
    "replay_logprobs",
    "token_output_fields",
]

MASK_KEY = "sampling_mask"


def token_output_fields(completion_output: Any) -> dict[str, Any]:
    """``{"sampling_mask": rows}`` for ``TokenOutput.extra_fields`` from a vLLM ``CompletionOutput``
    (``final_res.outputs[0]``); ``E_SCHEMA`` when vLLM ran without ``return_sampling_mask``."""
    mask = vllm_adapter.from_completion_output(completion_output)
    assert mask is not None  # on_missing="raise"
    return {MASK_KEY: mask.to_rows()}


def from_non_tensor_batch(non_tensor_batch: Any, *, key: str = MASK_KEY, vocab_size: int | None = None) -> SamplingMask:
    """One segment per sample from ``non_tensor_batch[key]`` (per sample: a list of rows, or None for
    a sample without a mask: an empty segment)."""
    samples = get_field(non_tensor_batch, key, where="non_tensor_batch")
    masks = []
    for index, rows in enumerate(samples):
        rows = [] if rows is None else list(rows)
        try:
            masks.append(vllm_adapter.from_token_ids(rows, vocab_size=vocab_size))
        except SamplingMaskError as exc:
            raise SamplingMaskError(exc.code, exc.message, segment=index, row=exc.row, field=key) from None
    if not masks:
        return SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=[0], vocab_size=vocab_size)
    return concat(masks)


def dense_rows(mask: SamplingMask, length: int, *, shift: int = 0) -> Any:
    """int32 [segments, length, W] (``-1`` padding, W >= 1): row t of segment b at ``[b, t + shift]``;
    ``E_SHAPE`` naming the segment when its rows do not fit."""
    import torch

    seg_len = np.diff(mask.cu_seqlens)
    too_long = seg_len + shift > length
    if too_long.any():
        b = int(np.argmax(too_long))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{int(seg_len[b])} rows do not fit in {length} positions", segment=b, field=MASK_KEY
        )
    width = max(1, int(mask.row_lengths.max(initial=0)))
    out = np.full((seg_len.size, length, width), -1, dtype=np.int32)
    seg = np.repeat(np.arange(seg_len.size), seg_len)
    pos = np.arange(mask.num_rows) - mask.cu_seqlens[seg] + shift
    row = np.repeat(np.arange(mask.num_rows), mask.row_lengths)
    out[seg[row], pos[row], np.arange(mask.nnz) - mask.offsets[row]] = mask.ids
    return torch.from_numpy(out)


def add_to_data_proto(data: Any, *, key: str = MASK_KEY) -> Any:
    """``data.batch[key]`` = :func:`dense_rows` of ``data.non_tensor_batch[key]`` over
    ``data.batch["responses"]``'s length (the non-tensor entry is removed); returns ``data``."""
    mask = from_non_tensor_batch(data.non_tensor_batch, key=key)
    responses = data.batch["responses"]
    if mask.num_segments != responses.shape[0]:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{mask.num_segments} masks for {responses.shape[0]} samples", field=key
        )
    data.batch[key] = dense_rows(mask, int(responses.shape[1])).to(responses.device)
    data.non_tensor_batch.pop(key)
    return data


def logprobs_from_logits(logits: Any, labels: Any, inplace_backward: bool = True, *, sampling_mask: Any = None) -> Any:
    """verl's ``logprobs_from_logits`` with the mask: ``logits`` [..., V] (temperature-scaled, as verl
    passes them), ``labels`` [...], ``sampling_mask`` int [..., W] (``-1`` padding; None: verl's
    full-vocabulary result). Log-probs of ``labels`` renormalized over each row's ids; a row without
    ids over the full vocabulary. ``inplace_backward`` is accepted for the signature (nothing is done
    in place). A label outside its row is ``E_MISSING_SAMPLED`` naming the row."""
    return replay_logprobs(logits, labels, sampling_mask)


def replay_logprobs(logits: Any, labels: Any, sampling_mask: Any, temperature: float = 1.0) -> Any:
    """Log-probs of ``labels`` [...] from ``logits`` [..., V] / ``temperature`` over ``sampling_mask``
    [..., W] rows (``-1`` padding; an all-padding row or ``None``: the full vocabulary)."""
    from ..reference_scorer import masked_logprobs

    vocab = int(logits.shape[-1])
    shape = tuple(labels.shape)
    if tuple(logits.shape[:-1]) != shape:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"logits {list(logits.shape)} do not match labels {list(shape)}", field="labels"
        )
    flat = logits.reshape(-1, vocab)
    targets = labels.reshape(-1)
    if sampling_mask is None:
        dense = targets.new_full((targets.shape[0], 1), -1)
    else:
        if tuple(sampling_mask.shape[:-1]) != shape:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"sampling_mask {list(sampling_mask.shape)} does not match labels {list(shape)} + [W]",
                field=MASK_KEY,
            )
        dense = sampling_mask.reshape(-1, sampling_mask.shape[-1])
    out = masked_logprobs(flat, dense, targets, temperature=temperature, ignore_index=None)
    assert out.logprobs is not None  # masked_logprobs always returns them
    return out.logprobs.reshape(shape)
