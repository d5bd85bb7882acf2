"""Nothing lost: a failed ``save`` never leaves a truncated file where a good one was, and a cut Arrow
stream gives back every complete batch before its error, which says how many there were.

Kill tests run ``save`` in a child process that stops at a chosen point (half of the bytes written,
or the whole temporary file written but not yet renamed) and is then killed with SIGKILL: the
target path must still hold the old file, byte for byte. Error tests inject an exception into
the write in-process: the old file stays and no temporary file is left behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import sampling_mask
from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.codecs import iter_masks, open_writer

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

pytest.importorskip("pyarrow")

ROOT = Path(__file__).resolve().parent.parent
FORMATS = {"arrow": ".arrow", "arrows": ".arrows", "parquet": ".parquet", "msgpack": ".msgpack", "json": ".json"}


def _mask(seed: int, rows: int = 400) -> SamplingMask:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, size=rows)
    ids = [rng.choice(1000, size=int(k), replace=False).tolist() for k in lengths]
    return SamplingMask.from_rows(ids, vocab_size=1000, cu_seqlens=[0, rows // 2, rows])


OLD = _mask(0)
NEW = _mask(1, rows=20_000)  # large enough that half of it is clearly a truncated file

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


@pytest.mark.skipif(not hasattr(os, "umask") or sys.platform == "win32", reason="POSIX permissions")
def test_saved_file_has_the_permissions_open_would_give(tmp_path: Path) -> None:
    """A temporary file made by mkstemp is 0600; the saved file must follow the umask like open() does."""
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"x")
    target = tmp_path / "mask.json"
    sampling_mask.save(OLD, target)
    assert target.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


# ---------------------------------------------------------------------------------------------- streams
BATCHES = [_mask(seed, rows=60 + seed) for seed in range(3)]


def _stream(tmp_path: Path) -> bytes:
    path = tmp_path / "log.arrows"
    with open_writer(path) as writer:
        for mask in BATCHES:
            writer.write(mask)
    return path.read_bytes()


def _read_until_error(source: object) -> tuple[list[SamplingMask], SamplingMaskError | None]:
    got: list[SamplingMask] = []
    try:
        for mask in iter_masks(source, format="arrows"):  # type: ignore[arg-type]
            got.append(mask)
    except SamplingMaskError as exc:
        return got, exc
    return got, None


@pytest.mark.parametrize("cut_back", [9, 100, 300])
def test_cut_stream_yields_complete_batches_then_counts_them(tmp_path: Path, cut_back: int) -> None:
    data = _stream(tmp_path)
    got, error = _read_until_error(data[: len(data) - cut_back])
    assert got == BATCHES[: len(got)], "a batch before the cut changed"
    assert len(got) == 2, f"expected the two batches before the cut, got {len(got)}"
    assert error is not None, "a batch cut in the middle must be reported"
    assert f"after {len(got)} complete record batches" in str(error)
    assert error.value == len(got)
    path = tmp_path / "cut.arrows"
    path.write_bytes(data[: len(data) - cut_back])
    from_file, file_error = _read_until_error(path)
    assert from_file == got and file_error is not None and file_error.value == len(got)


def test_corrupt_batch_is_reported_after_the_good_ones(tmp_path: Path) -> None:
    data = bytearray(_stream(tmp_path))
    third = data.rfind(b"\xff\xff\xff\xff", 0, len(data) - 8)  # the last message's continuation marker
    data[third + 8 : third + 40] = b"\xee" * 32  # garble its metadata
    got, error = _read_until_error(bytes(data))
    assert got == BATCHES[:2]
    assert error is not None and "after 2 complete record batches" in str(error)


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
    got, error = _read_until_error(tmp_path / temporary)
    assert got == BATCHES[:2], f"read {len(got)} batches back"
    assert error is not None and error.code == "E_ENCODING" and error.value == 2
    sampling_mask.save(NEW, path, format="arrows")
    assert _leftovers(tmp_path, path) == [] and sampling_mask.load(path) == NEW
