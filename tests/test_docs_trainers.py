"""Every Python block of docs/trainers.md runs as written (the convention of tests/test_readme.py:
``<!-- readme-test: needs MODULE -->`` runs a block where MODULE imports and skips it elsewhere)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"(?:<!-- readme-test: needs (?P<needs>[\w.]+) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)
BLOCKS = [(PAGE.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("needs")) for m in _BLOCK.finditer(PAGE)]


def test_the_page_has_one_block_per_trainer() -> None:
    assert len(BLOCKS) >= 4  # transformers, TRL, verl, OpenRLHF
    for name in ("adapters.transformers", "adapters.trl", "adapters import verl", "adapters import openrlhf"):
        assert any(name in code for _, code, _ in BLOCKS), name


@pytest.mark.parametrize(("line", "code", "needs"), BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_docs_trainers_block_runs(line: int, code: str, needs: str | None, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if needs is not None:
        pytest.importorskip(needs, reason=f"docs/trainers.md line {line} needs {needs}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-W", "error::DeprecationWarning:__main__", "-c", code]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"docs/trainers.md block at line {line} failed:\n{result.stderr[-4000:]}"
