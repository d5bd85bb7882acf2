"""The msgpack envelope (SPEC 10.1): one map, typed arrays as ARRAY maps of raw little-endian bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .common import (
    ISSUE_ROWS,
    Book,
    compact_bytes,
    companions_mask,
    err,
    mask,
    ok,
    roundtrip_model,
    unsorted_model,
)
from .shared import canonicalizes_compact, declares_unsorted_rows


def _marray(values: Any, dtype: str, shape: Sequence[int] | None = None) -> dict[str, Any]:
    """A msgpack ARRAY map {dtype, shape, data: bin of little-endian bytes}."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    return {"dtype": dtype, "shape": list(a.shape), "data": a.tobytes()}


def _envelope_bytes(fields: dict[str, Any], *, version: Any = 1) -> bytes:
    """The envelope, the version key first, packed by msgpack itself (not by this library)."""
    import msgpack

    env: dict[str, Any] = {"sampling_mask": version} if version is not None else {}
    env.update(fields)
    return msgpack.packb(env, use_bin_type=True)  # type: ignore[no-any-return]


def _mhex(fields: dict[str, Any], **kw: Any) -> dict[str, str]:
    return {"hex": _envelope_bytes(fields, **kw).hex()}


def add_cases(book: Book) -> None:
    """Every msgpack case: ``msgpack/decode.json``, ``msgpack/encode.json``, ``invalid/msgpack.json``."""
    ragged = {
        "layout": "ragged",
        "vocab_size": 10,
        "id_order": "ascending",
        "num_rows": 3,
        "nnz": 3,
        "ids": _marray([1, 5, 7], "int32"),
        "offsets": _marray([0, 2, 2, 3], "int64"),
    }
    f = book.file("msgpack/decode.json", "msgpack", "The msgpack envelope: one map, arrays as raw little-endian bin.")
    f.add(
        "ragged-issue-example",
        "Layout ragged: ids int32 and offsets int64 as bin, with segments.",
        "msgpack",
        _mhex({**ragged, "cu_seqlens": _marray([0, 2, 3], "int64")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "ragged-int32-offsets",
        "offsets and cu_seqlens may be int32.",
        "msgpack",
        _mhex({**ragged, "offsets": _marray([0, 2, 2, 3], "int32"), "cu_seqlens": _marray([0, 2, 3], "int32")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    no_offsets = {k: v for k, v in ragged.items() if k != "offsets"}
    for dtype in ("uint8", "uint16", "int32"):
        f.add(
            f"ragged-counts-{dtype}",
            f"Row lengths as counts ({dtype}) instead of offsets (1.1): every reader of 1.1 and later reads "
            "them; writers write them only when asked (6).",
            "msgpack",
            _mhex({**no_offsets, "counts": _marray([2, 0, 1], dtype), "cu_seqlens": _marray([0, 2, 3], "int32")}),
            ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
            since="1.1",
        )
    f.add(
        "minimal",
        "Only the version and the arrays: layout defaults to ragged, counts are optional.",
        "msgpack",
        _mhex({"ids": _marray([7, 3], "int32"), "offsets": _marray([0, 2], "int64")}),
        ok(mask([[3, 7]])),
        since="1.0",
    )
    f.add(
        "dense-layout",
        "Layout dense: int32 [T, W] with -1 trailing padding.",
        "msgpack",
        _mhex({"layout": "dense", "vocab_size": 10, "dense": _marray([[5, 1], [-1, -1], [7, -1]], "int32")}),
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "An empty mask.",
        "msgpack",
        _mhex(
            {"layout": "ragged", "num_rows": 0, "nnz": 0, "ids": _marray([], "int32"), "offsets": _marray([0], "int64")}
        ),
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "companions-and-metadata",
        "Companions as bin arrays; metadata as a map; support_logprobs follows its ids.",
        "msgpack",
        _mhex(
            {
                "layout": "ragged",
                "vocab_size": 10,
                "id_order": "unspecified",
                "ids": _marray([9, 3, 5], "int32"),
                "offsets": _marray([0, 3, 3], "int64"),
                "sampled_token_ids": _marray([5, -1], "int32"),
                "sampled_logprobs": _marray([-0.5, 0.0], "float32"),
                "temperature": _marray([0.5, 1.0], "float32"),
                "support_logprobs": _marray([-3.0, -1.25, -0.5], "float32"),
                "metadata": {"top_k": 3, "top_p": 0.5, "producer": "vllm-0.32"},
            }
        ),
        ok(companions_mask(metadata={"top_k": 3, "top_p": 0.5, "producer": "vllm-0.32"})),
        since="1.0",
    )
    f.add(
        "unknown-keys-ignored",
        "A reader ignores keys it does not know.",
        "versioning",
        _mhex({**ragged, "x-trace": {"span": 7, "tags": ["a"]}}),
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.0",
    )
    ids = _marray([1, 5, 7], "int32")
    f.add(
        "array-pad-ignored",
        "An ARRAY may carry a pad bin before data (writers align data with it, 10.1); readers ignore it, "
        "whatever its bytes and wherever the data then starts.",
        "msgpack",
        _mhex(
            {
                **ragged,
                "ids": {"dtype": ids["dtype"], "shape": ids["shape"], "pad": bytes(3), "data": ids["data"]},
                "offsets": {**_marray([0, 2, 2, 3], "int64"), "pad": b"not zero"},
            }
        ),
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.1",
    )
    f.add(
        "dense-layout-support-logprobs",
        "With layout dense, support_logprobs follows the non-padding entries in row-major order.",
        "msgpack",
        _mhex(
            {
                "layout": "dense",
                "dense": _marray([[9, 3], [-1, -1], [4, -1]], "int32"),
                "support_logprobs": _marray([-3.0, -1.0, -0.5], "float32"),
            }
        ),
        ok(mask([[3, 9], [], [4]], support_logprobs=[[-1.0, -3.0], [], [-0.5]])),
        since="1.0",
    )
    f.add(
        "compact-layout",
        "Layout compact: the compact bytes of all rows as one bin, with the required num_rows and nnz.",
        "msgpack",
        _mhex(
            {
                "layout": "compact",
                "vocab_size": 10,
                "id_order": "ascending",
                "num_rows": 3,
                "nnz": 3,
                "compact": compact_bytes([[1, 5], [], [7]]),
                "cu_seqlens": _marray([0, 2, 3], "int64"),
            }
        ),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    e = book.file("msgpack/encode.json", "msgpack", "Encoding a mask as the msgpack envelope.")
    for layout in ("ragged", "dense", "compact"):
        e.add(
            f"encode-{layout}-roundtrip",
            f"Layout {layout}: everything survives (the round trip is checked).",
            "msgpack",
            roundtrip_model(),
            {"roundtrip": True},
            op="encode",
            options={"layout": layout},
            since="1.0",
        )
    bad = book.file("invalid/msgpack.json", "msgpack", "Envelopes that a reader must reject.")
    good = _envelope_bytes(ragged)
    cases: list[tuple[str, dict[str, str], tuple[str, ...], str, str, str]] = [
        (
            "unknown-major-version",
            _mhex(ragged, version=2),
            ("E_VERSION",),
            "versioning",
            "Major version 2 is unknown.",
            "1.0",
        ),
        (
            "version-missing",
            _mhex(ragged, version=None),
            ("E_SCHEMA",),
            "versioning",
            "The envelope names its version.",
            "1.0",
        ),
        (
            "version-not-integer",
            _mhex(ragged, version="1"),
            ("E_SCHEMA",),
            "versioning",
            "The version is an integer.",
            "1.0",
        ),
        (
            "truncated",
            {"hex": good[: len(good) // 2].hex()},
            ("E_ENCODING",),
            "msgpack",
            "The first half of a valid envelope.",
            "1.0",
        ),
        ("not-msgpack", {"hex": "c1c1c1"}, ("E_ENCODING",), "msgpack", "0xc1 is never used in msgpack.", "1.0"),
        ("trailing-bytes", {"hex": (good + b"\x00").hex()}, ("E_ENCODING",), "msgpack", "Bytes after the map.", "1.0"),
        ("not-a-map", {"hex": "93010203"}, ("E_SCHEMA",), "msgpack", "The envelope is a map.", "1.0"),
        (
            "unknown-layout",
            _mhex({**ragged, "layout": "csr"}),
            ("E_SCHEMA",),
            "msgpack",
            "layout is ragged, dense or compact.",
            "1.0",
        ),
        (
            "offsets-and-counts",
            _mhex({**ragged, "counts": _marray([2, 0, 1], "uint8")}),
            ("E_SCHEMA",),
            "msgpack",
            "A ragged envelope gives offsets or counts, not both.",
            "1.1",
        ),
        (
            "counts-sum-not-nnz",
            _mhex({**{k: v for k, v in ragged.items() if k != "offsets"}, "counts": _marray([2, 0, 2], "uint8")}),
            ("E_OFFSETS",),
            "msgpack",
            "counts sum to 4 but there are 3 ids.",
            "1.1",
        ),
        (
            "counts-int64",
            _mhex({**{k: v for k, v in ragged.items() if k != "offsets"}, "counts": _marray([2, 0, 1], "int64")}),
            ("E_DTYPE",),
            "msgpack",
            "counts are uint8, uint16 or int32.",
            "1.1",
        ),
        (
            "ids-int64",
            _mhex({**ragged, "ids": _marray([1, 5, 7], "int64")}),
            ("E_DTYPE",),
            "msgpack",
            "ids are int32.",
            "1.0",
        ),
        (
            "ids-float32",
            _mhex({**ragged, "ids": _marray([1, 5, 7], "float32")}),
            ("E_DTYPE",),
            "msgpack",
            "ids are integers.",
            "1.0",
        ),
        (
            "data-not-bin",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [3], "data": "AQAAAAUAAAAHAAAA"}}),
            ("E_SCHEMA",),
            "msgpack",
            "Array data is a msgpack bin, not a string.",
            "1.0",
        ),
        (
            "bytes-mismatch",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [3], "data": bytes(8)}}),
            ("E_BYTES",),
            "msgpack",
            "Shape [3] int32 needs 12 bytes; 8 are given.",
            "1.0",
        ),
        (
            "forged-shape",
            _mhex({**ragged, "ids": {"dtype": "int32", "shape": [1 << 40], "data": bytes(12)}}),
            ("E_LIMIT",),
            "limits",
            "A 12-byte bin declaring 2**40 ids.",
            "1.0",
        ),
        (
            "offsets-end-beyond-ids",
            _mhex({k: v for k, v in {**ragged, "offsets": _marray([0, 2, 2, 4], "int64")}.items() if k != "nnz"}),
            ("E_OFFSETS",),
            "layouts",
            "offsets[T] = 4 with 3 ids (nnz left out: it would be a second fault).",
            "1.0",
        ),
        (
            "num-rows-disagrees",
            _mhex({**ragged, "num_rows": 4}),
            ("E_SHAPE",),
            "msgpack",
            "num_rows says 4, the offsets hold 3 rows.",
            "1.0",
        ),
        ("nnz-disagrees", _mhex({**ragged, "nnz": 2}), ("E_SHAPE",), "msgpack", "nnz says 2, ids holds 3.", "1.0"),
        (
            "dense-padding-between-ids",
            _mhex({"layout": "dense", "dense": _marray([[5, -1, 1]], "int32")}),
            ("E_PADDING",),
            "layouts",
            "-1 between ids in the dense layout.",
            "1.0",
        ),
        (
            "id-order-violated",
            _mhex({**ragged, "ids": _marray([5, 1, 7], "int32")}),
            ("E_SCHEMA",),
            "msgpack",
            "Declared ascending, row 0 is not.",
            "1.0",
        ),
        (
            "id-beyond-vocab",
            _mhex({**ragged, "ids": _marray([1, 5, 10], "int32")}),
            ("E_RANGE",),
            "model",
            "Id 10 with vocab_size 10.",
            "1.0",
        ),
        (
            "sampled-id-not-in-row",
            _mhex({**ragged, "sampled_token_ids": _marray([2, -1, 7], "int32")}),
            ("E_MISSING_SAMPLED",),
            "companions",
            "A non-empty row contains its sampled id.",
            "1.0",
        ),
        (
            "nesting-too-deep",
            _mhex({**ragged, "x-deep": [[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]}),
            ("E_LIMIT",),
            "limits",
            "Containers nested beyond max_json_depth, even under an unknown key.",
            "1.0",
        ),
    ]
    import msgpack

    def raw_map(pairs: list[tuple[bytes, bytes]]) -> dict[str, str]:
        """A map assembled from already-packed keys and values (for what msgpack.packb cannot write)."""
        packer = msgpack.Packer(use_bin_type=True)
        return {"hex": (packer.pack_map_header(len(pairs)) + b"".join(k + v for k, v in pairs)).hex()}

    def pk(value: Any) -> bytes:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]

    head = [(pk("sampling_mask"), pk(1))] + [(pk(k), pk(v)) for k, v in ragged.items()]
    cases += [
        (
            "compact-counts-missing",
            _mhex({"layout": "compact", "compact": compact_bytes([[1, 5], [], [7]])}),
            ("E_SCHEMA",),
            "msgpack",
            "Layout compact requires num_rows and nnz.",
            "1.0",
        ),
        (
            "unknown-major-version-checked-first",
            _mhex({**ragged, "layout": "csr"}, version=2),
            ("E_VERSION",),
            "versioning",
            "The version is checked before any other key (the layout is bad too).",
            "1.0",
        ),
        (
            "ext-type",
            _mhex({**ragged, "x-extra": msgpack.ExtType(5, b"ab")}),
            ("E_ENCODING",),
            "msgpack",
            "ext types are never used, even under an unknown key.",
            "1.0",
        ),
        (
            "duplicate-key",
            raw_map([*head, (pk("ids"), pk(_marray([1, 5, 7], "int32")))]),
            ("E_SCHEMA",),
            "msgpack",
            "Map keys are unique.",
            "1.0",
        ),
        (
            "non-string-key",
            raw_map([*head, (pk(7), pk("seven"))]),
            ("E_SCHEMA",),
            "msgpack",
            "Map keys are strings.",
            "1.0",
        ),
        (
            "invalid-utf8",
            raw_map([*head, (pk("x-note"), b"\xa2\xff\xfe")]),
            ("E_ENCODING",),
            "msgpack",
            "A str that is not UTF-8.",
            "1.0",
        ),
    ]
    for slug, payload, codes, spec, why, since in cases:
        bad.add(slug, why, spec, {"hex": payload["hex"]}, err(*codes), since=since)

    # nil under an optional key, or under an ARRAY key the reader does not know, reads as absent (10.1);
    # offsets of either width are valid default output.
    f.add(
        "nil-optional-keys",
        "nil under an optional key (layout, vocab_size, id_order, num_rows, nnz, cu_seqlens, metadata) reads as absent.",
        "msgpack",
        _mhex(
            {
                "layout": None,
                "vocab_size": None,
                "id_order": None,
                "num_rows": None,
                "nnz": None,
                "ids": _marray([1, 5, 7], "int32"),
                "offsets": _marray([0, 2, 2, 3], "int64"),
                "cu_seqlens": None,
                "metadata": None,
            }
        ),
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    bare_ragged = {"layout": "ragged", "vocab_size": 10, "offsets": _marray([0, 2, 2, 3], "int64")}
    unsorted_ids = _marray([5, 1, 7], "int32")
    f.add(
        "array-unknown-key-nil",
        "nil under an ARRAY key the reader does not know (pad) is ignored like the key itself (10.1).",
        "msgpack",
        _mhex({**bare_ragged, "ids": {"dtype": "int32", "shape": [3], "pad": None, "data": unsorted_ids["data"]}}),
        ok(mask(ISSUE_ROWS, vocab=10)),
        since="1.2",
    )
    f.add(
        "ragged-int64-offsets-that-fit-int32",
        "int64 offsets and cu_seqlens whose values fit int32 are valid (1.0 allows either width; int32 is no rule).",
        "msgpack",
        _mhex({**bare_ragged, "ids": unsorted_ids, "cu_seqlens": _marray([0, 2, 3], "int64")}),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.3",
    )

    declares_unsorted_rows(e, "msgpack", unsorted_model(), {"detected": "msgpack", "first_key": "sampling_mask"})

    canonicalizes_compact(e, "msgpack")

    # 4: an absent required array is E_SCHEMA; 10.1: a missing or nil ARRAY entry is answered as a wrong
    # value of that entry, a ragged envelope with neither offsets nor counts is E_SCHEMA.
    bad.add(
        "ids-missing",
        "A ragged envelope without ids: a missing required array is E_SCHEMA (section 4).",
        "msgpack",
        _mhex({"layout": "ragged", "offsets": _marray([0], "int64")}),
        err("E_SCHEMA"),
        since="1.2",
    )
    for entry, code in (("dtype", "E_DTYPE"), ("data", "E_SCHEMA")):
        bad.add(
            f"array-{entry}-nil",
            f"nil under an ARRAY's {entry} is that entry missing, answered as a wrong one: {code} (10.1).",
            "msgpack",
            _mhex({**bare_ragged, "ids": {**unsorted_ids, entry: None}}),
            err(code),
            since="1.2",
        )
    bad.add(
        "array-shape-nil",
        "nil under an ARRAY's shape is that entry missing, answered as a wrong shape: E_SHAPE (10.1), not E_SCHEMA.",
        "msgpack",
        _mhex({**bare_ragged, "ids": {**unsorted_ids, "shape": None}}),
        err("E_SHAPE"),
        since="1.3",
    )
    for entry, code in (("dtype", "E_DTYPE"), ("shape", "E_SHAPE"), ("data", "E_SCHEMA")):
        bad.add(
            f"array-{entry}-missing",
            f"An ARRAY map without its {entry} entry is answered as a wrong {entry}: {code} (10.1).",
            "msgpack",
            _mhex({**bare_ragged, "ids": {k: v for k, v in unsorted_ids.items() if k != entry}}),
            err(code),
            since="1.3",
        )
    bad.add(
        "offsets-and-counts-missing",
        "A ragged envelope with ids but neither offsets nor counts: a missing required array, E_SCHEMA (4, "
        "10.1), never E_OFFSETS.",
        "msgpack",
        _mhex({"layout": "ragged", "vocab_size": 10, "ids": unsorted_ids}),
        err("E_SCHEMA"),
        since="1.3",
    )
    bad.add(
        "offsets-nil-counts-missing",
        "offsets: nil and no counts: nil is a missing key, so E_SCHEMA (10.1), never E_OFFSETS.",
        "msgpack",
        _mhex({"layout": "ragged", "vocab_size": 10, "ids": unsorted_ids, "offsets": None}),
        err("E_SCHEMA"),
        since="1.3",
    )

    # 5.2: an integral float is no integer.
    bad.add(
        "metadata-top-k-integral-float",
        "top_k is an integer (5.2): a msgpack float 4.0 is E_SCHEMA, though equal to 4.",
        "metadata",
        _mhex({**bare_ragged, "ids": unsorted_ids, "metadata": {"top_k": 4.0}}),
        err("E_SCHEMA"),
        since="1.3",
    )

    # 8.5: a declared array is compared with max_bytes, its bytes present or not.
    padding = _marray([[-1] * 64] * 4, "int32")  # [4, 64] of padding: 1024 bytes, a mask of 4 empty rows
    bad.add(
        "array-over-max-bytes-with-its-bytes",
        "A dense ARRAY [4, 64] of -1 holds its 1024 bytes, and its mask of 4 empty rows takes 56 bytes: the "
        "declared array is above max_bytes 1000, E_LIMIT (8.5, declared arrays; bytes an input stores count "
        "where a procedure says so).",
        "8.5.2",
        _mhex({"layout": "dense", "dense": padding}),
        err("E_LIMIT"),
        limits={"max_bytes": 1000},
        since="1.4",
    )
