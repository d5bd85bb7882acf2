"""``pytest --pyargs sampling_mask.conformance``: every vector, and property tests, against one implementation.

The implementation under test comes from the environment (default: the reference):

- ``SAMPLING_MASK_CONFORMANCE_IMPL=module:object`` a Python implementation of the runner protocol;
- ``SAMPLING_MASK_CONFORMANCE_COMMAND="CMD"`` a program speaking JSON lines (started once per run);
- ``SAMPLING_MASK_CONFORMANCE_EXPECTED_FAILURES=FILE`` its expected-failures list;
- ``SAMPLING_MASK_CONFORMANCE_VECTORS=DIR`` another suite root;
- ``SAMPLING_MASK_CONFORMANCE_EXAMPLES=N`` hypothesis examples per property (default 20);
- ``SAMPLING_MASK_CONFORMANCE_CLASSES="json-rows reader,ragged *"`` the conformance classes claimed
  (default: what the implementation declares in answer to ``describe``; every class when nothing).

A case of a class not claimed is skipped. A listed case that fails is ``xfail``; a listed case that
passes fails, as does a stale list entry.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .properties import NotSupported, check_decode, check_encode_round_trip, check_same_result, check_scorer_identities
from .protocol import CommandImplementation, Implementation, load_python_implementation, response_kind
from .reference import ReferenceImplementation
from .runner import declared_classes, judge
from .suite import ExpectedFailures, class_matches, load_cases

_ENV = "SAMPLING_MASK_CONFORMANCE_"
_VECTORS = os.environ.get(_ENV + "VECTORS")
CASES = load_cases(Path(_VECTORS) if _VECTORS else None)
_LIST = os.environ.get(_ENV + "EXPECTED_FAILURES")
EXPECTED_FAILURES = ExpectedFailures.read(_LIST) if _LIST else ExpectedFailures()
EXAMPLES = int(os.environ.get(_ENV + "EXAMPLES", "20"))
_REFERENCE = ReferenceImplementation()


def implementation_from_environment() -> Implementation:
    """The implementation the environment names (the reference when it names none)."""
    command = os.environ.get(_ENV + "COMMAND")
    if command:
        return CommandImplementation(command)
    spec = os.environ.get(_ENV + "IMPL")
    return load_python_implementation(spec) if spec else ReferenceImplementation()


@pytest.fixture(scope="module")
def implementation() -> Iterator[Implementation]:
    impl = implementation_from_environment()
    yield impl
    close = getattr(impl, "close", None)
    if callable(close):
        close()


@pytest.fixture(scope="module")
def claimed(implementation: Implementation) -> list[str] | None:
    """The classes claimed: the environment's list, else the implementation's ``describe`` answer."""
    listed = os.environ.get(_ENV + "CLASSES")
    if listed:
        return [c.strip() for c in listed.split(",") if c.strip()]
    return declared_classes(implementation)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(implementation: Implementation, claimed: list[str] | None, case: Any) -> None:
    """One vector: the implementation's answer must be the expected one."""
    if claimed is not None and not class_matches(case.conformance_class, claimed):
        pytest.skip(f"class {case.conformance_class!r} not claimed")
    try:
        response = implementation.handle(case.request())
    except Exception as exc:  # noqa: BLE001 - reported like the runner does
        response = {"error": f"{type(exc).__name__}: {exc}"}
    outcome, detail = judge(case, response, _REFERENCE)
    if EXPECTED_FAILURES.matches(case.id):
        if outcome == "pass":
            pytest.fail(f"{case.id} passes but {EXPECTED_FAILURES.source} lists it: remove it from the list")
        pytest.xfail(f"{outcome}: {detail}")
    assert outcome == "pass", f"{outcome}: {detail} ({case.file}: {case.description})"


def test_expected_failures_are_not_stale() -> None:
    """Every line of the expected-failures list matches a case."""
    stale = EXPECTED_FAILURES.unused([c.id for c in CASES])
    assert not stale, f"{EXPECTED_FAILURES.source}: entries matching no case: {stale}"


# ------------------------------------------------------------------------------------------ properties
_DECODE_FORMS = (
    "dense",
    "packed",
    "ragged",
    "counts",
    "bitmask",
    "compact",
    "model",
    "json-rows",
    "base64",
    "json",
    "msgpack",
)
_ENCODE_FORMS = ("dense", "packed", "ragged", "counts", "bitmask", "compact", "json-rows", "json", "msgpack", "arrow")


def _supported(implementation: Implementation, op: str, form: str) -> bool:
    """Whether the implementation answers anything but ``unsupported`` for this op and form."""
    from ..core.model import SamplingMask

    mask = SamplingMask.from_rows([[1]], vocab_size=4) if form == "bitmask" else SamplingMask.from_rows([[1]])
    if op == "decode":
        try:
            payload: Any = _REFERENCE.encode(form, mask, {})
        except Exception as exc:  # noqa: BLE001 - e.g. pyarrow or msgpack missing here
            pytest.skip(f"the reference cannot write {form} here: {exc}")
    else:
        from .payloads import mask_to_json

        payload = mask_to_json(mask)
    kind, _ = response_kind(implementation.handle({"id": "probe", "op": op, "form": form, "input": payload}))
    return kind != "unsupported"


def _hypothesis() -> Any:
    hypothesis = pytest.importorskip("hypothesis")
    return hypothesis


def _settings() -> Any:
    hypothesis = _hypothesis()
    return hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )


@pytest.mark.parametrize("form", _DECODE_FORMS)
def test_property_decode(implementation: Implementation, form: str) -> None:
    """Any mask, written in ``form`` any valid way (row order, padding, values / hex), decodes to itself."""
    if not _supported(implementation, "decode", form):
        pytest.skip(f"{form}: unsupported")
    from hypothesis import given
    from hypothesis import strategies as st

    from .strategies import payloads

    @_settings()
    @given(st.data())
    def check(data: Any) -> None:
        payload, mask = data.draw(payloads(form))
        check_decode(implementation, form, payload, mask)

    check()


@pytest.mark.parametrize("form", _DECODE_FORMS)
def test_property_canonical_invariance(implementation: Implementation, form: str) -> None:
    """Two payloads of one mask decode to one canonical result."""
    if not _supported(implementation, "decode", form):
        pytest.skip(f"{form}: unsupported")
    from hypothesis import given
    from hypothesis import strategies as st

    from .strategies import masks_for, payloads

    @_settings()
    @given(st.data())
    def check(data: Any) -> None:
        mask = data.draw(masks_for(form))
        first, _ = data.draw(payloads(form, mask=mask))
        second, _ = data.draw(payloads(form, mask=mask))
        check_same_result(implementation, form, first, second)

    check()


@pytest.mark.parametrize("form", _ENCODE_FORMS)
def test_property_encode_round_trip(implementation: Implementation, form: str) -> None:
    """Encoding then decoding with the implementation gives the mask back."""
    if not _supported(implementation, "encode", form):
        pytest.skip(f"encode {form}: unsupported")
    from hypothesis import given

    from .strategies import masks_for

    @_settings()
    @given(masks_for(form))
    def check(mask: Any) -> None:
        try:
            check_encode_round_trip(implementation, form, mask)
        except NotSupported:  # pragma: no cover - the probe said it was supported
            pytest.skip(f"encode {form}: unsupported")

    check()


def test_property_scorer_identities(implementation: Implementation) -> None:
    """Scores equal the float64 rule; full support is log_softmax; probabilities sum to 1; order-free."""
    from hypothesis import given

    from .strategies import scorer_inputs

    probe = {"mask": {"rows": [[0]]}, "targets": {"dtype": "int64", "shape": [1], "values": [0]}, "temperature": 1.0}
    probe["logits"] = {"dtype": "float64", "shape": [1, 1], "values": [[0.0]]}
    kind, _ = response_kind(implementation.handle({"id": "probe", "op": "score", "form": "scorer", "input": probe}))
    if kind == "unsupported":
        pytest.skip("score: unsupported")

    @_settings()
    @given(scorer_inputs())
    def check(payload: dict[str, Any]) -> None:
        check_scorer_identities(implementation, payload)

    check()
