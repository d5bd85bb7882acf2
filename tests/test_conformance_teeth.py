"""Proof of teeth: deliberately broken implementations, each failed by a named case of the suite."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sampling_mask import SamplingMask
from sampling_mask.conformance import runner
from sampling_mask.conformance.payloads import array_from_json, mask_to_json
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import load_cases
from sampling_mask.core.limits import DEFAULT_LIMITS, Limits

CASES = load_cases()


class DropsTrailingEmptyRows(ReferenceImplementation):
    """Trims empty rows at the end of a mask (a classic `rstrip` of padding rows)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        mask = super().decode(form, payload, limits)
        rows = mask.to_rows()
        while rows and not rows[-1]:
            rows.pop()
        return SamplingMask.from_rows(rows, vocab_size=mask.vocab_size, metadata=mask.metadata)


class ForgetsTemperature(ReferenceImplementation):
    """Scores the raw logits: the sampler's temperature never reaches the trainer."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        return super().score(form, {**payload, "temperature": 1.0}, options, limits)


class MinusOneIsAnId(ReferenceImplementation):
    """Reads every entry of a dense row as an id, padding included."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form not in ("dense", "packed"):
            return super().decode(form, payload, limits)
        dense = array_from_json(payload["dense"], field="dense")
        rows, width = dense.shape
        return SamplingMask.from_ragged(
            dense.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width, vocab_size=payload.get("vocab_size")
        )


class OffByOneOffsets(ReferenceImplementation):
    """Tolerates offsets[T] == nnz + 1 (an off-by-one end) by clipping it."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "ragged" and isinstance(payload, dict) and "offsets" in payload:
            ids = array_from_json(payload["ids"], field="ids")
            offsets = array_from_json(payload["offsets"], field="offsets")
            if offsets.size and int(offsets[-1]) == ids.size + 1:
                return SamplingMask.from_ragged(
                    ids, np.minimum(offsets, ids.size), vocab_size=payload.get("vocab_size")
                )
        return super().decode(form, payload, limits)


class AcceptsNonTrailingPadding(ReferenceImplementation):
    """Drops every -1 wherever it sits, so a -1 between ids goes unnoticed."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form not in ("dense", "packed"):
            return super().decode(form, payload, limits)
        dense = array_from_json(payload["dense"], field="dense")
        rows = [[int(v) for v in row if v != -1] for row in dense.tolist()]
        cu = array_from_json(payload["cu_seqlens"], field="cu_seqlens") if "cu_seqlens" in payload else None
        return SamplingMask.from_rows(rows, cu_seqlens=cu, vocab_size=payload.get("vocab_size"))


class TruncatesInt64Offsets(ReferenceImplementation):
    """Reads int64 offsets into an int32 array (the high word is lost)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "ragged" and isinstance(payload, dict) and "offsets" in payload:
            offsets = array_from_json(payload["offsets"], field="offsets").astype(np.int32)
            return super().decode(
                form,
                {**payload, "offsets": {"dtype": "int32", "shape": [offsets.size], "values": offsets.tolist()}},
                limits,
            )
        return super().decode(form, payload, limits)


class ReturnsStoredOrder(ReferenceImplementation):
    """Answers rows in the order they were stored, not in canonical ascending order."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        response = super().handle(request)
        if request.get("op") == "decode" and "ok" in response:
            mask = self.decode(request["form"], request["input"])
            response["ok"] = {**mask_to_json(mask), "rows": mask.to_rows()}
        return response


# (broken implementation, the forms it is run on, a case that must fail, what the failure says)
BROKEN = [
    (DropsTrailingEmptyRows, ("dense", "ragged", "json-rows"), "dense.trailing-empty-rows", "expected 3 rows, got 1"),
    (ForgetsTemperature, ("scorer",), "scorer.temperature-scalar", "logprobs[0]"),
    (MinusOneIsAnId, ("dense", "packed"), "dense.issue-example", "rejected valid input with E_RANGE"),
    (
        OffByOneOffsets,
        ("ragged",),
        "ragged.offsets-end-past-nnz",
        "accepted invalid input (expected rejection with E_OFFSETS)",
    ),
    (
        AcceptsNonTrailingPadding,
        ("dense", "packed"),
        "dense.padding-between-ids",
        "accepted invalid input (expected rejection with E_PADDING)",
    ),
    (TruncatesInt64Offsets, ("ragged",), "ragged.offsets-int64-not-truncated", "accepted invalid input"),
    (ReturnsStoredOrder, ("ragged",), "ragged.unsorted-rows", "not in canonical (ascending) order"),
]


@pytest.mark.parametrize(("broken", "forms", "case_id", "why"), BROKEN, ids=[b[0].__name__ for b in BROKEN])
def test_suite_fails_each_broken_implementation_with_a_named_case(
    broken: type[ReferenceImplementation], forms: tuple[str, ...], case_id: str, why: str
) -> None:
    cases = [c for c in CASES if c.form in forms]
    report = runner.run(broken(), cases)
    result = report.by_id()[case_id]
    assert not report.ok
    assert result.status == "FAIL", (result.status, result.detail)
    assert why in result.detail
    # The same slice passes against the reference: the failure is the bug's, not the case's.
    assert runner.run(ReferenceImplementation(), cases).ok


def test_broken_implementation_fails_the_cli_too() -> None:
    """Through `--impl module:object`, a broken implementation makes the command exit non-zero."""
    import io
    import sys
    import types

    module = types.ModuleType("broken_conformance_impls")
    module.AcceptsNonTrailingPadding = AcceptsNonTrailingPadding  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        out = io.StringIO()
        code = runner.main(
            ["--impl", "broken_conformance_impls:AcceptsNonTrailingPadding", "--form", "dense", "-q"], out=out
        )
    finally:
        del sys.modules[module.__name__]
    assert code == 1
    assert "FAIL        dense.padding-between-ids" in out.getvalue()
