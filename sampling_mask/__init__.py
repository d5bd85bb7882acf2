"""sampling-mask: the interchange format, codecs and scorer for LLM sampling masks (spec v1).

``import sampling_mask`` needs numpy only; torch, pyarrow and msgpack load lazily where used.
"""

from __future__ import annotations

from .errors import ErrorCode, SamplingMaskError
from .limits import DEFAULT_LIMITS, Limits
from .model import COMPANIONS, METADATA_KEYS, SamplingMask, concat

__version__ = "0.1.0"
SPEC_VERSION = 1

__all__ = [
    "COMPANIONS",
    "DEFAULT_LIMITS",
    "ErrorCode",
    "Limits",
    "METADATA_KEYS",
    "SPEC_VERSION",
    "SamplingMask",
    "SamplingMaskError",
    "__version__",
    "concat",
]
