"""The scoring engine: per-row log-sum-exp statistics over a row's support or the whole vocabulary.

For every row t the engine returns, relative to a shift ``m_t`` (the row's largest scaled logit):

- ``S_t = sum_j exp(u_j - m_t)`` and ``A_t = sum_j exp(u_j - m_t) (u_j - m_t)``, with
  ``u_j = z_{t,j} / tau_t`` and j over the support (replayed rows) or the vocabulary (full rows);
- ``zy_t = u_{t, y_t}``, the scaled logit of the target (0 when the target is elsewhere).

Then ``logsumexp = m + log S``, ``log p(y) = zy - logsumexp`` and ``H = log S - A / S``
(:func:`finish`). Statistics of disjoint parts of a row (vocabulary tiles, vocabulary shards on
other ranks) merge exactly by rescaling to the larger shift (:func:`merge`).

Logits come from a *source*: the logits tensor itself, or hidden states times the lm-head weight
(plus bias), where only the requested logits are ever formed. Support pairs: one sampled
matrix product over the pairs' (row, id) pattern (``torch.sparse.sampled_addmm``: [P] values, no
[P, d] gather) and, in backward, two fused gather-scale-sums (``embedding_bag``): the hidden
gradient over each row's pairs, the weight gradient over the pairs of each id (pairs sorted by id
once; the whole gradient in one pass, empty bags giving its zero rows). A bf16 / fp16 weight is
gathered and widened in pair chunks, and its gradient summed in fp32 blocks of ids, each of at most
``max_chunk_bytes``, instead. Full rows go through vocabulary tiles
of at most ``max_chunk_bytes`` (:func:`tile_shape`) with an online (rescaled) log-sum-exp.
``chunk_size``, when given, caps every chunk (pairs, ids, tile rows and columns) as well.
:class:`RowStats` is the custom autograd Function: forward keeps only O(T + P) numbers, backward
recomputes what it needs chunk by chunk. Entries equal to ``-inf`` contribute exactly zero to
values and gradients.

Precision at any row width: the terms are formed in the accumulation dtype (fp32 for fp32 / bf16 /
fp16 inputs), but per-row sums never run sequentially in fp32 over a row: S and A over the pairs
are summed in ``SUM_DTYPE`` (float64), tiles are summed blocked (``Tensor.sum``) and merged in
float64, the hidden gradient of a row with more than ``ROW_BAG`` pairs is summed in bags of
``ROW_BAG`` pairs whose partial sums are added in float64, and that of a one-row tile (a
matrix-vector product, which BLAS sums sequentially) in blocks of ``ROW_BAG``. The error against a float64 computation
is then that of ``masked_fill`` + ``torch.logsumexp`` in fp32 at every width (a sequential fp32
``index_add_`` lost 2.2e-4 at 151,936 ids), and softmax-gradient rows sum to 0 within about 1e-7.
``HiddenSource`` (the lm-head logits) also serves the mask audit, which forms logits tile by tile.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import torch

from ..core.errors import ErrorCode, SamplingMaskError

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES",
    "ROW_BAG",
    "SUM_DTYPE",
    "HiddenSource",
    "LocalPlan",
    "LogitsSource",
    "RowStats",
    "chunk_length",
    "finish",
    "merge",
    "rescale",
    "safe_shift",
    "sum_dtype",
    "tile_shape",
]

#: Default memory budget of one chunk (``max_chunk_bytes``): 256 MiB.
DEFAULT_MAX_CHUNK_BYTES = 256 << 20
#: Tile-sized temporaries alive at once in a full-vocabulary tile (logits, exp, shifted logits,
#: their product or gradient, the finite flags), the factor :func:`tile_shape` budgets for.
TILE_TEMPORARIES = 6
#: [chunk, d] temporaries of a gathered pair chunk (hidden rows, weight rows, their product).
PAIR_TEMPORARIES = 3
#: The dtype per-row sums (S, A) accumulate in, whatever the accumulation dtype: float64, so that
#: their error does not grow with the row's width (fp32 / bf16 / fp16 terms are exact in float64).
#: Devices without float64 (Apple MPS) sum in fp32 (:func:`sum_dtype`).
SUM_DTYPE = torch.float64
#: Pairs per partial sum of a row's hidden gradient (pair path): rows with more pairs are summed in
#: bags of this many, then the bags in ``SUM_DTYPE``; rows with at most this many take one bag each.
ROW_BAG = 512


@dataclasses.dataclass(frozen=True)
class LocalPlan:
    """What one rank scores, in its own vocabulary columns ``[0, width)``. Pairs are sorted by
    (row, column); ``pair_offsets[t]:pair_offsets[t + 1]`` are row t's pairs."""

    num_rows: int
    pair_rows: torch.Tensor  # int64 [P], non-decreasing
    pair_cols: torch.Tensor  # int64 [P], local columns, ascending within a row
    pair_offsets: torch.Tensor  # int64 [T + 1]
    pair_is_target: torch.Tensor  # bool [P]
    full_rows: torch.Tensor  # int64 [F]
    full_target_cols: torch.Tensor  # int64 [F], local column of the target or -1
    tau: torch.Tensor  # acc dtype [T]
    width: int  # local vocabulary size
    chunk_size: int | None  # cap on every chunk (None: the byte budget alone)
    max_chunk_bytes: int
    dtype: torch.dtype  # accumulation dtype


def sum_dtype(device: torch.device) -> torch.dtype:
    """``SUM_DTYPE``, or float32 on a device without float64 (``mps``)."""
    return torch.float32 if device.type == "mps" else SUM_DTYPE


def chunk_length(unit_bytes: int, max_chunk_bytes: int, cap: int | None = None) -> int:
    """How many units of ``unit_bytes`` one chunk holds: ``max_chunk_bytes // unit_bytes``, at least 1
    (a single unit larger than the budget is its own chunk), at most ``cap`` when given."""
    n = max(1, max_chunk_bytes // max(unit_bytes, 1))
    return n if cap is None else max(1, min(n, cap))


def tile_shape(
    num_rows: int, width: int, dim: int, elem_bytes: int, max_chunk_bytes: int, cap: int | None = None
) -> tuple[int, int]:
    """(rows, columns) of a full-vocabulary tile. A tile holds ``TILE_TEMPORARIES`` [rows, columns]
    buffers, ``rows`` gathered hidden states and two [columns, dim] blocks (weight gradient, widened
    weight; ``dim`` is 0 for given logits): ``elem_bytes * (rows * (TILE_TEMPORARIES * columns + dim)
    + 2 * columns * dim) <= max_chunk_bytes`` whenever one row of ``min(width, 1024)`` columns fits.
    Rows are chosen first (so that a tile can span 1024 columns, or the whole width), then columns
    fill the budget; both at least 1 and at most ``cap`` when given."""
    span = min(max(width, 1), 1024)
    rows = chunk_length(elem_bytes * (TILE_TEMPORARIES * span + dim + 2 * dim), max_chunk_bytes, cap)
    rows = max(1, min(rows, max(num_rows, 1)))
    left = max(max_chunk_bytes - elem_bytes * rows * dim, 1)
    cols = chunk_length(elem_bytes * (TILE_TEMPORARIES * rows + 2 * dim), left, cap)
    return rows, max(1, min(cols, max(width, 1)))


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
class LogitsSource:
    """Logits given as a tensor ``[T, width]``. Pairs and full rows never overlap, so every gradient
    element is written once (no accumulation, gradient kept in the logits' dtype)."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
        (self.logits,) = tensors
        self.dtype = dtype
        self.dim = 0  # no [columns, d] blocks in a tile
        self.grad: torch.Tensor | None = None

    def pair_logits(self, plan: LocalPlan) -> torch.Tensor:
        return self.logits[plan.pair_rows, plan.pair_cols].to(self.dtype)

    def tile_logits(self, rows: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
        return self.logits[:, c0:c1].index_select(0, rows).to(self.dtype)

    def start_backward(self, needs: tuple[bool, ...]) -> None:
        self.grad = torch.zeros_like(self.logits)

    def pair_backward(self, plan: LocalPlan, gz: torch.Tensor) -> None:
        assert self.grad is not None
        self.grad.index_put_((plan.pair_rows, plan.pair_cols), gz.to(self.grad.dtype))

    def tile_backward(self, rows: torch.Tensor, c0: int, c1: int, gz: torch.Tensor) -> None:
        assert self.grad is not None
        self.grad[:, c0:c1].index_copy_(0, rows, gz.to(self.grad.dtype))

    def finish_tile(self, c0: int, c1: int) -> None:
        pass

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        return (self.grad,)


def _sampled_logits(hidden: torch.Tensor, weight: torch.Tensor, plan: LocalPlan) -> torch.Tensor:
    """``(hidden @ weight.T)[rows, cols]`` for every pair, [P]: a sampled matrix product over the
    pairs' CSR pattern (dot products in place, no [P, d] gather)."""
    values = torch.zeros(plan.pair_cols.numel(), dtype=hidden.dtype, device=hidden.device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta state"
        pattern = torch.sparse_csr_tensor(
            plan.pair_offsets, plan.pair_cols, values, size=(plan.num_rows, plan.width), check_invariants=False
        )
    return torch.sparse.sampled_addmm(pattern, hidden, weight.T, beta=0.0).values()


class HiddenSource:
    """Logits ``hidden @ weight.T + bias`` formed only where asked. Gradients are accumulated in the
    accumulation dtype: the weight gradient directly when it has that dtype, otherwise (bf16 / fp16)
    per block of ids (pairs) and per tile (full rows) in fp32, rounded once per block."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], dtype: torch.dtype) -> None:
        self.hidden, self.weight = tensors[0], tensors[1]
        self.bias: torch.Tensor | None = tensors[2] if len(tensors) > 2 else None
        self.dtype = dtype
        self.direct = self.weight.dtype == dtype
        self.dim = self.weight.shape[1]
        self.hidden_acc = self.hidden.to(dtype)  # [T, d]; the tensor itself when already in dtype

    def _pair_chunks(self, plan: LocalPlan) -> list[tuple[int, int]]:
        """Pair chunks of a gathered (bf16 / fp16) weight: ``PAIR_TEMPORARIES`` [chunk, d] buffers."""
        unit = PAIR_TEMPORARIES * self.weight.shape[1] * self.hidden_acc.element_size()
        return _chunks(plan.pair_rows.numel(), chunk_length(unit, plan.max_chunk_bytes, plan.chunk_size))

    def pair_logits(self, plan: LocalPlan) -> torch.Tensor:
        rows, cols = plan.pair_rows, plan.pair_cols
        if self.direct:
            z = _sampled_logits(self.hidden_acc, self.weight, plan)
        else:
            parts = [
                (
                    self.hidden_acc.index_select(0, rows[i:j]) * self.weight.index_select(0, cols[i:j]).to(self.dtype)
                ).sum(dim=1)
                for i, j in self._pair_chunks(plan)
            ]
            z = torch.cat(parts)
        if self.bias is not None:
            z = z + self.bias.index_select(0, cols).to(self.dtype)
        return z

    def tile_logits(self, rows: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
        z = self.hidden_acc.index_select(0, rows) @ self.weight[c0:c1].to(self.dtype).T
        if self.bias is not None:
            z = z + self.bias[c0:c1].to(self.dtype)
        return z

    def start_backward(self, needs: tuple[bool, ...]) -> None:
        """Note the gradients asked for; the hidden and weight gradients are allocated by the first
        step that writes them (the pairs' fused sums create them whole, zero rows included)."""
        self.need_hidden, self.need_weight = needs[0], needs[1]
        need_b = self.bias is not None and len(needs) > 2 and needs[2]
        device = self.hidden.device
        self.grad_hidden: torch.Tensor | None = None
        self.grad_weight: torch.Tensor | None = None
        self.grad_bias = torch.zeros(self.weight.shape[0], dtype=self.dtype, device=device) if need_b else None
        self.tile_grad: torch.Tensor | None = None

    def _zero_grads(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(hidden gradient, weight gradient), allocated as zeros where asked for and not yet there."""
        if self.need_hidden and self.grad_hidden is None:
            self.grad_hidden = torch.zeros(self.hidden.shape, dtype=self.dtype, device=self.hidden.device)
        if self.need_weight and self.grad_weight is None:
            self.grad_weight = torch.zeros_like(self.weight)
        return self.grad_hidden, self.grad_weight

    def pair_backward(self, plan: LocalPlan, gz: torch.Tensor) -> None:
        """Called first in backward (no gradient written yet)."""
        bag = torch.nn.functional.embedding_bag
        rows, cols = plan.pair_rows, plan.pair_cols
        if self.need_hidden:  # row t: sum over its pairs of gz * weight[col], fused
            wide = plan.num_rows > 0 and int((plan.pair_offsets[1:] - plan.pair_offsets[:-1]).max()) > ROW_BAG
            if wide:
                self.grad_hidden = self._wide_hidden_grad(plan, gz)
            elif self.direct:
                self.grad_hidden = bag(cols, self.weight, plan.pair_offsets[:-1], mode="sum", per_sample_weights=gz)
            else:
                grad_hidden, _ = self._zero_grads()
                assert grad_hidden is not None
                for i, j in self._pair_chunks(plan):
                    w = self.weight.index_select(0, cols[i:j]).to(self.dtype)
                    grad_hidden.index_add_(0, rows[i:j], gz[i:j, None] * w)
        if self.need_weight:  # id j: sum over its pairs of gz * hidden[row], fused, pairs sorted by id
            by_id, order = torch.sort(cols, stable=True)
            rows_by_id, gz_by_id = rows[order], gz[order]
            if self.direct:  # the whole gradient in one pass: one bag per id, empty bags are zero rows
                starts = torch.zeros(plan.width, dtype=torch.int64, device=cols.device)
                torch.cumsum(torch.bincount(by_id, minlength=plan.width)[:-1], 0, out=starts[1:])
                self.grad_weight = bag(rows_by_id, self.hidden_acc, starts, mode="sum", per_sample_weights=gz_by_id)
                return self._bias_backward(cols, gz)
            _, grad_weight = self._zero_grads()
            assert grad_weight is not None
            ids, counts = torch.unique_consecutive(by_id, return_counts=True)
            starts = torch.cumsum(counts, 0) - counts
            bounds = [*starts.tolist(), rows.numel()]
            unit = self.weight.shape[1] * self.hidden_acc.element_size()  # one fp32 [ids, d] block per chunk
            for u0, u1 in _chunks(ids.numel(), chunk_length(unit, plan.max_chunk_bytes, plan.chunk_size)):
                p0, p1 = bounds[u0], bounds[u1]
                block = bag(
                    rows_by_id[p0:p1],
                    self.hidden_acc,
                    starts[u0:u1] - p0,
                    mode="sum",
                    per_sample_weights=gz_by_id[p0:p1],
                )
                rows_u = ids[u0:u1]
                grad_weight[rows_u] = (grad_weight[rows_u].to(self.dtype) + block).to(self.weight.dtype)
        self._bias_backward(cols, gz)

    def _wide_hidden_grad(self, plan: LocalPlan, gz: torch.Tensor) -> torch.Tensor:
        """The hidden gradient when some row has more than ``ROW_BAG`` pairs: each row's pairs in bags
        of at most ``ROW_BAG`` (fused gather-scale-sums, as the narrow path's one bag per row), the
        bags of a row summed in ``SUM_DTYPE``, so that the error stays that of one bag at any width.
        Bags go chunk by chunk (``max_chunk_bytes``); a bf16 / fp16 weight is widened per chunk."""
        bag = torch.nn.functional.embedding_bag
        offsets, cols, device = plan.pair_offsets, plan.pair_cols, gz.device
        lengths = offsets[1:] - offsets[:-1]
        per_row = torch.clamp((lengths + ROW_BAG - 1) // ROW_BAG, min=1)
        num_bags = int(per_row.sum())
        bag_row = torch.repeat_interleave(torch.arange(plan.num_rows, device=device), per_row)
        first = torch.cumsum(per_row, 0) - per_row
        ordinal = torch.arange(num_bags, device=device) - first[bag_row]
        bag_start = torch.minimum(offsets[:-1][bag_row] + ordinal * ROW_BAG, offsets[1:][bag_row])
        bounds = [*bag_start.tolist(), cols.numel()]
        acc = torch.zeros((plan.num_rows, self.dim), dtype=sum_dtype(device), device=device)
        elem = self.hidden_acc.element_size()
        unit = self.dim * (2 * elem + acc.element_size()) * (1 if self.direct else ROW_BAG)
        for b0, b1 in _chunks(num_bags, chunk_length(unit, plan.max_chunk_bytes, plan.chunk_size)):
            p0, p1 = bounds[b0], bounds[b1]
            sel = cols[p0:p1]
            table = self.weight if self.direct else self.weight.index_select(0, sel).to(self.dtype)
            index = sel if self.direct else torch.arange(p1 - p0, device=device)
            part = bag(index, table, bag_start[b0:b1] - p0, mode="sum", per_sample_weights=gz[p0:p1])
            acc.index_add_(0, bag_row[b0:b1], part.to(acc.dtype))
        return acc.to(self.dtype)

    def _bias_backward(self, cols: torch.Tensor, gz: torch.Tensor) -> None:
        if self.grad_bias is not None:
            self.grad_bias.index_add_(0, cols, gz)

    def tile_backward(self, rows: torch.Tensor, c0: int, c1: int, gz: torch.Tensor) -> None:
        grad_hidden, grad_weight = self._zero_grads()
        if grad_hidden is not None:
            grad_hidden.index_add_(0, rows, _blocked_matmul(gz, self.weight[c0:c1], self.dtype))
        if grad_weight is not None:
            gw = gz.T @ self.hidden_acc.index_select(0, rows)
            if self.direct:
                grad_weight[c0:c1] += gw
            else:
                self.tile_grad = gw if self.tile_grad is None else self.tile_grad + gw
        if self.grad_bias is not None:
            self.grad_bias[c0:c1] += gz.sum(dim=0)

    def finish_tile(self, c0: int, c1: int) -> None:
        if self.tile_grad is not None and self.grad_weight is not None:
            self.grad_weight[c0:c1] = (self.grad_weight[c0:c1].to(self.dtype) + self.tile_grad).to(self.weight.dtype)
            self.tile_grad = None

    def grads(self) -> tuple[torch.Tensor | None, ...]:
        self._zero_grads()  # nothing scored: zero gradients
        grad_hidden = None if self.grad_hidden is None else self.grad_hidden.to(self.hidden.dtype)
        grad_bias = None if self.grad_bias is None or self.bias is None else self.grad_bias.to(self.bias.dtype)
        return (grad_hidden, self.grad_weight, grad_bias)


def _blocked_matmul(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``a [R, K] @ b [K, d]`` in ``dtype`` (b widened to it). With one row, K in blocks of
    ``ROW_BAG`` (one batched product; its [K / ROW_BAG, d] partials summed in ``SUM_DTYPE``): a BLAS
    matrix-vector product sums all K terms sequentially in fp32 (1.0e-5 off at K = 151,936 against
    1e-6 in blocks), while a matrix product blocks K itself."""
    rows, k = a.shape
    if rows != 1 or k <= ROW_BAG:
        return a @ b.to(dtype)
    blocks = k // ROW_BAG
    main = blocks * ROW_BAG
    parts = torch.bmm(a[:, :main].reshape(blocks, 1, ROW_BAG), b[:main].to(dtype).reshape(blocks, ROW_BAG, -1))
    out = parts[:, 0].to(sum_dtype(a.device)).sum(dim=0, keepdim=True)
    if main < k:
        out += (a[:, main:] @ b[main:].to(dtype)).to(out.dtype)
    return out.to(dtype)


_SOURCES: dict[str, Any] = {"logits": LogitsSource, "hidden": HiddenSource}


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _tile_target_hits(targets: torch.Tensor, c0: int, c1: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows of the tile holding their target, that target's column inside the tile)."""
    hit = (targets >= c0) & (targets < c1)
    return torch.nonzero(hit).reshape(-1), targets[hit] - c0


def _tiles(plan: LocalPlan, dim: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(row chunks of the full rows, column chunks of the vocabulary) from :func:`tile_shape`."""
    num_full = plan.full_rows.numel()
    if not num_full:
        return [], []
    elem = torch.finfo(plan.dtype).bits // 8
    rows, cols = tile_shape(num_full, plan.width, dim, elem, plan.max_chunk_bytes, plan.chunk_size)
    return _chunks(num_full, rows), _chunks(plan.width, cols)


# --------------------------------------------------------------------------- forward / backward
def _forward(src: Any, plan: LocalPlan) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    num_rows, dtype = plan.num_rows, plan.dtype
    device = plan.tau.device
    m = torch.full((num_rows,), float("-inf"), dtype=dtype, device=device)
    s = torch.zeros(num_rows, dtype=dtype, device=device)
    a = torch.zeros(num_rows, dtype=dtype, device=device)
    zy = torch.zeros(num_rows, dtype=dtype, device=device)
    rows = plan.pair_rows
    u = src.pair_logits(plan) / plan.tau[rows] if rows.numel() else torch.zeros(0, dtype=dtype, device=device)
    if u.numel():
        m = m.scatter_reduce(0, rows, u, reduce="amax", include_self=True)
        s, a = _pair_sums(plan, u, safe_shift(m))
        zy.index_add_(0, rows[plan.pair_is_target], u[plan.pair_is_target])
    row_chunks, col_chunks = _tiles(plan, src.dim)
    for r0, r1 in row_chunks:
        fr, ft = plan.full_rows[r0:r1], plan.full_target_cols[r0:r1]
        tau = plan.tau[fr][:, None]
        fm = torch.full((fr.numel(),), float("-inf"), dtype=sum_dtype(device), device=device)
        fs, fa = torch.zeros_like(fm), torch.zeros_like(fm)
        fz = torch.zeros(fr.numel(), dtype=dtype, device=device)
        for c0, c1 in col_chunks:
            ut = src.tile_logits(fr, c0, c1) / tau
            tm = ut.amax(dim=1)
            e, d, _ = _local_terms(ut, safe_shift(tm)[:, None])
            tile_s, tile_a = e.sum(dim=1).to(fm.dtype), (e * d).sum(dim=1).to(fm.dtype)  # blocked sums
            fm, fs, fa = merge(fm, fs, fa, tm.to(fm.dtype), tile_s, tile_a)  # tiles merged in float64
            hit_rows, hit_cols = _tile_target_hits(ft, c0, c1)
            fz[hit_rows] = ut[hit_rows, hit_cols]
        m[fr], s[fr], a[fr], zy[fr] = fm.to(dtype), fs.to(dtype), fa.to(dtype), fz
    return m, s, a, zy, u


def _pair_sums(plan: LocalPlan, u: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, A) per row over the pairs, in the accumulation dtype, summed in ``SUM_DTYPE`` (float64)
    pair chunk by pair chunk: the error of a sequential float64 sum of n terms (about n * 1e-16) stays
    far below one fp32 rounding at any width (a sequential fp32 ``index_add_`` lost about n * 1e-9,
    2e-4 at 151,936 ids)."""
    rows = plan.pair_rows
    s = torch.zeros(plan.num_rows, dtype=sum_dtype(u.device), device=u.device)
    a = torch.zeros_like(s)
    unit = 48  # bytes per pair of the chunk's temporaries: e, d, e * d, flags, two float64 copies
    for i, j in _chunks(u.numel(), chunk_length(unit, plan.max_chunk_bytes, plan.chunk_size)):
        e, d, _ = _local_terms(u[i:j], shift[rows[i:j]])
        s.index_add_(0, rows[i:j], e.to(s.dtype))
        a.index_add_(0, rows[i:j], (e * d).to(s.dtype))
    return s.to(plan.dtype), a.to(plan.dtype)


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
    src.start_backward(needs)
    shift = safe_shift(m)
    rows = plan.pair_rows
    if u.numel():
        e, d, finite = _local_terms(u, shift[rows])
        gu = e * (g_s[rows] + g_a[rows] * torch.where(finite, 1 + d, torch.zeros_like(d)))
        gu = gu + torch.where(plan.pair_is_target, g_zy[rows], torch.zeros_like(gu))
        src.pair_backward(plan, gu / plan.tau[rows])
    row_chunks, col_chunks = _tiles(plan, src.dim)
    for c0, c1 in col_chunks:
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


def _check_still_whole(kind: str, tensors: Any, shapes: list[torch.Size]) -> None:
    """The tensors saved for backward have their forward shapes: a sharded parameter released between
    forward and backward (DeepSpeed ZeRO-3 partitions it to shape ``(0,)`` unless its module's own hooks
    gather it again) is refused by name, never read."""
    names = ("logits",) if kind == "logits" else ("hidden", "weight", "bias")
    for name, tensor, shape in zip(names, tensors, shapes, strict=False):
        if tensor.shape != shape:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"{name} was {list(shape)} in forward and is {list(tensor.shape)} in backward (a sharded parameter"
                " released in between: score inside the module's own forward, where its hooks gather it again)",
                field=name,
            )


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
        ctx.shapes = [t.shape for t in tensors]
        ctx.save_for_backward(m, u, *tensors)
        ctx.mark_non_differentiable(m)
        return m, s, a, zy

    @staticmethod
    def backward(ctx: Any, g_m: Any, g_s: Any, g_a: Any, g_zy: Any) -> Any:  # type: ignore[override]
        m, u, *tensors = ctx.saved_tensors
        plan: LocalPlan = ctx.plan
        _check_still_whole(ctx.kind, tensors, ctx.shapes)
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
