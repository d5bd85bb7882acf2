"""Support-size statistics of a mask, exact and batch by batch: the numbers ``sampling-mask stats`` and
``sampling-mask inspect`` print.

``summarize(masks)`` takes one :class:`SamplingMask` or an iterable of them (for example
``codecs.iter_masks(path)``, one record batch at a time) and returns a :class:`SupportSummary`;
``summary.to_dict()`` is the document ``sampling-mask stats --json`` prints, less ``file`` / ``format``
/ ``plot``. Support size = ids in a row; an empty row means "no support recorded" and is left out of
every support-size figure (it is counted in ``empty_rows``). Quantiles interpolate linearly between
order statistics, like ``numpy.quantile``'s default. NaN (a segment without a support) is None in
``to_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .core.model import SamplingMask, as_sampling_mask

__all__ = ["SupportSummary", "histogram_buckets", "summarize", "support_from_counts"]


class SupportSummary:
    """Support-size statistics accumulated batch by batch; exact (a histogram of row lengths).

    ``length_counts[k]`` = rows with k ids; an empty row (k = 0) means "no support recorded" and is
    left out of every support-size figure. Per-segment arrays are kept for ``stats``.
    """

    def __init__(self) -> None:
        self.rows = self.segments = self.nnz = self.batches = 0
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.vocab_size: int | None = None
        self.companions: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.ascending = True
        self._per_segment: list[dict[str, np.ndarray]] = []

    def add(self, mask: SamplingMask) -> None:
        """Count one more batch (the next rows and segments of the same file)."""
        mask = as_sampling_mask(mask)
        lengths = mask.row_lengths
        counts = np.bincount(lengths, minlength=1) if lengths.size else np.zeros(1, dtype=np.int64)
        if self.batches == 0:
            self.vocab_size = mask.vocab_size
            self.companions = list(mask.companions)
            self.metadata = dict(mask.metadata)
        self._count(counts, mask.num_rows, mask.num_segments, mask.nnz, 1, mask.is_canonical)
        self._per_segment.append(_segment_stats(mask))

    def merge(self, other: SupportSummary) -> None:
        """Count everything ``other`` counted too (for example another file of a dataset)."""
        if self.batches == 0:
            self.vocab_size, self.companions, self.metadata = other.vocab_size, other.companions, other.metadata
        self._count(other.length_counts, other.rows, other.segments, other.nnz, other.batches, other.ascending)
        self._per_segment += other._per_segment

    def _count(self, counts: np.ndarray, rows: int, segments: int, nnz: int, batches: int, ascending: bool) -> None:
        if counts.size > self.length_counts.size:
            counts = counts.copy()
            counts[: self.length_counts.size] += self.length_counts
            self.length_counts = counts
        else:
            self.length_counts[: counts.size] += counts
        self.rows += rows
        self.segments += segments
        self.nnz += nnz
        self.batches += batches
        self.ascending = self.ascending and ascending

    @property
    def empty_rows(self) -> int:
        """Rows with no support recorded."""
        return int(self.length_counts[0])

    def support(self) -> dict[str, Any]:
        """singleton_fraction, mean, median, p90, p99, max over the rows with a support."""
        return support_from_counts(self.length_counts)

    def per_segment(self) -> dict[str, np.ndarray]:
        """Per segment, file order: rows, empty_rows, ids, mean / median / max support (NaN / 0 without one)."""
        keys = ("rows", "empty_rows", "ids", "mean_support", "median_support", "max_support")
        return {k: np.concatenate([p[k] for p in self._per_segment]) for k in keys} if self._per_segment else {}

    def size_counts(self) -> dict[str, int]:
        """``{"k": rows with k ids}`` for every support size k >= 1 that occurs."""
        return {str(k): int(c) for k, c in enumerate(self.length_counts.tolist()) if k and c}

    def to_dict(self) -> dict[str, Any]:
        """rows, segments, nnz, empty_rows, support, histogram, support_size_counts, per_segment: JSON-ready
        (per-segment NaN is None)."""
        return {
            "rows": self.rows,
            "segments": self.segments,
            "nnz": self.nnz,
            "empty_rows": self.empty_rows,
            "support": self.support(),
            "histogram": histogram_buckets(self.length_counts),
            "support_size_counts": self.size_counts(),
            "per_segment": {
                k: [None if isinstance(x, float) and math.isnan(x) else x for x in v.tolist()]
                for k, v in self.per_segment().items()
            },
        }


def _segment_stats(mask: SamplingMask) -> dict[str, np.ndarray]:
    """Per segment: rows, empty rows, ids, and mean / median / max support size over non-empty rows."""
    cu, offsets, lengths = mask.cu_seqlens, mask.stored_offsets, mask.row_lengths
    seg_rows = np.diff(cu)
    seg_of_row = np.repeat(np.arange(seg_rows.size), seg_rows)
    empty = np.bincount(seg_of_row[lengths == 0], minlength=seg_rows.size).astype(np.int64)
    ids = np.subtract(offsets[cu[1:]], offsets[cu[:-1]], dtype=np.int64)
    nonempty = seg_rows - empty
    # Sorting rows by (segment, length) puts each segment's empty rows first, then its supports ascending.
    ordered = lengths[np.lexsort((lengths, seg_of_row))].astype(np.float64)
    have = nonempty > 0
    first = cu[:-1] + empty  # first non-empty row of each segment in sorted order
    lo = np.where(have, first + (nonempty - 1) // 2, 0)
    hi = np.where(have, first + nonempty // 2, 0)
    last = np.where(have, cu[1:] - 1, 0)
    pick = ordered if ordered.size else np.zeros(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(have, ids / np.maximum(nonempty, 1), np.nan)
    median = np.where(have, (pick[lo] + pick[hi]) / 2, np.nan)
    widest = np.where(have, pick[last], 0).astype(np.int64)
    return {
        "rows": seg_rows,
        "empty_rows": empty,
        "ids": ids,
        "mean_support": mean,
        "median_support": median,
        "max_support": widest,
    }


def _value_at_rank(cumulative: np.ndarray, rank: int) -> int:
    return int(np.searchsorted(cumulative, rank, side="right")) + 1


def support_from_counts(length_counts: np.ndarray) -> dict[str, Any]:
    """Support-size figures from ``length_counts[k]`` = rows with k ids (row 0 = empty rows, ignored).

    Quantiles interpolate linearly between order statistics, like ``numpy.quantile``'s default.
    """
    counts = np.asarray(length_counts[1:], dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return {
            "rows": 0,
            "singleton_fraction": None,
            "mean": None,
            "median": None,
            "p90": None,
            "p99": None,
            "max": None,
        }
    sizes = np.arange(1, counts.size + 1, dtype=np.float64)
    cumulative = np.cumsum(counts)

    def quantile(q: float) -> float:
        h = (total - 1) * q
        lo, hi = math.floor(h), math.ceil(h)
        a, b = _value_at_rank(cumulative, lo), _value_at_rank(cumulative, hi)
        return a + (h - lo) * (b - a)

    return {
        "rows": total,
        "singleton_fraction": int(counts[0]) / total,
        "mean": float((sizes * counts).sum() / total),
        "median": quantile(0.5),
        "p90": quantile(0.9),
        "p99": quantile(0.99),
        "max": int(np.flatnonzero(counts)[-1]) + 1,
    }


def histogram_buckets(length_counts: np.ndarray) -> list[dict[str, Any]]:
    """Rows per power-of-two support-size bucket: 1, 2, 3-4, 5-8, 9-16, ... (empty rows left out)."""
    counts = np.asarray(length_counts, dtype=np.int64)
    total = int(counts[1:].sum())
    if total == 0:
        return []
    sizes = np.arange(1, counts.size)
    bucket = np.ceil(np.log2(sizes)).astype(np.int64)
    per_bucket = np.bincount(bucket, weights=counts[1:], minlength=int(bucket.max()) + 1).astype(np.int64)
    out = []
    for b, rows in enumerate(per_bucket.tolist()):
        lo, hi = (1, 1) if b == 0 else (2 ** (b - 1) + 1, 2**b)
        out.append(
            {"sizes": f"{lo}" if lo == hi else f"{lo}-{hi}", "lo": lo, "hi": hi, "rows": rows, "fraction": rows / total}
        )
    return out


def summarize(masks: SamplingMask | Iterable[SamplingMask]) -> SupportSummary:
    """The :class:`SupportSummary` of one mask or of the batches of one file, in order."""
    summary = SupportSummary()
    for mask in masks if isinstance(masks, Iterable) else [masks]:  # a mask has no __iter__
        summary.add(mask)
    return summary
