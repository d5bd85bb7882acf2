"""JSON forms: the lossless document, bare nested lists and the SkyRL base64 envelope; metadata text is
valid Unicode, numbers past float64 are out of range, base64 padding is canonical."""

from __future__ import annotations

import base64
import json
import math

import mask_examples
import numpy as np
import pytest
from file_checks import raised_code
from hypothesis import given
from hypothesis import strategies as st
from mask_examples import SAMPLE_METADATA

import sampling_mask
from sampling_mask import DEFAULT_LIMITS, ErrorCode, SamplingMask, SamplingMaskError, codecs
from sampling_mask.codecs import json as json_codec


def sample_mask() -> SamplingMask:
    """The shared full example, with a non-finite float in its metadata."""
    return mask_examples.sample_mask(metadata={**SAMPLE_METADATA, "inf": math.inf})


def error_code(data, fmt=None, **kwargs) -> ErrorCode:
    with pytest.raises(SamplingMaskError) as err:
        json_codec.decode(data, format=fmt, **kwargs)
    return err.value.code


def test_document_is_readable_standard_json() -> None:
    text = codecs.encode(sample_mask(), "json").decode()
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard {name}"))
    assert doc == {
        "sampling_mask": 1,
        "vocab_size": 10,
        "id_order": "unspecified",
        "cu_seqlens": [0, 2, 2, 4],
        "rows": [[7, 3], [], [5], [1, 2, 9]],
        "sampled_token_ids": [3, -1, 5, 9],
        "sampled_logprobs": [-0.5, "NaN", "-Infinity", -0.001],
        "temperature": [1.0, 0.7, 1.0, 2.0],
        "support_logprobs": [[-0.1, -2.5], [], [0.0], [-3.0, -1.5, -0.25]],
        "metadata": {"top_k": 3, "top_p": 0.95, "producer": "test", "inf": {"float": "Infinity"}},
    }
    assert '"temperature":[1.0,0.7,1.0,2.0]' in text  # shortest float32 text, not 0.699999988079071
    assert codecs.decode(text) == sample_mask()


@given(values=st.lists(st.floats(width=32), max_size=30))
def test_float32_values_round_trip_exactly(values: list[float]) -> None:
    logprobs = np.array(values, np.float32)
    mask = SamplingMask.from_rows([[0]] * len(values), sampled_logprobs=logprobs)
    got = codecs.decode(codecs.encode(mask, "json")).sampled_logprobs
    assert got is not None
    assert np.array_equal(got, logprobs, equal_nan=True)
    number = ~np.isnan(logprobs)  # every float32 but NaN keeps its exact bits (NaN payloads are not JSON)
    assert np.array_equal(got[number].view(np.uint32), logprobs[number].view(np.uint32))


def test_json_rows_is_vllm_and_sglang_shape() -> None:
    mask = SamplingMask.from_rows([[3, 7], [], [5]])
    assert codecs.encode(mask, "json-rows") == b"[[3,7],[],[5]]"
    vllm_choice = json.loads('{"sampling_mask": [[12, 5], [7]]}')
    assert SamplingMask.from_rows(vllm_choice["sampling_mask"]).to_rows() == [[12, 5], [7]]
    assert codecs.decode("[[12, 5], [7], []]").to_rows() == [[12, 5], [7], []]
    assert codecs.decode("[]").num_rows == 0


def test_skyrl_base64_envelope() -> None:
    dense = np.array([[4, 9, -1], [-1, -1, -1], [2, 0, 1]], np.int32)  # rank order, -1 trailing padding
    env = {"data": base64.b64encode(dense.tobytes()).decode(), "shape": [3, 3], "dtype": "int32"}
    mask = codecs.decode(json.dumps(env).encode())
    assert mask.to_rows() == [[4, 9], [], [2, 0, 1]]
    assert json.loads(codecs.encode(mask, "base64", width=3)) == env
    wide = np.array([[4, 9], [-1, -1]], np.int64)
    env64 = {"data": base64.b64encode(wide.tobytes()).decode(), "shape": [2, 2], "dtype": "int64"}
    assert codecs.decode(json.dumps(env64)).to_rows() == [[4, 9], []]


def test_lossy_forms_refuse_to_drop_information() -> None:
    for fmt in ("json-rows", "base64"):
        with pytest.raises(SamplingMaskError) as err:
            codecs.encode(sample_mask(), fmt)
        assert err.value.code == ErrorCode.E_SCHEMA and "allow_loss" in str(err.value)
        assert codecs.decode(codecs.encode(sample_mask(), fmt, allow_loss=True)).to_rows() == sample_mask().to_rows()


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (b"[[1, 2], [3", ErrorCode.E_ENCODING),
        (b"[[1, NaN]]", ErrorCode.E_ENCODING),
        (b"[[1], [2]] x", ErrorCode.E_ENCODING),
        (b"\xff[[1]]", ErrorCode.E_ENCODING),
        (b'["\xc3\x28"]', ErrorCode.E_ENCODING),
        (b"[[true]]", ErrorCode.E_DTYPE),
        (b"[[1, false]]", ErrorCode.E_DTYPE),
        (b"[[1.0]]", ErrorCode.E_DTYPE),
        (b"[[1e400]]", ErrorCode.E_DTYPE),
        (b'[["1"]]', ErrorCode.E_DTYPE),
        (b"[[null]]", ErrorCode.E_DTYPE),
        (b"[[[1]]]", ErrorCode.E_DTYPE),
        (b"[1, 2]", ErrorCode.E_SCHEMA),
        (b'["ab"]', ErrorCode.E_SCHEMA),
        (b'[{"a": 1}]', ErrorCode.E_SCHEMA),
        (b"[[1, 1]]", ErrorCode.E_DUPLICATE),
        (b"[[-2]]", ErrorCode.E_RANGE),
        (b"[[4294967296]]", ErrorCode.E_RANGE),
        (b"[[" + b"9" * 30 + b"]]", ErrorCode.E_RANGE),
        (b"[" * 100_000 + b"]" * 100_000, ErrorCode.E_LIMIT),
    ],
)
def test_bad_json_rows(text: bytes, code: ErrorCode) -> None:
    assert error_code(text) == code


def _doc(**changes) -> bytes:
    doc = json.loads(codecs.encode(sample_mask(), "json"))
    for key, value in changes.items():
        if value is ...:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"sampling_mask": 2}, ErrorCode.E_VERSION),
        ({"sampling_mask": 1.0}, ErrorCode.E_SCHEMA),
        ({"sampling_mask": ...}, ErrorCode.E_SCHEMA),
        ({"rows": ...}, ErrorCode.E_SCHEMA),
        ({"rows": "1,2"}, ErrorCode.E_SCHEMA),
        ({"vocab_size": 10.0}, ErrorCode.E_SCHEMA),
        ({"vocab_size": True}, ErrorCode.E_SCHEMA),
        ({"vocab_size": 0}, ErrorCode.E_RANGE),
        ({"cu_seqlens": [0, 3, 2, 4]}, ErrorCode.E_SEGMENTS),
        ({"cu_seqlens": [0, 2, True, 4]}, ErrorCode.E_DTYPE),
        ({"cu_seqlens": 4}, ErrorCode.E_SCHEMA),
        ({"sampled_token_ids": [3, -1, 5]}, ErrorCode.E_SHAPE),
        ({"sampled_token_ids": [3, -1, 5, 8]}, ErrorCode.E_MISSING_SAMPLED),
        ({"sampled_token_ids": [3.0, -1, 5, 9]}, ErrorCode.E_DTYPE),
        ({"sampled_logprobs": [0, 0, 0, "-inf"]}, ErrorCode.E_DTYPE),
        ({"sampled_logprobs": [0, 0, 0, None]}, ErrorCode.E_DTYPE),
        ({"sampled_logprobs": [0, 0, 0, True]}, ErrorCode.E_DTYPE),
        ({"sampled_logprobs": [0, 0, 0, 1e39]}, ErrorCode.E_RANGE),
        ({"sampled_logprobs": [0, 0, 0, 10**400]}, ErrorCode.E_RANGE),
        ({"sampled_logprobs": {"a": 1}}, ErrorCode.E_SCHEMA),
        ({"temperature": [1, 1, 1]}, ErrorCode.E_SHAPE),
        ({"temperature": [1, 1, 1, -1]}, ErrorCode.E_RANGE),
        ({"support_logprobs": [[0, 0], [], [0], [0, 0]]}, ErrorCode.E_SHAPE),
        ({"support_logprobs": [[0, 0], [], [0]]}, ErrorCode.E_SHAPE),
        ({"support_logprobs": [0, 0, 0, 0, 0, 0]}, ErrorCode.E_SCHEMA),
        ({"metadata": [1]}, ErrorCode.E_SCHEMA),
        ({"metadata": {"k": [1]}}, ErrorCode.E_SCHEMA),
        ({"metadata": {"k": {"float": "nan"}}}, ErrorCode.E_SCHEMA),
        ({"metadata": {"k": {"float": [[1]]}}}, ErrorCode.E_SCHEMA),
        ({"id_order": "ascending"}, ErrorCode.E_SCHEMA),
        ({"id_order": 1}, ErrorCode.E_SCHEMA),
        ({"extension": json.loads("[" * 20 + "]" * 20)}, ErrorCode.E_LIMIT),
    ],
)
def test_bad_documents(changes: dict, code: ErrorCode) -> None:
    assert error_code(_doc(**changes)) == code


def test_unknown_document_keys_are_ignored_and_duplicates_rejected() -> None:
    assert codecs.decode(_doc(extension={"anything": [1, 2, 3]})) == sample_mask()
    duplicated = b'{"sampling_mask": 1, "rows": [[1]], "rows": [[2]]}'
    assert error_code(duplicated) == ErrorCode.E_SCHEMA
    assert error_code(b"[[1]]", "json") == ErrorCode.E_SCHEMA
    assert error_code(b'{"sampling_mask": 1, "rows": []}', "json-rows") == ErrorCode.E_SCHEMA


def _envelope(data: str, shape=(2, 2), dtype="int32", **extra) -> bytes:
    return json.dumps({"data": data, "shape": list(shape), "dtype": dtype, **extra}).encode()


GOOD = base64.b64encode(np.array([[1, 2], [3, -1]], np.int32).tobytes()).decode()


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (_envelope(GOOD[:-4]), ErrorCode.E_BYTES),
        (_envelope(GOOD + "AAAA"), ErrorCode.E_BYTES),
        (_envelope(GOOD.rstrip("=")), ErrorCode.E_ENCODING),
        (_envelope(GOOD[:4] + "\n" + GOOD[4:]), ErrorCode.E_ENCODING),
        (_envelope(GOOD[:4] + "*" + GOOD[5:]), ErrorCode.E_ENCODING),
        (_envelope(GOOD[:4] + "-" + GOOD[5:]), ErrorCode.E_ENCODING),  # urlsafe alphabet
        (_envelope("A=AA" + GOOD[4:]), ErrorCode.E_ENCODING),
        (_envelope("ü" * 4 + GOOD[4:]), ErrorCode.E_ENCODING),
        (_envelope(GOOD, dtype="float32"), ErrorCode.E_DTYPE),
        (_envelope(GOOD, dtype="<i4"), ErrorCode.E_DTYPE),
        (_envelope(GOOD, shape=(4,)), ErrorCode.E_SHAPE),
        (_envelope(GOOD, shape=(2, -2)), ErrorCode.E_SHAPE),
        (_envelope(GOOD, shape=(2, 2.0)), ErrorCode.E_SHAPE),
        (_envelope(GOOD, shape=(1 << 40, 1 << 20)), ErrorCode.E_LIMIT),
        (_envelope(GOOD, shape=(1 << 20, 1 << 16)), ErrorCode.E_LIMIT),
        (_envelope("A" * 40, shape=(10, 1)), ErrorCode.E_BYTES),
        (json.dumps({"data": 5, "shape": [0, 0], "dtype": "int32"}).encode(), ErrorCode.E_SCHEMA),
        (
            _envelope(base64.b64encode(np.array([[-1, 2]], np.int32).tobytes()).decode(), shape=(1, 2)),
            ErrorCode.E_PADDING,
        ),
        (
            _envelope(base64.b64encode(np.array([[1 << 40]], np.int64).tobytes()).decode(), (1, 1), "int64"),
            ErrorCode.E_RANGE,
        ),
        (_envelope(GOOD, extra=json.loads("[" * 20 + "]" * 20)), ErrorCode.E_LIMIT),
    ],
)
def test_bad_base64_envelopes(text: bytes, code: ErrorCode) -> None:
    assert error_code(text, "base64") == code


def test_base64_size_checked_before_decoding() -> None:
    huge = "A" * (4 << 20)  # 3 MiB declared through the text length, tiny limit
    limits = DEFAULT_LIMITS.replace(max_bytes=1 << 20)
    text = _envelope(huge, shape=(1 << 18, 3))
    assert error_code(text, "base64", limits=limits) == ErrorCode.E_LIMIT


def test_payload_size_limit() -> None:
    limits = DEFAULT_LIMITS.replace(max_bytes=8)
    assert error_code(b"[[1, 2, 3, 4]]", limits=limits) == ErrorCode.E_LIMIT


def test_bom_and_str_input() -> None:
    assert codecs.decode(b"\xef\xbb\xbf[[1]]").to_rows() == [[1]]
    assert codecs.decode("[[1], [0, 2]]", format="json-rows").to_rows() == [[1], [0, 2]]


def test_nested_lists_convert_without_a_per_id_loop() -> None:
    """The conversion goes through ``np.fromiter`` over ``itertools.chain`` (see model.from_rows)."""
    rows = [[i % 97, (i + 1) % 97] for i in range(5_000)]
    mask = json_codec.decode(json.dumps(rows))
    assert mask.nnz == 10_000 and mask.row(4_999).tolist() == [52, 53]


def test_lone_surrogate_in_json_metadata_is_refused() -> None:
    doc = b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"\\ud800": 1}}'
    assert raised_code(lambda: sampling_mask.decode(doc)) == "E_ENCODING"
    value = b'{"sampling_mask": 1, "rows": [[1]], "metadata": {"producer": "\\udfff"}}'
    assert raised_code(lambda: sampling_mask.decode(value)) == "E_ENCODING"
    assert raised_code(lambda: SamplingMask.from_rows([[1]], metadata={"\ud800": 1})) == "E_ENCODING"


@pytest.mark.parametrize("text", ["AAAAAB==", "AAAAAAB=", "AAAAAA9="])
def test_non_canonical_base64_padding_bits_are_refused(text: str) -> None:
    nbytes = 4 if text.endswith("==") else 5
    shape = [1, 1] if nbytes == 4 else None
    if shape is None:  # five bytes: not a dense int32 shape; check the helper directly
        from sampling_mask.codecs.buffers import decode_base64

        assert raised_code(lambda: decode_base64(text, 5, sampling_mask.DEFAULT_LIMITS, field="data")) == "E_ENCODING"
        return
    env = json.dumps({"data": text, "shape": shape, "dtype": "int32"}).encode()
    assert raised_code(lambda: sampling_mask.decode(env, format="base64")) == "E_ENCODING"
    good = json.dumps({"data": "AAAAAA==", "shape": shape, "dtype": "int32"}).encode()
    assert sampling_mask.decode(good, format="base64").to_rows() == [[0]]


@pytest.mark.parametrize(
    "doc",
    [
        '{"sampling_mask":1,"rows":[[1]],"temperature":[-1e999]}',
        '{"sampling_mask":1,"rows":[[1]],"sampled_logprobs":[1e999]}',
        '{"sampling_mask":1,"rows":[[1]],"metadata":{"x":-1e999}}',
    ],
)
def test_json_number_past_float64_is_out_of_range(doc: str) -> None:
    import sampling_mask
    from sampling_mask import ErrorCode, SamplingMaskError

    with pytest.raises(SamplingMaskError) as info:
        sampling_mask.decode(doc.encode())
    assert info.value.code is ErrorCode.E_RANGE


def test_json_infinity_strings_still_decode() -> None:
    import math

    import sampling_mask

    mask = sampling_mask.decode(b'{"sampling_mask":1,"rows":[[1]],"sampled_logprobs":["-Infinity"]}')
    assert math.isinf(float(mask.companions["sampled_logprobs"][0]))
