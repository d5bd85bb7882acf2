"""Bounds on Arrow IPC input, read from the message metadata before pyarrow reads a batch.

A compressed IPC record batch stores each body buffer as an 8-byte little-endian *uncompressed
length* followed by the LZ4-frame / ZSTD data (``-1``: stored uncompressed). pyarrow allocates that
declared length before it decompresses, so a few bytes can ask for a terabyte. This module reads the
message metadata (FlatBuffers: ``Message`` -> ``RecordBatch`` / ``DictionaryBatch`` -> ``nodes``,
``buffers``, ``compression``; ``Message.custom_metadata`` for the legacy V4
``ARROW:experimental_compression`` key, which compresses a batch without the ``compression``
field) of every complete message. The *cost* of a batch is what reading it may allocate: the
uncompressed sizes its compressed buffers declare plus 16 bytes for every element of every field
node (offsets widened to int64, ids, companions, and the validation's temporaries) plus a fixed
cost per batch and per field node (the objects every batch builds, however small: a file of
one-row batches must not outgrow its bound); :func:`check` compares a cost with
``Limits.max_bytes`` (``E_LIMIT``). An IPC file footer listing one block twice, or blocks that
overlap, is ``E_ENCODING`` (a 200 KB file could otherwise name one batch a thousand times). A
stream that ends after a complete message without the end-of-stream marker is reported as not
``complete``.

Invariant: only reads inside the given buffers (every FlatBuffers offset and every body range is
bounds-checked; a malformed table is left for pyarrow to reject); allocates nothing sized by the
input; stops quietly at the first message it cannot read (pyarrow then reports that message as the
error, after the complete batches before it).
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import Limits

__all__ = ["IpcCosts", "batch_costs", "check"]

_HEADER_DICTIONARY_BATCH = 2
_HEADER_RECORD_BATCH = 3
_CONTINUATION = 0xFFFFFFFF
_FILE_MAGIC = b"ARROW1"
_LEGACY_COMPRESSION_KEY = b"ARROW:experimental_compression"
#: Bytes a reader may build per field-node element: an offset widened to int64 (or an id, a
#: companion value) and the validation's temporaries over it.
_NODE_ELEMENT_BYTES = 16
#: Bytes every record batch costs whatever its size (pyarrow's batch and array objects, the mask
#: object and its views: about 3 KB measured for a one-row batch of five columns), and per field node.
BATCH_BYTES = 2048
NODE_BYTES = 256


class IpcCosts(NamedTuple):
    """What reading an IPC file / stream may allocate, from its metadata alone."""

    batches: list[int]  # cost of each record batch, in reading order
    dictionaries: int  # cost of all dictionary batches together
    complete: bool  # a stream ends with its end-of-stream marker (a file: always True)
    rows: tuple[int, ...] = ()  # rows each record batch declares (RecordBatch.length), in reading order


class _Malformed(Exception):
    """A FlatBuffers offset points outside its buffer: leave the message to pyarrow."""


class _Table:
    """A FlatBuffers table inside ``buf`` at ``pos`` (fields read with bounds checks)."""

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        vtable = pos - _i32(buf, pos)
        self.vtable = vtable
        self.vsize = _u16(buf, vtable)

    def _field(self, index: int) -> int:
        slot = 4 + 2 * index
        if slot + 2 > self.vsize:
            return 0
        return _u16(self.buf, self.vtable + slot)

    def scalar(self, index: int, fmt: str, default: int) -> int:
        off = self._field(index)
        if not off:
            return default
        return _unpack(fmt, self.buf, self.pos + off)

    def table(self, index: int) -> _Table | None:
        off = self._field(index)
        if not off:
            return None
        at = self.pos + off
        return _Table(self.buf, at + _u32(self.buf, at))

    def vector(self, index: int) -> tuple[int, int]:
        """(position of the first element, count) of a vector of 4-byte table / string offsets."""
        return self.structs(index, 4)

    def string(self, index: int) -> bytes:
        """A string field's bytes (empty when absent)."""
        off = self._field(index)
        if not off:
            return b""
        at = self.pos + off
        start = at + _u32(self.buf, at)
        size = _u32(self.buf, start)
        if start + 4 + size > len(self.buf):
            raise _Malformed
        return bytes(self.buf[start + 4 : start + 4 + size])

    def structs(self, index: int, size: int) -> tuple[int, int]:
        """(position of the first element, count) of a vector of fixed-size structs."""
        off = self._field(index)
        if not off:
            return 0, 0
        at = self.pos + off
        vec = at + _u32(self.buf, at)
        count = _u32(self.buf, vec)
        if vec + 4 + count * size > len(self.buf):
            raise _Malformed
        return vec + 4, count


def _unpack(fmt: str, buf: memoryview, pos: int) -> int:
    size = struct.calcsize(fmt)
    if pos < 0 or pos + size > len(buf):
        raise _Malformed
    return int(struct.unpack_from(fmt, buf, pos)[0])


def _u16(buf: memoryview, pos: int) -> int:
    return _unpack("<H", buf, pos)


def _u32(buf: memoryview, pos: int) -> int:
    return _unpack("<I", buf, pos)


def _i32(buf: memoryview, pos: int) -> int:
    return _unpack("<i", buf, pos)


def _legacy_compressed(message: _Table) -> bool:
    """``Message.custom_metadata`` (field 4) holds the V4 ``ARROW:experimental_compression`` key."""
    first, count = message.vector(4)
    for i in range(count):
        at = first + 4 * i
        entry = _Table(message.buf, at + _u32(message.buf, at))
        if entry.string(0) == _LEGACY_COMPRESSION_KEY:  # KeyValue field 0: key
            return True
    return False


def _cost_and_rows(metadata: memoryview, body: memoryview) -> tuple[int, int, int]:
    """(message header type, what reading the message may allocate, the rows it declares)."""
    message = _Table(metadata, _u32(metadata, 0))
    kind = message.scalar(1, "<B", 0)
    if kind not in (_HEADER_DICTIONARY_BATCH, _HEADER_RECORD_BATCH):
        return kind, 0, 0
    batch = message.table(2)
    if batch is not None and kind == _HEADER_DICTIONARY_BATCH:
        batch = batch.table(1)  # DictionaryBatch.data
    if batch is None:
        return kind, 0, 0
    rows = max(batch.scalar(0, "<q", 0), 0)  # field 0: length
    first, count = batch.structs(1, 16)  # field 1: nodes, struct FieldNode {length: long, null_count: long}
    total = BATCH_BYTES + NODE_BYTES * count
    for i in range(count):
        total += _NODE_ELEMENT_BYTES * max(_unpack("<q", metadata, first + 16 * i), 0)
    if batch.table(3) is None and not _legacy_compressed(message):  # field 3: compression (absent: none)
        return kind, total, rows
    first, count = batch.structs(2, 16)  # field 2: buffers, struct Buffer {offset: long, length: long}
    for i in range(count):
        offset = _unpack("<q", metadata, first + 16 * i)
        length = _unpack("<q", metadata, first + 16 * i + 8)
        if length < 8 or offset < 0 or offset + 8 > len(body):
            continue  # an empty buffer, or one pyarrow rejects itself
        declared = _unpack("<q", body, offset)
        if declared > 0:
            total += declared
    return kind, total, rows


def check(total: int, limits: Limits, what: str) -> None:
    """``E_LIMIT`` when reading ``what`` may allocate ``total`` bytes, more than ``limits.max_bytes``."""
    if total > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT,
            f"{what} declares {total} bytes of arrays (uncompressed), over the limit {limits.max_bytes}",
            field="compression",
            value=total,
        )


def _messages(data: memoryview, pos: int, end: int) -> tuple[list[tuple[memoryview, memoryview]], bool]:
    """(metadata, body) of each complete encapsulated message from ``pos``, and whether they end at
    an end-of-stream marker (a zero length)."""
    out: list[tuple[memoryview, memoryview]] = []
    while pos + 4 <= end:
        marker = _u32(data, pos)
        if marker == _CONTINUATION:
            if pos + 8 > end:
                return out, False
            length = _i32(data, pos + 4)
            pos += 8
        else:  # pre-0.15 streams: the length without a continuation marker
            length = _i32(data, pos)
            pos += 4
        if length == 0:
            return out, True
        if length < 0 or pos + length > end:
            return out, False
        metadata = data[pos : pos + length]
        pos += length
        try:
            body_length = _Table(metadata, _u32(metadata, 0)).scalar(3, "<q", 0)
        except _Malformed:
            return out, False
        if body_length < 0 or pos + body_length > end:
            return out, False
        out.append((metadata, data[pos : pos + body_length]))
        pos += body_length
    return out, False


def _stream_costs(view: memoryview) -> IpcCosts:
    batches: list[int] = []
    rows: list[int] = []
    dictionaries = 0
    messages, complete = _messages(view, 0, len(view))
    for metadata, body in messages:
        try:
            kind, total, length = _cost_and_rows(metadata, body)
        except _Malformed:
            return IpcCosts(batches, dictionaries, False, tuple(rows))
        if kind == _HEADER_RECORD_BATCH:
            batches.append(total)
            rows.append(length)
        else:
            dictionaries += total
    return IpcCosts(batches, dictionaries, complete, tuple(rows))


def _check_blocks(blocks: list[tuple[int, int]]) -> None:
    """Footer blocks (offset, end) must be distinct and disjoint, else ``E_ENCODING``."""
    ordered = sorted(blocks)
    for (start, end), (next_start, _) in zip(ordered, ordered[1:], strict=False):
        if next_start < end:
            what = "twice" if next_start == start else "overlapping another"
            raise SamplingMaskError(
                ErrorCode.E_ENCODING, f"the file footer lists the block at byte {next_start} {what}", value=next_start
            )


def _file_costs(view: memoryview) -> IpcCosts:
    size = len(view)
    batches: list[int] = []
    rows: list[int] = []
    dictionaries = 0
    if size < 18 or bytes(view[:6]) != _FILE_MAGIC or bytes(view[size - 6 :]) != _FILE_MAGIC:
        return IpcCosts(batches, dictionaries, True)
    blocks: list[tuple[int, int]] = []
    try:
        footer_length = _i32(view, size - 10)
        start = size - 10 - footer_length
        if footer_length <= 0 or start < 8:
            return IpcCosts(batches, dictionaries, True)
        footer = view[start : size - 10]
        table = _Table(footer, _u32(footer, 0))
        # Footer fields 2 and 3: dictionaries and recordBatches, vectors of
        # struct Block {offset: long, metaDataLength: int, (4 bytes padding), bodyLength: long}.
        for field in (2, 3):
            first, count = table.structs(field, 24)
            for i in range(count):
                at = first + 24 * i
                offset = _unpack("<q", footer, at)
                meta_length = _unpack("<i", footer, at + 8)
                body_length = _unpack("<q", footer, at + 16)
                total = length = 0
                end = offset + meta_length + body_length
                if offset >= 0 and meta_length > 0 and body_length >= 0 and end <= size:
                    blocks.append((offset, end))
                    messages, _ = _messages(view, offset, end)
                    if messages:
                        total, length = _cost_and_rows(*messages[0])[1:]
                if field == 2:
                    dictionaries += total
                else:
                    batches.append(total)
                    rows.append(length)
    except _Malformed:
        pass
    _check_blocks(blocks)
    return IpcCosts(batches, dictionaries, True, tuple(rows))


def batch_costs(data: Any, fmt: str) -> IpcCosts:
    """:class:`IpcCosts` of IPC file (``"arrow"``) or stream (``"arrows"``) bytes."""
    view = memoryview(data).cast("B")
    return _file_costs(view) if fmt == "arrow" else _stream_costs(view)
