"""The TRL integration: sampling replay for ``GRPOTrainer`` (TRL 1.16.0 as released).

Read in the ``trl==1.16.0`` wheel (huggingface/trl release 1.16.0): ``trl/trainer/grpo_trainer.py``
(``__init__``, ``_generate_single_turn``, ``_generate_and_score_completions``, ``_prepare_inputs``,
``_get_per_token_logps_and_entropies``, ``_compute_loss``), ``trl/trainer/utils.py``
(``add_fused_lm_head``: the forward with ``fused_lm_head=True`` returns per-token ``log_probs`` /
``entropy`` over the full vocabulary, from hidden states, at ``args.temperature``;
``shuffle_sequence_dict`` / ``split_tensor_dict``: tensors and lists are permuted and sliced along the
batch) and ``trl/generation/vllm_generation.py`` (colocate: ``LLM(..., logprobs_mode="processed_logprobs")``
then ``self.llm.generate``; server: ``vllm_client.generate``; ``generation_kwargs`` update the
``SamplingParams``).

TRL asks vLLM for processed log-probs (over the support the sampler kept) but scores its own per-token
log-probs over the full vocabulary, so its importance-sampling ratio is biased by the kept mass when
top-p / top-k / min-p truncate. :class:`ReplayGRPOTrainer` (a ``GRPOTrainer`` subclass; the only
change a user makes) fixes that:

- **Only when something truncates.** With TRL's defaults (``top_k=0``, ``top_p=1``, ``min_p=None``;
  for transformers generation, the config ``generate()`` really resolves) the support is the whole
  vocabulary: no mask is requested, captured or carried, and the trainer is plain ``GRPOTrainer``
  (``replay_enabled`` is False).
- **Capture.** transformers generation: a :class:`~sampling_mask.trainers.transformers.SamplingMaskRecorder`
  is added to the ``generate()`` call, and the sampler's own log-probs are returned with the
  completions. vLLM colocate: the engine is built with ``return_sampling_mask=True`` (vLLM >= 0.28) and
  each ``CompletionOutput.sampling_mask`` is read. vLLM server: ``vllm_client.generate``'s response
  must carry ``"sampling_mask"`` (one list of rows per completion; ``trl vllm-serve`` 1.16.0 does not
  return it, so a server that does is needed: the trainer raises ``E_SCHEMA`` naming the field).
  Each capture must give one segment per completion and one row per completion token (``E_SHAPE``).
- **Carry.** ``inputs["sampling_mask"]`` is a list of one-segment :class:`SamplingMask` (one per
  completion, :func:`completion_masks`), so TRL's shuffling and splitting keep each with its
  completion. Memory O(kept ids + rows): never a dense ``[B, L, W]``.
- **Renormalize.** While masks are active, the fused forward of the policy *and of the reference
  model* (``beta > 0``; a PEFT reference is the policy with its adapter off) scores each completion
  token over its row with :func:`~sampling_mask.reference_scorer.masked_logprobs_from_hidden`
  (ragged rows from :func:`completion_support`, never ``[T, V]``): ``old_per_token_logps`` (so the
  vLLM importance-sampling ratio is computed after renormalization), ``ref_per_token_logps`` (so the
  KL is 0 where policy == reference) and the loss's log-probs. A mask that is active but not consumed,
  a fused call with masks in use outside TRL's scoring, and a loss batch without masks while the
  sampler truncates raise rather than fall back to full-vocabulary scores.
- **Sharding.** The scoring runs inside the output head's own call (:mod:`.fused`), so the head is
  read as the model's sharding materializes it, gathered and its gradient reduced by the sharding's
  own hooks: one process, DDP, FSDP2 (``fully_shard``, whatever the wrap policy, the head wrapped on
  its own included), DeepSpeed ZeRO-3, ``device_map`` splits (hidden states move to the head's device).
  Refused (``E_SCHEMA``): accelerate's tensor / context / sequence parallelism (``parallelism_config``),
  a head other than a ``torch.nn.Linear`` (an adapter or a quantized layer on it), an offloaded head.
- **Entropy.** The per-token entropies TRL uses (its metric, ``top_entropy_quantile``, the entropy
  bonus) are those of the renormalized distribution, and the metric is logged as ``entropy_replay``
  instead of ``entropy`` (which keeps TRL's meaning, full vocabulary, whenever replay is off).
- **Processors.** Settings that change logit values the trainer does not see
  (``repetition_penalty``, ``sequence_bias``, ``guidance_scale``, vLLM's penalties / ``logit_bias`` /
  custom processors, greedy decoding, a ``generation_kwargs`` temperature other than the one TRL
  scores at; :func:`hf_processors_not_replayed`,
  :func:`vllm_processors_not_replayed`) are refused at construction (``E_SCHEMA``, ``field`` the
  first one), or, with ``allow_processors_not_replayed=True``, named in a ``UserWarning`` and the
  log, kept in ``processors_not_replayed`` and counted per batch as
  ``sampling_replay/processors_not_replayed``. Processors that only set ids to -inf
  (``no_repeat_ngram_size``, bad words, ``min_new_tokens``, suppressed / forced tokens; vLLM's
  ``bad_words``, ``allowed_token_ids``, ``min_tokens``, structured outputs) are replayed exactly: the
  recorded support carries them.

Refused at construction, before any generation (``E_SCHEMA`` naming the option): transformers
continuous batching (``use_transformers_continuous_batching``: ``generate_batch`` builds its own
processors and takes none), tools / environments (several generation turns per completion), a custom
``rollout_func``; also models with ``final_logit_softcapping`` / a logit scale, MoE router aux-loss
outputs, vLLM tensor parallel > 1. ``replay_diagnostics=True`` logs, per generation batch,
``sampling_replay/ratio_replay`` (mean over tokens of ``exp(trainer logp - sampler logp)`` with
replay), ``sampling_replay/ratio_full`` (the same over the full vocabulary) and, with transformers
generation, ``sampling_replay/kept_mass`` (the sampler's mean kept probability mass); also kept in
``trainer.replay_log``.

Three modules: :mod:`.masks` (the readers, the carry and the settings checks above; numpy, cheap to
import), :mod:`.fused` (the replay forward, TRL's fused-head contract scored over the rows, and the
head read) and :mod:`.grpo` (``ReplayGRPOTrainer``, a module-level class, and :class:`~.grpo.BatchMasks`,
the one holder of a batch's masks from generation to the loss). Importing either of the last two
imports TRL, and so torch and transformers, which takes seconds. This package re-exports the first and
imports ``ReplayGRPOTrainer`` from :mod:`.grpo` on first access: ``import sampling_mask.trainers.trl`` imports
neither TRL nor torch, and where TRL is not installed that access raises
:class:`~sampling_mask.core.optional.UnavailableError` (an ``ImportError``) naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .masks import (
    MASK_KEY,
    completion_masks,
    completion_support,
    hf_processors_not_replayed,
    masks_from_request_outputs,
    masks_from_server_response,
    vllm_processors_not_replayed,
    vllm_top_k,
)

if TYPE_CHECKING:
    from .grpo import ReplayGRPOTrainer as ReplayGRPOTrainer

__all__ = [  # ReplayGRPOTrainer is left out: ``import *`` would import TRL
    "MASK_KEY",
    "completion_masks",
    "completion_support",
    "hf_processors_not_replayed",
    "masks_from_request_outputs",
    "masks_from_server_response",
    "vllm_processors_not_replayed",
    "vllm_top_k",
]


def __getattr__(name: str) -> Any:
    """``ReplayGRPOTrainer``, imported from :mod:`.grpo` (and so TRL) on first access."""
    if name == "ReplayGRPOTrainer":
        from .grpo import ReplayGRPOTrainer

        return ReplayGRPOTrainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
