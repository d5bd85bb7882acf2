"""One GRPO step of TRL 1.16 on two processes, as ``accelerate launch`` runs it (``test_trl_distributed.py``).

    accelerate launch --multi_gpu --num_processes 2 ... trl_distributed.py OUT_DIR             # DDP on CPU
    accelerate launch --use_deepspeed --deepspeed_config_file Z3.json ... trl_distributed.py OUT_DIR
    accelerate launch --use_fsdp --fsdp_version 2 ... trl_distributed.py OUT_DIR --cuda         # a GPU

``ReplayGRPOTrainer(replay_diagnostics=True)`` trains the engine suite's tiny random Qwen2
(``helpers.tiny_qwen2``: V = 512 unless ``--vocab``, d = 64, fp32, untied head, the same weights on
every rank) with its word-level tokenizer and transformers generation at ``top_k=20, top_p=0.8,
temperature=0.7``: 4 completions per process, 2 prompts per step, one step. Without ``--cuda`` the
trainer runs on the CPU (``use_cpu=True``: accelerate's ``MULTI_CPU`` on gloo under torchrun;
DeepSpeed picks its CPU accelerator itself).

Each rank writes ``OUT_DIR/rank<r>.json``: how accelerate ran it (``distributed_type``, the ZeRO stage,
the class of the wrapped model), ``replay_log`` (its first entry: the step-0 mean of
``exp(trainer logp - sampler logp)`` with replay and over the full vocabulary, as plain ``GRPOTrainer``
scores), TRL's ``log_history`` (``grad_norm``), and the output head before and after the step
(gathered under ZeRO-3): its largest change and a checksum of the new weight, and its shape outside
its forward (shape ``[0]`` when ZeRO-3 partitioned it; a ``DTensor`` under FSDP2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from helpers import tiny_qwen2, word_tokenizer


@contextlib.contextmanager
def _whole(params: list[Any]) -> Any:
    """The parameters whole inside the block (gathered under ZeRO-3)."""
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if not is_deepspeed_zero3_enabled():
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params):
        yield


def main(out_dir: Path, *, cuda: bool = False, vocab: int = 512) -> None:
    warnings.filterwarnings("ignore", message=r".*checkpointing.* is deprecated", category=FutureWarning)
    import datasets
    import trl

    from sampling_mask.trainers.trl import ReplayGRPOTrainer

    words = [f"w{i}" for i in range(3, vocab)]
    tokenizer = word_tokenizer(vocab)
    rng = np.random.default_rng(1)
    prompts = [" ".join(rng.choice(words, n)) for n in (3, 5, 6, 4)]
    config = trl.GRPOConfig(
        output_dir=str(out_dir / "trainer"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        seed=3,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        use_cpu=not cuda,  # accelerate's MULTI_CPU (gloo) under torchrun
        top_k=20,
        top_p=0.8,
        temperature=0.7,
    )
    model = tiny_qwen2(vocab)  # the same weights on every rank
    head_before = model.lm_head.weight.detach().clone()
    trainer = ReplayGRPOTrainer(
        model=model,
        reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
        args=config,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts * 2}),
        processing_class=tokenizer,
        replay_diagnostics=True,
    )
    trainer.train()
    head = trainer.accelerator.unwrap_model(trainer.model_wrapped).get_output_embeddings()
    outside = {"shape": list(head.weight.shape), "type": type(head.weight).__name__}
    with _whole([head.weight]):
        head_after = head.weight.detach().clone()
    if hasattr(head_after, "full_tensor"):  # FSDP2: the head outside its forward is this rank's shard
        head_after = head_after.full_tensor()
    head_after = head_after.cpu()
    state = trainer.accelerator.state
    deepspeed_plugin = getattr(state, "deepspeed_plugin", None)
    rank = trainer.accelerator.process_index
    result = {
        "rank": rank,
        "world_size": trainer.accelerator.num_processes,
        "distributed_type": str(state.distributed_type),
        "zero_stage": getattr(deepspeed_plugin, "zero_stage", None),
        "wrapped": type(trainer.model_wrapped).__name__,
        "replay_enabled": trainer.replay_enabled,
        "replay_log": trainer.replay_log,
        "log_history": trainer.state.log_history,
        "head_outside_forward": outside,
        "head_max_change": float((head_after - head_before).abs().max()),
        "head_checksum": float(head_after.double().sum()),
    }
    (out_dir / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--cuda", action="store_true", help="train on the GPU (accelerate's device)")
    parser.add_argument("--vocab", type=int, default=512)
    options = parser.parse_args()
    main(options.out_dir, cuda=options.cuda, vocab=options.vocab)
