"""Masks as training data: alignment with a trainer's tokens, trajectories, statistics, workloads.

- :mod:`.alignment`: label shift, padding, dense batches, context-parallel splits (numpy).
- :mod:`.trace`: multi-turn trajectories, their masks built turn by turn (numpy).
- :mod:`.stats`: support-size statistics (what ``sampling-mask stats`` / ``inspect`` print).
- :mod:`.synthetic`: workloads shaped like real runs (benchmarks, demos, tests).
- :mod:`.torch_data`: PyTorch ``Dataset`` / ``Sampler`` / collate over mask files (torch).

Above :mod:`sampling_mask.codecs` (datasets read files through its batch reader), below
:mod:`sampling_mask.sampler`. Importing the package imports the numpy modules; :mod:`.torch_data`
is imported on its own.
"""

from . import alignment, stats, synthetic, trace

__all__ = ["alignment", "stats", "synthetic", "trace"]
