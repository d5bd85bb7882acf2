"""Miles adapter: per-sample flat ids + offsets (``Sample.rollout_sampling_mask_*``, ``RolloutSamplingMask``).

Miles has **no merged sampling mask** (main @ 31f1ca961a94 has none). Every reader and writer
below follows one unmerged version, named in the table; all are kept until one is merged.

| | |
| --- | --- |
| upstream | radixark/miles — **unmerged** (main @ 31f1ca961a94 has no sampling mask) |
| ``Sample`` fields (PR #2595 @ 301be963391856ede8e93a3222395be9be89e70b) | ``miles/utils/types.py``: ``Sample.rollout_sampling_mask_ids: list[int]`` [nnz], ``Sample.rollout_sampling_mask_offsets: list[int]`` [response_length + 1]; ``miles/rollout/generate_utils/sampling_mask.py`` ``_flatten_sampling_supports`` (an empty row is a ``ValueError``), ``append_forced_sampling_tokens`` (tool tokens: singleton support, the token itself). Read by ``from_sample`` (no ``rollout_sampling_mask`` object), written by ``to_sample_fields``; empty rows refused (``E_OFFSETS``) |
| ``RolloutSamplingMask`` A (commit 8c8d1c4777ed) | ``miles/utils/sampling_mask.py``: ``RolloutSamplingMask(ids=, offsets=)`` storing ``_ids`` int32, ``_offsets`` int64; offsets strictly increasing (no empty row) |
| ``RolloutSamplingMask`` / ``PartialSamplingMask`` B (code-index copy, commit not resolvable) | A plus ``concatenate``, ``prefix`` and ``PartialSamplingMask(RolloutSamplingMask)`` whose class flag ``allows_empty_rows = True`` lets a row be empty: that position has no support and is scored over the full vocabulary (Tinker datums score every position). ``from_sample`` reads an object's ``allows_empty_rows`` flag (or ``allow_empty_rows=``); ``to_rollout_sampling_masks(form="partial")`` writes its keyword arguments (no logprobs in B) |
| ``RolloutSamplingMask`` C (code-index copy) | ``support_logprobs=`` stored as ``_support_logprobs`` float32 [nnz]; ``form="support_logprobs"`` |
| ``RolloutSamplingMask`` D (code-index copy) | ``logprobs=`` stored as ``_logprobs`` float32 [nnz] (the default ``form="logprobs"``). C and D refuse logprobs that are not finite, above 0 or whose row mass is not 1 (``_validate_normalized_rows``, ``E_RANGE`` here) |
| ordering | one row per response token; ids in SGLang's order (unsorted), kept as stored |
| empty | forbidden by PR #2595, A, C, D (``E_OFFSETS`` naming the row, on read and write); allowed by B's ``PartialSamplingMask`` (no support at that position) |
| no mask / over cap | no mask: both fields ``None`` (``from_sample`` raises ``E_SCHEMA``); no cap (SGLang's ``sampling_mask_max_tokens`` bounds the whole response) |
| logprobs | ``_logprobs`` / ``_support_logprobs``: the sampler's normalized log-prob of each id, read and written as ``support_logprobs`` |
| tests build | Sample field values from a copy of ``_flatten_sampling_supports`` plus the forced-token append (``tests/fixtures/upstream/trainers/make_trainers.py``); B / C / D objects from cited copies of their constructors, which also accept what the writers here produce (``tests/fixtures/upstream/miles/make_miles_versions.py``) |

A ``(ids, offsets)`` tuple works wherever a sample does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..core.checks import as_float_array, get_field, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import ReaderOptions, SamplingMask, as_sampling_mask, mask_options
from ._common import check_response_length, check_rows_nonempty, int_array, masks_from_samples

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["from_sample", "from_samples", "to_rollout_sampling_masks", "to_sample_fields"]

IDS_FIELD = "rollout_sampling_mask_ids"
OFFSETS_FIELD = "rollout_sampling_mask_offsets"
MASK_FIELD = "rollout_sampling_mask"
#: ``to_rollout_sampling_masks`` targets: D's ``logprobs=``, C's ``support_logprobs=``, B's ``PartialSamplingMask``.
Form = Literal["logprobs", "support_logprobs", "partial"]


def _parts(sample: Any) -> tuple[Any, Any, Any, Any, bool]:
    """(ids, offsets, logprobs, response_length, allows_empty_rows) of a sample, a
    ``RolloutSamplingMask`` / ``PartialSamplingMask`` or a tuple."""
    if isinstance(sample, tuple):
        if len(sample) != 2:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a sample tuple must be (ids, offsets)", field="sample")
        return sample[0], sample[1], None, None, False
    holder = get_field(sample, MASK_FIELD, None)
    if holder is None and hasattr(sample, "_offsets"):
        holder = sample
    if holder is not None:
        logprobs = get_field(holder, "_logprobs", None)
        if logprobs is None:
            logprobs = get_field(holder, "_support_logprobs", None)
        return (
            get_field(holder, "_ids", where=MASK_FIELD),
            get_field(holder, "_offsets", where=MASK_FIELD),
            logprobs,
            get_field(sample, "response_length", None),
            get_field(holder, "allows_empty_rows", False) is True,
        )
    return (
        get_field(sample, IDS_FIELD, where="sample"),
        get_field(sample, OFFSETS_FIELD, where="sample"),
        None,
        get_field(sample, "response_length", None),
        False,
    )


@mask_options(ReaderOptions)
def from_sample(sample: Any, *, allow_empty_rows: bool | None = None, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """One sample's rows from ``rollout_sampling_mask`` (``_ids``, ``_offsets``, ``_logprobs`` or
    ``_support_logprobs``) when set, else ``rollout_sampling_mask_ids`` / ``_offsets``. Its
    ``response_length``, when present, must equal the row count (``E_SHAPE``). An empty row is
    ``E_OFFSETS`` unless ``allow_empty_rows`` (default: the object's ``allows_empty_rows`` class
    flag, ``True`` for version B's ``PartialSamplingMask`` only). The keyword options
    (:class:`~sampling_mask.core.model.ReaderOptions`) go to the mask; the object's
    logprobs replace ``support_logprobs``."""
    ids_value, offsets_value, logprobs_value, response_length, partial = _parts(sample)
    if allow_empty_rows is None:
        allow_empty_rows = partial
    ids = int_array(ids_value, np.int32, field="ids")
    offsets = int_array(offsets_value, np.int64, field="offsets")
    if logprobs_value is not None:
        options["support_logprobs"] = as_float_array(logprobs_value, field="logprobs", size=ids.size, integers=True)
    mask = SamplingMask(ids, offsets, **options)
    if not allow_empty_rows:
        check_rows_nonempty(mask, "offsets")
    return check_response_length(mask, response_length, "offsets")


@mask_options(ReaderOptions)
def from_samples(
    samples: Sequence[Any], *, allow_empty_rows: bool | None = None, **options: Unpack[ReaderOptions]
) -> SamplingMask:
    """One segment per sample, in order (errors name the sample as the segment); keyword arguments
    as :func:`from_sample`, applied to every sample."""

    def read(sample: Any) -> SamplingMask:
        return from_sample(sample, allow_empty_rows=allow_empty_rows, **options)

    return masks_from_samples(samples, read, options["vocab_size"])


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
    raise_at_first(
        bad_row, ErrorCode.E_RANGE, "support logprobs must be normalized log-probabilities", field="logprobs"
    )


def to_rollout_sampling_masks(mask: SamplingMask, *, form: Form = "logprobs") -> list[dict[str, np.ndarray | None]]:
    """Per segment, the keyword arguments of one unmerged constructor (see the table): ``form="logprobs"``
    (D) ``RolloutSamplingMask(ids=, offsets=, logprobs=)``, ``"support_logprobs"`` (C)
    ``RolloutSamplingMask(ids=, offsets=, support_logprobs=)``, with int32 ids, int64 offsets and
    float32 ``support_logprobs`` (``None`` without); as those constructors, an empty row is refused
    (``E_OFFSETS``) and so are logprobs that do not normalize per row (``E_RANGE``). ``"partial"``
    (B) ``PartialSamplingMask(ids=, offsets=)``: empty rows allowed; B has no logprobs, so none are
    written."""
    mask = as_sampling_mask(mask)
    if form not in ("logprobs", "support_logprobs", "partial"):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "form must be logprobs, support_logprobs or partial",
            field="form",
            value=short_repr(form),
        )
    if form != "partial":
        check_rows_nonempty(mask, "rows")
        _check_normalized(mask)
    out: list[dict[str, np.ndarray | None]] = []
    for b in range(mask.num_segments):
        seg = mask.segment(b)
        kwargs: dict[str, np.ndarray | None] = {
            "ids": np.array(seg.ids, dtype=np.int32),
            "offsets": np.array(seg.offsets, dtype=np.int64),
        }
        if form != "partial":
            lp = seg.support_logprobs
            kwargs[form] = None if lp is None else np.array(lp, dtype=np.float32)
        out.append(kwargs)
    return out
