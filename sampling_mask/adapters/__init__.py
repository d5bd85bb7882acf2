"""Engines' and frameworks' wire forms, one module per ecosystem (numpy only; none imports the
ecosystem's package). Trainer integrations (transformers, TRL, verl, OpenRLHF) are in
:mod:`sampling_mask.trainers`.

Each module reads (``from_*``) and writes (``to_*``) the layouts its docstring names, duck-typed:
the ecosystem's real objects work when present, plain dicts / numpy arrays / lists always work.
NeMo-RL mainline records no mask (it recomputes top-k / top-p on the trainer's logits,
``nemo_rl/algorithms/logits_sampling_utils.py``, PR #2053); :mod:`.nemo_rl` reads and writes the
layout of its open PR #3937 (unmerged upstream).
"""

from . import miles, nemo_rl, prime_rl, sglang, skyrl, slime, vllm

__all__ = ["miles", "nemo_rl", "prime_rl", "sglang", "skyrl", "slime", "vllm"]
