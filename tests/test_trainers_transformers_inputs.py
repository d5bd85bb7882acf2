"""``from_generate_output`` and the recorder on malformed or extreme input: every number
equals a float64 recomputation, huge scores stay exact, NaN / +inf scores are refused (a score is
finite, or -inf for a filtered id), and anything malformed is a ``SamplingMaskError`` with a code and
the field named, never a TypeError / RuntimeError / ValueError of torch, numpy or transformers."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.sampler import generation_config as hf_config  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

V = 12
SEQUENCES = torch.tensor([[1, 2, 5, 3, 7], [1, 9, 4, 2, 0]])  # prompt 2, three steps; EOS 2 ends sequence 1 at step 1
PROMPT = 2
EOS = [2]
SAMPLING = {"do_sample": True}  # the config generate() ran with: sampling, nothing else set


def _scores(seed: int = 0, scale: float = 3.0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    steps = []
    for _ in range(3):
        s = torch.randn(2, V, generator=g) * scale
        s[:, 8:] = float("-inf")  # filtered ids
        steps.append(s)
    return tuple(steps)


def _output(**fields):
    out = {"sequences": SEQUENCES, "scores": _scores()}
    out.update(fields)
    return out


def _reference(out: dict) -> tuple[list[list[int]], np.ndarray]:
    """Rows and sampled log-probs recomputed in float64, row by row, from the scores."""
    rows, logprobs = [], []
    for b in range(2):
        for t in range(3):
            y = int(SEQUENCES[b, PROMPT + t])
            s = out["scores"][t][b].double()
            rows.append(torch.nonzero(torch.isfinite(s))[:, 0].tolist())
            logprobs.append(float(torch.log_softmax(s, 0)[y]))
            if y in EOS:
                break
    return rows, np.array(logprobs)


def _raises(code: ErrorCode, field: str, **kwargs) -> SamplingMaskError:
    args = dict(prompt_length=PROMPT, eos_token_id=EOS, generation_config=SAMPLING)
    args.update({k: v for k, v in kwargs.items() if k != "output"})
    with pytest.raises(SamplingMaskError) as err:
        hf.from_generate_output(kwargs.get("output", _output()), **args)
    assert err.value.code is code, err.value
    assert err.value.field == field, err.value
    return err.value


@pytest.mark.parametrize("scale", [3.0, 1e3, 1e30])
def test_every_number_equals_a_float64_recomputation(scale: float) -> None:
    out = _output(scores=_scores(1, scale))
    mask = hf.from_generate_output(
        out, prompt_length=PROMPT, eos_token_id=EOS, temperature=0.7, generation_config=SAMPLING
    )
    rows, logprobs = _reference(out)
    assert mask.to_rows() == rows and mask.cu_seqlens.tolist() == [0, 3, 5]
    assert np.allclose(mask.sampled_logprobs, logprobs, rtol=1e-6, atol=1e-6)
    assert np.allclose(mask.temperature, 0.7)


def test_five_equal_huge_scores_give_log_one_fifth() -> None:
    """Five equal scores of 3e38 give log(1/5): the row maximum is subtracted first (a float32
    log-sum-exp of the raw scores loses log 5 and gives 0.0)."""
    step = torch.full((1, V), float("-inf"))
    step[0, :5] = 3e38
    out = {"sequences": torch.tensor([[1, 3]]), "scores": (step,)}
    mask = hf.from_generate_output(out, prompt_length=1, generation_config=SAMPLING)
    assert mask.to_rows() == [[0, 1, 2, 3, 4]]
    assert math.isclose(float(mask.sampled_logprobs[0]), math.log(1 / 5), rel_tol=1e-6)
    # and the recorder, which gets the same scores during generate()
    recorder = hf.SamplingMaskRecorder({"do_sample": True, "top_k": 0})
    recorder(torch.tensor([[1]]), step)
    recorded = recorder.mask(torch.tensor([[1, 3]]))
    assert recorded.to_rows() == [[0, 1, 2, 3, 4]]
    assert math.isclose(float(recorded.sampled_logprobs[0]), math.log(1 / 5), rel_tol=1e-6)
    assert math.isclose(float(recorder.kept_mass[0]), 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "+inf"])
def test_nan_and_plus_inf_scores_are_refused_not_dropped(bad: float) -> None:
    scores = list(_scores())
    scores[2] = scores[2].clone()
    scores[2][0, 9] = bad  # sequence 0, step 2 (an id that is otherwise filtered)
    error = _raises(ErrorCode.E_RANGE, "scores", output=_output(scores=tuple(scores)))
    assert error.segment == 0 and error.row == 2
    # the same value in a row after the sequence's EOS has no row: nothing of it is read
    scores[2] = _scores()[2].clone()
    scores[2][1, 9] = bad  # sequence 1 ended at step 1
    mask = hf.from_generate_output(
        _output(scores=tuple(scores)), prompt_length=PROMPT, eos_token_id=EOS, generation_config=SAMPLING
    )
    assert mask.num_rows == 5
    # the recorder refuses it while generate() runs
    recorder = hf.SamplingMaskRecorder({"do_sample": True, "top_p": 0.9})
    step = torch.zeros(2, V)
    step[1, 4] = bad
    with pytest.raises(SamplingMaskError) as err:
        recorder(SEQUENCES[:, :PROMPT], step)
    assert err.value.code is ErrorCode.E_RANGE and err.value.segment == 1 and err.value.row == 0


META = None if not hasattr(torch, "empty") else torch.empty(2, V, device="meta")


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ({"scores": (None, None, None)}, ErrorCode.E_SCHEMA, "scores[0]"),
        ({"scores": ([[0.0] * V] * 2,) * 3}, ErrorCode.E_SCHEMA, "scores[0]"),
        ({"scores": "abc"}, ErrorCode.E_SCHEMA, "scores"),
        ({"scores": 5}, ErrorCode.E_SCHEMA, "scores"),
        ({"scores": torch.zeros(3, 2, V)}, ErrorCode.E_SCHEMA, "scores"),
        ({"scores": (torch.empty(2, V, device="meta"),) * 3}, ErrorCode.E_SCHEMA, "scores[0]"),
        ({"scores": (torch.zeros(2, V).to_sparse(),) * 3}, ErrorCode.E_SCHEMA, "scores[0]"),
        ({"scores": (torch.zeros(2, V, dtype=torch.int64),) * 3}, ErrorCode.E_DTYPE, "scores[0]"),
        ({"scores": (torch.zeros(2, V, dtype=torch.bool),) * 3}, ErrorCode.E_DTYPE, "scores[0]"),
        ({"scores": (torch.zeros(2, V, dtype=torch.complex64),) * 3}, ErrorCode.E_DTYPE, "scores[0]"),
        ({"scores": (np.array([["a"] * V] * 2, dtype=object),) * 3}, ErrorCode.E_DTYPE, "scores[0]"),
        ({"scores": (torch.zeros(2, 0),) * 3}, ErrorCode.E_SHAPE, "scores"),
        ({"scores": (torch.zeros(2, V), torch.zeros(2, V + 1), torch.zeros(2, V))}, ErrorCode.E_SHAPE, "scores"),
        ({"scores": (torch.zeros(3, V),) * 3}, ErrorCode.E_SHAPE, "scores"),
        ({"sequences": SEQUENCES.bool()}, ErrorCode.E_DTYPE, "sequences"),
        ({"sequences": SEQUENCES.numpy().astype(bool)}, ErrorCode.E_DTYPE, "sequences"),
        ({"sequences": SEQUENCES.float()}, ErrorCode.E_DTYPE, "sequences"),
        ({"sequences": SEQUENCES.to("meta")}, ErrorCode.E_SCHEMA, "sequences"),
        ({"sequences": SEQUENCES.tolist()}, ErrorCode.E_SCHEMA, "sequences"),
        ({"sequences": None}, ErrorCode.E_SCHEMA, "sequences"),
        ({"sequences": SEQUENCES[0]}, ErrorCode.E_SHAPE, "sequences"),
        ({"sequences": SEQUENCES.numpy().astype(object)}, ErrorCode.E_DTYPE, "sequences"),
    ],
    ids=lambda v: None if isinstance(v, dict) else str(v),
)
def test_malformed_output_fields(fields: dict, code: ErrorCode, field: str) -> None:
    _raises(code, field, output=_output(**fields))


@pytest.mark.parametrize(
    ("kwargs", "code", "field"),
    [
        ({"eos_token_id": 2**70}, ErrorCode.E_RANGE, "eos_token_id"),
        ({"eos_token_id": [2, -1]}, ErrorCode.E_RANGE, "eos_token_id"),
        ({"eos_token_id": True}, ErrorCode.E_SCHEMA, "eos_token_id"),
        ({"eos_token_id": "2"}, ErrorCode.E_SCHEMA, "eos_token_id"),
        ({"eos_token_id": [2, None]}, ErrorCode.E_SCHEMA, "eos_token_id"),
        ({"eos_token_id": torch.tensor([2.0])}, ErrorCode.E_SCHEMA, "eos_token_id"),
        ({"eos_token_id": torch.tensor([2], device="meta")}, ErrorCode.E_SCHEMA, "eos_token_id"),
        ({"temperature": "0.7"}, ErrorCode.E_SCHEMA, "temperature"),
        ({"temperature": True}, ErrorCode.E_SCHEMA, "temperature"),
        ({"temperature": [0.7]}, ErrorCode.E_SCHEMA, "temperature"),
        ({"temperature": 0.0}, ErrorCode.E_RANGE, "temperature"),
        ({"temperature": -1}, ErrorCode.E_RANGE, "temperature"),
        ({"temperature": float("nan")}, ErrorCode.E_RANGE, "temperature"),
        (
            {"generation_config": {"do_sample": True, "temperature": "x"}},
            ErrorCode.E_SCHEMA,
            "generation_config.temperature",
        ),
        (
            {"generation_config": {"do_sample": True, "typical_p": "x"}},
            ErrorCode.E_SCHEMA,
            "generation_config.typical_p",
        ),
        (
            {"generation_config": {"do_sample": True, "eos_token_id": 2**70}, "eos_token_id": None},
            ErrorCode.E_RANGE,
            "eos_token_id",
        ),
        ({"generation_config": object()}, ErrorCode.E_SCHEMA, "generation_config"),
        (
            {"generation_config": {"do_sample": True, "pad_token_id": 1.5}},
            ErrorCode.E_SCHEMA,
            "generation_config.pad_token_id",
        ),
        (
            {"generation_config": {"do_sample": True, "pad_token_id": -1}},
            ErrorCode.E_SCHEMA,
            "generation_config.pad_token_id",
        ),
        ({"generation_config": {"do_sample": False}}, ErrorCode.E_SCHEMA, "generation_config.do_sample"),
        ({"generation_config": {"do_sample": True, "num_beams": 2}}, ErrorCode.E_SCHEMA, "generation_config.num_beams"),
        ({"output": _output(beam_indices=torch.zeros(2, 3))}, ErrorCode.E_SCHEMA, "output.beam_indices"),
        ({"prompt_length": True}, ErrorCode.E_SCHEMA, "prompt_length"),
        ({"prompt_length": 2.0}, ErrorCode.E_SCHEMA, "prompt_length"),
        ({"prompt_length": -1}, ErrorCode.E_RANGE, "prompt_length"),
        ({"output": None}, ErrorCode.E_SCHEMA, "scores"),
        ({"output": 5}, ErrorCode.E_SCHEMA, "scores"),
    ],
    ids=lambda v: None if isinstance(v, dict) else str(v),
)
def test_malformed_arguments(kwargs: dict, code: ErrorCode, field: str) -> None:
    _raises(code, field, **kwargs)


def test_eos_ids_as_tensors_and_beyond_the_vocabulary() -> None:
    """A 1-D tensor of ids is read; an id no generated token can equal (>= V) ends nothing."""
    mask = hf.from_generate_output(
        _output(), prompt_length=PROMPT, eos_token_id=torch.tensor([2, 10**12]), generation_config=SAMPLING
    )
    assert mask.cu_seqlens.tolist() == [0, 3, 5]
    assert hf_config.eos_token_ids(eos_token_id=np.array([2, 3])) == [2, 3]


def test_resolve_refuses_what_transformers_refuses_and_leaves_lengths_unset() -> None:
    with pytest.raises(SamplingMaskError) as err:
        hf_config.resolve_generation_config({"max_new_tokens": -1})
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "generation_config"
    with pytest.raises(SamplingMaskError) as err:
        hf_config.resolve_generation_config("top_p=0.9")
    assert err.value.field == "generation_config"
    config = hf_config.resolve_generation_config({"do_sample": True, "max_new_tokens": 4})
    # generate() fills max_length itself: a set one next to max_new_tokens is a warning on every call
    assert config.max_length is None and config.min_length is None and config.top_k == 50


GARBAGE = [
    None,
    "x",
    b"x",
    1.5,
    True,
    -(2**70),
    [],
    {},
    object(),
    float("nan"),
    [[1, 2], [3]],
    np.array(["a", "b"]),
    np.zeros((2, 2), dtype=np.float16),
    torch.zeros(2, 5, device="meta"),
    torch.zeros(2, 5, dtype=torch.bool),
    torch.zeros(0),
    torch.zeros(2, 5, 1),
]


@pytest.mark.parametrize("name", ["sequences", "scores", "scores[1]", "eos_token_id", "temperature", "prompt_length"])
def test_garbage_in_any_field_is_a_sampling_mask_error(name: str) -> None:
    """Whatever lands in a field, the answer is a mask or a SamplingMaskError naming a field."""
    for value in GARBAGE:
        out, kwargs = _output(), dict(prompt_length=PROMPT, eos_token_id=EOS, generation_config=SAMPLING)
        if name == "scores[1]":
            out["scores"] = (out["scores"][0], value, out["scores"][2])
        elif name in out:
            out[name] = value
        else:
            kwargs[name] = value
        try:
            hf.from_generate_output(out, **kwargs)
        except SamplingMaskError as exc:
            assert exc.field, (name, value, exc)
        recorder = hf.SamplingMaskRecorder({"do_sample": True, "top_k": 3})
        recorder(SEQUENCES[:, :PROMPT], torch.zeros(2, V))
        try:
            recorder.mask(value if name == "sequences" else SEQUENCES[:, :3], eos_token_id=kwargs.get("eos_token_id"))
        except SamplingMaskError as exc:
            assert exc.field, (name, value, exc)
