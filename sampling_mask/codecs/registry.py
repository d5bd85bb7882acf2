# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/registry.py, vendorable (docs/serving-and-vendoring.md)
"""The codec contract, and the one table that knows every codec.

Each codec is one module next to this one (``arrow``, ``msgpack``, ``json``) and offers::

    encode(mask, *, format=<its first format>, **options) -> bytes
    decode(data, *, format=None, limits=DEFAULT_LIMITS, validate=True, copy=False) -> SamplingMask

``format=None`` on decode: the codec tells its own formats apart by content; a format of another
codec is ``E_SCHEMA``. ``limits`` bounds every size the input declares, ``validate=False`` skips the
O(nnz) content checks (a trusted producer; sizes, dtypes and byte counts are checked regardless),
``copy=True`` returns a mask that never views ``data``. An option that cannot apply to a codec is
``E_SCHEMA``, never silently dropped. A missing optional package (pyarrow, msgpack) is
:class:`~.core.optional.UnavailableError` (``E_UNAVAILABLE``) naming the extra that installs it.

:data:`CODECS` says, per codec, its formats, file extensions, the first bytes that identify its
payloads, the packages beyond numpy it imports (and so the extra to install) and the files a
vendored copy takes (``sampling-mask vendor``). :func:`encode`, :func:`decode`,
:func:`detect_format` and :func:`format_for_path` are the entry points built on it; they import a
codec's module only when its format is used, and only the fixed modules of this table (nothing in a
payload selects code). In a vendored copy they serve the codecs the copy holds.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from ..core.optional import EXTRAS, require

__all__ = [
    "CODECS",
    "EXTENSIONS",
    "FORMATS",
    "ROWS_ONLY_FORMATS",
    "STREAMING_FORMATS",
    "Codec",
    "codec_for",
    "decode",
    "detect_format",
    "encode",
    "format_for_path",
    "held_formats",
    "module_for",
    "own_format",
    "sniff",
]


@dataclasses.dataclass(frozen=True)
class Codec:
    """One codec module and what it handles."""

    #: The module's name under ``codecs/``.
    name: str
    #: Formats it reads and writes, its default (for ``encode``) first.
    formats: tuple[str, ...]
    #: File extension -> format.
    extensions: Mapping[str, str]
    #: Format -> the bytes its payloads start with.
    magic: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    #: A function of the module that says whether a payload's first bytes are its format (when
    #: fixed magic bytes do not say it).
    sniffer: str | None = None
    #: Packages beyond numpy imported to encode / to decode.
    encode_packages: tuple[str, ...] = ()
    decode_packages: tuple[str, ...] = ()
    #: The modules of ``codecs/`` a vendored copy of this codec takes (this one included);
    #: empty when it cannot be vendored, and then ``not_vendorable`` says why.
    files: tuple[str, ...] = ()
    not_vendorable: str | None = None
    #: Its formats are written and read record batch by record batch (streaming writers, ``iter_masks``).
    streaming: bool = False
    #: Its formats that carry the rows only (no segments, companions, vocab_size or metadata).
    rows_only: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        """Every package beyond numpy the codec imports."""
        return tuple(dict.fromkeys(self.encode_packages + self.decode_packages))

    @property
    def extras(self) -> tuple[str, ...]:
        """The extras of sampling-mask that install :attr:`packages` (``pip install 'sampling-mask[X]'``)."""
        return tuple(EXTRAS[p] for p in self.packages)


_SHARED = ("buffers.py", "_common.py", "registry.py")

CODECS: Mapping[str, Codec] = {
    "arrow": Codec(
        "arrow",
        ("arrow", "arrows", "parquet"),
        {".arrow": "arrow", ".feather": "arrow", ".arrows": "arrows", ".parquet": "parquet"},
        magic={"arrow": b"ARROW1", "arrows": b"\xff\xff\xff\xff", "parquet": b"PAR1"},
        encode_packages=("pyarrow",),
        decode_packages=("pyarrow",),
        not_vendorable="it needs pyarrow and the library's file readers; depend on 'sampling-mask[arrow]' instead",
        streaming=True,
    ),
    "msgpack": Codec(
        "msgpack",
        ("msgpack",),
        {".msgpack": "msgpack"},
        sniffer="is_envelope",  # numpy only: our own writer and bounded reader (no msgpack package)
        files=("msgpack.py", "_msgpack_reader.py", "_msgpack_writer.py", "compact.py", *_SHARED),
    ),
    "json": Codec(
        "json",
        ("json", "json-rows", "base64"),
        {".json": "json"},
        files=("json.py", *_SHARED),
        rows_only=("json-rows", "base64"),
    ),
}
#: Every format, in the order of :data:`CODECS`.
FORMATS = tuple(fmt for codec in CODECS.values() for fmt in codec.formats)
#: File extension -> format.
EXTENSIONS = {ext: fmt for codec in CODECS.values() for ext, fmt in codec.extensions.items()}
#: Formats written and read batch by batch; formats that carry the rows only.
STREAMING_FORMATS = tuple(fmt for codec in CODECS.values() if codec.streaming for fmt in codec.formats)
ROWS_ONLY_FORMATS = tuple(fmt for codec in CODECS.values() for fmt in codec.rows_only)
_CODEC_OF = {fmt: codec for codec in CODECS.values() for fmt in codec.formats}
_MAGIC = tuple((magic, fmt) for codec in CODECS.values() for fmt, magic in codec.magic.items())
_SNIFFED = tuple(codec for codec in CODECS.values() if codec.sniffer is not None)
_BOM = b"\xef\xbb\xbf"


def codec_for(fmt: Any) -> Codec:
    """The codec of format ``fmt``, or ``E_SCHEMA``."""
    codec = _CODEC_OF.get(fmt) if isinstance(fmt, str) else None
    if codec is None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unknown format {fmt!r}; one of {list(FORMATS)}", value=fmt)
    return codec


def _held(codec: Codec) -> bool:
    name = f"{__package__}.{codec.name}"
    return name in sys.modules or importlib.util.find_spec(name) is not None


def _load(codec: Codec) -> ModuleType:
    """The module of ``codec``: its name comes from :data:`CODECS`, never from a payload."""
    return importlib.import_module(f"{__package__}.{codec.name}")


def held_formats() -> tuple[str, ...]:
    """The formats whose codec module is present (all of :data:`FORMATS` but in a vendored copy)."""
    return tuple(fmt for codec in CODECS.values() if _held(codec) for fmt in codec.formats)


def module_for(fmt: Any, *, encoding: bool) -> ModuleType:
    """The module of ``fmt``'s codec, after checking the packages it needs to encode / decode."""
    codec = codec_for(fmt)
    if not _held(codec):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"format {fmt!r} is not in this copy; it holds {list(held_formats())}", value=fmt
        )
    for package in codec.encode_packages if encoding else codec.decode_packages:
        require(package, what=f"{fmt} {'encoding' if encoding else 'decoding'}")
    return _load(codec)


def own_format(fmt: Any, codec: str) -> Any:
    """``fmt`` when it is None or one of ``codec``'s formats, else ``E_SCHEMA`` (what every codec's
    ``encode`` / ``decode`` checks its ``format=`` with)."""
    if fmt is not None and _CODEC_OF.get(fmt) is not CODECS[codec]:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"{fmt!r} is not a format of the {codec} codec; one of {list(CODECS[codec].formats)}",
            value=fmt,
        )
    return fmt


def format_for_path(path: str | os.PathLike[str]) -> str:
    """The format a file name implies (``E_SCHEMA`` for an extension not in :data:`EXTENSIONS`)."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in EXTENSIONS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"no format for extension {ext!r}; pass format=", field="path", value=ext
        )
    return EXTENSIONS[ext]


def sniff(data: Any) -> str:
    """The format by its first bytes; ``"json"`` stands for the whole JSON family (decided after parsing)."""
    if isinstance(data, str):
        return "json"
    try:
        head = bytes(memoryview(data)[:32])
    except TypeError:
        raise SamplingMaskError(ErrorCode.E_ENCODING, "input must be bytes-like or str") from None
    for magic, fmt in _MAGIC:
        if head.startswith(magic):
            return fmt
    for codec in _SNIFFED:
        if _held(codec) and getattr(_load(codec), codec.sniffer)(head):  # type: ignore[arg-type]
            return codec.formats[0]
    if head.removeprefix(_BOM).lstrip(b" \t\r\n")[:1] in (b"{", b"["):
        return "json"
    raise SamplingMaskError(
        ErrorCode.E_ENCODING, "unrecognised encoding (not Arrow, Parquet, our msgpack envelope or JSON)", value=head[:8]
    )


def detect_format(data: Any) -> str:
    """Which of :data:`FORMATS` ``data`` is, by content (JSON objects are parsed to tell the forms apart)."""
    fmt = sniff(data)
    if fmt == "json":
        json_codec = module_for("json", encoding=False)
        return json_codec.detect(json_codec.parse(data))  # type: ignore[no-any-return]
    return fmt


def encode(mask: SamplingMask, format: str, **options: Any) -> bytes:
    """``mask`` as bytes in ``format`` (one of :data:`FORMATS`); ``options`` go to that codec's ``encode``."""
    mask = as_sampling_mask(mask)
    return module_for(format, encoding=True).encode(mask, format=format, **options)  # type: ignore[no-any-return]


def decode(
    data: Any, *, format: str | None = None, limits: Limits = DEFAULT_LIMITS, validate: bool = True, copy: bool = False
) -> SamplingMask:
    """A mask from bytes (or JSON text) in ``format``, detected by content when None; a list of
    frames is read as the msgpack envelope they concatenate to. ``limits``, ``validate`` and
    ``copy`` as the codec contract above says."""
    if isinstance(data, (list, tuple)):
        if format not in (None, "msgpack"):
            raise SamplingMaskError(ErrorCode.E_ENCODING, "a list of frames holds a msgpack envelope", value=format)
        format = "msgpack"
    fmt: str | None = sniff(data) if format is None else format
    module = module_for(fmt, encoding=False)
    if isinstance(data, str) and fmt not in CODECS["json"].formats:
        raise SamplingMaskError(ErrorCode.E_ENCODING, f"{fmt} input must be bytes, not str", value=fmt)
    if format is None and fmt == "json":
        fmt = None  # the JSON codec tells its forms apart after parsing
    return module.decode(data, format=fmt, limits=limits, validate=validate, copy=copy)  # type: ignore[no-any-return]
