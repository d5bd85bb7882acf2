"""Every Python block of README.md and of the pages in docs/ runs as written.

Each block runs on its own, in a fresh interpreter whose working folder is an empty temporary one,
so a block cannot lean on a name another block defined. A block that warns fails: every warning a
user running it would see (a Python warning the default filters show, our deprecations included, or
a record of WARNING or above from any logger, transformers' ``logger.warning`` included) is listed
and fails the block (:data:`_RUNNER`).
A block preceded by ``<!-- readme-test: skip REASON -->`` is skipped; that is
only for what CI cannot have (a GPU), and the reason must say so. A block preceded by
``<!-- readme-test: needs MODULE -->`` runs where MODULE imports (an optional tool CI does not
install, such as Ray) and is skipped elsewhere.

Every relative link of those pages points at a file of the repository, and every ``#anchor`` into
a Markdown file at one of its headings (GitHub's slugs).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = (ROOT / "README.md").read_text(encoding="utf-8")
_BLOCK = re.compile(
    r"(?:<!-- readme-test: (?:skip (?P<skip>[^>]*?)|needs (?P<needs>[\w.]+)) -->\s*\n)?```python\n(?P<code>.*?)```",
    re.S,
)
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
#: Runs a block (``sys.argv[1]``) in ``__main__`` and exits 3 listing every warning it showed: Python
#: warnings under the default filters plus ``error::DeprecationWarning:__main__`` (a deprecated call of
#: ours fails where it is made), and log records of WARNING or above from any logger.
_RUNNER = """
import logging, sys, warnings
_readme_shown = []
_readme_show = warnings.showwarning
def _readme_record(message, category, filename, lineno, file=None, line=None):
    _readme_shown.append(f"{category.__name__}: {message} ({filename}:{lineno})")
    _readme_show(message, category, filename, lineno, file, line)
warnings.showwarning = _readme_record
warnings.filterwarnings("error", category=DeprecationWarning, module="__main__")
_readme_call_handlers = logging.Logger.callHandlers
def _readme_log(self, record):
    if record.levelno >= logging.WARNING:
        _readme_shown.append(f"log {record.levelname} {record.name}: {record.getMessage()}")
    _readme_call_handlers(self, record)
logging.Logger.callHandlers = _readme_log
exec(compile(sys.argv[1], "<block>", "exec"), vars(sys.modules["__main__"]))
if _readme_shown:
    print("the block warned:", *_readme_shown, sep="\\n  ", file=sys.stderr)
    sys.exit(3)
"""
#: What a C++ runtime prints when a joinable thread is destroyed at interpreter exit.
_EXIT_RACE = "terminate called without an active exception"


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _blocks(page: Path) -> list[tuple[str, int, str, str | None, str | None]]:
    text = page.read_text(encoding="utf-8")
    return [
        (_name(page), text.count("\n", 0, m.start("code")) + 1, m.group("code"), m.group("skip"), m.group("needs"))
        for m in _BLOCK.finditer(text)
    ]


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    # DeepSpeed (the test extra has it) is imported by accelerate's unwrap_model whenever it is installed,
    # and logs a warning when it guesses its accelerator; the blocks never use it, so name one
    env.setdefault("DS_ACCELERATOR", "cpu")
    return env


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _CODE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6} (.+)$", text)}


def test_the_pages_have_python_blocks() -> None:
    assert len(_blocks(ROOT / "README.md")) >= 1  # the quickstart
    assert len(BLOCKS) >= 12  # quickstart, encodings, datasets, adapters, sampler, trace, alignment, scorer, ...
    for page, line, _, skip, _needs in BLOCKS:
        assert skip is None or "GPU" in skip, f"{page} line {line}: a block is skipped only when it needs a GPU"


def test_the_readme_is_a_first_screen() -> None:
    """At most 250 lines, both set-up commands in the first 80, and a page for every role."""
    lines = README.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:80])
    assert "-e '.[all]' && sampling-mask demo" in head and "-e '.[test]' && python -m pytest" in head
    for page in ("scorer", "adapters", "encodings", "datasets", "serving-and-vendoring", "implementing", "cli"):
        assert f"(docs/{page}.md)" in README, f"the README's table does not link docs/{page}.md"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_resolve(page: Path) -> None:
    text = _CODE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for m in _LINK.finditer(text):
        target = m.group("target")
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, f"{_name(page)}: links that lead nowhere: {broken}"


@pytest.mark.parametrize(("page", "line", "code", "skip", "needs"), BLOCKS, ids=[f"{b[0]}:line{b[1]}" for b in BLOCKS])
def test_block_runs(page: str, line: int, code: str, skip: str | None, needs: str | None, tmp_path: Path) -> None:
    if skip is not None:
        pytest.skip(f"{page} line {line}: {skip}")
    if needs is not None:
        pytest.importorskip(needs)
    command = [sys.executable, "-c", _RUNNER, code]
    result = subprocess.run(command, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    if result.returncode == -signal.SIGABRT and result.stderr.strip() == _EXIT_RACE:
        # A C++ thread pool (pyarrow's, DuckDB's) torn down during interpreter exit, after the block
        # ran to its end; rare and not ours. Once more, in a fresh folder; a second abort fails.
        again = tmp_path / "again"
        again.mkdir()
        result = subprocess.run(command, cwd=again, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{page}: block at line {line} failed:\n{result.stderr}"
