"""Replay's step overhead inside TRL: ``ReplayGRPOTrainer`` against ``GRPOTrainer``.

``python benchmarks/bench_trl_step.py [--vocab 2000] [--rounds 15] [--threads 1] [--top-k 20] [--top-p 0.8]
[--processes 1,2]``

Both trainers (TRL 1.16.0, transformers generation, CPU, fp32) train the same tiny random Qwen2
(hidden 64, 2 layers) on the same prompts with the same ``GRPOConfig``: 8 completions of up to 32
tokens per step and process, ``top_k=20, top_p=0.8, temperature=0.7``. Steps alternate (plain, replay,
plain, replay, ...: each round is one ``train()`` of one step per trainer; the first round is a warm-up
and not counted), so load on a shared machine falls on both alike. A step is timed from
``on_step_begin`` to ``on_step_end`` (generation, scoring, loss, backward, optimizer); the generation
batch (``_generate_and_score_completions``: ``generate()`` plus the no-grad scoring) is timed on its
own. Medians over the counted steps; the ratios are replay / plain, measured in this one run.

``--processes 1,2`` measures each count in turn: 1 in this process, N > 1 as ``accelerate launch
--multi_gpu --num_processes N`` of this script on 127.0.0.1 (on a machine without GPUs accelerate runs
it as ``MULTI_CPU``: DDP on gloo, ``--threads`` torch threads per process), the times of rank 0 (each
step ends with DDP's gradient all-reduce, so it waits for the slower rank).

It then prints what the trainer carries per generation batch at B = 8, L = 1024, V = 151,936 (a
``sampling_mask.data.synthetic.rollout`` of 8,192 rows, top_k 512, top_p 0.95): the ragged masks against
the dense ``int32 [B, L, W]`` (``W`` the widest row) the adapter carried before, and ``[B, L, V]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np


def _tokenizer(vocab: int) -> Any:
    import tokenizers
    import transformers

    words = {f"w{i}": i + 3 for i in range(vocab - 3)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2, **words}, "<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def _model(vocab: int) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        pad_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    return transformers.Qwen2ForCausalLM(config)


class _Clock:
    """Step and generation-batch durations of one trainer (``counting`` off during the warm-up)."""

    def __init__(self) -> None:
        self.steps: list[float] = []
        self.generation: list[float] = []
        self.counting = False
        self.started = 0.0

    def callback(self) -> Any:
        from transformers import TrainerCallback

        clock = self

        class StepClock(TrainerCallback):
            def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
                clock.started = time.perf_counter()

            def on_step_end(self, *args: Any, **kwargs: Any) -> None:
                if clock.counting:
                    clock.steps.append(time.perf_counter() - clock.started)

        return StepClock()

    def timed(self, trainer_class: Any) -> Any:
        """``trainer_class`` whose generation batch (``_generate_and_score_completions``) is timed."""
        clock = self

        class Timed(trainer_class):  # type: ignore[misc, valid-type]
            def _generate_and_score_completions(self, inputs: Any) -> Any:
                start = time.perf_counter()
                out = super()._generate_and_score_completions(inputs)
                if clock.counting:
                    clock.generation.append(time.perf_counter() - start)
                return out

        return Timed


def build(cls: Any, args: argparse.Namespace, out: str) -> tuple[Any, _Clock]:
    import datasets
    import trl

    tokenizer = _tokenizer(args.vocab)
    rng = np.random.default_rng(0)
    prompts = [" ".join(f"w{i}" for i in rng.integers(0, args.vocab - 3, n)) for n in (5, 9, 7, 12)]
    config = trl.GRPOConfig(
        output_dir=out,
        per_device_train_batch_size=8,
        num_generations=2,
        max_completion_length=32,
        max_steps=1,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        seed=3,
        dataloader_num_workers=0,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        top_k=args.top_k,
        top_p=args.top_p,
        temperature=args.temperature,
    )
    clock = _Clock()
    trainer = clock.timed(cls)(
        model=_model(args.vocab),
        reward_funcs=lambda completions, **_: [float(len(c)) for c in completions],
        args=config,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts * 2}),
        processing_class=tokenizer,
        callbacks=[clock.callback()],
    )
    return trainer, clock


def carried_bytes() -> dict[str, float]:
    """Bytes the trainer carries per generation batch at B = 8, L = 1024, V = 151,936."""
    from sampling_mask.data import synthetic

    batch, length, vocab = 8, 1024, 151936
    mask = synthetic.rollout(batch * length, vocab_size=vocab, top_k=512, top_p=0.95, seed=0)
    widest = int(mask.row_lengths.max())
    ragged = mask.ids.nbytes + 8 * (mask.num_rows + batch)  # ids + each completion's offsets
    ragged += sum(a.nbytes for a in mask.companions.values())  # sampled ids, log-probs, temperature
    return {
        "widest": widest,
        "ragged": ragged,
        "dense_w": batch * length * widest * 4,
        "dense_v": batch * length * vocab * 4,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Medians of the alternating steps in this process (one rank of a launch, or the only process)."""
    import torch
    import trl

    from sampling_mask.trainers.trl import ReplayGRPOTrainer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out:
        plain, plain_clock = build(trl.GRPOTrainer, args, out)
        replay, replay_clock = build(ReplayGRPOTrainer, args, out)
        assert replay.replay_enabled
        for round_ in range(args.rounds):
            for trainer, clock in ((plain, plain_clock), (replay, replay_clock)):
                clock.counting = round_ > 0
                trainer.train()
    clocks = (("plain", plain_clock), ("replay", replay_clock))
    return {
        "processes": replay.accelerator.num_processes,
        "distributed_type": str(replay.accelerator.state.distributed_type),
        "rank": replay.accelerator.process_index,
        "counted": len(replay_clock.steps),
        "step": {name: statistics.median(c.steps) for name, c in clocks},
        "generation": {name: statistics.median(c.generation) for name, c in clocks},
    }


def launched(args: argparse.Namespace, processes: int) -> dict[str, Any]:
    """``measure`` on ``processes`` processes started by ``accelerate launch`` (rank 0's figures)."""
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as port:
        port.bind(("127.0.0.1", 0))
        free = str(port.getsockname()[1])
        port.close()
        result = Path(tmp) / "rank0.json"
        forwarded = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("processes", "json")]
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
        command = [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_ip", "127.0.0.1", "--main_process_port", free,
            __file__, *forwarded, f"--json={result}",
        ]  # fmt: skip
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"{processes} processes: the launch failed\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return dict(json.loads(result.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15, help="one step per trainer each; the first is a warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (1: less noise)")
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--top-p", type=float, default=0.8)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--processes", default="1", help="process counts to measure, e.g. 1,2")
    parser.add_argument("--json", help=argparse.SUPPRESS)  # a launched rank: write rank 0's figures here
    args = parser.parse_args(argv)
    # TRL 1.16 calls names transformers 5.23 deprecated (gradient_checkpointing -> activation_checkpointing)
    warnings.filterwarnings("ignore", message=r".*checkpointing.* is deprecated", category=FutureWarning)
    if args.json:
        figures = measure(args)
        if figures["rank"] == 0:
            Path(args.json).write_text(json.dumps(figures))
        return 0
    import trl

    counts = [int(n) for n in args.processes.split(",")]
    runs = [measure(args) if n == 1 else launched(args, n) for n in counts]
    print(
        f"TRL {trl.__version__}, tiny Qwen2 (V = {args.vocab}, d = 64, 2 layers), 8 completions x <= 32 tokens "
        f"per step and process, top_k={args.top_k}, top_p={args.top_p}, temperature={args.temperature}; "
        f"{args.threads} torch thread(s) per process; medians of {runs[0]['counted']} steps each, alternating"
    )
    for run in runs:
        step, gen = run["step"], run["generation"]
        print(
            f"  {run['processes']} process(es) ({run['distributed_type']}): "
            f"step GRPOTrainer {step['plain'] * 1e3:.1f} ms, ReplayGRPOTrainer {step['replay'] * 1e3:.1f} ms "
            f"({step['replay'] / step['plain']:.3f}x); generation batch {gen['plain'] * 1e3:.1f} ms, "
            f"{gen['replay'] * 1e3:.1f} ms ({gen['replay'] / gen['plain']:.3f}x)"
        )
    mem = carried_bytes()
    mib = 2**20
    print(
        f"carried per batch at B = 8, L = 1024, V = 151,936 (top_k 512, top_p 0.95): ragged {mem['ragged'] / mib:.2f} MiB; "
        f"dense [B, L, W = {mem['widest']}] {mem['dense_w'] / mib:.1f} MiB ({mem['dense_w'] / mem['ragged']:.0f}x); "
        f"[B, L, V] {mem['dense_v'] / mib:.0f} MiB; nothing when nothing truncates"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
