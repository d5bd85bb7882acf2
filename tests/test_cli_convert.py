"""``sampling-mask convert``: every format and layout, re-batching that cuts only between segments,
progress on a terminal only, and the output written as ``save`` writes (atomically, through a symlink
to a regular file, never into a FIFO or a device)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from cli_run import one_error_line, run, tiny_mask
from file_checks import listing

import sampling_mask
import sampling_mask as sm
from sampling_mask import SamplingMask
from sampling_mask.cli import main
from sampling_mask.cli.convert import _rebatch

MASK = SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=10, cu_seqlens=[0, 2, 3])
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "in.msgpack"
    sm.save(MASK, src)
    return src


@needs_fifo
def test_convert_refuses_a_fifo_output(tmp_path: Path) -> None:
    src = _source(tmp_path)
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    assert main(["-q", "convert", str(src), str(fifo)]) in (1, 2)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert listing(tmp_path) == ["in.msgpack", "out.json"]


def test_convert_refuses_a_device_output(tmp_path: Path) -> None:
    if not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip("no character device at os.devnull")
    src = _source(tmp_path)
    assert main(["-q", "convert", str(src), os.devnull, "--to", "json"]) in (1, 2)
    assert stat.S_ISCHR(os.lstat(os.devnull).st_mode)


@needs_fifo
def test_convert_through_a_symlink_is_like_save(tmp_path: Path) -> None:
    """A symlink to a FIFO is refused; a symlink to a regular file is written through, the link kept."""
    src = _source(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "to_fifo.json").symlink_to(fifo)
    assert main(["-q", "convert", str(src), str(tmp_path / "to_fifo.json")]) in (1, 2)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    real = tmp_path / "real.arrow"
    real.write_bytes(b"old")
    (tmp_path / "to_real.arrow").symlink_to(real)
    assert main(["-q", "convert", str(src), str(tmp_path / "to_real.arrow")]) == 0
    assert os.path.islink(tmp_path / "to_real.arrow")
    assert sm.load(real) == MASK


def test_convert_writes_msgpack_dense(tmp_path: Path) -> None:
    src = _source(tmp_path)
    out = tmp_path / "out.msgpack"
    assert main(["-q", "convert", str(src), str(out), "--layout", "dense"]) == 0
    import msgpack

    assert msgpack.unpackb(out.read_bytes())["layout"] == "dense"
    assert sm.load(out) == MASK
    assert main(["-q", "convert", str(src), str(tmp_path / "o.arrow"), "--layout", "dense"]) == 2


def test_convert_reports_what_json_rows_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.msgpack"
    sm.save(SamplingMask.from_rows([[1]] * 11, cu_seqlens=list(range(12))), src)
    assert main(["convert", str(src), str(tmp_path / "o.json"), "--to", "json-rows", "--allow-loss"]) == 0
    line = capsys.readouterr().out
    assert "11 rows, 1 segments" in line, line


def test_rebatch_cuts_between_segments_and_keeps_every_row() -> None:
    mask = tiny_mask(rows=40)
    parts = list(_rebatch([mask, mask[:10]], 12))
    assert sampling_mask.concat(parts) == sampling_mask.concat([mask, mask[:10]])
    assert all(p.num_rows >= 12 for p in parts[:-1])
    # Input segments have 7, 0, 13, 13, 7 rows, then 7, 0, 3: cuts fall only between segments.
    assert [(p.num_rows, p.num_segments) for p in parts] == [(20, 3), (13, 1), (14, 2), (3, 2)]


@pytest.mark.slow
def test_convert_arrow_stream_parquet_and_back(cli_files: dict[str, Path], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    mask = tiny_mask()
    parquet = tmp_path / "m.parquet"
    proc = run("convert", cli_files["arrows"], parquet, "--batch-rows", "12", "--compression", "zstd")
    assert proc.returncode == 0, proc.stderr
    assert f"{mask.num_rows} rows" in proc.stdout
    assert pq.ParquetFile(parquet).metadata.num_row_groups == 3  # 20 | 13 | 7 rows, cut between segments
    back = tmp_path / "back.arrows"
    proc = run("-q", "convert", parquet, back)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert sampling_mask.load(back) == mask
    assert oct(back.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def msgpack_layout(path: Path) -> str:
    msgpack = pytest.importorskip("msgpack")
    return str(msgpack.unpackb(path.read_bytes())["layout"])


@pytest.mark.slow
def test_convert_to_whole_file_formats(cli_files: dict[str, Path], tmp_path: Path) -> None:
    mask = tiny_mask()
    proc = run("convert", cli_files["arrows"], tmp_path / "m.msgpack", "--layout", "compact")
    assert proc.returncode == 0, proc.stderr
    assert sampling_mask.load(tmp_path / "m.msgpack") == mask
    assert msgpack_layout(tmp_path / "m.msgpack") == "compact"
    one_error_line(run("convert", cli_files["arrows"], tmp_path / "m.json", "--layout", "compact"), "E_USAGE")
    pq = pytest.importorskip("pyarrow.parquet")
    proc = run("convert", cli_files["arrows"], tmp_path / "c.parquet", "--layout", "compact")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_schema(tmp_path / "c.parquet").metadata[b"sampling_mask.layout"] == b"compact"
    assert sampling_mask.load(tmp_path / "c.parquet") == mask.canonical()
    rows = tmp_path / "rows.json"
    one_error_line(run("convert", cli_files["arrows"], rows, "--to", "json-rows"), "E_SCHEMA")
    assert not rows.exists() and not list(tmp_path.glob(".*partial"))  # nothing half-written
    proc = run("convert", cli_files["arrows"], rows, "--to", "json-rows", "--allow-loss")
    assert proc.returncode == 0
    assert json.loads(rows.read_text()) == mask.to_rows()


@pytest.mark.slow
def test_convert_shows_progress_on_a_terminal_only(cli_files: dict[str, Path], tmp_path: Path) -> None:
    proc = run("convert", cli_files["arrows"], tmp_path / "m.arrow", stderr_tty=True)
    assert proc.returncode == 0
    assert "\rconvert" in proc.stderr and "40 rows" in proc.stderr  # the bar, redrawn in place
    quiet = run("-q", "convert", cli_files["arrows"], tmp_path / "n.arrow", stderr_tty=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
    piped = run("convert", cli_files["arrows"], tmp_path / "o.arrow")
    assert piped.returncode == 0 and piped.stderr == ""
