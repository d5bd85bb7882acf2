"""Argument checks that several modules of the package share (private: public names inside)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = ["count_arg"]


def count_arg(value: Any, *, field: str) -> int:
    """A non-negative Python int from an int-like ``value`` (bools refused), else ``E_SCHEMA`` / ``E_RANGE``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{field} must be an integer", field=field, value=repr(value)[:80])
    if int(value) < 0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"{field} must be >= 0", field=field, value=int(value))
    return int(value)
