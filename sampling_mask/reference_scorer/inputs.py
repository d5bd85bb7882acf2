"""Scorer inputs made uniform: the mask (three forms), targets, temperature, and the row plan.

A mask is accepted as a :class:`~sampling_mask.SamplingMask`, a dense ``-1``-padded integer tensor
``[T, W]`` (ids first, then trailing ``-1``), or ragged tensors ``(ids [P], offsets [T+1])``; numpy
arrays work wherever tensors do. All three become the same *pairs*: ``rows`` int64 [P] and ``ids``
int64 [P], row-major, on the scoring device.

The *row plan* decides how every row t is scored (spec section ``scoring``):

- replayed: over its recorded support S_t;
- full: over the whole vocabulary (an empty row under ``empty_rows="full"``, or a target outside
  S_t under ``missing_target="full"``);
- not scored: ``valid`` False, value NaN (or the caller's ``fill_value``): an empty row under
  ``empty_rows="exclude"``, a row whose target is ``-1`` (which the spec allows on empty rows only),
  or a row whose target is ``ignore_index`` (default -100, as ``torch.nn.functional.cross_entropy``:
  a Hugging Face label that says "no target here", on any row).

Validation is whole-tensor (a handful of reductions, each one device sync); no loop over rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..core.checks import is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import SamplingMask, as_sampling_mask

__all__ = [
    "EMPTY_ROW_POLICIES",
    "MISSING_TARGET_POLICIES",
    "MaskLike",
    "RowPlan",
    "RowSupport",
    "accumulation_dtype",
    "plan_rows",
    "row_support",
]

EMPTY_ROW_POLICIES = ("full", "exclude")
MISSING_TARGET_POLICIES = ("error", "full", "neg_inf")

#: What the scorer accepts as a mask.
MaskLike = SamplingMask | torch.Tensor | np.ndarray | Sequence[Any]


@dataclasses.dataclass(frozen=True)
class RowSupport:
    """A mask as pairs: pair k is (``rows[k]``, ``ids[k]``); row-major; ``lengths[t] = |S_t|``."""

    rows: torch.Tensor  # int64 [P]
    ids: torch.Tensor  # int64 [P]
    lengths: torch.Tensor  # int64 [T]
    sampled: torch.Tensor | None  # int64 [T], the mask's sampled_token_ids companion
    temperature: torch.Tensor | None  # float [T], the mask's temperature companion (NaN: unknown)


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """How every row is scored. Pairs belong to replayed rows only; ``full_rows`` are disjoint from them."""

    num_rows: int
    pair_rows: torch.Tensor  # int64 [P']
    pair_ids: torch.Tensor  # int64 [P'], global vocabulary ids
    pair_is_target: torch.Tensor  # bool [P']
    full_rows: torch.Tensor  # int64 [F]
    full_targets: torch.Tensor  # int64 [F], -1 when the row has no target
    tau: torch.Tensor  # acc dtype [T]; 1 on rows not scored
    valid: torch.Tensor  # bool [T]
    replayed: torch.Tensor  # bool [T]
    neg_inf: torch.Tensor  # bool [T]: log-prob is -inf by the missing-target policy
    empty_rows: int  # rows with an empty recorded support (with or without a target)
    empty_rows_full_vocab: int  # of those, rows scored over the full vocabulary (empty_rows="full")
    no_target_rows: int  # rows without a target (-1 or ignore_index): not scored
    missing_target_rows: int  # rows whose target is outside their non-empty support (the policy applied)


def accumulation_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """float64 when any input is float64, else float32 (bf16 / fp16 are accumulated in fp32)."""
    for t in tensors:
        if t is not None and t.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected a floating tensor, got {t.dtype}", field="logits")
    if any(t is not None and t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def _as_int_tensor(value: Any, device: torch.device, *, field: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        tensor = value
    else:
        arr = np.asarray(value)
        if arr.size == 0 and arr.dtype.kind not in "iu":
            arr = arr.astype(np.int64)
        if arr.dtype.kind not in "iu":
            raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected integers, got {arr.dtype}", field=field)
        tensor = torch.from_numpy(np.array(arr, dtype=np.int64))
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected integers, got {tensor.dtype}", field=field)
    return tensor.to(device=device, dtype=torch.int64)


def _first(flags: torch.Tensor) -> int:
    return int(torch.nonzero(flags.reshape(-1))[0, 0])


def _check_ids(rows: torch.Tensor, ids: torch.Tensor, vocab_size: int, *, field: str) -> None:
    """Ids in ``[0, V)`` and unique within each row (``E_RANGE`` / ``E_DUPLICATE`` naming the row)."""
    if ids.numel() == 0:
        return
    out = (ids < 0) | (ids >= vocab_size)
    if bool(out.any()):
        k = _first(out)
        raise SamplingMaskError(
            ErrorCode.E_RANGE, f"id outside [0, {vocab_size})", field=field, row=int(rows[k]), value=int(ids[k])
        )
    key, _ = torch.sort(rows * vocab_size + ids)
    dup = key[1:] == key[:-1]
    if bool(dup.any()):
        k = int(key[_first(dup)])
        raise SamplingMaskError(
            ErrorCode.E_DUPLICATE, "id repeated within a row", field=field, row=k // vocab_size, value=k % vocab_size
        )


def row_support(mask: MaskLike, num_rows: int, vocab_size: int, device: torch.device) -> RowSupport:
    """The mask as pairs on ``device``; checks it has ``num_rows`` rows and ids below ``vocab_size``."""
    if hasattr(mask, "__sampling_mask__"):  # a SamplingMask, or one of another copy (the mask protocol)
        mask = as_sampling_mask(mask)
    if isinstance(mask, SamplingMask):
        if mask.num_rows != num_rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"mask has {mask.num_rows} rows, logits have {num_rows}", field="mask"
            )
        if mask.nnz and int(mask.ids.max()) >= vocab_size:
            raise_at_first(
                mask.ids >= vocab_size,
                ErrorCode.E_RANGE,
                f"id outside [0, {vocab_size})",
                field="ids",
                values=mask.ids,
                row=lambda k: np.searchsorted(mask.offsets, k, side="right") - 1,
            )
        lengths_np = mask.row_lengths
        lengths = torch.from_numpy(np.array(lengths_np, dtype=np.int64)).to(device)
        ids = torch.from_numpy(np.array(mask.ids, dtype=np.int64)).to(device)
        rows = torch.repeat_interleave(torch.arange(num_rows, device=device), lengths)
        sampled = mask.sampled_token_ids
        temperature = mask.temperature
        return RowSupport(
            rows,
            ids,
            lengths,
            None if sampled is None else torch.from_numpy(np.array(sampled, dtype=np.int64)).to(device),
            None if temperature is None else torch.from_numpy(np.array(temperature, dtype=np.float64)).to(device),
        )
    if isinstance(mask, (tuple, list)):
        if len(mask) != 2:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "ragged mask must be (ids, offsets)", field="mask")
        ids = _as_int_tensor(mask[0], device, field="ids")
        offsets = _as_int_tensor(mask[1], device, field="offsets")
        if ids.ndim != 1 or offsets.ndim != 1:
            raise SamplingMaskError(ErrorCode.E_SHAPE, "ragged ids and offsets must be 1-D", field="offsets")
        if offsets.numel() != num_rows + 1:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"expected {num_rows + 1} offsets, got {offsets.numel()}", field="offsets"
            )
        lengths = offsets[1:] - offsets[:-1]
        if int(offsets[0]) != 0 or int(offsets[-1]) != ids.numel():
            raise SamplingMaskError(
                ErrorCode.E_OFFSETS, f"offsets must run from 0 to nnz = {ids.numel()}", field="offsets"
            )
        if bool((lengths < 0).any()):
            row = _first(lengths < 0)
            raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets decrease", field="offsets", row=row)
        rows = torch.repeat_interleave(torch.arange(num_rows, device=device), lengths)
        _check_ids(rows, ids, vocab_size, field="ids")
        return RowSupport(rows, ids, lengths, None, None)
    dense = _as_int_tensor(mask, device, field="dense")
    if dense.ndim != 2 or dense.shape[0] != num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"dense mask must be [{num_rows}, W], got {list(dense.shape)}", field="dense"
        )
    if bool((dense < -1).any()):
        row = _first((dense < -1).any(dim=1))
        raise SamplingMaskError(ErrorCode.E_RANGE, "negative id other than the -1 padding", field="dense", row=row)
    present = dense >= 0
    gap = present[:, 1:] & ~present[:, :-1]
    if bool(gap.any()):
        row = _first(gap.any(dim=1))
        raise SamplingMaskError(ErrorCode.E_PADDING, "-1 padding before an id", field="dense", row=row)
    where = torch.nonzero(present)
    rows, ids = where[:, 0], dense[present]
    _check_ids(rows, ids, vocab_size, field="dense")
    return RowSupport(rows, ids, present.sum(dim=1), None, None)


def _ignore_index(value: Any) -> int | None:
    if value is None:
        return None
    if not is_int(value):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "ignore_index must be an integer or None", field="ignore_index", value=short_repr(value)
        )
    return int(value)


def _targets(
    targets: Any, support: RowSupport, num_rows: int, vocab_size: int, device: torch.device, ignore_index: int | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(targets with -1 for "no target", the rows whose target was ``ignore_index``)."""
    if targets is None:
        return support.sampled, None
    out = _as_int_tensor(targets, device, field="targets")
    if out.ndim != 1 or out.numel() != num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"expected {num_rows} targets, got shape {list(out.shape)}", field="targets"
        )
    ignored = None
    if ignore_index is not None:
        ignored = out == ignore_index
        out = torch.where(ignored, torch.full_like(out, -1), out)
    bad = (out < -1) | (out >= vocab_size) | ((out == -1) & (support.lengths > 0))
    if ignored is not None:
        bad &= ~ignored
    if bool(bad.any()):
        row = _first(bad)
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            f"target outside [0, {vocab_size}) (-1 only on empty rows)",
            field="targets",
            row=row,
            value=int(out[row]),
        )
    return out, ignored


def _temperature(
    temperature: Any, support: RowSupport, num_rows: int, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    if temperature is None:
        if support.temperature is not None:
            return support.temperature.to(dtype)
        temperature = 1.0
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        return torch.full((num_rows,), float(temperature), dtype=dtype, device=device)
    tau = temperature if isinstance(temperature, torch.Tensor) else torch.as_tensor(np.array(temperature))
    if not (tau.dtype.is_floating_point or tau.dtype in (torch.int32, torch.int64)):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"temperature must be float, got {tau.dtype}", field="temperature")
    tau = tau.detach().to(device=device, dtype=dtype)
    if tau.ndim == 0:
        return tau.expand(num_rows).clone()
    if tau.ndim != 1 or tau.numel() != num_rows:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected a scalar or {num_rows} temperatures", field="temperature")
    return tau


def plan_rows(
    mask: MaskLike | None,
    *,
    num_rows: int,
    vocab_size: int,
    device: torch.device,
    dtype: torch.dtype,
    targets: Any = None,
    need_targets: bool,
    temperature: Any = None,
    empty_rows: str = "full",
    missing_target: str = "error",
    ignore_index: int | None = -100,
) -> RowPlan:
    """Validate the inputs and decide how each row is scored (see the module docstring).

    ``mask=None`` scores every row over the whole vocabulary (the full-vocab comparison). Rows whose
    target is ``ignore_index`` are not scored, whatever their support (None: no such value).
    Raises ``E_MISSING_SAMPLED`` naming the first row whose target is outside its support when
    ``missing_target="error"``.
    """
    if empty_rows not in EMPTY_ROW_POLICIES:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"empty_rows must be one of {EMPTY_ROW_POLICIES}", field="empty_rows", value=empty_rows
        )
    if missing_target not in MISSING_TARGET_POLICIES:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"missing_target must be one of {MISSING_TARGET_POLICIES}",
            field="missing_target",
            value=missing_target,
        )
    empty_i64 = torch.zeros(0, dtype=torch.int64, device=device)
    if mask is None:
        support = RowSupport(empty_i64, empty_i64, torch.zeros(num_rows, dtype=torch.int64, device=device), None, None)
        empty_rows = "full"
    else:
        support = row_support(mask, num_rows, vocab_size, device)
    ignore = _ignore_index(ignore_index)
    tgt, ignored = _targets(targets, support, num_rows, vocab_size, device, ignore) if need_targets else (None, None)
    if need_targets and tgt is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "log-probs need targets: pass targets= or a mask with sampled_token_ids",
            field="targets",
        )
    empty = support.lengths == 0
    has_target = tgt >= 0 if tgt is not None else torch.ones(num_rows, dtype=torch.bool, device=device)
    if tgt is not None:
        hit = support.ids == tgt[support.rows]
        found = torch.zeros(num_rows, dtype=torch.bool, device=device)
        found[support.rows[hit]] = True
        missing = ~empty & ~found & (tgt >= 0)
    else:
        hit = torch.zeros_like(support.ids, dtype=torch.bool)
        missing = torch.zeros(num_rows, dtype=torch.bool, device=device)
    num_missing = int(missing.sum())
    if num_missing and missing_target == "error":
        row = _first(missing)
        raise SamplingMaskError(
            ErrorCode.E_MISSING_SAMPLED,
            "target is not in the row's recorded support",
            field="targets",
            row=row,
            value=None if tgt is None else int(tgt[row]),
        )
    empty_scored = empty & has_target
    rescored = missing & (missing_target == "full")
    replayed = ~empty & ~rescored
    if ignored is not None:
        replayed &= ~ignored
    full = (empty_scored & (empty_rows == "full")) | rescored
    valid = replayed | full
    tau = _temperature(temperature, support, num_rows, device, dtype)
    bad_tau = valid & ~(torch.isfinite(tau) & (tau > 0))
    if bool(bad_tau.any()):
        row = _first(bad_tau)
        raise SamplingMaskError(
            ErrorCode.E_RANGE,
            "temperature must be finite and > 0 on scored rows (NaN means unknown: pass temperature=)",
            field="temperature",
            row=row,
            value=float(tau[row]),
        )
    tau = torch.where(valid, tau, torch.ones_like(tau))
    keep = replayed[support.rows]
    full_rows = torch.nonzero(full).reshape(-1)
    full_targets = tgt[full_rows] if tgt is not None else torch.full_like(full_rows, -1)
    return RowPlan(
        num_rows=num_rows,
        pair_rows=support.rows[keep],
        pair_ids=support.ids[keep],
        pair_is_target=hit[keep],
        full_rows=full_rows,
        full_targets=full_targets,
        tau=tau,
        valid=valid,
        replayed=replayed,
        neg_inf=missing & (missing_target == "neg_inf"),
        empty_rows=int(empty.sum()),
        empty_rows_full_vocab=int((empty_scored & (empty_rows == "full")).sum()),
        no_target_rows=int((~has_target).sum()),
        missing_target_rows=num_missing,
    )
