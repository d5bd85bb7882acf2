"""Packaging: numpy-only import, declared extras, one version, README == CI, private names kept private,
maintainer tools outside the wheel.

Lint (ruff) and types (mypy) run beside pytest in the README's test command, not inside it.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sampling_mask

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "pyarrow", "msgpack")
README_TEST_COMMAND = "python -m pip install torch==2.13.0 -e '.[test]' && python -m pytest && python -m ruff check . && python -m ruff format --check . && python -m mypy"
README_MAIN_COMMAND = "python -m pip install torch==2.13.0 -e '.[all]' && sampling-mask demo"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_import_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, sampling_mask\n"
        "m = sampling_mask.SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10)\n"
        "m.to_dense(); m.to_bitmask(); m.canonical()\n"
        f"print(sorted({set(HEAVY)!r} & set(sys.modules)))\n"
    )
    result = _run("-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_probe_would_see_a_heavy_import() -> None:
    """The same probe reports a heavy module once something loads it (so the test above can fail)."""
    if importlib.util.find_spec("msgpack") is None:
        pytest.skip("msgpack not installed")
    result = _run("-c", f"import sys, sampling_mask, msgpack; print(sorted({set(HEAVY)!r} & set(sys.modules)))")
    assert result.stdout.strip() == "['msgpack']"


def test_pyproject_declares_numpy_only_and_the_extras() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert [re.split(r"[<>=!~ \[]", dep)[0] for dep in project["dependencies"]] == ["numpy"]
    assert project["requires-python"] == ">=3.10"
    extras = project["optional-dependencies"]
    assert {"arrow", "msgpack", "torch", "plot", "test", "all"} <= set(extras)

    def names(reqs: list[str]) -> set[str]:
        return {re.split(r"[<>=!~ \[;]", r)[0].lower() for r in reqs}

    assert {"pyarrow"} <= names(extras["arrow"]) and {"msgpack"} <= names(extras["msgpack"])
    assert {"torch"} <= names(extras["torch"])
    assert {"matplotlib"} <= names(extras["plot"])  # stats --plot, bench --plot
    assert names(extras["arrow"]) | names(extras["msgpack"]) | names(extras["torch"]) <= names(extras["all"])
    assert {"pytest", "hypothesis", "pyarrow", "msgpack", "torch"} <= names(extras["test"])
    assert project["dynamic"] == ["version"] and "version" not in project  # one source: __version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", sampling_mask.__version__)
    assert (ROOT / "sampling_mask" / "py.typed").exists()


def test_readme_commands_match_ci() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert README_TEST_COMMAND in readme and README_MAIN_COMMAND in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert README_TEST_COMMAND in commands


def test_readme_quickstart_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("<!-- section: quickstart -->", 1)[1].split("<!-- section:", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert block is not None, "the quickstart has no python block"
    result = _run("-c", block.group(1))
    assert result.returncode == 0, result.stderr
    assert "E_PADDING 0" in result.stdout


def test_lint_tools_are_pinned_once() -> None:
    """The test extra pins ruff and mypy; pre-commit runs those same installs (local hooks)."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = {re.split(r"[=<>!~ ;]", r, maxsplit=1)[0]: r for r in extras["test"]}
    assert re.fullmatch(r"ruff==[\d.]+", pins["ruff"]) and re.fullmatch(r"mypy==[\d.]+", pins["mypy"])
    hooks = (ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "repo: local" in hooks and "python -m ruff check" in hooks and "python -m mypy" in hooks
    assert "rev:" not in hooks  # no second, downloaded copy of a tool whose version could differ


def test_no_module_imports_another_modules_private_names() -> None:
    """A private name (``_x``) is used only inside the module that owns it: no
    ``from .x import _name`` across modules. Private *modules* (``from . import files``) are fine,
    and ruff's SLF001 (pyproject) covers attribute access."""
    import ast

    package = ROOT / "sampling_mask"
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
            target = base.joinpath(*(node.module or "").split(".")) if node.module else base
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                    continue
                if (target / f"{name}.py").exists() or (target / name).is_dir():
                    continue  # a private module of the package
                found.append(
                    f"{path.relative_to(ROOT)}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {name}"
                )
    assert not found, "\n".join(found)


def test_maintainer_tools_stay_outside_the_package() -> None:
    """The wheel holds the library only: the vector generator lives in ``tools/``, the
    benchmark and fuzz scripts beside it, and no package module executes a file by its path."""
    package = ROOT / "sampling_mask"
    assert (ROOT / "tools" / "conformance" / "generate.py").is_file()
    assert not (package / "conformance" / "generate.py").exists()
    assert not (package / "conformance" / "sources").exists()
    runs_a_file = re.compile(r"spec_from_file_location|runpy|exec_module|\bexec\(")
    found = [
        str(path.relative_to(ROOT))
        for path in sorted(package.rglob("*.py"))
        if runs_a_file.search(path.read_text(encoding="utf-8"))
    ]
    assert not found, found
