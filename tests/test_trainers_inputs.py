"""The verl / OpenRLHF functions take torch tensors by one allowlist per argument
(``sampling_mask.core.checks.checked_tensor``): a plain, strided tensor on CPU or CUDA, of the dtypes
listed for that argument. Logits: float16 / bfloat16 / float32 / float64 (each exact against float64);
ids, labels, masks, attention masks and responses: integers. Every other tensor (bf16 / float8 ids,
sparse, quantized, nested, meta, subclasses) is a SamplingMaskError naming the argument; a float mask is
refused, never truncated; a temperature is a positive normal float32."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.core.checks import as_host_array, checked_tensor  # noqa: E402
from sampling_mask.trainers import openrlhf, verl  # noqa: E402


class _Subclass(torch.Tensor):
    pass


def _quantized(t: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in torch 2.13, still built
        return torch.quantize_per_tensor(t.float(), 0.5, 0, torch.qint8)


def _sparse_csr(t: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CSR is in beta
        return t.reshape(t.shape[0], -1).to_sparse_csr()


def _nested(t: torch.Tensor, layout: Any) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the strided layout is a prototype
        parts = list(t.unbind(0)) if t.ndim > 1 else [t, t[:1]]  # ragged when it can be
        return torch.nested.nested_tensor(parts, layout=layout)


#: name -> (the tensor made from a valid argument, the code it gets wherever its dtype is not listed)
EXOTIC: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "bfloat16": (lambda t: t.to(torch.bfloat16), "E_DTYPE"),
    "float16": (lambda t: t.to(torch.float16), "E_DTYPE"),
    "float8_e4m3fn": (lambda t: t.float().to(torch.float8_e4m3fn), "E_DTYPE"),
    "float8_e5m2": (lambda t: t.float().to(torch.float8_e5m2), "E_DTYPE"),
    "complex64": (lambda t: t.to(torch.complex64), "E_DTYPE"),
    "qint8 (quantized)": (_quantized, "E_DTYPE"),
    "sparse_coo": (lambda t: t.to_sparse(), "E_SCHEMA"),
    "sparse_csr": (_sparse_csr, "E_SCHEMA"),
    "nested (strided)": (lambda t: _nested(t, torch.strided), "E_SCHEMA"),
    "nested (jagged)": (lambda t: _nested(t, torch.jagged), "E_SCHEMA"),
    "meta": (lambda t: t.to("meta"), "E_SCHEMA"),
    "a Tensor subclass": (lambda t: t.as_subclass(_Subclass), "E_SCHEMA"),
}
FLOATS = ("bfloat16", "float16")  # the exotic dtypes listed for logits


def _rows() -> SamplingMask:
    return openrlhf.observation_rows(2, {"token_ids": [7, 9], "sampling_mask": [[3, 7], [9]]})


def _calls() -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    """Each function with a valid keyword call; every tensor argument is replaced in turn."""
    long = torch.long
    logits2, labels2 = torch.randn(4, 10), torch.tensor([3, 1, 4, 1])
    dense2 = torch.tensor([[3, 5], [-1, -1], [4, 0], [1, -1]])
    logits3, labels3 = torch.randn(1, 4, 10), torch.tensor([[3, 1, 4, 1]])
    return {
        "verl.rmpad_mask": (
            verl.rmpad_mask,
            {
                "sampling_mask": torch.tensor([[[4], [-1]], [[5], [-1]]]),
                "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]),
                "responses": torch.tensor([[4, 0], [5, 6]]),
            },
        ),
        "verl.batch_segments": (verl.batch_segments, {"sampling_mask": torch.full((2, 2, 1), -1), "batch_size": 2}),
        "verl.logprobs_from_logits": (
            verl.logprobs_from_logits,
            {"logits": logits2, "labels": labels2, "sampling_mask": dense2},
        ),
        "openrlhf.rolled_mask": (
            openrlhf.rolled_mask,
            {"sampling_mask": torch.tensor([[[-1], [5], [6], [-1]]]), "attention_mask": torch.ones(1, 4, dtype=long)},
        ),
        "openrlhf.log_probs_from_logits": (
            openrlhf.log_probs_from_logits,
            {"logits": logits3, "labels": labels3, "sampling_mask": dense2.reshape(1, 4, 2)},
        ),
        "openrlhf.experience_mask": (openrlhf.experience_mask, {"rows": _rows()}),
        "openrlhf.pad_experience_masks": (
            openrlhf.pad_experience_masks,
            {"masks": [torch.tensor([[[3, 7], [9, -1]]])]},
        ),
    }


def _float64_logprobs(logits: torch.Tensor, labels: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    z = logits.double().reshape(-1, logits.shape[-1])
    ids, y = dense.reshape(z.shape[0], -1), labels.reshape(-1)
    out = [
        z[t, y[t]] - torch.logsumexp(z[t] if not (ids[t] >= 0).any() else z[t, ids[t][ids[t] >= 0]], 0)
        for t in range(z.shape[0])
    ]
    return torch.stack(out).reshape(labels.shape)


CASES = [
    (function, argument, exotic)
    for function, (_, kwargs) in sorted(_calls().items())
    for argument in sorted(kwargs)
    if argument != "batch_size"
    for exotic in EXOTIC
]


@pytest.mark.parametrize(("function", "argument", "exotic"), CASES)
def test_each_tensor_argument_takes_its_listed_dtypes_and_refuses_the_rest_by_name(
    function: str, argument: str, exotic: str
) -> None:
    fn, kwargs = _calls()[function]
    fn(**kwargs)  # the valid call works
    make, code = EXOTIC[exotic]
    value = kwargs[argument]
    if argument == "rows":  # a SamplingMask argument: its rows as a dense tensor
        value = torch.from_numpy(value.to_dense(2).copy())
    bad = [make(value[0])] if argument == "masks" else make(value)
    if argument == "rows":  # a SamplingMask argument: no tensor of any kind is one
        code = "E_SCHEMA"
    elif argument == "logits" and exotic in FLOATS:  # listed for logits: the renormalized numbers, exact
        out = fn(**{**kwargs, argument: bad})
        reference = _float64_logprobs(bad, kwargs["labels"], kwargs["sampling_mask"])
        assert out.dtype == torch.float32 and float((out.double() - reference).abs().max()) <= 1e-5
        return
    with pytest.raises(SamplingMaskError) as err:
        fn(**{**kwargs, argument: bad})
    field = "masks[0]" if argument == "masks" else argument
    assert (err.value.code.value, err.value.field) == (code, field), err.value


def test_a_float_mask_is_refused_never_truncated() -> None:
    holding = torch.tensor([[[1.5, -1.0], [2.0, 3.0]]])  # id 1.5 used to come back as 1
    with pytest.raises(SamplingMaskError) as err:
        openrlhf.pad_experience_masks([holding])
    assert (err.value.code, err.value.field) == (ErrorCode.E_DTYPE, "masks[0]")
    for call in (
        lambda: verl.batch_segments(holding, 1),
        lambda: openrlhf.rolled_mask(holding, torch.ones(1, 2, dtype=torch.long)),
        lambda: verl.logprobs_from_logits(
            torch.zeros(1, 2, 4), torch.zeros(1, 2, dtype=torch.long), sampling_mask=holding
        ),
        lambda: verl.logprobs_from_logits(
            torch.zeros(2, 4), torch.zeros(2, dtype=torch.long), sampling_mask=holding.numpy()[0]
        ),
    ):
        with pytest.raises(SamplingMaskError) as err:
            call()
        assert (err.value.code, err.value.field) == (ErrorCode.E_DTYPE, "sampling_mask")


@pytest.mark.parametrize("ids", [[-2, 3], [3, 2**31]])
def test_padded_masks_hold_int32_ids_or_are_refused(ids: list[int]) -> None:
    with pytest.raises(SamplingMaskError) as err:
        openrlhf.pad_experience_masks([torch.tensor([[ids]])])
    assert (err.value.code, err.value.segment) == (ErrorCode.E_RANGE, 0)
    out = openrlhf.pad_experience_masks([torch.tensor([[[3, 2**31 - 1]]], dtype=torch.int64), torch.tensor([[[5]]])])
    assert out.dtype == torch.int32 and out.tolist() == [[[3, 2**31 - 1]], [[5, -1]]]


@pytest.mark.parametrize("temperature", [1e-45, 1e-39, np.float32(1e-45), 0.0, -0.7, float("inf"), float("nan"), True])
def test_a_temperature_is_a_positive_normal_float(temperature: Any) -> None:
    logits, labels = torch.randn(1, 4, 10) * 3, torch.tensor([[3, 1, 4, 1]])
    with pytest.raises(SamplingMaskError) as err:  # 1e-45 used to give NaN log-probs
        openrlhf.log_probs_from_logits(logits, labels, temperature=temperature)
    assert (err.value.code, err.value.field) == (ErrorCode.E_SCHEMA, "temperature")


def test_temperatures_that_are_normal_floats_are_exact_and_overflow_is_refused() -> None:
    logits, labels = torch.randn(1, 4, 10, dtype=torch.float64), torch.tensor([[3, 1, 4, 1]])
    dense = torch.tensor([[[3, 5], [-1, -1], [4, 0], [1, -1]]])
    tiny = float(np.finfo(np.float32).tiny)
    for tau in (0.7, 1e-3, 2, tiny):  # float64 logits: exact even at the smallest normal float32
        out = openrlhf.log_probs_from_logits(logits, labels, temperature=tau, sampling_mask=dense)
        assert float((out.double() - _float64_logprobs(logits / tau, labels, dense)).abs().max()) <= 1e-6 * max(
            1, 1 / tau
        )
    big = torch.full((1, 4, 10), 10.0)  # float32 logits of 10 divided by 1.2e-38 overflow to inf
    with pytest.raises(SamplingMaskError) as err:
        openrlhf.log_probs_from_logits(big, labels, temperature=tiny)
    assert (err.value.code, err.value.field, err.value.row) == (ErrorCode.E_RANGE, "logits", 0)
    with pytest.raises(SamplingMaskError) as err:  # NaN logits: refused, not a NaN log-prob
        verl.logprobs_from_logits(torch.tensor([[0.0, float("nan")], [0.0, 1.0]]), torch.tensor([1, 0]))
    assert (err.value.code, err.value.row) == (ErrorCode.E_RANGE, 0)


def test_the_one_tensor_check() -> None:
    t = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    assert checked_tensor(t, field="x") is t
    assert checked_tensor(torch.nn.Parameter(torch.zeros(2)), field="w", dtypes={"float32"}) is not None
    for dtype in (torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.float16):  # numpy holds them exactly
        assert as_host_array(torch.ones(2, dtype=dtype), field="x").tolist() == [1, 1]
    grad = torch.ones(2, requires_grad=True) * 2
    assert as_host_array(grad, field="x").tolist() == [2.0, 2.0]  # detached, never an error
    with pytest.raises(SamplingMaskError) as err:
        as_host_array(torch.ones(2, dtype=torch.bfloat16), field="sizes")
    assert (err.value.code, err.value.field) == (ErrorCode.E_DTYPE, "sizes") and "bfloat16" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        checked_tensor(torch.zeros(2, 2).to_sparse(), field="mask")
    assert (err.value.code, err.value.field) == (ErrorCode.E_SCHEMA, "mask") and "sparse_coo" in err.value.message
    with pytest.raises(SamplingMaskError) as err:
        checked_tensor(torch.zeros(2), field="labels", dtypes={"int64"})
    assert (err.value.code, err.value.field) == (ErrorCode.E_DTYPE, "labels")


# ---------------------------------------------------------------------------------------------- any argument replaced by garbage
GARBAGE: list[Any] = [
    None,
    "x",
    3,
    -1,
    2.5,
    True,
    [],
    [[1]],
    [[1, 2], [3]],
    {"a": 1},
    b"\x00",
    np.array([object()]),
    torch.tensor(1.0),
    torch.tensor(1),
    torch.zeros(0),
    torch.zeros(2, 0),
    torch.zeros(0, 3),
    torch.ones(2, 3, dtype=torch.bool),
    torch.zeros(2, 3, dtype=torch.complex64),
    torch.full((2, 3), float("nan")),
    torch.zeros(2, 3, 4, 5),
    np.zeros((2, 3), dtype=np.float16),
    SamplingMask.from_rows([[1]]),
    torch.zeros(2, 3, dtype=torch.uint8),
    torch.full((2, 3), 2**40),
    torch.empty(2, 3, device="meta"),
]


def _garbage_calls() -> dict[str, tuple[Any, list[Any], dict[str, Any]]]:
    rows = openrlhf.observation_rows(2, {"token_ids": [7, 9], "sampling_mask": [[3, 7], [9]]})
    long = torch.long
    return {
        "verl.logprobs_from_logits": (
            verl.logprobs_from_logits,
            [torch.zeros(4, 10), torch.zeros(4, dtype=long)],
            {"sampling_mask": torch.full((4, 1), -1)},
        ),
        "verl.replay_logprobs": (verl.replay_logprobs, [torch.zeros(4, 10), torch.zeros(4, dtype=long), None, 1.0], {}),
        "verl.rmpad_mask": (
            verl.rmpad_mask,
            [torch.full((2, 2, 1), -1), torch.ones(2, 5, dtype=long), torch.zeros(2, 2, dtype=long)],
            {"pad_size": 0, "sp_group": None},
        ),
        "verl.batch_segments": (verl.batch_segments, [torch.full((2, 2, 1), -1), 2], {}),
        "openrlhf.rolled_mask": (
            openrlhf.rolled_mask,
            [[rows], torch.ones(1, 4, dtype=long)],
            {"packed": True, "ring_attn_group": None},
        ),
        "verl.check_config": (verl.check_config, [{"actor_rollout_ref": {"actor": {"strategy": "fsdp2"}}}], {}),
        "openrlhf.log_probs_from_logits": (
            openrlhf.log_probs_from_logits,
            [torch.zeros(1, 4, 10), torch.zeros(1, 4, dtype=long), 1.0],
            {"sampling_mask": None},
        ),
        "openrlhf.experience_mask": (openrlhf.experience_mask, [rows, 3], {}),
        "openrlhf.observation_rows": (
            openrlhf.observation_rows,
            [2, {"token_ids": [7], "sampling_mask": [[7]]}],
            {"truncate_length": None},
        ),
        "openrlhf.pad_experience_masks": (openrlhf.pad_experience_masks, [[torch.full((1, 2, 1), -1)]], {}),
    }


@pytest.mark.parametrize("name", sorted(_garbage_calls()))
def test_garbage_in_any_argument_is_a_sampling_mask_error(name: str) -> None:
    fn, args, kwargs = _garbage_calls()[name]
    fn(*args, **kwargs)  # the valid call works
    escaped = []
    slots = [*range(len(args)), *kwargs]
    for slot in slots:
        for garbage in GARBAGE:
            a, k = list(args), dict(kwargs)
            if isinstance(slot, int):
                a[slot] = garbage
            else:
                k[slot] = garbage
            try:
                fn(*a, **k)
            except SamplingMaskError:
                pass
            except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
                escaped.append(f"{slot}={garbage!r:.40}: {type(exc).__name__}: {exc}")
    assert not escaped, "\n".join(escaped)
