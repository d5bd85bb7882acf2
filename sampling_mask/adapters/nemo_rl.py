"""NeMo-RL adapter: the dense batch layout of NVIDIA-NeMo/RL PR #3937 ("feat: sampling mask replay").

**Unmerged upstream**: PR #3937 (zyzhou5, opened 2026-08-31) is open; mainline NeMo-RL records no
mask and recomputes top-k / top-p on the trainer's logits (``logits_sampling_utils.py``, PR #2053).
The layout below is the PR's, read from its code as stored in the public code index (its
``nemo_rl/algorithms/logits_sampling_utils.py`` ``SamplingMask`` / ``apply_sampling_mask``, its
sampling-mask replay helpers ``attach_sampling_mask_to_assistant_message`` /
``backfill_missing_sampling_masks`` and the tests of its vLLM worker's
``pad_and_align_sampling_mask``); copies of those functions, cited, are in
``tests/fixtures/upstream/nemo_rl/pr3937.py`` and the tests run them.

+-------------------------------+---------------------------------------------+------------------------------------+
| field (batch key)             | shape, dtype                                | meaning                            |
+===============================+=============================================+====================================+
| ``sampling_mask_token_ids``   | int32 ``[B, T, K]``, ``K`` = the configured | row ``t`` of sequence ``b``: the   |
|                               | ``top_k`` (> 0); slots past the size are    | ids eligible when ``input_ids[b,   |
|                               | **0** (a real id: only the size tells them  | t]`` was sampled, in vLLM's        |
|                               | apart)                                      | (ascending) order                  |
+-------------------------------+---------------------------------------------+------------------------------------+
| ``sampling_mask_sizes``       | int32 ``[B, T]``, each in ``[0, K]``        | valid prefix length of each row; 0 |
|                               |                                             | for prompt, observation and        |
|                               |                                             | padding positions                  |
+-------------------------------+---------------------------------------------+------------------------------------+

Rows are token-aligned (row ``t`` goes with ``input_ids[b, t]``, prompt rows included), not
label-aligned. A size-0 row is read as an empty row here (no recorded support); NeMo-RL's
``apply_sampling_mask`` scores it over the singleton ``{target}`` and refuses it at an active
loss token. Sizes are authoritative: the padding 0s are never read as ids, so rows that hold id 0
round-trip exactly. NeMo-RL requires the width ``K > 0`` and ``top_k > 0`` (no row wider than ``K``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import layouts
from ..core.checks import get_field
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask, as_sampling_mask
from ._common import int_array, passthrough

__all__ = ["SIZES_FIELD", "TOKEN_IDS_FIELD", "from_batch", "from_data", "to_batch", "to_data"]

#: Batch keys of PR #3937 (``SAMPLING_MASK_TOKEN_IDS`` / ``SAMPLING_MASK_SIZES``).
TOKEN_IDS_FIELD = "sampling_mask_token_ids"
SIZES_FIELD = "sampling_mask_sizes"


def from_batch(
    sampling_mask: Any,
    sampling_mask_sizes: Any,
    *,
    input_lengths: Any = None,
    input_ids: Any = None,
    vocab_size: int | None = None,
    sampled_logprobs: Any = None,
    temperature: Any = None,
    support_logprobs: Any = None,
    metadata: Mapping[str, Any] | None = None,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """From ``sampling_mask_token_ids`` ``[B, T, K]`` and ``sampling_mask_sizes`` ``[B, T]`` (numpy,
    torch or lists): one segment per sequence, row ``t`` = the first ``sizes[b, t]`` ids of
    ``[b, t]``. ``input_lengths`` ``[B]`` keeps the first ``input_lengths[b]`` rows of sequence
    ``b`` (right padding cut; the cut rows must have size 0); ``input_ids`` ``[B, T]`` gives the
    sampled ids (checked against every non-empty row). ``E_SHAPE`` / ``E_RANGE`` name the sequence
    (``segment``) and position (``row``, within the batch's flattened ``[B * T]`` rows)."""
    dense = int_array(sampling_mask, np.int32, field=TOKEN_IDS_FIELD, ndim=3)
    sizes = int_array(sampling_mask_sizes, np.int64, field=SIZES_FIELD, ndim=2)
    batch, seq_len, width = dense.shape
    check_count(batch * seq_len, limits.max_rows, "row count", field=TOKEN_IDS_FIELD)
    check_count(width, limits.max_width, "width K", field=TOKEN_IDS_FIELD)
    check_count(batch, limits.max_segments, "sequence count", field=TOKEN_IDS_FIELD)
    if sizes.shape != (batch, seq_len):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{SIZES_FIELD} must be [{batch}, {seq_len}], got {list(sizes.shape)}", field=SIZES_FIELD
        )
    if width == 0 and batch * seq_len:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "the support width K must be > 0", field=TOKEN_IDS_FIELD)
    flat_sizes = sizes.reshape(-1)
    bad = (flat_sizes < 0) | (flat_sizes > width)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            f"size outside [0, K = {width}]",
            field=SIZES_FIELD,
            segment=row // max(seq_len, 1),
            row=row,
            value=int(flat_sizes[row]),
        )
    lengths = np.full(batch, seq_len, dtype=np.int64)
    if input_lengths is not None:
        lengths = int_array(input_lengths, np.int64, field="input_lengths")
        if lengths.shape != (batch,):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"input_lengths must be [{batch}], got {list(lengths.shape)}", field="input_lengths"
            )
        out = (lengths < 0) | (lengths > seq_len)
        if out.any():
            b = int(np.flatnonzero(out)[0])
            raise SamplingMaskError(
                ErrorCode.E_RANGE,
                f"input length outside [0, {seq_len}]",
                field="input_lengths",
                segment=b,
                value=int(lengths[b]),
            )
        beyond = (np.arange(seq_len)[None, :] >= lengths[:, None]) & (sizes > 0)
        if beyond.any():
            row = int(np.flatnonzero(beyond.reshape(-1))[0])
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                "a row past its sequence's input length has a support",
                field=SIZES_FIELD,
                segment=row // seq_len,
                row=row,
            )
    kept = (np.arange(seq_len)[None, :] < lengths[:, None]).reshape(-1)
    counts = flat_sizes[kept]
    slots = np.arange(width, dtype=np.int64)[None, :] < counts[:, None]
    ids = dense.reshape(batch * seq_len, width)[kept][slots]
    sampled_token_ids = None
    if input_ids is not None:
        tokens = int_array(input_ids, np.int64, field="input_ids", ndim=2)
        if tokens.shape != (batch, seq_len):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"input_ids must be [{batch}, {seq_len}], got {list(tokens.shape)}",
                field="input_ids",
            )
        sampled_token_ids = tokens.reshape(-1)[kept]
    return SamplingMask(
        ids,
        layouts.counts_to_offsets(counts),
        cu_seqlens=layouts.counts_to_offsets(lengths),
        vocab_size=vocab_size,
        limits=limits,
        **passthrough(locals()),
    )


def from_data(
    data: Any,
    *,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask | None:
    """From a NeMo-RL batch (a ``BatchedDataDict`` or any mapping): ``None`` when it holds neither
    field (replay off), ``E_SCHEMA`` when it holds only one (PR #3937's ``sampling_mask_from_data``
    refuses the torn pair too). The batch's ``input_lengths`` and ``input_ids``, when present, cut
    the right padding and give the sampled ids (:func:`from_batch`)."""
    has_ids = get_field(data, TOKEN_IDS_FIELD, None) is not None
    has_sizes = get_field(data, SIZES_FIELD, None) is not None
    if not has_ids and not has_sizes:
        return None
    if has_ids != has_sizes:
        missing = SIZES_FIELD if has_ids else TOKEN_IDS_FIELD
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"the batch lacks {missing!r} (the pair is torn)", field=missing)
    return from_batch(
        get_field(data, TOKEN_IDS_FIELD),
        get_field(data, SIZES_FIELD),
        input_lengths=get_field(data, "input_lengths", None),
        input_ids=get_field(data, "input_ids", None),
        vocab_size=vocab_size,
        metadata=metadata,
        validate=validate,
        limits=limits,
    )


def to_batch(
    mask: SamplingMask, *, width: int | None = None, seq_len: int | None = None, as_torch: bool = False
) -> tuple[Any, Any]:
    """``(sampling_mask_token_ids [B, T, K], sampling_mask_sizes [B, T])``, int32, one batch row per
    segment (one when the mask has none), rows in stored order, slots past each size **0**.
    ``width``: K (default the widest row, at least 1; a wider row is ``E_WIDTH``); ``seq_len``: T
    (default the longest segment; shorter segments get size-0 rows after theirs, a longer one is
    ``E_SHAPE``). ``as_torch``: torch tensors instead of numpy arrays."""
    mask = as_sampling_mask(mask)
    lengths = np.diff(mask.offsets)
    widest = int(lengths.max()) if lengths.size else 0
    k = max(widest, 1) if width is None else check_count(width, DEFAULT_LIMITS.max_width, "width", field="width")
    if k < 1 or widest > k:
        row = int(np.argmax(lengths > k)) if widest > k else None
        raise SamplingMaskError(
            ErrorCode.E_WIDTH, f"NeMo-RL needs 1 <= K and every row within K = {k}", field="width", row=row
        )
    cu = mask.cu_seqlens if mask.cu_seqlens is not None else np.array([0, mask.num_rows], dtype=np.int64)
    seg_lengths = np.diff(cu)
    longest = int(seg_lengths.max()) if seg_lengths.size else 0
    t = longest if seq_len is None else check_count(seq_len, DEFAULT_LIMITS.max_rows, "seq_len", field="seq_len")
    if longest > t:
        segment = int(np.argmax(seg_lengths > t))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"a sequence has {longest} rows, more than seq_len = {t}",
            field="seq_len",
            segment=segment,
        )
    batch = seg_lengths.size
    positions = np.arange(mask.num_rows, dtype=np.int64) - np.repeat(cu[:-1], seg_lengths)
    flat_rows = np.repeat(np.arange(batch, dtype=np.int64), seg_lengths) * t + positions
    sizes = np.zeros(batch * t, dtype=np.int32)
    sizes[flat_rows] = lengths
    dense = np.zeros((batch * t, k), dtype=np.int32)
    dense[flat_rows] = np.maximum(layouts.ragged_to_dense(mask.ids, mask.offsets, k), 0)  # -1 padding to 0
    out = dense.reshape(batch, t, k), sizes.reshape(batch, t)
    if as_torch:
        import torch

        return torch.from_numpy(out[0]), torch.from_numpy(out[1])
    return out


def to_data(mask: SamplingMask, **kwargs: Any) -> dict[str, Any]:
    """``{"sampling_mask_token_ids": ..., "sampling_mask_sizes": ...}`` (:func:`to_batch`'s keywords)."""
    dense, sizes = to_batch(mask, **kwargs)
    return {TOKEN_IDS_FIELD: dense, SIZES_FIELD: sizes}
