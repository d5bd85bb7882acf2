"""Vendoring: ``sampling-mask vendor`` copies the core folder and the chosen codecs into another
package; the copy works under another name, imports only what it declares, names its release in every
file, refuses to overwrite local changes, never writes or deletes through a symlink or a tampered
manifest, and its masks are accepted by the installed library through the mask protocol.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from file_checks import listing

import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.cli import main
from sampling_mask.cli.vendor import CODECS, MANIFEST, header, vendorable_files

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sampling_mask"
CORE_FILES = tuple(sorted(path.name for path in (PACKAGE / "core").glob("*.py")))
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
        assert type(exc).__module__ == "{VENDORED_NAME}.core.errors"
    else:
        raise AssertionError("E_PADDING not raised")
    assert "sampling_mask" not in sys.modules, "the vendored copy imported the original package"
    assert not {{"torch", "pyarrow", "msgpack"}} & set(sys.modules)
    print("vendored ok")
    """
)


def vendor(dest: Path, package: str, *flags: str) -> int:
    return main(["-q", "vendor", str(dest), "--package", package, *flags])


def _run_isolated(code: str, path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that sees ``path`` but neither PYTHONPATH nor this checkout (-I)."""
    script = f"import sys; sys.path.insert(0, {str(path)!r})\n{code}"
    return subprocess.run(
        [sys.executable, "-I", "-c", script], cwd=path, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def vendored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """A copy with both codecs under a fresh name, importable in this process (removed afterwards)."""
    name = f"acme_{tmp_path.name.replace('-', '_')}"
    assert vendor(tmp_path / name, name, "--codecs", "json,msgpack") == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(name)
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


# ---------------------------------------------------------------------------- the core folder
def test_core_folder_holds_the_model() -> None:
    assert {"__init__.py", "errors.py", "limits.py", "layouts.py", "model.py"} <= set(CORE_FILES)


def test_vendored_core_round_trips_under_another_name(tmp_path: Path) -> None:
    assert vendor(tmp_path / VENDORED_NAME, VENDORED_NAME) == 0
    assert not (tmp_path / VENDORED_NAME / "codecs").exists()  # core only unless --codecs
    result = _run_isolated(SCRIPT, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "vendored ok" in result.stdout


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in ``path`` that runs (not those under ``if TYPE_CHECKING:``,
    which only type checkers read); level > 0 is relative."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    checking = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    typing_only = {id(n) for block in checking for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.extend((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and node.module is None:  # from . import layouts
                found.extend((node.level, alias.name) for alias in node.names)
            else:
                found.append((node.level, node.module or ""))
    return found


def _stdlib_or(allowed: set[str], module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or top in {"__future__", "numpy"} | allowed


@pytest.mark.parametrize("name", CORE_FILES)
def test_core_files_import_only_stdlib_numpy_and_each_other(name: str) -> None:
    siblings = {Path(f).stem for f in CORE_FILES}
    for level, module in _imported_modules(PACKAGE / "core" / name):
        if level:
            assert level == 1 and module.split(".")[0] in siblings, f"{name}: relative import of {module!r} outside"
        else:
            assert _stdlib_or(set(), module), f"{name} imports {module!r}: the core may use only the stdlib and numpy"


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_codec_files_import_only_what_the_vendor_table_declares(codec: str) -> None:
    """Each codec's modules import the stdlib, numpy, its declared packages, the core, and each other only:
    a copy holding exactly those files imports nothing missing."""
    modules, packages = CODECS[codec].files, CODECS[codec].packages
    stems = {Path(m).stem for m in modules}
    for name in modules:
        for level, module in _imported_modules(PACKAGE / "codecs" / name):
            where = f"codecs/{name} ({codec})"
            if level == 1:
                assert module.split(".")[0] in stems, f"{where}: imports {module!r}, not in the codec's file list"
            elif level == 2:
                assert module == "core" or module.startswith("core."), f"{where}: imports ..{module}"
            else:
                assert level == 0 and _stdlib_or(set(packages), module), f"{where}: undeclared import {module!r}"


def test_import_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    """The scanner itself is not blind: a planted torch import and a parent-relative import show up;
    only an import that type checkers alone read (``if TYPE_CHECKING:``, not its ``else``) is left out."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import numpy\ndef f():\n    import torch\nfrom ..codecs import arrow\n"
        "if TYPE_CHECKING:\n    import typing_extensions\nelse:\n    import pickle\n",
        encoding="utf-8",
    )
    assert sorted(_imported_modules(bad)) == [(0, "numpy"), (0, "pickle"), (0, "torch"), (2, "codecs")]


# ---------------------------------------------------------------------------- licence and headers
def test_licence_file_is_apache_2_and_matches_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert (PACKAGE / "LICENSE").read_bytes() == text.encode()  # the copy vendor ships (a link in the checkout)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression


@pytest.mark.parametrize("rel", vendorable_files())
def test_every_vendorable_file_names_its_source_and_licence(rel: str) -> None:
    first = (PACKAGE / rel).read_text(encoding="utf-8").partition("\n")[0] + "\n"
    assert first == header(rel, vendored=False)
    # The source names no release (one version source, __version__); a copy names its release.
    assert first.startswith("# sampling-mask, Apache-2.0") and f"sampling_mask/{rel}" in first
    assert sm.__version__ not in first


def test_copied_files_say_where_and_which_release_they_came_from(tmp_path: Path) -> None:
    dest = tmp_path / "mask"
    assert vendor(dest, "server.mask", "--codecs", "msgpack") == 0
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["version"] == sm.__version__ and manifest["codecs"] == ["msgpack"]
    assert manifest["package"] == "server.mask" and manifest["source"] == "sampling-mask"
    for rel in vendorable_files(("msgpack",)):
        assert (dest / rel).read_text().startswith(header(rel, sm.__version__, vendored=True)), rel
        assert manifest["files"][rel] == __import__("hashlib").sha256((dest / rel).read_bytes()).hexdigest()
    assert not (dest / "codecs" / "json.py").exists()  # only what msgpack needs
    readme = (dest / "README.md").read_text()
    assert f"sampling-mask {sm.__version__}" in readme and "from server.mask.codecs import msgpack" in readme
    assert (dest / "LICENSE").read_text().startswith((ROOT / "LICENSE").read_text()[:200])


# ---------------------------------------------------------------------------- refusing to lose work
def test_vendor_refuses_to_overwrite_local_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "mask"
    assert vendor(dest, "mask", "--codecs", "json,msgpack") == 0
    assert vendor(dest, "mask", "--codecs", "json,msgpack") == 0  # an unchanged copy updates quietly
    model = dest / "core" / "model.py"
    model.write_text(model.read_text() + "\n# a local patch\n")
    capsys.readouterr()
    assert vendor(dest, "mask", "--codecs", "json") == 2
    err = capsys.readouterr().err
    assert err.startswith("sampling-mask: error: E_IO: refusing to overwrite local changes") and "core/model.py" in err
    assert "a local patch" in model.read_text() and (dest / "codecs" / "msgpack.py").exists()  # nothing touched
    assert vendor(dest, "mask", "--codecs", "json", "--force") == 0
    assert "a local patch" not in model.read_text()
    assert not (dest / "codecs" / "msgpack.py").exists() and (dest / "codecs" / "json.py").exists()


def test_vendor_refuses_a_folder_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "mask"
    dest.mkdir()
    (dest / "mine.py").write_text("x = 1\n")
    assert vendor(dest, "mask") == 2
    assert f"no {MANIFEST}" in capsys.readouterr().err and not (dest / "core").exists()
    assert vendor(dest, "mask", "--force") == 0
    assert (dest / "mine.py").read_text() == "x = 1\n"  # --force writes the copy, keeps other files


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--package", "server.other"), "must end with"),
        (("--package", "class"), "not a dotted Python module name"),
        (("--package", "mask", "--codecs", "arrow"), "not vendorable"),
        (("--package", "mask", "--codecs", "yaml"), "unknown codec 'yaml'"),
    ],
)
def test_vendor_usage_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    assert main(["vendor", str(tmp_path / "mask"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sampling-mask: error: E_USAGE: ") and needle in err and err.count("\n") == 1
    assert not (tmp_path / "mask").exists()


# ---------------------------------------------------------------------------- a server using the copy
SERVER = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from acme.sm import SamplingMask
    from acme.sm.codecs import json as json_codec, msgpack as msgpack_codec

    mask = SamplingMask.from_rows([[5, 1], [], [7, 2, 9]], vocab_size=10, cu_seqlens=[0, 2, 3],
                                  sampled_token_ids=[5, -1, 9], metadata={"top_k": 3})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = msgpack_codec.encode(mask) if self.path == "/msgpack" else json_codec.encode(mask)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)  # loopback only
    server.timeout = 300  # handle_request gives up rather than hang (far beyond the work, on any machine)
    print(server.server_address[1], flush=True)
    for _ in range(2):
        server.handle_request()
    server.server_close()
    assert "sampling_mask" not in sys.modules, "the server imported the installed library"
    print("served", flush=True)
    """
)


def test_a_stdlib_http_server_encodes_with_the_copy_and_the_library_decodes(tmp_path: Path) -> None:
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "__init__.py").write_text("")
    assert vendor(tmp_path / "acme" / "sm", "acme.sm", "--codecs", "msgpack,json") == 0
    script = f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{SERVER}"
    proc = subprocess.Popen(
        [sys.executable, "-I", "-c", script], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        bodies = {
            fmt: urllib.request.urlopen(f"http://127.0.0.1:{port}/{fmt}", timeout=300).read()
            for fmt in ("msgpack", "json")
        }
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "served" in out, err
    expected = SamplingMask.from_rows(
        [[5, 1], [], [7, 2, 9]],
        vocab_size=10,
        cu_seqlens=[0, 2, 3],
        sampled_token_ids=[5, -1, 9],
        metadata={"top_k": 3},
    )
    assert sm.decode(bodies["msgpack"], format="msgpack") == expected
    assert sm.decode(bodies["json"], format="json") == expected


# ---------------------------------------------------------------------------- the mask protocol
def test_a_vendored_mask_is_accepted_by_encode_adapters_and_alignment(vendored: object) -> None:
    fields = {"vocab_size": 10, "cu_seqlens": [0, 2, 4], "sampled_token_ids": [-1, 5, -1, 7]}
    theirs = vendored.SamplingMask.from_rows([[], [5, 1], [], [7]], **fields)  # type: ignore[attr-defined]
    ours = SamplingMask.from_rows([[], [5, 1], [], [7]], **fields)  # type: ignore[arg-type]
    assert type(theirs) is not SamplingMask
    assert sm.as_sampling_mask(theirs) == ours
    assert sm.decode(sm.encode(theirs, "json"), format="json") == ours
    from sampling_mask.adapters import vllm
    from sampling_mask.data.alignment import shift_left

    assert vllm.to_token_ids(theirs) == vllm.to_token_ids(ours)
    assert shift_left(theirs) == shift_left(ours)
    assert sm.concat([theirs, ours]) == sm.concat([ours, ours])
    # ... and the installed library's masks are accepted by the copy (same protocol).
    assert vendored.as_sampling_mask(ours) == theirs  # type: ignore[attr-defined]


def test_a_vendored_mask_is_accepted_by_the_scorer(vendored: object) -> None:
    torch = pytest.importorskip("torch")
    from sampling_mask.reference_scorer import masked_logprobs

    rows = [[5, 1], [], [7, 2]]
    theirs = vendored.SamplingMask.from_rows(rows, vocab_size=10, sampled_token_ids=[5, -1, 2])  # type: ignore[attr-defined]
    ours = SamplingMask.from_rows(rows, vocab_size=10, sampled_token_ids=[5, -1, 2])
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(0))
    got, want = masked_logprobs(logits, theirs), masked_logprobs(logits, ours)
    assert torch.allclose(got.logprobs, want.logprobs, equal_nan=True)
    assert bool(torch.isfinite(got.logprobs[[0, 2]]).all())


class _NotAMask:
    ids = np.array([1], dtype=np.int32)  # array attributes alone are not the protocol


class _BadProtocol:
    def __init__(self, fields: dict[str, object]) -> None:
        self.fields = fields

    def __sampling_mask__(self) -> dict[str, object]:
        return self.fields


def _fields(**changes: object) -> dict[str, object]:
    base = SamplingMask.from_rows([[5, 1], [7]], vocab_size=10).__sampling_mask__()
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


@pytest.mark.parametrize(
    ("obj", "code"),
    [
        (_NotAMask(), ErrorCode.E_SCHEMA),
        (_BadProtocol(_fields(protocol=2)), ErrorCode.E_VERSION),
        (_BadProtocol(_fields(offsets=...)), ErrorCode.E_SCHEMA),
        (_BadProtocol(_fields(colour=np.zeros(2))), ErrorCode.E_SCHEMA),
        (_BadProtocol(_fields(ids=np.array([5, 5, 7], dtype=np.int32))), ErrorCode.E_DUPLICATE),
    ],
)
def test_anything_else_is_refused_with_an_error_code_everywhere(obj: object, code: ErrorCode) -> None:
    with pytest.raises(SamplingMaskError) as encoded:
        sm.encode(obj, "json")  # type: ignore[arg-type]
    assert encoded.value.code is code
    from sampling_mask.adapters import skyrl

    with pytest.raises(SamplingMaskError) as adapted:
        skyrl.to_dense(obj, top_k=2)  # type: ignore[arg-type]
    assert adapted.value.code is code
    torch = pytest.importorskip("torch")
    from sampling_mask.reference_scorer import masked_logprobs

    with pytest.raises(SamplingMaskError) as scored:
        masked_logprobs(torch.zeros(2, 10), obj, targets=[5, 7])  # type: ignore[arg-type]
    expected = ErrorCode.E_DTYPE if isinstance(obj, _NotAMask) else code  # not a mask: read as a dense tensor
    assert scored.value.code is expected


# ---------------------------------------------------------------------------- one codec contract in the copy
def test_the_copy_offers_top_level_encode_and_decode_for_the_formats_it_holds(vendored: object) -> None:
    v: Any = vendored
    assert v.codecs.FORMATS == ("msgpack", "json", "json-rows", "base64")
    assert {"encode", "decode"} <= set(v.__all__)
    theirs = v.SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3])
    for fmt in ("msgpack", "json"):
        data = v.encode(theirs, fmt)
        assert data == sm.encode(theirs, fmt)  # the same bytes as the installed library writes
        assert v.decode(data) == theirs and v.decode(data, format=fmt, validate=False, copy=True) == theirs
    assert v.decode(v.encode(v.SamplingMask.from_rows([[3]]), "json-rows")).to_rows() == [[3]]
    with pytest.raises(v.SamplingMaskError) as info:
        v.encode(theirs, "parquet")
    assert info.value.code.value == "E_SCHEMA" and "not in this copy" in info.value.message
    with pytest.raises(v.SamplingMaskError) as info:
        v.decode(sm.encode(theirs, "msgpack"), format="arrow")
    assert info.value.code.value == "E_SCHEMA"


def test_masks_of_copies_and_of_the_library_compare_equal(tmp_path: Path, vendored: object) -> None:
    v: Any = vendored
    other_name = "acme_other_copy"
    assert vendor(tmp_path / other_name, other_name) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        other: Any = importlib.import_module(other_name)
        fields: dict[str, Any] = {"vocab_size": 10, "cu_seqlens": [0, 2, 3], "sampled_token_ids": [5, -1, 7]}
        rows = [[5, 1], [], [7]]
        ours, theirs, third = (lib.SamplingMask.from_rows(rows, **fields) for lib in (sm, v, other))
        assert type(ours) is not type(theirs) and type(theirs) is not type(third)
        for a in (ours, theirs, third):
            for b in (ours, theirs, third):
                assert a == b and not a != b
        changed = v.SamplingMask.from_rows([[5, 2], [], [7]], **{**fields, "sampled_token_ids": [5, -1, 7]})
        assert ours != changed and changed != ours and third != changed
        assert ours != object() and theirs != [1, 2]  # not masks: unequal, no error
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m == other_name or m.startswith(f"{other_name}.")]:
            del sys.modules[module]


def test_the_vendored_msgpack_codec_needs_no_msgpack_package(vendored: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy writes the envelope with its own writer: with ``import msgpack`` failing it
    encodes the library's bytes; a missing package is named as a pip package, not as an extra of a
    sampling-mask that is not installed. (tests/test_codecs_msgpack.py does it in a fresh interpreter.)"""
    v: Any = vendored
    mask = v.SamplingMask.from_rows([[5, 1], [7]], vocab_size=10, metadata={"top_k": 2})
    monkeypatch.setitem(sys.modules, "msgpack", None)
    data = importlib.import_module(f"{v.__name__}.codecs.msgpack").encode(mask)
    assert data == v.encode(mask, "msgpack") == sm.encode(mask, "msgpack") and v.decode(data) == mask
    err = v.UnavailableError("pyarrow", what="parquet encoding")
    assert type(err).__module__ == f"{v.__name__}.core.optional" and isinstance(err, ModuleNotFoundError)
    assert err.code == "E_UNAVAILABLE" and err.extra is None and "(pip install pyarrow)" in str(err)
    assert "sampling-mask[" not in str(err)
    assert "sampling-mask[arrow]" in str(sm.UnavailableError("pyarrow"))  # the library names its extra


def test_the_copy_says_what_each_codec_needs(tmp_path: Path) -> None:
    assert vendor(tmp_path / "mask", "mask", "--codecs", "json,msgpack") == 0
    manifest = json.loads((tmp_path / "mask" / MANIFEST).read_text())
    assert manifest["needs"] == {"core": ["numpy"], "json": ["numpy"], "msgpack": ["numpy"]}
    readme = (tmp_path / "mask" / "README.md").read_text()
    for line in ("- core: numpy only", "- codec json: numpy only", "- codec msgpack: numpy only"):
        assert line in readme
    assert "msgpack for" not in readme and "pip install" not in readme


def test_vendor_help_offers_no_local_limits(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vendor", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--package" in text and "--local-limits" not in text
    assert main(["inspect", "--help"]) == 0
    assert "--local-limits" in capsys.readouterr().out  # the commands that read mask files keep it


#: The library's own import path, where a copy must name its own package instead.
OWN_PATH = re.compile(r"\bimport sampling_mask\b|\bsampling_mask\.(?:SamplingMask|decode|encode|codecs|core)\b")


def test_copied_docstrings_name_the_copy_not_the_library(vendored: object) -> None:
    v: Any = vendored
    root = Path(v.__file__).parent
    sources = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")}
    originals = [(PACKAGE / rel).read_text() for rel in vendorable_files(("json", "msgpack"))]
    assert any(OWN_PATH.search(text) for text in originals)  # there was something to rewrite
    for rel, text in sources.items():
        body = text.partition("\n")[2]  # the header names the source file on purpose
        assert not OWN_PATH.search(body), f"{rel}: {OWN_PATH.search(body)}"
    assert '"sampling_mask"' in sources["codecs/_common.py"]  # the wire key is not a path: kept
    import doctest

    for name in ("json", "msgpack"):
        result = doctest.testmod(importlib.import_module(f"{v.__name__}.codecs.{name}"))
        assert result.attempted and not result.failed, name


# ---------------------------------------------------------------------------- destinations: symlinks and manifests
def _vendor(dest: Path, *flags: str) -> int:
    return main(["-q", "vendor", str(dest), "--package", dest.name, "--codecs", "json", *flags])


def test_vendor_refuses_a_codecs_folder_linked_outside(tmp_path: Path) -> None:
    dest, outside = tmp_path / "pkg", tmp_path / "outside"
    assert _vendor(dest) == 0
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    for child in (dest / "codecs").iterdir():
        child.unlink()
    (dest / "codecs").rmdir()
    (dest / "codecs").symlink_to(outside)
    for flags in ((), ("--force",)):
        assert _vendor(dest, *flags) == 2
        assert listing(outside) == ["keep.txt"] and (outside / "keep.txt").read_text() == "mine"


def test_vendor_never_deletes_through_a_tampered_manifest(tmp_path: Path) -> None:
    dest, outside = tmp_path / "pkg", tmp_path / "outside"
    assert _vendor(dest) == 0
    outside.mkdir()
    (outside / "victim.txt").write_text("victim")
    (dest / "lnk").symlink_to(outside)
    manifest = json.loads((dest / "VENDORED.json").read_text())
    manifest["files"]["lnk/victim.txt"] = "0" * 64
    (dest / "VENDORED.json").write_text(json.dumps(manifest))
    before = {p: p.read_bytes() for p in dest.rglob("*.py")}
    assert _vendor(dest, "--force") == 2
    assert (outside / "victim.txt").read_text() == "victim"
    assert {p: p.read_bytes() for p in dest.rglob("*.py")} == before  # refused before anything was written


def test_vendor_with_a_manifest_entry_naming_a_folder_keeps_working(tmp_path: Path) -> None:
    dest = tmp_path / "pkg"
    assert _vendor(dest) == 0
    manifest = json.loads((dest / "VENDORED.json").read_text())
    manifest["files"]["core"] = "0" * 64
    (dest / "VENDORED.json").write_text(json.dumps(manifest))
    assert _vendor(dest) == 0
    assert _vendor(dest) == 0
    assert "core" not in json.loads((dest / "VENDORED.json").read_text())["files"]
    assert (dest / "core" / "model.py").is_file()
