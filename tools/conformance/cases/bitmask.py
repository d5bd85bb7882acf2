"""Bitmask (SPEC 4.5): uint8 ``[T, ceil(V / 8)]``, id i is bit ``i % 8`` of byte ``i // 8``."""

from __future__ import annotations

from .common import ISSUE_ROWS, Book, arr, err, mask, model, ok, rawarr, vllm_source


def _bits(rows: list[list[int]], vocab: int) -> list[list[int]]:
    """Little bit order: id i is bit i % 8 of byte i // 8 (written out here, not by the library)."""
    out = []
    for row in rows:
        b = [0] * ((vocab + 7) // 8)
        for i in row:
            b[i // 8] |= 1 << (i % 8)
        out.append(b)
    return out


def add_cases(book: Book) -> None:
    """Every bitmask case: ``bitmask/decode.json``, ``bitmask/encode.json``, ``invalid/bitmask.json``."""
    src = vllm_source()
    f = book.file(
        "bitmask/decode.json", "bitmask", "Bitmask: uint8 [T, ceil(V / 8)], id i is bit i % 8 of byte i // 8."
    )
    f.add(
        "issue-example",
        "Bits 1 and 5 of byte 0 are ids 1 and 5; bit 7 of byte 0 is id 7.",
        "layouts",
        {"bitmask": arr([[0x22, 0x00], [0x00, 0x00], [0x80, 0x00]], "uint8"), "vocab_size": 10},
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "little-bit-order",
        "Bit 0 is the least significant: 0x01 0x01 is ids 0 and 8, 0x80 0x80 is ids 7 and 15.",
        "layouts",
        {"bitmask": arr([[0x01, 0x01], [0x80, 0x80]], "uint8"), "vocab_size": 16},
        ok(mask([[0, 8], [7, 15]], vocab=16)),
        since="1.0",
    )
    f.add(
        "last-valid-id",
        "With V = 10 the last id is bit 1 of byte 1.",
        "layouts",
        {"bitmask": arr([[0x00, 0x02]], "uint8"), "vocab_size": 10},
        ok(mask([[9]], vocab=10)),
        since="1.0",
    )
    f.add(
        "full-vocabulary-row",
        "Every id of a 12-token vocabulary: 0xff 0x0f.",
        "model",
        {"bitmask": arr([[0xFF, 0x0F]], "uint8"), "vocab_size": 12},
        ok(mask([list(range(12))], vocab=12)),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "T = 0.",
        "layouts",
        {"bitmask": arr([], "uint8", shape=[0, 2]), "vocab_size": 10},
        ok(mask([], vocab=10)),
        since="1.0",
    )
    f.add(
        "vocab-size-one",
        "V = 1: one byte per row, only bit 0 usable.",
        "layouts",
        {"bitmask": arr([[1], [0]], "uint8"), "vocab_size": 1},
        ok(mask([[0], []], vocab=1)),
        since="1.0",
    )
    f.add(
        "with-cu-seqlens-and-sampled",
        "Segments and sampled ids with a bitmask.",
        "companions",
        {
            "bitmask": arr(_bits([[2, 3], [9]], 10), "uint8"),
            "vocab_size": 10,
            "cu_seqlens": arr([0, 1, 2], "int64"),
            "sampled_token_ids": arr([3, 9]),
        },
        ok(mask([[2, 3], [9]], cu=[0, 1, 2], vocab=10, sampled_token_ids=[3, 9])),
        since="1.0",
    )
    f.add(
        "vllm-0.32-wide-row",
        "vLLM 0.32's bitmask fallback for a real row of 71 ids (wider than the 64-id compact buffer).",
        "layouts",
        {
            "bitmask": {"dtype": "uint8", "shape": [1, 125], "hex": src["bitmask_hex"]["21"]},
            "vocab_size": src["vocab_size"],
        },
        ok(mask([src["rows"]["21"]], vocab=src["vocab_size"])),
        since="1.0",
    )
    e = book.file("bitmask/encode.json", "bitmask", "Encoding a mask as a little-bit-order bitmask.")
    e.add(
        "encode-issue-example",
        "The vocab_size comes from the mask.",
        "layouts",
        model([[1, 5], [], [7]], vocab_size=10),
        {"payload": {"bitmask": arr(_bits(ISSUE_ROWS, 10), "uint8")}},
        op="encode",
        since="1.0",
    )
    bad = book.file("invalid/bitmask.json", "bitmask", "Bitmask payloads that a reader must reject.")
    bad.add(
        "bit-past-vocab-size",
        "V = 10: bit 2 of byte 1 would be id 10; padding bits must be zero.",
        "layouts",
        {"bitmask": arr([[0x00, 0x04]], "uint8"), "vocab_size": 10},
        err("E_PADDING"),
        since="1.0",
    )
    bad.add(
        "high-padding-bit",
        "V = 10: the top bit of the last byte (id 15).",
        "layouts",
        {"bitmask": arr([[0x01, 0x00], [0x00, 0x80]], "uint8"), "vocab_size": 10},
        err("E_PADDING"),
        since="1.0",
    )
    bad.add(
        "row-bytes-too-many",
        "V = 10 needs 2 bytes per row, not 3.",
        "layouts",
        {"bitmask": arr([[0, 0, 0]], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "row-bytes-too-few",
        "V = 10 needs 2 bytes per row, not 1.",
        "layouts",
        {"bitmask": arr([[1]], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "int32-dtype",
        "A bitmask is uint8.",
        "layouts",
        {"bitmask": arr([[1, 0]]), "vocab_size": 10},
        err("E_DTYPE"),
        since="1.0",
    )
    bad.add(
        "one-dimensional",
        "A bitmask is [T, ceil(V / 8)].",
        "layouts",
        {"bitmask": arr([1, 0], "uint8"), "vocab_size": 10},
        err("E_SHAPE"),
        since="1.0",
    )
    bad.add(
        "vocab-size-missing",
        "A bitmask cannot be read without vocab_size.",
        "layouts",
        {"bitmask": arr([[1, 0]], "uint8")},
        err("E_SCHEMA"),
        since="1.0",
    )
    bad.add(
        "vocab-size-zero",
        "vocab_size >= 1.",
        "model",
        {"bitmask": arr([[]], "uint8", shape=[1, 0]), "vocab_size": 0},
        err("E_RANGE"),
        since="1.0",
    )
    bad.add(
        "vocab-size-over-limit",
        "vocab_size above max_vocab.",
        "limits",
        {"bitmask": arr([[1, 0]], "uint8"), "vocab_size": 16},
        err("E_LIMIT"),
        limits={"max_vocab": 8},
        since="1.0",
    )
    bad.add(
        "bytes-short",
        "Shape [2, 2] uint8 needs 4 bytes; 3 are given.",
        "layouts",
        {"bitmask": rawarr("uint8", [2, 2], b"\x01\x00\x02"), "vocab_size": 10},
        err("E_BYTES"),
        since="1.0",
    )
    bad.add(
        "sampled-id-not-set",
        "The sampled id's bit is not set in its non-empty row.",
        "companions",
        {"bitmask": arr(_bits([[1, 5]], 10), "uint8"), "vocab_size": 10, "sampled_token_ids": arr([4])},
        err("E_MISSING_SAMPLED"),
        since="1.0",
    )
    bad.add(
        "encode-without-vocab-size",
        "Encoding as a bitmask needs a vocab_size.",
        "layouts",
        model([[1, 5]]),
        err("E_SCHEMA"),
        op="encode",
        since="1.0",
    )
