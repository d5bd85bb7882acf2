"""SGLang adapter: meta_info (unsorted rows, tie rows wider than top_k) and the chunked form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import sglang

# top_k = 2, but row 1 keeps four ids tied at the cutoff; rows arrive unsorted.
META_INFO = {
    "output_token_sampling_mask": [[42, 7], [9, 3, 12, 5], [1], [30, 2]],
    "output_token_sampling_logprobs": [-0.25, -1.5, 0.0, -0.75],
    "output_token_sampling_mask_length": 4,
    "finish_reason": {"type": "stop"},
}
OUTPUT_IDS = [7, 12, 1, 30]


def test_meta_info_round_trip_keeps_sglang_order():
    mask = sglang.from_meta_info(META_INFO, output_ids=OUTPUT_IDS, vocab_size=64, metadata={"top_k": 2})
    assert mask is not None
    assert mask.to_rows() == META_INFO["output_token_sampling_mask"]
    assert not mask.is_canonical
    assert int(mask.row_lengths.max()) == 4 > mask.metadata["top_k"]  # ties wider than top_k survive
    assert mask.sampled_token_ids.tolist() == OUTPUT_IDS
    out = sglang.to_meta_info(mask)
    assert out["output_token_sampling_mask"] == META_INFO["output_token_sampling_mask"]
    assert out["output_token_sampling_mask_length"] == 4
    np.testing.assert_allclose(out["output_token_sampling_logprobs"], META_INFO["output_token_sampling_logprobs"])
    assert sglang.from_meta_info(out, output_ids=OUTPUT_IDS, vocab_size=64, metadata={"top_k": 2}) == mask


def test_response_and_its_length_key():
    mask = sglang.from_response({"output_ids": OUTPUT_IDS, "meta_info": META_INFO})
    assert mask is not None and mask.canonical().to_rows()[1] == [3, 5, 9, 12]
    per_row = {"meta_info": {**META_INFO, "output_token_sampling_mask_length": [2, 4, 1, 2]}}
    with pytest.raises(SamplingMaskError) as err:  # 0.5.23 writes one int: the rows so far
        sglang.from_response(per_row)
    assert err.value.code is ErrorCode.E_DTYPE


def test_missing_mask_raises_or_returns_none():
    aborted = {"finish_reason": {"type": "abort"}}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(aborted)
    assert err.value.code is ErrorCode.E_SCHEMA and "abort" in str(err.value)
    assert sglang.from_meta_info(aborted, on_missing="none") is None


@pytest.mark.parametrize(
    ("change", "code", "row"),
    [
        ({"output_token_sampling_mask_length": 5}, ErrorCode.E_SHAPE, None),
        ({"output_token_sampling_mask_length": True}, ErrorCode.E_DTYPE, None),
        ({"output_token_sampling_logprobs": [[0.0], [0.0], [0.0], [0.0]]}, ErrorCode.E_OFFSETS, 0),
        ({"output_token_sampling_logprobs": [[0.0, -1.0], 0.0, 0.0, 0.0]}, ErrorCode.E_SCHEMA, 0),
        ({"output_token_sampling_logprobs": [0.0]}, ErrorCode.E_SHAPE, None),
        ({"output_token_sampling_mask": [[1, 1]]}, ErrorCode.E_DUPLICATE, 0),
        ({"output_token_sampling_mask": [[1], [2.5]]}, ErrorCode.E_DTYPE, 1),
        ({"output_token_sampling_mask": "[[1]]"}, ErrorCode.E_SCHEMA, None),
    ],
)
def test_bad_meta_info(change, code, row):
    meta = {**META_INFO, **change}
    if "output_token_sampling_mask" in change and "output_token_sampling_logprobs" not in change:
        meta.pop("output_token_sampling_logprobs")
        meta.pop("output_token_sampling_mask_length")
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(meta)
    assert err.value.code is code and err.value.row == row


def test_sampled_id_outside_its_row():
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(META_INFO, output_ids=[7, 12, 2, 30])
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 2


def test_chunked_per_row_and_per_id_round_trips():
    mask = sglang.from_meta_info(META_INFO, vocab_size=64)
    per_row = sglang.to_chunked(mask)
    assert per_row["lengths"].dtype == np.int32 and per_row["lengths"].tolist() == [2, 4, 1, 2]
    assert sglang.from_chunked(per_row, vocab_size=64) == mask
    with_support = mask.replace(support_logprobs=np.linspace(-3, 0, mask.nnz, dtype=np.float32))
    per_id = sglang.to_chunked(with_support, sampling_logprobs_mode="support")
    back = sglang.from_chunked(per_id, vocab_size=64)
    np.testing.assert_array_equal(back.support_logprobs, with_support.support_logprobs)
    assert back.sampled_logprobs is None


def test_chunked_ambiguity_needs_the_mode():
    chunked = {"lengths": [2, 0], "token_ids": [4, 5], "logprobs": [-0.5, -1.0]}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_chunked(chunked)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "logprobs"
    assert sglang.from_chunked(chunked, sampling_logprobs_mode="support").support_logprobs.tolist() == [-0.5, -1.0]
    singletons = {"lengths": [1, 1], "token_ids": [4, 5], "logprobs": [-0.5, -1.0]}
    assert sglang.from_chunked(singletons).sampled_logprobs.tolist() == [-0.5, -1.0]
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_chunked({"lengths": [3], "token_ids": [4, 5]})
    assert err.value.code is ErrorCode.E_OFFSETS


# ---------------------------------------------------------------------------- SGLang's own objects: support mode, chunks, routes
# tests/fixtures/upstream/sglang-0.5.23 was built with SGLang 0.5.23's own SamplingMaskChunk and OpenAI
# pydantic classes (tests/fixtures/upstream/make_vllm_sglang.py).
UPSTREAM = Path(__file__).resolve().parent / "fixtures" / "upstream" / "sglang-0.5.23"


def _load(name: str):
    text = (UPSTREAM / name).read_text()
    return [json.loads(line) for line in text.splitlines()] if name.endswith(".jsonl") else json.loads(text)


def test_support_mode_logprobs_are_accepted():
    selected = sglang.from_response(_load("generate_selected.json"), vocab_size=96)
    support = sglang.from_response(_load("generate_support.json"), vocab_size=96)
    assert support.same_support(selected) and support.to_rows() == selected.to_rows()
    assert support.support_logprobs is not None and support.sampled_logprobs is None
    meta = _load("generate_support.json")["meta_info"]
    assert sglang.to_meta_info(support, sampling_logprobs_mode="support")["output_token_sampling_logprobs"] == [
        pytest.approx(row) for row in meta["output_token_sampling_logprobs"]
    ]
    # The sampled token's selected logprob is its entry among the support logprobs.
    rows = support.to_rows()
    sampled_lp = [
        support.support_logprobs[support.offsets[t] + rows[t].index(int(y))]
        for t, y in enumerate(selected.sampled_token_ids)
    ]
    np.testing.assert_allclose(sampled_lp, selected.sampled_logprobs, rtol=1e-6)
    meta_tie = json.loads((UPSTREAM / "meta.json").read_text())
    assert all(len(rows[t]) > meta_tie["top_k"][t] for t in meta_tie["tie_rows"])  # ties wider than top_k
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_response(_load("generate_support.json"), sampling_logprobs_mode="selected")
    assert err.value.code is ErrorCode.E_SCHEMA


def test_truncated_flags_are_read_per_row():
    """``output_token_sampling_mask_truncated`` exists only in the unmerged SGLang PR #34037."""
    clean = {**META_INFO, "output_token_sampling_mask_truncated": [False, False, False, False]}
    assert sglang.from_meta_info(clean).metadata == {}
    meta = {**META_INFO, "output_token_sampling_mask_truncated": [False, True, False, True]}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(meta)
    assert err.value.field == "output_token_sampling_mask_truncated" and err.value.row == 1
    mask = sglang.from_meta_info(meta, allow_truncated=True)
    assert mask.metadata["truncated"] is True and mask.metadata["truncated_rows"] == 2
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info({**META_INFO, "output_token_sampling_mask_truncated": [False]})
    assert err.value.code is ErrorCode.E_SHAPE


def test_incremental_stream_keeps_a_running_length():
    chunks = _load("generate_stream.jsonl")
    assert chunks[1]["meta_info"]["output_token_sampling_mask_length"] != len(
        chunks[1]["meta_info"]["output_token_sampling_mask"]
    )
    with pytest.raises(SamplingMaskError):  # one chunk alone is not a whole response
        sglang.from_response(chunks[1])
    streamed = sglang.from_stream(chunks, vocab_size=96)
    assert streamed == sglang.from_response(_load("generate_selected.json"), vocab_size=96)
    broken = [chunks[0], {**chunks[2], "meta_info": {**chunks[2]["meta_info"], "output_token_sampling_mask_length": 2}}]
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_stream(broken)
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == "chunk[1].output_token_sampling_mask_length"


def test_chat_completion_route():
    chat = _load("chat_completion.json")
    (mask,) = sglang.from_chat_response(chat, vocab_size=96)
    assert mask == sglang.from_response(_load("generate_selected.json"), vocab_size=96)
    assert mask.sampled_token_ids.tolist() == chat["choices"][0]["response_token_ids"]
    no_meta = {"choices": [{"index": 0, "message": {"role": "assistant", "content": ""}}]}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_chat_response(no_meta)
    assert "return_meta_info" in str(err.value)
    assert sglang.from_chat_response(no_meta, on_missing="none") == [None]


def test_round_trips_through_sglang_shapes():
    for name, mode in (("generate_selected.json", "selected"), ("generate_support.json", "support")):
        body = _load(name)
        mask = sglang.from_response(body, vocab_size=96)
        out = sglang.to_meta_info(mask, sampling_logprobs_mode=mode)
        assert out["output_token_sampling_mask"] == body["meta_info"]["output_token_sampling_mask"]  # order kept
        assert out["output_token_sampling_mask_length"] == body["meta_info"]["output_token_sampling_mask_length"]
        assert sglang.from_meta_info(out, output_ids=body["output_ids"], vocab_size=96) == mask
    chunk = _load("sampling_mask_chunk.json")
    mask = sglang.from_chunked(chunk, sampling_logprobs_mode="support")
    back = sglang.to_chunked(mask, sampling_logprobs_mode="support")
    assert back["lengths"].tolist() == chunk["lengths"] and back["token_ids"].tolist() == chunk["token_ids"]
    np.testing.assert_allclose(back["logprobs"], chunk["logprobs"])


def test_with_upstream_sglang_chunk():
    """Ours -> SGLang's own SamplingMaskChunk -> its to_lists -> ours; skipped without sglang (CI)."""
    module = pytest.importorskip("sglang.srt.sampling.sampling_mask")
    body = _load("generate_support.json")
    mask = sglang.from_response(body, vocab_size=96)
    chunk = module.SamplingMaskChunk(**sglang.to_chunked(mask, sampling_logprobs_mode="support"))
    rows, logprobs = chunk.to_lists(support_logprobs=True)
    meta = {"output_token_sampling_mask": rows, "output_token_sampling_logprobs": logprobs}
    assert sglang.from_meta_info(meta, output_ids=body["output_ids"], vocab_size=96) == mask
    protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    chat = protocol.ChatCompletionResponse(
        id="c",
        model="m",
        choices=[
            protocol.ChatCompletionResponseChoice(
                index=0,
                message=protocol.ChatMessage(role="assistant", content=""),
                response_token_ids=mask.sampled_token_ids.tolist(),
                meta_info=sglang.to_meta_info(mask, sampling_logprobs_mode="support"),
            )
        ],
        usage=protocol.UsageInfo(prompt_tokens=1, completion_tokens=mask.num_rows, total_tokens=mask.num_rows + 1),
    )
    assert sglang.from_chat_response(json.loads(chat.model_dump_json()), vocab_size=96) == [mask]


GREEDY = json.loads((Path(__file__).parent / "fixtures/upstream/sglang-0.5.23-greedy/greedy.json").read_text())


@pytest.mark.parametrize("mode", ["selected", "support"])
def test_greedy_singleton_rows_one_rule(mode):
    """SGLang 0.5.23's own greedy sampler output, per mode (fixtures/upstream/sglang-0.5.23-greedy/):
    meta_info and SamplingMaskChunk give the same mask, with both companions."""
    body, chunk = GREEDY[mode]["response"], GREEDY[mode]["chunk"]
    from_meta = sglang.from_response(body)
    rows = len(chunk["lengths"])
    from_chunk = sglang.from_chunked(chunk)
    assert from_meta.to_rows() == [[t] for t in body["output_ids"]]
    for mask in (from_meta, from_chunk):
        np.testing.assert_allclose(mask.sampled_logprobs, mask.support_logprobs)
    np.testing.assert_allclose(from_chunk.sampled_logprobs, from_meta.sampled_logprobs[:rows])
    assert from_chunk.to_rows() == from_meta[:rows].to_rows()
    for explicit in ("selected", "support"):  # the rule holds whatever mode the caller names
        again = sglang.from_chunked(chunk, sampling_logprobs_mode=explicit)
        assert again.sampled_logprobs is not None and again.support_logprobs is not None
    # upstream -> ours -> upstream, in this mode and in the other
    written = sglang.to_meta_info(from_meta, sampling_logprobs_mode=mode)
    for key in ("output_token_sampling_mask", "output_token_sampling_logprobs", "output_token_sampling_mask_length"):
        assert written[key] == body["meta_info"][key]
    other = "support" if mode == "selected" else "selected"
    assert (
        sglang.to_meta_info(from_meta, sampling_logprobs_mode=other)["output_token_sampling_logprobs"]
        == (GREEDY[other]["response"]["meta_info"]["output_token_sampling_logprobs"])
    )
    back = sglang.to_chunked(from_chunk, sampling_logprobs_mode=mode)
    assert back["lengths"].tolist() == chunk["lengths"] and back["logprobs"].tolist() == chunk["logprobs"]


def test_mixed_rows_keep_the_mode_they_name():
    meta = {"output_token_sampling_mask": [[3], [4, 5]], "output_token_sampling_logprobs": [-0.1, -0.7]}
    mask = sglang.from_meta_info(meta)
    assert mask.sampled_logprobs is not None and mask.support_logprobs is None
