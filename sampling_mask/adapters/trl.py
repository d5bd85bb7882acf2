"""TRL adapter: sampling replay for ``GRPOTrainer`` (TRL 1.16.0 as released).

Read in the ``trl==1.16.0`` wheel (huggingface/trl release 1.16.0): ``trl/trainer/grpo_trainer.py``
(``_generate_single_turn``, ``_generate_and_score_completions``, ``_get_per_token_logps_and_entropies``,
``_compute_loss``), ``trl/trainer/utils.py`` (``add_fused_lm_head``: the policy's forward with
``fused_lm_head=True`` returns per-token ``log_probs`` / ``entropy`` over the full vocabulary, from
hidden states, at ``args.temperature``) and ``trl/generation/vllm_generation.py`` (colocate:
``LLM(..., logprobs_mode="processed_logprobs")`` then ``self.llm.generate``; server: ``vllm_client.generate``).

TRL asks vLLM for processed log-probs (over the support the sampler kept) but scores its own per-token
log-probs over the full vocabulary, so its importance-sampling ratio is biased by the kept mass when
top-p / top-k / min-p truncate. :class:`ReplayGRPOTrainer` (a ``GRPOTrainer`` subclass; the only
change a user makes) fixes that:

- **Capture.** transformers generation: a :class:`~sampling_mask.adapters.transformers.SamplingMaskRecorder`
  is added to the ``generate()`` call, and the sampler's own log-probs are returned with the
  completions. vLLM colocate: the engine is built with ``return_sampling_mask=True`` (vLLM >= 0.28) and
  each ``CompletionOutput.sampling_mask`` is read. vLLM server: ``vllm_client.generate``'s response
  must carry ``"sampling_mask"`` (one list of rows per completion; ``trl vllm-serve`` 1.16.0 does not
  return it, so a server that does is needed: the trainer raises ``E_SCHEMA`` naming the field).
- **Carry.** The masks travel in the generation batch as ``inputs["sampling_mask"]``, an int32
  ``[B, completion_length, W]`` tensor (``-1`` padding), so TRL's shuffling and splitting keep them
  aligned with ``completion_ids``.
- **Renormalize.** While a mask is active, the policy's fused forward scores each completion token over
  its row with :func:`~sampling_mask.reference_scorer.masked_logprobs_from_hidden` (never ``[T, V]``):
  log-probs and entropies of the renormalized distribution, for ``old_per_token_logps`` (so the vLLM
  importance-sampling ratio is computed after renormalization) and for the loss.

Not covered (refused): several generation turns per completion (tool calling), models with
``final_logit_softcapping`` / a logit scale, MoE router aux-loss outputs, transformers continuous
batching (``generate_batch``). ``replay_diagnostics=True`` logs, per generation batch,
``sampling_replay/ratio_replay`` (mean over tokens of ``exp(trainer logp - sampler logp)`` with
replay), ``sampling_replay/ratio_full`` (the same over the full vocabulary) and, with transformers
generation, ``sampling_replay/kept_mass`` (the sampler's mean kept probability mass); also kept in
``trainer.replay_log``.

trl is imported when ``ReplayGRPOTrainer`` (built on first access by the module's ``__getattr__``, so
it is not in ``__all__``) or :func:`replay_trainer` is first used.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask, concat
from . import vllm as vllm_adapter
from ._common import get_field

__all__ = [
    "MASK_KEY",
    "dense_completion_mask",
    "masks_from_request_outputs",
    "masks_from_server_response",
    "replay_trainer",
    "vllm_top_k",
]

MASK_KEY = "sampling_mask"


def masks_from_request_outputs(outputs: Sequence[Any], *, vocab_size: int | None = None) -> SamplingMask:
    """One segment per completion of vLLM ``RequestOutput``s, in TRL's order (``for outputs in
    all_outputs for output in outputs.outputs``). A null ``sampling_mask`` is ``E_SCHEMA``, except on
    a completion without tokens (an aborted request): its segment is empty, as its completion."""
    masks = []
    for r, request in enumerate(outputs):
        for c, output in enumerate(get_field(request, "outputs", where=f"outputs[{r}]")):
            token_ids = get_field(output, "token_ids", None)
            if get_field(output, "sampling_mask", None) is None and token_ids is not None and len(token_ids) == 0:
                empty = np.zeros(0, np.int32)
                masks.append(
                    SamplingMask(
                        empty, np.zeros(1, np.int64), cu_seqlens=[0, 0], vocab_size=vocab_size, sampled_token_ids=empty
                    )
                )
                continue
            try:
                mask = vllm_adapter.from_completion_output(output, vocab_size=vocab_size)
            except SamplingMaskError as exc:
                raise SamplingMaskError(
                    exc.code, f"request {r} completion {c}: {exc.message}", field=exc.field, row=exc.row
                ) from None
            assert mask is not None  # on_missing="raise"
            masks.append(mask)
    return _segments(masks)


def masks_from_server_response(response: Any, *, vocab_size: int | None = None) -> SamplingMask:
    """One segment per completion of a ``vllm_client.generate`` response carrying ``"sampling_mask"``
    (a list, per completion, of rows) next to ``"completion_ids"``."""
    rows = get_field(response, MASK_KEY, None)
    if rows is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "the vLLM server returned no sampling_mask: run a server that returns it (trl vllm-serve 1.16.0 does not)",
            field=MASK_KEY,
        )
    completions = get_field(response, "completion_ids", where="response")
    if len(rows) != len(completions):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{len(rows)} masks for {len(completions)} completions", field=MASK_KEY
        )
    masks = [
        vllm_adapter.from_token_ids(r, sampled_token_ids=ids, vocab_size=vocab_size)
        for r, ids in zip(rows, completions, strict=True)
    ]
    return _segments(masks)


def _segments(masks: list[SamplingMask]) -> SamplingMask:
    if not masks:
        return SamplingMask(np.zeros(0, np.int32), np.zeros(1, np.int64), cu_seqlens=[0])
    return concat(masks)


def dense_completion_mask(mask: SamplingMask, completion_length: int, *, device: Any = None) -> Any:
    """int32 ``[segments, completion_length, W]`` (``-1`` padding, ``W`` the widest row, >= 1): row t of
    segment b at ``[b, t]``; positions past a segment's rows are all ``-1`` (scored over the full
    vocabulary, and masked out by TRL's ``completion_mask``). ``E_SHAPE`` if a segment is longer."""
    import torch

    lengths = np.diff(mask.cu_seqlens)
    if lengths.size and int(lengths.max()) > completion_length:
        b = int(np.argmax(lengths))
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"{int(lengths[b])} mask rows for a completion of at most {completion_length} tokens",
            segment=b,
            field=MASK_KEY,
        )
    width = max(1, int(mask.row_lengths.max(initial=0)))
    out = np.full((lengths.size, completion_length, width), -1, dtype=np.int32)
    seg = np.repeat(np.arange(lengths.size), lengths)
    t = np.arange(mask.num_rows) - mask.cu_seqlens[seg]
    row = np.repeat(np.arange(mask.num_rows), mask.row_lengths)
    col = np.arange(mask.nnz) - mask.offsets[row]
    out[seg[row], t[row], col] = mask.ids
    return torch.from_numpy(out).to(device) if device is not None else torch.from_numpy(out)


class _ReplayState:
    """The dense mask of the batch being scored, consumed chunk by chunk by the patched forward."""

    def __init__(self) -> None:
        self.dense: Any = None
        self.offset = 0
        self.logits_to_keep = 0

    @contextlib.contextmanager
    def active(self, dense: Any, logits_to_keep: int) -> Iterator[None]:
        self.dense, self.offset, self.logits_to_keep = dense, 0, logits_to_keep
        try:
            yield
        finally:
            self.dense, self.offset = None, 0

    def take(self, rows: int) -> Any:
        if self.dense is None:
            return None
        part = self.dense[self.offset : self.offset + rows]
        self.offset += rows
        return part


def _check_model(model: Any) -> None:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    names = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")
    scaled = [f"{n}={getattr(config, n)!r}" for n in names if getattr(config, n, None) not in (None, 1, 1.0)]
    if scaled:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "replay does not cover scaled / soft-capped logits: " + ", ".join(scaled), field="model"
        )


def _install_replay_forward(model: Any, state: _ReplayState, temperature: float) -> None:
    """Wrap TRL's fused forward: with a mask active, score the completion tokens over their rows."""
    from ..reference_scorer import masked_logprobs_from_hidden

    _check_model(model)
    original = model.forward

    @functools.wraps(original)
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, **kwargs: Any) -> Any:
        import torch

        input_ids: Any = kwargs.get("input_ids", args[0] if args else None)
        dense = None
        if fused_lm_head and state.dense is not None and input_ids is not None:
            dense = state.take(int(input_ids.shape[0]))
        if dense is None:
            return original(*args, fused_lm_head=fused_lm_head, labels=labels, **kwargs)
        if kwargs.get("output_router_logits"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "replay does not cover MoE aux losses", field="model")
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state
        length, keep = int(input_ids.shape[1]), state.logits_to_keep
        hidden = hidden[:, length - 1 - keep : length - 1]  # position t predicts token t + 1
        target = labels[:, length - keep :]
        valid = target != -100
        head = self.get_output_embeddings()
        scores = masked_logprobs_from_hidden(
            hidden[valid],
            head.weight,
            dense.to(hidden.device)[valid],
            target[valid],
            bias=head.bias,
            temperature=temperature,
            with_entropy=True,
            fill_value=0.0,
        )
        assert scores.logprobs is not None and scores.entropy is not None  # asked for both
        full = torch.zeros(labels.shape[0], length - 1, dtype=scores.logprobs.dtype, device=hidden.device)
        logps = full.clone()
        logps[:, length - 1 - keep :] = logps[:, length - 1 - keep :].masked_scatter(valid, scores.logprobs)
        entropy = full.clone()
        entropy[:, length - 1 - keep :] = entropy[:, length - 1 - keep :].masked_scatter(valid, scores.entropy)
        return types.SimpleNamespace(log_probs=logps, entropy=entropy, aux_loss=None, loss=-scores.logprobs.sum())

    model.forward = types.MethodType(forward, model)


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


def vllm_top_k(config: Any) -> int | None:
    """The ``top_k`` to send to vLLM for a ``GRPOConfig`` (``None``: the default config): vLLM returns
    masks only for ``top_k > 0`` (``vllm/v1/engine/input_processor.py``), so an unset ``top_k`` with
    top-p / min-p becomes :func:`sampling_mask.sampler.check_sampler`'s bound (512); ``None`` when
    nothing truncates (full-vocabulary scoring is then exact and no mask is requested)."""
    from ..sampler import check_sampler

    def value(name: str, default: Any) -> Any:
        got = get_field(config, name, default) if config is not None else default
        return default if got is None else got

    top_k = value("top_k", 0)
    check = check_sampler(
        temperature=float(value("temperature", 1.0)),
        top_k=int(top_k) if top_k and top_k > 0 else None,
        top_p=float(value("top_p", 1.0)),
        min_p=float(value("min_p", 0.0)),
    )
    return check.effective_top_k


def _capture_after(obj: Any, name: str, read: Any, sink: Any) -> None:
    """Wrap ``obj.name`` (an engine's or client's generate): ``sink().append(read(result))`` after each call."""
    original = getattr(obj, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        sink().append(read(result))
        return result

    setattr(obj, name, wrapped)


def _float_lists(mask: SamplingMask) -> list[list[float]]:
    values = mask.sampled_logprobs
    if values is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the recorded mask has no sampled_logprobs", field="sampled_logprobs"
        )
    return [values[a:b].tolist() for a, b in zip(mask.cu_seqlens[:-1], mask.cu_seqlens[1:], strict=True)]


def replay_trainer(base: type | None = None) -> type:
    """A subclass of ``base`` (default TRL's ``GRPOTrainer``) with sampling replay (module doc)."""
    from ..adapters.transformers import SamplingMaskRecorder

    if base is None:
        from trl import GRPOTrainer

        base = GRPOTrainer
    parent: Any = base

    class ReplayGRPOTrainerClass(parent):  # type: ignore[misc, valid-type]
        """``GRPOTrainer`` with sampling replay (``sampling_mask.adapters.trl``). Extra keyword:
        ``replay_diagnostics`` (default False): log the importance ratios with and without replay."""

        def __init__(self, *args: Any, replay_diagnostics: bool = False, **kwargs: Any) -> None:
            self.replay_diagnostics = replay_diagnostics
            self.replay_log: list[dict[str, float]] = []
            self._replay_state = _ReplayState()
            self._replay_generated: list[SamplingMask] = []
            self._replay_kept: list[np.ndarray] = []
            self._replay_current: Any = None
            config = kwargs.get("args", args[2] if len(args) > 2 else None)
            self.replay_vllm_top_k = vllm_top_k(config)
            with _vllm_engine_returns_masks() if self.replay_vllm_top_k else contextlib.nullcontext():
                super().__init__(*args, **kwargs)
            policy = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
            _install_replay_forward(policy, self._replay_state, float(self.temperature))
            self._replay_enabled = not self.use_vllm or self.replay_vllm_top_k is not None
            if self.use_vllm and self.replay_vllm_top_k is not None:
                self.vllm_generation.top_k = self.replay_vllm_top_k  # vLLM needs top_k > 0 for masks
                self._wrap_vllm()

        # ------------------------------------------------------------------ capture
        def _wrap_vllm(self) -> None:
            generation = self.vllm_generation
            if getattr(generation, "tensor_parallel_size", 1) != 1:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, "replay covers vllm_tensor_parallel_size=1", field="vllm_tensor_parallel_size"
                )
            if getattr(generation, "mode", None) == "colocate":
                _capture_after(generation.llm, "generate", masks_from_request_outputs, lambda: self._replay_generated)
            else:
                if self.accelerator.num_processes != 1:
                    raise SamplingMaskError(
                        ErrorCode.E_SCHEMA,
                        "vLLM server mode is covered for one training process (the response reaches rank 0 only)",
                        field="vllm_mode",
                    )
                sink = lambda: self._replay_generated  # noqa: E731
                _capture_after(generation.vllm_client, "generate", masks_from_server_response, sink)

        def _generate_single_turn(
            self, prompt_ids: Any, images: Any, multimodal_fields: Any, num_generations: Any, *args: Any, **kwargs: Any
        ) -> Any:
            if self.use_vllm or getattr(self, "use_transformers_continuous_batching", False):
                completion_ids, logprobs = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
                )
                return completion_ids, logprobs
            target = self.accelerator.unwrap_model(self.model_wrapped)
            original = target.generate
            eos = list(self.eos_token_ids)

            def generate(*g_args: Any, **g_kwargs: Any) -> Any:
                recorder = SamplingMaskRecorder(g_kwargs.get("generation_config"), model=target)
                processors = list(g_kwargs.pop("logits_processor", None) or [])
                out = original(*g_args, logits_processor=[*processors, recorder], **g_kwargs)
                self._replay_generated.append(recorder.mask(out, eos_token_id=eos))
                self._replay_kept.append(np.asarray(recorder.kept_mass))
                return out

            target.generate = generate
            try:
                completion_ids, logprobs = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, *args, **kwargs
                )
            finally:
                del target.generate  # the class's method again
            if logprobs is None and self._replay_generated:
                logprobs = _float_lists(self._replay_generated[-1])
            return completion_ids, logprobs

        # ------------------------------------------------------------------ carry and renormalize
        def _generate_and_score_completions(self, inputs: Any) -> Any:
            if not self._replay_enabled:  # vLLM without truncation: full-vocabulary scoring is exact
                return super()._generate_and_score_completions(inputs)
            self._replay_generated, self._replay_kept = [], []
            self._replay_current = _PendingMask(self._replay_generated)
            try:
                output = super()._generate_and_score_completions(inputs)
                ids = output["completion_ids"]
                dense = self._replay_current.dense(ids.shape[0], ids.shape[1], ids.device)
            finally:
                self._replay_current = None
            output[MASK_KEY] = dense
            if self.replay_diagnostics:
                self._log_replay(output)
            return output

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            self._replay_current = inputs.get(MASK_KEY)
            try:
                return super()._compute_loss(model, inputs)
            finally:
                self._replay_current = None

        def _get_per_token_logps_and_entropies(
            self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any, **kwargs: Any
        ) -> Any:
            current = self._replay_current
            if isinstance(current, _PendingMask):
                current = current.dense(int(input_ids.shape[0]), int(logits_to_keep), input_ids.device)
            usable = (
                current is not None
                and model is self.model
                and tuple(current.shape[:2]) == (int(input_ids.shape[0]), int(logits_to_keep))
            )
            if not usable:
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )
            with self._replay_state.active(current, int(logits_to_keep)):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )

        def _log_replay(self, output: dict[str, Any]) -> None:
            import torch

            sampler = output.get("sampling_per_token_logps")
            if sampler is None:
                return
            input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            keep = output["completion_ids"].shape[1]
            with torch.no_grad():
                self._replay_current = output[MASK_KEY]
                try:
                    replay, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
                finally:
                    self._replay_current = None
                full, _, _ = self._get_per_token_logps_and_entropies(self.model, input_ids, attention, keep)
            valid = output["completion_mask"].bool()
            entry = {
                "step": float(self.state.global_step),
                "ratio_replay": float(torch.exp(replay - sampler)[valid].double().mean()),
                "ratio_full": float(torch.exp(full - sampler)[valid].double().mean()),
                "kept_mass": float(np.concatenate(self._replay_kept).mean()) if self._replay_kept else float("nan"),
            }
            self.replay_log.append(entry)
            mode = "train" if self.model.training else "eval"
            for key in ("ratio_replay", "ratio_full", "kept_mass"):
                self._metrics[mode][f"sampling_replay/{key}"].append(entry[key])

    ReplayGRPOTrainerClass.__name__ = ReplayGRPOTrainerClass.__qualname__ = "ReplayGRPOTrainer"
    return ReplayGRPOTrainerClass


class _PendingMask:
    """The masks captured during one generation batch, made dense on first use."""

    def __init__(self, parts: list[SamplingMask]) -> None:
        self.parts = parts  # filled by the capture hooks while the batch is generated
        self._dense: Any = None

    def dense(self, completions: int, completion_length: int, device: Any) -> Any:
        if self._dense is None or self._dense.shape[1] != completion_length:
            parts = self.parts
            if not parts:
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "no sampling mask was captured", field=MASK_KEY)
            mask = _segments(parts)
            if mask.num_segments != completions:
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"{mask.num_segments} captured masks for {completions} completions "
                    "(several generation turns per completion, as with tools, are not covered)",
                    field=MASK_KEY,
                )
            self._dense = dense_completion_mask(mask, completion_length, device=device)
        return self._dense


@functools.cache
def _replay_class() -> type:
    return replay_trainer()


def __getattr__(name: str) -> Any:
    if name == "ReplayGRPOTrainer":
        return _replay_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
