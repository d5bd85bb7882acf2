"""SGLang adapter: ``return_sampling_mask`` responses (sgl-project/sglang #27408, #33593; v0.5.20).

Matches:

* ``meta_info["output_token_sampling_mask"]``: ``list[list[int]]``, one row per output token, ids
  in no particular order; a row may be wider than ``top_k`` because SGLang's threshold kernels keep
  every id tied at the cutoff. ``None`` / absent when the feature was off or the request aborted.
* ``meta_info["output_token_sampling_logprobs"]``: one float per output token, the sampled token's
  logprob renormalized over its row (stored as ``sampled_logprobs``).
* ``meta_info["output_token_sampling_mask_length"]``: the number of rows accumulated so far (an
  int, for streaming clients); a list is read as per-row lengths. Either must agree with the rows.
* ``meta_info["output_token_sampling_mask_truncated"]`` (bounded mode, #34037): ``True`` means rows
  were cut to ``--sampling-mask-max-tokens`` and are not the full support: refused unless
  ``allow_truncated=True`` (then recorded as ``metadata["truncated"] = True``).
* The response's ``output_ids`` are the sampled ids.
* Chunked form (PD / packed transport): ``lengths`` int32 [rows], ``token_ids`` int32 [nnz],
  ``logprobs`` float32 per id (``support_logprobs``) or per row (``sampled_logprobs``).

Rows keep SGLang's order (``to_meta_info`` writes them back as they were); compare masks with ``==``,
which compares row sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from ._common import get_field, int_array, ragged_from_lists

__all__ = ["from_chunked", "from_meta_info", "from_response", "to_chunked", "to_meta_info"]

OnMissing = Literal["raise", "none"]
LogprobsPer = Literal["auto", "id", "row"]


def from_meta_info(
    meta_info: Mapping[str, Any],
    *,
    output_ids: Any = None,
    on_missing: OnMissing = "raise",
    allow_truncated: bool = False,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask | None:
    """From a response's ``meta_info``; ``output_ids`` (the sampled ids) are optional. A missing mask
    raises ``E_SCHEMA`` or returns ``None`` per ``on_missing``."""
    rows = get_field(meta_info, "output_token_sampling_mask", None)
    if rows is None:
        if on_missing == "none":
            return None
        reason = get_field(meta_info, "finish_reason", None)
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"no output_token_sampling_mask (return_sampling_mask off or request aborted; finish_reason {reason!r})",
            field="meta_info.output_token_sampling_mask",
        )
    if not isinstance(rows, list):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "output_token_sampling_mask must be a list of lists", field="output_token_sampling_mask"
        )
    ids, offsets = ragged_from_lists(rows, limits=limits)
    num_rows = offsets.size - 1
    declared = get_field(meta_info, "output_token_sampling_mask_length", None)
    if declared is not None:
        if isinstance(declared, (int, np.integer)) and not isinstance(declared, bool):
            if int(declared) != num_rows:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"output_token_sampling_mask_length {int(declared)} != {num_rows} rows",
                    field="output_token_sampling_mask_length",
                )
        else:
            lengths = int_array(declared, np.int64, field="output_token_sampling_mask_length")
            if lengths.size != num_rows:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"{lengths.size} lengths for {num_rows} rows",
                    field="output_token_sampling_mask_length",
                )
            differ = np.flatnonzero(lengths != np.diff(offsets))
            if differ.size:
                raise SamplingMaskError(
                    ErrorCode.E_OFFSETS,
                    "output_token_sampling_mask_length disagrees with the row's length",
                    field="output_token_sampling_mask_length",
                    row=int(differ[0]),
                )
    meta = dict(metadata or {})
    if get_field(meta_info, "output_token_sampling_mask_truncated", False):
        if not allow_truncated:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "rows were truncated by bounded mode and are not the full support (pass allow_truncated=True)",
                field="output_token_sampling_mask_truncated",
            )
        meta["truncated"] = True
    sampled_lp = get_field(meta_info, "output_token_sampling_logprobs", None)
    return SamplingMask(
        ids,
        offsets,
        sampled_token_ids=None if output_ids is None else int_array(output_ids, np.int32, field="output_ids"),
        sampled_logprobs=None
        if sampled_lp is None
        else layouts.as_float_array(sampled_lp, field="output_token_sampling_logprobs", size=num_rows),
        vocab_size=vocab_size,
        metadata=meta or None,
        limits=limits,
    )


def from_response(
    response: Mapping[str, Any], *, on_missing: OnMissing = "raise", **kwargs: Any
) -> SamplingMask | None:
    """From a ``/generate`` response: ``meta_info`` plus ``output_ids`` when present."""
    return from_meta_info(
        get_field(response, "meta_info"),
        output_ids=get_field(response, "output_ids", None),
        on_missing=on_missing,
        **kwargs,
    )


def to_meta_info(mask: SamplingMask) -> dict[str, Any]:
    """``output_token_sampling_mask`` (stored order), ``output_token_sampling_mask_length`` and, with
    ``sampled_logprobs``, ``output_token_sampling_logprobs``."""
    out: dict[str, Any] = {
        "output_token_sampling_mask": mask.to_rows(),
        "output_token_sampling_mask_length": mask.num_rows,
    }
    if mask.sampled_logprobs is not None:
        out["output_token_sampling_logprobs"] = mask.sampled_logprobs.tolist()
    return out


def from_chunked(
    chunked: Any,
    *,
    logprobs_per: LogprobsPer = "auto",
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """From ``{lengths, token_ids, logprobs?}``. ``logprobs_per="auto"`` reads per id when there are
    nnz values and per row when there are T; when nnz == T the two readings coincide only if every
    row holds one id (read per row), otherwise pass ``logprobs_per`` (``E_SCHEMA``)."""
    lengths = int_array(get_field(chunked, "lengths"), np.int64, field="lengths")
    token_ids = int_array(get_field(chunked, "token_ids"), np.int32, field="token_ids")
    logprobs_value = get_field(chunked, "logprobs", None)
    kwargs: dict[str, Any] = {}
    if logprobs_value is not None:
        values = layouts.as_float_array(logprobs_value, field="logprobs")
        per = logprobs_per
        if per == "auto":
            if values.size == token_ids.size and values.size != lengths.size:
                per = "id"
            elif values.size == lengths.size and values.size != token_ids.size:
                per = "row"
            elif values.size == lengths.size and bool(np.all(lengths == 1)):
                per = "row"
            else:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, "cannot tell per-id from per-row logprobs: pass logprobs_per", field="logprobs"
                )
        if per == "id":
            kwargs["support_logprobs"] = values
        elif per == "row":
            kwargs["sampled_logprobs"] = values
        else:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "logprobs_per must be auto, id or row", field="logprobs_per")
    return SamplingMask.from_counts(
        token_ids, lengths, vocab_size=vocab_size, metadata=metadata, limits=limits, **kwargs
    )


def to_chunked(mask: SamplingMask, *, logprobs_per: Literal["id", "row"] = "row") -> dict[str, np.ndarray]:
    """``{lengths int32, token_ids int32, logprobs float32?}`` with logprobs from ``sampled_logprobs``
    (``"row"``) or ``support_logprobs`` (``"id"``) when the mask has them."""
    ids, counts = mask.to_counts()
    out = {"lengths": counts, "token_ids": np.array(ids)}
    source = mask.sampled_logprobs if logprobs_per == "row" else mask.support_logprobs
    if source is not None:
        out["logprobs"] = np.array(source, dtype=np.float32)
    return out
