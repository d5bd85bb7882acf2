"""Ecosystem adapters, one module per ecosystem; none imports the ecosystem's package.

Each module reads (``from_*``) and writes (``to_*``) the layouts its docstring names, duck-typed:
the ecosystem's real objects work when present, plain dicts / numpy arrays / lists always work.
"""

from . import miles, nemo_rl, prime_rl, sglang, skyrl, vllm

__all__ = ["miles", "nemo_rl", "prime_rl", "sglang", "skyrl", "vllm"]
