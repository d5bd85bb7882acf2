"""Reference torch scorer: log-probs and entropy renormalized over each row's sampling mask.

This package imports torch; ``import sampling_mask`` never imports it. The normative rule
(spec/v1/SPEC.md, section ``scoring``), for row t with support S_t, raw logits z_t, temperature
tau_t and target y_t::

    log p_t = z_{t,y}/tau_t - logsumexp_{j in S_t} z_{t,j}/tau_t
    H_t     = -sum_{j in S_t} p_j log p_j          (p renormalized over S_t)

From logits ``[T, V]``:
    :func:`masked_logprobs` (``with_entropy=`` for both), :func:`masked_entropy`,
    :func:`masked_support_logprobs` (every id of the mask, [nnz]), :func:`full_logprobs` (the
    full-vocabulary log-probs a trainer without replay computes, for comparison).
From hidden states ``[T, d]`` and an lm-head weight ``[V, d]`` (optional bias ``[V]``), never forming
``[T, V]``: :func:`masked_logprobs_from_hidden`, :func:`masked_entropy_from_hidden`.

Common arguments:
    ``mask``: a :class:`~sampling_mask.SamplingMask`, a dense ``-1``-padded int tensor ``[T, W]``, or
    ragged tensors ``(ids [P], offsets [T+1])`` (numpy arrays work too).
    ``targets``: int [T], default the mask's ``sampled_token_ids``; ``-1`` (empty rows only) = no target;
    ``ignore_index`` (default -100, as ``torch.nn.functional.cross_entropy``) = no target on any row,
    so Hugging Face ``labels`` work as they are.
    ``temperature``: scalar or [T]; default the mask's ``temperature`` companion, else 1. Logits are raw.
    ``empty_rows``: ``"full"`` (default; score over the whole vocabulary) or ``"exclude"`` (NaN and
    ``valid`` False). ``missing_target``: ``"error"`` (default; ``SamplingMaskError``
    ``E_MISSING_SAMPLED`` naming the row), ``"full"`` or ``"neg_inf"``. The counts of rows each policy
    touched come back in :class:`MaskedScores`.
    ``fill_value``: the value of rows not scored (``valid`` False), default NaN; ``fill_value=0.0``
    keeps ``-(out.logprobs * loss_mask).sum()`` finite. Filled rows get a zero gradient.
    ``vocab_group``: a torch.distributed group; logits (or weight and bias) are then this rank's
    contiguous vocabulary shard, shards in rank order; outputs are replicated and gradients exact.
    ``max_chunk_bytes`` (default 256 MiB): the memory budget of one chunk (vocabulary tiles of rows
    scored over the full vocabulary; for a bf16 / fp16 weight also pair chunks and weight-gradient
    blocks); ``SamplingMaskError`` ``E_RANGE`` unless an integer >= 1. ``chunk_size`` (default None):
    an optional cap on the pairs, ids, tile rows and tile columns of a chunk.

Precision: bf16 / fp16 are accumulated in fp32, float64 stays float64. Logits equal to ``-inf``
contribute zero probability and never a NaN gradient. A row whose support holds only ``-inf``
logits has no distribution: NaN, ``valid`` False.

Diagnostics: :func:`replay_diagnostics` -> :class:`ReplayDiagnostics` (per-row importance ratio,
mismatch KL k1 / k3 between rollout ``sampled_logprobs`` and trainer log-probs, fraction of rows
replayed; all-reduced over a context-parallel ``group``).
Context parallel: :func:`context_parallel_split` (rows of one rank, contiguous or zig-zag, via
``sampling_mask.data.alignment.context_parallel_rows``) and :func:`gather_rows`.

Support reconstruction and the mask audit: :func:`support_from_logits` (what vLLM / SGLang /
transformers' sampler keeps for each row, ``rule=``), :func:`audit` / :func:`audit_from_hidden` ->
:class:`SupportAudit` (recorded vs recomputed support, and the split of the rollout / trainer log-prob
mismatch into a support part and a logit-drift part).

Everything is vectorized (segment ops over the (row, id) pairs; no loop over rows) and runs on
whatever device the inputs are on.
"""

from __future__ import annotations

from . import _torch  # noqa: F401 - first: a missing torch is E_UNAVAILABLE with the extra to install
from .diagnostics import ReplayDiagnostics, replay_diagnostics
from .distributed import context_parallel_split, gather_rows
from .inputs import EMPTY_ROW_POLICIES, MISSING_TARGET_POLICIES
from .scoring import (
    MaskedScores,
    full_logprobs,
    masked_entropy,
    masked_entropy_from_hidden,
    masked_logprobs,
    masked_logprobs_from_hidden,
    masked_support_logprobs,
)
from .support import RULES, support_from_logits
from .support_audit import ROW_CLASSES, SupportAudit, audit, audit_from_hidden

__all__ = [
    "EMPTY_ROW_POLICIES",
    "MISSING_TARGET_POLICIES",
    "MaskedScores",
    "ROW_CLASSES",
    "RULES",
    "ReplayDiagnostics",
    "SupportAudit",
    "audit",
    "audit_from_hidden",
    "context_parallel_split",
    "full_logprobs",
    "gather_rows",
    "masked_entropy",
    "masked_entropy_from_hidden",
    "masked_logprobs",
    "masked_logprobs_from_hidden",
    "masked_support_logprobs",
    "replay_diagnostics",
    "support_from_logits",
]
