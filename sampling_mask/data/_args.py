"""Argument checks that several modules of the package share (private: public names inside)."""

from __future__ import annotations

from typing import Any

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr

__all__ = ["count_arg"]


def count_arg(value: Any, *, field: str) -> int:
    """``value`` (:func:`~sampling_mask.core.checks.is_int`) as a non-negative Python int, else
    ``E_SCHEMA`` / ``E_RANGE``."""
    if not is_int(value):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{field} must be an integer", field=field, value=short_repr(value))
    if int(value) < 0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"{field} must be >= 0", field=field, value=int(value))
    return int(value)
