"""Reference scorer from logits: exactness against a real engine, a float64 formula and an engine
reference; policies, precision, -inf handling, input errors, gradients."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mask_examples import VLLM_FIXTURES  # noqa: E402

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import (  # noqa: E402
    full_logprobs,
    masked_entropy,
    masked_logprobs,
    masked_support_logprobs,
    replay_diagnostics,
)

FIXTURE = VLLM_FIXTURES / "topk_topp_case.npz"


# --------------------------------------------------------------------------- references (float64 numpy)
def ref_scores(logits: np.ndarray, rows: list[list[int]], targets, tau) -> tuple[np.ndarray, np.ndarray]:
    """log p and entropy over each row's support, straight from the definition (a loop: tiny sizes)."""
    logits = np.asarray(logits, dtype=np.float64)
    tau = np.broadcast_to(np.asarray(tau, dtype=np.float64), (len(rows),))
    logp = np.full(len(rows), np.nan)
    ent = np.full(len(rows), np.nan)
    for t, support in enumerate(rows):
        support = list(support) if support else list(range(logits.shape[1]))
        u = logits[t, support] / tau[t]
        lse = np.log(np.sum(np.exp(u - u.max()))) + u.max()
        p = np.exp(u - lse)
        ent[t] = -np.sum(p[p > 0] * np.log(p[p > 0]))  # 0 log 0 = 0
        if targets is not None and targets[t] >= 0:
            logp[t] = logits[t, targets[t]] / tau[t] - lse
    return logp, ent


def random_mask(rng: np.random.Generator, num_rows: int, vocab: int, *, empty: int = 0) -> list[list[int]]:
    rows = []
    for t in range(num_rows):
        k = 0 if t < empty else int(rng.integers(1, min(vocab, 9)))
        rows.append(rng.choice(vocab, size=k, replace=False).tolist())
    rng.shuffle(rows)
    return rows


def sampled_from(rng: np.random.Generator, rows: list[list[int]], vocab: int) -> np.ndarray:
    return np.array([rng.choice(r) if r else rng.integers(vocab) for r in rows], dtype=np.int64)


# --------------------------------------------------------------------------- a real engine's data
@pytest.fixture(scope="module")
def vllm_case():
    return dict(np.load(FIXTURE))


def test_vllm_processed_logprobs_reproduced_from_every_mask_form(vllm_case):
    c = vllm_case
    logits = torch.from_numpy(c["logits"])
    expected = torch.from_numpy(c["processed_logprobs_of_sampled"])
    mask = SamplingMask.from_ragged(
        c["csr_token_ids"],
        c["csr_offsets"],
        vocab_size=logits.shape[1],
        sampled_token_ids=c["sampled_token_ids"],
        temperature=c["temperature"],
    )
    assert mask.row_lengths.max() == logits.shape[1]  # one untruncated row: support = whole vocabulary
    forms = {
        "model": mask,
        "ragged": (torch.from_numpy(c["csr_token_ids"]), torch.from_numpy(c["csr_offsets"])),
        "dense": torch.from_numpy(mask.to_dense()),
        "bitmask": SamplingMask.from_bitmask(c["bitmask"], logits.shape[1]),
    }
    for name, form in forms.items():
        kwargs = {} if name == "model" else {"targets": c["sampled_token_ids"], "temperature": c["temperature"]}
        got = masked_logprobs(logits, form, **kwargs)
        torch.testing.assert_close(got.logprobs, expected, rtol=0, atol=2e-6, msg=name)
        assert bool(got.valid.all()) and bool(got.replayed.all())
        assert got.empty_rows == 0 and got.missing_target_rows == 0
    # the compact buffer (-1 past each count) holds the rows that fit its width
    fits = c["compact_counts"] <= c["compact_token_ids"].shape[1]
    compact = masked_logprobs(
        logits[fits],
        torch.from_numpy(c["compact_token_ids"][fits]),
        c["sampled_token_ids"][fits],
        temperature=torch.from_numpy(c["temperature"][fits]),
    )
    torch.testing.assert_close(compact.logprobs, expected[fits], rtol=0, atol=2e-6)
    # replay matters: full-vocabulary log-probs differ on truncated rows
    full = full_logprobs(logits, c["sampled_token_ids"], temperature=c["temperature"]).logprobs
    truncated = torch.from_numpy(mask.row_lengths < logits.shape[1])
    assert bool((full[truncated] < expected[truncated] - 1e-4).all())
    torch.testing.assert_close(full[~truncated], expected[~truncated], rtol=0, atol=2e-6)


# --------------------------------------------------------------------------- float64 formula
@pytest.mark.parametrize("scalar_tau", [True, False])
def test_matches_float64_formula(scalar_tau):
    rng = np.random.default_rng(1)
    num_rows, vocab = 12, 40
    logits = rng.normal(0, 3, (num_rows, vocab))
    rows = random_mask(rng, num_rows, vocab, empty=3)
    targets = sampled_from(rng, rows, vocab)
    tau = 0.7 if scalar_tau else rng.uniform(0.3, 2.0, num_rows)
    want_logp, want_ent = ref_scores(logits, rows, targets, tau)
    mask = SamplingMask.from_rows(rows, vocab_size=vocab)
    got = masked_logprobs(torch.from_numpy(logits), mask, targets, temperature=tau, with_entropy=True)
    assert got.logprobs.dtype == torch.float64
    np.testing.assert_allclose(got.logprobs.numpy(), want_logp, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.entropy.numpy(), want_ent, rtol=1e-12, atol=1e-12)
    ent_only = masked_entropy(torch.from_numpy(logits), mask, temperature=tau)
    assert ent_only.logprobs is None
    np.testing.assert_allclose(ent_only.entropy.numpy(), want_ent, rtol=1e-12, atol=1e-12)
    empty = np.array([not r for r in rows])
    assert got.empty_rows == 3 and not bool(got.replayed[torch.from_numpy(empty)].any())
    # every id of the mask, in the mask's order
    support = masked_support_logprobs(torch.from_numpy(logits), mask, temperature=tau)
    flat_rows = np.repeat(np.arange(num_rows), mask.row_lengths)
    want = [
        ref_scores(logits[[r]], [rows[r]], [i], np.broadcast_to(tau, (num_rows,))[r])[0][0]
        for r, i in zip(flat_rows, mask.ids, strict=True)
    ]
    np.testing.assert_allclose(support.numpy(), want, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- the engine's own view
def engine_processed_logits(logits, tau, top_k, top_p, min_p):
    """Straightforward sampler: temperature, min-p, top-k (ties kept), top-p (smallest prefix reaching
    p, at least one token); filtered logits become -inf."""
    x = logits / tau[:, None]
    probs = torch.softmax(x, dim=-1)
    x = x.masked_fill(probs < min_p[:, None] * probs.max(dim=-1, keepdim=True).values, float("-inf"))
    kth = torch.sort(x, dim=-1, descending=True).values.gather(1, (top_k - 1)[:, None])
    x = x.masked_fill(x < kth, float("-inf"))
    sorted_x, order = torch.sort(x, dim=-1, descending=True)
    sorted_p = torch.softmax(sorted_x, dim=-1)
    before = torch.cumsum(sorted_p, dim=-1) - sorted_p  # probability mass strictly before each token
    drop_sorted = before >= top_p[:, None]
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return x.masked_fill(drop, float("-inf"))


def test_engine_view_topk_topp_minp():
    gen = torch.Generator().manual_seed(7)
    num_rows, vocab = 32, 300
    logits = torch.randn(num_rows, vocab, generator=gen) * 2.5
    tau = torch.rand(num_rows, generator=gen) * 1.5 + 0.3
    top_k = torch.randint(1, 80, (num_rows,), generator=gen)
    top_k[::5] = vocab  # some rows top-p / min-p only
    top_p = torch.rand(num_rows, generator=gen) * 0.6 + 0.4
    top_p[1::7] = 1.0
    min_p = torch.where(torch.rand(num_rows, generator=gen) < 0.5, torch.rand(num_rows, generator=gen) * 0.2, 0.0)
    processed = engine_processed_logits(logits, tau, top_k, top_p, min_p)
    engine_logp = torch.log_softmax(processed, dim=-1)
    survives = torch.isfinite(processed)
    counts = survives.sum(dim=1)
    assert int(counts.min()) >= 1 and (counts == 1).any() and (counts > 40).any()
    rows, ids = torch.nonzero(survives, as_tuple=True)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    sampled = torch.multinomial(torch.softmax(processed, -1), 1, generator=gen).reshape(-1)
    mask = SamplingMask.from_ragged(ids.numpy().astype(np.int32), offsets.numpy(), vocab_size=vocab)
    ours = masked_support_logprobs(logits, mask, temperature=tau)
    torch.testing.assert_close(ours, engine_logp[rows, ids], rtol=1e-6, atol=1e-6)  # 1e-6, fp32 ulps at |x| > 8
    got = masked_logprobs(logits, (ids, offsets), sampled, temperature=tau, with_entropy=True)
    torch.testing.assert_close(got.logprobs, engine_logp.gather(1, sampled[:, None])[:, 0], rtol=1e-6, atol=1e-6)
    p = torch.exp(engine_logp)
    engine_entropy = -torch.where(survives, p * engine_logp, torch.zeros_like(p)).sum(-1)
    torch.testing.assert_close(got.entropy, engine_entropy, rtol=0, atol=1e-5)


# --------------------------------------------------------------------------- policies
def _policy_case():
    rng = np.random.default_rng(3)
    vocab = 20
    rows = [[1, 2, 3], [], [4], [5, 6], [], [7, 8, 9, 10]]
    targets = np.array([2, 11, 4, 9, -1, 12])  # row 3 and row 5: target outside the support
    logits = rng.normal(0, 2, (len(rows), vocab))
    return logits, SamplingMask.from_rows(rows, vocab_size=vocab), rows, targets


def test_missing_target_error_names_the_row():
    logits, mask, _, targets = _policy_case()
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(torch.from_numpy(logits), mask, targets)
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 3 and err.value.value == 9


@pytest.mark.parametrize("empty_rows", ["full", "exclude"])
@pytest.mark.parametrize("missing_target", ["full", "neg_inf"])
def test_policies(empty_rows, missing_target):
    logits, mask, rows, targets = _policy_case()
    got = masked_logprobs(
        torch.from_numpy(logits),
        mask,
        targets,
        empty_rows=empty_rows,
        missing_target=missing_target,
        with_entropy=True,
    )
    support_logp, support_ent = ref_scores(logits, rows, targets, 1.0)
    full_logp, full_ent = ref_scores(logits, [[]] * len(rows), targets, 1.0)
    lp, ent = got.logprobs.numpy(), got.entropy.numpy()
    np.testing.assert_allclose(lp[[0, 2]], support_logp[[0, 2]], rtol=1e-12)
    np.testing.assert_allclose(ent[[0, 2]], support_ent[[0, 2]], rtol=1e-12)
    # row 1: empty with a target; row 4: empty without one (never scored)
    assert np.isnan(lp[4]) and not bool(got.valid[4])
    if empty_rows == "full":
        np.testing.assert_allclose(lp[1], full_logp[1], rtol=1e-12)
        np.testing.assert_allclose(ent[1], full_ent[1], rtol=1e-12)
        assert bool(got.valid[1]) and not bool(got.replayed[1])
    else:
        assert np.isnan(lp[1]) and np.isnan(ent[1]) and not bool(got.valid[1])
    assert got.empty_rows == 2 and got.no_target_rows == 1  # rows 1 and 4 are empty; row 4 has no target
    assert got.empty_rows_full_vocab == (1 if empty_rows == "full" else 0)
    if missing_target == "full":
        np.testing.assert_allclose(lp[[3, 5]], full_logp[[3, 5]], rtol=1e-12)
        np.testing.assert_allclose(ent[[3, 5]], full_ent[[3, 5]], rtol=1e-12)
        assert not bool(got.replayed[3])
    else:
        assert np.all(np.isneginf(lp[[3, 5]])) and bool(got.valid[3]) and bool(got.replayed[3])
        np.testing.assert_allclose(ent[[3, 5]], support_ent[[3, 5]], rtol=1e-12)
    assert got.missing_target_rows == 2


def test_row_counters_say_what_happened():
    """Every empty row counts in ``empty_rows``, with a target or without one; ``empty_rows_full_vocab``
    and ``no_target_rows`` say how each was scored."""
    logits = torch.from_numpy(np.random.default_rng(4).normal(0, 1, (7, 12)))
    mask = SamplingMask.from_rows([[1, 2], [], [], [3], [], [4, 5], [6]], vocab_size=12)
    targets = np.array([2, -1, -1, 9, 11, -100, 6])  # rows 1, 2 empty without a target; row 5 ignore_index
    got = masked_logprobs(logits, mask, targets, missing_target="full")
    assert (got.empty_rows, got.empty_rows_full_vocab, got.no_target_rows, got.missing_target_rows) == (3, 1, 3, 1)
    assert got.valid.tolist() == [True, False, False, True, True, False, True]
    assert got.replayed.tolist() == [True, False, False, False, False, False, True]
    excluded = masked_logprobs(logits, mask, targets, missing_target="neg_inf", empty_rows="exclude")
    assert (excluded.empty_rows, excluded.empty_rows_full_vocab, excluded.no_target_rows) == (3, 0, 3)
    entropy = masked_entropy(logits, mask)  # no targets: every empty row scored over the vocabulary
    assert (entropy.empty_rows, entropy.empty_rows_full_vocab, entropy.no_target_rows) == (3, 3, 0)
    full = full_logprobs(logits, targets)  # no mask: no row is "empty"
    assert (full.empty_rows, full.empty_rows_full_vocab, full.no_target_rows) == (0, 0, 3)


@pytest.mark.parametrize("tau", [0.7, 2, np.float64(0.7), torch.tensor(0.7)])
def test_scalar_temperature_companion(tau):
    """The temperature companion takes a scalar wherever the scorer's ``temperature=`` does."""
    rows = [[1, 2], [3], [0, 4, 5]]
    logits = torch.from_numpy(np.random.default_rng(5).normal(0, 2, (3, 6)))
    want = masked_logprobs(
        logits, (torch.tensor([1, 2, 3, 0, 4, 5]), torch.tensor([0, 2, 3, 6])), [2, 3, 5], temperature=tau
    )
    built = [
        SamplingMask.from_rows(rows, vocab_size=6, sampled_token_ids=[2, 3, 5], temperature=tau),
        SamplingMask.from_ragged([1, 2, 3, 0, 4, 5], [0, 2, 3, 6], sampled_token_ids=[2, 3, 5], temperature=tau),
        SamplingMask.from_counts([1, 2, 3, 0, 4, 5], [2, 1, 3], sampled_token_ids=[2, 3, 5], temperature=tau),
        SamplingMask.from_rows(rows, sampled_token_ids=[2, 3, 5]).replace(temperature=tau),
    ]
    for mask in built:
        assert mask.temperature.shape == (3,) and np.allclose(mask.temperature, float(tau))
        got = masked_logprobs(logits, mask)  # temperature from the companion
        torch.testing.assert_close(got.logprobs, want.logprobs, rtol=1e-6, atol=1e-6)
    for bad, code in ((True, ErrorCode.E_DTYPE), ("0.7", ErrorCode.E_DTYPE), (0.0, ErrorCode.E_RANGE)):
        with pytest.raises(SamplingMaskError) as err:
            SamplingMask.from_rows(rows, temperature=bad)
        assert err.value.code is code and err.value.field == "temperature"


def test_bad_policy_and_targets_rejected():
    logits, mask, _, targets = _policy_case()
    z = torch.from_numpy(logits)
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(z, mask, targets, empty_rows="drop")
    assert err.value.code is ErrorCode.E_SCHEMA
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(z, mask)  # no targets anywhere
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "targets"
    bad = targets.copy()
    bad[0] = -1  # -1 is allowed on empty rows only
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(z, mask, bad, missing_target="full")
    assert err.value.code is ErrorCode.E_RANGE and err.value.row == 0
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(z, mask, targets[:-1], missing_target="full")
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs(z, mask, targets, missing_target="full", temperature=np.array([1, 1, 0.0, 1, 1, 1]))
    assert err.value.code is ErrorCode.E_RANGE and err.value.row == 2


def test_mask_input_errors_name_the_row():
    z = torch.zeros(3, 10)
    cases = [
        (torch.tensor([[1, -1, 2], [0, -1, -1], [3, -1, -1]]), ErrorCode.E_PADDING, 0),
        (torch.tensor([[1, 2], [0, -2], [3, -1]]), ErrorCode.E_RANGE, 1),
        (torch.tensor([[1, 2], [0, 10], [3, -1]]), ErrorCode.E_RANGE, 1),
        (torch.tensor([[1, 2], [0, 1], [3, 3]]), ErrorCode.E_DUPLICATE, 2),
        ((torch.tensor([1, 2, 2]), torch.tensor([0, 1, 1, 3])), ErrorCode.E_DUPLICATE, 2),
        ((torch.tensor([1, 2, 2]), torch.tensor([0, 2, 1, 3])), ErrorCode.E_OFFSETS, 1),
        ((torch.tensor([1, 2, 2]), torch.tensor([0, 1, 3])), ErrorCode.E_SHAPE, None),
        (torch.tensor([[1, 2], [0, 1]]), ErrorCode.E_SHAPE, None),
        (SamplingMask.from_rows([[1], [2], [11]]), ErrorCode.E_RANGE, 2),
        (torch.tensor([[1.0], [2.0], [3.0]]), ErrorCode.E_DTYPE, None),
    ]
    for form, code, row in cases:
        with pytest.raises(SamplingMaskError) as err:
            masked_entropy(z, form)
        assert err.value.code is code and err.value.row == row, (form, err.value)
    with pytest.raises(SamplingMaskError) as err:
        masked_entropy(torch.zeros(3, 10, dtype=torch.int64), SamplingMask.from_rows([[1], [2], [3]]))
    assert err.value.code is ErrorCode.E_DTYPE


def test_dense_width_and_numpy_inputs():
    rng = np.random.default_rng(5)
    logits = torch.from_numpy(rng.normal(size=(6, 30)))
    rows = random_mask(rng, 6, 30, empty=1)
    targets = sampled_from(rng, rows, 30)
    mask = SamplingMask.from_rows(rows, vocab_size=30, sampled_token_ids=np.where([bool(r) for r in rows], targets, -1))
    base = masked_logprobs(logits, mask, empty_rows="exclude").logprobs
    for width in (mask.to_dense().shape[1], 12):
        dense = mask.to_dense(width)
        for form in (dense, torch.from_numpy(dense)):
            got = masked_logprobs(logits, form, targets, empty_rows="exclude").logprobs
            torch.testing.assert_close(got, base, equal_nan=True, rtol=0, atol=0)


# --------------------------------------------------------------------------- precision and -inf
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_accumulates_in_fp32(dtype):
    rng = np.random.default_rng(11)
    num_rows, vocab = 10, 64
    low = torch.from_numpy(rng.normal(0, 4, (num_rows, vocab))).to(dtype)
    rows = random_mask(rng, num_rows, vocab, empty=2)
    targets = sampled_from(rng, rows, vocab)
    want_logp, want_ent = ref_scores(low.double().numpy(), rows, targets, 0.8)  # same rounded inputs
    logits = low.clone().requires_grad_()
    got = masked_logprobs(logits, SamplingMask.from_rows(rows), targets, temperature=0.8, with_entropy=True)
    assert got.logprobs.dtype == torch.float32
    np.testing.assert_allclose(got.logprobs.detach().numpy(), want_logp, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got.entropy.detach().numpy(), want_ent, rtol=2e-6, atol=2e-6)
    (got.logprobs.sum() + got.entropy.sum()).backward()
    assert logits.grad.dtype == dtype and bool(torch.isfinite(logits.grad.float()).all())


def test_neg_inf_logits_give_zero_probability_and_finite_gradients():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(5, 12))
    base[0, [3, 5]] = -np.inf  # inside row 0's support, not its target
    base[1, :] = -np.inf
    base[1, 7] = 0.5  # row 1 is empty: full-vocabulary row with -inf entries
    base[2, 4] = -np.inf  # row 2's target is -inf: log-prob -inf
    base[3, [1, 2]] = -np.inf  # row 3: whole support -inf, no distribution
    rows = [[3, 5, 6, 8], [], [4, 9], [1, 2], [0, 11]]
    targets = np.array([6, 7, 4, 1, 11])
    logits = torch.from_numpy(base).requires_grad_()
    got = masked_logprobs(logits, SamplingMask.from_rows(rows), targets, with_entropy=True)
    lp, ent = got.logprobs.detach().numpy(), got.entropy.detach().numpy()
    finite_rows = [0, 1, 4]
    want_logp, want_ent = ref_scores(np.where(np.isinf(base), -1e300, base), rows, targets, 1.0)
    np.testing.assert_allclose(lp[finite_rows], want_logp[finite_rows], rtol=1e-12)
    np.testing.assert_allclose(ent[finite_rows], want_ent[finite_rows], rtol=1e-12, atol=1e-300)
    assert lp[1] == 0.0 and ent[1] == 0.0  # one finite logit in the whole row
    assert np.isneginf(lp[2]) and np.isfinite(ent[2])
    assert np.isnan(lp[3]) and not bool(got.valid[3])
    loss = (
        torch.where(got.valid & torch.isfinite(got.logprobs), got.logprobs, 0).sum()
        + torch.nan_to_num(got.entropy).sum()
    )
    loss.backward()
    assert bool(torch.isfinite(logits.grad).all())
    assert float(logits.grad[0, 3]) == 0.0 and float(logits.grad[0, 0]) == 0.0  # -inf, and outside the support


def test_gradcheck_logits_path():
    rng = np.random.default_rng(4)
    rows = [[0, 2, 5], [], [1], [3, 4, 6, 7], [2, 6]]
    targets = np.array([5, 3, 1, 0, 2])  # row 3 misses its target (full), row 1 is empty (full)
    tau = torch.tensor([0.5, 1.0, 2.0, 0.9, 1.3], dtype=torch.float64)
    logits = torch.from_numpy(rng.normal(size=(5, 8))).requires_grad_()
    mask = SamplingMask.from_rows(rows)

    def fn(z):
        got = masked_logprobs(z, mask, targets, temperature=tau, missing_target="full", with_entropy=True, chunk_size=3)
        return got.logprobs, got.entropy

    assert torch.autograd.gradcheck(fn, (logits,))

    def support(z):
        return masked_support_logprobs(z, mask, temperature=tau)

    assert torch.autograd.gradcheck(support, (logits,))


# --------------------------------------------------------------------------- diagnostics
def test_replay_diagnostics_against_formula():
    rng = np.random.default_rng(8)
    logits, mask, rows, targets = _policy_case()
    got = masked_logprobs(torch.from_numpy(logits), mask, targets, missing_target="full")
    rollout = rng.normal(-2, 1, len(rows))
    rollout[0] = np.nan  # not reported by the engine: not compared
    loss_mask = np.array([1, 1, 1, 1, 1, 0])
    diag = replay_diagnostics(got, rollout, loss_mask=loss_mask)
    p = got.logprobs.numpy()
    use = np.array([False, True, True, True, False, False])  # row 4 has no value, row 5 is masked out
    log_r = p[use] - rollout[use]
    np.testing.assert_allclose(diag.log_ratio.numpy()[use], log_r, rtol=1e-12)
    np.testing.assert_allclose(diag.importance_ratio.numpy()[use], np.exp(log_r), rtol=1e-12)
    assert np.all(np.isnan(diag.importance_ratio.numpy()[~use]))
    np.testing.assert_allclose(float(diag.kl_k1), np.mean(-log_r), rtol=1e-12)
    np.testing.assert_allclose(float(diag.kl_k3), np.mean(np.exp(log_r) - 1 - log_r), rtol=1e-12)
    assert float(diag.kl_k3) >= 0 and int(diag.rows_compared) == 3
    replayed = got.replayed.numpy()
    np.testing.assert_allclose(float(diag.fraction_replayed), replayed[loss_mask == 1].mean())
    plain = replay_diagnostics(got.logprobs, rollout, replayed=got.replayed)
    assert int(plain.rows_compared) == 4  # row 4 is NaN: not finite, not compared


def test_all_empty_and_zero_rows():
    z = torch.randn(3, 7, dtype=torch.float64)
    got = masked_logprobs(z, SamplingMask.from_rows([[], [], []]), [1, 2, 3], with_entropy=True)
    torch.testing.assert_close(got.logprobs, torch.log_softmax(z, -1)[[0, 1, 2], [1, 2, 3]])
    assert got.empty_rows == 3 and not bool(got.replayed.any())
    none = masked_logprobs(torch.zeros(0, 7), SamplingMask.from_rows([]), np.zeros(0, np.int64))
    assert none.logprobs.shape == (0,)


def test_companions_passed_back_in_raise_no_torch_warning() -> None:
    """A mask's companions are read-only arrays: handing them to the scorer again (rollout
    log-probs to ``replay_diagnostics``, temperatures to ``temperature=``) warns about nothing."""
    import warnings

    from sampling_mask.reference_scorer import replay_diagnostics

    mask = SamplingMask.from_rows(
        [[1, 2], [3]], vocab_size=5, sampled_token_ids=[1, 3], sampled_logprobs=[-0.1, 0.0], temperature=[0.5, 1.0]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = masked_logprobs(torch.randn(2, 5), mask, temperature=mask.companions["temperature"])
        diag = replay_diagnostics(out, mask.companions["sampled_logprobs"])
    assert torch.isfinite(diag.importance_ratio).all()
