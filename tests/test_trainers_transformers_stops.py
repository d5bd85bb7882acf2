"""Capture from transformers when a stopping criterion ends one sequence early: ``generate()`` then
writes its pad id in place of that sequence's tokens, and those tokens get no row. The recorder reads
where ``generate()`` stopped each sequence (exact, whatever the pad id); ``from_generate_output`` reads
it from the pad tokens, exact where the pad id was filtered out and refused where the sampler could
have drawn it. Without an EOS id ``generate()`` writes nothing and keeps sampling: every token has its
row. Tiny random-weight models (``tests/tiny_models.py``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from capture_checks import assert_sampler_rows, sampling_config  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # runs a model for seconds

V = 1000
PAD, EOS = 0, 2
PROMPT, NEW, STOP = 5, 8, 2


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1).eval()


class StopFirstSequence(transformers.StoppingCriteria):
    """Ends sequence 0 once it has ``after`` new tokens; the others run on."""

    def __init__(self, after: int) -> None:
        self.after = after

    def __call__(self, input_ids, scores, **kwargs):
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        done[0] = input_ids.shape[1] - PROMPT >= self.after
        return done


def _config(**fields):
    return sampling_config(**{"max_new_tokens": NEW, "eos_token_id": [EOS], **fields})


def _generate(model, config, how: str):
    recorder = hf.SamplingMaskRecorder(config, model=model)
    prompts = torch.randint(3, V, (3, PROMPT), generator=torch.Generator().manual_seed(1))
    stop = [StopFirstSequence(STOP)]
    torch.manual_seed(0)
    if how == "beside":
        out = model.generate(prompts, generation_config=config, logits_processor=[recorder], stopping_criteria=stop)
    else:
        out = recorder.generate(model, prompts, stopping_criteria=stop)
    return recorder, out


SETTINGS = {"temperature": dict(temperature=0.7, top_k=0), "top_k": dict(top_k=20)}


@pytest.mark.parametrize("how", ["beside", "recorder.generate"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_recorder_gives_no_row_after_a_stop(model, name: str, how: str) -> None:
    """A per-sequence criterion stops sequence 0 after 2 of 8 steps: it had 8 rows, the last 6 pad
    tokens never sampled."""
    recorder, out = _generate(model, _config(**SETTINGS[name]), how)
    assert out.sequences[0, PROMPT + STOP :].tolist() == [PAD] * (NEW - STOP)  # generate() wrote them
    mask = recorder.mask(out)
    assert_sampler_rows(mask, out, PROMPT, [EOS], {0: STOP})
    assert mask.cu_seqlens[1] == STOP


def test_from_generate_output_reads_the_stop_from_a_filtered_pad(model) -> None:
    """The pad id is suppressed (filtered at every step): its pad tokens can only be generate()'s."""
    config = _config(top_k=20, suppress_tokens=[PAD])
    _, out = _generate(model, config, "beside")
    assert bool(torch.isneginf(out.scores[STOP][0, PAD]))
    mask = hf.from_generate_output(out, prompt_length=PROMPT, generation_config=config)
    assert_sampler_rows(mask, out, PROMPT, [EOS], {0: STOP})


def test_from_generate_output_refuses_a_pad_it_cannot_tell_from_a_sample(model) -> None:
    """Temperature only: the pad id has a finite score at step 2, so the sampler could have drawn the
    pad tokens: refused by name (the recorder, which sees the stop, is exact on the same run)."""
    config = _config(**SETTINGS["temperature"])
    _, out = _generate(model, config, "beside")
    assert bool(torch.isfinite(out.scores[STOP][0, PAD]))
    with pytest.raises(SamplingMaskError) as err:
        hf.from_generate_output(out, prompt_length=PROMPT, generation_config=config)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "sequences"
    assert err.value.segment == 0 and err.value.row == STOP and "SamplingMaskRecorder" in err.value.message


@pytest.mark.parametrize("how", ["beside", "recorder.generate"])
def test_a_pad_that_is_the_eos_gets_no_row_after_a_stop(model, how: str) -> None:
    """pad_token_id = EOS: the written pad tokens look like a sampled EOS; the recorder knows."""
    recorder, out = _generate(model, _config(temperature=0.7, top_k=0, pad_token_id=EOS), how)
    assert out.sequences[0, PROMPT + STOP :].tolist() == [EOS] * (NEW - STOP)
    assert_sampler_rows(recorder.mask(out), out, PROMPT, [EOS], {0: STOP})


def test_without_an_eos_a_stopped_sequence_keeps_sampling_and_every_token_has_its_row() -> None:
    """No EOS id (none in the model's config either): _sample writes nothing after a stop
    (has_eos_stopping_criteria is False), so sequence 0's tokens after its stop were sampled like any
    other; both readers give every one its row."""
    model = tiny_causal_lm("qwen2", V, pad=PAD, eos=None, bos=1).eval()
    config = _config(eos_token_id=None, top_k=20)
    recorder, out = _generate(model, config, "recorder.generate")
    assert out.sequences[0, PROMPT + STOP :].ne(PAD).any()  # sampled, not written
    assert_sampler_rows(recorder.mask(out), out, PROMPT)
    assert_sampler_rows(hf.from_generate_output(out, prompt_length=PROMPT, generation_config=config), out, PROMPT)
