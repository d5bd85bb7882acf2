"""The scorer in a real training loop: ``fill_value`` for rows that cannot be
scored, Hugging Face's ``-100`` labels through ``ignore_index``, and gradients that stay finite."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import (  # noqa: E402
    full_logprobs,
    masked_entropy,
    masked_entropy_from_hidden,
    masked_logprobs,
    masked_logprobs_from_hidden,
)

# Row 0 replayed; row 1 empty (excluded below); row 2 has a -100 label on a non-empty row; row 3's
# support holds only -inf logits (no distribution); row 4 replayed; row 5 a prompt row: empty, -100.
ROWS = [[3, 5, 6], [], [1, 2], [7, 8], [0, 9], []]
LABELS = np.array([5, 4, -100, 7, 9, -100])
LOSS_MASK = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
SCORED = [0, 4]


def _logits() -> torch.Tensor:
    base = np.random.default_rng(0).normal(size=(len(ROWS), 10))
    base[3, [7, 8]] = -np.inf
    return torch.from_numpy(base).requires_grad_()


def _score(logits: torch.Tensor, **kwargs) -> object:
    mask = SamplingMask.from_rows(ROWS, vocab_size=10)
    return masked_logprobs(logits, mask, LABELS, empty_rows="exclude", with_entropy=True, **kwargs)


def test_default_leaves_unscored_rows_nan_and_fill_value_replaces_them() -> None:
    nan_out = _score(_logits())
    assert nan_out.valid.tolist() == [True, False, False, False, True, False]
    assert bool(torch.isnan(nan_out.logprobs[[1, 2, 3, 5]]).all())
    assert math.isnan(float(-(nan_out.logprobs.detach() * LOSS_MASK).sum()))  # the problem fill_value solves
    out = _score(_logits(), fill_value=0.0)
    assert out.logprobs[[1, 2, 3, 5]].tolist() == [0.0] * 4 and out.entropy[[1, 2, 3, 5]].tolist() == [0.0] * 4
    torch.testing.assert_close(out.logprobs[SCORED], nan_out.logprobs[SCORED])
    assert torch.equal(out.valid, nan_out.valid) and torch.equal(out.replayed, nan_out.replayed)
    assert _score(_logits(), fill_value=-7.5).logprobs[1].item() == -7.5


def test_loss_with_fill_value_has_finite_gradients_equal_to_the_scored_rows_alone() -> None:
    logits = _logits()
    out = _score(logits, fill_value=0.0)
    loss = -(out.logprobs * LOSS_MASK).sum() - 0.1 * (out.entropy * LOSS_MASK).sum()
    assert math.isfinite(float(loss.detach()))
    (grad,) = torch.autograd.grad(loss, logits)
    assert bool(torch.isfinite(grad).all())
    assert bool((grad[[1, 2, 3, 5]] == 0).all())  # filled rows: zero gradient, no NaN leaking through
    # The same loss written with the other idiom, selecting valid rows, gives the same gradient.
    logits2 = _logits()
    ref = _score(logits2)
    keep = ref.valid
    loss2 = -(ref.logprobs[keep] * LOSS_MASK[keep]).sum() - 0.1 * (ref.entropy[keep] * LOSS_MASK[keep]).sum()
    (grad2,) = torch.autograd.grad(loss2, logits2)
    torch.testing.assert_close(grad, grad2)
    assert float(grad[0].abs().sum()) > 0 and float(grad[4].abs().sum()) > 0


def test_ignore_index_marks_rows_without_target() -> None:
    mask = SamplingMask.from_rows(ROWS[:3], vocab_size=10)
    logits = _logits()[:3].detach()
    out = masked_logprobs(logits, mask, [5, 4, -100])  # HF labels: -100 on a non-empty row
    assert out.valid.tolist() == [True, True, False] and out.replayed.tolist() == [True, False, False]
    assert math.isnan(out.logprobs[2].item()) and out.empty_rows == 1
    plain = masked_logprobs(logits[:2], SamplingMask.from_rows(ROWS[:2], vocab_size=10), [5, 4])
    torch.testing.assert_close(out.logprobs[:2], plain.logprobs)
    with pytest.raises(SamplingMaskError) as info:  # -100 is an ordinary (out-of-range) id without ignore_index
        masked_logprobs(logits, mask, [5, 4, -100], ignore_index=None)
    assert info.value.code is ErrorCode.E_RANGE and info.value.row == 2
    custom = masked_logprobs(logits, mask, [5, 4, 9], ignore_index=9)  # 9 is not in row 2: no E_MISSING_SAMPLED
    assert custom.valid.tolist() == [True, True, False]
    with pytest.raises(SamplingMaskError) as info:
        masked_logprobs(logits, mask, [5, 4, 9])
    assert info.value.code is ErrorCode.E_MISSING_SAMPLED and info.value.row == 2


def test_full_logprobs_and_the_hidden_path_take_the_same_options() -> None:
    rng = np.random.default_rng(1)
    hidden = torch.from_numpy(rng.normal(size=(len(ROWS), 4))).requires_grad_()
    weight = torch.from_numpy(rng.normal(size=(10, 4))).requires_grad_()
    bias = torch.zeros(10, dtype=torch.float64)
    bias[[7, 8]] = -math.inf  # row 3's whole support
    mask = SamplingMask.from_rows(ROWS, vocab_size=10)
    kwargs = dict(empty_rows="exclude", fill_value=0.0, with_entropy=True)
    got = masked_logprobs_from_hidden(hidden, weight, mask, LABELS, bias=bias, chunk_size=2, **kwargs)
    want = masked_logprobs(hidden @ weight.T + bias, mask, LABELS, **kwargs)
    torch.testing.assert_close(got.logprobs, want.logprobs)
    assert got.valid.tolist() == [True, False, False, False, True, False]
    loss = -(got.logprobs * LOSS_MASK).sum() + got.entropy.sum()
    grads = torch.autograd.grad(loss, (hidden, weight))
    assert all(bool(torch.isfinite(g).all()) for g in grads)
    assert bool((grads[0][[1, 2, 3, 5]] == 0).all())
    ent = masked_entropy_from_hidden(hidden, weight, mask, bias=bias, empty_rows="exclude", fill_value=0.0)
    torch.testing.assert_close(
        ent.entropy, masked_entropy(hidden @ weight.T + bias, mask, empty_rows="exclude", fill_value=0.0).entropy
    )
    full = full_logprobs(hidden.detach() @ weight.detach().T, LABELS, fill_value=0.0)
    assert full.valid.tolist() == [True, True, False, True, True, False] and full.logprobs[2].item() == 0.0


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"fill_value": "zero"}, "fill_value"), ({"ignore_index": 1.5}, "ignore_index")]
)
def test_bad_options_are_sampling_mask_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(SamplingMaskError) as info:
        masked_logprobs(_logits().detach(), SamplingMask.from_rows(ROWS, vocab_size=10), LABELS, **kwargs)
    assert info.value.code is ErrorCode.E_SCHEMA and info.value.field == field
