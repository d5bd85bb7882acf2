"""NeMo-RL records no sampling mask (it recomputes top-k / top-p on the trainer's logits), so there is
no adapter: the invented ``token_ids [B, T, K]`` + ``sizes`` layout must not come back."""

from __future__ import annotations

import importlib

import pytest

import sampling_mask.adapters as adapters


def test_defect_9_no_invented_nemo_rl_layout():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sampling_mask.adapters.nemo_rl")
    assert "nemo_rl" not in adapters.__all__
    assert "NeMo-RL has no adapter" in (adapters.__doc__ or "")
