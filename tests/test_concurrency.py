"""Decoding is thread-safe and returns read-only arrays that share nothing writable.

Eight threads decode the same payloads and different payloads, in different orders, many times: every
result equals the single-threaded decode, the payload bytes are unchanged, and no returned array can
be written (so a consumer cannot corrupt a buffer another decode shares). A writable input buffer is
copied once before decoding, so changing it afterwards cannot change a validated mask.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import sampling_mask
from sampling_mask import SamplingMask
from sampling_mask.codecs import compact

pytest.importorskip("pyarrow")

THREADS = 8
ROUNDS = 6


def _mask(seed: int) -> SamplingMask:
    rng = np.random.default_rng(seed)
    vocab = 64 + seed
    lengths = rng.integers(0, 9, size=20 + seed)
    lengths[::5] = 0
    rows = [rng.choice(vocab, size=int(k), replace=False).tolist() for k in lengths]
    sampled = [int(r[0]) if r else -1 for r in rows]
    nnz = int(lengths.sum())
    return SamplingMask.from_rows(
        rows,
        cu_seqlens=[0, 7, 7, len(rows)],
        vocab_size=vocab,
        sampled_token_ids=sampled,
        sampled_logprobs=rng.uniform(-5, 0, len(rows)).astype(np.float32),
        temperature=np.full(len(rows), 0.7, np.float32),
        support_logprobs=rng.uniform(-5, 0, nnz).astype(np.float32),
        metadata={"top_k": 8, "producer": f"test-{seed}"},
    )


MASKS = [_mask(seed) for seed in range(3)]


def _payloads() -> list[tuple[str, bytes, Callable[[bytes], SamplingMask]]]:
    """(label, payload, decoder) for every format and layout, over several masks."""
    out: list[tuple[str, bytes, Callable[[bytes], SamplingMask]]] = []

    def decoder(fmt: str) -> Callable[[bytes], SamplingMask]:
        return lambda data: sampling_mask.codecs.decode(data, format=fmt)

    for i, mask in enumerate(MASKS):
        plain = SamplingMask.from_rows(mask.to_rows())
        for fmt in ("arrow", "arrows", "parquet", "msgpack", "json"):
            out.append((f"{fmt}-{i}", sampling_mask.codecs.encode(mask, fmt), decoder(fmt)))
        out.append(
            (f"arrow-zstd-{i}", sampling_mask.codecs.encode(mask, "arrow", compression="zstd"), decoder("arrow"))
        )
        out.append(
            (f"arrows-compact-{i}", sampling_mask.codecs.encode(mask, "arrows", layout="compact"), decoder("arrows"))
        )
        out.append(
            (f"msgpack-dense-{i}", sampling_mask.codecs.encode(mask, "msgpack", layout="dense"), decoder("msgpack"))
        )
        out.append(
            (f"msgpack-compact-{i}", sampling_mask.codecs.encode(mask, "msgpack", layout="compact"), decoder("msgpack"))
        )
        out.append((f"json-rows-{i}", sampling_mask.codecs.encode(plain, "json-rows"), decoder("json-rows")))
        out.append((f"base64-{i}", sampling_mask.codecs.encode(plain, "base64"), decoder("base64")))
        out.append((f"sniffed-{i}", sampling_mask.codecs.encode(mask, "msgpack"), sampling_mask.codecs.decode))
        canonical = mask.canonical()
        blob = compact.encode_ragged(canonical.ids, canonical.offsets)
        shape = (canonical.num_rows, canonical.nnz)
        out.append((f"compact-{i}", blob, lambda data, shape=shape: SamplingMask(*compact.decode_ragged(data, *shape))))
    return out


PAYLOADS = _payloads()


def _arrays(mask: SamplingMask) -> dict[str, np.ndarray]:
    out = {"ids": mask.ids, "offsets": mask.offsets, "cu_seqlens": mask.cu_seqlens, **mask.companions}
    ids, offsets = mask.to_ragged()
    out.update({"to_ragged.ids": ids, "to_ragged.offsets": offsets})
    if mask.num_rows:
        out["row(0)"] = mask.row(0)
        out["m[1:].ids"] = mask[1:].ids
    if mask.num_segments:
        out["segment(0).ids"] = mask.segment(0).ids
    return out


def _assert_read_only(mask: SamplingMask, label: str) -> None:
    for name, arr in _arrays(mask).items():
        assert not arr.flags.writeable, f"{label}: {name} is writable"
        if arr.size:
            with pytest.raises(ValueError, match="read-only"):
                arr[0] = arr[0]
            with pytest.raises(ValueError, match="read-only"):
                arr += arr.dtype.type(0)


def test_decoded_arrays_are_read_only() -> None:
    for label, payload, decode in PAYLOADS:
        _assert_read_only(decode(payload), label)


def test_constructed_arrays_are_read_only_and_do_not_alias_writes() -> None:
    """A mask built from the caller's writable arrays still hands out read-only arrays."""
    ids = np.array([3, 7, 5], np.int32)
    offsets = np.array([0, 2, 2, 3], np.int64)
    mask = SamplingMask(ids, offsets)
    _assert_read_only(mask, "from_ragged")
    assert ids.flags.writeable, "the caller's own array must stay theirs"


def _decode_all(order: list[int]) -> list[tuple[int, SamplingMask]]:
    return [(i, PAYLOADS[i][2](PAYLOADS[i][1])) for i in order]


def test_eight_threads_decode_identically() -> None:
    expected = [decode(payload) for _, payload, decode in PAYLOADS]
    snapshots = [bytes(payload) for _, payload, _ in PAYLOADS]
    for (label, _, _), mask in zip(PAYLOADS, expected, strict=True):
        reference = MASKS[int(label.rsplit("-", 1)[1])]
        assert np.array_equal(mask.offsets, reference.offsets), label
        assert np.array_equal(mask.canonical().ids, reference.canonical().ids), label
    start = threading.Barrier(THREADS)
    # Even threads decode in one order (the same payload at the same moment), odd threads in their own.
    orders = [list(range(len(PAYLOADS))) * ROUNDS for _ in range(THREADS)]
    for t in range(1, THREADS, 2):
        random.Random(t).shuffle(orders[t])

    def work(order: list[int]) -> list[tuple[int, SamplingMask]]:
        start.wait()
        return _decode_all(order)

    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(work, orders))
    checked = 0
    for per_thread in results:
        for i, mask in per_thread:
            label = PAYLOADS[i][0]
            assert mask == expected[i], f"{label}: a concurrent decode differs"
            assert mask.is_canonical == expected[i].is_canonical, label
            checked += 1
    assert checked == THREADS * ROUNDS * len(PAYLOADS)
    for (label, payload, _), before in zip(PAYLOADS, snapshots, strict=True):
        assert bytes(payload) == before, f"{label}: the payload changed"


def test_threads_share_one_mask_safely() -> None:
    """Lazy caches (``is_canonical``) and derived views computed from one mask in 8 threads agree."""
    mask = sampling_mask.codecs.decode(sampling_mask.codecs.encode(MASKS[1], "msgpack"), format="msgpack")
    reference: dict[str, Any] = {
        "canonical": MASKS[1].canonical().ids.tolist(),
        "dense": MASKS[1].to_dense().tolist(),
        "rows": MASKS[1].to_rows(),
    }
    start = threading.Barrier(THREADS)

    def work(_: int) -> dict[str, Any]:
        start.wait()
        return {
            "canonical": mask.canonical().ids.tolist(),
            "dense": mask.to_dense().tolist(),
            "rows": mask.to_rows(),
        }

    with ThreadPoolExecutor(THREADS) as pool:
        for result in pool.map(work, range(THREADS)):
            assert result == reference


@pytest.mark.parametrize("fmt", ["msgpack", "arrow", "arrows"])
def test_a_writable_input_buffer_cannot_change_a_decoded_mask(fmt: str) -> None:
    if fmt != "msgpack":
        pytest.importorskip("pyarrow")
    mask = SamplingMask.from_rows([[1000001, 1000002], [1000003]])
    data = sampling_mask.encode(mask, fmt)
    buf = bytearray(data)
    decoded = sampling_mask.decode(buf, format=fmt)
    at = bytes(buf).find(struct.pack("<3i", 1000001, 1000002, 1000003))
    assert at > 0
    buf[at : at + 4] = struct.pack("<i", 7)
    assert decoded == mask and not decoded.ids.flags.writeable
    with pytest.raises(ValueError):
        decoded.ids[0] = 7
    # bytes are immutable: zero-copy views; copy=True: the mask owns its arrays
    view = np.frombuffer(data, np.uint8)
    assert np.shares_memory(sampling_mask.decode(data, format=fmt).ids, view)
    assert not np.shares_memory(sampling_mask.decode(data, format=fmt, copy=True).ids, view)
