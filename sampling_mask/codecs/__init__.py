"""Wire and file encodings of a :class:`~sampling_mask.SamplingMask`: one entry point, one module each.

Codec contract: a codec module turns a mask into ``bytes`` and back, losslessly unless its format
says otherwise, and its decoder raises only :class:`~sampling_mask.SamplingMaskError` on bad input
after checking every declared size against ``Limits`` and the real buffer length. Every codec's
``encode(mask, *, format=..., **options)`` and ``decode(data, *, format=None, limits=...,
validate=True, copy=False)`` have the same keyword-only signature; one table, ``codecs.registry``,
knows each codec's formats, extensions, first bytes, the extra it needs and its vendorable files:

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
msgpack are imported by the modules that need them, on first use; when one is not installed the
call raises ``UnavailableError`` (``E_UNAVAILABLE``) naming the extra, e.g.
``pip install 'sampling-mask[arrow]'``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from . import files, registry
from .registry import EXTENSIONS, FORMATS, detect_format, encode, format_for_path
from .registry import sniff as _sniff

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
    "open_dataset",
    "open_writer",
    "save",
    "write_dataset",
]

_ARROW_FORMATS = registry.CODECS["arrow"].formats
_JSON_FORMATS = registry.CODECS["json"].formats


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
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    copy: bool = False,
) -> SamplingMask:
    """A mask from bytes (or JSON text) in ``format``, detected by content when None.

    Binary formats return read-only views of ``data`` where they can when ``data`` is immutable
    (``bytes``); a writable buffer (``bytearray``, a writable memoryview) is copied once first, so
    changing it later cannot change a validated mask. ``copy=True`` copies any input (the mask then
    never keeps ``data`` alive). ``validate=False`` skips the O(nnz) content checks of msgpack and
    Arrow input from a trusted producer; sizes and byte counts are checked regardless. For network
    payloads pass ``limits=Limits.for_untrusted_input(len(data))``. A list of frames
    (:func:`encode_frames`, ZMQ multipart) is read as the msgpack envelope they concatenate to.
    """
    return registry.decode(data, format=format, limits=limits, validate=validate, copy=copy)


def save(mask: SamplingMask, path: str | os.PathLike[str], *, format: str | None = None, **opts: Any) -> None:
    """Write ``mask`` to ``path`` (format from the extension unless given). Atomic: the file is written
    next to ``path``, flushed to disk and renamed over it, so a failed save (an error, a kill, a power
    loss) never leaves a truncated file there. A symlink is written through (its target is replaced);
    a path that exists and is not a regular file is refused (``E_ENCODING``)."""
    mask = as_sampling_mask(mask)
    fmt = format_for_path(path) if format is None else format
    registry.codec_for(fmt)
    if fmt in _ARROW_FORMATS:
        extra_columns = opts.pop("extra_columns", None)
        with open_writer(path, format=fmt, **opts) as writer:
            writer.write(mask, extra_columns=extra_columns)
        return
    if fmt in _JSON_FORMATS:  # written as encoded, a chunk of rows at a time (never the whole text)
        from . import json as json_codec

        pieces = json_codec.iter_encode(mask, format=fmt, **opts)
        with files.atomic_path(path) as tmp, open(tmp, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
        return
    data = encode(mask, fmt, **opts)
    with files.atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


def _file_format(path: str | os.PathLike[str], format: str | None) -> str:
    """The explicit format, else the extension's, else detected from the file's first bytes."""
    if format is not None:
        registry.codec_for(format)
        return format
    fmt = EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower())
    if fmt is None:
        fmt = _sniff(files.read_head(path, 32))
    return fmt


def load(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
) -> SamplingMask:
    """Read a mask from ``path``. Arrow IPC files are memory-mapped (ids view the mapping); a ``.json``
    file may hold any JSON form; an unknown extension is detected by content. Only regular files are
    read (``E_ENCODING`` for a FIFO, directory or device), and at most ``limits.max_bytes`` of them.
    A trusted local file of a real run may need ``limits=LOCAL_FILE_LIMITS``."""
    files.check_regular(path)
    fmt = _file_format(path, format)
    if fmt in _ARROW_FORMATS:
        arrow = registry.module_for(fmt, encoding=False)
        return arrow.load(path, fmt, limits=limits, validate=validate)
    data = files.read_bounded(path, limits.max_bytes)
    return decode(data, format=format if fmt in _JSON_FORMATS else fmt, limits=limits, validate=validate)


def iter_masks(
    path: str | os.PathLike[str] | bytes,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    batch_size: int | None = None,
) -> Iterator[SamplingMask]:
    """Stream the masks of a file (or bytes): one per Arrow record batch / Parquet row group, so a large
    file never sits in memory whole. Formats without batches yield their one mask. A damaged or cut
    stream raises after the complete batches before the damage (``value``: how many), also when it
    is cut exactly between batches (no end-of-stream marker: ``E_ENCODING``, field ``end-of-stream``)."""
    fmt: str
    if isinstance(path, (bytes, bytearray, memoryview)):
        fmt = _sniff(path) if format is None else format
    else:
        fmt = _file_format(path, format)
    if fmt in _ARROW_FORMATS:
        arrow = registry.module_for(fmt, encoding=False)
        yield from arrow.iter_masks(path, fmt, limits=limits, validate=validate, batch_size=batch_size)
    elif isinstance(path, (bytes, bytearray, memoryview)):
        yield decode(path, format=format, limits=limits, validate=validate)
    else:
        yield load(path, format=format, limits=limits, validate=validate)


def open_writer(path: str | os.PathLike[str], *, format: str | None = None, **opts: Any) -> Any:
    """A streaming writer for an Arrow IPC file / stream or Parquet file: ``.write(mask)`` appends one
    record batch (row group); ``.close()`` (or leaving the ``with`` block) finishes the file.

    Options: ``compression`` (``"zstd"``, ``"lz4"``; Parquet also its own codecs), ``large_lists``,
    ``layout`` (``"ragged"`` or ``"compact"``), ``id_order``. Atomic: batches go to a temporary file
    next to ``path`` that a clean close renames over ``path``; an exception inside the ``with`` block
    removes it and leaves the old file. A writer that wrote nothing writes a valid file holding the
    empty mask.
    """
    fmt = format_for_path(path) if format is None else format
    if fmt not in _ARROW_FORMATS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"{fmt!r} has no record batches; streaming needs arrow, arrows or parquet", value=fmt
        )
    arrow = registry.module_for(fmt, encoding=True)
    return arrow.Writer.to_path(path, fmt, **opts)


from .dataset import open_dataset, write_dataset  # noqa: E402 - needs open_writer above
