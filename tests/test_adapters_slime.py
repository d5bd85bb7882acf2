"""slime adapter, against meta_info and Sample fields made by copies of slime's own functions."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.adapters import slime

CASE = json.loads((Path(__file__).parent / "fixtures/upstream/trainers/trainers.json").read_text())["slime"]


def test_meta_info_keys_round_trip():
    for meta, rows in ((CASE["meta_info_turn1"], CASE["turns"][0]), (CASE["meta_info_turn2"], CASE["turns"][1])):
        mask = slime.from_meta_info(meta, vocab_size=16)
        assert mask.to_rows() == rows
        assert slime.to_meta_info(mask) == meta  # ours -> upstream bytes -> ours
    assert slime.from_meta_info({"text": "no mask"}) is None
    aliased = {
        "top_p_kept_token_ids": CASE["meta_info_turn1"]["top_p_token_ids"],
        "top_p_kept_token_offsets": CASE["meta_info_turn1"]["top_p_token_offsets"],
    }
    assert slime.from_meta_info(aliased).to_rows() == CASE["turns"][0]
    with pytest.raises(SamplingMaskError) as err:
        slime.from_meta_info({"top_p_token_ids": CASE["meta_info_turn1"]["top_p_token_ids"]})
    assert err.value.code is ErrorCode.E_SCHEMA


def test_sample_fields_with_tool_rows_round_trip():
    assert CASE["dtypes"] == ["torch.int32", "torch.int32"]
    sample = SimpleNamespace(
        response_length=len(CASE["rows"]),
        rollout_top_p_token_ids=torch.tensor(CASE["rollout_top_p_token_ids"], dtype=torch.int32),
        rollout_top_p_token_offsets=torch.tensor(CASE["rollout_top_p_token_offsets"], dtype=torch.int32),
    )
    mask = slime.from_sample(sample)
    assert mask.to_rows() == CASE["rows"]  # the tool span reads as empty rows (no mask)
    fields = slime.to_sample_fields(mask)
    assert fields == [
        {
            "rollout_top_p_token_ids": CASE["rollout_top_p_token_ids"],
            "rollout_top_p_token_offsets": CASE["rollout_top_p_token_offsets"],
        }
    ]
    assert slime.from_samples([sample, sample]).num_segments == 2


@pytest.mark.parametrize(
    ("sample", "code"),
    [
        (
            SimpleNamespace(response_length=3, rollout_top_p_token_ids=[1], rollout_top_p_token_offsets=[0, 1]),
            ErrorCode.E_SHAPE,
        ),
        (SimpleNamespace(rollout_top_p_token_ids=[1], rollout_top_p_token_offsets=[]), ErrorCode.E_OFFSETS),
        (SimpleNamespace(rollout_top_p_token_ids=b"\0\0\0", rollout_top_p_token_offsets=[0]), ErrorCode.E_BYTES),
        ({"sampling_mask_ids": [1], "sampling_mask_offsets": [0, 1]}, ErrorCode.E_SCHEMA),
        ((1, 2, 3), ErrorCode.E_SCHEMA),
        (
            SimpleNamespace(response_length="x", rollout_top_p_token_ids=[], rollout_top_p_token_offsets=[0]),
            ErrorCode.E_SCHEMA,
        ),
    ],
)
def test_bad_samples(sample, code):
    with pytest.raises(SamplingMaskError) as err:
        slime.from_sample(sample)
    assert err.value.code is code


def test_empty_mask_writes_offsets_zero():
    assert slime.to_sample_fields(SamplingMask.from_rows([])) == [
        {"rollout_top_p_token_ids": [], "rollout_top_p_token_offsets": [0]}
    ]
