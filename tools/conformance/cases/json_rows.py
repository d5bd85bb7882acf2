"""json-rows (SPEC 11.3): bare JSON nested lists of ids, the form vLLM and SGLang return."""

from __future__ import annotations

import json

from .common import ISSUE_ROWS, UNSORTED_ROWS, Book, err, mask, model, ok, vllm_source
from .shared import declares_unsorted_rows, refuses_zero_segments


def add_cases(book: Book) -> None:
    """Every json-rows case: ``json-rows/decode.json``, ``json-rows/encode.json``, ``invalid/json-rows.json``."""
    src = vllm_source()
    f = book.file(
        "json-rows/decode.json",
        "json-rows",
        "Bare JSON nested lists (vLLM choices[i].sampling_mask, SGLang output_token_sampling_mask).",
    )
    f.add(
        "vllm-issue-example",
        "One list of ids per token.",
        "json",
        {"text": "[[1,5],[],[7]]"},
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    f.add("empty-document", "[] is a mask of zero rows.", "json", {"text": "[]"}, ok(mask([])), since="1.0")
    f.add("all-empty-rows", "Every row empty.", "json", {"text": "[[],[],[]]"}, ok(mask([[], [], []])), since="1.0")
    f.add(
        "unsorted-rows",
        "SGLang lists are unsorted; the canonical mask sorts each row.",
        "json",
        {"text": "[[9,2,5],[1,0]]"},
        ok(mask([[2, 5, 9], [0, 1]])),
        since="1.0",
    )
    f.add(
        "insignificant-whitespace",
        "JSON whitespace anywhere between tokens.",
        "json",
        {"text": " [ [ 1 , 5 ] ,\n\t[ ] ,\r\n [7] ] \n"},
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    f.add(
        "byte-order-mark",
        "A reader ignores one leading UTF-8 byte-order mark.",
        "json-rules",
        {"hex": (b"\xef\xbb\xbf" + b"[[1,5],[],[7]]").hex()},
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    f.add(
        "maximal-int32-id",
        "2147483647 is a valid id.",
        "json",
        {"text": "[[2147483647,0]]"},
        ok(mask([[0, 2147483647]])),
        since="1.0",
    )
    f.add(
        "trailing-empty-rows",
        "Trailing empty rows are rows.",
        "json",
        {"text": "[[3],[],[]]"},
        ok(mask([[3], [], []])),
        since="1.0",
    )
    f.add(
        "same-id-in-different-rows",
        "Uniqueness is per row.",
        "json",
        {"text": "[[4],[4]]"},
        ok(mask([[4], [4]])),
        since="1.0",
    )
    f.add(
        "ties-wider-than-top-k",
        "A wide row (ties at the top-k boundary).",
        "json",
        {"text": "[[17,3,13,5,11,7]]"},
        ok(mask([[3, 5, 7, 11, 13, 17]])),
        since="1.0",
    )
    picks = [str(i) for i in range(6)]
    rows = [src["rows"][i] for i in picks]
    f.add(
        "vllm-0.32-completion",
        "The first six tokens of a real vLLM 0.32 CompletionOutput.sampling_mask.token_ids.",
        "json",
        {"text": json.dumps(rows, separators=(", ", ": "))},
        ok(mask(rows)),
        since="1.0",
    )
    e = book.file("json-rows/encode.json", "json-rows", "Encoding a mask as bare JSON nested lists.")
    e.add(
        "encode-roundtrip",
        "Nested lists of ascending ids (the round trip is checked).",
        "json",
        model([[1, 5], [], [7]]),
        {"roundtrip": True},
        op="encode",
        since="1.0",
    )
    e.add(
        "encode-zero-rows",
        "No rows encode as [].",
        "json",
        model([]),
        {"roundtrip": True},
        op="encode",
        since="1.0",
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
        bad.add(slug, why, "json", {"text": text}, err(*codes), since="1.0")
    bad.add(
        "invalid-utf8",
        "The bytes are not UTF-8.",
        "json",
        {"hex": b"[[1,\xff]]".hex()},
        err("E_ENCODING"),
        since="1.0",
    )
    bad.add(
        "deep-nesting",
        "5000 nested lists: never a stack overflow. E_LIMIT from a reader that bounds the depth while "
        "parsing, E_DTYPE (a list inside a row) from one that parses first (SPEC 11.1).",
        "json-rules",
        {"text": "[" * 5000 + "]" * 5000},
        err("E_LIMIT", "E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"text": "[[1],[2],[3]]"},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since="1.0",
    )

    declares_unsorted_rows(e, "json", model(UNSORTED_ROWS), {"detected": "json-rows"})

    # JSON text: nesting is bounded (11.1); rows-only writers refuse what they would lose (11.3).
    bad.add(
        "nesting-beyond-limit-in-rows",
        "17 nested lists: E_LIMIT from a reader that bounds the depth while parsing, E_DTYPE (a list "
        "inside a row) from one that parses first.",
        "json-rules",
        {"text": "[" * 16 + "1" + "]" * 16},
        err("E_LIMIT", "E_DTYPE"),
        since="1.0",
    )
    for slug, lossy in (
        ("encode-would-lose-vocab-size", model([[1]], vocab_size=10)),
        ("encode-would-lose-segments", model([[1], [2]], cu_seqlens=[0, 1, 2])),
    ):
        bad.add(
            slug,
            f"A rows-only writer never drops information ({slug.rsplit('-lose-', 1)[1]}) silently: it refuses "
            "with E_SCHEMA.",
            "11.3",
            lossy,
            err("E_SCHEMA"),
            op="encode",
            since="1.0",
        )

    refuses_zero_segments(bad)
