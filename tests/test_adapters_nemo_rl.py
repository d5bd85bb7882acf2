"""NeMo-RL-style adapter: token_ids [B, T, K] + sizes [B, T] aligned with input tokens."""

from __future__ import annotations

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import nemo_rl

# Two sequences padded to T = 4; entries past each size are garbage that must be ignored.
TOKEN_IDS = np.array(
    [
        [[0, 0, 0], [6, 2, 9], [4, 77, 77], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 0], [3, 1, 0], [55, 55, 55]],
    ]
)
SIZES = np.array([[0, 3, 1, 0], [0, 0, 2, 0]])
LENGTHS = np.array([4, 3])


def test_read_ignores_padding_entries_and_positions():
    mask = nemo_rl.from_tensors(TOKEN_IDS, SIZES, input_lengths=LENGTHS, vocab_size=100)
    assert mask.cu_seqlens.tolist() == [0, 4, 7]
    assert mask.to_rows() == [[], [6, 2, 9], [4], [], [], [], [3, 1]]


def test_round_trip_through_tensors_and_batch_dict():
    mask = nemo_rl.from_tensors(TOKEN_IDS, SIZES, input_lengths=LENGTHS)
    token_ids, sizes = nemo_rl.to_tensors(mask, seq_len=4, width=3, pad_value=0)
    assert np.array_equal(sizes, SIZES) and sizes.dtype == np.int32
    assert token_ids[0, 1].tolist() == [6, 2, 9] and token_ids[0, 2].tolist() == [4, 0, 0]
    batch = {"token_ids": token_ids, "sizes": sizes, "input_lengths": LENGTHS}
    assert nemo_rl.from_batch(batch) == mask


@pytest.mark.parametrize(
    ("sizes", "lengths", "code"),
    [
        (np.array([[0, 4, 1, 0], [0, 0, 2, 0]]), LENGTHS, ErrorCode.E_WIDTH),
        (np.array([[0, -1, 1, 0], [0, 0, 2, 0]]), LENGTHS, ErrorCode.E_RANGE),
        (np.array([[0, 3, 1, 0], [0, 0, 2, 1]]), LENGTHS, ErrorCode.E_SCHEMA),
        (np.array([[0, 3, 1], [0, 0, 2]]), LENGTHS, ErrorCode.E_SHAPE),
        (SIZES, np.array([4, 5]), ErrorCode.E_SHAPE),
    ],
)
def test_bad_tensors(sizes, lengths, code):
    with pytest.raises(SamplingMaskError) as err:
        nemo_rl.from_tensors(TOKEN_IDS, sizes, input_lengths=lengths)
    assert err.value.code is code


def test_duplicate_inside_a_row_names_it():
    ids = TOKEN_IDS.copy()
    ids[1, 2, 1] = 3
    with pytest.raises(SamplingMaskError) as err:
        nemo_rl.from_tensors(ids, SIZES, input_lengths=LENGTHS)
    assert err.value.code is ErrorCode.E_DUPLICATE and err.value.row == 6
