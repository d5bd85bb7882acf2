"""Cases the spec states alike for several forms, written once: each form module calls them at their
place in its files (writers keep the stored order, declare it truthfully, canonicalize the compact
layout, and rows-only writers refuse what they cannot hold)."""

from __future__ import annotations

from typing import Any

from .common import File, err, model, unsorted_model


def keeps_stored_order(e: File, stored: dict[str, Any], payload: dict[str, Any]) -> None:
    """SPEC 4.3: a writer of a layout keeps the stored order (dense, packed, ragged)."""
    e.add(
        "encode-keeps-stored-order",
        "Row 0 is stored as [5, 1]: a writer keeps the stored order, it does not re-sort.",
        "layouts",
        stored,
        {"payload": payload},
        op="encode",
        since="1.0",
    )


def declares_unsorted_rows(e: File, spec: str, stored: dict[str, Any], properties: dict[str, Any]) -> None:
    """A writer of a byte form declares its rows' order truthfully, keeps each support log-prob with its
    id, and writes what 11.5 recognises (json, json-rows, msgpack, arrow)."""
    e.add(
        "encode-unsorted-rows",
        "Rows that are not ascending: the payload must not declare id_order ascending, keeps every "
        "support log-prob with its id, and is recognised from its first bytes (the version key first).",
        spec,
        stored,
        {"roundtrip": True, "properties": properties},
        op="encode",
        since="1.0",
    )


def canonicalizes_compact(e: File, spec: str) -> None:
    """SPEC 12.4: the compact layout stores rows as sets (msgpack, arrow, parquet)."""
    e.add(
        "encode-compact-canonicalizes",
        "The compact layout stores rows as sets: the writer canonicalizes (ids and support log-probs "
        "permuted together) and declares id_order ascending and the compact layout.",
        spec,
        unsorted_model(),
        {"roundtrip": True, "properties": {"id_order": "ascending", "layout": "compact"}},
        op="encode",
        options={"layout": "compact"},
        since="1.0",
    )


def refuses_zero_segments(bad: File) -> None:
    """SPEC 11.3, 11.4: a rows-only writer refuses B = 0, which would read back as one empty segment
    (json-rows, base64)."""
    bad.add(
        "encode-zero-segments",
        "B = 0 (cu_seqlens [0]): the rows-only form reads back as one segment, so the writer refuses.",
        "json",
        model([], cu_seqlens=[0]),
        err("E_SCHEMA"),
        op="encode",
        since="1.2",
    )
