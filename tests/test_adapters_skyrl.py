"""SkyRL adapter: dense [T, top_k] rank-ordered rows, packed cu_seqlens, base64 envelope."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMaskError
from sampling_mask.adapters import skyrl
from sampling_mask.core.limits import DEFAULT_LIMITS

# top_k = 3, rank order (not ascending), -1 trailing; rows 0 and 3 are observation tokens.
DENSE = np.array(
    [[-1, -1, -1], [17, 4, 9], [8, -1, -1], [-1, -1, -1], [5, 2, -1]],
    dtype=np.int32,
)
CU = np.array([0, 3, 5], dtype=np.int32)


def test_dense_round_trip_keeps_rank_order():
    mask = skyrl.from_dense(DENSE, vocab_size=32)
    assert mask.to_rows() == [[], [17, 4, 9], [8], [], [5, 2]]
    assert np.array_equal(skyrl.to_dense(mask, 3), DENSE)


def test_packed_round_trip():
    mask = skyrl.from_packed(DENSE, CU)
    assert mask.num_segments == 2 and mask.segment(1).to_rows() == [[], [5, 2]]
    values, cu = skyrl.to_packed(mask, 3)
    assert cu.dtype == np.int32 and np.array_equal(cu, CU) and np.array_equal(values, DENSE)


def test_envelope_round_trip_and_exact_bytes():
    mask = skyrl.from_dense(DENSE)
    env = skyrl.to_envelope(mask, 3)
    assert env["shape"] == [5, 3] and env["dtype"] == "int32"
    assert base64.b64decode(env["data"]) == DENSE.astype("<i4").tobytes()
    assert skyrl.from_envelope(env) == mask
    as_int64 = {
        "data": base64.b64encode(DENSE.astype("<i8").tobytes()).decode(),
        "shape": [5, 3],
        "dtype": "torch.int64",
    }
    assert skyrl.from_envelope(as_int64, cu_seqlens=CU) == skyrl.from_packed(DENSE, CU)


def test_torch_tensors_are_read():
    torch = pytest.importorskip("torch")
    assert skyrl.from_packed(torch.from_numpy(DENSE.astype(np.int64)), torch.from_numpy(CU)) == skyrl.from_packed(
        DENSE, CU
    )


def test_write_refuses_rows_wider_than_top_k():
    with pytest.raises(SamplingMaskError) as err:
        skyrl.to_dense(skyrl.from_dense(DENSE), 2)
    assert err.value.code is ErrorCode.E_WIDTH and err.value.row == 1


@pytest.mark.parametrize(
    ("envelope", "code", "field"),
    [
        ({"data": "!!!!!!==", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_ENCODING, "data"),
        ({"data": "AAAA", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_BYTES, "data"),
        ({"data": base64.b64encode(b"\0" * 8).decode(), "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_BYTES, "data"),
        ({"data": "AAAAAA==", "shape": [1, 1], "dtype": "float32"}, ErrorCode.E_DTYPE, "dtype"),
        ({"data": "AAAAAA==", "shape": [1], "dtype": "int32"}, ErrorCode.E_SHAPE, "shape"),
        ({"data": "AAAAAA==", "shape": [1, True], "dtype": "int32"}, ErrorCode.E_SHAPE, "shape"),
        ({"data": "AAAAAA==", "shape": [1 << 40, 1], "dtype": "int32"}, ErrorCode.E_LIMIT, "shape"),
        ({"shape": [1, 1], "dtype": "int32"}, ErrorCode.E_SCHEMA, "envelope.data"),
        ({"data": "AAAAAA==\u00e9", "shape": [1, 1], "dtype": "int32"}, ErrorCode.E_ENCODING, "data"),
    ],
)
def test_bad_envelopes(envelope, code, field):
    with pytest.raises(SamplingMaskError) as err:
        skyrl.from_envelope(envelope, limits=DEFAULT_LIMITS)
    assert err.value.code is code and err.value.field == field


def test_padding_before_an_id_is_refused():
    bad = DENSE.copy()
    bad[2] = [-1, 8, -1]
    with pytest.raises(SamplingMaskError) as err:
        skyrl.from_dense(bad)
    assert err.value.code is ErrorCode.E_PADDING and err.value.row == 2


def test_skyrl_extractor_and_envelope_round_trip_byte_for_byte():
    """SkyRL PR #2082 @ 9a8327d7806e: support rows from a copy of ``_sample_support_from_flat_logprobs``
    and the envelope from ``pack_ndarray`` (tests/fixtures/upstream/trainers/make_trainers.py)."""
    import json
    from pathlib import Path

    case = json.loads((Path(__file__).parent / "fixtures/upstream/trainers/trainers.json").read_text())["skyrl"]
    support = np.array(case["support"], dtype=np.int32)
    mask = skyrl.from_envelope(case["envelope"])
    assert mask == skyrl.from_dense(support)
    assert mask.to_rows() == [[int(v) for v in row if v >= 0] for row in case["support"]]
    assert skyrl.to_envelope(mask, case["top_k"]) == case["envelope"]  # same keys, order and bytes
    assert np.array_equal(skyrl.to_dense(mask, case["top_k"]), support)
