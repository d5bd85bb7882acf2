"""SkyRL adapter: the dense top-k layouts of skyrl-train's sampling-mask replay (NovaSky-AI/SkyRL #883, #2082; open PRs as of 2026-09).

Matches:

* Dense rows: int32 ``[T, top_k]``, each row its support in rank order then ``-1`` trailing padding;
  an all ``-1`` row is an observation / prompt token (no support). ``TrainingInput.sampling_mask``
  holds the same rows per sequence.
* Packed: ``values`` ``[sum(seqlen), top_k]`` + ``cu_seqlens`` int32 ``[B+1]``, one segment per sequence.
* Wire envelope: ``{"data": base64 of the C-order little-endian bytes, "shape": [T, top_k],
  "dtype": "int32"}`` (``"int64"`` and ``"torch.int32"`` / ``"torch.int64"`` are read too).

Rows keep their rank order; ``to_*`` writes stored order, so a mask read from SkyRL writes back the
same bytes. A row wider than ``top_k`` cannot be written (``E_WIDTH``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask, as_sampling_mask
from ._common import array_from_base64, array_to_base64, get_field, int_array

__all__ = ["from_dense", "from_envelope", "from_packed", "to_dense", "to_envelope", "to_packed"]

_ENVELOPE_DTYPES = {
    "int32": "int32",
    "torch.int32": "int32",
    "<i4": "int32",
    "int64": "int64",
    "torch.int64": "int64",
    "<i8": "int64",
}


def from_dense(values: Any, *, cu_seqlens: Any = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any) -> SamplingMask:
    """From ``[T, top_k]`` rank-ordered rows with ``-1`` trailing padding (numpy or torch)."""
    dense = int_array(values, np.int32, field="values", ndim=2)
    cu = None if cu_seqlens is None else int_array(cu_seqlens, np.int64, field="cu_seqlens")
    return SamplingMask.from_dense(dense, cu_seqlens=cu, limits=limits, **kwargs)


def to_dense(mask: SamplingMask, top_k: int) -> np.ndarray:
    """int32 ``[T, top_k]``, stored (rank) order then ``-1``; ``E_WIDTH`` when a row is wider."""
    mask = as_sampling_mask(mask)
    return mask.to_dense(top_k)


def from_packed(values: Any, cu_seqlens: Any, **kwargs: Any) -> SamplingMask:
    """From packed ``values`` ``[sum(seqlen), top_k]`` and ``cu_seqlens`` ``[B+1]``."""
    return from_dense(values, cu_seqlens=cu_seqlens, **kwargs)


def to_packed(mask: SamplingMask, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(``values`` int32 ``[T, top_k]``, ``cu_seqlens`` int32 ``[B+1]``)."""
    mask = as_sampling_mask(mask)
    return mask.to_dense(top_k), mask.cu_seqlens.astype(np.int32)


def from_envelope(
    envelope: Mapping[str, Any], *, cu_seqlens: Any = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any
) -> SamplingMask:
    """From ``{data, shape, dtype}``. Sizes are checked against ``limits`` and the base64 length before
    decoding; bad base64 is ``E_ENCODING``, bytes that do not tile ``shape`` are ``E_BYTES``."""
    if not isinstance(envelope, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "envelope must be a mapping", field="envelope")
    shape_value = get_field(envelope, "shape", where="envelope")
    dtype_value = get_field(envelope, "dtype", where="envelope")
    if (
        not isinstance(shape_value, (list, tuple))
        or len(shape_value) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape_value)
    ):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            "shape must be [T, top_k] non-negative integers",
            field="shape",
            value=repr(shape_value)[:80],
        )
    rows, width = (int(d) for d in shape_value)
    if rows < 0 or width < 0:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "shape must be non-negative", field="shape", value=repr(shape_value))
    check_count(rows, limits.max_rows, "row count", field="shape")
    check_count(width, limits.max_width, "dense width", field="shape")
    dtype = _ENVELOPE_DTYPES.get(dtype_value) if isinstance(dtype_value, str) else None
    if dtype is None:
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, "dtype must be int32 or int64", field="dtype", value=repr(dtype_value)[:80]
        )
    values = array_from_base64(
        get_field(envelope, "data", where="envelope"), dtype, field="data", limits=limits, shape=(rows, width)
    )
    return from_dense(values, cu_seqlens=cu_seqlens, limits=limits, **kwargs)


def to_envelope(mask: SamplingMask, top_k: int) -> dict[str, Any]:
    """``{"data", "shape": [T, top_k], "dtype": "int32"}`` of :func:`to_dense`."""
    mask = as_sampling_mask(mask)
    dense = to_dense(mask, top_k)
    return {"data": array_to_base64(dense, "int32"), "shape": list(dense.shape), "dtype": "int32"}
