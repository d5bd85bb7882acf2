"""Counts (SPEC 4.2): ids int32 ``[nnz]`` and per-row lengths ``[T]``."""

from __future__ import annotations

from .common import ISSUE_ROWS, Book, arr, err, mask, model, ok


def add_cases(book: Book) -> None:
    """Every counts case: ``counts/decode.json``, ``counts/encode.json``, ``invalid/counts.json``."""
    f = book.file("counts/decode.json", "counts", "Counts: ids int32 [nnz] and per-row lengths int32 [T].")
    f.add(
        "issue-example",
        "counts are the row lengths; 0 is an empty row.",
        "layouts",
        {"ids": arr([5, 1, 7]), "counts": arr([2, 0, 1]), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "zero-count-is-no-mask",
        "prime-rl / verifiers: count 0 means no mask for that token.",
        "empty",
        {"ids": arr([1, 2, 3]), "counts": arr([0, 3, 0])},
        ok(mask([[], [1, 2, 3], []])),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "No rows at all.",
        "layouts",
        {"ids": arr([], shape=[0]), "counts": arr([], shape=[0])},
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "trailing-zero-counts",
        "Trailing zero counts are trailing empty rows.",
        "empty",
        {"ids": arr([6]), "counts": arr([1, 0, 0])},
        ok(mask([[6], [], []])),
        since="1.0",
    )
    f.add(
        "unsorted-rows",
        "Rows in any order.",
        "order",
        {"ids": arr([4, 2, 9, 8]), "counts": arr([2, 2])},
        ok(mask([[2, 4], [8, 9]])),
        since="1.0",
    )
    f.add(
        "with-cu-seqlens",
        "Counts with segments.",
        "layouts",
        {"ids": arr([4, 2, 9]), "counts": arr([2, 1, 0]), "cu_seqlens": arr([0, 1, 3], "int64")},
        ok(mask([[2, 4], [9], []], cu=[0, 1, 3])),
        since="1.0",
    )
    e = book.file("counts/encode.json", "counts", "Encoding a mask as ids + counts.")
    e.add(
        "encode-issue-example",
        "counts int32 [T].",
        "layouts",
        model([[1, 5], [], [7]]),
        {"payload": {"ids": arr([1, 5, 7]), "counts": arr([2, 0, 1])}},
        op="encode",
        since="1.0",
    )
    bad = book.file("invalid/counts.json", "counts", "Counts payloads that a reader must reject.")
    bad.add(
        "sum-below-nnz",
        "counts sum to 2 but there are 3 ids.",
        "layouts",
        {"ids": arr([1, 2, 3]), "counts": arr([1, 1])},
        err("E_OFFSETS"),
        since="1.0",
    )
    bad.add(
        "sum-above-nnz",
        "counts sum to 4 but there are 3 ids.",
        "layouts",
        {"ids": arr([1, 2, 3]), "counts": arr([2, 2])},
        err("E_OFFSETS"),
        since="1.0",
    )
    bad.add(
        "negative-count",
        "A negative row length.",
        "layouts",
        {"ids": arr([1, 2]), "counts": arr([3, -1])},
        err("E_OFFSETS"),
        since="1.0",
    )
    bad.add(
        "float-counts",
        "counts must be integers.",
        "layouts",
        {"ids": arr([1]), "counts": arr([1.0], "float32")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "two-dimensional-counts",
        "counts is one-dimensional.",
        "layouts",
        {"ids": arr([1]), "counts": arr([[1]])},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "rows-over-limit",
        "T above max_rows.",
        "limits",
        {"ids": arr([], shape=[0]), "counts": arr([0, 0, 0])},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since="1.0",
    )
    bad.add(
        "duplicate-id",
        "A repeated id within one row.",
        "model",
        {"ids": arr([1, 7, 7]), "counts": arr([1, 2])},
        err("E_DUPLICATE"),
        since="1.0",
    )

    # 4: an absent required array is E_SCHEMA.
    bad.add(
        "ids-missing",
        "A counts payload without ids: a missing required array is E_SCHEMA (section 4).",
        "layouts",
        {"counts": arr([0], "int32")},
        err("E_SCHEMA"),
        since="1.2",
    )
