"""twinkle (modelscope/twinkle PR #254, merged) stores masks as flat CSR ``SamplingMask(token_ids,
offsets)``: this library's CSR, so no adapter. Checked with a copy of twinkle's
``_copy_sampling_mask`` (``tests/fixtures/upstream/twinkle/pr254.py``) on vLLM 0.33's own
``SamplingMask`` nested lists (``tests/fixtures/upstream/vllm-0.33/objects.json``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import sampling_mask as sm
from sampling_mask.adapters import vllm

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"
_SPEC = importlib.util.spec_from_file_location("pr254", UPSTREAM / "twinkle" / "pr254.py")
assert _SPEC is not None and _SPEC.loader is not None
pr254 = importlib.util.module_from_spec(_SPEC)
sys.modules["pr254"] = pr254  # dataclasses look their module up
_SPEC.loader.exec_module(pr254)


def test_twinkle_csr_is_ours():
    rows = json.loads((UPSTREAM / "vllm-0.33" / "objects.json").read_text())["completion_output"]["sampling_mask"][
        "token_ids"
    ]
    twinkle = pr254._copy_sampling_mask(SimpleNamespace(token_ids=rows), len(rows), True)
    mask = sm.SamplingMask(twinkle.token_ids, twinkle.offsets)
    assert mask.to_rows() == rows
    assert vllm.from_engine_csr({"token_ids": twinkle.token_ids, "offsets": twinkle.offsets}) == mask
    # Chunked CSR (per output chunk) is joined into one CSR by twinkle; the same rows come out.
    chunked = SimpleNamespace(token_ids=[[1, 4, 9, 0], [2, 3]], offsets=[[0, 3, 4], [0, 2]])
    joined = pr254._copy_sampling_mask(chunked, 3, True)
    assert sm.SamplingMask(joined.token_ids, joined.offsets).to_rows() == [[1, 4, 9], [0], [2, 3]]
    # twinkle refuses empty rows; this library reads them (as no recorded support).
    with pytest.raises(RuntimeError, match="empty"):
        pr254._copy_sampling_mask(SimpleNamespace(token_ids=[[1], []]), 2, True)
