"""The benchmark report (sampling_mask.cli.bench): a --quick smoke run with tiny sizes, and its helpers.

No timing is asserted: only that every section runs, reports consistent figures, and that the
helpers the report relies on compute what they claim.
"""

from __future__ import annotations

import importlib.util
import io
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from sampling_mask import SamplingMask
from sampling_mask.cli import bench
from sampling_mask.core import layouts
from sampling_mask.data import synthetic

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str, Path]:
    out = io.StringIO()
    plot = tmp_path_factory.mktemp("bench") / "scaling.png"
    results = bench.run(["--quick", "--rows", "300", "1200", "--repeats", "1", "--plot", str(plot)], out=out)
    return results, out.getvalue(), plot


def test_quick_run_prints_every_section(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    results, text, _ = quick_run
    for number in (1, 2, 3, 4, 5, 7, 8, 9):  # 6, the scorer, is benchmarks/bench_scorer.py
        assert f"\n== {number}. " in text
    assert "\n== 6. " not in text
    assert "machine:" in text and "support size" in text
    assert results["support_stats"]["rows"] == 1200
    assert {"transport", "bitmask", "compact", "bytes_per_token", "conversions", "scaling"} <= set(results)
    assert {"peers", "decode_scaling"} <= set(results)


def test_quick_run_figures_are_consistent(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    results, _, _ = quick_run
    transport = results["transport"]
    assert transport["json_bytes"] > transport["json_tight_bytes"] > 0
    for figures in transport["formats"].values():
        assert figures["bytes"] > 0 and figures["decode_s"] > 0 and figures["trusted_decode_s"] > 0
    assert set(transport["encode"]) == set(transport["encode_over_bytes_copy"]) == set(transport["formats"])
    compact = results["compact"]["uniform"]
    sizes = compact["sizes"]
    # The bound is a lower bound on every encoding of the rows.
    assert all(n > compact["bound"] for n in sizes.values())
    assert sizes["compact"] < sizes["raw ragged (int32 ids + int32 counts)"]
    per_token = results["bytes_per_token"]
    assert per_token["SkyRL dense (4 x top_k = 512 per row)"] == 2048
    stats = results["support_stats"]
    prime = per_token["prime-rl wire (4 B per id + 4 per row)"]
    assert math.isclose(prime, 4 * stats["nnz"] / stats["rows"] + 4)
    scaling = results["scaling"]
    assert set(scaling["compact decode"]) == {300, 1200}


def test_peers_and_decode_scaling_figures(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    results, text, plot = quick_run
    peers = results["peers"]
    # The default wire is int32 offsets (spec 1.2: default output is valid under 1.0; counts=True opts in).
    ours = peers["bytes"]["ours: msgpack ragged (default), validated"]
    assert ours == peers["bytes"]["ours: msgpack int32 offsets, validated"]
    if "msgspec struct, raw CSR bytes" in peers["bytes"]:
        assert peers["bytes"]["msgspec struct, raw CSR bytes"] > ours
    else:
        assert "skipped msgspec rows" in text
    assert {"encode_frames, ms", "validated decode, unsorted / ascending rows"} <= set(peers["targets"])
    scaling = results["decode_scaling"]
    assert set(scaling["time_s"]["msgpack int64 offsets, trusted"]) == {1000, 10_000}
    # Trusted msgpack ragged with int64 offsets reads the payload in place: no extra memory to speak of.
    assert scaling["peak_extra_fraction"]["Arrow stream, large lists, trusted"][10_000] < 0.5
    # Every validated form has a peak-memory verdict, compact included (it decodes in windows).
    assert "msgpack compact" in scaling["worst_validated_peak"]
    assert "peak extra memory <= 0.25x" in text
    # Every in-place form gets a growth figure and a verdict against 1.5x per 10x rows.
    growth = scaling["trusted_growth_per_10x"]
    assert set(bench._IN_PLACE_FORMS) <= set(growth) and all(g > 0 for g in growth.values())
    for form in bench._IN_PLACE_FORMS:
        assert any(
            line.strip().startswith(f"{form}: ") and line.rstrip().endswith(("holds", "missed"))
            for line in text.splitlines()
        )
    assert plot.with_name(plot.stem + "_decode.png").read_bytes()[:4] == b"\x89PNG"


def test_decode_scaling_sizes_option() -> None:
    out = io.StringIO()
    results = bench.run(
        ["--quick", "--rows", "300", "--sections", "decode-scaling", "--sizes", "200", "2000", "--repeats", "1"],
        out=out,
    )
    scaling = results["decode_scaling"]
    assert set(scaling["time_s"]["msgpack int32 offsets, trusted"]) == {200, 2000}
    assert "200 -> 2,000 tokens" in out.getvalue()
    # Trusted in-place decodes allocate a few kilobytes (headers, the mask), not the offsets.
    assert scaling["trusted_peak_bytes"]["msgpack int32 offsets, trusted"][2000] < 2000 * 4


def test_plot_is_a_png(quick_run: tuple[dict[str, Any], str, Path]) -> None:
    _, text, plot = quick_run
    assert "plot written" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_returns_zero_and_rejects_unknown_sections(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--quick", "--rows", "200", "--repeats", "1", "--sections", "bytes"]) == 0
    assert "== 4. bytes per token" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["--sections", "nope"])


def test_information_bound() -> None:
    # One row of 2 ids out of 4: log2(C(4, 2)) = log2(6) bits; an empty row and a full row cost 0.
    assert math.isclose(bench.information_bound_bytes(np.array([2]), 4), math.log2(6) / 8)
    assert bench.information_bound_bytes(np.array([0, 4]), 4) == 0.0


def test_json_conversion_and_raw_layouts() -> None:
    rows = [[5, 1], [], [7]]
    ids, offsets = bench.parse_json_rows(json.loads, json.dumps(rows).encode())
    assert ids.dtype == np.int32 and ids.tolist() == [5, 1, 7] and offsets.tolist() == [0, 2, 2, 3]
    m = SamplingMask.from_rows(rows)
    raw = np.frombuffer(bench.raw_ragged_bytes(m), "<i4")
    assert raw.tolist() == [5, 1, 7, 2, 0, 1]
    deltas = np.frombuffer(bench.sorted_delta_bytes(m), "<i4")
    assert deltas.tolist() == [1, 4, 7, 2, 0, 1]  # rows sorted: [1, 5] -> 1, +4


def test_bitmask_baselines_agree_with_the_core() -> None:
    # top-k rows (sparse: the core's byte path back) and top-p-only rows (dense: its flag path back).
    for kwargs in ({"top_k": 20, "top_p": 1.0}, {"top_k": 4096, "temperature": 1.4}):
        m = synthetic.rollout(40, seed=2, ids="uniform", vocab_size=5003, **kwargs)  # V not a multiple of 8
        bits = layouts.ragged_to_bitmask(m.ids, m.offsets, 5003, ascending=False)
        assert np.array_equal(bench.naive_ragged_to_bitmask(m.ids, m.offsets, 5003), bits)
        rows = bench.vllm_bitmask_rows(bits, 5003)
        ids, offsets = layouts.bitmask_to_ragged(bits, 5003)
        assert [r.tolist() for r in rows] == [sorted(row) for row in m.to_rows()]
        assert np.array_equal(offsets, m.offsets)
        assert np.array_equal(ids, np.concatenate(rows).astype(np.int32))


def test_naive_baselines_agree_with_the_core() -> None:
    m = synthetic.rollout(50, seed=3, order="rank")
    dense = m.to_dense()
    ids, offsets = bench.naive_dense_to_rows(dense)
    assert np.array_equal(ids, m.ids) and np.array_equal(offsets, m.offsets)
    assert np.array_equal(bench.naive_ragged_to_dense(m.ids, m.offsets, dense.shape[1]), dense)
    ids, offsets = bench.naive_lists_to_ragged(m.to_rows())
    assert np.array_equal(ids, m.ids) and np.array_equal(offsets, m.offsets)


def test_race_returns_a_median_per_method() -> None:
    calls: list[str] = []
    times = bench.race({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3)
    assert set(times) == {"a", "b"} and all(t >= 0 for t in times.values())
    assert calls == ["a", "b"] * 4  # one warm-up lap, then three timed laps, round-robin


def _scorer_script() -> ModuleType:
    """``benchmarks/bench_scorer.py`` (section 6: a script of the checkout, not part of the package)."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("_bench_scorer_test", REPO / bench.SCORER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_report_runs_no_script_and_names_the_scorer_script_instead() -> None:
    """The package never executes a file outside itself: ``--sections scorer`` names the script."""
    with pytest.raises(SystemExit, match="python benchmarks/bench_scorer.py"):
        bench.run(["--quick", "--sections", "scorer"])
    assert "scorer" not in bench.SECTIONS and (REPO / bench.SCORER_SCRIPT).is_file()


def test_scorer_script_prints_the_pair_gather_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    figures = _scorer_script().report(True, 1)["pair_gather"]
    text = capsys.readouterr().out
    assert set(figures) == {64, 256}
    for fig in figures.values():
        assert fig["ours_s"] > 0 and fig["pair_gather_s"] > 0
        assert math.isclose(fig["ratio"], fig["ours_s"] / fig["pair_gather_s"])
    assert "T=256" in text and "target <= 1.2" in text


def test_pair_gather_baseline_computes_what_the_scorer_computes() -> None:
    """The naive baseline of the scorer section is a faithful one: same loss, same gradients."""
    torch = pytest.importorskip("torch")
    module = _scorer_script()
    case = module.build("warmup")
    grads = []
    for name in ("hidden_pair_gather", "hidden_ours"):
        module.reset_grads(case)
        module.METHODS[name][0](case)
        grads.append((case["hidden"].grad.clone(), case["weight"].grad.clone()))
    for naive, ours in zip(*grads, strict=True):
        assert float(ours.abs().sum()) > 0
        torch.testing.assert_close(ours, naive, rtol=1e-4, atol=1e-5)
