"""The conformance suite itself: the reference passes it, it lints clean, goldens match the generator."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sampling_mask.conformance import lint, runner
from sampling_mask.conformance.protocol import CommandImplementation
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import FORMS, load_cases, vectors_dir
from sampling_mask.core.errors import ErrorCode

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "tools" / "conformance" / "generate.py"  # a maintainer tool, not in the package


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("conformance_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


def test_reference_passes_every_case_and_prints_the_summary() -> None:
    out = io.StringIO()
    assert runner.main([], out=out) == 0, out.getvalue()[-3000:]
    text = out.getvalue()
    assert "OK:" in text
    summary = text[text.index("sampling-mask conformance v1: reference") :]
    for form in FORMS:
        assert f"\n{form} " in summary, form
    total = next(line for line in summary.splitlines() if line.startswith("total"))
    cases, passed, *rest = (int(x) for x in total.split()[1:])
    assert cases == passed == len(load_cases()) and not any(rest)


def test_suite_size_and_coverage() -> None:
    problems, stats = lint.lint()
    assert problems == []
    assert stats["valid"] >= 60 and stats["invalid"] >= 60
    assert all(stats["codes"][code.value] >= 1 for code in ErrorCode)
    assert set(FORMS) <= set(stats["forms"])
    assert all(v >= 1 and i >= 1 for v, i in (stats["forms"][f] for f in FORMS))
    assert stats["spec_checked"]  # in a checkout every spec reference is resolved against SPEC.md


def test_ecosystem_edge_cases_are_present() -> None:
    ids = {c.id for c in load_cases()}
    for expected in (
        "dense.ties-wider-than-top-k",
        "ragged.ties-wider-than-top-k",
        "ragged.unsorted-rows",
        "json-rows.unsorted-rows",
        "packed.all-empty-sequences",
        "ragged.all-empty-segments",
        "dense.zero-rows",
        "ragged.zero-rows",
        "dense.maximal-int32-id",
        "json-rows.maximal-int32-id",
        "ragged.offsets-int64-not-truncated",
        "dense.int64-id-beyond-int32",
    ):
        assert expected in ids


def test_goldens_match_the_generator(capsys: pytest.CaptureFixture[str]) -> None:
    """CI fails when a golden is missing, stale or stray; only `generate --write` rewrites them."""
    code = generate.main([])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "case files match the generator" in out


#: Run in a child whose numpy may not use the SIMD kernels this CPU has beyond the baseline.
_NARROWED_CHECK = """
import sys
from numpy._core import _multiarray_umath as m
disabled = sys.argv[1].split()
assert not any(m.__cpu_features__.get(f) for f in disabled), "NPY_DISABLE_CPU_FEATURES had no effect"
import runpy
sys.argv = [sys.argv[2]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_goldens_match_the_generator_with_cpu_dispatch_narrowed() -> None:
    """Computed floats in the vectors are rounded (``generate.stable_float``), so the files are the same
    whichever exp / log kernels numpy picks at run time: the check passes again with every dispatched
    feature of this CPU disabled (on a baseline-only CPU this repeats the check above)."""
    from numpy._core import _multiarray_umath as umath

    features = [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(features), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-W", "error::ImportWarning", "-c", _NARROWED_CHECK, " ".join(features), str(GENERATOR)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"with {features} disabled:\n{proc.stdout}{proc.stderr}"
    assert "case files match the generator" in proc.stdout


def test_computed_floats_are_rounded_far_from_a_rounding_boundary() -> None:
    assert generate.stable_float(0.5482729115778268) == generate.stable_float(0.548272911577826) == 0.548272912
    assert generate.stable_float(-123.456789012345) == -123.456789
    with pytest.raises(AssertionError, match="rounding boundary"):
        generate.stable_float(0.1234567885)


@pytest.fixture()
def suite_copy(tmp_path: Path) -> Path:
    root = tmp_path / "conformance"
    shutil.copytree(REPO / "conformance", root)
    shutil.copytree(REPO / "spec", tmp_path / "spec")  # lint resolves spec references against it
    return root


def test_a_changed_golden_fails_the_check_and_is_not_rewritten(
    suite_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = suite_copy / "v1" / "dense" / "decode.json"
    text = path.read_text().replace('"vocab_size": 10', '"vocab_size": 11', 1)
    path.write_text(text)
    assert generate.main(["--root", str(suite_copy)]) == 1
    assert "differs from the generator: v1/dense/decode.json" in capsys.readouterr().out
    assert path.read_text() == text  # checking never rewrites


def test_a_missing_or_stray_golden_fails_the_check(suite_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (suite_copy / "v1" / "ragged" / "encode.json").unlink()
    (suite_copy / "v1" / "dense" / "extra.json").write_text("{}")
    assert generate.main(["--root", str(suite_copy)]) == 1
    out = capsys.readouterr().out
    assert "missing: v1/ragged/encode.json" in out
    assert "not produced by the generator: v1/dense/extra.json" in out
    assert generate.main(["--root", str(suite_copy), "--write"]) == 0
    assert generate.main(["--root", str(suite_copy)]) == 0


def _edit_case(root: Path, rel: str, index: int, **changes: object) -> None:
    path = root / rel
    doc = json.loads(path.read_text())
    doc["cases"][index].update(changes)
    path.write_text(json.dumps(doc))


def test_lint_catches_a_broken_suite(suite_copy: Path) -> None:
    first = json.loads((suite_copy / "v1/dense/decode.json").read_text())["cases"][0]["id"]
    _edit_case(suite_copy, "v1/ragged/decode.json", 0, id=first)  # duplicate id, wrong form prefix
    _edit_case(suite_copy, "v1/counts/decode.json", 1, level="optional")  # not in the schema
    _edit_case(suite_copy, "v1/dense/decode.json", 2, spec="SPEC.md#no-such-section")
    width = json.loads((suite_copy / "v1/invalid/dense.json").read_text())
    width["cases"] = [c for c in width["cases"] if c["expected"] != {"error": "E_WIDTH"}]
    (suite_copy / "v1/invalid/dense.json").write_text(json.dumps(width))
    problems, _ = lint.lint(suite_copy)
    text = "\n".join(problems)
    assert f"duplicate id {first}" in text
    assert "ids start with the form (ragged.)" in text
    assert "schema: cases/1/level" in text
    assert "no-such-section names no section" in text
    assert "error code E_WIDTH is not the sole expected code of any case" in text


def test_lint_catches_misfiled_cases_and_malformed_arrays(suite_copy: Path) -> None:
    valid = json.loads((suite_copy / "v1/dense/decode.json").read_text())
    valid["cases"][0]["expected"] = {"error": "E_PADDING"}  # an invalid case outside invalid/
    valid["cases"][1]["input"]["dense"]["hex"] = "00"  # a valid case whose bytes disagree with its shape
    valid["cases"][3]["expected"]["mask"]["rows"] = [[9, 3, 7]]  # an expected mask that is not canonical
    (suite_copy / "v1/dense/decode.json").write_text(json.dumps(valid))
    problems, _ = lint.lint(suite_copy)
    text = "\n".join(problems)
    assert "a case expecting an error belongs in invalid/" in text
    assert "malformed typed array at input.dense" in text
    assert "expected mask: row 0 is not strictly ascending" in text


def test_every_case_says_when_it_came_and_which_requirements_it_holds() -> None:
    """Every case carries ``since``: the frozen 1.0 set is exactly the cases of 1.0, and each later
    release has cases of its own; ``requirements`` are the Appendix A rows that name the case."""
    from sampling_mask.conformance.suite import frozen_cases

    cases = load_cases()
    frozen = frozen_cases("1.0")
    assert all(c.since is not None for c in cases)
    assert {c.id for c in cases if c.since == "1.0"} == set(frozen)
    counts = {release: sum(c.since == release for c in cases) for release in ("1.1", "1.2", "1.3", "1.4")}
    assert all(n >= 20 for n in counts.values()), counts
    by_id = {c.id: c for c in cases}
    assert by_id["model.slice-stop-omitted"].since == "1.3"
    assert by_id["parquet.leading-magic-damaged"].since == "1.4"
    assert by_id["msgpack.ragged-counts-uint8"].since == "1.1"
    assert "R-3.6-8" in by_id["model.slice-stop-omitted"].requirements
    assert by_id["model.slice-whole-mask"].requirements == ("R-3.6-1", "R-3.6-8", "R-3.6-9")
    assert sum(bool(c.requirements) for c in cases) >= 300


def test_lint_checks_since_and_requirements(suite_copy: Path) -> None:
    """A case marked 1.0 that the frozen set does not list (or the converse), one later than the spec,
    and requirements other than the appendix's rows are each a problem; a case without since breaks the
    schema."""
    _edit_case(suite_copy, "v1/dense/decode.json", 0, since="1.2")  # dense.issue-example is frozen
    _edit_case(suite_copy, "v1/model/operations.json", 0, since="1.0")  # not in the frozen set
    _edit_case(suite_copy, "v1/invalid/model.json", 0, since="1.9")
    _edit_case(suite_copy, "v1/ragged/decode.json", 0, requirements=["R-3.2-1"])
    path = suite_copy / "v1/counts/decode.json"
    doc = json.loads(path.read_text())
    del doc["cases"][0]["since"]
    path.write_text(json.dumps(doc))
    problems, _ = lint.lint(suite_copy)
    text = "\n".join(problems)
    assert "dense.issue-example: since 1.2, but the frozen 1.0 set lists it" in text
    assert "model.concatenate: since 1.0, but the frozen 1.0 set does not list it" in text
    assert "since 1.9, later than spec/v1/SPEC.md's revision 1.4" in text
    assert "requirements ['R-3.2-1'] are not the Appendix A rows that name the case" in text
    assert "v1/counts/decode.json: schema: cases/0: 'since' is a required property" in text


def test_vectors_ship_with_the_package() -> None:
    """The package finds its vectors at sampling_mask/conformance/vectors, the same files as <repo>/conformance."""
    root = vectors_dir()
    assert root.resolve() == (REPO / "conformance").resolve()
    assert (REPO / "sampling_mask" / "conformance" / "vectors" / "v1").is_dir()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"sampling_mask.conformance" = ["vectors/**/*"]' in pyproject


def test_reference_over_the_subprocess_protocol() -> None:
    """The reference served on stdin / stdout passes a slice of every form (one process for all)."""
    cases = [c for c in load_cases() if c.id.split(".", 1)[1].startswith(("issue-example", "encode-", "zero-rows"))]
    assert len({c.form for c in cases}) >= 8
    impl = CommandImplementation("python -m sampling_mask.conformance.reference", timeout=60)
    try:
        report = runner.run(impl, cases)
    finally:
        impl.close()
    assert report.ok, [(r.case.id, r.detail) for r in report.failures()]
    assert impl.starts == 1


def test_reference_handles_protocol_garbage() -> None:
    ref = ReferenceImplementation()
    assert "unsupported" in ref.handle({"op": "frobnicate", "form": "dense", "input": {}})
    assert "unsupported" in ref.handle({"op": "decode", "form": "png", "input": {}})
    assert ref.handle({"op": "decode", "form": "dense", "input": []})["rejected"]["code"] == "E_SCHEMA"
    assert (
        ref.handle({"op": "decode", "form": "dense", "input": {}, "limits": {"max_rowz": 1}})["rejected"]["code"]
        == "E_SCHEMA"
    )
