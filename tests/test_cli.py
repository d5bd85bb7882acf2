"""The ``sampling-mask`` console script as a whole, driven in a subprocess: every command is listed
and starts, a person's error is one line with its code (``--json``: a JSON document too), ``--debug``
shows the traceback, progress is drawn on a terminal only, and a numpy-only install still runs
``demo`` and names what ``inspect`` needs. Each command's own tests are in ``test_cli_<command>.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import one_error_line, run, tiny_mask

import sampling_mask
import sampling_mask.codecs
from sampling_mask.cli._common import Progress

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds


def test_help_lists_every_command_and_module_entry_point_runs() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for command in ("demo", "inspect", "validate", "convert", "stats", "conformance", "bench"):
        assert f"    {command}" in proc.stdout, command
    module = subprocess.run(
        [sys.executable, "-m", "sampling_mask", "--version"], capture_output=True, text=True, timeout=300
    )
    assert module.returncode == 0 and module.stdout.strip() == f"sampling-mask {sampling_mask.__version__}"


def test_demo_writes_every_format_reads_each_back_and_scores(tmp_path: Path) -> None:
    proc = run("demo", "--tokens", "300", "--out", tmp_path, "--score-rows", "16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()}
    for fmt in sampling_mask.codecs.FORMATS:
        assert fmt in table, fmt
        assert "OK" in table[fmt], table[fmt]
        # bytes per token is the file's size over the rollout's 300 rows
        assert float(table[fmt][2]) == pytest.approx(int(table[fmt][1].replace(",", "")) / 300, abs=0.01)
    assert (tmp_path / "rollout.arrows").is_file()
    assert sampling_mask.load(tmp_path / "rollout.arrows").num_rows == 300
    assert "equal to a float64 recomputation: OK; masked >= full: OK" in proc.stdout
    assert "round trips:" in proc.stdout and "FAILED" not in proc.stdout
    # the table says why its bytes per token exceed the headline figure's: companions and headers
    assert "3 companions (sampled_token_ids, sampled_logprobs, temperature: 12 B/token)" in proc.stdout


def test_inspect_reports_the_files_figures(cli_files: dict[str, Path]) -> None:
    mask = tiny_mask()
    proc = run("inspect", cli_files["arrows"], "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    lengths = mask.row_lengths
    supported = lengths[lengths > 0]
    assert report["format"] == "arrows" and report["spec_version"] == 1
    assert (report["rows"], report["segments"], report["nnz"]) == (mask.num_rows, mask.num_segments, mask.nnz)
    assert report["empty_rows"] == int(np.count_nonzero(lengths == 0))
    assert report["vocab_size"] == 100 and report["metadata"] == {"top_k": 6, "producer": "test_cli"}
    assert report["support"]["median"] == pytest.approx(np.median(supported))
    assert report["support"]["max"] == int(supported.max())
    assert report["bytes_per_token"] == pytest.approx(cli_files["arrows"].stat().st_size / mask.num_rows)
    assert sorted(report["companions"]) == ["sampled_logprobs", "sampled_token_ids"]
    human = run("inspect", cli_files["arrows"])
    assert human.returncode == 0
    assert f"{mask.num_rows} in {mask.num_segments} segments" in human.stdout
    assert "producer='test_cli'" in human.stdout and "#" in human.stdout  # metadata and histogram


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("inspect", "{folder}/missing.arrows", "--json"), "E_IO"),
        (("validate", "{folder}/missing.arrows", "--json"), "E_IO"),
        (("stats", "{folder}/missing.arrows", "--json"), "E_IO"),
        (("inspect", "{corrupt}", "--json"), "E_ENCODING"),
        (("stats", "{corrupt}", "--json"), "E_ENCODING"),
        (("stats", "{unknown}", "--json"), "E_SCHEMA"),
        (("inspect", "{arrows}", "--json", "--no-such-flag"), "E_USAGE"),
        (("validate", "{arrows}", "--json", "--sampled", "{folder}/missing.npy"), "E_IO"),
    ],
)
def test_json_output_is_json_on_error_paths_too(cli_files: dict[str, Path], args: tuple[str, ...], code: str) -> None:
    proc = run(*(a.format(**cli_files) for a in args))
    line = one_error_line(proc, code)  # exit status and the stderr line unchanged
    doc = json.loads(proc.stdout)
    assert doc == {"error": {"code": code, "message": line.split(f"{code}: ", 1)[1]}}
    assert run(*(a.format(**cli_files) for a in args if a != "--json")).stdout == ""  # plain text: stdout stays empty


def test_progress_uses_tqdm_when_installed(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    progress = Progress("convert", 4, enabled=True)
    assert progress.bar is not None
    progress.update(3, 30)
    progress.update(1, 10)
    progress.close()
    err = capsys.readouterr().err
    assert "convert" in err and "4/4" in err and "40 rows" in err


def test_progress_without_tqdm_is_one_plain_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    progress = Progress("stats", 4, enabled=True)
    assert progress.bar is None
    progress.update(4, 40)
    progress.close()
    err = capsys.readouterr().err
    assert err.startswith("\rstats  4/4 segments, 40 rows") and err.endswith("\n")
    off = Progress("stats", 4, enabled=False)
    off.update(4, 40)
    off.close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("inspect", "{folder}/missing.arrows"), "E_IO", "no such file"),
        (("stats", "{unknown}"), "E_SCHEMA", "--format"),
        (("inspect", "{corrupt}"), "E_ENCODING", "corrupt.arrows"),
        (("inspect", "{arrows}", "--no-such-flag"), "E_USAGE", "--no-such-flag"),
        (("convert", "{arrows}", "{folder}/x.json", "--compression", "zstd"), "E_USAGE", "--compression"),
        (("convert", "{arrows}", "{folder}/no/such/dir/x.arrow"), "E_IO", "no such directory"),
        (("inspect", "{arrows}", "--format", "yaml"), "E_USAGE", "yaml"),
    ],
)
def test_a_persons_error_is_one_line_with_its_code(
    cli_files: dict[str, Path], args: tuple[str, ...], code: str, needle: str
) -> None:
    line = one_error_line(run(*(a.format(**cli_files) for a in args)), code)
    assert needle in line


def test_debug_shows_the_traceback(cli_files: dict[str, Path]) -> None:
    proc = run("--debug", "inspect", cli_files["corrupt"])
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("sampling-mask: error: E_")


def test_unknown_extension_is_read_with_format(cli_files: dict[str, Path]) -> None:
    proc = run("inspect", cli_files["unknown"], "--format", "arrows", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["rows"] == tiny_mask().num_rows


def test_demo_and_inspect_without_the_optional_dependencies(cli_files: dict[str, Path], tmp_path: Path) -> None:
    """A numpy-only install (pyarrow, msgpack, torch, matplotlib shadowed by modules that fail to import)."""
    for name in ("pyarrow", "msgpack", "torch", "matplotlib"):
        (tmp_path / f"{name}.py").write_text(
            f"raise ModuleNotFoundError({'No module named ' + name!r}, name={name!r})\n"
        )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = run("demo", "--tokens", "50", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()}
    assert "OK" in table["json"] and "OK" in table["json-rows"] and "skipped" in table["arrows"]
    assert "pip install 'sampling-mask[arrow]'" in proc.stdout and "scoring skipped: torch" in proc.stdout
    assert "needs pyarrow" in one_error_line(run("inspect", cli_files["arrows"], env=env), "E_UNAVAILABLE")


def test_conformance_gets_its_arguments() -> None:
    proc = run("conformance", "--list")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) > 10 and all("\t" in line for line in proc.stdout.splitlines())


def test_bench_gets_its_arguments() -> None:
    proc = run("bench", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout
