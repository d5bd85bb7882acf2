"""Hypothesis properties of the core model over any valid mask (sampling_mask.conformance.strategies)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sampling_mask import SamplingMask, concat
from sampling_mask.conformance.strategies import masks, rows_lists

# Every layout as (encode, decode(data, source)). Decoders take segmentation, vocab, metadata and
# companions from the mask that was encoded, so each layout is judged on the rows alone; the bitmask
# has no in-row order, so its per-id companion follows canonical order.
Layout = tuple[Callable[[SamplingMask], object], Callable[[object, SamplingMask], SamplingMask]]


def _extras(m: SamplingMask) -> dict[str, object]:
    return {"cu_seqlens": m.cu_seqlens, "vocab_size": m.vocab_size, "metadata": m.metadata, **m.companions}


LAYOUTS: dict[str, Layout] = {
    "rows": (lambda m: m.to_rows(), lambda x, m: SamplingMask.from_rows(x, **_extras(m))),  # type: ignore[arg-type]
    "ragged": (lambda m: m.to_ragged(), lambda x, m: SamplingMask.from_ragged(*x, **_extras(m))),  # type: ignore[misc]
    "counts": (lambda m: m.to_counts(), lambda x, m: SamplingMask.from_counts(*x, **_extras(m))),  # type: ignore[misc]
    "dense": (lambda m: m.to_dense(), lambda x, m: SamplingMask.from_dense(x, **_extras(m))),
    "bitmask": (
        lambda m: m.to_bitmask(),
        lambda x, m: SamplingMask.from_bitmask(
            x,
            m.vocab_size,  # type: ignore[arg-type]
            **{k: v for k, v in _extras(m).items() if k not in ("vocab_size", "support_logprobs")},
            # The bitmask yields canonical order: the per-id companion must follow it.
            **({"support_logprobs": m.canonical().support_logprobs} if m.support_logprobs is not None else {}),  # type: ignore[dict-item]
        ),
    ),
}
PAIRS = list(itertools.permutations(LAYOUTS, 2))


@given(masks(vocab_size=40))
def test_any_mask_round_trips_through_every_pair_of_layouts(m: SamplingMask) -> None:
    for first, second in PAIRS:
        encode_a, decode_a = LAYOUTS[first]
        encode_b, decode_b = LAYOUTS[second]
        via_a = decode_a(encode_a(m), m)
        back = decode_b(encode_b(via_a), via_a)
        assert back == m, (first, second)
        assert back.canonical().to_rows() == m.canonical().to_rows()
        if "bitmask" not in (first, second):  # every other layout keeps the stored order exactly
            assert back.to_rows() == m.to_rows()
            assert np.array_equal(back.ids, m.ids)


@given(masks())
def test_canonical_is_idempotent_and_sorted(m: SamplingMask) -> None:
    c = m.canonical()
    assert c.canonical() is c and c.is_canonical
    assert c == m
    assert all(r == sorted(r) for r in c.to_rows())
    assert [sorted(r) for r in m.to_rows()] == c.to_rows()
    assert np.array_equal(c.offsets, m.offsets)


@given(masks(companions=False, metadata=False), st.randoms(use_true_random=False))
def test_equality_ignores_order_inside_rows(m: SamplingMask, rnd: object) -> None:
    rows = m.to_rows()
    shuffled = [rnd.sample(r, len(r)) for r in rows]  # type: ignore[attr-defined]
    other = SamplingMask.from_rows(shuffled, cu_seqlens=m.cu_seqlens, vocab_size=m.vocab_size)
    assert other == m
    assert other.same_support(m)
    if m.nnz:  # changing one id breaks equality
        row = next(i for i, r in enumerate(rows) if r)
        vocab = m.vocab_size or 64
        free = sorted(set(range(vocab)) - set(rows[row]))
        if free:
            rows[row] = [free[0], *rows[row][1:]]
            assert SamplingMask.from_rows(rows, cu_seqlens=m.cu_seqlens, vocab_size=m.vocab_size) != m


@given(masks(), st.integers(0, 5))
def test_dense_width_never_changes_content(m: SamplingMask, extra: int) -> None:
    widest = int(m.row_lengths.max()) if m.num_rows else 0
    dense = m.to_dense(width=widest + extra)
    assert dense.shape == (m.num_rows, widest + extra)
    assert np.array_equal(dense[:, :widest], m.to_dense())
    assert (dense[:, widest:] == -1).all()
    assert SamplingMask.from_dense(dense, **_extras(m)) == m


@given(masks(), st.data())
def test_slices_segments_take_and_concat_agree(m: SamplingMask, data: st.DataObject) -> None:
    assert m[:] == m
    if m.num_segments:
        assert concat([m.segment(b) for b in range(m.num_segments)]) == m
    assert m.take(range(m.num_segments)) == m
    cut = data.draw(st.integers(0, m.num_rows))
    head, tail = m[:cut], m[cut:]
    assert head.to_rows() + tail.to_rows() == m.to_rows()
    assert concat([head, tail]).to_rows() == m.to_rows()
    if np.count_nonzero(m.cu_seqlens == cut) == 1:
        # A cut on a boundary without empty segments there splits the mask exactly.
        assert concat([head, tail]) == m
    order = data.draw(st.lists(st.integers(0, max(m.num_segments - 1, 0)), max_size=5)) if m.num_segments else []
    taken = m.take(order)
    assert taken.to_rows() == [r for b in order for r in m.segment(b).to_rows()]
    for b in order:
        seg = m.segment(b)
        assert seg.num_rows == int(m.cu_seqlens[b + 1] - m.cu_seqlens[b])
        assert seg.companions.keys() == m.companions.keys()


@given(rows_lists(vocab_size=30), st.booleans())
def test_rows_constructor_keeps_stored_order(rows: list[list[int]], ascending: bool) -> None:
    if ascending:
        rows = [sorted(r) for r in rows]
    m = SamplingMask.from_rows(rows, vocab_size=30)
    assert m.to_rows() == rows
    assert m.is_canonical == all(r == sorted(r) for r in rows)
    assert m.row_lengths.tolist() == [len(r) for r in rows]
