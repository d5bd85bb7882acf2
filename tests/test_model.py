"""Unit tests of SamplingMask: constructors (a row is a sequence of ids, never bytes), layouts, views,
segments, equality, companions."""

from __future__ import annotations

import gc
import inspect
import json
import pickle
from typing import Any

import numpy as np
import pytest
from file_checks import raised_code
from hypothesis import given, settings
from hypothesis import strategies as st
from mask_examples import VLLM_FIXTURES

import sampling_mask
from sampling_mask import COMPANIONS, METADATA_KEYS, ErrorCode, SamplingMask, SamplingMaskError, concat

FIXTURES = VLLM_FIXTURES


def example(**kwargs: object) -> SamplingMask:
    return SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3], **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the README's example
def test_the_example_round_trips_through_every_layout() -> None:
    m = SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3])
    assert SamplingMask.from_dense(m.to_dense(), vocab_size=10, cu_seqlens=m.cu_seqlens) == m
    assert SamplingMask.from_ragged(*m.to_ragged(), vocab_size=10, cu_seqlens=m.cu_seqlens) == m
    assert SamplingMask.from_counts(*m.to_counts(), vocab_size=10, cu_seqlens=m.cu_seqlens) == m
    assert SamplingMask.from_bitmask(m.to_bitmask(), 10, cu_seqlens=m.cu_seqlens) == m
    dense = m.to_dense(width=4)
    assert set(dense[0, :2].tolist()) == {1, 5}
    assert dense[0, 2:].tolist() == [-1, -1]


def test_padding_inside_a_row_and_an_id_past_the_vocabulary_are_refused() -> None:
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_dense(np.array([[5, -1, 1]], dtype=np.int32))
    assert info.value.code is ErrorCode.E_PADDING
    with pytest.raises(SamplingMaskError) as info:
        SamplingMask.from_rows([[10]], vocab_size=10)
    assert info.value.code is ErrorCode.E_RANGE


# ---------------------------------------------------------------- each layout, exact values
def test_every_layout_of_the_worked_example() -> None:
    """The spec's worked example, value for value."""
    m = example()
    assert m.to_rows() == [[5, 1], [], [7]]
    ids, offsets = m.to_ragged()
    assert ids.dtype == np.int32 and ids.tolist() == [5, 1, 7]
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, 2, 2, 3]
    counts = m.to_counts()[1]
    assert counts.dtype == np.int32 and counts.tolist() == [2, 0, 1]
    dense = m.to_dense()
    assert dense.dtype == np.int32 and dense.tolist() == [[5, 1], [-1, -1], [7, -1]]
    bits = m.to_bitmask()
    assert bits.dtype == np.uint8 and bits.tolist() == [[0b00100010, 0], [0, 0], [0b10000000, 0]]
    assert m.canonical().to_rows() == [[1, 5], [], [7]]
    assert (m.num_rows, m.num_segments, m.nnz, m.row_lengths.tolist()) == (3, 2, 3, [2, 0, 1])
    assert m.cu_seqlens.tolist() == [0, 2, 3]
    # Little-endian, C-contiguous bytes, as the spec's example lists them.
    assert dense.tobytes() == bytes.fromhex("0500000001000000ffffffffffffffff07000000ffffffff")
    assert ids.tobytes() == bytes.fromhex("050000000100000007000000")
    assert offsets.tobytes() == b"".join(v.to_bytes(8, "little") for v in (0, 2, 2, 3))
    assert bits.tobytes() == bytes([0x22, 0, 0, 0, 0x80, 0])


def test_packed_layout_accepts_int32_cu_seqlens() -> None:
    m = SamplingMask.from_dense(np.array([[5, 1], [-1, -1], [7, -1]]), cu_seqlens=np.array([0, 2, 3], np.int32))
    assert m.cu_seqlens.dtype == np.int64 and m.cu_seqlens.tolist() == [0, 2, 3]
    assert m.same_support(example())


def test_default_single_segment_and_zero_rows() -> None:
    m = SamplingMask.from_rows([[1], [2]])
    assert m.cu_seqlens.tolist() == [0, 2] and m.num_segments == 1
    empty = SamplingMask.from_rows([])
    assert (empty.num_rows, empty.nnz, empty.num_segments) == (0, 0, 1)
    assert empty.to_dense().shape == (0, 0)
    assert empty.to_bitmask(10).shape == (0, 2)
    assert SamplingMask.from_dense(np.zeros((0, 3), np.int32)) == empty
    assert SamplingMask.from_ragged([], [0], cu_seqlens=[0]).num_segments == 0


def test_from_rows_accepts_numpy_rows_and_sets() -> None:
    rows = [np.array([5, 1]), np.array([]), np.array([7], dtype=np.uint16)]
    assert SamplingMask.from_rows(rows) == SamplingMask.from_rows([[5, 1], [], [7]])
    assert SamplingMask.from_rows([{1, 5}, set(), (7,)]) == SamplingMask.from_rows([[1, 5], [], [7]])
    assert SamplingMask.from_rows(np.array([[5, 1], [7, -1]])).to_rows() == [[5, 1], [7]]  # 2-D: dense


@settings(max_examples=100)
@given(st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), max_size=20))
def test_from_rows_fast_path_agrees_with_the_generic_one(rows: list[list[int]]) -> None:
    # A list of lists of int32 takes the marshal record reader; a tuple of them the generic path.
    fast = SamplingMask.from_rows(rows, validate=False)
    generic = SamplingMask.from_rows(tuple(rows), validate=False)
    assert fast.ids.tolist() == generic.ids.tolist() == [i for row in rows for i in row]
    assert fast.offsets.tolist() == generic.offsets.tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()


def test_from_counts_any_integer_dtype() -> None:
    m = SamplingMask.from_counts(np.array([5, 1, 7], np.int64), np.array([2, 0, 1], np.uint8), vocab_size=10)
    assert m.offsets.tolist() == [0, 2, 2, 3]


def test_dense_width_and_padding() -> None:
    m = example()
    assert m.to_dense(width=6)[2].tolist() == [7, -1, -1, -1, -1, -1]
    all_pad = SamplingMask.from_dense(np.full((2, 4), -1))
    assert all_pad.row_lengths.tolist() == [0, 0] and all_pad.nnz == 0
    assert all_pad.to_dense().shape == (2, 0)


def test_bitmask_of_a_full_vocabulary_row() -> None:
    vocab = 13
    m = SamplingMask.from_rows([list(range(vocab)), [12]], vocab_size=vocab)
    bits = m.to_bitmask()
    assert bits.tolist() == [[0xFF, 0b00011111], [0, 0b00010000]]
    assert SamplingMask.from_bitmask(bits, vocab) == m


def test_from_bitmask_is_canonical_and_to_bitmask_accepts_unsorted() -> None:
    m = SamplingMask.from_rows([[9, 3, 0], [4]], vocab_size=10)
    assert not m.is_canonical
    back = SamplingMask.from_bitmask(m.to_bitmask(), 10)
    assert back.is_canonical and back == m and back.to_rows() == [[0, 3, 9], [4]]


def test_to_bitmask_with_an_explicit_vocab() -> None:
    m = SamplingMask.from_rows([[3], [0, 9]])
    assert m.to_bitmask(10).shape == (2, 2)
    assert m.to_bitmask(10).tolist() == m.replace(vocab_size=10).to_bitmask().tolist()


# ---------------------------------------------------------------- views and immutability
def test_arrays_are_read_only_and_rows_are_views() -> None:
    m = example(sampled_token_ids=[5, -1, 7])
    for arr in (m.ids, m.offsets, m.cu_seqlens, m.sampled_token_ids):
        assert arr is not None and not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 1
    row = m.row(0)
    assert row.tolist() == [5, 1] and np.shares_memory(row, m.ids)
    assert m[-1].tolist() == [7] and m.row(1).size == 0
    with pytest.raises(IndexError):
        m.row(3)


def test_constructor_wraps_without_copy() -> None:
    ids = np.array([5, 1, 7], np.int32)
    offsets = np.array([0, 2, 2, 3], np.int64)
    m = SamplingMask.from_ragged(ids, offsets)
    assert np.shares_memory(m.ids, ids) and np.shares_memory(m.offsets, offsets)
    assert ids.flags.writeable  # the caller's array is untouched


def test_segment_is_a_view() -> None:
    m = example(sampled_token_ids=[5, -1, 7], support_logprobs=np.array([-0.5, -1.0, 0.0], np.float32))
    seg = m.segment(1)
    assert seg.to_rows() == [[7]] and seg.cu_seqlens.tolist() == [0, 1]
    assert np.shares_memory(seg.ids, m.ids)
    assert seg.sampled_token_ids.tolist() == [7]  # type: ignore[union-attr]
    assert seg.support_logprobs.tolist() == [0.0]  # type: ignore[union-attr]
    assert m.segment(-2).to_rows() == [[5, 1], []]
    with pytest.raises(IndexError):
        m.segment(2)


# ---------------------------------------------------------------- slicing, take, concat
def test_slicing_clips_segments() -> None:
    m = SamplingMask.from_rows([[1], [2], [3], [4], [5]], cu_seqlens=[0, 2, 5])
    part = m[1:4]
    assert part.to_rows() == [[2], [3], [4]] and part.cu_seqlens.tolist() == [0, 1, 3]
    assert m[:] == m and m[0:99] == m
    assert m[2:2].num_rows == 0
    assert m[-2:].to_rows() == [[4], [5]]


def test_slicing_keeps_empty_segments_at_its_ends() -> None:
    m = SamplingMask.from_rows([[1], [2], [3]], cu_seqlens=[0, 0, 1, 1, 3, 3])
    assert m[:] == m
    assert m[1:3].cu_seqlens.tolist() == [0, 0, 2, 2]
    assert m[0:1].cu_seqlens.tolist() == [0, 0, 1, 1]
    assert m[2:2].cu_seqlens.tolist() == [0]  # inside segment 3: no segment left


def test_take_reorders_and_repeats_segments() -> None:
    m = SamplingMask.from_rows(
        [[1], [2, 3], [], [4]],
        cu_seqlens=[0, 1, 3, 4],
        sampled_token_ids=[1, 3, -1, 4],
        support_logprobs=np.arange(4, dtype=np.float32),
    )
    t = m.take([2, 0, 2])
    assert t.to_rows() == [[4], [1], [4]] and t.cu_seqlens.tolist() == [0, 1, 2, 3]
    assert t.sampled_token_ids.tolist() == [4, 1, 4]  # type: ignore[union-attr]
    assert t.support_logprobs.tolist() == [3.0, 0.0, 3.0]  # type: ignore[union-attr]
    assert m.take([-1]) == m.segment(2).replace(cu_seqlens=[0, 1])
    assert m.take(np.array([], dtype=np.int64)).num_rows == 0
    assert m.take(range(3)) == m


def test_concat_appends_rows_and_segments() -> None:
    a = example()
    b = SamplingMask.from_rows([[3, 2]], vocab_size=10)
    c = concat([a, b])
    assert c.to_rows() == [[5, 1], [], [7], [3, 2]]
    assert c.cu_seqlens.tolist() == [0, 2, 3, 4] and c.vocab_size == 10
    assert sampling_mask.concat is concat
    assert concat([a]) == a
    # Unknown vocab adopts the known one when the ids fit.
    assert concat([SamplingMask.from_rows([[9]]), a]).vocab_size == 10


def test_concat_of_segments_rebuilds_the_mask() -> None:
    m = example(sampled_token_ids=[5, -1, 7], temperature=np.array([1.0, np.nan, 0.5], np.float32))
    assert concat([m.segment(i) for i in range(m.num_segments)]) == m


# ---------------------------------------------------------------- order, equality, companions
def test_canonical_sorts_rows_and_permutes_support_logprobs() -> None:
    m = SamplingMask.from_rows([[5, 1, 3], [7]], support_logprobs=np.array([-5, -1, -3, -7], np.float32))
    c = m.canonical()
    assert c.to_rows() == [[1, 3, 5], [7]] and c.is_canonical
    assert c.support_logprobs.tolist() == [-1.0, -3.0, -5.0, -7.0]  # type: ignore[union-attr]
    assert c.canonical() is c
    assert c == m


def test_equality_is_set_semantics_but_not_segmentation_blind() -> None:
    a = SamplingMask.from_rows([[5, 1], [], [7]])
    assert a == SamplingMask.from_rows([[1, 5], [], [7]])
    assert a != SamplingMask.from_rows([[5, 1], [], [7]], cu_seqlens=[0, 2, 3])
    assert a != SamplingMask.from_rows([[5, 1], [7], []])
    assert a != SamplingMask.from_rows([[5, 1], [], [7]], vocab_size=10)
    assert a != SamplingMask.from_rows([[5, 2], [], [7]])
    assert a != SamplingMask.from_rows([[5, 1], [], [7]], metadata={"producer": "x"})
    assert a.same_support(SamplingMask.from_rows([[1, 5], [], [7]], vocab_size=10, metadata={"top_k": 2}))
    assert (a == "mask") is False
    with pytest.raises(TypeError):
        hash(a)


def test_equality_compares_companions_in_canonical_order() -> None:
    a = SamplingMask.from_rows([[5, 1]], support_logprobs=np.array([-0.5, -1.0], np.float32))
    b = SamplingMask.from_rows([[1, 5]], support_logprobs=np.array([-1.0, -0.5], np.float32))
    c = SamplingMask.from_rows([[1, 5]], support_logprobs=np.array([-0.5, -1.0], np.float32))
    assert a == b and a != c
    nan = np.array([np.nan], np.float32)
    assert SamplingMask.from_rows([[1]], sampled_logprobs=nan) == SamplingMask.from_rows([[1]], sampled_logprobs=nan)


def test_companions_are_typed_and_listed() -> None:
    m = example(
        sampled_token_ids=np.array([1, 3, 7], np.int64),
        sampled_logprobs=[-0.1, 0.0, -2.5],
        temperature=np.array([0.7, np.nan, 1.0]),
        support_logprobs=np.zeros(3),
    )
    assert set(m.companions) == set(COMPANIONS)
    for name, dtype in COMPANIONS.items():
        assert m.companions[name].dtype == dtype
    assert m.temperature is not None and np.isnan(m.temperature[1])
    assert example().sampled_token_ids is None and example().companions == {}


def test_sampled_id_rules() -> None:
    # -1 (unknown) only on empty rows; an empty row may also name its sampled token.
    assert example(sampled_token_ids=[1, -1, 7]).sampled_token_ids.tolist() == [1, -1, 7]  # type: ignore[union-attr]
    assert example(sampled_token_ids=[5, 3, 7]).sampled_token_ids.tolist() == [5, 3, 7]  # type: ignore[union-attr]


def test_replace_changes_and_drops_fields() -> None:
    m = example(sampled_token_ids=[5, -1, 7])
    n = m.replace(sampled_token_ids=None, temperature=np.ones(3, np.float32), metadata={"top_k": 2})
    assert set(n.companions) == {"temperature"} and n.metadata == {"top_k": 2}
    assert n.to_rows() == m.to_rows() and n.vocab_size == m.vocab_size  # untouched fields stay
    assert m.replace(cu_seqlens=None).num_segments == 1
    assert m.replace(vocab_size=None).vocab_size is None
    with pytest.raises(SamplingMaskError) as info:
        m.replace(sampled_token_ids=[1, -1, 7], vocab_size=2)
    assert info.value.code is ErrorCode.E_RANGE


def test_from_constructors_spell_out_their_keywords() -> None:
    # No **kwargs: IDEs, type checkers and help() see every field each constructor takes.
    fields = {"cu_seqlens", "sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs", "metadata"}
    fields |= {"limits", "validate"}
    for name in ("from_ragged", "from_counts", "from_rows", "from_dense", "from_bitmask"):
        params = inspect.signature(getattr(SamplingMask, name)).parameters
        assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), name
        assert fields | {"vocab_size"} <= set(params), name
    assert set(inspect.signature(SamplingMask.replace).parameters) >= fields - {"validate"} | {"vocab_size"}
    # One declaration (MaskOptions) behind every signature, and one check: a keyword a constructor
    # does not take is a TypeError naming it, as Python's own.
    assert set(inspect.signature(SamplingMask).parameters) == fields | {"vocab_size", "ids", "offsets"}
    assert list(inspect.signature(SamplingMask.from_bitmask).parameters)[:2] == ["bits", "vocab_size"]  # positional
    for call in (
        lambda: SamplingMask.from_rows([[1]], vocab=3),
        lambda: SamplingMask([1], [0, 1], sampled=[1]),
        lambda: SamplingMask.from_rows([[1]]).replace(validate=False),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()


def test_to_rows_leaves_the_garbage_collector_alone() -> None:
    m = example()
    gc.disable()
    try:
        m.to_rows()
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    seen = []
    gc.callbacks.append(lambda phase, info: seen.append(phase))
    try:
        rows = SamplingMask.from_counts(np.zeros(0, np.int32), np.zeros(50_000, np.int64)).to_rows()
    finally:
        gc.callbacks.pop()
    assert len(rows) == 50_000 and gc.isenabled() and seen  # the collector ran while the lists were made


def test_metadata_is_kept_typed_and_frozen() -> None:
    meta = {"temperature": 0.7, "top_k": 50, "top_p": 1, "min_p": None, "producer": "vllm-0.32", "seed": 3}
    m = example(metadata=meta)
    assert dict(m.metadata) == meta and set(METADATA_KEYS) <= set(m.metadata)
    with pytest.raises(TypeError):
        m.metadata["top_k"] = 1  # type: ignore[index]
    assert example(metadata={"top_k": np.int64(5)}).metadata["top_k"] == 5
    assert example(metadata={"top_p": 1}) == example(metadata={"top_p": 1.0})
    assert example(metadata={"seed": 1}) != example(metadata={"seed": True})


def test_validate_returns_self_and_checks_limits() -> None:
    m = example()
    assert m.validate() is m
    unchecked = SamplingMask.from_ragged([3, 3], [0, 2], validate=False)
    with pytest.raises(SamplingMaskError) as info:
        unchecked.validate()
    assert info.value.code is ErrorCode.E_DUPLICATE


def test_repr_names_sizes() -> None:
    assert repr(example(sampled_token_ids=[5, -1, 7])) == (
        "SamplingMask(rows=3, segments=2, nnz=3, vocab_size=10, sampled_token_ids)"
    )


# ---------------------------------------------------------------- vLLM 0.32 data
@pytest.mark.skipif(not FIXTURES.exists(), reason="vLLM fixtures not present")
def test_vllm_fixture_layouts_agree() -> None:
    case = np.load(FIXTURES / "topk_topp_case.npz")
    vocab = case["logits"].shape[1]
    csr = SamplingMask.from_ragged(
        case["csr_token_ids"], case["csr_offsets"], vocab_size=vocab, sampled_token_ids=case["sampled_token_ids"]
    )
    assert csr.is_canonical
    assert SamplingMask.from_bitmask(case["bitmask"], vocab).same_support(csr)
    assert np.array_equal(csr.to_bitmask(), case["bitmask"])
    assert np.array_equal(csr.to_counts()[1], np.diff(case["csr_offsets"]))
    # vLLM's compact buffer is our dense layout for the rows that fit its width.
    fits = case["compact_counts"] <= case["compact_token_ids"].shape[1]
    compact = SamplingMask.from_dense(case["compact_token_ids"][fits], vocab_size=vocab)
    assert compact.same_support(SamplingMask.from_rows([r for r, ok in zip(csr.to_rows(), fits, strict=True) if ok]))
    doc = json.loads((FIXTURES / "completion_output_sampling_mask.json").read_text())
    rows = SamplingMask.from_rows(
        doc["sampling_mask"], vocab_size=doc["vocab_size"], sampled_token_ids=doc["token_ids"]
    )
    assert rows.is_canonical and rows.num_rows == len(doc["token_ids"])


def test_validation_counts_the_bytes_of_spec_8_1_companions_included() -> None:
    """4 nnz + 8 (T + 1) + 8 (B + 1), plus 4 bytes per companion value: within is valid, one byte less is E_LIMIT."""
    from sampling_mask import DEFAULT_LIMITS

    rows = [[5, 1], [], [7]]
    plain = SamplingMask.from_rows(rows, cu_seqlens=[0, 2, 3])
    full = SamplingMask.from_rows(
        rows, cu_seqlens=[0, 2, 3], temperature=[1.0, 0.5, 2.0], support_logprobs=[-0.5, -1.5, 0.0]
    )
    for mask, nbytes in ((plain, 4 * 3 + 8 * 4 + 8 * 3), (full, 4 * 3 + 8 * 4 + 8 * 3 + 4 * 3 + 4 * 3)):
        assert mask.validate(DEFAULT_LIMITS.replace(max_bytes=nbytes)) is mask
        with pytest.raises(SamplingMaskError) as info:
            mask.validate(DEFAULT_LIMITS.replace(max_bytes=nbytes - 1))
        assert info.value.code is ErrorCode.E_LIMIT and info.value.value == nbytes


def test_derived_masks_keep_what_is_known_of_their_order() -> None:
    """Slices, takes, concatenations and unpickled masks are built through one constructor path that
    keeps the known row order, the arrays read-only and the metadata a fresh mapping."""
    mask = SamplingMask.from_rows([[1, 5], [], [7], [2]], cu_seqlens=[0, 2, 4], metadata={"top_k": 2})
    assert mask.is_canonical
    unsorted = SamplingMask.from_rows([[5, 1]], metadata={"top_k": 2})
    for derived in (mask[1:3], mask.take([1, 0]), concat([mask, mask]), pickle.loads(pickle.dumps(mask))):
        assert derived.__getstate__().ascending is True  # known without a new scan
        assert not derived.ids.flags.writeable and derived.metadata == {"top_k": 2}
    joined = concat([mask, unsorted])
    assert joined.__getstate__().ascending is False and not joined.is_canonical
    assert joined.to_rows() == [[1, 5], [], [7], [2], [5, 1]]
    unknown = SamplingMask(np.array([3], np.int32), np.array([0, 1]), metadata={"top_k": 2}, validate=False)
    assert concat([mask, unknown]).__getstate__().ascending is None  # not known: not guessed


@pytest.mark.parametrize("row", [b"\x01\x02", bytearray(b"\x01\x02"), memoryview(b"\x01\x02")])
def test_bytes_like_rows_are_refused(row: Any) -> None:
    """One rule: a row is a sequence of ids, never bytes (their items would be read as ids 1 and 2)."""
    assert raised_code(lambda: SamplingMask.from_rows([[5], row])) == "E_SCHEMA"
    assert raised_code(lambda: SamplingMask.from_rows([row])) == "E_SCHEMA"


def test_integer_rows_of_every_kind_still_work() -> None:
    expected = SamplingMask.from_rows([[1, 2], [3]])
    assert SamplingMask.from_rows([(1, 2), (3,)]) == expected
    assert SamplingMask.from_rows([np.array([1, 2]), np.array([3])]) == expected
    assert SamplingMask.from_rows([[np.int64(1), 2], [3]]) == expected
