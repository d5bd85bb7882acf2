"""What recording the sampling mask adds to transformers' ``generate()``.

``python benchmarks/bench_recorder.py [--vocab 32000] [--hidden 64] [--layers 2] [--batch 8]
[--prompt 16] [--new 32] [--repeats 9] [--top-k 50] [--top-p 0.9] [--temperature 0.8] [--threads 1]``

A random-weight Qwen2 built from a config (no download) samples ``--new`` tokens for ``--batch``
left-padded prompts, three ways, each from the same seed (so each samples the same tokens):

- ``plain``: ``model.generate(...)``, no recording;
- ``processor``: ``model.generate(..., logits_processor=[recorder])`` then ``recorder.mask(out)``: the
  recorder runs the sampling warpers on the scores it sees, and ``generate()`` runs them again;
- ``recorder.generate``: ``recorder.generate(model, ...)`` then ``recorder.mask(out)``: ``generate()``
  builds no warper and the recorder's are the only ones (the same warpers, in the same place).

Prints the median seconds of each (``--repeats`` interleaved rounds, ``sampling_mask.cli.bench.race``)
and the ratios to ``plain``, measured in this one run, and checks that the three generate the same
sequences and that both recordings are equal. A small model makes the per-step cost of the warpers
(top-p sorts the vocabulary) a large share of a step; a real model's forward dwarfs it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import torch
import transformers

from sampling_mask.cli.bench import race
from sampling_mask.sampler.generation_config import resolve_generation_config
from sampling_mask.trainers.transformers import SamplingMaskRecorder


def build(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=args.prompt + args.new + 8,
        initializer_range=0.2,
        pad_token_id=0,
        eos_token_id=None,
        tie_word_embeddings=False,
    )
    model = transformers.Qwen2ForCausalLM(config).eval()
    ids = torch.randint(3, args.vocab, (args.batch, args.prompt))
    attention = torch.ones_like(ids)
    attention[: args.batch // 2, : args.prompt // 4] = 0  # left padding
    ids[attention == 0] = 0
    gen = resolve_generation_config(
        transformers.GenerationConfig(
            do_sample=True,
            top_k=args.top_k,
            top_p=args.top_p,
            temperature=args.temperature,
            max_new_tokens=args.new,
            min_new_tokens=args.new,  # every step samples for every sequence
            pad_token_id=0,
            return_dict_in_generate=True,
        ),
        model=model,
    )
    return dict(model=model, ids=ids, attention=attention, gen=gen)


def run(c: dict[str, Any], how: str) -> Any:
    torch.manual_seed(1)
    model, inputs = c["model"], dict(input_ids=c["ids"], attention_mask=c["attention"])
    with torch.no_grad():
        if how == "plain":
            return model.generate(**inputs, generation_config=c["gen"]), None
        recorder = SamplingMaskRecorder(c["gen"], model=model)
        if how == "processor":
            out = model.generate(**inputs, generation_config=c["gen"], logits_processor=[recorder])
        else:
            out = recorder.generate(model, **inputs)
        return out, recorder.mask(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--top-k", type=int, default=50)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the least scheduling noise)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    c = build(args)
    results = {how: run(c, how) for how in ("plain", "processor", "recorder.generate")}
    sequences = [out.sequences for out, _ in results.values()]
    assert all(torch.equal(sequences[0], s) for s in sequences[1:]), "the three ways sampled different tokens"
    a, b = results["processor"][1], results["recorder.generate"][1]
    assert a.to_rows() == b.to_rows() and np.array_equal(a.sampled_logprobs, b.sampled_logprobs)
    medians = race({how: lambda how=how: run(c, how) for how in results}, args.repeats)
    report = {
        "workload": vars(args),
        "rows": int(a.num_rows),
        "mean_row_width": float(a.row_lengths.mean()),
        "median_s": medians,
        "ratio_processor": medians["processor"] / medians["plain"],
        "ratio_recorder_generate": medians["recorder.generate"] / medians["plain"],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
