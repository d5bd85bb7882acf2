"""Locating and loading the vectors: ``conformance/v1/<form>/*.json`` and ``conformance/v1/invalid/*.json``.

The vectors live at ``<repo>/conformance`` in a checkout and ship in the wheel as
``sampling_mask/conformance/vectors`` (a link to the same folder in a checkout). A case file is
``{"form": FORM, "description": ..., "cases": [CASE, ...]}``; its schema is ``test-schema.json``.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Case",
    "ExpectedFailures",
    "FORMS",
    "OPERATIONS",
    "RELEASES",
    "ROLES",
    "SUITE_VERSION",
    "case_files",
    "class_matches",
    "conformance_classes",
    "frozen_cases",
    "load_cases",
    "release_key",
    "vectors_dir",
]

SUITE_VERSION = "v1"
#: Every form the suite covers (a folder of valid cases and a file of invalid ones each).
FORMS = (
    "dense",
    "packed",
    "ragged",
    "counts",
    "bitmask",
    "model",
    "json-rows",
    "base64",
    "json",
    "msgpack",
    "arrow",
    "arrows",
    "parquet",
    "compact",
    "scorer",
)


#: The role an op puts an implementation in: a conformance class is ``"<form> <role>"``
#: (``"json-rows reader"``, ``"msgpack writer"``), except ``"scorer"`` for the scoring rule.
ROLES = {
    "decode": "reader",
    "validate": "reader",
    "encode": "writer",
    "score": "scorer",
    "concatenate": "operations",
    "slice": "operations",
    "take": "operations",
}
#: The optional operations of SPEC 3.6 (form ``model``, class ``model operations``).
OPERATIONS = ("concatenate", "slice", "take")


def vectors_dir() -> Path:
    """The suite's root folder (holding ``v1/``, ``test-schema.json`` and ``README.md``)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "vectors", here.parents[1] / "conformance"):
        if (candidate / SUITE_VERSION).is_dir():
            return candidate
    raise FileNotFoundError(
        "conformance vectors not found: expected sampling_mask/conformance/vectors (installed) "
        "or <repo>/conformance (checkout)"
    )


@dataclasses.dataclass(frozen=True)
class Case:
    """One vector. ``expected`` holds exactly one of ``mask``, ``error``, ``payload``, ``roundtrip``,
    ``valid`` and ``scores`` (conformance/README.md, "Case files")."""

    id: str
    form: str
    op: str
    description: str
    spec: str
    level: str
    input: Any
    expected: dict[str, Any]
    file: str
    options: dict[str, Any] | None = None
    limits: dict[str, int] | None = None
    #: The spec release whose suite first held the case (``"1.0"`` ... ); ``None`` in a suite older than
    #: the field. Neither it nor ``requirements`` is part of what the case asks (:attr:`digest`).
    since: str | None = None
    #: The ids of the SPEC Appendix A requirements the case holds (``R-8.5-1``), where any names it.
    requirements: tuple[str, ...] = ()

    @property
    def expects_error(self) -> bool:
        return "error" in self.expected

    @property
    def error_codes(self) -> tuple[str, ...]:
        """The codes any one of which the implementation may answer (empty for valid input)."""
        codes = self.expected.get("error")
        if codes is None:
            return ()
        return (codes,) if isinstance(codes, str) else tuple(codes)

    @property
    def conformance_class(self) -> str:
        """``"<form> reader"`` (decode, validate), ``"<form> writer"`` (encode), ``"scorer"``, or
        ``"model operations"`` (concatenate, slice, take)."""
        role = ROLES.get(self.op, self.op)
        return role if role == "scorer" else f"{self.form} {role}"

    @property
    def digest(self) -> str:
        """A hash of what the case asks and expects (not its wording): a frozen case keeps it."""
        what = {"op": self.op, "form": self.form, "level": self.level, "input": self.input}
        what.update(expected=self.expected, options=self.options, limits=self.limits)
        text = json.dumps(what, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]

    def request(self) -> dict[str, Any]:
        """The protocol request for this case."""
        request: dict[str, Any] = {"id": self.id, "op": self.op, "form": self.form, "input": self.input}
        if self.options is not None:
            request["options"] = self.options
        if self.limits is not None:
            request["limits"] = self.limits
        return request


def conformance_classes(cases: Iterable[Case]) -> list[str]:
    """The classes of ``cases``, in :data:`FORMS` order (readers before writers)."""
    order = {form: i for i, form in enumerate(FORMS)}
    names = {case.conformance_class for case in cases}
    return sorted(names, key=lambda n: (order.get(n.split(" ")[0], len(order)), n))


def class_matches(name: str, claims: Iterable[str]) -> bool:
    """Whether class ``name`` is one of ``claims`` (names or ``fnmatch`` globs: ``"json-rows *"``)."""
    return any(fnmatch.fnmatchcase(name, claim) for claim in claims)


def case_files(root: Path | None = None) -> list[Path]:
    """Every case file, sorted (form folders, then ``invalid/``)."""
    base = (root or vectors_dir()) / SUITE_VERSION
    return sorted(base.glob("*/*.json"), key=lambda p: (p.parent.name == "invalid", p.parent.name, p.name))


def load_file(path: Path, root: Path) -> list[Case]:
    """The cases of one file (no schema check: see :mod:`sampling_mask.conformance.lint`). A key of a case
    that is not read here is ignored: a later suite may add optional ones, and this reader keeps working."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    rel = path.relative_to(root).as_posix()
    out = []
    for raw in doc["cases"]:
        out.append(
            Case(
                id=raw["id"],
                form=raw.get("form", doc["form"]),
                op=raw.get("op", "decode"),
                description=raw["description"],
                spec=raw["spec"],
                level=raw["level"],
                input=raw["input"],
                expected=raw["expected"],
                file=rel,
                options=raw.get("options"),
                limits=raw.get("limits"),
                since=raw.get("since"),
                requirements=tuple(raw.get("requirements", ())),
            )
        )
    return out


def load_cases(root: Path | None = None) -> list[Case]:
    """Every case of the suite, in file order."""
    root = root or vectors_dir()
    return [case for path in case_files(root) for case in load_file(path, root)]


#: Frozen case sets, by spec release: ``<root>/v1-<release>.txt`` lists ``id digest`` per line.
RELEASES = ("1.0",)


def release_key(release: str) -> tuple[int, ...]:
    """``"1.10"`` as ``(1, 10)``: spec releases compared as numbers, never as text (``ValueError`` for
    anything but dot-separated decimal numbers)."""
    if not release or not all(part.isdigit() and part.isascii() for part in release.split(".")):
        raise ValueError(f"not a spec release: {release!r}")
    return tuple(int(part) for part in release.split("."))


def frozen_cases(release: str, root: Path | None = None) -> dict[str, str]:
    """``{case id: digest}`` of the cases frozen at ``release`` (``1.0``: the 1.0 vectors that still
    hold, unchanged; a 1.0 implementation passes every one of them, SPEC 6)."""
    if release not in RELEASES:
        raise ValueError(f"unknown release {release!r}; one of {RELEASES}")
    path = (root or vectors_dir()) / f"{SUITE_VERSION}-{release}.txt"
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].split()
        if entry:
            out[entry[0]] = entry[1]
    return out


class ExpectedFailures:
    """An expected-failures list: one case id or glob (``fnmatch``) per line, ``#`` starts a comment.

    A listed case that passes is an *unexpected pass* and fails the run, and so does a pattern that
    matches no case: the list cannot go stale.
    """

    def __init__(self, patterns: Iterable[str] = (), *, source: str = "<list>") -> None:
        self.patterns = list(patterns)
        self.source = source

    @classmethod
    def read(cls, path: str | Path) -> ExpectedFailures:
        patterns = []
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            entry = line.split("#", 1)[0].strip()
            if entry:
                patterns.append(entry)
        return cls(patterns, source=str(path))

    def matches(self, case_id: str) -> bool:
        return any(fnmatch.fnmatchcase(case_id, p) for p in self.patterns)

    def unused(self, case_ids: Sequence[str]) -> list[str]:
        """Patterns that match none of ``case_ids``."""
        return [p for p in self.patterns if not any(fnmatch.fnmatchcase(c, p) for c in case_ids)]
