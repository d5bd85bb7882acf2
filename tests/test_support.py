"""support_from_logits against each engine's own code (committed fixtures; live when installed)."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sampling_mask as sm  # noqa: E402
from sampling_mask.reference_scorer import RULES, support_from_logits  # noqa: E402

_SCRIPT = os.path.join(os.path.dirname(__file__), "fixtures", "upstream", "make_support_rules.py")
_spec = importlib.util.spec_from_file_location("make_support_rules", _SCRIPT)
assert _spec is not None and _spec.loader is not None
rules_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rules_script)

FIXTURE = rules_script.read_fixture()


#: The rules ``make_support_rules.py`` checks against the engines' torch code; ``"vllm-triton"``
#: (vLLM's Triton kernel) is checked in test_support_audit.py.
TORCH_RULES = tuple(r for r in RULES if r != "vllm-triton")


def _support(rule, case, **kwargs):
    return rules_script._dense(
        support_from_logits(
            case["logits"],
            temperature=case["temperature"],
            top_k=case["top_k"],
            top_p=case["top_p"],
            min_p=np.nan_to_num(case["min_p"], nan=0.0),
            rule=rule,
            **kwargs,
        )
    )


@pytest.mark.parametrize("rule", TORCH_RULES)
def test_fixture_rows_match_the_engine(rule):
    cases = FIXTURE[rule]
    assert sum(c["support"].shape[0] for c in cases) >= 200
    assert {c["bf16"] for c in cases} == {False, True}
    for case in cases:
        mine = _support(rule, case)
        differ = torch.nonzero((mine != case["support"]).any(dim=1)).flatten().tolist()
        assert differ == [], f"{rule}: rows {differ[:5]} differ from the engine"


def test_fixture_rows_match_in_small_chunks():
    case = max(FIXTURE["vllm"], key=lambda c: c["support"].shape[0])
    assert torch.equal(_support("vllm", case, chunk_rows=3), case["support"])


@pytest.mark.parametrize("rule", TORCH_RULES)
def test_fixtures_tell_the_rules_apart(rule):
    """Each fixture has rows where another rule keeps a different support (the check has teeth)."""
    for other in TORCH_RULES:
        if other == rule:
            continue
        differ = sum(int((_support(other, c) != c["support"]).any(dim=1).sum()) for c in FIXTURE[rule])
        assert differ > 0, f"{other} reproduces every {rule} row"


@pytest.mark.parametrize("rule", TORCH_RULES)
def test_live_engine_agreement(rule):
    if not rules_script.available(rule):
        pytest.skip(f"{rule}'s package is not installed")
    compared, differ = rules_script.check(rule, 200, seed=7)
    assert compared >= 200 and differ == 0


def test_ties_and_boundaries_by_hand():
    z = torch.tensor([[3.0, 2.0, 2.0, 1.0, -float("inf")]])
    rows = lambda rule, **kw: support_from_logits(z, rule=rule, **kw).to_rows()  # noqa: E731
    assert rows("vllm", top_k=2) == [[0, 1, 2]]  # ties at the k-th value widen the row
    assert rows("hf", top_k=2) == [[0, 1, 2]]
    assert len(rows("sglang", top_k=2)[0]) == 2  # rank cut: one of the tied ids
    assert rows("vllm") == [[0, 1, 2, 3]]  # -inf is never kept
    assert rows("vllm", min_p=1.0) == [[0]]
    # top-p boundary, two ids of mass 0.5 and p = 0.5: vLLM / HF drop cumulative mass <= 1 - p (one id
    # left); SGLang keeps an id whose exclusive prefix is <= p (both kept)
    two = torch.tensor([[0.0, 0.0, -float("inf")]])
    assert support_from_logits(two, top_p=0.5, rule="vllm").to_rows() in ([[0]], [[1]])
    assert support_from_logits(two, top_p=0.5, rule="hf").to_rows() in ([[0]], [[1]])
    assert support_from_logits(two, top_p=0.5, rule="sglang").to_rows() == [[0, 1]]
    assert support_from_logits(torch.zeros(1, 4), top_k=7, rule="vllm").to_rows() == [[0, 1, 2, 3]]


def test_mask_carries_vocab_and_temperature():
    mask = support_from_logits(torch.randn(3, 16), temperature=[0.5, 1.0, 2.0], top_k=4)
    assert mask.vocab_size == 16 and mask.num_rows == 3
    assert np.allclose(mask.temperature, [0.5, 1.0, 2.0])
    assert mask.is_canonical and all(len(r) == 4 for r in mask.to_rows())


@pytest.mark.parametrize(
    ("kwargs", "code", "row"),
    [
        ({"temperature": [1.0, 0.0]}, "E_RANGE", 1),
        ({"temperature": [1.0, float("nan")]}, "E_RANGE", 1),
        ({"top_p": [0.5, 0.0]}, "E_RANGE", 1),
        ({"min_p": [1.5, 0.1]}, "E_RANGE", 0),
        ({"top_k": [-2, 3]}, "E_RANGE", 0),
        ({"top_k": [1.5, 3]}, "E_DTYPE", None),
        ({"top_p": [0.5, 0.5, 0.5]}, "E_SHAPE", None),
        ({"rule": "tgi"}, "E_SCHEMA", None),
        ({"chunk_rows": 0}, "E_RANGE", None),
    ],
)
def test_bad_parameters(kwargs, code, row):
    with pytest.raises(sm.SamplingMaskError) as err:
        support_from_logits(torch.zeros(2, 8), **kwargs)
    assert err.value.code == code and err.value.row == row


def test_bad_logits():
    z = torch.zeros(3, 8)
    z[2, 5] = float("nan")
    with pytest.raises(sm.SamplingMaskError) as err:
        support_from_logits(z, top_k=2)
    assert err.value.code == "E_RANGE" and err.value.row == 2
    for bad, code in (
        (torch.zeros(3), "E_SHAPE"),
        (torch.zeros(2, 3, dtype=torch.int64), "E_DTYPE"),
        ([1.0], "E_SCHEMA"),
    ):
        with pytest.raises(sm.SamplingMaskError) as err:
            support_from_logits(bad)
        assert err.value.code == code


def test_all_inf_row_is_empty():
    z = torch.randn(2, 8)
    z[1] = -float("inf")
    for rule in ("vllm", "hf", "sglang"):
        assert support_from_logits(z, top_p=0.9, rule=rule).row_lengths[1] == 0
