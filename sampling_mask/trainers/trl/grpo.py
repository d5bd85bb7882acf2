"""``ReplayGRPOTrainer``: TRL 1.16.0's ``GRPOTrainer`` with sampling replay (what it does: the package doc).

Importing this module imports TRL, and so torch and transformers (seconds); without TRL it raises
:class:`~sampling_mask.core.optional.UnavailableError`. ``sampling_mask.trainers.trl`` imports it on
the first access of ``ReplayGRPOTrainer``.

Read in the ``trl==1.16.0`` wheel, ``trl/trainer/grpo_trainer.py``: ``_generate_and_score_completions``
generates a batch (``_generate`` -> ``_generate_single_turn``, one ``generate`` call of the model or of
vLLM), scores ``old_per_token_logps`` / ``ref_per_token_logps`` with ``_get_per_token_logps_and_entropies``
(chunks of ``batch_size`` rows, each one call of the model's fused forward from ``add_fused_lm_head``)
and returns a dict of per-completion fields, which ``_prepare_inputs`` shuffles and splits into the
micro-batches ``_compute_loss`` scores again the same way.

One batch's masks travel in one holder, :class:`BatchMasks`, which the trainer puts in use (and takes
out of use) in one place, :meth:`ReplayGRPOTrainer._masks_in_use`; between generation and the loss they
travel as TRL's own per-completion field ``inputs["sampling_mask"]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...core.errors import ErrorCode, SamplingMaskError
from ...core.model import SamplingMask
from ...core.optional import require
from ...sampler import check_sampler
from ...sampler.generation_config import resolve_generation_config, sampler_settings
from ..transformers import SamplingMaskRecorder
from .fused import check_head, replaced, replay_forward
from .masks import (
    MASK_KEY,
    completion_masks,
    config_value,
    hf_processors_not_replayed,
    masks_from_request_outputs,
    masks_from_server_response,
    temperature_mismatch,
    vllm_processors_not_replayed,
    vllm_top_k,
)

require("trl", what="sampling_mask.trainers.trl.ReplayGRPOTrainer")

import torch  # noqa: E402 - after the check above, which names what to install
from trl import GRPOTrainer  # noqa: E402

__all__ = ["BatchMasks", "ReplayGRPOTrainer"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False)
class BatchMasks:
    """The sampling masks of the batch of completions the trainer is scoring, from their capture to
    the loss.

    ``completions[b]`` is the mask of row ``b`` of that batch: one segment with one row per completion
    token (:func:`~sampling_mask.trainers.trl.completion_masks`, views of the captured arrays). Its life:

    1. ``_generate_and_score_completions`` creates it empty and keeps it in use for the whole call;
    2. ``_generate_single_turn`` fills it once (:meth:`fill`) from the one ``generate`` call it
       captured, after checking one segment per completion and one row per completion token; TRL's
       scoring of ``old_per_token_logps`` and ``ref_per_token_logps`` then reads it;
    3. its ``completions`` become ``inputs["sampling_mask"]``, which TRL shuffles and splits with the
       other per-completion fields; ``_compute_loss`` puts the list it receives in use as the
       ``BatchMasks`` of its micro-batch.

    During one of TRL's scoring calls (:meth:`scoring`) the replay forward takes the rows of each chunk
    it scores, in order (:meth:`take`); when the call ends every row has been taken, or it raises: a
    mask in use is never left unapplied.
    """

    #: one mask per completion, in the batch's row order; None until generation filled it
    completions: list[SamplingMask] | None = None
    #: the sampler's kept probability mass per generated token (transformers generation; None with vLLM)
    kept_mass: np.ndarray | None = None
    #: the scoring call in progress: TRL's ``logits_to_keep`` (None outside a call), whether entropies
    #: are asked for, and how many rows the replay forward has taken
    logits_to_keep: int | None = None
    with_entropy: bool = False
    taken: int = 0

    def fill(self, mask: SamplingMask, kept_mass: np.ndarray | None) -> None:
        """The masks of a generation turn: ``mask`` has one segment per completion, in TRL's order."""
        if self.completions is not None:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                "a second generation turn in one batch (several turns per completion, as with tools, are not covered)",
                field=MASK_KEY,
            )
        self.completions, self.kept_mass = completion_masks(mask), kept_mass

    def for_batch(self, rows: int) -> list[SamplingMask]:
        """``completions``, checked to be a list of one mask per row of a batch of ``rows`` completions."""
        if self.completions is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "no sampling mask was captured", field=MASK_KEY)
        if not isinstance(self.completions, list) or len(self.completions) != rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"inputs[{MASK_KEY!r}] must be a list of {rows} completion masks", field=MASK_KEY
            )
        return self.completions

    @contextlib.contextmanager
    def scoring(self, logits_to_keep: int, with_entropy: bool) -> Iterator[None]:
        """One of TRL's scoring calls: the replay forward replays only inside it."""
        self.logits_to_keep, self.with_entropy, self.taken = logits_to_keep, with_entropy, 0
        try:
            yield
        finally:
            self.logits_to_keep = None

    def take(self, rows: int) -> list[SamplingMask]:
        """The masks of the next ``rows`` rows of the scoring call (TRL scores its chunks in order)."""
        assert self.completions is not None  # checked by for_batch before the call
        part = self.completions[self.taken : self.taken + rows]
        self.taken += rows
        return part


class ReplayGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with sampling replay (``sampling_mask.trainers.trl``). Extra keywords:
    ``replay_diagnostics`` (default False): log the importance ratios with and without replay;
    ``allow_processors_not_replayed`` (default False): train with processors replay cannot
    reproduce (warned at construction, named in ``processors_not_replayed``, counted in the logs)
    instead of refusing them.

    Invariants: with ``replay_enabled`` False (nothing truncates) every method is ``GRPOTrainer``'s
    and nothing is captured or carried. With it True, every batch TRL generates carries one mask per
    completion, and every per-token log-prob TRL computes for the policy or the reference model inside
    ``_generate_and_score_completions`` and ``_compute_loss`` is scored over the completion token's row,
    or the call raises a :class:`SamplingMaskError`.
    """

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        *args: Any,
        replay_diagnostics: bool = False,
        allow_processors_not_replayed: bool = False,
        **kwargs: Any,
    ) -> None:
        self.replay_diagnostics = replay_diagnostics
        #: one entry per generation batch with ``replay_diagnostics``: ratio_replay, ratio_full, kept_mass
        self.replay_log: list[dict[str, float]] = []
        #: whether masks are requested and carried: only when the sampler truncates (else full-vocabulary
        #: scoring is already exact and the trainer runs as plain GRPOTrainer, nothing carried)
        self.replay_enabled = False
        #: the masks in use, set and cleared only by ``_masks_in_use``
        self._batch_masks: BatchMasks | None = None
        #: the models whose fused forward replays, as TRL passes them unwrapped (DDP / DeepSpeed wrap them)
        self._replay_models: list[Any] = []
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        self.replay_vllm_top_k = vllm_top_k(config)
        use_vllm = bool(config_value(config, "use_vllm", False))
        with _vllm_engine_returns_masks() if use_vllm and self.replay_vllm_top_k else contextlib.nullcontext():
            super().__init__(*args, **kwargs)
        model: Any = self.model  # a PEFT model replays through its base model
        policy = model.get_base_model() if hasattr(model, "get_base_model") else model
        truncates, named = self._truncates_and_processors(config, policy)
        self.processors_not_replayed = named
        if named and not allow_processors_not_replayed:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "replay cannot reproduce " + ", ".join(named) + " (they change logits the trainer does not see);"
                " remove them, or pass allow_processors_not_replayed=True to train with a warning",
                field=named[0].split("=", 1)[0],
            )
        if named:
            message = "sampling replay does not reproduce " + ", ".join(named) + ": the ratios are not exact"
            warnings.warn(message, stacklevel=2)
            logger.warning(message)
        self.replay_enabled = truncates
        if not truncates:
            return
        self._refuse_uncovered()
        self._install_replay_forward(policy)
        self._replay_models = [self.accelerator.unwrap_model(self.model)]
        if self.ref_model is not None:
            ref = self.accelerator.unwrap_model(self.ref_model)
            self._install_replay_forward(ref)
            self._replay_models.append(ref)
        if self.use_vllm:
            assert self.replay_vllm_top_k is not None  # it truncates
            self.vllm_generation.top_k = self.replay_vllm_top_k  # vLLM needs top_k > 0 for masks

    def _truncates_and_processors(self, config: Any, policy: Any) -> tuple[bool, list[str]]:
        """Whether the sampler TRL runs truncates, and the processors replay cannot reproduce."""
        if self.use_vllm:
            return self.replay_vllm_top_k is not None, vllm_processors_not_replayed(config)
        resolved = resolve_generation_config(self.generation_config, model=policy)
        named = hf_processors_not_replayed(resolved)
        if resolved.do_sample:
            named += temperature_mismatch(resolved.temperature, self.temperature)
        settings = sampler_settings(resolved, resolve=False)
        truncates = (
            bool(resolved.do_sample)
            and check_sampler(
                temperature=settings["temperature"],
                top_k=settings["top_k"],
                top_p=1.0 if settings["top_p"] is None else settings["top_p"],
                min_p=0.0 if settings["min_p"] is None else settings["min_p"],
            ).truncates
        )
        return truncates, named

    def _refuse_uncovered(self) -> None:
        """Setups whose masks cannot be captured or aligned, refused before any generation."""
        uncovered = {
            "use_transformers_continuous_batching": "transformers' generate_batch builds its own logits "
            "processors and takes none from the caller, so the support it sampled from cannot be recorded",
            "tools": "tool-calling turns generate several times per completion",
            "environment_factory": "environments generate several turns per completion",
            "rollout_func": "a custom rollout_func generates outside the trainer's capture",
        }
        set_ = {
            "use_transformers_continuous_batching": getattr(self, "use_transformers_continuous_batching", False),
            "tools": getattr(self, "tools", None),
            "environment_factory": getattr(self, "environment_factories", None),
            "rollout_func": getattr(self, "rollout_func", None),
        }
        for name, reason in uncovered.items():
            if set_[name]:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, f"sampling replay does not cover {name}: {reason}", field=name
                )
        parallelism = getattr(self.accelerator, "parallelism_config", None)
        for kind in ("tp", "cp", "sp"):  # data parallelism (DDP, FSDP2, ZeRO-3, HSDP) is covered; these split a row
            if parallelism is not None and getattr(parallelism, f"{kind}_enabled", False):
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    f"sampling replay does not cover {kind}_size > 1 (the head or the sequence split across ranks)",
                    field=f"parallelism_config.{kind}_size",
                )
        if not self.use_vllm:
            return
        generation = self.vllm_generation
        if getattr(generation, "tensor_parallel_size", 1) != 1:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "replay covers vllm_tensor_parallel_size=1", field="vllm_tensor_parallel_size"
            )
        if getattr(generation, "mode", None) != "colocate" and self.accelerator.num_processes != 1:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "vLLM server mode is covered for one training process (the response reaches rank 0 only)",
                field="vllm_mode",
            )

    def _install_replay_forward(self, model: Any) -> None:
        """Route ``model``'s forward (TRL's fused forward, ``add_fused_lm_head``) through
        :meth:`_routed_forward`. The model holds the trainer weakly: it does not keep it alive, and once
        the trainer is gone the forward is TRL's again."""
        _check_model(model)
        check_head(model.get_output_embeddings())
        original = model.forward
        route = weakref.WeakMethod(self._routed_forward)

        @functools.wraps(original)
        def forward(*args: Any, fused_lm_head: bool = False, labels: Any = None, **kwargs: Any) -> Any:
            routed = route()
            if routed is None:
                return original(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)
            return routed(model, original, fused_lm_head, labels, args, kwargs)

        model.forward = forward

    # ------------------------------------------------------------------ generation: capture and carry
    def _generate_and_score_completions(self, inputs: Any) -> Any:
        """TRL's generation batch with its masks: ``output["sampling_mask"]`` holds one mask per
        completion, and TRL's ``old_per_token_logps`` / ``ref_per_token_logps`` are scored over them."""
        if not self.replay_enabled:  # nothing truncates: full-vocabulary scoring is exact, nothing carried
            return super()._generate_and_score_completions(inputs)
        batch = BatchMasks()
        with self._masks_in_use(batch):  # _generate_single_turn fills it, TRL's scoring reads it
            output = super()._generate_and_score_completions(inputs)
        output[MASK_KEY] = batch.for_batch(int(output["completion_ids"].shape[0]))
        if self.processors_not_replayed:
            self._replay_metrics["sampling_replay/processors_not_replayed"].append(
                float(len(self.processors_not_replayed))
            )
        if self.replay_diagnostics:
            self._log_replay(output, batch)
        return output

    def _generate_single_turn(
        self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: Any, *args: Any, **kwargs: Any
    ) -> Any:
        """TRL's generation of one turn, its one ``generate`` call captured (:meth:`_capture`) and checked
        (one mask per completion, one row per token) into the batch's masks. With transformers
        generation the sampler's own log-probs come back with the completions."""
        if not self.replay_enabled:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
            )
        batch = self._batch_masks
        if batch is None:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "generation outside _generate_and_score_completions: its masks would reach no loss",
                field=MASK_KEY,
            )
        with self._capture() as captured:
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
            )
        if len(captured) != 1:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"{len(captured)} generate calls in one generation turn"
                if captured
                else "no sampling mask was captured",
                field=MASK_KEY,
            )
        mask, kept_mass = captured[0]
        _check_capture(mask, completion_ids)
        batch.fill(mask, kept_mass)
        if logprobs is None:
            logprobs = _float_lists(mask)
        return completion_ids, logprobs

    @contextlib.contextmanager
    def _capture(self) -> Iterator[list[tuple[SamplingMask, np.ndarray | None]]]:
        """While TRL generates one turn, its generate call appends ``(mask, kept mass)`` to the list
        yielded: vLLM colocate's ``llm.generate`` (:func:`masks_from_request_outputs`), the vLLM server
        client's ``generate`` (:func:`masks_from_server_response`), or the model's ``generate()`` with a
        :class:`SamplingMaskRecorder` as its warper stage (transformers' warpers run once)."""
        captured: list[tuple[SamplingMask, np.ndarray | None]] = []
        if self.use_vllm:
            generation = self.vllm_generation
            colocate = getattr(generation, "mode", None) == "colocate"
            engine = generation.llm if colocate else generation.vllm_client
            read = masks_from_request_outputs if colocate else masks_from_server_response
            original = engine.generate

            def generate(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                captured.append((read(result), None))
                return result

        else:
            engine = self.accelerator.unwrap_model(self.model_wrapped)
            original = engine.generate
            eos = list(self.eos_token_ids)
            named_at_init = set(self.processors_not_replayed)

            def generate(*args: Any, **kwargs: Any) -> Any:
                recorder = SamplingMaskRecorder(  # processors named at construction were allowed there
                    kwargs.get("generation_config"), model=engine, allow_processors_not_replayed=bool(named_at_init)
                )
                unexpected = set(hf_processors_not_replayed(recorder.generation_config)) - named_at_init
                if unexpected:  # generate() got processors the construction check did not see: never silent
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA,
                        "generate() runs processors replay cannot reproduce: " + ", ".join(sorted(unexpected)),
                        field="processors_not_replayed",
                    )
                out = recorder.generate(original, *args, **kwargs)
                captured.append((recorder.mask(out, eos_token_id=eos), np.asarray(recorder.kept_mass)))
                return out

        with replaced(engine, "generate", functools.wraps(original)(generate)):
            yield captured

    # ------------------------------------------------------------------ scoring: the loss and the forward
    @contextlib.contextmanager
    def _masks_in_use(self, batch: BatchMasks | None) -> Iterator[None]:
        """``batch`` is the masks TRL's scoring calls use inside the block (None: none), and what was in
        use before is again after it: the one place ``_batch_masks`` changes."""
        previous, self._batch_masks = self._batch_masks, batch
        try:
            yield
        finally:
            self._batch_masks = previous

    def _compute_loss(self, model: Any, inputs: Any) -> Any:
        """TRL's loss over ``inputs["sampling_mask"]`` (this micro-batch's masks, shuffled and split with
        its completions); TRL's entropy metric, then of the renormalized distribution, is logged as
        ``entropy_replay``."""
        carried = inputs.get(MASK_KEY)
        if carried is not None and not self.replay_enabled:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "inputs carry a sampling mask but replay is off (nothing truncates)", field=MASK_KEY
            )
        if carried is None and self.replay_enabled:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"the sampler truncates but inputs carry no {MASK_KEY!r}: the loss would score over the full vocabulary",
                field=MASK_KEY,
            )
        with self._masks_in_use(None if carried is None else BatchMasks(completions=carried)):
            loss = super()._compute_loss(model, inputs)
        if carried is not None:
            metrics = self._replay_metrics
            values = metrics.get("entropy")
            if values:
                metrics["entropy_replay"].append(values.pop())
            if not values:
                metrics.pop("entropy", None)
        return loss

    def _get_per_token_logps_and_entropies(
        self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any, **kwargs: Any
    ) -> Any:
        """TRL's per-token log-probs and entropies; with masks in use, each completion token's over its
        row. Raises (``E_SHAPE``) unless the masks in use are one per row of ``input_ids``, (``model``)
        unless ``model`` is the policy or the reference, and (``model``) unless the replay forward took
        every row: never a silent full-vocabulary score."""
        batch = self._batch_masks
        if batch is None:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        rows = int(input_ids.shape[0])
        batch.for_batch(rows)
        scored = self.accelerator.unwrap_model(model)
        if not any(scored is m for m in self._replay_models):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "a mask is active but the model scored is not the policy or the reference",
                field="model",
            )  # fmt: skip
        with_entropy = bool(kwargs.get("compute_entropy", args[1] if len(args) > 1 else False))
        with batch.scoring(int(logits_to_keep), with_entropy):
            result = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            if batch.taken != rows:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    f"the replay forward scored {batch.taken} of {rows} completions "
                    "(the model's forward was replaced after ReplayGRPOTrainer was built)",
                    field="model",
                )
        return result

    def _routed_forward(
        self, model: Any, original: Any, fused_lm_head: bool, labels: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        """A replayed model's forward: a fused call (TRL's log-probs) with masks in use is replayed
        (:meth:`_replay_forward`); a call without masks in use, or one that is not fused (generation),
        runs TRL's. A fused call with masks in use that cannot be replayed raises (``E_SCHEMA``): outside
        one of TRL's scoring calls (no rows to take), or without ``input_ids``."""
        batch = self._batch_masks
        if batch is None or not fused_lm_head:
            return original(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)
        input_ids: Any = kwargs.get("input_ids", args[0] if args else None)
        if batch.logits_to_keep is None or input_ids is None or labels is None:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "a fused log-prob call while masks are in use, outside TRL's scoring or without input_ids and labels:"
                " it would score over the full vocabulary",
                field=MASK_KEY,
            )
        return self._replay_forward(model, batch, input_ids, labels, args, kwargs)

    def _replay_forward(
        self, model: Any, batch: BatchMasks, input_ids: Any, labels: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        """The fused forward's output for the next ``len(input_ids)`` rows of ``batch``, as TRL's fused
        head returns it (:func:`~.fused.replay_forward`: each completion token scored over its row, the
        output head read inside its own call, as the model's sharding materializes it)."""
        assert batch.logits_to_keep is not None  # inside a scoring call
        return replay_forward(
            model,
            batch.take(int(input_ids.shape[0])),
            input_ids,
            labels,
            logits_to_keep=batch.logits_to_keep,
            temperature=float(self.temperature),
            with_entropy=batch.with_entropy,
            args=args,
            kwargs=kwargs,
        )

    # ------------------------------------------------------------------ logging
    @property
    def _replay_metrics(self) -> Any:
        """TRL's metrics of the current mode (``self._metrics["train"]`` or ``["eval"]``)."""
        model: Any = self.model
        return self._metrics["train" if model.training else "eval"]

    def _log_replay(self, output: dict[str, Any], batch: BatchMasks) -> None:
        """``replay_diagnostics``: the batch's mean ``exp(trainer logp - sampler logp)`` with replay and
        over the full vocabulary, and the sampler's mean kept mass, logged and kept in ``replay_log``."""
        sampler = output.get("sampling_per_token_logps")
        if sampler is None:
            return
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        keep = output["completion_ids"].shape[1]
        with torch.no_grad():
            with self._masks_in_use(batch):
                replay, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
            full, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
        valid = output["completion_mask"].bool()
        entry = {
            "step": float(self.state.global_step),
            "ratio_replay": float(torch.exp(replay - sampler)[valid].double().mean()),
            "ratio_full": float(torch.exp(full - sampler)[valid].double().mean()),
            "kept_mass": float(batch.kept_mass.mean()) if batch.kept_mass is not None else float("nan"),
        }
        self.replay_log.append(entry)
        for key in ("ratio_replay", "ratio_full", "kept_mass"):
            self._replay_metrics[f"sampling_replay/{key}"].append(entry[key])


def _check_model(model: Any) -> None:
    """Refuse models whose logits are scaled or soft-capped after the head: replay scores ``hidden @ W.T``."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    names = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    scaled = [f"{n}={getattr(config, n)!r}" for n in names if getattr(config, n, None) not in (None, 1, 1.0)]
    if scaled:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "replay does not cover scaled / soft-capped logits: " + ", ".join(scaled), field="model"
        )


@contextlib.contextmanager
def _vllm_engine_returns_masks() -> Iterator[None]:
    """While TRL builds its colocated ``LLM``, build it with ``return_sampling_mask=True``."""
    try:
        from trl.generation import vllm_generation
    except ImportError:  # pragma: no cover - trl without its generation module
        yield
        return
    llm = getattr(vllm_generation, "LLM", None)
    if llm is None:
        yield
        return
    vllm_generation.LLM = functools.partial(llm, return_sampling_mask=True)
    try:
        yield
    finally:
        vllm_generation.LLM = llm


def _float_lists(mask: SamplingMask) -> list[list[float]]:
    """The sampler's log-probs of each completion's tokens, as TRL's generation returns them."""
    values = mask.sampled_logprobs
    if values is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the recorded mask has no sampled_logprobs", field="sampled_logprobs"
        )
    return [values[a:b].tolist() for a, b in zip(mask.cu_seqlens[:-1], mask.cu_seqlens[1:], strict=True)]


def _check_capture(mask: SamplingMask, completion_ids: Sequence[Sequence[int]]) -> None:
    """The captured mask has one segment per completion and one row per completion token."""
    lengths = np.fromiter((len(ids) for ids in completion_ids), dtype=np.int64, count=len(completion_ids))
    if mask.num_segments != lengths.size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{mask.num_segments} captured masks for {lengths.size} completions",
            field=MASK_KEY,
        )
    rows = np.diff(mask.cu_seqlens)
    if not np.array_equal(rows, lengths):
        b = int(np.argmax(rows != lengths))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"completion {b}: {int(rows[b])} mask rows for {int(lengths[b])} tokens",
            segment=b,
            field=MASK_KEY,
        )
