"""Miles adapter, against Sample fields made by a copy of Miles' own flattening (make_trainers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.adapters import miles

CASE = json.loads((Path(__file__).parent / "fixtures/upstream/trainers/trainers.json").read_text())["miles"]


def _sample(**fields):
    return SimpleNamespace(response_length=len(CASE["rows"]), **fields)


def test_default_field_names_round_trip():
    sample = _sample(
        rollout_sampling_mask_ids=CASE["rollout_sampling_mask_ids"],
        rollout_sampling_mask_offsets=CASE["rollout_sampling_mask_offsets"],
    )
    mask = miles.from_sample(sample, vocab_size=64)
    assert mask.to_rows() == CASE["rows"]  # tool tokens carry their own id as a singleton row
    fields = miles.to_sample_fields(mask)
    assert fields == [
        {
            "rollout_sampling_mask_ids": CASE["rollout_sampling_mask_ids"],
            "rollout_sampling_mask_offsets": CASE["rollout_sampling_mask_offsets"],
        }
    ]
    assert miles.from_sample(_sample(**fields[0])) == mask.replace(vocab_size=None)


def test_rollout_sampling_mask_with_logprobs_round_trips():
    holder = SimpleNamespace(
        _ids=torch.tensor(CASE["rollout_sampling_mask_ids"], dtype=torch.int32),
        _offsets=torch.tensor(CASE["rollout_sampling_mask_offsets"], dtype=torch.int64),
        _logprobs=torch.tensor(CASE["logprobs"], dtype=torch.float32),
    )
    mask = miles.from_sample(_sample(rollout_sampling_mask=holder))
    assert mask.to_rows() == CASE["rows"]
    np.testing.assert_allclose(mask.support_logprobs, CASE["logprobs"], atol=1e-6)
    assert miles.from_sample(holder) == mask  # a RolloutSamplingMask itself
    (args,) = miles.to_rollout_sampling_masks(mask)
    assert args["ids"].dtype == np.int32 and args["offsets"].dtype == np.int64
    assert args["ids"].tolist() == CASE["rollout_sampling_mask_ids"]
    assert args["offsets"].tolist() == CASE["rollout_sampling_mask_offsets"]
    np.testing.assert_allclose(args["logprobs"], CASE["logprobs"], atol=1e-6)
    without = miles.to_rollout_sampling_masks(SamplingMask.from_rows([[1]]))
    assert without[0]["logprobs"] is None


def test_empty_rows_are_refused_both_ways():
    with pytest.raises(SamplingMaskError) as err:
        miles.from_sample(([1, 2], [0, 1, 1, 2]))
    assert err.value.code is ErrorCode.E_OFFSETS and err.value.row == 1
    with pytest.raises(SamplingMaskError) as err:
        miles.to_sample_fields(SamplingMask.from_rows([[3], []]))
    assert err.value.code is ErrorCode.E_OFFSETS and err.value.row == 1
    with pytest.raises(SamplingMaskError):
        miles.to_rollout_sampling_masks(SamplingMask.from_rows([[]]))


def test_samples_and_errors():
    first = _sample(
        rollout_sampling_mask_ids=CASE["rollout_sampling_mask_ids"],
        rollout_sampling_mask_offsets=CASE["rollout_sampling_mask_offsets"],
    )
    both = miles.from_samples([first, ([4, 5], [0, 1, 2])])
    assert both.num_segments == 2 and both.to_rows() == [*CASE["rows"], [4], [5]]
    assert miles.from_samples([]).num_rows == 0
    with pytest.raises(SamplingMaskError) as err:
        miles.from_samples([first, ([4], [0, 2])])
    assert err.value.segment == 1
    with pytest.raises(SamplingMaskError) as err:
        miles.from_sample(
            SimpleNamespace(response_length=1, rollout_sampling_mask_ids=[1], rollout_sampling_mask_offsets=[0, 1, 1])
        )
    assert err.value.code is ErrorCode.E_OFFSETS
    with pytest.raises(SamplingMaskError) as err:
        miles.from_sample(
            SimpleNamespace(response_length=2, rollout_sampling_mask_ids=[1], rollout_sampling_mask_offsets=[0, 1])
        )
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:
        miles.from_sample({"sampling_mask_ids": [1], "sampling_mask_offsets": [0, 1]})  # the old invented names
    assert err.value.code is ErrorCode.E_SCHEMA
    with pytest.raises(SamplingMaskError) as err:
        miles.from_samples(3)
    assert err.value.code is ErrorCode.E_SCHEMA


def test_rollout_sampling_mask_refuses_unnormalized_logprobs():
    ok = SamplingMask.from_rows([[1, 2], [3]], support_logprobs=np.log([0.25, 0.75, 1.0]))
    assert len(miles.to_rollout_sampling_masks(ok)) == 1
    for bad in ([0.25, 0.5, 1.0], [0.25, 0.75, 0.5]):
        with pytest.raises(SamplingMaskError) as err:
            miles.to_rollout_sampling_masks(SamplingMask.from_rows([[1, 2], [3]], support_logprobs=np.log(bad)))
        assert err.value.code is ErrorCode.E_RANGE and err.value.row == bad.index(0.5) // 2
    nan = SamplingMask.from_rows([[1, 2], [3]], support_logprobs=[np.nan, 0.0, 0.0])
    with pytest.raises(SamplingMaskError) as err:
        miles.to_rollout_sampling_masks(nan)
    assert err.value.row == 0


VERSIONS = json.loads((Path(__file__).parent / "fixtures/upstream/miles/miles_versions.json").read_text())


class _Stored(SimpleNamespace):
    """An upstream object as the adapter sees it: its stored private tensors (and class flag)."""


def _upstream(stored: dict) -> _Stored:
    fields = {k: torch.tensor(v) for k, v in stored.items() if k.startswith("_")}
    fields["_ids"] = fields["_ids"].to(torch.int32)
    if "allows_empty_rows" in stored:
        fields["allows_empty_rows"] = stored["allows_empty_rows"]
    return _Stored(**fields)


def test_partial_sampling_mask_empty_rows_round_trip():
    """Version B's PartialSamplingMask (cited copy run by fixtures/upstream/miles/make_miles_versions.py)."""
    case = VERSIONS["partial"]
    assert VERSIONS["rollout_refuses_empty"].startswith("sampling-mask offsets must be strictly increasing")
    obj = _upstream(case["stored"])
    mask = miles.from_sample(obj)  # upstream -> ours: the class flag allows the empty rows
    assert mask.to_rows() == case["rows"]
    assert miles.from_sample(SimpleNamespace(rollout_sampling_mask=obj, response_length=7)) == mask
    (kwargs,) = miles.to_rollout_sampling_masks(mask, form="partial")  # ours -> upstream
    assert set(kwargs) == {"ids", "offsets"} and kwargs["ids"].dtype == np.int32 and kwargs["offsets"].dtype == np.int64
    assert kwargs["ids"].tolist() == case["stored"]["_ids"] and kwargs["offsets"].tolist() == case["stored"]["_offsets"]
    assert VERSIONS["ours_into_upstream"]["partial_B"] == case["stored"]  # B's constructor took our kwargs
    assert miles.from_sample(_upstream(case["prefix_4"])).to_rows() == case["rows"][:4]
    # the same rows without the flag are refused, as version A / C / D and PR #2595 refuse them
    strict = _upstream({k: v for k, v in case["stored"].items() if k != "allows_empty_rows"})
    with pytest.raises(SamplingMaskError) as err:
        miles.from_sample(strict)
    assert err.value.code is ErrorCode.E_OFFSETS and err.value.row == 0
    assert miles.from_sample(strict, allow_empty_rows=True) == mask
    with pytest.raises(SamplingMaskError) as err:
        miles.to_rollout_sampling_masks(mask)
    assert err.value.code is ErrorCode.E_OFFSETS
    with pytest.raises(SamplingMaskError) as err:
        miles.to_rollout_sampling_masks(mask, form="tinker")
    assert err.value.field == "form"


@pytest.mark.parametrize(
    ("key", "form", "name"),
    [("logprobs_D", "logprobs", "_logprobs"), ("support_logprobs_C", "support_logprobs", "_support_logprobs")],
)
def test_logprob_versions_round_trip(key, form, name):
    case = VERSIONS[key]
    mask = miles.from_sample(_upstream(case["stored"]))
    assert mask.to_rows() == case["rows"]
    np.testing.assert_allclose(mask.support_logprobs, case["logprobs"], rtol=1e-6)
    (kwargs,) = miles.to_rollout_sampling_masks(mask, form=form)
    assert set(kwargs) == {"ids", "offsets", form}
    np.testing.assert_allclose(kwargs[form], case["stored"][name], rtol=1e-6)
    written = VERSIONS["ours_into_upstream"]["D" if form == "logprobs" else "C"]  # upstream accepted ours
    assert written["_ids"] == case["stored"]["_ids"] and written["_offsets"] == case["stored"]["_offsets"]
    np.testing.assert_allclose(written[name], case["stored"][name], rtol=1e-6)
