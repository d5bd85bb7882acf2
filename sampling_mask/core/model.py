# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/model.py, vendorable (docs/serving-and-vendoring.md)
"""The core model: :class:`SamplingMask`, an immutable ragged mask with optional companions.

A mask is T rows, one per token position; row t is a *set* S_t of vocabulary ids (int32), stored
ragged: ``ids`` int32 [nnz] and ``offsets`` [T+1], read as int64 (held as int32 when given so, while
nnz fits: :attr:`SamplingMask.stored_offsets`). Rows are grouped into B segments by
``cu_seqlens`` int64 [B+1] (``0 = cu[0] <= ... <= cu[B] = T``). An empty row means "no support
recorded", never "empty support". Every array is read-only; constructors validate unless told
the input is already valid. Spec: spec/v1/SPEC.md.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import marshal
import math
import operator
import pickle
import types
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, SupportsIndex, TypedDict, TypeVar, cast

import numpy as np

from . import checks, layouts
from .errors import ErrorCode, SamplingMaskError, short_repr
from .limits import DEFAULT_LIMITS, Limits, check_count, check_output, checked_nbytes

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "COMPANIONS",
    "MASK_PROTOCOL_VERSION",
    "METADATA_KEYS",
    "MaskOptions",
    "ReaderOptions",
    "ResponseOptions",
    "SamplingMask",
    "as_sampling_mask",
    "concat",
    "mask_options",
]

#: Version of the mask protocol: :meth:`SamplingMask.__sampling_mask__` and :func:`as_sampling_mask`.
MASK_PROTOCOL_VERSION = 1

#: Optional per-row / per-id arrays and their dtypes. ``support_logprobs`` is per id (aligned with ids).
COMPANIONS: Mapping[str, np.dtype[Any]] = types.MappingProxyType(
    {
        "sampled_token_ids": np.dtype(np.int32),
        "sampled_logprobs": np.dtype(np.float32),
        "temperature": np.dtype(np.float32),
        "support_logprobs": np.dtype(np.float32),
    }
)
#: Metadata keys the spec defines; other keys are allowed and preserved.
METADATA_KEYS = ("temperature", "top_k", "top_p", "min_p", "producer")
#: Value types of the defined metadata keys (None, "unknown", is always allowed; bool never counts as a number).
_METADATA_TYPES: Mapping[str, tuple[type, ...]] = types.MappingProxyType(
    {"temperature": (int, float), "top_k": (int,), "top_p": (int, float), "min_p": (int, float), "producer": (str,)}
)

_MetadataValue = str | int | float | bool | None
#: "Leave this field as it is" in :meth:`SamplingMask.replace` (None means "drop it").
_KEEP: Any = object()


class ResponseOptions(TypedDict, total=False):
    """The :class:`MaskOptions` of a reader of an engine's response, which holds the companions itself."""

    vocab_size: int | None
    """V: every id is in ``[0, V)`` (default None: not known)."""
    metadata: Mapping[str, Any] | None
    """Sampler parameters (:data:`METADATA_KEYS`) and extras: str, int, float, bool or None values."""
    limits: Limits
    """The bounds checked before anything is allocated (default :data:`DEFAULT_LIMITS`)."""


class ReaderOptions(ResponseOptions, total=False):
    """:class:`MaskOptions` but ``cu_seqlens``: those of a reader whose input gives the segments."""

    sampled_token_ids: Any
    """int32 [T]: the id sampled at each row (``-1`` on an empty row); a non-empty row holds it."""
    sampled_logprobs: Any
    """float32 [T]: the sampled id's log-prob, renormalized over its row."""
    temperature: Any
    """float32 [T], or one number for every row (as the scorer's ``temperature=``): > 0, NaN if unknown."""
    support_logprobs: Any
    """float32 [nnz], aligned with ``ids``: each id's log-prob, renormalized over its row."""
    validate: bool
    """``False`` for arrays already known to be valid: the content checks are skipped (default ``True``)."""


class MaskOptions(ReaderOptions, total=False):
    """The keyword options of mask construction, declared here once (with :class:`ReaderOptions` and
    :class:`ResponseOptions`, the parts of it). :class:`SamplingMask`, its ``from_*`` and the adapters'
    readers take them as ``**options`` (:func:`mask_options` lists them in each signature)."""

    cu_seqlens: Any
    """int64 [B+1]: segment b is rows ``cu_seqlens[b]:cu_seqlens[b+1]`` (default: one segment)."""


#: The options whose default is not None.
_OPTION_DEFAULTS: Mapping[str, Any] = types.MappingProxyType({"validate": True, "limits": DEFAULT_LIMITS})
_F = TypeVar("_F", bound=Callable[..., Any])


def mask_options(
    bundle: Any = MaskOptions,
    *,
    only: Collection[str] = (),
    without: Collection[str] = (),
    default: Any = checks.MISSING,
) -> Callable[[_F], _F]:
    """Decorate a function taking ``**options: Unpack[bundle]`` (:class:`MaskOptions` or a part of it):
    it takes the options of ``bundle`` (or those ``only`` names) but those in ``without`` and its own
    parameters', and is called with each, given or set to its default (or ``default``). Another keyword
    is a ``TypeError`` naming it, as Python's own; ``help()`` and ``inspect.signature`` list each option."""

    def decorate(func: _F) -> _F:
        signature = inspect.signature(func)
        hints = bundle.__annotations__
        names = [n for n in hints if n in (only or hints) and n not in without and n not in signature.parameters]
        names.sort(key=lambda n: (n in ReaderOptions.__annotations__) + (n in ResponseOptions.__annotations__))
        defaults = {n: _OPTION_DEFAULTS.get(n) if default is checks.MISSING else default for n in names}
        own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
        takes = frozenset(defaults).union(p.name for p in own if p.kind is not p.POSITIONAL_ONLY)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not takes.issuperset(kwargs):
                name = min(kwargs.keys() - takes)
                raise TypeError(f"{func.__qualname__}() got an unexpected keyword argument {name!r}")
            return func(*args, **{**defaults, **kwargs})

        options = [
            inspect.Parameter(
                n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=getattr(hints[n], "__forward_arg__", hints[n])
            )
            for n, d in defaults.items()
        ]
        call.__signature__ = signature.replace(parameters=[*own, *options])  # type: ignore[attr-defined]
        return cast(_F, call)

    return decorate


def _readonly(arr: np.ndarray) -> np.ndarray:
    if arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


def _temperature_per_row(value: Any, num_rows: int) -> Any:
    """A scalar ``temperature`` (a number, or a 0-d array / tensor of one) as one value per row, as the
    scorer's ``temperature=`` takes it; anything else is returned as given (checked as an array)."""
    if not np.isscalar(value) and getattr(value, "ndim", None) != 0:
        return value
    arr = checks.as_host_array(value, field="temperature")
    if arr.dtype.kind not in "iuf":  # bool, text
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, f"temperature must be a number, got {arr.dtype}", field="temperature"
        )
    return np.full(num_rows, arr, dtype=np.float32)


def _check_metadata(metadata: Mapping[str, Any] | None) -> Mapping[str, _MetadataValue]:
    if metadata is None:
        return types.MappingProxyType({})
    if not isinstance(metadata, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata must be a mapping", field="metadata")
    out: dict[str, _MetadataValue] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "metadata keys must be strings", field="metadata", value=key)
        for text in (key, value) if isinstance(value, str) else (key,):
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate, e.g. from the JSON escape "\ud800"
                    raise SamplingMaskError(
                        ErrorCode.E_ENCODING,
                        "metadata text is not valid Unicode",
                        field="metadata",
                        value=ascii(text)[:80],
                    ) from None
        if isinstance(value, np.generic):
            value = value.item()
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "metadata values must be str, int, float, bool or None",
                field=f"metadata.{key}",
                value=short_repr(value),
            )
        expected = _METADATA_TYPES.get(key)
        if expected is not None and value is not None and (isinstance(value, bool) or not isinstance(value, expected)):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"metadata {key!r} must be {' or '.join(t.__name__ for t in expected)}",
                field=f"metadata.{key}",
                value=short_repr(value),
            )
        out[key] = value
    return types.MappingProxyType(out)


def _metadata_equal(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if type(x) is not type(y) and not (isinstance(x, (int, float)) and isinstance(y, (int, float))):
            return False
        if x != y or isinstance(x, bool) != isinstance(y, bool):
            return False
    return True


# marshal (format version 2: no back-references) writes a list as b"[" + int32 length and every
# int in [-2**31, 2**31) as b"i" + int32, all little-endian: a list of lists of such ints is a run of
# 5-byte records that numpy reads in place. Anything else (floats, bools, str, None, big ints,
# tuples, numpy scalars, list subclasses) breaks that record layout, and the exact generic path
# (SamplingMask.from_rows) then decides, so strictness is unchanged.
_RECORD = np.dtype([("code", "u1"), ("value", "<i4")])
_LIST, _INT = ord("["), ord("i")


def _ragged_from_marshal(data: bytes, num_rows: int, limits: Limits) -> tuple[np.ndarray, np.ndarray] | None:
    if len(data) % _RECORD.itemsize:
        return None
    records = np.frombuffer(data, dtype=_RECORD)
    codes, values = records["code"], records["value"]
    is_list = codes == _LIST
    headers = np.flatnonzero(is_list)
    if headers.size != num_rows + 1 or int(np.count_nonzero(codes == _INT)) != records.size - headers.size:
        return None
    if headers[0] != 0 or int(values[0]) != num_rows:
        return None
    # Every record is a list header or an int and there is one header per row, so row b's ids are
    # exactly the records between its header and the next: its length is their spacing (marshal
    # wrote it there too; reading those unaligned, strided lengths cost more than this whole check).
    offsets = layouts.counts_to_offsets(np.diff(headers[1:], append=records.size) - 1)
    check_count(int(offsets[-1]), limits.max_nnz, "id count", field="rows")
    return np.ascontiguousarray(values[~is_list]), offsets


def _rows_to_ragged(rows: Sequence[Any], limits: Limits) -> tuple[np.ndarray, np.ndarray]:
    """Flatten nested Python lists of ids; strict: floats, strings and None are ``E_DTYPE``."""
    num_rows = check_count(len(rows), limits.max_rows, "row count", field="rows")
    if type(rows) is list:
        try:
            data = marshal.dumps(rows, 2)
        except (ValueError, TypeError):  # an object marshal cannot write: the generic path explains it
            data = None
        if data is not None:
            fast = _ragged_from_marshal(data, num_rows, limits)
            if fast is not None:
                return fast
    if num_rows and all(isinstance(r, np.ndarray) for r in rows):
        counts = np.fromiter(map(len, rows), dtype=np.int64, count=num_rows)
        # An empty np.array([]) is float64; it must not turn the concatenation into floats.
        flat = np.concatenate([r.reshape(-1) if r.size else np.zeros(0, np.int64) for r in rows])
        return layouts.as_int_array(flat, np.int32, field="rows"), layouts.counts_to_offsets(counts)
    try:
        counts = np.fromiter(map(len, rows), dtype=np.int64, count=num_rows)
    except TypeError:
        bad = next(i for i, r in enumerate(rows) if not hasattr(r, "__len__") or isinstance(r, _NOT_ROWS))
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "row must be a list of ids", field="rows", row=bad, value=short_repr(rows[bad])
        ) from None
    nnz = check_count(int(counts.sum()), limits.max_nnz, "id count", field="rows")
    try:
        # operator.index rejects floats, strings and None instead of silently truncating them.
        flat = np.fromiter(map(operator.index, itertools.chain.from_iterable(rows)), dtype=np.int64, count=nnz)
    except (TypeError, ValueError, OverflowError):
        raise _explain_bad_rows(rows) from None
    # ... but not booleans (bool is an int subclass), and a row is never text or bytes.
    if not set(map(type, rows)).isdisjoint(_NOT_ROWS) or bool in set(map(type, itertools.chain.from_iterable(rows))):
        raise _explain_bad_rows(rows)
    return layouts.as_int_array(flat, np.int32, field="rows"), layouts.counts_to_offsets(counts)


#: Never a row: text, a mapping, or bytes-like objects (``bytes``, ``bytearray``, ``memoryview``:
#: their items are bytes, not ids; wrap ids in a list or ``np.frombuffer(..., np.int32)`` instead).
_NOT_ROWS = (str, bytes, bytearray, memoryview, dict)


def _explain_bad_rows(rows: Sequence[Any]) -> SamplingMaskError:
    """Slow path, taken only after the fast path failed: find the first bad row for the message."""
    for i, row in enumerate(rows):
        if isinstance(row, _NOT_ROWS):
            return SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "row must be a list of ids (not text, a mapping or bytes)",
                field="rows",
                row=i,
                value=short_repr(row),
            )
        for value in row:
            if isinstance(value, (bool, np.bool_)):
                return SamplingMaskError(
                    ErrorCode.E_DTYPE, "ids must be integers, not booleans", field="rows", row=i, value=value
                )
            try:
                operator.index(value)
            except TypeError:
                return SamplingMaskError(
                    ErrorCode.E_DTYPE, "ids must be integers", field="rows", row=i, value=short_repr(value)
                )
            if not -(1 << 63) <= value < (1 << 63):
                return SamplingMaskError(ErrorCode.E_RANGE, "id does not fit int32", field="rows", row=i, value=value)
    return SamplingMaskError(ErrorCode.E_SCHEMA, "rows must be a sequence of lists of ids", field="rows")


def _checked_vocab_size(value: Any, limits: Limits) -> int:
    if not checks.is_int(value):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "vocab_size must be an integer", field="vocab_size", value=value)
    if value < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "vocab_size must be >= 1", field="vocab_size", value=int(value))
    return check_count(int(value), limits.max_vocab, "vocab_size", field="vocab_size")


class _State(NamedTuple):
    """Every field of a mask, for :meth:`SamplingMask.__setstate__`: arrays already known valid."""

    ids: np.ndarray
    offsets: np.ndarray
    cu_seqlens: np.ndarray
    vocab_size: int | None
    companions: Mapping[str, np.ndarray]
    metadata: Mapping[str, Any]
    ascending: bool | None


class SamplingMask:
    """An immutable sampling mask (spec v1). Build it with the ``from_*`` constructors.

    Invariants (checked by :meth:`validate`, which every constructor calls by default):
    ``offsets`` [T+1] (held int32 or int64, read as int64) tiles ``ids`` int32 [nnz]; ``cu_seqlens``
    int64 [B+1] tiles the T rows; ids are in ``[0, vocab_size)`` and unique within a row; per-row companions have T entries and
    ``support_logprobs`` has nnz; a non-empty row contains its sampled id when sampled ids are given.
    """

    __slots__ = (
        "_ids",
        "_offsets",
        "_offsets_int64",
        "_cu_seqlens",
        "_vocab_size",
        "_companions",
        "_metadata",
        "_ascending",
        "__weakref__",
    )

    _ids: np.ndarray
    _offsets: np.ndarray
    _offsets_int64: np.ndarray | None
    _cu_seqlens: np.ndarray
    _vocab_size: int | None
    _companions: Mapping[str, np.ndarray]
    _metadata: Mapping[str, _MetadataValue]
    _ascending: bool | None

    # ------------------------------------------------------------------ construction
    @mask_options()
    def __init__(self, ids: Any, offsets: Any, **options: Unpack[MaskOptions]) -> None:
        """Wrap ragged arrays (no copy when they already have the right dtype). See :meth:`from_ragged`."""
        limits = options["limits"]
        ids_arr = layouts.as_int_array(ids, np.int32, field="ids")
        offsets_arr = layouts.as_offsets_array(offsets, field="offsets")
        num_rows = max(offsets_arr.size - 1, 0)
        if options["cu_seqlens"] is None:
            cu = np.array([0, num_rows], dtype=np.int64)
        else:
            cu = layouts.as_int_array(options["cu_seqlens"], np.int64, field="cu_seqlens")
        vocab_size = None if options["vocab_size"] is None else _checked_vocab_size(options["vocab_size"], limits)
        companions: dict[str, np.ndarray] = {}
        if (sampled := options["sampled_token_ids"]) is not None:
            companions["sampled_token_ids"] = layouts.as_int_array(sampled, np.int32, field="sampled_token_ids")
        for name, value, size in (
            ("sampled_logprobs", options["sampled_logprobs"], num_rows),
            ("temperature", options["temperature"], num_rows),
            ("support_logprobs", options["support_logprobs"], ids_arr.size),
        ):
            if value is not None:
                if name == "temperature":
                    value = _temperature_per_row(value, num_rows)
                companions[name] = checks.as_float_array(value, field=name, size=size, integers=name == "temperature")
        self._ids = _readonly(ids_arr)
        self._offsets = _readonly(offsets_arr)
        self._offsets_int64 = None
        self._cu_seqlens = _readonly(cu)
        self._vocab_size = vocab_size
        self._companions = types.MappingProxyType({k: _readonly(v) for k, v in companions.items()})
        self._metadata = _check_metadata(options["metadata"])
        self._ascending = None
        if options["validate"]:
            self.validate(limits)

    @classmethod
    @mask_options()
    def from_ragged(cls, ids: Any, offsets: Any, **options: Unpack[MaskOptions]) -> SamplingMask:
        """From CSR: ``ids`` int32 [nnz] and ``offsets`` int64 or int32 [T+1] (no copy when dtypes match;
        int32 offsets are held as they are, see :attr:`stored_offsets`).

        Every ``from_*`` takes the keyword options of :class:`MaskOptions`: ``cu_seqlens`` (default
        one segment), ``vocab_size``, the companions (:data:`COMPANIONS`), ``metadata``, ``limits`` and
        ``validate=False`` for arrays already known to be valid.
        """
        return cls(ids, offsets, **options)

    @classmethod
    @mask_options()
    def from_counts(cls, ids: Any, counts: Any, **options: Unpack[MaskOptions]) -> SamplingMask:
        """From ``ids`` int32 [nnz] and per-row lengths ``counts`` [T] (prime-rl, SGLang chunked form)."""
        counts_arr = layouts.as_int_array(counts, np.int64, field="counts")
        check_count(counts_arr.size, options["limits"].max_rows, "row count", field="counts")
        offsets = layouts.counts_to_offsets(counts_arr)
        ids_arr = layouts.as_int_array(ids, np.int32, field="ids")
        if int(offsets[-1]) != ids_arr.size:
            raise SamplingMaskError(
                ErrorCode.E_OFFSETS,
                f"counts sum to {int(offsets[-1])} but there are {ids_arr.size} ids",
                field="counts",
            )
        return cls(ids_arr, offsets, **options)

    @classmethod
    @mask_options()
    def from_rows(cls, rows: Sequence[Collection[int]] | np.ndarray, **options: Unpack[MaskOptions]) -> SamplingMask:
        """From nested lists (vLLM ``sampling_mask.token_ids``, SGLang, JSON). Row order of ids is kept."""
        if isinstance(rows, np.ndarray) and rows.ndim == 2:
            ids, offsets = cls._dense_to_ragged(rows, options["limits"])
        elif not isinstance(rows, Sequence) or isinstance(rows, _NOT_ROWS):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "rows must be a sequence of lists of ids", field="rows")
        else:
            ids, offsets = _rows_to_ragged(rows, options["limits"])
        return cls(ids, offsets, **options)

    @staticmethod
    def _dense_to_ragged(dense: Any, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
        arr = layouts.as_int_array(dense, np.int32, field="dense", ndim=2)
        check_count(arr.shape[0], limits.max_rows, "row count", field="dense")
        check_count(arr.shape[1], limits.max_width, "dense width", field="dense")
        check_output(limits, arr.shape[0], arr.size, field="dense")  # a [T, 0] array still needs T offsets
        return layouts.dense_to_ragged(arr)

    @classmethod
    @mask_options()
    def from_dense(cls, dense: Any, **options: Unpack[MaskOptions]) -> SamplingMask:
        """From int32 ``[T, W]``: ids first, then ``-1`` trailing padding; an all ``-1`` row is empty."""
        ids, offsets = cls._dense_to_ragged(dense, options["limits"])
        return cls(ids, offsets, **options)

    @classmethod
    @mask_options()
    def from_bitmask(cls, bits: Any, vocab_size: int, **options: Any) -> SamplingMask:
        """From uint8 ``[T, ceil(vocab_size / 8)]``, little bit order (vLLM's wide-row fallback). Keyword
        options: :class:`MaskOptions` but ``vocab_size``."""
        arr = layouts.as_host_array(bits, field="bitmask")
        if arr.dtype != np.uint8:
            raise SamplingMaskError(ErrorCode.E_DTYPE, f"bitmask must be uint8, got {arr.dtype}", field="bitmask")
        if arr.ndim != 2:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"bitmask must be 2-D, got {arr.ndim}", field="bitmask")
        vocab_size = _checked_vocab_size(vocab_size, options["limits"])
        check_count(arr.shape[0], options["limits"].max_rows, "row count", field="bitmask")
        if arr.shape[1] != (vocab_size + 7) // 8:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"bitmask rows must be ceil({vocab_size}/8) = {(vocab_size + 7) // 8} bytes",
                field="bitmask",
                value=arr.shape[1],
            )
        ids, offsets = layouts.bitmask_to_ragged(np.ascontiguousarray(arr), vocab_size)
        return cls(ids, offsets, vocab_size=vocab_size, **options)

    # ------------------------------------------------------------------ validation
    def validate(
        self, limits: Limits = DEFAULT_LIMITS, *, rows_ascending: bool = False, widest: int | None = None
    ) -> SamplingMask:
        """Check every invariant of the spec; raise :class:`SamplingMaskError` or return ``self``.

        ``rows_ascending`` / ``widest`` are for decoders that built the arrays themselves and so
        know part of the answer (see :meth:`_validate`); left at their defaults everything is checked."""
        return self._validate(limits, rows_ascending=rows_ascending, widest=widest)

    def _validate(self, limits: Limits, *, rows_ascending: bool = False, widest: int | None = None) -> SamplingMask:
        """:meth:`validate`. ``rows_ascending``: the caller built every row strictly ascending (a decoder
        that sums positive gaps, ``codecs.compact``), so of the id checks only the range is left.
        ``widest``: the caller built the offsets (summed from counts: non-decreasing, this widest row),
        so of the offsets checks only the end points are left. Otherwise the offsets' order and
        widths are checked in the same blocked pass as the ids (:func:`layouts.check_rows`)."""
        ids, offsets = self._ids, self._offsets
        num_rows = check_count(max(offsets.size - 1, 0), limits.max_rows, "row count", field="offsets")
        check_count(ids.size, limits.max_nnz, "id count", field="ids")
        layouts.check_offset_ends(offsets, ids.size)
        layouts.check_segments(self._cu_seqlens, num_rows, limits)
        # SPEC 8.1: what the mask takes (offsets as int64: 8 bytes a row), 4 bytes per companion value
        # (support_logprobs: one per id). Decoders charge their temporaries too, before they allocate.
        per_id = 4 * ("support_logprobs" in self._companions)
        per_row = 4 * len(self._companions) - per_id
        segments = self._cu_seqlens.size - 1
        check_output(
            limits,
            num_rows,
            ids.size,
            segments=segments,
            per_row=per_row,
            per_id=per_id,
            row_bytes=8,
            field="max_bytes",
        )
        if widest is not None:
            layouts.check_width(offsets, widest, limits.max_width)
        sampled = self._companions.get("sampled_token_ids")
        aligned = sampled if sampled is not None and sampled.size == num_rows else None
        # One blocked pass over the ids: range, order, duplicates (unsorted rows only) and the
        # membership of each row's sampled id; a decoder that built ascending rows skips the order.
        self._ascending, missing = layouts.check_rows(
            ids,
            offsets,
            self._vocab_size,
            sampled=aligned,
            ascending=rows_ascending,
            max_width=limits.max_width if widest is None else None,
        )
        if sampled is not None:
            if aligned is None:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE, f"expected {num_rows} sampled ids, got {sampled.size}", field="sampled_token_ids"
                )
            self._check_sampled(sampled, missing)
        temperature = self._companions.get("temperature")
        # min and max propagate NaN (a valid "unknown"): then the exact test runs.
        if temperature is not None and temperature.size and not 0 < temperature.min() <= temperature.max() < np.inf:
            checks.raise_at_first(
                ~(temperature > 0) & ~np.isnan(temperature) | np.isinf(temperature),
                ErrorCode.E_RANGE,
                "temperature must be > 0 and finite (or NaN: unknown)",
                field="temperature",
                values=temperature,
            )
        return self

    def _check_sampled(self, sampled: np.ndarray, missing: int | None) -> None:
        """Sampled ids in range (-1 only on empty rows), then ``missing`` (the first non-empty row
        lacking its sampled id, found by :func:`layouts.check_ids`) is ``E_MISSING_SAMPLED``."""
        # As uint32 every negative id (-1 included) is >= 2^31: one max clears the common case.
        limit = min(self._vocab_size if self._vocab_size is not None else 1 << 31, 1 << 31)
        if sampled.size and int(sampled.view(np.uint32).max()) >= limit:
            empty = self._offsets[1:] == self._offsets[:-1]
            bad = sampled < np.where(empty, -1, 0)
            if self._vocab_size is not None:
                bad |= sampled >= self._vocab_size
            checks.raise_at_first(
                bad,
                ErrorCode.E_RANGE,
                "sampled id out of range (-1 only on empty rows)",
                field="sampled_token_ids",
                values=sampled,
            )
        if missing is not None:
            raise SamplingMaskError(
                ErrorCode.E_MISSING_SAMPLED,
                "non-empty row does not contain its sampled id",
                field="sampled_token_ids",
                row=missing,
                value=int(sampled[missing]),
            )

    # ------------------------------------------------------------------ properties
    @property
    def ids(self) -> np.ndarray:
        """int32 [nnz], read-only: every row's ids back to back."""
        return self._ids

    @property
    def offsets(self) -> np.ndarray:
        """int64 [T+1], read-only: row t is ``ids[offsets[t]:offsets[t+1]]``. Int32 :attr:`stored_offsets`
        are widened on first access (O(T), then cached)."""
        if self._offsets.dtype == np.int64:
            return self._offsets
        if self._offsets_int64 is None:
            self._offsets_int64 = _readonly(self._offsets.astype(np.int64))
        return self._offsets_int64

    @property
    def stored_offsets(self) -> np.ndarray:
        """int32 or int64 [T+1], read-only: :attr:`offsets` as the mask holds them, never copied (an Arrow
        ``list`` column or int32 wire offsets stay int32; a trusted decode stays O(1)). Int32 only while
        nnz fits it: derived masks (:func:`concat`) widen when it would not."""
        return self._offsets

    @property
    def cu_seqlens(self) -> np.ndarray:
        """int64 [B+1], read-only: segment b is rows ``cu_seqlens[b]:cu_seqlens[b+1]``."""
        return self._cu_seqlens

    @property
    def vocab_size(self) -> int | None:
        return self._vocab_size

    @property
    def metadata(self) -> Mapping[str, _MetadataValue]:
        """Sampler parameters (``temperature``, ``top_k``, ``top_p``, ``min_p``), ``producer`` and extras."""
        return self._metadata

    @property
    def companions(self) -> Mapping[str, np.ndarray]:
        """The optional arrays present, by name (see :data:`COMPANIONS`)."""
        return self._companions

    @property
    def sampled_token_ids(self) -> np.ndarray | None:
        return self._companions.get("sampled_token_ids")

    @property
    def sampled_logprobs(self) -> np.ndarray | None:
        return self._companions.get("sampled_logprobs")

    @property
    def temperature(self) -> np.ndarray | None:
        return self._companions.get("temperature")

    @property
    def support_logprobs(self) -> np.ndarray | None:
        return self._companions.get("support_logprobs")

    @property
    def num_rows(self) -> int:
        return self._offsets.size - 1

    @property
    def num_segments(self) -> int:
        return self._cu_seqlens.size - 1

    @property
    def nnz(self) -> int:
        return self._ids.size

    @property
    def row_lengths(self) -> np.ndarray:
        """int64 [T]: |S_t| per row (0 = no support recorded)."""
        return np.subtract(self._offsets[1:], self._offsets[:-1], dtype=np.int64)

    @property
    def is_canonical(self) -> bool:
        """True when every row is in ascending id order."""
        if self._ascending is None:
            self._ascending = layouts.check_ids(self._ids, self._offsets, None)
        return self._ascending

    def __len__(self) -> int:
        return self.num_rows

    # ------------------------------------------------------------------ views
    def row(self, i: int) -> np.ndarray:
        """Row ``i``'s ids as a read-only view (no copy)."""
        i = self._index(i, self.num_rows, "row")
        return self._ids[int(self._offsets[i]) : int(self._offsets[i + 1])]

    def segment(self, i: int) -> SamplingMask:
        """Segment ``i`` as a one-segment mask whose ids and companions are views."""
        i = self._index(i, self.num_segments, "segment")
        return self._slice_rows(int(self._cu_seqlens[i]), int(self._cu_seqlens[i + 1]), cu=None)

    def __getitem__(self, key: int | slice) -> Any:
        """``m[i]`` is row i's ids; ``m[a:b]`` is a mask of those rows, its segments clipped to them.

        A segment is kept when it shares a row with ``[a, b)``, or when it is empty and sits at a
        position in ``[a, b]``; so ``m[:] == m``. Zero-copy: ids and companions are views.
        """
        if isinstance(key, slice):
            start, stop, step = key.indices(self.num_rows)
            if step != 1:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "row slices must have step 1", value=step)
            stop = max(stop, start)
            cu = self._cu_seqlens
            lo, hi = cu[:-1], cu[1:]
            # Keep segments sharing a row with [start, stop), and empty segments lying in [start, stop]:
            # m[:] keeps every segment, and m[a:a] keeps only empty segments at a.
            keep = (np.minimum(hi, stop) > np.maximum(lo, start)) | ((lo == hi) & (lo >= start) & (lo <= stop))
            new_cu = np.concatenate(([0], np.clip(hi[keep], start, stop) - start)).astype(np.int64)
            return self._slice_rows(start, stop, cu=new_cu)
        return self.row(key)

    @staticmethod
    def _index(i: int, n: int, what: str) -> int:
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{what} index out of range for {n} {what}s")
        return i

    def _slice_rows(self, start: int, stop: int, *, cu: np.ndarray | None) -> SamplingMask:
        lo, hi = int(self._offsets[start]), int(self._offsets[stop])
        companions = {}
        for name, arr in self._companions.items():
            companions[name] = arr[lo:hi] if name == "support_logprobs" else arr[start:stop]
        return self._derive(
            self._ids[lo:hi], self._offsets[start : stop + 1] - lo, cu, companions, ascending=self._ascending
        )

    def _derive(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        cu: np.ndarray | None,
        companions: Mapping[str, np.ndarray],
        *,
        ascending: bool | None,
        vocab_size: int | None | bool = True,
        metadata: Mapping[str, Any] | None = None,
    ) -> SamplingMask:
        """A new mask from arrays known valid (not validated); ``vocab_size=True``, ``metadata=None``: this mask's."""
        cu = np.array([0, offsets.size - 1], dtype=np.int64) if cu is None else cu
        vocab = self._vocab_size if vocab_size is True else vocab_size
        meta = self._metadata if metadata is None else dict(metadata)
        return _assembled(_State(ids, offsets, cu, vocab, companions, meta, ascending))  # type: ignore[arg-type]

    def __getstate__(self) -> _State:
        """Every field (arrays as held: read-only views, offsets as stored)."""
        return _State(*(getattr(self, f"_{name}") for name in _State._fields))

    def __setstate__(self, state: _State) -> None:
        """Set every field from ``state`` (arrays made read-only, none copied; nothing validated)."""
        self._ids = _readonly(state.ids)
        self._offsets = _readonly(state.offsets)
        self._offsets_int64 = None
        self._cu_seqlens = _readonly(state.cu_seqlens)
        self._vocab_size = state.vocab_size
        self._companions = types.MappingProxyType({k: _readonly(v) for k, v in state.companions.items()})
        self._metadata = types.MappingProxyType(dict(state.metadata))
        self._ascending = state.ascending

    # ------------------------------------------------------------------ conversions
    def to_rows(self) -> list[list[int]]:
        """Nested Python lists, one per row, ids in stored order.

        The garbage collector is left alone (it is process-wide). A million new lists set off many
        collections: a caller converting millions of rows at once may wrap the call in
        ``gc.disable()`` / ``gc.enable()`` itself (several times faster)."""
        flat = self._ids.tolist()
        bounds = self._offsets.tolist()
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def to_ragged(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int32 [nnz], offsets int64 [T+1]), read-only (:attr:`offsets`)."""
        return self._ids, self.offsets

    def to_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids int32 [nnz], counts int32 [T])."""
        return self._ids, self.row_lengths.astype(np.int32)

    def to_dense(self, width: int | None = None, *, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
        """int32 ``[T, W]``, ``-1`` trailing padding; ``W`` defaults to the widest row (``E_WIDTH`` if too small).

        ``E_LIMIT`` when ``T * W * 4`` bytes exceed ``limits.max_bytes``.
        """
        widest = int(self.row_lengths.max()) if self.num_rows else 0
        if width is None:
            width = widest
        width = operator.index(width)
        if width < widest:
            row = int(np.argmax(self.row_lengths))
            raise SamplingMaskError(
                ErrorCode.E_WIDTH,
                f"width {width} is smaller than the widest row ({widest})",
                field="width",
                row=row,
                value=width,
            )
        checked_nbytes((self.num_rows, width), 4, limits, field="dense")
        return layouts.ragged_to_dense(self._ids, self._offsets, width)

    def to_bitmask(self, vocab_size: int | None = None, *, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
        """uint8 ``[T, ceil(V/8)]``, little bit order. Needs a vocab size (given here or on the mask).

        ``E_LIMIT`` when ``T * ceil(V/8)`` bytes exceed ``limits.max_bytes``.
        """
        vocab = vocab_size if vocab_size is not None else self._vocab_size
        if vocab is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "the bitmask layout needs vocab_size", field="vocab_size")
        if self._vocab_size is not None and vocab != self._vocab_size:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"vocab_size {vocab} differs from the mask's {self._vocab_size}",
                field="vocab_size",
                value=vocab,
            )
        if self.nnz and int(self._ids.max()) >= vocab:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, f"an id is >= vocab_size {vocab}", field="ids", value=int(self._ids.max())
            )
        checked_nbytes((self.num_rows, (int(vocab) + 7) // 8), 1, limits, field="bitmask")
        return layouts.ragged_to_bitmask(self._ids, self._offsets, int(vocab), ascending=self.is_canonical)

    def canonical(self) -> SamplingMask:
        """The same mask with every row in ascending id order (``support_logprobs`` permuted along)."""
        if self.is_canonical:
            return self
        perm = layouts.canonical_permutation(self._ids, self._offsets)
        companions = dict(self._companions)
        if "support_logprobs" in companions:
            companions["support_logprobs"] = companions["support_logprobs"][perm]
        return self._derive(self._ids[perm], self._offsets, self._cu_seqlens, companions, ascending=True)

    @mask_options(without=("validate",), default=_KEEP)
    def replace(self, **changes: Unpack[MaskOptions]) -> SamplingMask:
        """A validated copy with the given fields changed (as :meth:`Limits.replace`); ``None`` drops
        a companion, the vocab size or the metadata, and gives ``cu_seqlens`` one segment. The rows
        stay; the fields not given are kept (``limits``: :data:`DEFAULT_LIMITS`)."""
        fields: dict[str, Any] = {name: self._companions.get(name) for name in COMPANIONS}
        fields.update(cu_seqlens=self._cu_seqlens, vocab_size=self._vocab_size, metadata=self._metadata)
        fields.update({name: value for name, value in changes.items() if value is not _KEEP})
        return SamplingMask(self._ids, self._offsets, **fields)

    # ------------------------------------------------------------------ segments
    def take(self, segment_indices: Iterable[int] | np.ndarray) -> SamplingMask:
        """A mask of the given segments, in the given order (repeats allowed)."""
        idx = np.asarray(list(segment_indices) if not isinstance(segment_indices, np.ndarray) else segment_indices)
        if idx.size == 0:
            idx = idx.astype(np.int64)
        if idx.dtype.kind not in "iu" or idx.ndim != 1:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "segment indices must be a 1-D integer array", field="segment_indices"
            )
        nseg = self.num_segments
        if idx.size and (int(idx.min()) < -nseg or int(idx.max()) >= nseg):
            bad = int(idx[(idx < -nseg) | (idx >= nseg)][0])
            raise SamplingMaskError(
                ErrorCode.E_SEGMENTS,
                f"segment index out of range for {nseg} segments",
                field="segment_indices",
                value=bad,
            )
        idx = np.where(idx < 0, idx + nseg, idx).astype(np.int64)
        cu = self._cu_seqlens
        seg_rows = cu[idx + 1] - cu[idx]
        rows = layouts.range_indices(cu[idx], seg_rows)
        lengths = np.diff(self._offsets)[rows]
        id_pos = layouts.range_indices(self._offsets[:-1][rows], lengths)
        companions = {}
        for name, arr in self._companions.items():
            companions[name] = arr[id_pos] if name == "support_logprobs" else arr[rows]
        new_cu = layouts.counts_to_offsets(seg_rows)
        return self._derive(
            self._ids[id_pos], layouts.counts_to_offsets(lengths), new_cu, companions, ascending=self._ascending
        )

    # ------------------------------------------------------------------ equality
    def __eq__(self, other: object) -> bool:
        """Equal segmentation, equal row *sets*, and equal vocab_size, companions and metadata.

        Companions are compared in canonical row order (``support_logprobs`` follows its ids);
        NaN equals NaN. ``other`` may be any object of the mask protocol (a mask of a vendored copy).
        """
        if not isinstance(other, SamplingMask):
            if getattr(type(other), "__sampling_mask__", None) is None:
                return NotImplemented
            try:
                other = as_sampling_mask(other)
            except SamplingMaskError:
                return NotImplemented
        if (
            self._vocab_size != other._vocab_size
            or not np.array_equal(self._cu_seqlens, other._cu_seqlens)
            or not np.array_equal(self._offsets, other._offsets)
            or self._companions.keys() != other._companions.keys()
            or not _metadata_equal(self._metadata, other._metadata)
        ):
            return False
        a, b = self.canonical(), other.canonical()
        if not np.array_equal(a.ids, b.ids):
            return False
        return all(
            np.array_equal(a.companions[k], b.companions[k], equal_nan=k != "sampled_token_ids") for k in a.companions
        )

    def same_support(self, other: SamplingMask) -> bool:
        """Equal segmentation and row sets, ignoring vocab_size, companions and metadata."""
        return (
            np.array_equal(self._cu_seqlens, other._cu_seqlens)
            and np.array_equal(self._offsets, other._offsets)
            and np.array_equal(self.canonical().ids, other.canonical().ids)
        )

    __hash__ = None  # type: ignore[assignment]

    def __sampling_mask__(self) -> dict[str, Any]:
        """The mask protocol: this mask's fields by name, for :func:`as_sampling_mask` in another copy of
        this library (a vendored one) or in another implementation. Keys: ``protocol``
        (:data:`MASK_PROTOCOL_VERSION`), ``ids``, ``offsets`` (:attr:`stored_offsets`: int32 or int64),
        ``cu_seqlens`` (read-only numpy arrays, not copies), ``vocab_size``, ``metadata`` (a dict), and each companion the mask carries."""
        return {
            "protocol": MASK_PROTOCOL_VERSION,
            "ids": self._ids,
            "offsets": self._offsets,
            "cu_seqlens": self._cu_seqlens,
            "vocab_size": self._vocab_size,
            "metadata": dict(self._metadata),
            **self._companions,
        }

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """Pickle protocol 5 hands the arrays out of band (``pickle.PickleBuffer``): Ray and
        multiprocessing move them without copies. We never unpickle untrusted data ourselves."""
        names = ("ids", "offsets", "cu_seqlens", *self._companions)
        arrays = (self._ids, self._offsets, self._cu_seqlens, *self._companions.values())
        wrap: Any = pickle.PickleBuffer if int(protocol) >= 5 else np.asarray
        payload = tuple((name, str(arr.dtype), wrap(arr)) for name, arr in zip(names, arrays, strict=True))
        return (_unpickle, (payload, self._vocab_size, dict(self._metadata), self._ascending))

    def __repr__(self) -> str:
        extras = "".join(f", {k}" for k in self._companions)
        return (
            f"SamplingMask(rows={self.num_rows}, segments={self.num_segments}, nnz={self.nnz}, "
            f"vocab_size={self._vocab_size}{extras})"
        )


def _unpickle(
    payload: tuple[tuple[str, str, Any], ...], vocab_size: int | None, metadata: dict[str, Any], ascending: bool | None
) -> SamplingMask:
    arrays = {name: np.frombuffer(buf, dtype=np.dtype(dtype)) for name, dtype, buf in payload}
    ids, offsets, cu = arrays.pop("ids"), arrays.pop("offsets"), arrays.pop("cu_seqlens")
    return _assembled(_State(ids, offsets, cu, vocab_size, arrays, metadata, ascending))


def _assembled(state: _State) -> SamplingMask:
    """The constructor path of masks built from arrays already known valid (slices, takes,
    concatenations, unpickled masks): no validation, no copy."""
    out = SamplingMask.__new__(SamplingMask)
    out.__setstate__(state)
    return out


_PROTOCOL_FIELDS = frozenset({"protocol", "ids", "offsets", "cu_seqlens", "vocab_size", "metadata", *COMPANIONS})


def as_sampling_mask(obj: Any, *, limits: Limits = DEFAULT_LIMITS, field: str = "mask") -> SamplingMask:
    """``obj`` itself when it is a :class:`SamplingMask`; else a validated mask rebuilt from
    ``obj.__sampling_mask__()`` (a mask from a vendored copy of this library, or any object that
    implements the mask protocol; the arrays are shared, not copied); else ``E_SCHEMA``.

    Every public function of the library that takes a mask passes it through here. A protocol version
    other than :data:`MASK_PROTOCOL_VERSION` is ``E_VERSION``; a missing or unknown field is ``E_SCHEMA``
    (nothing is dropped); invalid contents raise what the constructor raises.
    """
    if isinstance(obj, SamplingMask):
        return obj
    export = getattr(type(obj), "__sampling_mask__", None)
    if export is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"expected a SamplingMask or an object with __sampling_mask__(), got {type(obj).__name__}",
            field=field,
        )
    fields = export(obj)
    if not isinstance(fields, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "__sampling_mask__() must return a mapping", field=field)
    if fields.get("protocol") != MASK_PROTOCOL_VERSION:
        raise SamplingMaskError(
            ErrorCode.E_VERSION,
            f"unknown mask protocol version; this library reads {MASK_PROTOCOL_VERSION}",
            field=f"{field}.protocol",
            value=short_repr(fields.get("protocol")),
        )
    unknown = sorted(str(k) for k in fields if k not in _PROTOCOL_FIELDS)
    if unknown:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unknown mask protocol field {unknown[0]!r}", field=field)
    for name in ("ids", "offsets", "cu_seqlens"):
        if name not in fields:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"missing mask protocol field {name!r}", field=field)
    options = {k: v for k, v in fields.items() if k not in ("protocol", "ids", "offsets")}
    return SamplingMask(fields["ids"], fields["offsets"], limits=limits, **options)


def concat(masks: Sequence[SamplingMask]) -> SamplingMask:
    """Rows and segments of ``masks`` one after another.

    All masks must agree on vocab_size (None counts as unknown and adopts the other), on which
    companions they carry and on metadata, else ``E_SCHEMA``.
    """
    if not masks:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "concat needs at least one mask")
    masks = [as_sampling_mask(m, field=f"masks[{i}]") for i, m in enumerate(masks)]
    vocabs: set[int] = {m.vocab_size for m in masks if m.vocab_size is not None}
    if len(vocabs) > 1:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"masks disagree on vocab_size: {sorted(vocabs)}", field="vocab_size"
        )
    names = {tuple(sorted(m.companions)) for m in masks}
    if len(names) > 1:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "masks carry different companions", field="companions")
    for i, m in enumerate(masks):
        if vocabs and m.vocab_size is None and m.nnz and int(m.ids.max()) >= next(iter(vocabs)):
            raise SamplingMaskError(
                ErrorCode.E_RANGE,
                f"mask {i} has an id >= the other masks' vocab_size {next(iter(vocabs))}",
                field="ids",
                value=int(m.ids.max()),
            )
    first = masks[0]
    if any(not _metadata_equal(first.metadata, m.metadata) for m in masks[1:]):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "masks carry different metadata", field="metadata")
    ids = np.concatenate([m.ids for m in masks])
    row_base = np.cumsum([0] + [m.num_rows for m in masks])
    # int32 offsets stay int32 only while the joined id count fits them; else every part is widened.
    dtype = layouts.offsets_dtype_for(ids.size, *(m.stored_offsets.dtype for m in masks))
    offsets = np.empty(int(row_base[-1]) + 1, dtype=dtype)
    offsets[0] = base = 0
    for m, r0 in zip(masks, row_base.tolist(), strict=False):
        part = offsets[r0 + 1 : r0 + 1 + m.num_rows]
        part[...] = m.stored_offsets[1:]  # widen first, then shift in place: no overflow
        part += base
        base += m.nnz
    cu = np.concatenate([[0]] + [m.cu_seqlens[1:] + row_base[i] for i, m in enumerate(masks)]).astype(np.int64)
    companions = {k: np.concatenate([m.companions[k] for m in masks]) for k in first.companions}
    known = [m.__getstate__().ascending for m in masks]  # without computing it where not known yet
    ascending = all(known) if all(a is not None for a in known) else None
    vocab_size = next(iter(vocabs)) if vocabs else None
    return _assembled(_State(ids, offsets, cu, vocab_size, companions, first.metadata, ascending))
