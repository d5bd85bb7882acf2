# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/checks.py, vendorable (docs/serving-and-vendoring.md)
"""Input checks every layer shares (numpy and the standard library only): fields of duck-typed
objects, arrays from user or wire values, strict integers, and "raise at the first bad row".

Each raises :class:`~.errors.SamplingMaskError` with the field (and the first bad row) named.

Float arrays take an explicit integer policy, one rule per use (:func:`as_float_array`):

- ``integers=False`` for log-probs handed to the model (``sampled_logprobs``, ``support_logprobs``):
  an integer array there is almost always the token ids passed in the wrong field (``E_DTYPE``);
- ``integers=True`` for temperatures (``temperature=[1, 1]``) and for numbers read from a payload
  (JSON writes ``0`` for ``0.0``; an engine's response, a trace's lists).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import ErrorCode, SamplingMaskError
from .limits import Limits, check_count

__all__ = [
    "MISSING",
    "as_float_array",
    "as_host_array",
    "asarray_checked",
    "check_structure",
    "get_field",
    "is_int",
    "raise_at_first",
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


def is_int(value: Any) -> bool:
    """A Python or numpy integer that is not a bool (``True`` is an ``int`` to Python, never to us)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def raise_at_first(
    bad: np.ndarray, code: ErrorCode, message: str, *, field: str, values: np.ndarray | None = None
) -> None:
    """Nothing when no flag of ``bad`` (one per row) is set; else ``code`` naming the first flagged
    row and, with ``values`` (one per row), its value. Vectorized: one pass over ``bad``."""
    if bad.size and bad.any():
        row = int(np.argmax(bad))
        value = None if values is None else values[row].item()
        raise SamplingMaskError(code, message, field=field, row=row, value=value)


def asarray_checked(value: Any, *, field: str) -> np.ndarray:
    """``np.asarray(value)``; ragged nesting or unconvertible objects are ``E_SHAPE``, not a bare ValueError;
    Python lists mixing ``bool`` with ints (which numpy reads as integers) are ``E_DTYPE``."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"not a rectangular array ({type(exc).__name__})", field=field
        ) from None
    if arr.dtype.kind in "iu" and arr.size and isinstance(value, (list, tuple)) and _holds_bools(value, arr.ndim):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected integers, not booleans", field=field)
    return arr


def _holds_bools(value: Any, ndim: int) -> bool:
    """Whether nested lists ``ndim`` deep hold a ``bool`` (numpy reads ``[1, True]`` as integers)."""
    items = value
    for _ in range(ndim - 1):
        items = itertools.chain.from_iterable(items)
    kinds = set(map(type, items))
    return bool in kinds or np.bool_ in kinds


def as_host_array(value: Any, *, field: str = "array") -> np.ndarray:
    """``value`` as a numpy array: numpy arrays as they are, torch tensors moved to CPU, lists converted.

    A tensor on the ``meta`` device (no data) is ``E_SCHEMA``. Ragged nested lists are ``E_SHAPE`` (a bare ``ValueError`` from numpy was found by fuzzing:
    fuzz/regressions/adapter_prime_rl/df4cf4ad322ed8ab.bin). Torch is never imported here: a tensor
    is recognized by its ``detach`` and ``cpu`` methods.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, on any device
        if getattr(value, "is_meta", False):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "a meta tensor holds no data", field=field)
        return np.asarray(value.detach().cpu().numpy())
    return asarray_checked(value, field=field)


def as_float_array(value: Any, *, field: str, integers: bool, size: int | None = None, ndim: int = 1) -> np.ndarray:
    """``value`` (numpy, torch or lists of numbers) as a C-contiguous float32 array, NaN / -inf kept.

    ``integers``: whether an integer array is accepted (converted) or ``E_DTYPE``; the rule of each
    use is in this module's docstring. An empty array of any numeric kind is accepted. ``E_DTYPE`` for
    non-numbers (bools included), ``E_SHAPE`` for a wrong ``ndim`` or ``size`` (the first dimension)."""
    try:
        arr = as_host_array(value, field=field)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SamplingMaskError):
            raise
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"not a float array: {exc}", field=field) from None
    if arr.size == 0 and arr.dtype.kind in "iuO":
        arr = arr.astype(np.float32).reshape((0,) * ndim)
    if arr.dtype.kind not in ("iuf" if integers else "f"):
        wanted = "numbers" if integers else "a float array"
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected {wanted}, got {arr.dtype}", field=field)
    if arr.ndim != ndim:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {ndim} dimension(s), got {arr.ndim}", field=field)
    if size is not None and arr.shape[0] != size:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {size} values, got {arr.shape[0]}", field=field)
    return np.ascontiguousarray(arr, dtype=np.float32)


#: Companions with one value per id; the others have one per row.
_PER_ID = ("support_logprobs",)


def check_structure(ids: np.ndarray, offsets: np.ndarray, arrays: Mapping[str, np.ndarray], limits: Limits) -> None:
    """The O(1) checks a decoder keeps when content validation is skipped (``validate=False``): the
    offsets run from 0 to nnz, ``arrays["cu_seqlens"]`` (when given) from 0 to T, and each companion
    in ``arrays`` has T values (``support_logprobs``: nnz)."""
    if offsets.size == 0 or int(offsets[0]) != 0 or int(offsets[-1]) != ids.size:
        raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets must run from 0 to nnz", field="offsets")
    num_rows = offsets.size - 1
    check_count(num_rows, limits.max_rows, "row count", field="offsets")
    for name, arr in arrays.items():
        if name == "cu_seqlens":
            if arr.size == 0 or int(arr[0]) != 0 or int(arr[-1]) != num_rows:
                raise SamplingMaskError(ErrorCode.E_SEGMENTS, "cu_seqlens must run from 0 to T", field="cu_seqlens")
            continue
        expected = ids.size if name in _PER_ID else num_rows
        if arr.size != expected:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {expected} values, got {arr.size}", field=name)
