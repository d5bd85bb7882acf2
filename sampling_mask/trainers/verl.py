"""verl adapter: sampling replay for verl 0.9.1 (volcengine/verl release 0.9.1, the PyPI wheel).

Read in ``verl==0.9.1``:

- ``verl/workers/rollout/vllm_rollout/vllm_async_server.py`` ``vLLMHttpServer.generate``: one
  ``TokenOutput`` per request from ``final_res.outputs[0]`` (``token_ids``, ``log_probs``,
  ``extra_fields``); ``verl/workers/rollout/replica.py`` ``TokenOutput``.
- ``verl/experimental/agent_loop/agent_loop.py`` ``_postprocess``: every ``extra_fields`` key becomes
  ``DataProto.non_tensor_batch[key]`` (an object array, one entry per sample); ``responses`` /
  ``response_mask`` [bsz, response_length] are right-padded, so response position t is token t.
- ``verl/workers/utils/padding.py`` ``left_right_2_no_padding``: the batch's ``attention_mask`` picks
  each sample's prompt and response tokens, packed back to back (``unpad_input``, row-major);
  ``no_padding_2_padding`` reads response token t's log-prob at packed row ``end - resp_len - 1 + t``.
- ``verl/workers/engine/{fsdp,automodel,torchtitan}/transformer_impl.py`` ``prepare_model_outputs``
  (the remove-padding sites; there is no ``dp_actor.py`` in 0.9.1): ``logits_rmpad`` [total_nnz, V],
  already divided by the temperature, and ``input_ids_rmpad_rolled`` [total_nnz] go to
  ``verl/utils/torch_functional.py`` ``logprobs_from_logits(logits, labels, inplace_backward=True)``
  (flash-attn cross entropy, NPU, else ``logprobs_from_logits_v2``: full-vocabulary log-probs).

So: the rollout server adds the mask to ``extra_fields`` (:func:`token_output_fields`, from vLLM's
``CompletionOutput`` with ``return_sampling_mask``), it reaches ``non_tensor_batch["sampling_mask"]``
by verl's own postprocessing, :func:`add_to_data_proto` turns it into ``batch["sampling_mask"]``
(int32 [bsz, response_length, W], ``-1`` padding, aligned with ``responses``) so that verl's
``DataProto`` / ``TensorDict`` splitting carries it, :func:`rmpad_mask` lays it out as a
:class:`SamplingMask` of ``total_nnz`` rows at the remove-padding site, and :func:`logprobs_from_logits`
is the drop-in replacement of verl's function with the mask as one more argument: rows with ids are
renormalized over them, rows without (prompts, padding, tool tokens) are scored over the full vocabulary
as verl does. ``tests/test_trainer_call_sites.py`` runs those sites, copied from the wheel.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..adapters import vllm as vllm_adapter
from ..core.checks import as_host_array, get_field, is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, as_sampling_mask, concat

__all__ = [
    "MASK_KEY",
    "add_to_data_proto",
    "batch_segments",
    "dense_rows",
    "from_non_tensor_batch",
    "logprobs_from_logits",
    "replay_logprobs",
    "rmpad_mask",
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


def _host_2d(value: Any, *, field: str, binary: bool) -> np.ndarray:
    """``value`` (tensor, array or lists) as a 2-D integer host array; ``binary``: only 0 / 1 (or bools)."""
    arr = as_host_array(value, field=field)
    if arr.ndim != 2:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"{field} must be 2-D, got shape {list(arr.shape)}", field=field)
    if arr.dtype.kind not in "iub":
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{field} must hold integers, got {arr.dtype}", field=field)
    if binary and arr.dtype.kind != "b":
        bad = (arr != 0) & (arr != 1)
        raise_at_first(bad.any(axis=1), ErrorCode.E_RANGE, f"{field} must hold only 0 and 1", field=field)
    return arr


def batch_segments(sampling_mask: Any, batch_size: int, *, field: str = MASK_KEY) -> SamplingMask:
    """One segment per sample: a :class:`SamplingMask` of ``batch_size`` segments as it is, or a dense
    int ``[batch_size, length, W]`` (``-1`` padding, W may be 0: every row empty) as ``length`` rows
    per sample. Anything else, or another number of samples, is ``E_SHAPE`` / ``E_SCHEMA`` naming ``field``."""
    if not is_int(batch_size) or batch_size < 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "batch_size must be an integer >= 0", field="batch_size", value=repr(batch_size)[:80]
        )
    if hasattr(sampling_mask, "__sampling_mask__"):
        mask = as_sampling_mask(sampling_mask, field=field)
        if mask.num_segments != batch_size:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"{mask.num_segments} mask segments for {batch_size} samples", field=field
            )
        return mask
    if sampling_mask is None or isinstance(sampling_mask, (str, bytes, dict)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"expected a SamplingMask or a dense [B, T, W] tensor, got {type(sampling_mask).__name__}",
            field=field,
        )
    dense = as_host_array(sampling_mask, field=field)
    if dense.ndim != 3 or dense.shape[0] != batch_size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"dense {field} must be [{batch_size}, T, W], got {list(dense.shape)}", field=field
        )
    if dense.dtype.kind not in "iu":
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{field} must hold integer ids, got {dense.dtype}", field=field)
    length = dense.shape[1]
    try:
        return SamplingMask.from_dense(
            dense.reshape(batch_size * length, dense.shape[2]), cu_seqlens=np.arange(batch_size + 1) * length
        )
    except SamplingMaskError as exc:
        segment, row = (None, None) if exc.row is None or length == 0 else divmod(exc.row, length)
        raise SamplingMaskError(exc.code, exc.message, segment=segment, row=row, field=field) from None


def rmpad_mask(sampling_mask: Any, attention_mask: Any, responses: Any, *, pad_size: int = 0) -> SamplingMask | None:
    """The mask with one row per packed token, aligned with verl's ``logits_rmpad`` [total_nnz, V] and
    ``input_ids_rmpad_rolled`` [total_nnz] (row i scores token i + 1 of the packed batch).

    ``sampling_mask``: per sample, one row per response token (``batch["sampling_mask"]`` from
    :func:`add_to_data_proto`, [bsz, response_length, W], or a :class:`SamplingMask` of bsz segments);
    ``attention_mask`` [bsz, prompt_length + response_length] and ``responses`` [bsz, response_length]
    as in verl's batch (prompts left-padded, responses right-padded). Sample b's tokens are packed in
    order (``unpad_input``), so response token t sits at packed position
    ``cu[b] + prompt_len[b] + t`` and is scored by row ``cu[b] + prompt_len[b] + t - 1``: that row gets
    the mask's row t; prompt rows, each sample's last row and the ``pad_size`` rows verl appends
    (``output_args["pad_size"]``, without Ulysses SP) are empty (scored over the full vocabulary).
    A non-empty row past a sample's response length, or a sample without a prompt token, is ``E_SHAPE``.
    ``sampling_mask=None`` (a batch without masks) returns None: verl's full-vocabulary log-probs.
    """
    if sampling_mask is None:
        return None
    am = _host_2d(attention_mask, field="attention_mask", binary=True).astype(np.int64)
    resp_shape = tuple(getattr(responses, "shape", None) or np.shape(as_host_array(responses, field="responses")))
    batch, width = am.shape
    if len(resp_shape) != 2 or resp_shape[0] != batch or resp_shape[1] > width:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"responses {list(resp_shape)} do not fit attention_mask {[batch, width]}",
            field="responses",
        )
    if not is_int(pad_size) or pad_size < 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "pad_size must be an integer >= 0", field="pad_size", value=repr(pad_size)[:80]
        )
    prompt_width = width - int(resp_shape[1])
    resp_am = am[:, prompt_width:]
    raise_at_first(
        np.asarray((np.diff(resp_am, axis=1) > 0).any(axis=1)),
        ErrorCode.E_SHAPE,
        "the response part of attention_mask is not right-padded",
        field="attention_mask",
    )
    prompt_len = am[:, :prompt_width].sum(axis=1)
    resp_len = resp_am.sum(axis=1)
    cu = np.concatenate([[0], np.cumsum(prompt_len + resp_len)]).astype(np.int64)
    mask = batch_segments(sampling_mask, batch)
    seg_rows = np.diff(mask.cu_seqlens)
    seg = np.repeat(np.arange(batch), seg_rows)
    t = np.arange(mask.num_rows) - mask.cu_seqlens[seg]
    lengths = mask.row_lengths
    _raise_at_first_row(
        (t >= resp_len[seg]) & (lengths > 0), seg, t, "mask row past the sample's response (attention_mask)"
    )
    _raise_at_first_row(
        (prompt_len[seg] == 0) & (lengths > 0), seg, t, "sample without a prompt token: no logits score its first token"
    )
    used = lengths > 0
    out_lengths = np.zeros(int(cu[-1]) + int(pad_size), np.int64)
    out_lengths[cu[seg[used]] + prompt_len[seg[used]] - 1 + t[used]] = lengths[used]
    out_cu = cu if pad_size == 0 else np.append(cu, out_lengths.size)
    offsets = np.concatenate([[0], np.cumsum(out_lengths)]).astype(np.int64)
    return SamplingMask(mask.ids, offsets, cu_seqlens=out_cu, vocab_size=mask.vocab_size)


def _raise_at_first_row(bad: np.ndarray, seg: np.ndarray, row: np.ndarray, message: str) -> None:
    if bad.any():
        k = int(np.argmax(bad))
        raise SamplingMaskError(ErrorCode.E_SHAPE, message, segment=int(seg[k]), row=int(row[k]), field=MASK_KEY)


def logprobs_from_logits(logits: Any, labels: Any, inplace_backward: bool = True, *, sampling_mask: Any = None) -> Any:
    """verl's ``logprobs_from_logits`` with the mask: ``logits`` [..., V] (temperature-scaled, as verl
    passes them), ``labels`` [...] and ``sampling_mask``: a :class:`SamplingMask` with one row per
    label (row-major; at verl's remove-padding sites, [total_nnz, V] logits: :func:`rmpad_mask`), or
    a dense int [..., W] (``-1`` padding; W may be 0), or None (verl's full-vocabulary result).
    Log-probs of ``labels`` renormalized over each row's ids; a row without ids over the full
    vocabulary. ``inplace_backward`` is accepted for the signature (nothing is done in place). A label
    outside its row is ``E_MISSING_SAMPLED`` naming the row."""
    return replay_logprobs(logits, labels, sampling_mask)


def _check_temperature(temperature: Any) -> float:
    value = float(temperature) if isinstance(temperature, (int, float, np.integer, np.floating)) else math.nan
    if isinstance(temperature, (bool, np.bool_)) or not math.isfinite(value) or value <= 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "temperature must be a finite number > 0",
            field="temperature",
            value=repr(temperature)[:80],
        )
    return value


def replay_logprobs(logits: Any, labels: Any, sampling_mask: Any, temperature: Any = 1.0) -> Any:
    """Log-probs of ``labels`` [...] from ``logits`` [..., V] / ``temperature`` over ``sampling_mask``:
    a :class:`SamplingMask` of ``labels.numel()`` rows (row-major), a dense int [..., W] (``-1``
    padding, W >= 0) or None; an empty row scores over the full vocabulary. Bad input is
    :class:`SamplingMaskError` naming the field (``logits``, ``labels``, ``temperature``, ``sampling_mask``)."""
    import torch

    from ..reference_scorer import masked_logprobs

    tau = _check_temperature(temperature)
    if not isinstance(logits, torch.Tensor) or logits.ndim < 1 or logits.shape[-1] == 0:
        got = list(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"logits must be a tensor [..., V] with V >= 1, got {got}", field="logits"
        )
    if not logits.dtype.is_floating_point:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"logits must be floating, got {logits.dtype}", field="logits")
    if not isinstance(labels, torch.Tensor):
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, f"labels must be an integer tensor, got {type(labels).__name__}", field="labels"
        )
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"labels must be integers, got {labels.dtype}", field="labels")
    vocab = int(logits.shape[-1])
    shape = tuple(labels.shape)
    if tuple(logits.shape[:-1]) != shape:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"logits {list(logits.shape)} do not match labels {list(shape)}", field="labels"
        )
    flat = logits.reshape(-1, vocab)
    targets = labels.reshape(-1)
    num_rows = int(targets.shape[0])
    mask: Any
    if sampling_mask is None:
        mask = targets.new_full((num_rows, 0), -1)
    elif hasattr(sampling_mask, "__sampling_mask__"):
        mask = as_sampling_mask(sampling_mask, field=MASK_KEY)
        if mask.num_rows != num_rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"sampling_mask has {mask.num_rows} rows for {num_rows} labels {list(shape)}"
                " (at verl's remove-padding sites build it with rmpad_mask)",
                field=MASK_KEY,
            )
    elif isinstance(sampling_mask, (torch.Tensor, np.ndarray)):
        if sampling_mask.ndim < 1 or tuple(sampling_mask.shape[:-1]) != shape:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"sampling_mask {list(sampling_mask.shape)} does not match labels {list(shape)} + [W]"
                " (at verl's remove-padding sites, [total_nnz] labels: use rmpad_mask)",
                field=MASK_KEY,
            )
        mask = sampling_mask.reshape(num_rows, int(sampling_mask.shape[-1]))
    else:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"sampling_mask must be a SamplingMask, a dense tensor or None, got {type(sampling_mask).__name__}",
            field=MASK_KEY,
        )
    try:
        out = masked_logprobs(flat, mask, targets, temperature=tau, ignore_index=None)
    except SamplingMaskError as exc:
        field = {"dense": MASK_KEY, "ids": MASK_KEY, "mask": MASK_KEY, "targets": "labels"}.get(
            exc.field or "", exc.field
        )
        raise SamplingMaskError(exc.code, exc.message, row=exc.row, field=field, value=exc.value) from None
    assert out.logprobs is not None  # masked_logprobs always returns them
    return out.logprobs.reshape(shape)
