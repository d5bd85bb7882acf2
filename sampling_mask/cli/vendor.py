"""``sampling-mask vendor DEST --package NAME [--codecs json,msgpack]``: copy the core (and codecs) into a
server's own package, so it needs no dependency on sampling-mask.

DEST becomes the package NAME (NAME's last part must be DEST's folder name)::

    DEST/__init__.py      the core's public names, SAMPLING_MASK_VERSION, SPEC_VERSION
    DEST/core/            sampling_mask/core/ (stdlib + numpy only)
    DEST/codecs/          the chosen codec modules and the helpers they import (relative imports only)
    DEST/LICENSE          Apache-2.0
    DEST/README.md        source, version, contents, how to update
    DEST/VENDORED.json    the manifest: version, package, codecs, what each needs, sha256 of every file written

Every copied file's first line names the release and the file it came from. Running the command again
updates the copy: it rewrites the files of the manifest and removes those no longer chosen. A file
changed since it was written (its sha256 differs from the manifest's), or a DEST holding files but no
manifest, is refused (``E_IO``, exit 2) unless ``--force``. Every file goes through the library's one
atomic writer (``codecs.files.atomic_path``), and nothing is written, replaced or deleted through a
symlink below DEST (refused, ``E_IO``, also with ``--force``): the command never touches a file outside DEST.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import keyword
import os
import re
from pathlib import Path
from typing import Any

from ..codecs.registry import CODECS as _ALL_CODECS
from ..codecs.registry import Codec
from ._common import CliError, add_command, out

#: The codecs a copy can take (the registry's entries with vendorable files).
CODECS: dict[str, Codec] = {name: codec for name, codec in _ALL_CODECS.items() if codec.files}
#: Codecs that cannot be vendored, and why.
NOT_VENDORABLE = {name: codec.not_vendorable or "" for name, codec in _ALL_CODECS.items() if not codec.files}
#: This command reads no mask files: the global --local-limits flag is not offered here.
USES_LIMITS = False
MANIFEST = "VENDORED.json"
_PACKAGE = Path(__file__).resolve().parents[1]


def header(relpath: str, version: str | None = None, *, vendored: bool) -> str:
    """The first line of a vendorable file (``relpath`` under sampling_mask/): in the source it names
    no release (the version is written once, as ``__version__``); in a copy, the release it came from."""
    if vendored:
        return (
            f"# sampling-mask {version}, Apache-2.0 (see LICENSE): vendored from sampling_mask/{relpath}"
            " by `sampling-mask vendor`; do not edit\n"
        )
    return f"# sampling-mask, Apache-2.0 (see LICENSE): sampling_mask/{relpath}, vendorable (docs/serving-and-vendoring.md)\n"


def vendorable_files(codecs: tuple[str, ...] = tuple(CODECS)) -> list[str]:
    """Paths under sampling_mask/ that a copy with ``codecs`` takes: the core folder, then the codec modules."""
    core = sorted(f"core/{p.name}" for p in (_PACKAGE / "core").glob("*.py"))
    modules = sorted({f"codecs/{m}" for codec in codecs for m in CODECS[codec].files})
    return core + modules


def needs(codecs: tuple[str, ...]) -> dict[str, list[str]]:
    """What the core and each of ``codecs`` import beyond the standard library (pip package names):
    numpy, and the codec's own packages (none for json and msgpack)."""
    return {"core": ["numpy"], **{c: ["numpy", *CODECS[c].packages] for c in codecs}}


def _needs_text(packages: list[str]) -> str:
    return "numpy only" if packages == ["numpy"] else ", ".join(packages)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _parse_codecs(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    chosen: list[str] = []
    for name in (part.strip() for part in text.split(",")):
        if name in NOT_VENDORABLE:
            raise CliError("E_USAGE", f"--codecs {name}: not vendorable: {NOT_VENDORABLE[name]}")
        if name not in CODECS:
            raise CliError("E_USAGE", f"--codecs: unknown codec {name!r}; choose from {', '.join(CODECS)}")
        if name not in chosen:
            chosen.append(name)
    return tuple(sorted(chosen))


def _check_package(name: str, dest: Path) -> None:
    parts = name.split(".")
    if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        raise CliError("E_USAGE", f"--package {name!r} is not a dotted Python module name")
    if parts[-1] != dest.name:
        raise CliError("E_USAGE", f"--package {name!r} must end with DEST's folder name {dest.name!r}")


def _checked(dest: Path, rel: str) -> Path:
    """``dest / rel`` after :func:`codecs.files.check_inside`: no ``..``, no symlink below DEST (``E_IO``)."""
    from ..codecs.files import check_inside
    from ..core.errors import SamplingMaskError

    try:
        check_inside(dest, dest / rel)
    except SamplingMaskError as exc:
        raise CliError(
            "E_IO", f"refusing {rel!r} in {str(dest)!r}: {exc.message} ({exc.value}); nothing was written"
        ) from None
    return dest / rel


def _previous_files(dest: Path, force: bool) -> dict[str, str]:
    """``{relpath: sha256}`` of the copy already in ``dest`` (empty when none); refuses local changes
    and any path of the manifest that leads through a symlink (also with ``--force``)."""
    from ..codecs.files import read_bounded
    from ..core.errors import SamplingMaskError

    if not dest.exists():
        return {}
    if not dest.is_dir():
        raise CliError("E_IO", f"{str(dest)!r} exists and is not a folder")
    manifest = _checked(dest, MANIFEST)
    if not manifest.exists():
        if any(dest.iterdir()) and not force:
            raise CliError(
                "E_IO", f"{str(dest)!r} holds files but no {MANIFEST}: not a vendored copy; pass --force to write there"
            )
        return {}
    try:
        files = json.loads(read_bounded(manifest, 1 << 24).decode("utf-8"))["files"]
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise TypeError("files must map paths to sha256")
    except (OSError, ValueError, KeyError, TypeError, SamplingMaskError) as exc:
        if force:
            return {}
        raise CliError("E_IO", f"cannot read {str(manifest)!r} ({exc}); pass --force to rewrite the copy") from None
    safe = {rel: digest for rel, digest in files.items() if _inside(dest, rel)}
    for rel in safe:
        _checked(dest, rel)
    changed = [rel for rel, digest in safe.items() if _regular(dest / rel) and _file_sha256(dest / rel) != digest]
    if changed and not force:
        raise CliError(
            "E_IO",
            f"refusing to overwrite local changes in {str(dest)!r}: {', '.join(sorted(changed))} differ from the "
            "vendored copy (keep your change elsewhere, or pass --force to discard it)",
        )
    return safe


def _regular(path: Path) -> bool:
    """A regular file, not reached through a symlink at its last step (folders, FIFOs: False)."""
    return path.is_file() and not path.is_symlink()


def _file_sha256(path: Path) -> str:
    """The sha256 of a regular file, read bounded (a vendored file is small; a huge one differs anyway)."""
    from ..codecs.files import read_bounded

    try:
        return _sha256(read_bounded(path, 1 << 26))
    except Exception:  # noqa: BLE001 - too large or unreadable: not the file vendor wrote
        return ""


def _inside(dest: Path, rel: str) -> bool:
    """A manifest path that names a file inside ``dest`` (never an absolute path or ``..``)."""
    path = Path(rel)
    return not path.is_absolute() and ".." not in path.parts and bool(path.parts)


def _generated(name: str, version: str, codecs: tuple[str, ...]) -> dict[str, str]:
    """DEST/__init__.py, DEST/codecs/__init__.py and DEST/README.md."""
    from .. import SPEC_VERSION
    from ..core import __all__ as core_names

    stamp = f"# sampling-mask {version}, Apache-2.0 (see LICENSE): written by `sampling-mask vendor`; do not edit\n"
    names = ", ".join(sorted(core_names))
    top = [*core_names, "SAMPLING_MASK_VERSION", "SPEC_VERSION", *(("decode", "encode") if codecs else ())]
    listed = "".join(f'    "{n}",\n' for n in sorted(top))
    codec_text = ", ".join(codecs) if codecs else "none"
    entry = "from .codecs import decode, encode\n" if codecs else ""
    files = {
        "__init__.py": (
            f'{stamp}"""sampling-mask {version} (format spec v{SPEC_VERSION}) vendored as ``{name}``: the core model'
            f"; codecs: {codec_text}.\n\nSee README.md in this folder. Update with ``sampling-mask vendor``, never by hand.\n"
            f'"""\n\n{entry}from .core import {names}\n\nSAMPLING_MASK_VERSION = "{version}"\nSPEC_VERSION = {SPEC_VERSION}\n\n'
            f"__all__ = [\n{listed}]\n"
        ),
        "README.md": _readme(name, version, codecs),
    }
    if codecs:
        files["codecs/__init__.py"] = _codecs_init(stamp, name, codecs)
    return files


def _formats(codecs: tuple[str, ...]) -> list[str]:
    return [fmt for c in codecs for fmt in CODECS[c].formats]


def _codecs_init(stamp: str, name: str, codecs: tuple[str, ...]) -> str:
    """DEST/codecs/__init__.py: the entry points of the codec contract, for the formats the copy holds."""
    formats = _formats(codecs)
    usage = "\n".join(f"- ``{name}.codecs.{c}``: ``encode(mask)`` / ``decode(data)``" for c in codecs)
    return (
        f'{stamp}"""Vendored codecs, formats {", ".join(formats)}: ``encode(mask, format)`` and\n'
        "``decode(data, *, format=None, limits=..., validate=True, copy=False)`` (the format told by the\n"
        f"first bytes), also as ``{name}.encode`` / ``{name}.decode``; or each module directly:\n\n{usage}\n"
        '"""\n\nfrom .registry import decode, detect_format, encode, held_formats\n\n'
        "FORMATS = held_formats()\n\n"
        '__all__ = ["FORMATS", "decode", "detect_format", "encode"]\n'
    )


#: Where a copied docstring names this library as the import path of something the copy holds.
_OWN_NAMES = re.compile(
    r"\bimport sampling_mask\b"
    r"|\bsampling_mask(?=\.(?:SamplingMask|SamplingMaskError|ErrorCode|Limits|as_sampling_mask|concat|"
    r"decode|encode|core|codecs)\b)"
)


def own_names(text: str, package: str) -> str:
    """``text`` with ``sampling_mask`` replaced by ``package`` where it is the import path of the
    copy's own code (``import sampling_mask``, ``sampling_mask.decode``); other uses of the word (the
    wire key ``"sampling_mask"``, vLLM's ``sampling_mask.token_ids``, the source path in the header)
    stay."""
    return _OWN_NAMES.sub(lambda m: m.group(0).replace("sampling_mask", package), text)


def _readme(name: str, version: str, codecs: tuple[str, ...]) -> str:
    lines = [
        f"# `{name}`: sampling-mask {version}, vendored",
        "",
        f"A copy of the core of sampling-mask {version} (Apache-2.0, see LICENSE), made by `sampling-mask vendor`:",
        "`core/` is `sampling_mask/core/`"
        + (f"; `codecs/` holds the {', '.join(codecs)} codec{'s' if len(codecs) > 1 else ''}." if codecs else "."),
        "",
        "What it imports beyond the standard library (also in VENDORED.json, `needs`):",
        "",
        *(
            f"- {'core' if part == 'core' else f'codec {part}'}: {_needs_text(deps)}"
            for part, deps in needs(codecs).items()
        ),
        "",
        f"    from {name} import SamplingMask, SamplingMaskError",
        *([f"    from {name} import decode, encode  # formats: {', '.join(_formats(codecs))}"] if codecs else []),
        *(f"    from {name}.codecs import {c}" for c in codecs),
        "",
        "Do not edit these files. Update the copy by running the same command with a newer sampling-mask:",
        "",
        f"    sampling-mask vendor <this folder> --package {name}"
        + (f" --codecs {','.join(codecs)}" if codecs else ""),
        "",
        f"It refuses to overwrite a file changed since it was written ({MANIFEST} holds each file's sha256)",
        "unless `--force`. Masks made here are accepted by an installed sampling-mask, and compare equal",
        "with its masks and those of other copies (the mask protocol, `__sampling_mask__()`).",
        "",
    ]
    return "\n".join(lines)


def vendor(dest: Path, package: str, codecs: tuple[str, ...], *, force: bool = False) -> list[str]:
    """Write the copy (see the module docstring); the paths written, relative to ``dest``."""
    from .. import __version__
    from ..codecs.files import remove_file
    from ..core.errors import SamplingMaskError

    _check_package(package, dest)
    previous = _previous_files(dest, force)
    contents: dict[str, bytes] = {}
    for rel in vendorable_files(codecs):
        text = (_PACKAGE / rel).read_text(encoding="utf-8")
        first, _, rest = text.partition("\n")
        if first != header(rel, vendored=False).rstrip("\n"):
            raise RuntimeError(f"sampling_mask/{rel} lacks its licence header")  # a packaging bug: exit 3
        contents[rel] = (header(rel, __version__, vendored=True) + own_names(rest, package)).encode()
    contents.update({rel: text.encode() for rel, text in _generated(package, __version__, codecs).items()})
    contents["LICENSE"] = (_PACKAGE / "LICENSE").read_bytes()
    for rel in contents:  # every path checked before anything is written
        _checked(dest, rel)
    if not force:
        clashes = [rel for rel in contents if rel not in previous and os.path.lexists(dest / rel)]
        if clashes:
            raise CliError(
                "E_IO", f"refusing to overwrite {', '.join(sorted(clashes))} in {str(dest)!r}: not written by vendor"
            )
    manifest = {
        "source": "sampling-mask",
        "version": __version__,
        "package": package,
        "codecs": list(codecs),
        "needs": needs(codecs),
        "files": {rel: _sha256(data) for rel, data in sorted(contents.items())},
    }
    contents[MANIFEST] = (json.dumps(manifest, indent=2) + "\n").encode()  # written last
    try:
        _write_files(dest, contents)
        for rel in sorted(set(previous) - set(contents)):  # a codec no longer chosen: regular files only
            remove_file(dest, dest / rel)
    except SamplingMaskError as exc:
        raise CliError("E_IO", f"cannot write in {str(dest)!r}: {exc.message} ({exc.value})") from None
    except OSError as exc:
        raise CliError("E_IO", f"cannot write in {str(dest)!r}: {exc.strerror or exc}") from None
    return sorted(rel for rel in contents if rel != MANIFEST)


def _write_files(dest: Path, contents: dict[str, bytes]) -> None:
    """Each file through the one atomic writer, inside ``dest`` and never through a symlink."""
    from ..codecs.files import atomic_path, make_dirs

    dest.mkdir(parents=True, exist_ok=True)
    for rel, data in contents.items():
        path = dest / rel
        if path.parent != dest:
            make_dirs(dest, path.parent)
        with atomic_path(path, root=dest) as tmp, open(tmp, "wb") as fh:
            fh.write(data)


def run(args: argparse.Namespace) -> int:
    dest = Path(args.dest)
    codecs = _parse_codecs(args.codecs)
    written = vendor(dest, args.package, codecs, force=args.force)
    if not args.quiet:
        from .. import __version__

        deps = sorted({dep for packages in needs(codecs).values() for dep in packages})
        out(
            "vendored sampling-mask {version} into {dest} as {package}: core{codecs} ({files} files; needs {needs})",
            version=__version__,
            dest=dest,
            package=args.package,
            codecs=f", codecs {', '.join(codecs)}" if codecs else "",
            files=len(written),
            needs=_needs_text(deps),
        )
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = add_command(sub, common, "vendor", "copy the core (and codecs) into your own package", run)
    p.add_argument("dest", metavar="DEST", help="the folder of the new package (created if missing)")
    p.add_argument("--package", required=True, metavar="NAME", help="its import name, e.g. myserver._sampling_mask")
    deps = "; ".join(f"{c}: {', '.join(codec.packages) or 'numpy only'}" for c, codec in CODECS.items())
    p.add_argument("--codecs", metavar="LIST", help=f"comma-separated codecs to copy too ({deps})")
    p.add_argument("--force", action="store_true", help="overwrite files changed since they were vendored")
