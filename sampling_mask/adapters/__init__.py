"""Ecosystem adapters, one module per ecosystem; none imports the ecosystem's package.

Each module reads (``from_*``) and writes (``to_*``) the layouts its docstring names, duck-typed:
the ecosystem's real objects work when present, plain dicts / numpy arrays / lists always work.
NeMo-RL has no adapter: it records no mask and recomputes top-k / top-p on the trainer's logits
(NVIDIA-NeMo/RL ``nemo_rl/algorithms/logits_sampling_utils.py`` @ e2f48a99, PR #2053).
"""

from . import miles, prime_rl, sglang, skyrl, slime, vllm

__all__ = ["miles", "prime_rl", "sglang", "skyrl", "slime", "vllm"]
