"""Sampler knowledge: which samplers a mask replays exactly, and what a sampler really runs with.

- :mod:`.replayable`: is this sampler replayable? (:func:`check_sampler`,
  :func:`check_sampling_params`, :func:`require_replayable`), the check a rollout framework runs
  before it requests sampling masks; numpy and the standard library only.
- :mod:`.generation_config`: the configuration Hugging Face ``generate()`` really samples with
  (its priority of arguments, configs and defaults), and the processors no replay reproduces;
  transformers is imported only inside its functions.

Below :mod:`sampling_mask.adapters`, :mod:`sampling_mask.reference_scorer` and
:mod:`sampling_mask.trainers`, which all read it; it imports only ``core``.
"""

from .replayable import (
    DEFAULT_MAX_TOP_K,
    Reason,
    ReplayCheck,
    check_sampler,
    check_sampling_params,
    require_replayable,
)

__all__ = ["DEFAULT_MAX_TOP_K", "Reason", "ReplayCheck", "check_sampler", "check_sampling_params", "require_replayable"]
