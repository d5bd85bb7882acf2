"""The compact layout (sampling_mask.codecs.compact): exact bytes, round trips, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sampling_mask import DEFAULT_LIMITS, SamplingMask, SamplingMaskError
from sampling_mask.codecs.compact import BLOCK, decode_ragged, encode_ragged, encoded_size
from sampling_mask.conformance.strategies import masks

INT32_MAX = 2**31 - 1


def _ragged(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    m = SamplingMask.from_rows(rows)
    return m.ids, m.offsets


def _round_trip(ids: np.ndarray, offsets: np.ndarray) -> bytes:
    buf = encode_ragged(ids, offsets)
    assert len(buf) == encoded_size(ids, offsets)
    got_ids, got_offsets = decode_ragged(buf, offsets.size - 1, ids.size)
    assert got_ids.dtype == np.int32 and got_offsets.dtype == np.int64
    assert np.array_equal(got_ids, ids) and np.array_equal(got_offsets, offsets)
    return buf


def test_worked_example_bytes_match_the_spec() -> None:
    # spec/v1/SPEC.md, section compact: rows [5], [], [1, 2, 7].
    ids, offsets = _ragged([[5], [], [1, 2, 7]])
    buf = _round_trip(ids, offsets)
    assert buf == bytes.fromhex("010003" + "03" + "0d08" + "00" * 10)


def test_rows_come_back_ascending_and_unsorted_input_is_refused() -> None:
    m = SamplingMask.from_rows([[9, 3, 4], [], [1]])
    with pytest.raises(SamplingMaskError) as err:
        encode_ragged(m.ids, m.offsets)
    assert err.value.code == "E_SCHEMA" and err.value.row == 0
    c = m.canonical()
    ids, offsets = decode_ragged(encode_ragged(c.ids, c.offsets), 3, 4)
    assert SamplingMask.from_ragged(ids, offsets).to_rows() == [[3, 4, 9], [], [1]]


@pytest.mark.parametrize(
    ("ids", "offsets", "code"),
    [
        ([3, 3], [0, 2], "E_DUPLICATE"),
        ([-1], [0, 1], "E_RANGE"),
        ([1, 2], [0, 1], "E_OFFSETS"),
        ([1, 2], [0, 3], "E_OFFSETS"),
    ],
)
def test_encoder_rejects_invalid_rows(ids: list[int], offsets: list[int], code: str) -> None:
    with pytest.raises(SamplingMaskError) as err:
        encode_ragged(np.array(ids, np.int32), np.array(offsets, np.int64))
    assert err.value.code == code


@pytest.mark.parametrize(
    "rows",
    [
        [],  # zero rows
        [[]],  # one empty row
        [[], [], []],
        [[0]],
        [[INT32_MAX]],
        [[0, INT32_MAX]],
        [[INT32_MAX - 1, INT32_MAX], [0, 1, 2]],
        [list(range(300))],  # a long row (length escape) of all-zero values: width 0
        [list(range(0, 3 * 255, 3)), [7]],
        [[i] for i in range(BLOCK * 3 + 1)],  # several blocks, the last one padded
    ],
)
def test_edge_cases_round_trip(rows: list[list[int]]) -> None:
    ids, offsets = _ragged(rows)
    _round_trip(ids, offsets)


def test_widths_follow_each_block() -> None:
    # Block 0 holds small values, block 1 the large id: each keeps its own width.
    rows = [[i] for i in range(BLOCK)] + [[INT32_MAX]]
    ids, offsets = _ragged(rows)
    buf = _round_trip(ids, offsets)
    widths = buf[len(rows) : len(rows) + 2]
    assert list(widths) == [(BLOCK - 1).bit_length(), 31]


@given(masks(max_rows=40, max_width=12))
def test_any_canonical_mask_round_trips(m: SamplingMask) -> None:
    c = m.canonical()
    _round_trip(c.ids, c.offsets)


@given(st.lists(st.lists(st.integers(0, INT32_MAX), max_size=6, unique=True), max_size=40))
def test_any_int32_rows_round_trip(rows: list[list[int]]) -> None:
    ids, offsets = _ragged([sorted(r) for r in rows])
    _round_trip(ids, offsets)


def test_encoding_is_deterministic_and_sized_by_the_ids() -> None:
    rng = np.random.default_rng(3)
    rows = [sorted(rng.choice(151936, size=int(k), replace=False).tolist()) for k in rng.integers(0, 40, 200)]
    ids, offsets = _ragged(rows)
    a, b = encode_ragged(ids, offsets), encode_ragged(ids.copy(), offsets.copy())
    assert a == b
    assert len(a) < 0.6 * (4 * ids.size + 4 * (offsets.size - 1))  # far below int32 ids + int32 counts


def _samples() -> list[tuple[bytes, int, int]]:
    rng = np.random.default_rng(0)
    out = []
    for vocab, max_k in ((151936, 40), (50, 20), (2**31, 5), (3, 3)):
        num_rows = int(rng.integers(1, 60))
        lengths = rng.integers(0, max_k, num_rows)
        lengths[0] = 300 if vocab > 1000 else lengths[0]  # one length escape
        rows = [np.unique(rng.integers(0, vocab, int(k))).tolist() for k in lengths]
        ids, offsets = _ragged(rows)
        out.append((encode_ragged(ids, offsets), num_rows, ids.size))
    return out


def _check_result(ids: np.ndarray, offsets: np.ndarray, num_rows: int, nnz: int) -> None:
    """A decode that succeeds must still describe a valid ascending ragged mask."""
    assert ids.dtype == np.int32 and ids.size == nnz and offsets.size == num_rows + 1
    SamplingMask.from_ragged(ids, offsets)  # validates ranges, offsets and duplicates
    starts = np.zeros(ids.size, dtype=bool)
    starts[offsets[:-1][np.diff(offsets) > 0]] = True
    assert np.all((np.diff(ids) > 0) | starts[1:])


@pytest.mark.parametrize("small_blocks", [0, 10**9])  # both unpacking paths
def test_thousands_of_mutations_raise_only_sampling_mask_errors(
    small_blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sampling_mask.codecs import compact

    monkeypatch.setattr(compact, "_SMALL_BLOCKS", small_blocks)
    rng = np.random.default_rng(1234 + small_blocks % 7)
    codes: set[str] = set()
    decoded = 0
    for buf, num_rows, nnz in _samples():
        for trial in range(900):
            data = bytearray(buf)
            kind = trial % 6
            if kind == 0:  # flip bits
                for _ in range(int(rng.integers(1, 4))):
                    data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            elif kind == 1:  # random bytes
                for _ in range(int(rng.integers(1, 4))):
                    data[int(rng.integers(len(data)))] = int(rng.integers(256))
            elif kind == 2:  # truncate
                del data[int(rng.integers(len(data))) :]
            elif kind == 3:  # extend
                data += bytes(rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8))
            elif kind == 4:  # insert / delete one byte
                at = int(rng.integers(len(data) + 1))
                if rng.random() < 0.5:
                    data[at:at] = bytes([int(rng.integers(256))])
                else:
                    del data[at : at + 1]
            rows, count = num_rows, nnz
            if kind == 5:  # wrong declared sizes
                rows = max(0, num_rows + int(rng.integers(-3, 4)))
                count = max(0, nnz + int(rng.integers(-40, 41)))
            try:
                ids, offsets = decode_ragged(bytes(data), rows, count)
            except SamplingMaskError as exc:
                codes.add(exc.code.value)
                continue
            decoded += 1
            _check_result(ids, offsets, rows, count)
    assert {"E_BYTES", "E_OFFSETS", "E_ENCODING"} <= codes
    assert decoded > 0  # bit flips inside the words section still decode to some valid mask


def test_declared_sizes_are_checked_before_allocating() -> None:
    tiny = DEFAULT_LIMITS.replace(max_rows=4, max_nnz=10, max_width=3)
    ids, offsets = _ragged([[1, 2, 3, 4]])
    buf = encode_ragged(ids, offsets)
    for args, code in (
        ((buf, 5, 4), "E_LIMIT"),  # too many rows
        ((buf, 1, 11), "E_LIMIT"),  # too many ids
        ((buf, 1, 4), "E_LIMIT"),  # a row wider than max_width
        ((buf, -1, 4), "E_RANGE"),
        ((buf, 1.0, 4), "E_SCHEMA"),
        ((b"\xff" * 3, 1, 2**30), "E_LIMIT"),
    ):
        with pytest.raises(SamplingMaskError) as err:
            decode_ragged(*args, limits=tiny)  # type: ignore[arg-type]
        assert err.value.code == code, args
    # A huge declared nnz with a tiny buffer fails on the buffer, not on memory.
    with pytest.raises(SamplingMaskError) as err:
        decode_ragged(b"\xff\xff\xff\xff\x0f", 1, 2**32)
    assert err.value.code in ("E_OFFSETS", "E_BYTES", "E_LIMIT")


def test_malformed_sections_name_their_error() -> None:
    ids, offsets = _ragged([[5], [], [1, 2, 7]])
    good = encode_ragged(ids, offsets)
    cases = {
        "E_BYTES": [good[:2], good[:-1], good + b"\x00"],
        "E_ENCODING": [
            good[:3] + b"\x20" + good[4:],  # width 32
            good[:4] + b"\x0d\x08\x00\x00" + b"\x00" * 4 + b"\x00\x00\x00\x01",  # non-zero padding value
            b"\xff" + b"\x80\x00" + b"\x00" * 8,  # overlong varint
            b"\xff" + b"\x80\x80\x80\x80\x80\x01",  # varint longer than 5 bytes
        ],
        "E_OFFSETS": [b"\x02\x00\x03" + good[3:]],
    }
    for code, bufs in cases.items():
        for buf in bufs:
            with pytest.raises(SamplingMaskError) as err:
                decode_ragged(buf, 3 if buf[0] != 0xFF else 1, 4 if buf[0] != 0xFF else 255)
            assert err.value.code == code, (code, buf.hex())


def test_ids_past_int32_are_refused() -> None:
    rows = [[2**30, 2**31 - 1]]
    ids, offsets = _ragged(rows)
    buf = bytearray(encode_ragged(ids, offsets))
    _round_trip(ids, offsets)
    assert len(buf) == 2 + 4 * 31 and buf[1] == 31  # 1 row length, 1 block width (31), 31 words
    words = np.zeros(31, dtype="<u4")
    words[0] = 0xFFFFFFFF  # value 0 = 2**31 - 1; value 1 starts at bit 31 and is 1: id 2**31 + 1
    with pytest.raises(SamplingMaskError) as err:
        decode_ragged(bytes(buf[:2]) + words.astype("<u4").tobytes(), 1, 2)
    assert err.value.code == "E_RANGE" and err.value.row == 0


def test_memoryview_and_bytearray_inputs() -> None:
    ids, offsets = _ragged([[1, 4], [0]])
    buf = encode_ragged(ids, offsets)
    for data in (bytearray(buf), memoryview(buf), memoryview(b"xx" + buf)[2:]):
        got, _ = decode_ragged(data, 2, 3)
        assert got.tolist() == [1, 4, 0]
    with pytest.raises(SamplingMaskError) as err:
        decode_ragged("not bytes", 2, 3)  # type: ignore[arg-type]
    assert err.value.code == "E_ENCODING"


@pytest.mark.parametrize("seed", range(4))
def test_small_and_grouped_paths_write_and_read_the_same_bytes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from sampling_mask.codecs import compact

    rng = np.random.default_rng(seed)
    rows = [np.unique(rng.integers(0, 2 ** int(rng.integers(1, 31)), int(k))).tolist() for k in rng.integers(0, 60, 90)]
    ids, offsets = _ragged(rows)
    monkeypatch.setattr(compact, "_SMALL_BLOCKS", 10**9)
    small = _round_trip(ids, offsets)
    monkeypatch.setattr(compact, "_SMALL_BLOCKS", 0)
    grouped = _round_trip(ids, offsets)
    assert small == grouped
    monkeypatch.setattr(compact, "_SMALL_BLOCKS", 10**9)
    got, _ = decode_ragged(grouped, offsets.size - 1, ids.size)
    assert np.array_equal(got, ids)


def _many_rows(seed: int) -> list[list[int]]:
    """Rows of every kind the decoder branches on: empty, singletons, long (length escape), ids of
    many widths (hence many width groups), and runs of consecutive ids (width-0 blocks)."""
    rng = np.random.default_rng(seed)
    rows: list[list[int]] = []
    for _ in range(300):
        kind = int(rng.integers(0, 6))
        if kind == 0:
            rows.append([])
        elif kind == 1:
            rows.append([int(rng.integers(0, 2**31 - 1))])
        elif kind == 2:
            start = int(rng.integers(0, 1000))
            rows.append(list(range(start, start + int(rng.integers(40, 300)))))
        else:
            top = 2 ** int(rng.integers(1, 31))
            rows.append(np.unique(rng.integers(0, top, int(rng.integers(1, 40)))).tolist())
    return rows


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("window", "piece", "sums"), [(1, 1, 1), (37, 3, 5), (64, 2, 64), (1000, 7, 33)])
def test_blocked_decode_equals_the_one_window_decode(
    seed: int, window: int, piece: int, sums: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny windows, pieces and sum blocks put block and row boundaries everywhere; the default
    # sizes decode these masks in one window and one piece per width.
    from sampling_mask.codecs import compact

    ids, offsets = _ragged(_many_rows(seed))
    buf = encode_ragged(ids, offsets)
    monkeypatch.setattr(compact, "_SMALL_BLOCKS", 0)
    one_window = decode_ragged(buf, offsets.size - 1, ids.size)
    monkeypatch.setattr(compact, "DECODE_BLOCK", window)
    monkeypatch.setattr(compact, "_PIECE", piece)
    monkeypatch.setattr(compact, "_SUM_BLOCK", sums)
    blocked = decode_ragged(buf, offsets.size - 1, ids.size)
    for got in (one_window, blocked):
        assert np.array_equal(got[0], ids) and np.array_equal(got[1], offsets)


@pytest.mark.parametrize("window", [1 << 20, 64, 37])
def test_errors_in_a_later_window_name_their_row(window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from sampling_mask.codecs import compact

    monkeypatch.setattr(compact, "_SMALL_BLOCKS", 0)
    monkeypatch.setattr(compact, "DECODE_BLOCK", window)
    rows = [[i % 50] for i in range(2000)]
    rows[1500], rows[1501] = [2**31 - 10], [100]
    ids, offsets = _ragged(rows)
    buf = bytearray(encode_ragged(ids, offsets))
    assert decode_ragged(bytes(buf), 2000, ids.size)[0][1500] == 2**31 - 10
    # Row lengths 2, 0 instead of 1, 1: the value 100 becomes a gap after 2**31 - 10, an id past int32.
    buf[1500:1502] = b"\x02\x00"
    with pytest.raises(SamplingMaskError) as err:
        decode_ragged(bytes(buf), 2000, ids.size)
    assert err.value.code == "E_RANGE" and err.value.row == 1500
    # One id fewer in the last row: its value (non-zero) becomes padding of the final block.
    short = bytearray(encode_ragged(ids, offsets))
    short[1999] = 0
    with pytest.raises(SamplingMaskError) as err:
        decode_ragged(bytes(short), 2000, ids.size - 1)
    assert err.value.code == "E_ENCODING" and "padding" in str(err.value)
