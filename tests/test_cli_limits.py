"""The command line's limits: what it reads and reports under hostile files stays bounded.

- Memory: ``stats`` / ``inspect`` (text and ``--json``) and ``convert`` to JSON forms hold
  O(batch) memory, never a Python object per segment or row of the file: under ``--untrusted-limits``
  each stays within max(16 x file size, 64 MiB) of peak RSS growth (``memory_probe``: every case in a
  fork of a child process, stdout and stderr sent to /dev/null), and a folder of three such files
  within the bound of one (a folder is one budget, not the sum of its files').
- Side files: ``--sampled`` and ``--logits`` are read under the mask's limits, scaled by their own
  size; a ``.npy`` whose header declares ``(0, 2**64)``, ``(2**63, 0)`` or dtype ``S0``, or a
  ``.safetensors`` logits header of such a shape, is refused with a code before numpy sees it
  (``validate`` exits 1, invalid data; ``audit`` 2, an input error; never 3), and a FIFO or a deeply
  nested JSON side file is refused at once.
- The flags: ``--local-limits`` reads a file the defaults refuse; a shape past numpy's index range is
  ``E_LIMIT``, never an internal error.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from cli_run import run_module  # noqa: E402
from memory_probe import child_main, child_results, untrusted_bound_mb  # noqa: E402

import sampling_mask as sm  # noqa: E402
from sampling_mask.cli import main  # noqa: E402

MiB = 1 << 20
posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: FIFOs and symlinks")


# ---------------------------------------------------------------------------------------------- memory
def _empty_segments(fmt: str, segments: int = 1_000_000) -> Callable[[], bytes]:
    """A million empty segments (4.0 MB in msgpack or an Arrow stream)."""

    def build() -> bytes:
        cu = np.zeros(segments + 1, np.int64)
        mask = sm.SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=cu, validate=False)
        return sm.encode(mask, fmt)  # type: ignore[no-any-return]

    return build


def _realistic(megabytes: float = 10.0) -> bytes:
    """A realistic msgpack mask of about ``megabytes`` (synthetic rollout, four companions)."""
    from sampling_mask.data import synthetic

    tokens = int(megabytes * 1e6 / 48)  # about 48 bytes a token in msgpack
    return sm.encode(synthetic.rollout(tokens, seed=1), "msgpack")  # type: ignore[no-any-return]


def _empty_rows(rows: int = 2_250_000) -> bytes:
    """9 MB of empty rows (int32 offsets in msgpack)."""
    return sm.encode(sm.SamplingMask(np.zeros(0, np.int32), np.zeros(rows + 1, np.int64)), "msgpack")  # type: ignore[no-any-return]


def _cli_on(argv: list[str], name: str, copies: int = 0) -> Callable[[bytes], None]:
    """Run ``sampling-mask --untrusted-limits ARGV`` on the payload written as ``name`` (or, with
    ``copies``, a folder of that many copies), stdout / stderr to /dev/null; raise unless exit 0."""

    def call(data: bytes) -> None:
        folder = Path(tempfile.mkdtemp())
        for i in range(copies or 1):
            (folder / (f"{i}{name}" if copies else name)).write_bytes(data)
        target = folder if copies else folder / name
        args = [a.replace("{in}", str(target)).replace("{dir}", str(folder)) for a in argv]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        status = main(["--untrusted-limits", *args])
        if status != 0:
            raise RuntimeError(f"exit {status}")

    return call


#: label -> (payload builder, the command run on it)
MEMORY_CASES: dict[str, tuple[Callable[[], bytes], Callable[[bytes], None]]] = {
    "stats --json, msgpack of 1M empty segments": (_empty_segments("msgpack"), _cli_on(["stats", "{in}", "--json"], "s.msgpack")),
    "stats --json, Arrow stream of 1M empty segments": (_empty_segments("arrows"), _cli_on(["stats", "{in}", "--json"], "s.arrows")),
    "stats, msgpack of 1M empty segments": (_empty_segments("msgpack"), _cli_on(["stats", "{in}"], "s.msgpack")),
    "inspect --json, msgpack of 1M empty segments": (_empty_segments("msgpack"), _cli_on(["inspect", "{in}", "--json"], "s.msgpack")),
    "stats --json, a folder of 3 such files": (_empty_segments("msgpack"), _cli_on(["stats", "{in}", "--json"], "s.msgpack", copies=3)),
    "convert a realistic 10 MB msgpack to .json": (_realistic, _cli_on(["convert", "{in}", "{dir}/out.json"], "r.msgpack")),
    "convert 9 MB of empty rows to json-rows": (_empty_rows, _cli_on(["convert", "{in}", "{dir}/o.json", "--to", "json-rows"], "e.msgpack")),
    "convert 9 MB of empty rows to Parquet": (_empty_rows, _cli_on(["convert", "{in}", "{dir}/o.parquet"], "e.msgpack")),
}  # fmt: skip


def _empty_lists(megabytes: float = 20.0) -> bytes:
    """A JSON side file ``[[],[],...]``: some 25 bytes of Python objects per byte of text."""
    count = int(megabytes * 1e6 / 3)
    return b"[" + b"[]," * (count - 1) + b"[]]"


def _safetensors_padded_header(megabytes: float = 39.0) -> bytes:
    """A logits file: a valid 1 x 4 float32 tensor whose JSON header carries 39 MB of ``[],``."""
    pad = _empty_lists(megabytes)
    header = b'{"logits":{"dtype":"F32","shape":[1,4],"data_offsets":[0,16]},"pad":' + pad + b"}"
    return struct.pack("<Q", len(header)) + header + bytes(16)


LOGITS_SHAPE = (2_000, 10_000)  # 80 MB of float32 logits


def _logits_npy() -> bytes:
    """80 MB of float32 logits [2,000, 10,000] in a .npy file."""
    buffer = io.BytesIO()
    np.save(buffer, np.random.default_rng(0).standard_normal(LOGITS_SHAPE, dtype=np.float32))
    return buffer.getvalue()


def _cli_side(
    argv: list[str], side: str, rows: int = 2, statuses: tuple[int, ...] = (0, 1, 2)
) -> Callable[[bytes], None]:
    """Run ``sampling-mask --untrusted-limits ARGV`` with a small valid mask of ``rows`` rows as
    ``{mask}``, zero logits for it as ``{logits}`` and the payload as the side file ``{side}`` (named
    ``side``); raise unless the exit status is one of ``statuses`` (a refused side file is exit 1
    for validate, 2 for audit)."""

    def call(data: bytes) -> None:
        folder = Path(tempfile.mkdtemp())
        sm.save(sm.SamplingMask.from_rows([[0]] * rows, vocab_size=LOGITS_SHAPE[1]), folder / "m.json")
        np.save(folder / "small.npy", np.zeros((rows, 4), np.float32))
        (folder / side).write_bytes(data)
        names = {"{mask}": "m.json", "{side}": side, "{logits}": "small.npy"}
        args = [str(folder / names[a]) if a in names else a for a in argv]
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        status = main(["--untrusted-limits", *args])
        if status not in statuses:
            raise RuntimeError(f"exit {status}")

    return call


#: label -> (side file builder, the command run on it): each bounded by its mask's bound plus its side
#: file's, max(16 x size, 64 MiB) each.
SIDE_CASES: dict[str, tuple[Callable[[], bytes], Callable[[bytes], None]]] = {
    "validate --sampled, 20 MB of [[],[],...]": (_empty_lists, _cli_side(["validate", "{mask}", "--sampled", "{side}"], "s.json", statuses=(1,))),
    "audit --sampled, 20 MB of [[],[],...]": (_empty_lists, _cli_side(["audit", "{mask}", "--logits", "{logits}", "--sampled", "{side}"], "s.json", statuses=(2,))),
    "audit --logits, 39 MB of [], in a safetensors header": (_safetensors_padded_header, _cli_side(["audit", "{mask}", "--logits", "{side}"], "l.safetensors", statuses=(2,))),
    "audit --logits, 80 MB of logits": (_logits_npy, _cli_side(["audit", "{mask}", "--logits", "{side}"], "l.npy", rows=LOGITS_SHAPE[0], statuses=(0, 1))),
}  # fmt: skip


def _warm_up() -> None:
    """Import and run every path once, so that a case's growth is its own."""
    folder = Path(tempfile.mkdtemp())
    mask = sm.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8, cu_seqlens=[0, 1, 3])
    for fmt in ("msgpack", "arrows"):
        sm.save(mask, folder / f"w.{fmt}")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        for argv in (["stats", "--json"], ["stats"], ["inspect", "--json"]):
            main(["--untrusted-limits", argv[0], str(folder / "w.msgpack"), *argv[1:]])
            main(["--untrusted-limits", argv[0], str(folder / "w.arrows"), *argv[1:]])
        main(["--untrusted-limits", "stats", str(folder), "--json"])
        for out in ("o.json", "o.parquet"):
            main(["--untrusted-limits", "convert", str(folder / "w.msgpack"), str(folder / out)])
        sm.save(sm.SamplingMask.from_rows([[0], [1]], vocab_size=4), folder / "a.json")
        (folder / "s.json").write_text("[0, 1]")
        np.save(folder / "l.npy", np.zeros((2, 4), np.float32))
        (folder / "l.safetensors").write_bytes(_safetensors_padded_header(0.001))
        main(["--untrusted-limits", "validate", str(folder / "a.json"), "--sampled", str(folder / "s.json")])
        for logits in ("l.npy", "l.safetensors"):
            main(["--untrusted-limits", "audit", str(folder / "a.json"), "--logits", str(folder / logits)])


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return child_results(__file__)


@pytest.mark.slow
@pytest.mark.parametrize("label", list(MEMORY_CASES))
def test_reports_stay_within_the_untrusted_bound(results: dict[str, dict[str, Any]], label: str) -> None:
    """Each report and conversion stays within its file's bound (a folder: the bound of one of its
    files), where a Python object per segment or row took 112-713 MiB against bounds of 64-153."""
    event = results[label]
    assert event["code"] == "OK", event
    bound = untrusted_bound_mb(event["size"])
    assert event["rss"] <= bound, f"{label}: peak RSS grew {event['rss']} MiB, bound {bound:.0f} MiB"


_FRESH_PROCESS = """
import os, sys

def peak_mib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmHWM:"))

from sampling_mask.cli import main
before = peak_mib()
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
status = main(["--untrusted-limits", *sys.argv[1:]])
os.write(2, f"{status} {peak_mib() - before} {'pandas' in sys.modules}".encode())
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM from /proc")
def test_a_fresh_conversion_to_parquet_stays_within_the_bound(tmp_path: Path) -> None:
    """9 MB of empty rows to Parquet in a fresh process, growth counted from ``import
    sampling_mask.cli``: what the command loads on the way (pyarrow, its Parquet writer) counts too.
    Handing numpy arrays to ``pa.array`` imported pandas, some 50 MiB (139 MiB against a bound of
    137 where it was measured): the writer never imports it."""
    import subprocess

    pytest.importorskip("pyarrow")
    source = tmp_path / "e.msgpack"
    source.write_bytes(_empty_rows())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-c", _FRESH_PROCESS, "convert", str(source), str(tmp_path / "o.parquet")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    status, growth, pandas = done.stderr.split()[-3:]
    bound = untrusted_bound_mb(source.stat().st_size)
    assert status == "0" and float(growth) <= bound, (done.stderr[-2000:], bound)
    assert pandas == "False", "the conversion imported pandas"
    assert sm.load(tmp_path / "o.parquet").num_rows == 2_250_000


@pytest.mark.slow
@pytest.mark.parametrize("label", list(SIDE_CASES))
def test_side_files_are_bounded_like_masks(results: dict[str, dict[str, Any]], label: str) -> None:
    """``--sampled`` and ``--logits`` are read under the mask's limits, scaled by their own size under
    ``--untrusted-limits`` (the JSON parse's cost and a safetensors header's included), so each
    command stays within the mask's bound plus the side file's (read under the defaults, the 20 MB
    side file takes 525 MiB and the 39 MB header 1,015)."""
    event = results[label]
    assert event["code"] == "OK", event
    bound = untrusted_bound_mb(0) + untrusted_bound_mb(event["size"])  # the small mask's, the side file's
    assert event["rss"] <= bound, f"{label}: peak RSS grew {event['rss']} MiB, bound {bound:.0f} MiB"


# ---------------------------------------------------------------------------------------------- side files
def _npy(path: Path, descr: str, shape: tuple[int, ...], payload: bytes = b"") -> Path:
    """A version 1.0 .npy file whose header declares ``descr`` and ``shape`` (numpy would refuse to write it)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (-(len(text) + 11) % 64) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + payload)
    return path


def _safetensors(path: Path, shape: list[int]) -> Path:
    header = json.dumps({"logits": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


FORGED_NPY = {
    "(0, 2**64)": ("<i8", (0, 1 << 64)),
    "(2**63, 0)": ("<i8", (1 << 63, 0)),
    "(0, 2**62, 2**62)": ("<i8", (0, 1 << 62, 1 << 62)),
    "dtype S0": ("|S0", (4,)),
    "dtype V0": ("|V0", (4,)),
    "(2**64,)": ("<i8", (1 << 64,)),
    "float128": ("<f16", (1, 2)),
}


@pytest.mark.parametrize("label", list(FORGED_NPY))
def test_forged_side_files_are_refused_with_a_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: str
) -> None:
    """``validate --sampled`` exits 1 and ``audit --logits`` 2, both naming a code, never 3."""
    descr, shape = FORGED_NPY[label]
    mask_file = tmp_path / "m.json"
    sm.save(sm.SamplingMask.from_rows([[1, 2], [3]], vocab_size=8), mask_file)
    side = _npy(tmp_path / "x.npy", descr, shape, bytes(64))
    assert main(["validate", str(mask_file), "--sampled", str(side)]) == 1, label
    text = capsys.readouterr().out
    assert text.startswith("invalid: ") and ": E_" in text, text
    pytest.importorskip("torch")
    assert main(["audit", str(mask_file), "--logits", str(side)]) == 2, label
    assert "error: E_" in capsys.readouterr().err


@pytest.mark.parametrize("shape", [[0, 1 << 64], [1 << 63, 0], [0] * 70], ids=["0x2^64", "2^63x0", "70 dims"])
def test_forged_safetensors_logits_are_refused_with_a_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: list[int]
) -> None:
    pytest.importorskip("torch")
    mask_file = tmp_path / "m.json"
    sm.save(sm.SamplingMask.from_rows([[1, 2], [3]], vocab_size=8), mask_file)
    logits = _safetensors(tmp_path / "l.safetensors", shape)
    assert main(["audit", str(mask_file), "--logits", str(logits)]) == 2
    assert "error: E_" in capsys.readouterr().err


@posix
@pytest.mark.slow
def test_side_files_never_block_or_recurse(tmp_path: Path) -> None:
    """``--sampled`` FIFO ``.npy``, ``audit --logits`` FIFO ``.npy`` / ``.safetensors``, and a
    deeply nested ``--sampled`` JSON: E_ENCODING / E_LIMIT at once, exit 1 or 2, a JSON error."""
    pytest.importorskip("torch")
    mask_file = tmp_path / "m.json"
    sm.save(sm.SamplingMask.from_rows([[1], [2, 3], [4], []], vocab_size=10), mask_file)
    for name in ("s.npy", "z.npy", "z.safetensors"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    cases = [
        (["validate", mask_file, "--sampled", tmp_path / "s.npy", "--json"], "E_ENCODING"),
        (["validate", mask_file, "--sampled", tmp_path / "deep.json", "--json"], "E_LIMIT"),
        (["audit", mask_file, "--logits", tmp_path / "z.npy", "--json"], "E_ENCODING"),
        (["audit", mask_file, "--logits", tmp_path / "z.safetensors", "--json"], "E_ENCODING"),
    ]
    for args, code in cases:
        proc = run_module(*args)
        assert proc.returncode in (1, 2), (args, proc.returncode, proc.stderr[-500:])
        doc = json.loads(proc.stdout)
        error = doc.get("error", {})
        assert error.get("code") == code, (args, doc)


# ---------------------------------------------------------------------------------------------- the flags


def test_local_limits_flag_reads_under_local_file_limits(
    cli_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process, with the defaults shrunk below the file's 40 rows: refused with a hint, then read
    # under LOCAL_FILE_LIMITS with --local-limits (before or after the command).
    from sampling_mask import cli
    from sampling_mask.cli import _source

    monkeypatch.setattr(_source, "DEFAULT_LIMITS", sm.DEFAULT_LIMITS.replace(max_rows=10))
    for path in (cli_files["arrows"], cli_files["json"]):
        assert cli.main(["inspect", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("sampling-mask: error: E_LIMIT: ") and "--local-limits" in err
        assert cli.main(["--local-limits", "inspect", str(path)]) == 0
        assert cli.main(["inspect", str(path), "--local-limits"]) == 0
        assert "rows          40 in 5 segments" in capsys.readouterr().out


def test_dense_shape_past_numpy_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dense shape ``[2**64 - 1, 0]``: ``validate`` and ``inspect`` exit 1 or 2 naming ``E_LIMIT``,
    never 3 (``E_INTERNAL``)."""
    msgpack = pytest.importorskip("msgpack")
    dense = {"dtype": "int32", "shape": [(1 << 64) - 1, 0], "data": b""}
    path = tmp_path / "shape.msgpack"
    path.write_bytes(msgpack.packb({"sampling_mask": 1, "layout": "dense", "dense": dense}, use_bin_type=True))
    for command in ("validate", "inspect"):
        assert main([command, str(path)]) in (1, 2), command
        output = capsys.readouterr()
        assert "E_LIMIT" in output.out + output.err and "E_INTERNAL" not in output.out + output.err


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    cases = {**MEMORY_CASES, **SIDE_CASES}
    child_main(((label, build, call) for label, (build, call) in cases.items()), _warm_up)
