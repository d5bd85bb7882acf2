# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/_msgpack_reader.py, vendorable (docs/serving-and-vendoring.md)
"""A strict, bounded msgpack reader whose ``bin`` values are views of the input (zero copy).

``msgpack.unpackb`` copies every ``bin`` into a new ``bytes`` object, so arrays decoded from it
could never share memory with the payload. This reader parses the msgpack subset the envelope
uses and returns each ``bin`` as a ``memoryview`` slice of the input instead.

Invariants: every declared length is checked against the bytes that remain before anything is
sliced or built (``E_ENCODING``); containers nest at most ``max_depth`` deep and the payload holds
at most ``max_objects`` objects (``E_LIMIT``); map keys are unique strings (``E_SCHEMA``); strings
are strict UTF-8; ``ext`` types, the reserved byte 0xc1 and trailing bytes are ``E_ENCODING``.
Iterative: hostile nesting cannot exhaust the Python stack. Every object is charged, as it is
built, the bytes of Python memory it takes (:data:`LIST_BYTES`, :data:`MAP_BYTES` per container and
slot, the size of each str, int, float and ``bin`` view): past ``max_bytes`` the read stops with
``E_LIMIT``, so junk under an unknown key (a million empty maps) cannot cost more than the budget
(:func:`read_counted` returns what the parsed object holds, for the decoder to charge the rest).

``data`` may also be a list of frames (:func:`sampling_mask.codecs.msgpack.encode_frames`, ZMQ
multipart) whose concatenation is the payload: a ``bin`` whose header ends one frame and whose
bytes are exactly the next frame is that frame (zero copy); any other split is read from the
joined frames (one copy), with the same checks.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = ["LIST_BYTES", "MAP_BYTES", "MAX_OBJECTS", "VIEW_BYTES", "read", "read_counted"]

#: At most this many msgpack objects per payload (the envelope itself needs a few dozen).
MAX_OBJECTS = 1 << 20
#: Upper estimates of CPython's memory (64-bit): a list (header, appended slots with over-allocation)
#: and a dict (header and table, per entry) as (fixed, per element) bytes ...
LIST_BYTES = (88, 9)
MAP_BYTES = (192, 48)
#: ... a ``bin`` (a memoryview of the input), an int outside CPython's small-int cache, a float.
VIEW_BYTES = 192
_INT_BYTES = 36
_FLOAT_BYTES = 24

_FIXED = {  # type byte -> (struct format, size) for fixed-width scalars
    0xCA: (">f", 4),
    0xCB: (">d", 8),
    0xCC: (">B", 1),
    0xCD: (">H", 2),
    0xCE: (">I", 4),
    0xCF: (">Q", 8),
    0xD0: (">b", 1),
    0xD1: (">h", 2),
    0xD2: (">i", 4),
    0xD3: (">q", 8),
}
_LENGTH = {1: ">B", 2: ">H", 4: ">I"}
_STR = {0xD9: 1, 0xDA: 2, 0xDB: 4}
_BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_ARRAY = {0xDC: 2, 0xDD: 4}
_MAP = {0xDE: 2, 0xDF: 4}
_EXT = {0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8}
_PENDING = object()  # a map slot waiting for its key


def _truncated(pos: int) -> SamplingMaskError:
    return SamplingMaskError(ErrorCode.E_ENCODING, f"msgpack payload truncated at byte {pos}", value=pos)


class _Container:
    __slots__ = ("items", "remaining", "key", "is_map")

    def __init__(self, is_map: bool, remaining: int) -> None:
        self.is_map = is_map
        self.remaining = remaining  # values still to read (map: entries)
        self.items: Any = {} if is_map else []
        self.key: Any = _PENDING


class _Split(Exception):
    """A frame boundary where the frame-by-frame reader cannot continue: read the joined frames."""


def _bytes_view(data: Any) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.format not in ("B", "b", "c"):
        view = view.cast("B")
    return view


def read(data: Any, *, max_depth: int, max_objects: int = MAX_OBJECTS, max_bytes: int | None = None) -> Any:
    """Parse exactly one msgpack object spanning all of ``data`` (bytes-like, or a list of frames);
    ``bin`` values are memoryviews of it. ``max_bytes``: the Python memory the parsed objects may take."""
    return read_counted(data, max_depth=max_depth, max_objects=max_objects, max_bytes=max_bytes)[0]


def read_counted(
    data: Any, *, max_depth: int, max_objects: int = MAX_OBJECTS, max_bytes: int | None = None
) -> tuple[Any, int]:
    """:func:`read`, and the bytes of Python memory the parsed object holds (the estimates above)."""
    budget = (1 << 62) if max_bytes is None else int(max_bytes)
    if not isinstance(data, (list, tuple)):
        return _read([_bytes_view(data)], max_depth, max_objects, budget)
    try:
        frames = [_bytes_view(frame) for frame in data]
    except TypeError:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "every frame must be bytes-like") from None
    frames = [frame for frame in frames if len(frame)] or [memoryview(b"")]
    try:
        return _read(frames, max_depth, max_objects, budget)
    except (_Split, SamplingMaskError):  # read again joined: same checks, errors name joined offsets
        return _read([memoryview(b"".join(frames))], max_depth, max_objects, budget)


def _over_budget(used: int, budget: int, pos: int) -> SamplingMaskError:
    return SamplingMaskError(
        ErrorCode.E_LIMIT,
        f"the msgpack objects would take more than {budget} bytes of memory (at byte {pos})",
        field="max_bytes",
        value=used,
    )


def _read(frames: list[memoryview], max_depth: int, max_objects: int, budget: int) -> tuple[Any, int]:
    """:func:`read` over frames; raises :class:`_Split` where a value straddles two frames."""
    multi = len(frames) > 1
    later = [0] * len(frames)  # bytes in the frames after each one
    for i in range(len(frames) - 2, -1, -1):
        later[i] = later[i + 1] + len(frames[i + 1])
    index = 0
    view = frames[0]
    end = len(view)
    pos = 0
    objects = 0
    used = 0  # bytes of Python memory built so far
    stack: list[_Container] = []
    top: list[Any] = []
    done = False
    while not done:
        if pos >= end and index + 1 < len(frames):
            index += 1
            view, pos = frames[index], 0
            end = len(view)
        if pos >= end:
            raise _truncated(pos)
        objects += 1
        if objects > max_objects:
            raise SamplingMaskError(ErrorCode.E_LIMIT, f"more than {max_objects} msgpack objects", value=objects)
        tag = view[pos]
        pos += 1
        value: Any
        container: _Container | None = None
        cost = 0
        if tag <= 0x7F:
            value = tag
        elif tag >= 0xE0:
            value = tag - 0x100
        elif 0xA0 <= tag <= 0xBF or tag in _STR:
            if tag in _STR:
                width = _STR[tag]
                if pos + width > end:
                    raise _truncated(pos)
                (size,) = struct.unpack_from(_LENGTH[width], view, pos)
                pos += width
            else:
                size = tag & 0x1F
            if pos + size > end:
                raise _truncated(pos)
            try:
                value = str(view[pos : pos + size], "utf-8")
            except UnicodeDecodeError:
                raise SamplingMaskError(ErrorCode.E_ENCODING, "invalid UTF-8 in a msgpack str", value=pos) from None
            cost = sys.getsizeof(value)
            pos += size
        elif tag in _BIN:
            width = _BIN[tag]
            if pos + width > end:
                raise _truncated(pos)
            (size,) = struct.unpack_from(_LENGTH[width], view, pos)
            pos += width
            if pos == end and size and index + 1 < len(frames) and len(frames[index + 1]) == size:
                index += 1  # the bytes are the next frame, as encode_frames writes them
                view, pos = frames[index], 0
                end = len(view)
            if pos + size > end:
                raise _Split() if multi else _truncated(pos)
            value = view[pos : pos + size]
            cost = VIEW_BYTES
            pos += size
        elif tag in _FIXED:
            fmt, width = _FIXED[tag]
            if pos + width > end:
                raise _truncated(pos)
            (value,) = struct.unpack_from(fmt, view, pos)
            cost = _FLOAT_BYTES if tag <= 0xCB else 0 if -5 <= value <= 256 else _INT_BYTES
            pos += width
        elif tag == 0xC0:
            value = None
        elif tag in (0xC2, 0xC3):
            value = tag == 0xC3
        elif 0x80 <= tag <= 0x9F or tag in _ARRAY or tag in _MAP:
            is_map = tag <= 0x8F or tag in _MAP
            if tag <= 0x9F:
                size = tag & 0x0F
            else:
                width = _ARRAY.get(tag) or _MAP[tag]
                if pos + width > end:
                    raise _truncated(pos)
                (size,) = struct.unpack_from(_LENGTH[width], view, pos)
                pos += width
            # Every element takes at least one byte: a count beyond the remaining bytes is forged.
            if size * (2 if is_map else 1) > end - pos + later[index]:
                raise _truncated(pos)
            if len(stack) + 1 > max_depth:
                raise SamplingMaskError(
                    ErrorCode.E_LIMIT, f"msgpack containers nest deeper than the limit {max_depth}", value=pos
                )
            fixed, per_item = MAP_BYTES if is_map else LIST_BYTES
            cost = fixed + per_item * size
            container = _Container(is_map, size)
            value = container.items
        elif tag in _EXT:
            raise SamplingMaskError(ErrorCode.E_ENCODING, "msgpack ext types are not allowed", value=tag)
        else:  # 0xc1, never used
            raise SamplingMaskError(ErrorCode.E_ENCODING, "invalid msgpack type byte 0xc1", value=pos - 1)

        used += cost
        if used > budget:
            raise _over_budget(used, budget, pos)
        if stack:
            _attach(stack[-1], value, pos)
        else:
            top.append(value)
        if container is not None and container.remaining > 0:
            stack.append(container)
            continue
        while stack and stack[-1].remaining == 0:
            stack.pop()
        done = not stack
    if multi and (pos != end or index + 1 < len(frames)):
        raise _Split()
    if pos != end:
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"{end - pos} trailing bytes after the msgpack object", value=pos)
    return top[0], used


def _attach(parent: _Container, value: Any, pos: int) -> None:
    """Store ``value`` in ``parent``: as the pending key of a map, as a map value, or appended."""
    if parent.is_map and parent.key is _PENDING:
        if not isinstance(value, str):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "msgpack map keys must be strings", value=pos)
        if value in parent.items:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "duplicate msgpack map key", field=value[:80])
        parent.key = value
        return
    if parent.is_map:
        parent.items[parent.key] = value
        parent.key = _PENDING
    else:
        parent.items.append(value)
    parent.remaining -= 1
