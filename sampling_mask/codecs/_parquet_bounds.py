"""Bounds on Parquet input, read from the file footer before pyarrow reads a row group.

A Parquet footer is a Thrift compact-protocol ``FileMetaData``. Its sizes are *encoded* sizes:
16M empty rows are a run-length encoded level run of a few bytes, so they bound nothing. What does
bound the reader is the number of values each column chunk declares (``ColumnMetaData.num_values``,
one per leaf slot: an id, or an empty list) and its pages' ``total_uncompressed_size``. The *cost*
of a row group is :data:`ROW_GROUP_BYTES` plus 8 bytes per row plus, per column chunk,
:data:`CHUNK_BYTES`, its uncompressed size and :data:`VALUE_BYTES` per declared value (Arrow C++
reads Parquet at about 35 bytes a value, levels, offsets and its own buffers included). The fixed
parts are what every row group and column chunk costs however small (footer metadata, pyarrow's
table, the mask object: about 2 KB for a one-row row group of one column, 3.8 KB of five, measured),
so a valid file of one-row row groups cannot outgrow its bound.

The footer is parsed here, not through ``pyarrow.parquet.FileMetaData``: pyarrow's column metadata
accessor aborts the process on some malformed footers (a C++ exception thrown through ``noexcept``,
found by fuzzing). Invariant: reads only inside the footer, skips every field it does not need
without building it, nests at most 16 structs deep, and raises ``E_ENCODING`` for a footer it cannot
read (so a footer pyarrow would accept is never left unbounded).
"""

from __future__ import annotations

import struct
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = ["CHUNK_BYTES", "ROW_GROUP_BYTES", "VALUE_BYTES", "row_group_costs", "row_groups"]

#: Bytes a reader may build per value a column chunk declares.
VALUE_BYTES = 40
#: Bytes every row group / column chunk costs however small it is.
ROW_GROUP_BYTES = 2048
CHUNK_BYTES = 1024
_MAX_DEPTH = 16
# Thrift compact types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)


class _Malformed(Exception):
    """The footer is not a Thrift compact struct."""


class _Reader:
    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise _Malformed
        value = self.buf[self.pos]
        self.pos += 1
        return int(value)

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7
            if shift > 63:
                raise _Malformed

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip_bytes(self, count: int) -> None:
        if count < 0 or self.pos + count > len(self.buf):
            raise _Malformed
        self.pos += count

    def fields(self) -> Any:
        """Yield (field id, type) of a struct until its STOP; the caller reads or skips each value."""
        last = 0
        while True:
            header = self.byte()
            kind = header & 0x0F
            if kind == _STOP:
                return
            delta = header >> 4
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        if size == 15:
            size = self.varint()
        if size > len(self.buf) - self.pos:  # every element takes at least one byte
            raise _Malformed
        return size, header & 0x0F

    def skip(self, kind: int, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise _Malformed
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.skip_bytes(1)
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.skip_bytes(8)
        elif kind == _BINARY:
            self.skip_bytes(self.varint())
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                if element in (_TRUE, _FALSE):
                    self.skip_bytes(1)  # a bool in a list is one byte
                else:
                    self.skip(element, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                if 2 * size > len(self.buf) - self.pos:
                    raise _Malformed
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            for _, field_kind in self.fields():
                self.skip(field_kind, depth + 1)
        else:
            raise _Malformed

    def int_field(self, kind: int) -> int:
        if kind not in (_I16, _I32, _I64):
            raise _Malformed
        return self.zigzag()


def _column_chunk_cost(r: _Reader) -> int:
    """ColumnChunk: field 3 is ColumnMetaData (5: num_values, 6: total_uncompressed_size)."""
    cost = CHUNK_BYTES
    for field, kind in r.fields():
        if field == 3 and kind == _STRUCT:
            for meta_field, meta_kind in r.fields():
                if meta_field in (5, 6) and meta_kind in (_I16, _I32, _I64):
                    value = max(r.int_field(meta_kind), 0)
                    cost += VALUE_BYTES * value if meta_field == 5 else value
                else:
                    r.skip(meta_kind, 3)
        else:
            r.skip(kind, 2)
    return cost


def _row_group(r: _Reader) -> tuple[int, int]:
    """RowGroup: field 1 is its ColumnChunks, field 3 its row count; (cost, rows)."""
    cost = ROW_GROUP_BYTES
    rows = 0
    for field, kind in r.fields():
        if field == 1 and kind == _LIST:
            size, element = r.list_header()
            if element != _STRUCT:
                raise _Malformed
            for _ in range(size):
                cost += _column_chunk_cost(r)
        elif field == 3 and kind in (_I16, _I32, _I64):
            rows = max(r.int_field(kind), 0)
            cost += 8 * rows
        else:
            r.skip(kind, 1)
    return cost, rows


def row_groups(data: Any) -> list[tuple[int, int]]:
    """(cost, declared rows) of each row group of Parquet file bytes ``data``, from its footer
    (``E_ENCODING`` when either magic is damaged or the footer cannot be read: encrypted, cut, or
    not Thrift)."""
    view = memoryview(data).cast("B")
    size = len(view)
    if size < 12 or bytes(view[size - 4 :]) != b"PAR1":
        cut = size >= 4 and bytes(view[:4]) == b"PAR1"
        message = (
            f"the Parquet file is truncated or its footer is damaged ({size} bytes, no PAR1 footer at its end)"
            if cut
            else "not a Parquet file (no PAR1 footer at its end)"
        )
        raise SamplingMaskError(ErrorCode.E_ENCODING, message, field="footer")
    if bytes(view[:4]) != b"PAR1":  # SPEC 8.5.7: pyarrow reads the footer and never the leading magic
        raise SamplingMaskError(ErrorCode.E_ENCODING, "the file does not start with the magic PAR1", field="magic")
    (length,) = struct.unpack_from("<I", view, size - 8)
    if length > size - 12:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING,
            f"the Parquet footer length ({length}) runs outside the file ({size} bytes): truncated or damaged",
            field="footer",
            value=length,
        )
    reader = _Reader(view[size - 8 - length : size - 8])
    found: list[tuple[int, int]] = []
    try:
        for field, kind in reader.fields():  # FileMetaData: field 4 is the row groups
            if field == 4 and kind == _LIST:
                count, element = reader.list_header()
                if element != _STRUCT:
                    raise _Malformed
                found.extend(_row_group(reader) for _ in range(count))
            else:
                reader.skip(kind, 0)
    except _Malformed:
        raise SamplingMaskError(
            ErrorCode.E_ENCODING, "the Parquet footer is not valid Thrift (damaged or encrypted)", field="footer"
        ) from None
    return found


def row_group_costs(data: Any) -> list[int]:
    """The cost of each row group of Parquet file bytes ``data`` (see :func:`row_groups`)."""
    return [cost for cost, _rows in row_groups(data)]
