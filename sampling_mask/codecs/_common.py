# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/_common.py, vendorable (docs/serving-and-vendoring.md)
"""Header fields every self-describing encoding shares: version, vocab_size, id order, metadata.

Invariants: the version is an integer major version (``E_SCHEMA`` if not an integer,
``E_VERSION`` if not 1); ``id_order`` is ``"ascending"`` or ``"unspecified"``; a declared
``"ascending"`` order is checked against the ids (``E_SCHEMA``); metadata values keep their type
(``None``, ``bool``, ``int``, ``float``, ``str``). In JSON text a non-finite float metadata value is
the object ``{"float": "NaN" | "Infinity" | "-Infinity"}`` so that JSON stays standard.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import SamplingMask

__all__ = [
    "ID_ORDERS",
    "SPEC_MAJOR",
    "VERSION_KEY",
    "check_depth",
    "check_id_order",
    "check_version",
    "check_layout",
    "id_order_of",
    "metadata_from_json",
    "metadata_to_json",
    "parse_id_order",
]

SPEC_MAJOR = 1
#: The key (msgpack, JSON) whose value is the major version; its presence identifies our envelope.
VERSION_KEY = "sampling_mask"
ID_ORDERS = ("ascending", "unspecified")

_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def check_version(value: Any, *, field: str = VERSION_KEY) -> None:
    """``value`` must be the integer 1: ``E_SCHEMA`` when missing or not an integer, else ``E_VERSION``."""
    if not is_int(value):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the version must be an integer", field=field, value=short_repr(value)
        )
    if value != SPEC_MAJOR:
        raise SamplingMaskError(
            ErrorCode.E_VERSION, f"unknown major version (this library reads {SPEC_MAJOR})", field=field, value=value
        )


def check_layout(layout: str, allowed: tuple[str, ...]) -> str:
    """``layout`` when it is one of ``allowed`` (the layouts an encoder writes), else ``E_SCHEMA``."""
    if layout not in allowed:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"layout must be one of {list(allowed)}", field="layout", value=short_repr(layout)
        )
    return layout


def id_order_of(mask: SamplingMask) -> str:
    """``"ascending"`` when every row is ascending, else ``"unspecified"``."""
    return "ascending" if mask.is_canonical else "unspecified"


def parse_id_order(value: Any, *, field: str = "id_order") -> str:
    """A declared id order (absent means ``"unspecified"``)."""
    if value is None:
        return "unspecified"
    if value not in ID_ORDERS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"id_order must be one of {list(ID_ORDERS)}", field=field, value=short_repr(value)
        )
    return str(value)


def check_id_order(mask: SamplingMask, declared: str, *, field: str = "id_order") -> SamplingMask:
    """``E_SCHEMA`` when ``declared`` says ascending but a row is not."""
    if declared == "ascending" and not mask.is_canonical:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "id_order says ascending but a row is not", field=field)
    return mask


def metadata_to_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata as standard-JSON-ready values (non-finite floats as ``{"float": name}``)."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = {"float": "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
        out[key] = value
    return out


def metadata_value_from_json(value: Any, *, field: str) -> Any:
    """One metadata value from parsed JSON (inverse of :func:`metadata_to_json` for one value): its
    type checked before use, a number literal past float64 (``1e999``, which parses as an
    infinity) ``E_RANGE`` (spec 11.1): a non-finite float is only ever ``{"float": ...}``."""
    if type(value) is float and math.isinf(value):
        raise SamplingMaskError(ErrorCode.E_RANGE, "number out of the float64 range", field=field[:80])
    if isinstance(value, dict):
        name = value.get("float")
        if value.keys() == {"float"} and isinstance(name, str) and name in _NONFINITE:
            return _NONFINITE[name]
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            'an object metadata value must be {"float": "NaN" | "Infinity" | "-Infinity"}',
            field=field,
        )
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "metadata values must be null, bool, int, float or str", field=field
        )
    return value


def metadata_from_json(value: Any, *, field: str = "metadata") -> dict[str, Any]:
    """A metadata mapping from parsed JSON (an object; absent / null means empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata must be an object / map", field=field)
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata keys must be strings", field=field)
        out[key] = metadata_value_from_json(item, field=f"{field}.{key}")
    return out


def check_depth(value: Any, limit: int, *, field: str, depth: int = 1) -> None:
    """``E_LIMIT`` when lists / dicts nest deeper than ``limit`` (``value`` itself is at ``depth``).

    Iterative, so hostile nesting cannot exhaust the Python stack.
    """
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            if level > limit:
                raise SamplingMaskError(
                    ErrorCode.E_LIMIT, f"containers nest deeper than the limit {limit}", field=field, value=level
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children if isinstance(child, (list, dict)))
