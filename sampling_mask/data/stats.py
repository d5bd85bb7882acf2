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
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..core.model import SamplingMask, as_sampling_mask

__all__ = ["SEGMENT_FIELDS", "SupportSummary", "histogram_buckets", "json_values", "summarize", "support_from_counts"]


#: Per-segment statistics, in the order of :meth:`SupportSummary.per_segment`, and their dtypes.
SEGMENT_FIELDS: dict[str, type] = {
    "rows": np.int64,
    "empty_rows": np.int64,
    "ids": np.int64,
    "mean_support": np.float64,
    "median_support": np.float64,
    "max_support": np.int64,
}
_CHUNK_SEGMENTS = 1 << 16  # segments computed at once: memory stays O(chunk), not O(segments)
_CHUNK_ROWS = 1 << 18  # rows computed at once (a longer segment is one chunk, counted by its histogram)


class SupportSummary:
    """Support-size statistics accumulated batch by batch; exact (a histogram of row lengths).

    ``length_counts[k]`` = rows with k ids; an empty row (k = 0) means "no support recorded" and is
    left out of every support-size figure. Per-segment statistics are computed vectorized, a chunk of
    at most 65,536 segments and 262,144 rows at a time (a longer segment from its own histogram), so
    computing them holds O(chunk) memory whatever the mask. They are kept in memory for every segment
    (``keep=None``, the default), for the first ``keep`` segments only, and with ``spool=True`` also
    written to temporary files and read back a chunk at a time (:meth:`per_segment_chunks`): the
    command line's reports hold O(chunk), never O(segments). The distribution of rows per segment
    (:meth:`segment_rows`) is kept as a histogram of the distinct lengths (at most sqrt(2 x rows)).
    """

    def __init__(self, *, keep: int | None = None, spool: bool = False) -> None:
        self.rows = self.segments = self.nnz = self.batches = 0
        self.length_counts = np.zeros(1, dtype=np.int64)
        self.vocab_size: int | None = None
        self.companions: list[str] = []
        self.metadata: dict[str, Any] = {}
        self.ascending = True
        self._keep = keep
        self._kept: list[dict[str, np.ndarray]] = []
        self._kept_segments = 0
        self._spool: dict[str, Any] | None = None
        if spool:
            import tempfile

            self._spool = {key: tempfile.TemporaryFile() for key in SEGMENT_FIELDS}  # noqa: SIM115 - closed by close()
        self._segment_lengths = np.zeros(0, dtype=np.int64)  # distinct rows-per-segment values ...
        self._segment_length_counts = np.zeros(0, dtype=np.int64)  # ... and how many segments have each

    def add(self, mask: SamplingMask) -> None:
        """Count one more batch (the next rows and segments of the same file)."""
        mask = as_sampling_mask(mask)
        if self.batches == 0:
            self.vocab_size = mask.vocab_size
            self.companions = list(mask.companions)
            self.metadata = dict(mask.metadata)
        counts = np.zeros(1, dtype=np.int64)
        for chunk_counts, stats in _segment_chunks(mask):
            if chunk_counts.size > counts.size:
                chunk_counts[: counts.size] += counts
                counts = chunk_counts
            else:
                counts[: chunk_counts.size] += chunk_counts
            self._store(stats)
        self._count(counts, mask.num_rows, mask.num_segments, mask.nnz, 1, mask.is_canonical)

    def merge(self, other: SupportSummary) -> None:
        """Count everything ``other`` counted too (for example another file of a dataset)."""
        if self.batches == 0:
            self.vocab_size, self.companions, self.metadata = other.vocab_size, other.companions, other.metadata
        for stats in other._chunks():
            self._store(stats)
        self._add_segment_lengths(other._segment_lengths, other._segment_length_counts)
        self._count(other.length_counts, other.rows, other.segments, other.nnz, other.batches, other.ascending)

    def close(self) -> None:
        """Remove the temporary files of ``spool=True`` (also done when the summary is collected)."""
        for fh in (self._spool or {}).values():
            fh.close()

    def _store(self, stats: dict[str, np.ndarray]) -> None:
        """Keep (the first ``keep`` of) and spool one chunk's per-segment statistics."""
        self._add_segment_lengths(*np.unique(stats["rows"], return_counts=True))
        if self._spool is not None:
            for key, fh in self._spool.items():
                fh.write(np.ascontiguousarray(stats[key], SEGMENT_FIELDS[key]).tobytes())
        if self._keep is None and self._spool is not None:
            return  # every segment is in the spool
        room = stats["rows"].size if self._keep is None else max(0, self._keep - self._kept_segments)
        if room:
            kept = {k: v[:room].copy() if room < v.size else v for k, v in stats.items()}
            self._kept.append(kept)
            self._kept_segments += kept["rows"].size

    def _add_segment_lengths(self, lengths: np.ndarray, counts: np.ndarray) -> None:
        values = np.concatenate((self._segment_lengths, lengths.astype(np.int64)))
        weights = np.concatenate((self._segment_length_counts, counts.astype(np.int64)))
        self._segment_lengths, where = np.unique(values, return_inverse=True)
        self._segment_length_counts = np.bincount(where, weights=weights, minlength=self._segment_lengths.size).astype(
            np.int64
        )

    def _chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """Every segment's statistics a chunk at a time: from the spool, else what is kept."""
        if self._spool is None:
            yield from self._kept
            return
        columns = {key: self.per_segment_chunks(key) for key in SEGMENT_FIELDS}
        while True:
            chunk = {key: next(column, None) for key, column in columns.items()}
            if chunk["rows"] is None:
                return
            yield chunk  # type: ignore[misc]

    def per_segment_chunks(self, key: str) -> Iterator[np.ndarray]:
        """The per-segment statistic ``key`` of every segment (spooled) or every kept one, in file
        order, at most 65,536 values at a time."""
        if self._spool is None:
            for stats in self._kept:
                yield stats[key]
            return
        fh, dtype = self._spool[key], np.dtype(SEGMENT_FIELDS[key])
        fh.flush()
        position = 0
        while True:
            fh.seek(position)
            data = fh.read(_CHUNK_SEGMENTS * dtype.itemsize)
            if not data:
                return
            position += len(data)
            yield np.frombuffer(data, dtype=dtype)

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

    def segment_rows(self) -> dict[str, Any]:
        """min, median, max rows per segment over every segment counted (None without a segment);
        the median as ``numpy.median`` gives it."""
        counts = self._segment_length_counts
        total = int(counts.sum())
        if not total:
            return {"min": None, "median": None, "max": None}
        cumulative = np.cumsum(counts)
        lo = self._segment_lengths[int(np.searchsorted(cumulative, (total - 1) // 2, side="right"))]
        hi = self._segment_lengths[int(np.searchsorted(cumulative, total // 2, side="right"))]
        return {
            "min": int(self._segment_lengths[0]),
            "median": (int(lo) + int(hi)) / 2,
            "max": int(self._segment_lengths[-1]),
        }

    def per_segment(self, first: int | None = None) -> dict[str, np.ndarray]:
        """Per segment, file order: rows, empty_rows, ids, mean / median / max support (NaN / 0 without
        one); every segment (the default, or spooled), else the first ``keep``; at most ``first``."""
        if not self.batches:
            return {}
        out = {}
        for key, dtype in SEGMENT_FIELDS.items():
            parts: list[np.ndarray] = [np.zeros(0, dtype)]
            count = 0
            for chunk in self.per_segment_chunks(key):
                if first is not None and count >= first:
                    break
                parts.append(chunk if first is None else chunk[: first - count])
                count += parts[-1].size
            out[key] = np.concatenate(parts)
        return out

    def size_counts(self) -> dict[str, int]:
        """``{"k": rows with k ids}`` for every support size k >= 1 that occurs."""
        return {str(k): int(c) for k, c in enumerate(self.length_counts.tolist()) if k and c}

    def to_dict(self, *, per_segment: bool = True) -> dict[str, Any]:
        """rows, segments, nnz, empty_rows, support, histogram, support_size_counts, per_segment: JSON-ready
        (per-segment NaN is None); without ``per_segment`` when it is False."""
        document = {
            "rows": self.rows,
            "segments": self.segments,
            "nnz": self.nnz,
            "empty_rows": self.empty_rows,
            "support": self.support(),
            "histogram": histogram_buckets(self.length_counts),
            "support_size_counts": self.size_counts(),
        }
        if per_segment:
            document["per_segment"] = {k: json_values(v) for k, v in self.per_segment().items()}
        return document


def json_values(values: np.ndarray) -> list[Any]:
    """Python values of a per-segment array for JSON: NaN (a segment without a support) is None."""
    return [None if isinstance(x, float) and math.isnan(x) else x for x in values.tolist()]


def _segment_chunks(mask: SamplingMask) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """(row-length histogram, per-segment statistics) of ``mask`` a chunk of segments at a time."""
    cu, offsets = mask.cu_seqlens, mask.stored_offsets
    segments = cu.size - 1
    first = 0
    while first < segments:
        stop = min(first + _CHUNK_SEGMENTS, segments)
        stop = min(stop, int(np.searchsorted(cu, cu[first] + _CHUNK_ROWS, side="right")) - 1)
        stop = max(stop, first + 1)
        yield _chunk_stats(cu[first : stop + 1], offsets)
        first = stop


def _chunk_stats(cu: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Per segment of ``cu`` (a slice of cu_seqlens): rows, empty rows, ids, and mean / median / max
    support size over the non-empty rows; and the row-length histogram of its rows."""
    r0, r1 = int(cu[0]), int(cu[-1])
    row_offsets = offsets[r0 : r1 + 1]
    lengths = np.subtract(row_offsets[1:], row_offsets[:-1], dtype=np.int64)
    counts = np.bincount(lengths, minlength=1) if lengths.size else np.zeros(1, dtype=np.int64)
    seg_cu = cu.astype(np.int64) - r0
    seg_rows = np.diff(seg_cu)
    ids = np.subtract(row_offsets[seg_cu[1:]], row_offsets[seg_cu[:-1]], dtype=np.int64)
    if seg_rows.size == 1:  # one segment (perhaps long): its figures from its histogram
        empty = counts[:1].copy()
        nonzero = np.flatnonzero(counts[1:])
        cumulative = np.cumsum(counts[1:])
        n = int(cumulative[-1]) if cumulative.size else 0
        if n:
            low, high = _value_at_rank(cumulative, (n - 1) // 2), _value_at_rank(cumulative, n // 2)
            median, widest = np.array([(low + high) / 2]), np.array([int(nonzero[-1]) + 1])
        else:
            median, widest = np.array([np.nan]), np.zeros(1, dtype=np.int64)
    else:
        # Sorting the keys (segment, length) in place puts each segment's empty rows first, then its
        # supports ascending: the median and the widest row are read at computed positions.
        width = int(lengths.max()) + 1 if lengths.size else 1
        keys = np.repeat(np.arange(seg_rows.size, dtype=np.int64) * width, seg_rows)
        keys += lengths
        keys.sort()
        base = np.arange(seg_rows.size, dtype=np.int64) * width
        empty = np.searchsorted(keys, base + 1, side="left") - seg_cu[:-1]
        nonempty = seg_rows - empty
        have = nonempty > 0
        first = seg_cu[:-1] + empty
        pick = keys if keys.size else np.zeros(1, dtype=np.int64)
        lo = pick[np.where(have, first + (nonempty - 1) // 2, 0)] - base
        hi = pick[np.where(have, first + nonempty // 2, 0)] - base
        median = np.where(have, (lo + hi) / 2, np.nan)
        widest = np.where(have, pick[np.where(have, seg_cu[1:] - 1, 0)] - base, 0).astype(np.int64)
    nonempty = seg_rows - empty
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(nonempty > 0, ids / np.maximum(nonempty, 1), np.nan)
    stats = {
        "rows": seg_rows,
        "empty_rows": empty.astype(np.int64),
        "ids": ids,
        "mean_support": mean,
        "median_support": median.astype(np.float64),
        "max_support": widest,
    }
    return counts, stats


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
