"""Capture from transformers by decoding: sampling (with a streamer, with ``renormalize_logits``) and
assisted sampling (an assistant model, prompt lookup) are exact against ``generate()``'s processed
scores, and samples what plain ``generate()`` samples; beam search of every kind, greedy decoding and
any other decoding loop are refused by name, by ``from_generate_output``, the recorder beside
``generate()`` and ``recorder.generate``. Tiny random-weight models (``tests/tiny_models.py``)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from capture_checks import assert_sampler_rows, sampling_config  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.sampler import generation_config as hf_config  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # runs a model for seconds

V = 1000
PAD, EOS = 0, 2
PROMPT = 5


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1).eval()


@pytest.fixture(scope="module")
def assistant():
    return tiny_causal_lm("qwen2", V, pad=PAD, eos=EOS, bos=1, seed=1).eval()


_config = sampling_config


def _prompts(n: int = 2):
    return torch.randint(3, V, (n, PROMPT), generator=torch.Generator().manual_seed(4))


def _refused(call, field: str, *words: str) -> SamplingMaskError:
    with pytest.raises(SamplingMaskError) as err:
        call()
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == field, err.value
    assert all(word in err.value.message for word in words), err.value.message
    return err.value


# ---------------------------------------------------------------- refused: beam search, greedy, other loops
def test_beam_search_output_is_refused_by_name(model) -> None:
    """A beam search output (num_beams=3, do_sample=False): 10 of 18 tokens took another beam's row
    when it was read as sampling. Refused from the output's beam fields and from the config."""
    config = _config(do_sample=False, num_beams=3, num_return_sequences=3)
    out = model.generate(_prompts(1), generation_config=config)
    assert out.sequences.shape == (3, PROMPT + 6) and out.beam_indices is not None
    _refused(
        lambda: hf.from_generate_output(out, prompt_length=PROMPT, generation_config=config), "output.beam_indices"
    )
    fields = {"sequences": out.sequences, "scores": out.scores}  # the beam fields dropped: the config still says so
    _refused(
        lambda: hf.from_generate_output(fields, prompt_length=PROMPT, generation_config=config),
        "generation_config.num_beams",
        "beam_search",
    )
    sampled = _config(do_sample=True, num_beams=3)  # beam sampling: still beams
    _refused(
        lambda: hf.from_generate_output(fields, prompt_length=PROMPT, generation_config=sampled),
        "generation_config.num_beams",
        "beam_sample",
    )


def test_beam_search_and_greedy_are_refused_by_the_recorder(model) -> None:
    recorder = hf.SamplingMaskRecorder(_config(top_p=0.9), model=model)
    beams = dict(num_beams=3, do_sample=False, max_new_tokens=3)
    _refused(lambda: model.generate(_prompts(), logits_processor=[recorder], **beams), "decoding", "_beam_search")
    _refused(lambda: recorder.generate(model, _prompts(), **beams), "generation_config", "num_beams=3")
    _refused(lambda: hf.SamplingMaskRecorder(_config(num_beams=3), model=model), "generation_config.num_beams")
    # greedy: _sample with do_sample=False picks the argmax, there is no distribution
    _refused(
        lambda: model.generate(_prompts(), logits_processor=[recorder], do_sample=False, max_new_tokens=3),
        "generation_config.do_sample",
    )
    _refused(lambda: recorder.generate(model, _prompts(), do_sample=False), "generation_config")
    greedy = model.generate(_prompts(), generation_config=_config(do_sample=False))
    _refused(
        lambda: hf.from_generate_output(greedy, prompt_length=PROMPT, generation_config=_config(do_sample=False)),
        "generation_config.do_sample",
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0), "num_beams"),  # group (diverse) beams
        (dict(num_beams=2, force_words_ids=[[5]]), "force_words_ids"),  # constrained beams
        (dict(num_beams=2, do_sample=True), "num_beams"),
        (dict(do_sample=False, top_k=4, penalty_alpha=0.6), "do_sample"),  # contrastive search
        (dict(do_sample=True, dola_layers="high"), "dola_layers"),
        (dict(do_sample=True, use_mtp=True), "use_mtp"),
        (dict(do_sample=True, assistant_early_exit=1), "assistant_early_exit"),
        (dict(do_sample=True, assistant_ensemble_weight=0.5), "assistant_ensemble_weight"),
        (dict(do_sample=True, token_healing=True), "token_healing"),
        (dict(do_sample=True, cache_implementation="paged"), "cache_implementation"),
        (dict(do_sample=True, typical_p=0.9), "typical_p"),
        (dict(do_sample=True, epsilon_cutoff=0.01), "epsilon_cutoff"),
    ],
    ids=lambda v: "-".join(map(str, v)) if isinstance(v, dict) else v,
)
def test_every_other_decoding_is_refused_by_its_field(fields: dict, field: str) -> None:
    out = {"sequences": torch.tensor([[5, 6, 7]]), "scores": (torch.zeros(1, 10),)}
    _refused(
        lambda: hf.from_generate_output(out, prompt_length=2, generation_config=fields), f"generation_config.{field}"
    )
    _refused(lambda: hf.SamplingMaskRecorder(fields), f"generation_config.{field}")


def test_accepted_decodings_have_no_refusal() -> None:
    for fields, assisted in [
        (dict(do_sample=True), False),
        (dict(do_sample=True, top_k=5, top_p=0.9, min_p=0.1, temperature=0.5), False),
        (dict(do_sample=True, prompt_lookup_num_tokens=3), False),
        (dict(do_sample=True), True),
    ]:
        assert hf_config.decoding_refusals(hf_config.resolve_generation_config(fields), assisted=assisted) == []


def test_a_decoding_loop_that_is_not_generates_is_refused_by_name() -> None:
    """A processor list called by anything but generate()'s sampling (a custom loop, custom_generate):
    what it samples from is unknown."""
    recorder = hf.SamplingMaskRecorder({"do_sample": True, "top_k": 3})
    processors = transformers.LogitsProcessorList([recorder])

    def my_decoding_loop():
        return processors(torch.tensor([[1, 2]]), torch.zeros(1, 10))

    _refused(my_decoding_loop, "decoding", "my_decoding_loop")


# ---------------------------------------------------------------- accepted: exact against generate()'s scores
SETTINGS = {"top_p": dict(top_p=0.8), "top_k+temperature": dict(top_k=20, temperature=0.7)}


@pytest.mark.parametrize("kind", ["assistant_model", "prompt_lookup"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_assisted_recorder_generate_samples_what_plain_generate_samples(model, assistant, kind, name) -> None:
    """recorder.generate with assistant_model= (or prompt lookup), top_p or top_k with a temperature, the
    same seed: the tokens plain generate() samples, each row and log-prob generate()'s own."""
    lookup = {"prompt_lookup_num_tokens": 3} if kind == "prompt_lookup" else {}
    extra = {"assistant_model": assistant} if kind == "assistant_model" else {}
    config = _config(max_new_tokens=12, **SETTINGS[name], **lookup)
    prompt = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])  # repeats: prompt lookup finds candidates
    torch.manual_seed(1)
    plain = model.generate(prompt, generation_config=config, **extra)
    recorder = hf.SamplingMaskRecorder(config, model=model)
    torch.manual_seed(1)
    out = recorder.generate(model, prompt, **extra)
    assert torch.equal(out.sequences, plain.sequences)
    mask = recorder.mask(out)
    assert mask.num_rows == 12
    assert_sampler_rows(mask, out, 10, [EOS])


class _Collect(transformers.generation.streamers.BaseStreamer):
    def __init__(self) -> None:
        self.tokens: list[list[int]] = []

    def put(self, value) -> None:
        self.tokens.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.tokens.append([])


@pytest.mark.parametrize("how", ["beside", "recorder.generate"])
def test_a_streamer_changes_nothing(model, how: str) -> None:
    config = _config(top_k=20, temperature=0.8)
    recorder = hf.SamplingMaskRecorder(config, model=model)
    streamer = _Collect()
    torch.manual_seed(2)
    if how == "beside":
        out = model.generate(_prompts(1), generation_config=config, logits_processor=[recorder], streamer=streamer)
    else:
        out = recorder.generate(model, _prompts(1), streamer=streamer)
    streamed = [t for chunk in streamer.tokens[1:] for t in chunk]  # the first chunk is the prompt
    assert streamed == out.sequences[0, PROMPT:].tolist()
    assert_sampler_rows(recorder.mask(out), out, PROMPT, [EOS])


@pytest.mark.parametrize("how", ["beside", "recorder.generate", "from_generate_output"])
def test_renormalized_scores_give_the_same_rows_and_log_probs(model, how: str) -> None:
    """renormalize_logits=True: generate() samples from log_softmax of the warped scores (a shift per row)."""
    config = _config(top_p=0.85, temperature=1.2, renormalize_logits=True, num_return_sequences=2)
    recorder = hf.SamplingMaskRecorder(config, model=model)
    torch.manual_seed(3)
    if how == "recorder.generate":
        out = recorder.generate(model, _prompts())
    else:
        out = model.generate(_prompts(), generation_config=config, logits_processor=[recorder])
    assert torch.allclose(torch.logsumexp(out.scores[0], -1), torch.zeros(4), atol=1e-5)  # normalized scores
    if how == "from_generate_output":
        mask = hf.from_generate_output(out, prompt_length=PROMPT, generation_config=recorder.generation_config)
    else:
        mask = recorder.mask(out)
    assert np.allclose(mask.temperature, 1.2)
    assert_sampler_rows(mask, out, PROMPT, [EOS])
