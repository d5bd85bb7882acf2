"""``sampling-mask audit``: readable summary, JSON, plot, .npy / .safetensors logits, forged headers."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sampling_mask as sm  # noqa: E402
from sampling_mask.cli import main  # noqa: E402
from sampling_mask.reference_scorer import support_from_logits  # noqa: E402

PARAMS = {"temperature": 0.7, "top_k": 5, "top_p": 0.9}


def _safetensors(path, tensors, *, header_override=None):
    header, chunks, offset = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = arr.tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header_override or header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + b"".join(chunks))
    return path


@pytest.fixture()
def rollout(tmp_path):
    z = torch.randn(16, 48, generator=torch.Generator().manual_seed(3)) * 2
    rows = support_from_logits(z, rule="vllm", **PARAMS).to_rows()
    meta = {"top_k": 5, "top_p": 0.9}
    good = sm.SamplingMask.from_rows(rows, vocab_size=48, sampled_token_ids=[r[0] for r in rows], metadata=meta)
    bad_rows = [list(r) for r in rows]
    bad_rows[2].append(next(i for i in range(48) if i not in bad_rows[2]))
    bad = sm.SamplingMask.from_rows(bad_rows, vocab_size=48, metadata=meta)
    sm.save(good, tmp_path / "good.json")
    sm.save(bad, tmp_path / "bad.json")
    np.save(tmp_path / "logits.npy", z.numpy())
    return tmp_path, z


def test_clean_and_planted(rollout, capsys):
    path, _ = rollout
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "logits.npy"), "--temperature", "0.7"]) == 0
    text = capsys.readouterr().out
    assert "equal supports: 16 of 16" in text and "rule vllm" in text and "top_k 5" in text
    status = main(
        ["audit", str(path / "bad.json"), "--logits", str(path / "logits.npy"), "--temperature", "0.7", "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert status == 1 and doc["rows_equal"] == 15 and doc["rows_extra_ids"] == 1 and doc["parameters"]["top_p"] == 0.9


def test_other_rule_disagrees_and_plot(rollout, capsys):
    path, _ = rollout
    png = path / "audit.png"
    args = ["audit", str(path / "good.json"), "--logits", str(path / "logits.npy"), "--temperature", "0.7"]
    assert main([*args, "--rule", "sglang", "--top-p", "0.5", "--plot", str(png)]) == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("bf16", [False, True])
def test_safetensors_logits(rollout, capsys, bf16):
    path, z = rollout
    if bf16:
        z = z.to(torch.bfloat16)
        tensors = {"logits": ("BF16", z.view(torch.int16).numpy())}
    else:
        tensors = {"logits": ("F32", z.numpy())}
    mask = support_from_logits(z, rule="hf", **PARAMS)
    sm.save(mask.replace(sampled_token_ids=mask.ids[mask.offsets[:-1]]), path / "m.json")
    st = _safetensors(path / "z.safetensors", {**tensors, "other": ("F32", np.zeros((1, 1), np.float32))})
    assert (
        main(["audit", str(path / "m.json"), "--logits", str(st), "--rule", "hf", "--top-k", "5", "--top-p", "0.9"])
        == 0
    )
    assert "equal supports: 16 of 16" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("forge", "code"),
    [
        (lambda p, arr: p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}"), "E_ENCODING"),
        (lambda p, arr: p.write_bytes(struct.pack("<Q", 2) + b"[]"), "E_ENCODING"),
        (lambda p, arr: p.write_bytes(b"\x01"), "E_ENCODING"),
        (
            lambda p, arr: _safetensors(
                p,
                {"logits": ("F32", arr)},
                header_override={"logits": {"dtype": "F32", "shape": [16, 48], "data_offsets": [0, 10**9]}},
            ),
            "E_BYTES",
        ),
        (
            lambda p, arr: _safetensors(
                p,
                {"logits": ("F32", arr)},
                header_override={"logits": {"dtype": "I8", "shape": [16, 48], "data_offsets": [0, 768]}},
            ),
            "E_DTYPE",
        ),
        (
            lambda p, arr: _safetensors(
                p,
                {"logits": ("F32", arr)},
                header_override={"logits": {"dtype": "F32", "shape": "x", "data_offsets": [0, 1]}},
            ),
            "E_SCHEMA",
        ),
    ],
)
def test_forged_safetensors_is_one_line_error(rollout, capsys, monkeypatch, forge, code):
    import builtins

    real_import = builtins.__import__

    def no_safetensors(name, *args, **kwargs):  # exercise our own header reader
        if name.startswith("safetensors"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_safetensors)
    path, z = rollout
    forge(path / "bad.safetensors", z.numpy())
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "bad.safetensors")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and code in err[0]


def test_usage_errors(rollout, capsys):
    path, _ = rollout
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "good.json")]) == 2
    assert "E_USAGE" in capsys.readouterr().err
    np.save(path / "ints.npy", np.zeros((16, 48), dtype=np.int32))
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "ints.npy")]) == 2
    assert "E_DTYPE" in capsys.readouterr().err
    np.save(path / "short.npy", np.zeros((3, 48), dtype=np.float32))
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "short.npy")]) == 2
    assert "E_SHAPE" in capsys.readouterr().err


# --------------------------------------------------------------------------- what the audit prints
def test_prints_the_temperature_it_used(rollout, capsys):
    """The companion's temperature is named, not "temperature off" / null."""
    path, z = rollout
    mask = sm.load(path / "good.json")
    sm.save(mask.replace(temperature=0.7), path / "tau.json")
    assert main(["audit", str(path / "tau.json"), "--logits", str(path / "logits.npy")]) == 0
    text = capsys.readouterr().out
    assert "temperature 0.7" in text and "temperature companion" in text and "temperature off" not in text
    main(["audit", str(path / "tau.json"), "--logits", str(path / "logits.npy"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert (
        doc["parameters"]["temperature"] == pytest.approx(0.7)
        and "companion" in doc["parameters"]["temperature_source"]
    )
    per_row = np.linspace(0.5, 1.0, mask.num_rows)
    sm.save(mask.replace(temperature=per_row), path / "rows.json")
    main(["audit", str(path / "rows.json"), "--logits", str(path / "logits.npy"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["temperature"] == pytest.approx({"min": 0.5, "max": 1.0})
    main(["audit", str(path / "good.json"), "--logits", str(path / "logits.npy"), "--json"])  # nothing given: 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["parameters"]["temperature"] == 1.0 and doc["parameters"]["temperature_source"] == "the default"


def test_says_when_it_compares_against_no_truncation(rollout, capsys):
    path, z = rollout
    bare = sm.load(path / "good.json").replace(metadata=None)
    sm.save(bare, path / "bare.json")
    assert main(["audit", str(path / "bare.json"), "--logits", str(path / "logits.npy")]) == 1
    text = capsys.readouterr().out
    assert "note: no top_k, top_p or min_p" in text and "no truncation" in text
    main(["audit", str(path / "bare.json"), "--logits", str(path / "logits.npy"), "--json"])
    assert any("no truncation" in note for note in json.loads(capsys.readouterr().out)["notes"])
    main(["audit", str(path / "good.json"), "--logits", str(path / "logits.npy"), "--temperature", "0.7"])
    assert "no truncation" not in capsys.readouterr().out  # top_k / top_p in the metadata


def test_narrower_logits_name_their_width(rollout, capsys):
    path, z = rollout
    np.save(path / "narrow.npy", z[:, :40].numpy())
    assert main(["audit", str(path / "good.json"), "--logits", str(path / "narrow.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert "40 columns" in err and "vocab_size is 48" in err and "E_RANGE" in err and "V = 40" not in err


def test_plot_panels_match_the_help(rollout, capsys):
    """The third histogram is the logit-drift part when rollout log-probs are known, else titled the support part."""
    from sampling_mask.cli.audit import plot_panels
    from sampling_mask.reference_scorer import audit

    path, z = rollout
    mask = sm.load(path / "good.json")
    report = audit(mask, z, temperature=0.7, top_k=5, top_p=0.9)
    assert "support part" in plot_panels(report)[2][0] and "drift" not in plot_panels(report)[2][0].split(";")[0]
    with_rollout = audit(mask, z, temperature=0.7, top_k=5, top_p=0.9, rollout_logprobs=np.full(mask.num_rows, -1.0))
    title, values = plot_panels(with_rollout)[2]
    assert "drift" in title and np.allclose(values, with_rollout.drift_part[with_rollout.compared])
    assert main(["audit", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "logit-drift part of the log-prob mismatch" in help_text and "the support part" in help_text
