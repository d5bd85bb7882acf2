"""Tiny random-weight causal LMs built from a config, no download (imported as ``from tiny_models import ...``)."""

from __future__ import annotations

from typing import Any


def tiny_causal_lm(kind: str, vocab: int, *, pad: int, eos: int | None, bos: int | None = None, seed: int = 0) -> Any:
    """A 2-layer ``kind`` ("qwen2" or "llama") model with hidden size 32; ``initializer_range=0.2``
    gives peaked next-token distributions, so that every sampling filter cuts."""
    import torch
    import transformers

    config = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.2,
        pad_token_id=pad,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    if kind == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**config))
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
