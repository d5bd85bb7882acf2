"""What every command shares: the exit-status conventions, one-line errors, output formatting, progress.

Exit status: 0 success; 1 the answer is "no"; 2 a usage error, reported as ONE line on stderr
``sampling-mask: error: CODE: message`` (:class:`CliError`); 3 an internal error (a bug).
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..codecs import registry
from ..core.optional import EXTRAS, UnavailableError

if TYPE_CHECKING:
    from ..core.errors import SamplingMaskError

PROG = "sampling-mask"
#: Formats written and read batch by batch, and those that carry the rows only: the codec registry's.
STREAMING_FORMATS, ROWS_ONLY_FORMATS = registry.STREAMING_FORMATS, registry.ROWS_ONLY_FORMATS
#: Optional dependencies and the extra that installs each.
OPTIONAL_EXTRAS = EXTRAS
FORMAT_HELP = f"input format when the extension does not say it ({', '.join(registry.FORMATS)})"


class CliError(Exception):
    """An error a person made (or an environment lacking something): one line, exit status 2."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is a :class:`CliError` ``E_USAGE`` (one line, exit 2), not usage + error."""

    def error(self, message: str) -> NoReturn:
        raise CliError("E_USAGE", f"{message} (see {self.prog} --help)")


def add_command(
    sub: Any, common: argparse.ArgumentParser, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """A subcommand parser that runs ``func(args)``, with the global flags of ``common``."""
    p: argparse.ArgumentParser = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
    p.set_defaults(func=func)
    return p


def missing_dependency(name: str) -> str:
    return UnavailableError(name).message


#: The most characters of one value from a file or a path a line of text output shows; a longer
#: value is cut there and says how long it was.
SHOWN_CHARS = 300


def shown(text: object, *, cap: int | None = SHOWN_CHARS) -> str:
    """``text`` made safe for a terminal: every character that is not printable (ESC, BEL, CR,
    newline and the other control characters, DEL, C1, format characters such as U+202E, line
    separators, the lone surrogates of an undecodable file name) becomes its escape as ``repr``
    writes it (``\\x1b``, ``\\n``, ``\\u202e``, ``\\udcff``), without quotes, and a backslash becomes
    ``\\\\``, so what a file says can neither move the cursor nor ring nor start a line of its own; a
    value longer than ``cap`` characters is cut there, followed by ``... (N characters)``."""
    value = str(text)
    cut = ""
    if cap is not None and len(value) > cap:
        value, cut = value[:cap], f"... ({len(value):,} characters)"
    if value.isprintable() and "\\" not in value:
        return value + cut
    return "".join(c if c.isprintable() and c != "\\" else repr(c)[1:-1] for c in value) + cut


def out(template: str = "", /, *, err: bool = False, **values: object) -> None:
    """The one function that prints text (a line on stdout; ``err``: on stderr). ``template`` is the
    command line's own words, a literal; each ``{name}`` in it is filled from ``values``: a number
    as it is (so ``{rows:,}`` formats it), anything else (every string that comes from a file or a
    path: names, metadata, messages) through :func:`shown`, escaped and cut at ``SHOWN_CHARS``.
    ``tests/test_cli_limits.py`` checks that the command line prints through nothing else."""
    fields = {
        name: value if isinstance(value, numbers.Number) and not isinstance(value, bool) else shown(value)
        for name, value in values.items()
    }
    (sys.stderr if err else sys.stdout).write(template.format(**fields) + "\n")


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return finite(float(value))
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def finite(value: float | None) -> float | None:
    """NaN / inf become None so the JSON output stays strict JSON."""
    if value is None or not math.isfinite(value):
        return None
    return value


class JsonArray(list):  # type: ignore[type-arg]
    """A JSON array :func:`print_json` writes a chunk at a time: ``chunks()`` yields numpy arrays
    (NaN is written as null), so a per-segment column of a million values is never a million Python
    objects at once. A ``list`` to the encoder (empty, with ``__len__`` and ``__iter__`` of its own):
    only the pure-Python encoder :func:`print_json` uses reads it through them."""

    def __init__(self, length: int, chunks: Callable[[], Iterator[Any]]) -> None:
        super().__init__()
        self._length, self._chunks = length, chunks

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Any]:
        from ..data.stats import json_values

        for chunk in self._chunks():
            yield from json_values(chunk)


def print_json(document: Any) -> None:
    """``document`` as indented JSON on stdout, written in pieces of about 64 KiB as it is encoded
    (never one string of the whole report); :class:`JsonArray` values are read a chunk at a time."""
    encoder = json.JSONEncoder(indent=2, default=_json_default, allow_nan=False)
    pending: list[str] = []
    size = 0
    for piece in encoder.iterencode(document):  # not one-shot: the pure-Python encoder, lazily
        pending.append(piece)
        size += len(piece)
        if size >= 1 << 16:
            sys.stdout.write("".join(pending))
            pending, size = [], 0
    pending.append("\n")
    sys.stdout.write("".join(pending))


def fmt_num(value: float | int | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{int(n)}"


class Progress:
    """Segments and rows done, on stderr, only when ``enabled`` (see :func:`progress_enabled`).

    A tqdm bar when tqdm is installed (``pip install 'sampling-mask[progress]'``), else one plain status
    line redrawn in place at most ten times a second.
    """

    def __init__(self, label: str, total: int | None, *, enabled: bool) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.segments = self.rows = 0
        self.start = self.last = time.perf_counter()
        self.bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                # COLUMNS / LINES, else the terminal's size, else 80 x 24 (tqdm draws nothing on a 0 x 0 one).
                size = shutil.get_terminal_size()
                self.bar = tqdm(
                    total=total, desc=label, unit=" segments", file=sys.stderr, ncols=size.columns, nrows=size.lines
                )

    def update(self, segments: int, rows: int) -> None:
        self.segments += segments
        self.rows += rows
        if self.bar is not None:
            self.bar.set_postfix_str(f"{fmt_count(self.rows)} rows", refresh=False)
            self.bar.update(segments)
            return
        now = time.perf_counter()
        if self.enabled and (self.last == self.start or now - self.last >= 0.1):
            self.last = now
            self._draw(now)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{fmt_count(self.rows)} rows", refresh=False)
            self.bar.close()
        elif self.enabled:
            self._draw(time.perf_counter())
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _draw(self, now: float) -> None:
        done = f"{fmt_count(self.segments)}" + (f"/{fmt_count(self.total)}" if self.total else "")
        sys.stderr.write(
            f"\r{self.label}  {done} segments, {fmt_count(self.rows)} rows, {now - self.start:.1f} s\x1b[K"
        )
        sys.stderr.flush()


def progress_enabled(args: argparse.Namespace) -> bool:
    """Progress is shown only on a terminal and never with ``-q``."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def error_text(exc: SamplingMaskError) -> str:
    """The message and its context, without the code prefix (the caller prints the code)."""
    text = str(exc)
    prefix = f"{exc.code.value}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def histogram_lines(buckets: list[dict[str, Any]], width: int = 40) -> list[str]:
    peak = max((b["rows"] for b in buckets), default=0)
    lines = []
    for b in buckets:
        bar = "#" * (math.ceil(b["rows"] / peak * width) if b["rows"] else 0)
        lines.append(f"{b['sizes']:>11}  {bar:<{width}}  {b['rows']:,} ({b['fraction']:.1%})")
    return lines


def support_line(support: dict[str, Any]) -> str:
    if not support["rows"]:
        return "no row has a support"
    return (
        f"singletons {support['singleton_fraction']:.1%}  median {fmt_num(support['median'])}  "
        f"mean {fmt_num(support['mean'])}  p90 {fmt_num(support['p90'])}  p99 {fmt_num(support['p99'])}  "
        f"max {fmt_num(support['max'])}"
    )


def require_matplotlib() -> None:
    """``E_UNAVAILABLE`` (a :class:`CliError`) unless matplotlib can be imported (``--plot``)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError("E_UNAVAILABLE", "--plot needs matplotlib (pip install 'sampling-mask[plot]')") from None


def save_png(fig: Any, path: Path) -> None:
    """Write a matplotlib figure as a PNG and close it (``E_IO`` when the file cannot be written)."""
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, format="png", dpi=100)
    except OSError as exc:
        raise CliError("E_IO", f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
