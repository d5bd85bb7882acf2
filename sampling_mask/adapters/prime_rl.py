"""prime-rl / verifiers adapter (PrimeIntellect-ai/prime-rl #3431, "native sampling replay").

Matches:

* Transport, one per sample: ``{"ids": base64 int32 [nnz], "counts": base64 int32 [num_tokens]}``
  (the orchestrator's ``SamplingMask`` with ``ids`` / ``counts`` numpy fields works too; raw
  ``bytes`` are read as little-endian int32). One count per token of the sample, aligned with its
  token ids; count 0 means "no mask" (prompt, tool and observation tokens). ``None`` = no mask at all.
* Trainer: ``[b, s, K]`` int32, ``-1``-padded, aligned to the labels: position t holds the row of
  token t+1 (the token the logits at t score), the last position of each sample is empty.

prime-rl pads or truncates ``counts`` to the sample length as a backstop; here a length mismatch is
an error (``E_SHAPE``), never a silent rewrite.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import alignment
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask
from ._common import array_from_base64, array_to_base64, get_field, int_array

__all__ = ["from_trainer_tensor", "from_wire", "to_trainer_tensor", "to_wire"]


def _int32_field(value: Any, name: str, limits: Limits) -> np.ndarray:
    if isinstance(value, str):
        return array_from_base64(value, "int32", field=name, limits=limits)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) > limits.max_bytes:
            raise SamplingMaskError(ErrorCode.E_LIMIT, f"{len(raw)} bytes exceed the limit", field=name)
        if len(raw) % 4:
            raise SamplingMaskError(ErrorCode.E_BYTES, f"{len(raw)} bytes are not whole int32 values", field=name)
        return np.frombuffer(raw, dtype="<i4")
    return int_array(value, np.int32, field=name)


def from_wire(
    sampling_mask: Any,
    *,
    num_tokens: int | None = None,
    vocab_size: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **kwargs: Any,
) -> SamplingMask:
    """One sample's mask from ``{ids, counts}``; ``None`` gives ``num_tokens`` empty rows.
    ``num_tokens``, when given, must equal the number of counts (``E_SHAPE``)."""
    if sampling_mask is None:
        if num_tokens is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "no mask and no num_tokens", field="sampling_mask")
        rows = check_count(num_tokens, limits.max_rows, "num_tokens", field="num_tokens")
        return SamplingMask(np.zeros(0, np.int32), np.zeros(rows + 1, np.int64), vocab_size=vocab_size, **kwargs)
    ids = _int32_field(get_field(sampling_mask, "ids", where="sampling_mask"), "ids", limits)
    counts = _int32_field(get_field(sampling_mask, "counts", where="sampling_mask"), "counts", limits)
    if num_tokens is not None and counts.size != int(num_tokens):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{counts.size} counts for a sample of {int(num_tokens)} tokens", field="counts"
        )
    return SamplingMask.from_counts(ids, counts, vocab_size=vocab_size, limits=limits, **kwargs)


def to_wire(mask: SamplingMask) -> dict[str, str]:
    """``{"ids": base64 int32, "counts": base64 int32}`` of a one-sample mask (rows in stored order)."""
    ids, counts = mask.to_counts()
    return {"ids": array_to_base64(ids, "int32"), "counts": array_to_base64(counts, "int32")}


def to_trainer_tensor(mask: SamplingMask, *, seq_len: int | None = None, width: int | None = None) -> np.ndarray:
    """``[b, s, K]`` int32 aligned to labels from a mask whose segments are samples with one row per
    token (the :func:`from_wire` alignment). The first token of a sample must have no support."""
    return alignment.to_batch_dense(alignment.shift_left(mask), seq_len, width)


def from_trainer_tensor(tensor: Any, lengths: Any, **kwargs: Any) -> SamplingMask:
    """Inverse of :func:`to_trainer_tensor`: token-aligned rows per sample from ``[b, s, K]`` and the
    sample lengths ``[b]``."""
    return alignment.unshift(alignment.from_batch_dense(tensor, lengths, **kwargs))
