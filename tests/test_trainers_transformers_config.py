"""Capture from transformers with the configuration ``generate()`` really runs with: the model's own
``generation_config`` included. A recorder built without ``model=`` records what ``generate()``
samples (it reads ``generate()``'s resolved config and processors), ``recorder.generate(model)``
resolves its config with that model and samples what ``model.generate`` samples, and
``from_generate_output(model=...)`` resolves as ``generate()`` does. Tiny random-weight models
(``tests/tiny_models.py``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from capture_checks import assert_sampler_rows  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # runs a model for seconds

V = 1000
PAD, EOS = 0, 2
PROMPT = 5
OUTPUTS = dict(output_scores=True, output_logits=True, return_dict_in_generate=True)


@pytest.fixture
def model():
    """The model's generation_config samples with top_k=5 at temperature 0.5."""
    model = tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1).eval()
    model.generation_config = transformers.GenerationConfig(
        do_sample=True, top_k=5, temperature=0.5, pad_token_id=PAD, eos_token_id=EOS
    )
    return model


def _prompts():
    return torch.randint(3, V, (3, PROMPT), generator=torch.Generator().manual_seed(8))


def _exact(mask, out) -> None:
    """Rows up to and including each sequence's first EOS, each generate()'s own, and they replay."""
    assert_sampler_rows(mask, out, PROMPT, [EOS])


def test_a_recorder_without_model_records_what_generate_samples(model) -> None:
    """model.generate(..., logits_processor=[rec]) with a recorder built without model=: it recorded
    rows of 48 ids where generate() sampled from 5, at temperature 1.0 instead of 0.5."""
    recorder = hf.SamplingMaskRecorder()
    torch.manual_seed(1)
    out = model.generate(_prompts(), max_new_tokens=6, logits_processor=[recorder], **OUTPUTS)
    mask = recorder.mask(out)
    assert mask.row_lengths.max() == 5 and np.allclose(mask.temperature, 0.5)
    _exact(mask, out)


def test_recorder_generate_without_model_samples_what_model_generate_samples(model) -> None:
    torch.manual_seed(2)
    plain = model.generate(_prompts(), max_new_tokens=6, **OUTPUTS)
    recorder = hf.SamplingMaskRecorder()
    torch.manual_seed(2)
    out = recorder.generate(model, _prompts(), max_new_tokens=6, **OUTPUTS)
    assert torch.equal(out.sequences, plain.sequences)
    assert recorder.generation_config.top_k == 5 and recorder.temperature == 0.5
    mask = recorder.mask(out)
    assert mask.row_lengths.max() == 5 and np.allclose(mask.temperature, 0.5)
    _exact(mask, out)
    # a recorder built with model= has the same config
    assert hf.SamplingMaskRecorder(model=model).generation_config.to_dict() == recorder.generation_config.to_dict()


def test_from_generate_output_resolves_with_the_model(model) -> None:
    torch.manual_seed(3)
    out = model.generate(_prompts(), max_new_tokens=6, **OUTPUTS)
    mask = hf.from_generate_output(out, prompt_length=PROMPT, generation_config={"max_new_tokens": 6}, model=model)
    assert mask.row_lengths.max() == 5 and np.allclose(mask.temperature, 0.5)
    _exact(mask, out)
    # the model's config decides the decoding too: greedy there is refused
    model.generation_config.do_sample = False
    with pytest.raises(SamplingMaskError) as err:
        hf.from_generate_output(out, prompt_length=PROMPT, generation_config={}, model=model)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "generation_config.do_sample"


def test_a_recorder_without_model_or_do_sample_is_checked_when_the_model_is_known(model) -> None:
    """do_sample may come from the model's config: not refused at construction, refused where the
    model (or the direct call's own config) says greedy."""
    recorder = hf.SamplingMaskRecorder({"top_k": 3})
    with pytest.raises(SamplingMaskError) as err:  # called directly: its own config is greedy
        recorder(torch.tensor([[1, 2]]), torch.zeros(1, 10))
    assert err.value.field == "generation_config.do_sample"
    model.generation_config.do_sample = False
    with pytest.raises(SamplingMaskError) as err:
        recorder.generate(model, _prompts(), max_new_tokens=2)
    assert err.value.field == "generation_config.do_sample"
