"""vLLM adapter: real vLLM 0.32 fixtures (tests/fixtures/vllm-0.32) and hand-written layouts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mask_examples import VLLM_FIXTURES

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError, concat
from sampling_mask.adapters import vllm
from sampling_mask.adapters._common import ragged_from_lists
from sampling_mask.conformance.strategies import rows_lists
from sampling_mask.core.limits import DEFAULT_LIMITS

FIXTURES = VLLM_FIXTURES


@pytest.fixture(scope="module")
def completion() -> dict:
    return json.loads((FIXTURES / "completion_output_sampling_mask.json").read_text())


@pytest.fixture(scope="module")
def engine() -> dict:
    with np.load(FIXTURES / "topk_topp_case.npz") as z:
        return {k: z[k] for k in z.files}


def test_completion_output_object_and_dict_agree_with_engine_csr(completion, engine):
    output = SimpleNamespace(
        sampling_mask=SimpleNamespace(token_ids=completion["sampling_mask"]),
        token_ids=completion["token_ids"],
        finish_reason="length",
    )
    from_object = vllm.from_completion_output(output, vocab_size=completion["vocab_size"])
    from_dict = vllm.from_completion_output(
        {"sampling_mask": completion["sampling_mask"], "token_ids": completion["token_ids"]},
        vocab_size=completion["vocab_size"],
    )
    csr = vllm.from_engine_csr(
        {"token_ids": engine["csr_token_ids"], "offsets": engine["csr_offsets"]}, vocab_size=completion["vocab_size"]
    )
    assert from_object == from_dict
    assert from_object.same_support(csr)
    assert np.array_equal(from_object.sampled_token_ids, engine["sampled_token_ids"])
    assert int(from_object.row_lengths.max()) == completion["vocab_size"]  # the untruncated row
    assert vllm.to_token_ids(from_object) == completion["sampling_mask"]
    csr_output = SimpleNamespace(  # vLLM before #50520 exposed the CSR object itself
        sampling_mask=SimpleNamespace(token_ids=engine["csr_token_ids"], offsets=engine["csr_offsets"]),
        token_ids=completion["token_ids"],
    )
    assert vllm.from_completion_output(csr_output, vocab_size=completion["vocab_size"]) == from_object


def test_sampled_ids_must_sit_in_their_rows_and_match_the_row_count():
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_token_ids([[1, 2], [3]], sampled_token_ids=[2, 4])
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 1
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_token_ids([[1, 2], [3]], sampled_token_ids=[2])
    assert err.value.code is ErrorCode.E_SHAPE


def _processed_flat(engine: dict, k: int) -> dict:
    """FlatLogprobs as vLLM writes them in processed_logprobs mode, from the fixture's own logits and support."""
    logits, temperature = engine["logits"], engine["temperature"]
    offsets, support = engine["csr_offsets"], engine["csr_token_ids"]
    flat: dict = {"start_indices": [], "end_indices": [], "token_ids": [], "logprobs": [], "ranks": []}
    for t in range(logits.shape[0]):
        z = logits[t].astype(np.float64) / float(temperature[t])
        keep = np.full(z.size, -np.inf)
        ids = support[offsets[t] : offsets[t + 1]]
        keep[ids] = z[ids]
        lp = keep - np.logaddexp.reduce(keep[ids])
        order = np.argsort(-lp, kind="stable")[:k]
        sampled = int(engine["sampled_token_ids"][t])
        flat["start_indices"].append(len(flat["token_ids"]))
        flat["token_ids"] += [sampled, *order.tolist()]
        flat["logprobs"] += [float(lp[sampled]), *lp[order].tolist()]
        flat["ranks"] += [int((lp > lp[sampled]).sum()) + 1, *range(1, len(order) + 1)]
        flat["end_indices"].append(len(flat["token_ids"]))
    return flat


def test_flat_logprobs_from_the_fixture_reproduce_the_engine_support(engine):
    k = 80
    flat = _processed_flat(engine, k)
    counts = np.diff(engine["csr_offsets"])
    with pytest.raises(SamplingMaskError) as err:  # rows wider than the listing are not cut silently
        vllm.from_flat_logprobs(flat, sampled_token_ids=engine["sampled_token_ids"])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == int(np.flatnonzero(counts > k)[0])
    mask = vllm.from_flat_logprobs(flat, allow_truncated=True, sampled_token_ids=engine["sampled_token_ids"])
    assert mask.metadata["truncated_rows"] == int(np.count_nonzero(counts > k)) > 0
    for t in np.flatnonzero(counts <= k).tolist():
        expected = engine["csr_token_ids"][engine["csr_offsets"][t] : engine["csr_offsets"][t + 1]]
        assert sorted(mask.row(t).tolist()) == sorted(expected.tolist()), t
    np.testing.assert_allclose(mask.sampled_logprobs, engine["processed_logprobs_of_sampled"], atol=2e-4)


FLAT = {
    # pos 0: sampled 7 (rank 1) also first among the top-k: the duplicate is fine; 9 was filtered.
    # pos 1: sampled 5 (rank 2), all three candidates kept; their probabilities sum to 1: complete.
    # pos 2: sampled 4, everything else filtered: a singleton row.
    "start_indices": [0, 4, 8],
    "end_indices": [4, 8, 12],
    "token_ids": [7, 7, 3, 9, 5, 2, 5, 8, 4, 4, 1, 6],
    "logprobs": [math.log(p) if p else float("-inf") for p in (0.9, 0.9, 0.1, 0, 0.35, 0.55, 0.35, 0.1, 1, 1, 0, 0)],
    "ranks": [1, 1, 2, 3, 2, 1, 2, 3, 1, 1, 2, 3],
}


def test_flat_logprobs_hand_written_layout_and_round_trip():
    mask = vllm.from_flat_logprobs(FLAT, vocab_size=16)
    assert mask.to_rows() == [[7, 3], [2, 5, 8], [4]]
    assert mask.sampled_token_ids.tolist() == [7, 5, 4]
    np.testing.assert_allclose(np.exp(mask.support_logprobs), [0.9, 0.1, 0.55, 0.35, 0.1, 1.0], rtol=1e-6)
    again = vllm.from_flat_logprobs(vllm.to_flat_logprobs(mask), vocab_size=16)
    assert again == mask


def test_flat_logprobs_top_k_never_cuts_a_kept_candidate():
    # top_k=2 drops candidate 8 of position 1, which survived: the support is wider than top_k.
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(FLAT, top_k=2)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 1
    mask = vllm.from_flat_logprobs(FLAT, top_k=2, allow_truncated=True)
    assert mask.to_rows() == [[7, 3], [2, 5], [4]]  # position 0 lost only its filtered 9
    assert mask.metadata["truncated"] is True and mask.metadata["truncated_rows"] == 1


MISSING = {
    # pos 0: sampled 11 (rank 4) missing, but 5 was filtered: the row is complete, so 11 is missing.
    # pos 1: probabilities 0.8 + 0.2 = 1: complete. pos 2: every candidate filtered.
    "start_indices": [0, 4, 7],
    "end_indices": [4, 7, 10],
    "token_ids": [11, 2, 3, 5, 1, 1, 2, 6, 1, 2],
    "logprobs": [-3.0, -0.5, -1.0, float("-inf"), math.log(0.8), math.log(0.8), math.log(0.2), -0.7]
    + [float("-inf")] * 2,
    "ranks": [4, 1, 2, 3, 1, 1, 2, 2, 1, 2],
}


def test_missing_sampled_is_an_error_by_default_and_repair_is_counted():
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(MISSING)
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 0 and err.value.value == 11
    mask, repaired = vllm.from_flat_logprobs_repairing(MISSING)
    assert repaired == 2
    assert mask.to_rows() == [[2, 11], [1, 2], [6]]
    assert mask.support_logprobs.tolist()[1] == pytest.approx(-3.0)  # the sampled token's own logprob
    _, none_repaired = vllm.from_flat_logprobs_repairing(FLAT)
    assert none_repaired == 0


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"ranks": [1, 1, 3, 2, 2, 1, 2, 3, 1, 1, 2, 3]}, ErrorCode.E_SCHEMA, "ranks"),
        ({"end_indices": [4, 8, 13]}, ErrorCode.E_OFFSETS, "end_indices"),
        ({"end_indices": [4, 4, 12]}, ErrorCode.E_OFFSETS, "end_indices"),
        ({"start_indices": [0, 0, 8]}, ErrorCode.E_OFFSETS, "start_indices"),
        ({"logprobs": [float("nan")] + FLAT["logprobs"][1:]}, ErrorCode.E_RANGE, "logprobs"),
        ({"logprobs": FLAT["logprobs"][:-1]}, ErrorCode.E_SHAPE, "logprobs"),
        ({"token_ids": ["7"] + FLAT["token_ids"][1:]}, ErrorCode.E_DTYPE, "token_ids"),
    ],
)
def test_bad_flat_logprobs(change, code, field):
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs({**FLAT, **change})
    assert err.value.code is code and err.value.field == field


def test_flat_sampled_ids_cross_check():
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(FLAT, sampled_token_ids=[7, 6, 4])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 1


@given(rows_lists(vocab_size=300, max_rows=10, max_width=6))
def test_fast_list_path_equals_the_generic_path(rows):
    ids, offsets = ragged_from_lists(rows, limits=DEFAULT_LIMITS)
    generic = SamplingMask.from_rows(rows)
    assert np.array_equal(ids, generic.ids) and np.array_equal(offsets, generic.offsets)


@given(
    st.lists(
        st.lists(
            st.one_of(st.integers(-3, 2**40), st.floats(0, 5), st.none(), st.booleans(), st.text(max_size=2)),
            max_size=3,
        ),
        max_size=4,
    )
)
def test_fast_list_path_is_as_strict_as_the_generic_path(rows):
    def outcome(fn):
        try:
            ids, offsets = fn()
            return ("ok", np.asarray(ids).tolist(), np.asarray(offsets).tolist())
        except SamplingMaskError as exc:
            return ("error", exc.code)

    fast = outcome(lambda: ragged_from_lists(rows, limits=DEFAULT_LIMITS))
    generic = outcome(lambda: (lambda m: (m.ids, m.offsets))(SamplingMask.from_rows(rows, validate=False)))
    assert fast == generic


# ---------------------------------------------------------------------------- vLLM's own objects: engine CSR, outputs, routes
# The fixtures under tests/fixtures/upstream/vllm-0.32 were built by vLLM 0.32's own classes
# (tests/fixtures/upstream/make_vllm_sglang.py); those under tests/fixtures/vllm-0.32 by the
# shared fixture script with vLLM's code.
UPSTREAM = FIXTURES.parent / "upstream" / "vllm-0.32"


@pytest.fixture(scope="module")
def tensors() -> dict:
    with np.load(UPSTREAM / "engine_tensors.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def shared_tensors() -> dict:
    with np.load(FIXTURES / "engine_compact_buffer.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def outputs() -> dict:
    return json.loads((UPSTREAM / "completion_outputs.json").read_text())


def _lists(z: dict) -> dict:
    return {
        "token_ids": z["csr_token_ids"],
        "offsets": z["csr_offsets"],
        "cu_num_generated_tokens": z["cu_num_generated_tokens"].tolist(),
    }


def test_engine_csr_offsets_none_is_one_position(tensors, shared_tensors, outputs):
    single = vllm.from_engine_csr({"token_ids": tensors["single_token_ids"], "offsets": None}, vocab_size=96)
    assert single.to_rows() == outputs["engine_lists"]["single_slice"]
    shared = SimpleNamespace(token_ids=shared_tensors["single_slice_token_ids"], offsets=None)
    assert vllm.from_engine_csr(shared).num_rows == 1
    multi = vllm.from_engine_csr({"token_ids": tensors["multi_token_ids"], "offsets": tensors["multi_offsets"]})
    assert multi.to_rows() == outputs["engine_lists"]["multi_slice"]
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_engine_csr({"token_ids": [1, 2], "offsets": [0, 3]})
    assert err.value.code is ErrorCode.E_OFFSETS


def test_sampling_mask_lists_as_completion_sampling_mask(tensors, outputs):
    lists_type = NamedTuple_like()
    output = SimpleNamespace(
        sampling_mask=lists_type(tensors["multi_token_ids"], tensors["multi_offsets"]),
        token_ids=[row[0] for row in outputs["engine_lists"]["multi_slice"]],
    )
    mask = vllm.from_completion_output(output, vocab_size=96)
    assert mask.to_rows() == outputs["engine_lists"]["multi_slice"]
    one = SimpleNamespace(sampling_mask=lists_type(tensors["single_token_ids"]), token_ids=[17])
    assert vllm.from_completion_output(one).to_rows() == outputs["engine_lists"]["single_slice"]


def NamedTuple_like():
    """A NamedTuple with SamplingMaskLists' fields and defaults (vllm/v1/outputs.py, 0.32.0)."""
    from typing import NamedTuple

    class SamplingMaskLists(NamedTuple):
        token_ids: np.ndarray
        offsets: np.ndarray | None = None
        cu_num_generated_tokens: list[int] | None = None

    return SamplingMaskLists


@pytest.mark.parametrize("source", ["upstream", "shared"])
def test_engine_tensors_with_junk_wide_rows_and_speculative_slots(source, tensors, shared_tensors):
    z = tensors if source == "upstream" else shared_tensors
    mask = vllm.from_engine_tensors(z, z["num_sampled_tokens"])
    expected = vllm.from_engine_csr(_lists(z), vocab_size=int(z["vocab_size"]))
    assert mask == expected  # what vLLM's own tolists() gave, segment per request included
    width = z["token_ids"].shape[1]
    active = z["counts"] > 0
    assert (z["counts"] > width).any() and not np.all(z["token_ids"][active][:, -1] == -1)  # junk, wide rows
    assert mask.num_segments == z["num_sampled_tokens"].size
    assert mask.num_rows == int(z["num_sampled_tokens"].sum()) < z["counts"].size  # inactive slots skipped
    with pytest.raises(SamplingMaskError) as err:  # speculative slots need num_sampled_tokens
        vllm.from_engine_tensors(z)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "num_sampled_tokens"
    wide = int(np.flatnonzero(z["counts"] > width)[0])
    bad = {**z, "counts": z["counts"].copy()}
    bad["counts"][wide] -= 1
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_engine_tensors(bad, z["num_sampled_tokens"])
    assert err.value.code is ErrorCode.E_OFFSETS and err.value.row == wide
    no_bits = {k: v for k, v in z.items() if k != "packed_mask"}
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_engine_tensors(no_bits, z["num_sampled_tokens"])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == wide
    over = z["num_sampled_tokens"].copy()
    over[0] = int(z["rows_per_request"]) + 1
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_engine_tensors(z, over)
    assert err.value.code is ErrorCode.E_RANGE and err.value.field == "num_sampled_tokens"


def test_engine_tensors_round_trip_speculative_and_wide_rows(tensors):
    mask = vllm.from_engine_tensors(tensors, tensors["num_sampled_tokens"])
    written = vllm.to_engine_tensors(mask, width=8, rows_per_request=int(tensors["rows_per_request"]))
    assert np.array_equal(written["counts"], tensors["counts"])  # inactive slots: count 0
    assert np.array_equal(written["num_sampled_tokens"], tensors["num_sampled_tokens"])
    assert vllm.from_engine_tensors(written, written["num_sampled_tokens"]) == mask
    plain = vllm.to_engine_tensors(mask, width=4)  # one slot per row, most rows wider than 4
    back = vllm.from_engine_tensors(plain)
    assert back.to_rows() == mask.to_rows() and back.num_segments == 1


def test_generate_route_body_and_stream_agree(shared_tensors):
    body = json.loads((UPSTREAM / "generate_response.json").read_text())
    chunks = [json.loads(line) for line in (UPSTREAM / "generate_stream.jsonl").read_text().splitlines()]
    with pytest.raises(SamplingMaskError) as err:  # the third choice was aborted
        vllm.from_generate_response(body)
    assert err.value.code is ErrorCode.E_SCHEMA and "abort" in str(err.value)
    first, second, aborted = vllm.from_generate_response(body, on_missing="none", vocab_size=96)
    assert aborted is None
    streamed = vllm.from_generate_stream(chunks, vocab_size=96)
    assert streamed == [first, second]  # delta chunks merged by choice index
    merged = vllm.merge_generate_stream(chunks)
    assert [c["finish_reason"] for c in merged] == ["length", "length"]
    assert len(merged[0]["logprobs"]["content"]) == first.num_rows
    for choice, mask in zip(body["choices"], (first, second), strict=False):
        assert vllm.to_generate_choice(mask, choice["index"]) == {
            k: choice[k] for k in ("index", "sampling_mask", "token_ids")
        }
    shared = json.loads((FIXTURES / "generate_response.json").read_text())
    shared_chunks = [json.loads(line) for line in (FIXTURES / "generate_stream.jsonl").read_text().splitlines()]
    assert vllm.from_generate_response(shared) == vllm.from_generate_stream(shared_chunks)
    assert vllm.from_generate_response(shared)[0].row(0).tolist() == shared_tensors["single_slice_token_ids"].tolist()


def test_stream_chunk_rows_must_match_its_tokens():
    chunk = {"choices": [{"index": 0, "token_ids": [3, 4], "sampling_mask": [[3]]}]}
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_generate_stream([chunk])
    assert err.value.code is ErrorCode.E_SHAPE and "chunk[0]" in err.value.field
    gap = {"choices": [{"index": 1, "token_ids": [3], "sampling_mask": [[3]]}]}
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_generate_stream([gap])
    assert err.value.code is ErrorCode.E_SCHEMA


def test_generate_logprobs_listing(outputs):
    body = json.loads((UPSTREAM / "generate_response.json").read_text())
    choice = body["choices"][0]
    with pytest.raises(SamplingMaskError) as err:  # 3 logprobs; ties make some supports wider
        vllm.from_generate_logprobs(choice)
    assert err.value.code is ErrorCode.E_SCHEMA
    mask = vllm.from_generate_logprobs(choice, allow_truncated=True, vocab_size=96)
    exact = vllm.from_generate_choice(choice, vocab_size=96)
    complete = [t for t in range(mask.num_rows) if mask.metadata["truncated_rows"] and len(mask.row(t)) < 3]
    assert complete, "the fixture has complete rows"
    for t in range(mask.num_rows):
        listed, true = set(mask.row(t).tolist()), set(exact.row(t).tolist())
        assert listed <= true and int(mask.sampled_token_ids[t]) in listed
    for t in complete:
        assert set(mask.row(t).tolist()) == set(exact.row(t).tolist())
    shared = json.loads((FIXTURES / "generate_response.json").read_text())["choices"][0]
    rows = vllm.from_generate_logprobs(shared, allow_truncated=True).to_rows()
    assert rows[3] == [926]  # two candidates at -9999.0: filtered, the row is complete
    assert vllm.from_generate_logprobs(shared, allow_truncated=True).metadata["truncated_rows"] == 3


def test_flat_logprobs_tie_widened_rows_are_refused_or_flagged(outputs):
    flat = outputs["flat_logprobs"][0]
    exact = vllm.from_completion_output(outputs["outputs"][0], vocab_size=96)
    widths = exact.row_lengths
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(flat, sampled_token_ids=exact.sampled_token_ids)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == int(np.flatnonzero(widths > 3)[0])
    mask = vllm.from_flat_logprobs(flat, allow_truncated=True)
    assert mask.metadata["truncated_rows"] == int(np.count_nonzero(widths > 3))
    narrow = np.flatnonzero(widths <= 3)
    assert narrow.size and all(set(mask.row(t).tolist()) == set(exact.row(t).tolist()) for t in narrow.tolist())
    # A complete listing round-trips through FlatLogprobs fields.
    complete = exact.segment(0)[int(narrow[0]) : int(narrow[0]) + 1]
    row = vllm.from_flat_logprobs(flat, allow_truncated=True)[int(narrow[0]) : int(narrow[0]) + 1]
    again = vllm.from_flat_logprobs(vllm.to_flat_logprobs(row))
    assert again.same_support(row) and row.same_support(complete) and "truncated" not in again.metadata
    np.testing.assert_allclose(again.support_logprobs, row.support_logprobs)


def test_round_trip_completion_output_and_lists(outputs, tensors):
    for output in outputs["outputs"][:2]:
        mask = vllm.from_completion_output(output, vocab_size=96)
        assert vllm.to_token_ids(mask) == output["sampling_mask"]["token_ids"]
        assert np.array_equal(mask.sampled_token_ids, output["token_ids"])
    assert vllm.from_completion_output(outputs["outputs"][2], on_missing="none") is None
    csr = vllm.from_engine_csr(_lists(tensors), vocab_size=96)
    assert csr.to_rows() == outputs["engine_lists"]["rows"]
    written = vllm.to_engine_csr(csr)
    assert written["token_ids"].dtype == np.int32 and written["offsets"].dtype == np.int64
    assert written["cu_num_generated_tokens"] == tensors["cu_num_generated_tokens"].tolist()
    assert vllm.from_engine_csr(written, vocab_size=96) == csr


def test_round_trip_empty_rows_and_streamed_deltas():
    mask = SamplingMask.from_rows([[4, 9], [], [1, 2, 3, 5, 8], [7], [], [0]], vocab_size=12, cu_seqlens=[0, 3, 3, 6])
    tensors = vllm.to_engine_tensors(mask, width=2, rows_per_request=3)
    assert tensors["num_sampled_tokens"].tolist() == [3, 0, 3]  # the empty segment: all slots inactive
    assert vllm.from_engine_tensors(tensors, tensors["num_sampled_tokens"]) == mask
    assert vllm.from_engine_csr(vllm.to_engine_csr(mask), vocab_size=12) == mask
    one = vllm.to_engine_tensors(mask, width=2)
    assert vllm.from_engine_tensors(one).to_rows() == mask.to_rows()
    sampled = SamplingMask.from_rows(
        [[4, 9], [1, 2, 3, 5, 8], [7], [0], [6, 11]],
        vocab_size=12,
        cu_seqlens=[0, 3, 5],
        sampled_token_ids=[9, 3, 7, 0, 6],
    )
    chunks = [  # delta chunks of 2 tokens, choices interleaved, choice 1 ending a chunk early
        {"choices": [vllm.to_generate_choice(sampled.segment(s)[a : a + 2], index=s)]} for a in (0, 2) for s in (1, 0)
    ]
    assert vllm.from_generate_stream(chunks, vocab_size=12) == [sampled.segment(0), sampled.segment(1)]


def test_with_upstream_vllm_classes(tensors, outputs):
    """Ours -> vLLM's own objects -> ours; skipped without the vllm package (CI)."""
    v1_outputs = pytest.importorskip("vllm.v1.outputs")
    sample_output = pytest.importorskip("vllm.v1.worker.gpu.sample.output")
    protocol = pytest.importorskip("vllm.entrypoints.scale_out.token_in_token_out.protocol")
    torch = pytest.importorskip("torch")
    mask = vllm.from_engine_tensors(tensors, tensors["num_sampled_tokens"])
    lists = v1_outputs.SamplingMaskLists(**vllm.to_engine_csr(mask))
    assert vllm.from_completion_output(
        SimpleNamespace(sampling_mask=lists, token_ids=None), vocab_size=96
    ) == vllm.from_engine_csr(lists, vocab_size=96)
    assert vllm.from_engine_csr(lists.slice_request(1, 1)).to_rows() == [mask.row(3).tolist()]
    written = vllm.to_engine_tensors(mask, width=8, rows_per_request=3)
    upstream = sample_output.SamplingMaskTensors(
        *(torch.from_numpy(written[k]) for k in ("token_ids", "packed_mask", "counts")),
        written["vocab_size"],
        written["rows_per_request"],
    )
    assert vllm.from_engine_csr(upstream.tolists(written["num_sampled_tokens"]), vocab_size=96) == mask
    choice = protocol.GenerateTokensChoice(**vllm.to_generate_choice(mask.segment(0)))
    assert vllm.from_generate_choice(choice) == vllm.from_generate_choice(vllm.to_generate_choice(mask.segment(0)))
    choices = [vllm.from_completion_output(o, vocab_size=96) for o in outputs["outputs"][:2]]
    stream = [
        protocol.GenerateTokensStreamResponse(
            choices=[protocol.GenerateTokensStreamChoice(**vllm.to_generate_choice(m[a : a + 2], index=i))]
        ).model_dump_json()
        for a in range(0, choices[0].num_rows, 2)
        for i, m in enumerate(choices)
    ]
    assert vllm.from_generate_stream([json.loads(c) for c in stream], vocab_size=96) == choices
    logprobs = pytest.importorskip("vllm.logprobs")
    outputs_module = pytest.importorskip("vllm.outputs")
    flat = vllm.from_flat_logprobs(outputs["flat_logprobs"][0], allow_truncated=True)
    upstream_flat = logprobs.FlatLogprobs(**vllm.to_flat_logprobs(flat))
    again = vllm.from_flat_logprobs(upstream_flat, allow_truncated=True)
    assert again.same_support(flat) and np.array_equal(again.sampled_token_ids, flat.sampled_token_ids)
    exact = vllm.from_completion_output(outputs["outputs"][0], vocab_size=96)
    completion = outputs_module.CompletionOutput(
        index=0,
        text="",
        token_ids=exact.sampled_token_ids.tolist(),
        cumulative_logprob=None,
        logprobs=upstream_flat,
        sampling_mask=outputs_module.SamplingMask(token_ids=vllm.to_token_ids(exact)),
    )
    assert vllm.from_completion_output(completion, vocab_size=96) == exact


OUTPUT_KINDS = json.loads(
    (Path(__file__).parent / "fixtures/upstream/vllm-0.32-output-kinds/output_kinds.json").read_text()
)["kinds"]


def test_cumulative_intermediate_outputs_are_no_rows_yet():
    """vLLM 0.32's own OutputProcessor (tests/fixtures/upstream/vllm-0.32-output-kinds/make_output_kinds.py):
    CUMULATIVE outputs carry every token so far but a mask only once finished."""
    steps = OUTPUT_KINDS["CUMULATIVE"]["steps"]
    final = steps[-1]
    for step in steps[:-1]:
        assert step["sampling_mask"] is None and step["token_ids"] and step["finish_reason"] is None
        assert vllm.from_completion_output(step, output_kind="cumulative") is None
        with pytest.raises(SamplingMaskError) as err:
            vllm.from_completion_output(step)
        assert err.value.code is ErrorCode.E_SCHEMA and "CUMULATIVE" in err.value.message
        assert "aborted" not in err.value.message
        assert vllm.from_completion_output(step, on_missing="none") is None
    mask = vllm.from_completion_output(final, output_kind="cumulative")
    assert vllm.to_token_ids(mask) == final["sampling_mask"]  # upstream -> ours -> upstream
    assert mask.sampled_token_ids.tolist() == final["token_ids"]
    # the finished CUMULATIVE output, the FINAL_ONLY output and the merged DELTA outputs agree
    assert OUTPUT_KINDS["FINAL_ONLY"]["steps"] == [final]
    deltas = [vllm.from_completion_output(s, output_kind="delta") for s in OUTPUT_KINDS["DELTA"]["steps"]]
    assert deltas[2].num_rows == 0  # a DELTA step with no new token: zero rows, not "missing"
    assert concat(deltas).to_rows() == mask.to_rows()
    assert sum((vllm.to_token_ids(d) for d in deltas), []) == final["sampling_mask"]


def test_aborted_outputs_per_kind():
    cumulative = OUTPUT_KINDS["CUMULATIVE"]["aborted"][-1]  # an abort keeps the rows so far
    assert cumulative["finish_reason"] == "abort"
    assert vllm.to_token_ids(vllm.from_completion_output(cumulative)) == cumulative["sampling_mask"]
    delta = OUTPUT_KINDS["DELTA"]["aborted"][-1]  # DELTA: the abort itself brings no token and no mask
    assert delta["token_ids"] == [] and delta["sampling_mask"] is None
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_completion_output(delta, output_kind="delta")
    assert err.value.code is ErrorCode.E_SCHEMA and "abort" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_completion_output(delta, output_kind="streaming")
    assert err.value.field == "output_kind"
