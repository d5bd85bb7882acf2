"""Input files for the commands: the format from the flag or the extension, whole or batch by batch,
schema metadata read from the footer, read errors as one line naming the file."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.checks import is_int
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, LOCAL_FILE_LIMITS, Limits
from ..data.stats import SupportSummary
from ._common import ROWS_ONLY_FORMATS, STREAMING_FORMATS, CliError, Progress, error_text, progress_enabled

if TYPE_CHECKING:
    import numpy as np

    from ..codecs.walk import Skipped
    from ..core.model import SamplingMask


def load_codecs() -> Any:
    """:mod:`sampling_mask.codecs` (numpy only at import; pyarrow / msgpack load when a format needs them)."""
    from .. import codecs

    return codecs


def check_input(path: Path) -> None:
    if not path.exists():
        raise CliError("E_IO", f"no such file: {str(path)!r}")
    if path.is_dir():
        raise CliError("E_IO", f"{str(path)!r} is a directory, not a file")


def resolve_format(codecs: Any, path: Path, fmt: str | None, *, flag: str = "--format") -> str:
    """``fmt`` when given (checked against the known formats), else the one ``path``'s extension names."""
    if fmt is not None:
        if fmt not in codecs.FORMATS:
            raise CliError("E_USAGE", f"unknown format {fmt!r} for {flag}; choose from {', '.join(codecs.FORMATS)}")
        return fmt
    try:
        return str(codecs.format_for_path(path))
    except SamplingMaskError as exc:
        raise CliError(
            exc.code.value,
            f"cannot tell the format of {str(path)!r} from its extension {path.suffix!r}; pass {flag} "
            f"({', '.join(codecs.FORMATS)})",
        ) from None


class Source:
    """An input file and its format. A ``.json`` file may hold any JSON form: unless ``--format``
    names one, the form is read from the content (``json_family``) when the file is loaded.
    ``limits``: :data:`DEFAULT_LIMITS`, or :data:`LOCAL_FILE_LIMITS` with ``--local-limits``."""

    def __init__(
        self, codecs: Any, path: Path, fmt: str, *, json_family: bool, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.codecs, self.path, self.fmt, self.json_family = codecs, path, fmt, json_family
        self.limits = limits

    @property
    def streaming(self) -> bool:
        return self.fmt in STREAMING_FORMATS

    def load(self) -> SamplingMask:
        """The whole mask (``self.fmt`` becomes the detected JSON form); SamplingMaskError on bad content."""
        codecs = self.codecs
        if self.json_family:
            from ..codecs import files

            data = files.read_bounded(self.path, self.limits.max_bytes)  # a regular file only, bounded
            self.fmt = str(codecs.detect_format(data))
            self.json_family = False
            mask: SamplingMask = codecs.decode(data, format=self.fmt, limits=self.limits)
            return mask
        mask = codecs.load(self.path, format=self.fmt, limits=self.limits)
        return mask

    def batches(self) -> Iterator[SamplingMask]:
        """One mask per record batch for the streaming formats, else the whole file as one mask.

        The codecs read a file's batches as views of its mapping and drop the mapped pages of a batch
        once the next is asked for; Arrow's allocator is told to hand back what it keeps, so the
        process stays near one batch of memory however large the file is."""
        if not self.streaming:
            yield self.load()
            return
        for batch in self.codecs.iter_masks(self.path, format=self.fmt, limits=self.limits):
            yield batch
            _release_arrow_memory()

    def read_error(self, exc: SamplingMaskError) -> CliError:
        hint = ""
        if exc.code is ErrorCode.E_LIMIT and self.limits is not LOCAL_FILE_LIMITS:
            hint = " (a trusted local file of a large run may be read with --local-limits)"
        return CliError(
            exc.code.value, f"{str(self.path)!r} is not a valid sampling-mask file: {error_text(exc)}{hint}"
        )


def _release_arrow_memory() -> None:
    """Hand memory pyarrow's allocator keeps for reuse back to the OS (mimalloc keeps tens of MiB)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def input_files(pattern: str) -> tuple[list[Path], list[Skipped]] | None:
    """The files a directory (searched recursively) or a glob names, sorted, and the entries that
    look like mask files but are not read (FIFOs, devices, dangling or looping symlinks, symlinks to
    directories or out of the directory: each with its reason); None for a single path.

    A directory keeps the files whose extension names a format (hidden files and ``_``-prefixed ones,
    such as ``_SUCCESS``, are left out); symlinks to directories are never followed, so a link
    loop cannot hang it. Nothing found at all is ``E_IO``.
    """
    import glob

    from ..codecs.walk import find_files

    path = Path(pattern)
    if not path.is_dir() and (path.exists() or not glob.has_magic(pattern)):
        return None
    found = find_files(pattern, tuple(load_codecs().EXTENSIONS))
    if not found.files and not found.skipped:
        raise CliError("E_IO", f"no mask files in {pattern!r}")
    return [Path(p) for p in found.files], found.skipped


def not_read(skipped: Skipped) -> dict[str, Any]:
    """A report entry for a path :func:`input_files` did not read."""
    return {"file": skipped.path, "error": {"code": skipped.error.code.value, "message": error_text(skipped.error)}}


def input_limits(args: argparse.Namespace, path: Path) -> Limits:
    """The limits a command reads ``path`` under: :data:`DEFAULT_LIMITS`; :data:`LOCAL_FILE_LIMITS`
    with ``--local-limits``; ``Limits.for_untrusted_input(file size)`` with ``--untrusted-limits``."""
    local, untrusted = getattr(args, "local_limits", False), getattr(args, "untrusted_limits", False)
    if local and untrusted:
        raise CliError("E_USAGE", "--local-limits and --untrusted-limits exclude each other")
    if untrusted:
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise CliError("E_IO", f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
        return Limits.for_untrusted_input(size)
    return LOCAL_FILE_LIMITS if local else DEFAULT_LIMITS


def side_limits(args: argparse.Namespace, path: Path) -> Limits:
    """The limits a side file (``--sampled``, ``--logits``) is read under: the mask's, and with
    ``--untrusted-limits`` scaled by the side file's own size (a file that cannot be sized is
    reported by the reader, under the defaults)."""
    if getattr(args, "untrusted_limits", False) and not path.exists():
        return DEFAULT_LIMITS
    return input_limits(args, path)


def open_input(args: argparse.Namespace, name: str = "file") -> Source:
    path = Path(getattr(args, name))
    check_input(path)
    codecs = load_codecs()
    fmt = resolve_format(codecs, path, args.format)
    if fmt in STREAMING_FORMATS and "pyarrow" not in sys.modules:
        # Streaming holds one record batch at a time, but Arrow's default allocator (mimalloc) keeps
        # the arenas of finished batches: measured, 30-40 MiB more peak memory in a conversion. Arrow
        # reads this variable once, when pyarrow first allocates; the user's own choice wins.
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    limits = input_limits(args, path)
    return Source(codecs, path, fmt, json_family=args.format is None and fmt == "json", limits=limits)


def read_all(source: Source) -> SamplingMask:
    try:
        return source.load()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def read_batches(source: Source) -> Iterator[SamplingMask]:
    try:
        yield from source.batches()
    except SamplingMaskError as exc:
        raise source.read_error(exc) from None


def schema_value(path: Path, fmt: str, key: str) -> str | None:
    """``sampling_mask.<key>`` from the schema metadata of an Arrow / Parquet file, None when absent."""
    if fmt not in STREAMING_FORMATS:
        return None
    from ..codecs.batch_reader import read_schema

    try:
        raw = (read_schema(path, fmt, DEFAULT_LIMITS).metadata or {}).get(f"sampling_mask.{key}".encode())
        return raw.decode() if raw is not None else None
    except (SamplingMaskError, OSError, UnicodeDecodeError):  # the decoder has judged the file already
        return None


def spec_version(source: Source) -> int | None:
    """The spec major version the file declares; None for the forms that carry none (rows only)."""
    if source.fmt in ROWS_ONLY_FORMATS:
        return None
    if source.streaming:
        raw = schema_value(source.path, source.fmt, "version")
        return int(raw) if raw is not None and raw.isdigit() else None
    # msgpack and the JSON document must carry the version, and the decoder accepted only this one.
    from .. import SPEC_VERSION

    return SPEC_VERSION


def count_segments(path: Path, fmt: str) -> int | None:
    """Segments (table rows) in an Arrow file or Parquet file from its metadata alone; None when unknown."""
    if fmt not in ("arrow", "parquet"):
        return None
    from ..codecs.batch_reader import BatchReader, MappedFile

    try:
        return sum(BatchReader(MappedFile(path).buffer, fmt, DEFAULT_LIMITS).rows)
    except (SamplingMaskError, OSError):  # a footer we cannot read only costs the progress total
        return None


def summarize_file(
    source: Source, args: argparse.Namespace, label: str, *, keep: int = 0, spool: bool = False
) -> SupportSummary:
    """Statistics of the whole file, batch by batch (a streaming file never sits in memory whole);
    the per-segment figures of the first ``keep`` segments kept, every segment's spooled to disk
    with ``spool`` (:class:`SupportSummary`): memory stays O(batch), never O(segments)."""
    summary = SupportSummary(keep=keep, spool=spool)
    enabled = progress_enabled(args) and source.streaming
    progress = Progress(label, count_segments(source.path, source.fmt) if enabled else None, enabled=enabled)
    try:
        for batch in read_batches(source):
            summary.add(batch)
            progress.update(batch.num_segments, batch.num_rows)
    finally:
        progress.close()
    return summary


class SidecarError(SamplingMaskError):
    """Bad data in a side file (``--sampled``), or a length that disagrees with the mask: reported
    naming that file (``validate``: exit 1, like any invalid data)."""


_KINDS = {"iu": "integer", "f": "float"}


def read_npy(path: Path, *, ndim: int, kinds: str, field: str, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """The ``ndim``-D array of a ``.npy`` file as a read-only view of its mapping: a regular file only
    (a FIFO or a device is ``E_ENCODING`` at once, never opened for a blocking read), no pickle (object
    arrays are ``E_ENCODING``). Everything the header declares is checked before numpy sees it: a
    plain dtype of a kind in ``kinds`` (``"iu"`` or ``"f"``) with a non-zero item size and ``ndim``
    dimensions (``E_DTYPE``), a shape within numpy's index range and ``limits`` (``E_LIMIT``:
    ``(0, 2**64)``, ``(2**63, 0)``) and within the file (``E_BYTES``)."""
    import io

    import numpy as np

    from ..codecs.batch_reader import MappedFile
    from ..core.limits import checked_nbytes

    data = memoryview(MappedFile(path).buffer)
    head = io.BytesIO(bytes(data[:65536]))
    try:
        version = np.lib.format.read_magic(head)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
    except (ValueError, SyntaxError, TypeError, OverflowError, KeyError, RecursionError, MemoryError) as exc:
        raise SamplingMaskError("E_ENCODING", f"not a .npy file: {exc}"[:300], field=field) from None
    if dtype.hasobject:
        raise SamplingMaskError(
            "E_ENCODING",
            "the .npy holds Python objects, which need pickle: never read (allow_pickle=False)",
            field=field,
        )
    dims = list(shape)
    plain = dtype.kind in kinds and dtype.itemsize > 0 and dtype.fields is None and dtype.subdtype is None
    if not plain or len(dims) != ndim:
        raise SamplingMaskError(
            "E_DTYPE",
            f"must hold a {ndim}-D {_KINDS[kinds]} array, got {str(dtype)[:40]} of {len(dims)} dimension(s)",
            field=field,
        )
    nbytes = checked_nbytes(dims, dtype.itemsize, limits, field=field)
    start = head.tell()
    if start + nbytes > len(data):
        raise SamplingMaskError("E_BYTES", f"the .npy header declares {dims} {dtype}, more than the file", field=field)
    arr = np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=start)
    return arr.reshape(dims, order="F" if fortran else "C")


def read_sampled(path: Path, limits: Limits = DEFAULT_LIMITS) -> np.ndarray:
    """Sampled ids from a ``.npy`` integer array (no pickle) or a ``.json`` list of integers, read
    under ``limits`` (the command's: :func:`side_limits`), the JSON parse's cost included.

    A missing file or another extension is a usage error (:class:`CliError`); a FIFO or device, or
    content that is not a 1-D integer array (too deep JSON included: ``E_LIMIT``) is
    :class:`SidecarError`."""
    import numpy as np

    from ..codecs import files
    from ..codecs import json as json_codec

    check_input(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".json"):
        raise CliError("E_USAGE", f"--sampled takes a .npy or a .json file, not {str(path)!r}")
    field = "sampled_token_ids"
    try:
        if suffix == ".npy":
            data: Any = read_npy(path, ndim=1, kinds="iu", field=field, limits=limits)
        else:
            data = json_codec.parse(files.read_bounded(path, limits.max_bytes), limits=limits)
    except OSError as exc:
        raise CliError("E_IO", f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except SamplingMaskError as exc:
        raise SidecarError(exc.code, f"not a .npy array or JSON list: {exc.message}", field=field) from None
    if isinstance(data, np.ndarray):
        arr = data
    elif isinstance(data, list) and all(map(is_int, data)):
        too_big = next((v for v in data if not -(1 << 63) <= v < 1 << 63), None)
        if too_big is not None:
            raise SidecarError("E_RANGE", "a sampled id does not fit int64", field=field, value=too_big)
        arr = np.array(data, dtype=np.int64) if data else np.zeros(0, dtype=np.int64)
    else:
        raise SidecarError("E_DTYPE", "must hold a JSON list of integers (the sampled ids)", field=field)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise SidecarError("E_DTYPE", f"must hold a 1-D integer array, got {arr.dtype} {list(arr.shape)}", field=field)
    return arr
