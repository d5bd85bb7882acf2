"""The compact layout (SPEC 12): each row's sorted deltas, bit-packed in blocks of 32."""

from __future__ import annotations

from typing import Any

from .common import Book, arr, compact_bytes, err, mask, model, ok, vllm_source


def _compact(rows: list[list[int]], **extra: Any) -> dict[str, Any]:
    data = compact_bytes(rows)
    payload: dict[str, Any] = {
        "compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()},
        "num_rows": len(rows),
        "nnz": sum(len(r) for r in rows),
    }
    payload.update(extra)
    return payload


def _raw_compact(data: bytes, num_rows: Any, nnz: Any) -> dict[str, Any]:
    return {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}, "num_rows": num_rows, "nnz": nnz}


def add_cases(book: Book) -> None:
    """Every compact case: ``compact/decode.json``, ``compact/encode.json``, ``invalid/compact.json``."""
    src = vllm_source()
    assert compact_bytes([[5], [], [1, 2, 7]]).hex() == "010003030d0800000000000000000000"  # the spec's example
    f = book.file("compact/decode.json", "compact", "The compact layout: sorted deltas bit-packed in blocks of 32.")
    f.add(
        "spec-example",
        "Rows {5}, {}, {1, 2, 7}: lengths 01 00 03, one block of width 3, values 5 1 0 4.",
        "compact",
        _compact([[5], [], [1, 2, 7]]),
        ok(mask([[5], [], [1, 2, 7]])),
        since="1.0",
    )
    f.add("zero-rows", "T = 0, nnz = 0: zero bytes.", "compact", _compact([]), ok(mask([])), since="1.0")
    f.add(
        "all-empty-rows",
        "Only the row-length bytes: no block at all.",
        "compact",
        _compact([[], [], []]),
        ok(mask([[], [], []])),
        since="1.0",
    )
    f.add(
        "width-zero-block",
        "Consecutive ids from 0 are all-zero deltas: width 0, no words.",
        "compact",
        _compact([[0, 1, 2], [0]]),
        ok(mask([[0, 1, 2], [0]])),
        since="1.0",
    )
    long_row = list(range(0, 600, 2))
    f.add(
        "long-row",
        "A row of 300 ids: length byte 255, then LEB128 45; ten blocks of width 1.",
        "compact",
        _compact([long_row, [3]]),
        ok(mask([long_row, [3]])),
        since="1.0",
    )
    wide = [list(range(32)), [5, 1_000_000, 2_000_000, 9_000_000]]
    f.add(
        "blocks-of-different-widths",
        "Blocks are stored grouped by width: a width-0 block and a width-24 block.",
        "compact",
        _compact(wide),
        ok(mask(wide)),
        since="1.0",
    )
    f.add(
        "maximal-int32-id",
        "2147483647 is one 31-bit value.",
        "compact",
        _compact([[2147483647]]),
        ok(mask([[2147483647]])),
        since="1.0",
    )
    f.add(
        "with-segments-companions",
        "The container's other keys: vocab_size, segments and companions (canonical order).",
        "compact",
        _compact(
            [[3, 9], [], [4]],
            vocab_size=10,
            cu_seqlens=arr([0, 2, 3], "int64"),
            sampled_token_ids=arr([9, -1, 4]),
            support_logprobs=arr([-1.0, -0.5, 0.0], "float32"),
        ),
        ok(
            mask(
                [[3, 9], [], [4]],
                cu=[0, 2, 3],
                vocab=10,
                sampled_token_ids=[9, -1, 4],
                support_logprobs=[[-1.0, -0.5], [], [0.0]],
            )
        ),
        since="1.0",
    )
    picks = ["17", "18", "19", "21"]
    rows = [src["rows"][i] for i in picks]
    f.add(
        "vllm-0.32-rows",
        "Four real vLLM 0.32 rows (2, 3, 5 and 71 ids out of 1000).",
        "compact",
        _compact(rows, vocab_size=src["vocab_size"]),
        ok(mask(rows, vocab=src["vocab_size"])),
        since="1.0",
    )
    e = book.file("compact/encode.json", "compact", "Encoding a mask in the compact layout (exact bytes).")
    for slug, rows, why in (
        ("encode-spec-example", [[5], [], [1, 2, 7]], "The smallest width per block makes the bytes unique."),
        ("encode-long-row", [long_row, [3]], "A long row's length and ten width-1 blocks."),
        ("encode-blocks-of-different-widths", wide, "Width groups in increasing order."),
    ):
        data = compact_bytes(rows)
        e.add(
            slug,
            why,
            "compact",
            model(rows),
            {"payload": {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}}},
            op="encode",
            since="1.0",
        )
    bad = book.file("invalid/compact.json", "compact", "Compact bytes that a reader must reject.")
    spec_example = compact_bytes([[5], [], [1, 2, 7]])
    long_bytes = compact_bytes([long_row, [3]])
    for slug, payload, codes, why, limits in (
        ("row-lengths-short", _raw_compact(b"\x01\x00", 3, 1), ("E_BYTES",), "3 rows need 3 length bytes.", None),
        (
            "lengths-disagree-with-nnz",
            _raw_compact(spec_example, 3, 5),
            ("E_OFFSETS",),
            "Row lengths sum to 4, nnz says 5.",
            None,
        ),
        (
            "words-short",
            _raw_compact(spec_example[:-4], 3, 4),
            ("E_BYTES",),
            "A width-3 block needs 12 bytes of words.",
            None,
        ),
        ("trailing-byte", _raw_compact(spec_example + b"\x00", 3, 4), ("E_BYTES",), "Bytes after the last word.", None),
        (
            "block-width-over-31",
            _raw_compact(b"\x01\x20" + bytes(4 * 32), 1, 1),
            ("E_ENCODING",),
            "No value needs 32 bits.",
            None,
        ),
        (
            "varint-not-minimal",
            _raw_compact(long_bytes[:2] + b"\xad\x00" + long_bytes[3:], 2, 301),
            ("E_ENCODING",),
            "A long length written with a needless zero continuation byte.",
            None,
        ),
        ("varint-truncated", _raw_compact(b"\xff\x80", 1, 300), ("E_BYTES",), "A long length that never ends.", None),
        (
            "nonzero-padding",
            _raw_compact(spec_example[:5] + b"\x08\x00\x00\x80" + spec_example[9:], 3, 4),
            ("E_ENCODING",),
            "The values after the last id are zero.",
            None,
        ),
        (
            "id-beyond-int32",
            _raw_compact(b"\x02\x1f" + ((2**31 - 1) | (5 << 31)).to_bytes(4 * 31, "little"), 1, 2),
            ("E_RANGE",),
            "2147483647 then a delta that passes int32.",
            None,
        ),
        ("num-rows-not-integer", _raw_compact(spec_example, "3", 4), ("E_SCHEMA",), "num_rows is an integer.", None),
        ("rows-over-limit", _compact([[5], [], [1, 2, 7]]), ("E_LIMIT",), "T above max_rows.", {"max_rows": 2}),
        (
            "row-wider-than-limit",
            _compact([[5], [], [1, 2, 7]]),
            ("E_LIMIT",),
            "A row wider than max_width.",
            {"max_width": 2},
        ),
        (
            "id-beyond-vocab",
            _compact([[5], [], [1, 2, 7]], vocab_size=6),
            ("E_RANGE",),
            "Id 7 with vocab_size 6.",
            None,
        ),
        (
            "sampled-id-not-in-row",
            _compact([[5], [], [1, 2, 7]], sampled_token_ids=arr([5, -1, 3])),
            ("E_MISSING_SAMPLED",),
            "A non-empty row contains its sampled id.",
            None,
        ),
        (
            "bytes-not-uint8",
            {**_compact([[5], [], [1, 2, 7]]), "compact": arr([1, 0, 3], "int32")},
            ("E_DTYPE",),
            "The compact bytes are uint8.",
            None,
        ),
    ):
        bad.add(slug, why, "compact", payload, err(*codes), limits=limits, since="1.0")

    # Compact words are grouped by width (12.2): two blocks of width 2 around a block of width 1.
    deltas = [3, 0, 2, 1] * 8 + [1, 0] * 16 + [2, 3, 0, 0] * 8
    row, prev = [], -1
    for d in deltas:
        prev += d + 1
        row.append(prev)
    data = compact_bytes([row])
    assert data[1:4] == bytes([2, 1, 2])  # block widths
    f.add(
        "two-blocks-of-one-width",
        "Blocks of widths 2, 1, 2: the words of both width-2 blocks are interleaved (word 0 of each, then "
        "word 1 of each), not stored block by block.",
        "12.2",
        _compact([row]),
        ok(mask([row])),
        since="1.0",
    )
    e.add(
        "encode-two-blocks-of-one-width",
        "The writer groups words by width: exact bytes for blocks of widths 2, 1, 2.",
        "12.2",
        model([row]),
        {"payload": {"compact": {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}}},
        op="encode",
        since="1.0",
    )
    canonical = compact_bytes([[1, 5, 7]])
    e.add(
        "encode-unsorted-row",
        "A row stored as [7, 1, 5] is written as the set {1, 5, 7}: the layout holds canonical rows.",
        "12.4",
        model([[7, 1, 5]]),
        {"payload": {"compact": {"dtype": "uint8", "shape": [len(canonical)], "hex": canonical.hex()}}},
        op="encode",
        since="1.0",
    )
