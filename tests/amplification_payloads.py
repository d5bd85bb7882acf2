"""Amplification payloads (a few bytes or KB that declare millions of rows or gigabytes), shared by
``tests/test_limits_amplification.py`` and the
server load test (``benchmarks/bench_server_load.py``); imported as ``from amplification_payloads import ...``.

Each builder returns bytes; :data:`PAYLOADS` lists every one with its format and the error code it
must get under ``Limits.for_untrusted_input``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

ROWS = 1 << 24  # the table's 16M empty rows


def _empty_rows(num_rows: int = ROWS) -> Any:
    import numpy as np

    from sampling_mask import SamplingMask

    return SamplingMask(np.zeros(0, np.int32), np.zeros(num_rows + 1, np.int64), validate=False)


def legacy_compressed_stream(num_rows: int = ROWS) -> bytes:
    """A zstd stream whose batch is compressed through the V4 ``ARROW:experimental_compression``
    message metadata key: written by pyarrow with the key, then each message patched to metadata
    version V4 and the batch's ``compression`` field dropped (pyarrow still decompresses it)."""
    import pyarrow as pa

    from sampling_mask.codecs import ipc_bounds
    from sampling_mask.codecs.arrow import table_from_mask

    table = table_from_mask(_empty_rows(num_rows))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_batch(table.to_batches()[0], custom_metadata={"ARROW:experimental_compression": "ZSTD"})
    data = bytearray(sink.getvalue().to_pybytes())
    pos = 0
    while struct.unpack_from("<i", data, pos + 4)[0] != 0:  # up to the end-of-stream marker
        start, length = pos + 8, struct.unpack_from("<i", data, pos + 4)[0]
        meta = memoryview(data)[start : start + length]
        message = ipc_bounds._Table(meta, struct.unpack_from("<I", meta, 0)[0])
        struct.pack_into("<h", data, start + message.pos + message._field(0), 3)  # version V5 -> V4
        batch = message.table(2)
        if message.scalar(1, "<B", 0) == 3 and batch is not None:  # a RecordBatch: drop field 3
            struct.pack_into("<H", data, start + batch.vtable + 4 + 2 * 3, 0)
        pos = start + length + message.scalar(3, "<q", 0)
    return bytes(data)


def zstd_stream_of_empty_rows() -> bytes:
    import sampling_mask

    return sampling_mask.encode(_empty_rows(), "arrows", compression="zstd")


def parquet_of_empty_rows() -> bytes:
    import sampling_mask

    return sampling_mask.encode(_empty_rows(), "parquet")


def base64_zero_width(num_rows: int) -> bytes:
    return json.dumps({"data": "", "shape": [num_rows, 0], "dtype": "int32"}).encode()


def msgpack_zero_width(num_rows: int = ROWS) -> bytes:
    import msgpack

    dense = {"dtype": "int32", "shape": [num_rows, 0], "data": b""}
    return msgpack.packb({"sampling_mask": 1, "layout": "dense", "dense": dense}, use_bin_type=True)  # type: ignore[no-any-return]


def footer_repeating_one_batch(times: int = 1000) -> bytes:
    """An IPC file whose footer lists its first batch (50,000 ids) ``times`` times: written with
    ``times`` batches (the first large, the rest one id), then every footer block pointed at the first."""
    import numpy as np
    import pyarrow as pa

    from sampling_mask import SamplingMask
    from sampling_mask.codecs import arrow

    big = SamplingMask.from_rows([list(range(50))] * 1000)
    small = SamplingMask(np.array([1], np.int32), np.array([0, 1], np.int64))
    sink = pa.BufferOutputStream()
    with arrow.Writer(sink, "arrow") as writer:
        writer.write(big)
        for _ in range(times - 1):
            writer.write(small)
    data = bytearray(sink.getvalue().to_pybytes())
    footer_length = struct.unpack_from("<i", data, len(data) - 10)[0]
    footer_start = len(data) - 10 - footer_length
    from sampling_mask.codecs import ipc_bounds

    footer = memoryview(data)[footer_start : len(data) - 10]
    first, count = ipc_bounds._Table(footer, struct.unpack_from("<I", footer, 0)[0]).structs(3, 24)
    assert count == times
    block = bytes(footer[first : first + 24])
    for i in range(1, count):
        data[footer_start + first + 24 * i : footer_start + first + 24 * (i + 1)] = block
    return bytes(data)


def realistic(fmt: str, num_rows: int = 150_000) -> bytes:
    """A valid rollout of realistic supports (46% singletons, mean ~8 ids), a few MB in ``fmt``."""
    import sampling_mask
    from sampling_mask.data.synthetic import rollout

    mask = rollout(num_rows, seed=1)
    if fmt in ("json-rows", "base64"):
        mask = sampling_mask.SamplingMask(mask.ids, mask.offsets)
        if fmt == "base64":
            mask = mask[:3_000]
    opts: dict[str, Any] = {"compression": "zstd"} if fmt == "arrows" else {}
    return sampling_mask.encode(mask, fmt, **opts)


#: label -> (builder, format, code under the untrusted preset)
PAYLOADS: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "arrows legacy V4 compression key": (legacy_compressed_stream, "arrows", "E_LIMIT"),
    "arrows zstd 16M empty rows": (zstd_stream_of_empty_rows, "arrows", "E_LIMIT"),
    "parquet 16M empty rows": (parquet_of_empty_rows, "parquet", "E_LIMIT"),
    "base64 shape [2**24, 0]": (lambda: base64_zero_width(ROWS), "base64", "E_LIMIT"),
    "base64 shape [2**28, 0]": (lambda: base64_zero_width(1 << 28), "base64", "E_LIMIT"),
    "msgpack dense [2**24, 0]": (msgpack_zero_width, "msgpack", "E_LIMIT"),
    "arrow footer lists one batch 1000 times": (footer_repeating_one_batch, "arrow", "E_ENCODING"),
}
