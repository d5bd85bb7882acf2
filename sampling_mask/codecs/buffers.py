# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/buffers.py, vendorable (docs/serving-and-vendoring.md)
"""Checked views of untrusted byte buffers: the one place a decoder turns bytes into an array.

Invariant: a declared dtype comes from a per-field whitelist, a declared shape is a list of
non-negative ints whose byte size is computed exactly and checked against ``Limits.max_bytes``
(``E_LIMIT``) and then against the real buffer length (``E_BYTES``), and only then does
``np.frombuffer`` run. Nothing is allocated from a declared size; the result is a read-only view.
"""

from __future__ import annotations

import binascii
import re
import sys
from collections.abc import Collection
from typing import Any

import numpy as np

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import Limits, checked_nbytes

__all__ = [
    "WIRE_DTYPES",
    "array_from_buffer",
    "base64_decoded_length",
    "decode_base64",
    "input_view",
    "wire_dtype",
    "wire_dtype_name",
    "wire_shape",
]

#: Wire dtype names (always little-endian) and the numpy dtype each one means.
WIRE_DTYPES: dict[str, np.dtype[Any]] = {
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "float32": np.dtype("<f4"),
    "uint8": np.dtype("u1"),
    "uint16": np.dtype("<u2"),
}

_MAX_DIMS = 8
_BASE64_ALPHABET = re.compile(rb"[A-Za-z0-9+/]*={0,2}")


def input_view(data: Any, *, copy: bool = False) -> memoryview:
    """A flat read-only byte view of the payload ``data``, or ``E_ENCODING`` when it is not bytes-like.

    Decoded arrays may view it, so a *writable* buffer (``bytearray``, a writable memoryview or
    array) is copied once first: the caller changing it later cannot change validated ids.
    ``copy=True`` copies any input (the mask then never keeps the caller's buffer alive).
    """
    try:
        view = memoryview(data)
    except TypeError:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, f"input must be bytes-like, not {type(data).__name__}", value=type(data).__name__
        ) from None
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        try:
            view = view.cast("B")
        except TypeError:  # a non-contiguous view
            view = memoryview(view.tobytes())
    if copy or not view.readonly:
        view = memoryview(view.tobytes())
    return view


def wire_dtype(name: Any, allowed: Collection[str], *, field: str) -> np.dtype[Any]:
    """The numpy dtype for wire name ``name`` if ``allowed`` for this field, else ``E_DTYPE``."""
    if not isinstance(name, str) or name not in allowed:
        raise SamplingMaskError(
            ErrorCode.E_DTYPE,
            f"dtype must be one of {sorted(allowed)}",
            field=field,
            value=name if isinstance(name, (str, int, float)) else short_repr(name),
        )
    return WIRE_DTYPES[name]


def wire_dtype_name(dtype: np.dtype[Any]) -> str:
    """The wire name of a numpy dtype (inverse of :func:`wire_dtype`)."""
    for name, wire in WIRE_DTYPES.items():
        if np.dtype(dtype) == wire:
            return name
    raise SamplingMaskError(ErrorCode.E_DTYPE, f"no wire dtype for {dtype}", value=str(dtype))


def wire_shape(value: Any, *, field: str, ndim: int | None = None) -> tuple[int, ...]:
    """A declared shape: a list of non-negative ints (bools rejected), ``ndim`` long when given."""
    if not isinstance(value, (list, tuple)) or len(value) > _MAX_DIMS:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "shape must be a short list of integers", field=field)
    if ndim is not None and len(value) != ndim:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"expected {ndim} dimension(s), got {len(value)}", field=field, value=len(value)
        )
    for dim in value:
        if not is_int(dim) or dim < 0:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                "dimensions must be non-negative integers",
                field=field,
                value=dim if isinstance(dim, (int, float, str)) else short_repr(dim),
            )
    return tuple(value)


def array_from_buffer(
    buf: Any, dtype: np.dtype[Any], shape: tuple[int, ...], limits: Limits, *, field: str
) -> np.ndarray:
    """A read-only ``shape`` view of ``buf`` (no copy) after the size checks; ``E_LIMIT`` / ``E_BYTES``."""
    nbytes = checked_nbytes(shape, dtype.itemsize, limits, field=field)
    view = memoryview(buf)
    if view.nbytes != nbytes:
        raise SamplingMaskError(
            ErrorCode.E_BYTES,
            f"{view.nbytes} bytes for shape {list(shape)} of {dtype.name} ({nbytes} bytes)",
            field=field,
            value=view.nbytes,
        )
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        view = view.cast("B")
    arr = np.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize if dtype.itemsize else 0)
    arr = arr.reshape(shape)
    if arr.flags.writeable:
        arr.flags.writeable = False
    return arr


def base64_decoded_length(text: str | bytes, *, field: str) -> int:
    """Exact decoded length of strict, padded base64 ``text``, from its length alone (``E_ENCODING``)."""
    if len(text) % 4:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, "base64 length must be a multiple of 4", field=field, value=len(text)
        )
    tail = text[-2:] if isinstance(text, str) else text[-2:].decode("latin-1")
    padding = 2 if tail == "==" else 1 if tail.endswith("=") else 0
    return len(text) // 4 * 3 - padding


def decode_base64(text: Any, expected_nbytes: int, limits: Limits, *, field: str) -> bytes:
    """Strict base64 (RFC 4648 alphabet, padded, no whitespace) decoded to exactly ``expected_nbytes``.

    The decoded length is derived from the text length and compared with ``expected_nbytes`` and
    ``limits.max_bytes`` *before* decoding: ``E_BYTES`` / ``E_LIMIT``; bad characters: ``E_ENCODING``.
    """
    if not isinstance(text, str):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "base64 data must be a string", field=field)
    decoded = base64_decoded_length(text, field=field)
    if decoded > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"{decoded} bytes exceed the limit {limits.max_bytes}", field=field, value=decoded
        )
    if decoded != expected_nbytes:
        raise SamplingMaskError(
            ErrorCode.E_BYTES,
            f"base64 data decodes to {decoded} bytes, the declared shape needs {expected_nbytes}",
            field=field,
            value=decoded,
        )
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "base64 data must be ASCII", field=field) from None
    if _BASE64_ALPHABET.fullmatch(raw) is None:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "invalid base64 character or padding", field=field)
    try:
        if sys.version_info >= (3, 11):
            out = binascii.a2b_base64(raw, strict_mode=True)
        else:  # pragma: no cover - the alphabet check above is the strict check on 3.10
            out = binascii.a2b_base64(raw)
    except binascii.Error as exc:
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"invalid base64: {exc}", field=field) from None
    if len(out) != expected_nbytes:  # pragma: no cover - guaranteed by the length arithmetic above
        raise SamplingMaskError(ErrorCode.E_BYTES, "base64 length mismatch", field=field, value=len(out))
    tail = len(out) % 3
    if tail and binascii.b2a_base64(out[len(out) - tail :], newline=False) != raw[-4:]:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "base64 padding bits must be zero (non-canonical)", field=field)
    return out
