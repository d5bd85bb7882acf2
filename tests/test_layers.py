"""The package's folders are layers: every import points down their order, none runs in a circle, and
a ``_``-prefixed module is imported only from its own folder (docs/development.md, "Layout").

The order, lowest first: ``core`` < ``codecs`` < ``data`` < ``sampler`` < {``adapters``,
``reference_scorer``} < ``trainers`` < ``conformance`` < ``cli``. Two folders of one rank import
neither each other. The package root holds ``__init__.py`` (which imports ``core`` and, lazily,
``codecs``: it ranks just above ``codecs``) and ``__main__.py`` (the command line: just above ``cli``).
Every import counts, the ones inside functions and under ``TYPE_CHECKING`` too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sampling_mask"
RANKS = {
    "core": 0,
    "codecs": 1,
    "data": 2,
    "sampler": 3,
    "adapters": 4,
    "reference_scorer": 4,
    "trainers": 5,
    "conformance": 6,
    "cli": 7,
}
ROOT_RANKS = {"__init__": 1.5, "__main__": 7.5}


def module_name(path: Path) -> str:
    """``sampling_mask.codecs.json`` for ``sampling_mask/codecs/json.py`` (a package: its folder's name)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def home(name: str) -> str:
    """The package a module sits in (a package's own ``__init__``: the package itself)."""
    return name if name in PACKAGES else name.rpartition(".")[0]


def imported(name: str, source: str, known: set[str]) -> set[str]:
    """The package modules ``source`` (the text of module ``name``) imports, relative imports
    resolved, ``from X import Y`` read as the module ``X.Y`` when that is a module and as ``X`` otherwise."""
    package = home(name).split(".")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {target for target in found if target in known and target != name}


def folder(name: str) -> str:
    """The top folder of a module (``codecs``), or ``__init__`` / ``__main__`` for the root's."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def rank(name: str) -> float:
    return RANKS.get(folder(name), ROOT_RANKS.get(folder(name), 0))


def upward(source: str, target: str) -> bool:
    """An import that does not point down: into another folder of the same or a higher rank."""
    return folder(source) != folder(target) and rank(target) >= rank(source)


def private_outside(source: str, target: str) -> bool:
    """An import of a ``_module`` from outside the package it sits in."""
    return target.rpartition(".")[2].startswith("_") and home(source) != target.rpartition(".")[0]


GRAPH = {name: imported(name, path.read_text(encoding="utf-8"), set(MODULES)) for name, path in MODULES.items()}


def test_the_root_holds_only_init_and_main():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    assert set(RANKS) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def test_every_import_points_down_the_order():
    found = [f"{s} imports {t}" for s, targets in GRAPH.items() for t in sorted(targets) if upward(s, t)]
    assert found == []


def test_private_modules_are_imported_only_from_their_own_folder():
    found = [f"{s} imports {t}" for s, targets in GRAPH.items() for t in sorted(targets) if private_outside(s, t)]
    assert found == []


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle():
    assert circles(GRAPH) == []


@pytest.mark.parametrize(
    ("name", "statement", "check"),
    [
        ("sampling_mask.core.model", "from ..codecs import json", upward),
        ("sampling_mask.adapters.vllm", "from ..reference_scorer import scoring", upward),
        ("sampling_mask.data.alignment", "import sampling_mask.trainers.trl", upward),
        ("sampling_mask.cli.convert", "from ..codecs import _common", private_outside),
        ("sampling_mask.trainers.trl.masks", "from ...adapters._common import int_array", private_outside),
    ],
)
def test_the_scan_finds_a_planted_import(name, statement, check):
    """The checks have teeth: an upward or private import planted in a real module is found."""
    targets = imported(name, statement, set(MODULES))
    assert targets and all(check(name, target) for target in targets)


def test_the_scan_finds_a_planted_circle():
    graph = {name: set(targets) for name, targets in GRAPH.items()}
    graph["sampling_mask.core.errors"].add("sampling_mask.core.model")
    assert any({"sampling_mask.core.errors", "sampling_mask.core.model"} <= set(c) for c in circles(graph))
