"""Wire and file encodings of a :class:`~sampling_mask.SamplingMask`: one entry point, one module each.

Codec contract: a codec module turns a mask into ``bytes`` and back, losslessly unless its format
says otherwise, and its decoder raises only :class:`~sampling_mask.SamplingMaskError` on bad input
after checking every declared size against ``Limits`` and the real buffer length.

========== ========================== ===================== ===========================
format     module                     file extension        detected by content
========== ========================== ===================== ===========================
arrow      :mod:`.arrow` (IPC file)    ``.arrow .feather``   magic ``ARROW1``
arrows     :mod:`.arrow` (IPC stream)  ``.arrows``           continuation ``FF FF FF FF``
parquet    :mod:`.arrow`               ``.parquet``          magic ``PAR1``
msgpack    :mod:`.msgpack`             ``.msgpack``          map whose first key is ``sampling_mask``
json       :mod:`.json`                ``.json``             object with key ``sampling_mask``
json-rows  :mod:`.json`                (``.json``)           a JSON array
base64     :mod:`.json`                (``.json``)           object with ``data``, ``shape``, ``dtype``
========== ========================== ===================== ===========================

Only these fixed modules are ever imported; nothing in a payload selects code. pyarrow and
msgpack are imported by the modules that need them, on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import warnings
from collections.abc import Iterator
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "decode",
    "detect_format",
    "encode",
    "encode_frames",
    "encode_into",
    "format_for_path",
    "iter_masks",
    "load",
    "open_writer",
    "save",
]

FORMATS = ("arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64")
_MODULES = {
    "arrow": "arrow",
    "arrows": "arrow",
    "parquet": "arrow",
    "msgpack": "msgpack",
    "json": "json",
    "json-rows": "json",
    "base64": "json",
}
_ARROW_FORMATS = ("arrow", "arrows", "parquet")
_JSON_FORMATS = ("json", "json-rows", "base64")
EXTENSIONS = {
    ".arrow": "arrow",
    ".feather": "arrow",
    ".arrows": "arrows",
    ".parquet": "parquet",
    ".msgpack": "msgpack",
    ".json": "json",
}


def _module(fmt: str) -> Any:
    if fmt not in _MODULES:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unknown format {fmt!r}; one of {list(FORMATS)}", value=fmt)
    return importlib.import_module(f"{__name__}.{_MODULES[fmt]}")


def format_for_path(path: str | os.PathLike[str]) -> str:
    """The format a file name implies (``E_SCHEMA`` for an extension not in :data:`EXTENSIONS`)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in EXTENSIONS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"no format for extension {ext!r}; pass format=", field="path", value=ext
        )
    return EXTENSIONS[ext]


def _sniff(data: Any) -> str:
    """The format by its first bytes; ``"json"`` stands for the whole JSON family (decided after parsing)."""
    if isinstance(data, str):
        return "json"
    try:
        head = bytes(memoryview(data)[:32])
    except TypeError:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "input must be bytes-like or str") from None
    if head.startswith(b"ARROW1"):
        return "arrow"
    if head.startswith(b"\xff\xff\xff\xff"):
        return "arrows"
    if head.startswith(b"PAR1"):
        return "parquet"
    from . import msgpack as msgpack_codec

    if msgpack_codec.is_envelope(head):
        return "msgpack"
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    if text[:1] in (b"{", b"["):
        return "json"
    raise SamplingMaskError(
        ErrorCode.E_ENCODING, "unrecognised encoding (not Arrow, Parquet, our msgpack envelope or JSON)", value=head[:8]
    )


def detect_format(data: Any) -> str:
    """Which of :data:`FORMATS` ``data`` is, by content (JSON objects are parsed to tell the forms apart)."""
    fmt = _sniff(data)
    if fmt == "json":
        from . import json as json_codec

        return json_codec.detect(json_codec.parse(data))
    return fmt


def encode(mask: SamplingMask, format: str, **opts: Any) -> bytes:
    """``mask`` as bytes in ``format`` (one of :data:`FORMATS`); ``opts`` go to that codec's ``encode``."""
    module = _module(format)
    if format == "msgpack":
        return module.encode(mask, **opts)  # type: ignore[no-any-return]
    return module.encode(mask, format, **opts)  # type: ignore[no-any-return]


def encode_frames(mask: SamplingMask, **opts: Any) -> list[Any]:
    """The msgpack envelope as zero-copy frames (a list of ``bytes`` headers and memoryviews of the
    arrays) for ZMQ multipart / ``socket.sendmsg``; :func:`decode` takes the list back. See
    :func:`sampling_mask.codecs.msgpack.encode_frames`."""
    from . import msgpack as msgpack_codec

    return msgpack_codec.encode_frames(mask, **opts)


def encode_into(mask: SamplingMask, buffer: Any, **opts: Any) -> int:
    """Write the msgpack envelope into the caller's writable ``buffer``; returns the bytes written.
    See :func:`sampling_mask.codecs.msgpack.encode_into`."""
    from . import msgpack as msgpack_codec

    return msgpack_codec.encode_into(mask, buffer, **opts)


def decode(
    data: Any,
    _format: str | None = None,
    /,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
) -> SamplingMask:
    """A mask from bytes (or JSON text) in ``format``, detected by content when None.

    Binary formats return views of ``data`` where they can (keep it unchanged while the mask lives).
    ``validate=False`` skips the O(nnz) content checks of msgpack and Arrow input from a trusted
    producer; sizes and byte counts are checked regardless. A list of frames
    (:func:`encode_frames`, ZMQ multipart) is read as the msgpack envelope they concatenate to.
    ``decode(data, "msgpack")`` (the format positional) is deprecated: pass ``format=``.
    """
    if _format is not None:
        if format is not None:
            raise TypeError("decode() got the format both positionally and as format=")
        warnings.warn(
            "decode(data, format) is deprecated; pass the format as a keyword: decode(data, format=...)",
            DeprecationWarning,
            stacklevel=2,
        )
        format = _format
    if isinstance(data, (list, tuple)):
        if format not in (None, "msgpack"):
            raise SamplingMaskError(ErrorCode.E_ENCODING, "a list of frames holds a msgpack envelope", value=format)
        from . import msgpack as msgpack_codec

        return msgpack_codec.decode(data, limits=limits, validate=validate)
    fmt = _sniff(data) if format is None else format
    if fmt in _JSON_FORMATS:
        from . import json as json_codec

        return json_codec.decode(data, format, limits=limits)
    module = _module(fmt)
    if isinstance(data, str):
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"{fmt} input must be bytes, not str", value=fmt)
    if fmt == "msgpack":
        return module.decode(data, limits=limits, validate=validate)  # type: ignore[no-any-return]
    return module.decode(data, fmt, limits=limits, validate=validate)  # type: ignore[no-any-return]


def _create_temporary(directory: str, base: str) -> str:
    """A new empty file ``.<base>.<random>.tmp`` in ``directory``, created like ``open(..., "wb")``
    would (permissions from the umask, unlike ``mkstemp``'s 0600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            os.close(os.open(tmp, flags, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name next to {base!r}")  # pragma: no cover


def _fsync(path: str, *, directory: bool = False) -> None:
    """Flush ``path`` (a file, or a folder's entries) to disk; folders only where the OS allows it."""
    try:
        fd = os.open(path, (os.O_RDONLY if directory else os.O_RDWR) | getattr(os, "O_BINARY", 0))
    except OSError:
        if directory:  # Windows cannot open a folder; its rename is durable enough
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def _atomic_path(path: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path next to ``path``, flushed to disk and renamed over it only when the block
    succeeds; removed when it fails. A crash at any point leaves the old file (or none) at ``path``."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    tmp = _create_temporary(directory, os.path.basename(target))
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync(directory, directory=True)


def save(mask: SamplingMask, path: str | os.PathLike[str], *, format: str | None = None, **opts: Any) -> None:
    """Write ``mask`` to ``path`` (format from the extension unless given). Atomic: the file is written
    next to ``path``, flushed to disk and renamed over it, so a failed save (an error, a kill, a power
    loss) never leaves a truncated file there. ``save(path, mask)`` (the old order) is deprecated."""
    mask, path = _mask_first(mask, path)
    fmt = format_for_path(path) if format is None else format
    _module(fmt)
    with _atomic_path(path) as tmp:
        if fmt in _ARROW_FORMATS:
            extra_columns = opts.pop("extra_columns", None)
            with open_writer(tmp, format=fmt, **opts) as writer:
                writer.write(mask, extra_columns=extra_columns)
        else:
            data = encode(mask, fmt, **opts)
            with open(tmp, "wb") as fh:
                fh.write(data)


def _mask_first(mask: Any, path: Any) -> tuple[SamplingMask, str | os.PathLike[str]]:
    """``(mask, path)`` from either order; the old ``save(path, mask)`` warns (one release)."""
    if isinstance(mask, (str, os.PathLike)) and not isinstance(path, (str, os.PathLike)):
        warnings.warn(
            "save(path, mask) is deprecated; the mask comes first, as in encode: save(mask, path)",
            DeprecationWarning,
            stacklevel=3,
        )
        return path, mask
    return mask, path


def _read_bytes(path: str | os.PathLike[str], limits: Limits) -> bytes:
    size = os.stat(path).st_size
    check_count(size, limits.max_bytes, "file size", field="path")
    with open(path, "rb") as fh:
        return fh.read()


def _file_format(path: str | os.PathLike[str], format: str | None) -> str:
    """The explicit format, else the extension's, else detected from the file's first bytes."""
    if format is not None:
        _module(format)
        return format
    fmt = EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower())
    if fmt is None:
        with open(path, "rb") as fh:
            fmt = _sniff(fh.read(32))
    return fmt


def load(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
) -> SamplingMask:
    """Read a mask from ``path``. Arrow IPC files are memory-mapped (ids view the mapping); a ``.json``
    file may hold any JSON form; an unknown extension is detected by content."""
    fmt = _file_format(path, format)
    if fmt in _ARROW_FORMATS:
        from . import arrow

        return arrow.load(path, fmt, limits=limits, validate=validate)
    data = _read_bytes(path, limits)
    if fmt in _JSON_FORMATS:
        return decode(data, format=format, limits=limits)
    return decode(data, format=fmt, limits=limits, validate=validate)


def iter_masks(
    path: str | os.PathLike[str] | bytes,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    batch_size: int | None = None,
) -> Iterator[SamplingMask]:
    """Stream the masks of a file (or bytes): one per Arrow record batch / Parquet row group, so a large
    file never sits in memory whole. Formats without batches yield their one mask."""
    fmt: str
    if isinstance(path, (bytes, bytearray, memoryview)):
        fmt = _sniff(path) if format is None else format
    else:
        fmt = _file_format(path, format)
    if fmt in _ARROW_FORMATS:
        from . import arrow

        yield from arrow.iter_masks(path, fmt, limits=limits, validate=validate, batch_size=batch_size)
    elif isinstance(path, (bytes, bytearray, memoryview)):
        yield decode(path, format=format, limits=limits, validate=validate)
    else:
        yield load(path, format=format, limits=limits, validate=validate)


def open_writer(path: str | os.PathLike[str], *, format: str | None = None, **opts: Any) -> Any:
    """A streaming writer for an Arrow IPC file / stream or Parquet file: ``.write(mask)`` appends one
    record batch (row group); ``.close()`` (or leaving the ``with`` block) finishes the file.

    Options: ``compression`` (``"zstd"``, ``"lz4"``; Parquet also its own codecs), ``large_lists``,
    ``layout`` (``"ragged"`` or ``"compact"``), ``id_order``. The file is written in place as batches arrive (use :func:`save` for
    an atomic single write).
    """
    fmt = format_for_path(path) if format is None else format
    if fmt not in _ARROW_FORMATS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"{fmt!r} has no record batches; streaming needs arrow, arrows or parquet", value=fmt
        )
    from . import arrow

    return arrow.Writer.to_path(path, fmt, **opts)
