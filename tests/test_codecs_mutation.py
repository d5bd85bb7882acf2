"""Corrupted payloads of every format: only SamplingMaskError may escape a decoder.

Seeded truncations, byte flips, insertions, deletions and chunk duplications of small valid payloads;
each variant is decoded with its format named and with detection by content. A decode that
succeeds must return a mask that passes full validation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mask_examples import sample_mask

from sampling_mask import SamplingMask, SamplingMaskError, codecs

VARIANTS_PER_PAYLOAD = 160
PAYLOADS = [  # (format, encode options) of every payload kind that is mutated
    ("arrow", {}),
    ("arrow", {"compression": "zstd"}),
    ("arrow", {"layout": "compact"}),
    ("arrows", {}),
    ("arrows", {"compression": "lz4"}),
    ("parquet", {}),
    ("msgpack", {}),
    ("msgpack", {"layout": "dense"}),
    ("msgpack", {"layout": "compact"}),
    ("msgpack", {"offsets_dtype": "int32"}),
    ("json", {}),
    ("json-rows", {"allow_loss": True}),
    ("base64", {"allow_loss": True}),
]


def masks() -> list[SamplingMask]:
    full = sample_mask(metadata={"top_k": 3, "top_p": 0.95, "producer": "t", "x": None, "nan": math.nan})
    plain = SamplingMask.from_rows([[0, 4, 9], [1], [], [3, 2]], vocab_size=12)
    return [full, plain]


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    kind = int(rng.integers(5))
    n = len(data)
    pos = int(rng.integers(n))
    if kind == 0:  # truncation
        return data[:pos]
    if kind == 1:  # flip 1-4 bytes
        out = bytearray(data)
        for at in rng.integers(n, size=int(rng.integers(1, 5))):
            out[int(at)] ^= int(rng.integers(1, 256))
        return bytes(out)
    if kind == 2:  # insert random bytes
        return data[:pos] + rng.bytes(int(rng.integers(1, 9))) + data[pos:]
    if kind == 3:  # delete a range
        return data[:pos] + data[pos + int(rng.integers(1, 17)) :]
    chunk = data[pos : pos + int(rng.integers(1, 33))]  # duplicate a chunk
    return data[:pos] + chunk + data[pos:]


def _decode_all(data: bytes, fmt: str) -> int:
    decoded = 0
    for named in (fmt, None):
        try:
            mask = codecs.decode(data, format=named)
        except SamplingMaskError:
            continue
        mask.validate()
        decoded += 1
    return decoded


@pytest.mark.parametrize(("fmt", "opts"), PAYLOADS, ids=[f"{f}-{'-'.join(map(str, o.values()))}" for f, o in PAYLOADS])
def test_corrupted_payloads_raise_only_sampling_mask_errors(fmt: str, opts: dict) -> None:
    if opts.get("layout") == "compact":
        pytest.importorskip("sampling_mask.codecs.compact", reason="the compact codec is not in the tree")
    rng = np.random.default_rng(sum(map(ord, fmt + repr(opts))))
    for mask in masks():
        data = codecs.encode(mask, fmt, **opts)
        assert codecs.decode(data, format=fmt).canonical().to_rows() == mask.canonical().to_rows()
        for _ in range(VARIANTS_PER_PAYLOAD // 2):
            variant = _mutate(data, rng)
            try:
                _decode_all(variant, fmt)
            except SamplingMaskError:  # pragma: no cover - _decode_all catches these
                raise
            except Exception as exc:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{fmt} {opts}: {type(exc).__name__}: {exc} on variant {variant.hex()}")


def test_total_variant_count_is_thousands() -> None:
    assert len(PAYLOADS) * VARIANTS_PER_PAYLOAD * 2 >= 3000  # x2: named format and detection
