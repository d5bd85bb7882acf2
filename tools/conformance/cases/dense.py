"""Dense int32 ``[T, W]`` (SPEC 4.3): a row's ids, then -1 trailing padding."""

from __future__ import annotations

import numpy as np

from .common import ISSUE_ROWS, UNSORTED_ROWS, Book, arr, dense_rows, err, hexarr, mask, model, ok, rawarr, vllm_source
from .shared import keeps_stored_order


def add_cases(book: Book) -> None:
    """Every dense case: ``dense/decode.json``, ``dense/encode.json``, ``invalid/dense.json``."""
    f = book.file("dense/decode.json", "dense", "Dense int32 [T, W]: a row's ids, then -1 trailing padding.")
    f.add(
        "issue-example",
        "The spec's worked example: -1 padding after the ids; an all -1 row is an empty row.",
        "layouts",
        {"dense": arr([[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]]), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "issue-example-hex",
        "The same mask as raw little-endian int32 bytes.",
        "layouts",
        {"dense": hexarr([[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]], "int32"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "full-rows-no-padding",
        "Rows exactly as wide as the array carry no padding.",
        "layouts",
        {"dense": arr([[1, 2, 3], [4, 5, 6]])},
        ok(mask([[1, 2, 3], [4, 5, 6]])),
        since="1.0",
    )
    f.add(
        "rank-order-row",
        "SkyRL writes ids in rank order; order inside a row carries no meaning.",
        "order",
        {"dense": arr([[9, 3, 7, -1]])},
        ok(mask([[3, 7, 9]])),
        since="1.0",
    )
    f.add(
        "all-padding-rows",
        "Observation tokens are all -1 rows: empty rows, no support recorded.",
        "empty",
        {"dense": arr([[-1, -1], [-1, -1], [-1, -1]])},
        ok(mask([[], [], []])),
        since="1.0",
    )
    f.add(
        "trailing-empty-rows",
        "Empty rows at the end are rows: T counts them.",
        "empty",
        {"dense": arr([[2, -1], [-1, -1], [-1, -1]])},
        ok(mask([[2], [], []])),
        since="1.0",
    )
    f.add(
        "leading-empty-rows",
        "Empty rows before the first id.",
        "empty",
        {"dense": arr([[-1, -1], [4, 0]])},
        ok(mask([[], [0, 4]])),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "T = 0: no rows, one empty segment.",
        "layouts",
        {"dense": arr([], shape=[0, 4])},
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "zero-width",
        "W = 0 is a valid width: every row is empty.",
        "layouts",
        {"dense": arr([[], [], []], shape=[3, 0])},
        ok(mask([[], [], []])),
        since="1.0",
    )
    f.add(
        "zero-rows-zero-width",
        "A [0, 0] array.",
        "layouts",
        {"dense": arr([], shape=[0, 0])},
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "singleton-rows",
        "About half of real rows hold one id (greedy-like steps).",
        "layouts",
        {"dense": arr([[4], [8], [15]])},
        ok(mask([[4], [8], [15]])),
        since="1.0",
    )
    f.add(
        "id-zero",
        "Id 0 is an id, not padding.",
        "layouts",
        {"dense": arr([[0, -1], [-1, -1]])},
        ok(mask([[0], []])),
        since="1.0",
    )
    f.add(
        "maximal-int32-id",
        "The largest int32 is a valid id when vocab_size is unknown.",
        "model",
        {"dense": arr([[2147483647, 0]])},
        ok(mask([[0, 2147483647]])),
        since="1.0",
    )
    f.add(
        "vocab-boundary",
        "Ids 0 and vocab_size - 1 are both in range.",
        "model",
        {"dense": arr([[9, 0]]), "vocab_size": 10},
        ok(mask([[0, 9]], vocab=10)),
        since="1.0",
    )
    f.add(
        "ties-wider-than-top-k",
        "Ties at the top-k boundary make a row wider than top_k; the width is not bounded by top_k.",
        "model",
        {"dense": arr([[11, 3, 7, 5]]), "metadata": {"top_k": 2}},
        ok(mask([[3, 5, 7, 11]], metadata={"top_k": 2})),
        since="1.0",
    )
    f.add(
        "wide-padding",
        "Padding wider than any row changes nothing.",
        "layouts",
        {"dense": arr([[3] + [-1] * 7, [6, 2] + [-1] * 6])},
        ok(mask([[3], [2, 6]])),
        since="1.0",
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
        since="1.0",
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
        since="1.0",
    )
    src = vllm_source()
    picks = ["17", "18", "19"]
    f.add(
        "vllm-0.32-rows-as-dense",
        "Three real vLLM 0.32 rows (ascending) as our dense layout, width 64. The -1 padding is ours:"
        " vLLM's compact buffer leaves undefined bytes past each row's count.",
        "layouts",
        {"dense": arr([src["compact_token_ids"][i] for i in picks]), "vocab_size": src["vocab_size"]},
        ok(mask([src["rows"][i] for i in picks], vocab=src["vocab_size"])),
        since="1.1",
    )

    e = book.file("dense/encode.json", "dense", "Encoding a mask as dense int32 [T, W] with -1 trailing padding.")
    e.add(
        "encode-default-width",
        "Without a width, W is the widest row.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 2))}},
        op="encode",
        since="1.0",
    )
    e.add(
        "encode-explicit-width",
        "to_dense(width=4): row 0 holds {1, 5} then -1, -1.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 4))}},
        op="encode",
        options={"width": 4},
        since="1.0",
    )
    e.add(
        "encode-zero-rows",
        "No rows encode as a [0, 0] array.",
        "layouts",
        model([]),
        {"payload": {"dense": arr([], shape=[0, 0])}},
        op="encode",
        since="1.0",
    )
    e.add(
        "encode-all-empty-rows",
        "Empty rows encode as a [T, 0] array unless a width is given.",
        "layouts",
        model([[], []]),
        {"payload": {"dense": arr([[], []], shape=[2, 0])}},
        op="encode",
        since="1.0",
    )

    bad = book.file("invalid/dense.json", "dense", "Dense payloads that a reader must reject.")
    bad.add(
        "padding-between-ids",
        "-1 between two ids is not trailing padding.",
        "layouts",
        {"dense": arr([[5, -1, 1]])},
        err("E_PADDING"),
        since="1.0",
    )
    bad.add(
        "padding-before-ids",
        "A row that starts with -1 and then holds an id.",
        "layouts",
        {"dense": arr([[4, 2], [-1, 3]])},
        err("E_PADDING"),
        since="1.0",
    )
    bad.add(
        "negative-id-other-than-padding",
        "-2 is neither an id nor the padding value.",
        "layouts",
        {"dense": arr([[3, -2]])},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "id-equals-vocab-size",
        "Id 10 with vocab_size 10 is out of range.",
        "model",
        {"dense": arr([[10, -1]]), "vocab_size": 10},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "duplicate-id",
        "An id twice in one row: rows are sets.",
        "model",
        {"dense": arr([[3, 3, -1]])},
        err("E_DUPLICATE"),
        since="1.0",
    )
    bad.add(
        "float32-dtype",
        "Dense ids must be integers.",
        "layouts",
        {"dense": arr([[1.0, 2.0]], "float32")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "unknown-dtype",
        "A dtype name outside the list.",
        "layouts",
        {"dense": {"dtype": "complex64", "shape": [1, 1], "hex": "0000000000000000"}},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "one-dimensional",
        "Dense is [T, W]; a flat array is not.",
        "layouts",
        {"dense": arr([1, 2, 3])},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "three-dimensional",
        "A trainer's [B, T, K] must be flattened to [T, W] with cu_seqlens first.",
        "layouts",
        {"dense": arr([[[1, -1], [2, -1]]])},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "negative-dimension",
        "A declared dimension below zero.",
        "layouts",
        {"dense": rawarr("int32", [-1, 2], b"")},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "bytes-short",
        "Shape [2, 2] int32 needs 16 bytes; 12 are given.",
        "layouts",
        {"dense": rawarr("int32", [2, 2], np.array([1, 2, 3], "<i4").tobytes())},
        err("E_BYTES"),
        since="1.0",
    )
    bad.add(
        "bytes-long",
        "Shape [1, 2] int32 needs 8 bytes; 12 are given.",
        "layouts",
        {"dense": rawarr("int32", [1, 2], np.array([1, 2, 3], "<i4").tobytes())},
        err("E_BYTES"),
        since="1.0",
    )
    bad.add(
        "forged-shape",
        "A tiny buffer declaring a 2**40 x 2**20 array must be refused before anything is allocated.",
        "limits",
        {"dense": rawarr("int32", [1 << 40, 1 << 20], b"\x01\x00\x00\x00")},
        err("E_LIMIT"),
        since="1.0",
    )
    bad.add(
        "int64-id-beyond-int32",
        "An int64 array whose value does not fit int32 must not be truncated: E_RANGE from a reader that "
        "accepts other integer widths (SPEC 4 MAY), E_DTYPE from one that does not.",
        "model",
        {"dense": arr([[2147483648]], "int64")},
        err("E_RANGE", "E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"dense": arr([[1], [2], [3]])},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since="1.0",
    )
    bad.add(
        "width-over-limit",
        "W above max_width, even when rows are narrower.",
        "limits",
        {"dense": arr([[1, -1, -1]])},
        err("E_LIMIT"),
        limits={"max_width": 2},
        since="1.0",
    )
    bad.add(
        "missing-array",
        "A dense payload without its array.",
        "layouts",
        {"vocab_size": 10},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "sampled-id-not-in-row",
        "A non-empty row must contain its sampled id.",
        "companions",
        {"dense": arr([[5, 1], [7, -1]]), "sampled_token_ids": arr([5, 8])},
        err("E_MISSING_SAMPLED"),
        since="1.0",
    )
    bad.add(
        "encode-width-too-small",
        "Encoding with a width below the widest row.",
        "layouts",
        model([[1, 5], [], [7]]),
        err("E_WIDTH"),
        op="encode",
        options={"width": 1},
        since="1.0",
    )

    keeps_stored_order(e, model(UNSORTED_ROWS), {"dense": arr([[5, 1], [-1, -1], [7, -1]])})

    # A dense array of shape [T, 0] still produces T + 1 offsets (8.1, 8.4).
    rows = 100
    zero_width = 8 * (rows + 1) + 8 * 2
    bad.add(
        "zero-width-rows-over-max-bytes",
        f"A dense [{rows}, 0] array holds no byte but produces {rows + 1} offsets: {zero_width} bytes (8.1, "
        f"8.4); max_bytes {zero_width - 1} is E_LIMIT.",
        "8.4",
        {"dense": arr([[]] * rows, "int32", shape=[rows, 0])},
        err("E_LIMIT"),
        limits={"max_bytes": zero_width - 1},
        since="1.3",
    )
