"""A seeded, calibrated synthetic workload: rollouts whose masks look like real top-k / top-p runs.

Each row models one sampling step. The sorted candidate logits of a step are a power law in the
rank with a separate top-1 margin: ``z_1 = 0`` and ``z_i = -(margin + slope * ln i)`` for
``i = 2..K`` (K = ``min(top_k, vocab_size)``), divided by the row's temperature. ``margin`` is
gamma-distributed (a Wilson-Hilferty transform of a normal draw) and ``slope`` log-normal, negatively
correlated with it; the five constants below were fitted so that at temperature 1, top_k 512 and
top_p 0.95 the support sizes match what real RL runs measured (:data:`TARGETS`). The support of a
row is the smallest prefix of the sorted candidates whose probability reaches ``top_p``; it is
found for all rows at once by one ``searchsorted`` over a table of power-law partial sums, so no
``[T, V]`` (or even ``[T, K]``) array is ever built.

The support's ids are drawn without replacement: ``ids="zipf"`` from a Zipf-Mandelbrot law over
token frequency ranks (exponent 1, offset 10), the ranks mapped to ids by a fixed random
permutation, so the skew is in which ids recur, not in their size (JSON nested lists of these
masks take about 59 bytes per token with ``json.dumps``' default separators, as measured on real
runs); ``ids="uniform"`` draws uniformly (the worst case for compression). Within a row, the candidate ranks favour frequent tokens (``zipf``) or are random
(``uniform``). The sampled id is drawn from the support renormalized at the row's temperature, so
``sampled_logprobs`` is exactly ``log_softmax`` over the support and the sampled id is always in
its row. Segments (sequences) have log-normal lengths.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.model import SamplingMask

__all__ = ["TARGETS", "rollout", "support_stats"]

#: Support-size statistics measured on real RL runs (non-empty rows), which :func:`rollout` is fitted to.
TARGETS: dict[str, float] = {"singleton_fraction": 0.46, "median": 2.0, "mean": 8.0, "p99": 82.0}

# Fitted constants (temperature 1, top_k 512, top_p 0.95); see the module docstring.
_MARGIN_SHAPE = 2.5411  # gamma shape of the top-1 logit margin
_MARGIN_SCALE = 1.4191  # gamma scale (nats)
_SLOPE_LOG_MEAN = 0.41168  # log-normal slope of the logits in ln(rank)
_SLOPE_LOG_STD = 0.16088
_SLOPE_MARGIN_CORR = -0.62176
_ALPHA_STEP = 100  # power-law exponents are kept on a 0.01 grid so the partial-sum table stays small
_ZIPF_OFFSET = 10.0
_MAX_CANDIDATES = 1 << 14  # K limit: ranks are packed in 14 bits
_RANK_KEY_BITS = 22


def _segment_lengths(rng: np.random.Generator, num_tokens: int, median: float, sigma: float) -> np.ndarray:
    """Log-normal lengths (>= 1) that add up to exactly ``num_tokens`` (the last one cut short)."""
    if num_tokens == 0:
        return np.zeros(0, dtype=np.int64)
    chunks: list[np.ndarray] = []
    total = 0
    while total < num_tokens:
        draw = np.maximum(np.rint(rng.lognormal(np.log(median), sigma, 64 + num_tokens // int(median))), 1)
        chunks.append(draw.astype(np.int64))
        total += int(chunks[-1].sum())
    lengths = np.concatenate(chunks)
    ends = np.cumsum(lengths)
    count = int(np.searchsorted(ends, num_tokens)) + 1
    lengths = lengths[:count]
    lengths[-1] -= int(ends[count - 1]) - num_tokens
    return lengths


def _support_sizes(
    margin: np.ndarray, alpha_index: np.ndarray, num_candidates: int, top_p: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(support size per row, exponent grid, row -> grid index) of the top-p prefix.

    Rank 1 weighs 1 and rank i >= 2 weighs ``exp(-margin) * i**-alpha``; the support is the smallest
    n whose mass reaches ``top_p`` of the first ``num_candidates`` ranks.
    """
    grid, row_grid = np.unique(alpha_index, return_inverse=True)
    alphas = grid / _ALPHA_STEP
    ranks = np.arange(1, num_candidates + 1, dtype=np.float64)
    partial = np.cumsum(ranks[None, :] ** -alphas[:, None], axis=1)  # [G, K]: sum_{i<=n} i**-alpha
    scale = np.exp(-margin)
    total = 1.0 + scale * (partial[row_grid, -1] - 1.0)
    if top_p >= 1.0:
        return np.full(margin.size, num_candidates, dtype=np.int64), alphas, row_grid
    # smallest n with 1 + scale * (partial[n] - 1) >= top_p * total; rows are offset so one sorted
    # array holds every table row.
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        need = 1.0 + (top_p * total - 1.0) / scale
    need = np.nan_to_num(need, nan=0.0, posinf=np.inf)
    stride = float(partial[:, -1].max()) + 1.0
    flat = (partial + stride * np.arange(grid.size)[:, None]).ravel()
    found = np.searchsorted(flat, need + stride * row_grid, side="left") - row_grid * num_candidates + 1
    sizes = np.where(top_p * total <= 1.0, 1, np.clip(found, 1, num_candidates))
    return sizes.astype(np.int64), alphas, row_grid


@functools.lru_cache(maxsize=4)
def _frequency_ranks(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(id of each frequency rank, ``ln(rank + offset)`` of each id), from a fixed permutation."""
    id_of_rank = np.random.default_rng(0x5EED).permutation(vocab_size).astype(np.int32)
    log_rank_of_id = np.empty(vocab_size, dtype=np.float32)
    log_rank_of_id[id_of_rank] = np.log(np.arange(vocab_size) + _ZIPF_OFFSET)
    id_of_rank.flags.writeable = False
    log_rank_of_id.flags.writeable = False
    return id_of_rank, log_rank_of_id


def _draw_ids(rng: np.random.Generator, count: int, vocab_size: int, law: str) -> np.ndarray:
    if law == "uniform":
        return rng.integers(0, vocab_size, count, dtype=np.int64)
    q = _ZIPF_OFFSET
    ranks = np.floor(q * np.exp(rng.random(count) * np.log((vocab_size + q) / q)) - q).astype(np.int64)
    return _frequency_ranks(vocab_size)[0][np.clip(ranks, 0, vocab_size - 1)].astype(np.int64)


def _distinct_rows(rng: np.random.Generator, sizes: np.ndarray, vocab_size: int, law: str) -> np.ndarray:
    """Sorted keys ``row << 32 | id``: ``sizes[row]`` distinct ids per row, ascending within rows.

    Rows wanting at most half the vocabulary draw with replacement, drop repeats and redraw only
    what is still missing (each redraw succeeds with probability >= 1/2 once uniform). Rows wanting
    more take the first ids of a random permutation of the vocabulary (only small vocabularies).
    """
    rows = np.arange(sizes.size, dtype=np.int64)
    dense = sizes * 2 > vocab_size
    sparse_sizes = np.where(dense, 0, sizes)
    pending = np.sort((np.repeat(rows, sparse_sizes) << 32) | _draw_ids(rng, int(sparse_sizes.sum()), vocab_size, law))
    done: list[np.ndarray] = []
    if dense.any():
        dense_rows = rows[dense]
        if dense_rows.size * vocab_size > 1 << 27:
            raise SamplingMaskError(
                ErrorCode.E_LIMIT, "support sizes near the vocabulary size need a small vocab_size", field="vocab_size"
            )
        permutations = np.argsort(rng.random((dense_rows.size, vocab_size)), axis=1)
        chosen = permutations[np.arange(vocab_size)[None, :] < sizes[dense_rows][:, None]]
        done.append(np.sort((np.repeat(dense_rows, sizes[dense_rows]) << 32) | chosen))
    active = ~dense  # rows whose ids are in ``pending``
    for attempt in range(64):
        keep = np.ones(pending.size, dtype=bool)
        keep[1:] = pending[1:] != pending[:-1]
        pending = pending[keep]
        missing = np.where(active, sparse_sizes - np.bincount(pending >> 32, minlength=sizes.size), 0)
        short = missing > 0
        if not short.any():
            done.append(pending)
            return np.sort(np.concatenate(done), kind="stable")  # merges a few sorted runs
        still = short[pending >> 32]
        done.append(pending[~still])
        active = short
        draw_law = law if attempt < 8 else "uniform"  # rare ids: finish with the fast-mixing law
        extra = (np.repeat(rows, np.where(short, missing, 0)) << 32) | _draw_ids(
            rng, int(missing[short].sum()), vocab_size, draw_law
        )
        pending = np.sort(np.concatenate((pending[still], extra)))
    raise SamplingMaskError(  # pragma: no cover - probability below 2**-50
        ErrorCode.E_RANGE, "could not draw distinct ids", field="vocab_size"
    )


def rollout(
    num_tokens: int,
    *,
    seed: int = 0,
    vocab_size: int = 151936,
    ids: Literal["zipf", "uniform"] = "zipf",
    top_k: int = 512,
    top_p: float = 0.95,
    temperature: float | Sequence[float] = 1.0,
    segment_length: float = 600.0,
    segment_sigma: float = 0.9,
    order: Literal["ascending", "rank"] = "ascending",
    support_logprobs: bool = False,
) -> SamplingMask:
    """A synthetic rollout of ``num_tokens`` rows with ``cu_seqlens``, ``sampled_token_ids``,
    ``sampled_logprobs`` and ``temperature`` (and ``support_logprobs`` if asked).

    ``temperature`` is one value, or a sequence each segment picks from. ``order="rank"`` keeps
    each row in decreasing probability (SGLang / SkyRL style) instead of ascending ids (vLLM).
    Deterministic in ``seed``. Every row is non-empty; sampled ids lie in their rows.
    """
    num_tokens = int(num_tokens)
    if num_tokens < 0 or vocab_size < 1 or not 1 <= top_k or not 0.0 < top_p <= 1.0:
        raise SamplingMaskError(ErrorCode.E_RANGE, "need num_tokens >= 0, vocab_size >= 1, top_k >= 1, 0 < top_p <= 1")
    if ids not in ("zipf", "uniform") or order not in ("ascending", "rank"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"unknown ids={ids!r} or order={order!r}")
    num_candidates = min(int(top_k), int(vocab_size))
    if num_candidates > _MAX_CANDIDATES:
        raise SamplingMaskError(
            ErrorCode.E_LIMIT, f"top_k is capped at {_MAX_CANDIDATES} here", field="top_k", value=num_candidates
        )
    rng = np.random.default_rng(seed)
    seg_lengths = _segment_lengths(rng, num_tokens, segment_length, segment_sigma)
    temps = np.atleast_1d(np.asarray(temperature, dtype=np.float64))
    if temps.size == 0 or not np.all(temps > 0):
        raise SamplingMaskError(ErrorCode.E_RANGE, "temperatures must be > 0", field="temperature")
    row_temperature = np.repeat(rng.choice(temps, size=seg_lengths.size), seg_lengths)
    metadata: dict[str, Any] = {"top_k": int(top_k), "top_p": float(top_p), "producer": "sampling_mask.data.synthetic"}
    if temps.size == 1:
        metadata["temperature"] = float(temps[0])
    if num_tokens == 0:
        empty = np.zeros(0, dtype=np.float32)
        extras0: dict[str, Any] = {"support_logprobs": empty} if support_logprobs else {}
        return SamplingMask(
            np.zeros(0, np.int32),
            np.zeros(1, np.int64),
            vocab_size=int(vocab_size),
            sampled_token_ids=np.zeros(0, np.int32),
            sampled_logprobs=empty,
            temperature=empty,
            metadata=metadata,
            **extras0,
        )

    # Logit shape per row: margin (gamma via Wilson-Hilferty) and slope (log-normal), correlated.
    z_margin = rng.standard_normal(num_tokens)
    z_slope = _SLOPE_MARGIN_CORR * z_margin + np.sqrt(1 - _SLOPE_MARGIN_CORR**2) * rng.standard_normal(num_tokens)
    k = _MARGIN_SHAPE
    margin = k * _MARGIN_SCALE * np.maximum(0.0, 1 - 1 / (9 * k) + z_margin / (3 * np.sqrt(k))) ** 3
    slope = np.exp(_SLOPE_LOG_MEAN + _SLOPE_LOG_STD * z_slope)
    alpha_index = np.maximum(np.rint(slope / row_temperature * _ALPHA_STEP), 1).astype(np.int64)
    scaled_margin = margin / row_temperature
    sizes, alphas, row_grid = _support_sizes(scaled_margin, alpha_index, num_candidates, top_p)
    offsets = layouts.counts_to_offsets(sizes)

    keys = _distinct_rows(rng, sizes, int(vocab_size), ids)
    ascending_ids = (keys & 0xFFFFFFFF).astype(np.int32)
    row = keys >> 32
    starts = np.repeat(offsets[:-1], sizes)
    position = np.arange(keys.size, dtype=np.int64) - starts

    # Rank candidates inside each row (rank 0 = most probable) with one packed sort.
    if ids == "zipf":
        preference = _frequency_ranks(int(vocab_size))[1][ascending_ids]
        preference += rng.standard_normal(keys.size, dtype=np.float32)
        lo, hi = np.log(_ZIPF_OFFSET) - 6.0, np.log(vocab_size + _ZIPF_OFFSET) + 6.0
    else:
        preference, lo, hi = rng.random(keys.size, dtype=np.float32), 0.0, 1.0
    top = (1 << _RANK_KEY_BITS) - 1
    quantized = np.clip((preference - np.float32(lo)) * np.float32(top / (hi - lo)), 0, top).astype(np.uint64)
    packed = (row.astype(np.uint64) << np.uint64(36)) | (quantized << np.uint64(14)) | position.astype(np.uint64)
    packed.sort()
    by_rank = starts + (packed & np.uint64((1 << 14) - 1)).astype(np.int64)  # ascending positions, rank order
    rank = np.empty(keys.size, dtype=np.int64)
    rank[by_rank] = position

    # Scaled log-weights (rank 0 weighs 1), log-softmax over each row's support, one draw per row.
    log_rank = np.log1p(np.arange(num_candidates, dtype=np.float64))
    log_weight = np.repeat(-scaled_margin, sizes) - np.repeat(alphas[row_grid], sizes) * log_rank[rank]
    log_weight[by_rank[offsets[:-1]]] = 0.0
    weight = np.exp(log_weight)
    cumulative = np.cumsum(weight)
    row_end = cumulative[offsets[1:] - 1]
    row_start = np.concatenate(([0.0], row_end[:-1]))
    row_mass = row_end - row_start
    target = row_start + rng.random(num_tokens) * row_mass * (1 - 1e-12)
    picked = np.clip(np.searchsorted(cumulative, target, side="right"), offsets[:-1], offsets[1:] - 1)
    log_mass = np.log(row_mass)
    sampled_ids = ascending_ids[picked]
    sampled_logprobs = (log_weight[picked] - log_mass).astype(np.float32)

    out_ids = ascending_ids[by_rank] if order == "rank" else ascending_ids
    extras: dict[str, Any] = {}
    if support_logprobs:
        log_prob = (log_weight - np.repeat(log_mass, sizes)).astype(np.float32)
        extras["support_logprobs"] = log_prob[by_rank] if order == "rank" else log_prob
    return SamplingMask(
        out_ids,
        offsets,
        cu_seqlens=layouts.counts_to_offsets(seg_lengths),
        vocab_size=int(vocab_size),
        sampled_token_ids=sampled_ids,
        sampled_logprobs=sampled_logprobs,
        temperature=row_temperature.astype(np.float32),
        metadata=metadata,
        validate=False,
        **extras,
    )


def support_stats(mask: SamplingMask) -> dict[str, float]:
    """Support-size statistics over the non-empty rows (empty rows mean "no support recorded").

    Keys: ``rows``, ``empty_rows``, ``nnz``, ``singleton_fraction``, ``median``, ``mean``, ``p99``
    (linear interpolation), ``max``; the size statistics are 0 when every row is empty.
    """
    lengths = mask.row_lengths
    sizes = lengths[lengths > 0]
    out: dict[str, float] = {"rows": mask.num_rows, "empty_rows": int(lengths.size - sizes.size), "nnz": mask.nnz}
    if sizes.size == 0:
        return {**out, "singleton_fraction": 0.0, "median": 0.0, "mean": 0.0, "p99": 0.0, "max": 0}
    return {
        **out,
        "singleton_fraction": float(np.mean(sizes == 1)),
        "median": float(np.median(sizes)),
        "mean": float(sizes.mean()),
        "p99": float(np.percentile(sizes, 99)),
        "max": int(sizes.max()),
    }
