"""SkyRL adapter: dense [T, top_k] rank-ordered rows, packed cu_seqlens, base64 envelope."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import skyrl
from sampling_mask.core.limits import DEFAULT_LIMITS

# top_k = 3, rank order (not ascending), -1 trailing; rows 0 and 3 are observation tokens.
DENSE = np.array(
    [[-1, -1, -1], [17, 4, 9], [8, -1, -1], [-1, -1, -1], [5, 2, -1]],
    dtype=np.int32,
)
CU = np.array([0, 3, 5], dtype=np.int32)


def test_dense_round_trip_keeps_rank_order():
    mask = skyrl.from_dense(DENSE, vocab_size=32)
    assert mask.to_rows() == [[], [17, 4, 9], [8], [], [5, 2]]
    assert np.array_equal(skyrl.to_dense(mask, 3), DENSE)


def test_packed_round_trip():
    mask = skyrl.from_packed(DENSE, CU)
    assert mask.num_segments == 2 and mask.segment(1).to_rows() == [[], [5, 2]]
    values, cu = skyrl.to_packed(mask, 3)
    assert cu.dtype == np.int32 and np.array_equal(cu, CU) and np.array_equal(values, DENSE)


def test_envelope_round_trip_and_exact_bytes():
    mask = skyrl.from_dense(DENSE)
    env = skyrl.to_envelope(mask, 3)
    assert env["shape"] == [5, 3] and env["dtype"] == "int32"
    assert base64.b64decode(env["data"]) == DENSE.astype("<i4").tobytes()
    assert skyrl.from_envelope(env) == mask
    as_int64 = {
        "data": base64.b64encode(DENSE.astype("<i8").tobytes()).decode(),
        "shape": [5, 3],
        "dtype": "torch.int64",
    }
    assert skyrl.from_envelope(as_int64, cu_seqlens=CU) == skyrl.from_packed(DENSE, CU)


def test_torch_tensors_are_read():
    torch = pytest.importorskip("torch")
    assert skyrl.from_packed(torch.from_numpy(DENSE.astype(np.int64)), torch.from_numpy(CU)) == skyrl.from_packed(
        DENSE, CU
    )


def test_write_refuses_rows_wider_than_top_k():
    with pytest.raises(SamplingMaskError) as err:
        skyrl.to_dense(skyrl.from_dense(DENSE), 2)
    assert err.value.code is ErrorCode.E_WIDTH and err.value.row == 1


@pytest.mark.parametrize(
    ("envelope", "code", "field"),
    [
        ({"data": "!!!!!!==", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_ENCODING, "data"),
        ({"data": "AAAA", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_BYTES, "data"),
        ({"data": base64.b64encode(b"\0" * 8).decode(), "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_BYTES, "data"),
        ({"data": "AAAAAA==", "shape": [1, 1], "dtype": "float32"}, ErrorCode.E_DTYPE, "dtype"),
        ({"data": "AAAAAA==", "shape": [1], "dtype": "int32"}, ErrorCode.E_SHAPE, "shape"),
        ({"data": "AAAAAA==", "shape": [1, True], "dtype": "int32"}, ErrorCode.E_SHAPE, "shape"),
        ({"data": "AAAAAA==", "shape": [1 << 40, 1], "dtype": "int32"}, ErrorCode.E_LIMIT, "shape"),
        ({"shape": [1, 1], "dtype": "int32"}, ErrorCode.E_SCHEMA, "envelope.data"),
        ({"data": "AAAAAA==\u00e9", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_ENCODING, "data"),
    ],
)
def test_bad_envelopes(envelope, code, field):
    with pytest.raises(SamplingMaskError) as err:
        skyrl.from_envelope(envelope, limits=DEFAULT_LIMITS)
    assert err.value.code is code and err.value.field == field


def test_padding_before_an_id_is_refused():
    bad = DENSE.copy()
    bad[2] = [-1, 8, -1]
    with pytest.raises(SamplingMaskError) as err:
        skyrl.from_dense(bad)
    assert err.value.code is ErrorCode.E_PADDING and err.value.row == 2


def test_skyrl_extractor_and_envelope_round_trip_byte_for_byte():
    """SkyRL PR #2082 @ 9a8327d7806e: support rows from a copy of ``_sample_support_from_flat_logprobs``
    and the envelope from ``pack_ndarray`` (tests/fixtures/upstream/trainers/make_trainers.py)."""
    import json
    from pathlib import Path

    case = json.loads((Path(__file__).parent / "fixtures/upstream/trainers/trainers.json").read_text())["skyrl"]
    support = np.array(case["support"], dtype=np.int32)
    mask = skyrl.from_envelope(case["envelope"])
    assert mask == skyrl.from_dense(support)
    assert mask.to_rows() == [[int(v) for v in row if v >= 0] for row in case["support"]]
    assert skyrl.to_envelope(mask, case["top_k"]) == case["envelope"]  # same keys, order and bytes
    assert np.array_equal(skyrl.to_dense(mask, case["top_k"]), support)


def _stepwise_cases():
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "fixtures/upstream/skyrl/skyrl_stepwise.json").read_text())
    return data, sorted(data["cases"])


STEPWISE, STEPWISE_NAMES = _stepwise_cases()


def _replay(case):
    """The trajectory as SkyRL's multi-turn-template agent loop appends it, through TraceBuilder."""
    from sampling_mask.data.trace import TraceBuilder

    builder = TraceBuilder(vocab_size=STEPWISE["vocab_size"])
    builder.add_prompt(case["prompt_ids"])
    for turn in case["turns"]:
        builder.add_generated(turn["output_ids"], np.asarray(turn["support"], dtype=np.int32))
        if turn["added_eos"]:
            builder.add_observation([STEPWISE["eos_token_id"]])  # appended, not sampled: a padding row
        builder.add_observation(turn["obs_ids"])
    total = len(case["merged"]["prompt_ids"]) + len(case["merged"]["response_ids"])
    return builder.finalize(total, token_ids=case["merged"]["prompt_ids"] + case["merged"]["response_ids"])


@pytest.mark.parametrize("name", STEPWISE_NAMES)
def test_stepwise_steps_equal_skyrl_samples(name):
    """SkyRL @ 3308bd18d (PR #2086 head): each step-wise sample is generation k plus the observation after
    it; the trace's observation-ended steps are those samples (tests/fixtures/upstream/skyrl/)."""
    case = STEPWISE["cases"][name]
    top_k = STEPWISE["top_k"]
    trace = _replay(case)
    upstream = [np.asarray(s["rollout_sample_support"], dtype=np.int32) for s in case["steps"]]
    prompt_lengths = [len(s["prompt_ids"]) for s in case["steps"]]
    assert trace.generation_starts.tolist() == prompt_lengths
    # cumulative segments are whole samples: prompt (empty rows) + response (SkyRL's rows)
    cumulative = trace.step_mask(cumulative=True, step_ends="observation")
    assert np.diff(cumulative.cu_seqlens).tolist() == [
        p + u.shape[0] for p, u in zip(prompt_lengths, upstream, strict=True)
    ]
    for k, (start, rows) in enumerate(zip(prompt_lengths, upstream, strict=True)):
        segment = cumulative.segment(k)
        assert segment.row_lengths[:start].sum() == 0
        assert np.array_equal(segment[start:].to_dense(top_k), rows)
    # the generation-ended steps differ exactly by the observations
    assert trace.step_bounds[1:-1].tolist() == [
        p - len(t["obs_ids"]) - t["added_eos"] for p, t in zip(prompt_lengths[1:], case["turns"][:-1], strict=True)
    ]
    samples = skyrl.step_samples(trace, top_k)
    assert len(samples) == len(upstream) and all(np.array_equal(a, b) for a, b in zip(samples, upstream, strict=True))
    # upstream -> ours -> upstream
    mask = skyrl.from_step_samples(upstream, vocab_size=STEPWISE["vocab_size"])
    assert mask.num_segments == len(upstream)
    assert all(np.array_equal(a, b) for a, b in zip(skyrl.to_step_samples(mask, top_k), upstream, strict=True))
    # SkyRL's prefix-aware merge of the samples is the non-step-wise response of the same trace
    merged = np.asarray(case["merged"]["rollout_sample_support"], dtype=np.int32)
    assert np.array_equal(trace.mask[prompt_lengths[0] :].to_dense(top_k), merged)


def test_stepwise_step_ends_after_the_generation_or_the_observation():
    trace = _replay(STEPWISE["cases"]["three_turns_final_observation"])
    ends = trace.step_mask(cumulative=True).cu_seqlens
    assert np.diff(ends).tolist() == [11, 22, 42]  # steps end with their generation
    assert np.diff(trace.step_mask(cumulative=True, step_ends="observation").cu_seqlens).tolist() == [20, 31, 42]
    with pytest.raises(SamplingMaskError) as err:
        trace.step_mask(step_ends="turn")
    assert err.value.code is ErrorCode.E_SCHEMA


def test_stepwise_samples_name_the_bad_sample():
    good = np.array([[3, -1], [-1, -1]], dtype=np.int32)
    bad = np.array([[-1, 4]], dtype=np.int32)
    with pytest.raises(SamplingMaskError) as err:
        skyrl.from_step_samples([good, {"rollout_sample_support": bad}])
    assert err.value.code is ErrorCode.E_PADDING and err.value.segment == 1
