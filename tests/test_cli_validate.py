"""``sampling-mask validate``: a valid file's line names every check, an invalid one names the code,
row, segment and value; the ``--sampled`` ids file is read without pickle and blamed for its own
faults (exit 1), while a missing one is a usage error (exit 2); a truncated file says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_run import one_error_line, run, run_module, tiny_mask

import sampling_mask


@pytest.mark.slow
def test_validate_accepts_a_valid_file_with_its_sampled_ids(cli_files: dict[str, Path]) -> None:
    mask = tiny_mask()
    sampled = cli_files["folder"] / "sampled.json"
    sampled.write_text(json.dumps(np.asarray(mask.sampled_token_ids).tolist()))
    proc = run("validate", cli_files["arrows"], "--vocab-size", "100", "--sampled", sampled)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        proc.stdout.startswith("valid: ")
        and "checked every invariant of the spec: header, offsets, segments, ids, companions, user columns, vocab_size, sampled_token_ids"
        in proc.stdout
    )


@pytest.mark.slow
def test_validate_names_code_row_segment_and_value(cli_files: dict[str, Path]) -> None:
    mask = tiny_mask()
    # --vocab-size below an id the file holds (as a file that declares no vocab_size)
    undeclared = cli_files["folder"] / "undeclared.arrows"
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
    npy = cli_files["folder"] / "sampled.npy"
    np.save(npy, sampled)
    proc = run("validate", cli_files["arrows"], "--sampled", npy)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"invalid: {cli_files['arrows']}: E_MISSING_SAMPLED: ")
    assert "segment 3, row 25, row in segment 5" in proc.stdout and f"offending value {sampled[25]}" in proc.stdout


@pytest.mark.slow
def test_validate_reports_a_corrupt_file_as_invalid(cli_files: dict[str, Path]) -> None:
    proc = run("validate", cli_files["corrupt"], "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["valid"] is False and doc["error"]["code"] == "E_ENCODING"


@pytest.mark.slow
def test_validate_never_unpickles_the_sampled_file(cli_files: dict[str, Path]) -> None:
    pickled = cli_files["folder"] / "pickled.npy"
    np.save(pickled, np.array([1, "x", None], dtype=object), allow_pickle=True)
    proc = run("validate", cli_files["arrows"], "--sampled", pickled)
    assert proc.returncode == 1 and proc.stderr == ""  # bad data, not a usage error
    assert proc.stdout.startswith(f"invalid: {pickled}: E_ENCODING: ") and "allow_pickle=False" in proc.stdout


@pytest.mark.slow
def test_validate_blames_the_sampled_file_for_its_own_faults(cli_files: dict[str, Path]) -> None:
    """A sampled-ids file of the wrong length, of floats or of another shape is invalid data (exit 1)
    named after that file, not after the mask file."""
    mask = tiny_mask()
    folder, arrows = cli_files["folder"], cli_files["arrows"]
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


@pytest.mark.slow
def test_validate_messages_say_what_was_checked_and_that_a_file_is_truncated(tmp_path: Path) -> None:
    """A valid file's line names the checks; a cut Parquet file says it is truncated and
    names no record batch (the footer is at fault, not a batch)."""
    path = tmp_path / "m.parquet"
    mask = sampling_mask.SamplingMask.from_rows([[1], [2, 3], [4], []], vocab_size=10, cu_seqlens=[0, 1, 2, 3, 4])
    sampling_mask.save(mask, path, extra_columns={"name": ["a", "bb", "ccc", "dddd"]})
    proc = run_module("validate", path)
    assert proc.returncode == 0 and "checked every invariant of the spec: header, offsets" in proc.stdout
    assert "user columns" in proc.stdout
    (tmp_path / "cut.parquet").write_bytes(path.read_bytes()[:-7])
    proc = run_module("validate", tmp_path / "cut.parquet")
    assert proc.returncode == 1 and "truncated" in proc.stdout and "record batch" not in proc.stdout, proc.stdout
