"""SPEC Appendix A: every MUST / MUST NOT of sections 3 to 16 has a row, and every row names cases
that exist, or says why no request can observe it.

A row quotes its requirement from its section; the quote must be in that section (whitespace
normalized), every ``MUST`` of the covered sections must lie inside a quote of its section (a MUST
in the header of a table counts once per row of the table: each row needs a quote of its own), and
every case id the row names must be a case of the suite.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sampling_mask.conformance.lint import requirement_rows
from sampling_mask.conformance.suite import load_cases

SPEC = Path(__file__).resolve().parents[1] / "spec" / "v1" / "SPEC.md"
_UNOBSERVABLE = "not observable through the protocol"
#: An unobservable requirement says why: the phrase, then the reason in parentheses.
_UNOBSERVABLE_WHY = re.compile(re.escape(_UNOBSERVABLE) + r" \(.{12,}\)")


def _norm(text: str) -> str:
    return " ".join(text.split())


def sections(text: str) -> dict[str, list[str]]:
    """The lines of each numbered section of SPEC.md (``## 6.``, ``### 8.4`` and ``#### 8.5.6``
    headings; a subsection's lines are its own, not its parent's)."""
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        heading = re.match(r"^#{2,4} (\d+(?:\.\d+){0,2})\.? ", line)
        if heading:
            current = heading.group(1)
            out[current] = []
        elif line.startswith("## "):
            current = None
        elif current is not None:
            out[current].append(line)
    return out


def units(lines: list[str]) -> list[tuple[int, int]]:
    """Spans (in the section's normalized text) that each need a quote: every MUST, except one in a
    table header, which stands for each row of its table."""
    text = _norm("\n".join(lines))
    spans: list[tuple[int, int]] = []
    headers: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        if line.startswith("|") and "MUST" in line and i + 1 < len(lines) and lines[i + 1].startswith("|--"):
            at = text.index(_norm(line))
            headers.append((at, at + len(_norm(line))))
            body = []
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                body.append(row)
            for row in body:
                at = text.index(_norm(row))
                spans.append((at, at + len(_norm(row))))
    for match in re.finditer(r"\bMUST\b", text):
        if not any(a <= match.start() < b for a, b in headers):
            spans.append((match.start(), match.end()))
    return sorted(spans)


def uncovered(lines: list[str], quotes: list[str]) -> list[str]:
    """The units of a section (:func:`units`) that no quote covers, as short excerpts."""
    text = _norm("\n".join(lines))
    quoted = []
    for quote in quotes:
        start = text.find(_norm(quote))
        while start >= 0:
            quoted.append((start, start + len(_norm(quote))))
            start = text.find(_norm(quote), start + 1)
    return [
        text[max(0, start - 80) : end + 40]
        for start, end in units(lines)
        if not any(a <= start < b or start <= a < end for a, b in quoted)
    ]


TEXT = SPEC.read_text(encoding="utf-8")
SECTIONS = sections(TEXT)
ROWS = requirement_rows(TEXT)
#: The sections whose requirements the appendix lists: every numbered one from 3 on (1 and 2 state
#: none: 2 defines the key words).
COVERED = tuple(s for s in SECTIONS if int(s.split(".")[0]) >= 3)


def test_the_appendix_has_rows_for_every_covered_section() -> None:
    assert len(ROWS) >= 90
    assert {"3.2", "4", "5.1", "8.5", "8.5.6", "8.5.7", "9.5", "12.3", "13.2", "15"} <= set(COVERED)
    with_must = {s for s in COVERED if units(SECTIONS[s])}
    assert with_must <= {section for _, section, *_ in ROWS}
    ids = [rid for rid, *_ in ROWS]
    assert len(ids) == len(set(ids)), "requirement ids are unique"


@pytest.mark.parametrize(("rid", "section", "quote"), [(r[0], r[1], r[2]) for r in ROWS])
def test_every_quote_is_in_its_section(rid: str, section: str, quote: str) -> None:
    assert section in SECTIONS, f"{rid}: no section {section}"
    assert _norm(quote) in _norm("\n".join(SECTIONS[section])), f"{rid}: {quote!r} is not in section {section}"


@pytest.mark.parametrize("section", COVERED)
def test_every_must_of_a_covered_section_lies_in_a_quote(section: str) -> None:
    quotes = [quote for _, sec, quote, *_ in ROWS if sec == section]
    missing = uncovered(SECTIONS[section], quotes)
    assert not missing, f"section {section}: no Appendix A row quotes {missing}"


def test_every_case_carries_the_requirements_that_name_it() -> None:
    """The vectors' ``requirements`` are this appendix read back: a case carries exactly the ids of the
    rows that name it, in their order (the generator writes them, the lint compares them)."""
    named: dict[str, list[str]] = {}
    for rid, _, _, cases, _ in ROWS:
        for cid in dict.fromkeys(cases):  # a row that names a case twice holds it once
            named.setdefault(cid, []).append(rid)
    carried = {case.id: list(case.requirements) for case in load_cases() if case.requirements}
    assert carried == named


def test_every_case_named_exists_and_every_row_names_one() -> None:
    known = {case.id for case in load_cases()}
    for rid, _, _, cases, cell in ROWS:
        if _UNOBSERVABLE in cell:
            assert not cases, rid
            assert _UNOBSERVABLE_WHY.search(cell), f"{rid} says it is not observable but not why"
            continue
        assert cases, f"{rid} names no case"
        missing = [c for c in cases if c not in known]
        assert not missing, f"{rid} names cases that do not exist: {missing}"


def test_the_checks_have_teeth() -> None:
    """A MUST with no quote and a table row with no quote are found; a quote covers its MUST."""
    lines = ["Text. A reader MUST do this. Then more.", "", "| where | a reader MUST |", "|--|--|", "| x | y |"]
    text = _norm("\n".join(lines))
    spans = units(lines)
    assert [text[a:b] for a, b in spans] == ["MUST", "| x | y |"]  # not the header's MUST
    assert len(uncovered(lines, [])) == 2
    assert len(uncovered(lines, ["A reader MUST do this"])) == 1
    assert uncovered(lines, ["A reader MUST do this", "x"]) == []
    assert "never written" not in _norm("\n".join(SECTIONS["3.6"]))
    assert "model.no-such-case" not in {case.id for case in load_cases()}
    # A subsection's lines are its own; an unobservable row without a reason is caught.
    parsed = sections("## 8. A\nx MUST a\n### 8.5 B\ny\n#### 8.5.6 C\nz MUST c\n## Change log\nw MUST")
    assert parsed == {"8": ["x MUST a"], "8.5": ["y"], "8.5.6": ["z MUST c"]}
    assert not _UNOBSERVABLE_WHY.search(f"{_UNOBSERVABLE} (why)")
    assert _UNOBSERVABLE_WHY.search(f"{_UNOBSERVABLE} (a request carries bytes, never a path)")
