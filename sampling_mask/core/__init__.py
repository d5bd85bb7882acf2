# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/__init__.py, vendorable (docs/serving-and-vendoring.md)
"""The vendorable core of sampling-mask (spec v1): the in-memory model and its validation.

Everything in this folder imports only the standard library, numpy and its own modules (relatively),
so a server can copy the folder into its own package under any name (``sampling-mask vendor``).
"""

from __future__ import annotations

from .errors import ErrorCode, SamplingMaskError
from .limits import DEFAULT_LIMITS, LOCAL_FILE_LIMITS, Limits
from .model import COMPANIONS, MASK_PROTOCOL_VERSION, METADATA_KEYS, SamplingMask, as_sampling_mask, concat
from .optional import UnavailableError

__all__ = [
    "COMPANIONS",
    "DEFAULT_LIMITS",
    "ErrorCode",
    "LOCAL_FILE_LIMITS",
    "Limits",
    "MASK_PROTOCOL_VERSION",
    "METADATA_KEYS",
    "SamplingMask",
    "SamplingMaskError",
    "UnavailableError",
    "as_sampling_mask",
    "concat",
]
