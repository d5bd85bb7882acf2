"""Helpers shared by the adapters: duck-typed field access, strict base64, fast nested-list flattening."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import layouts
from ..alignment import as_host_array
from ..codecs import _buffers
from ..errors import ErrorCode, SamplingMaskError
from ..limits import Limits, checked_nbytes
from ..model import SamplingMask

__all__ = [
    "MISSING",
    "array_from_base64",
    "array_to_base64",
    "float_array",
    "get_field",
    "int_array",
    "ragged_from_lists",
]

MISSING: Any = object()


def get_field(obj: Any, name: str, default: Any = MISSING, *, where: str | None = None) -> Any:
    """``obj[name]`` for mappings, ``obj.name`` otherwise; ``default`` (or ``E_SCHEMA``) when absent."""
    if isinstance(obj, Mapping):
        if name in obj:
            return obj[name]
    elif hasattr(obj, name):
        return getattr(obj, name)
    if default is not MISSING:
        return default
    field = f"{where}.{name}" if where else name
    raise SamplingMaskError(ErrorCode.E_SCHEMA, f"missing field {name!r}", field=field)


def int_array(value: Any, dtype: type, *, field: str, ndim: int = 1) -> np.ndarray:
    """A C-contiguous integer array (numpy, torch or lists); see :func:`layouts.as_int_array`."""
    try:
        host = as_host_array(value, field=field)
    except SamplingMaskError:
        raise
    except (TypeError, ValueError) as exc:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"not an integer array: {exc}", field=field) from None
    return layouts.as_int_array(host, dtype, field=field, ndim=ndim)


def float_array(value: Any, *, field: str, size: int | None = None, ndim: int = 1) -> np.ndarray:
    """A float32 array (NaN / -inf kept); ``E_DTYPE`` for non-numbers, ``E_SHAPE`` for a wrong size."""
    try:
        arr = as_host_array(value)
    except (TypeError, ValueError) as exc:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"not a float array: {exc}", field=field) from None
    if arr.size == 0 and arr.dtype.kind in "iuO":
        arr = arr.astype(np.float32).reshape((0,) * ndim)
    if arr.dtype.kind not in "iuf":
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected numbers, got {arr.dtype}", field=field)
    if arr.ndim != ndim:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {ndim} dimension(s), got {arr.ndim}", field=field)
    if size is not None and arr.shape[0] != size:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {size} values, got {arr.shape[0]}", field=field)
    return np.ascontiguousarray(arr, dtype=np.float32)


def array_from_base64(
    text: Any, dtype: str, *, field: str, limits: Limits, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """A read-only little-endian ``dtype`` array from strict base64 text, through the wire helpers of
    :mod:`sampling_mask.codecs._buffers`: the decoded size is derived from the text length and checked
    against ``limits`` and ``shape`` (``E_LIMIT`` / ``E_BYTES``) before decoding; bad base64 is ``E_ENCODING``.
    Without ``shape`` the array is 1-D and the bytes must hold whole values (``E_BYTES``)."""
    wire = _buffers.WIRE_DTYPES[dtype]
    if not isinstance(text, str):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"expected base64 text, got {type(text).__name__}", field=field)
    if shape is None:
        if not text.isascii() or len(text) % 4:
            raise SamplingMaskError(ErrorCode.E_ENCODING, "not padded ASCII base64", field=field, value=len(text))
        decoded = len(text) // 4 * 3 - (2 if text.endswith("==") else 1 if text.endswith("=") else 0)
        if decoded % wire.itemsize:
            raise SamplingMaskError(
                ErrorCode.E_BYTES, f"{decoded} bytes are not whole {dtype} values", field=field, value=decoded
            )
        shape = (decoded // wire.itemsize,)
    nbytes = checked_nbytes(shape, wire.itemsize, limits, field=field)
    raw = _buffers.decode_base64(text, nbytes, limits, field=field)
    return _buffers.array_from_buffer(raw, wire, shape, limits, field=field)


def array_to_base64(array: np.ndarray, dtype: str) -> str:
    """Standard base64 of ``array`` as little-endian ``dtype`` in C order."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode(
        "ascii"
    )


def ragged_from_lists(rows: Any, *, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32, offsets int64) from nested lists of ids, as strict as ``SamplingMask.from_rows``."""
    generic = SamplingMask.from_rows(rows, limits=limits, validate=False)
    return generic.ids, generic.offsets
