"""Datasets of many files (codecs.dataset), the torch data pipeline, and the data tools people already
use (each skipped when its package is absent); ``write_dataset`` writes through the one atomic writer,
never through a planted symlink, and leaves nothing behind when it refuses a partition."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from file_checks import listing

import sampling_mask as sm
from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.codecs import dataset as ds_codec
from sampling_mask.codecs import write_dataset
from sampling_mask.data import synthetic

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _rollout(tokens: int, seqlen: int, seed: int, prompt: int = 0) -> sm.SamplingMask:
    """``tokens`` rows in sequences of ``seqlen``, the first ``prompt`` rows of each empty."""
    base = synthetic.rollout(tokens, seed=seed)
    rows = base.to_rows()
    for start in range(0, tokens, seqlen):
        for r in range(start, min(start + prompt, tokens)):
            rows[r] = []
    sampled = np.where(np.diff(base.offsets) > 0, base.sampled_token_ids, -1)
    sampled[[r for s in range(0, tokens, seqlen) for r in range(s, min(s + prompt, tokens))]] = -1
    return sm.SamplingMask.from_rows(
        rows, vocab_size=base.vocab_size, cu_seqlens=np.arange(0, tokens + 1, seqlen), sampled_token_ids=sampled
    )


@pytest.fixture(scope="module")
def rollout() -> tuple[sm.SamplingMask, dict[str, np.ndarray]]:
    mask = _rollout(2400, 30, seed=1, prompt=3)
    n = mask.num_segments
    columns = {
        "step": np.repeat(np.arange(4), n // 4),
        "worker": np.tile(np.arange(5), n // 5),
        "reward": np.linspace(-1, 1, n).astype(np.float32),
        "request_id": np.array([f"req-{i}" for i in range(n)]),
    }
    return mask, columns


@pytest.fixture(scope="module", params=["parquet", "arrow"])
def dataset_dir(request, tmp_path_factory, rollout):
    mask, columns = rollout
    base = tmp_path_factory.mktemp(f"ds-{request.param}")
    files = ds_codec.write_dataset(
        base, (mask, columns), partition_by=("step", "worker"), format=request.param, max_file_bytes=4000
    )
    return base, files, request.param


def _selection(mask, columns, keep):
    keep = np.flatnonzero(keep)
    return mask.take(keep), {k: v[keep] for k, v in columns.items()}


def _sorted_by(batch, key="request_id"):
    order = np.argsort(batch.columns[key], kind="stable")
    return batch.mask.take(order), {k: v[order] for k, v in batch.columns.items()}


def test_written_dataset_is_partitioned_and_split_by_size(dataset_dir):
    base, files, fmt = dataset_dir
    assert len(files) > 20  # 4 steps x 5 workers, some split by max_file_bytes
    assert all(os.path.basename(os.path.dirname(os.path.dirname(f))).startswith("step=") for f in files)
    assert all(f.endswith("." + fmt) for f in files)
    table = pq.read_table(files[0]) if fmt == "parquet" else pa.ipc.open_file(files[0]).read_all()
    assert "step" not in table.column_names and "reward" in table.column_names  # partition keys live in paths


def test_filter_by_partition_reads_back_equal(dataset_dir, rollout):
    base, files, _fmt = dataset_dir
    mask, columns = rollout
    dataset = sm.codecs.open_dataset(base)
    got = dataset.read(filter={"step": [1, 3]})
    want_mask, want_columns = _selection(mask, columns, np.isin(columns["step"], [1, 3]))
    got_mask, got_columns = _sorted_by(got)
    order = np.argsort(want_columns["request_id"], kind="stable")
    assert got_mask == want_mask.take(order)
    for name in ("reward", "step", "worker"):
        np.testing.assert_array_equal(got_columns[name], want_columns[name][order])


def test_filter_on_user_column_keeps_whole_sequences(dataset_dir, rollout):
    import pyarrow.dataset as pads

    base, files, _fmt = dataset_dir
    mask, columns = rollout
    dataset = sm.codecs.open_dataset(base)
    got = dataset.read(filter=(pads.field("reward") > 0.5) & (pads.field("step") == 3), columns=["request_id"])
    assert set(got.columns) == {"request_id"}
    want_mask, want_columns = _selection(mask, columns, (columns["reward"] > 0.5) & (columns["step"] == 3))
    got_mask, _ = _sorted_by(got)
    assert got_mask == want_mask.take(np.argsort(want_columns["request_id"], kind="stable"))
    assert sorted(got.columns["request_id"].tolist()) == sorted(want_columns["request_id"].tolist())


def test_sequences_carry_their_columns(dataset_dir, rollout):
    base, files, _fmt = dataset_dir
    mask, columns = rollout
    seen = 0
    for seq in sm.codecs.open_dataset(base).sequences(filter={"worker": 2}, batch_size=3):
        i = int(seq.columns["request_id"].split("-")[1])
        assert seq.mask == mask.segment(i)
        assert seq.columns["worker"] == 2 and seq.columns["step"] == columns["step"][i]
        seen += 1
    assert seen == int(np.sum(columns["worker"] == 2))


def test_unknown_column_and_bad_filter_are_errors(dataset_dir):
    base, files, _fmt = dataset_dir
    dataset = sm.codecs.open_dataset(base)
    with pytest.raises(sm.SamplingMaskError) as err:
        list(dataset.batches(columns=["nope"]))
    assert err.value.code is sm.ErrorCode.E_SCHEMA and err.value.field == "nope"
    with pytest.raises(sm.SamplingMaskError) as err:
        list(dataset.batches(filter="step == 1"))
    assert err.value.code is sm.ErrorCode.E_SCHEMA


def test_bad_files_are_reported_by_path_and_the_rest_still_arrive(tmp_path, rollout):
    mask, columns = rollout
    files = ds_codec.write_dataset(tmp_path, (mask, columns), partition_by=("step",), max_file_bytes=10**9)
    assert len(files) == 4
    with open(files[0], "r+b") as fh:  # corrupt the first file's body
        fh.seek(100)
        fh.write(b"\xff" * 64)
    table = pq.read_table(files[1])
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"sampling_mask.version": b"2"}), files[1])
    dataset = sm.codecs.open_dataset(str(tmp_path))
    got = dataset.read(on_error="report")
    assert {e.path for e in dataset.errors} == {files[0], files[1]}
    codes = {e.path: e.error.code for e in dataset.errors}
    assert codes[files[1]] is sm.ErrorCode.E_VERSION
    assert all(e.path in str(e.error) for e in dataset.errors)
    assert sorted(set(got.columns["step"].tolist())) == [2, 3]
    assert got.mask.num_segments == int(np.isin(columns["step"], [2, 3]).sum())
    with pytest.raises(sm.SamplingMaskError) as err:
        sm.codecs.open_dataset(str(tmp_path)).read()
    assert files[0] in str(err.value)


def test_each_file_keeps_its_own_companions(tmp_path):
    a = _rollout(60, 20, seed=2)
    b = a.replace(sampled_token_ids=None)
    ds_codec.write_dataset(tmp_path, (b, {"step": np.zeros(3, int)}), partition_by=("step",))
    ds_codec.write_dataset(tmp_path, (a, {"step": np.ones(3, int)}), partition_by=("step",))
    batches = {int(x.columns["step"][0]): x.mask for x in sm.codecs.open_dataset(tmp_path).batches()}
    assert batches[0] == b and batches[1] == a


def test_dataset_input_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        sm.codecs.open_dataset(tmp_path)
    mask = _rollout(20, 10, seed=3)
    with pytest.raises(sm.SamplingMaskError) as err:
        ds_codec.write_dataset(tmp_path, (mask, {"step": np.array([True, False])}), partition_by=("step",))
    assert err.value.code is sm.ErrorCode.E_DTYPE and err.value.field == "step"
    with pytest.raises(sm.SamplingMaskError) as err:
        ds_codec.write_dataset(tmp_path, (mask, {"step": np.zeros(3, int)}), partition_by=("step",))
    assert err.value.code is sm.ErrorCode.E_SHAPE
    with pytest.raises(sm.SamplingMaskError) as err:
        ds_codec.write_dataset(tmp_path, (mask, {}), partition_by=("step",))
    assert err.value.code is sm.ErrorCode.E_SCHEMA
    with pytest.raises(sm.SamplingMaskError):
        sm.codecs.open_dataset([str(tmp_path / "a.parquet"), str(tmp_path / "b.arrow")])


def test_partition_strings_are_quoted(tmp_path):
    mask = _rollout(20, 10, seed=4)
    ds_codec.write_dataset(tmp_path, (mask, {"run": np.array(["a/b", "c d"])}), partition_by=("run",))
    assert sorted(os.listdir(tmp_path)) == ["run=a%2Fb", "run=c%20d"]
    got = sm.codecs.open_dataset(tmp_path).read(filter={"run": "a/b"})
    assert got.mask == mask.segment(0) and got.columns["run"].tolist() == ["a/b"]


# ------------------------------------------------------------------------------------------ torch pipeline
torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def arrow_dir(tmp_path_factory, rollout):
    mask, columns = rollout
    base = tmp_path_factory.mktemp("torch-ds")
    ds_codec.write_dataset(base, (mask, columns), partition_by=("step",), format="arrow", max_file_bytes=6000)
    return base


def test_sequence_dataset_items_and_zero_copy(arrow_dir, rollout):
    from sampling_mask.data.torch_data import SequenceDataset

    mask, columns = rollout
    dataset = SequenceDataset(arrow_dir, columns=["request_id", "reward"])
    assert len(dataset) == mask.num_segments
    seen = set()
    for index in range(len(dataset)):
        item = dataset[index]
        i = int(item.columns["request_id"].split("-")[1])
        assert item.mask == mask.segment(i)
        assert item.columns["reward"] == pytest.approx(float(columns["reward"][i]))
        seen.add(i)
    assert seen == set(range(mask.num_segments))
    item = dataset[5]
    address = item.mask.ids.ctypes.data
    with open("/proc/self/maps") as fh:
        mapped = [line.split() for line in fh if line.rstrip().endswith(os.path.basename(item.path))]
    assert any(int(r.split("-")[0], 16) <= address < int(r.split("-")[1], 16) for r, *_ in mapped)


def test_dataloader_with_two_workers_equals_a_single_process_read(arrow_dir):
    from sampling_mask.data import alignment
    from sampling_mask.data.torch_data import SequenceDataset, collate_sequences

    dataset = SequenceDataset(arrow_dir, columns=["reward"])
    collate = functools.partial(collate_sequences, shift=True)
    single = list(torch.utils.data.DataLoader(dataset, batch_size=7, collate_fn=collate))
    parallel = list(torch.utils.data.DataLoader(dataset, batch_size=7, collate_fn=collate, num_workers=2))
    assert len(single) == len(parallel) == -(-len(dataset) // 7)
    for a, b in zip(single, parallel, strict=True):
        assert a.mask == b.mask
        assert torch.equal(a.cu_seqlens, b.cu_seqlens) and a.cu_seqlens.dtype == torch.int32
        assert torch.equal(a.columns["reward"], b.columns["reward"])
    first = [dataset[i].mask for i in range(7)]
    assert single[0].mask == alignment.shift_left(sm.concat(first))


def test_collate_label_aligns_generated_rows():
    from sampling_mask.codecs.dataset import MaskSequence
    from sampling_mask.data import alignment
    from sampling_mask.data.torch_data import collate_sequences

    gen = sm.SamplingMask.from_rows([[5, 1], [7], [3]], cu_seqlens=[0, 2, 3])
    items = [MaskSequence(gen.segment(i), {"prompt_length": p}, "x") for i, p in enumerate([2, 1])]
    batch = collate_sequences(items, prompt_length_column="prompt_length")
    assert batch.mask == alignment.label_aligned(gen, [2, 1])
    assert batch.columns["prompt_length"].tolist() == [2, 1]


def test_shard_sampler_splits_evenly_and_balances_tokens():
    from sampling_mask.data.torch_data import SequenceShardSampler

    lengths = np.random.default_rng(0).integers(1, 1000, size=101)
    shards = [list(SequenceShardSampler(101, num_replicas=4, rank=r, lengths=lengths, seed=3)) for r in range(4)]
    assert all(len(s) == 26 for s in shards)
    assert set().union(*map(set, shards)) == set(range(101))
    plain = [list(SequenceShardSampler(101, num_replicas=4, rank=r, seed=3)) for r in range(4)]
    assert sorted(sum(plain, [])) == sorted(sum(shards, []))  # the same padded multiset of sequences
    spread = np.ptp([lengths[s].sum() for s in shards])
    assert spread <= lengths.max() and spread < np.ptp([lengths[s].sum() for s in plain])
    sampler = SequenceShardSampler(101, num_replicas=4, rank=0, seed=3)
    sampler.set_epoch(1)
    assert list(sampler) != plain[0]
    dropped = [list(SequenceShardSampler(101, num_replicas=4, rank=r, drop_last=True)) for r in range(4)]
    assert all(len(s) == 25 for s in dropped) and len(set(sum(dropped, []))) == 100
    with pytest.raises(sm.SamplingMaskError):
        SequenceShardSampler(10, num_replicas=2, rank=2)


def test_worker_memory_stays_flat(tmp_path):
    """Reading every sequence of a ~40 MB Arrow dataset grows RSS by far less than the data."""
    mask = synthetic.rollout(1_000_000, seed=7)
    mask = sm.SamplingMask.from_ragged(
        mask.ids, mask.offsets, cu_seqlens=np.arange(0, 1_000_001, 2000), vocab_size=mask.vocab_size
    )
    ds_codec.write_dataset(
        tmp_path,
        (mask, {"step": np.zeros(mask.num_segments, int)}),
        partition_by=("step",),
        format="arrow",
        max_file_bytes=4 << 20,
    )
    script = textwrap.dedent(
        f"""
        import resource, sys
        from sampling_mask.data.torch_data import SequenceDataset
        def rss():
            with open("/proc/self/status") as fh:
                return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024
        ds = SequenceDataset({str(tmp_path)!r})
        n = len(ds)
        for i in range(n // 10):
            ds[i]
        early = rss()
        total = 0
        for i in range(n // 10, n):
            total += ds[i].mask.nnz
        print(early, rss(), total)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    early, late, total = out.stdout.split()
    data_mib = mask.ids.nbytes / 2**20
    assert int(total) > 0.85 * mask.nnz
    assert float(late) - float(early) < 0.25 * data_mib, out.stdout


# ------------------------------------------------------------------------------------------ other tools
def _support_stats(masks) -> dict:
    from sampling_mask.data.stats import summarize

    support = summarize(list(masks)).support()
    return {k: support[k] for k in ("rows", "singleton_fraction", "mean", "median", "p99", "max")}


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory, rollout):
    mask, columns = rollout
    base = tmp_path_factory.mktemp("tools")
    ds_codec.write_dataset(base, (mask, columns), partition_by=("step",), max_file_bytes=20000)
    return base


def _expected_per_step(parquet_dir):
    dataset = sm.codecs.open_dataset(parquet_dir)
    return {step: _support_stats([dataset.read(filter={"step": step}).mask]) for step in range(4)}


def _assert_stats_equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for step in want:
        for key, value in want[step].items():
            assert got[step][key] == pytest.approx(value, rel=1e-9), (step, key)


def test_duckdb_sql_support_stats_match_the_library(parquet_dir):
    duckdb = pytest.importorskip("duckdb")
    sql = f"""
        SELECT step, count(*) AS rows, avg(CAST(n = 1 AS DOUBLE)) AS singleton_fraction, avg(n) AS mean,
               quantile_cont(n, 0.5) AS median, quantile_cont(n, 0.99) AS p99, max(n) AS max
        FROM (SELECT step, len(unnest(sampling_mask)) AS n
              FROM read_parquet('{parquet_dir}/**/*.parquet', hive_partitioning = true))
        WHERE n > 0 GROUP BY step ORDER BY step
    """
    rows = duckdb.sql(sql).fetchall()
    got = {
        r[0]: dict(zip(("rows", "singleton_fraction", "mean", "median", "p99", "max"), r[1:], strict=True))
        for r in rows
    }
    _assert_stats_equal(got, _expected_per_step(parquet_dir))


def test_polars_support_stats_match_the_library(parquet_dir):
    pl = pytest.importorskip("polars")
    frame = (
        pl.scan_parquet(f"{parquet_dir}/**/*.parquet", hive_partitioning=True)
        .explode("sampling_mask")
        .select("step", pl.col("sampling_mask").list.len().alias("n"))
        .filter(pl.col("n") > 0)
        .group_by("step")
        .agg(
            pl.len().alias("rows"),
            (pl.col("n") == 1).mean().alias("singleton_fraction"),
            pl.col("n").mean().alias("mean"),
            pl.col("n").quantile(0.5, "linear").alias("median"),
            pl.col("n").quantile(0.99, "linear").alias("p99"),
            pl.col("n").max().alias("max"),
        )
        .collect()
    )
    got = {r.pop("step"): r for r in frame.to_dicts()}
    _assert_stats_equal(got, _expected_per_step(parquet_dir))
    # Polars hands the table back through Arrow: the mask survives with the header taken from a file.
    table = pl.read_parquet(f"{parquet_dir}/**/*.parquet", hive_partitioning=True).to_arrow()
    one_file = next(iter(sorted(parquet_dir.rglob("*.parquet"))))
    back = ds_codec.batch_from_table(table, like=one_file)
    assert back.mask.num_segments == len(table) and back.mask.vocab_size == 151936


def test_hugging_face_datasets_reads_our_files(parquet_dir, monkeypatch, tmp_path, rollout):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets = pytest.importorskip("datasets")
    mask, columns = rollout
    files = sorted(str(p) for p in parquet_dir.rglob("step=2/*.parquet"))
    hf = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=str(tmp_path / "cache"))
    assert hf.features["sampling_mask"] == datasets.List(datasets.List(datasets.Value("int32")))
    hf = hf.map(lambda x: x)  # a datasets round trip keeps the column types
    with pytest.raises(sm.SamplingMaskError) as err:  # datasets drops our header: say so, don't guess
        ds_codec.batch_from_table(hf)
    assert err.value.code is sm.ErrorCode.E_SCHEMA
    back = ds_codec.batch_from_table(hf, like=files[0])
    keep = np.flatnonzero(columns["step"] == 2)
    order = np.argsort(back.columns["request_id"], kind="stable")
    want = mask.take(keep[np.argsort(columns["request_id"][keep], kind="stable")])
    assert back.mask.take(order) == want


def test_ray_data_map_batches_rebuilds_masks(parquet_dir, rollout):
    ray = pytest.importorskip("ray")
    ray_data = pytest.importorskip("ray.data")

    mask, _columns = rollout
    one_file = str(next(iter(sorted(parquet_dir.rglob("*.parquet")))))
    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:

        def nnz_per_batch(table):
            batch = ds_codec.batch_from_table(table, like=one_file)  # validated on the worker
            return {"nnz": [batch.mask.nnz], "segments": [batch.mask.num_segments]}

        data = ray_data.read_parquet(str(parquet_dir))
        out = data.map_batches(nnz_per_batch, batch_format="pyarrow", batch_size=None).take_all()
    finally:
        ray.shutdown()
    assert sum(r["nnz"] for r in out) == mask.nnz
    assert sum(r["segments"] for r in out) == mask.num_segments


# ------------------------------------------------------------------------------------------ write_dataset: destinations
def _parts(values: list[object]) -> tuple[SamplingMask, dict[str, list[object]]]:
    mask = SamplingMask.from_rows([[1]] * len(values), cu_seqlens=list(range(len(values) + 1)))
    return mask, {"step": values}


def test_write_dataset_refuses_a_long_partition_value_and_leaves_nothing(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    value = "v" * 300
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(tmp_path, [_parts(["ok"]), _parts(["a", value])], partition_by=["step"])
    assert info.value.code is ErrorCode.E_SCHEMA
    assert info.value.field == "step" and str(info.value.value).startswith("v" * 60)
    assert listing(tmp_path) == []  # the first part's file and folder are removed again


def test_write_dataset_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    base, outside = tmp_path / "base", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (base / "step=b").symlink_to(outside)
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(base, _parts(["a", "b"]), partition_by=["step"])
    assert info.value.code is ErrorCode.E_ENCODING
    assert list(outside.iterdir()) == []
    assert listing(base) == ["step=b"]


def test_write_dataset_refuses_a_partition_key_with_a_separator(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    mask = SamplingMask.from_rows([[1]])
    with pytest.raises(SamplingMaskError) as info:
        write_dataset(tmp_path / "b", (mask, {"../x": ["a"]}), partition_by=["../x"])
    assert info.value.code is ErrorCode.E_SCHEMA
    assert not (tmp_path / "x=a").exists() and not (tmp_path / "b").exists()


def test_write_dataset_still_writes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    files = write_dataset(tmp_path, [_parts([1, 2, 1])], partition_by=["step"])
    assert sorted(Path(f).parent.name for f in files) == ["step=1", "step=2"]
    total = sum(m.num_segments for m in (sm.load(f) for f in files))
    assert total == 3
    assert not [p for p in tmp_path.rglob(".*.tmp")]
    assert np.array_equal(sm.load(files[0]).ids, [1] * sm.load(files[0]).nnz)
