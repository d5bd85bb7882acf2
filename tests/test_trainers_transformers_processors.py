"""Capture from transformers by processor: the ones that only set scores to -inf (from the config or
the caller, before the recorder or after it) are exact against ``generate()``'s processed scores and
replay; any other processor is refused by its class or config field, beside ``generate()`` and through
``recorder.generate``, unless ``allow_processors_not_replayed=True`` (warned, named in the metadata,
and then the replay is off). Tiny random-weight models (``tests/tiny_models.py``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from capture_checks import assert_sampler_rows, processed_rows, raw_logit_rows, sampling_config  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import masked_logprobs  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # runs a model for seconds

V = 1000
PAD, EOS = 0, 2
PROMPT = 5
HOW = ["beside", "recorder.generate"]


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1).eval()


def _config(**fields):
    return sampling_config(**{"top_p": 0.9, **fields})


def _prompts():
    return torch.randint(3, V, (2, PROMPT), generator=torch.Generator().manual_seed(6))


def _run(model, how: str, recorder, processors: list, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    if how == "beside":
        config = recorder.generation_config
        return model.generate(_prompts(), generation_config=config, logits_processor=[*processors, recorder], **kwargs)
    return recorder.generate(model, _prompts(), logits_processor=processors, **kwargs)


class PerIdBias(transformers.LogitsProcessor):
    """A caller's processor that changes score values: a small bias on every seventh id."""

    def __call__(self, input_ids, scores):
        bias = torch.zeros_like(scores)
        bias[:, ::7] = 0.5
        return scores + bias


class MySuppress(transformers.SuppressTokensLogitsProcessor):
    """A subclass of a processor on the list: it may do anything, so it is not on the list."""


@pytest.mark.parametrize("how", HOW)
def test_a_callers_processor_that_changes_values_is_refused_by_class(model, how: str) -> None:
    """A small per-id bias: the replay was off by 0.147 nats, neither refused nor named."""
    recorder = hf.SamplingMaskRecorder(_config(), model=model)
    with pytest.raises(SamplingMaskError) as err:
        _run(model, how, recorder, [PerIdBias()])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "logits_processor"
    assert "PerIdBias" in err.value.message and "allow_processors_not_replayed" in err.value.message
    recorder = hf.SamplingMaskRecorder(_config(), model=model)
    with pytest.raises(SamplingMaskError) as err:
        _run(model, how, recorder, [MySuppress([5])])
    assert "MySuppress" in err.value.message


@pytest.mark.parametrize("how", HOW)
def test_allowed_knowingly_it_is_warned_named_and_recorded_as_sampled(model, how: str) -> None:
    recorder = hf.SamplingMaskRecorder(_config(), model=model, allow_processors_not_replayed=True)
    with pytest.warns(UserWarning, match="PerIdBias"):
        out = _run(model, how, recorder, [PerIdBias()])
    mask = recorder.mask(out)
    assert mask.metadata["processors_not_replayed"] == "PerIdBias (logits_processor)"
    assert recorder.processors_not_replayed == ["PerIdBias (logits_processor)"]
    rows, logprobs = processed_rows(out, PROMPT)  # the sampler's own rows and log-probs, bias included
    assert mask.to_rows() == rows and np.allclose(mask.sampled_logprobs, logprobs, atol=1e-6)
    replay = masked_logprobs(raw_logit_rows(out, mask), mask).logprobs.numpy()
    off = float(np.abs(replay - logprobs).max())
    print(f"{how}: a per-id bias of 0.5 allowed: replay off by up to {off:.3f} nats")
    assert off > 0.01  # what the metadata warns of


def test_a_processor_after_the_recorder_is_refused(model) -> None:
    """Whatever runs after the recorder changes what is sampled after it recorded: refused, allowed or not."""
    recorder = hf.SamplingMaskRecorder(_config(), model=model, allow_processors_not_replayed=True)
    with pytest.raises(SamplingMaskError) as err:
        model.generate(_prompts(), generation_config=_config(), logits_processor=[recorder, PerIdBias()])
    assert err.value.field == "logits_processor" and "PerIdBias runs after the recorder" in err.value.message


def test_config_processors_that_change_values_are_refused_by_field(model) -> None:
    with pytest.raises(SamplingMaskError) as err:
        hf.SamplingMaskRecorder(_config(repetition_penalty=1.3), model=model)
    assert err.value.field == "generation_config.repetition_penalty"
    recorder = hf.SamplingMaskRecorder(_config(), model=model)
    with pytest.raises(SamplingMaskError) as err:  # given to generate() beside the recorder: seen in its list
        model.generate(_prompts(), generation_config=_config(sequence_bias={(7,): 1.0}), logits_processor=[recorder])
    assert err.value.field == "generation_config.sequence_bias"
    with pytest.warns(UserWarning, match=r"repetition_penalty=1\.3"):
        recorder = hf.SamplingMaskRecorder(
            _config(repetition_penalty=1.3), model=model, allow_processors_not_replayed=True
        )
    out = recorder.generate(model, _prompts())
    assert recorder.mask(out).metadata["processors_not_replayed"] == "repetition_penalty=1.3"


BANNING = {
    "caller": lambda: dict(
        processors=[
            transformers.SuppressTokensLogitsProcessor([5, 6, 7]),
            transformers.NoBadWordsLogitsProcessor([[9], [10]], eos_token_id=EOS),
            transformers.TopKLogitsWarper(40),  # before the temperature: cuts on unscaled scores, to -inf only
        ],
        kwargs=dict(prefix_allowed_tokens_fn=lambda batch, ids: list(range(11, 600))),
        banned={5, 6, 7, 9, 10} | set(range(600, V)),
    ),
    "config": lambda: dict(
        processors=[],
        kwargs=dict(no_repeat_ngram_size=1, suppress_tokens=[11, 12], begin_suppress_tokens=[13], bad_words_ids=[[14]]),
        banned={11, 12, 14},
    ),
}


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("source", list(BANNING))
def test_processors_that_only_ban_ids_replay_exactly(model, how: str, source: str) -> None:
    case = BANNING[source]()
    config = _config(temperature=0.7, **(case["kwargs"] if source == "config" else {}))
    recorder = hf.SamplingMaskRecorder(config, model=model)
    extra = {} if source == "config" else case["kwargs"]
    out = _run(model, how, recorder, case["processors"], **extra)
    mask = recorder.mask(out)
    assert "processors_not_replayed" not in mask.metadata
    assert_sampler_rows(mask, out, PROMPT, [EOS])
    assert not any(case["banned"] & set(row) for row in mask.to_rows())  # they really ran
    assert np.allclose(mask.temperature, 0.7)


def test_forced_and_minimum_length_processors_replay_exactly(model) -> None:
    """min_new_tokens bans the EOS for 3 steps, forced_eos_token_id leaves the EOS alone at the last
    step (a row of one id: log-prob 0)."""
    config = _config(temperature=0.9, eos_token_id=[EOS], min_new_tokens=3, forced_eos_token_id=EOS)
    recorder = hf.SamplingMaskRecorder(config, model=model)
    torch.manual_seed(5)
    out = recorder.generate(model, _prompts())
    mask = recorder.mask(out)
    assert_sampler_rows(mask, out, PROMPT, [EOS])
    starts, rows = mask.cu_seqlens, mask.to_rows()
    assert all(EOS not in rows[int(starts[b]) + t] for b in range(2) for t in range(3))
    full = [b for b in range(2) if starts[b + 1] - starts[b] == 6]  # not ended by a sampled EOS
    assert full and all(rows[int(starts[b]) + 5] == [EOS] for b in full)
    assert np.allclose(mask.sampled_logprobs[[int(starts[b]) + 5 for b in full]], 0.0)
