"""Checks shared by the tests of reading and writing masks (imported as ``from file_checks import ...``).

A call that could block (on a FIFO, a device or a symlink loop) runs in a thread with a deadline far
beyond the work on any machine: a working call takes milliseconds and a blocked one never returns, so
the verdict never depends on the machine's speed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sampling_mask import SamplingMask, SamplingMaskError
from sampling_mask.codecs import iter_masks

#: Seconds before a call counts as blocked.
HANG_SECONDS = 300


def raised_code(call: Callable[[], object]) -> str:
    """The code of the ``SamplingMaskError`` that ``call()`` raises (the test fails if it raises none)."""
    with pytest.raises(SamplingMaskError) as info:
        call()
    return info.value.code.value


def within(call: Callable[[], Any], seconds: float = HANG_SECONDS) -> Any:
    """``call()``'s result, or the exception it raised, failing (not hanging) past ``seconds``."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked (a FIFO, a device or a symlink loop)"
    return out[0]


def code_of(result: object) -> str:
    """The code of ``result``, which must be a ``SamplingMaskError`` (as :func:`within` hands it back)."""
    assert isinstance(result, SamplingMaskError), repr(result)
    return result.code.value


def listing(folder: Path) -> list[str]:
    """Every path below ``folder``, relative to it, sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def read_until_error(source: object) -> tuple[list[SamplingMask], SamplingMaskError | None]:
    """The masks of an Arrow stream read one batch at a time, and the error that ended it (None if none)."""
    got: list[SamplingMask] = []
    try:
        for mask in iter_masks(source, format="arrows"):  # type: ignore[arg-type]
            got.append(mask)
    except SamplingMaskError as exc:
        return got, exc
    return got, None
