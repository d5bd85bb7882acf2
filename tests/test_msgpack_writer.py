"""The msgpack envelope's own writer (issue 37): byte for byte what msgpack-python writes, no msgpack needed.

``codecs/_msgpack_writer.py`` replaced ``msgpack.Packer`` for the envelope's header maps. msgpack-python
is the reference here: every value and every envelope shape the codec writes is compared with its
bytes (``msgpack.packb(msgpack.unpackb(data), use_bin_type=True)`` repacks an envelope as it did
before), the conformance vectors' payloads (packed by msgpack-python) are rewritten identically, and
the codec works in a fresh interpreter where ``import msgpack`` is refused.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.codecs import _msgpack_writer
from sampling_mask.codecs import msgpack as envelope

msgpack = pytest.importorskip("msgpack")  # the reference these tests compare with

ROOT = Path(__file__).resolve().parents[1]
#: Integers where msgpack-python changes the width of its encoding, and one past each.
INT_EDGES = sorted(
    {e + d for e in (0, 127, 255, 65535, 2**32 - 1, 2**63 - 1, 2**64 - 1) for d in (-1, 0, 1) if 0 <= e + d < 2**64}
    | {e + d for e in (-32, -128, -(2**15), -(2**31), -(2**63)) for d in (-1, 0, 1) if e + d >= -(2**63)}
)
#: Lengths where a str / bin / array / map header changes width.
LENGTH_EDGES = (0, 15, 16, 31, 32, 255, 256, 65535, 65536)
#: In a fresh interpreter: ``import msgpack`` fails, as where the package is not installed.
BLOCK_MSGPACK = textwrap.dedent(
    """
    import sys

    class RefuseMsgpack:
        def find_spec(self, name, path=None, target=None):
            if name == "msgpack" or name.startswith("msgpack."):
                raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)", name=name)
            return None

    sys.meta_path.insert(0, RefuseMsgpack())
    for name in [m for m in sys.modules if m == "msgpack" or m.startswith("msgpack.")]:
        del sys.modules[name]
    try:
        import msgpack
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("msgpack imported despite the block")
    """
)


def reference(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def repacked(data: bytes) -> bytes:
    """msgpack-python's bytes for the same envelope: parsed (key order kept) and packed again."""
    return reference(msgpack.unpackb(data, raw=False))


# ---------------------------------------------------------------------------- single values
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(INT_EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(max_size=300),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=20), st.tuples(inner, inner), st.dictionaries(st.text(max_size=8), inner, max_size=20)
    ),
    max_leaves=40,
)


@given(VALUES)
def test_every_value_is_written_as_msgpack_python_writes_it(value: Any) -> None:
    assert _msgpack_writer.pack(value) == reference(value)


@pytest.mark.parametrize("value", INT_EDGES, ids=str)
def test_integer_width_edges(value: int) -> None:
    assert _msgpack_writer.pack(value) == reference(value)
    assert msgpack.unpackb(_msgpack_writer.pack(value)) == value


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, 1e-310, 3.4028235e38, 1e300, math.inf, -math.inf, math.nan])
def test_every_float_is_float64(value: float) -> None:
    data = _msgpack_writer.pack(value)
    assert data == reference(value) and data[0] == 0xCB and len(data) == 9


@pytest.mark.parametrize("size", LENGTH_EDGES)
def test_length_header_edges(size: int) -> None:
    for value in ("x" * size, "é" * (size // 2), b"\x00" * size, list(range(size)), {str(i): i for i in range(size)}):
        assert _msgpack_writer.pack(value) == reference(value)
    assert _msgpack_writer.map_header(size) + b"".join(
        reference(str(i)) + reference(i) for i in range(size)
    ) == reference({str(i): i for i in range(size)})
    assert _msgpack_writer.bin_header(size) + b"\x00" * size == reference(b"\x00" * size)


def test_subclasses_are_written_as_their_base_type() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 300

    class Name(str):
        pass

    for value in (
        Level.HIGH,
        Name("top_k"),
        np.float64(0.25),
        {Name("k"): Level.HIGH},
        memoryview(b"ab"),
        bytearray(b"c"),
    ):
        assert _msgpack_writer.pack(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [2**64, -(2**63) - 1, 10**30, "\ud800", "a\udfffb", object(), {1, 2}, np.int64(3), [1, object()], {"k": {"x": 1j}}],
    ids=repr,
)
def test_what_msgpack_python_refuses_is_e_range(value: Any) -> None:
    with pytest.raises((OverflowError, TypeError, ValueError)):
        reference(value)  # msgpack-python refuses it too
    with pytest.raises(SamplingMaskError) as info:
        _msgpack_writer.pack(value, field="metadata")
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "metadata"


def test_nesting_depth_matches_msgpack_python_and_uses_no_recursion() -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for level in range(depth):
            value = [value] if level % 2 else {"k": value}
        return value

    deepest = nested(_msgpack_writer.MAX_DEPTH)
    assert _msgpack_writer.pack(deepest) == reference(deepest)
    for depth in (_msgpack_writer.MAX_DEPTH + 1, 50_000):  # far past Python's recursion limit
        with pytest.raises(ValueError):
            reference(nested(depth))
        with pytest.raises(SamplingMaskError) as info:
            _msgpack_writer.pack(nested(depth))
        assert info.value.code is ErrorCode.E_RANGE


# ---------------------------------------------------------------------------- whole envelopes
METADATA_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from(INT_EDGES),
    st.floats(),
    st.text(st.characters(blacklist_categories=("Cs",))),  # lone surrogates: refused by the model
)
#: Keys with no type the model prescribes (``top_k`` must be an int, ...).
METADATA = st.dictionaries(st.text(max_size=40).map(lambda k: f"x-{k}"), METADATA_VALUES, max_size=20)
ROWS = st.lists(st.lists(st.integers(0, 40), max_size=6, unique=True), max_size=12)


@st.composite
def masks(draw: st.DrawFn) -> SamplingMask:
    rows = draw(ROWS)
    n = len(rows)
    fields: dict[str, Any] = {"vocab_size": draw(st.sampled_from([None, 41, 70_000, 16_777_216]))}
    if n and draw(st.booleans()):
        cut = draw(st.integers(0, n))
        fields["cu_seqlens"] = [0, cut, n]
    floats = st.floats(-100, 0, width=32)
    if draw(st.booleans()):
        fields["sampled_token_ids"] = [draw(st.sampled_from(r)) if r else -1 for r in rows]
    if draw(st.booleans()):
        fields["sampled_logprobs"] = np.array(draw(st.lists(floats, min_size=n, max_size=n)), np.float32)
    if draw(st.booleans()):
        fields["temperature"] = np.array(
            draw(st.lists(st.floats(0.125, 2, width=32), min_size=n, max_size=n)), np.float32
        )
    if draw(st.booleans()):
        nnz = sum(map(len, rows))
        fields["support_logprobs"] = np.array(draw(st.lists(floats, min_size=nnz, max_size=nnz)), np.float32)
    return SamplingMask.from_rows(rows, metadata=draw(METADATA), **fields)


OPTIONS = st.sampled_from(
    [
        {},
        {"offsets_dtype": "int64"},
        {"offsets_dtype": "int32"},
        {"counts": True},
        {"layout": "dense"},
        {"layout": "dense", "width": 8},
        {"layout": "compact"},
    ]
)


@given(masks(), OPTIONS)
def test_every_envelope_is_what_msgpack_python_writes(mask: SamplingMask, options: dict[str, Any]) -> None:
    data = envelope.encode(mask, **options)
    assert data == repacked(data)
    frames = envelope.encode_frames(mask, **{"offsets_dtype": None, **options})
    assert b"".join(bytes(f) for f in frames) == data
    buffer = bytearray(len(data) + 7)
    assert envelope.encode_into(mask, buffer, **options) == len(data) and bytes(buffer[: len(data)]) == data
    assert sm.decode(data) == mask


def test_large_arrays_padding_and_every_bin_width() -> None:
    """Arrays of bin 8, 16 and 32 (over 64 KiB), padded from 4 KiB, and metadata at the edges."""
    rng = np.random.default_rng(37)
    lengths = rng.integers(0, 9, 30_000)
    ids = np.concatenate([rng.choice(151_936, k, replace=False) for k in lengths]).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    metadata = {"x-max": 2**64 - 1, "x-min": -(2**63), "x-nan": math.nan, "x-text": "é" * 300, "x-none": None}
    big = SamplingMask(ids, offsets, cu_seqlens=[0, 10, 3000, 30_000], vocab_size=151_936, metadata=metadata)
    masks = [big, big.segment(0), big.segment(1), SamplingMask.from_rows([[]] * 2000)]
    for mask in masks:
        for options in ({}, {"offsets_dtype": "int64"}, {"counts": True}, {"layout": "compact"}):
            data = envelope.encode(mask, **options)
            assert data == repacked(data)
    assert {_msgpack_writer.bin_header(m.ids.nbytes)[0] for m in masks[:3]} == {0xC4, 0xC5, 0xC6}


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (2**64 - 1, True),
        (-(2**63), True),
        (2**64, False),
        (-(2**63) - 1, False),
        (True, True),
        (None, True),
        (math.inf, True),
        ("🙂", True),
    ],
    ids=repr,
)
def test_metadata_values_at_the_edges(value: Any, ok: bool) -> None:
    """What msgpack-python wrote is written the same; what it refused is ``E_RANGE`` on metadata."""
    mask = SamplingMask.from_rows([[1]], metadata={"x-value": value})
    if ok:
        data = envelope.encode(mask)
        assert data == repacked(data) and sm.decode(data) == mask
        return
    with pytest.raises(SamplingMaskError) as info:
        envelope.encode(mask)
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "metadata"
    with pytest.raises(OverflowError):
        reference({"x-value": value})


def test_the_model_refuses_what_no_writer_sees() -> None:
    """Surrogates, nested maps and lists never reach the writer: the model refuses them first."""
    for metadata, code in (({"k": "\ud800"}, ErrorCode.E_ENCODING), ({"k": {"a": 1}}, ErrorCode.E_SCHEMA)):
        with pytest.raises(SamplingMaskError) as info:
            SamplingMask.from_rows([[1]], metadata=metadata)
        assert info.value.code is code
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_rows([[1]], metadata={"k": [1]})
    assert info.value.code is ErrorCode.E_SCHEMA


# ---------------------------------------------------------------------------- conformance vectors
def _vector_payloads() -> list[tuple[str, bytes]]:
    found = []
    for path in sorted((ROOT / "conformance" / "v1").rglob("*.json")):
        suite = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(suite, dict) or suite.get("form") != "msgpack":
            continue
        for case in suite["cases"]:
            if isinstance(case.get("input"), dict) and "hex" in case["input"]:
                found.append((case["id"], bytes.fromhex(case["input"]["hex"])))
    return found


VECTORS = _vector_payloads()
#: Payloads that are not one msgpack value, or that msgpack-python parses into something else.
NOT_REPACKABLE = {"msgpack.truncated", "msgpack.not-msgpack", "msgpack.trailing-bytes", "msgpack.invalid-utf8"}
NOT_REPACKABLE |= {"msgpack.ext-type", "msgpack.duplicate-key"}  # an ext value; a map that parses shorter


def test_the_vectors_hold_msgpack_payloads() -> None:
    ids = {case_id for case_id, _ in VECTORS}
    assert len(VECTORS) >= 40 and NOT_REPACKABLE <= ids


REPACKABLE = [(case_id, data) for case_id, data in VECTORS if case_id not in NOT_REPACKABLE]


@pytest.mark.parametrize(("case_id", "data"), REPACKABLE, ids=[case_id for case_id, _ in REPACKABLE])
def test_every_vector_payload_is_rewritten_byte_for_byte(case_id: str, data: bytes) -> None:
    """The vectors were packed by msgpack-python: parsed and written again here, they are unchanged."""
    value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    assert _msgpack_writer.pack(value) == data


def test_valid_vector_envelopes_reencode_identically() -> None:
    """A vector the encoder writes itself (decoded and encoded again with the options it names, it
    parses to the same map) is byte-identical; the others carry keys, dtypes or orders that no
    encoder option writes."""
    matched = []
    for case_id, data in VECTORS:
        try:
            mask = sm.decode(data, format="msgpack")
        except SamplingMaskError:
            continue
        env = msgpack.unpackb(data, raw=False)
        options: dict[str, Any] = {}
        if "offsets" in env and isinstance(env["offsets"], dict):
            options["offsets_dtype"] = env["offsets"]["dtype"]
        if env.get("layout") in envelope.LAYOUTS:
            options["layout"] = env["layout"]
        if env.get("counts") is not None:
            options["counts"] = True
        ours = envelope.encode(mask, **options)
        if msgpack.unpackb(ours, raw=False) == env:
            assert ours == data, case_id
            matched.append(case_id)
    assert len(matched) >= 3, matched


# ---------------------------------------------------------------------------- without msgpack
def _run_blocked(code: str, *, cwd: Path, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter where ``import msgpack`` fails (``-I``: this checkout not on the path)."""
    args = [sys.executable, *(["-I"] if isolated else []), "-c", BLOCK_MSGPACK + code]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


MASK_CODE = """
import numpy as np
rng = np.random.default_rng(5)
lengths = rng.integers(0, 6, 3000)
ids = np.concatenate([rng.choice(1000, k, replace=False) for k in lengths]).astype(np.int32)
offsets = np.concatenate([[0], np.cumsum(lengths)])
sampled = np.where(lengths > 0, ids[np.minimum(offsets[:-1], ids.size - 1)], -1).astype(np.int32)
fields = dict(cu_seqlens=[0, 1000, 3000], vocab_size=1000, sampled_token_ids=sampled,
              temperature=np.full(3000, 0.7, np.float32), metadata={"top_k": 5, "top_p": 0.9, "producer": "t"})
"""


def _expected() -> SamplingMask:
    namespace: dict[str, Any] = {}
    exec(MASK_CODE, namespace)  # the test's own constant: the code the child runs
    return SamplingMask(namespace["ids"], namespace["offsets"], **namespace["fields"])


@pytest.mark.slow
def test_the_package_encodes_msgpack_without_msgpack(tmp_path: Path) -> None:
    code = MASK_CODE + textwrap.dedent(
        """
        import sampling_mask
        from sampling_mask.codecs import msgpack as envelope
        mask = sampling_mask.SamplingMask(ids, offsets, **fields)
        data = sampling_mask.encode(mask, "msgpack")
        assert b"".join(bytes(f) for f in sampling_mask.codecs.encode_frames(mask)) == envelope.encode(
            mask, offsets_dtype="int64")
        buffer = bytearray(len(data))
        assert envelope.encode_into(mask, buffer) == len(data) and bytes(buffer) == data
        assert sampling_mask.decode(data) == mask
        sampling_mask.save(mask, "m.msgpack")
        assert "msgpack" not in sys.modules
        print(data.hex())
        """
    )
    proc = _run_blocked(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = bytes.fromhex(proc.stdout.strip())
    mask = _expected()
    assert data == sm.encode(mask, "msgpack") == repacked(data) == (tmp_path / "m.msgpack").read_bytes()


@pytest.mark.slow
def test_a_vendored_msgpack_copy_encodes_without_msgpack(tmp_path: Path) -> None:
    from sampling_mask.cli import main

    assert main(["-q", "vendor", str(tmp_path / "srv" / "_sm"), "--package", "srv._sm", "--codecs", "msgpack"]) == 0
    manifest = json.loads((tmp_path / "srv" / "_sm" / "VENDORED.json").read_text())
    assert manifest["needs"] == {"core": ["numpy"], "msgpack": ["numpy"]}
    code = MASK_CODE + textwrap.dedent(
        f"""
        sys.path.insert(0, {str(tmp_path)!r})
        from srv._sm import SamplingMask, decode, encode
        from srv._sm.codecs import msgpack as envelope
        mask = SamplingMask(ids, offsets, **fields)
        data = encode(mask, "msgpack")
        assert data == envelope.encode(mask) and decode(data) == mask
        assert "msgpack" not in sys.modules and "sampling_mask" not in sys.modules
        from srv._sm.core.optional import UnavailableError
        print(UnavailableError("pyarrow", what="parquet encoding"))
        print(data.hex())
        """
    )
    proc = _run_blocked(code, cwd=tmp_path, isolated=True)
    assert proc.returncode == 0, proc.stderr
    message, hexdata = proc.stdout.strip().splitlines()
    assert message.endswith("(pip install pyarrow)") and "sampling-mask[" not in message
    data = bytes.fromhex(hexdata)
    mask = _expected()
    assert data == sm.encode(mask, "msgpack") == repacked(data)
    assert sm.decode(data) == mask
