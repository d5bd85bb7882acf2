"""``sampling-mask stats --plot`` (issue 28): the support-size axis starts at 1 with integer ticks, the
bars are the text histogram's buckets, and the per-segment panel counts whole segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sampling_mask as sm
from sampling_mask.cli import main
from sampling_mask.cli import stats as stats_cli


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
