"""Hypothesis strategies for spec-v1 masks, exported for any implementation's property tests.

Needs ``hypothesis`` (the ``test`` extra). Sizes stay tiny by default so suites run fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..model import SamplingMask

__all__ = ["masks", "rows_lists"]


@st.composite
def rows_lists(
    draw: Any, *, vocab_size: int = 50, max_rows: int = 12, max_width: int = 8, ascending: bool | None = None
) -> list[list[int]]:
    """Nested lists of unique ids in ``[0, vocab_size)``; empty rows included; order per ``ascending``
    (True: ascending, False/None: any order)."""
    width = min(max_width, vocab_size)
    row = st.lists(st.integers(0, vocab_size - 1), min_size=0, max_size=width, unique=True)
    rows = draw(st.lists(row, min_size=0, max_size=max_rows))
    if ascending:
        rows = [sorted(r) for r in rows]
    return rows


@st.composite
def masks(
    draw: Any,
    *,
    vocab_size: int | None = None,
    max_rows: int = 12,
    max_width: int = 8,
    companions: bool | None = None,
    metadata: bool | None = None,
) -> SamplingMask:
    """Valid masks: empty rows, empty segments and zero rows included; companions and metadata drawn
    unless forced with ``companions=`` / ``metadata=``."""
    vocab = vocab_size if vocab_size is not None else draw(st.integers(1, 64))
    rows = draw(rows_lists(vocab_size=vocab, max_rows=max_rows, max_width=max_width))
    num_rows = len(rows)
    cuts = sorted(draw(st.lists(st.integers(0, num_rows), min_size=0, max_size=4)))
    cu_seqlens = [0, *cuts, num_rows]
    kwargs: dict[str, Any] = {"cu_seqlens": cu_seqlens}
    if draw(st.booleans()) or vocab_size is not None:
        kwargs["vocab_size"] = vocab
    with_companions = draw(st.booleans()) if companions is None else companions
    if with_companions:
        sampled = [draw(st.sampled_from(r)) if r else draw(st.integers(-1, vocab - 1)) for r in rows]
        nnz = sum(len(r) for r in rows)
        floats = st.floats(-30.0, 0.0, width=32)
        kwargs["sampled_token_ids"] = np.array(sampled, dtype=np.int32)
        kwargs["sampled_logprobs"] = np.array(draw(st.lists(floats, min_size=num_rows, max_size=num_rows)), np.float32)
        temps = st.floats(0.0625, 2.0, width=32)
        kwargs["temperature"] = np.array(draw(st.lists(temps, min_size=num_rows, max_size=num_rows)), np.float32)
        kwargs["support_logprobs"] = np.array(draw(st.lists(floats, min_size=nnz, max_size=nnz)), np.float32)
    with_metadata = draw(st.booleans()) if metadata is None else metadata
    if with_metadata:
        kwargs["metadata"] = {
            "top_k": draw(st.integers(1, 512)),
            "top_p": draw(st.floats(0.05, 1.0)),
            "producer": draw(st.sampled_from(["vllm-0.32", "sglang", "test"])),
        }
    return SamplingMask.from_rows(rows, **kwargs)
