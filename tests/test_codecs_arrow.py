"""Arrow IPC file / stream and Parquet: schema, zero copy, streaming, compression, validation; a cut or
corrupt stream gives back every complete batch before its error, which says how many there were."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from file_checks import raised_code, read_until_error  # noqa: E402
from mask_examples import random_mask, sample_mask  # noqa: E402

import sampling_mask  # noqa: E402
from sampling_mask import DEFAULT_LIMITS, ErrorCode, SamplingMask, SamplingMaskError, codecs, concat  # noqa: E402
from sampling_mask.codecs import arrow  # noqa: E402

HEADER = {"sampling_mask.version": "1"}


def list_array(offsets, values, *, large: bool = False):
    """A list array from raw offsets, built without validation (so it may be invalid on purpose)."""
    dtype = np.int64 if large else np.int32
    kind = pa.large_list if large else pa.list_
    buf = pa.py_buffer(np.asarray(offsets, dtype).tobytes())
    return pa.Array.from_buffers(kind(values.type), len(offsets) - 1, [None, buf], children=[values])


def mask_table(cu, offsets, ids, metadata=None, **columns):
    inner = list_array(offsets, pa.array(np.asarray(ids, np.int32)))
    table = pa.table({"sampling_mask": list_array(cu, inner), **columns})
    return table.replace_schema_metadata(HEADER if metadata is None else metadata)


def error_code(call) -> ErrorCode:
    with pytest.raises(SamplingMaskError) as err:
        call()
    return err.value.code


# ---------------------------------------------------------------------------------------------- schema
def test_schema_is_exactly_the_specified_one() -> None:
    table = arrow.table_from_mask(sample_mask())
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("sampling_mask", "list<item: list<item: int32>>"),
        ("sampled_token_ids", "list<item: int32>"),
        ("sampled_logprobs", "list<item: float>"),
        ("temperature", "list<item: float>"),
        ("support_logprobs", "list<item: list<item: float>>"),
    ]
    assert table.schema.metadata == {
        b"sampling_mask.version": b"1",
        b"sampling_mask.vocab_size": b"10",
        b"sampling_mask.id_order": b"unspecified",
        b"sampling_mask.layout": b"list",
        b"sampling_mask.metadata.top_k": b"3",
        b"sampling_mask.metadata.top_p": b"0.95",
        b"sampling_mask.metadata.producer": b'"test"',
    }
    canonical = arrow.table_from_mask(sample_mask().canonical())
    assert canonical.schema.metadata[b"sampling_mask.id_order"] == b"ascending"


def test_an_ordinary_arrow_table_one_row_per_segment() -> None:
    mask = sample_mask()
    table = pa.ipc.open_file(pa.py_buffer(codecs.encode(mask, "arrow"))).read_all()
    assert table.num_rows == mask.num_segments
    rows = mask.to_rows()
    assert table.column("sampling_mask").to_pylist() == [
        rows[a:b] for a, b in zip(mask.cu_seqlens[:-1], mask.cu_seqlens[1:], strict=True)
    ]
    inner = table.column("sampling_mask").chunk(0).values
    assert inner.offsets.to_pylist() == mask.offsets.tolist()
    assert table.column("sampling_mask").chunk(0).offsets.to_pylist() == mask.cu_seqlens.tolist()
    assert table.column("sampled_token_ids").to_pylist() == [[3, -1], [], [5, 9]]


def test_large_lists_only_where_offsets_overflow(monkeypatch) -> None:
    mask = sample_mask()  # 4 rows, 6 ids
    monkeypatch.setattr(arrow, "INT32_OFFSET_MAX", 5)  # ids overflow, rows do not
    table = arrow.table_from_mask(mask)
    assert str(table.schema.field("sampling_mask").type) == "list<item: large_list<item: int32>>"
    assert str(table.schema.field("support_logprobs").type) == "list<item: large_list<item: float>>"
    assert str(table.schema.field("sampled_token_ids").type) == "list<item: int32>"
    assert arrow.mask_from_table(table) == mask
    monkeypatch.setattr(arrow, "INT32_OFFSET_MAX", 3)  # rows overflow too
    table = arrow.table_from_mask(mask)
    assert str(table.schema.field("sampling_mask").type) == "large_list<item: large_list<item: int32>>"
    assert str(table.schema.field("temperature").type) == "large_list<item: float>"
    for fmt in arrow.FORMATS:
        assert codecs.decode(codecs.encode(mask, fmt), format=fmt) == mask
    monkeypatch.undo()
    forced = arrow.table_from_mask(mask, large_lists=True)
    assert str(forced.schema.field("sampling_mask").type) == "large_list<item: large_list<item: int32>>"
    assert arrow.mask_from_table(forced) == mask


def test_writer_refuses_a_batch_that_outgrows_int32_lists(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(arrow, "INT32_OFFSET_MAX", 5)
    small = SamplingMask.from_rows([[1, 2]], vocab_size=10)
    with codecs.open_writer(tmp_path / "s.arrows") as writer:
        writer.write(small)
        bigger = SamplingMask.from_rows([[1, 2, 3], [4, 5, 6]], vocab_size=10)
        assert error_code(lambda: writer.write(bigger)) == ErrorCode.E_LIMIT
    assert list(codecs.iter_masks(tmp_path / "s.arrows")) == [small]


# ---------------------------------------------------------------------------------------------- zero copy
def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and os.path.realpath(parts[5].strip()) == real:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_memory_mapped_file_gives_ids_that_view_the_mapping(tmp_path) -> None:
    path = tmp_path / "mask.arrow"
    mask = SamplingMask.from_rows([list(range(i, i + 50)) for i in range(200)], vocab_size=500)
    codecs.save(mask, path)
    loaded = codecs.load(path)
    assert loaded == mask
    ranges = _mapped_ranges(str(path))
    assert ranges, "the file is not memory-mapped"
    start, end = loaded.ids.ctypes.data, loaded.ids.ctypes.data + loaded.ids.nbytes
    assert any(lo <= start and end <= hi for lo, hi in ranges)
    assert not loaded.ids.flags.writeable
    for streamed in codecs.iter_masks(path):  # a fresh mapping of the same file
        assert any(lo <= streamed.ids.ctypes.data < hi for lo, hi in _mapped_ranges(str(path)))


def test_decoded_arrays_share_memory_with_the_input() -> None:
    mask = sample_mask()
    for fmt in ("arrow", "arrows"):
        data = codecs.encode(mask, fmt)
        decoded = codecs.decode(data)
        whole = np.frombuffer(data, np.uint8)
        assert np.shares_memory(decoded.ids, whole), fmt
        assert np.shares_memory(decoded.support_logprobs, whole), fmt
        assert np.shares_memory(decoded.sampled_token_ids, whole), fmt


def test_python_mmap_input_is_viewed(tmp_path) -> None:
    import mmap

    path = tmp_path / "m.arrow"
    codecs.save(sample_mask(), path)
    with open(path, "rb") as fh:
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        decoded = codecs.decode(mapped)
        assert np.shares_memory(decoded.ids, np.frombuffer(mapped, np.uint8))
        assert decoded == sample_mask()


# ---------------------------------------------------------------------------------------------- features
@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_compression(compression: str) -> None:
    mask = SamplingMask.from_rows([[1, 2, 3, 4]] * 400, vocab_size=8)
    plain = codecs.encode(mask, "arrows")
    packed = codecs.encode(mask, "arrows", compression=compression)
    assert len(packed) < len(plain) / 2
    assert codecs.decode(packed) == mask
    assert codecs.decode(codecs.encode(mask, "arrow", compression=compression)) == mask
    assert error_code(lambda: codecs.encode(mask, "arrow", compression="gzip9")) == ErrorCode.E_SCHEMA


def test_parquet_round_trip_through_pyarrow_parquet(tmp_path) -> None:
    mask = sample_mask()
    path = tmp_path / "mask.parquet"
    codecs.save(mask, path, extra_columns={"reward": [0.5, 0.0, 1.0]})
    table = pq.read_table(path)
    assert table.column("reward").to_pylist() == [0.5, 0.0, 1.0]
    assert arrow.mask_from_table(table) == mask
    assert codecs.load(path) == mask
    pq.write_table(arrow.table_from_mask(mask), tmp_path / "plain.parquet", compression="zstd")
    assert codecs.load(tmp_path / "plain.parquet") == mask


def test_extra_user_columns_are_preserved(tmp_path) -> None:
    mask = sample_mask()
    path = tmp_path / "mask.arrow"
    prompts = pa.array([[1, 2, 3], [4], [5, 6]], pa.list_(pa.int64()))
    codecs.save(mask, path, extra_columns={"prompt_ids": prompts, "reward": np.array([1.0, -1.0, 0.5])})
    table = arrow.read_table(path)
    assert table.column_names[-2:] == ["prompt_ids", "reward"]
    assert table.column("prompt_ids").to_pylist() == [[1, 2, 3], [4], [5, 6]]
    assert arrow.mask_from_table(table) == mask
    assert codecs.load(path) == mask
    reserved = {"sampled_token_ids": [1, 2, 3]}
    assert error_code(lambda: codecs.encode(mask, "arrow", extra_columns=reserved)) == ErrorCode.E_SCHEMA
    short = {"reward": [1.0]}
    assert error_code(lambda: codecs.encode(mask, "arrow", extra_columns=short)) == ErrorCode.E_SHAPE


def test_mask_from_a_sliced_multi_chunk_table() -> None:
    mask = sample_mask()
    table = pa.concat_tables([arrow.table_from_mask(mask), arrow.table_from_mask(mask)])
    assert arrow.mask_from_table(table) == concat([mask, mask])
    assert arrow.mask_from_table(table.slice(1, 2)) == mask.take([1, 2])
    assert arrow.mask_from_table(table.slice(2, 3)) == concat([mask.take([2]), mask.take([0, 1])])


def test_compact_layout_column(tmp_path) -> None:
    pytest.importorskip("sampling_mask.codecs.compact")
    mask = sample_mask()
    table = arrow.table_from_mask(mask, layout="compact")
    assert [(f.name, str(f.type)) for f in table.schema][:3] == [
        ("sampling_mask_compact", "binary"),
        ("sampling_mask_num_rows", "int64"),
        ("sampling_mask_nnz", "int64"),
    ]
    assert table.schema.metadata[b"sampling_mask.layout"] == b"compact"
    assert table.schema.metadata[b"sampling_mask.id_order"] == b"ascending"
    assert table.column("sampling_mask_num_rows").to_pylist() == [2, 0, 2]
    assert arrow.mask_from_table(table) == mask
    path = tmp_path / "c.arrows"
    with codecs.open_writer(path, layout="compact") as writer:
        writer.write(mask)
        writer.write(mask.take([2, 0]))
    assert list(codecs.iter_masks(path)) == [mask, mask.take([2, 0])]
    broken = table.set_column(1, "sampling_mask_num_rows", pa.array([2, 1, 2], pa.int64()))
    assert error_code(lambda: arrow.mask_from_table(broken)) in (
        ErrorCode.E_SHAPE,
        ErrorCode.E_BYTES,
        ErrorCode.E_OFFSETS,
    )
    forged = table.set_column(2, "sampling_mask_nnz", pa.array([2, 0, 1 << 40], pa.int64()))
    assert error_code(lambda: arrow.mask_from_table(forged)) == ErrorCode.E_LIMIT


@pytest.mark.parametrize("fmt", ["arrow", "arrows", "parquet"])
def test_read_table_checks_declared_sizes_before_reading(fmt: str) -> None:
    # 2^20 empty rows compress to a few KB and decompress to 4-8 MiB of offsets: over a 1 MiB
    # max_bytes, read_table refuses from what the batches declare, before pyarrow decompresses.
    bomb = SamplingMask(np.zeros(0, np.int32), np.zeros((1 << 20) + 1, np.int64))
    data = codecs.encode(bomb, fmt, compression="zstd")
    assert len(data) < 64 << 10
    tight = DEFAULT_LIMITS.replace(max_bytes=1 << 20)
    assert error_code(lambda: arrow.read_table(data, fmt, limits=tight)) == ErrorCode.E_LIMIT
    assert arrow.read_table(data, fmt).num_rows == 1


def test_streaming_writer_appends_batches(tmp_path) -> None:
    mask = sample_mask()
    path = tmp_path / "s.arrow"
    with codecs.open_writer(path, compression="zstd") as writer:
        for _ in range(4):
            writer.write(mask)
    assert writer.batches_written == 4
    assert pa.ipc.open_file(str(path)).num_record_batches == 4
    assert sum(m.num_segments for m in codecs.iter_masks(path)) == 12
    other = mask.replace(sampled_logprobs=None)
    with codecs.open_writer(tmp_path / "t.arrows") as writer:
        writer.write(mask)
        assert error_code(lambda: writer.write(other)) == ErrorCode.E_SCHEMA
        assert error_code(lambda: writer.write(mask.replace(metadata={"a": 1}))) == ErrorCode.E_SCHEMA
        assert error_code(lambda: writer.write(mask.replace(vocab_size=11))) == ErrorCode.E_SCHEMA
    with codecs.open_writer(tmp_path / "asc.arrows") as writer:
        writer.write(mask.canonical())
        assert error_code(lambda: writer.write(mask)) == ErrorCode.E_SCHEMA
        writer.write(mask.canonical())
    with codecs.open_writer(tmp_path / "declared.arrows", id_order="ascending") as writer:
        assert error_code(lambda: writer.write(mask)) == ErrorCode.E_SCHEMA  # nothing written yet
        writer.write(mask.canonical())
    assert list(codecs.iter_masks(tmp_path / "declared.arrows")) == [mask]
    assert arrow.read_table(tmp_path / "declared.arrows").schema.metadata[b"sampling_mask.id_order"] == b"ascending"


# ---------------------------------------------------------------------------------------------- validation
def test_non_monotonic_offsets() -> None:
    assert error_code(lambda: arrow.mask_from_table(mask_table([0, 2], [0, 3, 1], [1, 2, 3]))) == ErrorCode.E_OFFSETS
    assert error_code(lambda: arrow.mask_from_table(mask_table([0, 2, 1], [0, 1, 2], [1, 2]))) == ErrorCode.E_SEGMENTS


def test_corrupted_offsets_in_an_ipc_file() -> None:
    mask = SamplingMask.from_rows([[1, 2], [], [3, 4, 5]])
    data = bytearray(codecs.encode(mask, "arrow"))
    pattern = np.array([0, 2, 2, 5], np.int32).tobytes()
    at = bytes(data).find(pattern)
    assert at > 0
    data[at + 4 : at + 8] = np.int32(4).tobytes()  # offsets 0, 4, 2, 5
    assert error_code(lambda: codecs.decode(bytes(data))) == ErrorCode.E_OFFSETS
    data[at + 4 : at + 8] = np.int32(2).tobytes()
    data[at + 12 : at + 16] = np.int32(9).tobytes()  # beyond the 5 ids
    assert error_code(lambda: codecs.decode(bytes(data))) in (ErrorCode.E_OFFSETS, ErrorCode.E_ENCODING)
    data[at : at + 4] = np.int32(-1).tobytes()
    assert error_code(lambda: codecs.decode(bytes(data))) in (ErrorCode.E_OFFSETS, ErrorCode.E_ENCODING)


def test_nulls_are_rejected() -> None:
    nullable = pa.array([[[1]], None], pa.list_(pa.list_(pa.int32())))
    table = pa.table({"sampling_mask": nullable}).replace_schema_metadata(HEADER)
    assert error_code(lambda: arrow.mask_from_table(table)) == ErrorCode.E_SCHEMA
    inner_null = pa.array([[[1], None]], pa.list_(pa.list_(pa.int32())))
    table = pa.table({"sampling_mask": inner_null}).replace_schema_metadata(HEADER)
    assert error_code(lambda: arrow.mask_from_table(table)) == ErrorCode.E_SCHEMA
    leaf_null = pa.array([[[1, None]]], pa.list_(pa.list_(pa.int32())))
    table = pa.table({"sampling_mask": leaf_null}).replace_schema_metadata(HEADER)
    assert error_code(lambda: arrow.mask_from_table(table)) == ErrorCode.E_SCHEMA


@pytest.mark.parametrize(
    ("column", "code"),
    [
        (pa.array([[[1]]], pa.list_(pa.list_(pa.int64()))), ErrorCode.E_DTYPE),
        (pa.array([[1]], pa.list_(pa.int32())), ErrorCode.E_SCHEMA),
        (pa.array([[[1.0]]], pa.list_(pa.list_(pa.float32()))), ErrorCode.E_DTYPE),
        (pa.array([["a"]], pa.list_(pa.string())), ErrorCode.E_SCHEMA),
        (pa.array([1], pa.int32()), ErrorCode.E_SCHEMA),
    ],
)
def test_types_are_exact(column, code: ErrorCode) -> None:
    table = pa.table({"sampling_mask": column}).replace_schema_metadata(HEADER)
    assert error_code(lambda: arrow.mask_from_table(table)) == code


def test_companion_columns_must_align() -> None:
    good = arrow.table_from_mask(sample_mask())
    shifted = good.set_column(1, "sampled_token_ids", pa.array([[3], [-1], [5, 9]], pa.list_(pa.int32())))
    assert error_code(lambda: arrow.mask_from_table(shifted)) == ErrorCode.E_SHAPE
    ragged = good.set_column(
        4,
        "support_logprobs",
        pa.array([[[0.0], [1.0, 2.0]], [], [[0.0], [1.0, 2.0, 3.0]]], pa.list_(pa.list_(pa.float32()))),
    )
    assert error_code(lambda: arrow.mask_from_table(ragged)) == ErrorCode.E_SHAPE
    wrong_type = good.set_column(2, "sampled_logprobs", pa.array([[0.0, 0.0], [], [0.0, 0.0]], pa.list_(pa.float64())))
    assert error_code(lambda: arrow.mask_from_table(wrong_type)) == ErrorCode.E_DTYPE
    duplicated = pa.table([good.column(0), good.column(0)], names=["sampling_mask", "sampling_mask"])
    assert error_code(lambda: arrow.mask_from_table(duplicated.replace_schema_metadata(HEADER))) == ErrorCode.E_SCHEMA


@pytest.mark.parametrize(
    ("metadata", "code"),
    [
        ({}, ErrorCode.E_SCHEMA),
        ({"sampling_mask.version": "2"}, ErrorCode.E_VERSION),
        ({"sampling_mask.version": "one"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.vocab_size": "-3"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.vocab_size": "2"}, ErrorCode.E_RANGE),
        ({**HEADER, "sampling_mask.id_order": "descending"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.id_order": "ascending"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.layout": "dense"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.metadata.top_k": "[1, 2]"}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.metadata.top_k": "NaN"}, ErrorCode.E_ENCODING),
        ({**HEADER, "sampling_mask.vocab_size": str(1 << 30)}, ErrorCode.E_LIMIT),
        # A number past float64 parses as an infinity: E_RANGE, as the JSON document answers.
        ({**HEADER, "sampling_mask.metadata.x": "1e999"}, ErrorCode.E_RANGE),
        ({**HEADER, "sampling_mask.metadata.temperature": "-1e999"}, ErrorCode.E_RANGE),
        ({**HEADER, "sampling_mask.metadata.x": '{"float": 1e999}'}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.metadata.x": '{"float": ["NaN"]}'}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.metadata.x": "[" * 20 + "]" * 20}, ErrorCode.E_SCHEMA),
        ({**HEADER, "sampling_mask.metadata.x": "[" * 100_000 + "]" * 100_000}, ErrorCode.E_LIMIT),
    ],
)
def test_schema_metadata_is_checked(metadata: dict, code: ErrorCode) -> None:
    table = mask_table([0, 2], [0, 2, 3], [3, 1, 2], metadata=metadata)
    assert error_code(lambda: arrow.mask_from_table(table)) == code


def test_the_infinite_metadata_float_is_spelled_as_an_object() -> None:
    """``{"float": "Infinity"}`` is the one spelling of an infinite metadata value (9.2): read back as one."""
    table = mask_table(
        [0, 2], [0, 2, 3], [1, 2, 3], metadata={**HEADER, "sampling_mask.metadata.x": '{"float": "-Infinity"}'}
    )
    assert arrow.mask_from_table(table).metadata == {"x": float("-inf")}


def test_limits_apply_before_building() -> None:
    table = arrow.table_from_mask(sample_mask())
    for limits, field in (
        (DEFAULT_LIMITS.replace(max_segments=2), "sampling_mask"),
        (DEFAULT_LIMITS.replace(max_rows=3), "sampling_mask"),
        (DEFAULT_LIMITS.replace(max_nnz=5), "sampling_mask"),
    ):
        with pytest.raises(SamplingMaskError) as err:
            arrow.mask_from_table(table, limits=limits)
        assert err.value.code == ErrorCode.E_LIMIT
        assert err.value.field == field


def test_skipping_validation_keeps_the_structure_checks() -> None:
    unsorted_dup = mask_table([0, 1], [0, 2], [4, 4])
    assert error_code(lambda: arrow.mask_from_table(unsorted_dup)) == ErrorCode.E_DUPLICATE
    assert arrow.mask_from_table(unsorted_dup, validate=False).nnz == 2
    # Trusted reads keep the O(1) checks (end points inside the child) and skip the O(rows) scans:
    # decreasing offsets pass, and the mask's own validate() still names them.
    trusted = arrow.mask_from_table(mask_table([0, 2], [0, 3, 1], [1, 2, 3]), validate=False)
    assert trusted.num_rows == 2 and error_code(trusted.validate) == ErrorCode.E_OFFSETS
    assert error_code(lambda: arrow.mask_from_table(mask_table([0, 2], [0, 3, 1], [1, 2, 3]))) == ErrorCode.E_OFFSETS


def test_pyarrow_exceptions_never_escape() -> None:
    for data in (b"ARROW1\x00\x00garbage", b"\xff\xff\xff\xff\x10\x00\x00\x00xx", b"PAR1" + b"\x00" * 20 + b"PAR1"):
        assert error_code(lambda data=data: codecs.decode(data)) == ErrorCode.E_ENCODING


def test_descending_row_offsets_name_their_row_after_pyarrow_finds_them() -> None:
    # pyarrow's full validation checks the rows' order; our scan then names the row (E_OFFSETS).
    for large in (False, True):
        inner = list_array([0, 2, 5, 4, 6], pa.array(np.arange(6, dtype=np.int32)), large=large)
        table = pa.table({arrow.MASK_COLUMN: list_array([0, 4], inner)}).replace_schema_metadata(HEADER)
        with pytest.raises(SamplingMaskError) as info:
            arrow.mask_from_table(table)
        assert (info.value.code, info.value.row) == (ErrorCode.E_OFFSETS, 2)


@pytest.mark.parametrize("large_lists", [False, True])
def test_row_wider_than_the_limit_is_found_with_the_ids(large_lists: bool) -> None:
    # The widths of ordered Arrow rows are checked block by block, before the block's ids are read.
    rows = [[1], [2, 3], [0, 1, 2, 3, 4], [5], [0, 1, 2, 3, 4, 5], [7]]
    data = codecs.encode(SamplingMask.from_rows(rows), "arrows", large_lists=large_lists)
    with pytest.raises(SamplingMaskError) as info:
        codecs.decode(data, limits=DEFAULT_LIMITS.replace(max_width=4))
    assert (info.value.code, info.value.row, info.value.value) == (ErrorCode.E_LIMIT, 4, 6)
    assert codecs.decode(data, limits=DEFAULT_LIMITS.replace(max_width=6)).to_rows() == rows


def test_valid_unicode_metadata_round_trips_through_arrow() -> None:
    mask = SamplingMask.from_rows([[1]], metadata={"modèle": "😀"})
    assert sampling_mask.decode(sampling_mask.encode(mask, "arrow"), format="arrow") == mask


# ---------------------------------------------------------------------------------------------- cut streams
BATCHES = [random_mask(seed, rows=60 + seed) for seed in range(3)]


def test_truncated_stream_reports_complete_batches(tmp_path) -> None:
    mask = sample_mask()
    path = tmp_path / "s.arrows"
    with codecs.open_writer(path) as writer:
        for _ in range(3):
            writer.write(mask)
    data = path.read_bytes()
    cut = tmp_path / "cut.arrows"
    cut.write_bytes(data[: len(data) * 2 // 3])
    seen = []
    with pytest.raises(SamplingMaskError) as err:
        for item in codecs.iter_masks(cut):
            seen.append(item)
    assert err.value.code == ErrorCode.E_ENCODING
    assert err.value.value == len(seen) >= 1
    assert f"after {len(seen)} complete record batches" in str(err.value)
    assert all(item == mask for item in seen)


def _stream(masks: list[SamplingMask]) -> bytes:
    import pyarrow as pa

    from sampling_mask.codecs import arrow

    sink = pa.BufferOutputStream()
    with arrow.Writer(sink, "arrows") as writer:
        for mask in masks:
            writer.write(mask)
    return bytes(sink.getvalue().to_pybytes())


def test_stream_cut_at_a_batch_boundary_is_not_complete(tmp_path: Any) -> None:
    pytest.importorskip("pyarrow")
    batches = [SamplingMask.from_rows([[1, 2], [3]]), SamplingMask.from_rows([[4]])]
    data = _stream(batches)
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    cut = data[:-8]  # exactly at the end of the last batch: no end-of-stream marker
    got: list[SamplingMask] = []
    with pytest.raises(SamplingMaskError) as info:
        got.extend(sampling_mask.codecs.iter_masks(cut, format="arrows"))
    assert got == batches
    assert info.value.code.value == "E_ENCODING" and info.value.value == 2
    assert "end-of-stream" in info.value.message and "after 2 complete record batches" in str(info.value)
    assert raised_code(lambda: sampling_mask.decode(cut, format="arrows")) == "E_ENCODING"
    assert sampling_mask.decode(data, format="arrows") == sampling_mask.concat(batches)
    path = tmp_path / "cut.arrows"
    path.write_bytes(cut)
    from sampling_mask.cli import main

    assert main(["validate", str(path)]) == 1


def test_pre_0_15_end_marker_counts_as_complete() -> None:
    pytest.importorskip("pyarrow")
    from sampling_mask.codecs import ipc_bounds

    data = _stream([SamplingMask.from_rows([[1]])])
    assert ipc_bounds.batch_costs(data, "arrows").complete
    assert not ipc_bounds.batch_costs(data[:-8], "arrows").complete
    assert not ipc_bounds.batch_costs(data[:-4], "arrows").complete  # a continuation without its length


@pytest.mark.parametrize("cut_back", [9, 100, 300])
def test_cut_stream_yields_complete_batches_then_counts_them(tmp_path, cut_back: int) -> None:
    data = _stream(BATCHES)
    got, error = read_until_error(data[: len(data) - cut_back])
    assert got == BATCHES[: len(got)], "a batch before the cut changed"
    assert len(got) == 2, f"expected the two batches before the cut, got {len(got)}"
    assert error is not None, "a batch cut in the middle must be reported"
    assert f"after {len(got)} complete record batches" in str(error)
    assert error.value == len(got)
    path = tmp_path / "cut.arrows"
    path.write_bytes(data[: len(data) - cut_back])
    from_file, file_error = read_until_error(path)
    assert from_file == got and file_error is not None and file_error.value == len(got)


def test_corrupt_batch_is_reported_after_the_good_ones() -> None:
    data = bytearray(_stream(BATCHES))
    third = data.rfind(b"\xff\xff\xff\xff", 0, len(data) - 8)  # the last message's continuation marker
    data[third + 8 : third + 40] = b"\xee" * 32  # garble its metadata
    got, error = read_until_error(bytes(data))
    assert got == BATCHES[:2]
    assert error is not None and "after 2 complete record batches" in str(error)
