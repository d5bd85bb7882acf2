"""SkyRL adapter: the dense top-k layouts of skyrl-train's sampling-mask replay (NovaSky-AI/SkyRL #883, #2082; open PRs as of 2026-09).

Matches:

* Dense rows: int32 ``[T, top_k]``, each row its support in rank order then ``-1`` trailing padding;
  an all ``-1`` row is an observation / prompt token (no support). ``TrainingInput.sampling_mask``
  holds the same rows per sequence.
* Packed: ``values`` ``[sum(seqlen), top_k]`` + ``cu_seqlens`` int32 ``[B+1]``, one segment per sequence.
* Wire envelope: ``{"data": base64 of the C-order little-endian bytes, "shape": [T, top_k],
  "dtype": "int32"}`` (``"int64"`` and ``"torch.int32"`` / ``"torch.int64"`` are read too).

* Step-wise samples (``generator.step_wise_trajectories``; PR #2082 @ 9a8327d7806e, reopened
  unchanged as #2237, and the stack up to #2086 @ 3308bd18d852: ``skyrl_gym_generator.py``
  ``TurnOutput.get_turn_rollout_sample_support`` and the ``is_step_wise`` branch of
  ``agent_loop``): step k is one training sample whose ``prompt_ids`` are every token before
  generation k and whose ``response_ids`` are generation k **plus the observation that follows
  it** (a synthetic EOS appended after a stop string too), its ``rollout_sample_support``
  ``[len(response_ids), top_k]``: generation k's rows, then ``-1`` rows for the synthetic EOS and
  the observation. The final observation stays in the last step (the non-step-wise path cuts it);
  a generation cut by ``max_tokens`` (``stop_reason == "length"``) has no EOS row. A
  :class:`~sampling_mask.data.trace.Trace` gives these samples with :func:`step_samples` (its
  ``step_mask(step_ends="observation")``); :func:`from_step_samples` / :func:`to_step_samples`
  read and write the per-sample arrays.

Rows keep their rank order; ``to_*`` writes stored order, so a mask read from SkyRL writes back the
same bytes. A row wider than ``top_k`` cannot be written (``E_WIDTH``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.checks import get_field, is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import check_count
from ..core.model import MaskOptions, ReaderOptions, ResponseOptions, SamplingMask, as_sampling_mask, mask_options
from ._common import array_from_base64, array_to_base64, int_array, masks_from_samples

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..data.trace import Trace

__all__ = [
    "from_dense",
    "from_envelope",
    "from_packed",
    "from_step_samples",
    "step_samples",
    "to_dense",
    "to_envelope",
    "to_packed",
    "to_step_samples",
]

_ENVELOPE_DTYPES = {
    "int32": "int32",
    "torch.int32": "int32",
    "<i4": "int32",
    "int64": "int64",
    "torch.int64": "int64",
    "<i8": "int64",
}


@mask_options()
def from_dense(values: Any, **options: Unpack[MaskOptions]) -> SamplingMask:
    """From ``[T, top_k]`` rank-ordered rows with ``-1`` trailing padding (numpy or torch). Keyword
    options: :class:`~sampling_mask.core.model.MaskOptions` (``cu_seqlens`` numpy, torch or lists too)."""
    dense = int_array(values, np.int32, field="values", ndim=2)
    if options["cu_seqlens"] is not None:
        options["cu_seqlens"] = int_array(options["cu_seqlens"], np.int64, field="cu_seqlens")
    return SamplingMask.from_dense(dense, **options)


def to_dense(mask: SamplingMask, top_k: int) -> np.ndarray:
    """int32 ``[T, top_k]``, stored (rank) order then ``-1``; ``E_WIDTH`` when a row is wider."""
    mask = as_sampling_mask(mask)
    return mask.to_dense(top_k)


@mask_options(ReaderOptions)
def from_packed(values: Any, cu_seqlens: Any, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """From packed ``values`` ``[sum(seqlen), top_k]`` and ``cu_seqlens`` ``[B+1]``; keyword
    options as :func:`from_dense`."""
    return from_dense(values, cu_seqlens=cu_seqlens, **options)


def to_packed(mask: SamplingMask, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """(``values`` int32 ``[T, top_k]``, ``cu_seqlens`` int32 ``[B+1]``)."""
    mask = as_sampling_mask(mask)
    return mask.to_dense(top_k), mask.cu_seqlens.astype(np.int32)


@mask_options()
def from_envelope(envelope: Mapping[str, Any], **options: Unpack[MaskOptions]) -> SamplingMask:
    """From ``{data, shape, dtype}``. Sizes are checked against ``limits`` and the base64 length before
    decoding; bad base64 is ``E_ENCODING``, bytes that do not tile ``shape`` are ``E_BYTES``. Keyword
    options as :func:`from_dense`."""
    limits = options["limits"]
    if not isinstance(envelope, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "envelope must be a mapping", field="envelope")
    shape_value = get_field(envelope, "shape", where="envelope")
    dtype_value = get_field(envelope, "dtype", where="envelope")
    if not isinstance(shape_value, (list, tuple)) or len(shape_value) != 2 or not all(map(is_int, shape_value)):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            "shape must be [T, top_k] non-negative integers",
            field="shape",
            value=short_repr(shape_value),
        )
    rows, width = (int(d) for d in shape_value)
    if rows < 0 or width < 0:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, "shape must be non-negative", field="shape", value=short_repr(shape_value)
        )
    check_count(rows, limits.max_rows, "row count", field="shape")
    check_count(width, limits.max_width, "dense width", field="shape")
    dtype = _ENVELOPE_DTYPES.get(dtype_value) if isinstance(dtype_value, str) else None
    if dtype is None:
        raise SamplingMaskError(
            ErrorCode.E_DTYPE, "dtype must be int32 or int64", field="dtype", value=short_repr(dtype_value)
        )
    values = array_from_base64(
        get_field(envelope, "data", where="envelope"), dtype, field="data", limits=limits, shape=(rows, width)
    )
    return from_dense(values, **options)


def to_envelope(mask: SamplingMask, top_k: int) -> dict[str, Any]:
    """``{"data", "shape": [T, top_k], "dtype": "int32"}`` of :func:`to_dense`."""
    mask = as_sampling_mask(mask)
    dense = to_dense(mask, top_k)
    return {"data": array_to_base64(dense, "int32"), "shape": list(dense.shape), "dtype": "int32"}


@mask_options(ResponseOptions, without=("metadata",))
def from_step_samples(samples: Sequence[Any], **options: Unpack[ResponseOptions]) -> SamplingMask:
    """One segment per step-wise sample from each sample's ``rollout_sample_support``
    ``[len(response_ids), top_k]`` (an array or nested lists, or a ``TrajectoryOutput`` / mapping
    holding it); an error names the sample as the segment."""

    def read(sample: Any) -> SamplingMask:
        if isinstance(sample, Mapping) or hasattr(sample, "rollout_sample_support"):
            sample = get_field(sample, "rollout_sample_support", where="sample")
        return from_dense(sample, **options)

    return masks_from_samples(samples, read, options["vocab_size"])


def to_step_samples(mask: SamplingMask, top_k: int) -> list[np.ndarray]:
    """Per segment, the int32 ``[rows, top_k]`` ``rollout_sample_support`` of one step-wise sample."""
    mask = as_sampling_mask(mask)
    dense = mask.to_dense(top_k)
    cu = mask.cu_seqlens
    return [dense[int(a) : int(b)] for a, b in zip(cu[:-1], cu[1:], strict=True)]


def step_samples(trace: Trace, top_k: int) -> list[np.ndarray]:
    """SkyRL's step-wise ``rollout_sample_support`` of each step of ``trace``: the rows from
    generation k's first token to generation k+1's first token (the last to the end), so the prompt
    before the first generation is left out as SkyRL leaves ``prompt_ids`` out. A trace with no
    generation has no sample."""
    starts = trace.generation_starts
    if starts is None or starts.size == 0:
        return []
    ends = np.append(starts[1:], trace.token_ids.size)
    rows = trace.mask.to_dense(top_k)
    return [rows[int(a) : int(b)] for a, b in zip(starts, ends, strict=True)]
