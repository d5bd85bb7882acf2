# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/errors.py, vendorable (docs/serving-and-vendoring.md)
"""Errors as data: one exception type carrying a stable code from the spec's error table.

Every failure on bad input is a :class:`SamplingMaskError` whose ``code`` is one of
:class:`ErrorCode` (spec/v1/SPEC.md, "Error codes"). Other implementations match on the code
string, never on the message. The message names the row / segment / field and the value.
"""

from __future__ import annotations

import enum
import reprlib
from typing import Any

__all__ = ["ErrorCode", "SamplingMaskError", "short_repr"]


class ErrorCode(str, enum.Enum):
    """Stable error codes. The string value is the code; it never changes within a major version."""

    E_DTYPE = "E_DTYPE"  # an array has the wrong element type
    E_SHAPE = "E_SHAPE"  # wrong number of dimensions, or arrays whose lengths disagree
    E_PADDING = "E_PADDING"  # dense: -1 before an id; bitmask: a bit set past vocab_size
    E_RANGE = "E_RANGE"  # an id < 0 or >= vocab_size, or a value outside its domain
    E_DUPLICATE = "E_DUPLICATE"  # an id appears twice in one row
    E_OFFSETS = "E_OFFSETS"  # offsets / counts do not tile the ids
    E_SEGMENTS = "E_SEGMENTS"  # cu_seqlens does not tile the rows
    E_MISSING_SAMPLED = "E_MISSING_SAMPLED"  # a non-empty row lacks its sampled id
    E_WIDTH = "E_WIDTH"  # a dense width smaller than the widest row
    E_BYTES = "E_BYTES"  # a byte buffer's length disagrees with its declared shape and dtype
    E_VERSION = "E_VERSION"  # an unknown major version
    E_LIMIT = "E_LIMIT"  # a size beyond a configured resource limit
    E_SCHEMA = "E_SCHEMA"  # a missing / mistyped field, or fields that contradict each other
    E_ENCODING = "E_ENCODING"  # bytes that are not the named encoding (bad base64, JSON, msgpack, Arrow)

    def __str__(self) -> str:
        return self.value


class SamplingMaskError(ValueError):
    """Invalid sampling-mask input. ``code`` is an :class:`ErrorCode`; the context fields are optional.

    ``row`` and ``segment`` are 0-based indices; ``field`` names the array or key; ``value`` is the
    offending value: a scalar (a number, str, None) as given, anything else as its :func:`short_repr`.
    """

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        *,
        row: int | None = None,
        segment: int | None = None,
        field: str | None = None,
        value: Any = None,
    ) -> None:
        self.code = ErrorCode(code)
        self.message = message
        self.row = row
        self.segment = segment
        self.field = field
        scalar = value is None or isinstance(value, (float, str)) or getattr(value, "shape", None) == ()
        self.value: Any = value if scalar or isinstance(value, int) and value.bit_length() <= 64 else short_repr(value)
        where = []
        if field is not None:
            where.append(f"field {field!r}")
        if segment is not None:
            where.append(f"segment {segment}")
        if row is not None:
            where.append(f"row {row}")
        if self.value is not None:
            where.append(f"value {self.value!r}")
        suffix = f" ({', '.join(where)})" if where else ""
        super().__init__(f"{self.code.value}: {message}{suffix}")

    def to_dict(self) -> dict[str, Any]:
        """The error as JSON-ready data (what a conformance runner reports)."""
        out: dict[str, Any] = {"code": self.code.value, "message": self.message}
        for key in ("row", "segment", "field"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.value is not None:
            out["value"] = self.value if isinstance(self.value, (int, float, str, bool)) else repr(self.value)
        return out

    def __reduce__(self):  # type: ignore[override]
        return (_rebuild_error, (self.code.value, self.message, self.row, self.segment, self.field, self.value))


class _Short(reprlib.Repr):
    def repr1(self, x: Any, level: int) -> str:
        if isinstance(x, int) and x.bit_length() > 64:  # repr() of a long enough int is a ValueError
            return f"<int of {x.bit_length()} bits>"
        kind = next((k for k in (dict, list, tuple, set, frozenset) if isinstance(x, k)), None)
        if kind is not None:  # subclasses too: their own __repr__ never runs
            return getattr(self, f"repr_{kind.__name__}")(x, level)  # type: ignore[no-any-return]
        plain = x is None or isinstance(x, (int, float, complex, str)) or getattr(x, "shape", None) == ()
        return super().repr1(x, level) if plain else f"<{type(x).__name__}>"


_SHORT = _Short()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 2, 60, 60


def short_repr(value: Any) -> str:
    """``repr(value)`` in at most 80 characters that never recurses into the value: containers two
    levels deep (a list nested 100,000 deep is ``[[[...]]]``), numbers, text and numpy scalars as
    ``repr`` writes them, any other object by its type (``<ndarray>``, ``<bytes>``): no ``__repr__`` of it runs."""
    return _SHORT.repr(value)[:80]


def _rebuild_error(code, message, row, segment, field, value):  # type: ignore[no-untyped-def]
    return SamplingMaskError(code, message, row=row, segment=segment, field=field, value=value)
