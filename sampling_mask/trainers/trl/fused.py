"""Replay's fused forward: TRL 1.16's fused-head contract, each completion token scored over its row,
the output head read where the model's sharding materializes it.

Importing this module imports TRL (and so torch and transformers): :func:`replay_forward` returns
TRL's own ``FusedCausalLMOutput``. :mod:`.grpo` routes ``ReplayGRPOTrainer``'s fused calls here; the
multi-process tests call it on models sharded without a trainer.

Read in the ``trl==1.16.0`` wheel (huggingface/trl release 1.16.0):

- ``trl/trainer/utils.py``, ``add_fused_lm_head`` (``_fused_forward``): the backbone is
  ``self.base_model``; position t of ``last_hidden_state`` predicts label t + 1, scored where the label
  is not -100; the head is looked up on each call (``get_output_embeddings``, "FSDP and PEFT replace
  them after patching"); hidden states are moved to ``lm_head.weight.device`` ("with the model split
  across devices (``device_map``), the backbone can end on another device than the head"); an FSDP2
  ``DTensor`` weight is gathered with ``full_tensor()``; the projection runs inside
  ``maybe_gather_lm_head_ctx(weight, bias)`` (``deepspeed.zero.GatheredParameters`` under ZeRO-3),
  which ``_ChunkedLogProbFunction.backward`` (``trl/kernels/chunked_logprob.py``) enters again
  because ZeRO-3 partitions the weight again between forward and backward.
- ``trl/models/utils.py``, ``_ForwardRedirection``: a call routed through a module's ``forward`` so
  that the hooks FSDP and DeepSpeed put on it run (``distillation_trainer.py``: "FSDP/DeepSpeed keep
  the student's sharded parameters (including the ``lm_head``) materialized for the projection").

How the head is read (:func:`head_scores`): the scoring runs inside the head module's own call, the
``_ForwardRedirection`` way, so the head's parameters are exactly what the model's own
``lm_head(hidden)`` would see, gathered and released by the sharding's own hooks, and its gradients
reduced by them:

- one process, DDP: the parameters as they are; nothing gathered.
- FSDP2 (``fully_shard``), whatever the wrap policy: the head in the root's group (unsharded for the
  whole root forward), in accelerate's tail group ``[final norm, lm_head]`` (unsharded when the norm
  ran), or wrapped on its own (its pre-forward hook all-gathers ``[V, d]``, as ``full_tensor()``
  does; its post-forward reshards, the pre-backward hook gathers again, and the post-backward hook
  reduce-scatters the head's gradient; read outside that call, as TRL reads it, the gradient through
  ``full_tensor()`` goes back to each rank's shard as that rank's own, reduced across no ranks).
- DeepSpeed ZeRO-3: the head's pre-forward hook gathers ``[V, d]`` (what ``GatheredParameters``
  gathers) and the pre-backward hook gathers it again for the backward (what
  ``_ChunkedLogProbFunction.backward`` does); gradients are partitioned by ZeRO-3's own hooks.
- ``device_map`` splits: hidden states, ids and targets move to the head's device, as TRL moves them.

Allowlist: a head that is a ``torch.nn.Linear`` with ``Linear``'s own forward (``hidden @ W.T + b``;
FSDP2's and accelerate's wrappers keep it) whose weight, inside that call, is a whole floating tensor
on a real device. Refused (``SamplingMaskError`` ``E_SCHEMA``, field ``lm_head``): any other head (a
PEFT adapter or ``modules_to_save`` wrapper on the head, a quantized linear: TRL's fused head would
score without the adapter), an offloaded head (``meta``: accelerate's offload hooks load it only in
its own forward). The scorer refuses a weight still a ``DTensor`` inside the call (tensor
parallelism: ``E_SCHEMA``, field ``weight``) and a weight released between forward and backward
(``E_SHAPE``) rather than read them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ...core.errors import ErrorCode, SamplingMaskError
from ...core.optional import require
from ...reference_scorer import masked_logprobs_from_hidden
from .masks import completion_support

require("trl", what="sampling_mask.trainers.trl.fused")

import torch  # noqa: E402 - after the check above, which names what to install
from trl.trainer.utils import FusedCausalLMOutput  # noqa: E402

__all__ = ["check_head", "head_scores", "replaced", "replay_forward"]


def replay_forward(
    model: Any,
    parts: Sequence[Any],
    input_ids: Any,
    labels: Any,
    *,
    logits_to_keep: int,
    temperature: float,
    with_entropy: bool,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
) -> Any:
    """The fused forward's output for a batch of ``len(input_ids)`` completions whose masks are
    ``parts`` (one one-segment mask per completion, :func:`~.masks.completion_masks`), as TRL's fused
    head returns it: ``log_probs`` / ``entropy`` ``[B, L - 1]``, 0 where the label is -100 or before
    the last ``logits_to_keep`` positions. ``args`` / ``kwargs`` are the backbone's (``input_ids``,
    ``attention_mask``, ...). Each completion token is scored over its row from the hidden states,
    through :func:`head_scores` (ragged support, never ``[T, V]`` nor ``[B, L, W]``). Refused
    (``E_SCHEMA``): MoE router outputs (``output_router_logits``: their aux loss) and pre-shifted
    ``shift_labels`` (context parallelism), which TRL's fused head also accepts."""
    kwargs = dict(kwargs or {})
    if kwargs.get("output_router_logits"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "replay does not cover MoE aux losses", field="model")
    if kwargs.get("shift_labels") is not None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "replay does not cover pre-shifted labels (context parallelism)", field="shift_labels"
        )
    kwargs.pop("num_items_in_batch", None)
    kwargs["use_cache"] = False
    hidden = model.base_model(*args, **kwargs).last_hidden_state
    length, keep = int(input_ids.shape[1]), int(logits_to_keep)
    hidden = hidden[:, length - 1 - keep : length - 1]  # position t predicts token t + 1
    target = labels[:, length - keep :]
    valid = target != -100  # on the labels' device; the backbone may end on another (device_map)
    ids, offsets = completion_support(parts, valid)
    logprobs, entropy = head_scores(
        model,
        hidden[valid.to(hidden.device)],
        ids,
        offsets,
        target[valid],
        temperature=temperature,
        with_entropy=with_entropy,
    )
    device = logprobs.device
    valid = valid.to(device)
    full = torch.zeros(labels.shape[0], length - 1, dtype=logprobs.dtype, device=device)
    window = slice(length - 1 - keep, length - 1)
    logps = full.clone()
    logps[:, window] = logps[:, window].masked_scatter(valid, logprobs)
    per_token_entropy = None
    if entropy is not None:
        per_token_entropy = full.clone()
        per_token_entropy[:, window] = per_token_entropy[:, window].masked_scatter(valid, entropy)
    label_mask = torch.zeros(full.shape, dtype=torch.bool, device=device)
    label_mask[:, window] = valid
    return FusedCausalLMOutput(
        loss=-logprobs.sum() / valid.sum().clamp(min=1),
        log_probs=logps,
        entropy=per_token_entropy,
        label_mask=label_mask,
    )


def head_scores(
    model: Any,
    hidden: Any,
    ids: Any,
    offsets: Any,
    targets: Any,
    *,
    temperature: float,
    with_entropy: bool,
) -> tuple[Any, Any]:
    """``(log-probs [N], entropy [N] or None)`` of ``targets`` under ``hidden [N, d] @ W.T + b``
    renormalized over the ragged rows ``(ids, offsets)`` (an empty row: the full vocabulary), with
    ``(W, b)`` the model's output head read inside its own call (see the module doc), on the head's
    device; 0 where a row is not scored."""
    head = model.get_output_embeddings()
    check_head(head)
    device = head.weight.device
    if device.type == "meta":
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "the output head is offloaded (device meta): replay reads it on a device",
            field="lm_head",
        )
    moved = [t.to(device) for t in (hidden, ids, offsets, targets)]

    def score(hidden: Any, ids: Any, offsets: Any, targets: Any) -> tuple[Any, Any]:
        scores = masked_logprobs_from_hidden(  # refuses a DTensor weight (tensor parallel): E_SCHEMA
            hidden,
            head.weight,
            (ids, offsets),
            targets,
            bias=head.bias,
            temperature=temperature,
            with_entropy=with_entropy,
            fill_value=0.0,
        )
        return scores.logprobs, scores.entropy

    with replaced(head, "forward", score):
        logprobs, entropy = head(*moved)
    return logprobs, entropy


def check_head(head: Any) -> None:
    """``head`` computes ``hidden @ W.T + b``: a ``torch.nn.Linear`` with ``Linear``'s own forward
    (FSDP2's ``FSDPLinear`` and accelerate's hooks keep it), a floating weight. Else ``E_SCHEMA``."""
    linear = (
        isinstance(head, torch.nn.Linear)
        and type(head).forward is torch.nn.Linear.forward
        and isinstance(head.weight, torch.Tensor)
        and head.weight.is_floating_point()
    )
    if not linear:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"replay scores hidden @ W.T + b: the output head must be a torch.nn.Linear, got {type(head).__name__}"
            " (an adapter or a quantized layer on the head is not covered)",
            field="lm_head",
        )


@contextlib.contextmanager
def replaced(obj: Any, name: str, value: Any) -> Iterator[None]:
    """``obj.name`` is ``value`` inside the block; after it, what it was (an instance attribute is put
    back, a method of the class is uncovered again)."""
    own = getattr(obj, "__dict__", {})
    had, previous = name in own, own.get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, previous)
        else:
            delattr(obj, name)
