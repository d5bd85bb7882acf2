"""vLLM adapter: real vLLM 0.32 fixtures (tests/fixtures/vllm-0.32) and hand-written layouts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mask_examples import VLLM_FIXTURES

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
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


def test_compact_buffer_and_bitmask_fallback_match_the_engine(completion, engine):
    mask = vllm.from_compact(
        engine["compact_token_ids"], engine["compact_counts"], engine["bitmask"], vocab_size=completion["vocab_size"]
    )
    assert mask.to_rows() == completion["sampling_mask"]
    written = vllm.to_compact(mask, engine["compact_token_ids"].shape[1], completion["vocab_size"])
    for key in ("compact_token_ids", "compact_counts", "bitmask"):
        assert np.array_equal(written[key], engine[key]), key


def test_engine_csr_requests_round_trip(engine):
    lists = SimpleNamespace(
        token_ids=engine["csr_token_ids"], offsets=engine["csr_offsets"], cu_num_generated_tokens=[0, 10, 10, 24]
    )
    mask = vllm.from_engine_csr(lists, vocab_size=1000)
    assert mask.num_segments == 3 and mask.segment(1).num_rows == 0
    back = vllm.from_engine_csr(vllm.to_engine_csr(mask), vocab_size=1000)
    assert back == mask


def test_http_null_mask_is_an_error_or_none_by_choice(completion):
    response = {
        "choices": [
            {"index": 0, "sampling_mask": completion["sampling_mask"][:3], "token_ids": completion["token_ids"][:3]},
            {"index": 1, "sampling_mask": None, "finish_reason": "abort"},
        ]
    }
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_http_response(response)
    assert err.value.code is ErrorCode.E_SCHEMA and "abort" in str(err.value)
    first, aborted = vllm.from_http_response(response, on_missing="none")
    assert aborted is None
    assert first is not None and vllm.to_http_choice(first) == {
        "sampling_mask": completion["sampling_mask"][:3],
        "token_ids": completion["token_ids"][:3],
    }


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
    mask = vllm.from_flat_logprobs(_processed_flat(engine, k), top_k=k, sampled_token_ids=engine["sampled_token_ids"])
    counts = np.diff(engine["csr_offsets"])
    narrow = np.flatnonzero(counts <= k)
    for t in narrow.tolist():
        expected = engine["csr_token_ids"][engine["csr_offsets"][t] : engine["csr_offsets"][t + 1]]
        assert sorted(mask.row(t).tolist()) == sorted(expected.tolist()), t
    assert np.all(mask.row_lengths[counts > k] == k)  # wider rows are cut to top_k columns
    np.testing.assert_allclose(mask.sampled_logprobs, engine["processed_logprobs_of_sampled"], atol=2e-4)


FLAT = {
    # pos 0: sampled 7 (rank 1) also first among the top-k: the duplicate is fine; 9 was filtered.
    # pos 1: sampled 5 (rank 2), all three candidates kept.
    # pos 2: sampled 4, everything else filtered: a singleton row.
    "start_indices": [0, 4, 8],
    "end_indices": [4, 8, 12],
    "token_ids": [7, 7, 3, 9, 5, 2, 5, 8, 4, 4, 1, 6],
    "logprobs": [-0.1, -0.1, -2.4, float("-inf"), -1.0, -0.6, -1.0, -2.0, 0.0, 0.0, float("-inf"), float("-inf")],
    "ranks": [1, 1, 2, 3, 2, 1, 2, 3, 1, 1, 2, 3],
}


def test_flat_logprobs_hand_written_layout_and_round_trip():
    mask = vllm.from_flat_logprobs(FLAT, vocab_size=16)
    assert mask.to_rows() == [[7, 3], [2, 5, 8], [4]]
    assert mask.sampled_token_ids.tolist() == [7, 5, 4]
    np.testing.assert_allclose(mask.support_logprobs, [-0.1, -2.4, -0.6, -1.0, -2.0, 0.0])
    again = vllm.from_flat_logprobs(vllm.to_flat_logprobs(mask), vocab_size=16)
    assert again == mask


def test_flat_logprobs_top_k_caps_columns():
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(FLAT, top_k=1)  # pos 1: sampled 5 is rank 2, outside one column
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 1
    assert vllm.from_flat_logprobs(FLAT, top_k=2).to_rows() == [[7, 3], [2, 5], [4]]


MISSING = {
    "start_indices": [0, 4, 7],
    "end_indices": [4, 7, 10],
    "token_ids": [11, 2, 3, 5, 1, 1, 2, 6, 1, 2],
    "logprobs": [-3.0, -0.5, -1.0, -2.0, -0.2, -0.2, -1.9, -0.7, float("-inf"), float("-inf")],
    "ranks": [4, 1, 2, 3, 1, 1, 2, 2, 1, 2],
}


def test_missing_sampled_is_an_error_by_default_and_repair_is_counted():
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_flat_logprobs(MISSING)
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 0 and err.value.value == 11
    mask, repaired = vllm.from_flat_logprobs_repairing(MISSING)
    assert repaired == 2
    assert mask.to_rows() == [[2, 3, 11], [1, 2], [6]]
    assert mask.support_logprobs.tolist()[2] == pytest.approx(-3.0)  # the sampled token's own logprob
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


def test_bad_engine_buffers(engine):
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_compact(engine["compact_token_ids"], engine["compact_counts"], vocab_size=1000)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 6  # the untruncated row needs the bitmask
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_compact(engine["compact_token_ids"], engine["compact_counts"], engine["bitmask"][:3], vocab_size=1000)
    assert err.value.code is ErrorCode.E_SHAPE
    stray = engine["compact_token_ids"].copy()
    stray[0, 20] = 5
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_compact(stray, engine["compact_counts"], engine["bitmask"], vocab_size=1000)
    assert err.value.code is ErrorCode.E_PADDING and err.value.row == 0
    counts = engine["compact_counts"].copy()
    counts[6] = 999
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_compact(engine["compact_token_ids"], counts, engine["bitmask"], vocab_size=1000)
    assert err.value.code is ErrorCode.E_OFFSETS and err.value.row == 6
    with pytest.raises(SamplingMaskError) as err:
        vllm.from_engine_csr({"token_ids": [1, 2], "offsets": [0, 3]})
    assert err.value.code is ErrorCode.E_OFFSETS


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
