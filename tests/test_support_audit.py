"""The mask audit: planted faults are found, engine-made masks are clean, the mismatch splits exactly."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sampling_mask as sm  # noqa: E402
from sampling_mask.reference_scorer import audit, audit_from_hidden, support_from_logits  # noqa: E402


def _logits(rows=12, vocab=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, vocab, generator=g) * 3
    z[3] = z[3] * 0.05  # row 3: flat (top-p keeps more than top_k), a tie at the 4th value
    order = torch.argsort(z[3], descending=True)
    z[3, order[4]] = z[3, order[3]]
    return z


PARAMS = {"temperature": 0.8, "top_k": 4, "top_p": 0.95}


def _engine_mask(z, sampled=None, **extra):
    mask = support_from_logits(z, rule="vllm", **PARAMS)
    rows = mask.to_rows()
    if sampled is None:
        sampled = [r[0] for r in rows]
    return sm.SamplingMask.from_rows(rows, vocab_size=z.shape[1], sampled_token_ids=sampled, **extra), rows


def test_engine_made_mask_is_clean():
    z = _logits()
    mask, rows = _engine_mask(z)
    assert len(rows[3]) == 5  # the tie widened row 3 beyond top_k
    report = audit(mask, z, rule="vllm", **PARAMS)
    s = report.summary()
    assert s["rows_compared"] == 12 and s["rows_equal"] == 12
    assert s["missing_ids"] == s["extra_ids"] == 0 and s["rows_sampled_not_in_recorded"] == 0
    assert s["mean_jaccard"] == 1.0 and np.allclose(report.recorded_mass, 1.0)
    assert s["rows_recorded_wider_than_top_k"] == 1 and report.recorded_wider_than_top_k[3]
    assert np.allclose(report.replay_logprobs, report.recomputed_logprobs)


def test_planted_faults_are_found():
    z = _logits()
    mask, rows = _engine_mask(z)
    sampled = list(mask.sampled_token_ids)
    bad = [list(r) for r in rows]
    dropped = bad[1].pop(bad[1].index(sampled[1]))  # row 1: the sampled id dropped
    sampled[1] = dropped
    bad[3] = bad[3][:4]  # row 3: the tie truncated to top_k ids
    extra_id = next(i for i in range(40) if i not in bad[6])
    bad[6].append(extra_id)  # row 6: an id the sampler never kept
    recorded = sm.SamplingMask.from_rows(bad, vocab_size=40)
    report = audit(recorded, z, rule="vllm", sampled=sampled, **PARAMS)
    s = report.summary()
    assert s["rows_equal"] == 9 and s["rows_missing_ids"] == 2 and s["rows_extra_ids"] == 1
    assert report.missing.to_rows()[1] == [dropped]
    assert len(report.missing.to_rows()[3]) == 1 and report.recomputed_wider_than_top_k[3]
    assert not report.recorded_wider_than_top_k[3]
    assert report.extra.to_rows()[6] == [extra_id]
    assert s["rows_sampled_not_in_recorded"] == 1 and not report.sampled_in_recorded[1]
    assert report.sampled_in_recomputed[1]
    assert report.recorded_mass[1] < 1 and report.recorded_mass[3] < 1 and report.recorded_mass[6] == pytest.approx(1)
    assert report.jaccard[6] == pytest.approx(len(rows[6]) / (len(rows[6]) + 1))
    assert np.isneginf(report.replay_logprobs[1])


def test_mismatch_splits_into_support_and_drift():
    z = _logits()
    mask, _ = _engine_mask(z)
    clean = audit(mask, z, rule="vllm", **PARAMS)
    drift = 0.01 * torch.randn(z.shape, generator=torch.Generator().manual_seed(1))
    rollout = clean.replay_logprobs + 0.0  # the engine's own replayed log-probs on z
    report = audit(mask, z + drift, rule="vllm", rollout_logprobs=rollout, **PARAMS)
    total = report.full_logprobs - report.rollout_logprobs
    assert np.allclose(report.support_part + report.drift_part, total)
    mass = np.exp(report.full_logprobs - report.replay_logprobs)  # support part = log mass of S
    assert np.all(mass <= 1 + 1e-6) and np.all(report.support_part <= 1e-6)
    assert np.abs(report.drift_part).max() < 0.2 and np.abs(report.drift_part).max() > 0
    no_drift = audit(mask, z, rule="vllm", rollout_logprobs=rollout, **PARAMS)
    assert np.allclose(no_drift.drift_part, 0, atol=1e-5)
    m = no_drift.summary()["mismatch"]
    assert m["mean_support_part"] < -1e-3 and abs(m["mean_drift_part"]) < 1e-5


def test_companions_are_defaults_and_empty_rows_are_skipped():
    z = _logits()
    mask, rows = _engine_mask(z)
    rows[5] = []
    sampled = [r[0] if r else -1 for r in rows]
    recorded = sm.SamplingMask.from_rows(rows, vocab_size=40, sampled_token_ids=sampled, temperature=[0.8] * 12)
    report = audit(recorded, z, rule="vllm", top_k=4, top_p=0.95)
    assert not report.compared[5] and report.summary()["rows_compared"] == 11
    assert report.summary()["rows_equal"] == 11 and np.isnan(report.jaccard[5])


def test_hidden_states_match_logits_and_stay_chunked(monkeypatch):
    import importlib

    audit_module = importlib.import_module("sampling_mask.reference_scorer.support_audit")
    monkeypatch.setattr(audit_module, "_VOCAB_TILE", 7)  # several vocabulary tiles per block
    g = torch.Generator().manual_seed(2)
    hidden, weight, bias = (
        torch.randn(10, 6, generator=g),
        torch.randn(50, 6, generator=g),
        torch.randn(50, generator=g),
    )
    z = hidden @ weight.T + bias
    mask = support_from_logits(z, rule="hf", top_p=0.9, min_p=0.05)
    from_logits = audit(mask, z, rule="hf", top_p=0.9, min_p=0.05, sampled=mask.ids[mask.offsets[:-1]])
    from_hidden = audit_from_hidden(
        mask,
        hidden,
        weight,
        bias=bias,
        rule="hf",
        top_p=0.9,
        min_p=0.05,
        sampled=mask.ids[mask.offsets[:-1]],
        chunk_rows=3,
    )
    assert from_hidden.summary()["rows_equal"] == 10
    assert np.allclose(from_hidden.full_logprobs, from_logits.full_logprobs, atol=1e-5)
    assert np.array_equal(from_hidden.recomputed_size, from_logits.recomputed_size)


def test_audit_errors():
    z = _logits()
    mask, _ = _engine_mask(z)
    with pytest.raises(sm.SamplingMaskError) as err:
        audit(mask, z[:5], **PARAMS)
    assert err.value.code == "E_SHAPE"
    with pytest.raises(sm.SamplingMaskError) as err:
        audit(mask, z, sampled=[99] * 12, **PARAMS)
    assert err.value.code == "E_RANGE" and err.value.row == 0
    with pytest.raises(sm.SamplingMaskError) as err:
        audit(mask, z[:, :10], **PARAMS)
    assert err.value.code == "E_RANGE"
    with pytest.raises(sm.SamplingMaskError) as err:
        audit_from_hidden(mask, torch.zeros(12, 3), torch.zeros(40, 4))
    assert err.value.code == "E_SHAPE"


def test_hidden_states_bf16_are_widened_to_fp32():
    g = torch.Generator().manual_seed(4)
    hidden, weight = torch.randn(5, 8, generator=g).bfloat16(), torch.randn(30, 8, generator=g).bfloat16()
    z = hidden.float() @ weight.float().T
    mask = support_from_logits(z, rule="sglang", top_k=3)
    report = audit_from_hidden(mask, hidden, weight, rule="sglang", top_k=3, sampled=mask.ids[mask.offsets[:-1]])
    assert report.summary()["rows_equal"] == 5 and np.all(np.isfinite(report.full_logprobs))
