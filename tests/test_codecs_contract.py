"""One codec contract: one table knows every codec; every codec's ``encode`` / ``decode`` has
the same keyword-only signature, decodes only bytes-like input and honours ``limits``, ``validate``
and ``copy`` (or refuses a format that is not its own); a missing optional package is
``E_UNAVAILABLE`` naming the extra to install.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import sys
from typing import Any

import numpy as np
import pytest
from file_checks import raised_code

import sampling_mask as sm
from sampling_mask import ErrorCode, Limits, SamplingMask, SamplingMaskError, UnavailableError, codecs
from sampling_mask.cli import main
from sampling_mask.codecs import registry
from sampling_mask.core.optional import require

CODEC_NAMES = sorted(registry.CODECS)
LOSSY = {"json-rows", "base64"}


def _mask() -> SamplingMask:
    return SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3])


def _rows_mask() -> SamplingMask:
    return SamplingMask.from_rows([[5, 1], [], [7]])


def _module(name: str):  # type: ignore[no-untyped-def]
    if name == "arrow":
        pytest.importorskip("pyarrow")
    if name == "msgpack":
        pytest.importorskip("msgpack")
    return importlib.import_module(f"sampling_mask.codecs.{name}")


# ---------------------------------------------------------------------------- the table
def test_the_table_is_what_the_entry_points_use() -> None:
    assert codecs.FORMATS == registry.FORMATS == tuple(f for c in registry.CODECS.values() for f in c.formats)
    assert codecs.EXTENSIONS == registry.EXTENSIONS
    assert len(set(codecs.FORMATS)) == len(codecs.FORMATS)  # one codec per format
    for ext, fmt in codecs.EXTENSIONS.items():
        assert codecs.format_for_path(f"x{ext.upper()}") == fmt
    assert registry.held_formats() == codecs.FORMATS  # the library holds every codec


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_each_entry_names_a_module_its_formats_extra_and_files(name: str) -> None:
    codec = registry.CODECS[name]
    assert importlib.util.find_spec(f"sampling_mask.codecs.{name}") is not None
    for fmt in codec.formats:
        assert registry.codec_for(fmt) is codec
    assert set(codec.extensions.values()) <= set(codec.formats)
    for package, extra in zip(codec.packages, codec.extras, strict=True):
        assert sm.core.optional.EXTRAS[package] == extra
    if codec.files:
        assert f"{name}.py" in codec.files and "registry.py" in codec.files
        assert all(importlib.util.find_spec(f"sampling_mask.codecs.{f[:-3]}") for f in codec.files)
    else:
        assert codec.not_vendorable


@pytest.mark.parametrize("fmt", ["arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64"])
def test_detection_by_first_bytes_names_each_format(fmt: str) -> None:
    _module(registry.codec_for(fmt).name)
    mask = _rows_mask() if fmt in LOSSY else _mask()
    data = sm.encode(mask, fmt)
    assert codecs.detect_format(data) == fmt
    assert registry.sniff(data) == ("json" if fmt in registry.CODECS["json"].formats else fmt)


def test_unknown_format_and_unrecognised_bytes_are_errors() -> None:
    with pytest.raises(SamplingMaskError) as info:
        sm.encode(_mask(), "yaml")
    assert info.value.code is ErrorCode.E_SCHEMA and "one of" in info.value.message
    with pytest.raises(SamplingMaskError) as info:
        sm.decode(b"hello there")
    assert info.value.code is ErrorCode.E_ENCODING


# ---------------------------------------------------------------------------- one signature
@pytest.mark.parametrize("name", CODEC_NAMES)
def test_every_codec_has_the_same_keyword_only_signature(name: str) -> None:
    module = importlib.import_module(f"sampling_mask.codecs.{name}")
    enc = inspect.signature(module.encode).parameters
    assert list(enc)[0] == "mask" and enc["mask"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for n, p in enc.items() if n != "mask"), name
    assert enc["format"].default == registry.CODECS[name].formats[0]
    dec = inspect.signature(module.decode).parameters
    assert list(dec) == ["data", "format", "limits", "validate", "copy"], name
    assert all(dec[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ("format", "limits", "validate", "copy"))
    assert (dec["format"].default, dec["validate"].default, dec["copy"].default) == (None, True, False)


@pytest.mark.parametrize("fmt", ["arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64"])
@pytest.mark.parametrize("validate", [True, False])
@pytest.mark.parametrize("copy", [True, False])
def test_every_codec_round_trips_with_every_option(fmt: str, validate: bool, copy: bool) -> None:
    module = _module(registry.codec_for(fmt).name)
    mask = _rows_mask() if fmt in LOSSY else _mask()
    data = module.encode(mask, format=fmt)
    for given in (fmt, None):
        got = module.decode(data, format=given, validate=validate, copy=copy)
        assert got == mask
        if copy:
            assert not np.shares_memory(got.ids, np.frombuffer(data, dtype=np.uint8))
        assert sm.decode(data, format=given, validate=validate, copy=copy) == mask


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_a_format_of_another_codec_is_refused_by_name(name: str) -> None:
    module = _module(name)
    other = next(f for f in codecs.FORMATS if registry.codec_for(f).name != name)
    data = module.encode(_mask())
    for call in (lambda: module.decode(data, format=other), lambda: module.encode(_mask(), format=other)):
        with pytest.raises(SamplingMaskError) as info:
            call()
        assert info.value.code is ErrorCode.E_SCHEMA and f"not a format of the {name} codec" in info.value.message


@pytest.mark.parametrize("name", CODEC_NAMES)
def test_limits_reach_every_codec(name: str) -> None:
    module = _module(name)
    data = module.encode(_mask())
    with pytest.raises(SamplingMaskError) as info:
        module.decode(data, limits=Limits(max_rows=2))
    assert info.value.code is ErrorCode.E_LIMIT


DUPLICATE_ROW = b'{"sampling_mask": 1, "vocab_size": 10, "rows": [[5, 5], [7]]}'


def test_json_honours_validate_false_and_still_checks_the_structure() -> None:
    from sampling_mask.codecs import json as json_codec

    with pytest.raises(SamplingMaskError) as info:
        json_codec.decode(DUPLICATE_ROW)
    assert info.value.code is ErrorCode.E_DUPLICATE
    trusted = sm.decode(DUPLICATE_ROW, validate=False)  # no longer silently validated
    assert trusted.to_rows() == [[5, 5], [7]]
    assert json_codec.decode(b"[[5, 5]]", validate=False).to_rows() == [[5, 5]]
    broken = b'{"sampling_mask": 1, "rows": [[5], [7]], "cu_seqlens": [0, 1]}'
    with pytest.raises(SamplingMaskError) as info:
        sm.decode(broken, validate=False)  # segments must still tile the rows
    assert info.value.code is ErrorCode.E_SEGMENTS


# ---------------------------------------------------------------------------- missing packages
def test_a_missing_package_is_unavailable_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    data = sm.encode(_mask(), "parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import of it now fails
    with pytest.raises(UnavailableError) as info:
        sm.encode(_mask(), "parquet")
    err = info.value
    assert err.code == "E_UNAVAILABLE" and err.name == "pyarrow" and err.extra == "arrow"
    assert "pip install 'sampling-mask[arrow]'" in str(err) and isinstance(err, ModuleNotFoundError)
    with pytest.raises(UnavailableError, match=r"sampling-mask\[arrow\]"):
        sm.decode(data)
    module = importlib.import_module("sampling_mask.codecs.arrow")
    for call in (lambda: module.encode(_mask()), lambda: module.decode(data)):  # the codec module, called directly
        with pytest.raises(UnavailableError):
            call()


def test_the_command_line_reports_a_missing_package_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    src = Path(str(tmp_path)) / "m.json"
    sm.save(_mask(), src)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(["convert", str(src), str(Path(str(tmp_path)) / "m.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sampling-mask: error: E_UNAVAILABLE: ") and "sampling-mask[arrow]" in err
    assert err.count("\n") == 1
    assert main(["convert", str(src), str(Path(str(tmp_path)) / "m.msgpack")]) == 0  # msgpack needs no package


def test_torch_for_the_scorer_is_unavailable_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("sampling_mask.reference_scorer")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(UnavailableError, match=r"sampling-mask\[torch\]") as info:
        importlib.import_module("sampling_mask.reference_scorer")
    assert info.value.code == "E_UNAVAILABLE"


def test_require_passes_other_import_errors_through_and_the_error_pickles(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("json").dumps([1]) == "[1]"
    with pytest.raises(UnavailableError) as info:
        require("no_such_package_i28")
    assert info.value.extra is None and "pip install no_such_package_i28" in info.value.message
    err = pickle.loads(pickle.dumps(UnavailableError("pyarrow", what="parquet encoding")))
    assert isinstance(err, UnavailableError) and err.extra == "arrow" and str(err).startswith("E_UNAVAILABLE: ")
    assert "parquet encoding needs pyarrow" in str(err)


def test_the_command_line_reads_its_format_tables_from_the_registry() -> None:
    from sampling_mask.cli import _common

    assert _common.STREAMING_FORMATS == registry.CODECS["arrow"].formats == registry.STREAMING_FORMATS
    assert _common.ROWS_ONLY_FORMATS == ("json-rows", "base64") == registry.ROWS_ONLY_FORMATS
    assert all(fmt in _common.FORMAT_HELP for fmt in codecs.FORMATS)
    assert _common.OPTIONAL_EXTRAS is sm.core.optional.EXTRAS


@pytest.mark.parametrize("fmt", ["msgpack", "arrow", "arrows", "parquet", None])
@pytest.mark.parametrize("data", [[1, 2, 3], 12, None, {"a": 1}])
def test_only_bytes_like_input_is_decoded(fmt: str | None, data: Any) -> None:
    assert raised_code(lambda: sm.decode(data, format=fmt)) == "E_ENCODING"
