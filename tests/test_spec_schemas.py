"""The JSON Schemas beside SPEC.md: valid schemas, followed by every valid payload and by the reference
writer, and used by the lint to keep invalid cases to one fault each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings

import sampling_mask as sm
from sampling_mask.conformance import lint
from sampling_mask.conformance.strategies import masks

jsonschema = pytest.importorskip("jsonschema")

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "spec" / "v1"


def _validator(form: str) -> object:
    schema = json.loads((SPEC / lint.SPEC_SCHEMAS[form]).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schemas_are_valid_and_checked_by_the_lint() -> None:
    for form in lint.SPEC_SCHEMAS:
        _validator(form)
    problems, stats = lint.lint()
    assert problems == [] and stats["schemas_checked"] == ["json", "msgpack"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(masks(max_rows=6))
def test_the_reference_writer_follows_the_schemas(mask: sm.SamplingMask) -> None:
    doc = json.loads(sm.encode(mask, "json"))
    assert list(doc)[0] == "sampling_mask"
    assert not list(_validator("json").iter_errors(doc))  # type: ignore[attr-defined]
    for layout in ("ragged", "dense", "compact"):
        env = msgpack.unpackb(sm.encode(mask, "msgpack", layout=layout), raw=False)
        assert list(env)[0] == "sampling_mask"
        errors = list(_validator("msgpack").iter_errors(lint._as_schema_json(env)))  # type: ignore[attr-defined]
        assert not errors, (layout, errors[0].message)


def test_the_envelope_schema_sees_types_json_cannot() -> None:
    validator = _validator("msgpack")
    ids = {"dtype": "int32", "shape": [1], "data": b"\x01\x00\x00\x00"}
    offsets = {"dtype": "int64", "shape": [2], "data": bytes(8) + b"\x01" + bytes(7)}
    good = {"sampling_mask": 1, "ids": ids, "offsets": offsets, "num_rows": None}

    def errors(env: dict[str, object]) -> list[str]:
        return [e.message for e in validator.iter_errors(lint._as_schema_json(env))]  # type: ignore[attr-defined]

    assert errors(good) == []  # nil under an optional key reads as absent
    assert errors({**good, "ids": {**ids, "data": "\x01\x00\x00\x00"}})  # str where bin is required
    assert errors({**good, "sampling_mask": 2})
    assert errors({**good, "layout": "compact"})  # compact needs compact, num_rows, nnz
    assert errors({**good, "offsets": {**offsets, "dtype": "float32"}})


def test_lint_flags_an_invalid_case_with_a_second_fault(tmp_path: Path) -> None:
    root = tmp_path / "conformance"
    shutil.copytree(REPO / "conformance", root)
    shutil.copytree(REPO / "spec", tmp_path / "spec")
    path = root / "v1" / "invalid" / "msgpack.json"
    doc = json.loads(path.read_text())
    case = next(c for c in doc["cases"] if c["id"] == "msgpack.offsets-end-beyond-ids")
    env = msgpack.unpackb(bytes.fromhex(case["input"]["hex"]), raw=False)
    case["input"]["hex"] = msgpack.packb({**env, "num_rows": "3"}, use_bin_type=True).hex()  # a second fault
    valid = json.loads((root / "v1" / "json" / "decode.json").read_text())
    valid["cases"][0]["input"] = {"text": '{"sampling_mask": 1, "rows": [[1]], "vocab_size": "10"}'}
    (root / "v1" / "json" / "decode.json").write_text(json.dumps(valid))
    path.write_text(json.dumps(doc))
    problems, _ = lint.lint(root)
    text = "\n".join(problems)
    assert "msgpack.offsets-end-beyond-ids: more than one fault: besides E_OFFSETS the payload breaks" in text
    assert "at num_rows" in text
    assert f"{valid['cases'][0]['id']}: a valid payload breaks sampling-mask.schema.json" in text


def test_lint_flags_a_layout_case_with_a_second_fault(tmp_path: Path) -> None:
    root = tmp_path / "conformance"
    shutil.copytree(REPO / "conformance", root)
    path = root / "v1" / "invalid" / "ragged.json"
    doc = json.loads(path.read_text())
    case = next(c for c in doc["cases"] if c["id"] == "ragged.offsets-end-past-nnz")
    case["input"]["ids"]["dtype"] = "float32"  # a wrong element type besides the offsets fault
    path.write_text(json.dumps(doc))
    problems, _ = lint.lint(root)
    assert any(
        "ragged.offsets-end-past-nnz: more than one fault: besides E_OFFSETS, ids is E_DTYPE" in p for p in problems
    )
