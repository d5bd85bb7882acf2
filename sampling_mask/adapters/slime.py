"""slime adapter: top-p kept token ids + offsets per sample (``Sample.rollout_top_p_token_*``) and
SGLang ``meta_info`` keys of slime's patch.

| | |
| --- | --- |
| upstream | THUDM/slime, merged: main @ 624b824a898ab0ec1fcb4d373004c7f3852bf515 |
| files | ``slime/utils/types.py`` (``Sample`` fields, ``_extract_rollout_top_p_token_data``, ``_pad_rollout_top_p_offsets``, ``_merge_rollout_top_p_token_data``), ``slime/utils/misc.py`` ``decode_int32_meta_array``, ``docker/patch/latest/sglang-top_p.patch`` (``tokenizer_manager.py`` ``_encode_top_p_token_ids``), ``slime/ray/rollout.py`` (train data keys) |
| fields | ``Sample.rollout_top_p_token_ids`` [nnz], ``Sample.rollout_top_p_token_offsets`` [response_length + 1], int32 lists or tensors; train data keys of the same names; SGLang ``meta_info["top_p_token_ids"]`` / ``["top_p_token_offsets"]`` (aliases ``top_p_kept_token_ids`` / ``_offsets``), base64 of int32 little-endian bytes (``decode_int32_meta_array`` also takes bytes, tensors and lists), set once the request finished |
| ordering | one row per response token, ids as SGLang's patch captured them (kept as stored) |
| empty rows | non-trainable spans (tool / observation tokens, ``_pad_rollout_top_p_offsets``): no mask |
| no mask / over cap | both keys absent: ``None`` (no mask); prefill/decode disaggregation replaces a kept set wider than ``MAX_PD_TOP_P_TOKEN_IDS`` by the sampled token alone (a singleton row that is not the support: not detectable from the payload) |
| tests build | meta_info from a copy of ``_encode_top_p_token_ids``; ``Sample`` fields from copies of ``_pad_rollout_top_p_offsets`` + ``_merge_rollout_top_p_token_data`` over two turns and a tool span (``tests/fixtures/upstream/trainers/make_trainers.py``) |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.checks import get_field
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from ._common import (
    array_from_base64,
    array_from_bytes,
    array_to_base64,
    check_response_length,
    int_array,
    masks_from_samples,
    passthrough,
)

__all__ = ["from_meta_info", "from_sample", "from_samples", "to_meta_info", "to_sample_fields"]

IDS_FIELD = "rollout_top_p_token_ids"
OFFSETS_FIELD = "rollout_top_p_token_offsets"
IDS_KEYS = ("top_p_token_ids", "top_p_kept_token_ids")
OFFSETS_KEYS = ("top_p_token_offsets", "top_p_kept_token_offsets")


def _int32(value: Any, field: str, limits: Limits) -> np.ndarray:
    """``decode_int32_meta_array``'s inputs: base64 text, raw bytes, tensors / arrays / lists."""
    if isinstance(value, str):
        return array_from_base64(value, "int32", field=field, limits=limits)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return array_from_bytes(value, "int32", field=field, limits=limits)
    return int_array(value, np.int32, field=field)


def _mask(
    ids: np.ndarray, offsets: np.ndarray, vocab_size: int | None, limits: Limits, options: dict[str, Any]
) -> SamplingMask:
    if offsets.size == 0:
        raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets must hold at least [0]", field="offsets")
    return SamplingMask(ids, offsets.astype(np.int64), vocab_size=vocab_size, limits=limits, **options)


def from_meta_info(
    meta_info: Mapping[str, Any],
    *,
    vocab_size: int | None = None,
    sampled_token_ids: Any = None,
    sampled_logprobs: Any = None,
    temperature: Any = None,
    support_logprobs: Any = None,
    metadata: Mapping[str, Any] | None = None,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask | None:
    """One request's rows from slime's SGLang ``meta_info`` keys; ``None`` when neither key is there
    (no mask), ``E_SCHEMA`` when only one is. The other keyword arguments go to
    :class:`~sampling_mask.SamplingMask` (companions, ``metadata``, ``validate``)."""
    if not isinstance(meta_info, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "meta_info must be a mapping", field="meta_info")
    ids_value = next((meta_info[k] for k in IDS_KEYS if k in meta_info), None)
    offsets_value = next((meta_info[k] for k in OFFSETS_KEYS if k in meta_info), None)
    if ids_value is None and offsets_value is None:
        return None
    if ids_value is None or offsets_value is None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "top-p token ids and offsets come together", field=IDS_KEYS[0])
    ids = _int32(ids_value, IDS_KEYS[0], limits)
    offsets = _int32(offsets_value, OFFSETS_KEYS[0], limits)
    return _mask(
        ids,
        offsets,
        vocab_size,
        limits,
        passthrough(locals()),
    )


def from_sample(
    sample: Any,
    *,
    vocab_size: int | None = None,
    sampled_token_ids: Any = None,
    sampled_logprobs: Any = None,
    temperature: Any = None,
    support_logprobs: Any = None,
    metadata: Mapping[str, Any] | None = None,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """One sample's rows from ``rollout_top_p_token_ids`` / ``_offsets`` (or an ``(ids, offsets)`` tuple);
    its ``response_length``, when present, must equal the row count (``E_SHAPE``). Keyword arguments
    as :func:`from_meta_info`."""
    if isinstance(sample, tuple):
        if len(sample) != 2:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a sample tuple must be (ids, offsets)", field="sample")
        ids_value, offsets_value, response_length = sample[0], sample[1], None
    else:
        ids_value = get_field(sample, IDS_FIELD, where="sample")
        offsets_value = get_field(sample, OFFSETS_FIELD, where="sample")
        response_length = get_field(sample, "response_length", None)
    options = passthrough(locals())
    mask = _mask(
        _int32(ids_value, IDS_FIELD, limits), _int32(offsets_value, OFFSETS_FIELD, limits), vocab_size, limits, options
    )
    return check_response_length(mask, response_length, OFFSETS_FIELD)


def from_samples(
    samples: Sequence[Any],
    *,
    vocab_size: int | None = None,
    sampled_token_ids: Any = None,
    sampled_logprobs: Any = None,
    temperature: Any = None,
    support_logprobs: Any = None,
    metadata: Mapping[str, Any] | None = None,
    validate: bool = True,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """One segment per sample, in order (errors name the sample as the segment); keyword arguments
    as :func:`from_meta_info`, applied to every sample."""
    options = passthrough(locals())
    return masks_from_samples(
        samples,
        lambda s: from_sample(s, vocab_size=vocab_size, limits=limits, **options),
        vocab_size,
    )


def _int32_offsets(mask: SamplingMask) -> np.ndarray:
    if mask.nnz > np.iinfo(np.int32).max:
        raise SamplingMaskError(ErrorCode.E_LIMIT, "slime's offsets are int32", field="offsets", value=mask.nnz)
    return mask.stored_offsets.astype(np.int32)


def to_meta_info(mask: SamplingMask) -> dict[str, str]:
    """``{"top_p_token_ids": base64 int32, "top_p_token_offsets": base64 int32}`` of a one-request mask
    (what ``_encode_top_p_token_ids`` writes)."""
    mask = as_sampling_mask(mask)
    return {
        IDS_KEYS[0]: array_to_base64(mask.ids, "int32"),
        OFFSETS_KEYS[0]: array_to_base64(_int32_offsets(mask), "int32"),
    }


def to_sample_fields(mask: SamplingMask) -> list[dict[str, list[int]]]:
    """Per segment, ``{"rollout_top_p_token_ids": [...], "rollout_top_p_token_offsets": [...]}``."""
    mask = as_sampling_mask(mask)
    out = []
    for b in range(mask.num_segments):
        seg = mask.segment(b)
        out.append({IDS_FIELD: seg.ids.tolist(), OFFSETS_FIELD: _int32_offsets(seg).tolist()})
    return out
