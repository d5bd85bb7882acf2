"""The audit names engine behaviours, checked on supports upstream code produced.

``tests/fixtures/upstream/engine_behaviours/`` (``make_engine_behaviours.py``): vLLM 0.32.0's own
``_min_p_kernel`` and ``_topk_topp_kernel`` run by Triton's interpreter, and SkyRL's
``_sample_support_from_flat_logprobs`` (NovaSky-AI/SkyRL #2237 = #2082 @ 9a8327d7) on rows whose
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
from sampling_mask.reference_scorer import ROW_CLASSES, audit, support_from_logits  # noqa: E402

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
