"""Helpers shared by the adapters: duck-typed field access, strict base64, nested-list flattening.

Array coercion that trainer-side code needs too lives in :mod:`sampling_mask.core.checks`."""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..codecs import buffers
from ..core import layouts
from ..core.checks import as_host_array, is_int
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import Limits, checked_nbytes
from ..core.model import SamplingMask, concat

__all__ = [
    "PASSTHROUGH",
    "array_from_base64",
    "array_from_bytes",
    "array_to_base64",
    "check_response_length",
    "check_rows_nonempty",
    "int_array",
    "masks_from_samples",
    "passthrough",
    "ragged_from_lists",
]

#: The :class:`SamplingMask` keyword arguments a reader passes through unchanged.
PASSTHROUGH = ("sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs", "metadata", "validate")


def passthrough(scope: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`PASSTHROUGH` keywords of a reader, taken from its ``locals()``: its signature spells
    each one out (keyword-only), this carries them to the constructor."""
    return {name: scope[name] for name in PASSTHROUGH}


def int_array(value: Any, dtype: type, *, field: str, ndim: int = 1) -> np.ndarray:
    """A C-contiguous integer array (numpy, torch or lists); see :func:`layouts.as_int_array`."""
    try:
        host = as_host_array(value, field=field)
    except SamplingMaskError:
        raise
    except (TypeError, ValueError) as exc:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"not an integer array: {exc}", field=field) from None
    return layouts.as_int_array(host, dtype, field=field, ndim=ndim)


def array_from_base64(
    text: Any, dtype: str, *, field: str, limits: Limits, shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """A read-only little-endian ``dtype`` array from strict base64 text, through the wire helpers of
    :mod:`sampling_mask.codecs.buffers`: the decoded size is derived from the text length and checked
    against ``limits`` and ``shape`` (``E_LIMIT`` / ``E_BYTES``) before decoding; bad base64 is ``E_ENCODING``.
    Without ``shape`` the array is 1-D and the bytes must hold whole values (``E_BYTES``)."""
    wire = buffers.WIRE_DTYPES[dtype]
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
    raw = buffers.decode_base64(text, nbytes, limits, field=field)
    return buffers.array_from_buffer(raw, wire, shape, limits, field=field)


def array_to_base64(array: np.ndarray, dtype: str) -> str:
    """Standard base64 of ``array`` as little-endian ``dtype`` in C order."""
    return base64.b64encode(np.ascontiguousarray(array, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode(
        "ascii"
    )


def ragged_from_lists(rows: Any, *, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """(ids int32, offsets int64) from nested lists of ids, as strict as ``SamplingMask.from_rows``."""
    generic = SamplingMask.from_rows(rows, limits=limits, validate=False)
    return generic.ids, generic.offsets


def masks_from_samples(samples: Any, read: Callable[[Any], SamplingMask], vocab_size: int | None) -> SamplingMask:
    """One segment per sample, read by ``read``, in order; an error names the sample as the segment."""
    if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes, bytearray)):
        # Found by fuzzing (fuzz/regressions/adapter_miles/): an int here was a TypeError.
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "samples must be a sequence of samples", field="samples", value=type(samples).__name__
        )
    if len(samples) == 0:
        return SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=[0], vocab_size=vocab_size)
    masks = []
    for index, sample in enumerate(samples):
        try:
            masks.append(read(sample))
        except SamplingMaskError as exc:
            raise SamplingMaskError(
                exc.code, exc.message, row=exc.row, segment=index, field=exc.field, value=exc.value
            ) from None
    return concat(masks)


def check_rows_nonempty(mask: SamplingMask, field: str) -> SamplingMask:
    """``E_OFFSETS`` naming the first empty row (upstreams that forbid them: Miles)."""
    empty = np.flatnonzero(mask.row_lengths == 0)
    if empty.size:
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS,
            "empty row: every response token needs a non-empty support",
            row=int(empty[0]),
            field=field,
        )
    return mask


def check_response_length(mask: SamplingMask, response_length: Any, field: str) -> SamplingMask:
    """``E_SHAPE`` unless the sample's ``response_length`` (when given) equals the row count."""
    if response_length is None:
        return mask
    if not is_int(response_length):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "response_length must be an integer", field="response_length")
    if int(response_length) != mask.num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{mask.num_rows} rows for response_length {int(response_length)}", field=field
        )
    return mask


def array_from_bytes(raw: Any, dtype: str, *, field: str, limits: Limits) -> np.ndarray:
    """A read-only little-endian ``dtype`` (int32 / float32) view of raw bytes; ``E_LIMIT`` / ``E_BYTES``."""
    data = bytes(raw)
    if len(data) > limits.max_bytes:
        raise SamplingMaskError(ErrorCode.E_LIMIT, f"{len(data)} bytes exceed the limit", field=field)
    if len(data) % 4:
        raise SamplingMaskError(ErrorCode.E_BYTES, f"{len(data)} bytes are not whole {dtype} values", field=field)
    return np.frombuffer(data, dtype="<i4" if dtype == "int32" else "<f4")
