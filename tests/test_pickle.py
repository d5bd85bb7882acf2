"""Pickle protocol 5 moves a mask's arrays out of band (Ray, multiprocessing) and restores it equal."""

from __future__ import annotations

import pickle

import numpy as np
from hypothesis import given

from sampling_mask import SamplingMask
from sampling_mask.conformance.strategies import masks


def big_mask() -> SamplingMask:
    rows = [list(range(i % 50, i % 50 + 40)) for i in range(2_000)]
    return SamplingMask.from_rows(
        rows,
        vocab_size=128,
        cu_seqlens=[0, 700, 2_000],
        sampled_token_ids=np.array([r[0] for r in rows], np.int32),
        support_logprobs=np.full(80_000, -1.5, np.float32),
        metadata={"top_k": 40, "producer": "test"},
    )


def test_protocol_5_sends_arrays_out_of_band() -> None:
    mask = big_mask()
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(mask, protocol=5, buffer_callback=buffers.append)
    assert len(payload) < 2_000  # 320 kB of ids and 320 kB of log-probs are not in the stream
    assert len(buffers) == 3 + len(mask.companions)
    raw = [np.frombuffer(buf.raw(), np.uint8) for buf in buffers]
    assert any(np.shares_memory(view, mask.ids) for view in raw)
    assert any(np.shares_memory(view, mask.support_logprobs) for view in raw)
    restored = pickle.loads(payload, buffers=buffers)
    assert restored == mask
    assert restored.metadata == mask.metadata and restored.vocab_size == 128
    assert np.shares_memory(restored.ids, mask.ids)  # same process: not even one copy
    assert not restored.ids.flags.writeable


def test_in_band_pickles_still_round_trip() -> None:
    mask = big_mask()
    for protocol in (2, 4, 5):
        payload = pickle.dumps(mask, protocol=protocol)
        assert len(payload) > mask.ids.nbytes  # the arrays travel inside the stream
        restored = pickle.loads(payload)
        assert restored == mask
        assert not np.shares_memory(restored.ids, mask.ids)


def test_out_of_band_buffers_copied_like_a_transport() -> None:
    mask = big_mask()
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(mask, protocol=5, buffer_callback=buffers.append)
    received = [bytes(buf.raw()) for buf in buffers]  # what a socket / shared memory would deliver
    restored = pickle.loads(payload, buffers=received)
    assert restored == mask
    assert any(np.shares_memory(restored.ids, np.frombuffer(b, np.uint8)) for b in received)


@given(mask=masks(max_rows=8, max_width=5))
def test_any_mask_survives_pickle(mask: SamplingMask) -> None:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(mask, protocol=5, buffer_callback=buffers.append)
    assert pickle.loads(payload, buffers=buffers) == mask
    assert pickle.loads(pickle.dumps(mask)) == mask


def test_pickled_masks_stay_read_only_in_band_and_out_of_band() -> None:
    m = SamplingMask.from_rows(
        [[5, 1], [], [7]], vocab_size=10, cu_seqlens=[0, 2, 3], sampled_token_ids=[5, -1, 7], metadata={"producer": "t"}
    )
    for protocol in (2, 5):
        back = pickle.loads(pickle.dumps(m, protocol=protocol))
        assert back == m and not back.ids.flags.writeable
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(m, protocol=5, buffer_callback=buffers.append)
    assert buffers and pickle.loads(data, buffers=buffers) == m
