"""OpenRLHF 0.11.2: the vLLM completion's mask aligned like the ``Experience``'s
``rollout_log_probs`` and the masked ``log_probs_from_logits``, checked against OpenRLHF's own
function (fixture built by ``tests/fixtures/upstream/trainers/make_verl_openrlhf.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import SamplingMask, SamplingMaskError, concat  # noqa: E402
from sampling_mask.trainers import openrlhf  # noqa: E402

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


# ---- rolled labels, packed samples, malformed input --------------------------------------------------

_COMPLETION = {"token_ids": [7, 9], "sampling_mask": [[3, 7], [9]]}


def test_rolled_mask_aligns_with_rolled_sequences_padded_left_right_and_packed() -> None:
    rows = openrlhf.observation_rows(2, _COMPLETION)  # tokens: p0 p1 7 9
    other = openrlhf.observation_rows(1, {"token_ids": [4], "sampling_mask": [[4, 5]]})  # tokens: p0 4
    attention_mask = torch.tensor([[1, 1, 1, 1, 0], [0, 0, 0, 1, 1]])  # right- and left-padded
    padded = openrlhf.rolled_mask([rows, other], attention_mask)
    assert padded is not None and padded.num_rows == 10 and padded.cu_seqlens.tolist() == [0, 5, 10]
    # position s scores token s + 1: sample 0 positions 1, 2; sample 1 position 3
    assert padded.to_rows() == [[], [3, 7], [9], [], [], [], [], [], [4, 5], []]
    packed = openrlhf.rolled_mask([rows, other], attention_mask, packed=True)
    assert packed is not None and packed.to_rows() == [[], [3, 7], [9], [], [4, 5], []]
    both = openrlhf.rolled_mask(concat([rows, other]), attention_mask, packed=True)
    assert both is not None and both.to_rows() == packed.to_rows()
    assert openrlhf.rolled_mask(None, attention_mask) is None
    width0 = openrlhf.rolled_mask(torch.zeros(2, 5, 0, dtype=torch.int32), attention_mask)
    assert width0 is not None and width0.num_rows == 10 and width0.nnz == 0


def test_log_probs_from_logits_with_rolled_labels_matches_float64() -> None:
    g = torch.Generator().manual_seed(2)
    rows = openrlhf.observation_rows(2, _COMPLETION)
    sequences = torch.tensor([[5, 6, 7, 9, 0]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 0]])
    logits = torch.randn(1, 5, 12, generator=g) * 3 / 0.7  # as Actor.forward leaves them
    labels = torch.roll(sequences, -1, 1)
    for packed in (False, True):
        mask = openrlhf.rolled_mask([rows], attention_mask, packed=packed)
        z, y = (logits[:, :4], labels[:, :4]) if packed else (logits, labels)
        ours = openrlhf.log_probs_from_logits(z, y, sampling_mask=mask)
        assert ours.shape == y.shape
        ref = z.double()[0, 1, 7] - torch.logsumexp(z.double()[0, 1, [3, 7]], 0)
        assert abs(float(ours[0, 1]) - float(ref)) <= 1e-6 and abs(float(ours[0, 2])) <= 1e-6
        full = torch.log_softmax(z.double(), -1)
        assert abs(float(ours[0, 0]) - float(full[0, 0, y[0, 0]])) <= 1e-6  # prompt row: full vocabulary


def _error(call):
    with pytest.raises(SamplingMaskError) as err:
        call()
    return err.value


_ROWS = openrlhf.observation_rows(2, _COMPLETION)
_AM = torch.tensor([[1, 1, 1, 1, 0]])

MALFORMED = {
    "negative truncate_length": (lambda: openrlhf.experience_mask(_ROWS, -1), "E_SCHEMA", "truncate_length"),
    "string truncate_length": (lambda: openrlhf.experience_mask(_ROWS, "3"), "E_SCHEMA", "truncate_length"),
    "negative truncate_length (rows)": (
        lambda: openrlhf.observation_rows(2, _COMPLETION, truncate_length=-2),
        "E_SCHEMA",
        "truncate_length",
    ),
    "negative prompt_length": (lambda: openrlhf.observation_rows(-1, _COMPLETION), "E_SCHEMA", "prompt_length"),
    "string temperature": (
        lambda: openrlhf.log_probs_from_logits(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), "0.8"),
        "E_SCHEMA",
        "temperature",
    ),
    "0-d logits": (lambda: openrlhf.log_probs_from_logits(torch.tensor(0.0), torch.tensor(0)), "E_SHAPE", "logits"),
    "list labels": (lambda: openrlhf.log_probs_from_logits(torch.zeros(1, 2, 4), [[0, 1]]), "E_DTYPE", "labels"),
    "mask for other labels": (
        lambda: openrlhf.log_probs_from_logits(
            torch.zeros(1, 6, 4), torch.zeros(1, 6, dtype=torch.long), sampling_mask=openrlhf.experience_mask(_ROWS)
        ),
        "E_SHAPE",
        "sampling_mask",
    ),
    "masks for another batch": (lambda: openrlhf.rolled_mask([_ROWS, _ROWS], _AM), "E_SHAPE", "sampling_mask"),
    "a list of lists": (lambda: openrlhf.rolled_mask([[[3]]], _AM), "E_SCHEMA", "sampling_mask"),
    "attention_mask with a hole": (
        lambda: openrlhf.rolled_mask([_ROWS], torch.tensor([[1, 1, 0, 1, 1]])),
        "E_SHAPE",
        "attention_mask",
    ),
    "3-D attention_mask": (lambda: openrlhf.rolled_mask([_ROWS], _AM[None]), "E_SHAPE", "attention_mask"),
    "attention_mask of 2s": (lambda: openrlhf.rolled_mask([_ROWS], _AM * 2), "E_RANGE", "attention_mask"),
    "more rows than tokens": (
        lambda: openrlhf.rolled_mask([_ROWS], torch.tensor([[1, 1, 1, 0, 0]])),
        "E_SHAPE",
        "sampling_mask",
    ),
    "a first row with ids": (
        lambda: openrlhf.rolled_mask([SamplingMask.from_rows([[1], [2]])], torch.tensor([[1, 1]])),
        "E_SHAPE",
        "sampling_mask",
    ),
    "packed not a bool": (lambda: openrlhf.rolled_mask([_ROWS], _AM, packed="yes"), "E_SCHEMA", "packed"),
    "pad a non-tensor": (lambda: openrlhf.pad_experience_masks([[[1]]]), "E_SHAPE", "masks"),
    "ring attention without packing": (
        lambda: openrlhf.rolled_mask([_ROWS], _AM, ring_attn_group=object()),
        "E_SCHEMA",
        "ring_attn_group",
    ),
    "a ring group that is not one": (
        lambda: openrlhf.rolled_mask([_ROWS], _AM, packed=True, ring_attn_group=object()),
        "E_SCHEMA",
        "ring_attn_group",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_is_a_sampling_mask_error_naming_the_field(case: str) -> None:
    call, code, field = MALFORMED[case]
    err = _error(call)
    assert (err.code.value, err.field) == (code, field)


def test_truncate_length_cuts_rows_like_sequences() -> None:
    rows = openrlhf.observation_rows(2, _COMPLETION, truncate_length=3)
    assert rows.to_rows() == [[], [], [3, 7]]
    assert openrlhf.observation_rows(2, _COMPLETION, truncate_length=0).num_rows == 0
    assert openrlhf.experience_mask(_ROWS, 0).shape[1] == 0
