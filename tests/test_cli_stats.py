"""``sampling-mask stats`` and ``data.stats``: support figures from a histogram equal numpy's, the
per-segment figures are exact whether computed at once or a chunk at a time (and ``--json`` writes
them in chunks), the library's summary is the command's document, and ``--plot`` starts its
support-size axis at 1 with integer ticks, draws the text histogram's buckets and counts whole
segments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_run import run, tiny_mask

import sampling_mask as sm
from sampling_mask.cli import main
from sampling_mask.cli import stats as stats_cli
from sampling_mask.data.stats import histogram_buckets, summarize, support_from_counts


@pytest.mark.parametrize("rows", [[[5]], [[5], [1, 2], [3, 4, 6], list(range(9)), []]])
def test_the_plot_axes_are_whole_sizes_and_whole_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[list[int]]
) -> None:
    pytest.importorskip("matplotlib")
    figures: list[Any] = []
    monkeypatch.setattr(stats_cli, "save_png", lambda fig, path: figures.append(fig))
    path = tmp_path / "m.json"
    sm.save(sm.SamplingMask.from_rows(rows, cu_seqlens=[0, len(rows)] if len(rows) == 1 else [0, 2, len(rows)]), path)
    assert main(["-q", "stats", str(path), "--plot", str(tmp_path / "p.png")]) == 0
    (fig,) = figures
    left, right = fig.axes
    fig.canvas.draw()
    lo, hi = left.get_xlim()
    assert lo == pytest.approx(1.0) and hi > max(map(len, rows))  # from 1, never 2^-1
    ticks = left.get_xticks()
    assert ticks.min() >= 1 and np.allclose(ticks, np.round(ticks))
    assert [t.get_text() for t in left.get_xticklabels()] == [f"{int(t):,}" for t in ticks]
    assert len(left.xaxis.get_minorticklocs()) == 0
    # The bars: buckets 1, 2, 3-4, 5-8, 9-16 start at those sizes and hold the rows of that bucket.
    bars = [(p.get_x(), p.get_height()) for p in left.patches if p.get_height() > 0]
    lengths = np.array([len(r) for r in rows if r])
    starts = {1: 1, 2: 2, 3: 3, 4: 3, 9: 9}
    expected = {float(starts[int(n)]): 0 for n in lengths}
    for n in lengths:
        expected[float(starts[int(n)])] += 1
    assert sorted(bars) == sorted(expected.items())
    segment_ticks = right.get_yticks()
    assert np.allclose(segment_ticks, np.round(segment_ticks))  # never half a segment
    fig.clf()


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


@pytest.mark.slow
def test_stats_per_segment_and_plot(cli_files: dict[str, Path], tmp_path: Path) -> None:
    mask = tiny_mask()
    png = tmp_path / "hist.png"
    proc = run("stats", cli_files["arrows"], "--json", "--plot", png)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    per_segment = report["per_segment"]
    assert per_segment["rows"] == np.diff(mask.cu_seqlens).tolist()
    assert per_segment["ids"] == [mask.segment(b).nnz for b in range(mask.num_segments)]
    assert per_segment["mean_support"][1] is None  # the empty segment has no support figure
    counts = np.bincount(mask.row_lengths)
    assert report["support_size_counts"] == {str(k): int(c) for k, c in enumerate(counts) if k and c}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    human = run("stats", cli_files["arrows"], "--segments", "2")
    assert human.returncode == 0
    assert "3 more segments" in human.stdout
    # The library gives the same document, from the whole mask or batch by batch.
    library = {"file": str(cli_files["arrows"]), "format": "arrows", **summarize(mask).to_dict(), "plot": str(png)}
    assert json.loads(json.dumps(library)) == report
    halves = summarize([mask.take(np.arange(0, 2)), mask.take(np.arange(2, mask.num_segments))])
    assert halves.to_dict() == summarize(mask).to_dict()


def test_per_segment_figures_are_exact_chunk_by_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 7 segments / 50 rows (one long segment from its histogram), kept, spooled or both,
    give every segment's figures as a per-segment reference computes them."""
    from sampling_mask.data import stats

    monkeypatch.setattr(stats, "_CHUNK_SEGMENTS", 7)
    monkeypatch.setattr(stats, "_CHUNK_ROWS", 50)
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 6, 300) * (rng.random(300) < 0.7)
    rows = [list(range(int(n))) for n in lengths]
    cu = [0, *sorted(rng.integers(0, 300, 30).tolist()), 120, 120, 300]  # an empty segment, a long one
    mask = sm.SamplingMask.from_rows(rows, cu_seqlens=sorted(cu))
    reference: dict[str, list[Any]] = {k: [] for k in stats.SEGMENT_FIELDS}
    for b in range(mask.num_segments):
        seg = np.diff(mask.segment(b).offsets)
        have = seg[seg > 0]
        reference["rows"].append(seg.size)
        reference["empty_rows"].append(int((seg == 0).sum()))
        reference["ids"].append(int(seg.sum()))
        reference["mean_support"].append(float(have.mean()) if have.size else None)
        reference["median_support"].append(float(np.median(have)) if have.size else None)
        reference["max_support"].append(int(have.max()) if have.size else 0)
    for options in ({}, {"spool": True}, {"keep": 0, "spool": True}):
        summary = stats.SupportSummary(**options)  # type: ignore[arg-type]
        summary.add(mask)
        assert summary.to_dict()["per_segment"] == reference, options
    head = stats.SupportSummary(keep=5)
    head.add(mask)
    assert {k: v.tolist() for k, v in head.per_segment().items()}["rows"] == reference["rows"][:5]
    assert head.segment_rows() == {
        "min": 0,
        "median": float(np.median(reference["rows"])),
        "max": max(reference["rows"]),
    }


def test_stats_json_per_segment_is_written_in_chunks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``stats --json`` of 70,000 segments (more than one chunk): every value, NaN as null."""
    from sampling_mask.data import stats

    cu = np.concatenate(([0], np.repeat(np.arange(1, 35_001), 2)))  # 70,000 segments, every other empty
    mask = sm.SamplingMask.from_rows([[i % 7] if i % 3 else [] for i in range(35_000)], cu_seqlens=cu)
    sm.save(mask, tmp_path / "m.msgpack")
    assert main(["stats", str(tmp_path / "m.msgpack"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = stats.summarize(mask).to_dict()
    assert report["per_segment"] == expected["per_segment"] and len(report["per_segment"]["rows"]) == 70_000
