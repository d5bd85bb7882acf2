"""No code runs because of payload content: the package source never unpickles, evals, ``torch.load``s or
imports a module named by a computed string.

The scan is over the AST of every module in ``sampling_mask/`` (aliases such as ``import pickle as p``
and ``from pickle import loads`` are resolved). Allowed on purpose: ``pickle.PickleBuffer`` (the
mask's ``__reduce_ex__`` only *dumps*), ``np.load(..., allow_pickle=False)``, and the dynamic imports
listed in :data:`ALLOWED_DYNAMIC_IMPORTS`, whose module names come from the program, never from a payload.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "sampling_mask"

#: Dotted names that deserialize executable objects or run code; any reference to one is a finding.
FORBIDDEN = frozenset(
    {
        "pickle.load",
        "pickle.loads",
        "pickle.Unpickler",
        "_pickle.load",
        "_pickle.loads",
        "_pickle.Unpickler",
        "cPickle.load",
        "cPickle.loads",
        "dill.load",
        "dill.loads",
        "cloudpickle.load",
        "cloudpickle.loads",
        "joblib.load",
        "marshal.load",
        "marshal.loads",
        "shelve.open",
        "torch.load",
        "torch.jit.load",
        "torch.serialization.load",
        "yaml.load",
        "yaml.unsafe_load",
        "yaml.full_load",
        "yaml.load_all",
        "yaml.unsafe_load_all",
        "jsonpickle.decode",
        "numpy.lib.format.read_array",
        "runpy.run_path",
        "runpy.run_module",
        "code.interact",
        "builtins.eval",
        "builtins.exec",
        "builtins.compile",
    }
)
#: Builtins that run or compile code.
FORBIDDEN_BUILTINS = frozenset({"eval", "exec", "compile", "breakpoint"})
#: Calls that import a module by name: fine with a string literal, a finding with anything computed.
IMPORTERS = frozenset({"importlib.import_module", "importlib.__import__", "builtins.__import__", "__import__"})
#: ``np.load`` unpickles object arrays only with ``allow_pickle=True``.
NUMPY_LOADERS = frozenset({"numpy.load"})

#: (path under sampling_mask/, enclosing function) -> why the computed module name is not payload content.
ALLOWED_DYNAMIC_IMPORTS = {
    ("conformance/protocol.py", "load_python_implementation"): (
        "the operator names the implementation under test on the command line; payloads never reach it"
    ),
    ("codecs/registry.py", "_load"): "the module of an entry of the fixed CODECS table, chosen by format name",
    ("core/optional.py", "require"): "optional package names: string literals of the calling code",
    ("cli/bench.py", "_optional"): "optional dependency names: string literals and the benchmark's fixed table",
}


class _Scanner(ast.NodeVisitor):
    """Collects ``(line, function, what)`` for every forbidden construct in one module."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {"np": "numpy"}
        self.findings: list[tuple[int, str, str]] = []
        self.dynamic_imports: list[tuple[int, str]] = []
        self.function = "<module>"

    # -- names
    def _dotted(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.aliases.setdefault(root, root)
            self._check_name(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                self.aliases[alias.asname or alias.name] = full
                self._check_name(node, full)

    def _check_name(self, node: ast.AST, name: str) -> None:
        if name in FORBIDDEN:
            self.findings.append((node.lineno, self.function, name))  # type: ignore[attr-defined]

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    # -- references and calls
    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self._dotted(node)
        if name is not None:
            self._check_name(node, name)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            resolved = self.aliases.get(node.id, node.id)
            if node.id in FORBIDDEN_BUILTINS and node.id == resolved:
                self.findings.append((node.lineno, self.function, node.id))
            elif resolved != node.id:
                self._check_name(node, resolved)

    def visit_Call(self, node: ast.Call) -> None:
        name = self._dotted(node.func)
        if name in IMPORTERS:
            first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "name"), None)
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                self.dynamic_imports.append((node.lineno, self.function))
        if name in NUMPY_LOADERS:
            for keyword in node.keywords:
                if keyword.arg == "allow_pickle" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    self.findings.append((node.lineno, self.function, "numpy.load(allow_pickle=...)"))
                if keyword.arg is None:  # **kwargs could carry allow_pickle=True
                    self.findings.append((node.lineno, self.function, "numpy.load(**kwargs)"))
        self.generic_visit(node)


def scan_source(source: str) -> _Scanner:
    scanner = _Scanner()
    scanner.visit(ast.parse(source))
    return scanner


def _modules() -> list[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10, "the package source was not found"
    return files


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_has_no_code_execution_from_data(path: Path) -> None:
    scanner = scan_source(path.read_text(encoding="utf-8"))
    assert scanner.findings == [], f"{path.relative_to(PACKAGE)}: {scanner.findings}"
    relative = path.relative_to(PACKAGE).as_posix()
    unexpected = [(line, fn) for line, fn in scanner.dynamic_imports if (relative, fn) not in ALLOWED_DYNAMIC_IMPORTS]
    assert unexpected == [], f"{relative}: import of a computed module name at {unexpected}"


def test_allowed_dynamic_imports_still_exist() -> None:
    """A stale allowance would let a new dynamic import slip into that function unnoticed."""
    for (relative, function), why in ALLOWED_DYNAMIC_IMPORTS.items():
        path = PACKAGE / relative
        if not path.exists():
            pytest.fail(f"allowed dynamic import in a missing file {relative} ({why})")
        found = {fn for _, fn in scan_source(path.read_text(encoding="utf-8")).dynamic_imports}
        assert function in found, f"{relative}:{function} no longer imports dynamically; drop its allowance"


SNIPPETS = {
    "pickle.loads": "import pickle\npickle.loads(b'')",
    "pickle alias": "import pickle as p\np.load(f)",
    "from pickle": "from pickle import loads\nloads(b'')",
    "pickle.Unpickler": "import pickle\npickle.Unpickler(f).load()",
    "marshal.loads": "import marshal\nmarshal.loads(b'')",
    "eval": "eval('1')",
    "exec": "def f(x):\n    exec(x)",
    "compile": "compile('1', 'f', 'eval')",
    "torch.load": "import torch\ntorch.load('f')",
    "torch alias": "import torch as t\nt.load('f')",
    "from torch": "from torch import load\nload('f')",
    "yaml.load": "import yaml\nyaml.load(s)",
    "np.load pickle": "import numpy as np\nnp.load('f', allow_pickle=True)",
    "np.load computed": "import numpy as np\nnp.load('f', allow_pickle=flag)",
    "np.load kwargs": "import numpy\nnumpy.load('f', **kw)",
    "import_module": "import importlib\nimportlib.import_module(name)",
    "import_module f-string": "import importlib\nimportlib.import_module(f'x.{name}')",
    "__import__": "__import__(name)",
    "from importlib": "from importlib import import_module\nimport_module(payload['module'])",
}


@pytest.mark.parametrize("snippet", list(SNIPPETS.values()), ids=list(SNIPPETS))
def test_scanner_catches_each_construct(snippet: str) -> None:
    scanner = scan_source(textwrap.dedent(snippet))
    assert scanner.findings or scanner.dynamic_imports, snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "import pickle\npickle.PickleBuffer(b'')\npickle.dumps(1)",
        "import numpy as np\nnp.load('f', allow_pickle=False)\nnp.load('f')",
        "import importlib\nimportlib.import_module('sampling_mask.codecs.arrow')",
        "import re\nre.compile('x')",
        "import json\njson.loads('1')",
    ],
)
def test_scanner_allows_safe_constructs(snippet: str) -> None:
    scanner = scan_source(snippet)
    assert scanner.findings == [] and scanner.dynamic_imports == [], snippet
