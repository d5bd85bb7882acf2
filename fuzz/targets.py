"""Fuzz targets: one function per decoder, each taking untrusted bytes.

Contract of every target: it returns normally or raises :class:`SamplingMaskError` (a correct
rejection); any other exception, a crash, a hang or a memory blow-up is a bug. When the input
decodes, the target also checks the result (:func:`check_mask`: read-only arrays, invariants hold,
layout round trips agree, re-encoding gives the same mask) and raises ``AssertionError`` on a
mismatch, so a decoder that accepts garbage is caught too.

Raw-array targets read a small harness header (little-endian, defined here, not part of the spec)
and hand the arrays that follow to the core constructors. Array fields are read with
:func:`_Fields.array`: ``count`` elements of the dtype named by a dtype code::

    dtype codes: 0 int32  1 int64  2 uint8  3 int16  4 uint32  5 uint64  6 float32  7 float64  8 int8  9 bool

    dense    <BBHHi    dtype, flags, T, W, vocab              then  T*W elements
    packed   <BBHHHi   dtype, cu_dtype, T, W, B, vocab        then  T*W elements, B+1 cu_seqlens
    ragged   <BBBBHHHbi ids_dtype, offsets_dtype, cu_dtype, companions, nnz, T+1, B+1, delta, vocab
                       then ids, offsets, cu_seqlens (B+1 == 0xFFFF: absent), then the companions
                       flagged in bits 0-3 (sampled ids int32 / sampled logprobs / temperature
                       float32 [T + delta]; support_logprobs float32 [nnz + delta])
    counts   <BBHHi    ids_dtype, counts_dtype, nnz, T, vocab then ids, counts
    bitmask  <BBHHi    dtype, flags, T, row_bytes, vocab      then T*row_bytes elements
    compact  <II       num_rows, nnz                          then the compact bytes

``vocab == -1`` means no vocab_size; ``flags`` bit 0 hands the constructor a writable copy instead
of a read-only view of the input. Adapter targets take one selector byte (which entry point)
followed by JSON text. Format targets take the payload bytes as they are.

Every target decodes under :data:`LIMITS` (small, so limit checks are reachable) and the registry
:data:`TARGETS` maps a target name to its function; :func:`seeds` gives valid payloads per target.
``run_one(name, data, untrusted=True)`` decodes under ``Limits.for_untrusted_input(len(data))``
instead and asserts that the execution grew peak RSS by at most :func:`untrusted_bound` (Linux:
the peak is reset through ``/proc/self/clear_refs`` before each execution and read from ``VmHWM``).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
import json
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import sampling_mask
from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.codecs import arrow as arrow_codec
from sampling_mask.codecs import compact as compact_codec
from sampling_mask.codecs import json as json_codec
from sampling_mask.codecs import msgpack as msgpack_codec
from sampling_mask.core.limits import Limits

__all__ = ["LIMITS", "TARGETS", "check_mask", "dictionary", "run_one", "seeds", "untrusted_bound"]

#: Small limits, so that every limit check is reachable from a few KB of input.
LIMITS = Limits(
    max_rows=4096,
    max_segments=1024,
    max_nnz=1 << 16,
    max_width=1024,
    max_vocab=1 << 20,
    max_bytes=1 << 22,
    max_json_depth=16,
)
_DTYPES = [np.int32, np.int64, np.uint8, np.int16, np.uint32, np.uint64, np.float32, np.float64, np.int8, np.bool_]
_CODE = {np.dtype(t): i for i, t in enumerate(_DTYPES)}
_DTYPE_NAMES = {np.dtype(t).name: t for t in _DTYPES}


class _Short(Exception):
    """The input ended inside the harness header or an array: uninteresting, not a finding."""


class _Fields:
    """Little-endian header fields and arrays read from the front of a fuzz input."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise _Short
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out

    def array(self, code: int, count: int, *, writable: bool = False) -> np.ndarray:
        dtype = np.dtype(_DTYPES[code % len(_DTYPES)]).newbyteorder("<")
        nbytes = count * dtype.itemsize
        if self.pos + nbytes > len(self.data):
            raise _Short
        arr = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        self.pos += nbytes
        return arr.copy() if writable else arr

    def rest(self) -> bytes:
        return self.data[self.pos :]


def _vocab(value: int) -> int | None:
    return None if value == -1 else value


# ---------------------------------------------------------------------------------------------- checks
def _rows_equal(a: SamplingMask, b: SamplingMask) -> bool:
    return bool(np.array_equal(a.offsets, b.offsets) and np.array_equal(a.canonical().ids, b.canonical().ids))


def check_mask(mask: SamplingMask) -> None:
    """Everything a decoded mask must satisfy; ``AssertionError`` (never ``SamplingMaskError``) if not."""
    assert isinstance(mask, SamplingMask), type(mask)
    arrays = {"ids": mask.ids, "offsets": mask.offsets, "cu_seqlens": mask.cu_seqlens, **mask.companions}
    for name, arr in arrays.items():
        assert not arr.flags.writeable, f"{name} is writable"
    assert mask.ids.dtype == np.int32 and mask.offsets.dtype == np.int64 and mask.cu_seqlens.dtype == np.int64
    try:
        mask.validate(LIMITS)
        rows = SamplingMask.from_rows(mask.to_rows(), cu_seqlens=mask.cu_seqlens, vocab_size=mask.vocab_size)
        assert rows.same_support(mask), "to_rows / from_rows changed the mask"
        canonical = mask.canonical()
        assert canonical.is_canonical and canonical.same_support(mask)
        assert canonical == mask, "canonical() changed the mask"
        widest = int(np.diff(mask.offsets).max()) if mask.num_rows else 0
        if mask.num_rows * widest <= 1 << 20:  # the harness's own view: kept small whatever the limits
            dense = SamplingMask.from_dense(mask.to_dense(), limits=LIMITS)
            assert _rows_equal(dense, mask), "to_dense / from_dense changed the rows"
        vocab = mask.vocab_size
        if vocab is not None and mask.num_rows * ((vocab + 7) // 8) <= 1 << 20:
            bits = SamplingMask.from_bitmask(mask.to_bitmask(), vocab, limits=LIMITS)
            assert _rows_equal(bits, mask), "to_bitmask / from_bitmask changed the rows"
        for b in range(min(mask.num_segments, 4)):
            assert mask.segment(b).num_rows == int(mask.cu_seqlens[b + 1] - mask.cu_seqlens[b])
    except SamplingMaskError as exc:
        raise AssertionError(f"a decoded mask failed its own checks: {exc}") from exc


def _roundtrip(mask: SamplingMask, fmt: str, **opts: Any) -> None:
    """Re-encode ``mask`` in ``fmt`` and decode it: the same mask must come back."""
    try:
        again = sampling_mask.codecs.decode(sampling_mask.codecs.encode(mask, fmt, **opts), format=fmt, limits=LIMITS)
    except SamplingMaskError as exc:
        raise AssertionError(f"re-encoding a decoded mask as {fmt} failed: {exc}") from exc
    assert again == mask, f"{fmt} round trip changed the mask"


# ---------------------------------------------------------------------------------------------- raw arrays
def target_dense(data: bytes) -> None:
    f = _Fields(data)
    code, flags, rows, width, vocab = f.unpack("<BBHHi")
    dense = f.array(code, rows * width, writable=bool(flags & 1)).reshape(rows, width)
    mask = SamplingMask.from_dense(dense, vocab_size=_vocab(vocab), limits=LIMITS)
    check_mask(mask)
    if width >= int(mask.row_lengths.max(initial=0)) and dense.dtype.kind in "iu":
        assert np.array_equal(mask.to_dense(width), dense.astype(np.int64)), "from_dense / to_dense differ"


def target_packed(data: bytes) -> None:
    f = _Fields(data)
    code, cu_code, rows, width, segments, vocab = f.unpack("<BBHHHi")
    dense = f.array(code, rows * width).reshape(rows, width)
    cu = f.array(cu_code, segments + 1)
    mask = SamplingMask.from_dense(dense, cu_seqlens=cu, vocab_size=_vocab(vocab), limits=LIMITS)
    check_mask(mask)
    assert np.array_equal(mask.cu_seqlens, cu.astype(np.int64))


def target_ragged(data: bytes) -> None:
    f = _Fields(data)
    ids_code, off_code, cu_code, flags, nnz, num_offsets, num_cu, delta, vocab = f.unpack("<BBBBHHHbi")
    ids = f.array(ids_code, nnz, writable=bool(flags & 16))
    offsets = f.array(off_code, num_offsets)
    cu = None if num_cu == 0xFFFF else f.array(cu_code, num_cu)
    num_rows = max(num_offsets - 1, 0)
    kwargs: dict[str, Any] = {}
    for bit, name, code, size in (
        (1, "sampled_token_ids", 0, num_rows),
        (2, "sampled_logprobs", 6, num_rows),
        (4, "temperature", 6, num_rows),
        (8, "support_logprobs", 6, nnz),
    ):
        if flags & bit:
            kwargs[name] = f.array(code, max(size + delta, 0))
    mask = SamplingMask(ids, offsets, cu_seqlens=cu, vocab_size=_vocab(vocab), limits=LIMITS, **kwargs)
    check_mask(mask)
    assert np.array_equal(mask.ids, ids) and np.array_equal(mask.offsets, offsets)


def target_counts(data: bytes) -> None:
    f = _Fields(data)
    ids_code, counts_code, nnz, rows, vocab = f.unpack("<BBHHi")
    ids = f.array(ids_code, nnz)
    counts = f.array(counts_code, rows)
    mask = SamplingMask.from_counts(ids, counts, vocab_size=_vocab(vocab), limits=LIMITS)
    check_mask(mask)
    back_ids, back_counts = mask.to_counts()
    assert np.array_equal(back_ids, ids) and np.array_equal(back_counts, counts)


def target_bitmask(data: bytes) -> None:
    f = _Fields(data)
    code, flags, rows, row_bytes, vocab = f.unpack("<BBHHi")
    bits = f.array(code, rows * row_bytes, writable=bool(flags & 1)).reshape(rows, row_bytes)
    vocab_size: Any = row_bytes * 8 if vocab == -1 else vocab
    if flags & 2:
        vocab_size = float(vocab_size)  # a wrong type must be E_SCHEMA, not a TypeError
    mask = SamplingMask.from_bitmask(bits, vocab_size, limits=LIMITS)
    check_mask(mask)
    assert np.array_equal(mask.to_bitmask(), bits), "from_bitmask / to_bitmask differ"


def target_compact(data: bytes) -> None:
    f = _Fields(data)
    num_rows, nnz = f.unpack("<II")
    ids, offsets = compact_codec.decode_ragged(f.rest(), num_rows, nnz, limits=LIMITS)
    try:
        mask = SamplingMask(ids, offsets, limits=LIMITS)
    except SamplingMaskError as exc:
        raise AssertionError(f"compact decoded to an invalid mask: {exc}") from exc
    check_mask(mask)
    assert mask.is_canonical, "compact rows must decode ascending"
    again = compact_codec.decode_ragged(compact_codec.encode_ragged(ids, offsets), num_rows, nnz, limits=LIMITS)
    assert np.array_equal(again[0], ids) and np.array_equal(again[1], offsets), "compact round trip differs"
    assert len(compact_codec.encode_ragged(ids, offsets)) == compact_codec.encoded_size(ids, offsets)


# ---------------------------------------------------------------------------------------------- formats
def _format_target(fmt: str, *, lossless: bool = True, unvalidated: bool = False) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        if unvalidated:
            # Content checks skipped (trusted producers): sizes are still checked, nothing else may escape.
            with contextlib.suppress(SamplingMaskError):
                sampling_mask.codecs.decode(data, format=fmt, limits=LIMITS, validate=False)
        mask = sampling_mask.codecs.decode(data, format=fmt, limits=LIMITS)
        check_mask(mask)
        if lossless:
            _roundtrip(mask, fmt)

    target.__name__ = f"target_{fmt.replace('-', '_')}"
    target.__doc__ = f"``sampling_mask.decode(data, format={fmt!r})``."
    return target


def target_arrows_partial(data: bytes) -> None:
    """Streamed Arrow IPC: batches before an error were yielded and the error says how many."""
    yielded: list[SamplingMask] = []
    try:
        for mask in sampling_mask.codecs.iter_masks(data, format="arrows", limits=LIMITS):
            check_mask(mask)
            yielded.append(mask)
    except SamplingMaskError as exc:
        if yielded:
            assert f"after {len(yielded)} complete record batches" in str(exc), str(exc)
        raise
    whole = sampling_mask.codecs.decode(data, format="arrows", limits=LIMITS)
    if yielded:
        assert whole == sampling_mask.concat(yielded), "streamed batches differ from the whole decode"


def target_sniff(data: bytes) -> None:
    """``sampling_mask.decode(data)`` with the format detected from the content."""
    mask = sampling_mask.codecs.decode(data, limits=LIMITS)
    check_mask(mask)


# ---------------------------------------------------------------------------------------------- datasets
#: Harness of the ``dataset`` and ``sequence_dataset`` targets: one selector byte, then the bytes of
#: one file. Selector bits: 0 the file is ``.parquet`` (else ``.arrow``); 1 it sits in ``step=2/``;
#: 2 a FIFO ``f.<ext>``; 3 a dangling symlink; 4 a symlink loop ``d -> .`` and a self link;
#: 5 a symlink to a file outside the root; 6 a file of the other format; 7 a ``sampling_mask=7/``
#: directory. A valid file of 3 sequences (``step=1/good.<ext>``, user column ``name``) is always there,
#: and its sequences must always arrive.
_GOOD_SEGMENTS = 3


@functools.lru_cache(maxsize=2)
def _good_file(fmt: str) -> bytes:
    mask = SamplingMask.from_rows([[1, 2], [3], [], [4]], vocab_size=10, cu_seqlens=[0, 2, 3, 4])
    return sampling_mask.codecs.encode(mask, fmt, extra_columns={"name": ["a", "bb", "ccc"]})


@contextlib.contextmanager
def _dataset_tree(data: bytes) -> Iterator[tuple[str, str]]:
    """A temporary dataset directory built from a fuzz input (see the harness above); (root, format)."""
    import tempfile

    if not data:
        raise _Short
    flags, payload = data[0], data[1:]
    fmt = "parquet" if flags & 1 else "arrow"
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "d")
        os.makedirs(os.path.join(root, "step=1"))
        Path(root, "step=1", f"good.{fmt}").write_bytes(_good_file(fmt))
        where = os.path.join(root, "step=2") if flags & 2 else os.path.join(root, "step=1")
        os.makedirs(where, exist_ok=True)
        Path(where, f"x.{fmt}").write_bytes(payload)
        if flags & 4 and hasattr(os, "mkfifo"):
            os.mkfifo(os.path.join(root, "step=1", f"f.{fmt}"))
        if flags & 8:
            os.symlink("missing", os.path.join(root, "step=1", f"dangling.{fmt}"))
        if flags & 16:
            os.symlink(".", os.path.join(root, "loop"))
            os.symlink(f"self.{fmt}", os.path.join(root, "step=1", f"self.{fmt}"))
        if flags & 32:
            Path(tmp, f"outside.{fmt}").write_bytes(_good_file(fmt))
            os.symlink(os.path.join(tmp, f"outside.{fmt}"), os.path.join(root, "step=1", f"out.{fmt}"))
        if flags & 64:
            other = "arrow" if fmt == "parquet" else "parquet"
            Path(root, "step=1", f"other.{other}").write_bytes(_good_file(other))
        if flags & 128:
            os.makedirs(os.path.join(root, "sampling_mask=7"))
            Path(root, "sampling_mask=7", f"m.{fmt}").write_bytes(_good_file(fmt))
        yield root, fmt


def target_dataset(data: bytes) -> None:
    """``open_dataset`` over a generated directory (``on_error="report"``), whole and filtered on a
    user column: it finishes, every bad entry is reported by path, the good file's sequences arrive."""
    import pyarrow.compute as pc

    with _dataset_tree(data) as (root, _fmt):
        dataset = sampling_mask.codecs.open_dataset(root, limits=LIMITS)
        got = 0
        for batch in dataset.batches(on_error="report"):
            assert set(batch.columns) >= {"step"}, sorted(batch.columns)
            if os.path.basename(batch.path).startswith("good."):
                got += batch.mask.num_segments
            else:  # the fuzzed file: the mask must hold up (the good file's is known)
                check_mask(batch.mask)
        assert got == _GOOD_SEGMENTS, f"the good file's sequences did not all arrive ({got})"
        assert all(error.path.startswith(root) for error in dataset.errors)
        if data[0] & 2:  # the filtered read, for half of the inputs (it costs a second pass)
            for batch in dataset.batches(filter=pc.field("name") == "bb", on_error="report"):
                check_mask(batch.mask)


def target_sequence_dataset(data: bytes) -> None:
    """``torch_data.SequenceDataset`` over a generated directory (``on_error="report"``): every item
    reads (or the file is reported); the good file's sequences are all there."""
    from sampling_mask.data.torch_data import SequenceDataset

    with _dataset_tree(data) as (root, _fmt):
        dataset = SequenceDataset(root, limits=LIMITS, on_error="report")
        assert len(dataset) >= _GOOD_SEGMENTS, len(dataset)
        good = 0
        for index in range(len(dataset)):
            try:
                item = dataset[index]
            except SamplingMaskError:
                continue  # a batch of the fuzzed file that its metadata described but that is bad
            if os.path.basename(item.path).startswith("good."):
                good += 1
            else:
                check_mask(item.mask)
        assert good == _GOOD_SEGMENTS, f"the good file's sequences did not all arrive ({good})"
        if data[0] & 2:  # with a user column, for half of the inputs
            with contextlib.suppress(SamplingMaskError):
                SequenceDataset(root, columns=["name"], limits=LIMITS, on_error="report")[0]


def _dataset_seeds(mask: SamplingMask) -> list[bytes]:
    out = []
    for flags in (0, 1, 2, 3, 0x7C, 0x7D, 0xFF):
        fmt = "parquet" if flags & 1 else "arrow"
        names = [f"s{i}" for i in range(mask.num_segments)]
        out.append(bytes([flags]) + sampling_mask.codecs.encode(mask, fmt, extra_columns={"name": names}))
    return out


# ---------------------------------------------------------------------------------------------- adapters
def _adapter_entries() -> dict[str, list[Callable[[Any], Any]]]:
    """Adapter module -> its ``from_*`` entry points, each called on one parsed JSON value.

    An entry with one required positional parameter gets the value itself; one with ``k > 1`` gets
    the items of a JSON array of length ``k`` (other values are skipped: a harness mismatch, not a
    finding). Options (keyword arguments) are the caller's, not the payload's: only ``limits``.
    """
    from sampling_mask import adapters

    def entry(fn: Callable[..., Any]) -> Callable[[Any], Any]:
        params = inspect.signature(fn).parameters.values()
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        takes_limits = any(p.name == "limits" or p.kind is p.VAR_KEYWORD for p in params)
        options = {"limits": LIMITS} if takes_limits else {}

        def call(value: Any) -> Any:
            if len(positional) <= 1:
                return fn(value, **options)
            if isinstance(value, list) and len(value) == len(positional):
                return fn(*value, **options)
            return None

        return call

    entries: dict[str, list[Callable[[Any], Any]]] = {}
    for name in ADAPTERS:
        module = getattr(adapters, name, None)
        if module is not None:
            names = sorted(n for n in getattr(module, "__all__", ()) if n.startswith("from_"))
            entries[name] = [entry(getattr(module, n)) for n in names]
    return entries


#: Adapter modules with a fuzz target each (``adapter_<name>``).
ADAPTERS = ("vllm", "sglang", "skyrl", "prime_rl", "miles", "slime")
_ADAPTER_ENTRIES: dict[str, list[Callable[[Any], Any]]] = {}


def _adapter_target(name: str) -> Callable[[bytes], None]:
    def target(data: bytes) -> None:
        if not _ADAPTER_ENTRIES:
            _ADAPTER_ENTRIES.update(_adapter_entries())
        entries = _ADAPTER_ENTRIES.get(name)
        if not entries or not data:
            return
        value = json_codec.parse(data[1:], limits=LIMITS)
        result = entries[data[0] % len(entries)](value)
        # An entry returns a mask, None (nothing recorded), a list of masks, or (mask, repair count).
        items = result if isinstance(result, list) else [result[0]] if isinstance(result, tuple) else [result]
        for item in items:
            if item is not None:
                check_mask(item)

    target.__name__ = f"target_adapter_{name}"
    target.__doc__ = f"``sampling_mask.adapters.{name}.from_*`` on parsed JSON (first byte picks the entry)."
    return target


TARGETS: dict[str, Callable[[bytes], None]] = {
    "dense": target_dense,
    "packed": target_packed,
    "ragged": target_ragged,
    "counts": target_counts,
    "bitmask": target_bitmask,
    "compact": target_compact,
    "arrow": _format_target("arrow", unvalidated=True),
    "arrows": _format_target("arrows", unvalidated=True),
    "arrows_partial": target_arrows_partial,
    "parquet": _format_target("parquet", unvalidated=True),
    "msgpack": _format_target("msgpack", unvalidated=True),
    "json": _format_target("json"),
    "json_rows": _format_target("json-rows"),
    "base64": _format_target("base64", lossless=False),
    "sniff": target_sniff,
    "dataset": target_dataset,
    "sequence_dataset": target_sequence_dataset,
    **{f"adapter_{name}": _adapter_target(name) for name in ADAPTERS},
}


def untrusted_bound(size: int) -> int:
    """Bytes an input of ``size`` bytes may grow peak RSS by under ``Limits.for_untrusted_input``."""
    return max(16 * size, 64 << 20)


def _memory_kib() -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak) of this process in KiB; empty where /proc is missing."""
    out = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1])
    return out


def _reset_peak() -> bool:
    """Reset the peak RSS to the current RSS (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def run_one(name: str, data: bytes, *, untrusted: bool = False) -> None:
    """Run target ``name`` on ``data``; returns normally on a correct rejection (``SamplingMaskError``).

    ``untrusted``: under ``Limits.for_untrusted_input(len(data))``, asserting :func:`untrusted_bound`.
    """
    global LIMITS
    if not untrusted:
        with contextlib.suppress(_Short, SamplingMaskError):
            TARGETS[name](data)
        return
    if name == "sequence_dataset":  # torch is imported once, before the first measured execution
        import sampling_mask.data.torch_data  # noqa: F401
    saved, LIMITS = LIMITS, Limits.for_untrusted_input(len(data))
    measured = _reset_peak()
    before = _memory_kib()
    try:
        with contextlib.suppress(_Short, SamplingMaskError):
            TARGETS[name](data)
    finally:
        LIMITS = saved
    after = _memory_kib()
    if measured and "VmHWM" in after and "VmRSS" in before:
        grown = (after["VmHWM"] - before["VmRSS"]) * 1024
        assert grown <= untrusted_bound(len(data)), (
            f"{name}: peak RSS grew {grown >> 20} MiB on a {len(data)}-byte input (bound {untrusted_bound(len(data)) >> 20} MiB)"
        )


# ---------------------------------------------------------------------------------------------- seeds
def _sample_masks() -> Iterator[SamplingMask]:
    yield SamplingMask.from_rows([[3, 7], [], [5]], vocab_size=10)
    yield SamplingMask.from_rows([])
    yield SamplingMask.from_rows([[]], cu_seqlens=[0, 0, 1])
    yield SamplingMask.from_rows([[9, 2, 4], [1], [0, 8]], cu_seqlens=[0, 2, 3])
    yield SamplingMask.from_rows(
        [[3, 7], [], [5]],
        cu_seqlens=[0, 2, 3],
        vocab_size=16,
        sampled_token_ids=[7, -1, 5],
        sampled_logprobs=np.array([-0.5, 0.0, -np.inf], np.float32),
        temperature=np.array([1.0, 0.7, np.nan], np.float32),
        support_logprobs=np.array([-1.25, -0.5, 0.0], np.float32),
        metadata={"top_k": 2, "top_p": 0.9, "producer": "fuzz", "extra": None},
    )
    rng = np.random.default_rng(0)
    rows = [sorted(rng.choice(300, size=int(k), replace=False).tolist()) for k in (1, 1, 2, 12, 40, 0, 3)]
    yield SamplingMask.from_rows(rows, vocab_size=300, cu_seqlens=[0, 3, 3, 7])


def _raw_seeds(name: str, mask: SamplingMask) -> list[bytes]:
    vocab = -1 if mask.vocab_size is None else mask.vocab_size
    rows, nnz, segs = mask.num_rows, mask.nnz, mask.num_segments
    dense = mask.to_dense()
    out: list[bytes] = []
    if name == "dense":
        out.append(struct.pack("<BBHHi", 0, 0, *dense.shape, vocab) + dense.tobytes())
        out.append(struct.pack("<BBHHi", 1, 1, *dense.shape, vocab) + dense.astype("<i8").tobytes())
    elif name == "packed":
        head = struct.pack("<BBHHHi", 0, 1, *dense.shape, segs, vocab)
        out.append(head + dense.tobytes() + mask.cu_seqlens.astype("<i8").tobytes())
    elif name == "ragged":
        flags = sum(
            bit
            for bit, n in (
                (1, "sampled_token_ids"),
                (2, "sampled_logprobs"),
                (4, "temperature"),
                (8, "support_logprobs"),
            )
            if n in mask.companions
        )
        head = struct.pack("<BBBBHHHbi", 0, 1, 1, flags, nnz, rows + 1, segs + 1, 0, vocab)
        body = mask.ids.tobytes() + mask.offsets.tobytes() + mask.cu_seqlens.tobytes()
        body += b"".join(
            mask.companions[n].tobytes()
            for n in ("sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs")
            if n in mask.companions
        )
        out.append(head + body)
    elif name == "counts":
        ids, counts = mask.to_counts()
        out.append(struct.pack("<BBHHi", 0, 0, nnz, rows, vocab) + ids.tobytes() + counts.tobytes())
    elif name == "bitmask" and mask.vocab_size is not None:
        bits = mask.to_bitmask()
        out.append(struct.pack("<BBHHi", 2, 0, *bits.shape, vocab) + bits.tobytes())
    elif name == "compact":
        c = mask.canonical()
        out.append(struct.pack("<II", rows, nnz) + compact_codec.encode_ragged(c.ids, c.offsets))
    return out


def _format_seeds(fmt: str, mask: SamplingMask) -> list[bytes]:
    encode = sampling_mask.codecs.encode
    if fmt in ("arrow", "arrows", "parquet"):
        out = [encode(mask, fmt)]
        for opts in ({"compression": "zstd"}, {"compression": "lz4"}, {"layout": "compact"}, {"large_lists": True}):
            if fmt == "parquet" and "compression" in opts:
                continue
            out.append(encode(mask, fmt, **opts))
        if fmt == "arrows":
            out.append(arrow_codec_concat_stream([mask, mask]))
        return out
    if fmt == "msgpack":
        return [
            msgpack_codec.encode(mask),
            msgpack_codec.encode(mask, layout="dense"),
            msgpack_codec.encode(mask, layout="compact"),
            msgpack_codec.encode(mask, offsets_dtype="int32"),
        ]
    if fmt == "json":
        return [encode(mask, "json")]
    if fmt in ("json-rows", "base64"):
        return [encode(mask, fmt, allow_loss=True)]
    raise ValueError(fmt)


def arrow_codec_concat_stream(masks: list[SamplingMask]) -> bytes:
    """An Arrow IPC stream of one record batch per mask (the streaming writer's output)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with arrow_codec.Writer(sink, "arrows") as writer:
        for mask in masks:
            writer.write(mask)
    return bytes(sink.getvalue().to_pybytes())


def _adapter_seeds(name: str, mask: SamplingMask) -> list[bytes]:
    """Valid JSON inputs for an adapter's ``from_*`` entries, built with its own ``to_*`` writers."""
    from sampling_mask import adapters

    module = getattr(adapters, name, None)
    if module is None:
        return []
    values: list[Any] = []
    one = mask.segment(0) if mask.num_segments else mask
    for writer in sorted(n for n in getattr(module, "__all__", ()) if n.startswith("to_")):
        with contextlib.suppress(Exception):
            values.append(getattr(module, writer)(one))
            values.append(getattr(module, writer)(mask))
    rows = mask.to_rows()
    values += [rows, {"token_ids": rows}, {"output_token_sampling_mask": rows}]
    count = len(_ADAPTER_ENTRIES.get(name, ()))
    out = []
    for value in values:
        text = json.dumps(_jsonable(value), allow_nan=False).encode()
        out += [bytes([i]) + text for i in range(max(count, 1))]
    return out


def _jsonable(value: Any) -> Any:
    """Plain JSON values from adapter output (arrays to lists, bytes to base64, non-finite floats to null)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(type(value).__name__)


#: conformance/v1 forms whose decode cases seed each target.
_CONFORMANCE_FORMS = {
    "dense": ("dense",),
    "packed": ("packed",),
    "ragged": ("ragged",),
    "counts": ("counts",),
    "bitmask": ("bitmask",),
    "arrow": ("arrow",),
    "arrows": ("arrows",),
    "arrows_partial": ("arrows",),
    "parquet": ("parquet",),
    "msgpack": ("msgpack",),
    "json": ("json",),
    "json_rows": ("json-rows",),
    "base64": ("base64",),
    "sniff": ("arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64"),
}
_CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance" / "v1"


def _vector_array(spec: Any) -> np.ndarray | None:
    """A conformance array ``{dtype, shape, values | hex}``, or None when the harness cannot carry it."""
    if not isinstance(spec, dict) or spec.get("dtype") not in _DTYPE_NAMES:
        return None
    dtype = np.dtype(_DTYPE_NAMES[spec["dtype"]]).newbyteorder("<")
    try:
        if "hex" in spec:
            arr = np.frombuffer(bytes.fromhex(spec["hex"]), dtype=dtype).reshape(spec["shape"])
        else:
            arr = np.array(spec["values"], dtype=dtype).reshape(spec["shape"])
    except (ValueError, TypeError, KeyError, OverflowError):
        return None
    return arr


def _vector_case_seed(name: str, case_input: dict[str, Any]) -> bytes | None:
    """The harness input of target ``name`` for one conformance array case (None if it does not fit)."""
    arrays = {key: _vector_array(value) for key, value in case_input.items() if isinstance(value, dict)}
    vocab = case_input.get("vocab_size", -1)
    if not isinstance(vocab, int) or not -(1 << 31) <= vocab < 1 << 31:
        return None

    def code(arr: np.ndarray) -> int:
        return _CODE[np.dtype(arr.dtype.newbyteorder("="))]

    def raw(arr: np.ndarray) -> bytes:
        return np.ascontiguousarray(arr).tobytes()

    try:
        if name in ("dense", "packed", "bitmask"):
            grid = arrays.get(name if name != "packed" else "dense")
            if grid is None or grid.ndim != 2 or max(grid.shape) > 0xFFFF:
                return None
            if name == "dense":
                return struct.pack("<BBHHi", code(grid), 0, *grid.shape, vocab) + raw(grid)
            if name == "bitmask":
                return struct.pack("<BBHHi", code(grid), 0, *grid.shape, vocab) + raw(grid)
            cu = arrays.get("cu_seqlens")
            if cu is None or cu.ndim != 1 or cu.size == 0:
                return None
            head = struct.pack("<BBHHHi", code(grid), code(cu), *grid.shape, cu.size - 1, vocab)
            return head + raw(grid) + raw(cu)
        if name == "counts":
            ids, counts = arrays.get("ids"), arrays.get("counts")
            if ids is None or counts is None or ids.ndim != 1 or counts.ndim != 1:
                return None
            return struct.pack("<BBHHi", code(ids), code(counts), ids.size, counts.size, vocab) + raw(ids) + raw(counts)
        if name == "ragged":
            ids, offsets, cu = arrays.get("ids"), arrays.get("offsets"), arrays.get("cu_seqlens")
            if ids is None or offsets is None or ids.ndim != 1 or offsets.ndim != 1:
                return None
            flags, tail = 0, b""
            for bit, key, dtype in (
                (1, "sampled_token_ids", "<i4"),
                (2, "sampled_logprobs", "<f4"),
                (4, "temperature", "<f4"),
                (8, "support_logprobs", "<f4"),
            ):
                arr = arrays.get(key)
                if arr is not None:
                    expected = ids.size if key == "support_logprobs" else max(offsets.size - 1, 0)
                    if arr.size != expected:
                        return None
                    flags, tail = flags | bit, tail + arr.astype(dtype).tobytes()
            num_cu = 0xFFFF if cu is None else cu.size
            cu_code = 1 if cu is None else code(cu)
            head = struct.pack(
                "<BBBBHHHbi", code(ids), code(offsets), cu_code, flags, ids.size, offsets.size, num_cu, 0, vocab
            )
            return head + raw(ids) + raw(offsets) + (b"" if cu is None else raw(cu)) + tail
    except struct.error:
        return None
    return None


def _conformance_seeds(name: str) -> list[bytes]:
    """Inputs of the conformance vectors (valid and invalid decode cases) for target ``name``."""
    out: list[bytes] = []
    for form in _CONFORMANCE_FORMS.get(name, ()):
        for path in sorted(_CONFORMANCE.glob(f"{form}/*.json")) + sorted(_CONFORMANCE.glob(f"invalid/{form}.json")):
            try:
                cases = json.loads(path.read_text(encoding="utf-8")).get("cases", [])
            except (OSError, ValueError):
                continue
            for case in cases:
                case_input = case.get("input")
                if case.get("op", "decode") != "decode" or not isinstance(case_input, dict):
                    continue
                if "hex" in case_input and isinstance(case_input["hex"], str):
                    with contextlib.suppress(ValueError):
                        out.append(bytes.fromhex(case_input["hex"]))
                elif "text" in case_input and isinstance(case_input["text"], str):
                    out.append(case_input["text"].encode("utf-8"))
                else:
                    seed = _vector_case_seed(name, case_input)
                    if seed is not None:
                        out.append(seed)
    return out


def seeds(name: str) -> list[bytes]:
    """Small valid inputs for target ``name`` (the seed corpus), deduplicated, in a stable order."""
    out: list[bytes] = []
    for mask in _sample_masks():
        if name in ("dense", "packed", "ragged", "counts", "bitmask", "compact"):
            out += _raw_seeds(name, mask)
        elif name in ("arrow", "arrows", "parquet", "msgpack", "json"):
            out += _format_seeds(name, mask)
        elif name == "arrows_partial":
            out += _format_seeds("arrows", mask)
        elif name in ("dataset", "sequence_dataset"):
            out += _dataset_seeds(mask)
        elif name in ("json_rows", "base64"):
            out += _format_seeds(name.replace("_", "-"), mask)
        elif name == "sniff":
            for fmt in ("arrow", "arrows", "msgpack", "json", "json-rows", "base64"):
                out += _format_seeds(fmt, mask)[:1]
        elif name.startswith("adapter_"):
            if not _ADAPTER_ENTRIES:
                _ADAPTER_ENTRIES.update(_adapter_entries())
            out += _adapter_seeds(name[len("adapter_") :], mask)
        else:
            raise KeyError(name)
    out += _conformance_seeds(name)
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------- dictionaries
def _source_strings() -> list[str]:
    """Short string literals of the package source: field names, dtype names, format keys."""
    import ast

    found: dict[str, None] = {}
    for path in sorted(Path(sampling_mask.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if 2 <= len(text) <= 40 and text.isascii() and text.isprintable() and " " not in text:
                    found[text] = None
    return list(found)


def dictionary(name: str) -> list[bytes]:
    """libFuzzer dictionary tokens for target ``name``: the package's own strings, encoded as the
    target's input encodes strings (JSON text, msgpack str, raw bytes for Arrow metadata)."""
    if name in ("dense", "packed", "ragged", "counts", "bitmask", "compact"):
        return []
    words = _source_strings()
    if name == "msgpack":
        import msgpack

        return [msgpack.packb(w) for w in words] + [b"\xc4", b"\xc6", b"\xdd", b"\xdf"]
    if name == "sequence_dataset":  # torch loads here, before the first input starts the clock
        import sampling_mask.data.torch_data  # noqa: F401
    if name in ("arrow", "arrows", "arrows_partial", "parquet", "dataset", "sequence_dataset"):
        return [w.encode() for w in words]
    return [json.dumps(w).encode() for w in words] + [b"true", b"false", b"null", b"-1", b"[]", b"{}"]
