"""Replay inside trainers: capture from transformers ``generate()``, and the TRL, verl and OpenRLHF
integrations (torch; each trainer's package is imported only inside its module, on use).

- :mod:`.transformers`: the sampling mask of ``generate()`` (:class:`~.transformers.SamplingMaskRecorder`,
  :func:`~.transformers.from_generate_output`).
- :mod:`.trl`: ``ReplayGRPOTrainer``, TRL's GRPO with replay, and TRL's vLLM server / colocate readers.
- :mod:`.verl`, :mod:`.openrlhf`: the functions their patched call sites use.

Above :mod:`sampling_mask.adapters` (engines' wire forms) and :mod:`sampling_mask.reference_scorer`
(the scorer), which they use. Importing the package imports none of torch, transformers or a trainer.
"""

from . import openrlhf, transformers, trl, verl

__all__ = ["openrlhf", "transformers", "trl", "verl"]
