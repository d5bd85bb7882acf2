"""docs/trainers.md's instructions hold: the page shows each trainer integration (tests/test_readme.py
runs its blocks, as every docs page's), and the lines it tells verl / OpenRLHF users to add, applied to
the call sites copied from the released wheels (verl 0.9.1, OpenRLHF 0.11.2; ``verl_call_sites.py`` /
``openrlhf_call_sites.py``, written by ``tests/fixtures/upstream/trainers/make_verl_openrlhf.py``), run
end to end and agree with float64 renormalizations over each token's recorded support."""

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

from gloo import spawn  # noqa: E402

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


class _MicroBatch(dict):
    """A plain dict standing in for verl's ``TensorDict`` micro-batch (the padded path reads ``batch_size``)."""

    batch_size: tuple[int, ...] = ()


class _VerlEngine:
    """``FSDPEngineWithLMHead`` as far as the copied methods use ``self`` (no static pad); with ``sp_group``,
    Ulysses sequence parallelism over that group, as ``FSDPEngine._init_device_mesh`` sets it up."""

    pad_to_length = 0
    pad_to_length_bucket = 0
    engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)
    module = SimpleNamespace(config=SimpleNamespace())  # a text model: no vision_config

    def __init__(self, prepare_model_outputs: Any, sp_group: Any = None) -> None:
        self.ulysses_parallel_group = sp_group
        self.use_ulysses_sp = sp_group is not None
        self.ulysses_sequence_parallel_size = 1 if sp_group is None else torch.distributed.get_world_size(sp_group)
        VERL.set_ulysses_sequence_parallel_group(sp_group)  # what verl's engine contexts do on entry
        self.prepare_model_inputs = VERL.prepare_model_inputs.__get__(self)
        self.prepare_model_outputs = prepare_model_outputs.__get__(self)
        self._get_packed_pad_size = VERL._get_packed_pad_size.__get__(self)
        self._gather_and_unpad_packed = VERL._gather_and_unpad_packed.__get__(self)


def _verl_log_probs(
    batch: dict[str, Any],
    weight: torch.Tensor,
    prepare_model_outputs: Any,
    *,
    remove_padding: bool = True,
    sp_group: Any = None,
) -> torch.Tensor:
    """verl's path from the padded batch to response log-probs [bsz, response_length]; the "model" is a
    table of logits per token, so each rank's logits are those of the input ids it was given."""
    data = _MicroBatch(VERL.left_right_2_no_padding(dict(batch)), use_remove_padding=remove_padding)
    data.batch_size = (int(batch["responses"].shape[0]),)
    engine = _VerlEngine(prepare_model_outputs, sp_group)
    model_inputs, output_args = engine.prepare_model_inputs(micro_batch=data)
    output = SimpleNamespace(logits=weight[model_inputs["input_ids"]])
    model_output = engine.prepare_model_outputs(output, output_args, micro_batch=data, logits_processor_func=None)
    return VERL.no_padding_2_padding(model_output["log_probs"], data)


def _assert_verl_float64(batch: dict[str, Any], weight: torch.Tensor, ours: torch.Tensor, plain: torch.Tensor) -> None:
    """Every response token of ``ours`` within 1e-6 of float64 renormalization over its row, ``plain``
    (no mask) of the full vocabulary; at least 3 rows truncated, and the two differ."""
    p_width, vocab = batch["prompts"].shape[1], weight.shape[1]
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


def _verl_case() -> tuple[dict[str, Any], torch.Tensor]:
    g = torch.Generator().manual_seed(33)
    weight = torch.randn(40, 40, generator=g) * 3
    return _verl_batch(g, 40), weight


@pytest.mark.parametrize("remove_padding", [True, False])
def test_verl_log_prob_sites_with_the_documented_change(remove_padding: bool) -> None:
    """Both of ``prepare_model_outputs``' log-prob calls (remove-padding on and off), patched as the docs say."""
    batch, weight = _verl_case()
    assert len(_diffs("FSDPEngineWithLMHead.prepare_model_outputs")) == 2  # one per call
    patched = _patched(VERL, "FSDPEngineWithLMHead.prepare_model_outputs")
    without = {k: v for k, v in batch.items() if k != "sampling_mask"}
    ours = _verl_log_probs(batch, weight, patched, remove_padding=remove_padding)
    plain = _verl_log_probs(without, weight, patched, remove_padding=remove_padding)
    upstream = _verl_log_probs(without, weight, VERL.prepare_model_outputs, remove_padding=remove_padding)
    assert torch.allclose(plain, upstream, atol=1e-6)  # no mask in the batch: verl's own numbers
    _assert_verl_float64(batch, weight, ours, plain)


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
    """``Actor`` as far as ``forward`` uses ``self``: the model is a table of logits per token (under ring
    attention each rank's logits are those of its slice of the packed tokens)."""

    def __init__(self, forward: Any, weight: torch.Tensor, packing_samples: bool) -> None:
        self.forward = forward.__get__(self)
        self.weight = weight
        self.packing_samples = packing_samples
        self.temperature = TEMPERATURE

    def model(self, sequences: torch.Tensor, **_: Any) -> dict[str, torch.Tensor]:
        return {"logits": self.weight[sequences].clone()}


def _openrlhf_case(truncate_length: int, packing_samples: bool) -> tuple[list[dict[str, Any]], Any, list, torch.Tensor]:
    """(responses, the experience the actor scores, its masks, the model's weight): samples made by the
    patched ``_process_response_into_experience``, concatenated by the experience maker, split and
    re-batched by the replay buffer; the masks popped from ``info`` as ``training_step`` does."""
    g = torch.Generator().manual_seed(11)
    vocab = 30
    weight = torch.randn(vocab, vocab, generator=g) * 3
    responses = _openrlhf_responses(g, vocab)
    process = _patched(OPENRLHF, "SamplesGenerator._process_response_into_experience")
    samples = [process(None, r, max_len=truncate_length) for r in responses]
    batch = OPENRLHF.Experience.concat_experiences(samples, 0)
    items = OPENRLHF.remove_padding_in_sequences(OPENRLHF.split_experience_batch(batch))
    experience = OPENRLHF.make_experience_batch(items, packing_samples)
    return responses, experience, experience.info.pop("sampling_mask"), weight


def _openrlhf_log_probs(forward: Any, case: tuple, packing_samples: bool, mask: bool, **kwargs: Any) -> torch.Tensor:
    _, experience, masks, weight = case
    actor = _Actor(forward, weight, packing_samples)
    extra = {"sampling_mask": masks} if mask else {}
    seq, action_mask, attn = experience.sequences, experience.action_mask, experience.attention_mask
    return actor.forward(seq, action_mask, attention_mask=attn, **extra, **kwargs)


def _assert_openrlhf_float64(case: tuple, truncate_length: int, ours: torch.Tensor, plain: torch.Tensor) -> int:
    """Every completion token of ``ours`` within 1e-6 of float64 renormalization over its row; returns
    how many were checked."""
    responses, experience, _, weight = case
    checked = 0
    for b, response in enumerate(responses):
        tokens = response["observation_tokens"][:truncate_length]
        rows = response["sampling_mask"]
        for j in range(len(tokens) - 1):  # action entry j is token j + 1
            if not experience.action_mask[b, j]:
                assert float(ours[b, j]) == 0.0
                continue
            z = weight[tokens[j]] / TEMPERATURE
            expected = _reference(z, tokens[j + 1], rows.row(j + 1).tolist())
            assert abs(float(ours[b, j]) - expected) <= 1e-6, (b, j)
            checked += 1
    assert (ours - plain).abs().max() > 1e-2
    return checked


@pytest.mark.parametrize("packing_samples", [False, True])
def test_openrlhf_actor_forward_with_the_documented_changes(packing_samples: bool) -> None:
    case = _openrlhf_case(7, packing_samples)  # the third sample (8 tokens) is cut like its sequences
    assert [m.num_rows for m in case[2]] == [5, 4, 7]
    patched = _patched(OPENRLHF, "Actor.forward")
    ours = _openrlhf_log_probs(patched, case, packing_samples, mask=True)
    plain = _openrlhf_log_probs(patched, case, packing_samples, mask=False)
    upstream = _openrlhf_log_probs(OPENRLHF.forward, case, packing_samples, mask=False)
    assert torch.allclose(plain, upstream, atol=1e-6)  # no mask: OpenRLHF's own numbers
    assert _assert_openrlhf_float64(case, 7, ours, plain) == 3 + 1 + 3  # the third sample's last token was cut


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


# ------------------------------------------- sequence parallelism: two gloo processes on 127.0.0.1

WORLD = 2


def _check_verl_ulysses(rank: int) -> None:
    """verl with ``ulysses_sequence_parallel_size=2``: the copied ``prepare_model_inputs`` pads the 17
    packed tokens to 18 and slices them with verl's own ``ulysses_pad_and_slice_inputs``; the patched
    ``prepare_model_outputs`` scores this rank's 9 rows and gathers them (``gather_outputs_and_unpad``)."""
    group = torch.distributed.group.WORLD
    batch, weight = _verl_case()
    patched = _patched(VERL, "FSDPEngineWithLMHead.prepare_model_outputs")
    without = {k: v for k, v in batch.items() if k != "sampling_mask"}
    ours = _verl_log_probs(batch, weight, patched, sp_group=group)
    plain = _verl_log_probs(without, weight, patched, sp_group=group)
    upstream = _verl_log_probs(without, weight, VERL.prepare_model_outputs)  # one process, no SP
    assert torch.allclose(plain, upstream, atol=1e-6)
    torch.testing.assert_close(ours, _verl_log_probs(batch, weight, patched), rtol=0, atol=1e-6)  # one process
    _assert_verl_float64(batch, weight, ours, plain)
    # this rank's rows: 18 / 2 = 9, the mask cut as verl cuts the rolled labels
    rows = sm_verl.rmpad_mask(batch["sampling_mask"], batch["attention_mask"], batch["responses"], pad_size=1)
    local = sm_verl.rmpad_mask(
        batch["sampling_mask"], batch["attention_mask"], batch["responses"], pad_size=1, sp_group=group
    )
    assert rows.num_rows == 18 and local.to_rows() == rows.to_rows()[9 * rank : 9 * rank + 9]
    with pytest.raises(sm_verl.SamplingMaskError) as err:  # a pad that verl did not add
        sm_verl.rmpad_mask(batch["sampling_mask"], batch["attention_mask"], batch["responses"], sp_group=group)
    assert (err.value.code.value, err.value.field) == ("E_SHAPE", "sp_group")


def _check_openrlhf_ring_attention(rank: int) -> None:
    """OpenRLHF ``packing_samples`` with ring attention over 2 ranks: ``unpad_and_slice_tensor`` pads the
    17 packed tokens to 18 and gives this rank 9 (``get_tensor_in_current_ring_attn_rank``); the patched
    ``Actor.forward`` scores them and ``gather_and_pad_tensor`` all-gathers the log-probs."""
    group = torch.distributed.group.WORLD
    case = _openrlhf_case(8, packing_samples=True)  # 5 + 4 + 8 tokens
    patched = _patched(OPENRLHF, "Actor.forward")
    ours = _openrlhf_log_probs(patched, case, True, mask=True, ring_attn_group=group)
    plain = _openrlhf_log_probs(patched, case, True, mask=False, ring_attn_group=group)
    upstream = _openrlhf_log_probs(OPENRLHF.forward, case, True, mask=False)  # one process
    assert torch.allclose(plain, upstream, atol=1e-6)
    assert int(OPENRLHF.RING_ATTN_CU_SEQLENS[-1][-1]) == 18  # the ring padding was added
    torch.testing.assert_close(ours, _openrlhf_log_probs(patched, case, True, mask=True), rtol=0, atol=1e-6)
    assert _assert_openrlhf_float64(case, 8, ours, plain) == 3 + 1 + 4


def _sequence_parallel_checks(rank: int) -> None:
    _check_verl_ulysses(rank)
    _check_openrlhf_ring_attention(rank)


@pytest.mark.slow  # spawns two processes
def test_verl_ulysses_and_openrlhf_ring_attention_on_two_gloo_processes() -> None:
    """One spawn runs both checks; a failing assertion on either rank fails this test with its traceback."""
    spawn(_sequence_parallel_checks, world=WORLD)


# ----------------------------------------------------------------------------------------------- the page
_BLOCK = re.compile(r"(?:<!-- readme-test: needs (?P<needs>[\w.]+) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)


BLOCKS = [(PAGE.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("needs")) for m in _BLOCK.finditer(PAGE)]


def test_the_page_has_one_block_per_trainer() -> None:
    assert len(BLOCKS) >= 4  # transformers, TRL, verl, OpenRLHF
    for name in ("trainers.transformers", "trainers.trl", "trainers import verl", "trainers import openrlhf"):
        assert any(name in code for _, code, _ in BLOCKS), name
