"""Every Python block of README.md runs as written (issue 14, section 7).

Each block runs on its own, in a fresh interpreter whose working folder is an empty temporary one,
so a block cannot lean on a name another block defined, and fails on a deprecated call of ours.
A block preceded by ``<!-- readme-test: skip REASON -->`` is skipped; that is
only for what CI cannot have (a GPU), and the reason must say so. A block preceded by
``<!-- readme-test: needs MODULE -->`` runs where MODULE imports (an optional tool CI does not
install, such as Ray) and is skipped elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(
    r"(?:<!-- readme-test: (?:skip (?P<skip>[^>]*?)|needs (?P<needs>[\w.]+)) -->\s*\n)?```python\n(?P<code>.*?)```",
    re.S,
)
BLOCKS = [
    (README.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("skip"), m.group("needs"))
    for m in _BLOCK.finditer(README)
]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 8  # quickstart, encodings, streaming, adapters, sampler, trace, alignment, scorer
    for line, _, skip, _needs in BLOCKS:
        assert skip is None or "GPU" in skip, f"README line {line}: a block is skipped only when it needs a GPU"


@pytest.mark.parametrize(("line", "code", "skip", "needs"), BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_readme_block_runs(line: int, code: str, skip: str | None, needs: str | None, tmp_path: Path) -> None:
    if skip is not None:
        pytest.skip(f"README line {line}: {skip}")
    if needs is not None:
        pytest.importorskip(needs)
    # -W: a README block shows no deprecated call.
    command = [sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", code]
    result = subprocess.run(command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"README block at line {line} failed:\n{result.stderr}"
