# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/checks.py, vendorable (docs/serving-and-vendoring.md)
"""Input checks every layer shares (numpy and the standard library only): fields of duck-typed
objects, arrays and torch tensors from user or wire values, strict integers, and "raise at the first
bad row". Each raises :class:`~.errors.SamplingMaskError` naming the field (and the first bad row).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

import numpy as np

from .errors import ErrorCode, SamplingMaskError
from .limits import Limits, check_count

__all__ = [
    "FLOAT_DTYPES",
    "HOST_DTYPES",
    "INTEGER_DTYPES",
    "MISSING",
    "as_float_array",
    "as_host_array",
    "check_structure",
    "checked_tensor",
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
    bad: np.ndarray,
    code: ErrorCode,
    message: str,
    *,
    field: str | None = None,
    values: np.ndarray | None = None,
    at: Literal["row", "segment"] = "row",
    row: Callable[[int], Any] | None = None,
    segment: Callable[[int], Any] | None = None,
) -> None:
    """Nothing when no flag of ``bad`` is set; else ``code`` naming the first flagged index i as the
    error's ``at`` (a row or a segment) and ``values[i]`` as its value. Flags indexed otherwise (one
    per id, per batch slot) name their row and / or segment through ``row(i)`` / ``segment(i)``,
    called only then. Vectorized: one pass over ``bad``."""
    if bad.size and bad.any():
        i = int(np.argmax(bad))
        where = {at: i} | {name: int(f(i)) for name, f in (("row", row), ("segment", segment)) if f is not None}
        value = None if values is None else values[i].item()
        raise SamplingMaskError(code, message, field=field, value=value, **where)


#: Torch dtypes by name (``str(tensor.dtype)`` less ``torch.``): the allowlists of :func:`checked_tensor`.
INTEGER_DTYPES = frozenset({"uint8", "int8", "int16", "int32", "int64"})
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
#: Those numpy holds exactly: what :func:`as_host_array` takes from a tensor.
HOST_DTYPES = INTEGER_DTYPES | {"bool", "uint16", "uint32", "uint64", "float16", "float32", "float64"}


def checked_tensor(value: Any, *, field: str, dtypes: Collection[str] = HOST_DTYPES) -> Any:
    """``value``, a torch tensor, when it is a plain ``Tensor`` (or ``Parameter``), strided (not sparse or
    nested), with data on a CPU or CUDA device, of a dtype named in ``dtypes`` (quantized ones never are);
    else ``E_SCHEMA`` (``E_DTYPE`` for the dtype) naming ``field``. Torch is never imported here."""
    cls, device = type(value), str(getattr(value, "device", None)).split(":")[0]
    plain = f"{cls.__module__}.{cls.__name__}" in ("torch.Tensor", "torch.nn.parameter.Parameter")
    if not plain or value.is_nested or str(value.layout) != "torch.strided" or device not in ("cpu", "cuda"):
        got = f"{cls.__name__} {getattr(value, 'layout', '')} on {device}" + " (nested)" * (plain and value.is_nested)
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"expected a dense tensor on cpu or cuda, got {got}", field=field)
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype not in dtypes:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected a tensor of {sorted(dtypes)}, got {dtype}", field=field)
    return value


def as_host_array(value: Any, *, field: str = "array") -> np.ndarray:
    """``value`` as a numpy array: numpy arrays as they are, torch tensors (known by ``detach`` and ``dtype``,
    passed through :func:`checked_tensor`) copied to the host, the rest by ``np.asarray``: ragged nesting or
    unconvertible objects are ``E_SHAPE`` (not numpy's ValueError: fuzz/regressions/adapter_prime_rl/
    df4cf4ad322ed8ab.bin), lists mixing ``bool`` with ints (read as integers by numpy) ``E_DTYPE``."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "dtype"):
        return np.asarray(checked_tensor(value, field=field).detach().cpu().numpy())
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as exc:
        message = f"not a rectangular array ({type(exc).__name__})"
        raise SamplingMaskError(ErrorCode.E_SHAPE, message, field=field) from None
    if arr.dtype.kind in "iu" and arr.size and isinstance(value, (list, tuple)) and _holds_bools(value, arr.ndim):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected integers, not booleans", field=field)
    return arr


def _holds_bools(value: Any, ndim: int) -> bool:
    """Whether nested lists ``ndim`` deep hold a ``bool`` (numpy reads ``[1, True]`` as integers)."""
    items = value
    for _ in range(ndim - 1):
        items = itertools.chain.from_iterable(items)
    return not {bool, np.bool_}.isdisjoint(map(type, items))


def as_float_array(value: Any, *, field: str, integers: bool, size: int | None = None, ndim: int = 1) -> np.ndarray:
    """``value`` (numpy, torch or lists of numbers) as a C-contiguous float32 array, NaN / -inf kept.

    ``integers``: whether integers are accepted (converted) or ``E_DTYPE``: False for log-probs handed to
    the model (integers there are most often token ids in the wrong field), True for temperatures and
    numbers read from a payload (JSON writes ``0`` for ``0.0``). An empty array of any numeric kind is
    accepted. ``E_DTYPE`` for non-numbers (bools included), ``E_SHAPE`` for a wrong ``ndim`` or ``size``."""
    arr = as_host_array(value, field=field)
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
