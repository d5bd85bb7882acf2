"""docs/trainers.md shows each trainer integration (tests/test_readme.py runs its blocks, as every docs page's)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "trainers.md").read_text(encoding="utf-8")
_BLOCK = re.compile(r"(?:<!-- readme-test: needs (?P<needs>[\w.]+) -->\s*\n)?```python\n(?P<code>.*?)```", re.S)
BLOCKS = [(PAGE.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("needs")) for m in _BLOCK.finditer(PAGE)]


def test_the_page_has_one_block_per_trainer() -> None:
    assert len(BLOCKS) >= 4  # transformers, TRL, verl, OpenRLHF
    for name in ("trainers.transformers", "trainers.trl", "trainers import verl", "trainers import openrlhf"):
        assert any(name in code for _, code, _ in BLOCKS), name
