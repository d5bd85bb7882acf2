"""Trainer-side alignment: shift-left, dense micro-batches, padding, context-parallel sharding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.data import alignment as al

# Two sequences: prompt of 2 then 2 generated tokens; prompt of 1 then 1 generated token.
GENERATED = SamplingMask.from_rows(
    [[5, 1], [7], [3, 2, 9]], cu_seqlens=[0, 2, 3], sampled_token_ids=[5, 7, 9], sampled_logprobs=[-0.1, -0.2, -0.3]
)


def test_label_alignment_puts_row_t_plus_1_at_t():
    labels = al.label_aligned(GENERATED, [2, 1])
    assert labels.cu_seqlens.tolist() == [0, 4, 6]
    assert labels.to_rows() == [[], [5, 1], [7], [], [3, 2, 9], []]
    assert labels.sampled_token_ids.tolist() == [-1, 5, 7, -1, 9, -1]
    assert np.isnan(labels.sampled_logprobs[[0, 3, 5]]).all()
    assert al.unshift(labels) == al.input_aligned(GENERATED, [2, 1])


def test_shift_left_refuses_support_nobody_scores():
    with pytest.raises(SamplingMaskError) as err:
        al.label_aligned(GENERATED, [0, 1])
    assert err.value.code is ErrorCode.E_RANGE and err.value.segment == 0
    with pytest.raises(SamplingMaskError) as err:
        al.unshift(SamplingMask.from_rows([[1], [2]]))
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 1


def test_dense_micro_batch_forms():
    labels = al.label_aligned(GENERATED, [2, 1])
    packed, cu = al.to_packed_dense(labels, width=4)
    assert packed.shape == (6, 4) and cu.dtype == np.int32 and cu.tolist() == [0, 4, 6]
    batch = al.to_batch_dense(labels, seq_len=5, width=3)
    assert batch.shape == (2, 5, 3)
    assert batch[0, 1].tolist() == [5, 1, -1] and batch[1, 0].tolist() == [3, 2, 9]
    assert np.all(batch[1, 2:] == -1) and np.all(batch[0, 4] == -1)
    assert al.from_batch_dense(batch, [4, 2]).same_support(labels)
    with pytest.raises(SamplingMaskError) as err:
        al.from_batch_dense(batch, [1, 2])
    assert err.value.code is ErrorCode.E_PADDING and err.value.segment == 0
    with pytest.raises(SamplingMaskError) as err:
        al.to_batch_dense(labels, seq_len=3)
    assert err.value.code is ErrorCode.E_SHAPE


def test_padding_segments():
    labels = al.label_aligned(GENERATED, [2, 1])
    padded = al.pad_segments(labels, multiple=4)
    assert padded.cu_seqlens.tolist() == [0, 4, 8]
    assert padded.segment(1).to_rows() == [[3, 2, 9], [], [], []]
    assert padded.segment(1).sampled_token_ids.tolist() == [9, -1, -1, -1]
    assert al.pad_segments(labels, lengths=[5, 2]).cu_seqlens.tolist() == [0, 5, 7]
    filled = al.append_padding_segment(labels, 10)
    assert filled.num_segments == 3 and filled.num_rows == 10 and filled.segment(2).nnz == 0
    with pytest.raises(SamplingMaskError):
        al.pad_segments(labels, lengths=[3, 2])
    with pytest.raises(SamplingMaskError):
        al.append_padding_segment(labels, 5)


def test_context_parallel_rows_worked_examples():
    cu = [0, 8, 13]  # lengths 8 and 5
    assert al.context_parallel_rows(cu, 2, 0, "zigzag").tolist() == [0, 1, 6, 7, 8, 9, 12]
    assert al.context_parallel_rows(cu, 2, 1, "zigzag").tolist() == [2, 3, 4, 5, 10, 11]
    # length 5 in 4 chunks: sizes 2, 1, 1, 1 (np.array_split): rank 0 gets chunks 0 and 3
    assert al.context_parallel_rows(cu, 2, 0, "contiguous").tolist() == [0, 1, 2, 3, 8, 9, 10]
    assert al.context_parallel_rows(cu, 1, 0, "zigzag").tolist() == list(range(13))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (([0, 4], 0, 0), ErrorCode.E_RANGE),
        (([0, 4], 2, 2), ErrorCode.E_RANGE),
        (([0, 4], 2, True), ErrorCode.E_SCHEMA),
        (([1, 4], 2, 0), ErrorCode.E_SEGMENTS),
        (([0, 4, 3], 2, 0), ErrorCode.E_SEGMENTS),
    ],
)
def test_context_parallel_bad_arguments(args, code):
    with pytest.raises(SamplingMaskError) as err:
        al.context_parallel_rows(*args)
    assert err.value.code is code
    with pytest.raises(SamplingMaskError):
        al.context_parallel_rows([0, 4], 2, 0, "ring")


@st.composite
def _aligned_batches(draw):
    lengths = draw(st.lists(st.integers(0, 11), min_size=1, max_size=4))
    rows = [draw(st.lists(st.integers(0, 40), max_size=4, unique=True)) if i else [] for n in lengths for i in range(n)]
    cu = np.concatenate([[0], np.cumsum(lengths)])
    sampled = [r[0] if r else -1 for r in rows]
    mask = SamplingMask.from_rows(rows, cu_seqlens=cu, vocab_size=41, sampled_token_ids=sampled)
    return al.shift_left(mask), draw(st.integers(1, 5)), draw(st.sampled_from(["contiguous", "zigzag"]))


@given(_aligned_batches())
def test_shards_reassemble_to_the_unsharded_aligned_mask(case):
    aligned, world, mode = case
    shards = [al.shard_mask(aligned, world, r, mode) for r in range(world)]
    assert sum(s.num_rows for s in shards) == aligned.num_rows
    assert al.unshard_mask(shards, aligned.cu_seqlens, mode) == aligned
    labels = aligned.sampled_token_ids
    label_shards = [al.shard_array(labels, aligned.cu_seqlens, world, r, mode) for r in range(world)]
    for shard, label_shard in zip(shards, label_shards, strict=True):
        assert np.array_equal(shard.sampled_token_ids, label_shard)  # masks split exactly like labels
    assert np.array_equal(al.unshard_array(label_shards, aligned.cu_seqlens, mode), labels)


def test_torch_inputs_and_outputs():
    torch = pytest.importorskip("torch")
    cu = torch.tensor([0, 8, 13], dtype=torch.int32)
    labels = torch.arange(13)
    shard = al.shard_array(labels, cu, 2, 1, "zigzag")
    assert isinstance(shard, torch.Tensor) and shard.tolist() == [2, 3, 4, 5, 10, 11]
    dense = al.to_torch(al.to_batch_dense(al.label_aligned(GENERATED, [2, 1])))
    assert dense.dtype == torch.int32 and tuple(dense.shape) == (2, 4, 3)
