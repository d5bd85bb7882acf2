"""The Node.js example implementation passes every case of the classes it declares, through `--command`."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from sampling_mask.conformance import runner
from sampling_mask.conformance.protocol import CommandImplementation
from sampling_mask.conformance.suite import class_matches, load_cases

NODE = shutil.which("node")
EXAMPLE = Path(__file__).resolve().parents[1] / "conformance" / "examples" / "node"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NODE is None, reason="node is not installed"),
]  # slow: forks or spawns processes
CLAIMS = ["json-rows reader", "json-rows writer", "ragged reader", "ragged writer", "model operations"]


def test_node_example_declares_its_classes_and_passes_every_case_of_them() -> None:
    impl = CommandImplementation(f"{NODE} {EXAMPLE / 'impl.js'}", timeout=30)
    try:
        assert runner.declared_classes(impl) == CLAIMS
        cases = [c for c in load_cases() if class_matches(c.conformance_class, CLAIMS)]
        report = runner.run(impl, cases, claimed=CLAIMS)
        other = impl.handle({"id": "x", "op": "decode", "form": "dense", "input": {}})
    finally:
        impl.close()
    assert impl.starts == 1  # one process for the whole run
    assert report.ok, [(r.case.id, r.status, r.detail) for r in report.failures()]
    assert len(report.results) >= 140 and {r.case.form for r in report.results} == {"json-rows", "ragged", "model"}
    assert set(report.class_verdicts(load_cases()).values()) == {"conforms fully"}
    assert "unsupported" in other  # what it does not claim is answered "unsupported", never a verdict


def test_node_example_through_the_cli() -> None:
    out = io.StringIO()
    code = runner.main(["--command", f"{NODE} {EXAMPLE / 'impl.js'}", "-q"], out=out)
    text = out.getvalue()
    assert code == 0, text[-3000:]
    assert "conforms to: ragged reader, ragged writer, model operations, json-rows reader, json-rows writer\n" in text
    assert "OK:" in text and not any(line.startswith("UNSUPPORTED") for line in text.splitlines())


def test_node_example_passes_200_generated_cases_per_class() -> None:
    """`--generated 200` through `--command`: drawn and mutated payloads agree with the reference."""
    out = io.StringIO()
    code = runner.main(["--command", f"{NODE} {EXAMPLE / 'impl.js'}", "--generated", "200", "--seed", "15"], out=out)
    text = out.getvalue()
    assert code == 0, text[-3000:]
    for name in CLAIMS:
        assert f"PASS        {name}: 200 generated" in text
    # readers: valid, mutated and limited payloads; writers: masks; model operations: operations
    assert text.count("PASS        ") == 9
