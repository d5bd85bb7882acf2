"""Capture from transformers' ``generate()``, on tiny random-weight models built
from a config (no downloads): the recorded rows are the support of the processed scores, replay over
them reproduces the sampler's own log-probs, and ``rule="hf"`` applies the defaults generate() uses."""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install '.[transformers]')"
)

from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import audit, masked_logprobs, support_from_logits  # noqa: E402
from sampling_mask.sampler import generation_config as hf_config  # noqa: E402
from sampling_mask.trainers import transformers as hf  # noqa: E402

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

PROMPT = 6
NEW = 10
PAD = 0


def _model(kind: str, vocab: int):
    return tiny_causal_lm(kind, vocab, pad=PAD, bos=1, eos=2).eval()


@pytest.fixture(scope="module", params=[("qwen2", 1000), ("llama", 4096)], ids=["qwen2-V1000", "llama-V4096"])
def model(request):
    return _model(*request.param)


def _prompts(vocab: int):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(10, vocab, (3, PROMPT), generator=g)
    attention = torch.ones_like(ids)
    attention[0, :2] = 0  # left padding
    attention[2, :1] = 0
    ids[attention == 0] = PAD
    return ids, attention


def _generate(model, settings: dict, eos, seed: int = 11, **extra):
    ids, attention = _prompts(model.config.vocab_size)
    config = transformers.GenerationConfig(
        do_sample=True,
        max_new_tokens=NEW,
        pad_token_id=PAD,
        eos_token_id=eos,
        num_return_sequences=2,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
        **settings,
    )
    config = hf_config.resolve_generation_config(config, model=model)
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids, attention_mask=attention.clone(), generation_config=config, **extra)
    return out, config, attention


def _early_eos(model, settings: dict):
    """EOS ids that end sequences 0 and 1 early: the tokens a first run sampled at steps 2 and 4
    (a second run with the same seed samples the same tokens up to there)."""
    out, _, _ = _generate(model, settings, eos=None)
    gen = out.sequences[:, PROMPT:]
    return sorted({int(gen[0, 2]), int(gen[1, 4])})


SETTINGS = {
    "top_k": dict(top_k=20),
    "top_p": dict(top_p=0.9),
    "min_p": dict(min_p=0.05, top_k=0),
    "temperature": dict(temperature=0.7, top_k=0),
    "top_k+top_p+temperature": dict(top_k=20, top_p=0.8, temperature=0.7),
    "top_p+min_p+temperature": dict(top_p=0.95, min_p=0.02, temperature=1.3),
}


def _replay_logits(model, sequences, attention, mask):
    """The trainer's recomputation: one forward over prompt + completion, logits of each row."""
    full_attention = torch.cat([attention.repeat_interleave(2, 0), torch.ones_like(sequences[:, PROMPT:])], 1)
    positions = (full_attention.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=sequences, attention_mask=full_attention, position_ids=positions).logits.float()
    lengths = np.diff(mask.cu_seqlens)
    seq = np.repeat(np.arange(lengths.size), lengths)
    t = np.arange(mask.num_rows) - mask.cu_seqlens[seq]
    return logits[torch.from_numpy(seq), torch.from_numpy(PROMPT - 1 + t)]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_capture_is_the_support_of_the_processed_scores_and_replays_the_sampler(model, name: str) -> None:
    settings = SETTINGS[name]
    eos = _early_eos(model, settings)
    recorder = hf.SamplingMaskRecorder(dict(settings, do_sample=True, eos_token_id=eos, pad_token_id=PAD), model=model)
    out, config, attention = _generate(model, settings, eos, logits_processor=[recorder])
    mask = hf.from_generate_output(out, prompt_length=PROMPT, generation_config=config)

    gen = out.sequences[:, PROMPT:]
    lengths = np.diff(mask.cu_seqlens)
    # one segment per returned sequence, rows up to and including the first EOS, none after it
    assert mask.num_segments == 6 and lengths[0] <= 3 and lengths[1] <= 5
    for b in range(6):
        hits = np.flatnonzero(np.isin(gen[b].numpy(), eos))
        assert lengths[b] == (hits[0] + 1 if hits.size else NEW)
    # 0 rows differ from the finite processed scores
    rows = mask.to_rows()
    differ = 0
    for b in range(6):
        for t in range(int(lengths[b])):
            expected = torch.nonzero(torch.isfinite(out.scores[t][b]))[:, 0].tolist()
            differ += rows[int(mask.cu_seqlens[b]) + t] != expected
    assert differ == 0
    truncates = bool(settings.get("top_k") or settings.get("top_p") or settings.get("min_p"))
    assert bool((mask.row_lengths < model.config.vocab_size).any()) == truncates  # the filters really cut
    assert mask.sampled_token_ids.tolist() == [int(gen[b, t]) for b in range(6) for t in range(int(lengths[b]))]
    assert np.allclose(mask.temperature, settings.get("temperature", 1.0))

    # the recorder (no [steps, N, V] scores) records the same
    recorded = recorder.mask(out)
    assert recorded.to_rows() == rows and np.array_equal(recorded.cu_seqlens, mask.cu_seqlens)
    assert np.allclose(recorded.sampled_logprobs, mask.sampled_logprobs, atol=1e-6)
    assert np.array_equal(recorded.sampled_token_ids, mask.sampled_token_ids)
    # and the mass each row kept, under the temperature-scaled raw logits (output_logits)
    tau = settings.get("temperature", 1.0)
    kept = [
        float(torch.exp(torch.logsumexp(z[torch.isfinite(s)], 0) - torch.logsumexp(z, 0)))
        for b in range(6)
        for t in range(int(lengths[b]))
        for z, s in [(out.logits[t][b] / tau, out.scores[t][b])]
    ]
    assert np.allclose(recorder.kept_mass, kept, atol=1e-5)

    # replay over the captured mask reproduces the sampler's own log-probs (fp32)
    logits = _replay_logits(model, out.sequences, attention, mask)
    replay = masked_logprobs(logits, mask).logprobs.numpy()
    error = float(np.abs(replay - mask.sampled_logprobs).max())
    print(f"{name}: max |replay - sampler| = {error:.2e}")
    assert error <= 1e-5


@pytest.mark.parametrize("name", ["top_p", "temperature", "min_p"])
def test_hf_rule_applies_generates_defaults_from_the_models_config(model, name: str) -> None:
    """``top_k`` unset: generate() fills 50; ``rule="hf"`` with the config does too."""
    settings = {k: v for k, v in SETTINGS[name].items() if k != "top_k"}
    saved = model.generation_config
    model.generation_config = transformers.GenerationConfig(
        do_sample=True, pad_token_id=PAD, eos_token_id=None, **settings
    )
    try:
        ids, attention = _prompts(model.config.vocab_size)
        torch.manual_seed(5)
        out = model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=6,
            output_scores=True,
            output_logits=True,
            return_dict_in_generate=True,
        )
        raw = torch.cat([step for step in out.logits], 0)  # [steps * N, V], step-major
        expected = torch.cat([torch.isfinite(step) for step in out.scores], 0)
        support = support_from_logits(raw, rule="hf", generation_config=model.generation_config)
        got = torch.zeros_like(expected)
        rows = torch.from_numpy(np.repeat(np.arange(support.num_rows), support.row_lengths))
        got[rows, torch.from_numpy(support.ids.astype(np.int64))] = True
        assert int((got != expected).any(dim=1).sum()) == 0
        assert hf_config.sampler_settings(model.generation_config)["top_k"] == hf_config.generation_defaults()["top_k"]
        # without generate()'s defaults the rule keeps more on (nearly) every row
        plain = support_from_logits(raw, rule="hf", **settings)
        assert (plain.row_lengths > support.row_lengths).mean() > 0.5
        # the audit takes the config too and agrees on every row
        report = audit(support, raw, rule="hf", generation_config=model.generation_config)
        assert report.summary()["rows_equal"] == support.num_rows and report.unseen_processors == ()
    finally:
        model.generation_config = saved


def test_processors_the_rule_cannot_see_are_named() -> None:
    logits = torch.randn(4, 50)
    config = transformers.GenerationConfig(do_sample=True, top_p=0.9, repetition_penalty=1.2, min_new_tokens=3)
    with pytest.raises(SamplingMaskError) as err:
        support_from_logits(logits, rule="hf", generation_config=config)
    assert err.value.code is ErrorCode.E_SCHEMA
    assert "repetition_penalty=1.2" in err.value.message and "min_new_tokens=3" in err.value.message
    mask = support_from_logits(logits, rule="hf", top_k=50, top_p=0.9)
    report = audit(mask, logits, rule="hf", generation_config=config)
    assert "repetition_penalty=1.2" in report.summary()["unseen_processors"]
    assert report.summary()["rows_equal"] == 4
    out = {"sequences": torch.tensor([[5, 6, 7]]), "scores": (torch.zeros(1, 10),)}
    resolved = hf_config.resolve_generation_config(config)
    with pytest.raises(SamplingMaskError) as err:  # the capture refuses what replay does not reproduce
        hf.from_generate_output(out, prompt_length=2, generation_config=resolved)
    assert err.value.field == "generation_config.repetition_penalty" and "min_new_tokens" not in err.value.message
    with pytest.warns(UserWarning, match=r"repetition_penalty=1\.2"):  # or records it knowingly, named
        captured = hf.from_generate_output(
            out, prompt_length=2, generation_config=resolved, allow_processors_not_replayed=True
        )
    assert captured.metadata["processors_not_replayed"] == "repetition_penalty=1.2"
    greedy = hf_config.unseen_processors(hf_config.resolve_generation_config(transformers.GenerationConfig()))
    assert any(name.startswith("do_sample=False") for name in greedy)


def test_generation_config_argument_errors() -> None:
    logits = torch.randn(3, 20)
    config = transformers.GenerationConfig(do_sample=True)
    with pytest.raises(SamplingMaskError) as err:
        support_from_logits(logits, rule="vllm", generation_config=config)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "generation_config"
    with pytest.raises(SamplingMaskError) as err:
        support_from_logits(logits, rule="hf", top_p=0.5, generation_config=config)
    assert "top_p" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        hf.SamplingMaskRecorder(transformers.GenerationConfig(do_sample=True, typical_p=0.5))
    assert "typical_p=0.5" in err.value.message


def test_from_generate_output_refuses_bad_input() -> None:
    sequences = torch.tensor([[5, 6, 7, 8]])
    scores = (torch.zeros(1, 10), torch.zeros(1, 10))
    read = functools.partial(hf.from_generate_output, generation_config={"do_sample": True})
    with pytest.raises(SamplingMaskError) as err:
        read({"sequences": sequences}, prompt_length=2)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "scores"
    with pytest.raises(SamplingMaskError) as err:
        read({"sequences": sequences, "scores": scores}, prompt_length=1)
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:
        read({"sequences": sequences, "scores": scores}, prompt_length=9)
    assert err.value.code is ErrorCode.E_RANGE and err.value.field == "prompt_length"
    filtered = (torch.zeros(1, 10), torch.full((1, 10), float("-inf")))
    with pytest.raises(SamplingMaskError) as err:
        read({"sequences": sequences, "scores": filtered}, prompt_length=2)
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.segment == 0 and err.value.row == 1
    with pytest.raises(SamplingMaskError) as err:
        read({"sequences": sequences, "scores": scores}, prompt_length=2, eos_token_id="x")
    assert err.value.code is ErrorCode.E_SCHEMA
    with pytest.raises(SamplingMaskError) as err:  # without the config the decoding is unknown
        hf.from_generate_output({"sequences": sequences, "scores": scores}, prompt_length=2, generation_config=None)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "generation_config"
    # an EOS ends the segment: the rows after it are padding
    mask = read({"sequences": sequences, "scores": scores}, prompt_length=2, eos_token_id=[7, 99])
    assert mask.num_rows == 1 and mask.sampled_token_ids.tolist() == [7]
    assert np.allclose(mask.sampled_logprobs, -np.log(10))


def test_left_padded_replay_needs_generates_attention_mask_and_positions(model) -> None:
    """docs/trainers.md says why the trainer's forward passes generate()'s attention mask and position
    ids: without them a left-padded sequence attends to its pads and its positions start at the
    padding, and its replayed log-probs are off by nats (the unpadded sequences are not)."""
    settings = SETTINGS["top_p"]
    recorder = hf.SamplingMaskRecorder(dict(settings, do_sample=True, eos_token_id=None, pad_token_id=PAD), model=model)
    out, config, attention = _generate(model, settings, None, logits_processor=[recorder])
    mask = recorder.mask(out)
    right = masked_logprobs(_replay_logits(model, out.sequences, attention, mask), mask).logprobs.numpy()
    lengths = np.diff(mask.cu_seqlens)
    seq = np.repeat(np.arange(lengths.size), lengths)
    t = np.arange(mask.num_rows) - mask.cu_seqlens[seq]
    with torch.no_grad():
        plain = model(input_ids=out.sequences).logits.float()[torch.from_numpy(seq), torch.from_numpy(PROMPT - 1 + t)]
    wrong = masked_logprobs(plain, mask).logprobs.numpy()
    error = np.abs(wrong - mask.sampled_logprobs)
    padded = np.isin(seq, [0, 1, 4, 5])  # prompts 0 and 2 (two sequences each) are left-padded
    print(f"without attention_mask / position_ids: padded rows off by up to {error[padded].max():.2f} nats")
    assert np.abs(right - mask.sampled_logprobs).max() <= 1e-5
    assert error[padded].max() > 0.5 and error[~padded].max() <= 1e-5
