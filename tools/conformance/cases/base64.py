"""base64 (SPEC 11.4): SkyRL's dense envelope ``{"data": base64, "shape": [T, W], "dtype"}``."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from .common import ISSUE_ROWS, Book, err, mask, model, ok
from .shared import refuses_zero_segments


def _envelope(
    values: Any, dtype: str = "int32", shape: Sequence[int] | None = None, override: dict[str, Any] | None = None
) -> str:
    """SkyRL's envelope of ``values``, written out with base64 / json (``override`` forges fields)."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    doc: dict[str, Any] = {
        "data": base64.b64encode(a.tobytes()).decode("ascii"),
        "shape": list(a.shape),
        "dtype": dtype,
    }
    doc.update(override or {})
    return json.dumps(doc, separators=(", ", ": "))


def add_cases(book: Book) -> None:
    """Every base64 case: ``base64/decode.json``, ``base64/encode.json``, ``invalid/base64.json``."""
    d = [[5, 1, -1, -1], [-1, -1, -1, -1], [7, -1, -1, -1]]
    f = book.file("base64/decode.json", "base64", 'SkyRL\'s dense envelope {"data": base64, "shape": [T, W], "dtype"}.')
    f.add(
        "skyrl-dense",
        "A dense int32 array in the envelope.",
        "json",
        {"text": _envelope(d)},
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    f.add(
        "zero-rows",
        "Shape [0, 4] with empty data.",
        "json",
        {"text": _envelope([], shape=[0, 4])},
        ok(mask([])),
        since="1.0",
    )
    f.add(
        "observation-rows",
        "All -1 rows are empty rows.",
        "json",
        {"text": _envelope([[3, 2], [-1, -1], [-1, -1]])},
        ok(mask([[2, 3], [], []])),
        since="1.0",
    )
    f.add(
        "int64-dtype",
        'dtype "int64" is allowed when every value fits int32.',
        "json",
        {"text": _envelope(d, "int64")},
        ok(mask(ISSUE_ROWS)),
        since="1.0",
    )
    e = book.file("base64/encode.json", "base64", "Encoding a mask in the dense base64 envelope.")
    e.add(
        "encode-roundtrip",
        "The envelope round-trips a one-segment mask.",
        "json",
        model([[1, 5], [], [7]]),
        {"roundtrip": True},
        op="encode",
        since="1.0",
    )
    bad = book.file("invalid/base64.json", "base64", "Envelopes that a reader must reject.")
    good = base64.b64encode(np.array([[1, 2]], "<i4").tobytes()).decode("ascii")
    for slug, text, code, why in (
        ("not-json", '{"data": ', "E_ENCODING", "The envelope is not JSON."),
        (
            "bad-alphabet",
            json.dumps({"data": "AQAA!AIAAAA=", "shape": [1, 2], "dtype": "int32"}),
            "E_ENCODING",
            "A character outside the base64 alphabet (the length is right).",
        ),
        (
            "missing-padding",
            json.dumps({"data": good.rstrip("="), "shape": [1, 2], "dtype": "int32"}),
            "E_ENCODING",
            "Strict base64: the padding is required.",
        ),
        ("missing-data", json.dumps({"shape": [1, 2], "dtype": "int32"}), "E_SCHEMA", "data is required."),
        ("not-an-object", json.dumps([[1, 2]]), "E_SCHEMA", "The envelope is an object."),
        ("dtype-float32", _envelope([[1.0, 2.0]], "float32"), "E_DTYPE", "Dense ids are int32."),
        ("dtype-unknown", _envelope([[1, 2]], override={"dtype": "complex64"}), "E_DTYPE", "Not a whitelisted dtype."),
        (
            "shape-bytes-mismatch",
            _envelope([[1, 2]], override={"shape": [1, 3]}),
            "E_BYTES",
            "Shape [1, 3] int32 needs 12 bytes; 8 are given.",
        ),
        ("three-dimensional", _envelope([[[1, -1]]]), "E_SHAPE", "The dense envelope is [T, W]."),
        ("padding-between-ids", _envelope([[1, -1, 2]]), "E_PADDING", "-1 between ids."),
        ("int64-beyond-int32", _envelope([[1 << 31]], "int64"), "E_RANGE", "int64 values must fit int32."),
        ("numpy-dtype-spelling", _envelope([[1, 2]], override={"dtype": "<i4"}), "E_DTYPE", 'Only "int32" / "int64".'),
        ("one-dimensional", _envelope([1, 2]), "E_SHAPE", "shape is exactly [T, W]."),
        ("data-not-a-string", _envelope([[1, 2]], override={"data": [1, 2]}), "E_SCHEMA", "data is a base64 string."),
    ):
        bad.add(slug, why, "json", {"text": text}, err(code), since="1.0")
    bad.add(
        "forged-shape",
        "A few bytes declaring a 2**40 x 2**20 array.",
        "limits",
        {"text": json.dumps({"data": good, "shape": [1 << 40, 1 << 20], "dtype": "int32"})},
        err("E_LIMIT"),
        since="1.0",
    )

    # The text is UTF-8 everywhere, under keys the reader ignores too (11.1).
    bad.add(
        "invalid-utf8-in-ignored-key",
        "Byte ff in a string under a key the reader ignores: still not UTF-8.",
        "json-rules",
        {"hex": b'{"data": "AQAAAA==", "shape": [1, 1], "dtype": "int32", "note": "\xff"}'.hex()},
        err("E_ENCODING"),
        since="1.0",
    )
    bad.add(
        "encode-would-lose-companions",
        "A rows-only writer never drops information (companions) silently: it refuses with E_SCHEMA.",
        "11.4",
        model([[1]], sampled_token_ids=[1]),
        err("E_SCHEMA"),
        op="encode",
        since="1.0",
    )

    refuses_zero_segments(bad)

    # A declared array is counted before it is decoded, and its decoded bytes with the mask's (8.5.4).
    bad.add(
        "decoded-bytes-over-max-bytes",
        "A [4, 64] int32 envelope of -1 (its mask: 4 empty rows, 56 bytes) decodes to 1024 bytes, which the "
        "count holds: max_bytes 1000 is E_LIMIT (8.5.4 step 2).",
        "8.5.4",
        {"text": _envelope([[-1] * 64] * 4)},
        err("E_LIMIT"),
        limits={"max_bytes": 1000},
        since="1.4",
    )
    full = [list(range(64))] * 4
    bad.add(
        "decoded-bytes-and-mask-count-together",
        "A [4, 64] int32 envelope of full rows decodes to 1024 bytes and its mask takes 1080 (256 ids, 5 offsets, "
        "2 segment bounds): one count of 2104, so max_bytes 1800 (above each alone) is E_LIMIT (8.5.4).",
        "8.5.4",
        {"text": _envelope(full)},
        err("E_LIMIT"),
        limits={"max_bytes": 1800},
        since="1.4",
    )
