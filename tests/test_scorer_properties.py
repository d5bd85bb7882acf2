"""Identities of the scoring rule (hypothesis, tiny sizes)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sampling_mask import SamplingMask  # noqa: E402
from sampling_mask.conformance.strategies import masks  # noqa: E402
from sampling_mask.reference_scorer import (  # noqa: E402
    full_logprobs,
    masked_entropy,
    masked_logprobs,
    masked_support_logprobs,
)

VOCAB = 16


@st.composite
def scored_masks(draw):
    """(mask with sampled ids in every non-empty row, logits float64 [T, V], temperature [T])."""
    mask = draw(masks(vocab_size=VOCAB, max_rows=8, max_width=VOCAB, companions=True, metadata=False))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    logits = torch.from_numpy(rng.normal(0, draw(st.sampled_from([0.1, 2.0, 30.0])), (mask.num_rows, VOCAB)))
    return mask, logits, torch.from_numpy(mask.temperature.astype(np.float64))


@given(scored_masks())
def test_whole_vocabulary_support_is_log_softmax(case):
    mask, logits, tau = case
    whole = SamplingMask.from_rows([list(range(VOCAB))] * mask.num_rows)
    targets = np.where(mask.sampled_token_ids >= 0, mask.sampled_token_ids, 0)
    got = masked_logprobs(logits, whole, targets, temperature=tau, with_entropy=True)
    log_softmax = torch.log_softmax(logits / tau[:, None], dim=-1)
    torch.testing.assert_close(got.logprobs, log_softmax.gather(1, torch.from_numpy(targets)[:, None])[:, 0])
    torch.testing.assert_close(got.entropy, -(log_softmax.exp() * log_softmax).sum(-1))
    full = full_logprobs(logits, targets, temperature=tau).logprobs
    torch.testing.assert_close(got.logprobs, full)


@given(scored_masks())
def test_masked_logprob_at_least_full_logprob(case):
    mask, logits, tau = case
    got = masked_logprobs(logits, mask, temperature=tau)
    targets = np.where(mask.sampled_token_ids >= 0, mask.sampled_token_ids, 0)
    full = full_logprobs(logits, targets, temperature=tau).logprobs
    scored = got.valid
    assert bool((got.logprobs[scored] >= full[scored] - 1e-12).all())
    assert bool((got.logprobs[scored] <= 1e-12).all())
    replayed_rows = torch.from_numpy(mask.row_lengths > 0)
    assert torch.equal(got.replayed, replayed_rows)


@given(scored_masks())
def test_support_probabilities_sum_to_one(case):
    mask, logits, tau = case
    support = masked_support_logprobs(logits, mask, temperature=tau)
    assert support.shape == (mask.nnz,)
    rows = torch.from_numpy(np.repeat(np.arange(mask.num_rows), mask.row_lengths))
    totals = torch.zeros(mask.num_rows, dtype=torch.float64).index_add_(0, rows, support.exp())
    nonempty = torch.from_numpy(mask.row_lengths > 0)
    torch.testing.assert_close(totals[nonempty], torch.ones_like(totals[nonempty]), rtol=0, atol=1e-12)
    entropy = masked_entropy(logits, mask, temperature=tau, empty_rows="exclude").entropy
    want = torch.zeros_like(totals).index_add_(0, rows, -support.exp() * support)
    torch.testing.assert_close(entropy[nonempty], want[nonempty], rtol=1e-9, atol=1e-12)
    assert bool(torch.isnan(entropy[~nonempty]).all())


@given(scored_masks(), st.integers(0, 2**32 - 1), st.integers(0, 5))
def test_invariant_to_id_order_and_padding_width(case, seed, extra_width):
    mask, logits, tau = case
    rng = np.random.default_rng(seed)
    shuffled = SamplingMask.from_rows(
        [rng.permutation(r).tolist() for r in mask.to_rows()],
        sampled_token_ids=mask.sampled_token_ids,
        temperature=mask.temperature,
    )
    base = masked_logprobs(logits, mask, with_entropy=True, empty_rows="exclude")
    again = masked_logprobs(logits, shuffled, with_entropy=True, empty_rows="exclude")
    torch.testing.assert_close(again.logprobs, base.logprobs, equal_nan=True, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(again.entropy, base.entropy, equal_nan=True, rtol=1e-12, atol=1e-12)
    width = int(mask.row_lengths.max(initial=0)) + extra_width
    dense = torch.from_numpy(shuffled.to_dense(width))
    padded = masked_logprobs(
        logits, dense, mask.sampled_token_ids, temperature=tau, with_entropy=True, empty_rows="exclude"
    )
    torch.testing.assert_close(padded.logprobs, base.logprobs, equal_nan=True, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(padded.entropy, base.entropy, equal_nan=True, rtol=1e-12, atol=1e-12)
