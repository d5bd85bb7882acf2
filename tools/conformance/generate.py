"""The source of every conformance vector; the committed files are its output (a maintainer tool,
not part of the package: it runs from a source checkout with the package installed).

``python tools/conformance/generate.py`` checks that ``conformance/v1`` is exactly what
this module produces (exit 1 on a missing, stale or stray file); ``--write`` regenerates the files.
Nothing regenerates them implicitly: a changed golden is a reviewed change.

Expected results are written by hand here (masks) or computed by an independent float64 formula
(:func:`~sampling_mask.conformance.properties.float64_scores`); binary payloads are built from the spec's layouts with numpy / pyarrow / msgpack
directly, never by this library's encoders, so the library is tested against them, not with them.
Real data comes from ``sources/vllm-0.32.json`` (slices of vLLM 0.32's own output).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sampling_mask.conformance.payloads import render
from sampling_mask.conformance.properties import float64_scores

__all__ = ["build", "main", "stable_float"]

SUITE = "v1"
REQ, REC = "required", "recommended"
#: The spec revision a builder's cases arrived with, recorded by ``File.add(since=...)``.
SPEC_1_4 = "1.4"
_SOURCES = Path(__file__).resolve().parent / "sources"


# ------------------------------------------------------------------------------------------ builders
def _shape_of(values: Any) -> list[int]:
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        if not values:
            break
        values = values[0]
    return shape


def arr(values: Any, dtype: str = "int32", shape: Sequence[int] | None = None) -> dict[str, Any]:
    """A typed array with readable values (``shape`` needed only when a dimension is 0)."""
    return {"dtype": dtype, "shape": list(shape) if shape is not None else _shape_of(values), "values": values}


def hexarr(values: Any, dtype: str, shape: Sequence[int] | None = None) -> dict[str, Any]:
    """The same as :func:`arr` but as little-endian bytes in hex."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    return {"dtype": dtype, "shape": list(a.shape), "hex": a.tobytes().hex()}


def rawarr(dtype: str, shape: Sequence[int], data: bytes) -> dict[str, Any]:
    """A typed array whose bytes need not agree with its declaration (for ``E_BYTES`` / ``E_LIMIT``)."""
    return {"dtype": dtype, "shape": list(shape), "hex": data.hex()}


def mask(
    rows: list[list[int]],
    *,
    cu: list[int] | None = None,
    vocab: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An expected canonical model mask; rows must already be ascending (written by hand)."""
    for i, row in enumerate(rows):
        if row != sorted(row):
            raise AssertionError(f"expected masks are canonical: row {i} {row} is not ascending")
    out: dict[str, Any] = {"rows": rows, "cu_seqlens": cu if cu is not None else [0, len(rows)], "vocab_size": vocab}
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def model(rows: list[list[int]], **extra: Any) -> dict[str, Any]:
    """A model-mask *input* (rows in any order; only the keys given)."""
    return {"rows": rows, **{k: v for k, v in extra.items() if v is not None}}


#: Decimal places (relative above magnitude 1) kept of a computed float: far inside every case's
#: tolerance (>= 1e-6), far outside the ulp-level differences of exp / log between CPUs.
STABLE_DIGITS = 9


def stable_float(value: float, digits: int = STABLE_DIGITS) -> float:
    """``value`` rounded to ``digits`` decimals below magnitude 1 (significant digits above), so the
    same on every machine: numpy picks SIMD kernels for exp / log at run time and their results
    differ by an ulp between CPUs. Raises when ``value`` lies so close to a rounding boundary that
    such a difference could flip it (change the case's inputs then)."""
    if not math.isfinite(value):
        return value
    places = digits - len(str(int(abs(value)))) + (1 if abs(value) < 1 else 0)
    slack = 1e-12 * max(1.0, abs(value))
    rounded = round(value, places)
    if round(value - slack, places) != rounded or round(value + slack, places) != rounded:
        raise AssertionError(f"{value!r} is within {slack:g} of a rounding boundary: not stable across CPUs")
    return rounded + 0.0  # -0.0 -> 0.0


def stable_scores(scores: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Every finite float of ``scores`` through :func:`stable_float`."""
    return {k: [stable_float(v) if isinstance(v, float) else v for v in values] for k, values in scores.items()}


def companions_mask(**extra: Any) -> dict[str, Any]:
    """The expected two-row companions example: row 0 {3, 5, 9} with every companion, row 1 empty.

    ``extra`` overrides a companion or adds keys (``metadata``), after the companions.
    """
    companions: dict[str, Any] = {
        "sampled_token_ids": [5, -1],
        "sampled_logprobs": [-0.5, 0.0],
        "temperature": [0.5, 1.0],
        "support_logprobs": [[-1.25, -0.5, -3.0], []],
    }
    return mask([[3, 5, 9], []], vocab=10, **{**companions, **extra})


def roundtrip_model(**extra: Any) -> dict[str, Any]:
    """The encode round-trip input: three rows in two segments, every companion and metadata.

    ``extra`` overrides a field in place.
    """
    fields: dict[str, Any] = {
        "cu_seqlens": [0, 2, 3],
        "vocab_size": 10,
        "sampled_token_ids": [5, -1, 1],
        "sampled_logprobs": [-0.5, 0.0, -1.0],
        "temperature": [0.5, 1.0, 2.0],
        "support_logprobs": [[-1.25, -0.5, -3.0], [], [0.0]],
        "metadata": {"top_k": 3, "producer": "test"},
    }
    return model([[3, 5, 9], [], [1]], **{**fields, **extra})


def ok(m: dict[str, Any]) -> dict[str, Any]:
    return {"mask": m}


def err(*codes: str) -> dict[str, Any]:
    return {"error": codes[0] if len(codes) == 1 else list(codes)}


def dense_rows(rows: list[list[int]], width: int) -> list[list[int]]:
    return [r + [-1] * (width - len(r)) for r in rows]


#: Sections of spec/v1/SPEC.md by subject; ``layouts`` and ``json`` mean the form's own section.
SECTIONS = {
    "model": "3.1",
    "empty": "3.2",
    "segments": "3.3",
    "order": "3.4",
    "companions": "5.1",
    "metadata": "5.2",
    "versioning": "6",
    "limits": "8.1",
    "arrow": "9.1",
    "arrow-metadata": "9.2",
    "arrow-batches": "9.3",
    "arrow-reading": "9.5",
    "msgpack": "10.1",
    "json-rules": "11.1",
    "compact": "12.1",
    "scoring": "13.1",
    "scoring-policies": "13.2",
}
FORM_SECTIONS = {
    "ragged": "4.1",
    "counts": "4.2",
    "dense": "4.3",
    "packed": "4.4",
    "bitmask": "4.5",
    "model": "4.6",
    "arrow": "9.1",
    "arrows": "9.3",
    "parquet": "9.3",
    "msgpack": "10.1",
    "json": "11.2",
    "json-rows": "11.3",
    "base64": "11.4",
    "compact": "12.1",
    "scorer": "13.1",
}


def section(subject: str, form: str) -> str:
    """The spec section (a number such as ``4.3``, or a section marker) a case of ``form`` cites."""
    if subject in ("layouts", "json"):
        return FORM_SECTIONS[form]
    return SECTIONS.get(subject, subject)


class File:
    """One case file being built."""

    def __init__(self, form: str, description: str) -> None:
        self.form = form
        self.description = description
        self.cases: list[dict[str, Any]] = []
        #: The spec revision that introduced a case, by case id, where its builder says (not written
        #: into the files: the case schema has no such field yet).
        self.since: dict[str, str] = {}

    def add(
        self,
        slug: str,
        description: str,
        spec: str,
        input: Any,
        expected: dict[str, Any],
        *,
        op: str = "decode",
        level: str = REQ,
        options: dict[str, Any] | None = None,
        limits: dict[str, int] | None = None,
        since: str | None = None,
    ) -> None:
        case: dict[str, Any] = {
            "id": f"{self.form}.{slug}",
            "description": description,
            "spec": f"SPEC.md#{section(spec, self.form)}",
            "level": level,
        }
        if op != "decode":
            case["op"] = op
        if options is not None:
            case["options"] = options
        if limits is not None:
            case["limits"] = limits
        case["input"] = input
        case["expected"] = expected
        self.cases.append(case)
        if since is not None:
            self.since[case["id"]] = since

    def document(self) -> dict[str, Any]:
        return {
            "$schema": "../../test-schema.json",
            "form": self.form,
            "description": self.description,
            "cases": self.cases,
        }


class Book:
    """Every file of the suite, by path relative to ``conformance/``."""

    def __init__(self) -> None:
        self.files: dict[str, File] = {}

    def file(self, path: str, form: str, description: str = "") -> File:
        """The file at ``path``, created with ``description`` on first use (later builders append to it)."""
        key = f"{SUITE}/{path}"
        if key not in self.files:
            self.files[key] = File(form, description)
        assert self.files[key].form == form, f"{path} holds {self.files[key].form} cases"
        return self.files[key]


def _source() -> dict[str, Any]:
    return json.loads((_SOURCES / "vllm-0.32.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ dense
ISSUE_ROWS = [[1, 5], [], [7]]  # the foundation issue's example mask, canonical


def dense_cases(book: Book) -> None:
    f = book.file("dense/decode.json", "dense", "Dense int32 [T, W]: a row's ids, then -1 trailing padding.")
    f.add(
        "issue-example",
        "The spec's worked example: -1 padding after the ids; an all -1 row is an empty row.",
        "layouts",
        {"dense": arr([[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]]), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "issue-example-hex",
        "The same mask as raw little-endian int32 bytes.",
        "layouts",
        {"dense": hexarr([[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]], "int32"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "full-rows-no-padding",
        "Rows exactly as wide as the array carry no padding.",
        "layouts",
        {"dense": arr([[1, 2, 3], [4, 5, 6]])},
        ok(mask([[1, 2, 3], [4, 5, 6]])),
    )
    f.add(
        "rank-order-row",
        "SkyRL writes ids in rank order; order inside a row carries no meaning.",
        "order",
        {"dense": arr([[9, 3, 7, -1]])},
        ok(mask([[3, 7, 9]])),
    )
    f.add(
        "all-padding-rows",
        "Observation tokens are all -1 rows: empty rows, no support recorded.",
        "empty",
        {"dense": arr([[-1, -1], [-1, -1], [-1, -1]])},
        ok(mask([[], [], []])),
    )
    f.add(
        "trailing-empty-rows",
        "Empty rows at the end are rows: T counts them.",
        "empty",
        {"dense": arr([[2, -1], [-1, -1], [-1, -1]])},
        ok(mask([[2], [], []])),
    )
    f.add(
        "leading-empty-rows",
        "Empty rows before the first id.",
        "empty",
        {"dense": arr([[-1, -1], [4, 0]])},
        ok(mask([[], [0, 4]])),
    )
    f.add(
        "zero-rows",
        "T = 0: no rows, one empty segment.",
        "layouts",
        {"dense": arr([], shape=[0, 4])},
        ok(mask([])),
    )
    f.add(
        "zero-width",
        "W = 0 is a valid width: every row is empty.",
        "layouts",
        {"dense": arr([[], [], []], shape=[3, 0])},
        ok(mask([[], [], []])),
    )
    f.add(
        "zero-rows-zero-width",
        "A [0, 0] array.",
        "layouts",
        {"dense": arr([], shape=[0, 0])},
        ok(mask([])),
    )
    f.add(
        "singleton-rows",
        "About half of real rows hold one id (greedy-like steps).",
        "layouts",
        {"dense": arr([[4], [8], [15]])},
        ok(mask([[4], [8], [15]])),
    )
    f.add(
        "id-zero",
        "Id 0 is an id, not padding.",
        "layouts",
        {"dense": arr([[0, -1], [-1, -1]])},
        ok(mask([[0], []])),
    )
    f.add(
        "maximal-int32-id",
        "The largest int32 is a valid id when vocab_size is unknown.",
        "model",
        {"dense": arr([[2147483647, 0]])},
        ok(mask([[0, 2147483647]])),
    )
    f.add(
        "vocab-boundary",
        "Ids 0 and vocab_size - 1 are both in range.",
        "model",
        {"dense": arr([[9, 0]]), "vocab_size": 10},
        ok(mask([[0, 9]], vocab=10)),
    )
    f.add(
        "ties-wider-than-top-k",
        "Ties at the top-k boundary make a row wider than top_k; the width is not bounded by top_k.",
        "model",
        {"dense": arr([[11, 3, 7, 5]]), "metadata": {"top_k": 2}},
        ok(mask([[3, 5, 7, 11]], metadata={"top_k": 2})),
    )
    f.add(
        "wide-padding",
        "Padding wider than any row changes nothing.",
        "layouts",
        {"dense": arr([[3] + [-1] * 7, [6, 2] + [-1] * 6])},
        ok(mask([[3], [2, 6]])),
    )
    f.add(
        "sampled-token-ids",
        "Sampled ids ride along; -1 is allowed on an empty row.",
        "companions",
        {
            "dense": arr([[5, 1, -1], [-1, -1, -1], [7, -1, -1]]),
            "vocab_size": 10,
            "sampled_token_ids": arr([1, -1, 7]),
        },
        ok(mask(ISSUE_ROWS, vocab=10, sampled_token_ids=[1, -1, 7])),
    )
    f.add(
        "support-logprobs-follow-ids",
        "Canonical order sorts each row and permutes support_logprobs along with its ids.",
        "companions",
        {
            "dense": arr([[9, 3, -1]]),
            "sampled_token_ids": arr([9]),
            "sampled_logprobs": arr([-0.25], "float32"),
            "temperature": arr([0.75], "float32"),
            "support_logprobs": arr([-0.25, -1.5], "float32"),
        },
        ok(
            mask(
                [[3, 9]],
                sampled_token_ids=[9],
                sampled_logprobs=[-0.25],
                temperature=[0.75],
                support_logprobs=[[-1.5, -0.25]],
            )
        ),
    )
    src = _source()
    picks = ["17", "18", "19"]
    f.add(
        "vllm-0.32-rows-as-dense",
        "Three real vLLM 0.32 rows (ascending) as our dense layout, width 64. The -1 padding is ours:"
        " vLLM's compact buffer leaves undefined bytes past each row's count.",
        "layouts",
        {"dense": arr([src["compact_token_ids"][i] for i in picks]), "vocab_size": src["vocab_size"]},
        ok(mask([src["rows"][i] for i in picks], vocab=src["vocab_size"])),
    )

    e = book.file("dense/encode.json", "dense", "Encoding a mask as dense int32 [T, W] with -1 trailing padding.")
    e.add(
        "encode-default-width",
        "Without a width, W is the widest row.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 2))}},
        op="encode",
    )
    e.add(
        "encode-explicit-width",
        "to_dense(width=4): row 0 holds {1, 5} then -1, -1.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 4))}},
        op="encode",
        options={"width": 4},
    )
    e.add(
        "encode-zero-rows",
        "No rows encode as a [0, 0] array.",
        "layouts",
        model([]),
        {"payload": {"dense": arr([], shape=[0, 0])}},
        op="encode",
    )
    e.add(
        "encode-all-empty-rows",
        "Empty rows encode as a [T, 0] array unless a width is given.",
        "layouts",
        model([[], []]),
        {"payload": {"dense": arr([[], []], shape=[2, 0])}},
        op="encode",
    )

    bad = book.file("invalid/dense.json", "dense", "Dense payloads that a reader must reject.")
    bad.add(
        "padding-between-ids",
        "-1 between two ids is not trailing padding.",
        "layouts",
        {"dense": arr([[5, -1, 1]])},
        err("E_PADDING"),
    )
    bad.add(
        "padding-before-ids",
        "A row that starts with -1 and then holds an id.",
        "layouts",
        {"dense": arr([[4, 2], [-1, 3]])},
        err("E_PADDING"),
    )
    bad.add(
        "negative-id-other-than-padding",
        "-2 is neither an id nor the padding value.",
        "layouts",
        {"dense": arr([[3, -2]])},
        err("E_RANGE"),
    )
    bad.add(
        "id-equals-vocab-size",
        "Id 10 with vocab_size 10 is out of range.",
        "model",
        {"dense": arr([[10, -1]]), "vocab_size": 10},
        err("E_RANGE"),
    )
    bad.add(
        "duplicate-id",
        "An id twice in one row: rows are sets.",
        "model",
        {"dense": arr([[3, 3, -1]])},
        err("E_DUPLICATE"),
    )
    bad.add(
        "float32-dtype",
        "Dense ids must be integers.",
        "layouts",
        {"dense": arr([[1.0, 2.0]], "float32")},
        err("E_DTYPE"),
    )
    bad.add(
        "unknown-dtype",
        "A dtype name outside the list.",
        "layouts",
        {"dense": {"dtype": "complex64", "shape": [1, 1], "hex": "0000000000000000"}},
        err("E_DTYPE"),
    )
    bad.add(
        "one-dimensional",
        "Dense is [T, W]; a flat array is not.",
        "layouts",
        {"dense": arr([1, 2, 3])},
        err("E_SHAPE"),
    )
    bad.add(
        "three-dimensional",
        "A trainer's [B, T, K] must be flattened to [T, W] with cu_seqlens first.",
        "layouts",
        {"dense": arr([[[1, -1], [2, -1]]])},
        err("E_SHAPE"),
    )
    bad.add(
        "negative-dimension",
        "A declared dimension below zero.",
        "layouts",
        {"dense": rawarr("int32", [-1, 2], b"")},
        err("E_SHAPE"),
    )
    bad.add(
        "bytes-short",
        "Shape [2, 2] int32 needs 16 bytes; 12 are given.",
        "layouts",
        {"dense": rawarr("int32", [2, 2], np.array([1, 2, 3], "<i4").tobytes())},
        err("E_BYTES"),
    )
    bad.add(
        "bytes-long",
        "Shape [1, 2] int32 needs 8 bytes; 12 are given.",
        "layouts",
        {"dense": rawarr("int32", [1, 2], np.array([1, 2, 3], "<i4").tobytes())},
        err("E_BYTES"),
    )
    bad.add(
        "forged-shape",
        "A tiny buffer declaring a 2**40 x 2**20 array must be refused before anything is allocated.",
        "limits",
        {"dense": rawarr("int32", [1 << 40, 1 << 20], b"\x01\x00\x00\x00")},
        err("E_LIMIT"),
    )
    bad.add(
        "int64-id-beyond-int32",
        "An int64 array whose value does not fit int32 must not be truncated: E_RANGE from a reader that "
        "accepts other integer widths (SPEC 4 MAY), E_DTYPE from one that does not.",
        "model",
        {"dense": arr([[2147483648]], "int64")},
        err("E_RANGE", "E_DTYPE"),
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"dense": arr([[1], [2], [3]])},
        err("E_LIMIT"),
        limits={"max_rows": 2},
    )
    bad.add(
        "width-over-limit",
        "W above max_width, even when rows are narrower.",
        "limits",
        {"dense": arr([[1, -1, -1]])},
        err("E_LIMIT"),
        limits={"max_width": 2},
    )
    bad.add(
        "missing-array",
        "A dense payload without its array.",
        "layouts",
        {"vocab_size": 10},
        err("E_SCHEMA"),
    )
    bad.add(
        "sampled-id-not-in-row",
        "A non-empty row must contain its sampled id.",
        "companions",
        {"dense": arr([[5, 1], [7, -1]]), "sampled_token_ids": arr([5, 8])},
        err("E_MISSING_SAMPLED"),
    )
    bad.add(
        "encode-width-too-small",
        "Encoding with a width below the widest row.",
        "layouts",
        model([[1, 5], [], [7]]),
        err("E_WIDTH"),
        op="encode",
        options={"width": 1},
    )


# ------------------------------------------------------------------------------------------ packed
def packed_cases(book: Book) -> None:
    d = [[5, 1, -1], [-1, -1, -1], [7, -1, -1]]
    f = book.file("packed/decode.json", "packed", "Packed: dense [T, W] plus cu_seqlens [B + 1] (int32 or int64).")
    f.add(
        "two-sequences",
        "Two sequences of 2 and 1 rows; cu_seqlens int32 as SkyRL sends it.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 2, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
    )
    f.add(
        "cu-seqlens-int64",
        "cu_seqlens may be int64.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 2, 3], "int64"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "empty-sequence-between",
        "A sequence with no rows between two others.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 1, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 1, 1, 3])),
    )
    f.add(
        "empty-sequences-at-both-ends",
        "Empty sequences first and last.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([0, 0, 3, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 0, 3, 3])),
    )
    f.add(
        "all-empty-sequences",
        "Zero rows in three sequences.",
        "segments",
        {"dense": arr([], shape=[0, 3]), "cu_seqlens": arr([0, 0, 0, 0])},
        ok(mask([], cu=[0, 0, 0, 0])),
    )
    f.add(
        "observation-rows",
        "Multi-turn: tool-output rows are all -1 inside a sequence.",
        "empty",
        {
            "dense": arr([[3, 1], [2, -1], [-1, -1], [-1, -1], [8, 9], [6, -1]]),
            "cu_seqlens": arr([0, 5, 6]),
        },
        ok(mask([[1, 3], [2], [], [], [8, 9], [6]], cu=[0, 5, 6])),
    )
    f.add(
        "one-row-per-sequence",
        "B = T.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 2, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 1, 2, 3])),
    )
    e = book.file("packed/encode.json", "packed", "Encoding a segmented mask as packed dense + cu_seqlens.")
    e.add(
        "encode-two-sequences",
        "Segments survive encoding (the round trip is checked).",
        "layouts",
        model([[1, 5], [], [7]], cu_seqlens=[0, 2, 3]),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 2))}},
        op="encode",
    )

    bad = book.file("invalid/packed.json", "packed", "Packed payloads with a bad cu_seqlens.")
    bad.add("cu-seqlens-missing", "Packed requires cu_seqlens.", "layouts", {"dense": arr(d)}, err("E_SCHEMA"))
    for slug, cu, why in (
        ("cu-seqlens-short-of-rows", [0, 2], "cu[B] = 2 but T = 3"),
        ("cu-seqlens-past-rows", [0, 4], "cu[B] = 4 but T = 3"),
        ("cu-seqlens-decreasing", [0, 2, 1, 3], "cu_seqlens decrease"),
        ("cu-seqlens-not-starting-at-zero", [1, 3], "cu[0] must be 0"),
    ):
        bad.add(slug, f"{why}.", "model", {"dense": arr(d), "cu_seqlens": arr(cu)}, err("E_SEGMENTS"))
    bad.add(
        "cu-seqlens-empty",
        "cu_seqlens holds B + 1 >= 1 entries.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([], shape=[0])},
        err("E_SEGMENTS"),
    )
    bad.add(
        "cu-seqlens-float",
        "cu_seqlens must be integers.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0.0, 3.0], "float32")},
        err("E_DTYPE"),
    )
    bad.add(
        "cu-seqlens-two-dimensional",
        "cu_seqlens is one-dimensional.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([[0, 3]])},
        err("E_SHAPE"),
    )
    bad.add(
        "segments-over-limit",
        "B above max_segments.",
        "limits",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 2, 3])},
        err("E_LIMIT"),
        limits={"max_segments": 2},
    )
    bad.add(
        "padding-between-ids-second-sequence",
        "Padding rules hold in every sequence.",
        "layouts",
        {"dense": arr([[1, -1], [-1, 4]]), "cu_seqlens": arr([0, 1, 2])},
        err("E_PADDING"),
    )


# ------------------------------------------------------------------------------------------ ragged
def ragged_cases(book: Book) -> None:
    src = _source()
    f = book.file("ragged/decode.json", "ragged", "Ragged (CSR): ids int32 [nnz] and offsets int64 [T + 1].")
    f.add(
        "issue-example",
        "Row t is ids[offsets[t]:offsets[t + 1]]; two segments.",
        "layouts",
        {
            "ids": arr([5, 1, 7]),
            "offsets": arr([0, 2, 2, 3], "int64"),
            "cu_seqlens": arr([0, 2, 3], "int64"),
            "vocab_size": 10,
        },
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "issue-example-hex",
        "The same arrays as little-endian bytes: 4-byte ids, 8-byte offsets.",
        "layouts",
        {"ids": hexarr([5, 1, 7], "int32"), "offsets": hexarr([0, 2, 2, 3], "int64"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "zero-rows",
        "offsets [0]: T = 0.",
        "layouts",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64")},
        ok(mask([])),
    )
    f.add(
        "all-empty-rows",
        "nnz = 0 with T = 2.",
        "empty",
        {"ids": arr([], shape=[0]), "offsets": arr([0, 0, 0], "int64")},
        ok(mask([[], []])),
    )
    f.add(
        "trailing-empty-rows",
        "Repeated final offsets are empty rows at the end.",
        "empty",
        {"ids": arr([3]), "offsets": arr([0, 1, 1, 1], "int64")},
        ok(mask([[3], [], []])),
    )
    f.add(
        "unsorted-rows",
        "SGLang lists rows unsorted; the canonical mask sorts each row.",
        "order",
        {"ids": arr([9, 2, 5, 1, 0]), "offsets": arr([0, 3, 5], "int64")},
        ok(mask([[2, 5, 9], [0, 1]])),
    )
    f.add(
        "same-id-in-different-rows",
        "Uniqueness is per row, not per mask.",
        "model",
        {"ids": arr([4, 4, 4]), "offsets": arr([0, 1, 2, 3], "int64")},
        ok(mask([[4], [4], [4]])),
    )
    f.add(
        "maximal-int32-id",
        "The largest int32 is a valid id when vocab_size is unknown.",
        "model",
        {"ids": arr([2147483647]), "offsets": arr([0, 1], "int64")},
        ok(mask([[2147483647]])),
    )
    f.add(
        "vocab-boundary",
        "Ids 0 and vocab_size - 1.",
        "model",
        {"ids": arr([15, 0]), "offsets": arr([0, 2], "int64"), "vocab_size": 16},
        ok(mask([[0, 15]], vocab=16)),
    )
    full = [11, 3, 0, 7, 15, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14]
    f.add(
        "full-vocabulary-row",
        "An untruncated row holds every id of the vocabulary.",
        "model",
        {"ids": arr([*full, 2]), "offsets": arr([0, 16, 17], "int64"), "vocab_size": 16},
        ok(mask([list(range(16)), [2]], vocab=16)),
    )
    f.add(
        "ties-wider-than-top-k",
        "A row wider than top_k (ties at the boundary) is valid.",
        "model",
        {"ids": arr([8, 2, 6, 4, 1]), "offsets": arr([0, 4, 5], "int64"), "metadata": {"top_k": 3}},
        ok(mask([[2, 4, 6, 8], [1]], metadata={"top_k": 3})),
    )
    f.add(
        "all-empty-segments",
        "Zero rows in two segments.",
        "segments",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64"), "cu_seqlens": arr([0, 0, 0], "int64")},
        ok(mask([], cu=[0, 0, 0])),
    )
    f.add(
        "zero-segments",
        "B = 0: cu_seqlens [0] with no rows.",
        "segments",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64"), "cu_seqlens": arr([0], "int64")},
        ok(mask([], cu=[0])),
    )
    f.add(
        "empty-segments-around-rows",
        "Empty segments before and after the rows.",
        "segments",
        {"ids": arr([1, 2]), "offsets": arr([0, 1, 2], "int64"), "cu_seqlens": arr([0, 0, 2, 2], "int64")},
        ok(mask([[1], [2]], cu=[0, 0, 2, 2])),
    )
    f.add(
        "all-companions-unsorted",
        "Every companion; support_logprobs is per id and follows its ids into canonical order.",
        "companions",
        {
            "ids": arr([9, 3, 5]),
            "offsets": arr([0, 3, 3], "int64"),
            "vocab_size": 10,
            "sampled_token_ids": arr([5, -1]),
            "sampled_logprobs": arr([-0.5, 0.0], "float32"),
            "temperature": arr([0.5, 1.0], "float32"),
            "support_logprobs": arr([-3.0, -1.25, -0.5], "float32"),
        },
        ok(companions_mask()),
    )
    f.add(
        "sampled-id-on-empty-row",
        "An empty row (no support recorded) may still name the token that was sampled.",
        "companions",
        {"ids": arr([2]), "offsets": arr([0, 1, 1], "int64"), "sampled_token_ids": arr([2, 4])},
        ok(mask([[2], []], sampled_token_ids=[2, 4])),
    )
    sampler_metadata = {
        "temperature": 0.7,
        "top_k": 50,
        "top_p": 0.95,
        "min_p": 0.0,
        "producer": "vllm-0.32",
        "x-run": "kept",
    }
    f.add(
        "metadata",
        "Sampler parameters, producer and unknown keys are kept.",
        "metadata",
        {"ids": arr([1]), "offsets": arr([0, 1], "int64"), "metadata": sampler_metadata},
        ok(mask([[1]], metadata=sampler_metadata)),
    )
    f.add(
        "nan-temperature-is-unknown",
        "A NaN temperature means unknown and is kept.",
        "companions",
        {
            "ids": arr([1]),
            "offsets": arr([0, 1], "int64"),
            "temperature": hexarr([math.nan], "float32"),
        },
        ok(mask([[1]], temperature=["NaN"])),
        level=REC,
    )
    f.add(
        "non-finite-sampled-logprob",
        "sampled_logprobs may hold -inf (a token the sampler scored impossible).",
        "companions",
        {
            "ids": arr([1]),
            "offsets": arr([0, 1], "int64"),
            "sampled_logprobs": hexarr([-math.inf], "float32"),
        },
        ok(mask([[1]], sampled_logprobs=["-Infinity"])),
    )
    picks = ["0", "1", "2", "3"]
    rows = [src["rows"][i] for i in picks]
    offsets = np.cumsum([0] + [len(r) for r in rows]).tolist()
    f.add(
        "vllm-0.32-csr",
        "vLLM 0.32's internal CSR (token_ids + offsets) for four real rows, with the sampled ids.",
        "layouts",
        {
            "ids": arr([i for r in rows for i in r]),
            "offsets": arr(offsets, "int64"),
            "vocab_size": src["vocab_size"],
            "sampled_token_ids": arr([src["sampled_token_ids"][i] for i in picks]),
        },
        ok(mask(rows, vocab=src["vocab_size"], sampled_token_ids=[src["sampled_token_ids"][i] for i in picks])),
    )

    e = book.file("ragged/encode.json", "ragged", "Encoding a mask as ragged ids + offsets.")
    e.add(
        "encode-issue-example",
        "ids int32 ascending per row, offsets int64.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"ids": arr([1, 5, 7]), "offsets": arr([0, 2, 2, 3], "int64")}},
        op="encode",
    )
    e.add(
        "encode-zero-rows",
        "No rows: ids [] and offsets [0].",
        "layouts",
        model([]),
        {"payload": {"ids": arr([], shape=[0]), "offsets": arr([0], "int64")}},
        op="encode",
    )
    e.add(
        "encode-companions",
        "Companions and segments survive encoding (the round trip is checked).",
        "companions",
        model(
            [[3, 5, 9], []],
            cu_seqlens=[0, 1, 2],
            vocab_size=10,
            sampled_token_ids=[5, -1],
            sampled_logprobs=[-0.5, 0.0],
            temperature=[0.5, 1.0],
            support_logprobs=[[-1.25, -0.5, -3.0], []],
            metadata={"top_k": 3, "producer": "test"},
        ),
        {"roundtrip": True},
        op="encode",
    )

    bad = book.file("invalid/ragged.json", "ragged", "Ragged payloads that a reader must reject.")
    for slug, ids, offsets, why in (
        ("offsets-not-starting-at-zero", [3], [1, 1], "offsets[0] must be 0."),
        ("offsets-decreasing", [1, 2, 3], [0, 2, 1, 3], "offsets must not decrease."),
        ("offsets-end-before-nnz", [1, 2, 3], [0, 1, 2], "offsets[T] = 2 leaves an id outside every row."),
        ("offsets-end-past-nnz", [1, 2], [0, 1, 3], "offsets[T] = 3 points past the 2 ids (off by one)."),
    ):
        bad.add(slug, why, "layouts", {"ids": arr(ids), "offsets": arr(offsets, "int64")}, err("E_OFFSETS"))
    bad.add(
        "offsets-empty",
        "offsets holds T + 1 >= 1 entries.",
        "layouts",
        {"ids": arr([], shape=[0]), "offsets": arr([], "int64", shape=[0])},
        err("E_OFFSETS"),
    )
    bad.add(
        "offsets-int64-not-truncated",
        "offsets[1] = 2**32 + 1: read as 64-bit it points past the one id; truncated to 32 bits it would look valid.",
        "layouts",
        {"ids": arr([3]), "offsets": hexarr([0, (1 << 32) + 1], "int64")},
        err("E_OFFSETS"),
    )
    bad.add(
        "minus-one-id",
        "-1 is dense padding, never a ragged id.",
        "model",
        {"ids": arr([4, -1]), "offsets": arr([0, 2], "int64")},
        err("E_RANGE"),
    )
    bad.add(
        "id-equals-vocab-size",
        "Id 10 with vocab_size 10.",
        "model",
        {"ids": arr([10]), "offsets": arr([0, 1], "int64"), "vocab_size": 10},
        err("E_RANGE"),
    )
    bad.add(
        "duplicate-id-unsorted",
        "A repeated id in an unsorted row.",
        "order",
        {"ids": arr([3, 1, 3]), "offsets": arr([0, 3], "int64")},
        err("E_DUPLICATE"),
    )
    bad.add(
        "duplicate-id-adjacent",
        "A repeated id next to itself, in the second row.",
        "model",
        {"ids": arr([1, 2, 2]), "offsets": arr([0, 1, 3], "int64")},
        err("E_DUPLICATE"),
    )
    bad.add(
        "float-ids",
        "ids must be integers.",
        "layouts",
        {"ids": arr([1.0], "float32"), "offsets": arr([0, 1], "int64")},
        err("E_DTYPE"),
    )
    bad.add(
        "float-offsets",
        "offsets must be integers.",
        "layouts",
        {"ids": arr([1]), "offsets": arr([0.0, 1.0], "float64")},
        err("E_DTYPE"),
    )
    bad.add(
        "unknown-dtype",
        "A dtype name outside the list.",
        "layouts",
        {"ids": {"dtype": "int33", "shape": [1], "values": [1]}, "offsets": arr([0, 1], "int64")},
        err("E_DTYPE"),
    )
    bad.add(
        "two-dimensional-ids",
        "ids is one-dimensional.",
        "layouts",
        {"ids": arr([[1, 2]]), "offsets": arr([0, 2], "int64")},
        err("E_SHAPE"),
    )
    bad.add(
        "int64-id-beyond-int32",
        "An int64 id array holding 2**31 must not be truncated (E_RANGE; E_DTYPE from a reader that takes "
        "int32 ids only).",
        "model",
        {"ids": arr([1 << 31], "int64"), "offsets": arr([0, 1], "int64")},
        err("E_RANGE", "E_DTYPE"),
    )
    bad.add(
        "offsets-bytes-short",
        "Two int64 offsets need 16 bytes; 12 are given.",
        "layouts",
        {"ids": arr([1]), "offsets": rawarr("int64", [2], bytes(12))},
        err("E_BYTES"),
    )
    bad.add(
        "forged-shape",
        "ids declaring 2**40 entries over 4 bytes.",
        "limits",
        {"ids": rawarr("int32", [1 << 40], bytes(4)), "offsets": arr([0, 1], "int64")},
        err("E_LIMIT"),
    )
    bad.add(
        "ids-missing",
        "A ragged payload without ids.",
        "layouts",
        {"offsets": arr([0], "int64")},
        err("E_SCHEMA"),
    )
    one = {"ids": arr([1]), "offsets": arr([0, 1], "int64")}
    bad.add(
        "vocab-size-zero",
        "vocab_size 0: a vocabulary has at least one id.",
        "model",
        {**one, "vocab_size": 0},
        err("E_RANGE"),
    )
    bad.add("vocab-size-negative", "A negative vocab_size.", "model", {**one, "vocab_size": -5}, err("E_RANGE"))
    bad.add("vocab-size-string", "vocab_size is an integer.", "model", {**one, "vocab_size": "10"}, err("E_SCHEMA"))
    bad.add(
        "vocab-size-over-limit",
        "vocab_size above max_vocab (default 2**24).",
        "limits",
        {**one, "vocab_size": (1 << 24) + 1},
        err("E_LIMIT"),
    )
    three = {"ids": arr([1, 2, 3]), "offsets": arr([0, 1, 2, 3], "int64")}
    bad.add("nnz-over-limit", "nnz above max_nnz.", "limits", three, err("E_LIMIT"), limits={"max_nnz": 2})
    bad.add("rows-over-limit", "T above max_rows.", "limits", three, err("E_LIMIT"), limits={"max_rows": 2})
    bad.add(
        "row-width-over-limit",
        "A row wider than max_width.",
        "limits",
        {"ids": arr([1, 2, 3]), "offsets": arr([0, 3], "int64")},
        err("E_LIMIT"),
        limits={"max_width": 2},
    )
    two = {"ids": arr([5, 1]), "offsets": arr([0, 2, 2], "int64"), "vocab_size": 10}
    bad.add(
        "sampled-ids-wrong-length",
        "sampled_token_ids has T entries.",
        "companions",
        {**two, "sampled_token_ids": arr([5])},
        err("E_SHAPE"),
    )
    bad.add(
        "support-logprobs-wrong-length",
        "support_logprobs has nnz entries.",
        "companions",
        {**two, "support_logprobs": arr([-0.5, -1.0, -2.0], "float32")},
        err("E_SHAPE"),
    )
    bad.add(
        "temperature-wrong-length",
        "temperature has T entries.",
        "companions",
        {**two, "temperature": arr([1.0], "float32")},
        err("E_SHAPE"),
    )
    bad.add(
        "temperature-zero",
        "temperature > 0: zero is greedy decoding, not a temperature to divide by.",
        "companions",
        {**two, "temperature": arr([1.0, 0.0], "float32")},
        err("E_RANGE"),
    )
    bad.add(
        "temperature-negative",
        "A negative temperature.",
        "companions",
        {**two, "temperature": arr([-0.5, 1.0], "float32")},
        err("E_RANGE"),
    )
    bad.add(
        "temperature-infinite",
        "temperature is finite.",
        "companions",
        {**two, "temperature": hexarr([1.0, math.inf], "float32")},
        err("E_RANGE"),
    )
    bad.add(
        "temperature-integer-dtype",
        "temperature is float32.",
        "companions",
        {**two, "temperature": arr([1, 1])},
        err("E_DTYPE"),
    )
    bad.add(
        "sampled-id-not-in-row",
        "A non-empty row must contain its sampled id.",
        "companions",
        {**two, "sampled_token_ids": arr([7, -1])},
        err("E_MISSING_SAMPLED"),
    )
    bad.add(
        "sampled-minus-one-on-non-empty-row",
        "-1 (nothing sampled) is allowed only on an empty row.",
        "companions",
        {**two, "sampled_token_ids": arr([-1, -1])},
        err("E_RANGE"),
    )
    bad.add(
        "sampled-id-beyond-vocab-on-empty-row",
        "A sampled id on an empty row is still range-checked.",
        "companions",
        {**two, "sampled_token_ids": arr([5, 10])},
        err("E_RANGE"),
    )
    bad.add(
        "sampled-ids-float",
        "sampled_token_ids is int32.",
        "companions",
        {**two, "sampled_token_ids": arr([5.0, -1.0], "float32")},
        err("E_DTYPE"),
    )
    bad.add("metadata-not-object", "metadata is an object.", "companions", {**one, "metadata": [1, 2]}, err("E_SCHEMA"))
    bad.add(
        "metadata-nested-value",
        "metadata values are scalars.",
        "metadata",
        {**one, "metadata": {"x-run": {"seed": 1}}},
        err("E_SCHEMA"),
    )
    bad.add(
        "metadata-top-k-string",
        "A defined metadata key has a defined type: top_k is an integer.",
        "metadata",
        {**one, "metadata": {"top_k": "50"}},
        err("E_SCHEMA"),
    )
    bad.add(
        "metadata-top-p-boolean",
        "A boolean is not a number: top_p true.",
        "metadata",
        {**one, "metadata": {"top_p": True}},
        err("E_SCHEMA"),
    )
    bad.add(
        "cu-seqlens-not-tiling",
        "cu_seqlens must end at T.",
        "segments",
        {**three, "cu_seqlens": arr([0, 2], "int64")},
        err("E_SEGMENTS"),
    )


# ------------------------------------------------------------------------------------------ counts
def counts_cases(book: Book) -> None:
    f = book.file("counts/decode.json", "counts", "Counts: ids int32 [nnz] and per-row lengths int32 [T].")
    f.add(
        "issue-example",
        "counts are the row lengths; 0 is an empty row.",
        "layouts",
        {"ids": arr([5, 1, 7]), "counts": arr([2, 0, 1]), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "zero-count-is-no-mask",
        "prime-rl / verifiers: count 0 means no mask for that token.",
        "empty",
        {"ids": arr([1, 2, 3]), "counts": arr([0, 3, 0])},
        ok(mask([[], [1, 2, 3], []])),
    )
    f.add(
        "zero-rows",
        "No rows at all.",
        "layouts",
        {"ids": arr([], shape=[0]), "counts": arr([], shape=[0])},
        ok(mask([])),
    )
    f.add(
        "trailing-zero-counts",
        "Trailing zero counts are trailing empty rows.",
        "empty",
        {"ids": arr([6]), "counts": arr([1, 0, 0])},
        ok(mask([[6], [], []])),
    )
    f.add(
        "unsorted-rows",
        "Rows in any order.",
        "order",
        {"ids": arr([4, 2, 9, 8]), "counts": arr([2, 2])},
        ok(mask([[2, 4], [8, 9]])),
    )
    f.add(
        "with-cu-seqlens",
        "Counts with segments.",
        "layouts",
        {"ids": arr([4, 2, 9]), "counts": arr([2, 1, 0]), "cu_seqlens": arr([0, 1, 3], "int64")},
        ok(mask([[2, 4], [9], []], cu=[0, 1, 3])),
    )
    e = book.file("counts/encode.json", "counts", "Encoding a mask as ids + counts.")
    e.add(
        "encode-issue-example",
        "counts int32 [T].",
        "layouts",
        model([[1, 5], [], [7]]),
        {"payload": {"ids": arr([1, 5, 7]), "counts": arr([2, 0, 1])}},
        op="encode",
    )
    bad = book.file("invalid/counts.json", "counts", "Counts payloads that a reader must reject.")
    bad.add(
        "sum-below-nnz",
        "counts sum to 2 but there are 3 ids.",
        "layouts",
        {"ids": arr([1, 2, 3]), "counts": arr([1, 1])},
        err("E_OFFSETS"),
    )
    bad.add(
        "sum-above-nnz",
        "counts sum to 4 but there are 3 ids.",
        "layouts",
        {"ids": arr([1, 2, 3]), "counts": arr([2, 2])},
        err("E_OFFSETS"),
    )
    bad.add(
        "negative-count",
        "A negative row length.",
        "layouts",
        {"ids": arr([1, 2]), "counts": arr([3, -1])},
        err("E_OFFSETS"),
    )
    bad.add(
        "float-counts",
        "counts must be integers.",
        "layouts",
        {"ids": arr([1]), "counts": arr([1.0], "float32")},
        err("E_DTYPE"),
    )
    bad.add(
        "two-dimensional-counts",
        "counts is one-dimensional.",
        "layouts",
        {"ids": arr([1]), "counts": arr([[1]])},
        err("E_SHAPE"),
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"ids": arr([], shape=[0]), "counts": arr([0, 0, 0])},
        err("E_LIMIT"),
        limits={"max_rows": 2},
    )
    bad.add(
        "duplicate-id",
        "A repeated id within one row.",
        "model",
        {"ids": arr([1, 7, 7]), "counts": arr([1, 2])},
        err("E_DUPLICATE"),
    )


# ------------------------------------------------------------------------------------------ bitmask
def _bits(rows: list[list[int]], vocab: int) -> list[list[int]]:
    """Little bit order: id i is bit i % 8 of byte i // 8 (written out here, not by the library)."""
    out = []
    for row in rows:
        b = [0] * ((vocab + 7) // 8)
        for i in row:
            b[i // 8] |= 1 << (i % 8)
        out.append(b)
    return out


def bitmask_cases(book: Book) -> None:
    src = _source()
    f = book.file(
        "bitmask/decode.json", "bitmask", "Bitmask: uint8 [T, ceil(V / 8)], id i is bit i % 8 of byte i // 8."
    )
    f.add(
        "issue-example",
        "Bits 1 and 5 of byte 0 are ids 1 and 5; bit 7 of byte 0 is id 7.",
        "layouts",
        {"bitmask": arr([[0x22, 0x00], [0x00, 0x00], [0x80, 0x00]], "uint8"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "little-bit-order",
        "Bit 0 is the least significant: 0x01 0x01 is ids 0 and 8, 0x80 0x80 is ids 7 and 15.",
        "layouts",
        {"bitmask": arr([[0x01, 0x01], [0x80, 0x80]], "uint8"), "vocab_size": 16},
        ok(mask([[0, 8], [7, 15]], vocab=16)),
    )
    f.add(
        "last-valid-id",
        "With V = 10 the last id is bit 1 of byte 1.",
        "layouts",
        {"bitmask": arr([[0x00, 0x02]], "uint8"), "vocab_size": 10},
        ok(mask([[9]], vocab=10)),
    )
    f.add(
        "full-vocabulary-row",
        "Every id of a 12-token vocabulary: 0xff 0x0f.",
        "model",
        {"bitmask": arr([[0xFF, 0x0F]], "uint8"), "vocab_size": 12},
        ok(mask([list(range(12))], vocab=12)),
    )
    f.add(
        "zero-rows",
        "T = 0.",
        "layouts",
        {"bitmask": arr([], "uint8", shape=[0, 2]), "vocab_size": 10},
        ok(mask([], vocab=10)),
    )
    f.add(
        "vocab-size-one",
        "V = 1: one byte per row, only bit 0 usable.",
        "layouts",
        {"bitmask": arr([[1], [0]], "uint8"), "vocab_size": 1},
        ok(mask([[0], []], vocab=1)),
    )
    f.add(
        "with-cu-seqlens-and-sampled",
        "Segments and sampled ids with a bitmask.",
        "companions",
        {
            "bitmask": arr(_bits([[2, 3], [9]], 10), "uint8"),
            "vocab_size": 10,
            "cu_seqlens": arr([0, 1, 2], "int64"),
            "sampled_token_ids": arr([3, 9]),
        },
        ok(mask([[2, 3], [9]], cu=[0, 1, 2], vocab=10, sampled_token_ids=[3, 9])),
    )
    f.add(
        "vllm-0.32-wide-row",
        "vLLM 0.32's bitmask fallback for a real row of 71 ids (wider than the 64-id compact buffer).",
        "layouts",
        {
            "bitmask": {"dtype": "uint8", "shape": [1, 125], "hex": src["bitmask_hex"]["21"]},
            "vocab_size": src["vocab_size"],
        },
        ok(mask([src["rows"]["21"]], vocab=src["vocab_size"])),
    )
    e = book.file("bitmask/encode.json", "bitmask", "Encoding a mask as a little-bit-order bitmask.")
    e.add(
        "encode-issue-example",
        "The vocab_size comes from the mask.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"bitmask": arr(_bits(ISSUE_ROWS, 10), "uint8")}},
        op="encode",
    )
    bad = book.file("invalid/bitmask.json", "bitmask", "Bitmask payloads that a reader must reject.")
    bad.add(
        "bit-past-vocab-size",
        "V = 10: bit 2 of byte 1 would be id 10; padding bits must be zero.",
        "layouts",
        {"bitmask": arr([[0x00, 0x04]], "uint8"), "vocab_size": 10},
        err("E_PADDING"),
    )
    bad.add(
        "high-padding-bit",
        "V = 10: the top bit of the last byte (id 15).",
        "layouts",
        {"bitmask": arr([[0x01, 0x00], [0x00, 0x80]], "uint8"), "vocab_size": 10},
        err("E_PADDING"),
    )
    bad.add(
        "row-bytes-too-many",
        "V = 10 needs 2 bytes per row, not 3.",
        "layouts",
        {"bitmask": arr([[0, 0, 0]], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
    )
    bad.add(
        "row-bytes-too-few",
        "V = 10 needs 2 bytes per row, not 1.",
        "layouts",
        {"bitmask": arr([[1]], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
    )
    bad.add(
        "int32-dtype",
        "A bitmask is uint8.",
        "layouts",
        {"bitmask": arr([[1, 0]]), "vocab_size": 10},
        err("E_DTYPE"),
    )
    bad.add(
        "one-dimensional",
        "A bitmask is [T, ceil(V / 8)].",
        "layouts",
        {"bitmask": arr([1, 0], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
    )
    bad.add(
        "vocab-size-missing",
        "A bitmask cannot be read without vocab_size.",
        "layouts",
        {"bitmask": arr([[1, 0]], "uint8")},
        err("E_SCHEMA"),
    )
    bad.add(
        "vocab-size-zero",
        "vocab_size >= 1.",
        "model",
        {"bitmask": arr([[]], "uint8", shape=[1, 0]), "vocab_size": 0},
        err("E_RANGE"),
    )
    bad.add(
        "vocab-size-over-limit",
        "vocab_size above max_vocab.",
        "limits",
        {"bitmask": arr([[1, 0]], "uint8"), "vocab_size": 16},
        err("E_LIMIT"),
        limits={"max_vocab": 8},
    )
    bad.add(
        "bytes-short",
        "Shape [2, 2] uint8 needs 4 bytes; 3 are given.",
        "layouts",
        {"bitmask": rawarr("uint8", [2, 2], b"\x01\x00\x02"), "vocab_size": 10},
        err("E_BYTES"),
    )
    bad.add(
        "sampled-id-not-set",
        "The sampled id's bit is not set in its non-empty row.",
        "companions",
        {"bitmask": arr(_bits([[1, 5]], 10), "uint8"), "vocab_size": 10, "sampled_token_ids": arr([4])},
        err("E_MISSING_SAMPLED"),
    )
    bad.add(
        "encode-without-vocab-size",
        "Encoding as a bitmask needs a vocab_size.",
        "layouts",
        model([[1, 5]]),
        err("E_SCHEMA"),
        op="encode",
    )


# ------------------------------------------------------------------------------------------ json rows
def json_rows_cases(book: Book) -> None:
    src = _source()
    f = book.file(
        "json-rows/decode.json",
        "json-rows",
        "Bare JSON nested lists (vLLM choices[i].sampling_mask, SGLang output_token_sampling_mask).",
    )
    f.add("vllm-issue-example", "One list of ids per token.", "json", {"text": "[[1,5],[],[7]]"}, ok(mask(ISSUE_ROWS)))
    f.add("empty-document", "[] is a mask of zero rows.", "json", {"text": "[]"}, ok(mask([])))
    f.add("all-empty-rows", "Every row empty.", "json", {"text": "[[],[],[]]"}, ok(mask([[], [], []])))
    f.add(
        "unsorted-rows",
        "SGLang lists are unsorted; the canonical mask sorts each row.",
        "json",
        {"text": "[[9,2,5],[1,0]]"},
        ok(mask([[2, 5, 9], [0, 1]])),
    )
    f.add(
        "insignificant-whitespace",
        "JSON whitespace anywhere between tokens.",
        "json",
        {"text": " [ [ 1 , 5 ] ,\n\t[ ] ,\r\n [7] ] \n"},
        ok(mask(ISSUE_ROWS)),
    )
    f.add(
        "byte-order-mark",
        "A reader ignores one leading UTF-8 byte-order mark.",
        "json-rules",
        {"hex": (b"\xef\xbb\xbf" + b"[[1,5],[],[7]]").hex()},
        ok(mask(ISSUE_ROWS)),
    )
    f.add(
        "maximal-int32-id",
        "2147483647 is a valid id.",
        "json",
        {"text": "[[2147483647,0]]"},
        ok(mask([[0, 2147483647]])),
    )
    f.add(
        "trailing-empty-rows",
        "Trailing empty rows are rows.",
        "json",
        {"text": "[[3],[],[]]"},
        ok(mask([[3], [], []])),
    )
    f.add(
        "same-id-in-different-rows",
        "Uniqueness is per row.",
        "json",
        {"text": "[[4],[4]]"},
        ok(mask([[4], [4]])),
    )
    f.add(
        "ties-wider-than-top-k",
        "A wide row (ties at the top-k boundary).",
        "json",
        {"text": "[[17,3,13,5,11,7]]"},
        ok(mask([[3, 5, 7, 11, 13, 17]])),
    )
    picks = [str(i) for i in range(6)]
    rows = [src["rows"][i] for i in picks]
    f.add(
        "vllm-0.32-completion",
        "The first six tokens of a real vLLM 0.32 CompletionOutput.sampling_mask.token_ids.",
        "json",
        {"text": json.dumps(rows, separators=(", ", ": "))},
        ok(mask(rows)),
    )
    e = book.file("json-rows/encode.json", "json-rows", "Encoding a mask as bare JSON nested lists.")
    e.add(
        "encode-roundtrip",
        "Nested lists of ascending ids (the round trip is checked).",
        "json",
        model([[1, 5], [], [7]]),
        {"roundtrip": True},
        op="encode",
    )
    e.add(
        "encode-zero-rows",
        "No rows encode as [].",
        "json",
        model([]),
        {"roundtrip": True},
        op="encode",
    )

    bad = book.file("invalid/json-rows.json", "json-rows", "JSON nested lists that a reader must reject.")
    for slug, text, codes, why in (
        ("not-json", "[[1,5],", ("E_ENCODING",), "Truncated JSON."),
        ("empty-text", "", ("E_ENCODING",), "No JSON value at all."),
        ("trailing-garbage", "[[1]] x", ("E_ENCODING",), "Text after the JSON value."),
        ("top-level-object", '{"rows": [[1]]}', ("E_SCHEMA",), "The document is a list of rows."),
        ("flat-list", "[1,5,7]", ("E_SCHEMA",), "A row must be a list."),
        ("row-is-string", '["15"]', ("E_SCHEMA",), "A row must be a list, not a string."),
        ("float-id", "[[1.5]]", ("E_DTYPE",), "Ids are JSON integers."),
        ("integral-float-id", "[[1.0]]", ("E_DTYPE",), "1.0 is a JSON number with a fraction, not an integer id."),
        ("exponent-id", "[[1e2]]", ("E_DTYPE",), "1e2 is not an integer literal."),
        ("string-id", '[["3"]]', ("E_DTYPE",), "Ids are not strings."),
        ("null-id", "[[null]]", ("E_DTYPE",), "null is not an id."),
        ("boolean-id", "[[true]]", ("E_DTYPE",), "true is not an id."),
        ("nested-row", "[[[1]]]", ("E_DTYPE",), "An id that is a list."),
        ("nan-literal", "[[NaN]]", ("E_ENCODING",), "NaN is not JSON."),
        ("negative-id", "[[-2]]", ("E_RANGE",), "Ids are >= 0."),
        ("minus-one-is-not-padding", "[[5,-1]]", ("E_RANGE",), "-1 pads dense arrays only."),
        ("id-beyond-int32", "[[2147483648]]", ("E_RANGE",), "Ids are int32."),
        ("huge-integer", "[[123456789012345678901234567890]]", ("E_RANGE",), "An integer beyond int64."),
        ("duplicate-id", "[[3,3]]", ("E_DUPLICATE",), "Rows are sets."),
    ):
        bad.add(slug, why, "json", {"text": text}, err(*codes))
    bad.add(
        "invalid-utf8",
        "The bytes are not UTF-8.",
        "json",
        {"hex": b"[[1,\xff]]".hex()},
        err("E_ENCODING"),
    )
    bad.add(
        "deep-nesting",
        "5000 nested lists: never a stack overflow. E_LIMIT from a reader that bounds the depth while "
        "parsing, E_DTYPE (a list inside a row) from one that parses first (SPEC 11.1).",
        "json-rules",
        {"text": "[" * 5000 + "]" * 5000},
        err("E_LIMIT", "E_DTYPE"),
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"text": "[[1],[2],[3]]"},
        err("E_LIMIT"),
        limits={"max_rows": 2},
    )


# ------------------------------------------------------------------------------------------ base64
def _envelope(
    values: Any, dtype: str = "int32", shape: Sequence[int] | None = None, override: dict[str, Any] | None = None
) -> str:
    """SkyRL's envelope of ``values``, written out with base64 / json (``override`` forges fields)."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    doc: dict[str, Any] = {
        "data": base64.b64encode(a.tobytes()).decode("ascii"),
        "shape": list(a.shape),
        "dtype": dtype,
    }
    doc.update(override or {})
    return json.dumps(doc, separators=(", ", ": "))


def base64_cases(book: Book) -> None:
    d = [[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]]
    f = book.file("base64/decode.json", "base64", 'SkyRL\'s dense envelope {"data": base64, "shape": [T, W], "dtype"}.')
    f.add("skyrl-dense", "A dense int32 array in the envelope.", "json", {"text": _envelope(d)}, ok(mask(ISSUE_ROWS)))
    f.add(
        "zero-rows",
        "Shape [0, 4] with empty data.",
        "json",
        {"text": _envelope([], shape=[0, 4])},
        ok(mask([])),
    )
    f.add(
        "observation-rows",
        "All -1 rows are empty rows.",
        "json",
        {"text": _envelope([[3, 2], [-1, -1], [-1, -1]])},
        ok(mask([[2, 3], [], []])),
    )
    f.add(
        "int64-dtype",
        'dtype "int64" is allowed when every value fits int32.',
        "json",
        {"text": _envelope(d, "int64")},
        ok(mask(ISSUE_ROWS)),
    )
    e = book.file("base64/encode.json", "base64", "Encoding a mask in the dense base64 envelope.")
    e.add(
        "encode-roundtrip",
        "The envelope round-trips a one-segment mask.",
        "json",
        model([[1, 5], [], [7]]),
        {"roundtrip": True},
        op="encode",
    )
    bad = book.file("invalid/base64.json", "base64", "Envelopes that a reader must reject.")
    good = base64.b64encode(np.array([[1, 2]], "<i4").tobytes()).decode("ascii")
    for slug, text, code, why in (
        ("not-json", '{"data": ', "E_ENCODING", "The envelope is not JSON."),
        (
            "bad-alphabet",
            json.dumps({"data": "AQAA!AIAAAA=", "shape": [1, 2], "dtype": "int32"}),
            "E_ENCODING",
            "A character outside the base64 alphabet (the length is right).",
        ),
        (
            "missing-padding",
            json.dumps({"data": good.rstrip("="), "shape": [1, 2], "dtype": "int32"}),
            "E_ENCODING",
            "Strict base64: the padding is required.",
        ),
        ("missing-data", json.dumps({"shape": [1, 2], "dtype": "int32"}), "E_SCHEMA", "data is required."),
        ("not-an-object", json.dumps([[1, 2]]), "E_SCHEMA", "The envelope is an object."),
        ("dtype-float32", _envelope([[1.0, 2.0]], "float32"), "E_DTYPE", "Dense ids are int32."),
        ("dtype-unknown", _envelope([[1, 2]], override={"dtype": "complex64"}), "E_DTYPE", "Not a whitelisted dtype."),
        (
            "shape-bytes-mismatch",
            _envelope([[1, 2]], override={"shape": [1, 3]}),
            "E_BYTES",
            "Shape [1, 3] int32 needs 12 bytes; 8 are given.",
        ),
        ("three-dimensional", _envelope([[[1, -1]]]), "E_SHAPE", "The dense envelope is [T, W]."),
        ("padding-between-ids", _envelope([[1, -1, 2]]), "E_PADDING", "-1 between ids."),
        ("int64-beyond-int32", _envelope([[1 << 31]], "int64"), "E_RANGE", "int64 values must fit int32."),
        ("numpy-dtype-spelling", _envelope([[1, 2]], override={"dtype": "<i4"}), "E_DTYPE", 'Only "int32" / "int64".'),
        ("one-dimensional", _envelope([1, 2]), "E_SHAPE", "shape is exactly [T, W]."),
        ("data-not-a-string", _envelope([[1, 2]], override={"data": [1, 2]}), "E_SCHEMA", "data is a base64 string."),
    ):
        bad.add(slug, why, "json", {"text": text}, err(code))
    bad.add(
        "forged-shape",
        "A few bytes declaring a 2**40 x 2**20 array.",
        "limits",
        {"text": json.dumps({"data": good, "shape": [1 << 40, 1 << 20], "dtype": "int32"})},
        err("E_LIMIT"),
    )


# ------------------------------------------------------------------------------------------ model
def model_cases(book: Book) -> None:
    f = book.file(
        "model/decode.json",
        "model",
        "The suite's logical form: rows as nested lists plus cu_seqlens, vocab_size, companions, metadata.",
    )
    f.add(
        "segments-and-vocab",
        "The issue example as a model mask.",
        "segments",
        model([[5, 1], [], [7]], cu_seqlens=[0, 2, 3], vocab_size=10),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "unsorted-rows-with-support-logprobs",
        "Canonicalization permutes support_logprobs with the ids.",
        "companions",
        model([[9, 2, 5]], support_logprobs=[[-0.5, -2.0, -1.0]], sampled_token_ids=[5]),
        ok(mask([[2, 5, 9]], support_logprobs=[[-2.0, -1.0, -0.5]], sampled_token_ids=[5])),
    )
    f.add("zero-rows", "An empty mask.", "model", model([]), ok(mask([])))
    f.add(
        "non-finite-as-strings",
        'Non-finite float companions are spelled "-Infinity", "Infinity", "NaN".',
        "companions",
        model([[1], []], sampled_logprobs=["-Infinity", 0.0]),
        ok(mask([[1], []], sampled_logprobs=["-Infinity", 0.0])),
    )
    v = book.file("model/validate.json", "model", "validate: is this a valid mask?")
    v.add(
        "validate-companions",
        "A mask with every companion validates.",
        "companions",
        model(
            [[1, 5], [], [7]],
            cu_seqlens=[0, 2, 3],
            vocab_size=10,
            sampled_token_ids=[5, -1, 7],
            sampled_logprobs=[-0.5, 0.0, 0.0],
            temperature=[1.0, 1.0, 0.5],
            support_logprobs=[[-1.0, -0.5], [], [0.0]],
        ),
        {"valid": True},
        op="validate",
    )
    v.add(
        "validate-empty-segments",
        "Empty segments validate.",
        "segments",
        model([[2]], cu_seqlens=[0, 0, 1, 1]),
        {"valid": True},
        op="validate",
    )

    bad = book.file("invalid/model.json", "model", "Model masks that break an invariant of the logical model.")
    cases: list[tuple[str, str, str, dict[str, Any], tuple[str, ...], dict[str, int] | None]] = [
        (
            "sampled-id-not-in-row",
            "A non-empty row must contain its sampled id.",
            "companions",
            model([[1, 5], [7]], sampled_token_ids=[5, 8]),
            ("E_MISSING_SAMPLED",),
            None,
        ),
        ("temperature-zero", "temperature > 0.", "companions", model([[1]], temperature=[0.0]), ("E_RANGE",), None),
        (
            "temperature-infinite",
            "temperature is finite.",
            "companions",
            model([[1]], temperature=["Infinity"]),
            ("E_RANGE",),
            None,
        ),
        (
            "cu-seqlens-not-tiling",
            "cu_seqlens must end at T.",
            "segments",
            model([[1], [2]], cu_seqlens=[0, 1]),
            ("E_SEGMENTS",),
            None,
        ),
        ("rows-not-list", "rows is a list.", "model", {"rows": {"0": [1]}}, ("E_SCHEMA",), None),
        ("row-not-list", "Each row is a list.", "model", {"rows": [[1], 2]}, ("E_SCHEMA",), None),
        ("float-id", "Ids are integers.", "model", {"rows": [[1.5]]}, ("E_DTYPE",), None),
        ("boolean-id", "true is not an id.", "model", {"rows": [[True]]}, ("E_DTYPE",), None),
        ("duplicate-id", "Rows are sets.", "model", {"rows": [[2, 2]]}, ("E_DUPLICATE",), None),
        (
            "support-logprobs-not-like-rows",
            "support_logprobs nests like rows.",
            "companions",
            model([[1, 2]], support_logprobs=[[-0.5]]),
            ("E_SHAPE",),
            None,
        ),
        (
            "sampled-ids-too-short",
            "sampled_token_ids has T entries.",
            "companions",
            model([[1], [2]], sampled_token_ids=[1]),
            ("E_SHAPE",),
            None,
        ),
        (
            "vocab-size-boolean",
            "vocab_size is an integer.",
            "model",
            model([[1]], vocab_size=True),
            ("E_SCHEMA",),
            None,
        ),
        ("rows-over-limit", "T above max_rows.", "limits", model([[1], [2], [3]]), ("E_LIMIT",), {"max_rows": 2}),
        (
            "metadata-list",
            "metadata is an object.",
            "metadata",
            model([[1]], metadata=["top_k"]),
            ("E_SCHEMA",),
            None,
        ),
    ]
    for slug, why, spec, payload, codes, limits in cases:
        bad.add(slug, why, spec, payload, err(*codes), op="validate", limits=limits)


# ------------------------------------------------------------------------------------------ scorer
def scorer_cases(book: Book) -> None:
    rng = np.random.default_rng(20260601)
    f = book.file("scorer/score.json", "scorer", "Renormalized log-probs and entropy over each row's support.")
    tol = 1e-6

    def add(
        slug: str,
        why: str,
        logits: np.ndarray,
        rows: list[list[int]],
        targets: list[int],
        temperature: Any = 1.0,
        empty_rows: str = "full",
        *,
        missing_target: str | None = None,
        payload_logits: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        level: str = REQ,
        tolerance: float = tol,
        spec: str = "scoring",
        vocab_size: int | None = None,
    ) -> None:
        payload: dict[str, Any] = {
            "mask": model(rows, vocab_size=vocab_size),
            "targets": arr(targets, "int64", shape=[len(targets)]),
            "temperature": temperature if not isinstance(temperature, list) else arr(temperature, "float64"),
            "empty_rows": empty_rows,
        }
        if missing_target is not None:
            payload["missing_target"] = missing_target
        values = [["-Infinity" if v == -math.inf else v for v in row] for row in logits.tolist()]
        payload.update(extra or {"logits": payload_logits or arr(values, "float64", shape=logits.shape)})
        expected = stable_scores(
            float64_scores(logits, rows, targets, temperature, empty_rows, missing_target or "error")
        )
        f.add(slug, why, spec, payload, {"scores": expected, "tolerance": tolerance}, op="score", level=level)

    def logits_of(t: int, v: int, scale: float = 3.0) -> np.ndarray:
        return np.round(rng.normal(0.0, scale, size=(t, v)), 3)

    z = logits_of(3, 6)
    add("basic", "Three rows, temperature 1.", z, [[0, 2, 5], [1, 3], [4]], [2, 1, 4])
    add(
        "temperature-scalar",
        "One temperature for every row: logits are divided by it before the logsumexp.",
        z,
        [[0, 2, 5], [1, 3], [4, 5]],
        [5, 3, 4],
        0.7,
    )
    add(
        "temperature-per-row",
        "A temperature per row.",
        z,
        [[0, 2, 5], [1, 3], [4, 5]],
        [0, 1, 5],
        [0.5, 1.0, 2.0],
    )
    z2 = logits_of(2, 5)
    add(
        "support-is-vocabulary",
        "A support of every id gives the full log_softmax.",
        z2,
        [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]],
        [3, 0],
        1.3,
    )
    add("singleton-rows", "A one-id support: log-prob 0, entropy 0.", z2, [[3], [1]], [3, 1], 0.9)
    add(
        "empty-row-full-vocabulary",
        "An empty row (no support recorded) is scored against the full vocabulary by default.",
        z2,
        [[1, 2], []],
        [2, 4],
        spec="scoring-policies",
    )
    add(
        "empty-row-excluded",
        "With empty_rows = exclude an empty row has no score (null).",
        z2,
        [[1, 2], []],
        [2, 4],
        empty_rows="exclude",
        spec="scoring-policies",
    )
    inf = -math.inf
    add(
        "minus-one-target-on-empty-row",
        "A target of -1 (nothing known sampled) gives no value, whatever the empty-row policy.",
        z2,
        [[1, 2], []],
        [2, -1],
        spec="scoring-policies",
    )
    add(
        "missing-target-full",
        "Policy missing_target = full scores a row whose target is outside its support over the vocabulary.",
        z2,
        [[1, 2], [0, 3]],
        [2, 4],
        missing_target="full",
        spec="scoring-policies",
        level=REC,
    )
    add(
        "missing-target-neg-inf",
        "Policy missing_target = neg_inf: log-prob -inf, entropy over the recorded support.",
        z2,
        [[1, 2], [0, 3]],
        [2, 4],
        missing_target="neg_inf",
        spec="scoring-policies",
        level=REC,
    )
    add(
        "minus-inf-logit-in-support",
        "A -inf logit is a token of probability 0: it adds nothing.",
        np.array([[0.5, inf, 1.5, -0.25], [inf, 2.0, inf, 1.0]]),
        [[0, 1, 2], [0, 1, 3]],
        [2, 3],
        0.8,
    )
    add(
        "target-logit-minus-inf",
        "A target whose logit is -inf has log-prob -inf.",
        np.array([[0.5, inf, 1.5, -0.25]]),
        [[0, 1, 2]],
        [1],
    )
    add(
        "support-all-minus-inf",
        "A support holding only -inf logits has no distribution: no value.",
        np.array([[inf, inf, 1.5, -0.25], [0.0, 1.0, 2.0, 3.0]]),
        [[0, 1], [1, 2]],
        [0, 2],
    )
    padded = np.concatenate([logits_of(2, 5), np.full((2, 3), inf)], axis=1)
    add(
        "padded-vocabulary",
        "Logits padded past vocab_size (lm heads rounded up) with -inf: an empty row scores over all 8 columns.",
        padded,
        [[1, 4], []],
        [4, 2],
        1.2,
        vocab_size=5,
        spec="scoring-policies",
    )
    add(
        "unsorted-support",
        "Order inside a row does not change the result.",
        z,
        [[5, 0, 2], [3, 1], [5, 4]],
        [0, 3, 5],
        0.8,
    )
    hidden = np.round(rng.normal(0.0, 1.0, size=(3, 4)), 3)
    weight = np.round(rng.normal(0.0, 1.0, size=(7, 4)), 3)
    bias = np.round(rng.normal(0.0, 0.5, size=7), 3)
    add(
        "hidden-and-weight",
        "Logits as hidden [T, d] @ weight[V, d].T; only the support's logits are needed.",
        hidden @ weight.T,
        [[0, 6, 3], [2], [1, 4, 5]],
        [6, 2, 1],
        0.9,
        extra={"hidden": arr(hidden.tolist(), "float64"), "weight": arr(weight.tolist(), "float64")},
    )
    add(
        "hidden-weight-bias",
        "The same with an lm-head bias.",
        hidden @ weight.T + bias,
        [[0, 6, 3], [2, 5], [1, 4, 5]],
        [3, 5, 4],
        1.0,
        extra={
            "hidden": arr(hidden.tolist(), "float64"),
            "weight": arr(weight.tolist(), "float64"),
            "bias": arr(bias.tolist(), "float64"),
        },
    )
    big = np.array([[1000.0, 999.0, -1000.0, 998.5], [-5000.0, -5001.0, -4999.0, 0.0]])
    add(
        "large-logits",
        "Logits of magnitude 1000s: a stable logsumexp is required.",
        big,
        [[0, 1, 3], [0, 1, 2]],
        [1, 2],
    )
    add(
        "tied-logits",
        "Equal logits: log-prob -log|S|, entropy log|S|.",
        np.zeros((2, 8)),
        [[0, 1, 2, 3], [5, 7]],
        [2, 7],
        0.6,
    )
    add(
        "zero-rows",
        "T = 0 gives empty results.",
        np.zeros((0, 4)),
        [],
        [],
    )
    src = _source()
    picks = ["17", "18"]
    logits32 = np.concatenate(
        [np.frombuffer(bytes.fromhex(src["logits_float32_hex"][i]), dtype="<f4") for i in picks]
    ).reshape(len(picks), -1)
    temps32 = [src["temperature"][i] for i in picks]
    rows = [src["rows"][i] for i in picks]
    targets = [src["sampled_token_ids"][i] for i in picks]
    expected = float64_scores(logits32.astype(np.float64), rows, targets, temps32, "full")
    engine = [src["processed_logprobs_of_sampled"][i] for i in picks]
    for ours, theirs in zip(expected["logprobs"], engine, strict=True):
        assert ours is not None and abs(ours - theirs) < 1e-5, (ours, theirs)  # agrees with vLLM's own value
    add(
        "vllm-0.32-processed-logprobs",
        "Real vLLM 0.32 logits (float32), per-row temperature and top-k / top-p supports; the expected "
        "log-probs agree with the engine's processed_logprobs to 1e-5.",
        logits32.astype(np.float64),
        rows,
        targets,
        temps32,
        payload_logits={
            "dtype": "float32",
            "shape": list(logits32.shape),
            "hex": logits32.astype("<f4").tobytes().hex(),
        },
        tolerance=1e-5,
    )

    rng11 = np.random.default_rng(20261130)  # cases of spec 1.1 draw apart, so older cases keep their inputs
    padded = np.round(rng11.normal(0.0, 3.0, size=(2, 7)), 3)
    add(
        "empty-row-over-padded-vocabulary",
        "An empty row under the full policy scores over all V' = 7 logit columns, not over V = 5: the padded "
        "columns here hold finite values, so the two answers differ.",
        padded,
        [[1, 3], []],
        [3, 2],
        spec="scoring-policies",
        vocab_size=5,
    )

    add(
        "nan-temperature-on-rows-without-value",
        "A NaN (unknown) temperature is no fault on rows that get no value: an empty row with target -1.",
        np.round(rng11.normal(0.0, 3.0, size=(2, 4)), 3),
        [[0, 2], []],
        [2, -1],
        [0.5, "NaN"],
        spec="scoring-policies",
    )

    bad = book.file("invalid/scorer.json", "scorer", "Scoring requests that must be refused.")
    z3 = logits_of(2, 5)

    def payload(
        rows: list[list[int]], targets: list[int], temperature: Any = 1.0, logits: Any = None
    ) -> dict[str, Any]:
        return {
            "mask": model(rows),
            "targets": arr(targets, "int64", shape=[len(targets)]),
            "temperature": temperature,
            "empty_rows": "full",
            "logits": logits if logits is not None else arr(z3.tolist(), "float64"),
        }

    bad.add(
        "minus-one-target-on-non-empty-row",
        "A target of -1 (unknown) is allowed on empty rows only: on a non-empty row it is E_RANGE.",
        "scoring-policies",
        payload([[0, 1], [2, 3]], [0, -1]),
        err("E_RANGE"),
        op="score",
    )
    bad.add(
        "nan-temperature-on-scored-row",
        "A NaN temperature (unknown) cannot scale a row that is scored: E_RANGE, as zero or infinity.",
        "scoring",
        payload([[0, 1], [2, 3]], [0, 2], temperature=arr(["NaN", 1.0], "float64")),
        err("E_RANGE"),
        op="score",
    )
    bad.add(
        "target-not-in-support",
        "By default a target outside its row's support is an error naming the row.",
        "scoring-policies",
        payload([[0, 1], [2, 3]], [0, 4]),
        err("E_MISSING_SAMPLED"),
        op="score",
    )
    bad.add(
        "temperature-zero",
        "temperature > 0.",
        "scoring",
        payload([[0, 1], [2, 3]], [0, 2], 0.0),
        err("E_RANGE"),
        op="score",
    )
    bad.add(
        "logits-rows-mismatch",
        "logits has one row per mask row.",
        "scoring",
        payload([[0, 1], [2, 3], [4]], [0, 2, 4]),
        err("E_SHAPE"),
        op="score",
    )
    bad.add(
        "target-beyond-logits",
        "A target must index the logits' vocabulary (an empty row, scored over all of it).",
        "scoring-policies",
        payload([[0, 1], []], [0, 5]),
        err("E_RANGE"),
        op="score",
    )
    bad.add(
        "support-id-beyond-logits",
        "A support id must index the logits' vocabulary.",
        "scoring",
        payload([[0, 7], [2, 3]], [0, 2]),
        err("E_RANGE"),
        op="score",
    )


# ------------------------------------------------------------------------------------------ json document
def _doc(**fields: Any) -> str:
    """Our lossless JSON document with the version key first (``override`` by passing the key)."""
    doc: dict[str, Any] = {"sampling_mask": 1}
    doc.update(fields)
    return json.dumps(doc, separators=(", ", ": "))


def json_cases(book: Book) -> None:
    f = book.file("json/decode.json", "json", 'The lossless JSON document {"sampling_mask": 1, "rows": [...], ...}.')
    f.add(
        "issue-example",
        "Version, vocab_size, declared ascending order and segments.",
        "json",
        {"text": _doc(vocab_size=10, id_order="ascending", cu_seqlens=[0, 2, 3], rows=[[1, 5], [], [7]])},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "minimal",
        "Only the version and the rows are required.",
        "json",
        {"text": _doc(rows=[])},
        ok(mask([])),
    )
    f.add(
        "unsorted-rows-with-companions",
        "Order unspecified: rows are sorted and support_logprobs follows; non-finite floats are strings.",
        "json",
        {
            "text": _doc(
                vocab_size=10,
                id_order="unspecified",
                rows=[[9, 3, 5], []],
                sampled_token_ids=[5, -1],
                sampled_logprobs=[-0.5, "-Infinity"],
                temperature=[0.5, 1.0],
                support_logprobs=[[-3.0, -1.25, -0.5], []],
            )
        },
        ok(companions_mask(sampled_logprobs=[-0.5, "-Infinity"])),
    )
    f.add(
        "metadata-types",
        "Metadata values keep their JSON type: null, bool, int, float, string.",
        "json",
        {
            "text": _doc(
                rows=[[1]],
                metadata={"top_k": 50, "top_p": 0.95, "producer": "sglang", "x-greedy": False, "x-seed": None},
            )
        },
        ok(mask([[1]], metadata={"top_k": 50, "top_p": 0.95, "producer": "sglang", "x-greedy": False, "x-seed": None})),
    )
    f.add(
        "unknown-keys-ignored",
        "A reader ignores keys it does not know.",
        "versioning",
        {"text": _doc(rows=[[2]], **{"x-trace": {"spans": [1, 2]}})},
        ok(mask([[2]])),
    )
    f.add(
        "vocab-size-null",
        "vocab_size null means unknown.",
        "json",
        {"text": _doc(vocab_size=None, rows=[[2147483647]])},
        ok(mask([[2147483647]])),
    )
    f.add(
        "all-empty-segments",
        "Zero rows in two segments.",
        "json",
        {"text": _doc(cu_seqlens=[0, 0, 0], rows=[])},
        ok(mask([], cu=[0, 0, 0])),
    )
    e = book.file("json/encode.json", "json", "Encoding a mask as the lossless JSON document.")
    e.add(
        "encode-roundtrip-companions",
        "Everything survives: segments, vocab_size, companions, metadata (the round trip is checked).",
        "json",
        roundtrip_model(
            sampled_logprobs=[-0.5, 0.0, "-Infinity"], metadata={"top_k": 3, "top_p": 0.9, "producer": "test"}
        ),
        {"roundtrip": True},
        op="encode",
    )
    bad = book.file("invalid/json.json", "json", "JSON documents that a reader must reject.")
    for slug, text, codes, spec, why, level in (
        (
            "unknown-major-version",
            _doc(rows=[]).replace('"sampling_mask": 1', '"sampling_mask": 2'),
            ("E_VERSION",),
            "versioning",
            "Major version 2 is unknown to a v1 reader.",
            REQ,
        ),
        (
            "version-zero",
            _doc(rows=[]).replace('"sampling_mask": 1', '"sampling_mask": 0'),
            ("E_VERSION",),
            "versioning",
            "There is no version 0.",
            REQ,
        ),
        (
            "version-string",
            _doc(rows=[]).replace('"sampling_mask": 1', '"sampling_mask": "1"'),
            ("E_SCHEMA",),
            "versioning",
            "The version is an integer.",
            REQ,
        ),
        (
            "version-missing",
            json.dumps({"rows": [[1]]}),
            ("E_SCHEMA",),
            "versioning",
            "The document names its version.",
            REQ,
        ),
        ("rows-missing", _doc(vocab_size=10), ("E_SCHEMA",), "json", "rows is required.", REQ),
        ("not-an-object", "[[1, 2]]", ("E_SCHEMA",), "json", "The document is an object.", REQ),
        ("not-json", '{"sampling_mask": 1, "rows": [[1]', ("E_ENCODING",), "json", "Truncated JSON.", REQ),
        (
            "ascending-order-violated",
            _doc(id_order="ascending", rows=[[5, 1]]),
            ("E_SCHEMA",),
            "json",
            "A declared ascending order is checked.",
            REQ,
        ),
        (
            "unknown-id-order",
            _doc(id_order="descending", rows=[[5, 1]]),
            ("E_SCHEMA",),
            "json",
            "id_order is ascending or unspecified.",
            REQ,
        ),
        (
            "nan-token",
            _doc(rows=[[1]], sampled_logprobs=[1.0]).replace("1.0", "NaN"),
            ("E_ENCODING",),
            "json",
            'NaN is not JSON; write "NaN".',
            REQ,
        ),
        (
            "bad-float-string",
            _doc(rows=[[1]], sampled_logprobs=["nan"]),
            ("E_DTYPE",),
            "json",
            'Only "NaN", "Infinity", "-Infinity" stand for floats.',
            REQ,
        ),
        (
            "float-overflows-float32",
            _doc(rows=[[1]], temperature=[1e39]),
            ("E_RANGE",),
            "json",
            "1e39 does not fit float32.",
            REQ,
        ),
        ("float-id", _doc(rows=[[1.0]]), ("E_DTYPE",), "json", "Ids are JSON integers.", REQ),
        ("boolean-id", _doc(rows=[[True]]), ("E_DTYPE",), "json", "true is not an id.", REQ),
        (
            "support-logprobs-row-length",
            _doc(rows=[[1, 2]], support_logprobs=[[-0.5]]),
            ("E_SHAPE",),
            "json",
            "support_logprobs rows match the mask's rows.",
            REQ,
        ),
        (
            "sampled-ids-length",
            _doc(rows=[[1], [2]], sampled_token_ids=[1]),
            ("E_SHAPE",),
            "json",
            "sampled_token_ids has T entries.",
            REQ,
        ),
        (
            "cu-seqlens-not-tiling",
            _doc(cu_seqlens=[0, 1], rows=[[1], [2]]),
            ("E_SEGMENTS",),
            "model",
            "cu_seqlens ends at T.",
            REQ,
        ),
        (
            "sampled-id-not-in-row",
            _doc(rows=[[1, 2]], sampled_token_ids=[3]),
            ("E_MISSING_SAMPLED",),
            "companions",
            "A non-empty row contains its sampled id.",
            REQ,
        ),
        (
            "metadata-nested-object",
            _doc(rows=[[1]], metadata={"x": {"y": 1}}),
            ("E_SCHEMA",),
            "json",
            "Metadata values are scalars.",
            REQ,
        ),
        (
            "duplicate-key",
            '{"sampling_mask": 1, "rows": [[1]], "rows": [[2]]}',
            ("E_SCHEMA",),
            "json",
            "A key given twice is ambiguous (parsers disagree on which wins).",
            REQ,
        ),
        (
            "unknown-key-too-deep",
            _doc(rows=[[1]], **{"x": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}),
            ("E_LIMIT",),
            "limits",
            "Even an ignored key is bounded by max_json_depth.",
            REQ,
        ),
    ):
        bad.add(slug, why, spec, {"text": text}, err(*codes), level=level)


# ------------------------------------------------------------------------------------------ msgpack
def _marray(values: Any, dtype: str, shape: Sequence[int] | None = None) -> dict[str, Any]:
    """A msgpack ARRAY map {dtype, shape, data: bin of little-endian bytes}."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    return {"dtype": dtype, "shape": list(a.shape), "data": a.tobytes()}


def _envelope_bytes(fields: dict[str, Any], *, version: Any = 1) -> bytes:
    """The envelope, the version key first, packed by msgpack itself (not by this library)."""
    import msgpack

    env: dict[str, Any] = {"sampling_mask": version} if version is not None else {}
    env.update(fields)
    return msgpack.packb(env, use_bin_type=True)  # type: ignore[no-any-return]


def _mhex(fields: dict[str, Any], **kw: Any) -> dict[str, str]:
    return {"hex": _envelope_bytes(fields, **kw).hex()}


def msgpack_cases(book: Book) -> None:
    ragged = {
        "layout": "ragged",
        "vocab_size": 10,
        "id_order": "ascending",
        "num_rows": 3,
        "nnz": 3,
        "ids": _marray([1, 5, 7], "int32"),
        "offsets": _marray([0, 2, 2, 3], "int64"),
    }
    f = book.file("msgpack/decode.json", "msgpack", "The msgpack envelope: one map, arrays as raw little-endian bin.")
    f.add(
        "ragged-issue-example",
        "Layout ragged: ids int32 and offsets int64 as bin, with segments.",
        "msgpack",
        _mhex({**ragged, "cu_seqlens": _marray([0, 2, 3], "int64")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "ragged-int32-offsets",
        "offsets and cu_seqlens may be int32.",
        "msgpack",
        _mhex({**ragged, "offsets": _marray([0, 2, 2, 3], "int32"), "cu_seqlens": _marray([0, 2, 3], "int32")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    no_offsets = {k: v for k, v in ragged.items() if k != "offsets"}
    for dtype in ("uint8", "uint16", "int32"):
        f.add(
            f"ragged-counts-{dtype}",
            f"Row lengths as counts ({dtype}) instead of offsets (1.1): every reader of 1.1 and later reads "
            "them; writers write them only when asked (6).",
            "msgpack",
            _mhex({**no_offsets, "counts": _marray([2, 0, 1], dtype), "cu_seqlens": _marray([0, 2, 3], "int32")}),
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        )
    f.add(
        "minimal",
        "Only the version and the arrays: layout defaults to ragged, counts are optional.",
        "msgpack",
        _mhex({"ids": _marray([7, 3], "int32"), "offsets": _marray([0, 2], "int64")}),
        ok(mask([[3, 7]])),
    )
    f.add(
        "dense-layout",
        "Layout dense: int32 [T, W] with -1 trailing padding.",
        "msgpack",
        _mhex({"layout": "dense", "vocab_size": 10, "dense": _marray([[5, 1], [-1, -1], [7, -1]], "int32")}),
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "zero-rows",
        "An empty mask.",
        "msgpack",
        _mhex(
            {"layout": "ragged", "num_rows": 0, "nnz": 0, "ids": _marray([], "int32"), "offsets": _marray([0], "int64")}
        ),
        ok(mask([])),
    )
    f.add(
        "companions-and-metadata",
        "Companions as bin arrays; metadata as a map; support_logprobs follows its ids.",
        "msgpack",
        _mhex(
            {
                "layout": "ragged",
                "vocab_size": 10,
                "id_order": "unspecified",
                "ids": _marray([9, 3, 5], "int32"),
                "offsets": _marray([0, 3, 3], "int64"),
                "sampled_token_ids": _marray([5, -1], "int32"),
                "sampled_logprobs": _marray([-0.5, 0.0], "float32"),
                "temperature": _marray([0.5, 1.0], "float32"),
                "support_logprobs": _marray([-3.0, -1.25, -0.5], "float32"),
                "metadata": {"top_k": 3, "top_p": 0.5, "producer": "vllm-0.32"},
            }
        ),
        ok(companions_mask(metadata={"top_k": 3, "top_p": 0.5, "producer": "vllm-0.32"})),
    )
    f.add(
        "unknown-keys-ignored",
        "A reader ignores keys it does not know.",
        "versioning",
        _mhex({**ragged, "x-trace": {"span": 7, "tags": ["a"]}}),
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    ids = _marray([1, 5, 7], "int32")
    f.add(
        "array-pad-ignored",
        "An ARRAY may carry a pad bin before data (writers align data with it, 10.1); readers ignore it, "
        "whatever its bytes and wherever the data then starts.",
        "msgpack",
        _mhex(
            {
                **ragged,
                "ids": {"dtype": ids["dtype"], "shape": ids["shape"], "pad": bytes(3), "data": ids["data"]},
                "offsets": {**_marray([0, 2, 2, 3], "int64"), "pad": b"not zero"},
            }
        ),
        ok(mask(ISSUE_ROWS, vocab=10)),
    )
    f.add(
        "dense-layout-support-logprobs",
        "With layout dense, support_logprobs follows the non-padding entries in row-major order.",
        "msgpack",
        _mhex(
            {
                "layout": "dense",
                "dense": _marray([[9, 3], [-1, -1], [4, -1]], "int32"),
                "support_logprobs": _marray([-3.0, -1.0, -0.5], "float32"),
            }
        ),
        ok(mask([[3, 9], [], [4]], support_logprobs=[[-1.0, -3.0], [], [-0.5]])),
    )
    f.add(
        "compact-layout",
        "Layout compact: the compact bytes of all rows as one bin, with the required num_rows and nnz.",
        "msgpack",
        _mhex(
            {
                "layout": "compact",
                "vocab_size": 10,
                "id_order": "ascending",
                "num_rows": 3,
                "nnz": 3,
                "compact": compact_bytes([[1, 5], [], [7]]),
                "cu_seqlens": _marray([0, 2, 3], "int64"),
            }
        ),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    e = book.file("msgpack/encode.json", "msgpack", "Encoding a mask as the msgpack envelope.")
    for layout in ("ragged", "dense", "compact"):
        e.add(
            f"encode-{layout}-roundtrip",
            f"Layout {layout}: everything survives (the round trip is checked).",
            "msgpack",
            roundtrip_model(),
            {"roundtrip": True},
            op="encode",
            options={"layout": layout},
        )
    bad = book.file("invalid/msgpack.json", "msgpack", "Envelopes that a reader must reject.")
    good = _envelope_bytes(ragged)
    cases: list[tuple[str, dict[str, str], tuple[str, ...], str, str]] = [
        (
            "unknown-major-version",
            _mhex(ragged, version=2),
            ("E_VERSION",),
            "versioning",
            "Major version 2 is unknown.",
        ),
        (
            "version-missing",
            _mhex(ragged, version=None),
            ("E_SCHEMA",),
            "versioning",
            "The envelope names its version.",
        ),
        ("version-not-integer", _mhex(ragged, version="1"), ("E_SCHEMA",), "versioning", "The version is an integer."),
        (
            "truncated",
            {"hex": good[: len(good) // 2].hex()},
            ("E_ENCODING",),
            "msgpack",
            "The first half of a valid envelope.",
        ),
        ("not-msgpack", {"hex": "c1c1c1"}, ("E_ENCODING",), "msgpack", "0xc1 is never used in msgpack."),
        ("trailing-bytes", {"hex": (good + b"\x00").hex()}, ("E_ENCODING",), "msgpack", "Bytes after the map."),
        ("not-a-map", {"hex": "93010203"}, ("E_SCHEMA",), "msgpack", "The envelope is a map."),
        (
            "unknown-layout",
            _mhex({**ragged, "layout": "csr"}),
            ("E_SCHEMA",),
            "msgpack",
            "layout is ragged, dense or compact.",
        ),
        (
            "offsets-and-counts",
            _mhex({**ragged, "counts": _marray([2, 0, 1], "uint8")}),
            ("E_SCHEMA",),
            "msgpack",
            "A ragged envelope gives offsets or counts, not both.",
        ),
        (
            "counts-sum-not-nnz",
            _mhex({**{k: v for k, v in ragged.items() if k != "offsets"}, "counts": _marray([2, 0, 2], "uint8")}),
            ("E_OFFSETS",),
            "msgpack",
            "counts sum to 4 but there are 3 ids.",
        ),
        (
            "counts-int64",
            _mhex({**{k: v for k, v in ragged.items() if k != "offsets"}, "counts": _marray([2, 0, 1], "int64")}),
            ("E_DTYPE",),
            "msgpack",
            "counts are uint8, uint16 or int32.",
        ),
        ("ids-int64", _mhex({**ragged, "ids": _marray([1, 5, 7], "int64")}), ("E_DTYPE",), "msgpack", "ids are int32."),
        (
            "ids-float32",
            _mhex({**ragged, "ids": _marray([1, 5, 7], "float32")}),
            ("E_DTYPE",),
            "msgpack",
            "ids are integers.",
        ),
        (
            "data-not-bin",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [3], "data": "AQAAAAUAAAAHAAAA"}}),
            ("E_SCHEMA",),
            "msgpack",
            "Array data is a msgpack bin, not a string.",
        ),
        (
            "bytes-mismatch",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [3], "data": bytes(8)}}),
            ("E_BYTES",),
            "msgpack",
            "Shape [3] int32 needs 12 bytes; 8 are given.",
        ),
        (
            "forged-shape",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [1 << 40], "data": bytes(12)}}),
            ("E_LIMIT",),
            "limits",
            "A 12-byte bin declaring 2**40 ids.",
        ),
        (
            "offsets-end-beyond-ids",
            _mhex({k: v for k, v in {**ragged, "offsets": _marray([0, 2, 2, 4], "int64")}.items() if k != "nnz"}),
            ("E_OFFSETS",),
            "layouts",
            "offsets[T] = 4 with 3 ids (nnz left out: it would be a second fault).",
        ),
        (
            "num-rows-disagrees",
            _mhex({**ragged, "num_rows": 4}),
            ("E_SHAPE",),
            "msgpack",
            "num_rows says 4, the offsets hold 3 rows.",
        ),
        ("nnz-disagrees", _mhex({**ragged, "nnz": 2}), ("E_SHAPE",), "msgpack", "nnz says 2, ids holds 3."),
        (
            "dense-padding-between-ids",
            _mhex({"layout": "dense", "dense": _marray([[5, -1, 1]], "int32")}),
            ("E_PADDING",),
            "layouts",
            "-1 between ids in the dense layout.",
        ),
        (
            "id-order-violated",
            _mhex({**ragged, "ids": _marray([5, 1, 7], "int32")}),
            ("E_SCHEMA",),
            "msgpack",
            "Declared ascending, row 0 is not.",
        ),
        (
            "id-beyond-vocab",
            _mhex({**ragged, "ids": _marray([1, 5, 10], "int32")}),
            ("E_RANGE",),
            "model",
            "Id 10 with vocab_size 10.",
        ),
        (
            "sampled-id-not-in-row",
            _mhex({**ragged, "sampled_token_ids": _marray([2, -1, 7], "int32")}),
            ("E_MISSING_SAMPLED",),
            "companions",
            "A non-empty row contains its sampled id.",
        ),
        (
            "nesting-too-deep",
            _mhex({**ragged, "x-deep": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}),
            ("E_LIMIT",),
            "limits",
            "Containers nested beyond max_json_depth, even under an unknown key.",
        ),
    ]
    import msgpack

    def raw_map(pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
        """A map assembled from already-packed keys and values (for what msgpack.packb cannot write)."""
        packer = msgpack.Packer(use_bin_type=True)
        return {"hex": (packer.pack_map_header(len(pairs)) + b"".join(k + v for k, v in pairs)).hex()}

    def pk(value: Any) -> bytes:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]

    head = [(pk("sampling_mask"), pk(1))] + [(pk(k), pk(v)) for k, v in ragged.items()]
    cases += [
        (
            "compact-counts-missing",
            _mhex({"layout": "compact", "compact": compact_bytes([[1, 5], [], [7]])}),
            ("E_SCHEMA",),
            "msgpack",
            "Layout compact requires num_rows and nnz.",
        ),
        (
            "unknown-major-version-checked-first",
            _mhex({**ragged, "layout": "csr"}, version=2),
            ("E_VERSION",),
            "versioning",
            "The version is checked before any other key (the layout is bad too).",
        ),
        (
            "ext-type",
            _mhex({**ragged, "x-extra": msgpack.ExtType(5, b"ab")}),
            ("E_ENCODING",),
            "msgpack",
            "ext types are never used, even under an unknown key.",
        ),
        (
            "duplicate-key",
            raw_map([*head, (pk("ids"), pk(_marray([1, 5, 7], "int32")))]),
            ("E_SCHEMA",),
            "msgpack",
            "Map keys are unique.",
        ),
        ("non-string-key", raw_map([*head, (pk(7), pk("seven"))]), ("E_SCHEMA",), "msgpack", "Map keys are strings."),
        (
            "invalid-utf8",
            raw_map([*head, (pk("x-note"), b"\xa2\xff\xfe")]),
            ("E_ENCODING",),
            "msgpack",
            "A str that is not UTF-8.",
        ),
    ]
    for slug, payload, codes, spec, why in cases:
        bad.add(slug, why, spec, {"hex": payload["hex"]}, err(*codes))


# ------------------------------------------------------------------------------------------ arrow
#: Arrow / Parquet payloads are built by pyarrow once (``--rebuild-binaries``) and committed in
#: ``sources/arrow-payloads.json``: pyarrow versions differ in incidental bytes, the goldens must not.
_ARROW_SOURCE = "arrow-payloads.json"
#: Rows of the spec 1.3 payloads whose mask (8.1: 8 bytes an offset) is far larger than their bytes.
MANY_EMPTY_ROWS = 100_000


def _forge_uncompressed_length(ipc: bytes, length: int) -> bytes:
    """``ipc`` (LZ4-compressed IPC bytes) with the 8-byte uncompressed-length prefix of the one buffer of
    ``length`` bytes set to 2**40: a decompression bomb by declaration (SPEC 8.4)."""
    needle = length.to_bytes(8, "little") + bytes.fromhex("04224d18")  # the prefix, then the LZ4 frame magic
    at = ipc.find(needle)
    assert at >= 0 and ipc.count(needle) == 1, "the buffer to forge is not unique"
    return ipc[:at] + (1 << 40).to_bytes(8, "little") + ipc[at + 8 :]


def _arrow_payloads() -> dict[str, bytes]:
    """Every Arrow IPC / Parquet payload of the suite, written with pyarrow directly."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    def lists(cu: list[int], offsets: list[int], values: Any, *, large: bool = False) -> Any:
        cls = pa.LargeListArray if large else pa.ListArray
        index = pa.int64() if large else pa.int32()
        inner = cls.from_arrays(pa.array(offsets, index), values)
        return cls.from_arrays(pa.array(cu, index), inner)

    def flat(cu: list[int], values: Any) -> Any:
        return pa.ListArray.from_arrays(pa.array(cu, pa.int32()), values)

    def meta(**fields: str) -> dict[str, str]:
        out = {"sampling_mask.version": "1"}
        out.update({f"sampling_mask.{k.replace('__', '.')}": v for k, v in fields.items()})
        return out

    def table(columns: dict[str, Any], metadata: dict[str, str]) -> Any:
        return pa.table(columns).replace_schema_metadata(metadata)

    def ipc_file(t: Any, compression: str | None = None) -> bytes:
        """An IPC file of table ``t`` (a bare schema writes a file with no record batch)."""
        sink = io.BytesIO()
        schema = t if isinstance(t, pa.Schema) else t.schema
        with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
            if not isinstance(t, pa.Schema):
                writer.write_table(t)
        return sink.getvalue()

    def ipc_stream(t: Any, batches: int = 1, compression: str | None = None) -> bytes:
        sink = io.BytesIO()
        options = pa.ipc.IpcWriteOptions(compression=compression)
        with pa.ipc.new_stream(sink, t.schema, options=options) as writer:
            if batches == 1:
                writer.write_table(t)
            else:
                for batch in t.to_batches(max_chunksize=1):
                    writer.write_batch(batch)
        return sink.getvalue()

    def parquet(t: Any, row_group_size: int | None = None) -> bytes:
        sink = io.BytesIO()
        pq.write_table(t, sink, row_group_size=row_group_size)
        return sink.getvalue()

    def compact_table(
        segments: list[list[list[int]]], num_rows: list[int], nnz: list[int], count_type: Any = None
    ) -> Any:
        """The compact Arrow layout: one blob per segment plus its row and id counts."""
        return table(
            {
                "sampling_mask_compact": pa.array([compact_bytes(seg) for seg in segments], pa.binary()),
                "sampling_mask_num_rows": pa.array(num_rows, count_type or pa.int64()),
                "sampling_mask_nnz": pa.array(nnz, pa.int64()),
            },
            meta(vocab_size="10", id_order="ascending", layout="compact"),
        )

    issue = table(
        {"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32()))},
        meta(vocab_size="10", id_order="ascending"),
    )
    companions = table(
        {
            "sampling_mask": lists([0, 2], [0, 3, 3], pa.array([9, 3, 5], pa.int32())),
            "sampled_token_ids": flat([0, 2], pa.array([5, -1], pa.int32())),
            "sampled_logprobs": flat([0, 2], pa.array([-0.5, 0.0], pa.float32())),
            "temperature": flat([0, 2], pa.array([0.5, 1.0], pa.float32())),
            "support_logprobs": lists([0, 2], [0, 3, 3], pa.array([-3.0, -1.25, -0.5], pa.float32())),
        },
        meta(vocab_size="10", id_order="unspecified", metadata__top_k="3", metadata__producer='"vllm-0.32"'),
    )
    hundred = table({"sampling_mask": lists([0, 1], [0, 100], pa.array(range(100), pa.int32()))}, meta())
    user = table(
        {
            "prompt_ids": pa.array([[1, 2, 3], [4]], pa.list_(pa.int64())),
            "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
            "reward": pa.array([1.0, -0.5], pa.float64()),
        },
        meta(),
    )
    out = {
        "arrow.issue-example": ipc_file(issue),
        "arrow.companions": ipc_file(companions),
        "arrow.user-columns": ipc_file(user),
        "arrow.large-lists": ipc_file(
            table(
                {"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32()), large=True)}, meta()
            )
        ),
        "arrow.empty-segments": ipc_file(
            table({"sampling_mask": lists([0, 0, 2, 2], [0, 1, 2], pa.array([1, 2], pa.int32()))}, meta())
        ),
        "arrow.zero-segments": ipc_file(table({"sampling_mask": lists([0], [0], pa.array([], pa.int32()))}, meta())),
        "arrows.issue-example": ipc_stream(issue),
        "arrows.one-batch-per-segment": ipc_stream(issue, batches=2),
        "parquet.issue-example": parquet(issue),
        "parquet.companions": parquet(companions),
        # invalid
        "arrow.unknown-major-version": ipc_file(issue.replace_schema_metadata(meta(version="2", vocab_size="10"))),
        "arrow.version-missing": ipc_file(issue.replace_schema_metadata({"sampling_mask.vocab_size": "10"})),
        "arrow.vocab-size-not-decimal": ipc_file(issue.replace_schema_metadata(meta(vocab_size="ten"))),
        "arrow.int64-ids": ipc_file(
            table({"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int64()))}, meta())
        ),
        "arrow.mask-column-missing": ipc_file(table({"tokens": pa.array([[1, 5, 7]], pa.list_(pa.int32()))}, meta())),
        "arrow.null-row": ipc_file(
            table(
                {"sampling_mask": pa.array([[[1, 5], None], [[7]]], pa.list_(pa.list_(pa.int32())))},
                meta(),
            )
        ),
        "arrow.duplicate-id": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([4, 4], pa.int32()))}, meta())
        ),
        "arrow.id-order-violated": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([5, 1], pa.int32()))}, meta(id_order="ascending"))
        ),
        "arrow.id-beyond-vocab": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([1, 10], pa.int32()))}, meta(vocab_size="10"))
        ),
        "arrow.companion-misaligned": ipc_file(
            table(
                {
                    "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
                    "sampled_token_ids": flat([0, 1, 3], pa.array([5, -1, 7], pa.int32())),
                },
                meta(),
            )
        ),
        "arrow.sampled-id-not-in-row": ipc_file(
            table(
                {
                    "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
                    "sampled_token_ids": flat([0, 2, 3], pa.array([2, -1, 7], pa.int32())),
                },
                meta(),
            )
        ),
        "arrow.no-batches": ipc_file(issue.schema),
        "arrow.zstd": ipc_file(issue, compression="zstd"),
        "arrows.lz4": ipc_stream(issue, compression="lz4"),
        "parquet.two-row-groups": parquet(issue, row_group_size=1),
        "arrow.mask-column-flat": ipc_file(
            table({"sampling_mask": pa.array([[1, 5, 7]], pa.list_(pa.int32()))}, meta())
        ),
        "arrow.duplicate-column": ipc_file(
            pa.Table.from_arrays(
                [issue.column(0), issue.column(0)], names=["sampling_mask", "sampling_mask"]
            ).replace_schema_metadata(meta())
        ),
        "arrow.metadata-not-json": ipc_file(issue.replace_schema_metadata(meta(metadata__top_k="{oops"))),
        "arrow.version-not-decimal": ipc_file(issue.replace_schema_metadata(meta(version="1.0"))),
        "arrow.compact-layout": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [2, 1])),
        "arrow.compact-negative-count": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [2, -1])),
        "arrow.compact-blob-disagrees": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [3, 1])),
        "arrows.unknown-major-version": ipc_stream(issue.replace_schema_metadata(meta(version="2"))),
        "arrow.vocab-size-plus-sign": ipc_file(issue.replace_schema_metadata(meta(vocab_size="+10"))),
        "arrow.vocab-size-leading-zero": ipc_file(issue.replace_schema_metadata(meta(vocab_size="010"))),
        "arrow.compact-num-rows-int32": ipc_file(
            compact_table([[[1, 5], []], [[7]]], [2, 1], [2, 1], count_type=pa.int32())
        ),
        "arrow.compressed-length-bomb": _forge_uncompressed_length(ipc_file(hundred, compression="lz4"), 400),
        "arrows.compressed-length-bomb": _forge_uncompressed_length(ipc_stream(hundred, compression="lz4"), 400),
        "parquet.unknown-major-version": parquet(issue.replace_schema_metadata(meta(version="2"))),
    }
    # Offsets Arrow itself would refuse to build: assembled from raw buffers.
    ids = pa.array([1, 5, 7], pa.int32())
    bad_inner = pa.ListArray.from_buffers(
        pa.list_(pa.int32()), 3, [None, pa.py_buffer(np.array([0, 2, 1, 3], "<i4").tobytes())], children=[ids]
    )
    outer = pa.ListArray.from_buffers(
        pa.list_(pa.list_(pa.int32())), 1, [None, pa.py_buffer(np.array([0, 3], "<i4").tobytes())], children=[bad_inner]
    )
    out["arrow.offsets-decreasing"] = ipc_file(table({"sampling_mask": outer}, meta()))
    # Spec 1.3: bodies larger than what the mask produces, and masks far larger than their bytes.
    blob = pa.array([bytes(range(256)) * 16, bytes(4096)], pa.binary())  # 8 KiB of user bytes
    out["arrow.large-user-column"] = ipc_file(
        table({"sampling_mask": issue.column(0), "blob": blob}, meta(vocab_size="10", id_order="ascending"))
    )
    out["arrows.large-user-column"] = ipc_stream(
        table({"sampling_mask": issue.column(0), "blob": blob}, meta(vocab_size="10", id_order="ascending"))
    )
    many = MANY_EMPTY_ROWS
    compact_many = compact_table([[[]] * many], [many], [0])
    out["arrow.compact-many-empty-rows"] = ipc_file(compact_many, compression="zstd")
    out["parquet.compact-many-empty-rows"] = parquet(compact_many)
    list_many = table({"sampling_mask": lists([0, many], [0] * (many + 1), pa.array([], pa.int32()))}, meta())
    out["parquet.many-empty-rows"] = parquet(list_many)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, issue.schema):
        pass  # a stream of no record batch: the schema, then the end-of-stream marker
    out["arrows.no-batches"] = sink.getvalue()
    out["parquet.no-rows"] = parquet(issue.schema.empty_table())
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, issue.schema) as writer:
        for batch in issue.to_batches(max_chunksize=1):
            writer.write_batch(batch)  # one record batch per segment: two blocks in the footer
    out["arrow.one-batch-per-segment"] = sink.getvalue()
    out.update(_byte_count_payloads(lists, table, meta, ipc_file, ipc_stream))
    out.update(_schema_only_payloads(companions, issue, meta, ipc_file, parquet))
    return out


def _ipc_file_of_batches(t: Any, compression: str | None) -> bytes:
    """An IPC file of table ``t`` written one record batch per table row (one footer block each)."""
    import io

    import pyarrow as pa

    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, t.schema, options=options) as writer:
        for batch in t.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    return sink.getvalue()


#: Rows of each half of the two-batch payloads of the byte count (SPEC 8.5).
HALF_EMPTY_ROWS = MANY_EMPTY_ROWS // 2
#: Bytes of the compressible user column of each batch of the two-batch payloads (zeros).
ZERO_BLOB_BYTES = 100_000
#: Bytes of the incompressible user column of the payloads whose compressed batch stores it as is.
RANDOM_BLOB_BYTES = 8192


def _byte_count_payloads(lists: Any, table: Any, meta: Any, ipc_file: Any, ipc_stream: Any) -> dict[str, bytes]:
    """Payloads of the byte count of SPEC 8.5: what a compressed batch declares, batches that count
    together, a buffer stored uncompressed inside a compressed batch."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, bytes] = {}
    many, half = MANY_EMPTY_ROWS, HALF_EMPTY_ROWS
    one = table({"sampling_mask": lists([0, many], [0] * (many + 1), pa.array([], pa.int32()))}, meta())
    two = table({"sampling_mask": lists([0, half, 2 * half], [0] * (2 * half + 1), pa.array([], pa.int32()))}, meta())
    blobs = table(
        {
            "sampling_mask": lists([0, 1, 2], [0, 1, 2], pa.array([1, 2], pa.int32())),
            "blob": pa.array([bytes(ZERO_BLOB_BYTES)] * 2, pa.binary()),
        },
        meta(vocab_size="10", id_order="ascending"),
    )
    for form, write in (("arrow", _ipc_file_of_batches), ("arrows", lambda t, c: ipc_stream(t, 2, compression=c))):
        out[f"{form}.many-empty-rows-zstd"] = (
            ipc_file(one, compression="zstd") if form == "arrow" else ipc_stream(one, compression="zstd")
        )
        out[f"{form}.two-batches-of-empty-rows-zstd"] = write(two, "zstd")
        out[f"{form}.two-batches-compressed-blob"] = write(blobs, "zstd")
    sink = io.BytesIO()
    pq.write_table(two, sink, row_group_size=1)
    out["parquet.two-row-groups-of-empty-rows"] = sink.getvalue()
    sink = io.BytesIO()
    pq.write_table(blobs, sink, row_group_size=1, compression="zstd")
    out["parquet.two-row-groups-compressed-blob"] = sink.getvalue()
    # An LZ4 batch whose incompressible user column is then stored as is: its buffer's prefix -1,
    # its raw bytes after it (the frame was longer, so the buffer keeps its place and length).
    raw = np.random.default_rng(20260414).integers(0, 256, RANDOM_BLOB_BYTES, dtype=np.uint8).tobytes()
    random = table(
        {
            "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
            "blob": pa.array([raw[: RANDOM_BLOB_BYTES // 2], raw[RANDOM_BLOB_BYTES // 2 :]], pa.binary()),
        },
        meta(vocab_size="10", id_order="ascending"),
    )
    for form in ("arrow", "arrows"):
        data = ipc_file(random, compression="lz4") if form == "arrow" else ipc_stream(random, compression="lz4")
        needle = RANDOM_BLOB_BYTES.to_bytes(8, "little") + bytes.fromhex("04224d18")  # the prefix, the LZ4 magic
        at = data.find(needle)
        assert at >= 0 and data.count(needle) == 1, form
        out[f"{form}.blob-stored-uncompressed"] = (
            data[:at] + (-1).to_bytes(8, "little", signed=True) + raw + data[at + 8 + len(raw) :]
        )
    return out


def _schema_only_payloads(companions: Any, issue: Any, meta: Any, ipc_file: Any, parquet: Any) -> dict[str, bytes]:
    """Payloads whose schema alone says something: no batch, or schema metadata of another kind."""
    import io

    import pyarrow as pa

    out: dict[str, bytes] = {}
    out["arrow.no-batches-companions"] = ipc_file(companions.schema)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, companions.schema):
        pass
    out["arrows.no-batches-companions"] = sink.getvalue()
    out["parquet.no-rows-companions"] = parquet(companions.schema.empty_table())
    integral = issue.replace_schema_metadata(meta(vocab_size="10", id_order="ascending", metadata__top_k="4.0"))
    out["arrow.metadata-top-k-integral-float"] = ipc_file(integral)
    out["parquet.metadata-top-k-integral-float"] = parquet(integral)
    return out


def _arrow_source() -> dict[str, bytes]:
    data = json.loads((_SOURCES / _ARROW_SOURCE).read_text(encoding="utf-8"))
    return {name: bytes.fromhex(text) for name, text in data["payloads"].items()}


def rebuild_binaries() -> Path:
    """Rewrite ``sources/arrow-payloads.json`` with the installed pyarrow (an explicit, reviewed step)."""
    import pyarrow as pa

    payloads = _arrow_payloads()
    doc = {
        "about": "Arrow IPC / Parquet payloads of the conformance suite, written by pyarrow directly "
        "(tools/conformance/generate.py, _arrow_payloads). Rebuilt only by "
        "`python tools/conformance/generate.py --rebuild-binaries`.",
        "pyarrow": pa.__version__,
        "payloads": {name: data.hex() for name, data in sorted(payloads.items())},
    }
    path = _SOURCES / _ARROW_SOURCE
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def arrow_cases(book: Book) -> None:
    bins = _arrow_source()

    def hx(name: str) -> dict[str, str]:
        return {"hex": bins[name].hex()}

    f = book.file("arrow/decode.json", "arrow", "Arrow IPC file: one table row per segment, list<list<int32>>.")
    f.add(
        "issue-example",
        "Outer offsets are cu_seqlens, inner offsets are the ragged offsets; header in schema metadata.",
        "arrow",
        hx("arrow.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "companions-and-metadata",
        "Companion columns per row (support_logprobs per id); sampling_mask.metadata.<key> holds JSON.",
        "arrow",
        hx("arrow.companions"),
        ok(companions_mask(metadata={"top_k": 3, "producer": "vllm-0.32"})),
    )
    f.add(
        "user-columns-ignored",
        "Other columns (prompt ids, rewards) are allowed and do not change the mask.",
        "arrow",
        hx("arrow.user-columns"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
    )
    f.add(
        "large-lists",
        "large_list<large_list<int32>> is read like list<list<int32>>.",
        "arrow",
        hx("arrow.large-lists"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
    )
    f.add(
        "empty-segments",
        "Table rows with no tokens are empty segments.",
        "arrow",
        hx("arrow.empty-segments"),
        ok(mask([[1], [2]], cu=[0, 0, 2, 2])),
    )
    f.add(
        "zero-segments",
        "A table of zero rows is a mask of zero segments and zero rows.",
        "arrow",
        hx("arrow.zero-segments"),
        ok(mask([], cu=[0])),
    )
    f.add(
        "compact-layout",
        "sampling_mask.layout compact: one compact blob per segment with its row and id counts.",
        "arrow",
        hx("arrow.compact-layout"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    f.add(
        "no-batches",
        "A file with a schema and no record batch holds T = 0 and B = 0.",
        "arrow-batches",
        hx("arrow.no-batches"),
        ok(mask([], cu=[0], vocab=10)),
    )
    f.add(
        "zstd-compressed",
        "IPC body compression ZSTD: readers support it.",
        "arrow-batches",
        hx("arrow.zstd"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    s = book.file("arrows/decode.json", "arrows", "Arrow IPC stream: the same table as the file format.")
    s.add(
        "issue-example",
        "One record batch.",
        "arrow",
        hx("arrows.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    s.add(
        "one-batch-per-segment",
        "Record batches concatenate: segments and rows of every batch, in order.",
        "arrow",
        hx("arrows.one-batch-per-segment"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    s.add(
        "lz4-compressed",
        "IPC body compression LZ4_FRAME: readers support it.",
        "arrow-batches",
        hx("arrows.lz4"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    p = book.file("parquet/decode.json", "parquet", "Parquet: the Arrow table stored by pyarrow.parquet.")
    p.add(
        "issue-example",
        "The Arrow schema and metadata survive Parquet.",
        "arrow",
        hx("parquet.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    p.add(
        "companions-and-metadata",
        "Companions and metadata survive Parquet.",
        "arrow",
        hx("parquet.companions"),
        ok(companions_mask(metadata={"top_k": 3, "producer": "vllm-0.32"})),
    )
    p.add(
        "two-row-groups",
        "Row groups are batches: the mask is their concatenation.",
        "arrow-batches",
        hx("parquet.two-row-groups"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    for form in ("arrow", "arrows", "parquet"):
        e = book.file(f"{form}/encode.json", form, f"Encoding a mask as {form}.")
        e.add(
            "encode-roundtrip-companions",
            "Segments, vocab_size, companions and metadata survive (the round trip is checked).",
            "arrow",
            roundtrip_model(),
            {"roundtrip": True},
            op="encode",
        )
    issue = bins["arrow.issue-example"]
    bad = book.file("invalid/arrow.json", "arrow", "Arrow IPC files that a reader must reject.")
    for slug, payload, codes, spec, why in (
        (
            "unknown-major-version",
            hx("arrow.unknown-major-version"),
            ("E_VERSION",),
            "versioning",
            "sampling_mask.version 2 is unknown.",
        ),
        (
            "version-missing",
            hx("arrow.version-missing"),
            ("E_SCHEMA",),
            "arrow",
            "The schema metadata names the version.",
        ),
        (
            "vocab-size-not-decimal",
            hx("arrow.vocab-size-not-decimal"),
            ("E_SCHEMA",),
            "arrow",
            "sampling_mask.vocab_size is a decimal integer.",
        ),
        (
            "not-arrow",
            {"hex": b"ARROW1\x00\x00not an arrow file".hex()},
            ("E_ENCODING",),
            "arrow",
            "The magic alone is not a file.",
        ),
        (
            "truncated",
            {"hex": issue[: len(issue) // 2].hex()},
            ("E_ENCODING",),
            "arrow",
            "The first half of a valid file.",
        ),
        ("int64-ids", hx("arrow.int64-ids"), ("E_DTYPE",), "arrow", "Ids are int32 in Arrow too."),
        (
            "mask-column-missing",
            hx("arrow.mask-column-missing"),
            ("E_SCHEMA",),
            "arrow",
            "The sampling_mask column is required.",
        ),
        (
            "null-row",
            hx("arrow.null-row"),
            ("E_SCHEMA",),
            "arrow",
            "Nulls are not allowed; an empty row is an empty list.",
        ),
        (
            "offsets-decreasing",
            hx("arrow.offsets-decreasing"),
            ("E_OFFSETS",),
            "arrow",
            "Inner offsets that decrease, written from raw buffers.",
        ),
        ("duplicate-id", hx("arrow.duplicate-id"), ("E_DUPLICATE",), "model", "Rows are sets in Arrow too."),
        (
            "id-order-violated",
            hx("arrow.id-order-violated"),
            ("E_SCHEMA",),
            "arrow",
            "Declared ascending, a row is not.",
        ),
        ("id-beyond-vocab", hx("arrow.id-beyond-vocab"), ("E_RANGE",), "model", "Id 10 with vocab_size 10."),
        (
            "companion-misaligned",
            hx("arrow.companion-misaligned"),
            ("E_SHAPE",),
            "arrow",
            "A companion's rows per segment differ from the mask's.",
        ),
        (
            "sampled-id-not-in-row",
            hx("arrow.sampled-id-not-in-row"),
            ("E_MISSING_SAMPLED",),
            "companions",
            "A non-empty row contains its sampled id.",
        ),
        (
            "compact-negative-count",
            hx("arrow.compact-negative-count"),
            ("E_RANGE",),
            "arrow",
            "A negative sampling_mask_nnz.",
        ),
        (
            "compact-blob-disagrees",
            hx("arrow.compact-blob-disagrees"),
            ("E_OFFSETS",),
            "arrow",
            "A blob whose row lengths do not sum to its nnz.",
        ),
        (
            "mask-column-flat",
            hx("arrow.mask-column-flat"),
            ("E_SCHEMA",),
            "arrow",
            "sampling_mask is list<list<int32>>, not list<int32>.",
        ),
        ("duplicate-column", hx("arrow.duplicate-column"), ("E_SCHEMA",), "arrow", "A column name that appears twice."),
        (
            "metadata-not-json",
            hx("arrow.metadata-not-json"),
            ("E_ENCODING",),
            "arrow-metadata",
            "A metadata value that is not JSON text.",
        ),
        (
            "version-not-decimal",
            hx("arrow.version-not-decimal"),
            ("E_SCHEMA",),
            "arrow-metadata",
            "The version is decimal digits: 1.0 is not.",
        ),
    ):
        bad.add(slug, why, spec, payload, err(*codes))
    stream = bins["arrows.issue-example"]
    bad_s = book.file("invalid/arrows.json", "arrows", "Arrow IPC streams that a reader must reject.")
    bad_s.add(
        "unknown-major-version",
        "sampling_mask.version 2 is unknown.",
        "versioning",
        hx("arrows.unknown-major-version"),
        err("E_VERSION"),
    )
    bad_s.add(
        "truncated",
        "A stream cut in the middle of a message.",
        "arrow",
        {"hex": stream[: len(stream) - 40].hex()},
        err("E_ENCODING"),
    )
    bad_s.add("not-arrow", "Random bytes.", "arrow", {"hex": "ffffffff0800000001020304"}, err("E_ENCODING"))
    pq_bytes = bins["parquet.issue-example"]
    bad_p = book.file("invalid/parquet.json", "parquet", "Parquet files that a reader must reject.")
    bad_p.add(
        "unknown-major-version",
        "sampling_mask.version 2 is unknown.",
        "versioning",
        hx("parquet.unknown-major-version"),
        err("E_VERSION"),
    )
    bad_p.add(
        "truncated",
        "The first half of a valid file.",
        "arrow",
        {"hex": pq_bytes[: len(pq_bytes) // 2].hex()},
        err("E_ENCODING"),
    )
    bad_p.add(
        "not-parquet",
        "PAR1 magic around garbage.",
        "arrow",
        {"hex": (b"PAR1" + b"\x00" * 8 + b"PAR1").hex()},
        err("E_ENCODING"),
    )


# ------------------------------------------------------------------------------------------ compact
def compact_bytes(rows: list[list[int]]) -> bytes:
    """The compact layout of ``rows``, written out from the spec in plain Python (not the library):
    row lengths (``min(k, 255)`` bytes, then LEB128 ``k - 255`` for long rows), one width byte per
    block of 32 delta values, then per width ``w = 1..31`` the ``w x m_w`` matrix of uint32 words of
    that width's blocks (word q of every block contiguous)."""
    out = bytearray(min(len(r), 255) for r in rows)
    for row in rows:
        if len(row) >= 255:
            n = len(row) - 255
            while True:
                out.append((n & 0x7F) | (0x80 if n >= 0x80 else 0))
                n >>= 7
                if not n:
                    break
    values: list[int] = []
    for row in rows:
        prev = -1
        for x in sorted(row):
            values.append(x - prev - 1)
            prev = x
    blocks = [values[i : i + 32] + [0] * (32 - len(values[i : i + 32])) for i in range(0, len(values), 32)]
    widths = [max(b).bit_length() for b in blocks]
    out += bytes(widths)
    for w in range(1, 32):
        group = [b for b, bw in zip(blocks, widths, strict=True) if bw == w]
        packed = [sum(v << (j * w) for j, v in enumerate(b)) for b in group]
        for q in range(w):
            for bits in packed:
                out += ((bits >> (32 * q)) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)


def _compact(rows: list[list[int]], **extra: Any) -> dict[str, Any]:
    data = compact_bytes(rows)
    payload: dict[str, Any] = {
        "compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()},
        "num_rows": len(rows),
        "nnz": sum(len(r) for r in rows),
    }
    payload.update(extra)
    return payload


def _raw_compact(data: bytes, num_rows: Any, nnz: Any) -> dict[str, Any]:
    return {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}, "num_rows": num_rows, "nnz": nnz}


def compact_cases(book: Book) -> None:
    src = _source()
    assert compact_bytes([[5], [], [1, 2, 7]]).hex() == "010003030d0800000000000000000000"  # the spec's example
    f = book.file("compact/decode.json", "compact", "The compact layout: sorted deltas bit-packed in blocks of 32.")
    f.add(
        "spec-example",
        "Rows {5}, {}, {1, 2, 7}: lengths 01 00 03, one block of width 3, values 5 1 0 4.",
        "compact",
        _compact([[5], [], [1, 2, 7]]),
        ok(mask([[5], [], [1, 2, 7]])),
    )
    f.add("zero-rows", "T = 0, nnz = 0: zero bytes.", "compact", _compact([]), ok(mask([])))
    f.add(
        "all-empty-rows",
        "Only the row-length bytes: no block at all.",
        "compact",
        _compact([[], [], []]),
        ok(mask([[], [], []])),
    )
    f.add(
        "width-zero-block",
        "Consecutive ids from 0 are all-zero deltas: width 0, no words.",
        "compact",
        _compact([[0, 1, 2], [0]]),
        ok(mask([[0, 1, 2], [0]])),
    )
    long_row = list(range(0, 600, 2))
    f.add(
        "long-row",
        "A row of 300 ids: length byte 255, then LEB128 45; ten blocks of width 1.",
        "compact",
        _compact([long_row, [3]]),
        ok(mask([long_row, [3]])),
    )
    wide = [list(range(32)), [5, 1_000_000, 2_000_000, 9_000_000]]
    f.add(
        "blocks-of-different-widths",
        "Blocks are stored grouped by width: a width-0 block and a width-24 block.",
        "compact",
        _compact(wide),
        ok(mask(wide)),
    )
    f.add(
        "maximal-int32-id",
        "2147483647 is one 31-bit value.",
        "compact",
        _compact([[2147483647]]),
        ok(mask([[2147483647]])),
    )
    f.add(
        "with-segments-companions",
        "The container's other keys: vocab_size, segments and companions (canonical order).",
        "compact",
        _compact(
            [[3, 9], [], [4]],
            vocab_size=10,
            cu_seqlens=arr([0, 2, 3], "int64"),
            sampled_token_ids=arr([9, -1, 4]),
            support_logprobs=arr([-1.0, -0.5, 0.0], "float32"),
        ),
        ok(
            mask(
                [[3, 9], [], [4]],
                cu=[0, 2, 3],
                vocab=10,
                sampled_token_ids=[9, -1, 4],
                support_logprobs=[[-1.0, -0.5], [], [0.0]],
            )
        ),
    )
    picks = ["17", "18", "19", "21"]
    rows = [src["rows"][i] for i in picks]
    f.add(
        "vllm-0.32-rows",
        "Four real vLLM 0.32 rows (2, 3, 5 and 71 ids out of 1000).",
        "compact",
        _compact(rows, vocab_size=src["vocab_size"]),
        ok(mask(rows, vocab=src["vocab_size"])),
    )
    e = book.file("compact/encode.json", "compact", "Encoding a mask in the compact layout (exact bytes).")
    for slug, rows, why in (
        ("encode-spec-example", [[5], [], [1, 2, 7]], "The smallest width per block makes the bytes unique."),
        ("encode-long-row", [long_row, [3]], "A long row's length and ten width-1 blocks."),
        ("encode-blocks-of-different-widths", wide, "Width groups in increasing order."),
    ):
        data = compact_bytes(rows)
        e.add(
            slug,
            why,
            "compact",
            model(rows),
            {"payload": {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}}},
            op="encode",
        )
    bad = book.file("invalid/compact.json", "compact", "Compact bytes that a reader must reject.")
    spec_example = compact_bytes([[5], [], [1, 2, 7]])
    long_bytes = compact_bytes([long_row, [3]])
    for slug, payload, codes, why, limits in (
        ("row-lengths-short", _raw_compact(b"\x01\x00", 3, 1), ("E_BYTES",), "3 rows need 3 length bytes.", None),
        (
            "lengths-disagree-with-nnz",
            _raw_compact(spec_example, 3, 5),
            ("E_OFFSETS",),
            "Row lengths sum to 4, nnz says 5.",
            None,
        ),
        (
            "words-short",
            _raw_compact(spec_example[:-4], 3, 4),
            ("E_BYTES",),
            "A width-3 block needs 12 bytes of words.",
            None,
        ),
        ("trailing-byte", _raw_compact(spec_example + b"\x00", 3, 4), ("E_BYTES",), "Bytes after the last word.", None),
        (
            "block-width-over-31",
            _raw_compact(b"\x01\x20" + bytes(4 * 32), 1, 1),
            ("E_ENCODING",),
            "No value needs 32 bits.",
            None,
        ),
        (
            "varint-not-minimal",
            _raw_compact(long_bytes[:2] + b"\xad\x00" + long_bytes[3:], 2, 301),
            ("E_ENCODING",),
            "A long length written with a needless zero continuation byte.",
            None,
        ),
        ("varint-truncated", _raw_compact(b"\xff\x80", 1, 300), ("E_BYTES",), "A long length that never ends.", None),
        (
            "nonzero-padding",
            _raw_compact(spec_example[:5] + b"\x08\x00\x00\x80" + spec_example[9:], 3, 4),
            ("E_ENCODING",),
            "The values after the last id are zero.",
            None,
        ),
        (
            "id-beyond-int32",
            _raw_compact(b"\x02\x1f" + ((2**31 - 1) | (5 << 31)).to_bytes(4 * 31, "little"), 1, 2),
            ("E_RANGE",),
            "2147483647 then a delta that passes int32.",
            None,
        ),
        ("num-rows-not-integer", _raw_compact(spec_example, "3", 4), ("E_SCHEMA",), "num_rows is an integer.", None),
        ("rows-over-limit", _compact([[5], [], [1, 2, 7]]), ("E_LIMIT",), "T above max_rows.", {"max_rows": 2}),
        (
            "row-wider-than-limit",
            _compact([[5], [], [1, 2, 7]]),
            ("E_LIMIT",),
            "A row wider than max_width.",
            {"max_width": 2},
        ),
        (
            "id-beyond-vocab",
            _compact([[5], [], [1, 2, 7]], vocab_size=6),
            ("E_RANGE",),
            "Id 7 with vocab_size 6.",
            None,
        ),
        (
            "sampled-id-not-in-row",
            _compact([[5], [], [1, 2, 7]], sampled_token_ids=arr([5, -1, 3])),
            ("E_MISSING_SAMPLED",),
            "A non-empty row contains its sampled id.",
            None,
        ),
        (
            "bytes-not-uint8",
            {**_compact([[5], [], [1, 2, 7]]), "compact": arr([1, 0, 3], "int32")},
            ("E_DTYPE",),
            "The compact bytes are uint8.",
            None,
        ),
    ):
        bad.add(slug, why, "compact", payload, err(*codes), limits=limits)


# ------------------------------------------------------------------------------------------ v1.1
def teeth_cases(book: Book) -> None:
    """Cases added with spec 1.1: each fails an implementation that ignores one requirement the 1.0
    cases left unchecked, or settles a choice the 1.0 text left open (SPEC, Change log)."""
    unsorted = [[5, 1], [], [7]]  # row 0 is not ascending
    unsorted_model = model(unsorted, vocab_size=10, support_logprobs=[[-0.5, -1.5], [], [0.0]])

    # Writers keep the stored order (4.3) and declare it truthfully (9.2, 10.1, 11.2).
    for form, payload in (
        ("dense", {"dense": arr([[5, 1], [-1, -1], [7, -1]])}),
        ("packed", {"dense": arr([[5, 1], [-1, -1], [7, -1]])}),
        ("ragged", {"ids": arr([5, 1, 7]), "offsets": arr([0, 2, 2, 3], "int64")}),
    ):
        book.file(f"{form}/encode.json", form).add(
            "encode-keeps-stored-order",
            "Row 0 is stored as [5, 1]: a writer keeps the stored order, it does not re-sort.",
            "layouts",
            model(unsorted, cu_seqlens=[0, 2, 3]) if form == "packed" else model(unsorted),
            {"payload": payload},
            op="encode",
        )
    text_forms = {"json": "json", "json-rows": "json"}
    for form, spec in (*text_forms.items(), ("msgpack", "msgpack"), ("arrow", "arrow-metadata")):
        properties: dict[str, Any] = {"detected": form}
        if form in ("json", "msgpack"):
            properties["first_key"] = "sampling_mask"
        book.file(f"{form}/encode.json", form).add(
            "encode-unsorted-rows",
            "Rows that are not ascending: the payload must not declare id_order ascending, keeps every "
            "support log-prob with its id, and is recognised from its first bytes (the version key first).",
            spec,
            unsorted_model if form != "json-rows" else model(unsorted),
            {"roundtrip": True, "properties": properties},
            op="encode",
        )
    for form, options, spec in (
        ("msgpack", {"layout": "compact"}, "msgpack"),
        ("arrow", {"layout": "compact"}, "9.4"),
        ("parquet", {"layout": "compact"}, "9.4"),
    ):
        book.file(f"{form}/encode.json", form).add(
            "encode-compact-canonicalizes",
            "The compact layout stores rows as sets: the writer canonicalizes (ids and support log-probs "
            "permuted together) and declares id_order ascending and the compact layout.",
            spec,
            unsorted_model,
            {"roundtrip": True, "properties": {"id_order": "ascending", "layout": "compact"}},
            op="encode",
            options=options,
        )

    # The optional operations of 3.6, for implementations that offer them (class "model operations").
    ops = book.file("model/operations.json", "model", "Concatenation, row slices and take (SPEC 3.6).")
    a = model([[1], [2, 3]], cu_seqlens=[0, 1, 2], vocab_size=10)
    b = model([[4]], vocab_size=10)
    ops.add(
        "concatenate",
        "Rows and segments one after another: cu = [0] ++ (cu_i[1:] + rows before).",
        "3.6",
        {"masks": [a, b]},
        ok(mask([[1], [2, 3], [4]], cu=[0, 1, 2, 3], vocab=10)),
        op="concatenate",
    )
    ops.add(
        "concatenate-adopts-vocab-size",
        "A mask without V adopts the others' V when its ids are below it.",
        "3.6",
        {"masks": [a, model([[5]])]},
        ok(mask([[1], [2, 3], [5]], cu=[0, 1, 2, 3], vocab=10)),
        op="concatenate",
    )
    four = model([[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], support_logprobs=[[-1.0], [-2.0], [-3.0], [-4.0]])
    ops.add(
        "slice-clips-segments",
        "M[1:3]: segments sharing a row are clipped, the empty segment at 2 is kept, companions follow.",
        "3.6",
        {"mask": four, "start": 1, "stop": 3},
        ok(mask([[2], [3]], cu=[0, 1, 1, 2], support_logprobs=[[-2.0], [-3.0]])),
        op="slice",
    )
    ops.add(
        "slice-whole-mask",
        "M[0:T] = M.",
        "3.6",
        {"mask": four, "start": 0, "stop": 4},
        ok(mask([[1], [2], [3], [4]], cu=[0, 2, 2, 4], support_logprobs=[[-1.0], [-2.0], [-3.0], [-4.0]])),
        op="slice",
    )
    ops.add(
        "slice-empty-keeps-empty-segments-at-its-position",
        "M[2:2] keeps only the empty segments sitting at row 2.",
        "3.6",
        {"mask": four, "start": 2, "stop": 2},
        ok(mask([], cu=[0, 0], support_logprobs=[])),
        op="slice",
    )
    ops.add(
        "take-reorders-and-repeats",
        "take([2, 0, 2]): segments in that order, repeats allowed.",
        "3.6",
        {"mask": four, "segments": [2, 0, 2]},
        ok(
            mask(
                [[3], [4], [1], [2], [3], [4]],
                cu=[0, 2, 4, 6],
                support_logprobs=[[-3.0], [-4.0], [-1.0], [-2.0], [-3.0], [-4.0]],
            )
        ),
        op="take",
    )
    ops.add(
        "take-negative-index",
        "An index in [-B, 0) counts from the end.",
        "3.6",
        {"mask": four, "segments": [-1]},
        ok(mask([[3], [4]], cu=[0, 2], support_logprobs=[[-3.0], [-4.0]])),
        op="take",
    )
    bad_ops = book.file("invalid/model.json", "model")
    op_cases: list[tuple[str, str, dict[str, Any], tuple[str, ...], str]] = [
        (
            "concatenate-different-vocab-sizes",
            "concatenate",
            {"masks": [a, model([[4]], vocab_size=12)]},
            ("E_SCHEMA",),
            "Every mask has the same V.",
        ),
        (
            "concatenate-adopted-vocab-size-too-small",
            "concatenate",
            {"masks": [model([[1]], vocab_size=5), model([[7]])]},
            ("E_RANGE",),
            "A mask without V adopts V = 5, and its id 7 is not below it.",
        ),
        (
            "concatenate-different-companions",
            "concatenate",
            {"masks": [model([[1]], sampled_token_ids=[1]), model([[2]])]},
            ("E_SCHEMA",),
            "Every mask carries the same companions.",
        ),
        (
            "concatenate-different-metadata",
            "concatenate",
            {"masks": [model([[1]], metadata={"top_k": 2}), model([[2]], metadata={"top_k": 3})]},
            ("E_SCHEMA",),
            "Every mask carries the same metadata.",
        ),
        ("take-index-out-of-range", "take", {"mask": four, "segments": [3]}, ("E_SEGMENTS",), "Segment 3 of B = 3."),
        (
            "take-negative-index-out-of-range",
            "take",
            {"mask": four, "segments": [-4]},
            ("E_SEGMENTS",),
            "Segment -4 of B = 3.",
        ),
    ]
    for slug, op, payload, codes, why in op_cases:
        bad_ops.add(slug, why, "3.6", payload, err(*codes), op=op)

    # Compact words are grouped by width (12.2): two blocks of width 2 around a block of width 1.
    deltas = [3, 0, 2, 1] * 8 + [1, 0] * 16 + [2, 3, 0, 0] * 8
    row, prev = [], -1
    for d in deltas:
        prev += d + 1
        row.append(prev)
    data = compact_bytes([row])
    assert data[1:4] == bytes([2, 1, 2])  # block widths
    book.file("compact/decode.json", "compact").add(
        "two-blocks-of-one-width",
        "Blocks of widths 2, 1, 2: the words of both width-2 blocks are interleaved (word 0 of each, then "
        "word 1 of each), not stored block by block.",
        "12.2",
        _compact([row]),
        ok(mask([row])),
    )
    encode = book.file("compact/encode.json", "compact")
    encode.add(
        "encode-two-blocks-of-one-width",
        "The writer groups words by width: exact bytes for blocks of widths 2, 1, 2.",
        "12.2",
        model([row]),
        {"payload": {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}}},
        op="encode",
    )
    canonical = compact_bytes([[1, 5, 7]])
    encode.add(
        "encode-unsorted-row",
        "A row stored as [7, 1, 5] is written as the set {1, 5, 7}: the layout holds canonical rows.",
        "12.4",
        model([[7, 1, 5]]),
        {"payload": {"compact": {"dtype": "uint8", "shape": [len(canonical)], "hex": canonical.hex()}}},
        op="encode",
    )

    # JSON text: UTF-8 everywhere (11.1), float32 range in fields where infinity is not otherwise an error.
    bad_json = book.file("invalid/json.json", "json")
    bad_json.add(
        "invalid-utf8-in-string",
        "Byte ff inside a metadata string: the syntax is valid, the text is not UTF-8 (no replacement characters).",
        "json-rules",
        {"hex": b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "v\xffllm"}}'.hex()},
        err("E_ENCODING"),
    )
    for slug, field, text in (
        ("sampled-logprob-beyond-float32", "sampled_logprobs", '"rows": [[1]], "sampled_logprobs": [-1e39]'),
        ("support-logprob-beyond-float32", "support_logprobs", '"rows": [[1, 2]], "support_logprobs": [[-0.5, -1e39]]'),
    ):
        bad_json.add(
            slug,
            f"-1e39 in {field}: finite in JSON, beyond float32 (not rounded to -infinity).",
            "json-rules",
            {"text": '{"sampling_mask": 1, ' + text + "}"},
            err("E_RANGE"),
        )
    book.file("invalid/base64.json", "base64").add(
        "invalid-utf8-in-ignored-key",
        "Byte ff in a string under a key the reader ignores: still not UTF-8.",
        "json-rules",
        {"hex": b'{"data": "AQAAAA==", "shape": [1, 1], "dtype": "int32", "note": "\xff"}'.hex()},
        err("E_ENCODING"),
    )
    book.file("invalid/json-rows.json", "json-rows").add(
        "nesting-beyond-limit-in-rows",
        "17 nested lists: E_LIMIT from a reader that bounds the depth while parsing, E_DTYPE (a list "
        "inside a row) from one that parses first.",
        "json-rules",
        {"text": "[" * 16 + "1" + "]" * 16},
        err("E_LIMIT", "E_DTYPE"),
    )

    # Rows-only writers refuse what they would lose (11.3, 11.4): E_SCHEMA.
    for form, slug, lossy, spec in (
        ("json-rows", "encode-would-lose-vocab-size", model([[1]], vocab_size=10), "11.3"),
        ("json-rows", "encode-would-lose-segments", model([[1], [2]], cu_seqlens=[0, 1, 2]), "11.3"),
        ("base64", "encode-would-lose-companions", model([[1]], sampled_token_ids=[1]), "11.4"),
    ):
        book.file(f"invalid/{form}.json", form).add(
            slug,
            f"A rows-only writer never drops information ({slug.rsplit('-lose-', 1)[1]}) silently: it refuses "
            "with E_SCHEMA.",
            spec,
            lossy,
            err("E_SCHEMA"),
            op="encode",
        )

    # nil / null under an optional key reads as absent (10.1, 11.2).
    book.file("msgpack/decode.json", "msgpack").add(
        "nil-optional-keys",
        "nil under an optional key (layout, vocab_size, id_order, num_rows, nnz, cu_seqlens, metadata) reads as absent.",
        "msgpack",
        _mhex(
            {
                "layout": None,
                "vocab_size": None,
                "id_order": None,
                "num_rows": None,
                "nnz": None,
                "ids": _marray([1, 5, 7], "int32"),
                "offsets": _marray([0, 2, 2, 3], "int64"),
                "cu_seqlens": None,
                "metadata": None,
            }
        ),
        ok(mask(ISSUE_ROWS)),
    )
    book.file("json/decode.json", "json").add(
        "null-optional-keys",
        "null under an optional key (vocab_size, id_order, cu_seqlens, companions, metadata) reads as absent.",
        "json",
        {
            "text": '{"sampling_mask": 1, "vocab_size": null, "id_order": null, "cu_seqlens": null, '
            '"rows": [[1, 5], [], [7]], "sampled_token_ids": null, "metadata": null}'
        },
        ok(mask(ISSUE_ROWS)),
    )

    # Arrow: strict decimal metadata (9.2), count column types (9.4), compressed-body bound (8.4).
    bins = _arrow_source()
    bad_arrow = book.file("invalid/arrow.json", "arrow")
    for slug, key, why, codes, spec in (
        (
            "vocab-size-plus-sign",
            "vocab-size-plus-sign",
            'vocab_size "+10": decimal digits have no sign.',
            ("E_SCHEMA",),
            "9.2",
        ),
        (
            "vocab-size-leading-zero",
            "vocab-size-leading-zero",
            'vocab_size "010": no leading zero.',
            ("E_SCHEMA",),
            "9.2",
        ),
        (
            "compact-count-column-int32",
            "compact-num-rows-int32",
            "sampling_mask_num_rows is int64; an int32 column is E_DTYPE.",
            ("E_DTYPE",),
            "9.4",
        ),
        (
            "compressed-length-beyond-limit",
            "compressed-length-bomb",
            "An LZ4 buffer whose prefix declares 2**40 uncompressed bytes: E_LIMIT before decompressing "
            "(a reader that decompresses first sees a length mismatch instead).",
            ("E_LIMIT",),
            "8.4",
        ),
    ):
        bad_arrow.add(slug, why, spec, {"hex": bins[f"arrow.{key}"].hex()}, err(*codes))
    book.file("invalid/arrows.json", "arrows").add(
        "compressed-length-beyond-limit",
        "A stream batch whose LZ4 buffer declares 2**40 uncompressed bytes: E_LIMIT before decompressing.",
        "8.4",
        {"hex": bins["arrows.compressed-length-bomb"].hex()},
        err("E_LIMIT"),
    )


# ------------------------------------------------------------------------------------------ book
#: Builders of the suite, one per form; :func:`build` runs them in this order.
# ------------------------------------------------------------------------------------------ v1.2
def _f32_mask_bytes(rows: list[list[int]], segments: int, per_row_companions: int, support: bool) -> int:
    """SPEC 8.1: what a mask takes, 4 bytes per companion value (support_logprobs: one per id)."""
    nnz = sum(map(len, rows))
    return 4 * nnz + 8 * (len(rows) + 1) + 8 * (segments + 1) + 4 * per_row_companions * len(rows) + 4 * nnz * support


def v1_2_cases(book: Book) -> None:
    """Cases added with spec 1.2: the two reference bugs found by generated cases, and one case (or
    two) for each choice 1.1 left to guess (Change log, 1.2)."""
    bins = _arrow_source()
    bad_model = book.file("invalid/model.json", "model")
    ops = book.file("model/operations.json", "model")
    # A null among integers is E_DTYPE, never a crash (section 7, 4.6).
    bad_model.add(
        "cu-seqlens-null-entry",
        "A null inside cu_seqlens is not an integer: E_DTYPE.",
        "segments",
        {"rows": [], "cu_seqlens": [None, 0]},
        err("E_DTYPE"),
        op="validate",
    )
    bad_model.add(
        "sampled-id-null",
        "A null inside sampled_token_ids is not an integer: E_DTYPE.",
        "companions",
        model([[1]], sampled_token_ids=[None]),
        err("E_DTYPE"),
        op="validate",
    )
    book.file("invalid/ragged.json", "ragged").add(
        "ids-null-value",
        "A null among the values of a typed int32 array: E_DTYPE.",
        "layouts",
        {"ids": {"dtype": "int32", "shape": [2], "values": [1, None]}, "offsets": arr([0, 2], "int64")},
        err("E_DTYPE"),
    )

    # 3.6: slice bounds, zero masks, "the same metadata", take of no segment.
    four = model([[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], vocab_size=10)
    for slug, start, stop, why in (
        ("slice-negative-start", -1, 2, "A negative bound is E_RANGE: it is not counted from the end."),
        ("slice-reversed-bounds", 3, 1, "start > stop is E_RANGE: never an empty slice."),
        ("slice-stop-beyond-rows", 2, 5, "A bound beyond T is E_RANGE: it is not clipped."),
    ):
        bad_model.add(slug, why, "3.6", {"mask": four, "start": start, "stop": stop}, err("E_RANGE"), op="slice")
    bad_model.add(
        "concatenate-zero-masks",
        "Concatenating no mask at all is E_SCHEMA: nothing gives the result its V, companions, metadata.",
        "3.6",
        {"masks": []},
        err("E_SCHEMA"),
        op="concatenate",
    )
    bad_model.add(
        "concatenate-boolean-against-integer-metadata",
        "true and 1 are different metadata values (3.5: a boolean is not a number): E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]], metadata={"flag": 1}), model([[2]], metadata={"flag": True})]},
        err("E_SCHEMA"),
        op="concatenate",
    )
    ops.add(
        "concatenate-metadata-equal-by-value",
        "4 and 4.0 are the same metadata (3.5: numbers compare by value); the first mask's values are kept.",
        "3.6",
        {"masks": [model([[1]], metadata={"seed": 4}), model([[2]], metadata={"seed": 4.0})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"seed": 4})),
        op="concatenate",
    )
    ops.add(
        "concatenate-one-mask",
        "Concatenating one mask gives that mask.",
        "3.6",
        {"masks": [four]},
        ok(mask([[1], [2], [3], [4]], cu=[0, 2, 2, 4], vocab=10)),
        op="concatenate",
    )
    ops.add(
        "take-no-segment",
        "take([]) gives T = 0 and B = 0, with the mask's V.",
        "3.6",
        {"mask": four, "segments": []},
        ok(mask([], cu=[0], vocab=10)),
        op="take",
    )
    ops.add(
        "slice-at-the-end",
        "M[T:T] is valid: no row, and the segments that are empty at T.",
        "3.6",
        {"mask": four, "start": 4, "stop": 4},
        ok(mask([], cu=[0], vocab=10)),
        op="slice",
    )

    # 4: an absent required array is E_SCHEMA (ids, the dense array, the rows of a document).
    book.file("invalid/counts.json", "counts").add(
        "ids-missing",
        "A counts payload without ids: a missing required array is E_SCHEMA (section 4).",
        "layouts",
        {"counts": arr([0], "int32")},
        err("E_SCHEMA"),
    )
    book.file("invalid/msgpack.json", "msgpack").add(
        "ids-missing",
        "A ragged envelope without ids: a missing required array is E_SCHEMA (section 4).",
        "msgpack",
        _mhex({"layout": "ragged", "offsets": _marray([0], "int64")}),
        err("E_SCHEMA"),
    )

    # 8.1: the bytes a mask takes, 4 per companion value; 8.4: Arrow batches counted from their nodes.
    every = roundtrip_model()
    rows_every = every["rows"]
    full = _f32_mask_bytes(rows_every, 2, 3, True)
    bad_model.add(
        "companions-over-max-bytes",
        f"Every companion: the mask takes {full} bytes (4 per companion value, 8.1); max_bytes {full - 1} is E_LIMIT.",
        "limits",
        every,
        err("E_LIMIT"),
        op="validate",
        limits={"max_bytes": full - 1},
    )
    book.file("model/validate.json", "model").add(
        "companions-at-max-bytes",
        f"Every companion: the mask takes exactly {full} bytes (8.1), which max_bytes {full} allows.",
        "limits",
        every,
        {"valid": True},
        op="validate",
        limits={"max_bytes": full},
    )
    plain = _f32_mask_bytes(ISSUE_ROWS, 2, 0, False)
    book.file("invalid/ragged.json", "ragged").add(
        "segments-over-max-bytes",
        f"ids, offsets and cu_seqlens of B = 2 take {plain} bytes (8.1); max_bytes {plain - 1} is E_LIMIT.",
        "limits",
        {"ids": arr([5, 1, 7]), "offsets": arr([0, 2, 2, 3], "int64"), "cu_seqlens": arr([0, 2, 3], "int64")},
        err("E_LIMIT"),
        limits={"max_bytes": plain - 1},
    )
    sample = companions_mask()
    arrow_bytes = _f32_mask_bytes(sample["rows"], 1, 3, True)
    for form, spec in (("arrow", "8.4"), ("parquet", "8.4")):
        book.file(f"invalid/{form}.json", form).add(
            "companions-over-max-bytes",
            f"A batch of every companion produces at least {arrow_bytes} bytes (8.1 from its declared "
            f"counts, 8.4); max_bytes {arrow_bytes - 1} is E_LIMIT before anything is read.",
            spec,
            {"hex": bins[f"{form}.companions"].hex()},
            err("E_LIMIT"),
            limits={"max_bytes": arrow_bytes - 1},
        )

    # 9.5: the leading magic of an IPC file (pyarrow checks only the trailing one).
    issue = bins["arrow.issue-example"]
    bad_arrow = book.file("invalid/arrow.json", "arrow")
    bad_arrow.add(
        "leading-magic-damaged",
        "An IPC file whose first byte is not the A of ARROW1 (the trailing magic intact): E_ENCODING.",
        "arrow-reading",
        {"hex": (b"B" + issue[1:]).hex()},
        err("E_ENCODING"),
    )
    bad_arrow.add(
        "leading-magic-last-byte",
        "An IPC file starting ARROW2 (the trailing magic intact): E_ENCODING.",
        "arrow-reading",
        {"hex": (issue[:5] + b"2" + issue[6:]).hex()},
        err("E_ENCODING"),
    )

    # 9.x: zero-length buffers read nothing, whatever their offset; user keys of any bytes are ignored.
    pattern = np.array([0, 0, 0, 12], "<i8").tobytes()  # validity buffer (empty), then the offsets
    for form, offset in (("arrow", 1 << 40), ("arrows", 1000)):
        data = bins[f"{form}.issue-example"]
        assert data.count(pattern) == 1, form
        book.file(f"{form}/decode.json", form).add(
            "zero-length-buffer-past-body",
            f"A buffer of length 0 whose offset ({offset}) lies past the message body reads nothing: valid.",
            "arrow-reading",
            {"hex": data.replace(pattern, np.array([offset, 0, 0, 12], "<i8").tobytes()).hex()},
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        )
    key = b"sampling_mask.id_order"
    for form in ("arrow", "arrows"):
        data = bins[f"{form}.issue-example"]
        book.file(f"{form}/decode.json", form).add(
            "user-key-not-utf8",
            "A schema-metadata key that is not UTF-8 and does not start with sampling_mask. is the "
            "user's: ignored, whatever its bytes (9.2).",
            "arrow-metadata",
            {"hex": data.replace(key, b"\xff\xfe" + key[2:]).hex()},
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        )
    producer = b"sampling_mask.metadata.producer"
    bad_arrow.add(
        "metadata-key-not-utf8",
        "A metadata entry's key sampling_mask.metadata.<key> whose bytes are not UTF-8: E_ENCODING (9.2).",
        "arrow-metadata",
        {"hex": bins["arrow.companions"].replace(producer, producer[:-2] + b"\xff\xfe").hex()},
        err("E_ENCODING"),
    )

    # 9.4: writers name the layouts by their schema-metadata values, list and compact.
    for form, layout in (("arrows", "compact"), ("arrow", "list"), ("parquet", "list")):
        book.file(f"{form}/encode.json", form).add(
            f"encode-layout-option-{layout}",
            f"The encode option layout = {layout} (the sampling_mask.layout value, 9.4) selects that layout.",
            "9.4",
            roundtrip_model(),
            {"roundtrip": True, "properties": {"layout": layout}},
            op="encode",
            options={"layout": layout},
        )

    # 10.1: nil inside an ARRAY map is that entry missing.
    ragged = {"layout": "ragged", "vocab_size": 10, "offsets": _marray([0, 2, 2, 3], "int64")}
    ids = _marray([5, 1, 7], "int32")
    bad_mp = book.file("invalid/msgpack.json", "msgpack")
    for entry, code in (("dtype", "E_DTYPE"), ("data", "E_SCHEMA")):
        bad_mp.add(
            f"array-{entry}-nil",
            f"nil under an ARRAY's {entry} is that entry missing, answered as a wrong one: {code} (10.1).",
            "msgpack",
            _mhex({**ragged, "ids": {**ids, entry: None}}),
            err(code),
        )
    book.file("msgpack/decode.json", "msgpack").add(
        "array-unknown-key-nil",
        "nil under an ARRAY key the reader does not know (pad) is ignored like the key itself (10.1).",
        "msgpack",
        _mhex({**ragged, "ids": {"dtype": "int32", "shape": [3], "pad": None, "data": ids["data"]}}),
        ok(mask(ISSUE_ROWS, vocab=10)),
    )

    # 11.3 / 11.4: a rows-only writer refuses B = 0 (it would read back as one empty segment).
    for form in ("json-rows", "base64"):
        book.file(f"invalid/{form}.json", form).add(
            "encode-zero-segments",
            "B = 0 (cu_seqlens [0]): the rows-only form reads back as one segment, so the writer refuses.",
            "json",
            model([], cu_seqlens=[0]),
            err("E_SCHEMA"),
            op="encode",
        )

    # 13.1 / 13.2: the caller's temperature replaces the companion; a NaN that reaches a scored row is E_RANGE.
    z = np.round(np.random.default_rng(20261201).normal(0.0, 3.0, size=(2, 5)), 3)
    rows, targets = [[0, 2, 4], [1, 3]], [2, 3]
    logits = arr(z.tolist(), "float64")
    score = book.file("scorer/score.json", "scorer")
    base = {"targets": arr(targets, "int64"), "empty_rows": "full", "logits": logits}
    score.add(
        "temperature-from-companion",
        "No temperature in the request: each row's temperature companion scales it (13.1).",
        "scoring",
        {"mask": model(rows, temperature=[0.5, 2.0]), **base},
        {"scores": stable_scores(float64_scores(z, rows, targets, [0.5, 2.0])), "tolerance": 1e-6},
        op="score",
    )
    score.add(
        "caller-temperature-replaces-nan-companion",
        "The caller's temperature replaces a companion holding NaN (unknown) on every row (13.1).",
        "scoring",
        {"mask": model(rows, temperature=["NaN", 2.0]), **base, "temperature": 0.75},
        {"scores": stable_scores(float64_scores(z, rows, targets, 0.75)), "tolerance": 1e-6},
        op="score",
    )
    book.file("invalid/scorer.json", "scorer").add(
        "nan-companion-temperature-without-caller-value",
        "A NaN temperature companion on a scored row and no temperature from the caller: E_RANGE (13.2), not 1.",
        "scoring-policies",
        {"mask": model(rows, temperature=["NaN", 2.0]), **base},
        err("E_RANGE"),
        op="score",
    )


def v1_2_teeth_cases(book: Book) -> None:
    """Second angles for the MUSTs of 3.6, 4, 8.1-8.4 and 13.2 (spec 1.2): each case fails a planted
    bug that one other case fails too (tests/test_conformance_teeth.py plants them)."""
    bad_model = book.file("invalid/model.json", "model")
    ops = book.file("model/operations.json", "model")
    # 3.6 concatenation: V, companions, segments.
    bad_model.add(
        "concatenate-vocab-size-disagrees-after-one-without",
        "The masks that carry V must agree on it, whatever comes first: [none, 10, 12] is E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]]), model([[2]], vocab_size=10), model([[3]], vocab_size=12)]},
        err("E_SCHEMA"),
        op="concatenate",
    )
    bad_model.add(
        "concatenate-adopted-vocab-size-first-mask-without",
        "The first mask has no V and adopts the second's V = 5: its id 7 is not below it, E_RANGE.",
        "3.6",
        {"masks": [model([[7]]), model([[1]], vocab_size=5)]},
        err("E_RANGE"),
        op="concatenate",
    )
    ops.add(
        "concatenate-adopts-vocab-size-first-without",
        "The first mask has no V: the result carries the V of the others.",
        "3.6",
        {"masks": [model([[2]]), model([[1]], vocab_size=10)]},
        ok(mask([[2], [1]], cu=[0, 1, 2], vocab=10)),
        op="concatenate",
    )
    bad_model.add(
        "concatenate-companions-same-count-different-names",
        "One companion each, but not the same one (temperature, sampled_logprobs): E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]], temperature=[1.0]), model([[2]], sampled_logprobs=[-0.5])]},
        err("E_SCHEMA"),
        op="concatenate",
    )
    ops.add(
        "concatenate-with-empty-parts",
        "A mask of one empty segment and one of no segment are joined too: cu = [0, 1, 2, 2, 3].",
        "3.6",
        {
            "masks": [
                model([[1], [2, 3]], cu_seqlens=[0, 1, 2], vocab_size=10),
                model([], cu_seqlens=[0, 0], vocab_size=10),
                model([], cu_seqlens=[0], vocab_size=10),
                model([[4]], vocab_size=10),
            ]
        },
        ok(mask([[1], [2, 3], [4]], cu=[0, 1, 2, 2, 3], vocab=10)),
        op="concatenate",
    )
    four = model([[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], vocab_size=10)
    ops.add(
        "take-repeats-one-segment",
        "take([2, 2]): a segment taken twice appears twice.",
        "3.6",
        {"mask": four, "segments": [2, 2]},
        ok(mask([[3], [4], [3], [4]], cu=[0, 2, 4], vocab=10)),
        op="take",
    )
    ops.add(
        "take-negative-and-positive",
        "take([-1, 0]): -1 is the last segment (B - 1), then segment 0.",
        "3.6",
        {"mask": four, "segments": [-1, 0]},
        ok(mask([[3], [4], [1], [2]], cu=[0, 2, 4], vocab=10)),
        op="take",
    )

    # 8.1: a size at its limit is within it.
    book.file("model/validate.json", "model").add(
        "rows-at-limit",
        "T = max_rows is within the limit (limits are inclusive maxima).",
        "limits",
        model([[1], [2]]),
        {"valid": True},
        op="validate",
        limits={"max_rows": 2},
    )
    book.file("ragged/decode.json", "ragged").add(
        "nnz-and-width-at-limit",
        "nnz = max_nnz and a row as wide as max_width are within the limits.",
        "limits",
        {"ids": arr([1, 5, 7]), "offsets": arr([0, 2, 2, 3], "int64")},
        ok(mask(ISSUE_ROWS)),
        limits={"max_nnz": 3, "max_width": 2},
    )
    # 8.1: companion bytes in the layout forms too.
    full = _f32_mask_bytes([[3, 5, 9], []], 1, 1, True)
    book.file("invalid/ragged.json", "ragged").add(
        "companions-over-max-bytes",
        f"ids, offsets, temperature and support_logprobs take {full} bytes (8.1); max_bytes {full - 1} is E_LIMIT.",
        "limits",
        {
            "ids": arr([3, 5, 9]),
            "offsets": arr([0, 3, 3], "int64"),
            "temperature": arr([0.5, 1.0], "float32"),
            "support_logprobs": arr([-1.0, -2.0, -3.0], "float32"),
        },
        err("E_LIMIT"),
        limits={"max_bytes": full - 1},
    )

    # 13.2: second angles.
    z = np.round(np.random.default_rng(20261202).normal(0.0, 2.0, size=(2, 6)), 3)
    logits = arr(z.tolist(), "float64")
    bad_score = book.file("invalid/scorer.json", "scorer")
    bad_score.add(
        "minus-one-target-on-non-empty-row-excluded",
        "A target of -1 on a non-empty row is E_RANGE under empty_rows = exclude too.",
        "scoring-policies",
        {"mask": model([[0, 1], []]), "targets": arr([-1, 2], "int64"), "empty_rows": "exclude", "logits": logits},
        err("E_RANGE"),
        op="score",
    )
    h = np.round(np.random.default_rng(20261203).normal(0.0, 1.0, size=(2, 3)), 3)
    w = np.round(np.random.default_rng(20261204).normal(0.0, 1.0, size=(6, 3)), 3)
    hidden = {"hidden": arr(h.tolist(), "float64"), "weight": arr(w.tolist(), "float64")}
    bad_score.add(
        "target-not-in-support-hidden",
        "From hidden states too, a target outside its row's support is E_MISSING_SAMPLED by default.",
        "scoring-policies",
        {"mask": model([[0, 1], [2, 3]]), "targets": arr([0, 5], "int64"), "temperature": 1.0, **hidden},
        err("E_MISSING_SAMPLED"),
        op="score",
    )
    bad_score.add(
        "support-id-beyond-weight-rows",
        "An id of the mask at or beyond V' (the rows of the lm-head weight) is E_RANGE.",
        "scoring-policies",
        {
            "mask": model([[0, 6]]),
            "targets": arr([0], "int64"),
            "temperature": 1.0,
            "hidden": arr(h[:1].tolist(), "float64"),
            "weight": hidden["weight"],
        },
        err("E_RANGE"),
        op="score",
    )
    score = book.file("scorer/score.json", "scorer")
    padded = np.concatenate([z, np.full((2, 2), 0.25)], axis=1)  # V' = 8 > V = 6, finite padding
    rows, targets = [[0, 3], [1, 2]], [3, 5]
    score.add(
        "missing-target-full-over-padded-vocabulary",
        "missing_target = full scores over all V' = 8 logits, padded columns included, not over V = 6.",
        "scoring-policies",
        {
            "mask": model(rows, vocab_size=6),
            "targets": arr(targets, "int64"),
            "temperature": 1.0,
            "empty_rows": "full",
            "missing_target": "full",
            "logits": arr(padded.tolist(), "float64"),
        },
        {
            "scores": stable_scores(float64_scores(padded, rows, targets, 1.0, "full", "full")),
            "tolerance": 1e-6,
        },
        op="score",
        level=REC,
    )
    zh = h @ w.T
    score.add(
        "empty-row-excluded-hidden",
        "With empty_rows = exclude an empty row has no score (null), from hidden states too.",
        "scoring-policies",
        {
            "mask": model([[0, 4], []]),
            "targets": arr([4, 1], "int64"),
            "temperature": 1.0,
            "empty_rows": "exclude",
            **hidden,
        },
        {
            "scores": stable_scores(float64_scores(zh, [[0, 4], []], [4, 1], 1.0, "exclude")),
            "tolerance": 1e-6,
        },
        op="score",
        level=REC,
    )


def _ipc_blocks(data: bytes) -> tuple[int, list[int]]:
    """Where the footer of IPC file ``data`` starts and the footer positions of its record-batch
    Blocks (struct Block {offset: long, metaDataLength: int, pad, bodyLength: long}), found as the
    24-byte runs that name a message inside the file (the generator's own reading, for forging)."""
    import struct

    footer_length = struct.unpack_from("<i", data, len(data) - 10)[0]
    start = len(data) - 10 - footer_length
    found = []
    for at in range(start, len(data) - 10 - 24 + 1):
        offset, meta, pad, body = struct.unpack_from("<qiiq", data, at)
        if 8 <= offset < start and 0 < meta and meta % 8 == 0 and pad == 0 and body >= 0:
            if offset + meta + body <= start and data[offset : offset + 4] == b"\xff\xff\xff\xff":
                found.append(at)
    return start, found


def v1_3_cases(book: Book) -> None:
    """Cases added with spec 1.3: one or more for each of the twelve points it settles (Change log,
    1.3), and cases written from the MUSTs of 3.6, 6, 8.1, 8.4, 9.3, 10.1 and 11 that no case
    tested in both directions (Appendix A lists a case next to each)."""
    bins = _arrow_source()
    bad_model = book.file("invalid/model.json", "model")
    ops = book.file("model/operations.json", "model")
    four = model([[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], vocab_size=10)

    # (1) 4, 10.1: a missing or nil ARRAY entry has the entry's code; no offsets and no counts is E_SCHEMA.
    ragged = {"layout": "ragged", "vocab_size": 10, "offsets": _marray([0, 2, 2, 3], "int64")}
    ids = _marray([5, 1, 7], "int32")
    bad_mp = book.file("invalid/msgpack.json", "msgpack")
    bad_mp.add(
        "array-shape-nil",
        "nil under an ARRAY's shape is that entry missing, answered as a wrong shape: E_SHAPE (10.1), not E_SCHEMA.",
        "msgpack",
        _mhex({**ragged, "ids": {**ids, "shape": None}}),
        err("E_SHAPE"),
    )
    for entry, code in (("dtype", "E_DTYPE"), ("shape", "E_SHAPE"), ("data", "E_SCHEMA")):
        bad_mp.add(
            f"array-{entry}-missing",
            f"An ARRAY map without its {entry} entry is answered as a wrong {entry}: {code} (10.1).",
            "msgpack",
            _mhex({**ragged, "ids": {k: v for k, v in ids.items() if k != entry}}),
            err(code),
        )
    bad_mp.add(
        "offsets-and-counts-missing",
        "A ragged envelope with ids but neither offsets nor counts: a missing required array, E_SCHEMA (4, "
        "10.1), never E_OFFSETS.",
        "msgpack",
        _mhex({"layout": "ragged", "vocab_size": 10, "ids": ids}),
        err("E_SCHEMA"),
    )
    bad_mp.add(
        "offsets-nil-counts-missing",
        "offsets: nil and no counts: nil is a missing key, so E_SCHEMA (10.1), never E_OFFSETS.",
        "msgpack",
        _mhex({"layout": "ragged", "vocab_size": 10, "ids": ids, "offsets": None}),
        err("E_SCHEMA"),
    )
    book.file("invalid/ragged.json", "ragged").add(
        "offsets-and-counts-missing",
        "A ragged payload with ids and no offsets: a missing required array is E_SCHEMA (4), never E_OFFSETS.",
        "layouts",
        {"ids": arr([5, 1, 7])},
        err("E_SCHEMA"),
    )

    # (2) 5.2: an integral float is no integer; top_k 4.0 is E_SCHEMA.
    book.file("invalid/json.json", "json").add(
        "metadata-top-k-integral-float",
        "top_k is an integer (5.2): 4.0, a number with a fraction, is a float and E_SCHEMA, though equal to 4.",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"top_k": 4.0})},
        err("E_SCHEMA"),
    )
    bad_mp.add(
        "metadata-top-k-integral-float",
        "top_k is an integer (5.2): a msgpack float 4.0 is E_SCHEMA, though equal to 4.",
        "metadata",
        _mhex({**ragged, "ids": ids, "metadata": {"top_k": 4.0}}),
        err("E_SCHEMA"),
    )
    book.file("json/decode.json", "json").add(
        "metadata-top-k-integer",
        "top_k 4, an integer, is valid metadata (5.2).",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"top_k": 4})},
        ok(mask([[1]], metadata={"top_k": 4})),
    )

    # (3) 3.6: the result keeps the first mask's metadata values, kinds included.
    ops.add(
        "concatenate-keeps-first-metadata-kind",
        "{seed: 4.0} then {seed: 4}: the same metadata (3.5), and the result keeps the first mask's value, "
        "the float 4.0 (3.6; the kind is compared).",
        "3.6",
        {"masks": [model([[1]], metadata={"seed": 4.0}), model([[2]], metadata={"seed": 4})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"seed": 4.0})),
        op="concatenate",
    )
    ops.add(
        "concatenate-keeps-first-metadata-of-three",
        "Three masks, {seed: 1} {seed: 1.0} {seed: 1.0}: the result keeps the first one's integer 1, not the last's float.",
        "3.6",
        {
            "masks": [
                model([[1]], metadata={"seed": 1}),
                model([[2]], metadata={"seed": 1.0}),
                model([[3]], metadata={"seed": 1.0}),
            ]
        },
        ok(mask([[1], [2], [3]], cu=[0, 1, 2, 3], metadata={"seed": 1})),
        op="concatenate",
    )
    nan = {"float": "NaN"}
    ops.add(
        "concatenate-metadata-nan-equals-nan",
        'NaN metadata values are equal (3.5: NaN equals NaN; a model mask spells NaN {"float": "NaN"} as 11.2 does).',
        "3.6",
        {"masks": [model([[1]], metadata={"x": nan}), model([[2]], metadata={"x": nan})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"x": nan})),
        op="concatenate",
    )
    bad_model.add(
        "concatenate-metadata-nan-against-number",
        "NaN and 1.0 are different metadata values: E_SCHEMA (3.5, 3.6).",
        "3.6",
        {"masks": [model([[1]], metadata={"x": nan}), model([[2]], metadata={"x": 1.0})]},
        err("E_SCHEMA"),
        op="concatenate",
    )

    # (4) 10.1: offsets of either width are valid default output; a reader takes both.
    book.file("msgpack/decode.json", "msgpack").add(
        "ragged-int64-offsets-that-fit-int32",
        "int64 offsets and cu_seqlens whose values fit int32 are valid (1.0 allows either width; int32 is no rule).",
        "msgpack",
        _mhex({**ragged, "ids": ids, "cu_seqlens": _marray([0, 2, 3], "int64")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )

    # (5), (7) 8.4: the compact layout's bound comes from its count columns, before any blob.
    many = MANY_EMPTY_ROWS
    produced = 8 * (many + 1) + 8 * 2  # 8.1: no ids, T + 1 offsets, B + 1 = 2 cu_seqlens entries
    for form in ("arrow", "parquet"):
        book.file(f"invalid/{form}.json", form).add(
            "compact-many-empty-rows-over-max-bytes",
            f"A compact batch of one segment of {many} empty rows produces {produced} bytes (8.1, T from the "
            f"count column, 8.4) though it stores about {many} bytes: max_bytes {produced // 2} is E_LIMIT.",
            "8.4",
            {"hex": bins[f"{form}.compact-many-empty-rows"].hex()},
            err("E_LIMIT"),
            limits={"max_bytes": produced // 2},
        )
    # (12) 8.4: a Parquet chunk is found by position; path_in_schema changes nothing.
    needle = b"\x58\x0dsampling_mask"  # list header (5 strings), then the first, "sampling_mask"
    for source in ("parquet.issue-example", "parquet.many-empty-rows"):
        assert bins[source].count(needle) == 1, source
    book.file("parquet/decode.json", "parquet").add(
        "path-in-schema-not-utf8",
        "ColumnMetaData.path_in_schema[0] of the mask's chunk is not UTF-8 (\\x80ampling_mask), the schema "
        "intact: the chunk belongs to the schema leaf at its position, and the path is not read (8.4).",
        "8.4",
        {"hex": bins["parquet.issue-example"].replace(needle, b"\x58\x0d\x80ampling_mask").hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    bad_pq = book.file("invalid/parquet.json", "parquet")
    bad_pq.add(
        "many-empty-rows-over-max-bytes",
        f"A row group of {many} empty rows declares {many} values in the mask's leaf chunk: T bounded by "
        f"them, 8.1 gives about {produced} bytes; max_bytes {produced // 2} is E_LIMIT (8.4).",
        "8.4",
        {"hex": bins["parquet.many-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": produced // 2},
    )
    bad_pq.add(
        "path-in-schema-wrong-name-still-bounded",
        "The mask's chunk names another path (xampling_mask, valid UTF-8): it is still the mask's chunk by "
        f"position, and its {many} values bound the row group: E_LIMIT under max_bytes {produced // 2} (8.4).",
        "8.4",
        {"hex": bins["parquet.many-empty-rows"].replace(needle, b"\x58\x0dxampling_mask").hex()},
        err("E_LIMIT"),
        limits={"max_bytes": produced // 2},
    )

    # (6) 8.1, 9.5: the stored buffers are not what a batch produces.
    for form in ("arrow", "arrows"):
        book.file(f"{form}/decode.json", form).add(
            "large-user-column-within-max-bytes",
            "A batch whose body stores 8 KiB of a user column produces the mask of section 14 (68 bytes, 8.1): "
            "max_bytes 6000 is enough; the stored buffers are not counted (8.1, 9.5).",
            "arrow-reading",
            {"hex": bins[f"{form}.large-user-column"].hex()},
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
            limits={"max_bytes": 6000},
        )

    # (8) 9.3: a file of no batch is the empty mask, its V from the schema.
    book.file("arrows/decode.json", "arrows").add(
        "no-batches",
        "A stream with a schema and no record batch holds T = 0 and B = 0, with the schema's V (9.3): "
        "not the E_SCHEMA of concatenating zero masks (3.6).",
        "arrow-batches",
        {"hex": bins["arrows.no-batches"].hex()},
        ok(mask([], cu=[0], vocab=10)),
    )
    book.file("parquet/decode.json", "parquet").add(
        "no-rows",
        "A Parquet file of zero rows holds T = 0 and B = 0, with the schema's V (9.3).",
        "arrow-batches",
        {"hex": bins["parquet.no-rows"].hex()},
        ok(mask([], cu=[0], vocab=10)),
    )

    # (9), (10) 3.6: both bounds given; negative bounds are never counted from the end.
    for slug, bounds, why in (
        ("slice-stop-omitted", {"start": 0}, "The stop bound omitted: the bounds are integers, E_SCHEMA, never T."),
        ("slice-start-omitted", {"stop": 2}, "The start bound omitted: E_SCHEMA, never 0."),
        ("slice-stop-null", {"start": 0, "stop": None}, "A null bound is no integer: E_SCHEMA."),
    ):
        bad_model.add(slug, why, "3.6", {"mask": four, **bounds}, err("E_SCHEMA"), op="slice")
    for slug, start, stop, why in (
        (
            "slice-negative-start-valid-from-the-end",
            -2,
            4,
            "M[-2:4] of 4 rows is E_RANGE: counted from the end it would be M[2:4], which is valid.",
        ),
        ("slice-negative-stop", 0, -1, "M[0:-1] is E_RANGE: counted from the end it would be M[0:3]."),
    ):
        bad_model.add(slug, why, "3.6", {"mask": four, "start": start, "stop": stop}, err("E_RANGE"), op="slice")
    ops.add(
        "slice-empty-between-segments",
        "M[2:2] where segments [0, 2) and [2, 4) touch 2 and [2, 2) is empty at 2: only the empty one is kept.",
        "3.6",
        {"mask": four, "start": 2, "stop": 2},
        ok(mask([], cu=[0, 0], vocab=10)),
        op="slice",
    )
    ops.add(
        "slice-empty-inside-a-segment",
        "M[1:1] lies inside segment [0, 2), which shares no row with it: no segment, B = 0.",
        "3.6",
        {"mask": four, "start": 1, "stop": 1},
        ok(mask([], cu=[0], vocab=10)),
        op="slice",
    )

    # 3.6 take: k = 0 keeps V, companions (empty) and metadata.
    full = model(
        [[1], [2]],
        cu_seqlens=[0, 1, 2],
        vocab_size=10,
        sampled_token_ids=[1, 2],
        temperature=[1.0, 0.5],
        support_logprobs=[[0.0], [0.0]],
        metadata={"top_k": 4, "producer": "test"},
    )
    ops.add(
        "take-no-segment-keeps-companions-and-metadata",
        "take([]) keeps the mask's V, its companions (empty) and its metadata (3.6).",
        "3.6",
        {"mask": full, "segments": []},
        ok(
            mask(
                [],
                cu=[0],
                vocab=10,
                sampled_token_ids=[],
                temperature=[],
                support_logprobs=[],
                metadata={"top_k": 4, "producer": "test"},
            )
        ),
        op="take",
    )

    # (11) 9.3: a validity bitmap of a node with no null is never read; other buffers lie in the body.
    pattern = np.array([0, 0, 0, 12], "<i8").tobytes()  # the outer list's validity (empty), its offsets
    for form in ("arrow", "arrows"):
        data = bins[f"{form}.issue-example"]
        assert data.count(pattern) == 1, form
        book.file(f"{form}/decode.json", form).add(
            "unread-validity-bitmap-outside-body",
            "The outer list (null count 0) names a validity bitmap of 256 bytes at offset 64 of a 48-byte "
            "body: never read, so never checked (9.3); valid.",
            "arrow-batches",
            {"hex": data.replace(pattern, np.array([64, 256, 0, 12], "<i8").tobytes()).hex()},
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        )
        book.file(f"invalid/{form}.json", form).add(
            "offsets-buffer-outside-body",
            "The outer list's offsets buffer (12 bytes) at offset 2**20 of a 48-byte body: E_ENCODING (9.3).",
            "arrow-batches",
            {"hex": data.replace(pattern, np.array([0, 0, 1 << 20, 12], "<i8").tobytes()).hex()},
            err("E_ENCODING"),
        )

    # 8.4: a footer whose blocks repeat or overlap; a stream without its end-of-stream marker.
    two = bins["arrow.one-batch-per-segment"]
    _, blocks = _ipc_blocks(two)
    assert len(blocks) == 2 and blocks[1] == blocks[0] + 24, blocks
    first, second = blocks
    book.file("arrow/decode.json", "arrow").add(
        "one-batch-per-segment",
        "A file of two record batches, one per segment (two footer blocks): their concatenation (9.3).",
        "arrow-batches",
        {"hex": two.hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
    )
    bad_arrow = book.file("invalid/arrow.json", "arrow")
    bad_arrow.add(
        "footer-block-repeated",
        "The footer names the first record batch twice (its second block a copy of the first): E_ENCODING (8.4).",
        "8.4",
        {"hex": (two[:second] + two[first : first + 24] + two[second + 24 :]).hex()},
        err("E_ENCODING"),
    )
    offset = int(np.frombuffer(two[first : first + 8], "<i8")[0])
    overlapping = np.frombuffer(two[second : second + 8], "<i8").copy()
    overlapping[0] = offset + 8
    bad_arrow.add(
        "footer-blocks-overlap",
        "The second footer block starts 8 bytes into the first batch's message: blocks overlap, E_ENCODING (8.4).",
        "8.4",
        {"hex": (two[:second] + overlapping.tobytes() + two[second + 8 :]).hex()},
        err("E_ENCODING"),
    )
    end = bytes.fromhex("ffffffff00000000")
    bad_arrows = book.file("invalid/arrows.json", "arrows")
    for source, what in (("arrows.issue-example", "one batch"), ("arrows.one-batch-per-segment", "two batches")):
        assert bins[source].endswith(end), source
        bad_arrows.add(
            f"no-end-of-stream-marker-after-{what.replace(' ', '-')}",
            f"A stream of {what} cut exactly before its end-of-stream marker: incomplete, E_ENCODING (8.4), "
            "not silently a complete mask.",
            "8.4",
            {"hex": bins[source][: -len(end)].hex()},
            err("E_ENCODING"),
        )

    # 8.1: max_rows bounds T, never B (the reference's JSON reader bounded cu_seqlens by it).
    segments_only = _doc(vocab_size=None, id_order="ascending", cu_seqlens=[0, 0, 0], rows=[])
    book.file("json/decode.json", "json").add(
        "empty-segments-under-max-rows-zero",
        "T = 0 in B = 2 empty segments is within max_rows = 0: max_rows bounds T, not the length of cu_seqlens "
        "(8.1; found by generated cases).",
        "limits",
        {"text": segments_only},
        ok(mask([], cu=[0, 0, 0])),
        limits={"max_rows": 0},
    )
    book.file("invalid/json.json", "json").add(
        "segments-over-max-segments",
        "B = 2 under max_segments = 1: E_LIMIT (8.1).",
        "limits",
        {"text": segments_only},
        err("E_LIMIT"),
        limits={"max_segments": 1},
    )
    book.file("model/validate.json", "model").add(
        "empty-segments-under-max-rows-zero",
        "T = 0 in B = 2 empty segments is within max_rows = 0 (8.1).",
        "limits",
        model([], cu_seqlens=[0, 0, 0]),
        {"valid": True},
        op="validate",
        limits={"max_rows": 0},
    )

    # 8.4: a dense array of shape [T, 0] still produces T + 1 offsets.
    rows = 100
    zero_width = 8 * (rows + 1) + 8 * 2
    book.file("invalid/dense.json", "dense").add(
        "zero-width-rows-over-max-bytes",
        f"A dense [{rows}, 0] array holds no byte but produces {rows + 1} offsets: {zero_width} bytes (8.1, "
        f"8.4); max_bytes {zero_width - 1} is E_LIMIT.",
        "8.4",
        {"dense": arr([[]] * rows, "int32", shape=[rows, 0])},
        err("E_LIMIT"),
        limits={"max_bytes": zero_width - 1},
    )
    # 11.1: valid UTF-8 beyond ASCII is read as it is.
    book.file("json/decode.json", "json").add(
        "metadata-non-ascii-utf8",
        "A metadata string of multi-byte UTF-8 (é, 語) is valid and read as written (11.1).",
        "json-rules",
        {"hex": '{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "vllm-é-語"}}'.encode().hex()},
        ok(mask([[1]], metadata={"producer": "vllm-é-語"})),
    )

    # 4, 5.1: a sampled id given as int64 is never wrapped to int32.
    book.file("invalid/ragged.json", "ragged").add(
        "sampled-id-int64-beyond-int32",
        "sampled_token_ids int64 [2**32 + 5] for the row {5}: wrapped to int32 it would read 5; E_RANGE, or "
        "E_DTYPE from a reader that takes int32 only (4).",
        "companions",
        {"ids": arr([5]), "offsets": arr([0, 1], "int64"), "sampled_token_ids": arr([2**32 + 5], "int64")},
        err("E_RANGE", "E_DTYPE"),
    )
    book.file("invalid/json.json", "json").add(
        "sampled-id-beyond-int32",
        "A sampled id of 2**32 + 5 for the row {5}: outside int32, E_RANGE (11.1), never wrapped to 5.",
        "json-rules",
        {"text": _doc(rows=[[5]], sampled_token_ids=[2**32 + 5])},
        err("E_RANGE"),
    )


# ------------------------------------------------------------------------------------------ byte count


def ipc_byte_count_cases(book: Book) -> None:
    """The one count of an Arrow IPC decode (SPEC 8.5, 8.5.6): what a compressed batch declares and
    the mask's bytes add up, every batch of a file or stream adds to the count and to the limits, a
    buffer stored uncompressed counts nothing, an unread validity bitmap counts like any buffer."""
    bins = _arrow_source()
    many, half = MANY_EMPTY_ROWS, HALF_EMPTY_ROWS
    declared = 4 * (many + 1) + 8  # the inner and outer offsets' uncompressed lengths (no id)
    produced = 8 * (many + 1) + 8 * 2
    for form in ("arrow", "arrows"):
        bad = book.file(f"invalid/{form}.json", form)
        good = book.file(f"{form}/decode.json", form)
        bad.add(
            "compressed-lengths-and-mask-count-together",
            f"A zstd batch of {many} empty rows declares {declared} uncompressed bytes of offsets and produces "
            f"a mask of {produced} (8.1): the count is their sum, {declared + produced}, so max_bytes "
            f"1000000 (above each alone) is E_LIMIT (8.5.6 step 3).",
            "8.5.6",
            {"hex": bins[f"{form}.many-empty-rows-zstd"].hex()},
            err("E_LIMIT"),
            limits={"max_bytes": 1_000_000},
            since=SPEC_1_4,
        )
        each = 4 * (half + 1) + 8 + 8 * (half + 1) + 16
        bad.add(
            "batches-count-together",
            f"Two zstd batches of {half} empty rows each: one counts {each} bytes (offsets declared and the "
            f"mask's bytes), the decode of both counts twice that; max_bytes 900000 is E_LIMIT (8.5: one count "
            "per decode).",
            "8.5.6",
            {"hex": bins[f"{form}.two-batches-of-empty-rows-zstd"].hex()},
            err("E_LIMIT"),
            limits={"max_bytes": 900_000},
            since=SPEC_1_4,
        )
        bad.add(
            "compressed-lengths-of-batches-count-together",
            f"Two zstd batches, each with a user column of {ZERO_BLOB_BYTES} zero bytes (declared uncompressed) and "
            "one row: about 100 KB each, 200 KB together; max_bytes 150000 is E_LIMIT (8.5.6 step 3: every "
            "batch's compressed lengths add to the decode's count).",
            "8.5.6",
            {"hex": bins[f"{form}.two-batches-compressed-blob"].hex()},
            err("E_LIMIT"),
            limits={"max_bytes": 150_000},
            since=SPEC_1_4,
        )
        bad.add(
            "batches-together-over-max-rows",
            "Two batches of 2 and 1 rows: each within max_rows = 2, the mask of both (3 rows) is not: E_LIMIT "
            "(8.5: the limits bound the decode's mask).",
            "8.5",
            {"hex": bins[f"{form}.one-batch-per-segment"].hex()},
            err("E_LIMIT"),
            limits={"max_rows": 2},
            since=SPEC_1_4,
        )
        good.add(
            "buffer-stored-uncompressed-not-counted",
            f"An LZ4 batch stores its {RANDOM_BLOB_BYTES}-byte user column as is (prefix -1): the body holds those "
            "bytes and nothing decompresses them, so they count nothing; the batch counts about 3.4 KB with the "
            "whole allowance, and max_bytes 6000 reads it (8.5.6 step 3).",
            "8.5.6",
            {"hex": bins[f"{form}.blob-stored-uncompressed"].hex()},
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
            limits={"max_bytes": 6000},
            since=SPEC_1_4,
        )
    # An unread validity bitmap (null count 0) inside a compressed body counts its declared length.
    for form, source, length in (("arrow", "arrow.zstd", 29), ("arrows", "arrows.lz4", 35)):
        data = bins[source]
        buffers = np.array([0, 0, 0, length], "<i8").tobytes()  # the outer list's validity (empty), its offsets
        assert data.count(buffers) == 1, source
        forged = data.replace(buffers, np.array([8, 16, 0, length], "<i8").tobytes())
        book.file(f"invalid/{form}.json", form).add(
            "unread-validity-bitmap-declared-length-counted",
            "A compressed batch whose outer list (null count 0) names a 16-byte validity bitmap at offset 8 of "
            "the body, where the offsets' compressed frame starts: never read as a bitmap, its first 8 bytes "
            "still declare its uncompressed length (above 2**54), which the count holds: E_LIMIT (8.5.6 step 3).",
            "8.5.6",
            {"hex": forged.hex()},
            err("E_LIMIT"),
            since=SPEC_1_4,
        )


def parquet_byte_count_cases(book: Book) -> None:
    """The one count of a Parquet decode (SPEC 8.5, 8.5.7): every row group adds to it and to the
    limits, and in the compact layout the pages and the rows of the count columns add up."""
    bins = _arrow_source()
    bad = book.file("invalid/parquet.json", "parquet")
    half = HALF_EMPTY_ROWS
    each = 12 * half + 8 + 8 * 2  # 8.1 with T = nnz = num_values, B = 1 (plus a few bytes of pages)
    bad.add(
        "row-groups-count-together",
        f"Two row groups of {half} empty rows: each counts about {each} bytes from its footer (8.1 with T and "
        f"nnz the leaf chunk's {half} values), the decode of both twice that; max_bytes 900000 is E_LIMIT "
        "(8.5: one count per decode).",
        "8.5.7",
        {"hex": bins["parquet.two-row-groups-of-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": 900_000},
        since=SPEC_1_4,
    )
    bad.add(
        "pages-of-row-groups-count-together",
        f"Two zstd row groups, each with a user column of {ZERO_BLOB_BYTES} zero bytes (total_uncompressed_size "
        "about 100 KB) and one row: 200 KB together; max_bytes 150000 is E_LIMIT (8.5.7 step 2: every row "
        "group's pages add to the decode's count).",
        "8.5.7",
        {"hex": bins["parquet.two-row-groups-compressed-blob"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": 150_000},
        since=SPEC_1_4,
    )
    bad.add(
        "batches-together-over-max-rows",
        "Two row groups of 2 and 1 rows: each within max_rows = 2, the mask of both (3 rows) is not: E_LIMIT "
        "(8.5: the limits bound the decode's mask).",
        "8.5",
        {"hex": bins["parquet.two-row-groups"].hex()},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since=SPEC_1_4,
    )
    many = MANY_EMPTY_ROWS
    rows = 8 * (many + 1) + 8 * 2
    bad.add(
        "compact-pages-and-rows-count-together",
        f"A compact row group of {many} empty rows: its pages decode to about 100 KB (the blob's row lengths) "
        f"and its count column gives T = {many}, a mask of {rows} bytes; together about 900 KB, so max_bytes "
        f"850000 (above the mask alone) is E_LIMIT (8.5.7 steps 2 and 4).",
        "8.5.7",
        {"hex": bins["parquet.compact-many-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": 850_000},
        since=SPEC_1_4,
    )


def parquet_magic_cases(book: Book) -> None:
    """A Parquet file starts with PAR1 as well as ending with it (SPEC 8.5.7 step 1, 9.3)."""
    data = _arrow_source()["parquet.issue-example"]
    assert data[:4] == b"PAR1"
    bad = book.file("invalid/parquet.json", "parquet")
    for slug, lead, why in (
        ("leading-magic-damaged", b"\x00AR1", "whose first byte is not the P of PAR1"),
        ("leading-magic-last-byte", b"PAR2", "starting PAR2"),
    ):
        bad.add(
            slug,
            f"A Parquet file {why} (the footer and its trailing magic intact): E_ENCODING (8.5.7 step 1).",
            "8.5.7",
            {"hex": (lead + data[4:]).hex()},
            err("E_ENCODING"),
            since=SPEC_1_4,
        )


def arrow_metadata_kind_cases(book: Book) -> None:
    """An Arrow or Parquet schema-metadata value keeps its JSON kind: 4.0 is a float (SPEC 5.2, 9.2)."""
    bins = _arrow_source()
    for form in ("arrow", "parquet"):
        book.file(f"invalid/{form}.json", form).add(
            "metadata-top-k-integral-float",
            "sampling_mask.metadata.top_k is the JSON text 4.0: a float, and top_k takes integers only: E_SCHEMA "
            "(5.2, 9.2), never read as 4.",
            "9.2",
            {"hex": bins[f"{form}.metadata-top-k-integral-float"].hex()},
            err("E_SCHEMA"),
            since=SPEC_1_4,
        )


def empty_file_schema_cases(book: Book) -> None:
    """A file of no batch holds the empty mask with what its schema declares: V, metadata and the
    companions, empty (SPEC 9.3)."""
    bins = _arrow_source()
    expected = ok(
        mask(
            [],
            cu=[0],
            vocab=10,
            sampled_token_ids=[],
            sampled_logprobs=[],
            temperature=[],
            support_logprobs=[],
            metadata={"top_k": 3, "producer": "vllm-0.32"},
        )
    )
    for form, source, what in (
        ("arrow", "arrow.no-batches-companions", "An IPC file with no record batch"),
        ("arrows", "arrows.no-batches-companions", "An IPC stream with no record batch"),
        ("parquet", "parquet.no-rows-companions", "A Parquet file of no row"),
    ):
        book.file(f"{form}/decode.json", form).add(
            "no-batches-keeps-companions-and-metadata",
            f"{what} whose schema declares four companions and metadata: T = 0, B = 0, with V, the metadata and "
            "the four companions, empty (9.3).",
            "arrow-batches",
            {"hex": bins[source].hex()},
            expected,
            since=SPEC_1_4,
        )


def declared_array_cases(book: Book) -> None:
    """A declared array's size against max_bytes, its bytes present (SPEC 8.5), and the base64
    envelope's decoded bytes in the same count as the mask (8.5.4)."""
    padding = _marray([[-1] * 64] * 4, "int32")  # [4, 64] of padding: 1024 bytes, a mask of 4 empty rows
    book.file("invalid/msgpack.json", "msgpack").add(
        "array-over-max-bytes-with-its-bytes",
        "A dense ARRAY [4, 64] of -1 holds its 1024 bytes, and its mask of 4 empty rows takes 56 bytes: the "
        "declared array is above max_bytes 1000, E_LIMIT (8.5, declared arrays; bytes an input stores count "
        "where a procedure says so).",
        "8.5.2",
        _mhex({"layout": "dense", "dense": padding}),
        err("E_LIMIT"),
        limits={"max_bytes": 1000},
        since=SPEC_1_4,
    )
    bad = book.file("invalid/base64.json", "base64")
    bad.add(
        "decoded-bytes-over-max-bytes",
        "A [4, 64] int32 envelope of -1 (its mask: 4 empty rows, 56 bytes) decodes to 1024 bytes, which the "
        "count holds: max_bytes 1000 is E_LIMIT (8.5.4 step 2).",
        "8.5.4",
        {"text": _envelope([[-1] * 64] * 4)},
        err("E_LIMIT"),
        limits={"max_bytes": 1000},
        since=SPEC_1_4,
    )
    full = [list(range(64))] * 4
    bad.add(
        "decoded-bytes-and-mask-count-together",
        "A [4, 64] int32 envelope of full rows decodes to 1024 bytes and its mask takes 1080 (256 ids, 5 offsets, "
        "2 segment bounds): one count of 2104, so max_bytes 1800 (above each alone) is E_LIMIT (8.5.4).",
        "8.5.4",
        {"text": _envelope(full)},
        err("E_LIMIT"),
        limits={"max_bytes": 1800},
        since=SPEC_1_4,
    )


def metadata_string_nan_cases(book: Book) -> None:
    """The string "NaN" is a metadata string, the float NaN is {"float": "NaN"} (SPEC 5.2, 11.2; the
    model mask of the conformance protocol spells them the same way)."""
    book.file("json/decode.json", "json").add(
        "metadata-string-nan",
        'A metadata value "NaN" is the string NaN, kept as written; the float NaN would be {"float": "NaN"} '
        "(5.2, 11.2).",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"note": "NaN"})},
        ok(mask([[1]], metadata={"note": "NaN"})),
        since=SPEC_1_4,
    )
    book.file("model/operations.json", "model").add(
        "concatenate-metadata-string-nan",
        'Two masks whose metadata note is the string "NaN": the same metadata, kept a string (3.5, 3.6).',
        "3.6",
        {"masks": [model([[1]], metadata={"note": "NaN"}), model([[2]], metadata={"note": "NaN"})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"note": "NaN"})),
        op="concatenate",
        since=SPEC_1_4,
    )
    book.file("invalid/model.json", "model").add(
        "concatenate-metadata-string-nan-against-float-nan",
        'The string "NaN" and the float NaN ({"float": "NaN"}) are different metadata values: E_SCHEMA (3.5, 3.6).',
        "3.6",
        {"masks": [model([[1]], metadata={"note": "NaN"}), model([[2]], metadata={"note": {"float": "NaN"}})]},
        err("E_SCHEMA"),
        op="concatenate",
        since=SPEC_1_4,
    )


BUILDERS: list[Callable[[Book], None]] = [
    dense_cases,
    packed_cases,
    ragged_cases,
    counts_cases,
    bitmask_cases,
    json_rows_cases,
    base64_cases,
    json_cases,
    msgpack_cases,
    arrow_cases,
    compact_cases,
    model_cases,
    scorer_cases,
    teeth_cases,
    v1_2_cases,
    v1_2_teeth_cases,
    v1_3_cases,
    ipc_byte_count_cases,
    parquet_byte_count_cases,
    parquet_magic_cases,
    arrow_metadata_kind_cases,
    empty_file_schema_cases,
    declared_array_cases,
    metadata_string_nan_cases,
]


def build() -> dict[str, Any]:
    """Every case file's document, by path relative to the suite root."""
    book = Book()
    for builder in BUILDERS:
        builder(book)
    return {path: f.document() for path, f in sorted(book.files.items())}


def suite_root() -> Path:
    """``<repo>/conformance`` of the checkout this module lives in (the generator needs a checkout)."""
    root = Path(__file__).resolve().parents[2] / "conformance"
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found: the generator runs from a source checkout")
    return root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/conformance/generate.py",
        description="Check (default) or regenerate (--write) the committed conformance vectors.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite conformance/v1 from this generator")
    parser.add_argument(
        "--rebuild-binaries", action="store_true", help="rewrite sources/arrow-payloads.json with pyarrow first"
    )
    parser.add_argument("--root", type=Path, default=None, help="suite root (default: <repo>/conformance)")
    args = parser.parse_args(argv)
    root = args.root or suite_root()
    if args.rebuild_binaries:
        print(f"wrote {rebuild_binaries()}")
    docs = {path: render(doc) + "\n" for path, doc in build().items()}
    existing = {p.relative_to(root).as_posix() for p in (root / SUITE).glob("*/*.json")}
    stray = sorted(existing - set(docs))
    if args.write:
        for path, text in docs.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
        for path in stray:
            (root / path).unlink()
            print(f"removed {path}")
        return 0
    problems = [f"missing: {p}" for p in docs if p not in existing]
    problems += [
        f"differs from the generator: {p}"
        for p in docs
        if p in existing and (root / p).read_text(encoding="utf-8") != docs[p]
    ]
    problems += [f"not produced by the generator: {p}" for p in stray]
    for line in problems:
        print(line)
    if problems:
        print("run `python tools/conformance/generate.py --write` and review the diff")
        return 1
    print(f"{len(docs)} case files match the generator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
