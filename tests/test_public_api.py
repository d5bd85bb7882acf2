"""One API, one set of habits (issue 14, section 5): names IDEs can see, one argument order, one spelling."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import sampling_mask
import sampling_mask.adapters

PUBLIC_MODULES = ["sampling_mask.alignment", "sampling_mask.trace", "sampling_mask.sampler", "sampling_mask.synthetic"]
PUBLIC_MODULES += [f"sampling_mask.adapters.{m.name}" for m in pkgutil.iter_modules(sampling_mask.adapters.__path__)]


def test_dir_lists_the_lazy_codec_functions() -> None:
    names = dir(sampling_mask)
    assert {"encode", "decode", "save", "load", "SamplingMask", "Limits"} <= set(names)
    assert set(sampling_mask.__all__) <= set(names)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_declares_all(name: str) -> None:
    module = importlib.import_module(name)
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
