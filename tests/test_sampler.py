"""Is this sampler replayable? Verdicts, reasons naming the parameter, and the bounded top_k."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.sampler import check_sampler, check_sampling_params, require_replayable


def test_truncation_with_positive_temperature_is_replayable():
    check = check_sampler(temperature=0.7, top_k=50, top_p=0.9)
    assert check.replayable and check.truncates and check.effective_top_k == 50 and check.reasons == ()


def test_top_p_or_min_p_alone_gets_the_default_cap():
    assert check_sampler(top_p=0.95).effective_top_k == 512
    assert check_sampler(min_p=0.05, top_k=-1).effective_top_k == 512
    assert check_sampler(top_p=0.95, max_top_k=64).effective_top_k == 64
    assert check_sampler(top_p=0.95, vocab_size=100).effective_top_k == 100


def test_no_truncation_needs_no_mask():
    check = check_sampler(temperature=1.0, top_k=0)
    assert check.replayable and not check.truncates and check.effective_top_k is None
    assert not check_sampler(top_k=1000, vocab_size=1000).truncates


def test_explicit_top_k_above_the_cap_is_refused_unless_raised():
    check = check_sampler(top_k=1024)
    assert not check.replayable and [r.parameter for r in check.reasons] == ["top_k"]
    assert check.reasons[0].code is ErrorCode.E_LIMIT
    assert check_sampler(top_k=1024, max_top_k=2048).effective_top_k == 1024


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"greedy": True}, "greedy"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": -0.2}, "presence_penalty"),
        ({"logit_bias": {42: 5.0}}, "logit_bias"),
        ({"logits_processors": [lambda ids, logits: logits]}, "logits_processors"),
    ],
)
def test_each_non_replayable_setting_names_its_parameter(kwargs, parameter):
    check = check_sampler(top_p=0.9, **kwargs)
    assert not check.replayable and [r.parameter for r in check.reasons] == [parameter]
    with pytest.raises(SamplingMaskError) as err:
        require_replayable(top_p=0.9, **kwargs)
    assert err.value.field == parameter


def test_every_reason_is_reported():
    check = check_sampler(temperature=0.0, repetition_penalty=1.2, logit_bias={1: 1.0}, top_k=600)
    assert {r.parameter for r in check.reasons} == {"temperature", "repetition_penalty", "logit_bias", "top_k"}


@pytest.mark.parametrize(
    ("kwargs", "code", "field"),
    [
        ({"top_p": 0.0}, ErrorCode.E_RANGE, "top_p"),
        ({"top_p": 1.5}, ErrorCode.E_RANGE, "top_p"),
        ({"min_p": -0.1}, ErrorCode.E_RANGE, "min_p"),
        ({"top_k": -2}, ErrorCode.E_RANGE, "top_k"),
        ({"top_k": 2.5}, ErrorCode.E_SCHEMA, "top_k"),
        ({"temperature": float("nan")}, ErrorCode.E_RANGE, "temperature"),
        ({"temperature": "hot"}, ErrorCode.E_SCHEMA, "temperature"),
        ({"max_top_k": 0}, ErrorCode.E_RANGE, "max_top_k"),
    ],
)
def test_malformed_parameters(kwargs, code, field):
    with pytest.raises(SamplingMaskError) as err:
        check_sampler(**kwargs)
    assert err.value.code is code and err.value.field == field


def test_params_objects_and_dicts():
    vllm_like = SimpleNamespace(
        temperature=1.0,
        top_k=-1,
        top_p=0.9,
        min_p=0.0,
        repetition_penalty=1.0,
        frequency_penalty=0.0,
        presence_penalty=0.0,
        logit_bias=None,
        logits_processors=None,
    )
    assert check_sampling_params(vllm_like).effective_top_k == 512
    sglang_like = {"temperature": 0.8, "top_k": 20, "custom_logit_processor": "serialized"}
    check = check_sampling_params(sglang_like)
    assert [r.parameter for r in check.reasons] == ["logits_processors"]
    assert [r.parameter for r in check_sampling_params({"do_sample": False}).reasons] == ["greedy"]
