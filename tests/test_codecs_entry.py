"""The one entry point: encode / decode / save / load, detection by content and extension, round trips."""

from __future__ import annotations

import doctest
import math
import os
import subprocess
import sys

import mask_examples
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mask_examples import SAMPLE_METADATA

import sampling_mask
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError, codecs
from sampling_mask.conformance.strategies import masks

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

LOSSLESS = ("arrow", "arrows", "parquet", "msgpack", "json")
ROWS_ONLY = ("json-rows", "base64")
VARIANTS = [  # (format, encode options): every lossless wire variant
    ("arrow", {}),
    ("arrow", {"compression": "zstd"}),
    ("arrow", {"layout": "compact"}),
    ("arrows", {}),
    ("arrows", {"compression": "lz4"}),
    ("parquet", {}),
    ("parquet", {"layout": "compact"}),
    ("msgpack", {}),
    ("msgpack", {"layout": "dense"}),
    ("msgpack", {"layout": "compact"}),
    ("msgpack", {"offsets_dtype": "int32"}),
    ("json", {}),
]
EXTENSION_OF = {"arrow": ".arrow", "arrows": ".arrows", "parquet": ".parquet", "msgpack": ".msgpack", "json": ".json"}


def sample_mask() -> SamplingMask:
    """The shared full example, with a NaN temperature and typed metadata (bool, null, float)."""
    return mask_examples.sample_mask(
        temperature=(1.0, 0.7, math.nan, 2.0), metadata={**SAMPLE_METADATA, "flag": True, "none": None, "ratio": 2.0}
    )


def test_formats_and_extensions() -> None:
    assert codecs.FORMATS == ("arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64")
    for ext, fmt in {".arrow": "arrow", ".arrows": "arrows", ".parquet": "parquet", ".msgpack": "msgpack"}.items():
        assert codecs.format_for_path(f"/tmp/x{ext}") == fmt
        assert codecs.format_for_path(f"X{ext.upper()}") == fmt
    assert codecs.format_for_path("a.json") == "json"
    with pytest.raises(SamplingMaskError) as err:
        codecs.format_for_path("mask.bin")
    assert err.value.code == ErrorCode.E_SCHEMA


@pytest.mark.parametrize(("fmt", "opts"), VARIANTS)
def test_detect_and_decode_by_content(fmt: str, opts: dict) -> None:
    mask = sample_mask()
    data = codecs.encode(mask, fmt, **opts)
    assert codecs.detect_format(data) == fmt
    assert codecs.decode(data) == mask
    assert sampling_mask.decode(data, format=fmt) == mask


def test_detect_json_forms() -> None:
    rows = SamplingMask.from_rows([[3, 1], [], [2]])
    assert codecs.detect_format(codecs.encode(rows, "json-rows")) == "json-rows"
    assert codecs.detect_format(codecs.encode(rows, "base64")) == "base64"
    assert codecs.detect_format(codecs.encode(rows, "json")) == "json"
    assert codecs.detect_format(" \n[[1]]") == "json-rows"
    assert codecs.detect_format(b"\xef\xbb\xbf[[1]]") == "json-rows"


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.E_ENCODING),
        (b"hello", ErrorCode.E_ENCODING),
        (b"\x81\xa1a\x01", ErrorCode.E_ENCODING),  # a msgpack map, but not ours
        (b'{"x": 1}', ErrorCode.E_SCHEMA),
        (12, ErrorCode.E_ENCODING),
    ],
)
def test_undetectable_input(data: object, code: ErrorCode) -> None:
    with pytest.raises(SamplingMaskError) as err:
        codecs.decode(data)
    assert err.value.code == code


def test_unknown_format_name() -> None:
    mask = sample_mask()
    for call in (lambda: codecs.encode(mask, "xml"), lambda: codecs.decode(b"{}", format="xml")):
        with pytest.raises(SamplingMaskError) as err:
            call()
        assert err.value.code == ErrorCode.E_SCHEMA


def test_str_input_only_for_json() -> None:
    with pytest.raises(SamplingMaskError) as err:
        codecs.decode("ARROW1", format="arrow")
    assert err.value.code == ErrorCode.E_ENCODING
    assert codecs.decode('{"sampling_mask": 1, "rows": [[2]]}').to_rows() == [[2]]


@pytest.mark.parametrize(("fmt", "opts"), VARIANTS)
def test_save_load_by_extension(tmp_path, fmt: str, opts: dict) -> None:
    mask = sample_mask()
    path = tmp_path / f"mask{EXTENSION_OF[fmt]}"
    sampling_mask.save(mask, path, **opts)
    assert codecs.detect_format(path.read_bytes()) == fmt
    assert sampling_mask.load(path) == mask
    assert sampling_mask.load(str(path), format=fmt) == mask
    assert [os.path.basename(p) for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_load_unknown_extension_detects_content(tmp_path) -> None:
    mask = sample_mask()
    for fmt in LOSSLESS:
        path = tmp_path / f"mask-{fmt}.bin"
        codecs.save(mask, path, format=fmt)
        assert codecs.load(path) == mask
        assert [codecs.detect_format(path.read_bytes())] == [fmt]


def test_json_extension_accepts_every_json_form(tmp_path) -> None:
    rows = SamplingMask.from_rows([[4, 2], [], [9]])
    for fmt in ("json", "json-rows", "base64"):
        path = tmp_path / f"{fmt}.json"
        codecs.save(rows, path, format=fmt)
        assert codecs.load(path) == rows
        assert codecs.load(path, format=fmt) == rows


def test_save_is_atomic(tmp_path) -> None:
    path = tmp_path / "mask.msgpack"
    good = sample_mask()
    codecs.save(good, path)
    before = path.read_bytes()
    unencodable = good.replace(metadata={"huge": 1 << 70})  # msgpack ints stop at 64 bits
    with pytest.raises(SamplingMaskError) as err:
        codecs.save(unencodable, path)
    assert err.value.code == ErrorCode.E_RANGE
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mask.msgpack"]
    arrow_path = tmp_path / "mask.arrow"
    codecs.save(good, arrow_path)
    arrow_before = arrow_path.read_bytes()
    with pytest.raises(SamplingMaskError):
        codecs.save(good, arrow_path, extra_columns={"reward": [1.0]})  # wrong length: fails mid-write
    assert arrow_path.read_bytes() == arrow_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mask.arrow", "mask.msgpack"]


def test_missing_file_is_an_os_error(tmp_path) -> None:
    for name in ("none.arrow", "none.msgpack", "none.bin"):
        with pytest.raises(FileNotFoundError):
            codecs.load(tmp_path / name)


def test_empty_file_is_bad_input(tmp_path) -> None:
    for name in ("e.arrow", "e.arrows", "e.parquet", "e.msgpack", "e.json"):
        path = tmp_path / name
        path.write_bytes(b"")
        with pytest.raises(SamplingMaskError) as err:
            codecs.load(path)
        assert err.value.code == ErrorCode.E_ENCODING, name


def test_load_checks_file_size_against_limits(tmp_path) -> None:
    path = tmp_path / "m.json"
    codecs.save(sample_mask(), path)
    with pytest.raises(SamplingMaskError) as err:
        codecs.load(path, limits=sampling_mask.DEFAULT_LIMITS.replace(max_bytes=16))
    assert err.value.code == ErrorCode.E_LIMIT


def test_iter_masks_and_open_writer(tmp_path) -> None:
    parts = [sample_mask(), sample_mask()[1:3], sample_mask()[0:0]]
    parts = [p.replace(metadata=parts[0].metadata) for p in parts]
    for ext in (".arrow", ".arrows", ".parquet"):
        path = tmp_path / f"stream{ext}"
        with codecs.open_writer(path) as writer:
            for part in parts:
                writer.write(part)
        got = list(codecs.iter_masks(path))
        assert got == parts, ext
        assert codecs.load(path) == sampling_mask.concat(parts)
        assert list(codecs.iter_masks(path.read_bytes())) == parts
    single = tmp_path / "one.msgpack"
    codecs.save(parts[0], single)
    assert list(codecs.iter_masks(single)) == [parts[0]]
    assert list(codecs.iter_masks(single.read_bytes())) == [parts[0]]
    with pytest.raises(SamplingMaskError) as err:
        codecs.open_writer(tmp_path / "x.json")
    assert err.value.code == ErrorCode.E_SCHEMA


def test_import_stays_light() -> None:
    code = (
        "import sys, sampling_mask;"
        "heavy = [m for m in ('pyarrow', 'msgpack', 'torch') if m in sys.modules];"
        "assert not heavy, heavy;"
        "assert callable(sampling_mask.encode) and callable(sampling_mask.load);"
        "assert 'pyarrow' not in sys.modules and 'msgpack' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_metadata_value_types_survive_every_format() -> None:
    metadata = {"i": 1, "f": 1.0, "b": False, "s": "1", "n": None, "nan": math.nan, "inf": -math.inf, "big": 2**62}
    mask = SamplingMask.from_rows([[1], [0, 2]], vocab_size=3, metadata=metadata)
    for fmt, opts in VARIANTS:
        got = codecs.decode(codecs.encode(mask, fmt, **opts)).metadata
        assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in metadata.items()}, fmt
        assert got["i"] == 1 and got["s"] == "1" and got["big"] == 2**62 and math.isnan(got["nan"])
        assert got["inf"] == -math.inf, fmt


@given(mask=masks(max_rows=10, max_width=6))
def test_any_mask_round_trips_through_every_lossless_format_as_bytes(mask: SamplingMask) -> None:
    for fmt, opts in VARIANTS:
        data = codecs.encode(mask, fmt, **opts)
        got = codecs.decode(data)
        assert got == mask, (fmt, opts)
        if fmt != "msgpack" or opts.get("layout", "ragged") == "ragged":
            if opts.get("layout") != "compact":
                assert np.array_equal(got.ids, mask.ids), (fmt, opts)  # stored order kept too


@given(mask=masks(max_rows=8, max_width=5), fmt=st.sampled_from(LOSSLESS))
def test_any_mask_round_trips_through_files(tmp_path_factory, mask: SamplingMask, fmt: str) -> None:
    path = tmp_path_factory.mktemp("rt") / f"mask{EXTENSION_OF[fmt]}"
    codecs.save(mask, path)
    assert codecs.load(path) == mask
    streamed = list(codecs.iter_masks(path))
    assert streamed == [mask] or (mask.num_segments == 0 and streamed == [])


@given(mask=masks(max_rows=10, max_width=6, companions=False, metadata=False), fmt=st.sampled_from(ROWS_ONLY))
def test_rows_only_forms_keep_rows_and_refuse_silent_loss(tmp_path_factory, mask: SamplingMask, fmt: str) -> None:
    plain = SamplingMask.from_ragged(mask.ids, mask.offsets)
    assert codecs.decode(codecs.encode(plain, fmt), format=fmt) == plain
    path = tmp_path_factory.mktemp("rows") / "mask.json"
    codecs.save(plain, path, format=fmt)
    assert codecs.load(path) == plain
    assert codecs.decode(codecs.encode(plain, fmt)).to_rows() == plain.to_rows()
    loses = mask.num_segments != 1 or mask.vocab_size is not None
    if loses:
        with pytest.raises(SamplingMaskError) as err:
            codecs.encode(mask, fmt)
        assert err.value.code == ErrorCode.E_SCHEMA
    assert codecs.decode(codecs.encode(mask, fmt, allow_loss=True)).same_support(plain)


def test_fixed_edge_masks_round_trip() -> None:
    edge = [
        SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=np.zeros(1, np.int64)),  # B = 0
        SamplingMask.from_rows([]),  # one empty segment
        SamplingMask.from_rows([[], []], cu_seqlens=[0, 0, 2, 2]),  # empty rows and segments
        SamplingMask.from_rows([[0]], vocab_size=1, sampled_token_ids=[0]),
    ]
    for mask in edge:
        for fmt, opts in VARIANTS:
            assert codecs.decode(codecs.encode(mask, fmt, **opts), format=fmt) == mask, (mask, fmt, opts)


def test_codec_docstring_examples() -> None:
    from sampling_mask.codecs import arrow, json, msgpack

    for module in (codecs, arrow, json, msgpack):
        failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert failed == 0, module.__name__
