"""The runner: protocol handling, expected-failures semantics, reports, JUnit XML, the three ways to name an implementation."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from sampling_mask.conformance import runner
from sampling_mask.conformance.protocol import (
    CommandImplementation,
    FunctionImplementation,
    load_python_implementation,
    response_kind,
)
from sampling_mask.conformance.reference import ReferenceImplementation, Unsupported
from sampling_mask.conformance.suite import ExpectedFailures, load_cases

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

CASES = load_cases()
BY_ID = {c.id: c for c in CASES}
DENSE = [c for c in CASES if c.form == "dense"]


def test_response_kinds() -> None:
    assert response_kind({"ok": None}) == ("ok", None)
    assert response_kind({"rejected": {"code": "E_RANGE"}, "id": "x"}, "x")[0] == "rejected"
    assert response_kind({"unsupported": "no"})[0] == "unsupported"
    for bad in ([], {}, {"ok": 1, "error": "x"}, {"rejected": "E_RANGE"}, {"rejected": {"message": "no code"}}):
        kind, why = response_kind(bad)
        assert kind == "error" and why.startswith("protocol:")
    assert response_kind({"ok": 1, "id": "other"}, "mine")[0] == "error"


def test_judging_distinguishes_rejection_from_crash() -> None:
    bad = BY_ID["dense.padding-between-ids"]
    good = BY_ID["dense.issue-example"]
    assert runner.judge(bad, {"rejected": {"code": "E_PADDING"}}) == ("pass", "rejected with E_PADDING")
    assert runner.judge(bad, {"rejected": {"code": "E_RANGE"}})[0] == "fail"
    assert runner.judge(bad, {"ok": {"rows": [[1, 5]]}})[0] == "fail"
    assert runner.judge(bad, {"error": "IndexError"})[0] == "error"  # a crash is never a correct rejection
    assert runner.judge(bad, {"unsupported": "dense"})[0] == "unsupported"
    assert runner.judge(good, {"rejected": {"code": "E_PADDING"}})[0] == "fail"
    outcome, detail = runner.judge(good, {"ok": {"rows": [[5, 1], [], [7]], "vocab_size": 10}})
    assert outcome == "fail" and "canonical (ascending) order" in detail
    assert runner.judge(good, {"ok": {"rows": [[1, 5], [], [7]], "vocab_size": 10}})[0] == "pass"
    either = dataclasses.replace(bad, expected={"error": ["E_LIMIT", "E_BYTES"]})
    assert {runner.judge(either, {"rejected": {"code": c}})[0] for c in ("E_LIMIT", "E_BYTES")} == {"pass"}
    assert runner.judge(either, {"rejected": {"code": "E_PADDING"}})[0] == "fail"


def test_score_judging_uses_the_tolerance() -> None:
    case = BY_ID["scorer.basic"]
    want = case.expected["scores"]
    near = {k: [v + 1e-9 for v in vals] for k, vals in want.items()}
    far = {k: [v + 1e-3 for v in vals] for k, vals in want.items()}
    assert runner.judge(case, {"ok": near})[0] == "pass"
    outcome, detail = runner.judge(case, {"ok": far})
    assert outcome == "fail" and "logprobs[0]" in detail


def _fail_on(*ids: str) -> FunctionImplementation:
    reference = ReferenceImplementation()

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        return {"error": "broken on purpose"} if request["id"] in ids else reference.handle(request)

    return FunctionImplementation(handle, "fails-on-some")


def test_expected_failures_xfail_and_xpass() -> None:
    impl = _fail_on("dense.zero-width")
    listed = ExpectedFailures(["dense.zero-width", "dense.zero-rows"])
    report = runner.run(impl, DENSE, expected_failures=listed)
    status = {r.case.id: r.status for r in report.results}
    assert status["dense.zero-width"] == "XFAIL"
    assert status["dense.zero-rows"] == "XPASS"  # listed but passing: the list is stale
    assert not report.ok
    assert [r.case.id for r in report.failures()] == ["dense.zero-rows"]
    fixed = runner.run(impl, DENSE, expected_failures=ExpectedFailures(["dense.zero-width"]))
    assert fixed.ok


def test_a_pattern_matching_no_case_fails_the_run() -> None:
    report = runner.run(ReferenceImplementation(), DENSE, expected_failures=ExpectedFailures(["dense.no-such-*"]))
    assert report.stale_patterns == ["dense.no-such-*"] and not report.ok
    # A filtered run checks staleness against every case, not just the ones it ran.
    other = runner.run(
        ReferenceImplementation(),
        DENSE,
        expected_failures=ExpectedFailures(["ragged.*"]),
        all_case_ids=[c.id for c in CASES],
    )
    assert other.stale_patterns == []


def test_expected_failures_file_format(tmp_path: Path) -> None:
    path = tmp_path / "xfail.txt"
    path.write_text("# comment\n\ndense.zero-*   # globs and trailing comments\nragged.issue-example\n")
    listed = ExpectedFailures.read(path)
    assert listed.patterns == ["dense.zero-*", "ragged.issue-example"]
    assert listed.matches("dense.zero-width") and not listed.matches("dense.issue-example")


def test_cli_exit_status_summary_and_junit(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    out = io.StringIO()
    code = runner.main(["--form", "counts", "--junit-xml", str(junit)], out=out)
    assert code == 0
    assert "PASS        counts.issue-example" in out.getvalue()
    root = ET.parse(junit).getroot()
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["conformance.counts"]
    assert int(suites[0].get("tests", "0")) == sum(1 for c in CASES if c.form == "counts")
    assert suites[0].get("failures") == "0" and suites[0].get("errors") == "0"


def test_cli_fails_with_a_broken_python_implementation(tmp_path: Path) -> None:
    module = tmp_path / "always_ok_impl.py"
    module.write_text(
        "def handle(request):\n    return {'ok': {'rows': [], 'cu_seqlens': [0, 0], 'vocab_size': None}}\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        out = io.StringIO()
        junit = tmp_path / "broken.xml"
        code = runner.main(
            ["--impl", "always_ok_impl:handle", "--form", "dense", "-q", "--junit-xml", str(junit)], out=out
        )
    finally:
        sys.path.remove(str(tmp_path))
    assert code == 1
    text = out.getvalue()
    assert "FAIL        dense.padding-between-ids  accepted invalid input (expected rejection with E_PADDING)" in text
    assert "PASS        dense." not in text  # -q prints only what is not as expected
    assert "FAILED:" in text
    empty = {"rows": [], "cu_seqlens": [0, 0], "vocab_size": None}
    right = [c.id for c in CASES if c.form == "dense" and c.expected.get("mask") == empty]
    assert right == ["dense.zero-rows", "dense.zero-rows-zero-width"]  # an empty answer is right only there
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert len(failures) == sum(1 for c in CASES if c.form == "dense") - len(right)


def test_load_python_implementation_forms() -> None:
    impl = load_python_implementation("sampling_mask.conformance.reference:ReferenceImplementation")
    assert isinstance(impl, ReferenceImplementation)
    for bad in ("no_colon", "sampling_mask:nope"):
        with pytest.raises((ValueError, AttributeError)):
            load_python_implementation(bad)


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    """Bad usage is one line on stderr and exit 2; in particular nothing selected is never "OK: 0 cases"."""
    for argv, says in (
        (["--impl", "sampling_mask:nope"], "cannot load sampling_mask:nope"),
        (["--impl", "x:y", "--command", "z"], "not allowed with argument"),
        (["--form", "nope"], "unknown form 'nope'; one of: dense,"),
        (["--form", "jsonrows"], "unknown form 'jsonrows'; did you mean 'json-rows'?"),
        (["-k", "nomatch*"], "no case selected"),
        (["--form", "dense", "--class", "ragged reader"], "no case selected of the classes ['ragged reader']"),
        (["--class", "json-rows reeder"], "unknown class 'json-rows reeder'; did you mean 'json-rows reader'?"),
        (["--list", "-k", "nomatch*"], "no case selected: check --form, -k, --level, --class, --release and --since"),
        (["--list", "--since", "1.3", "--release", "1.0"], "no case selected"),
        (["--since", "1.x"], "--since takes a spec release such as 1.3, not '1.x'"),
        (["--list", "--form", "dense", "--class", "ragged reader"], "no case selected"),
        (["--profile-1.0", "x.msgpack", "--form", "dense"], "unknown form 'dense'"),
    ):
        out = io.StringIO()
        assert runner.main(argv, out=out) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("sampling-mask: error: E_USAGE: ") and says in err and err.count("\n") == 1, err
        assert out.getvalue() == ""


def test_lint_without_jsonschema_is_one_line_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema -> ModuleNotFoundError
    assert runner.main(["--lint"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("sampling-mask: error: E_UNAVAILABLE: --lint needs jsonschema") and err.count("\n") == 1


class _DenseOnly(ReferenceImplementation):
    """Decodes the dense form only (one case broken on purpose) and declares nothing."""

    classes = ()

    def describe(self) -> dict[str, Any]:
        raise Unsupported("describe")

    def decode(self, form: str, payload: Any, limits: Any = None) -> Any:
        if form != "dense":
            raise Unsupported(form)
        if payload == BY_ID["dense.zero-width"].input:
            raise RuntimeError("broken on purpose")
        return super().decode(form, payload) if limits is None else super().decode(form, payload, limits)


def test_unsupported_is_reported_apart_and_skipped_in_junit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "DenseOnly", _DenseOnly, raising=False)
    junit = tmp_path / "r.xml"
    out = io.StringIO()
    argv = ["--impl", f"{__name__}:DenseOnly", "--form", "dense", "--form", "counts", "-q", "--junit-xml", str(junit)]
    assert runner.main(argv, out=out) == 1
    text = out.getvalue()
    n_counts = sum(1 for c in CASES if c.conformance_class == "counts reader")
    assert f"FAILED: 1 case(s) not as expected, {n_counts} unsupported (declare the classes" in text
    assert "claimed: every class\nconforms to: dense writer, counts writer\n" in text
    assert "  dense reader: does not conform (1 required case(s) not passing)" in text
    root = ET.parse(junit).getroot()
    assert len(root.findall(".//skipped")) == n_counts and len(root.findall(".//error")) == 1
    assert not root.findall(".//failure")
    # Declared classes: only their cases run, and the summary says what it conforms to.
    out = io.StringIO()
    argv = ["--impl", f"{__name__}:DenseOnly", "--class", "dense reader", "--write-expected-failures"]
    assert runner.main([*argv, str(tmp_path / "xfail.txt")], out=out) == 1
    assert "FAILED: 1 case(s) not as expected\n" in out.getvalue()
    listed = (tmp_path / "xfail.txt").read_text().splitlines()
    assert [line for line in listed if not line.startswith("#")] == ["dense.zero-width"]
    out = io.StringIO()
    code = runner.main([*argv[:4], "--expected-failures", str(tmp_path / "xfail.txt")], out=out)
    assert code == 0, out.getvalue()[-2000:]
    assert "  dense reader: does not conform (1 required case(s) not passing)" in out.getvalue()


class _Counts(ReferenceImplementation):
    classes = ("counts *",)


def test_an_implementation_declares_its_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "Counts", _Counts, raising=False)
    out = io.StringIO()
    assert runner.main(["--impl", f"{__name__}:Counts", "-q"], out=out) == 0
    text = out.getvalue()
    assert "claimed: counts *\nconforms to: counts reader, counts writer\n" in text
    assert f"OK: {sum(1 for c in CASES if c.form == 'counts')} cases" in text


def test_impl_is_found_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyimpl_here.py").write_text(
        "from sampling_mask.conformance.reference import ReferenceImplementation\n\n"
        "class Impl(ReferenceImplementation):\n    classes = ('bitmask reader',)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    out = io.StringIO()
    assert runner.main(["--impl", "pyimpl_here:Impl", "-q"], out=out) == 0, out.getvalue()[-2000:]
    assert "conforms to: bitmask reader\n" in out.getvalue()


def test_list_and_lint_flags() -> None:
    out = io.StringIO()
    assert runner.main(["--list", "--form", "bitmask", "--level", "required"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("bitmask.") and "\trequired\t" in line for line in lines)
    out = io.StringIO()
    assert runner.main(["--lint"], out=out) == 0
    assert "lint: OK" in out.getvalue()


def test_a_program_that_cannot_start_stops_the_run_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    assert runner.main(["--command", "nonexistent-binary-xyz"], out=out) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "sampling-mask: error: E_IMPLEMENTATION: cannot start 'nonexistent-binary-xyz': No such file or directory\n"
    )
    assert out.getvalue() == ""
    dies = f"{sys.executable} -c 'import sys; print(\"no such script\", file=sys.stderr); sys.exit(3)'"
    assert runner.main(["--command", dies], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "did not answer its first request: the program exited (exit status 3)" in err and "no such script" in err
    assert err.count("\n") == 1


#: Answers ``describe`` (unsupported) and one more request, then dies on the next: a crash per case.
_CRASHER = (
    "import json, sys\n"
    "for n, line in enumerate(sys.stdin):\n"
    "    if json.loads(line)['op'] == 'describe' or n == 1:\n"
    "        print(json.dumps({'unsupported': 'x'}), flush=True)\n"
    "    else:\n"
    "        sys.exit(3)\n"
)


def test_command_that_crashes_or_hangs_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    script = tmp_path / "crasher.py"
    script.write_text(_CRASHER)
    # The crasher answers at once: a long timeout costs nothing, and a busy machine's slow restarts
    # (three of them, no start-up grace after the first) cannot turn an exit into a timeout.
    crash = CommandImplementation(f"{sys.executable} {script}", timeout=300)
    try:
        assert runner.declared_classes(crash) is None
        report = runner.run(crash, DENSE[:4])
    finally:
        crash.close()
    assert [r.status for r in report.results] == ["UNSUPPORTED", "ERROR", "ERROR", "ERROR"]
    assert "the program exited (exit status 3)" in report.results[1].detail and crash.starts == 3
    crash = CommandImplementation(f"{sys.executable} {script}", timeout=300)
    try:
        crash.handle({"id": "describe", "op": "describe"})
        with pytest.raises(runner.RunStopped, match="stopped after 2 consecutive crashes"):
            runner.run(crash, DENSE, max_crashes=2)
    finally:
        crash.close()
    hang = CommandImplementation(f"{sys.executable} -c 'import time; time.sleep(30)'", timeout=0.5, startup_grace=0)
    try:
        with pytest.raises(runner.RunStopped, match="no response within 0.5 s"):
            runner.run(hang, DENSE[:1])
    finally:
        hang.close()
    garbage = CommandImplementation(
        f"{sys.executable} -c 'import sys; [print(\"nope\", flush=True) for _ in sys.stdin]'"
    )
    try:
        outcome = runner.run(garbage, DENSE[:1]).results[0]
    finally:
        garbage.close()
    assert outcome.status == "ERROR" and "not JSON" in outcome.detail


#: Answers ``describe`` with its classes, then a line that is not JSON to every request.
_GARBLER = (
    "import json, sys\n"
    "for line in sys.stdin:\n"
    "    if json.loads(line)['op'] == 'describe':\n"
    "        print(json.dumps({'ok': {'classes': ['dense reader']}}), flush=True)\n"
    "    else:\n"
    "        print('hello', flush=True)\n"
)


def test_describe_answered_with_no_json_is_exit_2_and_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    garbage = f"{sys.executable} -c 'import sys; [print(\"Usage: impl FILE\", flush=True) for _ in sys.stdin]'"
    out = io.StringIO()
    assert runner.main(["--command", garbage], out=out) == 2
    err = capsys.readouterr().err
    assert err.startswith("sampling-mask: error: E_IMPLEMENTATION: the answer to describe is not a JSON object")
    assert "Usage: impl FILE" in err and err.count("\n") == 1
    assert "PASS" not in out.getvalue() and "ERROR" not in out.getvalue()  # no case was run
    assert runner.main(["--command", garbage, "--generated", "2", "--seed", "1"], out=io.StringIO()) == 2
    assert "not a JSON object" in capsys.readouterr().err


def test_max_crashes_stops_a_program_that_answers_no_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "garbler.py"
    script.write_text(_GARBLER)
    command = f"{sys.executable} {script}"
    out = io.StringIO()
    assert runner.main(["--command", command, "--max-crashes", "3"], out=out) == 2
    err = capsys.readouterr().err
    assert "E_IMPLEMENTATION: stopped after 3 consecutive crashes" in err and err.count("\n") == 1
    assert out.getvalue().count("ERROR") == 3  # three cases, then the stop
    assert runner.main(["--command", command, "--max-crashes", "2", "--generated", "5", "--seed", "1"], out=out) == 2
    assert "stopped after 2 consecutive crashes" in capsys.readouterr().err


def test_list_with_class_lists_only_that_class() -> None:
    out = io.StringIO()
    assert runner.main(["--list", "--class", "dense reader"], out=out) == 0
    classes = {line.split("\t")[3] for line in out.getvalue().splitlines()}
    assert classes == {"dense reader"}
    out = io.StringIO()
    assert runner.main(["--list", "--class", "model *", "--form", "model"], out=out) == 0
    listed = [line.split("\t") for line in out.getvalue().splitlines()]
    assert {c for _, _, _, c, _, _ in listed} == {"model reader", "model operations"}
    assert {op for _, op, _, _, _, _ in listed} >= {"validate", "concatenate", "slice", "take"}


def test_list_since_a_release_lists_the_cases_that_release_and_later_ones_added() -> None:
    """`--list --since 1.3` lists exactly the cases whose `since` is 1.3 or later, each with its release in
    the fifth column; a release is compared as numbers (1.10 would come after 1.4)."""
    every = load_cases()
    assert {c.since for c in every} == {"1.0", "1.1", "1.2", "1.3", "1.4"}
    out = io.StringIO()
    assert runner.main(["--list", "--since", "1.3"], out=out) == 0
    listed = {line.split("\t")[0]: line.split("\t")[4] for line in out.getvalue().splitlines()}
    assert listed == {c.id: c.since for c in every if c.since in ("1.3", "1.4")}
    assert "model.slice-stop-omitted" in listed and "dense.issue-example" not in listed
    out = io.StringIO()
    assert runner.main(["--list", "--since", "1.4", "--form", "parquet"], out=out) == 0
    assert {line.split("\t")[4] for line in out.getvalue().splitlines()} == {"1.4"}
    assert runner.select(every, since="1.10") == []  # not "1.10" < "1.4" as text
    assert len(runner.select(every, since="1.0")) == len(every)


def test_since_runs_only_the_later_cases() -> None:
    """`--since` selects what a run checks too, not only what `--list` prints."""
    out = io.StringIO()
    assert runner.main(["--since", "1.4", "--form", "parquet", "-q"], out=out) == 0, out.getvalue()[-2000:]
    total = next(line for line in out.getvalue().splitlines() if line.startswith("total"))
    expected = [c for c in load_cases() if c.form == "parquet" and c.since == "1.4"]
    assert int(total.split()[1]) == len(expected) >= 5


def test_a_case_file_without_since_or_with_keys_unknown_to_the_runner_still_runs(tmp_path: Path) -> None:
    """Readers ignore what they do not know: a suite written before `since` and `requirements` (no such
    keys), and one with a key this runner does not know, load and run as before; `since` and
    `requirements` never reach the implementation and change no frozen digest."""
    import json
    import shutil

    from sampling_mask.conformance.suite import frozen_cases, vectors_dir

    root = tmp_path / "suite"
    shutil.copytree(vectors_dir(), root, ignore=shutil.ignore_patterns("examples"))
    path = root / "v1" / "bitmask" / "decode.json"
    doc = json.loads(path.read_text())
    for case in doc["cases"]:
        case.pop("since")
        case.pop("requirements", None)
        case["x-later-field"] = {"anything": [1]}
    path.write_text(json.dumps(doc))
    cases = [c for c in load_cases(root) if c.file == "v1/bitmask/decode.json"]
    assert cases and all(c.since is None and c.requirements == () for c in cases)
    out = io.StringIO()
    assert runner.main(["--vectors", str(root), "--form", "bitmask", "-q"], out=out) == 0, out.getvalue()[-2000:]
    out = io.StringIO()
    assert runner.main(["--vectors", str(root), "--list", "--form", "bitmask"], out=out) == 0
    assert any(line.split("\t")[4] == "-" for line in out.getvalue().splitlines())
    assert not any({"since", "requirements"} & set(c.request()) for c in load_cases())
    frozen = frozen_cases("1.0")
    assert all(c.digest == frozen[c.id] for c in load_cases() if c.id in frozen)


def test_pytest_pyargs_entry_point_runs_the_cases() -> None:
    """`pytest --pyargs sampling_mask.conformance` runs every vector against the implementation named in
    the environment (here: the reference over --command, as an implementer would)."""
    env = dict(os.environ)
    env["SAMPLING_MASK_CONFORMANCE_COMMAND"] = f"{sys.executable} -m sampling_mask.conformance.reference"
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "sampling_mask.conformance",
            "-q",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_case and (counts or packed)",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = sum(1 for c in CASES if "counts" in c.id or "packed" in c.id)  # -k matches substrings of ids
    assert f"{expected} passed" in proc.stdout


class _DropsTrailingEmptyRows(ReferenceImplementation):
    """Trims empty rows at the end of a decoded mask; declares the ragged reader class only."""

    classes = ("ragged reader",)

    def decode(self, form: str, payload: Any, limits: Any = None) -> Any:
        from sampling_mask import SamplingMask

        mask = super().decode(form, payload) if limits is None else super().decode(form, payload, limits)
        rows = mask.to_rows()
        while rows and not rows[-1]:
            rows.pop()
        return SamplingMask.from_rows(rows, vocab_size=mask.vocab_size, metadata=mask.metadata)


def test_generated_cases_find_a_bug_and_print_a_pasteable_minimal_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    monkeypatch.setattr(sys.modules[__name__], "DropsTrailingEmptyRows", _DropsTrailingEmptyRows, raising=False)
    out = io.StringIO()
    argv = ["--impl", f"{__name__}:DropsTrailingEmptyRows", "--generated", "60", "--seed", "3"]
    assert runner.main(argv, out=out) == 1
    text = out.getvalue()
    assert text.startswith("sampling-mask conformance --generated 60 --seed 3\n")
    assert "FAIL        ragged reader: valid payload: expected 1 rows, got 0" in text  # shrunk to one empty row
    assert "rerun with --generated 60 --seed 3" in text
    vector = json.loads(text.split("ready to paste into a case file:\n", 1)[1].split("\nFAIL", 1)[0].split("\n\n")[0])
    assert vector["id"] == "ragged.generated-seed-3" and vector["expected"]["mask"]["rows"] == [[]]
    case = runner.Case(
        id=vector["id"],
        form="ragged",
        op="decode",
        description="",
        spec="",
        level="required",
        input=vector["input"],
        expected=vector["expected"],
        file="",
    )
    assert runner.judge(case, ReferenceImplementation().handle(case.request()))[0] == "pass"
    assert runner.judge(case, _DropsTrailingEmptyRows().handle(case.request()))[0] == "fail"
    # the same seed draws the same cases: the reference agrees with itself on every one
    out = io.StringIO()
    assert runner.main(["--class", "ragged reader", "--generated", "60", "--seed", "3"], out=out) == 0
    assert "OK: 1 class(es), 60 generated cases per kind" in out.getvalue()


#: Prints what generated mode draws for a seed, as JSON text (run in a fresh process).
_DRAWN_ELSEWHERE = """
import io, json, sys
from sampling_mask.conformance.generated import run_generated
from sampling_mask.conformance.reference import ReferenceImplementation

seen = []

class Recording(ReferenceImplementation):
    def handle(self, request):
        seen.append(request)
        return super().handle(request)

for name in sys.argv[1].split(","):
    run_generated(Recording(), int(sys.argv[2]), seed=int(sys.argv[3]), classes=[name], out=io.StringIO())
print(json.dumps(seen, sort_keys=True))
"""


def _drawn(classes: tuple[str, ...], n: int, seed: int) -> str:
    """Every request `--generated n --seed seed` sends for ``classes``, as JSON text (NaN and all)."""
    import json

    from sampling_mask.conformance.generated import run_generated

    seen: list[dict[str, Any]] = []

    class Recording(ReferenceImplementation):
        def handle(self, request: dict[str, Any]) -> dict[str, Any]:
            seen.append(request)
            return super().handle(request)

    for name in classes:
        assert run_generated(Recording(), n, seed=seed, classes=[name], out=io.StringIO()) == 0
    return json.dumps(seen, sort_keys=True)


def test_a_seed_draws_the_same_cases_whatever_ran_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--generated N --seed S` draws the same cases twice in one process, with other draws between and
    a module of new constants imported (hypothesis would otherwise draw constants read from it), and in
    a fresh process started in another directory without the tests' hypothesis profile."""
    import importlib

    classes = ("ragged reader", "model operations", "scorer")
    first = _drawn(classes, 20, 11)
    assert first.count('"op": ') == 20 * (3 + 1 + 2)  # three kinds of reader requests, two of scorer ones
    _drawn(classes, 10, 12)
    source = "VALUES = [" + ", ".join(str(v) for v in range(3, 4000, 7)) + "]\n"
    source += "FLOATS = [-12.375, -0.8125, 0.3125, 1.6875]\nWORDS = ['vllm', 'top_k', 'seed']\n"
    (tmp_path / "constants_elsewhere.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("constants_elsewhere")
    assert _drawn(classes, 20, 11) == first
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", _DRAWN_ELSEWHERE, ",".join(classes), "20", "11"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == first


def test_the_cli_subcommand_gives_one_line_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from sampling_mask.cli import main as cli_main

    assert cli_main(["conformance", "--form", "jsonrows"]) == 2
    err = capsys.readouterr().err
    assert err == "sampling-mask: error: E_USAGE: unknown form 'jsonrows'; did you mean 'json-rows'?\n"
    assert cli_main(["conformance", "--bogus-flag"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("sampling-mask: error: E_USAGE: unrecognized arguments: --bogus-flag") and err.count("\n") == 1
    )


def _supports_nothing(request: dict[str, Any]) -> dict[str, Any]:
    return {"unsupported": "nothing"}


def test_generated_cases_that_check_nothing_are_not_green(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "supports_nothing", _supports_nothing, raising=False)
    out = io.StringIO()
    assert runner.main(["--impl", f"{__name__}:supports_nothing", "--generated", "5", "--form", "dense"], out=out) == 2
    assert "SKIP        dense reader: unsupported" in out.getvalue()
    assert "nothing checked" in out.getvalue()


def test_generated_cases_agree_with_the_reference_over_the_protocol_for_seeds_1_to_5() -> None:
    """The reference served over --command agrees with itself on generated cases of every class
    (model operations included; CI-sized: the full run is `--generated 200 --seed 1..5`)."""
    from sampling_mask.conformance.generated import GENERATED_CLASSES, run_generated

    assert "model operations" in GENERATED_CLASSES
    served = CommandImplementation(f"{sys.executable} -m sampling_mask.conformance.reference", timeout=60)
    try:
        for seed in range(1, 6):
            out = io.StringIO()
            assert run_generated(served, 3, seed=seed, out=out, max_crashes=2) == 0, out.getvalue()[-2000:]
            assert f"OK: {len(GENERATED_CLASSES)} class(es)" in out.getvalue()
    finally:
        served.close()


def test_runner_and_generated_share_run_stopped_without_an_import_circle() -> None:
    """`RunStopped` lives in the protocol module: `generated` never imports `runner` (no import circle)."""
    import ast
    import inspect

    from sampling_mask.conformance import generated, protocol

    tree = ast.parse(inspect.getsource(generated))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "runner" not in imported and "protocol" in imported
    assert runner.RunStopped is protocol.RunStopped is generated.RunStopped
