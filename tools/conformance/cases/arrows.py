"""Arrow IPC stream (SPEC 9): the table of the file format as a stream of record batches."""

from __future__ import annotations

from . import arrow_shared
from .arrow_payloads import binaries, hx
from .common import ISSUE_ROWS, Book, err, mask, ok


def add_cases(book: Book) -> None:
    """Every Arrow IPC stream case: ``arrows/decode.json``, ``arrows/encode.json``, ``invalid/arrows.json``."""
    bins = binaries()

    f = book.file("arrows/decode.json", "arrows", "Arrow IPC stream: the same table as the file format.")
    f.add(
        "issue-example",
        "One record batch.",
        "arrow",
        hx("arrows.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "one-batch-per-segment",
        "Record batches concatenate: segments and rows of every batch, in order.",
        "arrow",
        hx("arrows.one-batch-per-segment"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "lz4-compressed",
        "IPC body compression LZ4_FRAME: readers support it.",
        "arrow-batches",
        hx("arrows.lz4"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    e = arrow_shared.encode_file(book, "arrows")
    stream = bins["arrows.issue-example"]
    bad = book.file("invalid/arrows.json", "arrows", "Arrow IPC streams that a reader must reject.")
    bad.add(
        "unknown-major-version",
        "sampling_mask.version 2 is unknown.",
        "versioning",
        hx("arrows.unknown-major-version"),
        err("E_VERSION"),
        since="1.0",
    )
    bad.add(
        "truncated",
        "A stream cut in the middle of a message.",
        "arrow",
        {"hex": stream[: len(stream) - 40].hex()},
        err("E_ENCODING"),
        since="1.0",
    )
    bad.add("not-arrow", "Random bytes.", "arrow", {"hex": "ffffffff0800000001020304"}, err("E_ENCODING"), since="1.0")

    # 8.4: a declared length is bounded before anything is decompressed.
    bad.add(
        "compressed-length-beyond-limit",
        "A stream batch whose LZ4 buffer declares 2**40 uncompressed bytes: E_LIMIT before decompressing.",
        "8.4",
        {"hex": bins["arrows.compressed-length-bomb"].hex()},
        err("E_LIMIT"),
        since="1.0",
    )
    arrow_shared.zero_length_buffer_and_user_key(f, "arrows", 1000)
    arrow_shared.layout_option(e, "compact")
    arrow_shared.large_user_column(f, "arrows")

    # 9.3: a stream of no batch is the empty mask, its V from the schema.
    f.add(
        "no-batches",
        "A stream with a schema and no record batch holds T = 0 and B = 0, with the schema's V (9.3): "
        "not the E_SCHEMA of concatenating zero masks (3.6).",
        "arrow-batches",
        {"hex": bins["arrows.no-batches"].hex()},
        ok(mask([], cu=[0], vocab=10)),
        since="1.3",
    )
    arrow_shared.buffers_inside_the_body(f, bad, "arrows")

    # 8.4: a stream without its end-of-stream marker is incomplete.
    end = bytes.fromhex("ffffffff00000000")
    for source, what in (("arrows.issue-example", "one batch"), ("arrows.one-batch-per-segment", "two batches")):
        assert bins[source].endswith(end), source
        bad.add(
            f"no-end-of-stream-marker-after-{what.replace(' ', '-')}",
            f"A stream of {what} cut exactly before its end-of-stream marker: incomplete, E_ENCODING (8.4), "
            "not silently a complete mask.",
            "8.4",
            {"hex": bins[source][: -len(end)].hex()},
            err("E_ENCODING"),
            since="1.3",
        )

    arrow_shared.byte_count(f, bad, "arrows")
    arrow_shared.unread_bitmap_counted(bad, "arrows.lz4", 35)
    arrow_shared.no_batches_keep_the_schema(f, "An IPC stream with no record batch", "arrows.no-batches-companions")
