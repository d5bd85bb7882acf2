"""Files: only regular files are read or replaced, reads are bounded, saves go through symlinks
atomically and clean up after killed saves, and a streaming writer is atomic too.

POSIX only where FIFOs, symlinks and ``flock`` are needed.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

import sampling_mask
from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.codecs import files, open_writer

MASK = SamplingMask.from_rows([[3, 7], [], [5]], vocab_size=10)
OTHER = SamplingMask.from_rows([[1], [2, 4]], vocab_size=10)
posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX")


def _code(call: object) -> str:
    with pytest.raises(SamplingMaskError) as info:
        call()  # type: ignore[operator]
    return info.value.code.value


#: Seconds before a read counts as blocked: far beyond the work on any machine (a FIFO refused
#: takes milliseconds; a blocked read never returns), so the verdict does not depend on its speed.
HANG_SECONDS = 300


def _within(seconds: float, call: object) -> str:
    """``call``'s error code, failing (not hanging) when it does not return within ``seconds``."""
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(_code(call)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked reading a special file"
    return out[0]


# ---------------------------------------------------------------------------------------------- load
@posix
@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack", "mask.bin", "mask.arrow", "mask.parquet"])
def test_load_refuses_a_fifo_without_blocking(tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    assert _within(HANG_SECONDS, lambda: sampling_mask.load(fifo)) == "E_ENCODING"
    assert _within(HANG_SECONDS, lambda: list(sampling_mask.codecs.iter_masks(fifo))) == "E_ENCODING"


@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack", "mask.bin", "mask.arrows"])
def test_load_refuses_a_directory(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    assert _code(lambda: sampling_mask.load(tmp_path / name)) == "E_ENCODING"


@posix
@pytest.mark.parametrize("name", ["mask.json", "mask.msgpack"])
def test_load_refuses_a_device_before_reading(tmp_path: Path, name: str) -> None:
    """A ``.json`` path to /dev/zero used to end in MemoryError; now it is refused before any read."""
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    assert _within(HANG_SECONDS, lambda: sampling_mask.load(link)) == "E_ENCODING"


def test_load_reads_at_most_the_limit_plus_one_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that grows after its size was checked (simulated: the check sees 10 bytes) is cut at
    ``max_bytes + 1`` and refused; a file over the limit is refused from its size."""
    path = tmp_path / "mask.json"
    path.write_bytes(sampling_mask.encode(MASK, "json") + b" " * 4096)
    limits = sampling_mask.DEFAULT_LIMITS.replace(max_bytes=1024)
    assert _code(lambda: sampling_mask.load(path, limits=limits)) == "E_LIMIT"
    real_stat = os.stat(path)
    fake = os.stat_result((real_stat.st_mode, *real_stat[1:6], 10, *real_stat[7:]))
    monkeypatch.setattr(files, "check_regular", lambda _: fake)
    reads: list[int] = []
    real_read = files.read_head

    def read_head(p: object, size: int) -> bytes:
        reads.append(size)
        return real_read(p, size)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "read_head", read_head)
    assert _code(lambda: files.read_bounded(path, 1024)) == "E_LIMIT"
    assert reads == [1025]


# ---------------------------------------------------------------------------------------------- save
@posix
def test_save_refuses_special_targets_and_leaves_them(tmp_path: Path) -> None:
    fifo = tmp_path / "mask.json"
    os.mkfifo(fifo)
    assert _within(HANG_SECONDS, lambda: sampling_mask.save(MASK, fifo)) == "E_ENCODING"
    assert fifo.is_fifo()
    link = tmp_path / "link.arrow"
    link.symlink_to(fifo)
    assert _within(HANG_SECONDS, lambda: sampling_mask.save(MASK, link, format="json")) == "E_ENCODING"
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
