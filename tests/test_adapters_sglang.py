"""SGLang adapter: meta_info (unsorted rows, tie rows wider than top_k) and the chunked form."""

from __future__ import annotations

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import sglang

# top_k = 2, but row 1 keeps four ids tied at the cutoff; rows arrive unsorted.
META_INFO = {
    "output_token_sampling_mask": [[42, 7], [9, 3, 12, 5], [1], [30, 2]],
    "output_token_sampling_logprobs": [-0.25, -1.5, 0.0, -0.75],
    "output_token_sampling_mask_length": 4,
    "finish_reason": {"type": "stop"},
}
OUTPUT_IDS = [7, 12, 1, 30]


def test_meta_info_round_trip_keeps_sglang_order():
    mask = sglang.from_meta_info(META_INFO, output_ids=OUTPUT_IDS, vocab_size=64, metadata={"top_k": 2})
    assert mask is not None
    assert mask.to_rows() == META_INFO["output_token_sampling_mask"]
    assert not mask.is_canonical
    assert int(mask.row_lengths.max()) == 4 > mask.metadata["top_k"]  # ties wider than top_k survive
    assert mask.sampled_token_ids.tolist() == OUTPUT_IDS
    out = sglang.to_meta_info(mask)
    assert out["output_token_sampling_mask"] == META_INFO["output_token_sampling_mask"]
    assert out["output_token_sampling_mask_length"] == 4
    np.testing.assert_allclose(out["output_token_sampling_logprobs"], META_INFO["output_token_sampling_logprobs"])
    assert sglang.from_meta_info(out, output_ids=OUTPUT_IDS, vocab_size=64, metadata={"top_k": 2}) == mask


def test_response_and_per_row_lengths():
    response = {"output_ids": OUTPUT_IDS, "meta_info": {**META_INFO, "output_token_sampling_mask_length": [2, 4, 1, 2]}}
    mask = sglang.from_response(response)
    assert mask is not None and mask.canonical().to_rows()[1] == [3, 5, 9, 12]


def test_missing_mask_raises_or_returns_none():
    aborted = {"finish_reason": {"type": "abort"}}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(aborted)
    assert err.value.code is ErrorCode.E_SCHEMA and "abort" in str(err.value)
    assert sglang.from_meta_info(aborted, on_missing="none") is None


@pytest.mark.parametrize(
    ("change", "code", "row"),
    [
        ({"output_token_sampling_mask_length": 5}, ErrorCode.E_SHAPE, None),
        ({"output_token_sampling_mask_length": [2, 3, 1, 2]}, ErrorCode.E_OFFSETS, 1),
        ({"output_token_sampling_logprobs": [0.0]}, ErrorCode.E_SHAPE, None),
        ({"output_token_sampling_mask": [[1, 1]]}, ErrorCode.E_DUPLICATE, 0),
        ({"output_token_sampling_mask": [[1], [2.5]]}, ErrorCode.E_DTYPE, 1),
        ({"output_token_sampling_mask": "[[1]]"}, ErrorCode.E_SCHEMA, None),
    ],
)
def test_bad_meta_info(change, code, row):
    meta = {**META_INFO, **change}
    if "output_token_sampling_mask" in change and "output_token_sampling_logprobs" not in change:
        meta.pop("output_token_sampling_logprobs")
        meta.pop("output_token_sampling_mask_length")
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(meta)
    assert err.value.code is code and err.value.row == row


def test_sampled_id_outside_its_row():
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(META_INFO, output_ids=[7, 12, 2, 30])
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 2


def test_bounded_mode_truncation_is_refused_unless_allowed():
    meta = {**META_INFO, "output_token_sampling_mask_truncated": True}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_meta_info(meta)
    assert err.value.field == "output_token_sampling_mask_truncated"
    mask = sglang.from_meta_info(meta, allow_truncated=True)
    assert mask is not None and mask.metadata["truncated"] is True


def test_chunked_per_row_and_per_id_round_trips():
    mask = sglang.from_meta_info(META_INFO, vocab_size=64)
    per_row = sglang.to_chunked(mask)
    assert per_row["lengths"].dtype == np.int32 and per_row["lengths"].tolist() == [2, 4, 1, 2]
    assert sglang.from_chunked(per_row, vocab_size=64) == mask
    with_support = mask.replace(support_logprobs=np.linspace(-3, 0, mask.nnz, dtype=np.float32))
    per_id = sglang.to_chunked(with_support, logprobs_per="id")
    back = sglang.from_chunked(per_id, vocab_size=64)
    np.testing.assert_array_equal(back.support_logprobs, with_support.support_logprobs)
    assert back.sampled_logprobs is None


def test_chunked_ambiguity_needs_logprobs_per():
    chunked = {"lengths": [2, 0], "token_ids": [4, 5], "logprobs": [-0.5, -1.0]}
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_chunked(chunked)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "logprobs"
    assert sglang.from_chunked(chunked, logprobs_per="id").support_logprobs.tolist() == [-0.5, -1.0]
    singletons = {"lengths": [1, 1], "token_ids": [4, 5], "logprobs": [-0.5, -1.0]}
    assert sglang.from_chunked(singletons).sampled_logprobs.tolist() == [-0.5, -1.0]
    with pytest.raises(SamplingMaskError) as err:
        sglang.from_chunked({"lengths": [3], "token_ids": [4, 5]})
    assert err.value.code is ErrorCode.E_OFFSETS
