"""NeMo-RL adapter: the dense ``[B, T, K]`` + sizes layout of NVIDIA-NeMo/RL PR #3937 (unmerged),
checked with the PR's own functions (``tests/fixtures/upstream/nemo_rl/pr3937.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sampling_mask as sm  # noqa: E402
import sampling_mask.adapters as adapters  # noqa: E402
from sampling_mask.adapters import nemo_rl  # noqa: E402
from sampling_mask.core.errors import ErrorCode, SamplingMaskError  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "pr3937", Path(__file__).parent / "fixtures" / "upstream" / "nemo_rl" / "pr3937.py"
)
assert _SPEC is not None and _SPEC.loader is not None
pr3937 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(pr3937)


def _keep_mask(dense, sizes, targets, vocab):
    """PR #3937's ``apply_sampling_mask`` keep mask: the support NeMo-RL's trainer scores over."""
    mask = pr3937.SamplingMask(token_ids=torch.as_tensor(dense), sizes=torch.as_tensor(sizes))
    return pr3937.apply_sampling_mask(torch.zeros((*targets.shape, vocab)), torch.as_tensor(targets), mask)[1]


def test_rows_with_id_zero_round_trip():
    rows = [[5, 0], [3], [], [0]]
    mask = sm.SamplingMask.from_rows(rows, vocab_size=8)
    dense, sizes = nemo_rl.to_batch(mask)
    assert dense.dtype == np.int32 and sizes.dtype == np.int32
    assert dense.tolist() == [[[5, 0], [3, 0], [0, 0], [0, 0]]]  # padded with 0, a real id
    assert sizes.tolist() == [[2, 1, 0, 1]]
    back = nemo_rl.from_batch(dense, sizes, vocab_size=8)
    assert back.to_rows() == rows
    # NeMo-RL's own trainer code reads the same supports (an empty row scores over {target}).
    targets = np.array([[0, 3, 6, 0]])
    keep = _keep_mask(dense, sizes, targets, 8)[0]
    assert [torch.nonzero(r).flatten().tolist() for r in keep] == [[0, 5], [3], [6], [0]]


def test_the_prs_pad_and_align_case():
    case = pr3937.PAD_AND_ALIGN_CASE
    rows = [[], []] + case["supports"] + [[]]  # token-aligned: prompt rows, generated rows, padding
    mask = sm.SamplingMask.from_rows(rows, cu_seqlens=[0, case["padded_length"]])
    dense, sizes = nemo_rl.to_batch(mask, width=case["top_k"])
    assert dense[0].tolist() == case["token_ids"] and sizes[0].tolist() == case["sizes"]
    assert nemo_rl.from_batch(dense, sizes).to_rows() == rows


def test_batch_of_sequences_with_input_lengths_and_ids():
    mask = sm.SamplingMask.from_rows(
        [[], [4, 0], [2], [], [0, 1, 7]], cu_seqlens=[0, 3, 5], sampled_token_ids=[6, 0, 2, 6, 7], vocab_size=8
    )
    dense, sizes = nemo_rl.to_batch(mask, width=4, as_torch=True)
    assert dense.shape == (2, 3, 4) and dense.dtype == torch.int32 and sizes[1].tolist() == [0, 3, 0]
    ids = torch.tensor([[6, 0, 2], [6, 7, 0]])
    back = nemo_rl.from_batch(dense, sizes, input_lengths=[3, 2], input_ids=ids, vocab_size=8)
    assert back == mask
    # The PR's validator accepts what to_batch writes (targets in every non-empty row).
    pr3937.validate_sampling_mask_contents(pr3937.SamplingMask(dense, sizes), ids, 8)
    # from_data reads a batch dict and refuses a torn pair as the PR does.
    data = {**nemo_rl.to_data(mask, width=4), "input_lengths": torch.tensor([3, 2]), "input_ids": ids}
    assert nemo_rl.from_data(data, vocab_size=8) == mask
    assert nemo_rl.from_data({"input_ids": ids}) is None
    with pytest.raises(SamplingMaskError) as info:
        nemo_rl.from_data({nemo_rl.TOKEN_IDS_FIELD: dense})
    assert info.value.code is ErrorCode.E_SCHEMA and info.value.field == nemo_rl.SIZES_FIELD


def test_backfilled_rows_are_empty():
    """The PR zero-fills non-generated messages (``backfill_missing_sampling_masks``): size 0 rows."""
    log = [
        {"role": "user", "token_ids": torch.tensor([10, 11])},
        {
            "role": "assistant",
            "token_ids": torch.tensor([0, 21]),
            "sampling_mask_token_ids": torch.tensor([[0, 7], [21, 0]], dtype=torch.int32),
            "sampling_mask_sizes": torch.tensor([2, 1], dtype=torch.int32),
        },
    ]
    pr3937.backfill_missing_sampling_masks([log])
    dense = torch.cat([m["sampling_mask_token_ids"] for m in log])[None]
    sizes = torch.cat([m["sampling_mask_sizes"] for m in log])[None]
    assert nemo_rl.from_batch(dense, sizes).to_rows() == [[], [], [0, 7], [21]]


@pytest.mark.parametrize(
    ("dense", "sizes", "kwargs", "code", "field"),
    [
        (np.zeros((1, 2, 2), np.int32), np.array([[3, 0]]), {}, ErrorCode.E_RANGE, "sampling_mask_sizes"),
        (np.zeros((1, 2, 2), np.int32), np.array([[-1, 0]]), {}, ErrorCode.E_RANGE, "sampling_mask_sizes"),
        (np.zeros((1, 2, 2), np.int32), np.array([1, 0]), {}, ErrorCode.E_SHAPE, "sampling_mask_sizes"),
        (np.zeros((1, 2), np.int32), np.array([[1, 0]]), {}, ErrorCode.E_SHAPE, "sampling_mask_token_ids"),
        (np.zeros((1, 2, 0), np.int32), np.array([[0, 0]]), {}, ErrorCode.E_SHAPE, "sampling_mask_token_ids"),
        (np.zeros((1, 2, 2), np.int32), np.array([[1, 1]]), {"input_lengths": [1]}, ErrorCode.E_SHAPE, None),
        (np.zeros((1, 2, 2), np.int32), np.array([[1, 0]]), {"input_lengths": [3]}, ErrorCode.E_RANGE, None),
        (np.zeros((1, 2, 2), np.float32), np.array([[1, 0]]), {}, ErrorCode.E_DTYPE, None),
        (np.array([[[0, 0], [1, 0]]], np.int32), np.array([[2, 1]]), {}, ErrorCode.E_DUPLICATE, None),
        (np.array([[[-3, 0], [1, 0]]], np.int32), np.array([[1, 1]]), {}, ErrorCode.E_RANGE, None),
    ],
)
def test_bad_batches_refused(dense, sizes, kwargs, code, field):
    with pytest.raises(SamplingMaskError) as info:
        nemo_rl.from_batch(dense, sizes, **kwargs)
    assert info.value.code is code
    if field is not None:
        assert info.value.field == field


def test_to_batch_bounds():
    mask = sm.SamplingMask.from_rows([[1, 2, 3], [4]], cu_seqlens=[0, 1, 2])
    with pytest.raises(SamplingMaskError) as info:
        nemo_rl.to_batch(mask, width=2)
    assert info.value.code is ErrorCode.E_WIDTH
    with pytest.raises(SamplingMaskError) as info:
        nemo_rl.to_batch(sm.SamplingMask.from_rows([[1], [2]]), seq_len=1)
    assert info.value.code is ErrorCode.E_SHAPE
    dense, sizes = nemo_rl.to_batch(sm.SamplingMask.from_rows([[], []]))
    assert dense.shape == (1, 2, 1) and sizes.tolist() == [[0, 0]]  # K >= 1 even with no ids


def test_listed_in_the_package():
    assert "nemo_rl" in adapters.__all__


@pytest.mark.parametrize("kind", ["sparse", "sparse_csr", "nested"])
@pytest.mark.parametrize("field", [nemo_rl.TOKEN_IDS_FIELD, nemo_rl.SIZES_FIELD, "input_lengths"])
def test_sparse_or_nested_tensors_are_refused_by_name(kind, field):
    """Every tensor argument goes through the one tensor check: a sparse or nested tensor is
    ``E_SCHEMA`` naming it (it was a TypeError / RuntimeError from torch)."""
    mask = sm.SamplingMask.from_rows([[1, 6], [0], [3], [2, 5, 7]], cu_seqlens=[0, 2, 4])
    dense, sizes = nemo_rl.to_batch(mask, width=3, as_torch=True)
    args = {nemo_rl.TOKEN_IDS_FIELD: dense, nemo_rl.SIZES_FIELD: sizes, "input_lengths": torch.tensor([2, 2])}
    value = args[field]
    if kind == "nested":
        args[field] = torch.nested.nested_tensor(list(value) if value.ndim > 1 else [value])
    else:
        args[field] = value.to_sparse() if kind == "sparse" or value.ndim != 2 else value.to_sparse_csr()
    call = lambda a: nemo_rl.from_batch(  # noqa: E731
        a[nemo_rl.TOKEN_IDS_FIELD], a[nemo_rl.SIZES_FIELD], input_lengths=a["input_lengths"]
    )
    with pytest.raises(SamplingMaskError) as info:
        call(args)
    assert info.value.code is ErrorCode.E_SCHEMA and info.value.field == field
    assert call({**args, field: value}).to_rows() == mask.to_rows()
