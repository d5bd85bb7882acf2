"""Every Python block of README.md runs as written (issue 14, section 7).

Each block runs on its own, in a fresh interpreter whose working folder is an empty temporary one,
so a block cannot lean on a name another block defined. A block with relative imports
(``from .model import ...``) is a package's ``__init__.py``: it runs as one, beside copies of the
modules it imports. A block preceded by ``<!-- readme-test: skip REASON -->`` is skipped; that is
only for what CI cannot have (a GPU), and the reason must say so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"(?:<!-- readme-test: skip (?P<skip>[^>]*?) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)
_RELATIVE_IMPORT = re.compile(r"^from \.(\w*) import ([\w, ]+)", re.M)
BLOCKS = [
    (README.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("skip")) for m in _BLOCK.finditer(README)
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _imported(code: str) -> list[str]:
    """The sibling modules ``code`` imports relatively (``from .x import y``, ``from . import x``)."""
    names = []
    for module, imported in _RELATIVE_IMPORT.findall(code):
        names += [module] if module else [n.strip() for n in imported.split(",")]
    return names


def _as_package(code: str, folder: Path) -> list[str]:
    """Write ``code`` as the ``__init__.py`` of a package in ``folder``, with the modules it imports
    relatively (and theirs); the command that imports it."""
    package = folder / "readme_vendored"
    package.mkdir()
    todo, done = _imported(code), set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        source = next(iter(sorted((ROOT / "sampling_mask").rglob(f"{name}.py"))), None)
        assert source is not None, f"README imports .{name}, which the package does not have"
        shutil.copy(source, package / f"{name}.py")
        todo += _imported(source.read_text(encoding="utf-8"))
    (package / "__init__.py").write_text(code, encoding="utf-8")
    return ["-c", "import readme_vendored, sys; assert 'sampling_mask' not in sys.modules"]


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 8  # quickstart, encodings, streaming, adapters, sampler, trace, alignment, scorer
    for line, _, skip in BLOCKS:
        assert skip is None or "GPU" in skip, f"README line {line}: a block is skipped only when it needs a GPU"


@pytest.mark.parametrize(("line", "code", "skip"), BLOCKS, ids=[f"line{line}" for line, _, _ in BLOCKS])
def test_readme_block_runs(line: int, code: str, skip: str | None, tmp_path: Path) -> None:
    if skip is not None:
        pytest.skip(f"README line {line}: {skip}")
    args = _as_package(code, tmp_path) if _RELATIVE_IMPORT.search(code) else ["-c", code]
    args = ["-W", "error::DeprecationWarning:__main__", *args]  # the README shows no deprecated call
    result = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, f"README block at line {line} failed:\n{result.stderr}"
