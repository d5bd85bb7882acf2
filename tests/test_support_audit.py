"""The mask audit: planted faults are found, engine-made masks are clean, the mismatch splits exactly,
and the audit names engine behaviours, checked on supports upstream code produced.

``tests/fixtures/upstream/engine_behaviours/`` (``make_engine_behaviours.py``): vLLM 0.32.0's own
``_min_p_kernel`` and ``_topk_topp_kernel`` run by Triton's interpreter, and SkyRL's
``_sample_support_from_flat_logprobs`` (NovaSky-AI/SkyRL#2237 = #2082 @ 9a8327d7) on rows whose
sampled id is missing from the listed top-k.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sampling_mask as sm  # noqa: E402
from sampling_mask.cli import main  # noqa: E402
from sampling_mask.core.errors import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.reference_scorer import ROW_CLASSES, audit, audit_from_hidden, support_from_logits  # noqa: E402


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


# ---------------------------------------------------------------------------------------------- engine behaviours
FIXTURE = Path(__file__).parent / "fixtures" / "upstream" / "engine_behaviours" / "engine_behaviours.npz"
VLLM_CONFIGS = ("min_p+top_p", "min_p+top_p_spread", "top_k+top_p", "top_p")


@pytest.fixture(scope="module")
def data():
    with np.load(FIXTURE) as npz:
        return {k: npz[k] for k in npz.files}


def _vllm_case(data, name):
    def get(key):
        return data[f"vllm/{name}/{key}"]

    logits = torch.from_numpy(get("logits"))
    params = {"top_k": int(get("top_k")), "top_p": float(get("top_p")), "min_p": float(get("min_p")) or None}
    kernel = sm.SamplingMask.from_rows([np.flatnonzero(r).tolist() for r in get("kernel_support")], vocab_size=64)
    return logits, params, kernel


@pytest.mark.parametrize("name", VLLM_CONFIGS)
def test_vllm_triton_rule_is_the_kernel(data, name):
    logits, params, kernel = _vllm_case(data, name)
    assert support_from_logits(logits, rule="vllm-triton", **params).to_rows() == kernel.to_rows()


def test_kernel_rows_differ_from_the_pytorch_path_by_the_least_likely_id(data):
    logits, params, kernel = _vllm_case(data, "min_p+top_p")
    pytorch_rows = support_from_logits(logits, rule="vllm", **params).to_rows()
    differing = [t for t, (a, b) in enumerate(zip(pytorch_rows, kernel.to_rows(), strict=True)) if a != b]
    assert len(differing) == kernel.num_rows  # every row of this config hits the case
    for t in differing:
        dropped = set(pytorch_rows[t]) - set(kernel.row(t).tolist())
        least = min(pytorch_rows[t], key=lambda i: float(logits[t, i]))
        assert dropped == {least} and set(kernel.row(t).tolist()) < set(pytorch_rows[t])


@pytest.mark.parametrize("name", VLLM_CONFIGS)
def test_audit_names_the_kernel_case(data, name):
    logits, params, kernel = _vllm_case(data, name)
    report = audit(kernel, logits, rule="vllm", **params)
    pytorch_rows = support_from_logits(logits, rule="vllm", **params).to_rows()
    expected = [t for t in range(kernel.num_rows) if pytorch_rows[t] != kernel.row(t).tolist()]
    assert report.rows_of_class("vllm_triton_top_p_drop").tolist() == expected
    assert report.rows_of_class("other").size == 0
    classes = report.summary()["row_classes"]
    assert classes["vllm_triton_top_p_drop"] + classes["equal"] == kernel.num_rows
    exact = audit(kernel, logits, rule="vllm-triton", **params).summary()
    assert exact["rows_equal"] == kernel.num_rows and exact["row_classes"]["vllm_triton_top_p_drop"] == 0


def test_audit_names_skyrl_forced_sampled_id(data):
    logits = torch.from_numpy(data["skyrl/logits"])
    sampled = data["skyrl/sampled"]
    rows = [[int(i) for i in r if i >= 0] for r in data["skyrl/support_ids"]]
    assert all(int(y) in r for y, r in zip(sampled, rows, strict=True))  # SkyRL forced each one in
    mask = sm.SamplingMask.from_rows(rows, vocab_size=64, sampled_token_ids=sampled)
    kept = int(data["skyrl/kept"])  # the sampler kept the top `kept` ids
    report = audit(mask, logits, rule="vllm", top_k=kept)
    assert report.rows_of_class("sampled_forced_in").tolist() == list(range(len(rows)))
    # Without the sampled ids the same rows are unexplained differences.
    blind = audit(mask.replace(sampled_token_ids=None), logits, rule="vllm", top_k=kept)
    assert blind.rows_of_class("other").size == len(rows)


def test_caps_name_cut_and_empty_rows():
    logits = torch.zeros(4, 32)  # no truncation: every id kept, all tied
    rows = [list(range(8)), [], list(range(32)), [3, 5]]
    mask = sm.SamplingMask.from_rows(rows, vocab_size=32)
    report = audit(mask, logits, rule="vllm", caps=(8,))
    assert [ROW_CLASSES[c] for c in report.row_class] == ["cut_at_cap", "empty_over_cap", "equal", "other"]
    default = audit(mask, logits, rule="vllm")  # 512 / 2048 / 4096: wider than this vocabulary
    assert [ROW_CLASSES[c] for c in default.row_class] == ["other", "not_compared", "equal", "other"]


@pytest.mark.parametrize("caps", [(0,), (True,), "512", (1.5,)])
def test_bad_caps_refused(caps):
    mask = sm.SamplingMask.from_rows([[0]], vocab_size=4)
    with pytest.raises(SamplingMaskError) as info:
        audit(mask, torch.zeros(1, 4), caps=caps)
    assert info.value.code is ErrorCode.E_RANGE and info.value.field == "caps"


def test_rows_of_unknown_class_refused():
    report = audit(sm.SamplingMask.from_rows([[0]], vocab_size=4), torch.zeros(1, 4))
    with pytest.raises(SamplingMaskError) as info:
        report.rows_of_class("kernel")
    assert info.value.code is ErrorCode.E_SCHEMA


def test_cli_report_names_the_kernel_case(data, tmp_path, capsys):
    logits, params, kernel = _vllm_case(data, "min_p+top_p")
    sm.save(kernel.replace(metadata={"top_p": params["top_p"], "min_p": params["min_p"]}), tmp_path / "m.json")
    np.save(tmp_path / "logits.npy", logits.numpy())
    args = ["audit", str(tmp_path / "m.json"), "--logits", str(tmp_path / "logits.npy")]
    assert main(args) == 1
    text = capsys.readouterr().out
    assert f"vllm_triton_top_p_drop {kernel.num_rows}" in text and "_topk_topp_kernel" in text
    assert main([*args, "--rule", "vllm-triton", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["row_classes"]["equal"] == kernel.num_rows
