"""Example masks and fixture paths shared by the tests (imported as ``from mask_examples import ...``).

``tests/`` has no ``__init__.py``, so pytest's default import mode puts it on ``sys.path``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sampling_mask import SamplingMask

#: Arrays produced by vLLM 0.32's own sampler and mask classes (copied from the project's shared
#: fixtures; fixtures/README.md says what each holds). A missing file fails a test, never skips it.
VLLM_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm-0.32"

#: Metadata of the full example: an int, a float and a string.
SAMPLE_METADATA: dict[str, Any] = {"top_k": 3, "top_p": 0.95, "producer": "test"}
#: Temperatures of the full example, one per row.
SAMPLE_TEMPERATURE = (1.0, 0.7, 1.0, 2.0)


def sample_mask(
    *, temperature: tuple[float, ...] = SAMPLE_TEMPERATURE, metadata: dict[str, Any] | None = None
) -> SamplingMask:
    """Unsorted and empty rows, an empty segment, every companion, non-finite logprobs.

    ``metadata`` replaces :data:`SAMPLE_METADATA` (None keeps it).
    """
    return SamplingMask.from_rows(
        [[7, 3], [], [5], [1, 2, 9]],
        vocab_size=10,
        cu_seqlens=[0, 2, 2, 4],
        sampled_token_ids=[3, -1, 5, 9],
        sampled_logprobs=np.array([-0.5, np.nan, -np.inf, -1e-3], np.float32),
        temperature=np.array(temperature, np.float32),
        support_logprobs=np.array([-0.1, -2.5, 0.0, -3.0, -1.5, -0.25], np.float32),
        metadata=dict(SAMPLE_METADATA if metadata is None else metadata),
    )


def random_mask(seed: int, rows: int = 400) -> SamplingMask:
    """``rows`` rows of 0 to 5 distinct ids below 1000, drawn from ``seed``, in two segments."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 6, size=rows)
    ids = [rng.choice(1000, size=int(k), replace=False).tolist() for k in lengths]
    return SamplingMask.from_rows(ids, vocab_size=1000, cu_seqlens=[0, rows // 2, rows])
