"""verl 0.9.1: the vLLM rollout's mask carried into ``DataProto`` and the masked
``logprobs_from_logits``, checked against verl's own function (fixture built by
``tests/fixtures/upstream/trainers/make_verl_openrlhf.py`` from the released wheel)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.trainers import verl  # noqa: E402

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


#: What ``verl.add_to_data_proto`` reads of verl 0.9.1's trainer config (``ppo_trainer.yaml``'s defaults).
FSDP_CONFIG = {"actor_rollout_ref": {"actor": {"strategy": "fsdp"}, "model": {"use_fused_kernels": False}}}


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
    verl.add_to_data_proto(data, config=FSDP_CONFIG)
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


# ---- a SamplingMask at the remove-padding layout, width-0 masks, malformed input -------------------


def _mask_and_reference(g: torch.Generator, n: int, vocab: int):
    logits = torch.randn(n, vocab, generator=g) * 3
    labels = torch.randint(0, vocab, (n,), generator=g)
    rows: list[list[int]] = []
    for t in range(n):
        kind = t % 4
        if kind == 0:
            rows.append([])  # prompt / padding row: the full vocabulary
        elif kind == 1:
            rows.append(list(range(vocab)))  # nothing truncated
        else:
            others = torch.randperm(vocab, generator=g)[: 1 + t % 5].tolist()
            rows.append(sorted({int(labels[t]), *others}))
    z = logits.double()
    reference = torch.stack(
        [z[t, labels[t]] - torch.logsumexp(z[t] if not r else z[t, torch.tensor(r)], 0) for t, r in enumerate(rows)]
    )
    return logits, labels, SamplingMask.from_rows(rows, vocab_size=vocab), reference


def test_acceptance_logprobs_from_logits_takes_a_sampling_mask_of_n_rows() -> None:
    g = torch.Generator().manual_seed(4)
    logits, labels, mask, reference = _mask_and_reference(g, 24, 60)
    ours = verl.logprobs_from_logits(logits, labels, sampling_mask=mask)
    assert ours.shape == (24,) and ours.dtype == torch.float32
    assert float((ours.double() - reference).abs().max()) <= 1e-6
    dense = torch.from_numpy(mask.to_dense())
    assert torch.allclose(verl.logprobs_from_logits(logits, labels, sampling_mask=dense), ours, atol=1e-6)
    assert float((verl.logprobs_from_logits(logits, labels) - ours).abs().max()) > 1e-2  # truncation matters


def test_width_zero_masks_are_valid_and_score_the_full_vocabulary() -> None:
    from sampling_mask.data import alignment

    g = torch.Generator().manual_seed(6)
    logits = torch.randn(2, 3, 9, generator=g)
    labels = torch.randint(0, 9, (2, 3), generator=g)
    no_support = SamplingMask.from_rows([[], [], [], [], []], vocab_size=9).replace(cu_seqlens=[0, 3, 5])
    batch = torch.from_numpy(alignment.to_batch_dense(no_support, seq_len=3))
    assert batch.shape == (2, 3, 0)
    full = torch.log_softmax(logits.double(), -1).gather(-1, labels[..., None])[..., 0]
    for mask in (batch, batch.numpy(), torch.zeros(2, 3, 0, dtype=torch.int32)):
        assert float((verl.logprobs_from_logits(logits, labels, sampling_mask=mask) - full).abs().max()) <= 1e-6
    flat = verl.rmpad_mask(batch, torch.ones(2, 5, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    assert flat is not None and flat.num_rows == 10 and flat.nnz == 0


def test_rmpad_mask_rows_follow_verls_packing() -> None:
    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])  # prompt width 3, response width 3
    responses = torch.zeros(2, 3, dtype=torch.long)
    mask = SamplingMask.from_rows([[4, 5], [6], [7, 8, 9]]).replace(cu_seqlens=[0, 2, 3])
    rows = verl.rmpad_mask(mask, attention_mask, responses, pad_size=2)
    assert rows is not None
    # sample 0: 2 prompt + 2 response tokens at rows 0-3; sample 1: 3 + 1 at rows 4-7; then 2 pad rows
    assert rows.to_rows() == [[], [4, 5], [6], [], [], [], [7, 8, 9], [], [], []]
    assert rows.cu_seqlens.tolist() == [0, 4, 8, 10]
    assert verl.rmpad_mask(None, attention_mask, responses) is None


def _code_field(call) -> tuple[str, str | None]:
    with pytest.raises(SamplingMaskError) as err:
        call()
    return err.value.code.value, err.value.field


_L, _Y = torch.zeros(4, 5), torch.zeros(4, dtype=torch.long)
_AM, _R = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]]), torch.zeros(2, 2, dtype=torch.long)
_D = torch.full((2, 2, 1), -1, dtype=torch.int32)

MALFORMED = {
    "0-d logits": (lambda: verl.logprobs_from_logits(torch.tensor(1.0), torch.tensor(1)), "E_SHAPE", "logits"),
    "list logits": (lambda: verl.logprobs_from_logits([[0.0, 1.0]], torch.tensor([0])), "E_SHAPE", "logits"),
    "width-0 logits": (lambda: verl.logprobs_from_logits(torch.zeros(4, 0), _Y), "E_SHAPE", "logits"),
    "integer logits": (lambda: verl.logprobs_from_logits(torch.zeros(4, 5, dtype=torch.long), _Y), "E_DTYPE", "logits"),
    "list labels": (lambda: verl.logprobs_from_logits(_L, [0, 1, 2, 3]), "E_DTYPE", "labels"),
    "float labels": (lambda: verl.logprobs_from_logits(_L, torch.zeros(4)), "E_DTYPE", "labels"),
    "labels of another shape": (
        lambda: verl.logprobs_from_logits(_L, torch.zeros(2, 2, dtype=torch.long)),
        "E_SHAPE",
        "labels",
    ),
    "label outside the vocabulary": (lambda: verl.logprobs_from_logits(_L, torch.full((4,), 5)), "E_RANGE", "labels"),
    "string temperature": (lambda: verl.replay_logprobs(_L, _Y, None, "0.7"), "E_SCHEMA", "temperature"),
    "zero temperature": (lambda: verl.replay_logprobs(_L, _Y, None, 0.0), "E_SCHEMA", "temperature"),
    "nan temperature": (lambda: verl.replay_logprobs(_L, _Y, None, float("nan")), "E_SCHEMA", "temperature"),
    "bool temperature": (lambda: verl.replay_logprobs(_L, _Y, None, True), "E_SCHEMA", "temperature"),
    "dense mask at the rmpad site": (
        lambda: verl.logprobs_from_logits(
            torch.zeros(10, 5), torch.zeros(10, dtype=torch.long), sampling_mask=torch.zeros(2, 4, 3, dtype=torch.int32)
        ),
        "E_SHAPE",
        "sampling_mask",
    ),
    "SamplingMask of other rows": (
        lambda: verl.logprobs_from_logits(_L, _Y, sampling_mask=SamplingMask.from_rows([[0]] * 3)),
        "E_SHAPE",
        "sampling_mask",
    ),
    "list mask": (lambda: verl.logprobs_from_logits(_L, _Y, sampling_mask=[[0]] * 4), "E_SCHEMA", "sampling_mask"),
    "float dense mask": (
        lambda: verl.logprobs_from_logits(_L, _Y, sampling_mask=torch.zeros(4, 1)),
        "E_DTYPE",
        "sampling_mask",
    ),
    "mask id >= V": (
        lambda: verl.logprobs_from_logits(_L, _Y, sampling_mask=SamplingMask.from_rows([[0, 7]] * 4)),
        "E_RANGE",
        "sampling_mask",
    ),
    "label outside its row": (
        lambda: verl.logprobs_from_logits(_L, _Y, sampling_mask=SamplingMask.from_rows([[1]] * 4)),
        "E_MISSING_SAMPLED",
        "labels",
    ),
    "1-D attention_mask": (
        lambda: verl.rmpad_mask(_D, torch.ones(4, dtype=torch.long), _R),
        "E_SHAPE",
        "attention_mask",
    ),
    "attention_mask of 2s": (lambda: verl.rmpad_mask(_D, _AM * 2, _R), "E_RANGE", "attention_mask"),
    "float attention_mask": (lambda: verl.rmpad_mask(_D, _AM.float(), _R), "E_DTYPE", "attention_mask"),
    "responses wider than the batch": (
        lambda: verl.rmpad_mask(_D, _AM, torch.zeros(2, 5, dtype=torch.long)),
        "E_SHAPE",
        "responses",
    ),
    "responses of another batch": (
        lambda: verl.rmpad_mask(_D, _AM, torch.zeros(3, 2, dtype=torch.long)),
        "E_SHAPE",
        "responses",
    ),
    "response not right-padded": (
        lambda: verl.rmpad_mask(_D, torch.tensor([[1, 1, 0, 1]] * 2), _R),
        "E_SHAPE",
        "attention_mask",
    ),
    "dense mask of another batch": (lambda: verl.rmpad_mask(_D[:1], _AM, _R), "E_SHAPE", "sampling_mask"),
    "dense mask with -1 before an id": (
        lambda: verl.rmpad_mask(torch.tensor([[[-1, 3]]] * 2), _AM, _R[:, :1]),
        "E_PADDING",
        "sampling_mask",
    ),
    "negative pad_size": (lambda: verl.rmpad_mask(_D, _AM, _R, pad_size=-1), "E_SCHEMA", "pad_size"),
    "string mask": (lambda: verl.rmpad_mask("rows", _AM, _R), "E_SCHEMA", "sampling_mask"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_input_is_a_sampling_mask_error_naming_the_field(case: str) -> None:
    call, code, field = MALFORMED[case]
    assert _code_field(call) == (code, field)


def test_rmpad_mask_names_the_sample_and_row_that_do_not_fit() -> None:
    mask = torch.full((2, 2, 1), -1, dtype=torch.int32)
    mask[0, 1, 0] = 3  # sample 0 has one response token (attention_mask), so its row 1 is past it
    with pytest.raises(SamplingMaskError) as err:
        verl.rmpad_mask(mask, _AM, _R)
    assert (err.value.code, err.value.segment, err.value.row) == (ErrorCode.E_SHAPE, 0, 1)
    mask = torch.full((2, 1, 1), 4, dtype=torch.int32)  # sample 1 has no prompt token: nothing scores row 0
    with pytest.raises(SamplingMaskError) as err:
        verl.rmpad_mask(mask, torch.tensor([[1, 1], [0, 1]]), torch.zeros(2, 1, dtype=torch.long))
    assert (err.value.code, err.value.segment, err.value.row) == (ErrorCode.E_SHAPE, 1, 0)


def test_gradient_through_a_sampling_mask_matches_float64() -> None:
    g = torch.Generator().manual_seed(8)
    logits, labels, mask, _ = _mask_and_reference(g, 12, 20)
    logits.requires_grad_(True)
    verl.logprobs_from_logits(logits, labels, sampling_mask=mask).sum().backward()
    z = logits.detach().double().requires_grad_(True)
    rows = mask.to_rows()
    torch.stack(
        [z[t, labels[t]] - torch.logsumexp(z[t] if not r else z[t, torch.tensor(r)], 0) for t, r in enumerate(rows)]
    ).sum().backward()
    assert logits.grad is not None and z.grad is not None
    assert float((logits.grad.double() - z.grad).abs().max()) <= 1e-6


# ---- a mask is carried only where it is applied: the configuration is checked first ---------------

REFUSED_CONFIGS = {
    "megatron": ({"actor": {"strategy": "megatron"}}, "actor_rollout_ref.actor.strategy"),
    "veomni": ({"actor": {"strategy": "veomni"}}, "actor_rollout_ref.actor.strategy"),
    "torchtitan": ({"actor": {"strategy": "torchtitan"}}, "actor_rollout_ref.actor.strategy"),
    "no strategy": ({"actor": {}}, "actor_rollout_ref.actor.strategy"),
    "reference on megatron": (
        {"actor": {"strategy": "fsdp"}, "ref": {"strategy": "megatron"}},
        "actor_rollout_ref.ref.strategy",
    ),
    "fused kernels": (
        {"actor": {"strategy": "fsdp2"}, "model": {"use_fused_kernels": True}},
        "actor_rollout_ref.model.use_fused_kernels",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED_CONFIGS))
def test_a_configuration_that_would_not_apply_the_mask_is_refused_before_it_is_carried(case: str) -> None:
    section, field = REFUSED_CONFIGS[case]
    config = SimpleNamespace(actor_rollout_ref=section)  # attribute access, as on verl's DictConfig
    responses = torch.zeros(1, 2, dtype=torch.long)
    data = SimpleNamespace(batch={"responses": responses}, non_tensor_batch={verl.MASK_KEY: [[[3], [4]]]})
    with pytest.raises(SamplingMaskError) as err:
        verl.add_to_data_proto(data, config=config)
    assert (err.value.code, err.value.field) == (ErrorCode.E_SCHEMA, field)
    assert verl.MASK_KEY not in data.batch and verl.MASK_KEY in data.non_tensor_batch  # nothing carried


@pytest.mark.parametrize("strategy", verl.STRATEGIES)
def test_the_fsdp_engine_configurations_carry_the_mask(strategy: str) -> None:
    config = {
        "actor_rollout_ref": {
            "actor": {"strategy": strategy},
            "ref": {"strategy": strategy},
            "model": {"use_fused_kernels": False, "use_remove_padding": False},
        }
    }
    data = SimpleNamespace(
        batch={"responses": torch.zeros(1, 2, dtype=torch.long)}, non_tensor_batch={verl.MASK_KEY: [[[3], [4]]]}
    )
    verl.add_to_data_proto(data, config=config)
    assert data.batch[verl.MASK_KEY].tolist() == [[[3], [4]]]


def test_a_sequence_parallel_group_that_is_not_one_is_refused_by_name() -> None:
    with pytest.raises(SamplingMaskError) as err:  # no process group in this process
        verl.rmpad_mask(_D, _AM, _R, sp_group=object())
    assert (err.value.code, err.value.field) == (ErrorCode.E_SCHEMA, "sp_group")
