"""Miles / slime adapter: flat ids + offsets per sample.

Matches the per-sample transport of the Miles sampling-replay series (radixark/miles #3327-#3332,
SGLang v0.5.20 capture; THUDM/slime #1795): for each ``Sample``, a flat int32 id array and int64
offsets of length ``response_length + 1`` (``offsets[0] == 0``, ``offsets[-1] == len(ids)``), one row
per response token (``Sample.response_length``). Miles records environment and tool tokens with
singleton support (the token itself); those rows are kept as they are.

The series was unmerged when this adapter was written, so the two field names are parameters
(``ids_field``, ``offsets_field``, default ``"sampling_mask_ids"`` / ``"sampling_mask_offsets"``);
a ``(ids, offsets)`` tuple works everywhere a sample does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, concat
from ._common import get_field, int_array

__all__ = ["from_sample", "from_samples", "to_samples"]

IDS_FIELD = "sampling_mask_ids"
OFFSETS_FIELD = "sampling_mask_offsets"


def _pair(sample: Any, ids_field: str, offsets_field: str) -> tuple[Any, Any, Any]:
    if isinstance(sample, tuple):
        if len(sample) != 2:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a sample tuple must be (ids, offsets)", field="sample")
        return sample[0], sample[1], None
    return (
        get_field(sample, ids_field, where="sample"),
        get_field(sample, offsets_field, where="sample"),
        get_field(sample, "response_length", None),
    )


def from_sample(
    sample: Any,
    *,
    ids_field: str = IDS_FIELD,
    offsets_field: str = OFFSETS_FIELD,
    vocab_size: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **kwargs: Any,
) -> SamplingMask:
    """One sample's rows; its ``response_length``, when present, must equal the row count (``E_SHAPE``)."""
    ids_value, offsets_value, response_length = _pair(sample, ids_field, offsets_field)
    ids = int_array(ids_value, np.int32, field=ids_field)
    offsets = int_array(offsets_value, np.int64, field=offsets_field)
    mask = SamplingMask(ids, offsets, vocab_size=vocab_size, limits=limits, **kwargs)
    if response_length is not None and int(response_length) != mask.num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{mask.num_rows} rows for response_length {int(response_length)}",
            field=offsets_field,
        )
    return mask


def from_samples(
    samples: Sequence[Any],
    *,
    ids_field: str = IDS_FIELD,
    offsets_field: str = OFFSETS_FIELD,
    vocab_size: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **kwargs: Any,
) -> SamplingMask:
    """One segment per sample, in order (errors name the sample as the segment)."""
    if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes, bytearray)):
        # Found by fuzzing (fuzz/regressions/adapter_miles/): an int here was a TypeError.
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "samples must be a sequence of samples", field="samples", value=type(samples).__name__
        )
    if len(samples) == 0:
        return SamplingMask(
            np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=[0], vocab_size=vocab_size, **kwargs
        )
    masks = []
    for index, sample in enumerate(samples):
        try:
            masks.append(
                from_sample(
                    sample,
                    ids_field=ids_field,
                    offsets_field=offsets_field,
                    vocab_size=vocab_size,
                    limits=limits,
                    **kwargs,
                )
            )
        except SamplingMaskError as exc:
            raise SamplingMaskError(
                exc.code, exc.message, row=exc.row, segment=index, field=exc.field, value=exc.value
            ) from None
    return concat(masks)


def to_samples(mask: SamplingMask) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(ids int32, offsets int64)`` per segment, rows in stored order."""
    out = []
    for b in range(mask.num_segments):
        seg = mask.segment(b)
        out.append((np.array(seg.ids, dtype=np.int32), np.array(seg.offsets, dtype=np.int64)))
    return out
