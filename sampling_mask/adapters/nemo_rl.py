"""NeMo-RL-style adapter: per-token top-k tensors aligned with the input tokens.

Matches the layout proposed for NeMo-RL's top-k / top-p GRPO path (NVIDIA-NeMo/RL #2053 and the
sampling-mask follow-up): ``token_ids`` ``[B, T, K]`` and ``sizes`` ``[B, T]`` in a batch dict,
aligned with ``input_ids`` (position t describes token t), ``sizes == 0`` at prompt, observation and
padding positions. Entries at or past ``sizes[b, t]`` are padding and are not read.
``input_lengths`` ``[B]`` (NeMo-RL's name) bounds each sequence; a non-zero size past it is an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..alignment import to_batch_dense
from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask
from ._common import get_field, int_array

__all__ = ["from_batch", "from_tensors", "to_tensors"]


def from_tensors(
    token_ids: Any, sizes: Any, *, input_lengths: Any = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any
) -> SamplingMask:
    """One segment per sequence, one row per input token (``input_lengths[b]`` rows, or T)."""
    ids3 = int_array(token_ids, np.int64, field="token_ids", ndim=3)
    size2 = int_array(sizes, np.int64, field="sizes", ndim=2)
    b, t, k = ids3.shape
    check_count(b, limits.max_segments, "batch size", field="token_ids")
    check_count(b * t, limits.max_rows, "row count", field="token_ids")
    if size2.shape != (b, t):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"sizes must be [{b}, {t}], got {list(size2.shape)}", field="sizes")
    if size2.size and (int(size2.min()) < 0 or int(size2.max()) > k):
        bad = np.argwhere((size2 < 0) | (size2 > k))[0]
        code = ErrorCode.E_RANGE if size2[bad[0], bad[1]] < 0 else ErrorCode.E_WIDTH
        raise SamplingMaskError(
            code,
            f"size outside [0, K={k}]",
            field="sizes",
            segment=int(bad[0]),
            row=int(bad[1]),
            value=int(size2[bad[0], bad[1]]),
        )
    if input_lengths is None:
        lengths = np.full(b, t, dtype=np.int64)
    else:
        lengths = int_array(input_lengths, np.int64, field="input_lengths")
        if lengths.size != b or (lengths.size and (int(lengths.min()) < 0 or int(lengths.max()) > t)):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"input_lengths must be {b} values in [0, {t}]", field="input_lengths"
            )
    inside = np.arange(t, dtype=np.int64)[None, :] < lengths[:, None]
    beyond = ~inside & (size2 > 0)
    if beyond.any():
        seg, pos = (int(v) for v in np.argwhere(beyond)[0])
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"non-zero size at position {pos}, past the input length", field="sizes", segment=seg
        )
    row_sizes = size2[inside]
    ids = ids3[inside][np.arange(k, dtype=np.int64)[None, :] < row_sizes[:, None]]
    return SamplingMask(
        layouts.as_int_array(ids, np.int32, field="token_ids"),
        layouts.counts_to_offsets(row_sizes),
        cu_seqlens=layouts.counts_to_offsets(lengths),
        limits=limits,
        **kwargs,
    )


def from_batch(batch: Any, **kwargs: Any) -> SamplingMask:
    """From a batch dict / object with ``token_ids``, ``sizes`` and optionally ``input_lengths``."""
    return from_tensors(
        get_field(batch, "token_ids"),
        get_field(batch, "sizes"),
        input_lengths=get_field(batch, "input_lengths", None),
        **kwargs,
    )


def to_tensors(
    mask: SamplingMask, *, seq_len: int | None = None, width: int | None = None, pad_value: int = -1
) -> tuple[np.ndarray, np.ndarray]:
    """(``token_ids`` int32 ``[B, T, K]``, ``sizes`` int32 ``[B, T]``) from an input-aligned mask, one
    sequence per segment; unused entries hold ``pad_value``."""
    dense = to_batch_dense(mask, seq_len, width)
    sizes = (dense != layouts.PAD).sum(axis=2, dtype=np.int32)
    if pad_value != layouts.PAD:
        dense = np.where(dense == layouts.PAD, np.int32(pad_value), dense)
    return dense, sizes
