"""Resource limits checked before any allocation whose size comes from untrusted input.

Sizes are checked as Python integers (no overflow) against a :class:`Limits` instance, and declared
byte lengths against the real buffer length, *before* numpy allocates anything. Callers that need
larger masks pass ``limits=DEFAULT_LIMITS.replace(max_rows=...)`` (or any ``Limits``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .errors import ErrorCode, SamplingMaskError

__all__ = ["DEFAULT_LIMITS", "Limits", "check_count", "checked_nbytes"]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Upper bounds for one decode or construction. Every field is an inclusive maximum."""

    max_rows: int = 1 << 28  # T, token positions (268M)
    max_segments: int = 1 << 24  # B, sequences (16.7M)
    max_nnz: int = 1 << 32  # total ids (16 GiB of int32)
    max_width: int = 1 << 20  # dense width W, and the widest row
    max_vocab: int = 1 << 24  # vocab_size (16.7M; real vocabularies are <= 262k)
    max_bytes: int = 1 << 34  # one decoded buffer, decompressed size included (16 GiB)
    max_json_depth: int = 16  # nesting depth of JSON / msgpack containers

    def replace(self, **changes: int) -> Limits:
        """A copy with some limits changed."""
        return dataclasses.replace(self, **changes)


DEFAULT_LIMITS = Limits()


def check_count(value: int, limit: int, what: str, *, field: str | None = None) -> int:
    """``value`` as a non-negative int not above ``limit``, or ``E_RANGE`` / ``E_LIMIT``."""
    value = int(value)
    if value < 0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"{what} must be >= 0", field=field, value=value)
    if value > limit:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"{what} {value} exceeds the limit {limit}", field=field, value=value
        )
    return value


def checked_nbytes(shape: Iterable[int], itemsize: int, limits: Limits, *, field: str | None = None) -> int:
    """Bytes of an array of ``shape`` and ``itemsize``, computed exactly, or ``E_SHAPE`` / ``E_LIMIT``."""
    total = int(itemsize)
    for dim in shape:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, "dimensions must be non-negative integers", field=field, value=dim
            )
        total *= dim
    if total > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"{total} bytes exceed the limit {limits.max_bytes}", field=field, value=total
        )
    return total
