"""The suite's property tests (sampling_mask/conformance/test_suite.py) against the reference and,
for the forms it supports, the Node.js example; plus checks of the exported strategies."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sampling_mask.conformance.payloads import decode_layout, mask_to_json
from sampling_mask.conformance.protocol import CommandImplementation, Implementation
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.strategies import PAYLOAD_FORMS, payloads, scorer_inputs
from sampling_mask.conformance.test_suite import (  # noqa: F401 - collected here with this module's fixture
    test_property_canonical_invariance,
    test_property_decode,
    test_property_encode_round_trip,
    test_property_scorer_identities,
)

NODE = shutil.which("node")
EXAMPLE = Path(__file__).resolve().parents[1] / "conformance" / "examples" / "node" / "impl.js"


@pytest.fixture(scope="module", params=["reference", "node"])
def implementation(request: pytest.FixtureRequest) -> Iterator[Implementation]:
    if request.param == "reference":
        yield ReferenceImplementation()
        return
    if NODE is None:
        pytest.skip("node is not installed")
    impl = CommandImplementation(f"{NODE} {EXAMPLE}", timeout=30)
    yield impl
    impl.close()


@pytest.mark.parametrize("form", PAYLOAD_FORMS)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_payloads_hold_the_mask_they_claim(form: str, data: st.DataObject) -> None:
    """Each drawn payload decodes (with the reference) to its mask: the strategies are honest."""
    payload, mask = data.draw(payloads(form))
    ref = ReferenceImplementation()
    assert mask_to_json(ref.decode(form, payload)) == mask_to_json(mask)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_payloads_vary_what_must_not_matter(data: st.DataObject) -> None:
    """Two ragged payloads of one mask may differ in bytes yet decode to the same mask."""
    first, mask = data.draw(payloads("ragged"))
    second, _ = data.draw(payloads("ragged", mask=mask))
    assert decode_layout("ragged", first) == decode_layout("ragged", second) == mask


@settings(max_examples=10, deadline=None)
@given(scorer_inputs())
def test_scorer_inputs_are_well_formed(payload: dict) -> None:
    rows = payload["mask"]["rows"]
    targets = payload["targets"]["values"]
    assert len(targets) == len(rows)
    assert all(t in row for t, row in zip(targets, rows, strict=True) if row)
    width = payload["logits"]["shape"][1] if "logits" in payload else payload["weight"]["shape"][0]
    assert all(0 <= i < width for row in rows for i in row)
