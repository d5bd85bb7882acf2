"""SPEC 6 (1.2): every default-option payload of every writer form is valid under spec 1.0.

The 1.0 profile check (:mod:`sampling_mask.conformance.profile`) runs over the default output of
every writer and form, for masks with every companion, T = 0, no vocabulary size and rows wide
enough for every row-length width (uint8 / uint16 / int32 counts would be needed); each payload
also decodes back to its mask. The check itself has teeth: the opt-in 1.1 forms are findings.
"""

from __future__ import annotations

import io
from pathlib import Path

import msgpack
import numpy as np
import pytest

import sampling_mask as sm
from sampling_mask import SamplingMask
from sampling_mask.conformance import runner
from sampling_mask.conformance.profile import v1_0_findings

pytest.importorskip("pyarrow")


def _every_companion() -> SamplingMask:
    rows = [[5, 1], [], [7]]
    return SamplingMask.from_rows(
        rows,
        vocab_size=10,
        cu_seqlens=[0, 2, 3],
        sampled_token_ids=[5, -1, 7],
        sampled_logprobs=np.array([-0.25, np.nan, 0.0], np.float32),
        temperature=np.array([1.0, 0.5, 2.0], np.float32),
        support_logprobs=np.array([-0.25, -1.5, 0.0], np.float32),
        metadata={"top_k": 2, "top_p": 0.9, "producer": "vllm-0.32", "unknown": None},
    )


def _wide() -> SamplingMask:
    # rows of 300 and 70,000 ids: counts would need uint16 and int32; 2,000 rows in all
    rows = [list(range(300)), list(range(70_000))[::-1]] + [[i % 50] for i in range(1998)]
    return SamplingMask.from_rows(rows, cu_seqlens=[0, 1, 2, 2000])


MASKS = {
    "every-companion": _every_companion(),
    "empty": SamplingMask.from_rows([], cu_seqlens=[0]),
    "empty-one-segment": SamplingMask.from_rows([]),
    "no-vocab-size": SamplingMask.from_rows([[3, 1], [], [2]], cu_seqlens=[0, 1, 1, 3]),
    "wide-rows": _wide(),
}
ROWS_ONLY = {
    "rows-only": SamplingMask.from_rows([[5, 1], [], [7]]),
    "rows-only-empty": SamplingMask.from_rows([]),
    "rows-only-wide": SamplingMask.from_rows([list(range(300)), [2]]),
}
#: Every writer and form with its default options: (form of the bytes, how to write them).
WRITERS = {
    "arrow": ("arrow", lambda m: sm.encode(m, "arrow")),
    "arrow-compact": ("arrow", lambda m: sm.encode(m, "arrow", layout="compact")),
    "arrows": ("arrows", lambda m: sm.encode(m, "arrows")),
    "arrows-compact": ("arrows", lambda m: sm.encode(m, "arrows", layout="compact")),
    "parquet": ("parquet", lambda m: sm.encode(m, "parquet")),
    "parquet-compact": ("parquet", lambda m: sm.encode(m, "parquet", layout="compact")),
    "msgpack": ("msgpack", lambda m: sm.encode(m, "msgpack")),
    "msgpack-dense": ("msgpack", lambda m: sm.encode(m, "msgpack", layout="dense")),
    "msgpack-compact": ("msgpack", lambda m: sm.encode(m, "msgpack", layout="compact")),
    "encode_frames": ("msgpack", lambda m: b"".join(bytes(memoryview(f)) for f in sm.codecs.encode_frames(m))),
    "encode_into": ("msgpack", lambda m: _into(m)),
    "json": ("json", lambda m: sm.encode(m, "json")),
}
ROWS_ONLY_WRITERS = {
    "json-rows": ("json-rows", lambda m: sm.encode(m, "json-rows")),
    "base64": ("base64", lambda m: sm.encode(m, "base64")),
}


def _into(mask: SamplingMask) -> bytes:
    buffer = bytearray(len(sm.encode(mask, "msgpack")) + 16)
    return bytes(buffer[: sm.codecs.encode_into(mask, buffer)])


@pytest.mark.parametrize("writer", sorted(WRITERS) + sorted(ROWS_ONLY_WRITERS))
def test_default_output_of_every_writer_is_within_spec_1_0(writer: str) -> None:
    form, write = {**WRITERS, **ROWS_ONLY_WRITERS}[writer]
    masks = ROWS_ONLY if writer in ROWS_ONLY_WRITERS else MASKS
    for name, mask in masks.items():
        data = write(mask)
        assert v1_0_findings(data, form) == [], (writer, name)
        assert v1_0_findings(data) == [], (writer, name)  # the form recognised from the bytes
        assert sm.decode(data, format=form) == mask, (writer, name)


def test_the_default_msgpack_wire_carries_offsets_and_only_1_0_dtypes() -> None:
    env = msgpack.unpackb(sm.encode(MASKS["wide-rows"], "msgpack"), raw=False)
    assert "counts" not in env and env["offsets"]["dtype"] == "int32"
    assert {v["dtype"] for v in env.values() if isinstance(v, dict) and "dtype" in v} <= {"int32", "int64"}
    assert "pad" in env["ids"]  # 64-byte alignment (1.1): an unknown ARRAY key, ignored by 1.0 readers


@pytest.mark.parametrize(
    ("payload", "finding"),
    [
        (lambda: sm.encode(MASKS["every-companion"], "msgpack", counts=True), "'counts' (uint8) is spec 1.1"),
        (lambda: sm.encode(MASKS["wide-rows"], "msgpack", counts=True), "'counts' (int32)"),
        (lambda: sm.codecs.encode_frames(MASKS["every-companion"], counts=True), "without 'offsets'"),
        (lambda: _patched({"num_rows": None}), "'num_rows' is nil"),
        (lambda: _patched({"layout": "bitmask"}), "not a 1.0 layout"),
        (lambda: b'{"sampling_mask": 1, "rows": [[1]], "cu_seqlens": null}', "'cu_seqlens' is null"),
        (lambda: b'{"sampling_mask": 1, "cu_seqlens": [0, 0]}', "no 'rows'"),
        (lambda: b'{"data": "", "shape": [0, 0], "dtype": "uint8"}', "not int32 / int64"),
    ],
)
def test_the_profile_check_finds_what_1_0_does_not_define(payload, finding: str) -> None:
    found = v1_0_findings(payload())
    assert any(finding in line for line in found), found


def _patched(fields: dict) -> bytes:
    env = msgpack.unpackb(sm.encode(MASKS["every-companion"], "msgpack"), raw=False)
    env.update(fields)
    return msgpack.packb(env, use_bin_type=True)


def test_profile_check_from_the_command_line(tmp_path: Path) -> None:
    good = tmp_path / "good.msgpack"
    good.write_bytes(sm.encode(MASKS["every-companion"], "msgpack"))
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(sm.encode(MASKS["every-companion"], "msgpack", counts=True))
    out = io.StringIO()
    assert runner.main(["--profile-1.0", str(good)], out=out) == 0
    assert "within 1.0" in out.getvalue()
    out = io.StringIO()
    assert runner.main(["--profile-1.0", str(good), "--profile-1.0", str(bad)], out=out) == 1
    assert "'counts' (uint8) is spec 1.1" in out.getvalue()


# ---------------------------------------------------------------------------------------------- frozen 1.0 set
def test_the_frozen_1_0_set_is_unchanged_and_runs_alone() -> None:
    from sampling_mask.conformance.lint import _frozen_problems
    from sampling_mask.conformance.suite import frozen_cases, load_cases, vectors_dir

    frozen = frozen_cases("1.0")
    cases = {c.id: c for c in load_cases()}
    assert len(frozen) >= 400 and set(frozen) <= set(cases)
    assert all(cases[cid].digest == digest for cid, digest in frozen.items())
    assert _frozen_problems(vectors_dir()) == []
    out = io.StringIO()
    assert runner.main(["--release", "1.0", "--list"], out=out) == 0
    listed = [line.split("\t")[0] for line in out.getvalue().splitlines()]
    assert sorted(listed) == sorted(frozen)
    assert "msgpack.ragged-counts-uint8" not in listed  # 1.1 cases are not in the 1.0 set


def test_a_changed_frozen_case_is_a_lint_problem(tmp_path: Path) -> None:
    import shutil

    from sampling_mask.conformance.lint import _frozen_problems
    from sampling_mask.conformance.suite import vectors_dir

    root = tmp_path / "suite"
    shutil.copytree(vectors_dir(), root, ignore=shutil.ignore_patterns("examples"))
    manifest = root / "v1-1.0.txt"
    lines = manifest.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    cid = lines[first].split()[0]
    lines[first] = f"{cid} 0000000000000000"
    lines.append("dense.no-such-case 0000000000000000")
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems = _frozen_problems(root)
    assert any(cid in p and "changed" in p for p in problems)
    assert any("dense.no-such-case is gone" in p for p in problems)
