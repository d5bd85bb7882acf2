"""What a capture from transformers is checked against: ``generate()``'s own processed scores (imported
as ``from capture_checks import ...`` by the ``test_trainers_transformers*`` modules)."""

from __future__ import annotations

from typing import Any

import numpy as np


def sampling_config(**fields: Any) -> Any:
    """A ``GenerationConfig`` that samples 6 new tokens with pad id 0, no EOS id of its own, and returns
    the processed scores and the raw logits; ``fields`` override or add."""
    import transformers

    base = dict(
        do_sample=True,
        max_new_tokens=6,
        pad_token_id=0,
        eos_token_id=None,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
    )
    return transformers.GenerationConfig(**{**base, **fields})


def processed_rows(out: Any, prompt: int, lengths: Any = None) -> tuple[list[list[int]], np.ndarray]:
    """What ``generate()`` sampled each token from, from its processed scores (``output_scores=True``):
    per sequence and step (``lengths[b]`` steps of sequence ``b``, default all), the ids with a finite
    score and the token's ``log_softmax`` over them in float64: the sampler's own rows and log-probs."""
    import torch

    generated = out.sequences[:, prompt:]
    rows, logprobs = [], []
    for b in range(generated.shape[0]):
        for t in range(generated.shape[1] if lengths is None else int(lengths[b])):
            scores = out.scores[t][b].double()
            rows.append(torch.nonzero(torch.isfinite(scores))[:, 0].tolist())
            logprobs.append(float(torch.log_softmax(scores, 0)[generated[b, t]]))
    return rows, np.array(logprobs)


def raw_logit_rows(out: Any, mask: Any) -> Any:
    """``generate()``'s raw logits (``output_logits=True``) of each row of ``mask`` [rows, V]: what a
    trainer's forward recomputes for the same tokens."""
    import torch

    lengths = np.diff(mask.cu_seqlens)
    return torch.stack([out.logits[t][b] for b in range(lengths.size) for t in range(int(lengths[b]))])


def assert_sampler_rows(
    mask: Any, out: Any, prompt: int, eos: list[int] | tuple[int, ...] = (), stopped: dict[int, int] | None = None
) -> np.ndarray:
    """``mask`` is what ``generate()`` sampled from: rows for each sequence's tokens up to and including
    its first ``eos`` id (sequence ``b`` of ``stopped`` no further than its stop), each row the finite
    processed scores, each log-prob their float64 ``log_softmax``; with the raw logits in ``out``,
    replay over the mask reproduces those log-probs. Returns them."""
    from sampling_mask.reference_scorer import masked_logprobs

    lengths = []
    for b, generated in enumerate(out.sequences[:, prompt:].numpy()):
        hits = np.flatnonzero(np.isin(generated, list(eos)))
        n = int(hits[0]) + 1 if hits.size else generated.size
        lengths.append(min(n, (stopped or {}).get(b, n)))
    assert np.diff(mask.cu_seqlens).tolist() == lengths
    generated = out.sequences[:, prompt:].tolist()
    assert mask.sampled_token_ids.tolist() == [t for b, n in enumerate(lengths) for t in generated[b][:n]]
    rows, logprobs = processed_rows(out, prompt, lengths)
    assert mask.to_rows() == rows
    assert np.allclose(mask.sampled_logprobs, logprobs, rtol=1e-6, atol=1e-6)
    if getattr(out, "logits", None) is not None:
        replay = masked_logprobs(raw_logit_rows(out, mask), mask).logprobs.numpy()
        assert np.abs(replay - logprobs).max() <= 1e-5
    return logprobs
