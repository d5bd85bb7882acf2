"""verl 0.9.1 (issue 27, part 3): the vLLM rollout's mask carried into ``DataProto`` and the masked
``logprobs_from_logits``, checked against verl's own function (fixture built by
``tests/fixtures/upstream/trainers/make_verl_openrlhf.py`` from the released wheel)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import ErrorCode, SamplingMaskError  # noqa: E402
from sampling_mask.adapters import verl  # noqa: E402

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
FIXTURE = np.load(UPSTREAM / "trainers" / "verl_openrlhf_logprobs.npz")


def _float64_reference(logits: np.ndarray, labels: np.ndarray, dense: np.ndarray, temperature: float = 1.0):
    z = logits.astype(np.float64) / temperature
    out = np.empty(labels.shape)
    for index in np.ndindex(labels.shape):
        ids = dense[index][dense[index] >= 0]
        row = z[index] if ids.size == 0 else z[index][ids]
        top = row.max()
        out[index] = z[index][labels[index]] - (top + np.log(np.exp(row - top).sum()))
    return out


def test_masked_logprobs_from_logits_against_verls_own_function() -> None:
    logits = torch.from_numpy(FIXTURE["logits"])
    labels = torch.from_numpy(FIXTURE["labels"]).long()
    dense = torch.from_numpy(FIXTURE["sampling_mask"])
    kind = FIXTURE["kind"]
    print(json.loads(str(FIXTURE["versions"]))["verl"])
    ours = verl.logprobs_from_logits(logits, labels, sampling_mask=dense).numpy()
    untruncated = kind < 2
    assert untruncated.any() and (~untruncated).any()
    assert np.abs(ours[untruncated] - FIXTURE["verl"][untruncated]).max() <= 1e-6
    reference = _float64_reference(FIXTURE["logits"], FIXTURE["labels"], FIXTURE["sampling_mask"])
    assert np.abs(ours - reference)[~untruncated].max() <= 1e-6  # truncated rows: renormalized exactly
    assert (FIXTURE["verl"][~untruncated] < ours[~untruncated] - 1e-3).all()  # verl's is off there
    assert np.abs(verl.logprobs_from_logits(logits, labels).numpy() - FIXTURE["verl"]).max() <= 1e-6  # no mask


def test_live_verl_function_when_it_imports() -> None:
    try:
        from verl.utils.torch_functional import logprobs_from_logits as upstream
    except Exception as exc:  # noqa: BLE001 - verl needs ray etc.: the fixture test covers it
        pytest.skip(f"verl 0.9.1 does not import here ({type(exc).__name__}: {exc}); compared to the fixture")
    logits = torch.randn(4, 6, 50) * 3
    labels = torch.randint(0, 50, (4, 6))
    assert torch.allclose(verl.logprobs_from_logits(logits, labels), upstream(logits.clone(), labels), atol=1e-6)


def test_rollout_output_to_data_proto_batch() -> None:
    outputs = json.loads((UPSTREAM / "vllm-0.32" / "completion_outputs.json").read_text())["outputs"]
    done = [o for o in outputs if o["sampling_mask"] is not None]
    # what the rollout server adds to TokenOutput.extra_fields, collected by verl's _postprocess
    fields = [verl.token_output_fields(o)[verl.MASK_KEY] for o in done]
    non_tensor = {verl.MASK_KEY: np.array([*fields, None], dtype=object)}
    length = max(len(o["token_ids"]) for o in done) + 1
    data = SimpleNamespace(
        batch={"responses": torch.zeros(len(done) + 1, length, dtype=torch.long)}, non_tensor_batch=non_tensor
    )
    verl.add_to_data_proto(data)
    dense = data.batch[verl.MASK_KEY]
    assert verl.MASK_KEY not in data.non_tensor_batch and dense.shape[:2] == (len(done) + 1, length)
    for b, o in enumerate(done):
        for t, row in enumerate(o["sampling_mask"]["token_ids"]):
            assert sorted(int(i) for i in dense[b, t] if i >= 0) == row
    assert bool((dense[len(done)] == -1).all())  # a sample without a mask: every row full vocabulary
    with pytest.raises(SamplingMaskError) as err:
        verl.token_output_fields({"token_ids": [1], "sampling_mask": None})
    assert err.value.code is ErrorCode.E_SCHEMA
    with pytest.raises(SamplingMaskError) as err:
        verl.logprobs_from_logits(
            torch.zeros(2, 3, 5),
            torch.zeros(2, 3, dtype=torch.long),
            sampling_mask=torch.zeros(2, 4, 1, dtype=torch.int32),
        )
    assert err.value.code is ErrorCode.E_SHAPE
