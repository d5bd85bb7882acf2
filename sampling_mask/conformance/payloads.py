"""JSON payloads of the conformance suite and their conversions to and from :class:`SamplingMask`.

Every case input, request and result is plain JSON (conformance/README.md, "Payloads"):

- a **typed array** is ``{"dtype": NAME, "shape": [d0, ...], "values": NESTED}`` or
  ``{"dtype": NAME, "shape": [...], "hex": LITTLE_ENDIAN_BYTES}``; ``values`` nest exactly as
  ``shape``; ``hex`` carries the raw C-order bytes and must hold ``prod(shape) * itemsize`` bytes;
- a **model mask** (form ``model``, and every decoded result) is ``{"rows": [[id, ...], ...],
  "cu_seqlens": [...], "vocab_size": int | null, <companions>, "metadata": {...}}``; float
  companions are JSON numbers or the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``;
  ``support_logprobs`` nests like ``rows``; metadata values are as in the JSON document (SPEC
  11.2: a non-finite float is ``{"float": "NaN"}``, an integer has no fraction, a float has one). A *canonical* model mask has every row ascending.

The array layout forms (dense, packed, ragged, counts, bitmask) are objects of typed arrays plus
the optional keys ``vocab_size``, ``cu_seqlens``, the companions and ``metadata``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, checked_nbytes
from ..core.model import COMPANIONS, SamplingMask

__all__ = [
    "ARRAY_DTYPES",
    "LAYOUT_FORMS",
    "array_from_json",
    "array_to_json",
    "compare_arrays",
    "compare_masks",
    "decode_layout",
    "encode_layout",
    "limits_from_json",
    "mask_from_json",
    "mask_to_json",
    "normalize_mask_json",
    "render",
    "wire_array",
]

#: Element types a typed array may name (always little-endian).
ARRAY_DTYPES: Mapping[str, np.dtype[Any]] = {
    name: np.dtype(name).newbyteorder("<")
    for name in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}
#: Forms whose payload is an object of typed arrays, and the array keys each one requires.
LAYOUT_FORMS: Mapping[str, tuple[str, ...]] = {
    "dense": ("dense",),
    "packed": ("dense", "cu_seqlens"),
    "ragged": ("ids", "offsets"),
    "counts": ("ids", "counts"),
    "bitmask": ("bitmask",),
    "compact": ("compact",),
}
_FLOAT_COMPANIONS = ("sampled_logprobs", "temperature", "support_logprobs")
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _schema(message: str, field: str | None = None, value: Any = None) -> SamplingMaskError:
    return SamplingMaskError(ErrorCode.E_SCHEMA, message, field=field, value=value)


# ------------------------------------------------------------------------------------------ typed arrays
def _flatten(values: Any, shape: Sequence[int], field: str) -> list[Any]:
    """Row-major flat list of ``values`` nested exactly as ``shape``, else ``E_SHAPE``."""
    if not shape:
        if isinstance(values, list):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "values nest deeper than shape", field=field)
        return [values]
    if not isinstance(values, list) or len(values) != shape[0]:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"values do not nest as shape {list(shape)}", field=field)
    out: list[Any] = []
    for item in values:
        out.extend(_flatten(item, shape[1:], field))
    return out


def _number(value: Any, field: str) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "expected a number", field=field, value=repr(value)[:40])
    return float(value)


def array_from_json(spec: Any, *, field: str, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """A read-only numpy array from a typed array: ``E_SCHEMA`` / ``E_DTYPE`` / ``E_SHAPE`` / ``E_LIMIT`` /
    ``E_BYTES`` / ``E_ENCODING`` on a bad declaration, checked before anything is allocated."""
    if not isinstance(spec, Mapping):
        raise _schema("a typed array must be an object {dtype, shape, values | hex}", field)
    name = spec.get("dtype")
    if not isinstance(name, str) or name not in ARRAY_DTYPES:
        raise SamplingMaskError(ErrorCode.E_DTYPE, "unknown dtype", field=field, value=repr(name)[:40])
    dtype = ARRAY_DTYPES[name]
    shape = spec.get("shape")
    if not isinstance(shape, list):
        raise SamplingMaskError(ErrorCode.E_SHAPE, "shape must be a list of dimensions", field=field)
    nbytes = checked_nbytes(shape, dtype.itemsize, limits, field=field)
    if ("hex" in spec) == ("values" in spec):
        raise _schema("a typed array holds exactly one of 'values' and 'hex'", field)
    if "hex" in spec:
        text = spec["hex"]
        if not isinstance(text, str):
            raise _schema("hex must be a string", field)
        if len(text) != 2 * nbytes:
            raise SamplingMaskError(
                ErrorCode.E_BYTES,
                f"shape {shape} of {name} needs {nbytes} bytes, got {len(text) / 2:g}",
                field=field,
                value=len(text) // 2,
            )
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise SamplingMaskError(ErrorCode.E_ENCODING, "hex is not hexadecimal", field=field) from None
        arr = np.frombuffer(data, dtype=dtype).reshape(shape)
    else:
        flat = _flatten(spec["values"], shape, field)
        if dtype.kind == "f":
            arr = np.array([_number(v, field) for v in flat], dtype=np.float64).astype(dtype).reshape(shape)
        else:
            bad = _first_non_integer(flat)
            if bad:
                raise SamplingMaskError(ErrorCode.E_DTYPE, "expected an integer", field=field, value=repr(bad[0])[:40])
            info = np.iinfo(dtype)
            out_of_range = next((v for v in flat if not info.min <= v <= info.max), None)
            if out_of_range is not None:
                raise SamplingMaskError(
                    ErrorCode.E_RANGE, f"value does not fit {name}", field=field, value=out_of_range
                )
            arr = np.array(flat, dtype=dtype).reshape(shape)
    arr = arr.astype(dtype.newbyteorder("="), copy=False)
    arr.flags.writeable = False
    return arr


def _json_float(value: float) -> float | str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def array_to_json(arr: np.ndarray) -> dict[str, Any]:
    """A typed array with readable ``values`` (non-finite floats spelled as strings)."""
    name = arr.dtype.name
    if name not in ARRAY_DTYPES:
        raise ValueError(f"dtype {name} has no typed-array name")
    values: Any = arr.tolist()
    if arr.dtype.kind == "f":
        values = np.vectorize(_json_float, otypes=[object])(arr).tolist() if arr.size else values
    return {"dtype": name, "shape": list(arr.shape), "values": values}


def compare_arrays(expected: Any, got: Any, *, field: str) -> str | None:
    """``None`` when two typed arrays hold the same dtype, shape and bytes, else what differs."""
    try:
        a = array_from_json(expected, field=field)
    except SamplingMaskError as exc:  # pragma: no cover - vectors are linted
        return f"{field}: the expected array is invalid ({exc})"
    try:
        b = array_from_json(got, field=field)
    except SamplingMaskError as exc:
        return f"{field}: not a valid typed array ({exc})"
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{field}: expected {a.dtype.name}{list(a.shape)}, got {b.dtype.name}{list(b.shape)}"
    if a.tobytes() != b.tobytes():
        return f"{field}: expected {a.tolist()}, got {b.tolist()}"
    return None


# ------------------------------------------------------------------------------------------ limits
def limits_from_json(value: Any) -> Limits:
    """``Limits`` from a request's ``limits`` object (missing keys keep their defaults)."""
    if value is None:
        return DEFAULT_LIMITS
    if not isinstance(value, Mapping):
        raise _schema("limits must be an object", "limits")
    known = set(DEFAULT_LIMITS.__dataclass_fields__)
    changes: dict[str, int] = {}
    for key, limit in value.items():
        if key not in known or isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise _schema("limits holds an unknown key or a value that is not a count", f"limits.{key}")
        changes[key] = limit
    return DEFAULT_LIMITS.replace(**changes)


# ------------------------------------------------------------------------------------------ model masks
def _vocab_size(payload: Mapping[str, Any]) -> int | None:
    vocab = payload.get("vocab_size")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int)):
        raise _schema("vocab_size must be an integer", "vocab_size", repr(vocab)[:40])
    return vocab


def _metadata(payload: Mapping[str, Any]) -> Any:
    """The metadata of a model mask: values as in the JSON document (SPEC 11.2), a non-finite float
    spelled ``{"float": "NaN" | "Infinity" | "-Infinity"}``."""
    from ..codecs.json import metadata_from_json

    metadata = payload.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise _schema("metadata must be an object", "metadata")
    return None if metadata is None else metadata_from_json(dict(metadata))


def _metadata_value(value: Any) -> Any:
    """A metadata value for comparison: a NaN (a bare ``NaN`` token too) as its JSON spelling."""
    return {"float": "NaN"} if isinstance(value, float) and math.isnan(value) else value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def metadata_kinds_differ(expected: Mapping[str, Any], result: Any) -> str | None:
    """Where a result's metadata value is of another kind (integer / float / ...) than the expected
    one's, though equal by value (3.5): SPEC 3.6 gives a concatenation the first mask's values as
    that mask spells them (``4.0`` stays a float). ``None`` when every kind agrees."""
    got = result.get("metadata") if isinstance(result, Mapping) else None
    for key, want in (expected.get("metadata") or {}).items():
        have = got.get(key) if isinstance(got, Mapping) else None
        if _kind(want) != _kind(have):
            return f"metadata {key!r}: expected {want!r} ({_kind(want)}), got {have!r} ({_kind(have)})"
    return None


def _first_non_integer(values: list[Any]) -> list[Any]:
    """``[v]`` for the first value that is not an integer (a null too), ``[]`` when every one is."""
    return [v for v in values if isinstance(v, bool) or not isinstance(v, int)][:1]


def _int_list(value: Any, field: str) -> np.ndarray:
    if not isinstance(value, list):
        raise _schema(f"{field} must be a list", field)
    bad = _first_non_integer(value)
    if bad:
        kind = ErrorCode.E_SHAPE if isinstance(bad[0], list) else ErrorCode.E_DTYPE
        raise SamplingMaskError(kind, "expected a list of integers", field=field, value=repr(bad[0])[:40])
    out_of_range = next((v for v in value if not -(1 << 63) <= v < (1 << 63)), None)
    if out_of_range is not None:
        raise SamplingMaskError(ErrorCode.E_RANGE, "integer does not fit int64", field=field, value=out_of_range)
    return np.array(value, dtype=np.int64)


def _float_list(value: Any, field: str) -> np.ndarray:
    if not isinstance(value, list):
        raise _schema(f"{field} must be a list", field)
    if any(isinstance(v, list) for v in value):
        raise SamplingMaskError(ErrorCode.E_SHAPE, "expected a flat list of numbers", field=field)
    return np.array([_number(v, field) for v in value], dtype=np.float64)


def mask_from_json(obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
    """A validated mask from a model mask (JSON-decoded); row order inside rows may be anything."""
    if not isinstance(obj, Mapping):
        raise _schema("a model mask must be an object")
    rows = obj.get("rows")
    if not isinstance(rows, list):
        raise _schema("rows must be a list of lists of ids", "rows")
    for i, row in enumerate(rows):
        if not isinstance(row, list):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "row must be a list of ids", field="rows", row=i)
        if any(isinstance(v, bool) for v in row):  # JSON true / false are not ids
            raise SamplingMaskError(ErrorCode.E_DTYPE, "ids must be integers", field="rows", row=i)
    kwargs: dict[str, Any] = {"vocab_size": _vocab_size(obj), "metadata": _metadata(obj), "limits": limits}
    if obj.get("cu_seqlens") is not None:
        kwargs["cu_seqlens"] = _int_list(obj["cu_seqlens"], "cu_seqlens")
    if obj.get("sampled_token_ids") is not None:
        kwargs["sampled_token_ids"] = _int_list(obj["sampled_token_ids"], "sampled_token_ids")
    for name in ("sampled_logprobs", "temperature"):
        if obj.get(name) is not None:
            kwargs[name] = _float_list(obj[name], name)
    support = obj.get("support_logprobs")
    if support is not None:
        if not isinstance(support, list) or len(support) != len(rows):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "support_logprobs must nest like rows", field="support_logprobs")
        for i, (values, row) in enumerate(zip(support, rows, strict=True)):
            if not isinstance(values, list) or len(values) != len(row):
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE, "support_logprobs must nest like rows", field="support_logprobs", row=i
                )
        kwargs["support_logprobs"] = _float_list([v for values in support for v in values], "support_logprobs")
    return SamplingMask.from_rows(rows, **kwargs)


def mask_to_json(mask: SamplingMask) -> dict[str, Any]:
    """The canonical model mask of ``mask``: rows ascending, ``support_logprobs`` permuted along."""
    mask = mask.canonical()
    out: dict[str, Any] = {
        "rows": mask.to_rows(),
        "cu_seqlens": mask.cu_seqlens.tolist(),
        "vocab_size": mask.vocab_size,
    }
    for name, arr in mask.companions.items():
        if name == "sampled_token_ids":
            out[name] = arr.tolist()
            continue
        values = [_json_float(v) for v in arr.tolist()]
        if name == "support_logprobs":
            bounds = mask.offsets.tolist()
            out[name] = [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        else:
            out[name] = values
    if mask.metadata:
        from ..codecs.json import metadata_to_json

        out["metadata"] = metadata_to_json(mask.metadata)
    return out


def normalize_mask_json(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults filled in: ``cu_seqlens`` ``[0, T]``, ``vocab_size`` null, ``metadata`` ``{}``."""
    out = dict(obj)
    rows = out.get("rows")
    out.setdefault("cu_seqlens", [0, len(rows) if isinstance(rows, list) else 0])
    out.setdefault("vocab_size", None)
    if not out.get("metadata"):
        out["metadata"] = {}
    return out


def _f32(value: Any) -> Any:
    """float32 bit pattern of a JSON float (NaNs collapse to one key, -0.0 to 0.0), for exact comparison."""
    if isinstance(value, list):
        return [_f32(v) for v in value]
    if isinstance(value, str) and value in _NON_FINITE:
        value = _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ("not a number", repr(value))
    f = np.float32(value) + np.float32(0.0)  # -0.0 becomes 0.0: JSON writers do not all keep the sign of zero
    return "nan" if np.isnan(f) else int(f.view(np.uint32))


def compare_masks(expected: Mapping[str, Any], got: Any) -> str | None:
    """``None`` when ``got`` is the canonical model mask ``expected``, else what differs.

    Rows must be ascending; float companions compare as float32 (NaN equals NaN).
    """
    if not isinstance(got, Mapping):
        return f"expected a model mask object, got {type(got).__name__}"
    exp, res = normalize_mask_json(expected), normalize_mask_json(got)
    rows = res.get("rows")
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        return "result 'rows' is not a list of lists"
    if rows != exp["rows"]:
        unsorted = next((i for i, r in enumerate(rows) if r != sorted(r)), None)
        if unsorted is not None and [sorted(r) for r in rows] == exp["rows"]:
            return f"row {unsorted} is not in canonical (ascending) order: {rows[unsorted]}"
        if len(rows) != len(exp["rows"]):
            return f"expected {len(exp['rows'])} rows, got {len(rows)}"
        first = next(i for i, (a, b) in enumerate(zip(exp["rows"], rows, strict=True)) if a != b)
        return f"row {first}: expected {exp['rows'][first]}, got {rows[first]}"
    for key in ("cu_seqlens", "vocab_size", "sampled_token_ids"):
        if exp.get(key) != res.get(key):
            return f"{key}: expected {exp.get(key)!r}, got {res.get(key)!r}"
    for key in _FLOAT_COMPANIONS:
        if (key in exp) != (key in res):
            return (
                f"{key}: expected {'present' if key in exp else 'absent'}, got {'present' if key in res else 'absent'}"
            )
        if key in exp and _f32(exp[key]) != _f32(res[key]):
            return f"{key}: expected {exp[key]!r}, got {res[key]!r}"
    extra = set(res) - set(exp) - {"metadata"}
    if extra & set(COMPANIONS):
        return f"unexpected companions {sorted(extra & set(COMPANIONS))}"
    exp_meta, res_meta = exp["metadata"], res["metadata"]
    if not isinstance(res_meta, Mapping) or {k: _metadata_value(v) for k, v in exp_meta.items()} != {
        k: _metadata_value(v) for k, v in res_meta.items()
    }:
        return f"metadata: expected {exp_meta!r}, got {res_meta!r}"
    return None


# ------------------------------------------------------------------------------------------ layout forms
def decode_layout(form: str, payload: Any, *, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
    """A validated mask from a dense / packed / ragged / counts / bitmask payload."""
    required = LAYOUT_FORMS[form]
    if not isinstance(payload, Mapping):
        raise _schema(f"a {form} payload must be an object")
    missing = [key for key in required if key not in payload]
    if missing:
        raise _schema(f"a {form} payload needs {missing}", missing[0])
    kwargs: dict[str, Any] = {"vocab_size": _vocab_size(payload), "metadata": _metadata(payload), "limits": limits}
    for key in ("cu_seqlens", *COMPANIONS):
        if payload.get(key) is not None and key not in required:
            kwargs[key] = wire_array(payload[key], key, limits)
    arrays = {key: wire_array(payload[key], key, limits) for key in required}
    if form == "dense":
        return SamplingMask.from_dense(arrays["dense"], **kwargs)
    if form == "packed":
        return SamplingMask.from_dense(arrays["dense"], cu_seqlens=arrays["cu_seqlens"], **kwargs)
    if form == "ragged":
        return SamplingMask.from_ragged(arrays["ids"], arrays["offsets"], **kwargs)
    if form == "counts":
        return SamplingMask.from_counts(arrays["ids"], arrays["counts"], **kwargs)
    if form == "compact":
        return _decode_compact(payload, arrays["compact"], kwargs)
    vocab = kwargs.pop("vocab_size")
    if vocab is None:
        raise _schema("a bitmask payload needs vocab_size", "vocab_size")
    return SamplingMask.from_bitmask(arrays["bitmask"], vocab, **kwargs)


#: Dimensions of each array of a layout payload (SPEC 4): any other count is E_SHAPE, even when the
#: array is empty (the in-memory model is lenient there; a payload on the wire is not).
_NDIM = {"dense": 2, "bitmask": 2}
#: Element kinds of each array (numpy kind letters): integers, floats, or uint8 bytes (SPEC 4, 4.5, 5.1).
_KINDS = {"sampled_logprobs": "f", "temperature": "f", "support_logprobs": "f", "bitmask": "u8", "compact": "u8"}


def wire_array(spec: Any, key: str, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """The typed array ``spec`` of layout-payload field ``key``, checked for its rank and element kind."""
    arr = array_from_json(spec, field=key, limits=limits)
    ndim = _NDIM.get(key, 1)
    if arr.ndim != ndim:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {ndim} dimension(s), got {arr.ndim}", field=key)
    kind = _KINDS.get(key, "iu")
    if (arr.dtype != np.uint8) if kind == "u8" else (arr.dtype.kind not in kind):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{arr.dtype} is not an allowed element type", field=key)
    return arr


def _decode_compact(payload: Mapping[str, Any], data: np.ndarray, kwargs: dict[str, Any]) -> SamplingMask:
    """The compact layout (SPEC section compact): uint8 bytes plus the ``num_rows`` / ``nnz`` of its container."""
    from ..codecs import compact

    if data.dtype != np.uint8:
        raise SamplingMaskError(ErrorCode.E_DTYPE, "compact bytes are uint8", field="compact")
    if data.ndim != 1:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "compact bytes are one-dimensional", field="compact")
    for key in ("num_rows", "nnz"):
        if key not in payload:
            raise _schema(f"a compact payload needs {key}", key)
    ids, offsets = compact.decode_ragged(data.tobytes(), payload["num_rows"], payload["nnz"], limits=kwargs["limits"])
    return SamplingMask(ids, offsets, **kwargs)


def encode_layout(form: str, mask: SamplingMask, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A layout payload of ``mask``, rows in their stored order (SPEC 4.3) except in the compact layout,
    which holds canonical rows (SPEC 12.4); ``options`` may give the dense ``width``."""
    options = options or {}
    if form == "compact":
        mask = mask.canonical()
    out: dict[str, Any] = {}
    if form in ("dense", "packed"):
        out["dense"] = array_to_json(mask.to_dense(options.get("width")))
        if form == "packed":
            out["cu_seqlens"] = array_to_json(mask.cu_seqlens)
    elif form == "ragged":
        ids, offsets = mask.to_ragged()
        out.update(ids=array_to_json(ids), offsets=array_to_json(offsets))
    elif form == "counts":
        ids, counts = mask.to_counts()
        out.update(ids=array_to_json(ids), counts=array_to_json(counts))
    elif form == "bitmask":
        out["bitmask"] = array_to_json(mask.to_bitmask(options.get("vocab_size")))
    elif form == "compact":
        from ..codecs import compact

        data = compact.encode_ragged(mask.ids, mask.offsets)
        out.update(
            compact={"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}, num_rows=mask.num_rows, nnz=mask.nnz
        )
    else:
        raise KeyError(form)
    if form != "packed" and mask.num_segments != 1:
        out["cu_seqlens"] = array_to_json(mask.cu_seqlens)
    if mask.vocab_size is not None:
        out["vocab_size"] = mask.vocab_size
    elif form == "bitmask":
        out["vocab_size"] = options["vocab_size"]
    for name, arr in mask.companions.items():
        out[name] = array_to_json(arr)
    if mask.metadata:
        from ..codecs.json import metadata_to_json

        out["metadata"] = metadata_to_json(mask.metadata)
    return out


def _inline(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def render(obj: Any, indent: int = 0) -> str:
    """Stable JSON, as the committed vectors are written: objects one key per line; a list inline when it
    fits in 100 columns."""
    pad = "  " * indent
    if isinstance(obj, dict) and obj:
        items = [f"{pad}  {json.dumps(k)}: {render(v, indent + 1).lstrip()}" for k, v in obj.items()]
        return pad + "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj:
        text = _inline(obj)
        if len(text) + len(pad) <= 100 or not any(isinstance(x, (list, dict)) for x in obj):
            return pad + text
        return pad + "[\n" + ",\n".join(render(x, indent + 1) for x in obj) + "\n" + pad + "]"
    return pad + _inline(obj)
