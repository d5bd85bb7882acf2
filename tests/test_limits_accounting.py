"""Memory accounting: under
``Limits.for_untrusted_input(len(payload))`` no payload, padded or not, grows a decoder's peak RSS
past max(16 x payload, 64 MiB). A decode charges what it really holds at its peak against one
budget: ``DECODE_ROW_BYTES`` a row, every msgpack container / string / bin view as the reader
builds it, the parsed JSON objects. Padding (an ignored bin or string) raises the budget by 12 bytes
a byte only; a dense dimension past numpy's index range is ``E_LIMIT``. Each case runs in a fork of a
child process (``memory_probe``); POSIX only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from memory_probe import child_main, child_results, untrusted_bound_mb

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
PAD = 11_200_000  # 11.2 MB of padding: raises the untrusted budget to 134 MB


def _envelope(**fields: Any) -> bytes:
    import msgpack

    return msgpack.packb({"sampling_mask": 1, **fields}, use_bin_type=True)  # type: ignore[no-any-return]


def _dense(rows: int, **extra: Any) -> bytes:
    return _envelope(layout="dense", dense={"dtype": "int32", "shape": [rows, 0], "data": b""}, **extra)


def _empty_rows(rows: int) -> Any:
    import numpy as np

    from sampling_mask import SamplingMask

    return SamplingMask(np.zeros(0, np.int32), np.zeros(rows + 1, np.int64), validate=False)


def _compact(fmt: str, rows: int) -> Callable[[], bytes]:
    def build() -> bytes:
        import sampling_mask

        return sampling_mask.encode(_empty_rows(rows), fmt, layout="compact")

    return build


def _wide_compact(fmt: str, pad: int = 5 << 20) -> Callable[[], bytes]:
    """Rows of 2**17 consecutive ids (0-bit blocks: about 1 byte per 32 ids) and ``pad`` ignored
    bytes that raise the budget: as many ids as the budget allows, the densest compact input."""

    def build() -> bytes:
        import numpy as np

        import sampling_mask
        from sampling_mask.codecs import compact

        width = 1 << 17
        rows = 12 * pad // 4 // width - 1
        ids = np.tile(np.arange(width, dtype=np.int32), rows)
        offsets = np.arange(0, rows * width + 1, width, dtype=np.int64)
        if fmt == "arrow":
            mask = sampling_mask.SamplingMask(ids, offsets)
            return sampling_mask.encode(mask, "arrow", layout="compact", extra_columns={"junk": [bytes(pad)]})
        env = {"layout": "compact", "num_rows": rows, "nnz": int(ids.size)}
        return _envelope(**env, compact=compact.encode_ragged(ids, offsets), junk=bytes(pad))

    return build


def _counts(rows: int, pad: int = 0) -> bytes:
    import numpy as np

    counts = {"dtype": "uint8", "shape": [rows], "data": bytes(rows)}
    ids = {"dtype": "int32", "shape": [0], "data": b""}
    return _envelope(ids=ids, counts=counts, **({"junk": bytes(pad)} if pad else {}), x=int(np.int64(1)))


def _base64(rows: int, pad: int = 0) -> bytes:
    doc: dict[str, Any] = {"data": "", "shape": [rows, 0], "dtype": "int32"}
    if pad:
        doc["junk"] = "x" * pad
    return json.dumps(doc).encode()


def _decode(data: bytes) -> Any:
    import sampling_mask

    return sampling_mask.decode(data, limits=sampling_mask.Limits.for_untrusted_input(len(data)))


#: label -> (builder, codes accepted); each must stay within max(16 x input, 64 MiB)
CASES: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    "msgpack 1M empty maps under an unknown key": (lambda: _envelope(junk=[{}] * 1_000_000), ("E_LIMIT",)),
    "msgpack 1M empty arrays under an unknown key": (lambda: _envelope(junk=[[]] * 1_000_000), ("E_LIMIT",)),
    "msgpack 500k one-byte bins under an unknown key": (lambda: _envelope(junk=[b"x"] * 500_000), ("E_LIMIT",)),
    "msgpack 300k short strings under an unknown key": (lambda: _envelope(junk=["ab"] * 300_000), ("E_LIMIT",)),
    "msgpack dense [2**24, 0] + 11.2 MB ignored bin": (
        lambda: _dense(1 << 24, junk=bytes(PAD)),
        ("E_LIMIT",),
    ),
    "msgpack dense [2**24, 0] + 11.2 MB ignored str": (
        lambda: _dense(1 << 24, junk="x" * PAD),
        ("E_LIMIT",),
    ),
    "base64 [2**24, 0] + 11.2 MB ignored string": (lambda: _base64(1 << 24, PAD), ("E_LIMIT",)),
    "msgpack dense [2**22, 0] + 11.2 MB ignored bin (fits the budget)": (
        lambda: _dense(1 << 22, junk=bytes(PAD)),
        ("OK", "E_LIMIT"),
    ),
    "base64 [2**21, 0] + 11.2 MB ignored string (fits the budget)": (lambda: _base64(1 << 21, PAD), ("OK",)),
    "msgpack counts 2**22 empty rows": (lambda: _counts(1 << 22), ("OK", "E_LIMIT")),
    "msgpack counts 2**17 empty rows": (lambda: _counts(1 << 17), ("OK",)),
    "msgpack counts 2**20 empty rows + 11.2 MB ignored bin": (lambda: _counts(1 << 20, PAD), ("OK",)),
    "msgpack compact 2**22 empty rows": (_compact("msgpack", 1 << 22), ("OK", "E_LIMIT")),
    "arrow compact 2**22 empty rows": (_compact("arrow", 1 << 22), ("OK", "E_LIMIT")),
    "arrows compact 2**24 empty rows": (_compact("arrows", 1 << 24), ("OK", "E_LIMIT")),
    "parquet compact 2**22 empty rows": (_compact("parquet", 1 << 22), ("OK", "E_LIMIT")),
    "msgpack compact rows of 2**17 consecutive ids + 5 MiB ignored bin": (_wide_compact("msgpack"), ("OK", "E_LIMIT")),
    "arrow compact rows of 2**17 consecutive ids + 5 MiB user column": (_wide_compact("arrow"), ("OK", "E_LIMIT")),
    "msgpack dense [2**64 - 1, 0]": (lambda: _dense((1 << 64) - 1), ("E_LIMIT", "E_SHAPE")),
    "base64 [2**64 - 1, 0]": (lambda: _base64((1 << 64) - 1), ("E_LIMIT", "E_SHAPE")),
}


def _warm_up() -> None:
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]])
    limits = sampling_mask.Limits.for_untrusted_input(100)
    for fmt in ("arrow", "arrows", "parquet", "msgpack"):
        sampling_mask.decode(sampling_mask.encode(mask, fmt, layout="compact"), limits=limits)
    for fmt in ("msgpack", "base64", "json"):
        sampling_mask.decode(sampling_mask.encode(mask, fmt), limits=limits)
    sampling_mask.decode(sampling_mask.encode(mask, "msgpack", layout="dense"), limits=limits)


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return child_results(__file__)


@pytest.mark.parametrize("label", list(CASES))
def test_padded_or_not_within_the_bound(results: dict[str, dict[str, Any]], label: str) -> None:
    event = results[label]
    assert event["code"] in CASES[label][1], f"{label}: got {event['code']}"
    bound = untrusted_bound_mb(event["size"])
    assert event["rss"] <= bound, f"{label}: peak RSS grew {event['rss']} MiB, bound {bound:.0f} MiB"


def test_dense_shape_past_numpy_is_a_limit_error() -> None:
    pytest.importorskip("msgpack")
    import sampling_mask
    from sampling_mask import ErrorCode, SamplingMaskError

    with pytest.raises(SamplingMaskError) as info:
        sampling_mask.decode(_dense((1 << 64) - 1))
    assert info.value.code in (ErrorCode.E_LIMIT, ErrorCode.E_SHAPE)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    child_main(((label, build, _decode) for label, (build, _) in CASES.items()), _warm_up)
