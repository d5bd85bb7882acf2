"""Issue 33 item 1 for verl / OpenRLHF: every public function of the two adapters, each argument in turn
replaced by garbage (wrong types, 0-d / empty / meta / complex / bool tensors, NaN, huge ids), either
works or raises SamplingMaskError; never TypeError, ValueError, RuntimeError or NotImplementedError."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sampling_mask import SamplingMask, SamplingMaskError  # noqa: E402
from sampling_mask.trainers import openrlhf, verl  # noqa: E402

GARBAGE: list[Any] = [
    None,
    "x",
    3,
    -1,
    2.5,
    True,
    [],
    [[1]],
    [[1, 2], [3]],
    {"a": 1},
    b"\x00",
    np.array([object()]),
    torch.tensor(1.0),
    torch.tensor(1),
    torch.zeros(0),
    torch.zeros(2, 0),
    torch.zeros(0, 3),
    torch.ones(2, 3, dtype=torch.bool),
    torch.zeros(2, 3, dtype=torch.complex64),
    torch.full((2, 3), float("nan")),
    torch.zeros(2, 3, 4, 5),
    np.zeros((2, 3), dtype=np.float16),
    SamplingMask.from_rows([[1]]),
    torch.zeros(2, 3, dtype=torch.uint8),
    torch.full((2, 3), 2**40),
    torch.empty(2, 3, device="meta"),
]


def _calls() -> dict[str, tuple[Any, list[Any], dict[str, Any]]]:
    rows = openrlhf.observation_rows(2, {"token_ids": [7, 9], "sampling_mask": [[3, 7], [9]]})
    long = torch.long
    return {
        "verl.logprobs_from_logits": (
            verl.logprobs_from_logits,
            [torch.zeros(4, 10), torch.zeros(4, dtype=long)],
            {"sampling_mask": torch.full((4, 1), -1)},
        ),
        "verl.replay_logprobs": (verl.replay_logprobs, [torch.zeros(4, 10), torch.zeros(4, dtype=long), None, 1.0], {}),
        "verl.rmpad_mask": (
            verl.rmpad_mask,
            [torch.full((2, 2, 1), -1), torch.ones(2, 5, dtype=long), torch.zeros(2, 2, dtype=long)],
            {"pad_size": 0, "sp_group": None},
        ),
        "verl.batch_segments": (verl.batch_segments, [torch.full((2, 2, 1), -1), 2], {}),
        "openrlhf.rolled_mask": (
            openrlhf.rolled_mask,
            [[rows], torch.ones(1, 4, dtype=long)],
            {"packed": True, "ring_attn_group": None},
        ),
        "verl.check_config": (verl.check_config, [{"actor_rollout_ref": {"actor": {"strategy": "fsdp2"}}}], {}),
        "openrlhf.log_probs_from_logits": (
            openrlhf.log_probs_from_logits,
            [torch.zeros(1, 4, 10), torch.zeros(1, 4, dtype=long), 1.0],
            {"sampling_mask": None},
        ),
        "openrlhf.experience_mask": (openrlhf.experience_mask, [rows, 3], {}),
        "openrlhf.observation_rows": (
            openrlhf.observation_rows,
            [2, {"token_ids": [7], "sampling_mask": [[7]]}],
            {"truncate_length": None},
        ),
        "openrlhf.pad_experience_masks": (openrlhf.pad_experience_masks, [[torch.full((1, 2, 1), -1)]], {}),
    }


@pytest.mark.parametrize("name", sorted(_calls()))
def test_garbage_in_any_argument_is_a_sampling_mask_error(name: str) -> None:
    fn, args, kwargs = _calls()[name]
    fn(*args, **kwargs)  # the valid call works
    escaped = []
    slots = [*range(len(args)), *kwargs]
    for slot in slots:
        for garbage in GARBAGE:
            a, k = list(args), dict(kwargs)
            if isinstance(slot, int):
                a[slot] = garbage
            else:
                k[slot] = garbage
            try:
                fn(*a, **k)
            except SamplingMaskError:
                pass
            except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
                escaped.append(f"{slot}={garbage!r:.40}: {type(exc).__name__}: {exc}")
    assert not escaped, "\n".join(escaped)
