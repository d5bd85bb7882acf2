"""Vendoring (issue 2, section 5): the core files work copied into another tree under another name.

Inference servers copy the folder ``sampling_mask/core/`` into their own package. Its files may import
only the standard library, numpy, and each other (relatively).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "sampling_mask" / "core"
CORE_FILES = tuple(sorted(path.name for path in CORE.glob("*.py")))
VENDORED_NAME = "acme_server_mask"  # nothing like "sampling_mask"

SCRIPT = textwrap.dedent(
    f"""
    import sys
    import numpy as np
    from {VENDORED_NAME} import SamplingMask, SamplingMaskError, ErrorCode, DEFAULT_LIMITS, concat

    m = SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3], sampled_token_ids=[5, -1, 7])
    assert SamplingMask.from_dense(m.to_dense(width=4), vocab_size=10, cu_seqlens=[0, 2, 3],
                                   sampled_token_ids=[5, -1, 7]) == m
    assert SamplingMask.from_bitmask(m.to_bitmask(), 10, cu_seqlens=[0, 2, 3], sampled_token_ids=[5, -1, 7]) == m
    assert SamplingMask.from_counts(*m.to_counts(), vocab_size=10, cu_seqlens=[0, 2, 3],
                                    sampled_token_ids=[5, -1, 7]) == m
    assert concat([m.segment(0), m.segment(1)]) == m
    assert m.canonical().to_rows() == [[1, 5], [], [7]]
    try:
        SamplingMask.from_dense(np.array([[5, -1, 1]]))
    except SamplingMaskError as exc:
        assert exc.code is ErrorCode.E_PADDING and exc.row == 0
        assert type(exc).__module__ == "{VENDORED_NAME}.errors"
    else:
        raise AssertionError("E_PADDING not raised")
    assert "sampling_mask" not in sys.modules, "the vendored copy imported the original package"
    assert not {{"torch", "pyarrow", "msgpack"}} & set(sys.modules)
    print("vendored ok")
    """
)


def _vendor(tmp_path: Path) -> Path:
    target = tmp_path / VENDORED_NAME
    shutil.copytree(CORE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_core_folder_holds_the_model() -> None:
    assert {"__init__.py", "errors.py", "limits.py", "layouts.py", "model.py"} <= set(CORE_FILES)


def test_vendored_core_round_trips_under_another_name(tmp_path: Path) -> None:
    _vendor(tmp_path)
    # -I: isolated mode, no PYTHONPATH or user site; cwd (tmp_path) comes first through -c's sys.path.
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{SCRIPT}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "vendored ok" in result.stdout


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in ``path``; level > 0 is relative."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module is None:  # from . import layouts
                found.extend((node.level, alias.name) for alias in node.names)
            else:
                found.append((node.level, node.module or ""))
    return found


@pytest.mark.parametrize("name", CORE_FILES)
def test_core_files_import_only_stdlib_numpy_and_each_other(name: str) -> None:
    siblings = {Path(f).stem for f in CORE_FILES}
    for level, module in _imported_modules(CORE / name):
        top = module.split(".")[0]
        if level:
            assert level == 1 and top in siblings, f"{name}: relative import of {module!r} outside the core"
        else:
            assert top == "numpy" or top in sys.stdlib_module_names or top == "__future__", (
                f"{name} imports {module!r}: the vendored core may use only the stdlib and numpy"
            )


def test_import_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The scanner itself is not blind: a planted torch import and a parent-relative import show up."""
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\ndef f():\n    import torch\nfrom ..codecs import arrow\n", encoding="utf-8")
    assert sorted(_imported_modules(bad)) == [(0, "numpy"), (0, "torch"), (2, "codecs")]
