"""sampling-mask: the interchange format, codecs and scorer for LLM sampling masks (spec v1).

``import sampling_mask`` needs numpy only; torch, pyarrow and msgpack load lazily where used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core import (
    COMPANIONS,
    DEFAULT_LIMITS,
    LOCAL_FILE_LIMITS,
    MASK_PROTOCOL_VERSION,
    METADATA_KEYS,
    ErrorCode,
    Limits,
    SamplingMask,
    SamplingMaskError,
    as_sampling_mask,
    concat,
)

if TYPE_CHECKING:
    from .codecs import decode, encode, load, save

__version__ = "0.1.0"
SPEC_VERSION = 1

_CODEC_EXPORTS = ("decode", "encode", "load", "save")


def __getattr__(name: str) -> object:
    """``encode``, ``decode``, ``save`` and ``load`` from :mod:`sampling_mask.codecs`, imported on first use."""
    if name in _CODEC_EXPORTS:
        from . import codecs

        return getattr(codecs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names plus the lazily imported codec functions (so ``dir()`` and completion list them)."""
    return sorted(set(globals()) | set(_CODEC_EXPORTS))


__all__ = [
    "COMPANIONS",
    "DEFAULT_LIMITS",
    "ErrorCode",
    "LOCAL_FILE_LIMITS",
    "Limits",
    "MASK_PROTOCOL_VERSION",
    "METADATA_KEYS",
    "SPEC_VERSION",
    "SamplingMask",
    "SamplingMaskError",
    "__version__",
    "as_sampling_mask",
    "concat",
    "decode",
    "encode",
    "load",
    "save",
]
