"""The ``sampling-mask`` command line: demo, inspect, validate, convert, stats, vendor, audit, conformance, bench.

One module per command (``cli/<command>.py``: ``add_parser`` and ``run``); ``_common`` holds the output,
error and argument plumbing, ``_source`` the input files. ``sampling_mask.cli:main`` is the entry point.

Exit status: 0 success; 1 the answer is "no" (``validate`` found the file invalid, a ``demo``
round trip or check failed); 2 a usage error (a bad flag, a missing file, an unknown extension, a corrupt or
unreadable input, a missing optional dependency), reported as ONE line on stderr
``sampling-mask: error: CODE: message``; 3 an internal error (a bug). ``--debug`` adds tracebacks.

CODE is a spec error code (``E_ENCODING``, ``E_SCHEMA``...) when the data is at fault, else one of the
command line's own: ``E_USAGE`` (flags), ``E_IO`` (a file cannot be read or written), ``E_UNAVAILABLE``
(an optional part is not installed). Only the standard library and numpy load at import; pyarrow,
torch and matplotlib load inside the commands that need them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence

from ..core.errors import SamplingMaskError
from ..core.optional import UnavailableError
from . import audit, bench, conformance, convert, demo, inspect, stats, validate, vendor
from ._common import OPTIONAL_EXTRAS, PROG, CliError, Parser, error_text, missing_dependency, out, print_json

__all__ = ["build_parser", "main"]

#: Subcommands handed whole to another module's ``main(argv)``: name -> (entry, help).
DELEGATED: dict[str, tuple[Callable[[list[str]], int | None], str]] = {
    "conformance": (conformance.main, conformance.HELP),
    "bench": (bench.main, bench.HELP),
}


def _delegate(command: str, argv: list[str]) -> int:
    """``main(argv)`` of the module that owns ``command``; its exit status (argparse's included)."""
    entry = DELEGATED[command][0]
    try:
        status = entry(argv)
    except SystemExit as exc:  # --help or a usage error inside the delegate's argparse
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    return int(status or 0)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command this module runs itself (the delegated ones take their own argv)."""
    base = Parser(add_help=False)
    base.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    base.add_argument(
        "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bar or chatter"
    )
    common = Parser(add_help=False, parents=[base])  # and the flags of commands that read mask files
    common.add_argument(
        "--local-limits",
        action="store_true",
        default=argparse.SUPPRESS,
        help="read input files under LOCAL_FILE_LIMITS (trusted local files of a large run) instead of the "
        "defaults, which refuse a decode of over 2^28 rows, 2^32 ids or 16 GiB",
    )
    common.add_argument(
        "--untrusted-limits",
        action="store_true",
        default=argparse.SUPPRESS,
        help="read input files as a network service reads a body: under Limits.for_untrusted_input(file size), "
        "so that no file grows the command's peak memory by more than max(16 x its size, 64 MiB)",
    )
    from .. import __version__

    parser = Parser(
        prog=PROG,
        parents=[common],
        description="Sampling masks for LLM reinforcement learning: inspect, validate, convert and "
        "benchmark files in the sampling-mask format (spec v1).",
        epilog="Exit status: 0 ok, 1 invalid (validate) or a failed round trip (demo), 2 usage error, "
        "3 internal error.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for command in (demo, inspect, validate, convert, stats, vendor, audit):
        command.add_parser(sub, common if getattr(command, "USES_LIMITS", True) else base)
    for name, (_entry, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.add_argument("args", nargs=argparse.REMAINDER)
    return parser


def _split_delegated(argv: Sequence[str]) -> tuple[list[str], str, list[str]] | None:
    """(global flags, command, rest) when the command is handed to another module, else None."""
    for i, token in enumerate(argv):
        if token in ("--debug", "-q", "--quiet", "--local-limits", "--untrusted-limits"):
            continue
        if token in DELEGATED:
            return list(argv[:i]), token, list(argv[i + 1 :])
        return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it).

    Errors are one line on stderr; with ``--json`` the same code and message are also printed on
    stdout as ``{"error": {"code": ..., "message": ...}}``, so stdout is JSON on every path.
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    delegated = _split_delegated(args_list)
    debug = "--debug" in (delegated[0] if delegated else args_list)
    as_json = delegated is None and "--json" in args_list
    try:
        if delegated is not None:
            return _delegate(delegated[1], delegated[2])
        parser = build_parser()
        try:
            args = parser.parse_args(args_list)
        except SystemExit as exc:  # --help and --version
            return exc.code if isinstance(exc.code, int) else 0
        debug = bool(getattr(args, "debug", False))
        args.quiet = bool(getattr(args, "quiet", False))
        status: int = args.func(args)
        sys.stdout.flush()
        return status
    except CliError as exc:
        return _report(exc.code, exc.message, debug=debug, as_json=as_json)
    except SamplingMaskError as exc:
        return _report(exc.code.value, error_text(exc), debug=debug, as_json=as_json)
    except UnavailableError as exc:
        return _report(exc.code, exc.message, debug=debug, as_json=as_json)
    except ModuleNotFoundError as exc:
        if exc.name not in OPTIONAL_EXTRAS:
            return _internal_error(exc, debug=debug, as_json=as_json)
        return _report("E_UNAVAILABLE", missing_dependency(exc.name), debug=debug, as_json=as_json)
    except KeyboardInterrupt:
        out("{prog}: interrupted", err=True, prog=PROG)
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): not an error; silence the flush at exit.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, traceback on --debug
        return _internal_error(exc, debug=debug, as_json=as_json)


def _report(code: str, message: str, *, debug: bool, as_json: bool, status: int = 2) -> int:
    """One line ``sampling-mask: error: CODE: message`` on stderr (``internal error: message`` for a bug,
    status 3), and with ``--json`` the error as JSON on stdout; returns ``status``."""
    if debug:
        import traceback

        traceback.print_exc()
    if status == 3:
        out("{prog}: internal error: {message}", err=True, prog=PROG, message=message)
    else:
        out("{prog}: error: {code}: {message}", err=True, prog=PROG, code=code, message=message)
    if as_json:
        print_json({"error": {"code": code, "message": message}})
    return status


def _internal_error(exc: BaseException, *, debug: bool, as_json: bool) -> int:
    message = f"{type(exc).__name__}: {exc} (a bug; rerun with --debug for the traceback)"
    return _report("E_INTERNAL", message, debug=debug, as_json=as_json, status=3)
