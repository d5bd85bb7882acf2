"""One API, one set of habits: names IDEs can see, one argument order, one spelling."""

from __future__ import annotations

import inspect
import pkgutil
import warnings
from pathlib import Path

import pytest

import sampling_mask
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError

#: The library's modules (tools, the command line, conformance and private modules aside).
PUBLIC_MODULES = [
    m.name
    for m in pkgutil.walk_packages(sampling_mask.__path__, "sampling_mask.")
    if not any(part.startswith("_") for part in m.name.split("."))
    and m.name.split(".")[1] not in ("bench", "cli", "conformance")
]


def test_dir_lists_the_lazy_codec_functions() -> None:
    names = dir(sampling_mask)
    assert {"encode", "decode", "save", "load", "SamplingMask", "Limits"} <= set(names)
    assert set(sampling_mask.__all__) <= set(names)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_all(name: str) -> None:
    module = pytest.importorskip(name)  # reference_scorer and torch_data need torch
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    assert all(hasattr(module, n) for n in exported), name
    # Every public function or class defined in the module is exported.
    defined = {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == name
    }
    assert defined <= set(exported), f"{name}: not in __all__: {sorted(defined - set(exported))}"


def _mask() -> SamplingMask:
    return SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3])


def test_the_model_comes_first_and_the_format_is_a_keyword(tmp_path: Path) -> None:
    mask, path = _mask(), tmp_path / "m.msgpack"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new forms never warn
        data = sampling_mask.encode(mask, "msgpack")
        assert sampling_mask.decode(data, format="msgpack") == mask
        sampling_mask.save(mask, path, format="msgpack")
        assert sampling_mask.load(path, format="msgpack") == mask
    for func in (sampling_mask.decode, sampling_mask.load):
        params = inspect.signature(func).parameters
        assert params["format"].kind is inspect.Parameter.KEYWORD_ONLY, func
    assert list(inspect.signature(sampling_mask.save).parameters)[:2] == ["mask", "path"]


def test_the_forms_never_released_are_gone(tmp_path: Path) -> None:
    """0.1.0 was never released: the old orders and spellings are errors, not deprecation shims."""
    mask = _mask()
    data = sampling_mask.encode(mask, "msgpack")
    with pytest.raises(TypeError):
        sampling_mask.decode(data, "msgpack")  # type: ignore[misc]
    with pytest.raises(SamplingMaskError):
        sampling_mask.save(tmp_path / "a.arrow", mask)  # type: ignore[arg-type]
    assert not (tmp_path / "a.arrow").exists()
    assert not hasattr(SamplingMask, "with_companions")
    with pytest.raises(TypeError):
        sampling_mask.encode(mask, "msgpack", compact=True)


def test_a_wrong_format_is_still_a_sampling_mask_error() -> None:
    with pytest.raises(SamplingMaskError) as info:
        sampling_mask.decode(b"{}", format="xml")
    assert info.value.code is ErrorCode.E_SCHEMA


@pytest.mark.parametrize("fmt", ["arrow", "arrows", "parquet", "msgpack"])
def test_one_spelling_for_the_compact_layout(fmt: str) -> None:
    pytest.importorskip("pyarrow" if fmt != "msgpack" else "msgpack")
    mask = _mask().canonical()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = sampling_mask.encode(mask, fmt, layout="compact")
        ragged = sampling_mask.encode(mask, fmt, layout="ragged")
    assert sampling_mask.decode(data) == mask and sampling_mask.decode(ragged) == mask
    assert data != ragged
    if fmt != "msgpack":
        with pytest.raises(TypeError):
            sampling_mask.encode(mask, fmt, compact=True)
    with pytest.raises(SamplingMaskError) as info:
        sampling_mask.encode(mask, fmt, layout="sparse")
    assert info.value.code is ErrorCode.E_SCHEMA
