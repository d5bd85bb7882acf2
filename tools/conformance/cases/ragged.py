"""Ragged (CSR, SPEC 4.1): ids int32 ``[nnz]`` and offsets int64 ``[T + 1]``, the canonical layout."""

from __future__ import annotations

import math

import numpy as np

from .common import (
    ISSUE_ROWS,
    REC,
    UNSORTED_ROWS,
    Book,
    arr,
    companions_mask,
    err,
    f32_mask_bytes,
    hexarr,
    mask,
    model,
    ok,
    rawarr,
    vllm_source,
)
from .shared import keeps_stored_order


def add_cases(book: Book) -> None:
    """Every ragged case: ``ragged/decode.json``, ``ragged/encode.json``, ``invalid/ragged.json``."""
    src = vllm_source()
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
        since="1.0",
    )
    f.add(
        "issue-example-hex",
        "The same arrays as little-endian bytes: 4-byte ids, 8-byte offsets.",
        "layouts",
        {"ids": hexarr([5, 1, 7], "int32"), "offsets": hexarr([0, 2, 2, 3], "int64"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "offsets [0]: T = 0.",
        "layouts",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64")},
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "all-empty-rows",
        "nnz = 0 with T = 2.",
        "empty",
        {"ids": arr([], shape=[0]), "offsets": arr([0, 0, 0], "int64")},
        ok(mask([[], []])),
        since="1.0",
    )
    f.add(
        "trailing-empty-rows",
        "Repeated final offsets are empty rows at the end.",
        "empty",
        {"ids": arr([3]), "offsets": arr([0, 1, 1, 1], "int64")},
        ok(mask([[3], [], []])),
        since="1.0",
    )
    f.add(
        "unsorted-rows",
        "SGLang lists rows unsorted; the canonical mask sorts each row.",
        "order",
        {"ids": arr([9, 2, 5, 1, 0]), "offsets": arr([0, 3, 5], "int64")},
        ok(mask([[2, 5, 9], [0, 1]])),
        since="1.0",
    )
    f.add(
        "same-id-in-different-rows",
        "Uniqueness is per row, not per mask.",
        "model",
        {"ids": arr([4, 4, 4]), "offsets": arr([0, 1, 2, 3], "int64")},
        ok(mask([[4], [4], [4]])),
        since="1.0",
    )
    f.add(
        "maximal-int32-id",
        "The largest int32 is a valid id when vocab_size is unknown.",
        "model",
        {"ids": arr([2147483647]), "offsets": arr([0, 1], "int64")},
        ok(mask([[2147483647]])),
        since="1.0",
    )
    f.add(
        "vocab-boundary",
        "Ids 0 and vocab_size - 1.",
        "model",
        {"ids": arr([15, 0]), "offsets": arr([0, 2], "int64"), "vocab_size": 16},
        ok(mask([[0, 15]], vocab=16)),
        since="1.0",
    )
    full = [11, 3, 0, 7, 15, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14]
    f.add(
        "full-vocabulary-row",
        "An untruncated row holds every id of the vocabulary.",
        "model",
        {"ids": arr([*full, 2]), "offsets": arr([0, 16, 17], "int64"), "vocab_size": 16},
        ok(mask([list(range(16)), [2]], vocab=16)),
        since="1.0",
    )
    f.add(
        "ties-wider-than-top-k",
        "A row wider than top_k (ties at the boundary) is valid.",
        "model",
        {"ids": arr([8, 2, 6, 4, 1]), "offsets": arr([0, 4, 5], "int64"), "metadata": {"top_k": 3}},
        ok(mask([[2, 4, 6, 8], [1]], metadata={"top_k": 3})),
        since="1.0",
    )
    f.add(
        "all-empty-segments",
        "Zero rows in two segments.",
        "segments",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64"), "cu_seqlens": arr([0, 0, 0], "int64")},
        ok(mask([], cu=[0, 0, 0])),
        since="1.0",
    )
    f.add(
        "zero-segments",
        "B = 0: cu_seqlens [0] with no rows.",
        "segments",
        {"ids": arr([], shape=[0]), "offsets": arr([0], "int64"), "cu_seqlens": arr([0], "int64")},
        ok(mask([], cu=[0])),
        since="1.0",
    )
    f.add(
        "empty-segments-around-rows",
        "Empty segments before and after the rows.",
        "segments",
        {"ids": arr([1, 2]), "offsets": arr([0, 1, 2], "int64"), "cu_seqlens": arr([0, 0, 2, 2], "int64")},
        ok(mask([[1], [2]], cu=[0, 0, 2, 2])),
        since="1.0",
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
        since="1.0",
    )
    f.add(
        "sampled-id-on-empty-row",
        "An empty row (no support recorded) may still name the token that was sampled.",
        "companions",
        {"ids": arr([2]), "offsets": arr([0, 1, 1], "int64"), "sampled_token_ids": arr([2, 4])},
        ok(mask([[2], []], sampled_token_ids=[2, 4])),
        since="1.0",
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
        since="1.0",
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
        since="1.0",
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
        since="1.0",
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
        since="1.0",
    )

    e = book.file("ragged/encode.json", "ragged", "Encoding a mask as ragged ids + offsets.")
    e.add(
        "encode-issue-example",
        "ids int32 ascending per row, offsets int64.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"ids": arr([1, 5, 7]), "offsets": arr([0, 2, 2, 3], "int64")}},
        op="encode",
        since="1.0",
    )
    e.add(
        "encode-zero-rows",
        "No rows: ids [] and offsets [0].",
        "layouts",
        model([]),
        {"payload": {"ids": arr([], shape=[0]), "offsets": arr([0], "int64")}},
        op="encode",
        since="1.0",
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
        since="1.0",
    )

    bad = book.file("invalid/ragged.json", "ragged", "Ragged payloads that a reader must reject.")
    for slug, ids, offsets, why in (
        ("offsets-not-starting-at-zero", [3], [1, 1], "offsets[0] must be 0."),
        ("offsets-decreasing", [1, 2, 3], [0, 2, 1, 3], "offsets must not decrease."),
        ("offsets-end-before-nnz", [1, 2, 3], [0, 1, 2], "offsets[T] = 2 leaves an id outside every row."),
        ("offsets-end-past-nnz", [1, 2], [0, 1, 3], "offsets[T] = 3 points past the 2 ids (off by one)."),
    ):
        bad.add(
            slug, why, "layouts", {"ids": arr(ids), "offsets": arr(offsets, "int64")}, err("E_OFFSETS"), since="1.0"
        )
    bad.add(
        "offsets-empty",
        "offsets holds T + 1 >= 1 entries.",
        "layouts",
        {"ids": arr([], shape=[0]), "offsets": arr([], "int64", shape=[0])},
        err("E_OFFSETS"),
        since="1.0",
    )
    bad.add(
        "offsets-int64-not-truncated",
        "offsets[1] = 2**32 + 1: read as 64-bit it points past the one id; truncated to 32 bits it would look valid.",
        "layouts",
        {"ids": arr([3]), "offsets": hexarr([0, (1 << 32) + 1], "int64")},
        err("E_OFFSETS"),
        since="1.0",
    )
    bad.add(
        "minus-one-id",
        "-1 is dense padding, never a ragged id.",
        "model",
        {"ids": arr([4, -1]), "offsets": arr([0, 2], "int64")},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "id-equals-vocab-size",
        "Id 10 with vocab_size 10.",
        "model",
        {"ids": arr([10]), "offsets": arr([0, 1], "int64"), "vocab_size": 10},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "duplicate-id-unsorted",
        "A repeated id in an unsorted row.",
        "order",
        {"ids": arr([3, 1, 3]), "offsets": arr([0, 3], "int64")},
        err("E_DUPLICATE"),
        since="1.0",
    )
    bad.add(
        "duplicate-id-adjacent",
        "A repeated id next to itself, in the second row.",
        "model",
        {"ids": arr([1, 2, 2]), "offsets": arr([0, 1, 3], "int64")},
        err("E_DUPLICATE"),
        since="1.0",
    )
    bad.add(
        "float-ids",
        "ids must be integers.",
        "layouts",
        {"ids": arr([1.0], "float32"), "offsets": arr([0, 1], "int64")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "float-offsets",
        "offsets must be integers.",
        "layouts",
        {"ids": arr([1]), "offsets": arr([0.0, 1.0], "float64")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "unknown-dtype",
        "A dtype name outside the list.",
        "layouts",
        {"ids": {"dtype": "int33", "shape": [1], "values": [1]}, "offsets": arr([0, 1], "int64")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "two-dimensional-ids",
        "ids is one-dimensional.",
        "layouts",
        {"ids": arr([[1, 2]]), "offsets": arr([0, 2], "int64")},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "int64-id-beyond-int32",
        "An int64 id array holding 2**31 must not be truncated (E_RANGE; E_DTYPE from a reader that takes "
        "int32 ids only).",
        "model",
        {"ids": arr([1 << 31], "int64"), "offsets": arr([0, 1], "int64")},
        err("E_RANGE", "E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "offsets-bytes-short",
        "Two int64 offsets need 16 bytes; 12 are given.",
        "layouts",
        {"ids": arr([1]), "offsets": rawarr("int64", [2], bytes(12))},
        err("E_BYTES"),
        since="1.0",
    )
    bad.add(
        "forged-shape",
        "ids declaring 2**40 entries over 4 bytes.",
        "limits",
        {"ids": rawarr("int32", [1 << 40], bytes(4)), "offsets": arr([0, 1], "int64")},
        err("E_LIMIT"),
        since="1.0",
    )
    bad.add(
        "ids-missing",
        "A ragged payload without ids.",
        "layouts",
        {"offsets": arr([0], "int64")},
        err("E_SCHEMA"),
        since="1.0",
    )
    one = {"ids": arr([1]), "offsets": arr([0, 1], "int64")}
    bad.add(
        "vocab-size-zero",
        "vocab_size 0: a vocabulary has at least one id.",
        "model",
        {**one, "vocab_size": 0},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "vocab-size-negative", "A negative vocab_size.", "model", {**one, "vocab_size": -5}, err("E_RANGE"), since="1.0"
    )
    bad.add(
        "vocab-size-string",
        "vocab_size is an integer.",
        "model",
        {**one, "vocab_size": "10"},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "vocab-size-over-limit",
        "vocab_size above max_vocab (default 2**24).",
        "limits",
        {**one, "vocab_size": (1 << 24) + 1},
        err("E_LIMIT"),
        since="1.0",
    )
    three = {"ids": arr([1, 2, 3]), "offsets": arr([0, 1, 2, 3], "int64")}
    bad.add("nnz-over-limit", "nnz above max_nnz.", "limits", three, err("E_LIMIT"), limits={"max_nnz": 2}, since="1.0")
    bad.add(
        "rows-over-limit", "T above max_rows.", "limits", three, err("E_LIMIT"), limits={"max_rows": 2}, since="1.0"
    )
    bad.add(
        "row-width-over-limit",
        "A row wider than max_width.",
        "limits",
        {"ids": arr([1, 2, 3]), "offsets": arr([0, 3], "int64")},
        err("E_LIMIT"),
        limits={"max_width": 2},
        since="1.0",
    )
    two = {"ids": arr([5, 1]), "offsets": arr([0, 2, 2], "int64"), "vocab_size": 10}
    bad.add(
        "sampled-ids-wrong-length",
        "sampled_token_ids has T entries.",
        "companions",
        {**two, "sampled_token_ids": arr([5])},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "support-logprobs-wrong-length",
        "support_logprobs has nnz entries.",
        "companions",
        {**two, "support_logprobs": arr([-0.5, -1.0, -2.0], "float32")},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "temperature-wrong-length",
        "temperature has T entries.",
        "companions",
        {**two, "temperature": arr([1.0], "float32")},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "temperature-zero",
        "temperature > 0: zero is greedy decoding, not a temperature to divide by.",
        "companions",
        {**two, "temperature": arr([1.0, 0.0], "float32")},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "temperature-negative",
        "A negative temperature.",
        "companions",
        {**two, "temperature": arr([-0.5, 1.0], "float32")},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "temperature-infinite",
        "temperature is finite.",
        "companions",
        {**two, "temperature": hexarr([1.0, math.inf], "float32")},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "temperature-integer-dtype",
        "temperature is float32.",
        "companions",
        {**two, "temperature": arr([1, 1])},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "sampled-id-not-in-row",
        "A non-empty row must contain its sampled id.",
        "companions",
        {**two, "sampled_token_ids": arr([7, -1])},
        err("E_MISSING_SAMPLED"),
        since="1.0",
    )
    bad.add(
        "sampled-minus-one-on-non-empty-row",
        "-1 (nothing sampled) is allowed only on an empty row.",
        "companions",
        {**two, "sampled_token_ids": arr([-1, -1])},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "sampled-id-beyond-vocab-on-empty-row",
        "A sampled id on an empty row is still range-checked.",
        "companions",
        {**two, "sampled_token_ids": arr([5, 10])},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "sampled-ids-float",
        "sampled_token_ids is int32.",
        "companions",
        {**two, "sampled_token_ids": arr([5.0, -1.0], "float32")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "metadata-not-object",
        "metadata is an object.",
        "companions",
        {**one, "metadata": [1, 2]},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "metadata-nested-value",
        "metadata values are scalars.",
        "metadata",
        {**one, "metadata": {"x-run": {"seed": 1}}},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "metadata-top-k-string",
        "A defined metadata key has a defined type: top_k is an integer.",
        "metadata",
        {**one, "metadata": {"top_k": "50"}},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "metadata-top-p-boolean",
        "A boolean is not a number: top_p true.",
        "metadata",
        {**one, "metadata": {"top_p": True}},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "cu-seqlens-not-tiling",
        "cu_seqlens must end at T.",
        "segments",
        {**three, "cu_seqlens": arr([0, 2], "int64")},
        err("E_SEGMENTS"),
        since="1.0",
    )

    # Limits are inclusive maxima (8.1).
    f.add(
        "nnz-and-width-at-limit",
        "nnz = max_nnz and a row as wide as max_width are within the limits.",
        "limits",
        {"ids": arr([1, 5, 7]), "offsets": arr([0, 2, 2, 3], "int64")},
        ok(mask(ISSUE_ROWS)),
        limits={"max_nnz": 3, "max_width": 2},
        since="1.2",
    )

    keeps_stored_order(e, model(UNSORTED_ROWS), {"ids": arr([5, 1, 7]), "offsets": arr([0, 2, 2, 3], "int64")})

    # A null among integers is E_DTYPE, never a crash (section 7, 4.6).
    bad.add(
        "ids-null-value",
        "A null among the values of a typed int32 array: E_DTYPE.",
        "layouts",
        {"ids": {"dtype": "int32", "shape": [2], "values": [1, None]}, "offsets": arr([0, 2], "int64")},
        err("E_DTYPE"),
        since="1.2",
    )

    # 8.1: the bytes a mask takes, 4 per companion value.
    plain = f32_mask_bytes(ISSUE_ROWS, 2, 0, False)
    bad.add(
        "segments-over-max-bytes",
        f"ids, offsets and cu_seqlens of B = 2 take {plain} bytes (8.1); max_bytes {plain - 1} is E_LIMIT.",
        "limits",
        {"ids": arr([5, 1, 7]), "offsets": arr([0, 2, 2, 3], "int64"), "cu_seqlens": arr([0, 2, 3], "int64")},
        err("E_LIMIT"),
        limits={"max_bytes": plain - 1},
        since="1.2",
    )
    with_companions = f32_mask_bytes([[3, 5, 9], []], 1, 1, True)
    bad.add(
        "companions-over-max-bytes",
        f"ids, offsets, temperature and support_logprobs take {with_companions} bytes (8.1); max_bytes "
        f"{with_companions - 1} is E_LIMIT.",
        "limits",
        {
            "ids": arr([3, 5, 9]),
            "offsets": arr([0, 3, 3], "int64"),
            "temperature": arr([0.5, 1.0], "float32"),
            "support_logprobs": arr([-1.0, -2.0, -3.0], "float32"),
        },
        err("E_LIMIT"),
        limits={"max_bytes": with_companions - 1},
        since="1.2",
    )

    # 4: a missing required array is E_SCHEMA, never E_OFFSETS; a sampled id is never wrapped to int32.
    bad.add(
        "offsets-and-counts-missing",
        "A ragged payload with ids and no offsets: a missing required array is E_SCHEMA (4), never E_OFFSETS.",
        "layouts",
        {"ids": arr([5, 1, 7])},
        err("E_SCHEMA"),
        since="1.3",
    )
    bad.add(
        "sampled-id-int64-beyond-int32",
        "sampled_token_ids int64 [2**32 + 5] for the row {5}: wrapped to int32 it would read 5; E_RANGE, or "
        "E_DTYPE from a reader that takes int32 only (4).",
        "companions",
        {"ids": arr([5]), "offsets": arr([0, 1], "int64"), "sampled_token_ids": arr([2**32 + 5], "int64")},
        err("E_RANGE", "E_DTYPE"),
        since="1.3",
    )
