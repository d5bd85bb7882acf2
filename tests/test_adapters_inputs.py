"""Every adapter reader, fed arbitrary JSON-like data, returns a mask or raises SamplingMaskError only."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.adapters import miles, nemo_rl, prime_rl, sglang, skyrl, slime, vllm
from sampling_mask.trainers import trl

_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.text(max_size=6)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _with_keys(keys):
    return st.fixed_dictionaries({k: _json for k in keys}) | _json


#: Each reader and the keys of its input (None: the input is any JSON value).
READERS = [
    (vllm.from_completion_output, ["sampling_mask", "token_ids", "finish_reason"]),
    (vllm.from_generate_choice, ["sampling_mask", "token_ids", "finish_reason", "message"]),
    (lambda d: (vllm.from_generate_response(d) or [None])[0], ["choices", "output_mode"]),
    (lambda d: (vllm.from_generate_stream([d]) or [None])[0], ["choices", "output_mode"]),
    (vllm.from_generate_logprobs, ["content", "logprobs"]),
    (vllm.from_engine_csr, ["token_ids", "offsets", "cu_num_generated_tokens"]),
    (
        lambda d: vllm.from_engine_tensors(d, d.get("num_sampled_tokens") if isinstance(d, dict) else None),
        ["token_ids", "counts", "packed_mask", "vocab_size", "rows_per_request", "num_sampled_tokens"],
    ),
    (vllm.from_flat_logprobs, ["start_indices", "end_indices", "token_ids", "logprobs", "ranks"]),
    (trl.masks_from_server_response, ["sampling_mask", "completion_ids"]),
    (lambda d: trl.masks_from_request_outputs([d]), ["outputs"]),
    (
        sglang.from_meta_info,
        [
            "output_token_sampling_mask",
            "output_token_sampling_logprobs",
            "output_token_sampling_mask_length",
            "finish_reason",
        ],
    ),
    (sglang.from_chunked, ["lengths", "token_ids", "logprobs"]),
    (lambda d: sglang.from_stream([d]), ["meta_info", "output_ids"]),
    (sglang.from_chat_choice, ["meta_info", "response_token_ids"]),
    (skyrl.from_envelope, ["data", "shape", "dtype"]),
    (skyrl.from_dense, None),
    (prime_rl.from_wire, ["ids", "counts"]),
    (miles.from_sample, ["rollout_sampling_mask_ids", "rollout_sampling_mask_offsets", "response_length"]),
    (slime.from_sample, ["rollout_top_p_token_ids", "rollout_top_p_token_offsets", "response_length"]),
    (slime.from_meta_info, ["top_p_token_ids", "top_p_token_offsets"]),
    (nemo_rl.from_data, ["sampling_mask_token_ids", "sampling_mask_sizes", "input_lengths", "input_ids"]),
]


def _only_mask_errors(reader, data):
    try:
        result = reader(data)
    except SamplingMaskError as exc:
        assert len(str(exc)) < 1000  # the message names the value briefly, never all of it
        return
    assert result is None or isinstance(result, SamplingMask)


@pytest.mark.parametrize(("reader", "keys"), READERS, ids=lambda v: getattr(v, "__qualname__", ""))
def test_only_sampling_mask_errors_escape(reader, keys):
    @given(_json if keys is None else _with_keys(keys))
    def check(data):
        _only_mask_errors(reader, data)

    check()


def _deep(depth, kind=list):
    """``[[...[1]...]]`` (or ``{"a": {"a": ... 1}}``) ``depth`` deep, built without recursion."""
    value = 1
    for _ in range(depth):
        value = [value] if kind is list else {"a": value}
    return value


@pytest.mark.parametrize("depth", [990, 100_000])
@pytest.mark.parametrize(("reader", "keys"), READERS, ids=lambda v: getattr(v, "__qualname__", ""))
def test_deep_nesting_anywhere_is_a_mask_error(reader, keys, depth):
    """A value nested ``depth`` deep (990: what ``json.loads`` still parses; 100,000: what a caller can
    build) as the whole input, as any field, and as a row, an id or a choice in it: a
    ``SamplingMaskError`` (never a RecursionError from a message naming the value)."""
    for kind in (list, dict):
        deep = _deep(depth, kind)
        _only_mask_errors(reader, deep)
        for key in keys or ():
            for value in (deep, [deep], [[deep]], [{"index": 0, "sampling_mask": [deep], "finish_reason": deep}]):
                _only_mask_errors(reader, {**{k: [[1]] for k in keys}, key: value})


def _parsed_on_a_fresh_stack(text):
    """``json.loads(text)`` in a new thread: its own, nearly empty stack, as a server's handler has."""
    out = []
    thread = threading.Thread(target=lambda: out.append(json.loads(text)))
    thread.start()
    thread.join()
    return out[0]


def test_deep_rows_from_a_caller_or_the_network_are_refused_by_name():
    """``SamplingMask.from_rows`` and the readers that reach it: a row nested 100,000 deep, and a
    990-deep ``/inference/v1/generate`` body that ``json.loads`` parses, are ``E_DTYPE`` naming the
    row (an id that is a list), the value shown two levels deep: no RecursionError."""
    row = _deep(100_000)
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_rows([[1], row])
    assert (info.value.code, info.value.field, info.value.row, info.value.value) == (
        ErrorCode.E_DTYPE,
        "rows",
        1,
        "[[[...]]]",
    )
    with pytest.raises(SamplingMaskError) as info:
        trl.masks_from_server_response({"sampling_mask": [[[1]], [row]], "completion_ids": [[1], [1]]})
    assert (info.value.code, info.value.field, info.value.segment) == (ErrorCode.E_DTYPE, "sampling_mask[1]", 1)
    text = '{"choices": [{"index": 0, "token_ids": [1], "sampling_mask": [' + "[" * 985 + "1" + "]" * 985 + "]}]}"
    body = _parsed_on_a_fresh_stack(text)
    for read in (vllm.from_generate_response, lambda b: vllm.from_generate_stream([b])):
        with pytest.raises(SamplingMaskError) as info:
            read(body)
        assert (info.value.code, info.value.row) == (ErrorCode.E_DTYPE, 0) and len(str(info.value)) < 200


def test_public_readers_spell_out_their_options():
    """No public ``from_*`` reader takes ``**kwargs``; pass-through options still arrive."""
    import inspect

    for module in (miles, nemo_rl, prime_rl, sglang, skyrl, slime, vllm):
        for name in module.__all__:
            if name.startswith("from_"):
                kinds = {p.kind for p in inspect.signature(getattr(module, name)).parameters.values()}
                assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{module.__name__}.{name}"
    dense = [[3, -1], [-1, -1]]
    assert skyrl.from_packed(dense, [0, 2], metadata={"run": "a"}).metadata == {"run": "a"}
    sample = {"rollout_top_p_token_ids": [3], "rollout_top_p_token_offsets": [0, 1]}
    assert slime.from_samples([sample], sampled_token_ids=[3]).sampled_token_ids.tolist() == [3]
    assert sglang.from_chat_response({"choices": [{}]}, on_missing="none") == [None]
    assert miles.from_samples([([4], [0, 1])], temperature=[0.5]).temperature.tolist() == [0.5]
    # A reader refuses an option it does not take (one its input gives), even when it returns early.
    for call in (
        lambda: slime.from_meta_info({}, cu_seqlens=[0, 0]),
        lambda: slime.from_samples([], cu_seqlens=[0]),
        lambda: nemo_rl.from_data({}, sampled_token_ids=[1]),
        lambda: sglang.from_chat_response({"choices": []}, temperature=1.0),
        lambda: vllm.from_generate_response({"choices": []}, metadata={}),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()
