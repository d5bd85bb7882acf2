"""The Arrow IPC and Parquet payloads of the suite (SPEC 9): built by pyarrow directly, once, with
``python tools/conformance/generate.py --rebuild-binaries``, and committed in
``sources/arrow-payloads.json``, which every build reads (pyarrow versions differ in incidental bytes;
the vectors must not)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from .common import SOURCES, compact_bytes

#: Arrow / Parquet payloads are built by pyarrow once (``--rebuild-binaries``) and committed in
#: ``sources/arrow-payloads.json``: pyarrow versions differ in incidental bytes, the goldens must not.
_ARROW_SOURCE = "arrow-payloads.json"
#: Rows of the payloads whose mask (8.1: 8 bytes an offset) is far larger than their bytes.
MANY_EMPTY_ROWS = 100_000


def _forge_uncompressed_length(ipc: bytes, length: int) -> bytes:
    """``ipc`` (LZ4-compressed IPC bytes) with the 8-byte uncompressed-length prefix of the one buffer of
    ``length`` bytes set to 2**40: a decompression bomb by declaration (SPEC 8.4)."""
    needle = length.to_bytes(8, "little") + bytes.fromhex("04224d18")  # the prefix, then the LZ4 frame magic
    at = ipc.find(needle)
    assert at >= 0 and ipc.count(needle) == 1, "the buffer to forge is not unique"
    return ipc[:at] + (1 << 40).to_bytes(8, "little") + ipc[at + 8 :]


def _arrow_payloads() -> dict[str, bytes]:
    """Every Arrow IPC / Parquet payload of the suite, written with pyarrow directly."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    def lists(cu: list[int], offsets: list[int], values: Any, *, large: bool = False) -> Any:
        cls = pa.LargeListArray if large else pa.ListArray
        index = pa.int64() if large else pa.int32()
        inner = cls.from_arrays(pa.array(offsets, index), values)
        return cls.from_arrays(pa.array(cu, index), inner)

    def flat(cu: list[int], values: Any) -> Any:
        return pa.ListArray.from_arrays(pa.array(cu, pa.int32()), values)

    def meta(**fields: str) -> dict[str, str]:
        out = {"sampling_mask.version": "1"}
        out.update({f"sampling_mask.{k.replace('__', '.')}": v for k, v in fields.items()})
        return out

    def table(columns: dict[str, Any], metadata: dict[str, str]) -> Any:
        return pa.table(columns).replace_schema_metadata(metadata)

    def ipc_file(t: Any, compression: str | None = None) -> bytes:
        """An IPC file of table ``t`` (a bare schema writes a file with no record batch)."""
        sink = io.BytesIO()
        schema = t if isinstance(t, pa.Schema) else t.schema
        with pa.ipc.new_file(sink, schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
            if not isinstance(t, pa.Schema):
                writer.write_table(t)
        return sink.getvalue()

    def ipc_stream(t: Any, batches: int = 1, compression: str | None = None) -> bytes:
        sink = io.BytesIO()
        options = pa.ipc.IpcWriteOptions(compression=compression)
        with pa.ipc.new_stream(sink, t.schema, options=options) as writer:
            if batches == 1:
                writer.write_table(t)
            else:
                for batch in t.to_batches(max_chunksize=1):
                    writer.write_batch(batch)
        return sink.getvalue()

    def parquet(t: Any, row_group_size: int | None = None) -> bytes:
        sink = io.BytesIO()
        pq.write_table(t, sink, row_group_size=row_group_size)
        return sink.getvalue()

    def compact_table(
        segments: list[list[list[int]]], num_rows: list[int], nnz: list[int], count_type: Any = None
    ) -> Any:
        """The compact Arrow layout: one blob per segment plus its row and id counts."""
        return table(
            {
                "sampling_mask_compact": pa.array([compact_bytes(seg) for seg in segments], pa.binary()),
                "sampling_mask_num_rows": pa.array(num_rows, count_type or pa.int64()),
                "sampling_mask_nnz": pa.array(nnz, pa.int64()),
            },
            meta(vocab_size="10", id_order="ascending", layout="compact"),
        )

    issue = table(
        {"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32()))},
        meta(vocab_size="10", id_order="ascending"),
    )
    companions = table(
        {
            "sampling_mask": lists([0, 2], [0, 3, 3], pa.array([9, 3, 5], pa.int32())),
            "sampled_token_ids": flat([0, 2], pa.array([5, -1], pa.int32())),
            "sampled_logprobs": flat([0, 2], pa.array([-0.5, 0.0], pa.float32())),
            "temperature": flat([0, 2], pa.array([0.5, 1.0], pa.float32())),
            "support_logprobs": lists([0, 2], [0, 3, 3], pa.array([-3.0, -1.25, -0.5], pa.float32())),
        },
        meta(vocab_size="10", id_order="unspecified", metadata__top_k="3", metadata__producer='"vllm-0.32"'),
    )
    hundred = table({"sampling_mask": lists([0, 1], [0, 100], pa.array(range(100), pa.int32()))}, meta())
    user = table(
        {
            "prompt_ids": pa.array([[1, 2, 3], [4]], pa.list_(pa.int64())),
            "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
            "reward": pa.array([1.0, -0.5], pa.float64()),
        },
        meta(),
    )
    out = {
        "arrow.issue-example": ipc_file(issue),
        "arrow.companions": ipc_file(companions),
        "arrow.user-columns": ipc_file(user),
        "arrow.large-lists": ipc_file(
            table(
                {"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32()), large=True)}, meta()
            )
        ),
        "arrow.empty-segments": ipc_file(
            table({"sampling_mask": lists([0, 0, 2, 2], [0, 1, 2], pa.array([1, 2], pa.int32()))}, meta())
        ),
        "arrow.zero-segments": ipc_file(table({"sampling_mask": lists([0], [0], pa.array([], pa.int32()))}, meta())),
        "arrows.issue-example": ipc_stream(issue),
        "arrows.one-batch-per-segment": ipc_stream(issue, batches=2),
        "parquet.issue-example": parquet(issue),
        "parquet.companions": parquet(companions),
        # invalid
        "arrow.unknown-major-version": ipc_file(issue.replace_schema_metadata(meta(version="2", vocab_size="10"))),
        "arrow.version-missing": ipc_file(issue.replace_schema_metadata({"sampling_mask.vocab_size": "10"})),
        "arrow.vocab-size-not-decimal": ipc_file(issue.replace_schema_metadata(meta(vocab_size="ten"))),
        "arrow.int64-ids": ipc_file(
            table({"sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int64()))}, meta())
        ),
        "arrow.mask-column-missing": ipc_file(table({"tokens": pa.array([[1, 5, 7]], pa.list_(pa.int32()))}, meta())),
        "arrow.null-row": ipc_file(
            table(
                {"sampling_mask": pa.array([[[1, 5], None], [[7]]], pa.list_(pa.list_(pa.int32())))},
                meta(),
            )
        ),
        "arrow.duplicate-id": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([4, 4], pa.int32()))}, meta())
        ),
        "arrow.id-order-violated": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([5, 1], pa.int32()))}, meta(id_order="ascending"))
        ),
        "arrow.id-beyond-vocab": ipc_file(
            table({"sampling_mask": lists([0, 1], [0, 2], pa.array([1, 10], pa.int32()))}, meta(vocab_size="10"))
        ),
        "arrow.companion-misaligned": ipc_file(
            table(
                {
                    "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
                    "sampled_token_ids": flat([0, 1, 3], pa.array([5, -1, 7], pa.int32())),
                },
                meta(),
            )
        ),
        "arrow.sampled-id-not-in-row": ipc_file(
            table(
                {
                    "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
                    "sampled_token_ids": flat([0, 2, 3], pa.array([2, -1, 7], pa.int32())),
                },
                meta(),
            )
        ),
        "arrow.no-batches": ipc_file(issue.schema),
        "arrow.zstd": ipc_file(issue, compression="zstd"),
        "arrows.lz4": ipc_stream(issue, compression="lz4"),
        "parquet.two-row-groups": parquet(issue, row_group_size=1),
        "arrow.mask-column-flat": ipc_file(
            table({"sampling_mask": pa.array([[1, 5, 7]], pa.list_(pa.int32()))}, meta())
        ),
        "arrow.duplicate-column": ipc_file(
            pa.Table.from_arrays(
                [issue.column(0), issue.column(0)], names=["sampling_mask", "sampling_mask"]
            ).replace_schema_metadata(meta())
        ),
        "arrow.metadata-not-json": ipc_file(issue.replace_schema_metadata(meta(metadata__top_k="{oops"))),
        "arrow.version-not-decimal": ipc_file(issue.replace_schema_metadata(meta(version="1.0"))),
        "arrow.compact-layout": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [2, 1])),
        "arrow.compact-negative-count": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [2, -1])),
        "arrow.compact-blob-disagrees": ipc_file(compact_table([[[1, 5], []], [[7]]], [2, 1], [3, 1])),
        "arrows.unknown-major-version": ipc_stream(issue.replace_schema_metadata(meta(version="2"))),
        "arrow.vocab-size-plus-sign": ipc_file(issue.replace_schema_metadata(meta(vocab_size="+10"))),
        "arrow.vocab-size-leading-zero": ipc_file(issue.replace_schema_metadata(meta(vocab_size="010"))),
        "arrow.compact-num-rows-int32": ipc_file(
            compact_table([[[1, 5], []], [[7]]], [2, 1], [2, 1], count_type=pa.int32())
        ),
        "arrow.compressed-length-bomb": _forge_uncompressed_length(ipc_file(hundred, compression="lz4"), 400),
        "arrows.compressed-length-bomb": _forge_uncompressed_length(ipc_stream(hundred, compression="lz4"), 400),
        "parquet.unknown-major-version": parquet(issue.replace_schema_metadata(meta(version="2"))),
    }
    # Offsets Arrow itself would refuse to build: assembled from raw buffers.
    ids = pa.array([1, 5, 7], pa.int32())
    bad_inner = pa.ListArray.from_buffers(
        pa.list_(pa.int32()), 3, [None, pa.py_buffer(np.array([0, 2, 1, 3], "<i4").tobytes())], children=[ids]
    )
    outer = pa.ListArray.from_buffers(
        pa.list_(pa.list_(pa.int32())), 1, [None, pa.py_buffer(np.array([0, 3], "<i4").tobytes())], children=[bad_inner]
    )
    out["arrow.offsets-decreasing"] = ipc_file(table({"sampling_mask": outer}, meta()))
    # Bodies larger than what the mask produces, and masks far larger than their bytes.
    blob = pa.array([bytes(range(256)) * 16, bytes(4096)], pa.binary())  # 8 KiB of user bytes
    out["arrow.large-user-column"] = ipc_file(
        table({"sampling_mask": issue.column(0), "blob": blob}, meta(vocab_size="10", id_order="ascending"))
    )
    out["arrows.large-user-column"] = ipc_stream(
        table({"sampling_mask": issue.column(0), "blob": blob}, meta(vocab_size="10", id_order="ascending"))
    )
    many = MANY_EMPTY_ROWS
    compact_many = compact_table([[[]] * many], [many], [0])
    out["arrow.compact-many-empty-rows"] = ipc_file(compact_many, compression="zstd")
    out["parquet.compact-many-empty-rows"] = parquet(compact_many)
    list_many = table({"sampling_mask": lists([0, many], [0] * (many + 1), pa.array([], pa.int32()))}, meta())
    out["parquet.many-empty-rows"] = parquet(list_many)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, issue.schema):
        pass  # a stream of no record batch: the schema, then the end-of-stream marker
    out["arrows.no-batches"] = sink.getvalue()
    out["parquet.no-rows"] = parquet(issue.schema.empty_table())
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, issue.schema) as writer:
        for batch in issue.to_batches(max_chunksize=1):
            writer.write_batch(batch)  # one record batch per segment: two blocks in the footer
    out["arrow.one-batch-per-segment"] = sink.getvalue()
    out.update(_byte_count_payloads(lists, table, meta, ipc_file, ipc_stream))
    out.update(_schema_only_payloads(companions, issue, meta, ipc_file, parquet))
    return out


def _ipc_file_of_batches(t: Any, compression: str | None) -> bytes:
    """An IPC file of table ``t`` written one record batch per table row (one footer block each)."""
    import io

    import pyarrow as pa

    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, t.schema, options=options) as writer:
        for batch in t.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    return sink.getvalue()


#: Rows of each half of the two-batch payloads of the byte count (SPEC 8.5).
HALF_EMPTY_ROWS = MANY_EMPTY_ROWS // 2
#: Bytes of the compressible user column of each batch of the two-batch payloads (zeros).
ZERO_BLOB_BYTES = 100_000
#: Bytes of the incompressible user column of the payloads whose compressed batch stores it as is.
RANDOM_BLOB_BYTES = 8192


def _byte_count_payloads(lists: Any, table: Any, meta: Any, ipc_file: Any, ipc_stream: Any) -> dict[str, bytes]:
    """Payloads of the byte count of SPEC 8.5: what a compressed batch declares, batches that count
    together, a buffer stored uncompressed inside a compressed batch."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, bytes] = {}
    many, half = MANY_EMPTY_ROWS, HALF_EMPTY_ROWS
    one = table({"sampling_mask": lists([0, many], [0] * (many + 1), pa.array([], pa.int32()))}, meta())
    two = table({"sampling_mask": lists([0, half, 2 * half], [0] * (2 * half + 1), pa.array([], pa.int32()))}, meta())
    blobs = table(
        {
            "sampling_mask": lists([0, 1, 2], [0, 1, 2], pa.array([1, 2], pa.int32())),
            "blob": pa.array([bytes(ZERO_BLOB_BYTES)] * 2, pa.binary()),
        },
        meta(vocab_size="10", id_order="ascending"),
    )
    for form, write in (("arrow", _ipc_file_of_batches), ("arrows", lambda t, c: ipc_stream(t, 2, compression=c))):
        out[f"{form}.many-empty-rows-zstd"] = (
            ipc_file(one, compression="zstd") if form == "arrow" else ipc_stream(one, compression="zstd")
        )
        out[f"{form}.two-batches-of-empty-rows-zstd"] = write(two, "zstd")
        out[f"{form}.two-batches-compressed-blob"] = write(blobs, "zstd")
    sink = io.BytesIO()
    pq.write_table(two, sink, row_group_size=1)
    out["parquet.two-row-groups-of-empty-rows"] = sink.getvalue()
    sink = io.BytesIO()
    pq.write_table(blobs, sink, row_group_size=1, compression="zstd")
    out["parquet.two-row-groups-compressed-blob"] = sink.getvalue()
    # An LZ4 batch whose incompressible user column is then stored as is: its buffer's prefix -1,
    # its raw bytes after it (the frame was longer, so the buffer keeps its place and length).
    raw = np.random.default_rng(20260414).integers(0, 256, RANDOM_BLOB_BYTES, dtype=np.uint8).tobytes()
    random = table(
        {
            "sampling_mask": lists([0, 2, 3], [0, 2, 2, 3], pa.array([1, 5, 7], pa.int32())),
            "blob": pa.array([raw[: RANDOM_BLOB_BYTES // 2], raw[RANDOM_BLOB_BYTES // 2 :]], pa.binary()),
        },
        meta(vocab_size="10", id_order="ascending"),
    )
    for form in ("arrow", "arrows"):
        data = ipc_file(random, compression="lz4") if form == "arrow" else ipc_stream(random, compression="lz4")
        needle = RANDOM_BLOB_BYTES.to_bytes(8, "little") + bytes.fromhex("04224d18")  # the prefix, the LZ4 magic
        at = data.find(needle)
        assert at >= 0 and data.count(needle) == 1, form
        out[f"{form}.blob-stored-uncompressed"] = (
            data[:at] + (-1).to_bytes(8, "little", signed=True) + raw + data[at + 8 + len(raw) :]
        )
    return out


def _schema_only_payloads(companions: Any, issue: Any, meta: Any, ipc_file: Any, parquet: Any) -> dict[str, bytes]:
    """Payloads whose schema alone says something: no batch, or schema metadata of another kind."""
    import io

    import pyarrow as pa

    out: dict[str, bytes] = {}
    out["arrow.no-batches-companions"] = ipc_file(companions.schema)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, companions.schema):
        pass
    out["arrows.no-batches-companions"] = sink.getvalue()
    out["parquet.no-rows-companions"] = parquet(companions.schema.empty_table())
    integral = issue.replace_schema_metadata(meta(vocab_size="10", id_order="ascending", metadata__top_k="4.0"))
    out["arrow.metadata-top-k-integral-float"] = ipc_file(integral)
    out["parquet.metadata-top-k-integral-float"] = parquet(integral)
    return out


@functools.lru_cache(maxsize=1)
def binaries() -> dict[str, bytes]:
    """Every committed payload, by name (``arrow.issue-example``, ``parquet.two-row-groups``, ...)."""
    data = json.loads((SOURCES / _ARROW_SOURCE).read_text(encoding="utf-8"))
    return {name: bytes.fromhex(text) for name, text in data["payloads"].items()}


def hx(name: str) -> dict[str, str]:
    """The committed payload ``name`` as a case input (``{"hex": ...}``)."""
    return {"hex": binaries()[name].hex()}


def rebuild_binaries() -> Path:
    """Rewrite ``sources/arrow-payloads.json`` with the installed pyarrow (an explicit, reviewed step)."""
    import pyarrow as pa

    payloads = _arrow_payloads()
    doc = {
        "about": "Arrow IPC / Parquet payloads of the conformance suite, written by pyarrow directly "
        "(tools/conformance/cases/arrow_payloads.py, _arrow_payloads). Rebuilt only by "
        "`python tools/conformance/generate.py --rebuild-binaries`.",
        "pyarrow": pa.__version__,
        "payloads": {name: data.hex() for name, data in sorted(payloads.items())},
    }
    path = SOURCES / _ARROW_SOURCE
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return path


def ipc_blocks(data: bytes) -> tuple[int, list[int]]:
    """Where the footer of IPC file ``data`` starts and the footer positions of its record-batch
    Blocks (struct Block {offset: long, metaDataLength: int, pad, bodyLength: long}), found as the
    24-byte runs that name a message inside the file (the generator's own reading, for forging)."""
    import struct

    footer_length = struct.unpack_from("<i", data, len(data) - 10)[0]
    start = len(data) - 10 - footer_length
    found = []
    for at in range(start, len(data) - 10 - 24 + 1):
        offset, meta, pad, body = struct.unpack_from("<qiiq", data, at)
        if 8 <= offset < start and 0 < meta and meta % 8 == 0 and pad == 0 and body >= 0:
            if offset + meta + body <= start and data[offset : offset + 4] == b"\xff\xff\xff\xff":
                found.append(at)
    return start, found
