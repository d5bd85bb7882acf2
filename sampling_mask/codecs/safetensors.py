"""The ragged arrays in a safetensors file, for trainers that keep everything in safetensors.

Tensors: ``sampling_mask.ids`` int32 ``[nnz]``, ``sampling_mask.offsets`` int64 ``[rows + 1]``,
``sampling_mask.cu_seqlens`` int64 ``[segments + 1]`` and one tensor per companion under its own
name (``sampled_token_ids`` int32, ``sampled_logprobs`` / ``temperature`` / ``support_logprobs``
float32). The file's ``__metadata__`` holds the Arrow schema-metadata keys of spec section ``arrow``
(``sampling_mask.version``, ``sampling_mask.vocab_size``, ``sampling_mask.id_order``,
``sampling_mask.metadata.<key>``), so a file names its version and vocab size as our Arrow files do.
Other tensors in the file are ignored. Reading validates the mask like every decoder (the
``safetensors`` package checks the header and offsets of the file itself). Needs ``safetensors``.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import COMPANIONS, SamplingMask, as_sampling_mask
from . import arrow
from ._common import check_id_order, id_order_of

__all__ = ["from_tensors", "load_file", "save_file", "to_tensors"]

IDS, OFFSETS, CU_SEQLENS = "sampling_mask.ids", "sampling_mask.offsets", "sampling_mask.cu_seqlens"


def to_tensors(mask: SamplingMask) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors and ``__metadata__`` that :func:`save_file` writes (numpy arrays, contiguous)."""
    mask = as_sampling_mask(mask)
    tensors: dict[str, np.ndarray] = {
        IDS: np.ascontiguousarray(mask.ids, np.int32),
        OFFSETS: np.ascontiguousarray(mask.offsets, np.int64),
        CU_SEQLENS: np.ascontiguousarray(mask.cu_seqlens, np.int64),
    }
    for name, values in mask.companions.items():
        tensors[name] = np.ascontiguousarray(values, COMPANIONS[name])
    header = arrow._header_metadata(mask, compact=False, id_order=id_order_of(mask))
    header.pop(arrow.PREFIX + "layout", None)
    return tensors, header


def from_tensors(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None, *, limits: Limits = DEFAULT_LIMITS
) -> SamplingMask:
    """The mask from a safetensors file's tensors (numpy or torch) and ``__metadata__``; validated."""
    for name in (IDS, OFFSETS, CU_SEQLENS):
        if name not in tensors:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing tensor", field=name)
    raw = {str(k).encode(): str(v).encode() for k, v in (metadata or {}).items()}
    header = arrow._read_header(types.SimpleNamespace(metadata=raw), limits)
    companions: dict[str, Any] = {name: _host(tensors[name], name) for name in COMPANIONS if name in tensors}
    mask = SamplingMask(
        _host(tensors[IDS], IDS),
        _host(tensors[OFFSETS], OFFSETS),
        cu_seqlens=_host(tensors[CU_SEQLENS], CU_SEQLENS),
        vocab_size=header.vocab_size,
        metadata=header.metadata,
        limits=limits,
        **companions,
    )
    return check_id_order(mask, header.id_order, field=arrow.PREFIX + "id_order")


def _host(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor from safetensors.torch
        value = value.detach().cpu().numpy()
    if not isinstance(value, np.ndarray):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected an array", field=name, value=type(value).__name__)
    return value


def save_file(mask: SamplingMask, path: str | os.PathLike[str]) -> None:
    """Write ``mask`` as a safetensors file (``safetensors.numpy.save_file``)."""
    from safetensors.numpy import save_file as write

    tensors, header = to_tensors(mask)
    write(tensors, os.fspath(path), metadata=header)


def load_file(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
    """Read a mask written by :func:`save_file` (or by anyone using the same names); validated."""
    from safetensors import safe_open

    path = os.fspath(path)
    size = os.stat(path).st_size
    if size > limits.max_bytes:
        raise SamplingMaskError(ErrorCode.E_LIMIT, "file larger than max_bytes", field="file", value=size)
    try:
        with safe_open(path, framework="numpy") as handle:
            metadata = handle.metadata()
            names = [n for n in handle.keys() if n in (IDS, OFFSETS, CU_SEQLENS) or n in COMPANIONS]
            tensors = {name: handle.get_tensor(name) for name in names}
    except Exception as exc:  # safetensors' SafetensorError derives from Exception alone; OSError too
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"not a safetensors file: {exc}"[:300], field="file") from None
    return from_tensors(tensors, metadata, limits=limits)
