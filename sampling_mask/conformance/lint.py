"""Check the suite itself: ``python -m sampling_mask.conformance.lint`` (exit 1 on any problem).

Checks: every file is valid against ``test-schema.json``; file and folder agree on the form; ids
are unique and start with their form; descriptions are unique within a file; valid cases live in
form folders and invalid ones in ``invalid/``; every error code and every form of :data:`FORMS`
is covered (each code as the sole expected answer of at least one case, each form by valid and
invalid cases); at least :data:`MIN_VALID` valid and :data:`MIN_INVALID` invalid cases; typed
arrays are well formed (in valid cases also their bytes); expected masks are canonical and
consistent; every ``spec`` reference names a section of spec/v1/SPEC.md (in a checkout); every
case's ``since`` is 1.0 exactly for the cases of the frozen 1.0 set and never later than SPEC.md's
revision, and its ``requirements`` are the Appendix A rows that name it (in a checkout); and, with
the JSON Schemas beside SPEC.md, that valid json / msgpack payloads follow them and that an invalid
one breaks them only where its one expected fault can (one fault per invalid case).
Needs ``jsonschema`` (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from ..core.errors import ErrorCode, SamplingMaskError
from .payloads import array_from_json, limits_from_json, wire_array
from .suite import FORMS, RELEASES, SUITE_VERSION, case_files, frozen_cases, load_cases, release_key, vectors_dir

__all__ = [
    "MIN_INVALID",
    "MIN_VALID",
    "SPEC_SCHEMAS",
    "case_requirements",
    "lint",
    "main",
    "requirement_rows",
    "schema_instance",
    "spec_schema_validators",
    "spec_text",
    "spec_version",
]

MIN_VALID = 60
MIN_INVALID = 60


def _typed_arrays(value: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object that declares ``dtype`` and ``shape`` (a typed array), with where it sits."""
    if isinstance(value, dict):
        if "dtype" in value and "shape" in value and ("values" in value or "hex" in value):
            yield path, value
            return
        for key, item in value.items():
            yield from _typed_arrays(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _typed_arrays(item, f"{path}[{i}]")


def _check_mask(m: dict[str, Any]) -> str | None:
    rows, cu = m["rows"], m["cu_seqlens"]
    for i, row in enumerate(rows):
        if any(b <= a for a, b in zip(row, row[1:], strict=False)):
            return f"row {i} is not strictly ascending"
    if cu[0] != 0 or cu[-1] != len(rows) or any(b < a for a, b in zip(cu, cu[1:], strict=False)):
        return "cu_seqlens does not tile the rows"
    vocab = m["vocab_size"]
    if vocab is not None and any(i >= vocab for row in rows for i in row):
        return "an id is >= vocab_size"
    for key in ("sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs"):
        if key in m and len(m[key]) != len(rows):
            return f"{key} does not have one entry per row"
    if "support_logprobs" in m and any(len(a) != len(r) for a, r in zip(m["support_logprobs"], rows, strict=True)):
        return "support_logprobs does not nest like rows"
    if "sampled_token_ids" in m:
        for i, (s, row) in enumerate(zip(m["sampled_token_ids"], rows, strict=True)):
            if row and s not in row:
                return f"row {i} lacks its sampled id"
    return None


def spec_text(root: Path) -> str | None:
    """spec/v1/SPEC.md beside the suite at ``root`` (a checkout), or ``None`` (installed vectors)."""
    spec = root.resolve().parent / "spec" / SUITE_VERSION / "SPEC.md"
    return spec.read_text(encoding="utf-8") if spec.is_file() else None


def _spec_sections(text: str) -> set[str]:
    """Section names of SPEC.md: ``<!-- section: x -->`` markers and heading numbers (``4.3``)."""
    names = set(re.findall(r"<!--\s*section:\s*([a-z0-9-]+)\s*-->", text))
    names.update(re.findall(r"^#{2,4}\s+(\d+(?:\.\d+)*)\.?\s", text, flags=re.M))
    return names


def spec_version(text: str) -> str:
    """The revision SPEC.md states in its title (``# sampling-mask format, version 1.4``)."""
    match = re.search(r"^# .*version (\d+(?:\.\d+)?)\s*$", text, flags=re.M)
    if match is None:
        raise ValueError("SPEC.md states no version in its title")
    return match.group(1) if "." in match.group(1) else match.group(1) + ".0"


#: A row of SPEC.md's Appendix A: ``| R-8.5-1 | 8.5 | the requirement's words | the cases |``.
_REQUIREMENT_ROW = re.compile(r"^\| (R-[0-9.]+-\d+) \| ([0-9.]+) \| (.+?) \| (.+) \|$")
_CASE_ID = re.compile(r"`([a-z0-9-]+\.[a-z0-9.-]+)`")


def requirement_rows(text: str) -> list[tuple[str, str, str, list[str], str]]:
    """``(id, section, quote, case ids, cases cell)`` of each row of SPEC.md's Appendix A, in order."""
    appendix = text.split("## Appendix A.", 1)[1]
    rows = []
    for line in appendix.splitlines():
        match = _REQUIREMENT_ROW.match(line)
        if match:
            rid, section, quote, cell = match.groups()
            rows.append((rid, section, quote.strip(), _CASE_ID.findall(cell), cell))
    return rows


def case_requirements(text: str) -> dict[str, list[str]]:
    """The ids of the Appendix A requirements whose row names each case (in the appendix's order): what a
    case carries as ``requirements``."""
    out: dict[str, list[str]] = {}
    for rid, _, _, cases, _ in requirement_rows(text):
        for cid in cases:
            if rid not in out.setdefault(cid, []):
                out[cid].append(rid)
    return out


#: The spec's JSON Schemas (spec/v1/, beside SPEC.md), by the form whose payloads they describe.
SPEC_SCHEMAS = {"json": "sampling-mask.schema.json", "msgpack": "msgpack-envelope.schema.json"}
#: Codes whose faults a schema cannot see, with the schema keywords their one fault may still break.
#: An invalid case expecting only such codes whose payload breaks its form's schema otherwise has a
#: second fault (one fault per invalid case, SPEC 7).
_CONTENT_FAULTS: dict[str, frozenset[str]] = {
    "E_OFFSETS": frozenset(),
    "E_SEGMENTS": frozenset(),
    "E_DUPLICATE": frozenset(),
    "E_MISSING_SAMPLED": frozenset(),
    "E_PADDING": frozenset(),
    "E_WIDTH": frozenset(),
    "E_BYTES": frozenset(),
    "E_LIMIT": frozenset(),
    "E_SHAPE": frozenset({"minItems", "maxItems"}),
    "E_RANGE": frozenset({"minimum", "maximum"}),
}


def _as_schema_json(value: Any) -> Any:
    """A decoded msgpack value as the envelope schema reads it: ``bin`` becomes ``{"bin": length}``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bin": len(bytes(value))}
    if isinstance(value, dict):
        return {k: _as_schema_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_schema_json(v) for v in value]
    return value


def schema_instance(form: str, payload: Any) -> Any:
    """The JSON value a spec schema checks for a ``json`` / ``msgpack`` case payload; ``None`` when the
    bytes do not parse (then their fault is the encoding)."""
    try:
        if form == "json":
            text = payload["text"] if "text" in payload else bytes.fromhex(payload["hex"]).decode("utf-8-sig")
            return json.loads(text)
        if form == "msgpack":
            import msgpack

            return _as_schema_json(msgpack.unpackb(bytes.fromhex(payload["hex"]), raw=False, strict_map_key=False))
    except Exception:  # noqa: BLE001 - bytes that do not parse: their fault is the encoding
        return None
    return None


def spec_schema_validators(root: Path) -> dict[str, Any]:
    """Validators of :data:`SPEC_SCHEMAS` found beside SPEC.md in a checkout (empty when absent)."""
    import jsonschema

    folder = root.resolve().parent / "spec" / SUITE_VERSION
    out = {}
    for form, name in SPEC_SCHEMAS.items():
        if (folder / name).is_file():
            out[form] = jsonschema.Draft202012Validator(json.loads((folder / name).read_text(encoding="utf-8")))
    return out


_LAYOUT_FORMS = ("dense", "packed", "ragged", "counts", "bitmask", "compact")


def _array_problem(case: dict[str, Any], form: str) -> str | None:
    """For an invalid layout-form case expecting only content codes: a typed array of the payload
    whose rank, element type, byte length or size is itself a fault of another code."""
    expected = case["expected"]
    if form not in _LAYOUT_FORMS or "error" not in expected or case.get("op", "decode") != "decode":
        return None
    codes = [expected["error"]] if isinstance(expected["error"], str) else expected["error"]
    if not isinstance(case["input"], dict) or not all(code in _CONTENT_FAULTS for code in codes):
        return None
    limits = limits_from_json(case.get("limits"))
    for key, spec in case["input"].items():
        if not (isinstance(spec, dict) and "dtype" in spec and "shape" in spec):
            continue
        try:
            wire_array(spec, key, limits)
        except SamplingMaskError as exc:
            if exc.code.value not in codes:
                return f"more than one fault: besides {' / '.join(codes)}, {key} is {exc.code.value} ({exc})"
    return None


def _is_shape_entry_fault(error: Any) -> bool:
    """A schema error that is an ARRAY map's ``shape`` entry missing, nil or mistyped: SPEC 10.1 answers
    it ``E_SHAPE`` (1.3), so it is the one fault of a case expecting that code."""
    path = list(error.absolute_path)
    return (bool(path) and path[-1] == "shape") or (error.validator == "required" and "'shape'" in error.message)


def _schema_problem(case: dict[str, Any], form: str, validators: dict[str, Any]) -> str | None:
    """Why a case's payload disagrees with its form's spec schema (valid cases: any break; invalid cases
    expecting only content codes: a break their fault cannot explain), or ``None``."""
    if form not in validators or case.get("op", "decode") != "decode":
        return None
    instance = schema_instance(form, case["input"])
    expected = case["expected"]
    if "error" not in expected:
        if instance is None:
            return "a valid payload that does not parse"
        error = next(iter(validators[form].iter_errors(instance)), None)
        return None if error is None else f"a valid payload breaks {SPEC_SCHEMAS[form]}: {error.message[:160]}"
    codes = [expected["error"]] if isinstance(expected["error"], str) else expected["error"]
    if instance is None or not all(code in _CONTENT_FAULTS for code in codes):
        return None
    allowed = frozenset().union(*(_CONTENT_FAULTS[code] for code in codes))
    for error in validators[form].iter_errors(instance):
        if error.validator not in allowed and not ("E_SHAPE" in codes and _is_shape_entry_fault(error)):
            where = "/".join(str(p) for p in error.absolute_path) or "(top)"
            return (
                f"more than one fault: besides {' / '.join(codes)} the payload breaks "
                f"{SPEC_SCHEMAS[form]} at {where}: {error.message[:160]}"
            )
    return None


def lint(root: Path | None = None) -> tuple[list[str], dict[str, Any]]:
    """``(problems, stats)`` of the suite at ``root`` (default: the installed vectors)."""
    root = root or vectors_dir()
    problems: list[str] = []
    import jsonschema  # ModuleNotFoundError when absent: main() says so in one line

    schema = json.loads((root / "test-schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    spec_md = spec_text(root)
    sections = _spec_sections(spec_md) if spec_md is not None else None
    appendix = case_requirements(spec_md) if spec_md is not None else None
    revision = spec_version(spec_md) if spec_md is not None else None
    try:
        first_release = set(frozen_cases(RELEASES[0], root))
    except OSError:
        first_release = set()  # _frozen_problems says why
    spec_validators = spec_schema_validators(root)
    ids: Counter[str] = Counter()
    sole_codes: Counter[str] = Counter()
    forms_valid: Counter[str] = Counter()
    forms_invalid: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    files = case_files(root)
    if not files:
        problems.append(f"no case files under {root / SUITE_VERSION}")
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            problems.append(f"{rel}: not JSON ({exc})")
            continue
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        for error in errors[:5]:
            where = "/".join(str(p) for p in error.absolute_path)
            problems.append(f"{rel}: schema: {where}: {error.message[:200]}")
        if errors:
            continue
        form = doc["form"]
        folder = path.parent.name
        invalid_file = folder == "invalid"
        if invalid_file and not (path.stem == form or path.stem.startswith(form + "-")):
            problems.append(f"{rel}: an invalid/ file is named after its form ({form})")
        if not invalid_file and folder != form:
            problems.append(f"{rel}: the folder {folder!r} differs from the form {form!r}")
        descriptions: Counter[str] = Counter()
        for case in doc["cases"]:
            cid = case["id"]
            ids[cid] += 1
            descriptions[case["description"]] += 1
            levels[case["level"]] += 1
            if not cid.startswith(form + "."):
                problems.append(f"{rel}: {cid}: ids start with the form ({form}.)")
            expected = case["expected"]
            if "error" in expected:
                codes = [expected["error"]] if isinstance(expected["error"], str) else expected["error"]
                if len(codes) == 1:
                    sole_codes[codes[0]] += 1
                forms_invalid[form] += 1
                if not invalid_file:
                    problems.append(f"{rel}: {cid}: a case expecting an error belongs in invalid/")
            else:
                forms_valid[form] += 1
                if invalid_file:
                    problems.append(f"{rel}: {cid}: a case expecting success belongs in {form}/")
            if "mask" in expected and (why := _check_mask(expected["mask"])):
                problems.append(f"{rel}: {cid}: expected mask: {why}")
            for where, spec in [*_typed_arrays(case["input"], "input"), *_typed_arrays(expected, "expected")]:
                strict = "error" not in expected or "values" in spec
                if not strict:
                    continue
                try:
                    array_from_json(spec, field=where)
                except SamplingMaskError as exc:
                    if "error" not in expected or exc.code in (ErrorCode.E_SHAPE, ErrorCode.E_RANGE):
                        problems.append(f"{rel}: {cid}: malformed typed array at {where}: {exc}")
            if why := _schema_problem(case, form, spec_validators) or _array_problem(case, form):
                problems.append(f"{rel}: {cid}: {why}")
            if sections is not None and case["spec"].split("#", 1)[1] not in sections:
                problems.append(f"{rel}: {cid}: {case['spec']} names no section of spec/v1/SPEC.md")
            problems += [f"{rel}: {cid}: {why}" for why in _origin_problems(case, first_release, revision, appendix)]
        for text, n in descriptions.items():
            if n > 1:
                problems.append(f"{rel}: the description {text!r} is used by {n} cases")
    problems += [f"duplicate id {cid} ({n} cases)" for cid, n in ids.items() if n > 1]
    problems += [
        f"error code {c.value} is not the sole expected code of any case" for c in ErrorCode if not sole_codes[c.value]
    ]
    for form in FORMS:
        if not forms_valid[form]:
            problems.append(f"form {form} has no valid case")
        if not forms_invalid[form]:
            problems.append(f"form {form} has no invalid case")
    problems += _frozen_problems(root)
    valid, invalid = sum(forms_valid.values()), sum(forms_invalid.values())
    if valid < MIN_VALID:
        problems.append(f"only {valid} valid cases (at least {MIN_VALID})")
    if invalid < MIN_INVALID:
        problems.append(f"only {invalid} invalid cases (at least {MIN_INVALID})")
    stats = {
        "files": len(files),
        "valid": valid,
        "invalid": invalid,
        "levels": dict(levels),
        "forms": {f: (forms_valid[f], forms_invalid[f]) for f in sorted(set(forms_valid) | set(forms_invalid))},
        "codes": {c.value: sole_codes[c.value] for c in ErrorCode},
        "spec_checked": sections is not None,
        "schemas_checked": sorted(spec_validators),
    }
    return problems, stats


def _origin_problems(
    case: dict[str, Any], first_release: set[str], revision: str | None, appendix: dict[str, list[str]] | None
) -> list[str]:
    """What is wrong with a case's ``since`` and ``requirements``: ``since`` is the first release exactly
    for the cases of its frozen set and never later than SPEC.md's revision; ``requirements`` are the
    Appendix A rows that name the case, in the appendix's order (checked where SPEC.md is at hand)."""
    problems = []
    since = case["since"]
    if (since == RELEASES[0]) != (case["id"] in first_release):
        listed = "lists it" if case["id"] in first_release else "does not list it"
        problems.append(f"since {since}, but the frozen {RELEASES[0]} set {listed}")
    if revision is not None and release_key(since) > release_key(revision):
        problems.append(f"since {since}, later than spec/v1/SPEC.md's revision {revision}")
    if appendix is not None and case.get("requirements", []) != appendix.get(case["id"], []):
        problems.append(
            f"requirements {case.get('requirements', [])} are not the Appendix A rows that name the case "
            f"({appendix.get(case['id'], [])})"
        )
    return problems


def _frozen_problems(root: Path) -> list[str]:
    """Every case of a frozen release set (``v1-1.0.txt``) exists and asks and expects what it did."""
    cases = {case.id: case for case in load_cases(root)}
    problems = []
    for release in RELEASES:
        try:
            frozen = frozen_cases(release, root)
        except OSError as exc:
            problems.append(f"the frozen {release} set cannot be read: {exc}")
            continue
        for cid, digest in frozen.items():
            if cid not in cases:
                problems.append(f"frozen {release} case {cid} is gone (a frozen case is never removed)")
            elif cases[cid].digest != digest:
                problems.append(f"frozen {release} case {cid} changed (digest {cases[cid].digest}, frozen {digest})")
    return problems


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m sampling_mask.conformance.lint", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--vectors", type=Path, help="suite root (default: the installed vectors)")
    args = parser.parse_args(argv)
    try:
        problems, stats = lint(args.vectors)
    except ModuleNotFoundError as exc:
        if exc.name != "jsonschema":
            raise
        sys.stderr.write(
            "sampling-mask: error: E_UNAVAILABLE: --lint needs jsonschema, which is not installed "
            "(pip install jsonschema; it is in the test extra)\n"
        )
        return 2
    if stats:
        out.write(
            f"{stats['files']} files, {stats['valid']} valid and {stats['invalid']} invalid cases {stats['levels']}\n"
        )
        out.write("form            valid  invalid\n")
        for form, (v, i) in stats["forms"].items():
            out.write(f"{form:<14}{v:>7}{i:>9}\n")
        out.write("cases per error code (sole expected code): ")
        out.write(", ".join(f"{c} {n}" for c, n in stats["codes"].items()) + "\n")
        if not stats["spec_checked"]:
            out.write("spec/v1/SPEC.md not found: section references not checked\n")
    for line in problems:
        out.write(f"PROBLEM {line}\n")
    out.write("lint: OK\n" if not problems else f"lint: {len(problems)} problem(s)\n")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
