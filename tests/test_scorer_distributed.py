"""Vocabulary- and context-parallel scoring on 2 gloo ranks (CPU) equals the single-process result in
float64 to 1e-10, values and gradients. One process spawn for everything: spawning is the slow part."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("torch.multiprocessing")

from gloo import spawn  # noqa: E402

from sampling_mask import SamplingMask  # noqa: E402
from sampling_mask.reference_scorer import (  # noqa: E402
    context_parallel_split,
    gather_rows,
    masked_logprobs,
    masked_logprobs_from_hidden,
    masked_support_logprobs,
    replay_diagnostics,
)

WORLD = 2
TOL = dict(rtol=1e-10, atol=1e-10, equal_nan=True)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]  # slow: forks or spawns processes


def _case(seed: int = 0):
    """The same data on every rank: 3 sequences (uneven lengths), empty rows, a missing target."""
    rng = np.random.default_rng(seed)
    lengths, vocab, dim = [7, 4, 10], 23, 5
    num_rows = sum(lengths)
    rows = [rng.choice(vocab, size=int(rng.integers(1, 6)), replace=False).tolist() for _ in range(num_rows)]
    for t in (0, 8, 9, 15):
        rows[t] = []
    sampled = np.array([rng.choice(r) if r else -1 for r in rows])
    targets = np.where(sampled >= 0, sampled, rng.integers(vocab, size=num_rows))  # scored on empty rows too
    targets[3] = next(i for i in range(vocab) if i not in rows[3])  # outside its support
    mask = SamplingMask.from_rows(
        rows,
        cu_seqlens=np.concatenate([[0], np.cumsum(lengths)]),
        vocab_size=vocab,
        sampled_token_ids=sampled,
        sampled_logprobs=rng.normal(-2, 1, num_rows).astype(np.float32),
        temperature=rng.uniform(0.5, 1.5, num_rows).astype(np.float32),
    )
    tensors = {
        "hidden": torch.from_numpy(rng.normal(size=(num_rows, dim))),
        "weight": torch.from_numpy(rng.normal(size=(vocab, dim))),
        "bias": torch.from_numpy(rng.normal(size=vocab)),
        "row_weights": torch.from_numpy(rng.uniform(0.5, 1.5, num_rows)),
    }
    return mask, targets, tensors


def _loss(out, row_weights):
    return (torch.nan_to_num(out.logprobs) * row_weights).sum() + (torch.nan_to_num(out.entropy) * row_weights).sum()


KW = dict(missing_target="full", with_entropy=True)


def _check_vocab_parallel(rank: int) -> None:
    mask, targets, t = _case()
    vocab = mask.vocab_size
    lo, hi = (0, 12) if rank == 0 else (12, vocab)  # uneven shards, contiguous in rank order
    # logits path
    z = (t["hidden"] @ t["weight"].T + t["bias"]).requires_grad_()
    ref = masked_logprobs(z, mask, targets, **KW)
    (ref_grad,) = torch.autograd.grad(_loss(ref, t["row_weights"]), (z,))
    z_local = z.detach()[:, lo:hi].clone().requires_grad_()
    out = masked_logprobs(z_local, mask, targets, vocab_group=dist.group.WORLD, **KW)
    torch.testing.assert_close(out.logprobs, ref.logprobs, **TOL)
    torch.testing.assert_close(out.entropy, ref.entropy, **TOL)
    assert torch.equal(out.valid, ref.valid) and out.missing_target_rows == ref.missing_target_rows == 1
    (grad_local,) = torch.autograd.grad(_loss(out, t["row_weights"]), (z_local,))
    torch.testing.assert_close(grad_local, ref_grad[:, lo:hi], **TOL)
    for policy in ("neg_inf", "full"):
        a = masked_logprobs(
            z_local, mask, targets, vocab_group=dist.group.WORLD, missing_target=policy, empty_rows="exclude"
        )
        b = masked_logprobs(z, mask, targets, missing_target=policy, empty_rows="exclude")
        torch.testing.assert_close(a.logprobs, b.logprobs, **TOL)
    support = masked_support_logprobs(z_local, mask, vocab_group=dist.group.WORLD)
    torch.testing.assert_close(support, masked_support_logprobs(z, mask), **TOL)
    # hidden-state path: weight and bias sharded, hidden replicated
    full = tuple(t[k].clone().requires_grad_() for k in ("hidden", "weight", "bias"))
    ref_h = masked_logprobs_from_hidden(full[0], full[1], mask, targets, bias=full[2], chunk_size=3, **KW)
    ref_grads = torch.autograd.grad(_loss(ref_h, t["row_weights"]), full)
    local = (
        t["hidden"].clone().requires_grad_(),
        t["weight"][lo:hi].clone().requires_grad_(),
        t["bias"][lo:hi].clone().requires_grad_(),
    )
    out_h = masked_logprobs_from_hidden(
        local[0], local[1], mask, targets, bias=local[2], chunk_size=3, vocab_group=dist.group.WORLD, **KW
    )
    torch.testing.assert_close(out_h.logprobs, ref_h.logprobs, **TOL)
    torch.testing.assert_close(out_h.entropy, ref_h.entropy, **TOL)
    grads = torch.autograd.grad(_loss(out_h, t["row_weights"]), local)
    torch.testing.assert_close(grads[0], ref_grads[0], **TOL)  # summed over the shards
    torch.testing.assert_close(grads[1], ref_grads[1][lo:hi], **TOL)
    torch.testing.assert_close(grads[2], ref_grads[2][lo:hi], **TOL)


def _split_rows(lengths: list[int], world: int, rank: int, mode: str) -> np.ndarray:
    """Independent statement of the split: np.array_split of each sequence into P (contiguous) or 2P
    (zig-zag: chunk r, then chunk 2P-1-r) chunks."""
    out, start = [], 0
    for n in lengths:
        chunks = np.array_split(np.arange(start, start + n), world if mode == "contiguous" else 2 * world)
        picks = [rank] if mode == "contiguous" else [rank, 2 * world - 1 - rank]
        out.extend(np.concatenate([chunks[c] for c in picks]).tolist())
        start += n
    return np.array(out, dtype=np.int64)


def _check_context_parallel(rank: int) -> None:
    mask, targets, t = _case(1)
    lengths = np.diff(mask.cu_seqlens).tolist()
    full = tuple(t[k].clone().requires_grad_() for k in ("hidden", "weight", "bias"))
    ref = masked_logprobs_from_hidden(full[0], full[1], mask, bias=full[2], chunk_size=4, **KW)
    ref_grads = torch.autograd.grad(_loss(ref, t["row_weights"]), full)
    ref_diag = replay_diagnostics(ref, mask.sampled_logprobs)
    for mode in ("contiguous", "zigzag"):
        rows, local_mask = context_parallel_split(mask, WORLD, rank, mode)
        np.testing.assert_array_equal(rows, _split_rows(lengths, WORLD, rank, mode))
        assert local_mask.num_rows == rows.size and local_mask.num_segments == mask.num_segments
        np.testing.assert_array_equal(local_mask.sampled_token_ids, mask.sampled_token_ids[rows])
        h = t["hidden"][rows].clone().requires_grad_()
        w, b = t["weight"].clone().requires_grad_(), t["bias"].clone().requires_grad_()
        out = masked_logprobs_from_hidden(h, w, local_mask, bias=b, chunk_size=4, **KW)
        torch.testing.assert_close(out.logprobs, ref.logprobs[rows], **TOL)
        torch.testing.assert_close(out.entropy, ref.entropy[rows], **TOL)
        grads = torch.autograd.grad(_loss(out, t["row_weights"][rows]), (h, w, b))
        torch.testing.assert_close(grads[0], ref_grads[0][rows], **TOL)
        for g, want in zip(grads[1:], ref_grads[1:], strict=True):  # replicated weight: the sum over ranks
            g = g.clone()
            dist.all_reduce(g)
            torch.testing.assert_close(g, want, **TOL)
        gathered = gather_rows(out.logprobs.detach(), rows, mask.num_rows)
        torch.testing.assert_close(gathered, ref.logprobs.detach(), **TOL)
        diag = replay_diagnostics(out, local_mask.sampled_logprobs, group=dist.group.WORLD)
        for name in ("kl_k1", "kl_k3", "fraction_replayed", "rows_compared"):
            torch.testing.assert_close(getattr(diag, name), getattr(ref_diag, name), **TOL)
        logits = (t["hidden"][rows] @ t["weight"].T + t["bias"]).detach()
        torch.testing.assert_close(masked_logprobs(logits, local_mask, **KW).logprobs, ref.logprobs[rows], **TOL)


def _checks(rank: int) -> None:
    torch.set_default_dtype(torch.float64)
    _check_vocab_parallel(rank)
    _check_context_parallel(rank)


def test_vocab_and_context_parallel_equal_single_process():
    """One spawn runs both checks; a failing assertion on either rank fails this test with its traceback."""
    spawn(_checks, world=WORLD)
