"""Run the conformance suite against an implementation and report per case and per form.

``python -m sampling_mask.conformance.runner`` (also ``sampling-mask conformance``) runs every
vector against the reference implementation; ``--impl module:object`` against a Python
implementation and ``--command "CMD"`` against any program speaking the JSON-lines protocol
(:mod:`sampling_mask.conformance.protocol`). ``--expected-failures FILE`` lists cases (ids or
globs) the implementation is known to fail; a listed case that passes fails the run, as does a
pattern matching no case. ``--class`` (or the implementation's answer to the ``describe`` request)
declares the conformance classes it implements: only their cases run, and the summary says which
classes it conforms to. Exit status: 0 when every case run is as expected, 1 otherwise, 2 on bad
usage (no case selected, an unknown form or class) or a run that could not be completed (the
program cannot be started, or crashed ``--max-crashes`` times in a row).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import fnmatch
import math
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from ..core.errors import SamplingMaskError
from .declarations import check_properties
from .payloads import compare_arrays, compare_masks, mask_from_json, mask_to_json, metadata_kinds_differ
from .profile import default_output_findings
from .protocol import (
    DEFAULT_TIMEOUT,
    DESCRIBE,
    CommandImplementation,
    Implementation,
    LaunchError,
    RunStopped,
    load_python_implementation,
    response_kind,
)
from .reference import ReferenceImplementation, payload_bytes
from .suite import (
    FORMS,
    RELEASES,
    Case,
    ExpectedFailures,
    class_matches,
    conformance_classes,
    frozen_cases,
    load_cases,
    release_key,
    vectors_dir,
)

__all__ = [
    "CaseResult",
    "Report",
    "RunStopped",
    "declared_classes",
    "judge",
    "main",
    "run",
]

#: Statuses that fail a run. ``UNSUPPORTED`` is counted apart from failures but still fails a run:
#: declare the classes you implement (``--class`` / ``describe``) and the others are not run at all.
FAILING = ("FAIL", "ERROR", "UNSUPPORTED", "XPASS")
_COLUMNS = ("PASS", "FAIL", "ERROR", "UNSUPPORTED", "XFAIL", "XPASS")
#: Consecutive crashes (the program died or hung) after which a run stops.
MAX_CRASHES = 5


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """The outcome of one case: ``outcome`` is pass / fail / error / unsupported; ``listed`` says the
    case is in the expected-failures list."""

    case: Case
    outcome: str
    detail: str
    listed: bool = False
    seconds: float = 0.0

    @property
    def status(self) -> str:
        if self.listed:
            return "XPASS" if self.outcome == "pass" else "XFAIL"
        return {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "unsupported": "UNSUPPORTED"}[self.outcome]

    @property
    def failed(self) -> bool:
        return self.status in FAILING


@dataclasses.dataclass
class Report:
    """Every case's result, plus expected-failure patterns that matched no case (stale)."""

    implementation: str
    results: list[CaseResult]
    stale_patterns: list[str] = dataclasses.field(default_factory=list)
    expected_failures_source: str | None = None
    claimed: list[str] | None = None

    @property
    def ok(self) -> bool:
        return not self.stale_patterns and not any(r.failed for r in self.results)

    def by_id(self) -> dict[str, CaseResult]:
        return {r.case.id: r for r in self.results}

    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.failed]

    def counts(self) -> dict[str, Counter[str]]:
        """Status counts per form (and ``total``)."""
        table: dict[str, Counter[str]] = {}
        for r in self.results:
            table.setdefault(r.case.form, Counter())[r.status] += 1
        table["total"] = sum(table.values(), Counter())
        return table

    def not_passing(self) -> list[CaseResult]:
        """Every case that did not pass (listed or not): what an expected-failures file would list."""
        return [r for r in self.results if r.outcome != "pass"]

    def class_verdicts(self, every: Sequence[Case]) -> dict[str, str]:
        """Per class run (SPEC 16): ``conforms fully`` (every case of the class passed), ``conforms``
        (every required one did), ``partial run`` (some of its required cases were not run) or
        ``does not conform (N required cases not passing)``."""
        ran = {r.case.id for r in self.results}
        verdicts = {}
        for name in conformance_classes(r.case for r in self.results):
            mine = [r for r in self.results if r.case.conformance_class == name]
            required = [c for c in every if c.conformance_class == name and c.level == "required"]
            bad = [r for r in mine if r.case.level == "required" and r.outcome != "pass"]
            if bad:
                verdicts[name] = f"does not conform ({len(bad)} required case(s) not passing)"
            elif any(c.id not in ran for c in required):
                verdicts[name] = "partial run"
            elif all(r.outcome == "pass" for r in mine) and len(mine) == sum(
                1 for c in every if c.conformance_class == name
            ):
                verdicts[name] = "conforms fully"
            else:
                verdicts[name] = "conforms (recommended cases not all run or passing)"
        return verdicts

    def summary_table(self) -> str:
        """A fixed-width table: one line per form, then the total."""
        counts = self.counts()
        width = max(len(form) for form in counts) + 2
        head = "form".ljust(width) + "".join(c.rjust(12) for c in ("cases", *_COLUMNS))
        lines = [head, "-" * len(head)]
        for form, row in counts.items():
            if form == "total":
                lines.append("-" * len(head))
            total = sum(row.values())
            lines.append(form.ljust(width) + str(total).rjust(12) + "".join(str(row[c]).rjust(12) for c in _COLUMNS))
        return "\n".join(lines)

    def to_junit(self) -> ET.ElementTree:
        """JUnit XML: one ``testsuite`` per form, one ``testcase`` per case."""
        root = ET.Element("testsuites", name=f"sampling-mask conformance ({self.implementation})")
        suites: dict[str, ET.Element] = {}
        for r in self.results:
            suite = suites.get(r.case.form)
            if suite is None:
                suite = suites[r.case.form] = ET.SubElement(root, "testsuite", name=f"conformance.{r.case.form}")
            tc = ET.SubElement(
                suite,
                "testcase",
                classname=f"conformance.{r.case.form}",
                name=r.case.id,
                file=r.case.file,
                time=f"{r.seconds:.6f}",
            )
            if r.status in ("FAIL", "XPASS"):
                ET.SubElement(tc, "failure", message=f"{r.status}: {r.detail}"[:500]).text = r.detail
            elif r.status == "ERROR":
                ET.SubElement(tc, "error", message=f"{r.status}: {r.detail}"[:500]).text = r.detail
            elif r.status == "UNSUPPORTED":
                ET.SubElement(tc, "skipped", message=r.detail[:500])
            elif r.status == "XFAIL":
                ET.SubElement(tc, "skipped", message=f"expected failure: {r.detail}"[:500])
        for pattern in self.stale_patterns:
            suite = suites.setdefault("expected-failures", ET.SubElement(root, "testsuite", name="expected-failures"))
            tc = ET.SubElement(suite, "testcase", classname="expected-failures", name=pattern)
            ET.SubElement(tc, "failure", message="the pattern matches no case; remove it")
        for suite in root:
            cases = list(suite)
            suite.set("tests", str(len(cases)))
            suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
            suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
            suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
        return ET.ElementTree(root)


# ------------------------------------------------------------------------------------------ judging
def _canonical_input(case: Case, reference: ReferenceImplementation) -> dict[str, Any]:
    return mask_to_json(mask_from_json(case.input))


def _check_roundtrip(case: Case, payload: Any, reference: ReferenceImplementation) -> str | None:
    """``None`` when the reference decodes the encoded payload back to the input mask."""
    try:
        decoded = mask_to_json(reference.decode(case.form, payload))
    except SamplingMaskError as exc:
        return f"the encoded payload does not decode with the reference: {exc}"
    except Exception as exc:  # noqa: BLE001 - a runner must report, not crash
        return f"the reference could not decode the encoded payload: {type(exc).__name__}: {exc}"
    why = compare_masks(_canonical_input(case, reference), decoded)
    return None if why is None else f"round trip: {why}"


def _close(a: Any, b: Any, tolerance: float) -> bool:
    """Expected ``a`` against answered ``b``: ``null`` and ``"-Infinity"`` match only themselves."""
    if a is None or b is None or isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    return math.isfinite(b) and abs(a - b) <= tolerance * max(1.0, abs(a))


def _check_scores(expected: Mapping[str, Any], tolerance: float, got: Any) -> str | None:
    if not isinstance(got, Mapping):
        return f"expected an object of scores, got {type(got).__name__}"
    for key, values in expected.items():
        result = got.get(key)
        if not isinstance(result, list) or len(result) != len(values):
            return f"{key}: expected {len(values)} values, got {result!r:.200}"
        for t, (a, b) in enumerate(zip(values, result, strict=True)):
            if not _close(a, b, tolerance):
                return f"{key}[{t}]: expected {a!r}, got {b!r} (tolerance {tolerance:g})"
    return None


def judge(case: Case, response: Any, reference: ReferenceImplementation | None = None) -> tuple[str, str]:
    """``(outcome, detail)`` of one response: outcome is pass / fail / error / unsupported."""
    reference = reference or ReferenceImplementation()
    kind, value = response_kind(response, case.id)
    if kind == "error":
        return "error", str(value)
    if kind == "unsupported":
        return "unsupported", f"unsupported: {value}"
    codes = case.error_codes
    if codes:
        want = " or ".join(codes)
        if kind == "ok":
            return "fail", f"accepted invalid input (expected rejection with {want})"
        code = value["code"]
        if code in codes:
            return "pass", f"rejected with {code}"
        return "fail", f"rejected with {code}, expected {want}: {value.get('message', '')}"
    if kind == "rejected":
        return "fail", f"rejected valid input with {value['code']}: {value.get('message', '')}"
    expected = case.expected
    if "mask" in expected:
        why = compare_masks(expected["mask"], value)
        if why is None and case.op == "concatenate":
            why = metadata_kinds_differ(expected["mask"], value)
    elif "valid" in expected:
        why = None
    elif "payload" in expected:
        if not isinstance(value, Mapping):
            why = f"expected a payload object, got {type(value).__name__}"
        else:
            why = next(
                (w for k, a in expected["payload"].items() if (w := compare_arrays(a, value.get(k), field=k))),
                None,
            ) or _check_roundtrip(case, value, reference)
    elif "roundtrip" in expected:
        why = _check_roundtrip(case, value, reference)
        if why is None and "properties" in expected:
            try:
                data = payload_bytes(value)
            except SamplingMaskError as exc:
                why = f"the payload is not {{text}} or {{hex}}: {exc}"
            else:
                why = check_properties(case.form, data, expected["properties"])
    elif "scores" in expected:
        why = _check_scores(expected["scores"], float(expected["tolerance"]), value)
    else:  # pragma: no cover - the schema forbids it
        return "error", f"the case expects nothing the runner knows: {sorted(expected)}"
    if why is None and case.op == "encode":
        why = default_output_findings(case.form, value)
    return ("pass", "ok") if why is None else ("fail", why)


# ------------------------------------------------------------------------------------------ running
def run(
    implementation: Implementation,
    cases: Sequence[Case] | None = None,
    *,
    expected_failures: ExpectedFailures | None = None,
    all_case_ids: Sequence[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    max_crashes: int = MAX_CRASHES,
    claimed: Sequence[str] | None = None,
) -> Report:
    """Send every case to ``implementation`` and judge the answers.

    ``all_case_ids`` (default: the ids of ``cases``) is what expected-failure patterns are checked
    against for staleness, so a filtered run does not flag patterns for cases it skipped. Raises
    :class:`RunStopped` when the program cannot be started (:class:`LaunchError`) or crashed
    ``max_crashes`` cases in a row.
    """
    cases = list(cases) if cases is not None else load_cases()
    expected_failures = expected_failures or ExpectedFailures()
    reference = ReferenceImplementation()
    results = []
    crashes = 0
    for case in cases:
        start = time.perf_counter()
        try:
            response = implementation.handle(case.request())
        except LaunchError as exc:
            raise RunStopped(str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - an implementation crash is an 'error' result
            response = {"error": f"{type(exc).__name__}: {exc}"}
        outcome, detail = judge(case, response, reference)
        result = CaseResult(case, outcome, detail, expected_failures.matches(case.id), time.perf_counter() - start)
        results.append(result)
        if on_result is not None:
            on_result(result)
        crashes = crashes + 1 if getattr(implementation, "crashed", False) else 0
        if crashes >= max_crashes:
            raise RunStopped(f"stopped after {crashes} consecutive crashes; the last: {case.id}: {detail}")
    ids = list(all_case_ids) if all_case_ids is not None else [c.id for c in cases]
    return Report(
        implementation=str(getattr(implementation, "name", type(implementation).__name__)),
        results=results,
        stale_patterns=expected_failures.unused(ids),
        expected_failures_source=expected_failures.source if expected_failures.patterns else None,
        claimed=list(claimed) if claimed is not None else None,
    )


def declared_classes(implementation: Implementation) -> list[str] | None:
    """The classes the implementation declares in answer to ``describe`` (``None``: it declares none).

    Raises :class:`RunStopped` when a program cannot be started, or answers ``describe`` with
    something that is not a JSON object (it does not speak the protocol: every case would fail).
    """
    try:
        response = implementation.handle(dict(DESCRIBE))
    except LaunchError as exc:
        raise RunStopped(str(exc)) from None
    except Exception:  # noqa: BLE001 - an implementation that cannot describe itself declares nothing
        return None
    if getattr(implementation, "garbled", False) or not isinstance(response, Mapping):
        what = response.get("error") if isinstance(response, Mapping) else f"{response!r:.200}"
        raise RunStopped(
            f"the answer to describe is not a JSON object, so the program does not speak the protocol: {what}"
        )
    kind, value = response_kind(response, DESCRIBE["id"])
    if kind != "ok" or not isinstance(value, Mapping):
        return None
    classes = value.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
        return None
    return list(classes)


def select(
    cases: Iterable[Case],
    *,
    forms: Sequence[str] = (),
    patterns: Sequence[str] = (),
    level: str | None = None,
    since: str | None = None,
) -> list[Case]:
    """Cases of the given forms, matching any of the id globs, at the given level, and first held by the
    suite of release ``since`` or a later one (all when empty; ``since`` leaves out a case that does not
    say when it came, as a suite older than the field does not)."""
    out = []
    for case in cases:
        if forms and case.form not in forms:
            continue
        if patterns and not any(fnmatch.fnmatchcase(case.id, p) for p in patterns):
            continue
        if level is not None and case.level != level:
            continue
        if since is not None and (case.since is None or release_key(case.since) < release_key(since)):
            continue
        out.append(case)
    return out


class _UsageError(Exception):
    """A usage error: one line ``sampling-mask: error: CODE: message`` on stderr, exit status 2."""

    def __init__(self, message: str, code: str = "E_USAGE") -> None:
        super().__init__(f"{code}: {message}")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are :class:`_UsageError` (one line, like the rest of the CLI)."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sampling-mask conformance",
        description="Run the sampling-mask conformance suite (spec v1) against an implementation.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--impl", metavar="MODULE:OBJECT", help="a Python implementation (default: the reference)")
    which.add_argument("--command", metavar="CMD", help="a program speaking the JSON-lines protocol on stdin/stdout")
    parser.add_argument(
        "--class",
        dest="classes",
        action="append",
        default=[],
        metavar="CLASS",
        help="a conformance class the implementation claims, e.g. 'json-rows reader' or 'msgpack *' "
        "(repeatable; default: what the implementation declares, else every class)",
    )
    parser.add_argument("--expected-failures", metavar="FILE", type=Path, help="ids or globs expected to fail")
    parser.add_argument(
        "--write-expected-failures", metavar="FILE", type=Path, help="write the ids of the cases not passing to FILE"
    )
    parser.add_argument("--junit-xml", metavar="FILE", type=Path, help="write a JUnit XML report")
    parser.add_argument("--form", action="append", default=[], help="run only this form (repeatable)")
    parser.add_argument("-k", "--case", action="append", default=[], help="run only ids matching this glob")
    parser.add_argument("--level", choices=("required", "recommended"), help="run only cases of this level")
    parser.add_argument("--vectors", type=Path, help="suite root (default: the installed vectors)")
    parser.add_argument(
        "--release",
        choices=RELEASES,
        help="run only the cases frozen at this spec release (1.0: what a reader of exactly 1.0 passes)",
    )
    parser.add_argument(
        "--since",
        metavar="RELEASE",
        help="run only the cases the suite gained in spec release RELEASE or later (1.3: those of 1.3 and 1.4)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for each --command response (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-crashes",
        type=int,
        default=MAX_CRASHES,
        metavar="N",
        help=f"stop after N consecutive crashes or timeouts (default {MAX_CRASHES})",
    )
    parser.add_argument(
        "--generated",
        type=int,
        default=0,
        metavar="N",
        help="instead of the vectors: N generated cases and N mutated payloads per claimed class, compared "
        "with the reference (needs hypothesis)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of --generated (default: random, printed)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only cases that are not PASS / XFAIL")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--lint", action="store_true", help="check the suite itself and exit")
    parser.add_argument(
        "--profile-1.0",
        dest="profile",
        action="append",
        default=[],
        nargs="?",
        const=None,
        metavar="FILE",
        type=Path,
        help="check that FILE uses nothing spec 1.0 does not define (repeatable; --form names the encoding); "
        "without FILE, what the implementation under test writes: its answer to every encode case of a byte form",
    )
    return parser


def _print_result(result: CaseResult, out: TextIO, quiet: bool) -> None:
    if quiet and result.status in ("PASS", "XFAIL"):
        return
    detail = "" if result.status == "PASS" else f"  {result.detail}"
    out.write(f"{result.status:<12}{result.case.id}{detail}\n")


def _check_names(kind: str, given: Sequence[str], known: Sequence[str]) -> None:
    """A usage error for a name (or glob) of ``kind`` that matches nothing in ``known``."""
    for name in given:
        if not any(fnmatch.fnmatchcase(k, name) for k in known):
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; one of: {', '.join(known)}"
            raise _UsageError(f"unknown {kind} {name!r}{hint}")


def _implementation(args: argparse.Namespace) -> Implementation:
    if args.command:
        return CommandImplementation(args.command, timeout=args.timeout)
    if args.impl:
        try:
            return load_python_implementation(args.impl)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise _UsageError(f"cannot load {args.impl}: {exc}") from None
    return ReferenceImplementation()


def write_expected_failures(report: Report, path: Path) -> int:
    """Write the ids of ``report``'s cases that did not pass to ``path``; how many."""
    ids = sorted(r.case.id for r in report.not_passing())
    head = f"# Cases {report.implementation} does not pass (written by sampling-mask conformance).\n"
    path.write_text(head + "".join(f"{i}\n" for i in ids), encoding="utf-8")
    return len(ids)


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """The command line; returns the exit status (0 ok, 1 failures, 2 usage or a run that stopped)."""
    out = out if out is not None else sys.stdout
    try:
        return _main(argv, out)
    except _UsageError as exc:
        sys.stderr.write(f"sampling-mask: error: {exc}\n")
        return 2
    except RunStopped as exc:
        out.flush()
        sys.stderr.write(f"sampling-mask: error: E_IMPLEMENTATION: {exc}\n")
        return 2


def _main(argv: Sequence[str] | None, out: TextIO) -> int:
    args = _parser().parse_args(argv)
    if args.lint:
        from .lint import main as lint_main

        return lint_main(["--vectors", str(args.vectors)] if args.vectors else [], out=out)
    if args.profile and None not in args.profile:
        return _profile(args.profile, args.form, out)
    _check_names("form", args.form, FORMS)
    try:
        every = load_cases(args.vectors or vectors_dir())
    except (OSError, ValueError, KeyError) as exc:
        raise _UsageError(f"cannot read the vectors: {exc}") from None
    _check_names("class", args.classes, conformance_classes(every))
    if args.since is not None:
        try:
            release_key(args.since)
        except ValueError:
            raise _UsageError(f"--since takes a spec release such as 1.3, not {args.since!r}") from None
    cases = select(every, forms=args.form, patterns=args.case, level=args.level, since=args.since)
    if args.release:
        frozen = frozen_cases(args.release, args.vectors)
        cases = [c for c in cases if c.id in frozen]
    if args.list:
        if args.classes:
            cases = [c for c in cases if class_matches(c.conformance_class, args.classes)]
        if not cases:
            raise _UsageError("no case selected: check --form, -k, --level, --class, --release and --since")
        for case in cases:
            since = case.since or "-"
            out.write(f"{case.id}\t{case.op}\t{case.level}\t{case.conformance_class}\t{since}\t{case.description}\n")
        return 0
    try:
        expected = ExpectedFailures.read(args.expected_failures) if args.expected_failures else ExpectedFailures()
    except OSError as exc:
        raise _UsageError(f"cannot read the expected-failures file: {exc}") from None
    implementation = _implementation(args)
    try:
        claimed = args.classes or declared_classes(implementation)
        if args.profile:
            return _profile_writes(implementation, cases, claimed, out)
        if args.generated:
            return _generated(implementation, args, claimed, out)
        if claimed is not None:
            cases = [c for c in cases if class_matches(c.conformance_class, claimed)]
        if not cases:
            what = f" of the classes {claimed}" if claimed is not None else ""
            raise _UsageError(f"no case selected{what}: check --form, -k, --level, --class, --release and --since")
        report = run(
            implementation,
            cases,
            expected_failures=expected,
            all_case_ids=[c.id for c in every],
            on_result=lambda r: _print_result(r, out, args.quiet),
            max_crashes=args.max_crashes,
            claimed=claimed,
        )
    finally:
        _release(implementation)
    _summary(report, every, out)
    if args.junit_xml:
        tree = report.to_junit()
        ET.indent(tree)
        tree.write(args.junit_xml, encoding="utf-8", xml_declaration=True)
    if args.write_expected_failures:
        n = write_expected_failures(report, args.write_expected_failures)
        out.write(f"wrote {n} case id(s) to {args.write_expected_failures}\n")
    return 0 if report.ok else 1


def _generated(implementation: Implementation, args: argparse.Namespace, claimed: list[str] | None, out: TextIO) -> int:
    from .generated import run_generated

    try:
        import hypothesis  # noqa: F401 - the strategies draw with it
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis":
            raise
        raise _UsageError(
            "--generated needs hypothesis, which is not installed (pip install hypothesis)", "E_UNAVAILABLE"
        ) from None
    if args.generated < 1:
        raise _UsageError("--generated N needs N >= 1")
    return run_generated(
        implementation,
        args.generated,
        seed=args.seed,
        classes=claimed,
        forms=args.form,
        out=out,
        max_crashes=args.max_crashes,
    )


def _profile(paths: Sequence[Path], forms: Sequence[str], out: TextIO) -> int:
    """``--profile-1.0``: one line per file, then its findings; 0 when every file is within 1.0."""
    from .profile import profile_forms, v1_0_findings

    if len(forms) > 1:
        raise _UsageError("--profile-1.0 takes at most one --form")
    _check_names("form", forms, profile_forms())
    bad = 0
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise _UsageError(f"cannot read {path}: {exc}") from None
        try:
            found = v1_0_findings(data, forms[0] if forms else None)
        except Exception as exc:  # noqa: BLE001 - bytes that cannot be read at all are a finding
            found = [f"cannot read it as {forms[0] if forms else 'any encoding'}: {type(exc).__name__}: {exc}"]
        bad += bool(found)
        out.write(f"{'within 1.0' if not found else 'NOT 1.0':<12}{path}\n")
        out.writelines(f"  {line}\n" for line in found)
    return 1 if bad else 0


def _profile_writes(
    implementation: Implementation, cases: Sequence[Case], claimed: Sequence[str] | None, out: TextIO
) -> int:
    """``--profile-1.0`` without a file: the implementation's answer to every encode case of a byte
    form (default output, SPEC 6) through the 1.0 profile; one line per case, 0 when all are within."""
    from .profile import profile_forms

    chosen = [
        c
        for c in cases
        if c.op == "encode"
        and c.form in profile_forms()
        and not c.error_codes
        and (claimed is None or class_matches(c.conformance_class, claimed))
    ]
    if not chosen:
        raise _UsageError("no encode case of a byte form selected: check --form, -k and --class")
    bad = 0
    for case in chosen:
        try:
            response = implementation.handle(case.request())
        except LaunchError as exc:
            raise RunStopped(str(exc)) from None
        kind, value = response_kind(response, case.id)
        if kind != "ok":
            bad += 1
            out.write(f"{'NO PAYLOAD':<12}{case.id}  answered {kind}: {str(value)[:200]}\n")
            continue
        why = default_output_findings(case.form, value)
        bad += why is not None
        out.write(f"{'within 1.0' if why is None else 'NOT 1.0':<12}{case.id}\n")
        if why is not None:
            out.write(f"  {why}\n")
    out.write(
        f"{len(chosen) - bad} of {len(chosen)} payloads written by {getattr(implementation, 'name', 'it')} are within 1.0\n"
    )
    return 1 if bad else 0


def _release(implementation: Any) -> None:
    close = getattr(implementation, "close", None)
    if callable(close):
        close()


def _summary(report: Report, every: Sequence[Case], out: TextIO) -> None:
    """The table, the classes conformed to, and one verdict line with failures and unsupported apart."""
    out.write(f"\nsampling-mask conformance v1: {report.implementation}\n")
    if report.expected_failures_source:
        out.write(f"expected failures: {report.expected_failures_source}\n")
    out.write(report.summary_table() + "\n")
    for pattern in report.stale_patterns:
        out.write(f"STALE       expected-failures entry {pattern!r} matches no case; remove it\n")
    verdicts = report.class_verdicts(every)
    conforms = [name for name, v in verdicts.items() if v.startswith("conforms")]
    claims = "every class" if report.claimed is None else ", ".join(report.claimed)
    out.write(f"claimed: {claims}\n")
    out.write(f"conforms to: {', '.join(conforms) if conforms else 'nothing'}\n")
    for name, verdict in verdicts.items():
        if verdict != "conforms fully":
            out.write(f"  {name}: {verdict}\n")
    unsupported = [r for r in report.results if r.status == "UNSUPPORTED"]
    failed = [r for r in report.failures() if r.status != "UNSUPPORTED"]
    if report.ok:
        out.write(f"OK: {len(report.results)} cases as expected\n")
        return
    parts = [f"{len(failed)} case(s) not as expected"]
    if unsupported:
        hint = " (declare the classes you implement with --class)" if report.claimed is None else " in claimed classes"
        parts.append(f"{len(unsupported)} unsupported{hint}")
    if report.stale_patterns:
        parts.append(f"{len(report.stale_patterns)} stale expected-failure pattern(s)")
    out.write("FAILED: " + ", ".join(parts) + "\n")


if __name__ == "__main__":
    sys.exit(main())
