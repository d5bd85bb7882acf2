"""Packed (SPEC 4.4): a dense ``[T, W]`` array plus ``cu_seqlens [B + 1]``, int32 or int64."""

from __future__ import annotations

from .common import ISSUE_ROWS, UNSORTED_ROWS, Book, arr, dense_rows, err, mask, model, ok
from .shared import keeps_stored_order


def add_cases(book: Book) -> None:
    """Every packed case: ``packed/decode.json``, ``packed/encode.json``, ``invalid/packed.json``."""
    d = [[5, 1, -1], [-1, -1, -1], [7, -1, -1]]
    f = book.file("packed/decode.json", "packed", "Packed: dense [T, W] plus cu_seqlens [B + 1] (int32 or int64).")
    f.add(
        "two-sequences",
        "Two sequences of 2 and 1 rows; cu_seqlens int32 as SkyRL sends it.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 2, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
        since="1.0",
    )
    f.add(
        "cu-seqlens-int64",
        "cu_seqlens may be int64.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 2, 3], "int64"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "empty-sequence-between",
        "A sequence with no rows between two others.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 1, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 1, 1, 3])),
        since="1.0",
    )
    f.add(
        "empty-sequences-at-both-ends",
        "Empty sequences first and last.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([0, 0, 3, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 0, 3, 3])),
        since="1.0",
    )
    f.add(
        "all-empty-sequences",
        "Zero rows in three sequences.",
        "segments",
        {"dense": arr([], shape=[0, 3]), "cu_seqlens": arr([0, 0, 0, 0])},
        ok(mask([], cu=[0, 0, 0, 0])),
        since="1.0",
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
        since="1.0",
    )
    f.add(
        "one-row-per-sequence",
        "B = T.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 2, 3])},
        ok(mask(ISSUE_ROWS, cu=[0, 1, 2, 3])),
        since="1.0",
    )
    e = book.file("packed/encode.json", "packed", "Encoding a segmented mask as packed dense + cu_seqlens.")
    e.add(
        "encode-two-sequences",
        "Segments survive encoding (the round trip is checked).",
        "layouts",
        model([[1, 5], [], [7]], cu_seqlens=[0, 2, 3]),
        {"payload": {"dense": arr(dense_rows(ISSUE_ROWS, 2))}},
        op="encode",
        since="1.0",
    )

    bad = book.file("invalid/packed.json", "packed", "Packed payloads with a bad cu_seqlens.")
    bad.add(
        "cu-seqlens-missing", "Packed requires cu_seqlens.", "layouts", {"dense": arr(d)}, err("E_SCHEMA"), since="1.0"
    )
    for slug, cu, why in (
        ("cu-seqlens-short-of-rows", [0, 2], "cu[B] = 2 but T = 3"),
        ("cu-seqlens-past-rows", [0, 4], "cu[B] = 4 but T = 3"),
        ("cu-seqlens-decreasing", [0, 2, 1, 3], "cu_seqlens decrease"),
        ("cu-seqlens-not-starting-at-zero", [1, 3], "cu[0] must be 0"),
    ):
        bad.add(slug, f"{why}.", "model", {"dense": arr(d), "cu_seqlens": arr(cu)}, err("E_SEGMENTS"), since="1.0")
    bad.add(
        "cu-seqlens-empty",
        "cu_seqlens holds B + 1 >= 1 entries.",
        "segments",
        {"dense": arr(d), "cu_seqlens": arr([], shape=[0])},
        err("E_SEGMENTS"),
        since="1.0",
    )
    bad.add(
        "cu-seqlens-float",
        "cu_seqlens must be integers.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([0.0, 3.0], "float32")},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "cu-seqlens-two-dimensional",
        "cu_seqlens is one-dimensional.",
        "layouts",
        {"dense": arr(d), "cu_seqlens": arr([[0, 3]])},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "segments-over-limit",
        "B above max_segments.",
        "limits",
        {"dense": arr(d), "cu_seqlens": arr([0, 1, 2, 3])},
        err("E_LIMIT"),
        limits={"max_segments": 2},
        since="1.0",
    )
    bad.add(
        "padding-between-ids-second-sequence",
        "Padding rules hold in every sequence.",
        "layouts",
        {"dense": arr([[1, -1], [-1, 4]]), "cu_seqlens": arr([0, 1, 2])},
        err("E_PADDING"),
        since="1.0",
    )

    keeps_stored_order(e, model(UNSORTED_ROWS, cu_seqlens=[0, 2, 3]), {"dense": arr([[5, 1], [-1, -1], [7, -1]])})
