"""Issue 33 item 4: the lines docs/trainers.md tells verl / OpenRLHF users to add, applied to the call
sites copied from the released wheels (verl 0.9.1, OpenRLHF 0.11.2; ``verl_call_sites.py`` /
``openrlhf_call_sites.py``, written by ``tests/fixtures/upstream/trainers/make_verl_openrlhf.py``), run
end to end and checked against float64 renormalizations over each token's recorded support."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from sampling_mask.trainers import openrlhf as sm_openrlhf  # noqa: E402
from sampling_mask.trainers import verl as sm_verl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TRAINERS = ROOT / "tests" / "fixtures" / "upstream" / "trainers"
PAGE = (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
DIFF = re.compile(r"```diff\n# (?P<release>\S+ \S+) (?P<path>\S+) (?P<qualname>\S+)\n(?P<hunk>.*?)```", re.S)
TEMPERATURE = 0.7


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_call_sites_{name}", TRAINERS / f"{name}_call_sites.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


VERL = _load("verl")
OPENRLHF = _load("openrlhf")


def _diffs(qualname: str) -> list[str]:
    return [m.group("hunk") for m in DIFF.finditer(PAGE) if m.group("qualname") == qualname]


def _patched(module: ModuleType, qualname: str) -> Any:
    """The copied function with every docs/trainers.md diff for ``qualname`` applied (each must match
    the copied source exactly once), compiled in the fixture module's namespace."""
    hunks = _diffs(qualname)
    assert hunks, f"docs/trainers.md shows no change to {qualname}"
    text = Path(module.__file__ or "").read_text(encoding="utf-8")
    name = qualname.split(".")[-1]
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    source = "\n".join(text.splitlines()[node.lineno - 1 : node.end_lineno])
    indent = 4 * qualname.count(".")
    for hunk in hunks:
        old, new = [], []
        for line in hunk.rstrip("\n").split("\n"):
            sign, body = line[0], line[1:]
            body = body[indent:] if body[:indent].strip() == "" else body
            if sign in " -":
                old.append(body)
            if sign in " +":
                new.append(body)
        before = "\n".join(old)
        assert source.count(before) == 1, f"{qualname}: the diff's context is not in the {module.__name__} copy"
        source = source.replace(before, "\n".join(new))
    namespace = dict(vars(module), sm_verl=sm_verl, sm_openrlhf=sm_openrlhf)
    exec(compile(source, f"<{qualname} patched as docs/trainers.md says>", "exec"), namespace)  # noqa: S102
    return namespace[name]


def _reference(z: torch.Tensor, label: int, ids: list[int]) -> float:
    """float64 log-prob of ``label`` renormalized over ``ids`` (all of the vocabulary when empty)."""
    z = z.double()
    support = z if not ids else z[torch.tensor(ids)]
    return float(z[label] - torch.logsumexp(support, 0))


def _support(g: torch.Generator, label: int, vocab: int) -> list[int]:
    k = int(torch.randint(0, 4, (1,), generator=g))
    if k == 0:
        return []  # an empty row: scored over the full vocabulary
    others = torch.randperm(vocab, generator=g)[:k].tolist()
    return sorted({label, *others})


def test_the_docs_import_the_adapters_under_the_names_the_diffs_use() -> None:
    assert "from sampling_mask.trainers import verl as sm_verl" in PAGE
    assert "from sampling_mask.trainers import openrlhf as sm_openrlhf" in PAGE
    releases = {m.group("release") for m in DIFF.finditer(PAGE)}
    assert releases == {"verl 0.9.1", "openrlhf 0.11.2"}


# ----------------------------------------------------------------------------------------------- verl


def _verl_batch(g: torch.Generator, vocab: int) -> dict[str, Any]:
    prompt_lens, resp_lens, p_width, r_width = [2, 4, 1], [3, 5, 2], 4, 5
    bsz = len(prompt_lens)
    prompts = torch.zeros(bsz, p_width, dtype=torch.long)
    responses = torch.zeros(bsz, r_width, dtype=torch.long)
    attention_mask = torch.zeros(bsz, p_width + r_width, dtype=torch.long)
    dense = torch.full((bsz, r_width, 4), -1, dtype=torch.int32)
    for b, (p, r) in enumerate(zip(prompt_lens, resp_lens, strict=True)):
        prompts[b, p_width - p :] = torch.randint(1, vocab, (p,), generator=g)  # left-padded
        responses[b, :r] = torch.randint(1, vocab, (r,), generator=g)  # right-padded
        attention_mask[b, p_width - p : p_width + r] = 1
        for t in range(r):
            ids = _support(g, int(responses[b, t]), vocab)
            dense[b, t, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "response_mask": attention_mask[:, p_width:],
        "position_ids": torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0),
        "sampling_mask": dense,
        "temperature": TEMPERATURE,
    }


class _VerlEngine:
    """``FSDPEngineWithLMHead`` as far as the copied methods use ``self`` (no SP, no static pad)."""

    use_ulysses_sp = False
    pad_to_length = 0
    pad_to_length_bucket = 0
    engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)

    def __init__(self, prepare_model_outputs: Any) -> None:
        self.prepare_model_inputs = VERL.prepare_model_inputs.__get__(self)
        self.prepare_model_outputs = prepare_model_outputs.__get__(self)
        self._get_packed_pad_size = VERL._get_packed_pad_size.__get__(self)
        self._gather_and_unpad_packed = VERL._gather_and_unpad_packed.__get__(self)


def _verl_log_probs(batch: dict[str, Any], weight: torch.Tensor, prepare_model_outputs: Any) -> torch.Tensor:
    data = VERL.left_right_2_no_padding(dict(batch))
    engine = _VerlEngine(prepare_model_outputs)
    model_inputs, output_args = engine.prepare_model_inputs(micro_batch=data)
    output = SimpleNamespace(logits=weight[model_inputs["input_ids"]])  # a "model": logits of the token
    model_output = engine.prepare_model_outputs(output, output_args, micro_batch=data, logits_processor_func=None)
    return VERL.no_padding_2_padding(model_output["log_probs"], data)  # [bsz, response_length]


def test_verl_remove_padding_site_with_the_documented_change() -> None:
    g = torch.Generator().manual_seed(33)
    vocab = 40
    weight = torch.randn(vocab, vocab, generator=g) * 3
    batch = _verl_batch(g, vocab)
    patched = _patched(VERL, "FSDPEngineWithLMHead.prepare_model_outputs")
    ours = _verl_log_probs(batch, weight, patched)
    plain = _verl_log_probs({k: v for k, v in batch.items() if k != "sampling_mask"}, weight, patched)
    upstream = _verl_log_probs(
        {k: v for k, v in batch.items() if k != "sampling_mask"}, weight, VERL.prepare_model_outputs
    )
    assert torch.allclose(plain, upstream, atol=1e-6)  # no mask in the batch: verl's own numbers

    p_width = batch["prompts"].shape[1]
    checked = truncated = 0
    for b in range(batch["responses"].shape[0]):
        tokens = batch["input_ids"][b][batch["attention_mask"][b].bool()].tolist()
        prompt_len = int(batch["attention_mask"][b, :p_width].sum())
        for t in range(int(batch["response_mask"][b].sum())):
            ids = [int(i) for i in batch["sampling_mask"][b, t] if i >= 0]
            z = weight[tokens[prompt_len + t - 1]] / TEMPERATURE
            label = int(batch["responses"][b, t])
            assert abs(float(ours[b, t]) - _reference(z, label, ids)) <= 1e-6, (b, t)
            assert abs(float(plain[b, t]) - _reference(z, label, [])) <= 1e-5, (b, t)
            checked += 1
            truncated += bool(ids) and len(ids) < vocab
    assert checked == 10 and truncated >= 3
    assert (ours - plain).abs().max() > 1e-2  # the change changes the numbers


def test_verl_site_refuses_a_mask_that_does_not_fit_the_batch() -> None:
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(40, 40, generator=g)
    batch = _verl_batch(g, 40)
    batch["sampling_mask"] = batch["sampling_mask"][:, :, :1].clone()
    batch["sampling_mask"][0, 4, 0] = 3  # a row past sample 0's three response tokens
    with pytest.raises(sm_verl.SamplingMaskError) as err:
        _verl_log_probs(batch, weight, _patched(VERL, "FSDPEngineWithLMHead.prepare_model_outputs"))
    assert err.value.code.value == "E_SHAPE" and (err.value.segment, err.value.row) == (0, 4)


# ------------------------------------------------------------------------------------------- OpenRLHF


def _openrlhf_responses(g: torch.Generator, vocab: int) -> list[dict[str, Any]]:
    out = []
    for prompt_len, completion_len in [(2, 3), (3, 1), (4, 4)]:
        prompt = torch.randint(1, vocab, (prompt_len,), generator=g).tolist()
        action = torch.randint(1, vocab, (completion_len,), generator=g).tolist()
        completion = {"token_ids": action, "sampling_mask": [_support(g, a, vocab) or [a] for a in action]}
        out.append(
            {
                "prompt": "p",
                "label": "l",
                "observation_tokens": prompt + action,
                "action_ranges": [(prompt_len, prompt_len + completion_len)],
                "rollout_log_probs": None,
                "truncated": False,
                "reward": 1.0,
                "sampling_mask": sm_openrlhf.observation_rows(prompt_len, completion),
            }
        )
    return out


class _Actor:
    """``Actor`` as far as ``forward`` uses ``self``: the model is a table of logits per token."""

    def __init__(self, forward: Any, weight: torch.Tensor, packing_samples: bool) -> None:
        self.forward = forward.__get__(self)
        self.weight = weight
        self.packing_samples = packing_samples
        self.temperature = TEMPERATURE

    def model(self, sequences: torch.Tensor, **_: Any) -> dict[str, torch.Tensor]:
        return {"logits": self.weight[sequences].clone()}


@pytest.mark.parametrize("packing_samples", [False, True])
def test_openrlhf_actor_forward_with_the_documented_changes(packing_samples: bool) -> None:
    g = torch.Generator().manual_seed(11)
    vocab, truncate_length = 30, 7  # the third sample (8 tokens) is cut like its sequences
    weight = torch.randn(vocab, vocab, generator=g) * 3
    responses = _openrlhf_responses(g, vocab)
    process = _patched(OPENRLHF, "SamplesGenerator._process_response_into_experience")
    samples = [process(None, r, max_len=truncate_length) for r in responses]
    # the experience maker concatenates samples, the replay buffer splits and re-batches them
    batch = OPENRLHF.Experience.concat_experiences(samples, 0)
    items = OPENRLHF.remove_padding_in_sequences(OPENRLHF.split_experience_batch(batch))
    experience = OPENRLHF.make_experience_batch(items, packing_samples)
    masks = experience.info.pop("sampling_mask")  # what training_step passes to the actor
    assert [m.num_rows for m in masks] == [5, 4, 7]

    patched = _patched(OPENRLHF, "Actor.forward")
    seq, action_mask, attn = experience.sequences, experience.action_mask, experience.attention_mask
    ours = _Actor(patched, weight, packing_samples).forward(seq, action_mask, attention_mask=attn, sampling_mask=masks)
    plain = _Actor(patched, weight, packing_samples).forward(seq, action_mask, attention_mask=attn)
    upstream = _Actor(OPENRLHF.forward, weight, packing_samples).forward(seq, action_mask, attention_mask=attn)
    assert torch.allclose(plain, upstream, atol=1e-6)  # no mask: OpenRLHF's own numbers

    checked = 0
    for b, response in enumerate(responses):
        tokens = response["observation_tokens"][:truncate_length]
        rows = response["sampling_mask"]
        for j in range(len(tokens) - 1):  # action entry j is token j + 1
            if not action_mask[b, j]:
                assert float(ours[b, j]) == 0.0
                continue
            z = weight[tokens[j]] / TEMPERATURE
            expected = _reference(z, tokens[j + 1], rows.row(j + 1).tolist())
            assert abs(float(ours[b, j]) - expected) <= 1e-6, (b, j)
            checked += 1
    assert checked == 3 + 1 + 3  # the third sample's last token was cut by truncate_length
    assert (ours - plain).abs().max() > 1e-2


def test_openrlhf_documented_example_passes_no_temperature_to_already_divided_logits() -> None:
    block = PAGE[PAGE.index("## OpenRLHF") :]
    assert "0.8, sampling_mask" not in block and "temperature=" not in block.split("```diff")[0].split("```python")[1]


def test_each_copied_function_cites_its_release_file_and_sha256() -> None:
    spec = importlib.util.spec_from_file_location("_make_verl_openrlhf", TRAINERS / "make_verl_openrlhf.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    for module, release, sites in (
        (VERL, "verl 0.9.1 (PyPI wheel)", make.VERL_CALL_SITES),
        (OPENRLHF, "openrlhf 0.11.2 (PyPI wheel)", make.OPENRLHF_CALL_SITES),
    ):
        text = Path(module.__file__ or "").read_text(encoding="utf-8")
        for path, names in sites:
            for name in names:
                assert re.search(
                    rf"^# {re.escape(release)} {re.escape(path)} {re.escape(name)} \(sha256 [0-9a-f]{{64}}\)$",
                    text,
                    re.M,
                ), name
                assert hasattr(module, name.split(".")[-1]), name
