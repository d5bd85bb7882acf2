"""Miles / slime adapter: flat ids + offsets per sample."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import miles

# Sample 0: three response tokens, the last a tool token recorded with singleton support (Miles' way).
SAMPLE_0 = {"sampling_mask_ids": [8, 3, 5, 12], "sampling_mask_offsets": [0, 2, 3, 4], "response_length": 3}
SAMPLE_1 = SimpleNamespace(sampling_mask_ids=np.array([], np.int32), sampling_mask_offsets=np.array([0, 0]))


def test_samples_round_trip():
    mask = miles.from_samples([SAMPLE_0, SAMPLE_1], vocab_size=16)
    assert mask.cu_seqlens.tolist() == [0, 3, 4]
    assert mask.to_rows() == [[8, 3], [5], [12], []]
    pairs = miles.to_samples(mask)
    assert [p[1].tolist() for p in pairs] == [[0, 2, 3, 4], [0, 0]]
    assert miles.from_samples(pairs, vocab_size=16) == mask
    assert miles.from_samples([]).num_segments == 0


def test_custom_field_names():
    sample = {"ids": [1], "offsets": [0, 1]}
    assert miles.from_sample(sample, ids_field="ids", offsets_field="offsets").to_rows() == [[1]]


@pytest.mark.parametrize(
    ("sample", "code"),
    [
        ({**SAMPLE_0, "response_length": 4}, ErrorCode.E_SHAPE),
        ({**SAMPLE_0, "sampling_mask_offsets": [0, 2, 3, 5]}, ErrorCode.E_OFFSETS),
        ({**SAMPLE_0, "sampling_mask_ids": [8, 8, 5, 12]}, ErrorCode.E_DUPLICATE),
        ({"sampling_mask_ids": [1]}, ErrorCode.E_SCHEMA),
        ((np.array([1]), np.array([0, 1]), 3), ErrorCode.E_SCHEMA),
    ],
)
def test_bad_samples_name_the_sample(sample, code):
    with pytest.raises(SamplingMaskError) as err:
        miles.from_samples([SAMPLE_1, sample])
    assert err.value.code is code and err.value.segment == 1
