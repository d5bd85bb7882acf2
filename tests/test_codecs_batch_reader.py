"""The codecs' one batch reader (``codecs/batch_reader.py``): datasets, the DataLoader dataset and the
command line read Arrow / Parquet only through it, so every attack the codecs hold is held there too.
Bad user columns are an encoding error naming the column and row, never a crash; FIFOs, symlink loops,
dangling links and stray files are reported by path while every good sequence is still delivered;
each batch's cost comes from the metadata and is checked before it is read, so compressed empty rows
and one-row row groups stay within the untrusted bound. Where a crash or memory is at stake the call
runs in a fork (``memory_probe.in_fork``):
a SIGBUS or SIGABRT is a failed test, not a lost worker. Nothing may block on a FIFO or a symlink
loop: such calls run in a thread (or a subprocess) with a deadline.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sampling_mask as sm
from sampling_mask.codecs import arrow

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_run import run_module  # noqa: E402
from file_checks import code_of, within  # noqa: E402
from memory_probe import in_fork, untrusted_bound_mb  # noqa: E402

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: FIFOs and symlinks")
MASK = sm.SamplingMask.from_rows([[1], [2, 3], [4], []], vocab_size=10, cu_seqlens=[0, 1, 2, 3, 4])
NAMES = ["a", "bb", "ccc", "dddd"]


def _good(directory: Path, name: str = "good", fmt: str = "arrow") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.{fmt}"
    sm.save(MASK, path, extra_columns={"name": NAMES})
    return path


def _bad_offsets_file(path: Path) -> Path:
    """A 1.5 KB IPC file whose user string column has a middle offset far past its 6 data bytes."""
    table = arrow.table_from_mask(MASK)
    offsets = pa.py_buffer(np.array([0, 2, 1 << 20, 4, 6], np.int32).tobytes())
    bad = pa.StringArray.from_buffers(4, offsets, pa.py_buffer(b"abcdef"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.ipc.new_file(str(path), table.schema.append(pa.field("name", pa.string()))) as writer:
        writer.write_table(table.append_column("name", bad))
    return path


# ---------------------------------------------------------------------------------------------- user columns
def _first_error(call: Any) -> dict[str, Any]:
    """``call()`` in a fork: the code, field and segment of the SamplingMaskError it raised."""

    def run() -> None:
        try:
            call()
        except sm.SamplingMaskError as exc:
            raise sm.SamplingMaskError(exc.code, json.dumps([exc.field, exc.segment, str(exc)])) from None

    event = in_fork(run)
    assert not event["code"].startswith("the fork died"), event["code"]  # a SIGBUS / SIGABRT
    return event


def test_bad_user_column_offsets_are_an_encoding_error_never_a_crash(tmp_path: Path) -> None:
    """A user column's offset past its data: every reader rejects the file naming the column and row;
    none crashes or returns bytes from outside the buffer (each call in its own fork)."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    path = _bad_offsets_file(tmp_path / "d" / "x.arrow")
    assert path.stat().st_size < 2000
    calls = {
        "SequenceDataset": lambda: torch_data.SequenceDataset(path.parent, columns=["name"])[1],
        "SequenceDataset, no columns": lambda: torch_data.SequenceDataset(path.parent)[0],
        "batches": lambda: list(sm.codecs.open_dataset(path.parent).batches()),
        "filtered": lambda: sm.codecs.open_dataset(path.parent).read(filter={"name": "a"}),
        "load": lambda: sm.load(path),
        "read_table + batch_from_table": lambda: sm.codecs.dataset.batch_from_table(arrow.read_table(path)),
    }
    for label, call in calls.items():
        event = in_fork(call)
        assert event["code"] == "E_ENCODING", (label, event)
    with pytest.raises(sm.SamplingMaskError) as err:
        sm.codecs.open_dataset(path.parent).read()
    assert err.value.field == "name" and err.value.segment == 1 and str(path) in str(err.value)
    proc = run_module("validate", path, "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and not doc["valid"] and doc["error"]["field"] == "name", proc.stdout


def test_bad_utf8_in_a_user_column_names_its_row(tmp_path: Path) -> None:
    """A user string column with valid offsets but bad UTF-8 in table row 2: E_ENCODING naming the
    column and the row, from every reader (never a raw UnicodeDecodeError)."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    table = arrow.table_from_mask(MASK)
    offsets = pa.py_buffer(np.array([0, 1, 2, 3, 4], np.int32).tobytes())
    bad = pa.StringArray.from_buffers(4, offsets, pa.py_buffer(b"ab\xffc"))
    path = tmp_path / "u.arrow"
    with pa.ipc.new_file(str(path), table.schema.append(pa.field("name", pa.string()))) as writer:
        writer.write_table(table.append_column("name", bad))
    for call in (
        lambda: sm.codecs.open_dataset(tmp_path).read(columns=["name"]),
        lambda: torch_data.SequenceDataset(tmp_path, columns=["name"])[0],
        lambda: sm.load(path),
    ):
        with pytest.raises(sm.SamplingMaskError) as err:
            call()
        assert err.value.code is sm.ErrorCode.E_ENCODING and err.value.field == "name" and err.value.segment == 2


# ---------------------------------------------------------------------------------------------- special files and links
@posix
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_sequence_dataset_refuses_a_fifo_at_once(tmp_path: Path, fmt: str) -> None:
    """A FIFO named like a data file is E_ENCODING "not a regular file", at once; with
    ``on_error="report"`` it is listed and the good file still indexed."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    _good(tmp_path, fmt=fmt)
    os.mkfifo(tmp_path / f"x.{fmt}")
    error = within(lambda: torch_data.SequenceDataset(tmp_path))
    assert code_of(error) == "E_ENCODING" and "not a regular file" in str(error) and f"x.{fmt}" in str(error)
    dataset = within(lambda: torch_data.SequenceDataset(tmp_path, columns=["name"], on_error="report"))
    assert len(dataset) == 4 and [e.path for e in dataset.errors] == [str(tmp_path / f"x.{fmt}")]
    assert [dataset[i].columns["name"] for i in range(4)] == NAMES


@posix
def test_open_dataset_reports_a_fifo_with_a_user_column_filter(tmp_path: Path) -> None:
    """A FIFO in the tree plus a filter on a user column: reported by path, other files delivered."""
    _good(tmp_path / "step=1")
    _good(tmp_path / "step=2")
    os.mkfifo(tmp_path / "step=1" / "f.arrow")
    dataset = sm.codecs.open_dataset(tmp_path)
    got = within(lambda: dataset.read(filter={"name": ["a", "ccc"]}, on_error="report"))
    assert got.columns["name"].tolist() == ["a", "ccc", "a", "ccc"] and got.mask.num_segments == 4
    assert [(e.path, e.error.code.value) for e in dataset.errors] == [
        (str(tmp_path / "step=1" / "f.arrow"), "E_ENCODING")
    ]
    assert code_of(within(lambda: sm.codecs.open_dataset(tmp_path).read())) == "E_ENCODING"


@posix
def test_symlink_loops_are_never_followed(tmp_path: Path) -> None:
    """Two symlinks ``-> .`` in the tree: a glob over it and ``validate`` of it finish."""
    data = tmp_path / "d"
    _good(data, fmt="parquet")
    os.symlink(".", data / "l1")
    os.symlink(".", data / "l2")
    got = within(lambda: sm.codecs.open_dataset(str(data / "**" / "*.parquet")).read())
    assert isinstance(got, sm.codecs.dataset.MaskBatch) and got.mask == MASK
    proc = run_module("validate", data / "**" / "*.parquet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 file checked, 0 invalid" in proc.stdout


@posix
def test_every_bad_entry_is_recorded_and_every_good_sequence_delivered(tmp_path: Path) -> None:
    """Dangling and self-looping links, a stray non-dataset file, other
    partition keys, a ``sampling_mask=7/`` directory, a link to a file outside the root, an ``.arrow``
    file in a Parquet tree: each recorded in ``errors`` by path with a code; every good file read."""
    root = tmp_path / "d"
    good = [_good(root / f"step={i}", fmt="parquet") for i in (1, 2, 3)]
    os.symlink("missing.parquet", root / "step=1" / "dangling.parquet")
    os.symlink("self.parquet", root / "step=1" / "self.parquet")
    (root / "stray.parquet").write_bytes(b"not parquet at all")
    _good(root / "other=1", fmt="parquet")
    _good(root / "sampling_mask=7", fmt="parquet")
    _good(root / "step=2", "odd", fmt="arrow")
    outside = _good(tmp_path / "elsewhere", fmt="parquet")
    os.symlink(outside, root / "step=3" / "outside.parquet")
    dataset = sm.codecs.open_dataset(root)
    got = dataset.read(on_error="report")
    assert got.mask.num_segments == 4 * len(good) and sorted(set(got.columns["step"].tolist())) == [1, 2, 3]
    codes = {os.path.relpath(e.path, root): e.error.code.value for e in dataset.errors}
    assert codes == {
        "step=1/dangling.parquet": "E_ENCODING",
        "step=1/self.parquet": "E_ENCODING",
        "step=3/outside.parquet": "E_ENCODING",
        "step=2/odd.arrow": "E_SCHEMA",
        "stray.parquet": "E_SCHEMA",
        "other=1/good.parquet": "E_SCHEMA",
        "sampling_mask=7/good.parquet": "E_SCHEMA",
    }, codes
    collision = next(e for e in dataset.errors if "sampling_mask=7" in e.path)
    assert collision.error.field == "sampling_mask" and "sampling_mask" in collision.error.message
    assert all(e.path in str(e.error) for e in dataset.errors)
    with pytest.raises(sm.SamplingMaskError):
        sm.codecs.open_dataset(root).read()  # on_error="raise": the first bad entry
    followed = sm.codecs.open_dataset(root, follow_symlinks=True)
    assert followed.read(on_error="report").mask.num_segments == 4 * (len(good) + 1)


# ---------------------------------------------------------------------------------------------- costs from the metadata
def _write_in_fork(write: Any) -> None:
    """Build a file in a fork, so that its allocations stay out of this process (and its forks)."""
    event = in_fork(write)
    assert event["code"] == "OK", event


def _empty_rows_files(directory: Path, rows: int) -> dict[str, Path]:
    def write() -> None:
        mask = sm.SamplingMask(np.zeros(0, np.int32), np.zeros(rows + 1, np.int64), cu_seqlens=[0, rows])
        (directory / "a").mkdir(parents=True, exist_ok=True)
        (directory / "p").mkdir(parents=True, exist_ok=True)
        sm.save(mask, directory / "a" / "z.arrow", compression="zstd")
        sm.save(mask, directory / "p" / "z.parquet", compression="zstd")

    _write_in_fork(write)
    return {"arrow": directory / "a" / "z.arrow", "parquet": directory / "p" / "z.parquet"}


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_empty_rows_are_refused_before_any_allocation(tmp_path: Path, fmt: str) -> None:
    """A few KB of compressed empty rows under untrusted limits: SequenceDataset, open_dataset
    and the CLI's reader refuse them before reading a batch, as ``load`` does, growing nothing."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    path = _empty_rows_files(tmp_path, 1 << 22)[fmt]
    size = path.stat().st_size
    assert size < 20_000
    limits = sm.Limits.for_untrusted_input(size)
    for call in (
        lambda: torch_data.SequenceDataset(path.parent, limits=limits),
        lambda: sm.codecs.open_dataset(path.parent, limits=limits).read(),
        lambda: list(sm.codecs.iter_masks(path, limits=limits)),
        lambda: sm.load(path, limits=limits),
    ):
        event = in_fork(call)
        assert event["code"] == "E_LIMIT" and event["rss"] < 16, event


def test_one_row_row_groups_are_charged_per_row_group(tmp_path: Path) -> None:
    """A valid Parquet file of one-row row groups (and an IPC file of one-row batches) under
    1 MB: each row group / batch costs its fixed part, so the untrusted budget refuses the Parquet
    file instead of growing past max(16 x input, 64 MiB); both read under the default limits."""
    n = 3000

    def write() -> None:
        mask = sm.SamplingMask.from_rows([[1]] * n, vocab_size=10, cu_seqlens=np.arange(n + 1))
        table = arrow.table_from_mask(mask)
        pq.write_table(table, str(tmp_path / "g.parquet"), row_group_size=1, compression="none")
        with pa.ipc.new_file(str(tmp_path / "g.arrow"), table.schema) as writer:
            for batch in table.to_batches(max_chunksize=1):
                writer.write_batch(batch)

    _write_in_fork(write)
    for name in ("g.parquet", "g.arrow"):
        path = tmp_path / name
        size = path.stat().st_size
        assert size < 1 << 20
        limits = sm.Limits.for_untrusted_input(size)
        event = in_fork(lambda: sm.load(path, limits=limits))  # noqa: B023 - run before the loop moves on
        # Parquet's footer costs more per row group than its bytes: refused; IPC batches fit, within bound.
        assert event["code"] == ("E_LIMIT" if name.endswith("parquet") else "OK"), (name, event)
        assert event["rss"] <= untrusted_bound_mb(size), (name, event)
        assert sm.load(path).num_segments == n


def test_untrusted_reads_of_hostile_files_stay_within_the_bound(tmp_path: Path) -> None:
    """Peak memory of every read path (datasets, DataLoader dataset, iteration) over the hostile files
    above stays within max(16 x input, 64 MiB) under ``Limits.for_untrusted_input``."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    bad = _bad_offsets_file(tmp_path / "bad" / "x.arrow")
    files = [bad, *_empty_rows_files(tmp_path / "empty", 1 << 21).values()]
    for path in files:
        limits = sm.Limits.for_untrusted_input(path.stat().st_size)
        for call in (
            lambda: [x for x in torch_data.SequenceDataset(path.parent, columns=(), limits=limits)],  # noqa: B023
            lambda: sm.codecs.open_dataset(path.parent, limits=limits).read(on_error="report"),  # noqa: B023
            lambda: sm.codecs.open_dataset(path.parent, limits=limits).read(filter={"x": 1}),  # noqa: B023
        ):
            event = in_fork(call)
            assert not event["code"].startswith(("the fork died", "MemoryError")), (path.name, event)
            assert event["rss"] <= untrusted_bound_mb(path.stat().st_size), (path.name, event)


# ---------------------------------------------------------------------------------------------- batches and entry points


def test_sequence_dataset_rows_come_from_the_metadata(tmp_path: Path) -> None:
    """Construction reads no batch: the sequence counts are the metadata's, and a batch holding
    other rows than declared is E_ENCODING when it is read, never an IndexError."""
    torch_data = pytest.importorskip("sampling_mask.data.torch_data")
    _good(tmp_path, fmt="arrow")
    dataset = torch_data.SequenceDataset(tmp_path, columns=["name"])
    assert len(dataset) == 4 and dataset[3].columns == {"name": "dddd"} and dataset[-1].mask == MASK.segment(3)
    from sampling_mask.codecs.batch_reader import BatchReader, MappedFile

    reader = BatchReader(MappedFile(tmp_path / "good.arrow").buffer, "arrow", sm.DEFAULT_LIMITS)
    assert reader.rows == [4] and len(reader.costs) == 1
    reader.rows[0] = 5  # as a forged footer would declare
    with pytest.raises(sm.SamplingMaskError) as err:
        reader.read(0)
    assert err.value.code is sm.ErrorCode.E_ENCODING


def test_batch_size_bounds_every_batch_of_either_format(tmp_path: Path) -> None:
    """``batches(batch_size=n)`` yields at most n sequences per batch for IPC files too (their record
    batches are split), filtered or not, and the sequences come back whole and in order."""
    for fmt in ("arrow", "parquet"):
        _good(tmp_path / fmt, fmt=fmt)
        dataset = sm.codecs.open_dataset(tmp_path / fmt)
        sizes = [b.mask.num_segments for b in dataset.batches(batch_size=3)]
        assert sizes == [3, 1], (fmt, sizes)
        got = dataset.read(batch_size=3, filter={"name": ["a", "dddd"]})
        assert got.mask == MASK.take([0, 3]) and got.columns["name"].tolist() == ["a", "dddd"]


@posix
def test_every_reader_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    """The other entry points of the one reader: ``read_table``, the safetensors reader, a dataset
    over one FIFO path, and ``inspect`` / ``stats`` of one: E_ENCODING at once."""
    from sampling_mask.codecs import safetensors as st

    for name in ("t.arrow", "t.parquet", "m.safetensors"):
        os.mkfifo(tmp_path / name)
    assert code_of(within(lambda: arrow.read_table(tmp_path / "t.arrow"))) == "E_ENCODING"
    assert code_of(within(lambda: st.load_file(tmp_path / "m.safetensors"))) == "E_ENCODING"
    assert code_of(within(lambda: st.read_tensors(tmp_path / "m.safetensors"))) == "E_ENCODING"
    assert code_of(within(lambda: sm.codecs.open_dataset([str(tmp_path / "t.parquet")]))) == "E_ENCODING"
    for command in ("inspect", "stats"):
        proc = run_module(command, tmp_path / "t.parquet", "--json")
        assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["code"] == "E_ENCODING", proc.stdout


def test_the_command_line_under_untrusted_limits_stays_within_the_bound(tmp_path: Path) -> None:
    """``--untrusted-limits`` reads each file as a service reads a body: the hostile files above
    (compressed empty rows, bad user-column offsets) are refused, or read, within max(16 x size, 64 MiB)
    of peak memory growth; a valid file still validates."""
    import contextlib
    import io

    from sampling_mask import cli

    files = [_bad_offsets_file(tmp_path / "bad" / "x.arrow"), *_empty_rows_files(tmp_path / "empty", 1 << 21).values()]
    good = tmp_path / "good.arrow"
    sm.save(sm.SamplingMask.from_rows([[1, 2], [3]], vocab_size=8), good)

    def quiet(argv: list[str]) -> int:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return cli.main(argv)

    for path in files:
        for command in ("validate", "stats", "inspect"):
            event = in_fork(lambda: quiet(["--untrusted-limits", command, str(path)]))  # noqa: B023
            assert event["rss"] <= untrusted_bound_mb(path.stat().st_size), (path.name, command, event)
            assert event["code"] == "OK", event  # main() reports, never raises
    assert quiet(["--untrusted-limits", "validate", str(good)]) == 0
    assert quiet(["--untrusted-limits", "--local-limits", "validate", str(good)]) == 2
