"""``sampling-mask stats`` and ``validate`` over a directory or glob of files: one report per file,
and entries that are not regular files (a dangling symlink, a FIFO) listed as not read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_run import one_error_line, run, run_module

import sampling_mask as sm
from sampling_mask.codecs import dataset as ds_codec
from sampling_mask.data import synthetic
from sampling_mask.data.stats import summarize

pytest.importorskip("pyarrow")

posix = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX: FIFOs and symlinks")


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[Path, list[str], sm.SamplingMask]:
    mask = synthetic.rollout(3000, seed=11, segment_length=100)
    steps = np.arange(mask.num_segments) % 3
    files = ds_codec.write_dataset(tmp_path / "ds", (mask, {"step": steps}), partition_by=("step",))
    return tmp_path / "ds", files, mask


def test_stats_of_a_directory_reports_each_file_and_the_total(dataset) -> None:
    root, files, mask = dataset
    proc = run("stats", root, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [f["file"] for f in doc["files"]] == sorted(files)
    for entry in doc["files"]:
        assert entry["support"] == summarize(sm.load(entry["file"])).support()
    total = summarize(mask)
    assert doc["total"]["rows"] == mask.num_rows and doc["total"]["nnz"] == mask.nnz
    assert doc["total"]["support"] == pytest.approx(total.support())
    assert doc["failed_files"] == 0
    text = run("stats", str(root / "step=*" / "*.parquet"))
    assert text.returncode == 0 and text.stdout.count(".parquet: ") == len(files)
    assert f"total: {len(files)} of {len(files)} files" in text.stdout


def test_validate_a_glob_reports_each_file_and_fails_on_one_bad_file(dataset) -> None:
    root, files, _mask = dataset
    ok = run("validate", str(root / "**" / "*.parquet"))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("valid: ") == len(files) and f"{len(files)} files checked, 0 invalid" in ok.stdout
    Path(files[1]).write_bytes(b"PAR1 not really")
    bad = run("validate", root, "--json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert doc["invalid_files"] == 1 and not doc["valid"]
    broken = [f for f in doc["files"] if not f["valid"]]
    assert [f["file"] for f in broken] == [files[1]] and broken[0]["error"]["code"] == "E_ENCODING"
    assert sum(f["valid"] for f in doc["files"]) == len(files) - 1
    stats = run("stats", root, "--json")
    assert stats.returncode == 1 and json.loads(stats.stdout)["failed_files"] == 1


def test_directory_usage_errors(tmp_path: Path, dataset) -> None:
    root, files, _mask = dataset
    (tmp_path / "empty").mkdir()
    one_error_line(run("validate", tmp_path / "empty"), "E_IO")
    one_error_line(run("stats", str(tmp_path / "nothing-*.arrow")), "E_IO")
    sidecar = tmp_path / "sampled.json"
    sidecar.write_text("[]")
    one_error_line(run("validate", root, "--sampled", sidecar), "E_USAGE")


@posix
@pytest.mark.slow
def test_cli_lists_dangling_links_and_fifos_as_not_read(tmp_path: Path) -> None:
    """A directory with a dangling symlink and a FIFO is not "valid": both are listed as not read."""
    sm.save(sm.SamplingMask.from_rows([[1], [2, 3]], vocab_size=10), tmp_path / "good.arrow")
    os.symlink("missing.arrow", tmp_path / "dangling.arrow")
    os.mkfifo(tmp_path / "f.arrow")
    proc = run_module("validate", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        f"not read: {tmp_path / 'dangling.arrow'}" in proc.stdout and f"not read: {tmp_path / 'f.arrow'}" in proc.stdout
    )
    assert "3 files checked, 2 invalid (2 not read)" in proc.stdout
    proc = run_module("stats", tmp_path, "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["failed_files"] == 2, proc.stdout
