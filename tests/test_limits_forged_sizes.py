"""Tiny payloads that declare huge arrays are rejected before anything of that size is allocated.

Every case is a payload of at most a few KB whose header declares gigabytes or terabytes (rows, nnz,
dense shape, vocab, base64 length, Arrow lengths, compressed sizes, msgpack lengths). Each must raise
the listed error code. The cases run in a child process (this file run as a script, :mod:`memory_probe`): it warms every
decoder up on valid input, then runs each case in a fork and records the growth of its peak RSS and,
on Linux, its peak virtual size (``VmPeak``: it also sees a huge allocation never touched). The
parent asserts the codes and that neither peak grew by more than a small bound. POSIX only.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from memory_probe import child_main, child_results

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parent.parent
#: Peak RSS may grow this much over the warmed-up baseline across all cases together.
RSS_BOUND_MB = 64
#: Peak virtual size may grow this much (the forged sizes are >= 8 GiB).
VM_BOUND_MB = 2048

GiB = 1 << 30


# ---------------------------------------------------------------------------------------------- payloads
def _msgpack(**fields: Any) -> bytes:
    import msgpack

    env = {"sampling_mask": 1, **fields}
    return msgpack.packb(env, use_bin_type=True)  # type: ignore[no-any-return]


def _array(dtype: str, shape: list[int], data: bytes) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data": data}


_EMPTY = {"ids": _array("int32", [0], b""), "offsets": _array("int64", [1], bytes(8))}


def _json(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _arrow_with_forged_length(fmt: str, **opts: Any) -> bytes:
    """A valid file / stream of 12345 segments whose every int64 12345 (batch and list lengths) says 2**40."""
    import numpy as np

    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2]] * 3 + [[]] * 12342, cu_seqlens=np.arange(12346))
    data = sampling_mask.encode(mask, fmt, **opts)
    assert data.count(struct.pack("<q", 12345)) >= 2
    return data.replace(struct.pack("<q", 12345), struct.pack("<q", 1 << 40))


def _arrow_with_forged_uncompressed_size(fmt: str, codec: str, size: int) -> bytes:
    """A compressed file / stream whose buffers each declare ``size`` uncompressed bytes (8-byte prefix)."""
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2, 3]] * 1000)
    data = bytearray(sampling_mask.encode(mask, fmt, compression=codec))
    magic = b"\x28\xb5\x2f\xfd" if codec == "zstd" else b"\x04\x22\x4d\x18"
    count, pos = 0, data.find(magic)
    while pos >= 0:
        data[pos - 8 : pos] = struct.pack("<q", size)
        count += 1
        pos = data.find(magic, pos + 4)
    assert count >= 2, "no compressed buffers found"
    return bytes(data)


def _arrow_with_vocab(vocab: str) -> bytes:
    import pyarrow as pa

    import sampling_mask
    import sampling_mask.codecs.arrow

    table = sampling_mask.codecs.arrow.table_from_mask(sampling_mask.SamplingMask.from_rows([[1]]))
    meta = dict(table.schema.metadata)
    meta[b"sampling_mask.vocab_size"] = vocab.encode()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema.with_metadata(meta)) as writer:
        writer.write_table(table.replace_schema_metadata(meta))
    return bytes(sink.getvalue().to_pybytes())


def _parquet_with_forged_footer() -> bytes:
    import sampling_mask

    data = sampling_mask.encode(sampling_mask.SamplingMask.from_rows([[1]]), "parquet")
    return data[:-8] + struct.pack("<i", (1 << 31) - 1) + b"PAR1"


def _decode(fmt: str | None) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        import sampling_mask

        return sampling_mask.decode(data, format=fmt)

    return run


def _iter_stream(data: bytes) -> Any:
    import sampling_mask

    return list(sampling_mask.codecs.iter_masks(data, format="arrows"))


def _compact(num_rows: int, nnz: int, blob: bytes) -> Callable[[bytes], Any]:
    def run(_: bytes) -> Any:
        from sampling_mask.codecs import compact

        return compact.decode_ragged(blob, num_rows, nnz)

    return run


def _core(call: Callable[[], Any]) -> Callable[[bytes], Any]:
    return lambda _: call()


def _dense_width() -> Any:
    import sampling_mask

    return sampling_mask.SamplingMask.from_rows([[1], [2]]).to_dense(1 << 40)


def _bitmask_vocab() -> Any:
    import numpy as np

    import sampling_mask

    return sampling_mask.SamplingMask.from_bitmask(np.zeros((1, 1), np.uint8), 1 << 40)


def _bitmask_rows() -> Any:
    import sampling_mask

    return sampling_mask.SamplingMask.from_rows([[1]] * 3).to_bitmask(1 << 24, limits=sampling_mask.DEFAULT_LIMITS)


def _skyrl_envelope(shape: list[int]) -> Callable[[bytes], Any]:
    def run(_: bytes) -> Any:
        from sampling_mask.adapters import skyrl

        return skyrl.from_envelope({"data": "AAAA", "shape": shape, "dtype": "int32"})

    return run


#: label -> (payload builder, decoder, accepted codes)
CASES: dict[str, tuple[Callable[[], bytes], Callable[[bytes], Any], set[str]]] = {
    # msgpack: declared ARRAY shapes against the limits and the bin length; container lengths
    "msgpack ids [2**40]": (
        lambda: _msgpack(ids=_array("int32", [1 << 40], bytes(4)), offsets=_array("int64", [1], bytes(8))),
        _decode("msgpack"),
        {"E_LIMIT"},
    ),
    "msgpack ids [2**31] (8 GiB, within max_bytes)": (
        lambda: _msgpack(ids=_array("int32", [1 << 31], bytes(4)), offsets=_array("int64", [1], bytes(8))),
        _decode("msgpack"),
        {"E_BYTES"},
    ),
    "msgpack offsets [2**30]": (
        lambda: _msgpack(ids=_array("int32", [0], b""), offsets=_array("int64", [1 << 30], bytes(8))),
        _decode("msgpack"),
        {"E_BYTES"},
    ),
    "msgpack dense [2**28, 2**20]": (
        lambda: _msgpack(layout="dense", dense=_array("int32", [1 << 28, 1 << 20], bytes(4))),
        _decode("msgpack"),
        {"E_LIMIT"},
    ),
    "msgpack dense [2**26, 64] (16 GiB)": (
        lambda: _msgpack(layout="dense", dense=_array("int32", [1 << 26, 64], bytes(4))),
        _decode("msgpack"),
        {"E_BYTES", "E_LIMIT"},  # E_LIMIT: 16 GiB plus the parsed envelope is over max_bytes
    ),
    "msgpack compact num_rows 2**28": (
        lambda: _msgpack(layout="compact", num_rows=1 << 28, nnz=1 << 30, compact=bytes(10)),
        _decode("msgpack"),
        {"E_BYTES"},
    ),
    "msgpack compact nnz 2**40": (
        lambda: _msgpack(layout="compact", num_rows=10, nnz=1 << 40, compact=bytes(10)),
        _decode("msgpack"),
        {"E_LIMIT"},
    ),
    "msgpack num_rows 2**40": (lambda: _msgpack(num_rows=1 << 40, **_EMPTY), _decode("msgpack"), {"E_LIMIT"}),
    "msgpack cu_seqlens [2**40]": (
        lambda: _msgpack(cu_seqlens=_array("int64", [1 << 40], b""), **_EMPTY),
        _decode("msgpack"),
        {"E_LIMIT"},
    ),
    "msgpack sampled_token_ids [2**33]": (
        lambda: _msgpack(sampled_token_ids=_array("int32", [1 << 33], b""), **_EMPTY),
        _decode("msgpack"),
        {"E_LIMIT"},
    ),
    "msgpack vocab_size 2**62": (lambda: _msgpack(vocab_size=1 << 62, **_EMPTY), _decode("msgpack"), {"E_LIMIT"}),
    "msgpack bin32 of 4 GiB, 8 bytes present": (
        lambda: b"\x82\xadsampling_mask\x01\xa3ids\xc6\xff\xff\xff\xff" + bytes(8),
        _decode("msgpack"),
        {"E_ENCODING", "E_BYTES"},
    ),
    "msgpack array32 of 2**32-1 items": (
        lambda: b"\x82\xadsampling_mask\x01\xa3ids\xdd\xff\xff\xff\xff",
        _decode("msgpack"),
        {"E_ENCODING", "E_LIMIT"},
    ),
    "msgpack map32 of 2**32-1 entries": (
        lambda: b"\xdf\xff\xff\xff\xff\xadsampling_mask\x01",
        _decode("msgpack"),
        {"E_ENCODING", "E_LIMIT"},
    ),
    # JSON forms: base64 shapes, vocab, nesting
    "base64 shape [2**40, 2**40]": (
        lambda: _json({"data": "AAAA", "shape": [1 << 40, 1 << 40], "dtype": "int32"}),
        _decode("base64"),
        {"E_LIMIT"},
    ),
    "base64 shape [2**26, 64] (16 GiB)": (
        lambda: _json({"data": "AAAA", "shape": [1 << 26, 64], "dtype": "int32"}),
        _decode("base64"),
        {"E_BYTES", "E_LIMIT"},  # E_LIMIT: the mask it declares (16 GiB of ids + offsets) is over max_bytes
    ),
    "base64 shape [1, 2**40]": (
        lambda: _json({"data": "AAAA", "shape": [1, 1 << 40], "dtype": "int64"}),
        _decode("base64"),
        {"E_LIMIT"},
    ),
    "json vocab_size 2**40": (
        lambda: _json({"sampling_mask": 1, "rows": [[1]], "vocab_size": 1 << 40}),
        _decode("json"),
        {"E_LIMIT"},
    ),
    "json-rows nested 200000 deep": (lambda: b"[" * 200_000 + b"]" * 200_000, _decode("json-rows"), {"E_LIMIT"}),
    "json object nested 100000 deep": (
        lambda: b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        _decode("json"),
        {"E_LIMIT"},
    ),
    "json extra key nested 100 deep": (
        lambda: b'{"sampling_mask":1,"rows":[],"x":' + b"[" * 100 + b"]" * 100 + b"}",
        _decode("json"),
        {"E_LIMIT"},
    ),
    "sniffed unterminated nesting": (lambda: b"[" * 200_000, _decode(None), {"E_LIMIT", "E_ENCODING"}),
    # Arrow IPC / Parquet: forged lengths, compressed sizes, schema metadata, footer
    "arrows batch and list lengths 2**40": (
        lambda: _arrow_with_forged_length("arrows"),
        _decode("arrows"),
        {"E_ENCODING", "E_LIMIT"},
    ),
    "arrow batch and list lengths 2**40": (
        lambda: _arrow_with_forged_length("arrow"),
        _decode("arrow"),
        {"E_ENCODING", "E_LIMIT"},
    ),
    "arrows zstd lengths 2**40, streamed": (
        lambda: _arrow_with_forged_length("arrows", compression="zstd"),
        _iter_stream,
        {"E_ENCODING", "E_LIMIT"},
    ),
    "arrows zstd buffers declare 1 TiB uncompressed": (
        lambda: _arrow_with_forged_uncompressed_size("arrows", "zstd", 1 << 40),
        _decode("arrows"),
        {"E_LIMIT"},
    ),
    "arrows lz4 buffers declare 8 GiB uncompressed": (
        lambda: _arrow_with_forged_uncompressed_size("arrows", "lz4", 8 * GiB),
        _decode("arrows"),
        {"E_LIMIT", "E_ENCODING"},
    ),
    "arrow zstd buffers declare 1 TiB uncompressed": (
        lambda: _arrow_with_forged_uncompressed_size("arrow", "zstd", 1 << 40),
        _decode("arrow"),
        {"E_LIMIT"},
    ),
    "arrows schema vocab_size 10**18": (lambda: _arrow_with_vocab("1" + "0" * 18), _decode("arrows"), {"E_LIMIT"}),
    "parquet footer length 2**31-1": (_parquet_with_forged_footer, _decode("parquet"), {"E_ENCODING"}),
    # compact bytes, core constructors and conversions
    "compact num_rows 2**28 in 10 bytes": (lambda: b"", _compact(1 << 28, 1 << 30, bytes(10)), {"E_BYTES"}),
    "compact nnz 2**40": (lambda: b"", _compact(10, 1 << 40, bytes(10)), {"E_LIMIT"}),
    "to_dense width 2**40": (lambda: b"", _core(_dense_width), {"E_LIMIT"}),
    "from_bitmask vocab_size 2**40": (lambda: b"", _core(_bitmask_vocab), {"E_LIMIT"}),
    "to_bitmask vocab 2**24 x 3 rows is fine, small": (lambda: b"", _core(_bitmask_rows), {"OK", "E_SCHEMA"}),
    # adapters on untrusted JSON
    "skyrl envelope shape [2**40, 2**40]": (lambda: b"", _skyrl_envelope([1 << 40, 1 << 40]), {"E_LIMIT"}),
    "skyrl envelope shape [2**26, 64]": (lambda: b"", _skyrl_envelope([1 << 26, 64]), {"E_BYTES", "E_LIMIT"}),
}


# ---------------------------------------------------------------------------------------------- child
def _warm_up() -> None:
    """Run every decoder once on valid input, so lazy imports and pools are in the baseline."""
    import sampling_mask
    from sampling_mask.adapters import skyrl

    mask = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8)
    for fmt in ("arrow", "arrows", "parquet", "msgpack", "json"):
        sampling_mask.decode(sampling_mask.encode(mask, fmt), format=fmt)
    for codec in ("zstd", "lz4"):
        sampling_mask.decode(sampling_mask.encode(mask, "arrows", compression=codec), format="arrows")
    plain = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]])
    sampling_mask.decode(sampling_mask.encode(plain, "base64"), format="base64")
    sampling_mask.decode(sampling_mask.encode(plain, "json-rows"), format="json-rows")
    dense = struct.pack("<4i", 1, 2, 3, -1)
    skyrl.from_envelope({"data": base64.b64encode(dense).decode(), "shape": [2, 2], "dtype": "int32"})
    mask.to_bitmask()


# ---------------------------------------------------------------------------------------------- parent
@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return child_results(__file__)


@pytest.mark.parametrize("label", list(CASES))
def test_forged_size_is_rejected_without_allocating(results: dict[str, dict[str, Any]], label: str) -> None:
    event = results[label]
    assert event["code"] in CASES[label][2], f"{label}: got {event['code']}"
    assert event["size"] <= 1 << 20, "the payload itself must be tiny"
    assert event["rss"] <= RSS_BOUND_MB, f"{label}: peak RSS grew {event['rss']} MiB"
    assert event["vm"] <= VM_BOUND_MB, f"{label}: peak virtual size grew {event['vm']} MiB"


def test_every_case_ran(results: dict[str, dict[str, Any]]) -> None:
    assert set(results) == set(CASES)


def test_base64_text_length_is_checked_before_decoding() -> None:
    """A base64 string longer than max_bytes allows is refused from its length (no decode)."""
    import sampling_mask

    limits = sampling_mask.DEFAULT_LIMITS.replace(max_bytes=1024)
    text = base64.b64encode(bytes(4096)).decode()
    env = _json({"data": text, "shape": [1024, 1], "dtype": "int32"})
    with pytest.raises(sampling_mask.SamplingMaskError) as info:
        sampling_mask.decode(env, format="base64", limits=limits)
    assert info.value.code.value == "E_LIMIT"


def test_compressed_batch_over_the_limit_is_refused_before_decompression_after_good_batches() -> None:
    """A zstd batch of 2**20 empty rows (4 MiB of zero offsets, a few KB on the wire) under a 1 MiB ``max_bytes``:
    the two small batches before it are yielded, then ``E_LIMIT`` names how many came before."""
    import numpy as np
    import pyarrow as pa

    import sampling_mask
    from sampling_mask.codecs import arrow

    small = sampling_mask.SamplingMask.from_rows([[1, 2], [3]])
    bomb = sampling_mask.SamplingMask(np.zeros(0, np.int32), np.zeros((1 << 20) + 1, np.int64))
    sink = pa.BufferOutputStream()
    with arrow.Writer(sink, "arrows", compression="zstd") as writer:
        for mask in (small, small, bomb):
            writer.write(mask)
    data = bytes(sink.getvalue().to_pybytes())
    assert len(data) < 64 << 10
    limits = sampling_mask.DEFAULT_LIMITS.replace(max_bytes=1 << 20)
    got = []
    with pytest.raises(sampling_mask.SamplingMaskError) as info:
        for mask in sampling_mask.codecs.iter_masks(data, format="arrows", limits=limits):
            got.append(mask)
    assert got == [small, small]
    assert info.value.code.value == "E_LIMIT"
    assert "after 2 complete record batches" in str(info.value)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    child_main(((label, build, call) for label, (build, call, _) in CASES.items()), _warm_up)
