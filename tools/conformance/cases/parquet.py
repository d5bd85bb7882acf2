"""Parquet (SPEC 9.3): the Arrow table stored in a Parquet file, one row group or more."""

from __future__ import annotations

from . import arrow_shared
from .arrow_payloads import HALF_EMPTY_ROWS, MANY_EMPTY_ROWS, ZERO_BLOB_BYTES, binaries, hx
from .common import ISSUE_ROWS, Book, companions_mask, err, mask, ok
from .shared import canonicalizes_compact


def add_cases(book: Book) -> None:
    """Every Parquet case: ``parquet/decode.json``, ``parquet/encode.json``, ``invalid/parquet.json``."""
    bins = binaries()

    f = book.file("parquet/decode.json", "parquet", "Parquet: the Arrow table stored by pyarrow.parquet.")
    f.add(
        "issue-example",
        "The Arrow schema and metadata survive Parquet.",
        "arrow",
        hx("parquet.issue-example"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "companions-and-metadata",
        "Companions and metadata survive Parquet.",
        "arrow",
        hx("parquet.companions"),
        ok(companions_mask(metadata={"top_k": 3, "producer": "vllm-0.32"})),
        since="1.0",
    )
    f.add(
        "two-row-groups",
        "Row groups are batches: the mask is their concatenation.",
        "arrow-batches",
        hx("parquet.two-row-groups"),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    e = arrow_shared.encode_file(book, "parquet")
    pq_bytes = bins["parquet.issue-example"]
    bad = book.file("invalid/parquet.json", "parquet", "Parquet files that a reader must reject.")
    bad.add(
        "unknown-major-version",
        "sampling_mask.version 2 is unknown.",
        "versioning",
        hx("parquet.unknown-major-version"),
        err("E_VERSION"),
        since="1.0",
    )
    bad.add(
        "truncated",
        "The first half of a valid file.",
        "arrow",
        {"hex": pq_bytes[: len(pq_bytes) // 2].hex()},
        err("E_ENCODING"),
        since="1.0",
    )
    bad.add(
        "not-parquet",
        "PAR1 magic around garbage.",
        "arrow",
        {"hex": (b"PAR1" + b"\x00" * 8 + b"PAR1").hex()},
        err("E_ENCODING"),
        since="1.0",
    )

    canonicalizes_compact(e, "9.4")
    arrow_shared.companions_over_max_bytes(bad, "parquet")
    arrow_shared.layout_option(e, "list")
    arrow_shared.compact_many_empty_rows(bad, "parquet")

    # 8.4: a Parquet chunk is found by position; path_in_schema changes nothing.
    many = MANY_EMPTY_ROWS
    produced = 8 * (many + 1) + 8 * 2  # 8.1: no ids, T + 1 offsets, B + 1 = 2 cu_seqlens entries
    needle = b"\x58\x0dsampling_mask"  # list header (5 strings), then the first, "sampling_mask"
    for source in ("parquet.issue-example", "parquet.many-empty-rows"):
        assert bins[source].count(needle) == 1, source
    f.add(
        "path-in-schema-not-utf8",
        "ColumnMetaData.path_in_schema[0] of the mask's chunk is not UTF-8 (\\x80ampling_mask), the schema "
        "intact: the chunk belongs to the schema leaf at its position, and the path is not read (8.4).",
        "8.4",
        {"hex": bins["parquet.issue-example"].replace(needle, b"\x58\x0d\x80ampling_mask").hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.3",
    )
    bad.add(
        "many-empty-rows-over-max-bytes",
        f"A row group of {many} empty rows declares {many} values in the mask's leaf chunk: T bounded by "
        f"them, 8.1 gives about {produced} bytes; max_bytes {produced // 2} is E_LIMIT (8.4).",
        "8.4",
        {"hex": bins["parquet.many-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": produced // 2},
        since="1.3",
    )
    bad.add(
        "path-in-schema-wrong-name-still-bounded",
        "The mask's chunk names another path (xampling_mask, valid UTF-8): it is still the mask's chunk by "
        f"position, and its {many} values bound the row group: E_LIMIT under max_bytes {produced // 2} (8.4).",
        "8.4",
        {"hex": bins["parquet.many-empty-rows"].replace(needle, b"\x58\x0dxampling_mask").hex()},
        err("E_LIMIT"),
        limits={"max_bytes": produced // 2},
        since="1.3",
    )

    # 9.3: a file of no row is the empty mask, its V from the schema.
    f.add(
        "no-rows",
        "A Parquet file of zero rows holds T = 0 and B = 0, with the schema's V (9.3).",
        "arrow-batches",
        {"hex": bins["parquet.no-rows"].hex()},
        ok(mask([], cu=[0], vocab=10)),
        since="1.3",
    )

    # 8.5, 8.5.7: one count per decode: every row group adds to it and to the limits; in the compact
    # layout the pages and the rows of the count columns add up.
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
        since="1.4",
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
        since="1.4",
    )
    bad.add(
        "batches-together-over-max-rows",
        "Two row groups of 2 and 1 rows: each within max_rows = 2, the mask of both (3 rows) is not: E_LIMIT "
        "(8.5: the limits bound the decode's mask).",
        "8.5",
        {"hex": bins["parquet.two-row-groups"].hex()},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since="1.4",
    )
    compact_rows = 8 * (many + 1) + 8 * 2
    bad.add(
        "compact-pages-and-rows-count-together",
        f"A compact row group of {many} empty rows: its pages decode to about 100 KB (the blob's row lengths) "
        f"and its count column gives T = {many}, a mask of {compact_rows} bytes; together about 900 KB, so max_bytes "
        f"850000 (above the mask alone) is E_LIMIT (8.5.7 steps 2 and 4).",
        "8.5.7",
        {"hex": bins["parquet.compact-many-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": 850_000},
        since="1.4",
    )

    # 8.5.7 step 1: a Parquet file starts with PAR1 as it ends with it.
    data = bins["parquet.issue-example"]
    assert data[:4] == b"PAR1"
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
            since="1.4",
        )
    arrow_shared.metadata_kind(bad, "parquet")
    arrow_shared.no_batches_keep_the_schema(f, "A Parquet file of no row", "parquet.no-rows-companions")
