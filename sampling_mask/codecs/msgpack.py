# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/codecs/msgpack.py, vendorable (docs/serving-and-vendoring.md)
"""The msgpack envelope (format ``"msgpack"``): one map, arrays as raw little-endian ``bin``.

Wire format (spec/v1/SPEC.md, section ``msgpack``)::

    {"sampling_mask": 1, "layout": "ragged" | "dense" | "compact", "vocab_size": int | nil,
     "id_order": "ascending" | "unspecified", "num_rows": T, "nnz": nnz,
     "ids": ARRAY, "offsets": ARRAY,             # layout "ragged": int32 [nnz], int32|int64 [T+1]
     "counts": ARRAY,                            #   or, instead of offsets, uint8|uint16|int32 [T]
     "dense": ARRAY,                             # layout "dense":  int32 [T, W], -1 trailing padding
     "compact": bin,                             # layout "compact": codecs.compact bytes
     "cu_seqlens": ARRAY,                        # optional, int32|int64 [B+1]; absent: one segment
     "sampled_token_ids": ARRAY, "sampled_logprobs": ARRAY, "temperature": ARRAY,
     "support_logprobs": ARRAY,                  # optional companions (int32 / float32)
     "metadata": {str: nil | bool | int | float | str}}
    ARRAY = {"dtype": "int32" | "int64" | "float32", "shape": [n, ...], "pad": bin, "data": bin}
                                                # "pad" (optional): 0-63 zero bytes that put "data"
                                                # at a multiple of 64 from the envelope's start

The envelope is written by :mod:`._msgpack_writer` and read by :mod:`._msgpack_reader`, both the
library's own code (numpy only: no ``msgpack`` package; the bytes are msgpack-python's, byte for
byte). The encoder writes the version key first (that is how :func:`sampling_mask.decode` recognises the
envelope), pads every ARRAY of :data:`PAD_FROM` bytes or more (an envelope in an aligned buffer,
such as a ``bytes`` object, then decodes to aligned arrays; a 1.0 reader ignores ``pad`` as an
unknown key) and, by default, writes ``offsets`` (int32 when they fit, else int64), which every
1.x reader reads (spec 6: the default output is valid under 1.0) and which decode in O(1) (int32
offsets stay int32 in the mask: :attr:`SamplingMask.stored_offsets`). ``counts=True`` writes row
lengths as ``counts`` in the narrowest of uint8 / uint16 / int32 that holds the widest row instead
(spec 1.1: the smallest wire, 1-2 bytes per row, but only for readers of 1.1 or later).
The decoder reads ``bin`` values in place: ids, offsets and companions are read-only
views of the payload (no copy). Declared dtype / shape are checked against a per-field whitelist,
``Limits`` and the real ``bin`` length before any view is made. Unknown keys are ignored.

>>> import sampling_mask
>>> m = sampling_mask.SamplingMask.from_rows([[3, 7], [], [5]], vocab_size=10)
>>> sampling_mask.decode(encode(m)) == m
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..core import layouts
from ..core.checks import check_structure, is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import DEFAULT_LIMITS, Limits, check_count, check_output, remaining
from ..core.model import COMPANIONS, SamplingMask, as_sampling_mask
from . import _msgpack_reader, _msgpack_writer
from ._common import ID_ORDERS, SPEC_MAJOR, VERSION_KEY, check_id_order, check_version, id_order_of, parse_id_order
from .buffers import array_from_buffer, input_view, wire_dtype, wire_shape
from .registry import own_format

__all__ = ["LAYOUTS", "decode", "encode", "encode_frames", "encode_into", "is_envelope", "read_value"]

LAYOUTS = ("ragged", "dense", "compact")
_INDEX_DTYPES = ("int32", "int64")
_COUNT_DTYPES = ("uint8", "uint16", "int32")
_COMPANION_DTYPES = {"sampled_token_ids": ("int32",), "sampled_logprobs": ("float32",)}
_COMPANION_DTYPES.update(temperature=("float32",), support_logprobs=("float32",))
#: The first bytes of every envelope we write: a map header then the fixstr "sampling_mask".
_KEY_BYTES = b"\xad" + VERSION_KEY.encode()


def is_envelope(data: Any) -> bool:
    """True when ``data`` starts like an envelope: a msgpack map whose first key is the version key."""
    head = bytes(memoryview(data)[:24])
    if not head:
        return False
    tag = head[0]
    if 0x80 <= tag <= 0x8F:
        return head[1:].startswith(_KEY_BYTES)
    if tag == 0xDE:
        return head[3:].startswith(_KEY_BYTES)
    if tag == 0xDF:
        return head[5:].startswith(_KEY_BYTES)
    return False


class _Array(NamedTuple):
    """An ARRAY to write: wire dtype name, shape, and the little-endian C-order bytes (a view)."""

    dtype: str
    shape: list[int]
    data: memoryview


def _array(arr: np.ndarray) -> _Array:
    """An ARRAY over ``arr``: a view of its bytes when already little-endian and C-contiguous."""
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return _Array(arr.dtype.name, list(arr.shape), arr.reshape(-1).view(np.uint8).data)


def _bin_header(nbytes: int, key: str) -> bytes:
    """The msgpack ``bin 8 / 16 / 32`` header for ``nbytes`` (the smallest, as msgpack-python writes)."""
    if nbytes > _msgpack_writer.MAX_BIN:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT,
            f"{nbytes} bytes exceed a msgpack bin (4 GiB); write large masks as a streaming Arrow file: "
            "codecs.open_writer(path, format='arrows') or save(mask, 'mask.arrows')",
            field=key,
            value=nbytes,
        )
    return _msgpack_writer.bin_header(nbytes)


def read_value(data: Any, *, max_depth: int, max_bytes: int | None = None) -> Any:
    """One msgpack object of any shape (an upstream payload that is not an envelope: prime-rl's
    ``array_like`` struct, verifiers' ``__nd__`` maps), read by the envelope's strict, bounded reader:
    ``bin`` values are memoryviews of ``data``; bad bytes are ``E_ENCODING``, too deep or too many
    objects ``E_LIMIT``; ``max_bytes`` bounds the Python memory the parsed objects take, as in a
    decode. Public for the adapters; the envelope itself is :func:`decode`'s."""
    return _msgpack_reader.read(data, max_depth=max_depth, max_bytes=max_bytes)


#: The writer places each ARRAY's ``data`` of :data:`PAD_FROM` bytes or more at a multiple of
#: :data:`ALIGN` bytes from the envelope's start, with a ``pad`` entry (spec 10.1): read in place
#: from an aligned buffer, the array is then aligned (numpy checks unaligned arrays several times slower).
ALIGN = 64
PAD_FROM = 4096
_PAD_KEY = b"\xa3pad"  # fixstr "pad"; its value is a bin 8 of zero bytes
_DATA_KEY = b"\xa4data"
_SHAPE_KEY = b"\xa5shape"
#: An ARRAY's map header (3 entries, 4 with ``pad``) and its first key, fixstr "dtype".
_ARRAY_HEADS = {False: b"\x83\xa5dtype", True: b"\x84\xa5dtype"}
_KEYS = (VERSION_KEY, "layout", "vocab_size", "id_order", "num_rows", "nnz", "ids", "offsets", "counts", "dense")
_NAMES = (*_KEYS, "compact", "cu_seqlens", *COMPANIONS, "metadata", *LAYOUTS, *ID_ORDERS, *_INDEX_DTYPES)
#: The envelope's own keys, layouts, id orders and dtype names, packed once (every envelope writes them).
_PACKED_NAMES = {name: _msgpack_writer.pack(name) for name in (*_NAMES, *_COUNT_DTYPES, "float32")}


def _frames(env: Mapping[str, Any]) -> list[Any]:
    """``msgpack.packb(env, use_bin_type=True)`` as frames, but for the ``pad`` entries that align
    large ARRAYs: the small msgpack parts (written by :mod:`._msgpack_writer`, byte for byte what
    msgpack-python writes) joined into ``bytes`` and every ARRAY / bin value as its own frame (a
    memoryview of the array, no copy). Their concatenation is the envelope; the work is O(1) in rows."""
    pack = _msgpack_writer.pack
    packed = _PACKED_NAMES
    frames: list[Any] = []
    head: list[bytes] = [_msgpack_writer.map_header(len(env))]
    written = 0  # bytes in ``frames``

    def data(value: Any, nbytes: int, key: str) -> None:
        nonlocal written
        head.append(_bin_header(nbytes, key))
        frames.append(b"".join(head))
        frames.append(value)
        written += len(frames[-2]) + nbytes
        head.clear()

    for key, value in env.items():
        head.append(packed.get(key) or pack(key, field=key))
        if isinstance(value, _Array):
            pad = value.data.nbytes >= PAD_FROM
            dtype = packed.get(value.dtype) or pack(value.dtype, field=key)
            head += [_ARRAY_HEADS[pad], dtype, _SHAPE_KEY, pack(value.shape, field=key)]
            if pad:
                start = written + sum(map(len, head)) + 2 + len(_PAD_KEY) + len(_DATA_KEY)
                size = -(start + len(_bin_header(value.data.nbytes, key))) % ALIGN
                head += [_PAD_KEY, bytes((0xC4, size)), bytes(size)]
            head.append(_DATA_KEY)
            data(value.data, value.data.nbytes, key)
        elif isinstance(value, bytes):
            data(value, len(value), key)
        else:
            head.append(isinstance(value, str) and packed.get(value) or pack(value, field=key))
    if head:
        frames.append(b"".join(head))
    return frames


def encode(
    mask: SamplingMask,
    *,
    format: str = "msgpack",
    layout: str = "ragged",
    offsets_dtype: str | None = None,
    width: int | None = None,
    counts: bool = False,
) -> bytes:
    """The envelope bytes (each array copied once, straight into the result). ``layout``:
    ``"ragged"`` (default, ids decode in place), ``"dense"`` (``width`` defaults to the widest row)
    or ``"compact"`` (rows stored ascending). Ragged row index: by default ``offsets``, int32 when
    they fit, else int64 (``offsets_dtype="int64"`` or ``"int32"`` to choose; they decode in place,
    O(1); valid under spec 1.0). ``counts=True``: narrow ``counts`` instead (the smallest wire, one
    O(T) sum on read; spec 1.1, so only for readers of 1.1 or later). ``format``: ``"msgpack"``
    (the codec contract)."""
    own_format(format, "msgpack")
    return b"".join(_frames(_envelope(mask, layout=layout, offsets_dtype=offsets_dtype, width=width, counts=counts)))


def _envelope(
    mask: SamplingMask, *, layout: str, offsets_dtype: str | None, width: int | None, counts: bool
) -> dict[str, Any]:
    """The envelope as a dict of msgpack values and :class:`_Array` views, in wire order."""
    mask = as_sampling_mask(mask)
    if layout not in LAYOUTS:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"layout must be one of {list(LAYOUTS)}", value=layout)
    if offsets_dtype is not None and offsets_dtype not in _INDEX_DTYPES:
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, f"offsets_dtype must be None or one of {list(_INDEX_DTYPES)}", value=offsets_dtype
        )
    if counts and offsets_dtype is not None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "counts=True writes no offsets: give offsets_dtype or counts, not both", field="counts"
        )
    if layout == "compact":
        mask = mask.canonical()
    fits32 = max(mask.nnz, mask.num_rows) <= np.iinfo(np.int32).max
    if offsets_dtype == "int32" and not fits32:
        raise SamplingMaskError(ErrorCode.E_LIMIT, "offsets overflow int32; use offsets_dtype='int64'")
    index = np.dtype(offsets_dtype or ("int32" if fits32 else "int64"))
    env: dict[str, Any] = {
        VERSION_KEY: SPEC_MAJOR,
        "layout": layout,
        "vocab_size": mask.vocab_size,
        "id_order": id_order_of(mask),
        "num_rows": mask.num_rows,
        "nnz": mask.nnz,
    }
    if layout == "ragged":
        env["ids"] = _array(mask.ids)
        if counts:
            env["counts"] = _array(_narrow_counts(mask))
        else:
            env["offsets"] = _array(mask.stored_offsets.astype(index, copy=False))
    elif layout == "dense":
        env["dense"] = _array(mask.to_dense(width))
    else:
        from . import compact

        env["compact"] = compact.encode_ragged(mask.ids, mask.offsets)
    if mask.num_segments != 1:
        env["cu_seqlens"] = _array(mask.cu_seqlens.astype(index, copy=False))
    for name, arr in mask.companions.items():
        env[name] = _array(arr)
    if mask.metadata:
        env["metadata"] = dict(mask.metadata)
    return env


def _narrow_counts(mask: SamplingMask) -> np.ndarray:
    """Row lengths in the narrowest of uint8 / uint16 / int32 that holds the widest row."""
    lengths = mask.row_lengths
    widest = int(lengths.max()) if lengths.size else 0
    dtype = np.uint8 if widest <= 0xFF else np.uint16 if widest <= 0xFFFF else np.int32
    return lengths.astype(dtype)


def encode_frames(
    mask: SamplingMask,
    *,
    layout: str = "ragged",
    offsets_dtype: str | None = "int64",
    width: int | None = None,
    counts: bool = False,
) -> list[Any]:
    """The envelope of :func:`encode` as a list of frames (``bytes`` headers and memoryviews of the
    mask's arrays), for ZMQ multipart, ``socket.sendmsg`` or a streaming HTTP body: nothing is
    copied, and with the default ragged layout and int64 offsets (the dtype a mask stores unless
    decoded from int32: :attr:`SamplingMask.stored_offsets`) the cost is O(1) in rows
    (``offsets_dtype=None``: int32 when they fit, as :func:`encode`'s default; ``counts=True``: the
    narrow ``counts`` of spec 1.1, O(T)). ``b"".join(frames) == encode(mask, ...)``;
    :func:`decode` accepts the frames as a list."""
    if counts and offsets_dtype == "int64":
        offsets_dtype = None  # the default: counts replace the offsets
    return _frames(_envelope(mask, layout=layout, offsets_dtype=offsets_dtype, width=width, counts=counts))


def encode_into(mask: SamplingMask, buffer: Any, **opts: Any) -> int:
    """Write the envelope of :func:`encode` into ``buffer`` (any writable bytes-like object, e.g. a
    numpy or shared-memory buffer) from its start; returns the bytes written. ``E_LIMIT`` when the
    buffer is too small (nothing is written then). ``opts`` as for :func:`encode`."""
    frames = encode_frames(mask, **{"offsets_dtype": None, **opts})  # the dtypes of encode's default
    out = memoryview(buffer).cast("B")
    if out.readonly:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "the buffer is read-only", field="buffer")
    total = sum(memoryview(f).nbytes for f in frames)
    if total > out.nbytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"the envelope needs {total} bytes, the buffer holds {out.nbytes}", value=total
        )
    pos = 0
    for frame in frames:
        view = memoryview(frame).cast("B")
        out[pos : pos + view.nbytes] = view
        pos += view.nbytes
    return pos


def _get_array(
    env: Mapping[str, Any], key: str, allowed: tuple[str, ...], limits: Limits, *, ndim: int, required: bool = True
) -> np.ndarray | None:
    """The ARRAY at ``env[key]`` as a view of the payload, after dtype / shape / byte checks."""
    spec = env.get(key)
    if spec is None:
        if required:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing array", field=key)
        return None
    if not isinstance(spec, dict):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "an array must be a map {dtype, shape, data}", field=key)
    dtype = wire_dtype(spec.get("dtype"), allowed, field=key)
    shape = wire_shape(spec.get("shape"), field=key, ndim=ndim)
    data = spec.get("data")
    if not isinstance(data, memoryview):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "array data must be a msgpack bin", field=key)
    return array_from_buffer(data, dtype, shape, limits, field=key)


def _get_count(env: Mapping[str, Any], key: str, limit: int, *, required: bool) -> int | None:
    value = env.get(key)
    if value is None:
        if required:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing count", field=key)
        return None
    if not is_int(value):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "must be an integer", field=key, value=short_repr(value))
    return check_count(value, limit, key, field=key)


def _ragged_offsets(env: Mapping[str, Any], nnz: int, limits: Limits) -> tuple[np.ndarray, int | None]:
    """(offsets, widest row or None): ``offsets`` read in place (int32 or int64: O(1), widest None:
    the offsets are still to be scanned), or int64 summed from ``counts`` (O(T); non-decreasing by
    construction, so the widest row is the largest count); exactly one of the two."""
    # nil reads as absent (spec 10.1): {"offsets": nil, "counts": ARRAY} is counts alone.
    if env.get("counts") is not None and env.get("offsets") is not None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "give offsets or counts, not both", field="counts")
    if env.get("counts") is None:
        raw_offsets = _get_array(env, "offsets", _INDEX_DTYPES, limits, ndim=1)
        assert raw_offsets is not None
        check_output(limits, max(raw_offsets.size - 1, 0), nnz, field="offsets")
        return raw_offsets, None
    counts = _get_array(env, "counts", _COUNT_DTYPES, limits, ndim=1)
    assert counts is not None
    check_count(counts.size, limits.max_rows, "row count", field="counts")
    check_output(limits, counts.size, nnz, field="counts")
    offsets = layouts.counts_to_offsets(counts)  # E_OFFSETS for a negative count
    return offsets, int(counts.max()) if counts.size else 0


def _index_array(arr: np.ndarray) -> np.ndarray:
    return arr if arr.dtype == np.int64 else arr.astype(np.int64)


def decode(
    data: Any,
    *,
    format: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    copy: bool = False,
) -> SamplingMask:
    """A mask from envelope bytes (or the list of frames of :func:`encode_frames`); ids and
    companions are read-only views of ``data`` when it is immutable (``bytes``, read-only views), of
    a private copy when it is writable (``bytearray``...), and always of a copy with ``copy=True``.

    ``validate=False`` skips the O(nnz) content checks (trusted producers only); sizes, dtypes and
    byte counts are always checked. ``format``: None or ``"msgpack"`` (the codec contract).
    """
    own_format(format, "msgpack")
    if isinstance(data, (list, tuple)):  # frames: each is checked and copied like a whole payload
        source: Any = [input_view(frame, copy=copy) for frame in data]
    else:
        source = input_view(data, copy=copy)
    first = next((bytes(f[:1]) for f in source if len(f)), b"") if isinstance(source, list) else bytes(source[:1])
    try:
        env, held = _msgpack_reader.read_counted(source, max_depth=limits.max_json_depth, max_bytes=limits.max_bytes)
    except SamplingMaskError as exc:
        if exc.code is not ErrorCode.E_ENCODING or (first and (0x80 <= first[0] <= 0x8F or first[0] in (0xDE, 0xDF))):
            raise
        start = f"byte 0x{first[0]:02x}" if first else "nothing"
        raise SamplingMaskError(
            ErrorCode.E_ENCODING,
            f"not a msgpack sampling-mask envelope (a msgpack map): the input starts with {start}",
            value=first.hex() or None,
        ) from None
    # What the parsed envelope holds stays alive while the mask is built: the rest of the budget is the mask's.
    limits = remaining(limits, held)
    if not isinstance(env, dict):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"not a msgpack sampling-mask envelope: the envelope must be a msgpack map, not {type(env).__name__}",
        )
    if VERSION_KEY not in env:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing version key", field=VERSION_KEY)
    check_version(env[VERSION_KEY])
    layout = env.get("layout")
    if layout is None:  # nil, like every optional key, reads as absent
        layout = "ragged"
    if layout not in LAYOUTS:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"layout must be one of {list(LAYOUTS)}", field="layout", value=short_repr(layout)
        )
    id_order = parse_id_order(env.get("id_order"))
    num_rows = _get_count(env, "num_rows", limits.max_rows, required=layout == "compact")
    nnz = _get_count(env, "nnz", limits.max_nnz, required=layout == "compact")
    kwargs: dict[str, Any] = {}
    widest = None  # the widest row, when the offsets need no scan
    if layout == "ragged":
        ids = _get_array(env, "ids", ("int32",), limits, ndim=1)
        assert ids is not None
        offsets, widest = _ragged_offsets(env, ids.size, limits)
    elif layout == "dense":
        dense = _get_array(env, "dense", ("int32",), limits, ndim=2)
        assert dense is not None
        check_count(dense.shape[0], limits.max_rows, "row count", field="dense")
        check_count(dense.shape[1], limits.max_width, "dense width", field="dense")
        check_output(limits, dense.shape[0], dense.size, field="dense")
        ids, offsets = layouts.dense_to_ragged(dense)
    else:
        from . import compact

        blob = env.get("compact")
        if not isinstance(blob, memoryview):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "compact data must be a msgpack bin", field="compact")
        assert num_rows is not None and nnz is not None
        check_output(limits, num_rows, nnz, field="compact")
        ids, offsets = compact.decode_ragged(blob, num_rows, nnz, limits=limits)
    assert ids is not None
    if num_rows is not None and offsets.size != num_rows + 1:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"num_rows is {num_rows} but the data holds {offsets.size - 1} rows", field="num_rows"
        )
    if nnz is not None and ids.size != nnz:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"nnz is {nnz} but the data holds {ids.size} ids", field="nnz")
    cu = _get_array(env, "cu_seqlens", _INDEX_DTYPES, limits, ndim=1, required=False)
    if cu is not None:
        kwargs["cu_seqlens"] = _index_array(cu)
    for name in COMPANIONS:
        arr = _get_array(env, name, _COMPANION_DTYPES[name], limits, ndim=1, required=False)
        if arr is not None:
            kwargs[name] = arr
    vocab_size = env.get("vocab_size")
    metadata = env.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata must be a map", field="metadata")
    if not validate:
        check_structure(ids, offsets, kwargs, limits)
    # compact.decode_ragged builds rows from non-negative gaps minus one: strictly ascending already.
    rows_ascending = layout == "compact"
    mask = SamplingMask(ids, offsets, vocab_size=vocab_size, metadata=metadata, validate=False, limits=limits, **kwargs)
    if validate:
        mask.validate(limits, rows_ascending=rows_ascending, widest=widest)
    return check_id_order(mask, id_order) if validate else mask
