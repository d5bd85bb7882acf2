"""The opt-in engine suite (docs/adapters.md, "The engine suite"): real engines, never in the default run.

``python -m pytest`` collects ``tests/`` only (``testpaths``); this folder runs when named, in the
environment ``integration/setup_vllm_cpu.sh`` builds. A module whose engine is not installed is
skipped. Without CUDA, vLLM's Triton kernels run in Triton's interpreter: this file sets the
environment (the spawned engine core and the API server inherit it, and ``sitecustomize.py`` in
this folder reaches them through ``PYTHONPATH``); with CUDA only vLLM's own settings are set.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: vLLM's settings, on every machine: ``return_sampling_mask`` needs Model Runner V2.
ENGINE_ENV = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
#: Without CUDA (vllm-cpu): Triton's interpreter with the stand-ins of ``sitecustomize.py``, a 1 GiB
#: KV cache, no thread pinning (the machine is shared).
CPU_ENV = {
    "TRITON_INTERPRET": "1",
    "SAMPLING_MASK_TRITON_CPU_SHIM": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def configure_environment() -> bool:
    """Set the engine environment in ``os.environ`` (explicit values win); True when the CPU shim is on."""
    on_cpu = not _has_cuda()
    for name, value in {**ENGINE_ENV, **(CPU_ENV if on_cpu else {})}.items():
        os.environ.setdefault(name, value)
    paths = [str(HERE), str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    shim = os.environ.get("SAMPLING_MASK_TRITON_CPU_SHIM") == "1"
    if shim:  # this process started before PYTHONPATH named the folder: install the stand-ins here too
        spec = importlib.util.spec_from_file_location("_sampling_mask_triton_cpu_shim", HERE / "sitecustomize.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return shim


CPU_SHIM = configure_environment()
_STARTED = time.perf_counter()


def pytest_sessionfinish(session: object, exitstatus: int) -> None:
    """The whole run's wall time and peak memory, into the figures report (if asked for)."""
    from helpers import peak_rss_mib, record_figures

    record_figures("suite", {"wall_s": round(time.perf_counter() - _STARTED, 1), "peak_rss_mib": round(peak_rss_mib())})
