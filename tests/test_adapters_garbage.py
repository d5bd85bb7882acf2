"""Every adapter reader, fed arbitrary JSON-like data, returns a mask or raises SamplingMaskError only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampling_mask import SamplingMask, SamplingMaskError
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


READERS = [
    (vllm.from_completion_output, _with_keys(["sampling_mask", "token_ids"])),
    (vllm.from_generate_choice, _with_keys(["sampling_mask", "token_ids"])),
    (lambda d: (vllm.from_generate_response(d) or [None])[0], _with_keys(["choices"])),
    (lambda d: (vllm.from_generate_stream([d]) or [None])[0], _with_keys(["choices"])),
    (vllm.from_generate_logprobs, _with_keys(["content", "logprobs"])),
    (vllm.from_engine_csr, _with_keys(["token_ids", "offsets", "cu_num_generated_tokens"])),
    (
        lambda d: vllm.from_engine_tensors(d, d.get("num_sampled_tokens") if isinstance(d, dict) else None),
        _with_keys(["token_ids", "counts", "packed_mask", "vocab_size", "rows_per_request", "num_sampled_tokens"]),
    ),
    (vllm.from_flat_logprobs, _with_keys(["start_indices", "end_indices", "token_ids", "logprobs", "ranks"])),
    (trl.masks_from_server_response, _with_keys(["sampling_mask", "completion_ids"])),
    (lambda d: trl.masks_from_request_outputs([d]), _with_keys(["outputs"])),
    (
        sglang.from_meta_info,
        _with_keys(
            ["output_token_sampling_mask", "output_token_sampling_logprobs", "output_token_sampling_mask_length"]
        ),
    ),
    (sglang.from_chunked, _with_keys(["lengths", "token_ids", "logprobs"])),
    (lambda d: sglang.from_stream([d]), _with_keys(["meta_info", "output_ids"])),
    (sglang.from_chat_choice, _with_keys(["meta_info", "response_token_ids"])),
    (skyrl.from_envelope, _with_keys(["data", "shape", "dtype"])),
    (skyrl.from_dense, _json),
    (prime_rl.from_wire, _with_keys(["ids", "counts"])),
    (miles.from_sample, _with_keys(["rollout_sampling_mask_ids", "rollout_sampling_mask_offsets", "response_length"])),
    (slime.from_sample, _with_keys(["rollout_top_p_token_ids", "rollout_top_p_token_offsets", "response_length"])),
    (slime.from_meta_info, _with_keys(["top_p_token_ids", "top_p_token_offsets"])),
    (nemo_rl.from_data, _with_keys(["sampling_mask_token_ids", "sampling_mask_sizes", "input_lengths", "input_ids"])),
]


@pytest.mark.parametrize(("reader", "strategy"), READERS, ids=lambda v: getattr(v, "__qualname__", ""))
def test_only_sampling_mask_errors_escape(reader, strategy):
    @given(strategy)
    def check(data):
        try:
            result = reader(data)
        except SamplingMaskError:
            return
        assert result is None or isinstance(result, SamplingMask)

    check()


def test_public_readers_spell_out_their_options():
    """Issue 28: no public ``from_*`` reader takes ``**kwargs``; pass-through options still arrive."""
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
