"""The msgpack envelope's own header writer against the ``msgpack.Packer`` path it replaced.

    python benchmarks/bench_msgpack_writer.py [--tokens 1000000] [--repeats 15]

Workload: ``sampling_mask.data.synthetic.rollout(N)`` (1M tokens by default, with its companions and
metadata), encoded with the default options. "own writer" is ``codecs.msgpack.encode``, whose header
maps are written by ``codecs/_msgpack_writer.py``; "msgpack.Packer" is the encoder as it was before
(the same envelope, its headers packed by ``msgpack.Packer(use_bin_type=True)``, below), checked to
give the same bytes first. Both run round-robin after a warm-up (``sampling_mask.cli.bench.race``); the
figure is the ratio of the medians, own / Packer (target: at most 1.05). The same for
``encode_frames`` (no array copy, so the header writer is all of the work: an absolute time, whose target
is 0.1 ms). Needs the ``msgpack`` package, for the old path only.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np

from sampling_mask import SamplingMask
from sampling_mask.cli import bench
from sampling_mask.codecs import msgpack as envelope
from sampling_mask.data import synthetic

TARGET = 1.05
ALIGN, PAD_FROM = envelope.ALIGN, envelope.PAD_FROM


def packer_frames(env: Mapping[str, Any]) -> list[Any]:
    """The frames of the envelope as ``codecs/msgpack.py`` wrote them with ``msgpack.Packer`` (verbatim but
    for names): the headers by ``msgpack.Packer``, every array a memoryview frame."""
    packer = msgpack.Packer(use_bin_type=True, use_single_float=False)
    frames: list[Any] = []
    head: list[bytes] = [packer.pack_map_header(len(env))]
    written = 0

    def bin_header(nbytes: int) -> bytes:  # the old module's own struct-packed bin header
        if nbytes < 1 << 8:
            return struct.pack(">BB", 0xC4, nbytes)
        return struct.pack(">BH", 0xC5, nbytes) if nbytes < 1 << 16 else struct.pack(">BI", 0xC6, nbytes)

    def data(value: Any, nbytes: int) -> None:
        nonlocal written
        head.append(bin_header(nbytes))
        frames.append(b"".join(head))
        frames.append(value)
        written += len(frames[-2]) + nbytes
        head.clear()

    for key, value in env.items():
        head.append(packer.pack(key))
        if isinstance(value, tuple):  # an ARRAY: (dtype, shape, data)
            dtype, shape, view = value
            pad = view.nbytes >= PAD_FROM
            head += [packer.pack_map_header(4 if pad else 3), packer.pack("dtype"), packer.pack(dtype)]
            head += [packer.pack("shape"), packer.pack(shape)]
            if pad:
                start = written + sum(map(len, head)) + 2 + len(b"\xa3pad") + len(b"\xa4data")
                size = -(start + len(bin_header(view.nbytes))) % ALIGN
                head += [b"\xa3pad", bytes((0xC4, size)), bytes(size)]
            head.append(b"\xa4data")
            data(view, view.nbytes)
        else:
            head.append(packer.pack(value))
    if head:
        frames.append(b"".join(head))
    return frames


def _array(arr: np.ndarray) -> tuple[str, list[int], memoryview]:
    arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return arr.dtype.name, list(arr.shape), arr.reshape(-1).view(np.uint8).data


def packer_envelope(mask: SamplingMask, offsets_dtype: str | None = None) -> dict[str, Any]:
    """The default ragged envelope of ``mask`` (as ``encode`` builds it), arrays as (dtype, shape, view)."""
    fits32 = max(mask.nnz, mask.num_rows) <= np.iinfo(np.int32).max
    index = np.dtype(offsets_dtype or ("int32" if fits32 else "int64"))
    env: dict[str, Any] = {
        "sampling_mask": 1,
        "layout": "ragged",
        "vocab_size": mask.vocab_size,
        "id_order": "ascending" if mask.is_canonical else "unspecified",
        "num_rows": mask.num_rows,
        "nnz": mask.nnz,
        "ids": _array(mask.ids),
        "offsets": _array(mask.stored_offsets.astype(index, copy=False)),
    }
    if mask.num_segments != 1:
        env["cu_seqlens"] = _array(mask.cu_seqlens.astype(index, copy=False))
    for name, arr in mask.companions.items():
        env[name] = _array(arr)
    if mask.metadata:
        env["metadata"] = dict(mask.metadata)
    return env


def packer_encode(mask: SamplingMask) -> bytes:
    return b"".join(packer_frames(packer_envelope(mask)))


def packer_encode_frames(mask: SamplingMask) -> list[Any]:
    return packer_frames(packer_envelope(mask, "int64"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    mask = synthetic.rollout(args.tokens)
    own = envelope.encode(mask)
    assert own == packer_encode(mask), "the own writer and msgpack.Packer disagree"
    assert [bytes(f) for f in envelope.encode_frames(mask)] == [bytes(f) for f in packer_encode_frames(mask)]
    print(f"workload: synthetic.rollout({args.tokens:,}): {mask.num_rows:,} rows, {mask.nnz:,} ids, ", end="")
    print(f"{mask.num_segments} segments, companions {sorted(mask.companions)}; envelope {len(own):,} bytes")
    print(f"msgpack-python {msgpack.version}, numpy {np.__version__}; median of {args.repeats}, round-robin")
    # Two races: after a 48 MB copy the caches are cold, which would tax whichever frames call came next.
    times = bench.race(
        {"encode, own writer": lambda: envelope.encode(mask), "encode, msgpack.Packer": lambda: packer_encode(mask)},
        args.repeats,
    )
    times |= bench.race(
        {
            "encode_frames, own writer": lambda: envelope.encode_frames(mask),
            "encode_frames, msgpack.Packer": lambda: packer_encode_frames(mask),
        },
        args.repeats,
    )
    for name, seconds in times.items():
        print(f"  {name:32s} {seconds * 1e3:10.4f} ms")
    ratio = times["encode, own writer"] / times["encode, msgpack.Packer"]
    frames_ratio = times["encode_frames, own writer"] / times["encode_frames, msgpack.Packer"]
    verdict = "meets" if ratio <= TARGET else "MISSES"
    print(f"encode: own writer / msgpack.Packer = {ratio:.3f}x (target <= {TARGET}x: {verdict})")
    print(f"encode_frames: own writer / msgpack.Packer = {frames_ratio:.3f}x (headers only, no array copy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
