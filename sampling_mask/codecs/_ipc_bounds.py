"""Bounds on Arrow IPC decompression, checked before pyarrow decompresses anything.

A compressed IPC record batch stores each body buffer as an 8-byte little-endian *uncompressed
length* followed by the LZ4-frame / ZSTD data (``-1``: stored uncompressed). pyarrow allocates that
declared length before it decompresses, so a few bytes can ask for a terabyte. This module reads the
message metadata (FlatBuffers: ``Message`` -> ``RecordBatch`` / ``DictionaryBatch`` -> ``buffers``,
``compression``) of every complete message and raises ``E_LIMIT`` when the declared uncompressed
sizes of one batch add up to more than ``Limits.max_bytes`` (:func:`batch_sizes` reads them,
:func:`check` compares; the Arrow codec checks each batch just before it reads it).

Invariant: only reads inside the given buffers (every FlatBuffers offset and every body range is
bounds-checked; a malformed table is left for pyarrow to reject); allocates nothing sized by the
input; stops quietly at the first message it cannot read (pyarrow then reports that message as the
error, after the complete batches before it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import Limits

__all__ = ["batch_sizes", "check"]

_HEADER_DICTIONARY_BATCH = 2
_HEADER_RECORD_BATCH = 3
_CONTINUATION = 0xFFFFFFFF
_FILE_MAGIC = b"ARROW1"


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


def _declared_uncompressed(metadata: memoryview, body: memoryview) -> tuple[int, int]:
    """(message header type, sum of the uncompressed lengths its compressed buffers declare).

    The sum is 0 for a batch that is not compressed and for messages that are not batches.
    """
    message = _Table(metadata, _u32(metadata, 0))
    kind = message.scalar(1, "<B", 0)
    if kind not in (_HEADER_DICTIONARY_BATCH, _HEADER_RECORD_BATCH):
        return kind, 0
    batch = message.table(2)
    if batch is not None and kind == _HEADER_DICTIONARY_BATCH:
        batch = batch.table(1)  # DictionaryBatch.data
    if batch is None or batch.table(3) is None:  # RecordBatch field 3: compression (absent: none)
        return kind, 0
    first, count = batch.structs(2, 16)  # field 2: buffers, struct Buffer {offset: long, length: long}
    total = 0
    for i in range(count):
        offset = _unpack("<q", metadata, first + 16 * i)
        length = _unpack("<q", metadata, first + 16 * i + 8)
        if length < 8 or offset < 0 or offset + 8 > len(body):
            continue  # an empty buffer, or one pyarrow rejects itself
        declared = _unpack("<q", body, offset)
        if declared > 0:
            total += declared
    return kind, total


def check(total: int, limits: Limits, what: str) -> None:
    """``E_LIMIT`` when ``total`` declared uncompressed bytes exceed ``limits.max_bytes``."""
    if total > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT,
            f"{what} declares {total} uncompressed bytes, over the limit {limits.max_bytes}",
            field="compression",
            value=total,
        )


def _messages(data: memoryview, pos: int, end: int) -> Iterator[tuple[memoryview, memoryview]]:
    """(metadata, body) of each complete encapsulated message from ``pos`` until end of stream."""
    while pos + 8 <= end:
        marker = _u32(data, pos)
        if marker == _CONTINUATION:
            length = _i32(data, pos + 4)
            pos += 8
        else:  # pre-0.15 streams: the length without a continuation marker
            length = _i32(data, pos)
            pos += 4
        if length <= 0 or pos + length > end:
            return
        metadata = data[pos : pos + length]
        pos += length
        try:
            body_length = _Table(metadata, _u32(metadata, 0)).scalar(3, "<q", 0)
        except _Malformed:
            return
        if body_length < 0 or pos + body_length > end:
            return
        yield metadata, data[pos : pos + body_length]
        pos += body_length


def _stream_sizes(view: memoryview) -> tuple[list[int], int]:
    batches: list[int] = []
    dictionaries = 0
    for metadata, body in _messages(view, 0, len(view)):
        try:
            kind, total = _declared_uncompressed(metadata, body)
        except _Malformed:
            break
        if kind == _HEADER_RECORD_BATCH:
            batches.append(total)
        else:
            dictionaries += total
    return batches, dictionaries


def _file_sizes(view: memoryview) -> tuple[list[int], int]:
    size = len(view)
    batches: list[int] = []
    dictionaries = 0
    if size < 18 or bytes(view[:6]) != _FILE_MAGIC or bytes(view[size - 6 :]) != _FILE_MAGIC:
        return batches, dictionaries
    try:
        footer_length = _i32(view, size - 10)
        start = size - 10 - footer_length
        if footer_length <= 0 or start < 8:
            return batches, dictionaries
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
                total = 0
                if offset >= 0 and meta_length > 0 and body_length >= 0 and offset + meta_length + body_length <= size:
                    for metadata, body in _messages(view, offset, offset + meta_length + body_length):
                        total = _declared_uncompressed(metadata, body)[1]
                        break
                if field == 2:
                    dictionaries += total
                else:
                    batches.append(total)
    except _Malformed:
        pass
    return batches, dictionaries


def batch_sizes(data: Any, fmt: str) -> tuple[list[int], int]:
    """(declared uncompressed bytes of each record batch, in reading order; of all dictionary batches)
    for IPC file (``"arrow"``) or stream (``"arrows"``) bytes. 0 for an uncompressed batch."""
    view = memoryview(data).cast("B")
    return _file_sizes(view) if fmt == "arrow" else _stream_sizes(view)
