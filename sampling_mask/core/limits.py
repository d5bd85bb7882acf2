# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/limits.py, vendorable (docs/serving-and-vendoring.md)
"""Resource limits checked before any allocation whose size comes from untrusted input.

Sizes are checked as Python integers (no overflow) against a :class:`Limits` instance, and declared
byte lengths against the real buffer length, *before* numpy allocates anything. Callers that need
larger masks pass ``limits=DEFAULT_LIMITS.replace(max_rows=...)`` (or any ``Limits``).

``max_bytes`` bounds what one decode *produces* (ids, offsets, ``cu_seqlens`` and companions
together: :func:`check_output`, computed from the counts the input declares) and every single
buffer it decompresses, decodes or builds on the way. Presets: :data:`DEFAULT_LIMITS` (the
defaults), :meth:`Limits.for_untrusted_input` (network payloads: a budget proportional to the
payload) and :data:`LOCAL_FILE_LIMITS` (trusted local files of a real run).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .errors import ErrorCode, SamplingMaskError

__all__ = [
    "DEFAULT_LIMITS",
    "LOCAL_FILE_LIMITS",
    "UNTRUSTED_CAP_BYTES",
    "UNTRUSTED_EXPANSION",
    "UNTRUSTED_FLOOR_BYTES",
    "DECODE_ROW_BYTES",
    "Limits",
    "check_count",
    "check_output",
    "checked_nbytes",
    "output_nbytes",
    "remaining",
]

#: :meth:`Limits.for_untrusted_input`: a decode may produce this many bytes per input byte ...
UNTRUSTED_EXPANSION = 12
#: ... and at least this many, whatever the input size (8 MiB) ...
UNTRUSTED_FLOOR_BYTES = 8 << 20
#: ... and never more than this (1 GiB).
UNTRUSTED_CAP_BYTES = 1 << 30
#: What a decode holds at its peak per row (:func:`output_nbytes`): the int64 offsets, and the
#: temporaries of building and validating them (counts widened to int64, row lengths, the dense or
#: compact row scan). Measured 16-28 bytes a row on empty and zero-width rows (msgpack ragged /
#: counts / dense / compact, base64, Arrow and Parquet compact: ``tests/test_limits_accounting.py``).
DECODE_ROW_BYTES = 32


_MAX_DIM = (1 << 63) - 1  # the largest array dimension numpy accepts (intp)
#: The most dimensions a declared shape may have (numpy 1.x allows 32, numpy 2 allows 64).
MAX_NDIM = 32


@dataclasses.dataclass(frozen=True)
class Limits:
    """Upper bounds for one decode or construction. Every field is an inclusive maximum."""

    max_rows: int = 1 << 28  # T, token positions (268M)
    max_segments: int = 1 << 24  # B, sequences (16.7M)
    max_nnz: int = 1 << 32  # total ids (16 GiB of int32)
    max_width: int = 1 << 20  # dense width W, and the widest row
    max_vocab: int = 1 << 24  # vocab_size (16.7M; real vocabularies are <= 262k)
    max_bytes: int = 1 << 34  # what one decode produces, and each buffer on the way (16 GiB)
    max_json_depth: int = 16  # nesting depth of JSON / msgpack containers

    def replace(self, **changes: int) -> Limits:
        """A copy with some limits changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def for_untrusted_input(cls, input_size: int) -> Limits:
        """Limits for one payload of ``input_size`` bytes from the network.

        The output budget (``max_bytes``) is ``UNTRUSTED_EXPANSION`` (12) bytes per input byte, at
        least ``UNTRUSTED_FLOOR_BYTES`` (8 MiB) and at most 1 GiB; counts are capped modestly
        (2^24 rows, 2^20 segments, 2^28 ids, rows of 2^18 ids, vocabularies of 2^22). The budget
        is one total per decode: what the decode really holds at its peak is charged against it
        (:data:`DECODE_ROW_BYTES` a row, the parsed JSON / msgpack objects, the decompressed
        buffers), so bytes that only pad the input raise it no faster than 12 per byte. Under
        these limits no input grows a decoder's peak memory by more than max(16 x input size,
        64 MiB) (``tests/test_limits_amplification.py``, ``tests/test_limits_accounting.py``).
        """
        size = check_count(input_size, 1 << 62, "input size")
        budget = min(UNTRUSTED_CAP_BYTES, max(UNTRUSTED_FLOOR_BYTES, UNTRUSTED_EXPANSION * size))
        return cls(
            max_rows=min(1 << 24, budget // DECODE_ROW_BYTES),
            max_segments=1 << 20,
            max_nnz=min(1 << 28, budget // 4),
            max_width=1 << 18,
            max_vocab=1 << 22,
            max_bytes=budget,
            max_json_depth=16,
        )


DEFAULT_LIMITS = Limits()
#: Trusted local files of a real run: 10M tokens x 512 ids (5.1e9 ids, 20.5 GB) fit with room.
LOCAL_FILE_LIMITS = Limits(max_rows=1 << 31, max_segments=1 << 26, max_nnz=1 << 35, max_bytes=1 << 38)


def check_count(value: int, limit: int, what: str, *, field: str | None = None) -> int:
    """``value`` as a non-negative int not above ``limit``, or ``E_RANGE`` / ``E_LIMIT``."""
    value = int(value)
    if value < 0:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"{what} must be >= 0", field=field, value=value)
    if value > limit:
        raise SamplingMaskError(ErrorCode.E_LIMIT, f"{what} exceeds the limit {limit}", field=field, value=value)
    return value


def checked_nbytes(shape: Iterable[int], itemsize: int, limits: Limits, *, field: str | None = None) -> int:
    """Bytes of an array of ``shape`` and ``itemsize``, computed exactly, or ``E_SHAPE`` / ``E_LIMIT``."""
    dims = list(shape)
    if len(dims) > MAX_NDIM:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(dims)} dimensions, more than {MAX_NDIM}", field=field, value=len(dims)
        )
    total = int(itemsize)
    extent = max(total, 1)  # numpy refuses a shape whose non-zero dimensions overflow, even with a zero
    for dim in dims:
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 0:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, "dimensions must be non-negative integers", field=field, value=dim
            )
        extent *= max(dim, 1)
        if dim > _MAX_DIM or extent > _MAX_DIM:  # numpy's index type: not even a zero-size array has it
            raise SamplingMaskError(
                ErrorCode.E_LIMIT, f"shape {dims} exceeds numpy's index range", field=field, value=dim
            )
        total *= dim
    if total > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"{total} bytes exceed the limit {limits.max_bytes}", field=field, value=total
        )
    return total


def output_nbytes(
    rows: int, nnz: int, *, segments: int = 1, per_row: int = 0, per_id: int = 0, row_bytes: int = DECODE_ROW_BYTES
) -> int:
    """Bytes a decode of the ragged mask holds at its peak: ids int32 [nnz], ``row_bytes`` per row
    (:data:`DECODE_ROW_BYTES`: offsets int64 [rows + 1] and their temporaries; 8, the offsets alone,
    is the mask's own size of SPEC 8.1), ``cu_seqlens`` int64 [segments + 1], plus ``per_row`` /
    ``per_id`` companion bytes."""
    return 4 * nnz + row_bytes * (rows + 1) + 8 * (segments + 1) + per_row * rows + per_id * nnz


def remaining(limits: Limits, held: int) -> Limits:
    """``limits`` with ``held`` bytes taken from ``max_bytes`` (what a decode already holds, such as
    its parsed objects, while it builds the mask); ``E_LIMIT`` when nothing is left."""
    held = int(held)
    if held > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"{held} bytes exceed the limit {limits.max_bytes}", field="max_bytes", value=held
        )
    return limits.replace(max_bytes=limits.max_bytes - held)


def check_output(
    limits: Limits,
    rows: int,
    nnz: int,
    *,
    segments: int = 1,
    per_row: int = 0,
    per_id: int = 0,
    row_bytes: int = DECODE_ROW_BYTES,
    field: str | None = None,
) -> int:
    """:func:`output_nbytes` from declared counts, or ``E_LIMIT`` above ``limits.max_bytes``."""
    total = output_nbytes(rows, nnz, segments=segments, per_row=per_row, per_id=per_id, row_bytes=row_bytes)
    if total > limits.max_bytes:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT,
            f"the decoded mask would take {total} bytes ({rows} rows, {nnz} ids), over the limit {limits.max_bytes}",
            field=field,
            value=total,
        )
    return total
