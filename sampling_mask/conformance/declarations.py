"""What an encoded payload declares about itself, read independently of the decoder under test.

An encode case may expect, besides a round trip, ``"properties"`` of the bytes (conformance/README.md,
"Case files"): ``first_key`` (the first key of the msgpack map or JSON object: SPEC 10.1 and 11.2 put
the version first), ``id_order`` (``ascending`` / ``unspecified``; absent means ``unspecified``),
``layout`` (msgpack ``layout``, default ``ragged``; Arrow ``sampling_mask.layout``, default ``list``)
and ``detected`` (the encoding recognised from the bytes alone, SPEC 11.5).
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

from ..core.errors import SamplingMaskError

__all__ = ["PROPERTY_NAMES", "check_properties", "declarations"]

PROPERTY_NAMES = ("first_key", "id_order", "layout", "detected")


class _Pairs(list):  # type: ignore[type-arg]
    """A map / object read as its (key, value) pairs in stored order."""


def _map_declarations(pairs: Any, default_layout: str | None) -> dict[str, Any]:
    if not isinstance(pairs, _Pairs) or not pairs:
        return {}
    fields = dict(pairs)
    out: dict[str, Any] = {"first_key": pairs[0][0], "id_order": fields.get("id_order") or "unspecified"}
    if default_layout is not None:
        out["layout"] = fields.get("layout", default_layout)
    return out


def _arrow_declarations(form: str, data: bytes) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if form == "parquet":
        schema = pq.read_schema(io.BytesIO(data))
    elif form == "arrows":
        schema = pa.ipc.open_stream(data).schema
    else:
        schema = pa.ipc.open_file(pa.BufferReader(data)).schema
    meta = {k.decode("utf-8"): v.decode("utf-8") for k, v in (schema.metadata or {}).items()}
    return {
        "id_order": meta.get("sampling_mask.id_order", "unspecified"),
        "layout": meta.get("sampling_mask.layout", "list"),
    }


def declarations(form: str, data: bytes) -> dict[str, Any]:
    """The properties of ``data`` (bytes of ``form``) that :data:`PROPERTY_NAMES` name; raises on bytes
    that cannot be read at all."""
    from ..codecs import detect_format

    if form == "msgpack":
        import msgpack

        out = _map_declarations(
            msgpack.unpackb(data, raw=False, object_pairs_hook=_Pairs, strict_map_key=False), "ragged"
        )
    elif form in ("json", "json-rows", "base64"):
        out = _map_declarations(json.loads(data.decode("utf-8-sig"), object_pairs_hook=_Pairs), None)
    elif form in ("arrow", "arrows", "parquet"):
        out = _arrow_declarations(form, data)
    else:
        out = {}
    try:
        out["detected"] = detect_format(data)
    except SamplingMaskError:
        out["detected"] = None  # not recognisable from its first bytes
    return out


def check_properties(form: str, data: bytes, expected: Mapping[str, Any]) -> str | None:
    """``None`` when ``data`` declares every property in ``expected``, else what differs."""
    try:
        found = declarations(form, data)
    except Exception as exc:  # noqa: BLE001 - unreadable bytes are a failed check, not a crash
        return f"cannot read what the payload declares: {type(exc).__name__}: {exc}"
    wrong = [
        f"{name} = {found.get(name)!r}, expected {want!r}" for name, want in expected.items() if found.get(name) != want
    ]
    return f"the payload declares {'; '.join(wrong)}" if wrong else None
