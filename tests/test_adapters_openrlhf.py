"""OpenRLHF 0.11.2 (issue 27, part 3): the vLLM completion's mask aligned like the ``Experience``'s
``rollout_log_probs`` and the masked ``log_probs_from_logits``, checked against OpenRLHF's own
function (fixture built by ``tests/fixtures/upstream/trainers/make_verl_openrlhf.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask.adapters import openrlhf  # noqa: E402

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
FIXTURE = np.load(UPSTREAM / "trainers" / "verl_openrlhf_logprobs.npz")


def test_masked_log_probs_from_logits_against_openrlhfs_own_function() -> None:
    logits = torch.from_numpy(FIXTURE["logits"])
    labels = torch.from_numpy(FIXTURE["labels"]).long()
    dense = torch.from_numpy(FIXTURE["sampling_mask"])
    tau = float(FIXTURE["openrlhf_temperature"])
    print(json.loads(str(FIXTURE["versions"]))["openrlhf"])
    before = logits.clone()
    ours = openrlhf.log_probs_from_logits(logits, labels, tau, sampling_mask=dense).numpy()
    assert torch.equal(logits, before)  # unlike upstream, nothing is divided in place
    untruncated = FIXTURE["kind"] < 2
    assert np.abs(ours[untruncated] - FIXTURE["openrlhf"][untruncated]).max() <= 1e-6
    z = FIXTURE["logits"].astype(np.float64) / tau
    reference = np.empty(ours.shape)
    for index in np.ndindex(ours.shape):
        ids = FIXTURE["sampling_mask"][index]
        ids = ids[ids >= 0]
        row = z[index] if ids.size == 0 else z[index][ids]
        reference[index] = z[index][FIXTURE["labels"][index]] - (row.max() + np.log(np.exp(row - row.max()).sum()))
    assert np.abs(ours - reference)[~untruncated].max() <= 1e-6  # truncated rows: renormalized exactly
    assert (FIXTURE["openrlhf"][~untruncated] < ours[~untruncated] - 1e-3).all()


def test_live_openrlhf_function_when_it_imports() -> None:
    try:
        from openrlhf.models.utils import log_probs_from_logits as upstream
    except Exception as exc:  # noqa: BLE001 - openrlhf imports deepspeed: the fixture test covers it
        pytest.skip(f"openrlhf 0.11.2 does not import here ({type(exc).__name__}: {exc}); compared to the fixture")
    logits = torch.randn(4, 6, 50) * 3
    labels = torch.randint(0, 50, (4, 6))
    ours = openrlhf.log_probs_from_logits(logits, labels, 0.8)
    assert torch.allclose(ours, upstream(logits.clone(), labels, 0.8), atol=1e-6)


def test_experience_alignment_like_rollout_log_probs() -> None:
    outputs = json.loads((UPSTREAM / "vllm-0.32" / "completion_outputs.json").read_text())["outputs"]
    done = [o for o in outputs if o["sampling_mask"] is not None]
    prompt = 3
    masks = []
    for o in done:
        rows = openrlhf.observation_rows(prompt, o)
        assert rows.num_rows == prompt + len(o["token_ids"])
        truncate = prompt + len(o["token_ids"]) - 1  # the context window cuts the last token
        dense = openrlhf.experience_mask(rows, truncate)
        assert dense.shape[:2] == (1, truncate - 1)
        # entry j is token j + 1: the prompt's rows 1..prompt-1 are empty, then the completion's
        assert bool((dense[0, : prompt - 1] == -1).all())
        for t, row in enumerate(o["sampling_mask"]["token_ids"][: truncate - prompt]):
            assert sorted(int(i) for i in dense[0, prompt - 1 + t] if i >= 0) == row
        masks.append(dense)
    batch = openrlhf.pad_experience_masks(masks)
    assert batch.shape[0] == len(done) and batch.shape[1] == max(m.shape[1] for m in masks)
