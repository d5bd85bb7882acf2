"""sampling-mask: the interchange format, codecs, scorer and conformance suite for LLM sampling masks.

A *sampling mask* records, per generated token, the vocabulary ids that survived the engine's
top-k / top-p / min-p filters, so that a trainer renormalizes its log-probs over the same support
(spec v1, ``spec/v1/SPEC.md``). Start here:

- :class:`SamplingMask`: the immutable, validated model (rows of ids in CSR form, segments,
  ``vocab_size``, per-row companions such as ``sampled_token_ids``, metadata); ``from_rows``,
  ``from_dense``, ``from_counts``, ``from_bitmask`` and the matching ``to_*`` convert layouts.
- :func:`encode` / :func:`decode` / :func:`save` / :func:`load`: every wire and file format
  (msgpack, Arrow, Parquet, JSON), validated and bounded by :class:`Limits`.
- :class:`SamplingMaskError`: the one exception for bad input; ``err.code`` is an :class:`ErrorCode`.

Subpackages, each imported on its own, in their layer order (each imports only those before it):
``core`` (the vendorable model, numpy only), ``codecs`` (formats, streaming writers, datasets),
``data`` (alignment with a trainer's tokens, multi-turn traces, statistics, synthetic workloads,
DataLoader datasets), ``sampler`` (is a sampler replayable? what ``generate()`` really runs with),
``adapters`` (engines' and frameworks' wire forms: vLLM, SGLang, SkyRL, prime-rl / verifiers, Miles,
slime, NeMo-RL), ``reference_scorer`` (torch: renormalized log-probs, entropy, support
recomputation, the audit), ``trainers`` (transformers capture, TRL, verl, OpenRLHF),
``conformance`` (the suite's runner) and ``cli`` (the ``sampling-mask`` command line).

``import sampling_mask`` needs numpy only; torch, pyarrow and msgpack load lazily where used.
Guides per role: ``docs/`` in the repository (the README's table says which page).
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
    UnavailableError,
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
    "UnavailableError",
    "__version__",
    "as_sampling_mask",
    "concat",
    "decode",
    "encode",
    "load",
    "save",
]
