"""Run the conformance suite against an implementation and report per case and per form.

``python -m sampling_mask.conformance.runner`` (also ``sampling-mask conformance``) runs every
vector against the reference implementation; ``--impl module:object`` against a Python
implementation and ``--command "CMD"`` against any program speaking the JSON-lines protocol
(:mod:`sampling_mask.conformance.protocol`). ``--expected-failures FILE`` lists cases (ids or
globs) the implementation is known to fail or not support; a listed case that passes fails the
run, as does a pattern matching no case. Exit status: 0 when every case is as expected, 1 otherwise,
2 on bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import math
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..core.errors import SamplingMaskError
from .payloads import compare_arrays, compare_masks, mask_from_json, mask_to_json
from .protocol import CommandImplementation, Implementation, load_python_implementation, response_kind
from .reference import ReferenceImplementation
from .suite import Case, ExpectedFailures, load_cases, vectors_dir

__all__ = ["CaseResult", "Report", "judge", "main", "run"]

#: Statuses that fail a run.
FAILING = ("FAIL", "ERROR", "UNSUPPORTED", "XPASS")
_COLUMNS = ("PASS", "FAIL", "ERROR", "UNSUPPORTED", "XFAIL", "XPASS")


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
            elif r.status in ("ERROR", "UNSUPPORTED"):
                ET.SubElement(tc, "error", message=f"{r.status}: {r.detail}"[:500]).text = r.detail
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
    elif "scores" in expected:
        why = _check_scores(expected["scores"], float(expected["tolerance"]), value)
    else:  # pragma: no cover - the schema forbids it
        return "error", f"the case expects nothing the runner knows: {sorted(expected)}"
    return ("pass", "ok") if why is None else ("fail", why)


# ------------------------------------------------------------------------------------------ running
def run(
    implementation: Implementation,
    cases: Sequence[Case] | None = None,
    *,
    expected_failures: ExpectedFailures | None = None,
    all_case_ids: Sequence[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> Report:
    """Send every case to ``implementation`` and judge the answers.

    ``all_case_ids`` (default: the ids of ``cases``) is what expected-failure patterns are checked
    against for staleness, so a filtered run does not flag patterns for cases it skipped.
    """
    cases = list(cases) if cases is not None else load_cases()
    expected_failures = expected_failures or ExpectedFailures()
    reference = ReferenceImplementation()
    results = []
    for case in cases:
        start = time.perf_counter()
        try:
            response = implementation.handle(case.request())
        except Exception as exc:  # noqa: BLE001 - an implementation crash is an 'error' result
            response = {"error": f"{type(exc).__name__}: {exc}"}
        outcome, detail = judge(case, response, reference)
        result = CaseResult(case, outcome, detail, expected_failures.matches(case.id), time.perf_counter() - start)
        results.append(result)
        if on_result is not None:
            on_result(result)
    ids = list(all_case_ids) if all_case_ids is not None else [c.id for c in cases]
    return Report(
        implementation=str(getattr(implementation, "name", type(implementation).__name__)),
        results=results,
        stale_patterns=expected_failures.unused(ids),
        expected_failures_source=expected_failures.source if expected_failures.patterns else None,
    )


def select(
    cases: Iterable[Case], *, forms: Sequence[str] = (), patterns: Sequence[str] = (), level: str | None = None
) -> list[Case]:
    """Cases of the given forms, matching any of the id globs, at the given level (all when empty)."""
    out = []
    for case in cases:
        if forms and case.form not in forms:
            continue
        if patterns and not any(fnmatch.fnmatchcase(case.id, p) for p in patterns):
            continue
        if level is not None and case.level != level:
            continue
        out.append(case)
    return out


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sampling-mask conformance",
        description="Run the sampling-mask conformance suite (spec v1) against an implementation.",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--impl", metavar="MODULE:OBJECT", help="a Python implementation (default: the reference)")
    which.add_argument("--command", metavar="CMD", help="a program speaking the JSON-lines protocol on stdin/stdout")
    parser.add_argument("--expected-failures", metavar="FILE", type=Path, help="ids or globs expected to fail")
    parser.add_argument("--junit-xml", metavar="FILE", type=Path, help="write a JUnit XML report")
    parser.add_argument("--form", action="append", default=[], help="run only this form (repeatable)")
    parser.add_argument("-k", "--case", action="append", default=[], help="run only ids matching this glob")
    parser.add_argument("--level", choices=("required", "recommended"), help="run only cases of this level")
    parser.add_argument("--vectors", type=Path, help="suite root (default: the installed vectors)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each --command response")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only cases that are not PASS / XFAIL")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--lint", action="store_true", help="check the suite itself and exit")
    return parser


def _print_result(result: CaseResult, out: TextIO, quiet: bool) -> None:
    if quiet and result.status in ("PASS", "XFAIL"):
        return
    detail = "" if result.status == "PASS" else f"  {result.detail}"
    out.write(f"{result.status:<12}{result.case.id}{detail}\n")


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """The command line; returns the exit status (0 ok, 1 failures, 2 usage)."""
    out = out if out is not None else sys.stdout
    parser = _parser()
    args = parser.parse_args(argv)
    if args.lint:
        from .lint import main as lint_main

        return lint_main(["--vectors", str(args.vectors)] if args.vectors else [], out=out)
    root = args.vectors or vectors_dir()
    every = load_cases(root)
    cases = select(every, forms=args.form, patterns=args.case, level=args.level)
    if args.list:
        for case in cases:
            out.write(f"{case.id}\t{case.op}\t{case.level}\t{case.description}\n")
        return 0
    try:
        expected = ExpectedFailures.read(args.expected_failures) if args.expected_failures else ExpectedFailures()
    except OSError as exc:
        parser.error(f"cannot read the expected-failures file: {exc}")
    implementation: Any
    if args.command:
        implementation = CommandImplementation(args.command, timeout=args.timeout)
    elif args.impl:
        try:
            implementation = load_python_implementation(args.impl)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            parser.error(f"cannot load {args.impl}: {exc}")
    else:
        implementation = ReferenceImplementation()
    try:
        report = run(
            implementation,
            cases,
            expected_failures=expected,
            all_case_ids=[c.id for c in every],
            on_result=lambda r: _print_result(r, out, args.quiet),
        )
    finally:
        close = getattr(implementation, "close", None)
        if callable(close):
            close()
    out.write(f"\nsampling-mask conformance v1: {report.implementation}\n")
    if report.expected_failures_source:
        out.write(f"expected failures: {report.expected_failures_source}\n")
    out.write(report.summary_table() + "\n")
    for pattern in report.stale_patterns:
        out.write(f"STALE       expected-failures entry {pattern!r} matches no case; remove it\n")
    if args.junit_xml:
        tree = report.to_junit()
        ET.indent(tree)
        tree.write(args.junit_xml, encoding="utf-8", xml_declaration=True)
    failed = report.failures()
    if report.ok:
        out.write(f"OK: {len(report.results)} cases as expected\n")
        return 0
    out.write(f"FAILED: {len(failed)} case(s) not as expected")
    out.write(f", {len(report.stale_patterns)} stale expected-failure pattern(s)\n" if report.stale_patterns else "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
