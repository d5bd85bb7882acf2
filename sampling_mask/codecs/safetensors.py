"""The ragged arrays in a safetensors file, for trainers that keep everything in safetensors.

Tensors: ``sampling_mask.ids`` int32 ``[nnz]``, ``sampling_mask.offsets`` int64 ``[rows + 1]``,
``sampling_mask.cu_seqlens`` int64 ``[segments + 1]`` and one tensor per companion under its own
name (``sampled_token_ids`` int32, ``sampled_logprobs`` / ``temperature`` / ``support_logprobs``
float32). The file's ``__metadata__`` holds the Arrow schema-metadata keys of spec section ``arrow``
(``sampling_mask.version``, ``sampling_mask.vocab_size``, ``sampling_mask.id_order``,
``sampling_mask.metadata.<key>``), so a file names its version and vocab size as our Arrow files do.
Other tensors in the file are ignored. Writing needs ``safetensors``; reading does not: the file is
read by :func:`read_tensors` (a regular file only, memory-mapped; the header length, JSON, dtypes,
shapes and data offsets checked against the file and ``limits`` before a tensor is viewed), then the
mask is validated like every decoder's. The command line reads ``audit --logits`` files with it too.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.checks import as_host_array, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import DEFAULT_LIMITS, Limits, check_count, checked_nbytes
from ..core.model import COMPANIONS, SamplingMask, as_sampling_mask
from ._common import check_id_order, id_order_of
from .batch_reader import PREFIX, MappedFile, header_metadata, read_header

__all__ = ["DTYPES", "from_tensors", "load_file", "read_tensors", "save_file", "tensor_dtypes", "to_tensors"]

#: safetensors dtype names read and their numpy storage (``BF16`` as raw 16-bit words).
DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors package's own bound
_NUMPY_RANGE = Limits(max_bytes=(1 << 63) - 1)  # shapes checked against numpy's range; sizes against the file

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
    header = header_metadata(mask, compact=False, id_order=id_order_of(mask))
    header.pop(PREFIX + "layout", None)
    return tensors, header


def from_tensors(
    tensors: Mapping[str, Any], metadata: Mapping[str, str] | None, *, limits: Limits = DEFAULT_LIMITS
) -> SamplingMask:
    """The mask from a safetensors file's tensors (numpy or torch) and ``__metadata__``; validated.

    Float companions may be stored as F64, F32, F16 or BF16 (torch ``bfloat16``, or numpy raw 16-bit
    words with ``dtypes={name: "BF16"}`` from :func:`read_tensors`): each is converted to float32
    exactly (BF16 by its bits; F64 only when every value is a float32, else ``E_RANGE``). Any other
    dtype of a float companion, a float or BF16 tensor for ids / offsets / ``cu_seqlens`` /
    ``sampled_token_ids`` (``E_DTYPE``), a torch tensor that is not dense and strided with data
    (meta, sparse, nested: ``E_SCHEMA``, :func:`~sampling_mask.core.checks.as_host_array`), metadata
    that is not a mapping of strings (``E_SCHEMA``) or not valid Unicode (``E_ENCODING``), a
    metadata number past float64 (``E_RANGE``): ``SamplingMaskError``."""
    return _from_tensors(tensors, metadata, {}, limits)


def _from_tensors(
    tensors: Mapping[str, Any], metadata: Any, declared: Mapping[str, str], limits: Limits
) -> SamplingMask:
    if not isinstance(tensors, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "tensors must be a mapping of names to arrays", field="tensors")
    for name in (IDS, OFFSETS, CU_SEQLENS):
        if name not in tensors:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing tensor", field=name)
    header = read_header(_raw_metadata(metadata), limits)
    host = {
        name: _host(tensors[name], name, declared.get(name))
        for name in (IDS, OFFSETS, CU_SEQLENS, *COMPANIONS)
        if name in tensors
    }
    companions: dict[str, Any] = {name: host[name] for name in COMPANIONS if name in host}
    mask = SamplingMask(
        host[IDS],
        host[OFFSETS],
        cu_seqlens=host[CU_SEQLENS],
        vocab_size=header.vocab_size,
        metadata=header.metadata,
        limits=limits,
        **companions,
    )
    return check_id_order(mask, header.id_order, field=PREFIX + "id_order")


def _raw_metadata(metadata: Any) -> dict[bytes, bytes]:
    """``__metadata__`` as the schema-metadata bytes :func:`read_header` reads: a mapping of strings."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "__metadata__ must map strings to strings", field="__metadata__")
    try:
        return {k.encode(): v.encode() for k, v in metadata.items()}
    except UnicodeEncodeError:  # a lone surrogate, such as JSON's "\ud800"
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, "__metadata__ is not valid Unicode", field="__metadata__"
        ) from None


#: torch dtypes a tensor may have, by their safetensors names.
_TORCH_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}  # fmt: skip
_FLOATS = ("F64", "F32", "F16", "BF16")


def _host(value: Any, name: str, declared: str | None) -> np.ndarray:
    """A tensor as a numpy array of what it holds: BF16 widened to float32 by its bits, F64 float
    companions narrowed only when exact; a dtype the field cannot hold is ``E_DTYPE``."""
    if hasattr(value, "detach") and hasattr(value, "dtype"):  # a torch tensor from safetensors.torch
        declared = _TORCH_DTYPES.get(str(value.dtype).removeprefix("torch."))
        if declared is None:
            raise SamplingMaskError(ErrorCode.E_DTYPE, f"cannot read dtype {value.dtype}", field=name)
        # Through the one tensor check (dense, strided, with data); numpy has no bfloat16, so BF16 is
        # widened to float32 first, exactly (a bfloat16 is the high half of a float32).
        value = as_host_array(value.detach().float() if declared == "BF16" else value, field=name)
    if not isinstance(value, np.ndarray):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected an array", field=name, value=type(value).__name__)
    kind = declared or {"f": "F", "b": "BOOL"}.get(value.dtype.kind, "I")
    if name in COMPANIONS and COMPANIONS[name].kind == "f":
        if declared == "BF16" and value.dtype == np.uint16:  # read_tensors' raw words: widened by the bits
            return (value.astype("<u4") << 16).view("<f4")
        if value.dtype.kind != "f" or kind not in (*_FLOATS, "F"):
            raise SamplingMaskError(
                ErrorCode.E_DTYPE,
                f"a float companion must be F64, F32, F16 or BF16, not {declared or value.dtype}",
                field=name,
            )
        if value.dtype.itemsize > 4:
            narrow = value.astype(np.float32)
            same = (narrow == value) | (np.isnan(narrow) & np.isnan(value))
            raise_at_first(~same, ErrorCode.E_RANGE, "an F64 value is not exactly a float32", field=name)
            return narrow
        return value
    if declared in (*_FLOATS, "BOOL") or value.dtype.kind not in "iu":
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"must hold integers, not {declared or value.dtype}", field=name)
    return value


def save_file(mask: SamplingMask, path: str | os.PathLike[str]) -> None:
    """Write ``mask`` as a safetensors file (``safetensors.numpy.save_file``)."""
    from safetensors.numpy import save_file as write

    tensors, header = to_tensors(mask)
    write(tensors, os.fspath(path), metadata=header)


def read_tensors(
    path: str | os.PathLike[str], names: Sequence[str] | None = None, *, limits: Limits = DEFAULT_LIMITS
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors ``names`` (default: all) of a safetensors file as read-only numpy views of its
    mapping, and its ``__metadata__``. Only a regular file is read (``E_ENCODING`` for a FIFO or a
    device, without blocking); the header must be a JSON object within the file (``E_ENCODING``),
    each entry ``{"dtype", "shape", "data_offsets"}`` (``E_SCHEMA``), of a known dtype
    (``E_DTYPE``), its offsets inside the data and equal to its shape's bytes (``E_BYTES``). A
    missing tensor is ``E_SCHEMA``. Nothing sized by the header is allocated."""
    data, start, header, metadata = _open(path, limits)
    wanted = list(header) if names is None else list(names)
    tensors: dict[str, np.ndarray] = {}
    for name in wanted:
        entry = header.get(name)
        if not isinstance(entry, dict):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"no tensor {name!r} (it has {list(header)[:8]})", field=name)
        tensors[name] = _tensor(data, start, name, entry)
    return tensors, metadata


def tensor_dtypes(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> dict[str, str]:
    """Each tensor's name and dtype name as the header declares them (nothing else is checked)."""
    _data, _start, header, _metadata = _open(path, limits)
    dtypes = {name: entry.get("dtype") if isinstance(entry, dict) else "" for name, entry in header.items()}
    return {name: dtype if isinstance(dtype, str) else short_repr(dtype) for name, dtype in dtypes.items()}


def _open(path: str | os.PathLike[str], limits: Limits) -> tuple[memoryview, int, dict[str, Any], dict[str, str]]:
    """(the mapped file, where its data starts, the header without ``__metadata__``, the metadata)."""
    from . import json as json_codec

    data = memoryview(MappedFile(path).buffer)
    check_count(len(data), limits.max_bytes, "file size", field="file")
    if len(data) < 8:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "too short for a safetensors file", field="file")
    (size,) = struct.unpack_from("<Q", data, 0)
    if size > min(_MAX_HEADER, len(data) - 8):
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, f"the header size {size} runs past the file ({len(data)} bytes)", field="file"
        )
    header = json_codec.parse(bytes(data[8 : 8 + size]), limits=limits)
    if not isinstance(header, dict):
        raise SamplingMaskError(ErrorCode.E_ENCODING, "the safetensors header is not a JSON object", field="file")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "__metadata__ must map strings to strings", field="__metadata__")
    return data, 8 + size, header, metadata


def _tensor(data: memoryview, start: int, name: str, entry: Mapping[str, Any]) -> np.ndarray:
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise SamplingMaskError(ErrorCode.E_DTYPE, "unknown dtype", field=name, value=short_repr(dtype))
    ok_shape = isinstance(shape, list) and all(type(v) is int and v >= 0 for v in shape)
    ok_offsets = isinstance(offsets, list) and len(offsets) == 2 and all(type(v) is int for v in offsets)
    if not ok_shape or not ok_offsets:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "shape must be a list of sizes, data_offsets [begin, end]", field=name
        )
    storage = np.dtype(DTYPES[dtype])
    # Python ints, no overflow: at most MAX_NDIM dimensions within numpy's index range (E_SHAPE /
    # E_LIMIT: [0, 2**64], [2**63, 0]), then compared with the file before any use (E_BYTES).
    nbytes = checked_nbytes(shape, storage.itemsize, _NUMPY_RANGE, field=name)  # type: ignore[arg-type]
    begin, end = offsets  # type: ignore[misc]
    if not 0 <= begin <= end <= len(data) - start or end - begin != nbytes:
        raise SamplingMaskError(
            ErrorCode.E_BYTES, f"data_offsets {offsets} disagree with shape {shape} or the file", field=name
        )
    return np.frombuffer(data, dtype=storage, count=nbytes // storage.itemsize, offset=start + begin).reshape(shape)


def load_file(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
    """Read a mask written by :func:`save_file` (or by anyone using the same names); validated.
    Read by :func:`read_tensors`: the safetensors package is not needed."""
    try:
        data, start, header, metadata = _open(path, limits)
    except SamplingMaskError as exc:
        if exc.code is ErrorCode.E_LIMIT:
            raise
        raise SamplingMaskError(exc.code, f"not a safetensors file: {exc.message}", field=exc.field) from None
    names = [n for n in header if (n in (IDS, OFFSETS, CU_SEQLENS) or n in COMPANIONS) and isinstance(header[n], dict)]
    tensors = {name: _tensor(data, start, name, header[name]) for name in names}
    return _from_tensors(tensors, metadata, {name: header[name]["dtype"] for name in names}, limits)
