"""What the command line prints cannot be forged by a file: every line goes through one function
(``cli._common.out``), whose template is the command's own words and which escapes and cuts every
value from a file or a path, so ESC and BEL never reach the terminal, a newline in a name cannot forge
a ``valid: ...`` line, and a 1 MB value prints on one short line; ``--json`` keeps every character."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest

import sampling_mask as sm
from sampling_mask.cli import main

HOSTILE = "x\x1b[2J\x07\nvalid: forged.arrow (1 row) \u202e"


def _no_terminal_control(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text, text
    assert not any(line.startswith("valid: forged") for line in text.splitlines()), text


@pytest.mark.skipif(sys.platform == "win32", reason="newlines and ESC in file names")
def test_file_derived_text_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``inspect``, ``validate DIR`` and ``stats DIR`` print names and metadata escaped (one
    line per file, ``\\x1b`` / ``\\n`` as text); ``--json`` still carries them exactly."""
    folder = tmp_path / "d"
    folder.mkdir()
    mask = sm.SamplingMask.from_rows([[1]], vocab_size=8, metadata={HOSTILE: HOSTILE})
    hostile = folder / f"{HOSTILE}.arrow"
    sm.save(mask, hostile)
    sm.save(mask, folder / "plain.arrow")
    assert main(["inspect", str(hostile)]) == 0
    text = capsys.readouterr().out
    _no_terminal_control(text)
    assert "\\x1b[2J\\x07\\nvalid: forged" in text
    for command in ("validate", "stats"):
        assert main([command, str(folder)]) == 0
        text = capsys.readouterr().out
        _no_terminal_control(text)
        assert len(text.splitlines()) == (3 if command == "validate" else 5), text
    assert main(["validate", str(folder), "--json"]) == 0
    assert str(hostile) in [f["file"] for f in json.loads(capsys.readouterr().out)["files"]]


def test_escaping_is_one_function() -> None:
    from sampling_mask.cli._common import SHOWN_CHARS, shown

    assert shown("a\x1bb\x07c\nd\\e") == "a\\x1bb\\x07c\\nd\\\\e"
    assert shown("é \u202e \udcff") == "é \\u202e \\udcff"
    assert shown("plain text: 1,234") == "plain text: 1,234"
    assert shown("\n" * 1_000_000) == "\\n" * SHOWN_CHARS + "... (1,000,000 characters)"


FORGED = "x\nvalid: forged.msgpack (msgpack, 9 rows, 1 segment, 9 ids; checked every invariant of the spec)\n.msgpack"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs and symlinks")
@pytest.mark.parametrize("entry", ["dangling symlink", "FIFO", "directory symlink"])
def test_entries_not_read_cannot_forge_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str) -> None:
    """A dangling symlink, a FIFO or a symlink to a directory whose name holds a
    newline and a ``valid: ...`` line is listed on one line of its own through ``validate DIR``,
    ``validate GLOB`` and ``stats DIR``; the forged line never starts a line."""
    folder = tmp_path / "d"
    folder.mkdir()
    sm.save(sm.SamplingMask.from_rows([[1]], vocab_size=8), folder / "plain.msgpack")
    forged = folder / FORGED
    if entry == "dangling symlink":
        forged.symlink_to(tmp_path / "missing.msgpack")
    elif entry == "FIFO":
        os.mkfifo(forged)
    else:
        forged.symlink_to(tmp_path)
    for argv, lines in (
        (["validate", str(folder)], 3),  # not read, valid, the total
        (["validate", str(folder / "*.msgpack")], 3),
        (["stats", str(folder)], 4 + 1),  # not read, the file, the total, support sizes, one histogram bucket
    ):
        assert main(argv) == 1, argv
        text = capsys.readouterr().out
        _no_terminal_control(text)
        assert len(text.splitlines()) == lines, text
        assert sum("forged.msgpack" in line for line in text.splitlines()) == 1, text


def test_a_long_value_from_a_file_is_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 1 MB metadata value is shown cut at ``SHOWN_CHARS`` on one line that says
    how long it was; ``--json`` still carries all of it."""
    from sampling_mask.cli._common import SHOWN_CHARS

    value = "v" * 1_000_000
    sm.save(sm.SamplingMask.from_rows([[1]], vocab_size=8, metadata={"note": value}), tmp_path / "m.msgpack")
    assert main(["inspect", str(tmp_path / "m.msgpack")]) == 0
    text = capsys.readouterr().out
    assert max(map(len, text.splitlines())) < SHOWN_CHARS + 100, max(map(len, text.splitlines()))
    assert "note='" + "v" * SHOWN_CHARS + "... (1,000,000 characters)'" in text
    assert main(["inspect", str(tmp_path / "m.msgpack"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["note"] == value


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """Every call in ``tree`` with the name of the function it is made in."""
    found = []
    for scope in ast.walk(tree):
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            found += [(scope.name, n) for n in ast.walk(scope) if isinstance(n, ast.Call)]
    return found


def test_the_command_line_prints_through_one_function() -> None:
    """No text reaches stdout or stderr but through ``cli._common.out``, whose template is always a
    literal (the command line's own words) and which escapes and cuts every value it is given: no
    ``print``, and ``sys.stdout`` / ``sys.stderr`` are written only by ``out``, the JSON writer
    (JSON escapes as it encodes) and the progress line (counts only). The delegated commands
    (``conformance``, ``bench``) run other tools' reports and are not read here."""
    from sampling_mask import cli

    allowed_writers = {"out", "print_json", "_draw", "close"}
    folder = Path(cli.__file__).parent
    checked = 0
    for path in sorted(folder.glob("*.py")):
        if path.stem in cli.DELEGATED:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function, call in _calls(tree):
            where = f"{path.name}:{call.lineno} in {function}"
            func = call.func
            assert not (isinstance(func, ast.Name) and func.id == "print"), f"print() at {where}"
            if isinstance(func, ast.Attribute) and func.attr == "write":
                receiver = ast.unparse(func.value)
                if "sys.stdout" in receiver or "sys.stderr" in receiver:
                    assert path.name == "_common.py" and function in allowed_writers, f"a write at {where}"
            if isinstance(func, ast.Name) and func.id == "out":
                checked += 1
                assert not call.args or (
                    isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
                ), f"out() with a template that is not a literal at {where}"
    assert checked > 30
