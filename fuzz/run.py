"""Run one atheris fuzz target, write seed corpora, or record a failing input as a regression case.

    python fuzz/run.py --list
    python fuzz/run.py TARGET --seconds 60 [--corpus DIR] [--rss-limit-mb 2048] [-- LIBFUZZER_FLAGS...]
    python fuzz/run.py TARGET --seconds 60 --untrusted   # under Limits.for_untrusted_input, memory asserted
    python fuzz/run.py TARGET --seconds 60 --both        # every input as is, then --untrusted
    python fuzz/run.py TARGET --runs 2000 --both         # exactly 2000 inputs, however long (the smoke test)
    python fuzz/run.py TARGET --replay FILE...          # run inputs once, no fuzzing (no atheris needed)
    python fuzz/run.py --seeds DIR [TARGET...]           # write seed corpora to DIR/<target>/
    python fuzz/run.py --add-regression TARGET FILE...   # copy inputs into fuzz/regressions/<target>/

Fuzzing needs ``atheris``. Only ``sampling_mask`` is instrumented for coverage. The corpus starts
with :func:`targets.seeds` (written into ``--corpus`` when it is empty, else a temporary folder).
Crash / timeout / OOM inputs go to ``--artifacts`` (default: a temporary folder, printed at the end).
Fuzzing stops after ``--seconds`` (default 60) or, with ``--runs N``, after exactly N inputs
(libFuzzer's ``-runs``; no time limit unless ``--seconds`` is given too). Exit status: 0 when the
time or the count ran out without a finding, non-zero otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE / "regressions"


def _targets() -> object:
    sys.path.insert(0, str(HERE))
    import targets

    return targets


def write_seeds(directory: Path, names: list[str]) -> dict[str, int]:
    """Write each target's seeds to ``directory/<target>/<sha1>``; returns the count per target."""
    targets = _targets()
    counts = {}
    for name in names:
        folder = directory / name
        folder.mkdir(parents=True, exist_ok=True)
        data = targets.seeds(name)  # type: ignore[attr-defined]
        for item in data:
            (folder / hashlib.sha1(item).hexdigest()).write_bytes(item)
        counts[name] = len(data)
    return counts


def add_regressions(name: str, files: list[str]) -> None:
    folder = REGRESSIONS / name
    folder.mkdir(parents=True, exist_ok=True)
    for file in files:
        data = Path(file).read_bytes()
        dest = folder / f"{hashlib.sha1(data).hexdigest()[:16]}.bin"
        dest.write_bytes(data)
        print(f"{file} -> {dest.relative_to(HERE.parent)}")


def replay(name: str, files: list[str], *, untrusted: bool = False, both: bool = False) -> int:
    targets = _targets()
    for file in files:
        data = Path(file).read_bytes()
        for mode in (False, True) if both else (untrusted,):
            targets.run_one(name, data, untrusted=mode)  # type: ignore[attr-defined]
        print(f"ok {file}")
    return 0


def _escape(token: bytes) -> str:
    """A libFuzzer dictionary entry body: printable ASCII as is, the rest (and quote, backslash) as \\xNN."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02x}" for b in token)


def _fresh_peak_rss() -> None:
    """Go on in a fork of this process; the parent waits and exits with the fork's status.

    libFuzzer's ``-rss_limit_mb`` checks the peak RSS (``ru_maxrss``), and Linux carries a parent's
    peak over ``exec``: started from a test runner that once held 1.5 GB (the trainer tests), a
    target would start "over the limit". A fork's peak starts at its own size, so the limit is this
    target's again."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        return
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def fuzz(name: str, args: argparse.Namespace, extra: list[str]) -> int:
    import atheris

    with atheris.instrument_imports(include=["sampling_mask"]):  # every module the target reaches
        if name.startswith("adapter_"):  # only these reach an adapter (instrumenting them takes 0.4 s)
            import sampling_mask.adapters  # noqa: F401
        import sampling_mask.codecs.arrow  # noqa: F401
        import sampling_mask.codecs.compact  # noqa: F401
        import sampling_mask.codecs.json  # noqa: F401
        import sampling_mask.codecs.msgpack  # noqa: F401

        targets = _targets()
    if name not in targets.TARGETS:  # type: ignore[attr-defined]
        print(f"unknown target {name!r}; see --list", file=sys.stderr)
        return 2
    run_one = targets.run_one  # type: ignore[attr-defined]

    # The time and count limits are kept here rather than by libFuzzer: libFuzzer ends with exit(),
    # whose C++ static destructors (pyarrow's thread pools) can hang past its own timeout alarm.
    # os._exit skips them. The clock starts at the first input: start-up (instrumentation, loading
    # the corpus) on a busy machine must not eat the fuzzing time. With --runs the N-th input ends
    # the process (libFuzzer's own -runs=N, a backstop, is never reached first).
    seconds = args.seconds if args.seconds is not None else (None if args.runs is not None else 60)
    deadline = float("inf")
    executed = untrusted = 0

    def finish() -> None:
        print(f"Done {executed} runs", file=sys.stderr)
        print(f"untrusted-preset executions: {untrusted}", file=sys.stderr)
        print(f"stat::number_of_executed_units: {executed}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)

    def test_one_input(data: bytes) -> None:
        nonlocal executed, untrusted, deadline
        if not executed and seconds is not None:
            deadline = time.monotonic() + seconds
        if time.monotonic() > deadline:
            finish()
        executed += 1
        run_one(name, data, untrusted=args.untrusted)
        if args.both:
            run_one(name, data, untrusted=True)
        untrusted += args.untrusted or args.both
        if executed == args.runs:
            finish()

    # libFuzzer ends the process with exit(): nothing runs afterwards, so scratch files go inside
    # the artifacts folder when one is given (the caller cleans it), else in a printed temp folder.
    if args.artifacts:
        scratch = Path(args.artifacts) / ".run"
        scratch.mkdir(parents=True, exist_ok=True)
    else:
        scratch = Path(tempfile.mkdtemp(prefix=f"sampling-mask-fuzz-{name}-"))
    corpus = Path(args.corpus) if args.corpus else scratch / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    if not any(corpus.iterdir()):
        for item in targets.seeds(name):  # type: ignore[attr-defined]
            (corpus / hashlib.sha1(item).hexdigest()).write_bytes(item)
    tokens = targets.dictionary(name)  # type: ignore[attr-defined]
    if tokens:
        dict_path = scratch / f"{name}.dict"
        dict_path.write_text("".join(f'"{_escape(token)}"\n' for token in tokens), encoding="ascii")
        extra = [f"-dict={dict_path}", *extra]
    artifacts = Path(args.artifacts) if args.artifacts else scratch / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    flags = [
        *([f"-max_total_time={seconds + 60}"] if seconds is not None else []),  # a backstop; see test_one_input
        f"-rss_limit_mb={args.rss_limit_mb}",
        f"-timeout={args.timeout}",
        f"-artifact_prefix={artifacts}{os.sep}",
        "-print_final_stats=1",
    ]
    if args.runs is not None:
        flags.append(f"-runs={args.runs}")
    print(f"fuzzing {name}: corpus {corpus}, artifacts {artifacts}", flush=True)
    _fresh_peak_rss()
    atheris.Setup([sys.argv[0], *flags, *extra, str(corpus)], test_one_input)
    atheris.Fuzz()  # ends the process
    return 0  # pragma: no cover


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="*")
    parser.add_argument("--list", action="store_true", help="print the target names")
    parser.add_argument("--seconds", type=int, default=None, help="fuzzing time in seconds (default 60 without --runs)")
    parser.add_argument("--runs", type=int, default=None, help="stop after exactly this many inputs (libFuzzer -runs)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048, help="memory blow-up threshold")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    parser.add_argument(
        "--untrusted",
        action="store_true",
        help="decode under Limits.for_untrusted_input(len(input)) and assert its memory bound per input",
    )
    parser.add_argument(
        "--both",
        action="store_true",
        help="run every input as is, then as with --untrusted (one process checks both ways)",
    )
    parser.add_argument("--corpus", help="corpus folder to read and extend (kept)")
    parser.add_argument("--artifacts", help="folder for crash / timeout / OOM inputs")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="run these inputs once through TARGET")
    parser.add_argument("--seeds", metavar="DIR", help="write seed corpora to DIR/<target>/")
    parser.add_argument("--add-regression", action="store_true", help="copy FILEs (after TARGET) into regressions")
    args = parser.parse_args(argv)
    # Fuzzing imports the package itself, under instrumentation: nothing may import it before.
    if args.list:
        print("\n".join(_targets().TARGETS))  # type: ignore[attr-defined]
        return 0
    if args.seeds:
        names = args.target or list(_targets().TARGETS)  # type: ignore[attr-defined]
        for name, count in write_seeds(Path(args.seeds), names).items():
            print(f"{name}: {count} seeds")
        return 0
    if args.add_regression:
        if len(args.target) < 2:
            parser.error("--add-regression needs TARGET FILE...")
        add_regressions(args.target[0], args.target[1:])
        return 0
    if len(args.target) != 1:
        parser.error("name exactly one target (see --list)")
    if args.both and args.untrusted:
        parser.error("--both already runs every input with --untrusted too")
    if args.runs is not None and args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.replay:
        return replay(args.target[0], args.replay, untrusted=args.untrusted, both=args.both)
    return fuzz(args.target[0], args, extra)


if __name__ == "__main__":
    sys.exit(main())
