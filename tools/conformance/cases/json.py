"""The JSON document (SPEC 11.2): ``{"sampling_mask": 1, "rows": [...], ...}``, lossless."""

from __future__ import annotations

import json
from typing import Any

from .common import ISSUE_ROWS, REQ, Book, companions_mask, err, mask, ok, roundtrip_model, unsorted_model
from .shared import declares_unsorted_rows


def _doc(**fields: Any) -> str:
    """Our lossless JSON document with the version key first (``override`` by passing the key)."""
    doc: dict[str, Any] = {"sampling_mask": 1}
    doc.update(fields)
    return json.dumps(doc, separators=(", ", ": "))


def add_cases(book: Book) -> None:
    """Every JSON-document case: ``json/decode.json``, ``json/encode.json``, ``invalid/json.json``."""
    f = book.file("json/decode.json", "json", 'The lossless JSON document {"sampling_mask": 1, "rows": [...], ...}.')
    f.add(
        "issue-example",
        "Version, vocab_size, declared ascending order and segments.",
        "json",
        {"text": _doc(vocab_size=10, id_order="ascending", cu_seqlens=[0, 2, 3], rows=[[1, 5], [], [7]])},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "minimal",
        "Only the version and the rows are required.",
        "json",
        {"text": _doc(rows=[])},
        ok(mask([])),
        since="1.0",
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
        since="1.0",
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
        since="1.0",
    )
    f.add(
        "unknown-keys-ignored",
        "A reader ignores keys it does not know.",
        "versioning",
        {"text": _doc(rows=[[2]], **{"x-trace": {"spans": [1, 2]}})},
        ok(mask([[2]])),
        since="1.0",
    )
    f.add(
        "vocab-size-null",
        "vocab_size null means unknown.",
        "json",
        {"text": _doc(vocab_size=None, rows=[[2147483647]])},
        ok(mask([[2147483647]])),
        since="1.0",
    )
    f.add(
        "all-empty-segments",
        "Zero rows in two segments.",
        "json",
        {"text": _doc(cu_seqlens=[0, 0, 0], rows=[])},
        ok(mask([], cu=[0, 0, 0])),
        since="1.0",
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
        since="1.0",
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
        bad.add(slug, why, spec, {"text": text}, err(*codes), level=level, since="1.0")

    # nil / null under an optional key reads as absent (11.2).
    f.add(
        "null-optional-keys",
        "null under an optional key (vocab_size, id_order, cu_seqlens, companions, metadata) reads as absent.",
        "json",
        {
            "text": '{"sampling_mask": 1, "vocab_size": null, "id_order": null, "cu_seqlens": null, '
            '"rows": [[1, 5], [], [7]], "sampled_token_ids": null, "metadata": null}'
        },
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )

    # Metadata: top_k is an integer (5.2); valid UTF-8 beyond ASCII is read as written (11.1); the string
    # "NaN" is a string (5.2, 11.2).
    f.add(
        "metadata-top-k-integer",
        "top_k 4, an integer, is valid metadata (5.2).",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"top_k": 4})},
        ok(mask([[1]], metadata={"top_k": 4})),
        since="1.3",
    )
    # 8.1: max_rows bounds T, never B.
    segments_only = _doc(vocab_size=None, id_order="ascending", cu_seqlens=[0, 0, 0], rows=[])
    f.add(
        "empty-segments-under-max-rows-zero",
        "T = 0 in B = 2 empty segments is within max_rows = 0: max_rows bounds T, not the length of cu_seqlens "
        "(8.1; found by generated cases).",
        "limits",
        {"text": segments_only},
        ok(mask([], cu=[0, 0, 0])),
        limits={"max_rows": 0},
        since="1.3",
    )
    f.add(
        "metadata-non-ascii-utf8",
        "A metadata string of multi-byte UTF-8 (é, 語) is valid and read as written (11.1).",
        "json-rules",
        {"hex": '{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "vllm-é-語"}}'.encode().hex()},
        ok(mask([[1]], metadata={"producer": "vllm-é-語"})),
        since="1.3",
    )
    f.add(
        "metadata-string-nan",
        'A metadata value "NaN" is the string NaN, kept as written; the float NaN would be {"float": "NaN"} '
        "(5.2, 11.2).",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"note": "NaN"})},
        ok(mask([[1]], metadata={"note": "NaN"})),
        since="1.4",
    )

    declares_unsorted_rows(e, "json", unsorted_model(), {"detected": "json", "first_key": "sampling_mask"})

    # JSON text: UTF-8 everywhere (11.1), float32 range in fields where infinity is not otherwise an error.
    bad.add(
        "invalid-utf8-in-string",
        "Byte ff inside a metadata string: the syntax is valid, the text is not UTF-8 (no replacement characters).",
        "json-rules",
        {"hex": b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "v\xffllm"}}'.hex()},
        err("E_ENCODING"),
        since="1.0",
    )
    for slug, field, text in (
        ("sampled-logprob-beyond-float32", "sampled_logprobs", '"rows": [[1]], "sampled_logprobs": [-1e39]'),
        ("support-logprob-beyond-float32", "support_logprobs", '"rows": [[1, 2]], "support_logprobs": [[-0.5, -1e39]]'),
    ):
        bad.add(
            slug,
            f"-1e39 in {field}: finite in JSON, beyond float32 (not rounded to -infinity).",
            "json-rules",
            {"text": '{"sampling_mask": 1, ' + text + "}"},
            err("E_RANGE"),
            since="1.0",
        )

    # 5.2: an integral float is no integer; 8.1: max_segments bounds B; 11.1: a sampled id beyond int32.
    bad.add(
        "metadata-top-k-integral-float",
        "top_k is an integer (5.2): 4.0, a number with a fraction, is a float and E_SCHEMA, though equal to 4.",
        "metadata",
        {"text": _doc(rows=[[1]], metadata={"top_k": 4.0})},
        err("E_SCHEMA"),
        since="1.3",
    )
    bad.add(
        "segments-over-max-segments",
        "B = 2 under max_segments = 1: E_LIMIT (8.1).",
        "limits",
        {"text": segments_only},
        err("E_LIMIT"),
        limits={"max_segments": 1},
        since="1.3",
    )
    bad.add(
        "sampled-id-beyond-int32",
        "A sampled id of 2**32 + 5 for the row {5}: outside int32, E_RANGE (11.1), never wrapped to 5.",
        "json-rules",
        {"text": _doc(rows=[[5]], sampled_token_ids=[2**32 + 5])},
        err("E_RANGE"),
        since="1.3",
    )
