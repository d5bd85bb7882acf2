"""Miles adapter: per-sample flat ids + offsets (``Sample.rollout_sampling_mask_*``, ``RolloutSamplingMask``).

| | |
| --- | --- |
| upstream | radixark/miles — **unmerged** (main @ 31f1ca961a94 has no sampling mask) |
| version | PR #2595 @ 301be963391856ede8e93a3222395be9be89e70b ``miles/utils/types.py`` (``Sample`` fields), ``miles/rollout/generate_utils/sampling_mask.py`` (``_flatten_sampling_supports``, ``append_forced_sampling_tokens``); the later ``miles/utils/sampling_mask.py`` ``RolloutSamplingMask`` (code-index copy; PR #2200 series, unmerged) |
| fields | ``Sample.rollout_sampling_mask_ids: list[int]`` [nnz], ``Sample.rollout_sampling_mask_offsets: list[int]`` [response_length + 1] (defaults of this module); later ``Sample.rollout_sampling_mask: RolloutSamplingMask`` with private ``_ids`` int32 tensor, ``_offsets`` int64 tensor and optional ``_logprobs`` float32 tensor [nnz] (constructor ``RolloutSamplingMask(ids=, offsets=, logprobs=)``) |
| ordering | one row per response token; ids in SGLang's order (unsorted), kept as stored |
| empty rows | **forbidden** upstream (offsets strictly increasing; ``ValueError``): refused here on read and write (``E_OFFSETS`` naming the row). Environment / tool tokens carry singleton support (the token itself, ``append_forced_sampling_tokens``). |
| no mask / over cap | no mask: both fields ``None`` (``from_sample`` then raises ``E_SCHEMA``); no cap (SGLang's ``sampling_mask_max_tokens`` bounds the whole response) |
| logprobs | ``_logprobs``: the sampler's normalized log-prob of each id (each row sums to 1), read and written as ``support_logprobs`` |
| tests build | Sample field values from a copy of ``_flatten_sampling_supports`` plus the forced-token append (two turns and a tool call); ``RolloutSamplingMask``-shaped objects with torch tensors (``tests/fixtures/upstream/trainers/make_trainers.py``) |

A ``(ids, offsets)`` tuple works wherever a sample does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.checks import as_float_array
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from ._common import (
    check_response_length,
    check_rows_nonempty,
    get_field,
    int_array,
    masks_from_samples,
)

__all__ = ["from_sample", "from_samples", "to_rollout_sampling_masks", "to_sample_fields"]

IDS_FIELD = "rollout_sampling_mask_ids"
OFFSETS_FIELD = "rollout_sampling_mask_offsets"
MASK_FIELD = "rollout_sampling_mask"


def _parts(sample: Any) -> tuple[Any, Any, Any, Any]:
    """(ids, offsets, logprobs, response_length) of a sample, a ``RolloutSamplingMask`` or a tuple."""
    if isinstance(sample, tuple):
        if len(sample) != 2:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a sample tuple must be (ids, offsets)", field="sample")
        return sample[0], sample[1], None, None
    holder = get_field(sample, MASK_FIELD, None)
    if holder is None and hasattr(sample, "_offsets"):
        holder = sample
    if holder is not None:
        return (
            get_field(holder, "_ids", where=MASK_FIELD),
            get_field(holder, "_offsets", where=MASK_FIELD),
            get_field(holder, "_logprobs", None),
            get_field(sample, "response_length", None),
        )
    return (
        get_field(sample, IDS_FIELD, where="sample"),
        get_field(sample, OFFSETS_FIELD, where="sample"),
        None,
        get_field(sample, "response_length", None),
    )


def from_sample(
    sample: Any, *, vocab_size: int | None = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any
) -> SamplingMask:
    """One sample's rows from ``rollout_sampling_mask`` (``_ids``, ``_offsets``, ``_logprobs``) when set,
    else ``rollout_sampling_mask_ids`` / ``_offsets``. Its ``response_length``, when present, must equal
    the row count (``E_SHAPE``); an empty row is ``E_OFFSETS``."""
    ids_value, offsets_value, logprobs_value, response_length = _parts(sample)
    ids = int_array(ids_value, np.int32, field="ids")
    offsets = int_array(offsets_value, np.int64, field="offsets")
    if logprobs_value is not None:
        kwargs["support_logprobs"] = as_float_array(logprobs_value, field="logprobs", size=ids.size, integers=True)
    mask = SamplingMask(ids, offsets, vocab_size=vocab_size, limits=limits, **kwargs)
    return check_response_length(check_rows_nonempty(mask, "offsets"), response_length, "offsets")


def from_samples(
    samples: Sequence[Any], *, vocab_size: int | None = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any
) -> SamplingMask:
    """One segment per sample, in order (errors name the sample as the segment)."""
    return masks_from_samples(
        samples, lambda s: from_sample(s, vocab_size=vocab_size, limits=limits, **kwargs), vocab_size
    )


def to_sample_fields(mask: SamplingMask) -> list[dict[str, list[int]]]:
    """Per segment, ``{"rollout_sampling_mask_ids": [...], "rollout_sampling_mask_offsets": [...]}``
    (PR #2595's ``Sample`` fields); an empty row is ``E_OFFSETS``."""
    mask = as_sampling_mask(mask)
    check_rows_nonempty(mask, "rows")
    out = []
    for b in range(mask.num_segments):
        seg = mask.segment(b)
        out.append({IDS_FIELD: seg.ids.tolist(), OFFSETS_FIELD: seg.offsets.tolist()})
    return out


def _check_normalized(mask: SamplingMask) -> None:
    """``RolloutSamplingMask`` refuses logprobs that are not finite, above 0, or whose row mass is not 1
    (``math.isclose(mass, 1, rel_tol=1e-4, abs_tol=1e-6)``): ``E_RANGE`` naming the row."""
    lp = mask.support_logprobs
    if lp is None or mask.num_rows == 0:
        return
    lp64 = lp.astype(np.float64)
    bad_value = ~np.isfinite(lp64) | (lp64 > 1e-6)
    mass = np.add.reduceat(np.exp(np.where(bad_value, 0.0, lp64)), mask.offsets[:-1])
    bad_row = np.maximum.reduceat(bad_value, mask.offsets[:-1]) | ~np.isclose(mass, 1.0, rtol=1e-4, atol=1e-6)
    if bad_row.any():
        row = int(np.flatnonzero(bad_row)[0])
        raise SamplingMaskError(
            ErrorCode.E_RANGE, "support logprobs must be normalized log-probabilities", row=row, field="logprobs"
        )


def to_rollout_sampling_masks(mask: SamplingMask) -> list[dict[str, np.ndarray | None]]:
    """Per segment, the keyword arguments of ``RolloutSamplingMask(ids=, offsets=, logprobs=)``: int32
    ids, int64 offsets, float32 ``support_logprobs`` (``None`` without). As upstream's constructor,
    an empty row is refused (``E_OFFSETS``) and so are logprobs that do not normalize per row (``E_RANGE``)."""
    mask = as_sampling_mask(mask)
    check_rows_nonempty(mask, "rows")
    _check_normalized(mask)
    out: list[dict[str, np.ndarray | None]] = []
    for b in range(mask.num_segments):
        seg = mask.segment(b)
        lp = seg.support_logprobs
        out.append(
            {
                "ids": np.array(seg.ids, dtype=np.int32),
                "offsets": np.array(seg.offsets, dtype=np.int64),
                "logprobs": None if lp is None else np.array(lp, dtype=np.float32),
            }
        )
    return out
