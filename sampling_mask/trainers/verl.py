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
- ``verl/workers/engine/fsdp/transformer_impl.py`` ``FSDPEngineWithLMHead.prepare_model_outputs`` (there
  is no ``dp_actor.py`` in 0.9.1): with remove-padding, ``logits_rmpad`` [total_nnz, V] (already divided
  by the temperature) and ``input_ids_rmpad_rolled`` [total_nnz]; without it, the padded logits narrowed
  per sample and concatenated into the same packed order; both go to ``verl/utils/torch_functional.py``
  ``logprobs_from_logits`` (flash-attn cross entropy, NPU, else ``logprobs_from_logits_v2``: full-vocabulary
  log-probs). Under Ulysses SP (``verl/utils/ulysses.py``) each rank holds an equal contiguous chunk of
  the padded packed rows, and the log-probs are all-gathered afterwards.

So: the rollout server adds the mask to ``extra_fields`` (:func:`token_output_fields`, from vLLM's
``CompletionOutput`` with ``return_sampling_mask``), it reaches ``non_tensor_batch["sampling_mask"]``
by verl's own postprocessing, :func:`add_to_data_proto` checks the trainer's configuration
(:func:`check_config`: only where the mask will be applied) and turns it into ``batch["sampling_mask"]``
(int32 [bsz, response_length, W], ``-1`` padding, aligned with ``responses``) so that verl's
``DataProto`` / ``TensorDict`` splitting carries it, :func:`rmpad_mask` lays it out as a
:class:`SamplingMask` of ``total_nnz`` rows (this rank's share under SP, :func:`sequence_shard`), and
:func:`logprobs_from_logits` is the drop-in replacement of verl's function with the mask as one more
argument: rows with ids are renormalized over them, rows without (prompts, padding, tool tokens) are
scored over the full vocabulary as verl does. ``tests/test_trainers_call_sites.py`` runs those sites,
copied from the wheel. Each tensor argument is checked by :func:`~sampling_mask.core.checks.checked_tensor`
with its own dtypes (float logits; integer labels, ids and masks).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..adapters import vllm as vllm_adapter
from ..core.checks import FLOAT_DTYPES, INTEGER_DTYPES, as_host_array, checked_tensor, get_field, is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import SamplingMask, as_sampling_mask, concat
from ..data import alignment

__all__ = [
    "MASK_KEY",
    "STRATEGIES",
    "add_to_data_proto",
    "batch_segments",
    "check_config",
    "dense_rows",
    "from_non_tensor_batch",
    "integer_matrix",
    "logprobs_from_logits",
    "replay_logprobs",
    "rmpad_mask",
    "sequence_shard",
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
    """int32 [segments, length, W] (``-1`` padding, W >= 1): row t of segment b at ``[b, t + shift]``
    (:func:`sampling_mask.data.alignment.to_batch_dense`, as a tensor); ``E_SHAPE`` naming the segment
    when its rows do not fit."""
    import torch

    mask = as_sampling_mask(mask)
    width = max(1, int(mask.row_lengths.max(initial=0)))
    return torch.from_numpy(alignment.to_batch_dense(mask, length, width, shift=shift))


#: The training strategies whose log-prob site docs/trainers.md patches and tests run: verl 0.9.1's
#: ``FSDPEngineWithLMHead`` (``verl/workers/engine/fsdp/transformer_impl.py``) is registered for both.
STRATEGIES = ("fsdp", "fsdp2")


def check_config(config: Any) -> None:
    """Refuse a verl trainer configuration in which a carried mask would not be applied (``E_SCHEMA``
    naming the option): ``actor_rollout_ref.actor.strategy`` (and ``.ref.strategy``, when set) outside
    :data:`STRATEGIES` (megatron, veomni, torchtitan, automodel: their log-prob sites are not the
    patched one), or ``actor_rollout_ref.model.use_fused_kernels`` (the fused head never forms the
    logits the mask renormalizes). Remove-padding on or off and Ulysses SP are accepted."""
    root = get_field(config, "actor_rollout_ref", where="config")
    for role in ("actor", "ref"):
        section = get_field(root, role, None)
        strategy = None if section is None else get_field(section, "strategy", None)
        if strategy is None and role == "ref":
            continue
        if strategy not in STRATEGIES:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"replay runs at the FSDP engine's log-prob site ({', '.join(STRATEGIES)}), not {strategy!r}",
                field=f"actor_rollout_ref.{role}.strategy",
                value=short_repr(strategy),
            )
    model = get_field(root, "model", None)
    if model is not None and get_field(model, "use_fused_kernels", False):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "fused kernels compute log-probs without the logits the mask renormalizes",
            field="actor_rollout_ref.model.use_fused_kernels",
        )


def add_to_data_proto(data: Any, *, config: Any, key: str = MASK_KEY) -> Any:
    """``data.batch[key]`` = :func:`dense_rows` of ``data.non_tensor_batch[key]`` over
    ``data.batch["responses"]``'s length (the non-tensor entry is removed); returns ``data``. The
    trainer's ``config`` is checked first (:func:`check_config`): a mask is carried only where it is applied."""
    check_config(config)
    mask = from_non_tensor_batch(data.non_tensor_batch, key=key)
    responses = data.batch["responses"]
    if mask.num_segments != responses.shape[0]:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{mask.num_segments} masks for {responses.shape[0]} samples", field=key
        )
    data.batch[key] = dense_rows(mask, int(responses.shape[1])).to(responses.device)
    data.non_tensor_batch.pop(key)
    return data


def integer_matrix(value: Any, *, field: str, binary: bool) -> np.ndarray:
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
            ErrorCode.E_SCHEMA, "batch_size must be an integer >= 0", field="batch_size", value=short_repr(batch_size)
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


def rmpad_mask(
    sampling_mask: Any, attention_mask: Any, responses: Any, *, pad_size: int = 0, sp_group: Any = None
) -> SamplingMask | None:
    """The mask with one row per packed token, aligned with verl's ``logits_rmpad`` [total_nnz, V] and
    ``input_ids_rmpad_rolled`` [total_nnz] (row i scores token i + 1 of the packed batch).

    ``sampling_mask``: per sample, one row per response token (``batch["sampling_mask"]`` from
    :func:`add_to_data_proto`, [bsz, response_length, W], or a :class:`SamplingMask` of bsz segments);
    ``attention_mask`` [bsz, prompt_length + response_length] and ``responses`` [bsz, response_length]
    as in verl's batch (prompts left-padded, responses right-padded). Sample b's tokens are packed in
    order (``unpad_input``), so response token t sits at packed position
    ``cu[b] + prompt_len[b] + t`` and is scored by row ``cu[b] + prompt_len[b] + t - 1``: that row gets
    the mask's row t; prompt rows, each sample's last row and the ``pad_size`` rows verl appends
    (``output_args["pad_size"]``: the static and the Ulysses padding) are empty (full vocabulary).
    A non-empty row past a sample's response length, or a sample without a prompt token, is ``E_SHAPE``.
    ``sampling_mask=None`` (a batch without masks) returns None: verl's full-vocabulary log-probs.

    ``sp_group``: the Ulysses sequence-parallel group (the engine's ``ulysses_parallel_group``; None
    without SP). verl's ``ulysses_pad_and_slice_inputs`` cuts the padded packed sequence into equal
    contiguous chunks, rank r scoring chunk r; the mask is cut the same way (:func:`sequence_shard`),
    so its rows match this rank's ``logits_rmpad`` and ``input_ids_rmpad_rolled``.
    """
    if sampling_mask is None:
        return None
    am = integer_matrix(attention_mask, field="attention_mask", binary=True).astype(np.int64)
    resp_shape = integer_matrix(responses, field="responses", binary=False).shape
    batch, width = am.shape
    if resp_shape[0] != batch or resp_shape[1] > width:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"responses {list(resp_shape)} do not fit attention_mask {[batch, width]}",
            field="responses",
        )
    if not is_int(pad_size) or pad_size < 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "pad_size must be an integer >= 0", field="pad_size", value=short_repr(pad_size)
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
    for bad, message in (
        ((t >= resp_len[seg]) & (lengths > 0), "mask row past the sample's response (attention_mask)"),
        ((prompt_len[seg] == 0) & (lengths > 0), "sample without a prompt token: no logits score its first token"),
    ):
        raise_at_first(bad, ErrorCode.E_SHAPE, message, field=MASK_KEY, row=lambda k: t[k], segment=lambda k: seg[k])
    used = lengths > 0
    out_lengths = np.zeros(int(cu[-1]) + int(pad_size), np.int64)
    out_lengths[cu[seg[used]] + prompt_len[seg[used]] - 1 + t[used]] = lengths[used]
    out_cu = cu if pad_size == 0 else np.append(cu, out_lengths.size)
    offsets = np.concatenate([[0], np.cumsum(out_lengths)]).astype(np.int64)
    packed = SamplingMask(mask.ids, offsets, cu_seqlens=out_cu, vocab_size=mask.vocab_size)
    return packed if sp_group is None else sequence_shard(packed, sp_group, field="sp_group")


def sequence_shard(mask: SamplingMask, group: Any, *, field: str = "group", pad: bool = False) -> SamplingMask:
    """The rows rank r of ``group`` (a ``torch.distributed`` process group) scores when a packed sequence
    of ``mask.num_rows`` rows is cut into P equal contiguous chunks (P the group's size): chunk r
    (:func:`sampling_mask.data.alignment.shard_mask` over the sequence as one segment). ``pad``: the rows
    are first padded with empty rows to a multiple of P (OpenRLHF's ``get_tensor_in_current_ring_attn_rank``,
    ``openrlhf/models/ring_attn_utils.py``); without, they must be one already (verl's
    ``ulysses_pad_and_slice_inputs``, ``verl/utils/ulysses.py``, whose pad is in ``pad_size``):
    ``E_SHAPE`` otherwise. A group that is not one of this process's ``E_SCHEMA``."""
    import torch.distributed as dist

    mask = as_sampling_mask(mask)
    why = "rank -1: this process is not in it"
    try:
        size, rank = dist.get_world_size(group), dist.get_rank(group)
    except (RuntimeError, ValueError, TypeError, AttributeError) as exc:
        size, rank, why = 0, -1, f"{type(exc).__name__}: {exc}"[:160]
    if rank < 0:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"not a process group of this process ({why})", field=field)
    if pad:
        mask = alignment.append_padding_segment(mask, -(-mask.num_rows // size) * size)
    elif mask.num_rows % size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{mask.num_rows} packed rows do not split into {size} equal chunks", field=field
        )
    whole = SamplingMask(
        mask.ids, mask.offsets, cu_seqlens=[0, mask.num_rows], vocab_size=mask.vocab_size, validate=False
    )
    return alignment.shard_mask(whole, size, rank)


def logprobs_from_logits(logits: Any, labels: Any, inplace_backward: bool = True, *, sampling_mask: Any = None) -> Any:
    """verl's ``logprobs_from_logits`` with the mask: ``logits`` [..., V] (temperature-scaled, as verl
    passes them), ``labels`` [...] and ``sampling_mask``: a :class:`SamplingMask` with one row per
    label (row-major; at verl's remove-padding sites, [total_nnz, V] logits: :func:`rmpad_mask`), or
    a dense int [..., W] (``-1`` padding; W may be 0), or None (verl's full-vocabulary result).
    Log-probs of ``labels`` renormalized over each row's ids; a row without ids over the full
    vocabulary. ``inplace_backward`` is accepted for the signature (nothing is done in place). A label
    outside its row is ``E_MISSING_SAMPLED`` naming the row."""
    return replay_logprobs(logits, labels, sampling_mask)


#: The smallest normal float32: a temperature below it is subnormal (or 0) where the logits are divided.
_TINY = float(np.finfo(np.float32).tiny)


def _check_temperature(temperature: Any) -> float:
    """A positive normal float (as a float32: the precision logits are divided in); ``E_SCHEMA`` otherwise
    (bools, NaN, inf, 0, negative, subnormal: 1e-45 is one, and turns every scaled logit to inf)."""
    value = float(temperature) if isinstance(temperature, (int, float, np.integer, np.floating)) else math.nan
    if isinstance(temperature, (bool, np.bool_)) or not math.isfinite(value) or value < _TINY:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"temperature must be a finite number >= {_TINY:.7g} (a normal float32)",
            field="temperature",
            value=short_repr(temperature),
        )
    return value


def replay_logprobs(logits: Any, labels: Any, sampling_mask: Any, temperature: Any = 1.0) -> Any:
    """Log-probs of ``labels`` [...] from ``logits`` [..., V] / ``temperature`` over ``sampling_mask``:
    a :class:`SamplingMask` of ``labels.numel()`` rows (row-major), a dense int [..., W] (``-1``
    padding, W >= 0) or None; an empty row scores over the full vocabulary.

    Accepted (:func:`~sampling_mask.core.checks.checked_tensor`): ``logits`` a tensor of float16 /
    bfloat16 / float32 / float64, ``labels`` and a dense mask tensors of integers, ``temperature`` a
    positive normal float32. Anything else, or a log-prob that comes out NaN (NaN logits, logits too
    large for the temperature: ``E_RANGE`` naming the row), is :class:`SamplingMaskError` naming the
    field (``logits``, ``labels``, ``temperature``, ``sampling_mask``)."""
    import torch

    from ..reference_scorer import masked_logprobs

    tau = _check_temperature(temperature)
    if not isinstance(logits, torch.Tensor):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"logits must be a tensor, got {type(logits).__name__}", field="logits"
        )
    checked_tensor(logits, field="logits", dtypes=FLOAT_DTYPES)
    if logits.ndim < 1 or logits.shape[-1] == 0:
        got = list(logits.shape)
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"logits must be [..., V] with V >= 1, got {got}", field="logits")
    if not isinstance(labels, torch.Tensor):
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, f"labels must be an integer tensor, got {type(labels).__name__}", field="labels"
        )
    checked_tensor(labels, field="labels", dtypes=INTEGER_DTYPES)
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
        if isinstance(sampling_mask, torch.Tensor):
            checked_tensor(sampling_mask, field=MASK_KEY, dtypes=INTEGER_DTYPES)
        elif sampling_mask.dtype.kind not in "iu":
            raise SamplingMaskError(
                ErrorCode.E_DTYPE, f"expected integer ids, got {sampling_mask.dtype}", field=MASK_KEY
            )
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
    nan = torch.isnan(out.logprobs.detach())
    if bool(nan.any()):  # NaN logits, or logits / temperature past the float range: never a number to train on
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            "the log-prob is NaN: this row's logits divided by the temperature are not finite numbers",
            field="logits",
            row=int(torch.nonzero(nan)[0]),
        )
    return out.logprobs.reshape(shape)
