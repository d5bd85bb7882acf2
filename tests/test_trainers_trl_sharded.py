"""ReplayGRPOTrainer's replay forward (``sampling_mask.trainers.trl.fused.replay_forward``) on 2 gloo
ranks (CPU) under every data-parallel sharding that runs on CPU equals one process: per-token log-probs
and entropies to 1e-5, and every parameter's gradient (the ranks' mean, as DDP / FSDP2 / ZeRO-3 reduce
it) to 1e-5.

Shardings: DDP; FSDP2 ``fully_shard`` with the head in the root's group, with the head wrapped on its
own, and with accelerate 1.16's own preparation (``fsdp2_prepare_model``: ``TRANSFORMER_BASED_WRAP``
and ``NO_WRAP``, both with its tail group ``[norm, lm_head]``), and accelerate's ``SIZE_BASED_WRAP``
policy function applied bottom-up (the embedding, the inner model and the head each on their own);
DeepSpeed 0.19.8 ZeRO-3 (every parameter partitioned: persistence threshold 0). Also the refusals that
replaced the crashes: the scorer given an FSDP2 ``DTensor`` shard (``E_SCHEMA``, was a RuntimeError)
or a ZeRO-3 partitioned weight (``E_SHAPE``), and a weight released between forward and backward
(``E_SHAPE``, was an IndexError). TRL's whole loop on two processes (DDP, ZeRO-3) runs in
``integration/test_trl_distributed.py``. One spawn for everything: starting processes is the slow part.
"""

from __future__ import annotations

import copy
import importlib.util
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytest.importorskip("torch.multiprocessing")
pytest.importorskip("trl")

from gloo import spawn  # noqa: E402
from tiny_models import tiny_causal_lm  # noqa: E402

WORLD = 2
VOCAB, KEEP, TEMPERATURE = 1024, 5, 0.7  # V x d = 32,768: the head and the embedding are the largest modules
TOL = dict(rtol=0.0, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]  # slow: spawns processes


def _batch(rank: int):
    """Rank ``rank``'s micro-batch, as TRL scores it: 2 completions of up to ``KEEP`` tokens after a
    3-token prompt (the second ends in padding), labels -100 outside the completions, one mask per
    completion with some empty rows (scored over the full vocabulary) and the sampled token in every
    other row."""
    from sampling_mask import SamplingMask
    from sampling_mask.trainers.trl import completion_masks

    rng = np.random.default_rng(10 + rank)
    rows, prompt = 2, 3
    input_ids = torch.from_numpy(rng.integers(3, VOCAB, (rows, prompt + KEEP)))
    attention = torch.ones_like(input_ids)
    attention[1, -2:] = 0
    labels = input_ids.masked_fill(attention == 0, -100)
    labels[:, :-KEEP] = -100
    support, cu_seqlens, sampled = [], [0], []
    for b in range(rows):
        n = int(attention[b, prompt:].sum())
        for t in range(n):
            y = int(input_ids[b, prompt + t])
            ids = set(rng.choice(VOCAB, int(rng.integers(1, 9)), replace=False).tolist()) | {y}
            support.append([] if rng.random() < 0.2 else sorted(ids))
            sampled.append(y)
        cu_seqlens.append(cu_seqlens[-1] + n)
    mask = SamplingMask.from_rows(support, cu_seqlens=cu_seqlens, vocab_size=VOCAB, sampled_token_ids=np.array(sampled))
    return input_ids, attention, labels, completion_masks(mask)


def _replaying(model):
    """``model`` whose forward is the replay forward, as ``ReplayGRPOTrainer`` routes TRL's fused calls
    (an instance attribute: FSDP2's, DDP's and DeepSpeed's hooks run around it)."""
    from sampling_mask.trainers.trl.fused import replay_forward

    def forward(input_ids, attention_mask, labels, parts):
        return replay_forward(
            model,
            parts,
            input_ids,
            labels,
            logits_to_keep=KEEP,
            temperature=TEMPERATURE,
            with_entropy=True,
            kwargs=dict(input_ids=input_ids, attention_mask=attention_mask),
        )

    model.forward = forward
    return model


def _step(call, batch):
    """(output, loss): a loss on both the log-probs and the entropies, weighted per position."""
    input_ids, attention, labels, parts = batch
    out = call(input_ids=input_ids, attention_mask=attention, labels=labels, parts=parts)
    weights = torch.linspace(0.5, 1.5, out.log_probs.numel()).view_as(out.log_probs)
    return out, (out.log_probs * weights).sum() + 0.3 * out.entropy.sum()


def _reference(base):
    """One process: each rank's output, and the ranks' mean gradient (what DDP, FSDP2 and ZeRO-3 reduce)."""
    model = _replaying(copy.deepcopy(base))
    outputs, grads = [], []
    for rank in range(WORLD):
        model.zero_grad()
        out, loss = _step(model, _batch(rank))
        loss.backward()
        outputs.append(out)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    return outputs, {n: sum(g[n] for g in grads) / WORLD for n in grads[0]}


def _accelerate(policy: str, **settings):
    """accelerate 1.16's own FSDP2 preparation (``fsdp2_prepare_model``) with ``policy``."""

    def prepare(model):
        from accelerate.utils import FullyShardedDataParallelPlugin
        from accelerate.utils.fsdp_utils import fsdp2_prepare_model

        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy=policy, cpu_ram_efficient_loading=False, **settings
        )
        accelerator = types.SimpleNamespace(  # what fsdp2_prepare_model reads of an Accelerator
            state=types.SimpleNamespace(fsdp_plugin=plugin),
            torch_device_mesh=None,
            mixed_precision="no",
            device=torch.device("cpu"),
            is_main_process=dist.get_rank() == 0,
        )
        return fsdp2_prepare_model(accelerator, model)

    return prepare


def _size_based(model):
    """accelerate's ``SIZE_BASED_WRAP`` policy function (``fsdp2_prepare_auto_wrap_policy``) applied
    bottom-up, as ``fsdp2_prepare_model`` applies it, then the root. (``fsdp2_prepare_model`` itself then
    carves a tail group ``[norm]`` out of the inner model it already wrapped, which torch 2.13 refuses.)"""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy, get_module_children_bottom_up
    from torch.distributed.fsdp import fully_shard

    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="size_based_wrap", min_num_params=20_000, cpu_ram_efficient_loading=False
    )
    plugin.set_auto_wrap_policy(model)
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    for module in get_module_children_bottom_up(model)[:-1]:
        if type(module).forward is not torch.nn.Module.forward and policy(module):  # containers cannot be sharded
            fully_shard(module)
    fully_shard(model)
    return model


def _root(model):
    from torch.distributed.fsdp import fully_shard

    fully_shard(model)
    return model


def _head_on_its_own(model):
    from torch.distributed.fsdp import fully_shard

    fully_shard(model.lm_head)
    fully_shard(model)
    return model


SHARDINGS = {
    "ddp": lambda model: torch.nn.parallel.DistributedDataParallel(model),
    "fsdp2 root": _root,
    "fsdp2 head on its own": _head_on_its_own,
    "fsdp2 TRANSFORMER_BASED_WRAP": _accelerate("transformer_based_wrap"),
    "fsdp2 NO_WRAP": _accelerate("no_wrap"),
    "fsdp2 SIZE_BASED_WRAP": _size_based,
}
#: the modules each sharding makes FSDP modules of ("" is the root; accelerate's tail group [norm, lm_head]
#: makes both), so that each case is what it says
UNITS = {
    "fsdp2 root": {""},
    "fsdp2 head on its own": {"", "lm_head"},
    "fsdp2 TRANSFORMER_BASED_WRAP": {
        "", "model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm", "lm_head"
    },
    "fsdp2 NO_WRAP": {"", "model.embed_tokens", "model.norm", "lm_head"},
    "fsdp2 SIZE_BASED_WRAP": {"", "model", "model.embed_tokens", "lm_head"},
}  # fmt: skip


def _full(tensor):
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _check_equal(name, rank, out, loss_grads, reference, mean_grad):
    torch.testing.assert_close(out.log_probs, reference.log_probs, **TOL, msg=lambda m: f"{name}: {m}")
    torch.testing.assert_close(out.entropy, reference.entropy, **TOL, msg=lambda m: f"{name}: {m}")
    assert bool((out.log_probs != 0).any())  # something was scored
    for param, grad in loss_grads.items():
        assert grad is not None, f"{name}: no gradient reached {param}"
        torch.testing.assert_close(grad, mean_grad[param], **GRAD_TOL, msg=lambda m, p=param: f"{name} {p}: {m}")


def _check_fsdp2_and_ddp(rank, base, reference, mean_grad):
    from torch.distributed.fsdp import FSDPModule

    from sampling_mask import ErrorCode, SamplingMaskError
    from sampling_mask.reference_scorer import masked_logprobs_from_hidden

    for name, shard in SHARDINGS.items():
        model = _replaying(copy.deepcopy(base))
        call = shard(model)
        units = {n for n, m in model.named_modules() if isinstance(m, FSDPModule)}
        assert units == UNITS.get(name, set()), (name, units)
        out, loss = _step(call, _batch(rank))
        loss.backward()
        grads = {n: None if p.grad is None else _full(p.grad) for n, p in model.named_parameters()}
        _check_equal(name, rank, out, grads, reference[rank], mean_grad)
        if name == "fsdp2 head on its own":  # outside its forward the head is this rank's shard
            weight = model.lm_head.weight
            assert type(weight).__name__ == "DTensor" and weight.to_local().shape[0] == VOCAB // WORLD
            with pytest.raises(SamplingMaskError) as err:  # was "mixed torch.Tensor and DTensor" (RuntimeError)
                masked_logprobs_from_hidden(torch.zeros(1, 32), weight, (torch.tensor([3]), torch.tensor([0, 1])))
            assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "weight"


def _check_zero3(rank, base, reference, mean_grad):
    import deepspeed
    from deepspeed.utils import safe_get_full_grad

    from sampling_mask import ErrorCode, SamplingMaskError
    from sampling_mask.reference_scorer import masked_logprobs_from_hidden

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # gloo only: no C++ shared-memory op to build
    model = copy.deepcopy(base)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "zero_allow_untested_optimizer": True,
    }
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    _replaying(model)
    head = model.lm_head
    assert tuple(head.weight.shape) == (0,)  # partitioned outside its module's forward
    out, loss = _step(engine, _batch(rank))
    engine.backward(loss)
    grads = {n: safe_get_full_grad(p) for n, p in model.named_parameters()}
    _check_equal("zero3", rank, out, grads, reference[rank], mean_grad)
    # called directly, the scorer refuses the partitioned weight; inside GatheredParameters it is exact
    hidden = torch.randn(4, 32)
    ids, offsets, targets = torch.tensor([3, 5, 9, 5]), torch.tensor([0, 2, 2, 3, 4]), torch.tensor([5, 7, 9, 5])
    with pytest.raises(SamplingMaskError) as err:
        masked_logprobs_from_hidden(hidden, head.weight, (ids, offsets), targets)
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == "weight"
    leaf = hidden.clone().requires_grad_()
    with deepspeed.zero.GatheredParameters([head.weight]):
        whole = head.weight.detach().clone()
        got = masked_logprobs_from_hidden(leaf, head.weight, (ids, offsets), targets).logprobs
    want = masked_logprobs_from_hidden(hidden, whole, (ids, offsets), targets).logprobs
    torch.testing.assert_close(got, want, **TOL)
    # read outside the head's forward, the weight is partitioned again before backward: refused by name
    with pytest.raises(SamplingMaskError) as err:  # was an IndexError inside the scorer
        got.sum().backward()
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == "weight"


def _checks(rank: int, zero3: bool) -> None:
    torch.manual_seed(0)
    base = tiny_causal_lm("qwen2", VOCAB, pad=0, eos=1)  # the same weights on both ranks
    reference, mean_grad = _reference(base)
    _check_fsdp2_and_ddp(rank, base, reference, mean_grad)
    if zero3:
        _check_zero3(rank, base, reference, mean_grad)


def test_replay_under_ddp_fsdp2_and_zero3_equals_one_process():
    """One spawn runs every sharding; a failing assertion on either rank fails this test with its traceback."""
    zero3 = importlib.util.find_spec("deepspeed") is not None  # the test extra installs it
    spawn(_checks, zero3, world=WORLD)
    if not zero3:
        pytest.skip("DDP and FSDP2 checked; ZeRO-3 not: deepspeed is not installed (pip install -e '.[test]')")


def test_device_map_hooks_and_an_offloaded_head(tmp_path):
    """accelerate's ``dispatch_model`` (what ``from_pretrained(device_map=...)`` installs): with the head
    on its own device entry, the replay forward moves the hidden states to the head's device and equals
    the undispatched model (one device here; ``benchmarks/gpu_check_trl.py`` splits CPU / GPU). A head
    offloaded to disk (``meta`` outside accelerate's own hook) is refused, never read."""
    accelerate = pytest.importorskip("accelerate")
    from sampling_mask import ErrorCode, SamplingMaskError

    torch.manual_seed(0)
    base = tiny_causal_lm("qwen2", VOCAB, pad=0, eos=1)
    batch = _batch(0)
    reference = _replaying(copy.deepcopy(base))
    want, loss = _step(reference, batch)
    loss.backward()
    split = accelerate.dispatch_model(
        _replaying(copy.deepcopy(base)), {"model": "cpu", "lm_head": "cpu"}, main_device="cpu", force_hooks=True
    )
    assert hasattr(split.lm_head, "_hf_hook")  # accelerate's hook is on the head
    got, loss = _step(split, batch)
    loss.backward()
    grads = dict(split.named_parameters())
    _check_equal("device_map", 0, got, {n: p.grad for n, p in grads.items()}, want, {
        n: p.grad for n, p in reference.named_parameters()
    })  # fmt: skip
    offloaded = accelerate.dispatch_model(
        _replaying(copy.deepcopy(base)), {"model": "cpu", "lm_head": "disk"}, offload_dir=str(tmp_path)
    )
    assert offloaded.lm_head.weight.device.type == "meta"
    with pytest.raises(SamplingMaskError) as err:
        _step(offloaded, batch)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.field == "lm_head"


def test_the_gpu_check_runs_dry(monkeypatch, capsys):
    """``benchmarks/gpu_check_trl.py``: without CUDA it says so and exits 0; its device_map part runs
    on the CPU (one device, through accelerate's hooks) and holds."""
    import importlib.util
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check_trl.py"
    spec = importlib.util.spec_from_file_location("gpu_check_trl", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert module.main([]) == 0
    assert "CUDA is not available" in capsys.readouterr().out
    monkeypatch.setattr(sys, "path", [*sys.path])  # the part imports integration/helpers.py: undone after
    monkeypatch.delitem(sys.modules, "helpers", raising=False)
    result = module.check_device_map("cpu", 600)
    assert result["ok"], result
