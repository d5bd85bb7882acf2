# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/core/optional.py, vendorable (docs/serving-and-vendoring.md)
"""Optional packages: which pip extra installs each, and the one error for a missing one.

``import`` of this package needs numpy only; a codec or tool that needs more calls :func:`require`
where it needs it. A missing package is :class:`UnavailableError` (code ``E_UNAVAILABLE``, the
command line's exit status 2), whose message names what to install: the extra of sampling-mask
in the library, the package itself in a vendored copy (``sampling-mask vendor``), which lives in
another project where there is no sampling-mask to install extras of. It is a
``ModuleNotFoundError``, so ``except ImportError`` keeps working.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

__all__ = ["EXTRAS", "VENDORED", "UnavailableError", "require"]

#: Import name of an optional package -> the extra of sampling-mask that installs it.
EXTRAS = {"pyarrow": "arrow", "msgpack": "msgpack", "torch": "torch", "matplotlib": "plot"}
#: The library's import name; a vendored copy of this module lives under the server's own package.
_LIBRARY = "sampling_mask"
#: True in a vendored copy: missing packages are named as ``pip install NAME``, never as an extra.
VENDORED = __name__.rpartition(".core.")[0] != _LIBRARY


class UnavailableError(ModuleNotFoundError):
    """An optional package is not installed. ``code`` is ``"E_UNAVAILABLE"``; ``name`` the package;
    ``extra`` the extra of sampling-mask that installs it (None when there is none, and always in a
    vendored copy, whose message says ``pip install NAME``)."""

    code = "E_UNAVAILABLE"

    def __init__(self, name: str, *, what: str | None = None) -> None:
        self.extra = None if VENDORED else EXTRAS.get(name)
        self.what = what
        install = f"pip install 'sampling-mask[{self.extra}]'" if self.extra else f"pip install {name}"
        self.message = f"{what or 'this'} needs {name}, which is not installed ({install})"
        super().__init__(f"{self.code}: {self.message}", name=name)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild, (self.name, self.what))


def _rebuild(name: str, what: str | None) -> UnavailableError:
    return UnavailableError(name, what=what)


def require(name: str, *, what: str | None = None) -> ModuleType:
    """The module ``name`` (imported on first use), or :class:`UnavailableError` naming what installs it.

    ``what`` says what needs it (``"msgpack encoding"``). A package that is installed but fails
    to import for another reason raises that error unchanged."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name.partition(".")[0] and exc.name != name:
            raise
        raise UnavailableError(name.partition(".")[0], what=what) from None
