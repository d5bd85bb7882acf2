"""Reading and replacing mask files: regular files only, bounded reads, atomic replacement.

Invariants: a path that is not a regular file (a FIFO, a directory, a device, a socket) is refused
with ``E_ENCODING`` before it is opened for reading or writing, so nothing blocks on a FIFO and
no device node is replaced. :func:`read_bounded` reads at most ``limit + 1`` bytes whatever the
file claims or becomes (``E_LIMIT`` past ``limit``). :func:`atomic_path` writes a temporary file
``.<name>.<random>.tmp`` next to the target (through a symlink: next to the file it points to),
flushes it and renames it over the target only when the block succeeds; a live writer holds an
exclusive ``flock`` on its temporary, so a later save can tell the leftovers of a killed one and
remove them (:func:`remove_stale_temporaries`), touching no other file.

The one writer: ``save``, ``open_writer``, ``convert``, ``write_dataset`` and ``vendor`` all write
through :func:`atomic_path`. The target must be absent or a regular file (``E_ENCODING`` for a FIFO,
device, socket or directory: nothing is replaced, checked again just before the rename). With
``root=`` (a destination folder the writer owns: a dataset's base, a vendored package) the target
must lie inside ``root`` and no component below ``root`` may be a symlink (``E_ENCODING``), so
nothing is ever written, replaced or deleted outside it; :func:`make_dirs` and :func:`remove_file`
keep the same rule for the folders they create and the files they delete.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterator

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import check_count

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no stale-file detection
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "atomic_path",
    "check_inside",
    "check_regular",
    "check_target",
    "make_dirs",
    "read_bounded",
    "read_head",
    "remove_file",
    "remove_stale_temporaries",
]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BINARY = getattr(os, "O_BINARY", 0)


def _not_regular(path: str, mode: int) -> SamplingMaskError:
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    return SamplingMaskError(ErrorCode.E_ENCODING, f"{kind}, not a regular file", field="path", value=path[-80:])


def check_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat(path)`` of a regular file (symlinks followed), else ``E_ENCODING``; missing: ``OSError``."""
    name = os.fspath(path)
    info = os.stat(name)
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(name, info.st_mode)
    return info


def read_head(path: str | os.PathLike[str], size: int) -> bytes:
    """At most ``size`` bytes from the start of the regular file ``path`` (``E_ENCODING`` otherwise).

    Opened non-blocking and checked again on the open descriptor: a path swapped for a FIFO after
    the first check neither blocks nor is read.
    """
    name = os.fspath(path)
    check_regular(name)
    fd = os.open(name, os.O_RDONLY | _NONBLOCK | _BINARY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(name, info.st_mode)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            # In pieces: ``read(size)`` would allocate ``size`` up front (a limit of 2^38 bytes).
            parts, left = [], size
            while left > 0:
                part = fh.read(min(left, 1 << 24))
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            return b"".join(parts)
    finally:
        os.close(fd)


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path``: at most ``limit`` of them, else ``E_LIMIT``. Reads
    ``limit + 1`` bytes at most, so a file that grows, or lies about its size, cannot make it read more."""
    check_count(check_regular(path).st_size, limit, "file size", field="path")
    data = read_head(path, limit + 1)
    check_count(len(data), limit, "file size", field="path")
    return data


def _temporary_pattern(base: str) -> re.Pattern[str]:
    return re.compile(re.escape(f".{base}.") + r"[0-9a-f]{16}\.tmp")


def _try_lock(fd: int) -> bool:
    """Take the exclusive advisory lock on ``fd`` without waiting; False when another process holds it."""
    if fcntl is None:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def remove_stale_temporaries(directory: str, base: str) -> list[str]:
    """Remove the temporaries of ``base`` in ``directory`` that no live writer holds (a killed save's
    leftovers): only regular files named exactly ``.<base>.<16 hex>.tmp``. Returns the names removed.
    Without ``flock`` (Windows) nothing is removed."""
    if fcntl is None:  # pragma: no cover - Windows
        return []
    pattern = _temporary_pattern(base)
    removed = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not pattern.fullmatch(entry.name) or not entry.is_file(follow_symlinks=False):
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode) and _try_lock(fd):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed.append(entry.name)
            finally:
                os.close(fd)
    return removed


def _create_temporary(directory: str, base: str) -> tuple[str, int]:
    """A new empty, locked file ``.<base>.<random>.tmp`` in ``directory`` and its descriptor, created like
    ``open(..., "wb")`` would (permissions from the umask, unlike ``mkstemp``'s 0600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _BINARY
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(8)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
        _try_lock(fd)
        return tmp, fd
    raise FileExistsError(f"no free temporary name next to {base!r}")  # pragma: no cover


def _fsync(path: str, *, directory: bool = False) -> None:
    """Flush ``path`` (a file, or a folder's entries) to disk; folders only where the OS allows it."""
    try:
        fd = os.open(path, (os.O_RDONLY if directory else os.O_RDWR) | _BINARY)
    except OSError:
        if directory:  # Windows cannot open a folder; its rename is durable enough
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


def _refused(path: str, why: str) -> SamplingMaskError:
    return SamplingMaskError(ErrorCode.E_ENCODING, why, field="path", value=path[-80:])


def check_inside(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> list[str]:
    """The components of ``path`` below ``root`` (``path`` relative to ``root``, or under it), after
    checking that none climbs out (``..``, an absolute part) and that none that exists is a symlink
    or, but for the last, anything other than a folder: ``E_ENCODING`` naming the path otherwise."""
    base = os.fspath(root)
    name = os.fspath(path)
    rel = os.path.relpath(name, base) if os.path.isabs(name) == os.path.isabs(base) else name
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if not parts or os.path.isabs(rel) or ".." in parts:
        raise _refused(name, f"not a path inside {base[-80:]!r}")
    current = base
    for i, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(info.st_mode):
            raise _refused(current, f"a symlink inside {base[-80:]!r}: refused (nothing is written through it)")
        if i < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise _refused(current, "not a folder")
    return parts


def make_dirs(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> list[str]:
    """``os.makedirs`` of the folder ``path`` inside ``root``, never through a symlink (:func:`check_inside`);
    a folder name the file system refuses (too long, ...) is ``E_SCHEMA`` naming it. Returns the
    folders it created, outermost first (a caller undoing its work removes them, innermost first)."""
    base = os.fspath(root)
    current = base
    created = []
    for part in check_inside(base, path):
        current = os.path.join(current, part)
        try:
            os.mkdir(current)
            created.append(current)
        except FileExistsError:
            info = os.lstat(current)
            if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
                raise _refused(current, "a symlink or file where a folder must be: refused") from None
        except OSError as exc:
            if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ):
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, f"invalid folder name: {exc.strerror}", field="path", value=part[:80]
                ) from None
            raise
    return created


def remove_file(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Delete the regular file ``path`` inside ``root`` (:func:`check_inside`); False when it is
    absent or not a regular file (a folder, a FIFO: left alone)."""
    parts = check_inside(root, path)
    target = os.path.join(os.fspath(root), *parts)
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(target)
    return True


def _target(path: str | os.PathLike[str]) -> str:
    """The file a save replaces: ``path``, or what its symlinks point to; ``E_ENCODING`` when that
    exists and is not a regular file."""
    target = os.path.realpath(os.fspath(path))
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(os.fspath(path), info.st_mode)
    return target


def check_target(path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> str:
    """The real file :func:`atomic_path` would replace, checked before any work: absent or a regular
    file (``E_ENCODING`` otherwise); with ``root``, inside it and reached through no symlink."""
    if root is not None:
        parts = check_inside(root, path)
        path = os.path.join(os.fspath(root), *parts)
    return _target(path)


def _check_still_regular(target: str, shown: str) -> None:
    """Just before the rename: the target is still absent or a regular file (not swapped meanwhile)."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(shown, info.st_mode)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """A temporary path next to ``path``'s real file, flushed to disk and renamed over it only when
    the block succeeds; removed when it fails. A crash at any point leaves the old file (or none).
    The target must be absent or a regular file; with ``root``, inside ``root`` with no symlink on
    the way (see the module docstring)."""
    shown = os.fspath(path)
    if root is not None:
        path = os.path.join(os.fspath(root), *check_inside(root, path))
    target = _target(path)
    directory, base = os.path.split(target)
    remove_stale_temporaries(directory, base)
    tmp, lock = _create_temporary(directory, base)
    try:
        try:
            yield tmp
            _fsync(tmp)
            if root is not None:
                check_inside(root, path)  # no folder on the way swapped for a symlink meanwhile
            _check_still_regular(target, shown)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    finally:
        os.close(lock)  # releases the lock only after the rename (or the removal)
    _fsync(directory, directory=True)
