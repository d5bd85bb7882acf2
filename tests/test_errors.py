"""Every error code the core can raise, each triggered by a crafted bad input that asserts the code.

E_BYTES, E_VERSION and E_ENCODING come from decoding bytes, which the core never does. They are
covered elsewhere: E_BYTES, E_VERSION and E_ENCODING in tests/test_codecs_arrow.py,
tests/test_codecs_json.py and tests/test_codecs_msgpack.py; E_BYTES and E_ENCODING also in
tests/test_codecs_compact.py and tests/test_limits_forged_sizes.py; all three in conformance/v1/invalid/.
The last tests here keep the spec's error table and limits table in step with the code.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sampling_mask import DEFAULT_LIMITS, ErrorCode, SamplingMask, SamplingMaskError, concat
from sampling_mask.core.errors import short_repr
from sampling_mask.core.limits import check_count, checked_nbytes

SPEC = Path(__file__).resolve().parents[1] / "spec" / "v1" / "SPEC.md"
CODEC_ONLY = {ErrorCode.E_BYTES, ErrorCode.E_VERSION, ErrorCode.E_ENCODING}


def base(**kwargs: Any) -> SamplingMask:
    """The README's example mask: rows {1, 5}, {}, {7}; vocab 10; segments [0, 2, 3]."""
    kwargs.setdefault("vocab_size", 10)
    kwargs.setdefault("cu_seqlens", [0, 2, 3])
    return SamplingMask.from_rows([[5, 1], [], [7]], **kwargs)


# (description, code, callable, expected context): one row per crafted bad input.
CASES: list[tuple[str, ErrorCode, Any, dict[str, Any]]] = [
    # E_DTYPE: an array has the wrong element type
    ("float ids", ErrorCode.E_DTYPE, lambda: SamplingMask.from_ragged([1.0], [0, 1]), {"field": "ids"}),
    ("bool offsets", ErrorCode.E_DTYPE, lambda: SamplingMask.from_ragged([1], [False, True]), {"field": "offsets"}),
    ("string row id", ErrorCode.E_DTYPE, lambda: SamplingMask.from_rows([[1], ["2"]]), {"row": 1}),
    ("float row id", ErrorCode.E_DTYPE, lambda: SamplingMask.from_rows([[1.5]]), {"row": 0}),
    ("None row id", ErrorCode.E_DTYPE, lambda: SamplingMask.from_rows([[], [None]]), {"row": 1}),
    ("float dense", ErrorCode.E_DTYPE, lambda: SamplingMask.from_dense(np.ones((2, 2))), {"field": "dense"}),
    ("int64 bitmask", ErrorCode.E_DTYPE, lambda: SamplingMask.from_bitmask(np.zeros((1, 2), np.int64), 10), {}),
    ("int logprobs", ErrorCode.E_DTYPE, lambda: base(sampled_logprobs=[0, 0, 0]), {"field": "sampled_logprobs"}),
    ("float sampled", ErrorCode.E_DTYPE, lambda: base(sampled_token_ids=[5.0, -1.0, 7.0]), {}),
    # E_SHAPE: wrong number of dimensions, or lengths that disagree
    ("2-D ids", ErrorCode.E_SHAPE, lambda: SamplingMask.from_ragged([[1]], [0, 1]), {"field": "ids"}),
    ("1-D dense", ErrorCode.E_SHAPE, lambda: SamplingMask.from_dense([1, 2]), {"field": "dense"}),
    ("ragged dense", ErrorCode.E_SHAPE, lambda: SamplingMask.from_dense([[1, 2], [3]]), {"field": "dense"}),
    ("3-D bitmask", ErrorCode.E_SHAPE, lambda: SamplingMask.from_bitmask(np.zeros((1, 1, 2), np.uint8), 10), {}),
    ("bitmask width", ErrorCode.E_SHAPE, lambda: SamplingMask.from_bitmask(np.zeros((1, 1), np.uint8), 10), {}),
    ("sampled length", ErrorCode.E_SHAPE, lambda: base(sampled_token_ids=[5, -1]), {"field": "sampled_token_ids"}),
    ("temperature length", ErrorCode.E_SHAPE, lambda: base(temperature=np.ones(2, np.float32)), {}),
    ("support length", ErrorCode.E_SHAPE, lambda: base(support_logprobs=np.zeros(2, np.float32)), {}),
    ("2-D logprobs", ErrorCode.E_SHAPE, lambda: base(sampled_logprobs=np.zeros((3, 1), np.float32)), {}),
    # E_PADDING: dense -1 before an id; bitmask bit at or past vocab_size
    ("dense gap", ErrorCode.E_PADDING, lambda: SamplingMask.from_dense([[5, -1, 1]]), {"row": 0, "value": 1}),
    ("dense leading pad", ErrorCode.E_PADDING, lambda: SamplingMask.from_dense([[1, 2], [-1, 3]]), {"row": 1}),
    (
        "bitmask padding bit",
        ErrorCode.E_PADDING,
        lambda: SamplingMask.from_bitmask(np.array([[0, 0], [0, 0b100]], np.uint8), 10),  # bit of id 10
        {"row": 1},
    ),
    # E_RANGE: id out of [0, vocab_size), or a value outside its domain
    ("id == vocab", ErrorCode.E_RANGE, lambda: SamplingMask.from_rows([[1], [10]], vocab_size=10), {"row": 1}),
    ("negative id", ErrorCode.E_RANGE, lambda: SamplingMask.from_ragged([3, -2], [0, 1, 2]), {"row": 1}),
    ("dense -2", ErrorCode.E_RANGE, lambda: SamplingMask.from_dense([[1, -2]]), {"row": 0, "value": -2}),
    ("id beyond int32", ErrorCode.E_RANGE, lambda: SamplingMask.from_rows([[2**31]]), {"value": 2**31}),
    ("id beyond int64", ErrorCode.E_RANGE, lambda: SamplingMask.from_rows([[2**70]]), {"row": 0}),
    ("vocab 0", ErrorCode.E_RANGE, lambda: SamplingMask.from_rows([[]], vocab_size=0), {"field": "vocab_size"}),
    ("bitmask vocab 0", ErrorCode.E_RANGE, lambda: SamplingMask.from_bitmask(np.zeros((1, 0), np.uint8), 0), {}),
    ("sampled -1 on a full row", ErrorCode.E_RANGE, lambda: base(sampled_token_ids=[-1, -1, 7]), {"row": 0}),
    ("sampled -2 on empty row", ErrorCode.E_RANGE, lambda: base(sampled_token_ids=[5, -2, 7]), {"row": 1}),
    ("sampled >= vocab", ErrorCode.E_RANGE, lambda: base(sampled_token_ids=[5, 10, 7]), {"row": 1}),
    ("temperature 0", ErrorCode.E_RANGE, lambda: base(temperature=np.array([1, 0, 1], np.float32)), {"row": 1}),
    ("temperature < 0", ErrorCode.E_RANGE, lambda: base(temperature=np.array([-1, 1, 1], np.float32)), {"row": 0}),
    ("temperature inf", ErrorCode.E_RANGE, lambda: base(temperature=np.array([1, 1, np.inf], np.float32)), {}),
    ("temperature < 0 after NaN", ErrorCode.E_RANGE, lambda: base(temperature=np.array([np.nan, -1, 1])), {"row": 1}),
    ("sampled -1 after valid rows", ErrorCode.E_RANGE, lambda: base(sampled_token_ids=[5, 7, -1]), {"row": 2}),
    ("bitmask id >= V", ErrorCode.E_RANGE, lambda: SamplingMask.from_rows([[9]]).to_bitmask(8), {"value": 9}),
    (
        "concat unknown vocab too large",
        ErrorCode.E_RANGE,
        lambda: concat([base(), SamplingMask.from_rows([[12]])]),
        {"value": 12},
    ),
    ("negative count", ErrorCode.E_RANGE, lambda: check_count(-1, 10, "rows"), {}),
    # E_DUPLICATE: an id twice in one row
    ("dup in ragged", ErrorCode.E_DUPLICATE, lambda: SamplingMask.from_ragged([4, 2, 9, 2], [0, 1, 4]), {"row": 1}),
    ("dup in rows", ErrorCode.E_DUPLICATE, lambda: SamplingMask.from_rows([[1, 2], [3, 3]]), {"row": 1, "value": 3}),
    ("dup in dense", ErrorCode.E_DUPLICATE, lambda: SamplingMask.from_dense([[7, 7]]), {"row": 0}),
    # E_OFFSETS: offsets / counts do not tile the ids
    ("offsets[0] != 0", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_ragged([1], [1, 1]), {"field": "offsets"}),
    ("offsets decrease", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_ragged([1, 2], [0, 2, 1, 2]), {"row": 1}),
    ("offsets[T] != nnz", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_ragged([1, 2], [0, 1]), {}),
    ("no offsets", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_ragged([], []), {}),
    ("counts sum", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_counts([1, 2, 3], [1, 1]), {"field": "counts"}),
    ("negative count", ErrorCode.E_OFFSETS, lambda: SamplingMask.from_counts([1], [2, -1]), {"row": 1}),
    # E_SEGMENTS: cu_seqlens does not tile the rows
    ("cu[0] != 0", ErrorCode.E_SEGMENTS, lambda: base(cu_seqlens=[1, 3]), {"field": "cu_seqlens"}),
    ("cu decreases", ErrorCode.E_SEGMENTS, lambda: base(cu_seqlens=[0, 2, 1, 3]), {"segment": 1}),
    ("cu[B] != T", ErrorCode.E_SEGMENTS, lambda: base(cu_seqlens=[0, 2]), {"value": 2}),
    ("empty cu", ErrorCode.E_SEGMENTS, lambda: base(cu_seqlens=[]), {}),
    ("take out of range", ErrorCode.E_SEGMENTS, lambda: base().take([2]), {"value": 2}),
    # E_MISSING_SAMPLED: a non-empty row lacks its sampled id
    ("sampled not in row", ErrorCode.E_MISSING_SAMPLED, lambda: base(sampled_token_ids=[5, -1, 6]), {"row": 2}),
    # E_WIDTH: a dense width below the widest row
    ("to_dense narrow", ErrorCode.E_WIDTH, lambda: base().to_dense(width=1), {"row": 0, "value": 1}),
    # E_LIMIT: a size beyond a configured resource limit
    ("rows", ErrorCode.E_LIMIT, lambda: base(limits=DEFAULT_LIMITS.replace(max_rows=2)), {}),
    ("nnz rows", ErrorCode.E_LIMIT, lambda: base(limits=DEFAULT_LIMITS.replace(max_nnz=2)), {"field": "rows"}),
    (
        "nnz ragged",
        ErrorCode.E_LIMIT,
        lambda: SamplingMask.from_ragged([1, 2, 3], [0, 3], limits=DEFAULT_LIMITS.replace(max_nnz=2)),
        {"field": "ids"},
    ),
    ("row width", ErrorCode.E_LIMIT, lambda: base(limits=DEFAULT_LIMITS.replace(max_width=1)), {"row": 0}),
    ("segments", ErrorCode.E_LIMIT, lambda: base(limits=DEFAULT_LIMITS.replace(max_segments=1)), {}),
    ("vocab", ErrorCode.E_LIMIT, lambda: base(limits=DEFAULT_LIMITS.replace(max_vocab=9)), {}),
    (
        "dense width",
        ErrorCode.E_LIMIT,
        lambda: SamplingMask.from_dense(np.full((1, 5), -1), limits=DEFAULT_LIMITS.replace(max_width=4)),
        {"field": "dense"},
    ),
    (
        "rows before flattening",
        ErrorCode.E_LIMIT,
        lambda: SamplingMask.from_rows([[]] * 5, limits=DEFAULT_LIMITS.replace(max_rows=4)),
        {"field": "rows"},
    ),
    ("to_dense bytes", ErrorCode.E_LIMIT, lambda: base().to_dense(limits=DEFAULT_LIMITS.replace(max_bytes=23)), {}),
    ("to_bitmask bytes", ErrorCode.E_LIMIT, lambda: base().to_bitmask(limits=DEFAULT_LIMITS.replace(max_bytes=5)), {}),
    ("forged size", ErrorCode.E_LIMIT, lambda: checked_nbytes((1 << 40, 1 << 40), 4, DEFAULT_LIMITS), {}),
    # E_SCHEMA: a missing / mistyped field, or fields that contradict each other
    ("rows not a list", ErrorCode.E_SCHEMA, lambda: SamplingMask.from_rows("12"), {"field": "rows"}),  # type: ignore[arg-type]
    ("row is a number", ErrorCode.E_SCHEMA, lambda: SamplingMask.from_rows([[1], 2]), {"row": 1}),  # type: ignore[list-item]
    ("row is a string", ErrorCode.E_SCHEMA, lambda: SamplingMask.from_rows([[1], "ab"]), {"row": 1}),
    ("vocab not int", ErrorCode.E_SCHEMA, lambda: base(vocab_size=10.0), {"field": "vocab_size"}),
    ("bitmask vocab str", ErrorCode.E_SCHEMA, lambda: SamplingMask.from_bitmask(np.zeros((1, 2), np.uint8), "10"), {}),
    ("metadata list", ErrorCode.E_SCHEMA, lambda: base(metadata=[("top_k", 5)]), {"field": "metadata"}),
    ("metadata key", ErrorCode.E_SCHEMA, lambda: base(metadata={1: 2}), {"field": "metadata"}),
    ("metadata value", ErrorCode.E_SCHEMA, lambda: base(metadata={"x": [1]}), {"field": "metadata.x"}),
    ("top_k float", ErrorCode.E_SCHEMA, lambda: base(metadata={"top_k": 5.0}), {"field": "metadata.top_k"}),
    ("top_p bool", ErrorCode.E_SCHEMA, lambda: base(metadata={"top_p": True}), {"field": "metadata.top_p"}),
    ("producer int", ErrorCode.E_SCHEMA, lambda: base(metadata={"producer": 3}), {"field": "metadata.producer"}),
    ("bitmask no vocab", ErrorCode.E_SCHEMA, lambda: SamplingMask.from_rows([[1]]).to_bitmask(), {}),
    ("bitmask other vocab", ErrorCode.E_SCHEMA, lambda: base().to_bitmask(16), {"value": 16}),
    ("concat nothing", ErrorCode.E_SCHEMA, lambda: concat([]), {}),
    ("concat vocab", ErrorCode.E_SCHEMA, lambda: concat([base(), base(vocab_size=11)]), {"field": "vocab_size"}),
    (
        "concat companions",
        ErrorCode.E_SCHEMA,
        lambda: concat([base(), base(sampled_token_ids=[5, -1, 7])]),
        {"field": "companions"},
    ),
    ("concat metadata", ErrorCode.E_SCHEMA, lambda: concat([base(), base(metadata={"top_k": 2})]), {}),
    ("take floats", ErrorCode.E_SCHEMA, lambda: base().take([0.5]), {"field": "segment_indices"}),
    ("slice step", ErrorCode.E_SCHEMA, lambda: base()[::2], {"value": 2}),
]


@pytest.mark.parametrize(("description", "code", "make", "context"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_its_code(description: str, code: ErrorCode, make: Any, context: dict[str, Any]) -> None:
    with pytest.raises(SamplingMaskError) as info:
        make()
    err = info.value
    assert err.code is code, f"{description}: got {err}"
    for key, value in context.items():
        assert getattr(err, key) == value, f"{description}: {key} = {getattr(err, key)!r}, wanted {value!r}"
    # The message names where: the code first, then the context it carries.
    assert str(err).startswith(code.value + ": ")
    if err.row is not None:
        assert f"row {err.row}" in str(err)


def test_every_core_code_has_a_case() -> None:
    covered = {code for _, code, _, _ in CASES}
    assert covered == set(ErrorCode) - CODEC_ONLY


def test_error_is_a_value_error_with_data() -> None:
    err = SamplingMaskError("E_RANGE", "id outside [0, 10)", row=3, segment=1, field="ids", value=12)
    assert isinstance(err, ValueError)
    assert err.code is ErrorCode.E_RANGE and str(err.code) == "E_RANGE"
    assert err.to_dict() == {
        "code": "E_RANGE",
        "message": "id outside [0, 10)",
        "row": 3,
        "segment": 1,
        "field": "ids",
        "value": 12,
    }
    assert str(err) == "E_RANGE: id outside [0, 10) (field 'ids', segment 1, row 3, value 12)"
    assert SamplingMaskError(ErrorCode.E_SHAPE, "x", value=(1, 2)).to_dict()["value"] == "(1, 2)"


def test_an_error_names_any_value_without_recursing_into_it() -> None:
    """A value that is not a scalar is held as its :func:`short_repr`: containers two levels deep and
    at most 80 characters, objects other than numbers and text by type, so that no ``__repr__`` of a
    hostile value runs and a value nested 100,000 deep cannot exhaust the stack."""
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    cases = {
        "deep list": (deep, "[[[...]]]"),
        "deep dict": ({"a": {"b": {"c": deep}}}, "{'a': {'b': {...}}}"),
        "long text in a list": (["x" * 500], "['" + "x" * 27 + "..." + "x" * 28 + "']"),
        "array": (np.zeros((3, 4)), "<ndarray>"),
        "tuple": ((1, 2), "(1, 2)"),
        "object": (object(), "<object>"),
    }
    for label, (value, shown) in cases.items():
        assert short_repr(value) == shown, label
        err = SamplingMaskError(ErrorCode.E_SCHEMA, "x", field="f", value=value)
        assert err.value == shown and str(err).endswith(f"value {shown!r})") and len(str(err)) < 140, label
    for scalar in (None, True, 7, 0.5, "text", np.int32(3)):
        assert SamplingMaskError(ErrorCode.E_SCHEMA, "x", value=scalar).value is scalar


def test_error_pickles_with_its_fields() -> None:
    err = SamplingMaskError(ErrorCode.E_OFFSETS, "offsets decrease", row=2, field="offsets", value=5)
    back = pickle.loads(pickle.dumps(err))
    assert (back.code, back.message, back.row, back.field, back.value) == (err.code, err.message, 2, "offsets", 5)
    assert str(back) == str(err)


def test_unknown_code_is_refused() -> None:
    with pytest.raises(ValueError):
        SamplingMaskError("E_NOPE", "not a code")


def test_no_bare_exception_escapes_on_mangled_arrays() -> None:
    """A sample of hostile shapes and objects: each gives a SamplingMaskError, nothing else."""
    hostile: list[Any] = [
        lambda: SamplingMask.from_ragged(object(), [0]),
        lambda: SamplingMask.from_ragged([1], [[0, 1]]),
        lambda: SamplingMask.from_ragged([1], [0, 2**64]),
        lambda: SamplingMask.from_counts([1], [[1]]),
        lambda: SamplingMask.from_rows([[1], {"a": 1}]),
        lambda: SamplingMask.from_rows([None]),  # type: ignore[list-item]
        lambda: SamplingMask.from_rows([[[1]]]),  # type: ignore[list-item]
        lambda: SamplingMask.from_dense([["a", "b"]]),
        lambda: SamplingMask.from_bitmask([[1, [2]]], 10),
        lambda: base(cu_seqlens=[[0, 3]]),
        lambda: base(sampled_token_ids=[[5, -1, 7]]),
        lambda: base(temperature="hot"),
        lambda: base(sampled_logprobs=[[0.0], [0.0, 1.0]]),
    ]
    for make in hostile:
        with pytest.raises(SamplingMaskError):
            make()


def test_spec_error_table_lists_every_code() -> None:
    """The spec's error table and ErrorCode agree both ways."""
    text = SPEC.read_text(encoding="utf-8")
    table = set(re.findall(r"^\|\s*`(E_[A-Z_]+)`\s*\|", text, flags=re.M))
    assert table == {code.value for code in ErrorCode}


@pytest.mark.parametrize(
    "build",
    [
        lambda: SamplingMask.from_rows([[1]], vocab_size=10**5000),
        lambda: SamplingMask.from_rows([[10**5000]]),
        lambda: check_count(10**5000, 10, "row count"),
    ],
)
def test_an_integer_too_long_to_print_is_named_not_printed(build):
    """An int of more digits than Python prints (``int`` max str digits) is refused with a code, its
    value named by its size; the message never fails to format."""
    with pytest.raises(SamplingMaskError) as err:
        build()
    assert "bits>" in str(err.value) and err.value.to_dict()["code"].startswith("E_")
