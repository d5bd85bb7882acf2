"""The calibrated synthetic workload (sampling_mask.data.synthetic)."""

from __future__ import annotations

import numpy as np
import pytest

from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.data.synthetic import TARGETS, rollout, support_stats


@pytest.fixture(scope="module")
def calibrated() -> SamplingMask:
    return rollout(20_000, seed=7)


def test_support_sizes_land_near_the_measured_targets(calibrated: SamplingMask) -> None:
    stats = support_stats(calibrated)
    assert abs(stats["singleton_fraction"] - TARGETS["singleton_fraction"]) < 0.02
    assert stats["median"] == TARGETS["median"]
    assert abs(stats["mean"] - TARGETS["mean"]) < 0.8
    assert abs(stats["p99"] - TARGETS["p99"]) < 12
    assert stats["max"] <= 512 and stats["empty_rows"] == 0


def test_rollout_is_valid_and_carries_its_companions(calibrated: SamplingMask) -> None:
    m = calibrated
    m.validate()  # ids in range, no duplicates, sampled id inside every row, temperature > 0
    assert m.num_rows == 20_000 and m.vocab_size == 151936 and m.is_canonical
    assert m.num_segments > 1 and m.cu_seqlens[-1] == m.num_rows
    assert m.sampled_logprobs is not None and m.temperature is not None
    assert np.all(m.sampled_logprobs <= 0) and np.all(np.isfinite(m.sampled_logprobs))
    singletons = m.row_lengths == 1
    assert np.allclose(m.sampled_logprobs[singletons], 0.0)  # renormalized over a one-id support
    assert m.metadata["top_k"] == 512 and m.metadata["top_p"] == 0.95


def test_same_seed_same_mask_other_seed_other_mask() -> None:
    a, b, c = rollout(3000, seed=1), rollout(3000, seed=1), rollout(3000, seed=2)
    assert a == b and np.array_equal(a.ids, b.ids) and np.array_equal(a.sampled_logprobs, b.sampled_logprobs)
    assert a != c


def test_zipf_ids_are_skewed_and_uniform_ids_are_not() -> None:
    zipf = rollout(5000, seed=3, ids="zipf").ids
    uniform = rollout(5000, seed=3, ids="uniform").ids
    vocab = 151936
    # Zipf: a few frequent tokens recur across rows; uniform: almost every id is seen once or twice.
    top_zipf = np.sort(np.bincount(zipf, minlength=vocab))[::-1]
    top_uniform = np.sort(np.bincount(uniform, minlength=vocab))[::-1]
    assert top_zipf[:100].sum() > 0.1 * zipf.size
    assert top_uniform[:100].sum() < 0.01 * uniform.size
    assert np.unique(zipf).size < 0.8 * np.unique(uniform).size
    # Ids themselves span the vocabulary in both cases (frequency is not id order).
    assert abs(np.median(zipf) - vocab / 2) < vocab / 10
    assert abs(np.median(uniform) - vocab / 2) < vocab / 20


def test_support_logprobs_are_a_log_softmax_over_each_row() -> None:
    m = rollout(2000, seed=4, support_logprobs=True, temperature=[0.7, 1.0])
    m.validate()
    lengths = m.row_lengths
    mass = np.add.reduceat(np.exp(m.support_logprobs.astype(np.float64)), m.offsets[:-1])
    assert np.allclose(mass, 1.0, atol=1e-5)
    hit = np.flatnonzero(m.ids == np.repeat(m.sampled_token_ids, lengths))
    assert hit.size == m.num_rows  # exactly one position per row holds the sampled id
    assert np.allclose(m.support_logprobs[hit], m.sampled_logprobs)
    # Temperature is constant within a segment and drawn from the given choices.
    temps = m.temperature
    assert set(np.unique(temps).tolist()) <= {np.float32(0.7), np.float32(1.0)}
    for b in range(m.num_segments):
        seg = temps[m.cu_seqlens[b] : m.cu_seqlens[b + 1]]
        assert seg.size == 0 or np.all(seg == seg[0])


def test_rank_order_is_by_decreasing_probability() -> None:
    m = rollout(2000, seed=5, order="rank", support_logprobs=True)
    steps = np.diff(m.support_logprobs)
    same_row = np.diff(np.repeat(np.arange(m.num_rows), m.row_lengths)) == 0
    assert np.all(steps[same_row] <= 1e-6)
    assert m == rollout(2000, seed=5, support_logprobs=True)  # same sets as the ascending version


def test_sampler_settings_move_the_support_the_right_way() -> None:
    base = support_stats(rollout(5000, seed=6))
    cold = support_stats(rollout(5000, seed=6, temperature=0.5))
    hot = support_stats(rollout(5000, seed=6, temperature=1.5))
    assert cold["mean"] < base["mean"] < hot["mean"]
    assert support_stats(rollout(2000, seed=6, top_k=20))["max"] <= 20
    full = rollout(500, seed=6, top_k=20, top_p=1.0)
    assert np.all(full.row_lengths == 20)
    wide = support_stats(rollout(100, seed=6, top_k=4096, temperature=3.0))  # top-p-only-like supports
    assert wide["median"] > 1000


def test_small_vocabularies_and_zero_tokens() -> None:
    m = rollout(500, seed=8, vocab_size=30, top_k=30, top_p=1.0)
    m.validate()
    assert np.all(m.row_lengths == 30) and np.all(m.ids < 30)
    empty = rollout(0)
    assert empty.num_rows == 0 and empty.nnz == 0
    assert support_stats(empty)["mean"] == 0.0


def test_segment_lengths_sum_to_the_rows() -> None:
    m = rollout(10_000, seed=9, segment_length=200.0)
    lengths = np.diff(m.cu_seqlens)
    assert lengths.sum() == 10_000 and lengths.min() >= 1
    assert 20 < m.num_segments < 200


@pytest.mark.parametrize(
    "kwargs", [{"top_p": 0.0}, {"top_k": 0}, {"ids": "gauss"}, {"temperature": 0.0}, {"top_k": 1 << 15}]
)
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(SamplingMaskError):
        rollout(10, **kwargs)  # type: ignore[arg-type]
