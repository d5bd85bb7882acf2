"""Finding the files of a directory, a glob or a list of paths, without ever blocking or looping.

Used by :mod:`.dataset`, :mod:`sampling_mask.data.torch_data` and the command line (``validate``,
``stats`` of a directory or glob). Invariants:

* Nothing is opened here: entries are classified by ``lstat`` / ``stat`` alone, so a FIFO or a
  device is never opened, and directories are entered through ``os.scandir`` only.
* Symlinks to directories are never followed (so two links ``-> .`` cannot loop); a glob is
  matched against the paths of such a walk, never expanded by ``glob.glob`` (whose ``**`` follows
  them). Each directory is entered at most once (by device and inode).
* Every entry whose name has one of the wanted extensions is either returned as a file (a regular
  file, or a symlink to one inside the root) or reported in :attr:`Found.skipped` with its path and
  why: a FIFO, device or socket; a dangling or looping symlink; a symlink to a directory; a symlink
  to a file outside the root (unless ``follow_outside``). Names starting with ``.`` are left out,
  and in a directory also names starting with ``_`` (``_SUCCESS``, ``_metadata``); so are entries of
  other extensions.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = ["Found", "Skipped", "classify", "file_kind", "find_files", "glob_pattern", "located", "split_by_format"]


@dataclasses.dataclass(frozen=True)
class Skipped:
    """An entry that looked like a wanted file but is not read: its path and why."""

    path: str
    error: SamplingMaskError


@dataclasses.dataclass
class Found:
    """The files to read (sorted within a directory or glob), the entries not read, and the root
    of their partitions (the directory given; None for a glob or a list)."""

    files: list[str]
    skipped: list[Skipped]
    root: str | None


def _skip(path: str, message: str) -> Skipped:
    return Skipped(path, SamplingMaskError(ErrorCode.E_ENCODING, f"{path}: {message}", field="path"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for a message ("a FIFO", "a device", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(os.path.join(base, ""))


def classify(path: str, root: str | None, *, follow_outside: bool = False) -> Skipped | None:
    """None when ``path`` is a file to read, else why not (never opens ``path``)."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return _skip(path, f"cannot be read: {exc.strerror or exc}")
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return _skip(path, "a dangling symlink (its target does not exist); not read")
        except OSError as exc:
            return _skip(path, f"a symlink that cannot be followed ({exc.strerror or exc}); not read")
        if stat.S_ISDIR(info.st_mode):
            return _skip(path, "a symlink to a directory; not followed")
        if root is not None and not follow_outside and not _inside(path, root):
            return _skip(path, "a symlink to a file outside the dataset root; not read (follow_symlinks=True reads it)")
    if stat.S_ISDIR(info.st_mode):
        return _skip(path, "a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        return _skip(path, f"{file_kind(info.st_mode)}, not a regular file; not read")
    return None


def _entries(top: str, hidden: tuple[str, ...], max_depth: int | None) -> Iterator[tuple[str, str, bool]]:
    """(path, path relative to ``top``, is a real directory) of everything below ``top``, depth first,
    symlinks to directories and hidden directories not entered, each directory at most once, at
    most ``max_depth`` levels down."""
    seen: set[tuple[int, int]] = set()
    stack = [(top, "", 1)]
    while stack:
        directory, relative, depth = stack.pop()
        try:
            info = os.stat(directory)
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            with os.scandir(directory) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            continue
        for entry in reversed(entries):
            rel = os.path.join(relative, entry.name) if relative else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            path = rel if top == os.curdir else entry.path
            yield path, rel, is_dir
            if is_dir and not entry.name.startswith(hidden) and (max_depth is None or depth < max_depth):
                stack.append((entry.path, rel, depth + 1))


def glob_pattern(pattern: str) -> re.Pattern[str]:
    """A regular expression for the relative paths a glob matches (``**`` any number of directories,
    ``*`` and ``?`` within one name, ``[...]`` a set), as ``glob.glob(recursive=True)`` reads it."""
    out: list[str] = []
    i, parts = 0, pattern.split("/")
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:.*/)?")
            continue
        piece = []
        i = 0
        while i < len(part):
            ch = part[i]
            if ch == "*":
                piece.append("[^/]*")
            elif ch == "?":
                piece.append("[^/]")
            elif ch == "[":
                end = part.find("]", i + 2 if part[i + 1 : i + 2] in ("!", "]") else i + 1)
                if end < 0:
                    piece.append(re.escape(ch))
                else:
                    body = part[i + 1 : end]
                    body = "^" + body[1:] if body.startswith("!") else body
                    piece.append("[" + body.replace("\\", "\\\\") + "]")
                    i = end
            else:
                piece.append(re.escape(ch))
            i += 1
        out.append("".join(piece) + ("" if last else "/"))
    return re.compile("".join(out))


def _glob_root(pattern: str) -> tuple[str, str]:
    """(the directory before the first magic component, the rest of the pattern)."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    root = os.sep.join(fixed) if fixed else "."
    if pattern.startswith(os.sep) and not root:
        root = os.sep
    rest = os.sep.join(parts[len(fixed) :])
    return root or os.sep, rest.replace(os.sep, "/")


def find_files(
    source: Any, extensions: Sequence[str], *, follow_outside: bool = False, skip_underscore: bool = True
) -> Found:
    """The files of ``source`` (a directory searched recursively, a glob, one path or a list of paths)
    whose names end with one of ``extensions``; see the module docstring. One path or a list is
    taken as given (each still classified: a FIFO is reported, not returned)."""
    exts = tuple(extensions)
    if isinstance(source, (str, os.PathLike)):
        source = os.fspath(source)
        if os.path.isdir(source):
            return _walk(source, exts, root=source, follow_outside=follow_outside, underscore=skip_underscore)
        if glob.has_magic(source) and not os.path.lexists(source):
            top, rest = _glob_root(source)
            depth = None if "**" in rest else rest.count("/") + 1
            found = _walk(
                top,
                exts,
                root=top,
                follow_outside=follow_outside,
                underscore=False,
                pattern=glob_pattern(rest),
                max_depth=depth,
            )
            return Found(found.files, found.skipped, None)
        paths = [source]
    else:
        paths = [os.fspath(p) for p in source]
    files, skipped = [], []
    for path in paths:
        problem = classify(path, None) if os.path.lexists(path) else None  # missing: the reader says so
        if problem is None:
            files.append(path)
        else:
            skipped.append(problem)
    return Found(files, skipped, None)


def _walk(
    top: str,
    exts: tuple[str, ...],
    *,
    root: str | None,
    follow_outside: bool,
    underscore: bool,
    pattern: re.Pattern[str] | None = None,
    max_depth: int | None = None,
) -> Found:
    files, skipped = [], []
    hidden = (".", "_") if underscore else (".",)
    for path, relative, is_dir in _entries(top, hidden, max_depth):
        name = os.path.basename(path)
        if is_dir or name.startswith(hidden) or not name.endswith(exts):
            continue
        if pattern is not None and pattern.fullmatch(relative.replace(os.sep, "/")) is None:
            continue
        problem = classify(path, root, follow_outside=follow_outside)
        if problem is None:
            files.append(path)
        else:
            skipped.append(problem)
    return Found(sorted(files), sorted(skipped, key=lambda s: s.path), root)


def split_by_format(
    paths: Sequence[str], format: str | None, extensions: Mapping[str, tuple[str, ...]]
) -> tuple[str, list[str]]:
    """The format of a set of files and the files not of it: ``format`` when given (one of
    ``extensions``' keys), else the one most files' extensions name; a tie (or none) is ``E_SCHEMA``
    (pass ``format=``)."""
    if format is not None:
        if format not in extensions:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"a dataset is {' or '.join(map(repr, extensions))} files, not {format!r}",
                value=format,
            )
        return format, [p for p in paths if not p.endswith(extensions[format])]
    counts = {fmt: sum(p.endswith(exts) for p in paths) for fmt, exts in extensions.items()}
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if ranked[0][1] == 0 or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "cannot tell the dataset's format from its files' extensions (.parquet or .arrow): pass format=",
            value=sorted(fmt for fmt, n in counts.items() if n) or None,
        )
    found = ranked[0][0]
    return found, [p for p in paths if not p.endswith(extensions[found])]


def located(path: str, exc: BaseException) -> SamplingMaskError:
    """A read failure of ``path`` as a :class:`SamplingMaskError` whose message names the path
    (an ``OSError``: ``E_ENCODING`` "cannot be read")."""
    if isinstance(exc, SamplingMaskError):
        if exc.message.startswith(path):
            return exc
        where = {"row": exc.row, "segment": exc.segment, "field": exc.field, "value": exc.value}
        return SamplingMaskError(exc.code, f"{path}: {exc.message}", **where)
    reason = getattr(exc, "strerror", None) or exc
    return SamplingMaskError(ErrorCode.E_ENCODING, f"{path}: cannot be read: {reason}", field="path")
