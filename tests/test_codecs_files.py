"""Files: ``load`` reads only regular files and at most ``max_bytes + 1`` bytes; ``save``,
``open_writer`` and every other writer go through one atomic writer (``codecs.files.atomic_path``), so
a target that is a FIFO or a device is refused before anything is replaced, a save through a symlink
replaces the file it points to, and a failed, interrupted or killed write never leaves a truncated file
where a good one was, nor a temporary file once the next save has run. Below a destination root no
symlink is written, replaced or deleted through.

Kill tests run ``save`` in a child process that stops at a chosen point (half of the bytes written,
or the whole temporary file written but not yet renamed) and is then killed with SIGKILL: the
target path must still hold the old file, byte for byte. Error tests inject an exception into
the write in-process: the old file stays and no temporary file is left behind. POSIX only where
FIFOs, symlinks and ``flock`` are needed.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from file_checks import code_of, listing, raised_code, read_until_error, within
from mask_examples import random_mask

import sampling_mask
import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.codecs import files, open_writer

slow = pytest.mark.slow  # forks or spawns processes, or runs for seconds

pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
FORMATS = {"arrow": ".arrow", "arrows": ".arrows", "parquet": ".parquet", "msgpack": ".msgpack", "json": ".json"}


OLD = random_mask(0)
NEW = random_mask(1, rows=20_000)  # large enough that half of it is clearly a truncated file
BATCHES = [random_mask(seed, rows=60 + seed) for seed in range(3)]
MASK = SamplingMask.from_rows([[3, 7], [], [5]], vocab_size=10)
OTHER = SamplingMask.from_rows([[1], [2, 4]], vocab_size=10)
posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: FIFOs, symlinks and flock")


# ---------------------------------------------------------------------------------------------- load
@posix
@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack", "mask.bin", "mask.arrow", "mask.parquet"])
def test_load_refuses_a_fifo_without_blocking(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    assert code_of(within(lambda: sampling_mask.load(fifo))) == "E_ENCODING"
    assert code_of(within(lambda: list(sampling_mask.codecs.iter_masks(fifo)))) == "E_ENCODING"


@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack", "mask.bin", "mask.arrows"])
def test_load_refuses_a_directory(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    assert raised_code(lambda: sampling_mask.load(tmp_path / name)) == "E_ENCODING"


@posix
@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack"])
def test_load_refuses_a_device_before_reading(tmp_path: Path, name: str) -> None:
    """A ``.json`` path to /dev/zero used to end in MemoryError; now it is refused before any read."""
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    assert code_of(within(lambda: sampling_mask.load(link))) == "E_ENCODING"


def test_load_reads_at_most_the_limit_plus_one_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that grows after its size was checked (simulated: the check sees 10 bytes) is cut at
    ``max_bytes + 1`` and refused; a file over the limit is refused from its size."""
    path = tmp_path / "mask.json"
    path.write_bytes(sampling_mask.encode(MASK, "json") + b" " * 4096)
    limits = sampling_mask.DEFAULT_LIMITS.replace(max_bytes=1024)
    assert raised_code(lambda: sampling_mask.load(path, limits=limits)) == "E_LIMIT"
    real_stat = os.stat(path)
    fake = os.stat_result((real_stat.st_mode, *real_stat[1:6], 10, *real_stat[7:]))
    monkeypatch.setattr(files, "check_regular", lambda _: fake)
    reads: list[int] = []
    real_read = files.read_head

    def read_head(p: object, size: int) -> bytes:
        reads.append(size)
        return real_read(p, size)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "read_head", read_head)
    assert raised_code(lambda: files.read_bounded(path, 1024)) == "E_LIMIT"
    assert reads == [1025]


# ---------------------------------------------------------------------------------------------- save
@posix
def test_save_refuses_special_targets_and_leaves_them(tmp_path: Path) -> None:
    fifo = tmp_path / "mask.json"
    os.mkfifo(fifo)
    assert code_of(within(lambda: sampling_mask.save(MASK, fifo))) == "E_ENCODING"
    assert fifo.is_fifo()
    link = tmp_path / "link.arrow"
    link.symlink_to(fifo)
    assert code_of(within(lambda: sampling_mask.save(MASK, link, format="json"))) == "E_ENCODING"
    assert fifo.is_fifo() and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.arrow", "mask.json"]


@posix
@pytest.mark.parametrize("name", ["mask.json", "mask.arrow", "mask.parquet"])
def test_save_writes_through_a_symlink_atomically(tmp_path: Path, name: str) -> None:
    real = tmp_path / "store" / name
    real.parent.mkdir()
    sampling_mask.save(MASK, real)
    link = tmp_path / name
    link.symlink_to(real)
    sampling_mask.save(OTHER, link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert sampling_mask.load(real) == OTHER
    assert sorted(p.name for p in real.parent.iterdir()) == [name]  # no temporary left in either folder
    assert sorted(p.name for p in tmp_path.iterdir()) == [name, "store"]


@posix
def test_save_removes_stale_temporaries_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "mask.json"
    stale = tmp_path / ".mask.json.0123456789abcdef.tmp"  # a killed save's leftover: nobody holds it
    live = tmp_path / ".mask.json.fedcba9876543210.tmp"  # a save in progress holds its lock
    untouched = [
        tmp_path / ".mask.json.notatempfile.tmp",
        tmp_path / ".other.json.0123456789abcdef.tmp",
        tmp_path / "mask.json.0123456789abcdef.tmp",
    ]
    for path in (stale, live, *untouched):
        path.write_bytes(b"partial")
    holder = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        sampling_mask.save(MASK, target)
        assert not stale.exists() and live.exists()
        assert all(path.read_bytes() == b"partial" for path in untouched)
        assert sampling_mask.load(target) == MASK
    finally:
        os.close(holder)


def test_temporary_names_are_unique(tmp_path: Path) -> None:
    names = set()
    for _ in range(50):
        with files.atomic_path(tmp_path / "mask.json") as tmp:
            names.add(os.path.basename(tmp))
            Path(tmp).write_bytes(b"{}")
    assert len(names) == 50


# ---------------------------------------------------------------------------------------------- save, failed or killed
# The child saves NEW over the file at argv[1] and stops at argv[3]: "half" (half of the bytes are
# on disk: byte formats write half and stop; Arrow formats stop before the footer / end marker) or
# "rename" (the temporary file is complete, the rename has not happened). It prints STOPPED, then
# sleeps until the parent kills it.
_CHILD = r"""
import builtins, io, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[4])
import sampling_mask
from test_codecs_files import NEW

path, fmt, stop = sys.argv[1], sys.argv[2], sys.argv[3]

def stopped():
    print("STOPPED", flush=True)
    time.sleep(600)

class HalfWriter:
    def __init__(self, fh):
        self._fh = fh
    def write(self, data):
        view = memoryview(data).cast("B")
        self._fh.write(view[: max(len(view) // 2, 1)])
        self._fh.flush()
        os.fsync(self._fh.fileno())
        stopped()
    def __getattr__(self, name):
        return getattr(self._fh, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self._fh.close()

if stop == "rename":
    os.replace = os.rename = lambda *args, **kwargs: stopped()
elif fmt in ("arrow", "arrows", "parquet"):
    from sampling_mask.codecs import arrow
    arrow.Writer.close = lambda self: stopped()
else:
    real_open = builtins.open
    def half_open(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        return HalfWriter(fh) if "w" in mode or "a" in mode or "x" in mode else fh
    builtins.open = io.open = half_open
sampling_mask.save(NEW, path, format=fmt)
print("FINISHED", flush=True)
"""


def _kill(child: subprocess.Popen) -> None:
    """SIGKILL ``child`` (no cleanup of its own can run) and wait for it."""
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)


def _reap(child: subprocess.Popen) -> None:
    """Kill ``child`` if it still runs (a failed test) and close its pipes."""
    if child.poll() is None:
        child.kill()
        child.wait()
    for pipe in (child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()


def _leftovers(directory: Path, keep: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != keep)


@slow
@pytest.mark.parametrize("stop", ["half", "rename"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_killed_save_leaves_the_old_file_intact(tmp_path: Path, fmt: str, stop: str) -> None:
    target = tmp_path / f"mask{FORMATS[fmt]}"
    sampling_mask.save(OLD, target)
    before = target.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(target), fmt, stop, str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == "STOPPED", f"the child never reached its stop point: {line!r} {child.stderr.read()[-2000:]}"
        partial = [p for p in tmp_path.iterdir() if p != target]
        assert partial, "save wrote nothing next to the target before renaming"
        if stop == "half":
            assert all(p.stat().st_size < len(sampling_mask.encode(NEW, fmt)) for p in partial)
        _kill(child)
    finally:
        _reap(child)
    assert child.returncode == -signal.SIGKILL
    assert target.read_bytes() == before, "the target changed though the save never finished"
    assert sampling_mask.load(target) == OLD
    # What a killed writer leaves is a hidden temporary file, never the target name.
    assert all(name.startswith(".") for name in _leftovers(tmp_path, target)), _leftovers(tmp_path, target)


class _Boom(Exception):
    pass


@slow
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("error", [_Boom, KeyboardInterrupt, SamplingMaskError])
def test_failed_save_keeps_the_old_file_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, error: type[BaseException]
) -> None:
    target = tmp_path / f"mask{FORMATS[fmt]}"
    sampling_mask.save(OLD, target)
    before = target.read_bytes()

    def fail(*args: object, **kwargs: object) -> None:
        raise error("E_ENCODING", "injected") if error is SamplingMaskError else error("injected")

    if fmt in ("arrow", "arrows", "parquet"):
        from sampling_mask.codecs import arrow

        real_write = arrow.Writer.write

        def write_then_fail(self: object, *args: object, **kwargs: object) -> None:
            real_write(self, *args, **kwargs)  # type: ignore[arg-type]
            fail()

        monkeypatch.setattr(arrow.Writer, "write", write_then_fail)
    elif fmt == "json":  # written a chunk of rows at a time: fail after the first chunk is on disk
        from sampling_mask.codecs import json as json_codec

        real_iter = json_codec.iter_encode

        def iter_then_fail(*args: object, **kwargs: object) -> Iterator[bytes]:
            pieces = real_iter(*args, **kwargs)  # type: ignore[arg-type]
            yield next(pieces)
            fail()

        monkeypatch.setattr(json_codec, "iter_encode", iter_then_fail)
    else:
        monkeypatch.setattr(sampling_mask.codecs, "encode", fail)
    with pytest.raises(error):
        sampling_mask.save(NEW, target)
    assert target.read_bytes() == before
    assert _leftovers(tmp_path, target) == [], "a failed save left a temporary file"


@slow
def test_save_over_a_directory_or_missing_folder_raises_and_leaves_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "absent" / "mask.json"
    with pytest.raises(OSError):
        sampling_mask.save(OLD, missing)
    assert not missing.parent.exists()
    folder = tmp_path / "folder.json"
    folder.mkdir()
    with pytest.raises(SamplingMaskError) as info:
        sampling_mask.save(OLD, folder)
    assert info.value.code == "E_ENCODING" and "directory" in info.value.message
    assert folder.is_dir() and _leftovers(tmp_path, folder) == []


@slow
@pytest.mark.parametrize("fmt", ["json", "arrow"])
def test_save_flushes_to_disk_before_renaming(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    """The rename must not reach the disk before the data it points at (power loss)."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        assert Path(src).stat().st_size > 0, "renaming an empty file"
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / f"mask{FORMATS[fmt]}"
    sampling_mask.save(OLD, target)
    assert "replace" in events and "fsync" in events[: events.index("replace")], events
    assert sampling_mask.load(target) == OLD


@slow
@pytest.mark.skipif(not hasattr(os, "umask") or sys.platform == "win32", reason="POSIX permissions")
def test_saved_file_has_the_permissions_open_would_give(tmp_path: Path) -> None:
    """A temporary file made by mkstemp is 0600; the saved file must follow the umask like open() does."""
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x")
    target = tmp_path / "mask.json"
    sampling_mask.save(OLD, target)
    assert target.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


# ---------------------------------------------------------------------------------------------- open_writer
@pytest.mark.parametrize("suffix", [".arrow", ".arrows", ".parquet"])
def test_writer_interrupted_by_an_exception_leaves_the_old_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"mask{suffix}"
    sampling_mask.save(MASK, path)
    before = path.read_bytes()
    with pytest.raises(RuntimeError), open_writer(path) as writer:
        writer.write(OTHER)
        raise RuntimeError("the producer failed")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


@pytest.mark.parametrize("suffix", [".arrow", ".arrows", ".parquet"])
def test_writer_that_wrote_nothing_writes_the_empty_mask(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"mask{suffix}"
    with open_writer(path):
        assert not path.exists(), "nothing is visible at the path before the writer closes"
    empty = sampling_mask.load(path)
    assert empty.num_rows == 0 and empty.num_segments == 0
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_writer_renames_only_on_close(tmp_path: Path) -> None:
    path = tmp_path / "mask.arrows"
    writer = open_writer(path)
    writer.write(MASK)
    assert not path.exists()
    writer.close()
    writer.close()  # closing twice is harmless
    assert sampling_mask.load(path) == MASK


_STREAM_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[2])
from sampling_mask.codecs import open_writer
from test_codecs_files import BATCHES
writer = open_writer(sys.argv[1], format="arrows")
writer.write(BATCHES[0])
writer.write(BATCHES[1])
print("WROTE", flush=True)
time.sleep(600)
"""


@slow
def test_killed_stream_writer_leaves_its_complete_batches_readable(tmp_path: Path) -> None:
    """The writer is atomic: the path keeps the old file; the killed writer's temporary holds its
    complete batches (then ``E_ENCODING``: no end-of-stream marker), and the next save removes it."""
    path = tmp_path / "log.arrows"
    sampling_mask.save(OLD, path, format="arrows")
    child = subprocess.Popen(
        [sys.executable, "-c", _STREAM_CHILD, str(path), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "WROTE"
        _kill(child)
    finally:
        _reap(child)
    assert sampling_mask.load(path) == OLD
    (temporary,) = _leftovers(tmp_path, path)
    got, error = read_until_error(tmp_path / temporary)
    assert got == BATCHES[:2], f"read {len(got)} batches back"
    assert error is not None and error.code == "E_ENCODING" and error.value == 2
    sampling_mask.save(NEW, path, format="arrows")
    assert _leftovers(tmp_path, path) == [] and sampling_mask.load(path) == NEW


# ---------------------------------------------------------------------------------------------- atomic_path: special targets, destination roots
@posix
def test_atomic_path_refuses_a_fifo_and_replaces_nothing(tmp_path: Path) -> None:
    fifo = tmp_path / "out.msgpack"
    os.mkfifo(fifo)
    with pytest.raises(SamplingMaskError) as info:
        sm.save(MASK, fifo)
    assert info.value.code is ErrorCode.E_ENCODING and "FIFO" in info.value.message
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert listing(tmp_path) == ["out.msgpack"]  # no temporary left


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
    assert listing(tmp_path) == ["a"]


def test_remove_file_leaves_folders_and_links_alone(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_bytes(b"x")
    assert files.remove_file(tmp_path, tmp_path / "d") is False
    assert files.remove_file(tmp_path, tmp_path / "f") is True
    assert listing(tmp_path) == ["d"]
