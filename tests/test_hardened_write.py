"""The one writer (issue 24, rows 7-9 and the smaller write-side points): ``save``, ``open_writer``,
``convert``, ``write_dataset`` and ``vendor`` write through ``codecs.files.atomic_path``. A target
that is a FIFO or a device is refused before anything is replaced; below a destination root no
symlink is written, replaced or deleted through; a failed write leaves no temporary or partial file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.cli import main
from sampling_mask.codecs import files, write_dataset

MASK = SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=10, cu_seqlens=[0, 2, 3])
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------- atomic_path
@needs_fifo
def test_atomic_path_refuses_a_fifo_and_replaces_nothing(tmp_path: Path) -> None:
    fifo = tmp_path / "out.msgpack"
    os.mkfifo(fifo)
    with pytest.raises(SamplingMaskError) as info:
        sm.save(MASK, fifo)
    assert info.value.code is ErrorCode.E_ENCODING and "FIFO" in info.value.message
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _listing(tmp_path) == ["out.msgpack"]  # no temporary left


def test_atomic_path_refuses_a_device() -> None:
    if not os.path.exists(os.devnull) or not stat.S_ISCHR(os.stat(os.devnull).st_mode):
        pytest.skip("no character device at os.devnull")
    with pytest.raises(SamplingMaskError) as info:
        files.check_target(os.devnull)
    assert info.value.code is ErrorCode.E_ENCODING and "device" in info.value.message


def test_root_refuses_symlinks_below_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "lnk").symlink_to(outside)
    for target in (root / "lnk" / "f.bin", root / "lnk"):
        with pytest.raises(SamplingMaskError) as info:
            with files.atomic_path(target, root=root) as tmp:
                Path(tmp).write_bytes(b"x")
        assert info.value.code is ErrorCode.E_ENCODING
    with pytest.raises(SamplingMaskError):
        files.make_dirs(root, root / "lnk" / "sub")
    with pytest.raises(SamplingMaskError):
        files.check_inside(root, root / ".." / "outside" / "f.bin")
    assert list(outside.iterdir()) == []
    assert os.path.islink(root / "lnk")


def test_root_writer_removes_its_temporary_on_error(tmp_path: Path) -> None:
    assert files.make_dirs(tmp_path, tmp_path / "a") == [str(tmp_path / "a")]
    with pytest.raises(RuntimeError), files.atomic_path(tmp_path / "a" / "f.bin", root=tmp_path) as tmp:
        Path(tmp).write_bytes(b"half")
        raise RuntimeError("boom")
    assert _listing(tmp_path) == ["a"]


def test_remove_file_leaves_folders_and_links_alone(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"x")
    assert files.remove_file(tmp_path, tmp_path / "d") is False
    assert files.remove_file(tmp_path, tmp_path / "f") is True
    assert _listing(tmp_path) == ["d"]


# ---------------------------------------------------------------------------------------------- convert (row 7)
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
    assert _listing(tmp_path) == ["in.msgpack", "out.json"]


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


def test_msgpack_file_that_is_no_envelope_says_so(tmp_path: Path) -> None:
    path = tmp_path / "hello.msgpack"
    path.write_bytes(b"hello")
    with pytest.raises(SamplingMaskError) as info:
        sm.load(path)
    assert info.value.code is ErrorCode.E_ENCODING
    assert "not a msgpack sampling-mask envelope" in info.value.message
    assert "trailing" not in info.value.message


# ---------------------------------------------------------------------------------------------- vendor (row 8)
def _vendor(dest: Path, *flags: str) -> int:
    return main(["-q", "vendor", str(dest), "--package", dest.name, "--codecs", "json", *flags])


def test_vendor_refuses_a_codecs_folder_linked_outside(tmp_path: Path) -> None:
    dest, outside = tmp_path / "pkg", tmp_path / "outside"
    assert _vendor(dest) == 0
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    for child in (dest / "codecs").iterdir():
        child.unlink()
    (dest / "codecs").rmdir()
    (dest / "codecs").symlink_to(outside)
    for flags in ((), ("--force",)):
        assert _vendor(dest, *flags) == 2
        assert _listing(outside) == ["keep.txt"] and (outside / "keep.txt").read_text() == "mine"


def test_vendor_never_deletes_through_a_tampered_manifest(tmp_path: Path) -> None:
    dest, outside = tmp_path / "pkg", tmp_path / "outside"
    assert _vendor(dest) == 0
    outside.mkdir()
    (outside / "victim.txt").write_text("victim")
    (dest / "lnk").symlink_to(outside)
    manifest = json.loads((dest / "VENDORED.json").read_text())
    manifest["files"]["lnk/victim.txt"] = "0" * 64
    (dest / "VENDORED.json").write_text(json.dumps(manifest))
    before = {p: p.read_bytes() for p in dest.rglob("*.py")}
    assert _vendor(dest, "--force") == 2
    assert (outside / "victim.txt").read_text() == "victim"
    assert {p: p.read_bytes() for p in dest.rglob("*.py")} == before  # refused before anything was written


def test_vendor_with_a_manifest_entry_naming_a_folder_keeps_working(tmp_path: Path) -> None:
    dest = tmp_path / "pkg"
    assert _vendor(dest) == 0
    manifest = json.loads((dest / "VENDORED.json").read_text())
    manifest["files"]["core"] = "0" * 64
    (dest / "VENDORED.json").write_text(json.dumps(manifest))
    assert _vendor(dest) == 0
    assert _vendor(dest) == 0
    assert "core" not in json.loads((dest / "VENDORED.json").read_text())["files"]
    assert (dest / "core" / "model.py").is_file()


# ---------------------------------------------------------------------------------------------- write_dataset (row 9)
def _parts(values: list[object]) -> tuple[SamplingMask, dict[str, list[object]]]:
    mask = SamplingMask.from_rows([[1]] * len(values), cu_seqlens=list(range(len(values) + 1)))
    return mask, {"step": values}


def test_write_dataset_refuses_a_long_partition_value_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    value = "v" * 300
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(tmp_path, [_parts(["ok"]), _parts(["a", value])], partition_by=["step"])
    assert info.value.code is ErrorCode.E_SCHEMA
    assert info.value.field == "step" and str(info.value.value).startswith("v" * 60)
    assert _listing(tmp_path) == []  # the first part's file and folder are removed again


def test_write_dataset_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    base, outside = tmp_path / "base", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (base / "step=b").symlink_to(outside)
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(base, _parts(["a", "b"]), partition_by=["step"])
    assert info.value.code is ErrorCode.E_ENCODING
    assert list(outside.iterdir()) == []
    assert _listing(base) == ["step=b"]


def test_write_dataset_refuses_a_partition_key_with_a_separator(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    mask = SamplingMask.from_rows([[1]])
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(tmp_path / "b", (mask, {"../x": ["a"]}), partition_by=["../x"])
    assert info.value.code is ErrorCode.E_SCHEMA
    assert not (tmp_path / "x=a").exists() and not (tmp_path / "b").exists()


def test_write_dataset_still_writes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    files = write_dataset(tmp_path, [_parts([1, 2, 1])], partition_by=["step"])
    assert sorted(Path(f).parent.name for f in files) == ["step=1", "step=2"]
    total = sum(m.num_segments for m in (sm.load(f) for f in files))
    assert total == 3
    assert not [p for p in tmp_path.rglob(".*.tmp")]
    assert np.array_equal(sm.load(files[0]).ids, [1] * sm.load(files[0]).nnz)
