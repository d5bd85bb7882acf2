"""Reference scorer from hidden states: equals the logits path on hidden @ W.T + b (values and
gradients), never forms [T, V], accumulates bf16 in fp32, survives -inf biases; ``max_chunk_bytes``
bounds every temporary and does not change results."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import (  # noqa: E402
    masked_entropy,
    masked_entropy_from_hidden,
    masked_logprobs,
    masked_logprobs_from_hidden,
)
from sampling_mask.reference_scorer.row_stats import TILE_TEMPORARIES, chunk_length, tile_shape  # noqa: E402


def make_case(seed: int, num_rows: int = 9, vocab: int = 23, dim: int = 5, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    rows = [rng.choice(vocab, size=int(rng.integers(1, 7)), replace=False).tolist() for _ in range(num_rows)]
    rows[1] = []
    rows[4] = []
    targets = np.array([rng.choice(r) if r else rng.integers(vocab) for r in rows])
    targets[3] = next(i for i in range(vocab) if i not in rows[3])  # target outside its support
    hidden = torch.from_numpy(rng.normal(size=(num_rows, dim))).to(dtype)
    weight = torch.from_numpy(rng.normal(size=(vocab, dim))).to(dtype)
    bias = torch.from_numpy(rng.normal(size=vocab)).to(dtype)
    tau = torch.from_numpy(rng.uniform(0.5, 1.5, num_rows))
    return SamplingMask.from_rows(rows, vocab_size=vocab), targets, hidden, weight, bias, tau


def _grads(out, inputs):
    loss = torch.nan_to_num(out.logprobs, neginf=0.0) @ torch.linspace(0.5, 1.5, out.logprobs.numel()).to(out.logprobs)
    if out.entropy is not None:
        loss = loss + torch.nan_to_num(out.entropy).sum() * 0.7
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("chunk_size", [1, 3, 4096])
@pytest.mark.parametrize(("empty_rows", "missing_target"), [("full", "full"), ("exclude", "neg_inf")])
def test_hidden_equals_logits_path(chunk_size, empty_rows, missing_target):
    mask, targets, hidden, weight, bias, tau = make_case(0)
    inputs = (hidden.requires_grad_(), weight.requires_grad_(), bias.requires_grad_())
    kwargs = dict(temperature=tau, empty_rows=empty_rows, missing_target=missing_target, with_entropy=True)
    got = masked_logprobs_from_hidden(hidden, weight, mask, targets, bias=bias, chunk_size=chunk_size, **kwargs)
    want = masked_logprobs(hidden @ weight.T + bias, mask, targets, **kwargs)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-12, atol=1e-12, equal_nan=True)
    torch.testing.assert_close(got.entropy, want.entropy, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert torch.equal(got.valid, want.valid) and torch.equal(got.replayed, want.replayed)
    assert (got.empty_rows, got.missing_target_rows) == (want.empty_rows, want.missing_target_rows) == (2, 1)
    for g, w in zip(_grads(got, inputs), _grads(want, inputs), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
    ent = masked_entropy_from_hidden(hidden, weight, mask, bias=bias, temperature=tau, chunk_size=chunk_size)
    ent_want = masked_entropy(hidden @ weight.T + bias, mask, temperature=tau)
    torch.testing.assert_close(ent.entropy, ent_want.entropy, rtol=1e-12, atol=1e-12)


def test_gradcheck_hidden_path():
    mask, targets, hidden, weight, bias, tau = make_case(1, num_rows=6, vocab=11, dim=3)
    inputs = (hidden.requires_grad_(), weight.requires_grad_(), bias.requires_grad_())

    def fn(h, w, b):
        out = masked_logprobs_from_hidden(
            h, w, mask, targets, bias=b, temperature=tau, missing_target="full", with_entropy=True, chunk_size=4
        )
        return out.logprobs, out.entropy

    assert torch.autograd.gradcheck(fn, inputs)

    def no_bias(h, w):
        return masked_logprobs_from_hidden(h, w, mask, targets, missing_target="full", chunk_size=2).logprobs

    assert torch.autograd.gradcheck(no_bias, inputs[:2])


class _LargestTensor(TorchDispatchMode):
    """Records the element count of every tensor any op produces (of a sparse one: its stored values,
    the pairs' pattern being ``[T, V]`` only in name)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() if t.layout == torch.strided else t._nnz())
        return out


@pytest.mark.parametrize("with_empty", [False, True])
def test_never_forms_full_logits(with_empty):
    num_rows, vocab, dim, chunk = 24, 3000, 4, 16
    rng = np.random.default_rng(3)
    rows = [rng.choice(vocab, size=int(rng.integers(1, 9)), replace=False).tolist() for _ in range(num_rows)]
    if with_empty:
        rows[5] = rows[17] = []  # these two go through vocabulary tiles
    targets = np.array([r[0] if r else 7 for r in rows])
    hidden = torch.randn(num_rows, dim, requires_grad=True)
    weight = torch.randn(vocab, dim, requires_grad=True)
    with _LargestTensor() as probe:
        out = masked_logprobs_from_hidden(hidden, weight, SamplingMask.from_rows(rows), targets, chunk_size=chunk)
        out.logprobs.sum().backward()
    # the weight and its gradient ([V, d]) are the largest tensors; [T, V] logits never appear
    assert probe.largest == vocab * dim < num_rows * vocab
    assert bool(torch.isfinite(weight.grad).all()) and float(weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_hidden(dtype):
    mask, targets, hidden, weight, bias, tau = make_case(2, dim=16, dtype=dtype)
    low = (hidden.requires_grad_(), weight.requires_grad_(), bias.requires_grad_())
    exact = tuple(t.detach().double().requires_grad_() for t in low)  # the same rounded values in float64
    kwargs = dict(temperature=tau, missing_target="full", with_entropy=True, chunk_size=5)
    got = masked_logprobs_from_hidden(low[0], low[1], mask, targets, bias=low[2], **kwargs)
    want = masked_logprobs_from_hidden(exact[0], exact[1], mask, targets, bias=exact[2], **kwargs)
    assert got.logprobs.dtype == torch.float32
    torch.testing.assert_close(got.logprobs.double(), want.logprobs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.entropy.double(), want.entropy, rtol=1e-5, atol=1e-5)
    for g, w in zip(_grads(got, low), _grads(want, exact), strict=True):
        assert g.dtype == dtype
        # fp32 accumulation, one rounding to the low-precision dtype at the end
        torch.testing.assert_close(g, w.to(dtype), rtol=1e-2, atol=1e-3)


def test_neg_inf_bias_gives_finite_gradients():
    mask, targets, hidden, weight, bias, tau = make_case(3)
    bias = bias.clone()
    # -inf inside supports and on "padded vocabulary" columns, never on a target
    banned = [i for i in (*mask.row(0).tolist(), *mask.row(2).tolist(), 19, 20, 21, 22) if i not in targets]
    assert len(banned) >= 5
    bias[banned] = float("-inf")
    inputs = (hidden.requires_grad_(), weight.requires_grad_(), bias.requires_grad_())
    out = masked_logprobs_from_hidden(
        hidden, weight, mask, targets, bias=bias, missing_target="full", with_entropy=True
    )
    want = masked_logprobs(hidden @ weight.T + bias, mask, targets, missing_target="full", with_entropy=True)
    torch.testing.assert_close(out.logprobs, want.logprobs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out.entropy, want.entropy, rtol=1e-12, atol=1e-12)
    assert bool(torch.isfinite(out.logprobs).all())
    for g, w in zip(_grads(out, inputs), _grads(want, inputs), strict=True):
        assert bool(torch.isfinite(g).all())
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)


def test_frozen_weight_and_detached_hidden():
    mask, targets, hidden, weight, bias, tau = make_case(4)
    hidden.requires_grad_()
    out = masked_logprobs_from_hidden(hidden, weight, mask, targets, bias=bias, missing_target="full")
    (grad_h,) = torch.autograd.grad(out.logprobs.sum(), (hidden,))
    want = masked_logprobs(hidden @ weight.T + bias, mask, targets, missing_target="full")
    (want_h,) = torch.autograd.grad(want.logprobs.sum(), (hidden,))
    torch.testing.assert_close(grad_h, want_h, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        again = masked_logprobs_from_hidden(hidden, weight, mask, targets, bias=bias, missing_target="full")
    torch.testing.assert_close(again.logprobs, out.logprobs.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_chunk_budget_does_not_change_results(dtype):
    """A 1-byte budget (every chunk one pair, one id, one tile row x column) and a huge one agree."""
    mask, targets, hidden, weight, bias, tau = make_case(5, num_rows=11, dim=6, dtype=dtype)
    kwargs = dict(temperature=tau, missing_target="full", with_entropy=True)
    results = []
    for budget in (1, 300, 1 << 40):
        inputs = tuple(t.detach().clone().requires_grad_() for t in (hidden, weight, bias))
        out = masked_logprobs_from_hidden(
            inputs[0], inputs[1], mask, targets, bias=inputs[2], max_chunk_bytes=budget, **kwargs
        )
        results.append((out, _grads(out, inputs)))
    (ref, ref_grads), rest = results[0], results[1:]
    assert ref.empty_rows == 2 and ref.missing_target_rows == 1  # full rows go through tiles
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    grad_tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-2, atol=1e-3)
    for out, grads in rest:
        torch.testing.assert_close(out.logprobs, ref.logprobs, equal_nan=True, **tol)
        torch.testing.assert_close(out.entropy, ref.entropy, equal_nan=True, **tol)
        for g, w in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(g, w, **grad_tol)


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "256", None])
def test_bad_max_chunk_bytes(value):
    mask, targets, hidden, weight, bias, tau = make_case(6)
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs_from_hidden(hidden, weight, mask, targets, missing_target="full", max_chunk_bytes=value)
    assert err.value.code == "E_RANGE" and err.value.field == "max_chunk_bytes"
    with pytest.raises(SamplingMaskError) as err:
        masked_entropy(hidden @ weight.T, mask, chunk_size=0)
    assert err.value.code == "E_RANGE" and err.value.field == "chunk_size"


@pytest.mark.parametrize("budget", [1, 64, 1000, 4096, 1 << 20, 256 << 20])
@pytest.mark.parametrize(
    ("num_rows", "width", "dim", "cap"),
    [(1, 151936, 1024, None), (5000, 151936, 64, None), (7, 50, 0, None), (3000, 3000, 16, 37)],
)
def test_budget_bounds_the_chunk(budget, num_rows, width, dim, cap):
    n = chunk_length(24, budget, cap)
    assert n >= 1 and (cap is None or n <= cap)
    assert n * 24 <= budget or n == 1
    rows, cols = tile_shape(num_rows, width, dim, 4, budget, cap)
    assert 1 <= rows <= num_rows and 1 <= cols <= width
    if cap is not None:
        assert rows <= cap and cols <= cap
    tile_bytes = 4 * (rows * (TILE_TEMPORARIES * cols + dim) + 2 * cols * dim)
    if budget >= 4 * (TILE_TEMPORARIES * min(width, 1024) + 3 * dim):  # one row of 1024 columns fits
        assert tile_bytes <= budget
    else:
        assert rows == 1
    if budget == 256 << 20 and cap is None:  # the default budget is used, not left idle
        assert tile_bytes > budget // 4 or (rows, cols) == (num_rows, width)


class _TensorBytes(TorchDispatchMode):
    """Records the bytes of every dense tensor any op produces, except the weight, its gradient and
    views of them ([V, d]) and integer bookkeeping of at most V + 1 entries (per-id offsets)."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.vocab, self.dim, self.largest = vocab, dim, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.numel() == self.vocab * self.dim:
                continue
            if not t.dtype.is_floating_point and t.numel() <= self.vocab + 1:
                continue
            self.largest = max(self.largest, t.numel() * t.element_size())
        return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_max_chunk_bytes_bounds_every_temporary(dtype):
    num_rows, vocab, dim = 24, 3000, 4
    rng = np.random.default_rng(7)
    rows = [rng.choice(vocab, size=int(rng.integers(1, 9)), replace=False).tolist() for _ in range(num_rows)]
    rows[5] = rows[17] = []  # scored over the whole vocabulary, in tiles
    mask, targets = SamplingMask.from_rows(rows), np.array([r[0] if r else 7 for r in rows])
    largest = {}
    for budget in (4096, None):
        hidden = torch.randn(num_rows, dim).to(dtype).requires_grad_()
        weight = torch.randn(vocab, dim).to(dtype).requires_grad_()
        with _TensorBytes(vocab, dim) as probe:
            kwargs = {} if budget is None else {"max_chunk_bytes": budget}
            out = masked_logprobs_from_hidden(hidden, weight, mask, targets, **kwargs)
            out.logprobs.sum().backward()
        assert bool(torch.isfinite(weight.grad.float()).all()) and float(weight.grad.float().abs().sum()) > 0
        largest[budget] = probe.largest
    assert largest[4096] <= 4096 < largest[None]  # the default budget forms whole-vocabulary tiles here


def test_a_weight_released_before_backward_is_refused_by_name():
    """DeepSpeed ZeRO-3 partitions a parameter read outside its module's forward again before the
    backward (its data becomes shape ``(0,)``): the backward refuses it, naming it (``E_SHAPE``), instead
    of reading it (an IndexError before). Scored inside the head's own forward, ZeRO-3's hooks gather it
    again first (``tests/test_trainers_trl_sharded.py``)."""
    mask, targets, hidden, weight, bias, tau = make_case(7, dtype=torch.float32)
    weight = torch.nn.Parameter(weight)
    hidden = hidden.clone().requires_grad_()
    out = masked_logprobs_from_hidden(hidden, weight, mask, targets, bias=bias, missing_target="full")
    weight.data = torch.empty(0)  # what ZeRO-3's release does to the parameter between forward and backward
    with pytest.raises(SamplingMaskError) as err:
        out.logprobs.sum().backward()
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == "weight"
    assert "[23, 5]" in err.value.message and "[0]" in err.value.message
