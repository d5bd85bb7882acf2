"""``SamplingMaskRecorder`` across ``generate()`` calls: a reused recorder never returns
another call's tokens as sampled rows, assisted / speculative / prompt-lookup generation gets a row
per generated token equal to what the target model's warpers kept, and ``recorder.generate`` (the
recorder as ``generate()``'s warper stage, the warpers run once) samples exactly what ``generate()``
samples. Tiny random-weight models built from configs (``tests/tiny_models.py``)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from capture_checks import assert_sampler_rows  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.sampler import generation_config as hf_config  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # runs a model for seconds

V = 1000
PAD, EOS = 0, 2


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1).eval()


@pytest.fixture(scope="module")
def assistant():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1, seed=1).eval()


def _config(**fields):
    base = dict(do_sample=True, pad_token_id=PAD, eos_token_id=None, output_scores=True, return_dict_in_generate=True)
    return transformers.GenerationConfig(**{**base, **fields})


def _prompts(n: int, length: int, seed: int):
    return torch.randint(3, V, (n, length), generator=torch.Generator().manual_seed(seed))


def test_reuse_after_mask_records_the_new_call_only(model) -> None:
    """Prompt 3, 3 steps, then a prompt of 6 (= 3 + 3): the second call is a recording of its own (3
    rows), never a continuation of the first (6 rows, 3 of them prompt tokens). No truncation, so
    every id is in a row."""
    gen = _config(temperature=0.7, top_k=0, max_new_tokens=3)
    recorder = hf.SamplingMaskRecorder(gen, model=model)
    torch.manual_seed(0)
    first = model.generate(_prompts(1, 3, 1), generation_config=gen, logits_processor=[recorder])
    assert_sampler_rows(recorder.mask(first), first, 3)
    second = model.generate(_prompts(1, 6, 2), generation_config=gen, logits_processor=[recorder])
    mask = recorder.mask(second)
    assert mask.num_rows == 3 and mask.sampled_token_ids.tolist() == second.sequences[0, 6:].tolist()
    assert_sampler_rows(mask, second, 6)
    # the first call's sequences are not this recording's
    with pytest.raises(SamplingMaskError) as err:
        recorder.mask(first)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "sequences" and err.value.segment == 0


def test_a_second_generate_before_mask_is_refused_by_name(model) -> None:
    gen = _config(temperature=0.7, top_k=0, max_new_tokens=3)
    recorder = hf.SamplingMaskRecorder(gen, model=model)
    model.generate(_prompts(1, 3, 1), generation_config=gen, logits_processor=[recorder])
    with pytest.raises(SamplingMaskError) as err:
        model.generate(_prompts(1, 6, 2), generation_config=gen, logits_processor=[recorder])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "recorder"
    assert "second generate() before mask() or reset()" in err.value.message
    recorder.reset()
    out = model.generate(_prompts(1, 6, 2), generation_config=gen, logits_processor=[recorder])
    assert_sampler_rows(recorder.mask(out), out, 6)
    # recorder.generate starts a new recording at every call: nothing to read in between
    first = recorder.generate(model, _prompts(2, 4, 3))
    second = recorder.generate(model, _prompts(2, 4, 4))
    assert_sampler_rows(recorder.mask(second), second, 4)
    with pytest.raises(SamplingMaskError) as err:
        recorder.mask(first)
    assert err.value.code is ErrorCode.E_SCHEMA and "prompt position" in err.value.message


def test_the_same_prompts_generated_again_are_a_new_recording(model) -> None:
    """Generating again from the prompts the recording started from rescored every step: exact."""
    gen = _config(top_p=0.9, max_new_tokens=4)
    recorder = hf.SamplingMaskRecorder(gen, model=model)
    prompts = _prompts(2, 5, 5)
    model.generate(prompts, generation_config=gen, logits_processor=[recorder])
    out = model.generate(prompts, generation_config=gen, logits_processor=[recorder])
    assert_sampler_rows(recorder.mask(out), out, 5)


def test_mask_names_where_sequences_leave_the_recording(model) -> None:
    gen = _config(top_k=20, max_new_tokens=4)
    recorder = hf.SamplingMaskRecorder(gen, model=model)
    out = recorder.generate(model, _prompts(2, 5, 6))
    changed = out.sequences.clone()
    changed[1, 5 + 1] = (changed[1, 5 + 1] + 1) % V  # a generated token a later step saw differently
    with pytest.raises(SamplingMaskError) as err:
        recorder.mask(changed)
    assert err.value.segment == 1 and "generated token 1" in err.value.message
    changed = out.sequences.clone()
    changed[0, 2] += 1
    with pytest.raises(SamplingMaskError) as err:
        recorder.mask(changed)
    assert err.value.segment == 0 and "prompt position 2" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        recorder.mask(out.sequences[:1])
    assert err.value.code is ErrorCode.E_SHAPE


def test_calls_that_continue_nothing_are_refused() -> None:
    """An assistant with its own tokenizer (``assistant_tokenizer=``) scores other token ids than the
    target model's: its calls do not continue the recording, and the recorder says so."""
    recorder = hf.SamplingMaskRecorder({"do_sample": True, "top_k": 3})
    scores = torch.zeros(2, 10)
    recorder(torch.tensor([[1, 2], [3, 4]]), scores)
    recorder(torch.tensor([[1, 2, 5], [3, 4, 6]]), scores)
    for ids in (torch.tensor([[1, 9, 5], [3, 4, 6]]), torch.tensor([[1, 2, 5]]), torch.tensor([[1, 2, 5, 6, 7]] * 2)):
        with pytest.raises(SamplingMaskError) as err:
            recorder(ids, scores)
        assert err.value.field == "recorder" and "assistant_tokenizer" in err.value.message


@pytest.mark.parametrize("how", ["processor", "recorder.generate"])
@pytest.mark.parametrize("kind", ["assistant_model", "prompt_lookup"])
def test_assisted_generation_gets_a_row_per_token_equal_to_the_target_warpers(
    model, assistant, kind, how, monkeypatch
) -> None:
    """Assisted generation scores and rejects candidates (more target calls than tokens): each of the
    12 generated tokens has its row, never one row for the whole call, and the tokens are those plain
    generate() samples from the same seed."""
    lookup = {"prompt_lookup_num_tokens": 3} if kind == "prompt_lookup" else {}
    gen = _config(top_k=20, top_p=0.9, temperature=0.8, max_new_tokens=12, **lookup)
    recorder = hf.SamplingMaskRecorder(gen, model=model)
    extra = {"assistant_model": assistant} if kind == "assistant_model" else {}
    prompt = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])  # repeats: prompt lookup finds candidates
    torch.manual_seed(1)
    plain = model.generate(prompt, generation_config=gen, **extra)
    calls = []  # the target model's steps the recorder saw
    position = hf.SamplingMaskRecorder._position
    monkeypatch.setattr(hf.SamplingMaskRecorder, "_position", lambda *a: calls.append(1) or position(*a))
    torch.manual_seed(1)
    if how == "processor":
        out = model.generate(prompt, generation_config=gen, logits_processor=[recorder], **extra)
    else:
        out = recorder.generate(model, prompt, **extra)
    steps = out.sequences.shape[1] - 10
    assert steps == 12 and len(calls) > steps  # candidate positions were scored and some thrown away
    assert torch.equal(out.sequences, plain.sequences)
    mask = recorder.mask(out)
    assert_sampler_rows(mask, out, 10)
    expected = hf.from_generate_output(out, prompt_length=10, generation_config=recorder.generation_config)
    assert mask.to_rows() == expected.to_rows()


SETTINGS = {
    "top_k": dict(top_k=20),
    "top_p+temperature": dict(top_p=0.8, temperature=0.7),
    "min_p": dict(min_p=0.05, top_k=0),
    "top_k+top_p+min_p+temperature": dict(top_k=30, top_p=0.9, min_p=0.02, temperature=1.3),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_recorder_generate_samples_what_generate_samples(model, name: str) -> None:
    """The recorder as generate()'s warper stage: the same tokens from the same seed, the same
    processed scores, the same recording as the recorder beside generate()'s own warpers."""
    gen = _config(max_new_tokens=6, eos_token_id=[EOS, 7], **SETTINGS[name])
    prompts, attention = _prompts(3, 6, 7), torch.ones(3, 6, dtype=torch.long)
    attention[0, :2] = 0
    prompts[attention == 0] = PAD
    beside = hf.SamplingMaskRecorder(gen, model=model)
    torch.manual_seed(3)
    plain = model.generate(prompts, attention_mask=attention, generation_config=gen, logits_processor=[beside])
    stage = hf.SamplingMaskRecorder(gen, model=model)
    torch.manual_seed(3)
    staged = stage.generate(model, prompts, attention_mask=attention)
    assert torch.equal(plain.sequences, staged.sequences)
    for a, b in zip(plain.scores, staged.scores, strict=True):
        assert torch.equal(torch.isfinite(a), torch.isfinite(b))
        assert torch.allclose(a[torch.isfinite(a)], b[torch.isfinite(b)], rtol=0, atol=1e-6)
    ours, theirs = beside.mask(plain), stage.mask(staged)
    assert ours.to_rows() == theirs.to_rows()
    assert np.allclose(ours.sampled_logprobs, theirs.sampled_logprobs, atol=1e-6)
    assert np.allclose(beside.kept_mass, stage.kept_mass, atol=1e-6)
    expected = hf.from_generate_output(staged, prompt_length=6, generation_config=stage.generation_config)
    assert theirs.to_rows() == expected.to_rows() and np.array_equal(theirs.cu_seqlens, expected.cu_seqlens)
    assert np.allclose(theirs.sampled_logprobs, expected.sampled_logprobs, atol=1e-6)


def test_recorder_generate_refuses_other_sampling_settings(model) -> None:
    recorder = hf.SamplingMaskRecorder(_config(top_p=0.9, max_new_tokens=2), model=model)
    prompts = _prompts(1, 4, 8)
    with pytest.raises(SamplingMaskError) as err:
        recorder.generate(model, prompts, top_p=0.5)
    assert err.value.field == "generation_config" and "top_p=0.5" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        recorder.generate(model, prompts, generation_config=_config(temperature=0.5))
    assert "temperature=0.5" in err.value.message
    # other generation fields are merged as generate() merges them, the model's arguments pass through
    out = recorder.generate(
        model, prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=3, eos_token_id=None
    )
    assert out.sequences.shape == (1, 7) and recorder.mask(out).num_rows == 3
    # a plain generate() afterwards: the recorder is beside generate()'s warpers again, applies none
    out = model.generate(prompts, generation_config=recorder.generation_config, logits_processor=[recorder])
    assert_sampler_rows(recorder.mask(out), out, 4)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_generate_with_a_resolved_config_warns_nothing(model, recwarn) -> None:
    """A config from ``resolve_generation_config`` leaves ``max_length`` unset next to
    ``max_new_tokens``, and ``recorder.generate`` takes generation arguments beside its own config:
    neither ``generate()`` call logs or warns anything."""
    records = _Records()
    logger = logging.getLogger("transformers")
    logger.addHandler(records)
    try:
        gen = hf_config.resolve_generation_config(_config(top_p=0.9, max_new_tokens=3), model=model)
        recorder = hf.SamplingMaskRecorder(gen, model=model)
        out = model.generate(_prompts(1, 4, 9), generation_config=gen, logits_processor=[recorder])
        recorder.mask(out)
        out = recorder.generate(model, _prompts(1, 4, 9), max_new_tokens=2, output_logits=True)
        recorder.mask(out)
    finally:
        logger.removeHandler(records)
    assert records.messages == [] and len(recwarn) == 0, (records.messages, [str(w.message) for w in recwarn])
