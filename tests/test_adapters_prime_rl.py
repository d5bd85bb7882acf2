"""prime-rl / verifiers adapter, proven against payloads made by upstream's own code
(tests/fixtures/upstream/trainers/trainers.json, built by make_trainers.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError, concat
from sampling_mask.adapters import prime_rl
from sampling_mask.codecs.msgpack import read_value

FIXTURES = json.loads((Path(__file__).parent / "fixtures/upstream/trainers/trainers.json").read_text())
CASES = FIXTURES["prime_rl"]
TRAINER = FIXTURES["prime_rl_trainer"]


def _raw(text: str) -> bytes:
    return base64.b64decode(text)


def _b64(values) -> str:
    return base64.b64encode(np.asarray(values, dtype="<i4").tobytes()).decode()


@pytest.mark.parametrize("name", sorted(CASES))
def test_array_like_msgpack_round_trips_byte_for_byte(name):
    case = CASES[name]
    upstream = _raw(case["sampling_mask_msgpack"])
    assert upstream[:1] == b"\x93" and upstream[-1:] == b"\xc0"  # [ids, counts, nil]: an array, not a map
    mask = prime_rl.from_wire(upstream, num_tokens=len(case["rows"]))
    assert mask.to_rows() == case["rows"]
    assert prime_rl.to_msgpack(mask) == upstream  # ours -> upstream bytes -> ours
    kept = _raw(case["kept_tokens_msgpack"])  # PR #3235's KeptTokens: [ids, counts], same positions
    assert kept == b"\x92" + upstream[1:-1] and prime_rl.from_wire(kept) == mask
    # the decoded array_like value (a list of bytes) reads the same
    decoded = read_value(upstream, max_depth=8)
    assert isinstance(decoded, list) and prime_rl.from_wire(decoded) == mask
    assert prime_rl.to_payload(mask) == [bytes(v) for v in decoded[:2]] + [None] == decoded[:2] + [None]


@pytest.mark.parametrize("name", sorted(CASES))
def test_logprobs_are_read_and_written(name):
    case = CASES[name]
    upstream = _raw(case["sampling_mask_with_logprobs_msgpack"])
    assert upstream[:1] == b"\x93"
    mask = prime_rl.from_wire(upstream)
    assert mask.to_rows() == case["rows"]
    np.testing.assert_allclose(mask.support_logprobs, case["logprobs"], rtol=0, atol=1e-6)
    assert prime_rl.to_msgpack(mask) == upstream
    assert prime_rl.to_msgpack(mask, logprobs=False) == _raw(case["sampling_mask_msgpack"])
    struct = SimpleNamespace(ids=_raw(case["verifiers_ids"]), counts=_raw(case["verifiers_counts"]), logprobs=None)
    assert prime_rl.from_wire(struct).support_logprobs is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_verifiers_objects_read(name):
    case = CASES[name]
    assert case["verifiers_dtypes"] == ["int32", "int32"]
    ids = np.frombuffer(_raw(case["verifiers_ids"]), "<i4")
    counts = np.frombuffer(_raw(case["verifiers_counts"]), "<i4")
    vf_mask = SimpleNamespace(ids=ids, counts=counts)  # verifiers.v1.types.SamplingMask's fields
    mask = prime_rl.from_wire(vf_mask)
    assert mask.to_rows() == case["rows"]
    if "message_node_msgpack" in case:  # MessageNode.sampling_mask on the env-server wire (__nd__ dicts)
        node = read_value(_raw(case["message_node_msgpack"]), max_depth=8)
        assert set(node) == {"ids", "counts"} and node["ids"]["__nd__"] is True
        assert prime_rl.from_wire(node) == mask


def test_count_zero_means_no_mask_or_over_cap():
    case = CASES["over_cap_row_ships_count_zero"]
    mask = prime_rl.from_wire(_raw(case["sampling_mask_msgpack"]))
    # prime-rl's capture cannot ship a 513-wide kept set: that sampled row arrives with count 0.
    true = SamplingMask.from_rows(case["true_rows"])
    capped, emptied = prime_rl.empty_rows_over_cap(true)
    assert emptied.tolist() == [2] and capped == mask
    assert prime_rl.to_msgpack(capped) == _raw(case["sampling_mask_msgpack"])
    with_lp = SamplingMask.from_rows(case["true_rows"], support_logprobs=np.zeros(true.nnz, np.float32) - 1)
    capped_lp, _ = prime_rl.empty_rows_over_cap(with_lp)
    assert capped_lp.support_logprobs.size == capped_lp.nnz == 3
    # without the trainable flags, count 0 is just "no mask"; with them, the sampled rows stand out
    assert prime_rl.sampled_without_support(mask, case["trainable"]).tolist() == [2]
    first = CASES["prompt_generated_observation"]
    first_mask = prime_rl.from_wire({"ids": first["verifiers_ids"], "counts": first["verifiers_counts"]})
    assert prime_rl.sampled_without_support(first_mask, first["trainable"]).tolist() == []
    assert prime_rl.empty_rows_over_cap(mask)[1].size == 0  # nothing to repair: the same mask back
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.sampled_without_support(mask, [1, 0])
    assert err.value.code is ErrorCode.E_SHAPE


def test_verifiers_branch_through_prime_rl_encoding():
    case = FIXTURES["verifiers_branch"]  # Branch.sampling_mask -> _encode_kept_tokens -> struct msgpack
    upstream = _raw(case["sampling_mask_msgpack"])
    mask = prime_rl.from_wire(upstream, num_tokens=len(case["rows"]))
    assert mask.to_rows() == case["rows"]
    assert prime_rl.to_msgpack(mask) == upstream
    # count 0 on the assistant's trainable token 5 (over the cap) vs. count 0 on prompt / tool tokens
    assert prime_rl.sampled_without_support(mask, case["trainable"]).tolist() == [5]


def test_http_wire_round_trip():
    case = CASES["prompt_generated_observation"]
    wire = {"ids": case["verifiers_ids"], "counts": case["verifiers_counts"]}  # kept_tokens.py base64 form
    mask = prime_rl.from_wire(wire, num_tokens=len(case["rows"]), vocab_size=16)
    assert mask.to_rows() == case["rows"]
    assert prime_rl.to_wire(mask) == wire
    raw = {"ids": _raw(wire["ids"]), "counts": _raw(wire["counts"])}
    assert prime_rl.from_wire(raw, vocab_size=16) == mask


def test_no_mask_is_all_empty_rows():
    mask = prime_rl.from_wire(None, num_tokens=3)
    assert mask.num_rows == 3 and mask.nnz == 0
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_wire(None)
    assert err.value.code is ErrorCode.E_SCHEMA


WIRE = {"ids": _b64([11, 4, 5, 7]), "counts": _b64([0, 0, 2, 1, 1, 0])}


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
        ([b"", b"", b"", b""], {}, ErrorCode.E_SCHEMA, "sampling_mask"),
        ([WIRE["ids"], WIRE["counts"], b"\0\0\0\0"], {}, ErrorCode.E_SHAPE, "logprobs"),
        (
            {"ids": {"__nd__": True, "dtype": "int64", "shape": [0], "data": b""}, "counts": b""},
            {},
            ErrorCode.E_DTYPE,
            "ids",
        ),
        (
            {"ids": {"__nd__": True, "dtype": "int32", "shape": [2], "data": b"\0" * 4}, "counts": b""},
            {},
            ErrorCode.E_BYTES,
            "ids",
        ),
        (b"\x92\xc4", {}, ErrorCode.E_ENCODING, None),
    ],
)
def test_bad_wire(wire, kwargs, code, field):
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_wire(wire, **kwargs)
    assert err.value.code is code
    if field is not None:
        assert err.value.field == field


def _packed() -> SamplingMask:
    return concat([SamplingMask.from_rows(rows) for rows in TRAINER["samples"]])


def test_packed_shift_once_over_the_whole_sequence():
    mask = _packed()
    assert mask.cu_seqlens.tolist() == TRAINER["cu_seqlens"]
    tensor = prime_rl.to_trainer_tensor(mask)
    assert tensor.shape == (1, 12, 3) and tensor.dtype == np.int32
    assert tensor[0].tolist() == TRAINER["kept_shifted"]  # what prime-rl's DataLoader + shift give
    back = prime_rl.from_trainer_tensor(tensor, TRAINER["cu_seqlens"])
    assert back == mask
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.to_trainer_tensor(SamplingMask.from_rows([[1], []]))
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 0
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_trainer_tensor(np.array([[[1], [2]]], np.int32))
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 1


def test_context_parallel_split_is_torch_chunk_over_the_packed_sequence():
    p = TRAINER["cp_size"]
    assert [prime_rl.context_parallel_packed_rows(12, p, r).tolist() for r in range(p)] == TRAINER[
        "label_positions_shards"
    ]
    assert TRAINER["label_positions_shards"] == [
        list(range(6)),
        list(range(6, 12)),
    ]  # 12 packed tokens on 2 ranks: 6 each
    tensor = prime_rl.to_trainer_tensor(_packed())
    shifted = prime_rl.shift_packed_left(_packed())
    for rank in range(p):
        assert prime_rl.shard(tensor, p, rank)[0].tolist() == TRAINER["kept_shards"][rank]
        shard = prime_rl.shard(shifted, p, rank)
        assert shard.to_dense(3).tolist() == TRAINER["kept_shards"][rank]
    labels = np.roll(np.arange(12), -1)
    assert [prime_rl.shard(labels, p, r).tolist() for r in range(p)] == TRAINER["labels_shards"]
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.context_parallel_packed_rows(13, 2, 0)  # prime-rl refuses uneven CP shards
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.context_parallel_packed_rows(12, 2, 2)
    assert err.value.code is ErrorCode.E_RANGE


VERIFIERS_ND = json.loads((Path(__file__).parent / "fixtures/upstream/verifiers/verifiers_nd.json").read_text())


@pytest.mark.parametrize("index", range(len(VERIFIERS_ND["cases"])))
def test_verifiers_nd_writer_round_trips_through_verifiers(index):
    """verifiers 0.4.0's own MessageNode / delta.pack made the upstream bytes and decoded ours
    (tests/fixtures/upstream/verifiers/make_verifiers_nd.py)."""
    case = VERIFIERS_ND["cases"][index]
    upstream = _raw(case["verifiers_sampling_mask_msgpack"])
    mask = prime_rl.from_wire(upstream)  # upstream -> ours
    assert mask.to_rows() == case["rows"]
    assert prime_rl.to_verifiers_msgpack(mask) == upstream  # ours -> upstream, byte for byte
    ours = prime_rl.to_verifiers_msgpack(SamplingMask.from_rows(case["rows"]))
    assert ours == _raw(case["ours_msgpack"])  # what the script handed verifiers is what we write today
    decoded = case["verifiers_decoded_ours"]  # verifiers' deserialize_sampling_mask of our bytes
    assert decoded["dtypes"] == ["int32", "int32"]
    assert SamplingMask.from_counts(decoded["ids"], decoded["counts"]) == mask
    nd = prime_rl.to_verifiers(mask)
    assert set(nd) == {"ids", "counts"} and nd["counts"]["shape"] == [mask.num_rows] and nd["ids"]["__nd__"] is True
    node = read_value(_raw(case["verifiers_node_msgpack"]), max_depth=16)  # the whole node on the wire
    assert prime_rl.from_wire(node["sampling_mask"]) == mask


def test_verifiers_branch_of_nodes_written_by_us():
    branch = VERIFIERS_ND["branch_from_ours"]
    assert branch == VERIFIERS_ND["branch_upstream"]
    trainable = [flag for node in VERIFIERS_ND["nodes"] for flag in node["mask"]]
    mask = prime_rl.from_wire({"ids": _b64(branch["ids"]), "counts": _b64(branch["counts"])})
    assert mask.num_rows == len(trainable)
    rows = [row for case in VERIFIERS_ND["cases"] for row in case["rows"]]
    assert [mask.row(t).tolist() for t in np.flatnonzero(trainable)] == rows


@pytest.mark.parametrize("args", [(4.9, 2, 1), (12, 2.0, 0), (12, 2, True), (12, "2", 0)])
def test_packed_context_parallel_rows_refuse_non_integers(args):
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.context_parallel_packed_rows(*args)
    assert err.value.code is ErrorCode.E_DTYPE
    # One name each: alignment's shift_left / unshift / context_parallel_rows work per segment, these do not.
    assert not {"shift_left", "unshift", "context_parallel_rows"} & set(dir(prime_rl))
    assert prime_rl.context_parallel_packed_rows(np.int64(12), 2, 1).tolist() == list(range(6, 12))


def test_msgpack_payload_objects_count_against_max_bytes() -> None:
    """An array_like payload of many tiny objects is refused by the object budget, not built."""
    import msgpack

    from sampling_mask import Limits

    payload = msgpack.packb([[0] * 50_000, [1] * 50_000, None])
    small = Limits(max_bytes=200_000)
    with pytest.raises(SamplingMaskError) as err:
        prime_rl.from_wire(payload, limits=small)
    assert err.value.code is ErrorCode.E_LIMIT
