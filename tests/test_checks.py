"""The core's shared input checks: strict integers (a boolean is never an id, a target, a count or an
offset, in the model's constructors and the adapters built on them, as in JSON), float arrays with an
explicit integer policy, and "raise at the first bad row"; one rule per use in the model."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from file_checks import raised_code

import sampling_mask
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.adapters import miles, sglang, skyrl, vllm
from sampling_mask.core import checks, layouts


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, True), (-1, True), (np.int64(3), True), (np.uint8(0), True), (True, False), (np.bool_(False), False)]
    + [(3.0, False), ("3", False), (None, False), (np.float32(1), False)],
)
def test_is_int_means_an_integer_that_is_not_a_bool(value: object, expected: bool) -> None:
    assert checks.is_int(value) is expected


@pytest.mark.parametrize("integers", [True, False])
def test_float_arrays_state_their_integer_policy(integers: bool) -> None:
    got = checks.as_float_array([0.5, -np.inf, np.nan], field="x", integers=integers)
    assert got.dtype == np.float32 and got.flags.c_contiguous
    assert got[0] == pytest.approx(0.5) and np.isneginf(got[1]) and np.isnan(got[2])
    assert checks.as_float_array([], field="x", integers=integers).shape == (0,)  # empty: any kind
    if integers:
        assert checks.as_float_array([1, 2], field="x", integers=True).tolist() == [1.0, 2.0]
    else:
        with pytest.raises(SamplingMaskError) as info:
            checks.as_float_array(np.array([1, 2]), field="x", integers=False)
        assert info.value.code is ErrorCode.E_DTYPE and info.value.field == "x"
    for bad, code in (([True, False], ErrorCode.E_DTYPE), (["a"], ErrorCode.E_DTYPE), ([[1.0]], ErrorCode.E_SHAPE)):
        with pytest.raises(SamplingMaskError) as info:
            checks.as_float_array(bad, field="x", integers=integers)
        assert info.value.code is code
    with pytest.raises(SamplingMaskError) as info:
        checks.as_float_array([1.0, 2.0], field="x", integers=integers, size=3)
    assert info.value.code is ErrorCode.E_SHAPE and "expected 3 values" in info.value.message
    with pytest.raises(SamplingMaskError) as info:
        checks.as_float_array([[1.0], [2.0, 3.0]], field="x", integers=integers)  # ragged
    assert info.value.code is ErrorCode.E_SHAPE


def test_the_model_refuses_integer_logprobs_and_accepts_integer_temperatures() -> None:
    rows = [[5, 1], [7]]
    m = SamplingMask.from_rows(rows, temperature=[1, 2])  # a temperature of 1 is an int
    assert m.temperature is not None and m.temperature.dtype == np.float32
    assert m.temperature.tolist() == [1.0, 2.0]
    for name, value in (("sampled_logprobs", [0, 0]), ("support_logprobs", [5, 1, 7])):
        with pytest.raises(SamplingMaskError) as info:  # token ids passed in the wrong field, most likely
            SamplingMask.from_rows(rows, **{name: value})
        assert info.value.code is ErrorCode.E_DTYPE and info.value.field == name


def test_raise_at_first_names_the_first_bad_row_and_its_value() -> None:
    values = np.array([3, -2, 5, -7])
    checks.raise_at_first(values > 10, ErrorCode.E_RANGE, "too big", field="v", values=values)  # none: no error
    checks.raise_at_first(np.zeros(0, bool), ErrorCode.E_RANGE, "empty", field="v")
    with pytest.raises(SamplingMaskError) as info:
        checks.raise_at_first(values < 0, ErrorCode.E_RANGE, "negative", field="v", values=values)
    err = info.value
    assert (err.code, err.row, err.value, err.field) == (ErrorCode.E_RANGE, 1, -2, "v")
    assert type(err.value) is int  # a Python scalar, JSON-ready
    with pytest.raises(SamplingMaskError) as info:
        layouts.counts_to_offsets(np.array([2, 0, -1, -3]))
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_OFFSETS, 2, -1)


def test_the_layouts_still_offer_the_host_array_helpers() -> None:
    assert layouts.as_host_array is checks.as_host_array
    assert not hasattr(layouts, "as_float_array")  # one spelling, with its integer policy, in checks


# ---------------------------------------------------------------------------------------------- booleans
@pytest.mark.parametrize(
    "call",
    [
        lambda: SamplingMask.from_rows([[True, False]]),
        lambda: SamplingMask.from_rows([[3, True]]),
        lambda: SamplingMask.from_rows([[3], [True]], vocab_size=10),
        lambda: SamplingMask.from_ragged([1, True], [0, 2]),
        lambda: SamplingMask.from_ragged([1, 2], [0, 1, True]),
        lambda: SamplingMask.from_counts([1, 2], [True, 1]),
        lambda: SamplingMask.from_dense([[1, True]]),
        lambda: SamplingMask.from_rows([[1], [2]], sampled_token_ids=[1, True]),
        lambda: SamplingMask.from_rows([[1], [2]], cu_seqlens=[0, True, 2]),
        lambda: vllm.from_token_ids([[True, False]]),
        lambda: vllm.from_token_ids([[1], [2]], sampled_token_ids=[1, True]),
        lambda: vllm.from_generate_choice({"sampling_mask": [[True, False]]}),
        lambda: vllm.from_generate_choice({"sampling_mask": [[1], [2]], "token_ids": [1, True]}),
        lambda: sglang.from_meta_info({"output_token_sampling_mask": [[True, 3]]}),
        lambda: skyrl.from_dense([[1, True]]),
        lambda: miles.from_sample({"rollout_sampling_mask_ids": [1, True], "rollout_sampling_mask_offsets": [0, 2]}),
        lambda: miles.from_sample({"rollout_sampling_mask_ids": [1, 2], "rollout_sampling_mask_offsets": [0, True, 2]}),
    ],
)
def test_booleans_are_not_ids_targets_or_counts(call: Any) -> None:
    assert raised_code(call) == "E_DTYPE"


def test_json_and_python_agree_on_booleans() -> None:
    assert raised_code(lambda: sampling_mask.decode(b"[[true, false]]", format="json-rows")) == "E_DTYPE"
    assert raised_code(lambda: SamplingMask.from_rows(json.loads("[[true, false]]"))) == "E_DTYPE"
