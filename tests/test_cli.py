"""The ``sampling-mask`` console script, driven in a subprocess for every command and error path.

Subprocess start-up costs about 0.3 s, so each invocation checks as much as it can; the pure
helpers (quantiles from a histogram, re-batching) are tested in-process.
"""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sampling_mask
import sampling_mask.codecs
from sampling_mask import SamplingMask
from sampling_mask.cli._common import Progress
from sampling_mask.cli.convert import _rebatch
from sampling_mask.data.stats import histogram_buckets, summarize, support_from_counts

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

SCRIPT = shutil.which("sampling-mask")


def run(
    *args: str | Path, stderr_tty: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None, "the console script is not installed: pip install -e ."
    cmd = [SCRIPT, *map(str, args)]
    if not stderr_tty:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=follower, text=True, timeout=300)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout, b"".join(chunks).decode())


def one_error_line(proc: subprocess.CompletedProcess[str], code: str) -> str:
    """A person's error: exit 2, exactly one line on stderr naming the code, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"sampling-mask: error: {code}: "), lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def tiny_mask(seed: int = 0, rows: int = 40) -> SamplingMask:
    """Rows of 0..6 ids (some empty) in 5 segments, one of them empty, with companions and metadata."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 7, size=rows)
    lengths[:3] = [1, 0, 6]
    rows_list = [sorted(rng.choice(100, size=k, replace=False).tolist()) for k in lengths]
    sampled = np.array([r[len(r) // 2] if r else -1 for r in rows_list], dtype=np.int32)
    return SamplingMask.from_rows(
        rows_list,
        cu_seqlens=[0, 7, 7, 20, 33, rows],
        vocab_size=100,
        sampled_token_ids=sampled,
        sampled_logprobs=np.full(rows, -0.5, dtype=np.float32),
        metadata={"top_k": 6, "producer": "test_cli"},
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli")
    mask = tiny_mask()
    arrows = folder / "mask.arrows"
    sampling_mask.save(mask, arrows)
    data = arrows.read_bytes()
    corrupt = folder / "corrupt.arrows"
    corrupt.write_bytes(data[: len(data) // 2])
    unknown = folder / "mask.bin"
    unknown.write_bytes(data)
    as_json = folder / "mask.json"
    sampling_mask.save(mask, as_json)
    return {"folder": folder, "arrows": arrows, "corrupt": corrupt, "unknown": unknown, "json": as_json}


# ---------------------------------------------------------------------------- pure helpers (in-process)
def test_support_figures_from_a_histogram_match_numpy() -> None:
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(0, 50, size=997), [0, 0, 1, 300]])
    got = support_from_counts(np.bincount(lengths))
    supported = lengths[lengths > 0]
    assert got["rows"] == supported.size
    assert got["singleton_fraction"] == pytest.approx(np.mean(supported == 1))
    assert got["mean"] == pytest.approx(supported.mean())
    for key, q in (("median", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert got[key] == pytest.approx(np.quantile(supported, q)), key
    assert got["max"] == 300
    buckets = histogram_buckets(np.bincount(lengths))
    assert sum(b["rows"] for b in buckets) == supported.size
    assert [b["sizes"] for b in buckets[:4]] == ["1", "2", "3-4", "5-8"]
    assert buckets[2]["rows"] == np.count_nonzero((supported >= 3) & (supported <= 4))
    assert support_from_counts(np.array([5]))["median"] is None  # only empty rows: no support figure


def test_rebatch_cuts_between_segments_and_keeps_every_row() -> None:
    mask = tiny_mask(rows=40)
    parts = list(_rebatch([mask, mask[:10]], 12))
    assert sampling_mask.concat(parts) == sampling_mask.concat([mask, mask[:10]])
    assert all(p.num_rows >= 12 for p in parts[:-1])
    # Input segments have 7, 0, 13, 13, 7 rows, then 7, 0, 3: cuts fall only between segments.
    assert [(p.num_rows, p.num_segments) for p in parts] == [(20, 3), (13, 1), (14, 2), (3, 2)]


# ---------------------------------------------------------------------------- the console script
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
    # the table says why its bytes per token exceed the README's (issue 28): companions and headers
    assert "3 companions (sampled_token_ids, sampled_logprobs, temperature: 12 B/token)" in proc.stdout


def test_inspect_reports_the_files_figures(files: dict[str, Path]) -> None:
    mask = tiny_mask()
    proc = run("inspect", files["arrows"], "--json")
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
    assert report["bytes_per_token"] == pytest.approx(files["arrows"].stat().st_size / mask.num_rows)
    assert sorted(report["companions"]) == ["sampled_logprobs", "sampled_token_ids"]
    human = run("inspect", files["arrows"])
    assert human.returncode == 0
    assert f"{mask.num_rows} in {mask.num_segments} segments" in human.stdout
    assert "producer='test_cli'" in human.stdout and "#" in human.stdout  # metadata and histogram


def test_stats_per_segment_and_plot(files: dict[str, Path], tmp_path: Path) -> None:
    mask = tiny_mask()
    png = tmp_path / "hist.png"
    proc = run("stats", files["arrows"], "--json", "--plot", png)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    per_segment = report["per_segment"]
    assert per_segment["rows"] == np.diff(mask.cu_seqlens).tolist()
    assert per_segment["ids"] == [mask.segment(b).nnz for b in range(mask.num_segments)]
    assert per_segment["mean_support"][1] is None  # the empty segment has no support figure
    counts = np.bincount(mask.row_lengths)
    assert report["support_size_counts"] == {str(k): int(c) for k, c in enumerate(counts) if k and c}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    human = run("stats", files["arrows"], "--segments", "2")
    assert human.returncode == 0
    assert "3 more segments" in human.stdout
    # The library gives the same document, from the whole mask or batch by batch.
    library = {"file": str(files["arrows"]), "format": "arrows", **summarize(mask).to_dict(), "plot": str(png)}
    assert json.loads(json.dumps(library)) == report
    halves = summarize([mask.take(np.arange(0, 2)), mask.take(np.arange(2, mask.num_segments))])
    assert halves.to_dict() == summarize(mask).to_dict()


def test_local_limits_flag_reads_under_local_file_limits(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process, with the defaults shrunk below the file's 40 rows: refused with a hint, then read
    # under LOCAL_FILE_LIMITS with --local-limits (before or after the command).
    from sampling_mask import cli
    from sampling_mask.cli import _source

    monkeypatch.setattr(_source, "DEFAULT_LIMITS", sampling_mask.DEFAULT_LIMITS.replace(max_rows=10))
    for path in (files["arrows"], files["json"]):
        assert cli.main(["inspect", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("sampling-mask: error: E_LIMIT: ") and "--local-limits" in err
        assert cli.main(["--local-limits", "inspect", str(path)]) == 0
        assert cli.main(["inspect", str(path), "--local-limits"]) == 0
        assert "rows          40 in 5 segments" in capsys.readouterr().out


def test_validate_accepts_a_valid_file_with_its_sampled_ids(files: dict[str, Path]) -> None:
    mask = tiny_mask()
    sampled = files["folder"] / "sampled.json"
    sampled.write_text(json.dumps(np.asarray(mask.sampled_token_ids).tolist()))
    proc = run("validate", files["arrows"], "--vocab-size", "100", "--sampled", sampled)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        proc.stdout.startswith("valid: ")
        and "checked every invariant of the spec: header, offsets, segments, ids, companions, user columns, vocab_size, sampled_token_ids"
        in proc.stdout
    )


def test_validate_names_code_row_segment_and_value(files: dict[str, Path]) -> None:
    mask = tiny_mask()
    # --vocab-size below an id the file holds (as a file that declares no vocab_size)
    undeclared = files["folder"] / "undeclared.arrows"
    sampling_mask.save(mask.replace(vocab_size=None), undeclared)
    proc = run("validate", undeclared, "--vocab-size", "50", "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    first = int(np.flatnonzero([any(i >= 50 for i in r) for r in mask.to_rows()])[0])
    segment = int(np.searchsorted(mask.cu_seqlens, first, side="right")) - 1
    assert (error["code"], error["row"], error["segment"]) == ("E_RANGE", first, segment)
    assert error["value"] >= 50
    # a sampled id missing from its row, in a .npy file
    sampled = np.array(mask.sampled_token_ids)
    sampled[25] = next(i for i in range(100) if i not in mask.row(25))
    npy = files["folder"] / "sampled.npy"
    np.save(npy, sampled)
    proc = run("validate", files["arrows"], "--sampled", npy)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"invalid: {files['arrows']}: E_MISSING_SAMPLED: ")
    assert "segment 3, row 25, row in segment 5" in proc.stdout and f"offending value {sampled[25]}" in proc.stdout


def test_validate_reports_a_corrupt_file_as_invalid(files: dict[str, Path]) -> None:
    proc = run("validate", files["corrupt"], "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["valid"] is False and doc["error"]["code"] == "E_ENCODING"


def test_validate_never_unpickles_the_sampled_file(files: dict[str, Path]) -> None:
    pickled = files["folder"] / "pickled.npy"
    np.save(pickled, np.array([1, "x", None], dtype=object), allow_pickle=True)
    proc = run("validate", files["arrows"], "--sampled", pickled)
    assert proc.returncode == 1 and proc.stderr == ""  # bad data, not a usage error
    assert proc.stdout.startswith(f"invalid: {pickled}: E_ENCODING: ") and "allow_pickle=False" in proc.stdout


def test_validate_blames_the_sampled_file_for_its_own_faults(files: dict[str, Path]) -> None:
    """A sampled-ids file of the wrong length, of floats or of another shape is invalid data (exit 1)
    named after that file, not after the mask file."""
    mask = tiny_mask()
    folder, arrows = files["folder"], files["arrows"]
    sampled = np.asarray(mask.sampled_token_ids)
    short, floats, matrix, words = (folder / n for n in ("short.json", "floats.npy", "matrix.npy", "words.json"))
    short.write_text(json.dumps(sampled[:-1].tolist()))
    np.save(floats, sampled.astype(np.float64))
    np.save(matrix, sampled.reshape(1, -1))
    words.write_text(json.dumps({"ids": sampled.tolist()}))
    cases = [
        (short, "E_SHAPE", f"holds {mask.num_rows - 1} sampled ids, but {str(arrows)!r} has more rows"),
        (floats, "E_DTYPE", "float64"),
        (matrix, "E_DTYPE", "1-D integer array"),
        (words, "E_DTYPE", "JSON list of integers"),
    ]
    for sidecar, code, needle in cases:
        proc = run("validate", arrows, "--sampled", sidecar)
        assert proc.returncode == 1 and proc.stderr == "", (sidecar, proc.stderr)
        assert proc.stdout.startswith(f"invalid: {sidecar}: {code}: ") and needle in proc.stdout, proc.stdout
        doc = json.loads(run("validate", arrows, "--sampled", sidecar, "--json").stdout)
        assert doc["valid"] is False and doc["file"] == str(arrows)
        assert (doc["error"]["file"], doc["error"]["code"]) == (str(sidecar), code)
    huge = folder / "huge.json"
    huge.write_text(json.dumps([1 << 70] * mask.num_rows))
    proc = run("validate", arrows, "--sampled", huge)
    assert proc.returncode == 1 and proc.stdout.startswith(f"invalid: {huge}: E_RANGE: ")
    longer = folder / "long.json"
    longer.write_text(json.dumps([*sampled.tolist(), 1]))
    proc = run("validate", arrows, "--sampled", longer)
    assert proc.returncode == 1 and proc.stdout.startswith(f"invalid: {longer}: E_SHAPE: ")
    # Still usage errors (exit 2): a sampled-ids file that is missing or of another kind.
    one_error_line(run("validate", arrows, "--sampled", folder / "missing.json"), "E_IO")
    one_error_line(run("validate", arrows, "--sampled", folder / "mask.bin"), "E_USAGE")


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
def test_json_output_is_json_on_error_paths_too(files: dict[str, Path], args: tuple[str, ...], code: str) -> None:
    proc = run(*(a.format(**files) for a in args))
    line = one_error_line(proc, code)  # exit status and the stderr line unchanged
    doc = json.loads(proc.stdout)
    assert doc == {"error": {"code": code, "message": line.split(f"{code}: ", 1)[1]}}
    assert run(*(a.format(**files) for a in args if a != "--json")).stdout == ""  # plain text: stdout stays empty


def test_convert_arrow_stream_parquet_and_back(files: dict[str, Path], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    mask = tiny_mask()
    parquet = tmp_path / "m.parquet"
    proc = run("convert", files["arrows"], parquet, "--batch-rows", "12", "--compression", "zstd")
    assert proc.returncode == 0, proc.stderr
    assert f"{mask.num_rows} rows" in proc.stdout
    assert pq.ParquetFile(parquet).metadata.num_row_groups == 3  # 20 | 13 | 7 rows, cut between segments
    back = tmp_path / "back.arrows"
    proc = run("-q", "convert", parquet, back)
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    assert sampling_mask.load(back) == mask
    assert oct(back.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def msgpack_layout(path: Path) -> str:
    msgpack = pytest.importorskip("msgpack")
    return str(msgpack.unpackb(path.read_bytes())["layout"])


def test_convert_to_whole_file_formats(files: dict[str, Path], tmp_path: Path) -> None:
    mask = tiny_mask()
    proc = run("convert", files["arrows"], tmp_path / "m.msgpack", "--layout", "compact")
    assert proc.returncode == 0, proc.stderr
    assert sampling_mask.load(tmp_path / "m.msgpack") == mask
    assert msgpack_layout(tmp_path / "m.msgpack") == "compact"
    one_error_line(run("convert", files["arrows"], tmp_path / "m.json", "--layout", "compact"), "E_USAGE")
    pq = pytest.importorskip("pyarrow.parquet")
    proc = run("convert", files["arrows"], tmp_path / "c.parquet", "--layout", "compact")
    assert proc.returncode == 0, proc.stderr
    assert pq.read_schema(tmp_path / "c.parquet").metadata[b"sampling_mask.layout"] == b"compact"
    assert sampling_mask.load(tmp_path / "c.parquet") == mask.canonical()
    rows = tmp_path / "rows.json"
    one_error_line(run("convert", files["arrows"], rows, "--to", "json-rows"), "E_SCHEMA")
    assert not rows.exists() and not list(tmp_path.glob(".*partial"))  # nothing half-written
    proc = run("convert", files["arrows"], rows, "--to", "json-rows", "--allow-loss")
    assert proc.returncode == 0
    assert json.loads(rows.read_text()) == mask.to_rows()


def test_convert_shows_progress_on_a_terminal_only(files: dict[str, Path], tmp_path: Path) -> None:
    proc = run("convert", files["arrows"], tmp_path / "m.arrow", stderr_tty=True)
    assert proc.returncode == 0
    assert "\rconvert" in proc.stderr and "40 rows" in proc.stderr  # the bar, redrawn in place
    quiet = run("-q", "convert", files["arrows"], tmp_path / "n.arrow", stderr_tty=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
    piped = run("convert", files["arrows"], tmp_path / "o.arrow")
    assert piped.returncode == 0 and piped.stderr == ""


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
    files: dict[str, Path], args: tuple[str, ...], code: str, needle: str
) -> None:
    line = one_error_line(run(*(a.format(**files) for a in args)), code)
    assert needle in line


def test_debug_shows_the_traceback(files: dict[str, Path]) -> None:
    proc = run("--debug", "inspect", files["corrupt"])
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("sampling-mask: error: E_")


def test_unknown_extension_is_read_with_format(files: dict[str, Path]) -> None:
    proc = run("inspect", files["unknown"], "--format", "arrows", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["rows"] == tiny_mask().num_rows


def test_demo_and_inspect_without_the_optional_dependencies(files: dict[str, Path], tmp_path: Path) -> None:
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
    assert "needs pyarrow" in one_error_line(run("inspect", files["arrows"], env=env), "E_UNAVAILABLE")


def test_conformance_gets_its_arguments() -> None:
    proc = run("conformance", "--list")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) > 10 and all("\t" in line for line in proc.stdout.splitlines())


def test_bench_gets_its_arguments() -> None:
    proc = run("bench", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout
