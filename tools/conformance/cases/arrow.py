"""Arrow IPC file (SPEC 9): one table row per segment, ``list<list<int32>>``, the header in the schema
metadata.
"""

from __future__ import annotations

import numpy as np

from . import arrow_shared
from .arrow_payloads import binaries, hx, ipc_blocks
from .common import ISSUE_ROWS, Book, companions_mask, err, mask, ok, unsorted_model
from .shared import canonicalizes_compact, declares_unsorted_rows


def add_cases(book: Book) -> None:
    """Every Arrow IPC file case: ``arrow/decode.json``, ``arrow/encode.json``, ``invalid/arrow.json``."""
    bins = binaries()

    f = book.file("arrow/decode.json", "arrow", "Arrow IPC file: one table row per segment, list<list<int32>>.")
    f.add(
        "issue-example",
        "Outer offsets are cu_seqlens, inner offsets are the ragged offsets; header in schema metadata.",
        "arrow",
        hx("arrow.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "companions-and-metadata",
        "Companion columns per row (support_logprobs per id); sampling_mask.metadata.<key> holds JSON.",
        "arrow",
        hx("arrow.companions"),
        ok(companions_mask(metadata={"top_k": 3, "producer": "vllm-0.32"})),
        since="1.0",
    )
    f.add(
        "user-columns-ignored",
        "Other columns (prompt ids, rewards) are allowed and do not change the mask.",
        "arrow",
        hx("arrow.user-columns"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
        since="1.0",
    )
    f.add(
        "large-lists",
        "large_list<large_list<int32>> is read like list<list<int32>>.",
        "arrow",
        hx("arrow.large-lists"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3])),
        since="1.0",
    )
    f.add(
        "empty-segments",
        "Table rows with no tokens are empty segments.",
        "arrow",
        hx("arrow.empty-segments"),
        ok(mask([[1], [2]], cu=[0, 0, 2, 2])),
        since="1.0",
    )
    f.add(
        "zero-segments",
        "A table of zero rows is a mask of zero segments and zero rows.",
        "arrow",
        hx("arrow.zero-segments"),
        ok(mask([], cu=[0])),
        since="1.0",
    )
    f.add(
        "compact-layout",
        "sampling_mask.layout compact: one compact blob per segment with its row and id counts.",
        "arrow",
        hx("arrow.compact-layout"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "no-batches",
        "A file with a schema and no record batch holds T = 0 and B = 0.",
        "arrow-batches",
        hx("arrow.no-batches"),
        ok(mask([], cu=[0], vocab=10)),
        since="1.0",
    )
    f.add(
        "zstd-compressed",
        "IPC body compression ZSTD: readers support it.",
        "arrow-batches",
        hx("arrow.zstd"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    e = arrow_shared.encode_file(book, "arrow")
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
        bad.add(slug, why, spec, payload, err(*codes), since="1.0")

    # Writers declare their rows' order truthfully; the compact layout stores rows as sets (9.2, 9.4).
    declares_unsorted_rows(e, "arrow-metadata", unsorted_model(), {"detected": "arrow"})
    canonicalizes_compact(e, "9.4")

    # 9.2: strict decimal metadata; 9.4: the compact count columns are int64; 8.4: a declared length is
    # bounded before anything is decompressed.
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
        bad.add(slug, why, spec, {"hex": bins[f"arrow.{key}"].hex()}, err(*codes), since="1.0")
    arrow_shared.companions_over_max_bytes(bad, "arrow")

    # 9.5: the leading magic of an IPC file (pyarrow checks only the trailing one).
    bad.add(
        "leading-magic-damaged",
        "An IPC file whose first byte is not the A of ARROW1 (the trailing magic intact): E_ENCODING.",
        "arrow-reading",
        {"hex": (b"B" + issue[1:]).hex()},
        err("E_ENCODING"),
        since="1.2",
    )
    bad.add(
        "leading-magic-last-byte",
        "An IPC file starting ARROW2 (the trailing magic intact): E_ENCODING.",
        "arrow-reading",
        {"hex": (issue[:5] + b"2" + issue[6:]).hex()},
        err("E_ENCODING"),
        since="1.2",
    )
    arrow_shared.zero_length_buffer_and_user_key(f, "arrow", 1 << 40)
    producer = b"sampling_mask.metadata.producer"
    bad.add(
        "metadata-key-not-utf8",
        "A metadata entry's key sampling_mask.metadata.<key> whose bytes are not UTF-8: E_ENCODING (9.2).",
        "arrow-metadata",
        {"hex": bins["arrow.companions"].replace(producer, producer[:-2] + b"\xff\xfe").hex()},
        err("E_ENCODING"),
        since="1.2",
    )
    arrow_shared.layout_option(e, "list")
    arrow_shared.compact_many_empty_rows(bad, "arrow")
    arrow_shared.large_user_column(f, "arrow")
    arrow_shared.buffers_inside_the_body(f, bad, "arrow")

    # 9.3: batches concatenate; 8.4: a footer whose blocks repeat or overlap.
    two = bins["arrow.one-batch-per-segment"]
    _, blocks = ipc_blocks(two)
    assert len(blocks) == 2 and blocks[1] == blocks[0] + 24, blocks
    first, second = blocks
    f.add(
        "one-batch-per-segment",
        "A file of two record batches, one per segment (two footer blocks): their concatenation (9.3).",
        "arrow-batches",
        {"hex": two.hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.3",
    )
    bad.add(
        "footer-block-repeated",
        "The footer names the first record batch twice (its second block a copy of the first): E_ENCODING (8.4).",
        "8.4",
        {"hex": (two[:second] + two[first : first + 24] + two[second + 24 :]).hex()},
        err("E_ENCODING"),
        since="1.3",
    )
    offset = int(np.frombuffer(two[first : first + 8], "<i8")[0])
    overlapping = np.frombuffer(two[second : second + 8], "<i8").copy()
    overlapping[0] = offset + 8
    bad.add(
        "footer-blocks-overlap",
        "The second footer block starts 8 bytes into the first batch's message: blocks overlap, E_ENCODING (8.4).",
        "8.4",
        {"hex": (two[:second] + overlapping.tobytes() + two[second + 8 :]).hex()},
        err("E_ENCODING"),
        since="1.3",
    )

    arrow_shared.byte_count(f, bad, "arrow")
    arrow_shared.unread_bitmap_counted(bad, "arrow.zstd", 29)
    arrow_shared.metadata_kind(bad, "arrow")
    arrow_shared.no_batches_keep_the_schema(f, "An IPC file with no record batch", "arrow.no-batches-companions")
