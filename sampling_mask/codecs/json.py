# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/json.py, vendorable (docs/serving-and-vendoring.md)
"""JSON forms: our lossless document (``"json"``), bare nested lists (``"json-rows"``) and the SkyRL
base64 dense envelope (``"base64"``). Spec: spec/v1/SPEC.md, section ``json``.

``"json"``::

    {"sampling_mask": 1, "vocab_size": 10, "id_order": "ascending", "cu_seqlens": [0, 2, 3],
     "rows": [[3, 7], [], [5]], "sampled_token_ids": [7, -1, 5], "sampled_logprobs": [-0.5, 0.0, "-Infinity"],
     "temperature": [1.0, 1.0, 1.0], "support_logprobs": [[-1.25, -0.5], [], [0.0]],
     "metadata": {"top_k": 2, "producer": "vllm-0.32"}}

``"json-rows"``: ``[[3, 7], [], [5]]`` (vLLM ``choices[i].sampling_mask``, SGLang
``output_token_sampling_mask``). ``"base64"``: ``{"data": <base64 of int32 [T, W] little-endian>,
"shape": [T, W], "dtype": "int32"}``, ``-1`` trailing padding.

Invariants: input is strict UTF-8 JSON (a leading BOM is ignored); ``NaN`` / ``Infinity`` tokens,
duplicate object keys and nesting deeper than ``Limits.max_json_depth`` are rejected; ids are JSON
integers (never ``true`` / ``1.0``); float arrays hold numbers or the strings ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` and round-trip float32 exactly. Conversion of parsed lists to arrays
is whole-list C-level work (``np.fromiter``, ``map``), never a per-element Python loop.

>>> import sampling_mask
>>> m = sampling_mask.SamplingMask.from_rows([[3, 7], [], [5]])
>>> encode(m, format="json-rows")
b'[[3,7],[],[5]]'
>>> decode(b'[[3,7],[],[5]]', format="json-rows") == m
True
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..core import layouts
from ..core.checks import check_structure, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count, check_output, checked_nbytes, remaining
from ..core.model import SamplingMask, as_sampling_mask
from ._common import (
    SPEC_MAJOR,
    VERSION_KEY,
    check_depth,
    check_id_order,
    check_version,
    id_order_of,
    metadata_from_json,
    metadata_to_json,
    parse_id_order,
)
from .buffers import array_from_buffer, decode_base64, wire_dtype, wire_shape
from .registry import own_format

__all__ = [
    "FORMATS",
    "BASE64_DTYPES",
    "decode",
    "detect",
    "encode",
    "iter_encode",
    "metadata_from_json",
    "metadata_to_json",
    "parse",
    "parse_cost",
]

FORMATS = ("json", "json-rows", "base64")
#: dtypes the base64 envelope may declare for a mask (values must fit int32).
BASE64_DTYPES = ("int32", "int64")
_CHUNK = 1 << 16  # rows / ids / values turned into Python objects at once when encoding
_NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_KNOWN_KEYS = frozenset(
    {
        VERSION_KEY,
        "vocab_size",
        "id_order",
        "cu_seqlens",
        "rows",
        "sampled_token_ids",
        "sampled_logprobs",
        "temperature",
        "support_logprobs",
    }
)


# ---------------------------------------------------------------------------------------------- parsing
def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "duplicate JSON object key", field=dup[:80])
    return out


def _reject_constant(name: str) -> Any:
    raise SamplingMaskError(ErrorCode.E_ENCODING, f"{name} is not JSON; write non-finite floats as strings", value=name)


#: Upper estimates of what ``json.loads`` builds (CPython): per list or object (with its slot in the
#: parent and over-allocation), per element (an int or float and its slot), per string (per quote),
#: per object member (the (key, value) pair the duplicate-key hook sees, and the dict entry).
_PARSED_BYTES = {"[": 80, "{": 80, ",": 40, '"': 32, ":": 112}


def parse_cost(text: str | bytes) -> int:
    """Bytes of Python objects that parsing ``text`` may build, from counts of its structural
    characters (a few C-speed scans; an upper estimate, never an allocation)."""
    if isinstance(text, str):
        return len(text) + sum(text.count(ch) * size for ch, size in _PARSED_BYTES.items())
    return len(text) + sum(text.count(ch.encode()) * size for ch, size in _PARSED_BYTES.items())


def parse(data: Any, *, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Strict JSON text (str or UTF-8 bytes) to Python objects, or ``E_ENCODING`` / ``E_LIMIT``.

    ``E_LIMIT`` also when the Python objects parsing would build (:func:`parse_cost`) exceed
    ``limits.max_bytes``: ``[[],[],...]`` costs some 25 bytes of objects per byte of text."""
    return _parse(data, limits)[0]


def _parse(data: Any, limits: Limits) -> tuple[Any, int]:
    """:func:`parse`, and the bytes it charged (:func:`parse_cost`)."""
    if isinstance(data, str):
        text = data
    else:
        try:
            raw = memoryview(data)
        except TypeError:
            raise SamplingMaskError(ErrorCode.E_ENCODING, "JSON input must be str or bytes") from None
        check_count(raw.nbytes, limits.max_bytes, "JSON payload bytes")
        try:
            text = str(raw, "utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SamplingMaskError(ErrorCode.E_ENCODING, f"JSON is not UTF-8: {exc.reason}", value=exc.start) from None
    cost = check_count(parse_cost(text), limits.max_bytes, "JSON parse (estimated bytes of Python objects)")
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant), cost
    except SamplingMaskError:
        raise
    except RecursionError:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"JSON nests deeper than the limit {limits.max_json_depth}"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"invalid JSON: {exc}") from None


def detect(obj: Any) -> str:
    """Which JSON form a parsed value is: ``"json-rows"`` (a list), ``"json"`` (an object with the
    version key) or ``"base64"`` (an object with ``data``, ``shape`` and ``dtype``)."""
    if isinstance(obj, list):
        return "json-rows"
    if isinstance(obj, dict):
        if VERSION_KEY in obj:
            return "json"
        if {"data", "shape", "dtype"} <= obj.keys():
            return "base64"
    raise SamplingMaskError(
        ErrorCode.E_SCHEMA, "JSON is neither nested lists, a sampling_mask document nor a base64 envelope"
    )


# ---------------------------------------------------------------------------------------------- arrays
def _types(values: list[Any]) -> set[type]:
    return set(map(type, values))


def _int_array(values: Any, *, field: str, most: int, count: int | None = None) -> np.ndarray:
    """int64 array from a JSON list of at most ``most`` integers (``E_LIMIT`` beyond; bools and
    floats are ``E_DTYPE``). ``most`` is what the list's limit allows: ``max_segments + 1`` entries of
    ``cu_seqlens`` (B is bounded by ``max_segments``, never by ``max_rows``: SPEC 8.1)."""
    if not isinstance(values, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a list of integers", field=field)
    check_count(len(values), most, "list length", field=field)
    if count is not None and len(values) != count:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {count} values, got {len(values)}", field=field)
    if not _types(values) <= {int}:
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected JSON integers", field=field)
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        raise SamplingMaskError(ErrorCode.E_RANGE, "integer does not fit int64", field=field) from None


def _float_array(values: list[Any], *, field: str) -> np.ndarray:
    """float32 array from JSON numbers and the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``."""
    kinds = _types(values)
    if not kinds <= {int, float, str}:
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected JSON numbers", field=field)
    written = None  # where the text wrote a non-finite value as a string
    if str in kinds:
        strings = {v for v in values if type(v) is str}
        if not strings <= _NONFINITE_TEXT.keys():
            raise SamplingMaskError(
                ErrorCode.E_DTYPE, 'strings in a float array must be "NaN", "Infinity" or "-Infinity"', field=field
            )
        written = np.fromiter(map(isinstance, values, itertools.repeat(str)), dtype=bool, count=len(values))
        values = [_NONFINITE_TEXT.get(v, v) if type(v) is str else v for v in values]
    try:
        wide = np.fromiter(values, dtype=np.float64, count=len(values))
    except OverflowError:
        raise SamplingMaskError(ErrorCode.E_RANGE, "number does not fit float32", field=field) from None
    # A number literal past float64 (-1e999) parses as an infinity: out of range, not "-Infinity" (spec 11.1).
    overflow = np.isinf(wide) if written is None else np.isinf(wide) & ~written
    raise_at_first(overflow, ErrorCode.E_RANGE, "number does not fit float32", field=field)
    with np.errstate(over="ignore"):
        narrow = wide.astype(np.float32)
    if not np.array_equal(np.isfinite(wide), np.isfinite(narrow)):
        raise SamplingMaskError(ErrorCode.E_RANGE, "number does not fit float32", field=field)
    return narrow


def _float_json(arr: np.ndarray) -> list[Any]:
    """float32 values as JSON-ready Python floats in their shortest exact form; non-finite as strings."""
    finite = np.isfinite(arr)
    wide = arr.astype(np.float64)
    if arr.size:
        exact = wide[finite]
        short = arr[finite].astype(str).astype(np.float64)  # shortest float32 text, read back
        ok = short.astype(np.float32) == arr[finite]
        wide[finite] = np.where(ok, short, exact)
    out: list[Any] = wide.tolist()
    for i in np.flatnonzero(~finite).tolist():
        v = float(arr[i])
        out[i] = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return out


def _split(values: list[Any], offsets: np.ndarray) -> list[list[Any]]:
    bounds = offsets.tolist()
    return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _nested_floats(value: Any, offsets: np.ndarray, *, field: str) -> np.ndarray:
    """Flat float32 from per-row lists that must have exactly the rows' lengths (``E_SHAPE``)."""
    if not isinstance(value, list) or not _types(value) <= {list}:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a list of lists of numbers", field=field)
    if len(value) != offsets.size - 1:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {offsets.size - 1} rows, got {len(value)}", field=field)
    lengths = np.fromiter(map(len, value), dtype=np.int64, count=len(value))
    raise_at_first(lengths != np.diff(offsets), ErrorCode.E_SHAPE, "row length differs from the mask's", field=field)
    return _float_array(list(itertools.chain.from_iterable(value)), field=field)


def _check_rows(rows: Any, data_has_bools: bool, *, field: str = "rows") -> Sequence[Any]:
    """Rows must be a list of lists; with ``true`` / ``false`` somewhere in the text, no id may be a bool."""
    if not isinstance(rows, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "rows must be a list of lists of ids", field=field)
    rows_only = (r for r in rows if isinstance(r, list))
    if data_has_bools and bool in set(map(type, itertools.chain.from_iterable(rows_only))):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "ids must be JSON integers, not booleans", field=field)
    return rows


# ---------------------------------------------------------------------------------------------- encode
def _check_lossless(mask: SamplingMask, fmt: str) -> None:
    lost = [name for name in mask.companions]
    if mask.num_segments != 1:
        lost.append("cu_seqlens")
    if mask.vocab_size is not None:
        lost.append("vocab_size")
    if mask.metadata:
        lost.append("metadata")
    if lost:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"{fmt!r} cannot carry {', '.join(lost)}; use 'json' or pass allow_loss=True",
            field=lost[0],
        )


def encode(mask: SamplingMask, *, format: str = "json", allow_loss: bool = False, width: int | None = None) -> bytes:
    """UTF-8 JSON bytes in form ``format``. ``"json-rows"`` and ``"base64"`` keep only the rows (and their
    order); they refuse a mask with segments, vocab_size, companions or metadata unless ``allow_loss``.
    ``width``: the dense width of ``"base64"`` (default: the widest row)."""
    return b"".join(iter_encode(mask, format=format, allow_loss=allow_loss, width=width))


def iter_encode(
    mask: SamplingMask, *, format: str = "json", allow_loss: bool = False, width: int | None = None
) -> Iterator[bytes]:
    """:func:`encode`'s bytes in pieces, each built from at most 65,536 ids (or one row) or 1 MiB of
    dense rows: writing a file (``save``) holds O(piece), never a Python object per row of the whole
    mask. Every check (lossless forms, the width) is made before the first piece."""
    mask = as_sampling_mask(mask)
    fmt = own_format(format, "json")
    if fmt not in FORMATS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unknown JSON form {fmt!r}; one of {list(FORMATS)}", value=fmt)
    if fmt != "json" and not allow_loss:
        _check_lossless(mask, fmt)
    if fmt == "base64":
        return _base64_pieces(mask, width)
    if fmt == "json-rows":
        return (piece.encode() for piece in _list_pieces(_row_lists(mask.ids, mask.offsets)))
    return (piece.encode() for piece in _document_pieces(mask))


def _chunk_bounds(offsets: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges of at most 65,536 rows and 65,536 ids each (a wider row alone)."""
    rows, start, bounds = offsets.size - 1, 0, []
    while start < rows:
        stop = min(start + _CHUNK, rows, int(np.searchsorted(offsets, offsets[start] + _CHUNK, side="right")) - 1)
        stop = max(stop, start + 1)
        bounds.append((start, stop))
        start = stop
    return bounds


def _row_lists(ids: np.ndarray, offsets: np.ndarray, values: Any = None) -> Iterator[list[Any]]:
    """Nested Python lists of rows a chunk at a time: the ids, or ``values(first, stop)`` (the flat
    values of ids ``first:stop``) split the same way."""
    for a, b in _chunk_bounds(offsets):
        first, stop = int(offsets[a]), int(offsets[b])
        flat = ids[first:stop].tolist() if values is None else values(first, stop)
        yield _split(flat, offsets[a : b + 1] - first)


def _flat_lists(count: int, values: Any) -> Iterator[list[Any]]:
    for first in range(0, count, _CHUNK):
        yield values(first, min(first + _CHUNK, count))


def _list_pieces(chunks: Iterator[list[Any]]) -> Iterator[str]:
    """A JSON array, compact, from Python lists of its items a chunk at a time."""
    yield "["
    first = True
    for items in chunks:
        if items:
            text = json.dumps(items, separators=(",", ":"), allow_nan=False)[1:-1]
            yield text if first else "," + text
            first = False
    yield "]"


def _document_pieces(mask: SamplingMask) -> Iterator[str]:
    head = {VERSION_KEY: SPEC_MAJOR, "vocab_size": mask.vocab_size, "id_order": id_order_of(mask)}
    metadata = json.dumps(metadata_to_json(mask.metadata), separators=(",", ":"), allow_nan=False)
    yield json.dumps(head, separators=(",", ":"))[:-1]
    ids, offsets, rows = mask.ids, mask.offsets, mask.num_rows
    fields: list[tuple[str, Iterator[list[Any]]]] = []
    if mask.num_segments != 1:
        cu = mask.cu_seqlens
        fields.append(("cu_seqlens", _flat_lists(cu.size, lambda a, b: cu[a:b].tolist())))
    fields.append(("rows", _row_lists(ids, offsets)))
    for name, arr in mask.companions.items():
        if name == "sampled_token_ids":
            chunks = _flat_lists(rows, lambda a, b, arr=arr: arr[a:b].tolist())
        elif name == "support_logprobs":
            chunks = _row_lists(ids, offsets, lambda a, b, arr=arr: _float_json(arr[a:b]))
        else:
            chunks = _flat_lists(rows, lambda a, b, arr=arr: _float_json(arr[a:b]))
        fields.append((name, chunks))
    for name, chunks in fields:
        yield f",{json.dumps(name)}:"
        yield from _list_pieces(chunks)
    if mask.metadata:
        yield f',"metadata":{metadata}'
    yield "}"


def _base64_pieces(mask: SamplingMask, width: int | None) -> Iterator[bytes]:
    """The SkyRL envelope, its dense rows base64-encoded a few at a time (a multiple of 3 rows, so
    that the pieces join into the one base64 text of the whole array)."""
    widest = int(mask.row_lengths.max()) if mask.num_rows else 0
    width = widest if width is None else operator.index(width)
    if width < widest:
        mask.to_dense(width)  # E_WIDTH, naming the row
    checked_nbytes((mask.num_rows, width), 4, DEFAULT_LIMITS, field="dense")
    return _base64_text(mask.ids, mask.stored_offsets, mask.num_rows, width)


def _base64_text(ids: np.ndarray, offsets: np.ndarray, rows: int, width: int) -> Iterator[bytes]:
    yield b'{"data":"'
    step = max(3, (1 << 20) // max(4 * width, 1) // 3 * 3)
    for a in range(0, rows if width else 0, step):
        b = min(a + step, rows)
        first = int(offsets[a])
        dense = layouts.ragged_to_dense(ids[first : int(offsets[b])], offsets[a : b + 1] - first, width)
        yield base64.b64encode(dense.astype("<i4", copy=False).tobytes())
    yield f'","shape":[{rows},{width}],"dtype":"int32"}}'.encode()


# ---------------------------------------------------------------------------------------------- decode
def decode(
    data: Any,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    copy: bool = False,
) -> SamplingMask:
    """A mask from JSON text in form ``format`` (detected from the parsed value when None).

    ``validate=False`` skips the content checks (ids in range and unique, ``id_order``, the sampled
    ids), as for the binary codecs; the structure (row and array lengths, segment ends) is checked
    regardless. ``copy`` has no effect: a mask parsed from JSON never views ``data``."""
    fmt = own_format(format, "json")
    obj, cost = _parse(data, limits)
    # The parsed objects stay alive while the mask is built: the rest of the budget is the mask's.
    limits = remaining(limits, cost)
    found = detect(obj) if fmt is None else fmt
    has_bools = _mentions_bools(data)
    if found == "json-rows":
        if not isinstance(obj, list):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "json-rows must be a list of lists of ids", field="rows")
        rows = SamplingMask.from_rows(_check_rows(obj, has_bools), limits=limits, validate=False)
        return _checked(rows, validate, limits)
    if not isinstance(obj, dict):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{found} must be a JSON object")
    if found == "base64":
        return _decode_base64(obj, limits, validate)
    return _decode_document(obj, has_bools, limits, validate)


def _checked(mask: SamplingMask, validate: bool, limits: Limits) -> SamplingMask:
    """``mask`` (built unvalidated) validated in full, or with ``validate=False`` its structure only."""
    if validate:
        return mask.validate(limits)
    check_structure(mask.ids, mask.stored_offsets, {"cu_seqlens": mask.cu_seqlens, **mask.companions}, limits)
    return mask


def _mentions_bools(data: Any) -> bool:
    if isinstance(data, str):
        return "true" in data or "false" in data
    raw = bytes(data) if not isinstance(data, bytes) else data
    return b"true" in raw or b"false" in raw


def _decode_document(doc: dict[str, Any], has_bools: bool, limits: Limits, validate: bool) -> SamplingMask:
    if VERSION_KEY not in doc:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing version key", field=VERSION_KEY)
    check_version(doc[VERSION_KEY])
    for key, value in doc.items():
        if key not in _KNOWN_KEYS:
            check_depth(value, limits.max_json_depth, field=key, depth=2)
    id_order = parse_id_order(doc.get("id_order"))
    if "rows" not in doc:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing rows", field="rows")
    kwargs: dict[str, Any] = {}
    if doc.get("cu_seqlens") is not None:
        kwargs["cu_seqlens"] = _int_array(doc["cu_seqlens"], field="cu_seqlens", most=limits.max_segments + 1)
    vocab_size = doc.get("vocab_size")
    base = SamplingMask.from_rows(
        _check_rows(doc["rows"], has_bools), vocab_size=vocab_size, limits=limits, validate=False, **kwargs
    )
    num_rows = base.num_rows
    if doc.get("sampled_token_ids") is not None:
        kwargs["sampled_token_ids"] = _int_array(
            doc["sampled_token_ids"], field="sampled_token_ids", most=limits.max_rows + 1, count=num_rows
        )
    for name in ("sampled_logprobs", "temperature"):
        if doc.get(name) is not None:
            values = doc[name]
            if not isinstance(values, list):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected a list of numbers", field=name)
            if len(values) != num_rows:
                raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {num_rows} values, got {len(values)}", field=name)
            kwargs[name] = _float_array(values, field=name)
    if doc.get("support_logprobs") is not None:
        kwargs["support_logprobs"] = _nested_floats(doc["support_logprobs"], base.offsets, field="support_logprobs")
    metadata = metadata_from_json(doc.get("metadata"))
    mask = SamplingMask(
        base.ids, base.offsets, vocab_size=vocab_size, metadata=metadata, limits=limits, validate=False, **kwargs
    )
    mask = _checked(mask, validate, limits)
    return check_id_order(mask, id_order) if validate else mask


def _decode_base64(env: dict[str, Any], limits: Limits, validate: bool) -> SamplingMask:
    for key in ("data", "shape", "dtype"):
        if key not in env:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing key", field=key)
    for key, value in env.items():
        if key not in ("data", "shape", "dtype"):
            check_depth(value, limits.max_json_depth, field=key, depth=2)
    dtype = wire_dtype(env["dtype"], BASE64_DTYPES, field="dtype")
    shape = wire_shape(env["shape"], field="shape", ndim=2)
    check_count(shape[0], limits.max_rows, "row count", field="shape")
    check_count(shape[1], limits.max_width, "dense width", field="shape")
    check_output(limits, shape[0], shape[0] * shape[1], field="shape")  # [T, 0] still needs T offsets
    nbytes = checked_nbytes(shape, dtype.itemsize, limits, field="data")
    raw = decode_base64(env["data"], nbytes, limits, field="data")
    dense = array_from_buffer(raw, dtype, shape, limits, field="data")
    return _checked(SamplingMask.from_dense(dense, limits=limits, validate=False), validate, limits)
