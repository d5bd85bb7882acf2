"""The Node.js example implementation passes every case it claims, through `--command`."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from sampling_mask.conformance import runner
from sampling_mask.conformance.protocol import CommandImplementation
from sampling_mask.conformance.suite import ExpectedFailures, load_cases

NODE = shutil.which("node")
EXAMPLE = Path(__file__).resolve().parents[1] / "conformance" / "examples" / "node"
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def test_node_example_passes_every_case_it_claims() -> None:
    cases = load_cases()
    listed = ExpectedFailures.read(EXAMPLE / "expected-failures.txt")
    impl = CommandImplementation(f"{NODE} {EXAMPLE / 'impl.js'}", timeout=30)
    try:
        report = runner.run(impl, cases, expected_failures=listed)
    finally:
        impl.close()
    assert impl.starts == 1  # one process for the whole run
    assert report.ok, [(r.case.id, r.status, r.detail) for r in report.failures()] + report.stale_patterns
    claimed = [r for r in report.results if not r.listed]
    assert {r.case.form for r in claimed} == {"json-rows", "ragged"}
    assert all(r.status == "PASS" for r in claimed) and len(claimed) >= 90
    # Every case it does not claim is answered "unsupported", never a wrong verdict.
    assert all(r.outcome == "unsupported" for r in report.results if r.listed)


def test_node_example_through_the_cli() -> None:
    out = io.StringIO()
    code = runner.main(
        [
            "--command",
            f"{NODE} {EXAMPLE / 'impl.js'}",
            "--expected-failures",
            str(EXAMPLE / "expected-failures.txt"),
            "-q",
        ],
        out=out,
    )
    assert code == 0, out.getvalue()[-3000:]
    assert "OK:" in out.getvalue()
