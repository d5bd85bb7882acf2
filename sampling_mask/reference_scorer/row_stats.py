"""The scoring engine: per-row log-sum-exp statistics over a row's support or the whole vocabulary.

For every row t the engine returns, relative to a shift ``m_t`` (the row's largest scaled logit):

- ``S_t = sum_j exp(u_j - m_t)`` and ``A_t = sum_j exp(u_j - m_t) (u_j - m_t)``, with
  ``u_j = z_{t,j} / tau_t`` and j over the support (replayed rows) or the vocabulary (full rows);
- ``zy_t = u_{t, y_t}``, the scaled logit of the target (0 when the target is elsewhere).

Then ``logsumexp = m + log S``, ``log p(y) = zy - logsumexp`` and ``H = log S - A / S``
(:func:`finish`). Statistics of disjoint parts of a row (vocabulary tiles, vocabulary shards on
other ranks) merge exactly by rescaling to the larger shift (:func:`merge`).

Logits come from a *source*: the logits tensor itself, or hidden states times the lm-head weight
(plus bias), where only the requested logits are ever formed: support pairs in chunks of
``chunk_size`` pairs (memory O(chunk_size x d)) and full rows in ``chunk_size x chunk_size`` tiles
with an online (rescaled) log-sum-exp. :class:`RowStats` is the custom autograd Function: forward
keeps only O(T + P) numbers, backward recomputes logits chunk by chunk and accumulates gradients
with ``index_add_``. Entries equal to ``-inf`` contribute exactly zero to values and gradients.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["LocalPlan", "RowStats", "finish", "merge", "rescale", "safe_shift"]


@dataclasses.dataclass(frozen=True)
class LocalPlan:
    """What one rank scores, in its own vocabulary columns ``[0, width)``."""

    num_rows: int
    pair_rows: torch.Tensor  # int64 [P]
    pair_cols: torch.Tensor  # int64 [P], local columns
    pair_is_target: torch.Tensor  # bool [P]
    full_rows: torch.Tensor  # int64 [F]
    full_target_cols: torch.Tensor  # int64 [F], local column of the target or -1
    tau: torch.Tensor  # acc dtype [T]
    width: int  # local vocabulary size
    chunk_size: int
    dtype: torch.dtype  # accumulation dtype


def safe_shift(m: torch.Tensor) -> torch.Tensor:
    """``m`` with non-finite entries (rows with nothing to sum) replaced by 0."""
    return torch.where(torch.isfinite(m), m, torch.zeros_like(m))


def _local_terms(u: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e, d_safe, finite) with ``d = u - shift``, ``e = exp(d)``; ``d_safe`` is 0 where u is -inf."""
    d = u - shift
    finite = torch.isfinite(u)
    return torch.exp(d), torch.where(finite, d, torch.zeros_like(d)), finite


def rescale(
    m: torch.Tensor, s: torch.Tensor, a: torch.Tensor, m_new: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, A) re-expressed relative to a shift ``m_new >= m`` (rows with S = 0 stay 0). The scale
    factors depend on the shifts only, so gradients flow through ``s`` and ``a`` unchanged in form."""
    some = s > 0
    zero = torch.zeros_like(s)
    shift = torch.where(some, safe_shift(m) - safe_shift(m_new), zero).detach()
    scale = torch.where(some, torch.exp(shift), zero)
    return scale * s, scale * (a + shift * s)


def merge(
    m1: torch.Tensor, s1: torch.Tensor, a1: torch.Tensor, m2: torch.Tensor, s2: torch.Tensor, a2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Statistics of the union of two disjoint parts of the same rows (exact)."""
    m = torch.maximum(m1, m2)
    s1, a1 = rescale(m1, s1, a1, m)
    s2, a2 = rescale(m2, s2, a2, m)
    return m, s1 + s2, a1 + a2


def finish(m: torch.Tensor, s: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-sum-exp, entropy, defined) per row from merged statistics; NaN where nothing was summed
    (a row whose every logit is -inf has no distribution)."""
    defined = s > 0
    s_safe = torch.where(defined, s, torch.ones_like(s))
    log_s = torch.log(s_safe)
    nan = torch.full_like(s, float("nan"))
    lse = torch.where(defined, safe_shift(m) + log_s, nan)
    entropy = torch.where(defined, log_s - a / s_safe, nan)
    return lse, entropy, defined


# --------------------------------------------------------------------------- logit sources
class _LogitsSource:
    """Logits given as a tensor ``[T, width]``. Pairs and full rows never overlap, so every gradient
    element is written once (no accumulation, gradient kept in the logits' dtype)."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
        (self.logits,) = tensors
        self.dtype = dtype
        self.grad: torch.Tensor | None = None

    def pair_chunk(self, plan: LocalPlan) -> int:
        return max(int(plan.pair_rows.numel()), 1)

    def pair_logits(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return self.logits[rows, cols].to(self.dtype)

    def tile_logits(self, rows: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
        return self.logits[:, c0:c1].index_select(0, rows).to(self.dtype)

    def start_backward(self, needs: tuple[bool, ...], pair_cols: torch.Tensor) -> None:
        self.grad = torch.zeros_like(self.logits)

    def pair_backward(self, rows: torch.Tensor, cols: torch.Tensor, gz: torch.Tensor, start: int) -> None:
        assert self.grad is not None
        self.grad.index_put_((rows, cols), gz.to(self.grad.dtype))

    def tile_backward(self, rows: torch.Tensor, c0: int, c1: int, gz: torch.Tensor) -> None:
        assert self.grad is not None
        self.grad[:, c0:c1].index_copy_(0, rows, gz.to(self.grad.dtype))

    def finish_tile(self, c0: int, c1: int) -> None:
        pass

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        return (self.grad,)


class _HiddenSource:
    """Logits ``hidden @ weight.T + bias`` formed only where asked. Gradients are accumulated in the
    accumulation dtype: the weight gradient directly when it has that dtype, otherwise (bf16 / fp16)
    in an fp32 buffer over the distinct ids the pairs touch and one fp32 tile at a time."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
        self.hidden, self.weight = tensors[0], tensors[1]
        self.bias: torch.Tensor | None = tensors[2] if len(tensors) > 2 else None
        self.dtype = dtype
        self.direct = self.weight.dtype == dtype

    def pair_chunk(self, plan: LocalPlan) -> int:
        return plan.chunk_size

    def pair_logits(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        h = self.hidden.index_select(0, rows).to(self.dtype)
        w = self.weight.index_select(0, cols).to(self.dtype)
        z = (h * w).sum(dim=1)
        if self.bias is not None:
            z = z + self.bias.index_select(0, cols).to(self.dtype)
        return z

    def tile_logits(self, rows: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
        h = self.hidden.index_select(0, rows).to(self.dtype)
        z = h @ self.weight[c0:c1].to(self.dtype).T
        if self.bias is not None:
            z = z + self.bias[c0:c1].to(self.dtype)
        return z

    def start_backward(self, needs: tuple[bool, ...], pair_cols: torch.Tensor) -> None:
        """Allocate the gradients asked for; for a bf16 / fp16 weight also the fp32 buffer over the
        distinct ids the pairs touch."""
        need_h, need_w = needs[0], needs[1]
        need_b = self.bias is not None and len(needs) > 2 and needs[2]
        device = self.hidden.device
        self.grad_hidden = torch.zeros(self.hidden.shape, dtype=self.dtype, device=device) if need_h else None
        self.grad_weight = torch.zeros_like(self.weight) if need_w else None
        self.grad_bias = torch.zeros(self.weight.shape[0], dtype=self.dtype, device=device) if need_b else None
        self.compact_ids: torch.Tensor | None = None
        self.compact_grad: torch.Tensor | None = None
        self.tile_grad: torch.Tensor | None = None
        if need_w and not self.direct and pair_cols.numel():
            self.compact_ids, self.compact_index = torch.unique(pair_cols, return_inverse=True)
            self.compact_grad = torch.zeros(
                (self.compact_ids.numel(), self.weight.shape[1]), dtype=self.dtype, device=device
            )

    def pair_backward(self, rows: torch.Tensor, cols: torch.Tensor, gz: torch.Tensor, start: int) -> None:
        g = gz[:, None]
        if self.grad_hidden is not None:
            self.grad_hidden.index_add_(0, rows, g * self.weight.index_select(0, cols).to(self.dtype))
        if self.grad_weight is not None:
            h = self.hidden.index_select(0, rows).to(self.dtype)
            if self.compact_grad is not None:
                self.compact_grad.index_add_(0, self.compact_index[start : start + rows.numel()], g * h)
            else:
                self.grad_weight.index_add_(0, cols, g * h)
        if self.grad_bias is not None:
            self.grad_bias.index_add_(0, cols, gz)

    def tile_backward(self, rows: torch.Tensor, c0: int, c1: int, gz: torch.Tensor) -> None:
        if self.grad_hidden is not None:
            self.grad_hidden.index_add_(0, rows, gz @ self.weight[c0:c1].to(self.dtype))
        if self.grad_weight is not None:
            gw = gz.T @ self.hidden.index_select(0, rows).to(self.dtype)
            if self.direct:
                self.grad_weight[c0:c1] += gw
            else:
                self.tile_grad = gw if self.tile_grad is None else self.tile_grad + gw
        if self.grad_bias is not None:
            self.grad_bias[c0:c1] += gz.sum(dim=0)

    def finish_tile(self, c0: int, c1: int) -> None:
        if self.tile_grad is not None and self.grad_weight is not None:
            self.grad_weight[c0:c1] = (self.grad_weight[c0:c1].to(self.dtype) + self.tile_grad).to(self.weight.dtype)
            self.tile_grad = None

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        if self.compact_grad is not None and self.compact_ids is not None and self.grad_weight is not None:
            ids = self.compact_ids
            self.grad_weight[ids] = (self.grad_weight[ids].to(self.dtype) + self.compact_grad).to(self.weight.dtype)
        grad_hidden = None if self.grad_hidden is None else self.grad_hidden.to(self.hidden.dtype)
        grad_bias = None if self.grad_bias is None or self.bias is None else self.grad_bias.to(self.bias.dtype)
        return (grad_hidden, self.grad_weight, grad_bias)


_SOURCES: dict[str, Any] = {"logits": _LogitsSource, "hidden": _HiddenSource}


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _tile_target_hits(targets: torch.Tensor, c0: int, c1: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows of the tile holding their target, that target's column inside the tile)."""
    hit = (targets >= c0) & (targets < c1)
    return torch.nonzero(hit).reshape(-1), targets[hit] - c0


# --------------------------------------------------------------------------- forward / backward
def _forward(src: Any, plan: LocalPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    num_rows, dtype = plan.num_rows, plan.dtype
    device = plan.tau.device
    m = torch.full((num_rows,), float("-inf"), dtype=dtype, device=device)
    s = torch.zeros(num_rows, dtype=dtype, device=device)
    a = torch.zeros(num_rows, dtype=dtype, device=device)
    zy = torch.zeros(num_rows, dtype=dtype, device=device)
    rows, cols = plan.pair_rows, plan.pair_cols
    step = src.pair_chunk(plan)
    parts = [src.pair_logits(rows[i:j], cols[i:j]) for i, j in _chunks(rows.numel(), step)]
    u = torch.cat(parts) / plan.tau[rows] if parts else torch.zeros(0, dtype=dtype, device=device)
    if u.numel():
        m = m.scatter_reduce(0, rows, u, reduce="amax", include_self=True)
        e, d, _ = _local_terms(u, safe_shift(m)[rows])
        s.index_add_(0, rows, e)
        a.index_add_(0, rows, e * d)
        zy.index_add_(0, rows[plan.pair_is_target], u[plan.pair_is_target])
    tile = plan.chunk_size
    for r0, r1 in _chunks(plan.full_rows.numel(), tile):
        fr, ft = plan.full_rows[r0:r1], plan.full_target_cols[r0:r1]
        tau = plan.tau[fr][:, None]
        fm = torch.full((fr.numel(),), float("-inf"), dtype=dtype, device=device)
        fs, fa, fz = torch.zeros_like(fm), torch.zeros_like(fm), torch.zeros_like(fm)
        for c0, c1 in _chunks(plan.width, tile):
            ut = src.tile_logits(fr, c0, c1) / tau
            tm = ut.amax(dim=1)
            e, d, _ = _local_terms(ut, safe_shift(tm)[:, None])
            fm, fs, fa = merge(fm, fs, fa, tm, e.sum(dim=1), (e * d).sum(dim=1))
            hit_rows, hit_cols = _tile_target_hits(ft, c0, c1)
            fz[hit_rows] = ut[hit_rows, hit_cols]
        m[fr], s[fr], a[fr], zy[fr] = fm, fs, fa, fz
    return m, s, a, zy, u


def _backward(
    src: Any,
    plan: LocalPlan,
    m: torch.Tensor,
    u: torch.Tensor,
    g_s: torch.Tensor,
    g_a: torch.Tensor,
    g_zy: torch.Tensor,
    needs: tuple[bool, ...],
) -> tuple[torch.Tensor | None, ...]:
    """d/du_j of ``g_s . S + g_a . A + g_zy . zy`` is ``e_j (g_s + g_a (1 + d_j)) + g_zy [j = y]``."""
    src.start_backward(needs, plan.pair_cols)
    shift = safe_shift(m)
    rows, cols = plan.pair_rows, plan.pair_cols
    if u.numel():
        e, d, finite = _local_terms(u, shift[rows])
        gu = e * (g_s[rows] + g_a[rows] * torch.where(finite, 1 + d, torch.zeros_like(d)))
        gu = gu + torch.where(plan.pair_is_target, g_zy[rows], torch.zeros_like(gu))
        gz = gu / plan.tau[rows]
        for i, j in _chunks(rows.numel(), src.pair_chunk(plan)):
            src.pair_backward(rows[i:j], cols[i:j], gz[i:j], i)
    tile = plan.chunk_size
    row_chunks = _chunks(plan.full_rows.numel(), tile)
    for c0, c1 in _chunks(plan.width, tile) if row_chunks else []:
        for r0, r1 in row_chunks:
            fr, ft = plan.full_rows[r0:r1], plan.full_target_cols[r0:r1]
            tau = plan.tau[fr][:, None]
            ut = src.tile_logits(fr, c0, c1) / tau
            e, d, finite = _local_terms(ut, shift[fr][:, None])
            gu = e * (g_s[fr][:, None] + g_a[fr][:, None] * torch.where(finite, 1 + d, torch.zeros_like(d)))
            hit_rows, hit_cols = _tile_target_hits(ft, c0, c1)
            gu[hit_rows, hit_cols] += g_zy[fr][hit_rows]
            src.tile_backward(fr, c0, c1, gu / tau)
        src.finish_tile(c0, c1)
    return src.grads()


class RowStats(torch.autograd.Function):
    """``RowStats.apply(plan, kind, *tensors) -> (m, S, A, zy)`` per row; ``kind`` is ``"logits"``
    (tensors: logits) or ``"hidden"`` (tensors: hidden, weight[, bias]). ``m`` is not differentiable
    (the statistics' gradients are exact for any fixed shift)."""

    @staticmethod
    def forward(ctx: Any, plan: LocalPlan, kind: str, *tensors: torch.Tensor) -> Any:  # type: ignore[override]
        src = _SOURCES[kind](tensors, plan.dtype)
        with torch.no_grad():
            m, s, a, zy, u = _forward(src, plan)
        ctx.plan, ctx.kind = plan, kind
        ctx.save_for_backward(m, u, *tensors)
        ctx.mark_non_differentiable(m)
        return m, s, a, zy

    @staticmethod
    def backward(ctx: Any, g_m: Any, g_s: Any, g_a: Any, g_zy: Any) -> Any:  # type: ignore[override]
        m, u, *tensors = ctx.saved_tensors
        plan: LocalPlan = ctx.plan
        zeros = torch.zeros_like(m)
        src = _SOURCES[ctx.kind](tuple(tensors), plan.dtype)
        needs = tuple(ctx.needs_input_grad[2:])
        with torch.no_grad():
            grads = _backward(
                src,
                plan,
                m,
                u,
                zeros if g_s is None else g_s,
                zeros if g_a is None else g_a,
                zeros if g_zy is None else g_zy,
                needs,
            )
        return (None, None, *(g if need else None for g, need in zip(grads, needs, strict=False)))
