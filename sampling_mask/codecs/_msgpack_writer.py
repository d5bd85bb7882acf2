# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/_msgpack_writer.py, vendorable (docs/serving-and-vendoring.md)
"""A small msgpack writer: the bytes ``msgpack.packb(value, use_bin_type=True)`` gives (msgpack-python
1.x, ``use_single_float=False``), with the standard library only.

It writes what the envelope and the upstream wire forms hold: nil, booleans, integers in
``[-2**63, 2**64)``, floats, strings, ``bytes`` / ``bytearray`` / ``memoryview`` as ``bin``, lists
and tuples as arrays, dicts as maps (in iteration order). Every header is the smallest msgpack-python
picks: positive integers as positive fixint / uint 8 / 16 / 32 / 64, zero and negative ones as
fixint / int 8 / 16 / 32 / 64 (the smallest signed width, never an unsigned one), every float as
float 64, strings as fixstr / str 8 / 16 / 32 (strict UTF-8), ``bin`` 8 / 16 / 32, fixarray /
array 16 / 32, fixmap / map 16 / 32. So a payload written here equals msgpack-python's byte for
byte, and the goldens written with it stay valid.

A value it cannot write (an integer out of range, a string that is not valid Unicode, a ``bin`` or
string of 4 GiB or more, another type, containers nested deeper than :data:`MAX_DEPTH`) is
``E_RANGE`` (``E_LIMIT`` for the 4 GiB), naming ``field``; msgpack-python refuses the same values.
(msgpack-python's own ``ExtType`` and ``Timestamp`` objects are not values here: no ``ext`` is written.)
Lists and dicts of scalars (an ARRAY's shape, the metadata) take a one-pass path; deeper values an
iterative one, so no nesting can exhaust the Python stack. Tested against msgpack-python itself:
``tests/test_codecs_msgpack.py``.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = ["MAX_BIN", "MAX_DEPTH", "bin_header", "map_header", "pack"]

#: The largest ``bin`` / ``str`` / array / map length msgpack can declare (32 bits).
MAX_BIN = (1 << 32) - 1
#: Values nest at most this deep (msgpack-python 1.2's ``DEFAULT_RECURSE_LIMIT``).
MAX_DEPTH = 1024

_U8, _U16, _U32, _U64 = (struct.Struct(f">B{c}").pack for c in "BHIQ")
_I8, _I16, _I32, _I64 = (struct.Struct(f">B{c}").pack for c in "bhiq")
_F64 = struct.Struct(">Bd").pack


def _length_header(size: int, fix: int | None, fix_max: int, tags: tuple[int | None, int, int], what: str) -> bytes:
    """The header of a str / bin / array / map of ``size`` elements: fix form, then 8 / 16 / 32 bits."""
    if fix is not None and size <= fix_max:
        return bytes((fix | size,))
    tag8, tag16, tag32 = tags
    if tag8 is not None and size <= 0xFF:
        return _U8(tag8, size)
    if size <= 0xFFFF:
        return _U16(tag16, size)
    if size <= MAX_BIN:
        return _U32(tag32, size)
    raise SamplingMaskError(ErrorCode.E_LIMIT, f"a msgpack {what} holds at most {MAX_BIN} bytes or items", value=size)


def bin_header(size: int) -> bytes:
    """The ``bin 8 / 16 / 32`` header of ``size`` bytes (``E_LIMIT`` from 4 GiB)."""
    if size <= 0xFF:  # spelled out: every array of an envelope has one
        return _U8(0xC4, size)
    return _length_header(size, None, -1, (0xC4, 0xC5, 0xC6), "bin")


def map_header(size: int) -> bytes:
    """The fixmap / ``map 16 / 32`` header of ``size`` entries."""
    return _length_header(size, 0x80, 15, (None, 0xDE, 0xDF), "map")


def _array_header(size: int) -> bytes:
    return _length_header(size, 0x90, 15, (None, 0xDC, 0xDD), "array")


def _str(text: str) -> bytes:
    data = text.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
    if len(data) < 32:  # fixstr: every key and name of the envelope
        return bytes((0xA0 | len(data),)) + data
    return _length_header(len(data), None, -1, (0xD9, 0xDA, 0xDB), "str") + data


def _int(value: int) -> bytes:
    if value >= 0:
        if value < 0x80:
            return bytes((value,))
        if value <= 0xFF:
            return _U8(0xCC, value)
        if value <= 0xFFFF:
            return _U16(0xCD, value)
        if value <= 0xFFFFFFFF:
            return _U32(0xCE, value)
        if value <= 0xFFFFFFFFFFFFFFFF:
            return _U64(0xCF, value)
        raise OverflowError(f"integer {value} is above 2**64 - 1")
    if value >= -32:
        return bytes((value & 0xFF,))
    if value >= -0x80:
        return _I8(0xD0, value)
    if value >= -0x8000:
        return _I16(0xD1, value)
    if value >= -0x80000000:
        return _I32(0xD2, value)
    if value >= -0x8000000000000000:
        return _I64(0xD3, value)
    raise OverflowError(f"integer {value} is below -2**63")


def _bin(value: bytes | bytearray | memoryview) -> bytes:
    data = memoryview(value).cast("B")  # TypeError for a non-contiguous view, as msgpack-python
    return bin_header(data.nbytes) + bytes(data)


#: Writers of the exact types of scalar values, looked up first (the common case).
_SCALARS: dict[type, Callable[[Any], bytes]] = {
    str: _str,
    int: _int,
    float: lambda value: _F64(0xCB, value),
    bool: lambda value: b"\xc3" if value else b"\xc2",
    type(None): lambda value: b"\xc0",
    bytes: _bin,
    bytearray: _bin,
    memoryview: _bin,
}


def _scalar_writer(value: Any) -> Callable[[Any], bytes] | None:
    """The writer of a scalar ``value`` of a subclass (an ``IntEnum``...); None for a container."""
    for base in (bool, int, float, str, bytes, bytearray, memoryview):
        if isinstance(value, base):
            return _SCALARS[base]
    if isinstance(value, (dict, list, tuple)):
        return None
    raise TypeError(f"cannot write a {type(value).__name__} object")


def _flat(value: Any) -> bytes | None:
    """A list or dict of scalars of exact types (an ARRAY's shape, the metadata) written in one
    pass, the common case; None for anything else (then :func:`_write` writes it)."""
    kind = type(value)
    if kind is list:
        parts = [_array_header(len(value))]
        for item in value:
            write = _SCALARS.get(type(item))
            if write is None:
                return None
            parts.append(write(item))
    elif kind is dict:
        parts = [map_header(len(value))]
        for key, item in value.items():
            write_key, write = _SCALARS.get(type(key)), _SCALARS.get(type(item))
            if write_key is None or write is None:
                return None
            parts += (write_key(key), write(item))
    else:
        return None
    return b"".join(parts)


def _write(value: Any, out: list[bytes]) -> None:
    """Append the msgpack parts of ``value`` to ``out``; iterative (one stack entry per open container)."""
    stack: list[Iterator[Any]] = [iter((value,))]
    append = out.append
    while stack:
        for item in stack[-1]:
            write = _SCALARS.get(type(item)) or _scalar_writer(item)
            if write is not None:
                append(write(item))
                continue
            if item and len(stack) > MAX_DEPTH:  # its elements would be at depth len(stack)
                raise ValueError(f"values nest deeper than {MAX_DEPTH}")
            if isinstance(item, dict):
                append(map_header(len(item)))
                stack.append(itertools.chain.from_iterable(item.items()))
            else:
                append(_array_header(len(item)))
                stack.append(iter(item))
            break
        else:
            stack.pop()


def pack(value: Any, *, field: str | None = None) -> bytes:
    """``value`` as msgpack bytes, as ``msgpack.packb(value, use_bin_type=True)`` writes it; a value
    msgpack cannot hold is ``E_RANGE`` naming ``field`` (a ``bin`` / ``str`` of 4 GiB: ``E_LIMIT``)."""
    out: list[bytes] = []
    try:
        write = _SCALARS.get(type(value))
        if write is not None:  # the common case: a key, a name, a count
            return write(value)
        flat = _flat(value)
        if flat is not None:
            return flat
        _write(value, out)
    except SamplingMaskError as exc:  # a length of 4 GiB or more
        raise SamplingMaskError(exc.code, exc.message, field=field, value=exc.value) from None
    except (OverflowError, TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise SamplingMaskError(
            ErrorCode.E_RANGE, f"a value cannot be written as msgpack: {exc}", field=field
        ) from None
    return b"".join(out)
