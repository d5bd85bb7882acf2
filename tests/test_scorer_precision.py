"""Scorer precision at every support width: errors against float64 do not grow with a row's width.

One ragged mask holds two rows of each width in ``WIDTHS`` (V = 151,936, the last width the whole
vocabulary) and one empty row scored over the full vocabulary (the tile path). Criteria, per row:

- fp32 inputs: the scorer's error against float64 is at most 2x that of ``masked_fill`` +
  ``torch.logsumexp`` in fp32 over the same support, plus 1e-6 (log-probs and entropy); softmax
  gradient rows sum to 0 within 1e-5 (logits; on the hidden path the bias gradient, and the weight
  gradient summed over the vocabulary);
- bf16 / fp16 inputs: the error against float64 (of the same rounded values) is at most that of the
  same fp32 reference computed from those values, plus 1e-6.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from sampling_mask.reference_scorer import (  # noqa: E402
    masked_entropy,
    masked_entropy_from_hidden,
    masked_logprobs,
    masked_logprobs_from_hidden,
)
from sampling_mask.reference_scorer.row_stats import ROW_BAG  # noqa: E402

V = 151_936
WIDTHS = (1, 2, 512, 20_000, 60_000, V)
PER_WIDTH = 2
DIM = 16


def _case(seed: int = 0):
    """(ids, offsets, targets, support bool [T, V], width per row): two rows per width, then an empty row."""
    gen = torch.Generator().manual_seed(seed)
    rows, widths = [], []
    for width in WIDTHS:
        for _ in range(PER_WIDTH):
            rows.append(torch.randperm(V, generator=gen)[:width])  # unsorted, as SGLang / SkyRL record them
            widths.append(width)
    rows.append(torch.zeros(0, dtype=torch.int64))
    widths.append(V)
    lengths = torch.tensor([r.numel() for r in rows])
    offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)
    support = torch.zeros(len(rows), V, dtype=torch.bool)
    support[torch.repeat_interleave(torch.arange(len(rows)), lengths), torch.cat(rows)] = True
    support[-1] = True  # the empty row is scored over the full vocabulary
    pick = torch.randint(0, V, (1,), generator=gen)
    targets = torch.stack([r[len(r) // 2] for r in rows[:-1]] + [pick[0]])
    return torch.cat(rows), offsets, targets, support, torch.tensor(widths)


CASE = _case()


def _reference(z: torch.Tensor, support: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropy) by ``masked_fill`` + ``torch.logsumexp`` in z's dtype."""
    masked = z.masked_fill(~support, float("-inf"))
    lse = torch.logsumexp(masked, dim=1)
    logp = masked - lse[:, None]
    entropy = -torch.where(support, logp.exp() * logp, torch.zeros_like(logp)).sum(dim=1)
    return masked.gather(1, targets[:, None])[:, 0] - lse, entropy


def _errors(values: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    return (values.detach().double() - exact).abs()


def _check(name: str, ours: torch.Tensor, ref: torch.Tensor, exact: torch.Tensor, factor: float) -> None:
    err, err_ref = _errors(ours, exact), _errors(ref, exact)
    bad = err > factor * err_ref + 1e-6
    assert not bool(bad.any()), (
        f"{name}: rows of width {CASE[4][bad].tolist()} err {err[bad].tolist()} vs reference {err_ref[bad].tolist()}"
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_logits_path_every_width(dtype):
    ids, offsets, targets, support, _ = CASE
    z = (torch.randn(support.shape, generator=torch.Generator().manual_seed(1)) * 2).to(dtype)
    leaf = z.clone().requires_grad_()
    out = masked_logprobs(leaf, (ids, offsets), targets, with_entropy=True, temperature=0.9)
    assert bool(out.valid.all()) and out.empty_rows == 1
    factor = 2.0 if dtype == torch.float32 else 1.0
    exact_lp, exact_h = _reference(z.double() / 0.9, support, targets)
    ref_lp, ref_h = _reference(z.float() / 0.9, support, targets)  # fp32, from the rounded values
    _check("log-probs", out.logprobs, ref_lp, exact_lp, factor)
    _check("entropy", out.entropy, ref_h, exact_h, factor)
    entropy_only = masked_entropy(z, (ids, offsets), temperature=0.9)
    _check("masked_entropy", entropy_only.entropy, ref_h, exact_h, factor)
    out.logprobs.sum().backward()
    if dtype == torch.float32:  # a bf16 / fp16 gradient is rounded per entry: its row sums are not 0
        row_sums = leaf.grad.double().sum(dim=1).abs()
        assert float(row_sums.max()) <= 1e-5, row_sums.tolist()
    assert not bool((leaf.grad[~support] != 0).any())  # gradients stay on the support


def _hidden_case(dtype: torch.dtype):
    gen = torch.Generator().manual_seed(2)
    rows = CASE[3].shape[0]
    hidden = torch.randn(rows, DIM, generator=gen).to(dtype)
    weight = (torch.randn(V, DIM, generator=gen) * (3.0 / DIM**0.5)).to(dtype)
    bias = (torch.randn(V, generator=gen) * 0.1).to(dtype)
    return hidden, weight, bias


def _hidden_reference(hidden, weight, bias, support, targets):
    """(log-probs, entropy, hidden gradient, weight gradient) of the masked_fill reference in hidden's dtype."""
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logp, entropy = _reference(h @ w.T + bias, support, targets)
    logp.sum().backward()
    return logp.detach(), entropy.detach(), h.grad, w.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_size", [None, 4000])
def test_hidden_path_every_width(dtype, chunk_size):
    ids, offsets, targets, support, _ = CASE
    hidden, weight, bias = _hidden_case(dtype)
    exact = _hidden_reference(hidden.double(), weight.double(), bias.double(), support, targets)
    ref = _hidden_reference(hidden.float(), weight.float(), bias.float(), support, targets)
    h, w, b = (t.clone().requires_grad_() for t in (hidden, weight, bias))
    out = masked_logprobs_from_hidden(h, w, (ids, offsets), targets, bias=b, with_entropy=True, chunk_size=chunk_size)
    factor = 2.0 if dtype == torch.float32 else 1.0
    _check("log-probs", out.logprobs, ref[0], exact[0], factor)
    _check("entropy", out.entropy, ref[1], exact[1], factor)
    entropy_only = masked_entropy_from_hidden(hidden, weight, (ids, offsets), bias=bias, chunk_size=chunk_size)
    _check("masked_entropy_from_hidden", entropy_only.entropy, ref[1], exact[1], factor)
    out.logprobs.sum().backward()
    if dtype != torch.float32:
        return
    # the bias gradient is the sum over rows of each row's softmax gradient; each row sums to 0
    assert abs(float(b.grad.double().sum())) <= 1e-5 * support.shape[0]
    assert float(w.grad.double().sum(dim=0).abs().max()) <= 1e-5 * support.shape[0]
    # hidden gradient of rows wider than ROW_BAG: bags summed in float64, error not growing with width
    assert int(CASE[4].max()) > ROW_BAG
    err, err_ref = _errors(h.grad, exact[2]).amax(dim=1), _errors(ref[2], exact[2]).amax(dim=1)
    assert bool((err <= 2 * err_ref + 2e-6).all()), (err.tolist(), err_ref.tolist())
    err_w, err_w_ref = float(_errors(w.grad, exact[3]).max()), float(_errors(ref[3], exact[3]).max())
    assert err_w <= 2 * err_w_ref + 1e-6


def test_wide_hidden_gradient_chunks_agree():
    """Bags of a wide row split over chunks (``chunk_size``) give the unchunked gradient."""
    ids, offsets, targets, _, _ = CASE
    hidden, weight, _ = _hidden_case(torch.float32)
    mask = (ids, offsets[:-1])  # without the empty row: small chunks would tile its vocabulary finely
    grads = []
    for chunk_size in (None, 200):
        h = hidden[:-1].clone().requires_grad_()
        masked_logprobs_from_hidden(h, weight, mask, targets[:-1], chunk_size=chunk_size).logprobs.sum().backward()
        grads.append(h.grad)
    for g in grads[1:]:
        assert torch.allclose(g, grads[0], rtol=0, atol=2e-6)


def test_sums_in_float64_except_where_there_is_none():
    from sampling_mask.reference_scorer.row_stats import SUM_DTYPE, sum_dtype

    assert SUM_DTYPE == torch.float64 and sum_dtype(torch.device("cpu")) == torch.float64
    assert sum_dtype(torch.device("mps")) == torch.float32  # Apple MPS has no float64
