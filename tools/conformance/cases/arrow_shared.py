"""Cases the Arrow forms share (SPEC 8.5.6, 9): an IPC file, an IPC stream and a Parquet file hold the
same table, so the spec states these alike for each; every form module calls them at their place in
its files, with its own payloads."""

from __future__ import annotations

import numpy as np

from .arrow_payloads import HALF_EMPTY_ROWS, MANY_EMPTY_ROWS, RANDOM_BLOB_BYTES, ZERO_BLOB_BYTES, binaries
from .common import ISSUE_ROWS, Book, File, companions_mask, err, f32_mask_bytes, mask, ok, roundtrip_model


def encode_file(book: Book, form: str) -> File:
    """``<form>/encode.json``, opened with the round trip every Arrow writer passes."""
    e = book.file(f"{form}/encode.json", form, f"Encoding a mask as {form}.")
    e.add(
        "encode-roundtrip-companions",
        "Segments, vocab_size, companions and metadata survive (the round trip is checked).",
        "arrow",
        roundtrip_model(),
        {"roundtrip": True},
        op="encode",
        since="1.0",
    )
    return e


def companions_over_max_bytes(bad: File, form: str) -> None:
    """SPEC 8.1, 8.4: a batch is bounded by what it declares, 4 bytes per companion value (arrow, parquet)."""
    bins = binaries()
    sample = companions_mask()
    arrow_bytes = f32_mask_bytes(sample["rows"], 1, 3, True)
    bad.add(
        "companions-over-max-bytes",
        f"A batch of every companion produces at least {arrow_bytes} bytes (8.1 from its declared "
        f"counts, 8.4); max_bytes {arrow_bytes - 1} is E_LIMIT before anything is read.",
        "8.4",
        {"hex": bins[f"{form}.companions"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": arrow_bytes - 1},
        since="1.2",
    )


def zero_length_buffer_and_user_key(f: File, form: str, offset: int) -> None:
    """SPEC 9.3, 9.5: a zero-length buffer reads nothing, whatever its offset; a schema-metadata key of
    any bytes that is not the format's is the user's, ignored (arrow, arrows)."""
    bins = binaries()
    pattern = np.array([0, 0, 0, 12], "<i8").tobytes()  # the outer list's validity (empty), its offsets
    data = bins[f"{form}.issue-example"]
    assert data.count(pattern) == 1
    f.add(
        "zero-length-buffer-past-body",
        f"A buffer of length 0 whose offset ({offset}) lies past the message body reads nothing: valid.",
        "arrow-reading",
        {"hex": data.replace(pattern, np.array([offset, 0, 0, 12], "<i8").tobytes()).hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.2",
    )
    user_key = b"sampling_mask.id_order"
    f.add(
        "user-key-not-utf8",
        "A schema-metadata key that is not UTF-8 and does not start with sampling_mask. is the "
        "user's: ignored, whatever its bytes (9.2).",
        "arrow-metadata",
        {"hex": data.replace(user_key, b"\xff\xfe" + user_key[2:]).hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.2",
    )


def layout_option(e: File, layout: str) -> None:
    """SPEC 9.4: writers name the layouts by their schema-metadata values (arrow, arrows, parquet)."""
    e.add(
        f"encode-layout-option-{layout}",
        f"The encode option layout = {layout} (the sampling_mask.layout value, 9.4) selects that layout.",
        "9.4",
        roundtrip_model(),
        {"roundtrip": True, "properties": {"layout": layout}},
        op="encode",
        options={"layout": layout},
        since="1.2",
    )


def compact_many_empty_rows(bad: File, form: str) -> None:
    """SPEC 8.4: the compact layout's bound comes from its count columns, before any blob (arrow, parquet)."""
    bins = binaries()
    many = MANY_EMPTY_ROWS
    produced = 8 * (many + 1) + 8 * 2  # 8.1: no ids, T + 1 offsets, B + 1 = 2 cu_seqlens entries
    bad.add(
        "compact-many-empty-rows-over-max-bytes",
        f"A compact batch of one segment of {many} empty rows produces {produced} bytes (8.1, T from the "
        f"count column, 8.4) though it stores about {many} bytes: max_bytes {produced // 2} is E_LIMIT.",
        "8.4",
        {"hex": bins[f"{form}.compact-many-empty-rows"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": produced // 2},
        since="1.3",
    )


def large_user_column(f: File, form: str) -> None:
    """SPEC 8.1, 9.5: the stored buffers are not what a batch produces (arrow, arrows)."""
    bins = binaries()
    f.add(
        "large-user-column-within-max-bytes",
        "A batch whose body stores 8 KiB of a user column produces the mask of section 14 (68 bytes, 8.1): "
        "max_bytes 6000 is enough; the stored buffers are not counted (8.1, 9.5).",
        "arrow-reading",
        {"hex": bins[f"{form}.large-user-column"].hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        limits={"max_bytes": 6000},
        since="1.3",
    )


def buffers_inside_the_body(f: File, bad: File, form: str) -> None:
    """SPEC 9.3: a validity bitmap of a node with no null is never read; every other buffer lies inside the
    body (arrow, arrows)."""
    bins = binaries()
    pattern = np.array([0, 0, 0, 12], "<i8").tobytes()  # the outer list's validity (empty), its offsets
    data = bins[f"{form}.issue-example"]
    assert data.count(pattern) == 1
    f.add(
        "unread-validity-bitmap-outside-body",
        "The outer list (null count 0) names a validity bitmap of 256 bytes at offset 64 of a 48-byte "
        "body: never read, so never checked (9.3); valid.",
        "arrow-batches",
        {"hex": data.replace(pattern, np.array([64, 256, 0, 12], "<i8").tobytes()).hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.3",
    )
    bad.add(
        "offsets-buffer-outside-body",
        "The outer list's offsets buffer (12 bytes) at offset 2**20 of a 48-byte body: E_ENCODING (9.3).",
        "arrow-batches",
        {"hex": data.replace(pattern, np.array([0, 0, 1 << 20, 12], "<i8").tobytes()).hex()},
        err("E_ENCODING"),
        since="1.3",
    )


def byte_count(f: File, bad: File, form: str) -> None:
    """SPEC 8.5, 8.5.6: one count per decode: the compressed lengths and the mask's bytes add up, every
    batch adds to the count and to the limits, a buffer stored uncompressed counts nothing (arrow, arrows)."""
    bins = binaries()
    many, half = MANY_EMPTY_ROWS, HALF_EMPTY_ROWS
    declared = 4 * (many + 1) + 8  # the inner and outer offsets' uncompressed lengths (no id)
    produced = 8 * (many + 1) + 8 * 2
    bad.add(
        "compressed-lengths-and-mask-count-together",
        f"A zstd batch of {many} empty rows declares {declared} uncompressed bytes of offsets and produces "
        f"a mask of {produced} (8.1): the count is their sum, {declared + produced}, so max_bytes "
        f"1000000 (above each alone) is E_LIMIT (8.5.6 step 3).",
        "8.5.6",
        {"hex": bins[f"{form}.many-empty-rows-zstd"].hex()},
        err("E_LIMIT"),
        limits={"max_bytes": 1_000_000},
        since="1.4",
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
        since="1.4",
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
        since="1.4",
    )
    bad.add(
        "batches-together-over-max-rows",
        "Two batches of 2 and 1 rows: each within max_rows = 2, the mask of both (3 rows) is not: E_LIMIT "
        "(8.5: the limits bound the decode's mask).",
        "8.5",
        {"hex": bins[f"{form}.one-batch-per-segment"].hex()},
        err("E_LIMIT"),
        limits={"max_rows": 2},
        since="1.4",
    )
    f.add(
        "buffer-stored-uncompressed-not-counted",
        f"An LZ4 batch stores its {RANDOM_BLOB_BYTES}-byte user column as is (prefix -1): the body holds those "
        "bytes and nothing decompresses them, so they count nothing; the batch counts about 3.4 KB with the "
        "whole allowance, and max_bytes 6000 reads it (8.5.6 step 3).",
        "8.5.6",
        {"hex": bins[f"{form}.blob-stored-uncompressed"].hex()},
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        limits={"max_bytes": 6000},
        since="1.4",
    )


def unread_bitmap_counted(bad: File, source: str, length: int) -> None:
    """SPEC 8.5.6: an unread validity bitmap (null count 0) inside a compressed body counts its declared
    length (``source``: a compressed batch whose outer list's offsets take ``length`` bytes)."""
    bins = binaries()
    data = bins[source]
    buffers = np.array([0, 0, 0, length], "<i8").tobytes()  # the outer list's validity (empty), its offsets
    assert data.count(buffers) == 1
    forged = data.replace(buffers, np.array([8, 16, 0, length], "<i8").tobytes())
    bad.add(
        "unread-validity-bitmap-declared-length-counted",
        "A compressed batch whose outer list (null count 0) names a 16-byte validity bitmap at offset 8 of "
        "the body, where the offsets' compressed frame starts: never read as a bitmap, its first 8 bytes "
        "still declare its uncompressed length (above 2**54), which the count holds: E_LIMIT (8.5.6 step 3).",
        "8.5.6",
        {"hex": forged.hex()},
        err("E_LIMIT"),
        since="1.4",
    )


def metadata_kind(bad: File, form: str) -> None:
    """SPEC 5.2, 9.2: a schema-metadata value keeps its JSON kind: 4.0 is a float (arrow, parquet)."""
    bins = binaries()
    bad.add(
        "metadata-top-k-integral-float",
        "sampling_mask.metadata.top_k is the JSON text 4.0: a float, and top_k takes integers only: E_SCHEMA "
        "(5.2, 9.2), never read as 4.",
        "9.2",
        {"hex": bins[f"{form}.metadata-top-k-integral-float"].hex()},
        err("E_SCHEMA"),
        since="1.4",
    )


def no_batches_keep_the_schema(f: File, what: str, source: str) -> None:
    """SPEC 9.3: a file of no batch holds the empty mask with what its schema declares: V, metadata and
    the companions, empty (arrow, arrows, parquet)."""
    bins = binaries()
    f.add(
        "no-batches-keeps-companions-and-metadata",
        f"{what} whose schema declares four companions and metadata: T = 0, B = 0, "
        "with V, the metadata and the four companions, empty (9.3).",
        "arrow-batches",
        {"hex": bins[source].hex()},
        ok(
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
        ),
        since="1.4",
    )
