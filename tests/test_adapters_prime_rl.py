"""prime-rl adapter: {ids, counts} base64 transport and the label-aligned [b, s, K] trainer tensor."""

from __future__ import annotations

import base64
from types import SimpleNamespace

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError, concat
from sampling_mask.adapters import prime_rl


def _b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<i4").tobytes()).decode()


# A 6-token sample: 2 prompt tokens (count 0), 3 generated, then a tool token (count 0).
WIRE = {"ids": _b64([11, 4, 5, 7]), "counts": _b64([0, 0, 2, 1, 1, 0])}


def test_wire_round_trip_with_count_zero_rows():
    mask = prime_rl.from_wire(WIRE, num_tokens=6, vocab_size=16)
    assert mask.to_rows() == [[], [], [11, 4], [5], [7], []]
    assert prime_rl.to_wire(mask) == WIRE
    obj = SimpleNamespace(ids=np.array([11, 4, 5, 7], np.int32), counts=np.array([0, 0, 2, 1, 1, 0], np.int32))
    assert prime_rl.from_wire(obj, vocab_size=16) == mask
    raw = {"ids": np.array([11, 4, 5, 7], "<i4").tobytes(), "counts": np.array([0, 0, 2, 1, 1, 0], "<i4").tobytes()}
    assert prime_rl.from_wire(raw, vocab_size=16) == mask


def test_no_mask_is_all_empty_rows():
    mask = prime_rl.from_wire(None, num_tokens=3)
    assert mask.num_rows == 3 and mask.nnz == 0
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_wire(None)
    assert err.value.code is ErrorCode.E_SCHEMA


@pytest.mark.parametrize(
    ("wire", "kwargs", "code", "field"),
    [
        (WIRE, {"num_tokens": 5}, ErrorCode.E_SHAPE, "counts"),
        ({"ids": "not base64!", "counts": WIRE["counts"]}, {}, ErrorCode.E_ENCODING, "ids"),
        ({"ids": base64.b64encode(b"12345").decode(), "counts": WIRE["counts"]}, {}, ErrorCode.E_BYTES, "ids"),
        ({"ids": b"123", "counts": WIRE["counts"]}, {}, ErrorCode.E_BYTES, "ids"),
        ({"ids": _b64([1, 2, 3]), "counts": WIRE["counts"]}, {}, ErrorCode.E_OFFSETS, "counts"),
        ({"ids": WIRE["ids"], "counts": _b64([0, 0, 2, -1, 3, 0])}, {}, ErrorCode.E_OFFSETS, "counts"),
        ({"counts": WIRE["counts"]}, {}, ErrorCode.E_SCHEMA, "sampling_mask.ids"),
    ],
)
def test_bad_wire(wire, kwargs, code, field):
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_wire(wire, **kwargs)
    assert err.value.code is code and err.value.field == field


def test_trainer_tensor_is_aligned_to_labels():
    first = prime_rl.from_wire(WIRE)
    second = SamplingMask.from_rows([[], [3], [8, 1]])
    batch = concat([first, second])
    tensor = prime_rl.to_trainer_tensor(batch, seq_len=7, width=2)
    assert tensor.shape == (2, 7, 2) and tensor.dtype == np.int32
    # position t holds the row of token t + 1 (the label the logits at t score)
    assert tensor[0, :, 0].tolist() == [-1, 11, 5, 7, -1, -1, -1]
    assert tensor[0, 1].tolist() == [11, 4]
    assert tensor[1, :3].tolist() == [[3, -1], [8, 1], [-1, -1]]
    assert np.all(tensor[1, 3:] == -1)
    back = prime_rl.from_trainer_tensor(tensor, [6, 3])
    assert back.same_support(batch)


def test_trainer_tensor_refuses_support_on_the_first_token():
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.to_trainer_tensor(SamplingMask.from_rows([[1], []]))
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 0
