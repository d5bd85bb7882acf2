"""The 1.0 profile: does a payload use anything that version 1.0 of the spec does not define?

SPEC 6 (1.2): every payload a writer produces with its default options is valid under the 1.0
text, so that a reader that implements exactly 1.0 reads it; forms added later (msgpack ``counts``,
1.1) are opt-in for writers. :func:`v1_0_findings` checks one payload against what 1.0 defines,
structurally (it does not validate the mask: decode it for that), and returns one line per use of
something 1.0 does not define; an empty list means a 1.0 reader reads it. What 1.0 allows and a
1.0 reader ignores is no finding: unknown keys, columns and schema-metadata keys (1.0 section 6),
so the ``pad`` entry of a msgpack ARRAY (10.1, 1.1) is within 1.0.

``sampling-mask conformance --profile-1.0 FILE [--form F]`` runs it on files (exit 0 when every
file is within 1.0, 1 otherwise). Needs msgpack / pyarrow for those encodings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["V1_0_MSGPACK_KEYS", "default_output_findings", "profile_forms", "v1_0_findings"]

#: The envelope keys of 1.0 (SPEC 1.0, 10.1); ``counts`` came with 1.1.
V1_0_MSGPACK_KEYS = (
    "sampling_mask",
    "layout",
    "vocab_size",
    "id_order",
    "num_rows",
    "nnz",
    "ids",
    "offsets",
    "dense",
    "compact",
    "cu_seqlens",
    "sampled_token_ids",
    "sampled_logprobs",
    "temperature",
    "support_logprobs",
    "metadata",
)
_V1_0_ARRAY_DTYPES = {
    "ids": ("int32",),
    "offsets": ("int32", "int64"),
    "dense": ("int32",),
    "cu_seqlens": ("int32", "int64"),
    "sampled_token_ids": ("int32",),
    "sampled_logprobs": ("float32",),
    "temperature": ("float32",),
    "support_logprobs": ("float32",),
}
_V1_0_REQUIRED = {"ragged": ("ids", "offsets"), "dense": ("dense",), "compact": ("compact", "num_rows", "nnz")}
#: Keys whose value 1.0 lets be nil / null (10.1 and 11.2 of 1.0: ``vocab_size`` "int or nil").
_NIL_KEYS = ("vocab_size",)
#: The document keys of 1.0 (11.2): frozen here, not taken from the JSON codec, which follows the newest revision.
_JSON_KEYS = (
    "sampling_mask",
    "vocab_size",
    "id_order",
    "cu_seqlens",
    "rows",
    "sampled_token_ids",
    "sampled_logprobs",
    "temperature",
    "support_logprobs",
    "metadata",
)
_ARROW_META = ("sampling_mask.version", "sampling_mask.vocab_size", "sampling_mask.id_order", "sampling_mask.layout")


def profile_forms() -> tuple[str, ...]:
    """The encodings :func:`v1_0_findings` checks."""
    return ("json-rows", "json", "base64", "msgpack", "arrow", "arrows", "parquet")


def v1_0_findings(data: Any, form: str | None = None) -> list[str]:
    """What ``data`` (bytes, or a list of msgpack frames) uses that spec 1.0 does not define; empty
    when a 1.0 reader reads it. ``form`` defaults to the encoding recognised from the first bytes."""
    if isinstance(data, (list, tuple)):
        data = b"".join(bytes(memoryview(f)) for f in data)
    data = bytes(memoryview(data))
    if form is None:
        from ..codecs import detect_format

        form = detect_format(data)
    if form == "msgpack":
        return _msgpack(data)
    if form in ("json", "json-rows", "base64"):
        return _json(data, form)
    if form in ("arrow", "arrows", "parquet"):
        return _arrow(data, form)
    raise ValueError(f"no 1.0 profile for form {form!r}; one of {profile_forms()}")


def _msgpack(data: bytes) -> list[str]:
    import msgpack

    env = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(env, dict) or next(iter(env), None) != "sampling_mask" or env["sampling_mask"] != 1:
        return ["msgpack: not a map whose first key is sampling_mask = 1"]
    found = []
    layout = env.get("layout", "ragged")
    if layout not in _V1_0_REQUIRED:
        found.append(f"msgpack: layout {layout!r} is not a 1.0 layout")
    else:
        found += [
            f"msgpack: {layout} envelope without {k!r} (1.0 requires it)"
            for k in _V1_0_REQUIRED[layout]
            if k not in env
        ]
    for key, value in env.items():
        if key == "counts":
            dtype = value.get("dtype") if isinstance(value, Mapping) else None
            found.append(f"msgpack: 'counts' ({dtype}) is spec 1.1 (1.0 readers need 'offsets')")
        if key not in V1_0_MSGPACK_KEYS:
            continue  # 1.0 readers ignore unknown keys
        if value is None and key not in _NIL_KEYS:
            found.append(f"msgpack: {key!r} is nil (1.0 defines nil for vocab_size only; 1.1 reads it as absent)")
        if key in _V1_0_ARRAY_DTYPES and isinstance(value, Mapping):
            dtype = value.get("dtype")
            if dtype not in _V1_0_ARRAY_DTYPES[key]:
                found.append(f"msgpack: {key!r} has dtype {dtype!r}; 1.0 allows {list(_V1_0_ARRAY_DTYPES[key])}")
            if not isinstance(value.get("data"), bytes):
                found.append(f"msgpack: {key!r} data is not a bin")
    return found


def _json(data: bytes, form: str) -> list[str]:
    text = data.decode("utf-8")
    doc = json.loads(text.removeprefix("\ufeff"))
    if form == "json-rows":
        ok = isinstance(doc, list) and all(isinstance(r, list) for r in doc)
        return [] if ok else ["json-rows: not an array of arrays"]
    if form == "base64":
        found = [f"base64: key {k!r} missing" for k in ("data", "shape", "dtype") if k not in doc]
        if doc.get("dtype") not in ("int32", "int64"):
            found.append(f"base64: dtype {doc.get('dtype')!r} is not int32 / int64")
        return found
    if not isinstance(doc, dict) or next(iter(doc), None) != "sampling_mask" or doc["sampling_mask"] != 1:
        return ["json: not an object whose first key is sampling_mask = 1"]
    found = [] if "rows" in doc else ["json: no 'rows' (1.0 requires it)"]
    for key, value in doc.items():
        if key in _JSON_KEYS and value is None and key not in _NIL_KEYS:
            found.append(f"json: {key!r} is null (1.0 defines null for vocab_size only; 1.1 reads it as absent)")
    return found


def _arrow(data: bytes, form: str) -> list[str]:
    import pyarrow as pa

    if form == "parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(pa.BufferReader(data))
    elif form == "arrow":
        schema = pa.ipc.open_file(pa.BufferReader(data)).schema
    else:
        schema = pa.ipc.open_stream(pa.BufferReader(data)).schema
    meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (schema.metadata or {}).items()}
    found = []
    if meta.get("sampling_mask.version") != "1":
        found.append(f"{form}: sampling_mask.version is {meta.get('sampling_mask.version')!r}, not '1'")
    for key in meta:
        if (
            key.startswith("sampling_mask.")
            and key not in _ARROW_META
            and not key.startswith("sampling_mask.metadata.")
        ):
            found.append(
                f"{form}: schema-metadata key {key!r} is not defined by 1.0 (reserved: never written, SPEC 9.2)"
            )
    layout = meta.get("sampling_mask.layout", "list")
    names = schema.names
    if layout == "list":
        found += _arrow_column(schema, "sampling_mask", 2, pa.int32(), form, required=True)
    elif layout == "compact":
        found += [f"{form}: compact table without {c!r}" for c in _COMPACT_COLUMNS if c not in names]
        for column, types in (("sampling_mask_compact", (pa.binary(), pa.large_binary())),):
            if column in names and schema.field(column).type not in types:
                found.append(f"{form}: {column!r} is {schema.field(column).type}, not binary")
        for column in ("sampling_mask_num_rows", "sampling_mask_nnz"):
            if column in names and schema.field(column).type != pa.int64():
                found.append(f"{form}: {column!r} is {schema.field(column).type}, not int64")
    else:
        found.append(f"{form}: layout {layout!r} is not a 1.0 layout")
    for name, depth, leaf in (
        ("sampled_token_ids", 1, pa.int32()),
        ("sampled_logprobs", 1, pa.float32()),
        ("temperature", 1, pa.float32()),
        ("support_logprobs", 2, pa.float32()),
    ):
        found += _arrow_column(schema, name, depth, leaf, form, required=False)
    return found


_COMPACT_COLUMNS = ("sampling_mask_compact", "sampling_mask_num_rows", "sampling_mask_nnz")


def _arrow_column(schema: Any, name: str, depth: int, leaf: Any, form: str, *, required: bool) -> list[str]:
    import pyarrow as pa

    if name not in schema.names:
        return [f"{form}: no {name!r} column (1.0 requires it)"] if required else []
    kind = schema.field(name).type
    for _ in range(depth):
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            return [f"{form}: {name!r} is {schema.field(name).type}, not a 1.0 list nesting"]
        kind = kind.value_type
    return [] if kind == leaf else [f"{form}: {name!r} has leaf {kind}, not {leaf}"]


def default_output_findings(form: str, payload: Any) -> str | None:
    """``None`` when an encode answer of ``form`` is within the 1.0 profile (SPEC 6: a writer's
    default output is 1.0 output), else what it uses that 1.0 does not define. Every encode case and
    every generated writer case asks for default output (the protocol's options select only what
    1.0 defines: a dense width, a layout), so this holds for every answer of the implementation
    under test, not only for the reference's. Forms without a byte encoding have no profile."""
    from ..core.errors import SamplingMaskError
    from .reference import payload_bytes

    if form not in profile_forms():
        return None
    try:
        data = payload_bytes(payload)
    except SamplingMaskError as exc:
        return f"the payload is not {{text}} or {{hex}}: {exc}"
    try:
        found = v1_0_findings(data, form)
    except Exception as exc:  # noqa: BLE001 - bytes the profile cannot read are not 1.0 output
        found = [f"cannot read it as {form}: {type(exc).__name__}: {exc}"]
    if not found:
        return None
    return "default output is not within the 1.0 profile (SPEC 6): " + "; ".join(found)
