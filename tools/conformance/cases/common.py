"""What every form module of the suite shares: typed arrays, masks and model masks as the case files
spell them, the spec sections a case cites, and :class:`File` / :class:`Book`, which hold the cases
being built (conformance/README.md, "Case files").

Expected results are written by hand (masks) or computed by an independent float64 formula
(:func:`~sampling_mask.conformance.properties.float64_scores`); payloads are built from the spec's
layouts with numpy, msgpack and pyarrow directly, never by this library's encoders, so the library
is tested against them, not with them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sampling_mask.conformance.lint import case_requirements, spec_version
from sampling_mask.conformance.suite import release_key

SUITE = "v1"
REQ, REC = "required", "recommended"
#: spec/v1/SPEC.md of this checkout: its title states the revision, its Appendix A the requirements
#: and the cases that hold each.
SPEC = Path(__file__).resolve().parents[3] / "spec" / SUITE / "SPEC.md"
#: The maintainer sources beside the generator: vLLM 0.32's own output, the Arrow / Parquet payloads.
SOURCES = Path(__file__).resolve().parents[1] / "sources"
#: The spec's worked example (section 14), canonical: rows {1, 5}, {}, {7}.
ISSUE_ROWS = [[1, 5], [], [7]]
#: The same rows as stored by a writer that keeps its order: row 0 is not ascending.
UNSORTED_ROWS = [[5, 1], [], [7]]


def _shape_of(values: Any) -> list[int]:
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        if not values:
            break
        values = values[0]
    return shape


def arr(values: Any, dtype: str = "int32", shape: Sequence[int] | None = None) -> dict[str, Any]:
    """A typed array with readable values (``shape`` needed only when a dimension is 0)."""
    return {"dtype": dtype, "shape": list(shape) if shape is not None else _shape_of(values), "values": values}


def hexarr(values: Any, dtype: str, shape: Sequence[int] | None = None) -> dict[str, Any]:
    """The same as :func:`arr` but as little-endian bytes in hex."""
    a = np.array(values, dtype=np.dtype(dtype).newbyteorder("<"))
    if shape is not None:
        a = a.reshape(shape)
    return {"dtype": dtype, "shape": list(a.shape), "hex": a.tobytes().hex()}


def rawarr(dtype: str, shape: Sequence[int], data: bytes) -> dict[str, Any]:
    """A typed array whose bytes need not agree with its declaration (for ``E_BYTES`` / ``E_LIMIT``)."""
    return {"dtype": dtype, "shape": list(shape), "hex": data.hex()}


def mask(
    rows: list[list[int]],
    *,
    cu: list[int] | None = None,
    vocab: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An expected canonical model mask; rows must already be ascending (written by hand)."""
    for i, row in enumerate(rows):
        if row != sorted(row):
            raise AssertionError(f"expected masks are canonical: row {i} {row} is not ascending")
    out: dict[str, Any] = {"rows": rows, "cu_seqlens": cu if cu is not None else [0, len(rows)], "vocab_size": vocab}
    out.update({k: v for k, v in extra.items() if v is not None})
    return out


def model(rows: list[list[int]], **extra: Any) -> dict[str, Any]:
    """A model-mask *input* (rows in any order; only the keys given)."""
    return {"rows": rows, **{k: v for k, v in extra.items() if v is not None}}


#: Decimal places (relative above magnitude 1) kept of a computed float: far inside every case's
#: tolerance (>= 1e-6), far outside the ulp-level differences of exp / log between CPUs.
STABLE_DIGITS = 9


def stable_float(value: float, digits: int = STABLE_DIGITS) -> float:
    """``value`` rounded to ``digits`` decimals below magnitude 1 (significant digits above), so the
    same on every machine: numpy picks SIMD kernels for exp / log at run time and their results
    differ by an ulp between CPUs. Raises when ``value`` lies so close to a rounding boundary that
    such a difference could flip it (change the case's inputs then)."""
    if not math.isfinite(value):
        return value
    places = digits - len(str(int(abs(value)))) + (1 if abs(value) < 1 else 0)
    slack = 1e-12 * max(1.0, abs(value))
    rounded = round(value, places)
    if round(value - slack, places) != rounded or round(value + slack, places) != rounded:
        raise AssertionError(f"{value!r} is within {slack:g} of a rounding boundary: not stable across CPUs")
    return rounded + 0.0  # -0.0 -> 0.0


def stable_scores(scores: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Every finite float of ``scores`` through :func:`stable_float`."""
    return {k: [stable_float(v) if isinstance(v, float) else v for v in values] for k, values in scores.items()}


def companions_mask(**extra: Any) -> dict[str, Any]:
    """The expected two-row companions example: row 0 {3, 5, 9} with every companion, row 1 empty.

    ``extra`` overrides a companion or adds keys (``metadata``), after the companions.
    """
    companions: dict[str, Any] = {
        "sampled_token_ids": [5, -1],
        "sampled_logprobs": [-0.5, 0.0],
        "temperature": [0.5, 1.0],
        "support_logprobs": [[-1.25, -0.5, -3.0], []],
    }
    return mask([[3, 5, 9], []], vocab=10, **{**companions, **extra})


def roundtrip_model(**extra: Any) -> dict[str, Any]:
    """The encode round-trip input: three rows in two segments, every companion and metadata.

    ``extra`` overrides a field in place.
    """
    fields: dict[str, Any] = {
        "cu_seqlens": [0, 2, 3],
        "vocab_size": 10,
        "sampled_token_ids": [5, -1, 1],
        "sampled_logprobs": [-0.5, 0.0, -1.0],
        "temperature": [0.5, 1.0, 2.0],
        "support_logprobs": [[-1.25, -0.5, -3.0], [], [0.0]],
        "metadata": {"top_k": 3, "producer": "test"},
    }
    return model([[3, 5, 9], [], [1]], **{**fields, **extra})


def ok(m: dict[str, Any]) -> dict[str, Any]:
    return {"mask": m}


def err(*codes: str) -> dict[str, Any]:
    return {"error": codes[0] if len(codes) == 1 else list(codes)}


def dense_rows(rows: list[list[int]], width: int) -> list[list[int]]:
    return [r + [-1] * (width - len(r)) for r in rows]


#: Sections of spec/v1/SPEC.md by subject; ``layouts`` and ``json`` mean the form's own section.
SECTIONS = {
    "model": "3.1",
    "empty": "3.2",
    "segments": "3.3",
    "order": "3.4",
    "companions": "5.1",
    "metadata": "5.2",
    "versioning": "6",
    "limits": "8.1",
    "arrow": "9.1",
    "arrow-metadata": "9.2",
    "arrow-batches": "9.3",
    "arrow-reading": "9.5",
    "msgpack": "10.1",
    "json-rules": "11.1",
    "compact": "12.1",
    "scoring": "13.1",
    "scoring-policies": "13.2",
}
FORM_SECTIONS = {
    "ragged": "4.1",
    "counts": "4.2",
    "dense": "4.3",
    "packed": "4.4",
    "bitmask": "4.5",
    "model": "4.6",
    "arrow": "9.1",
    "arrows": "9.3",
    "parquet": "9.3",
    "msgpack": "10.1",
    "json": "11.2",
    "json-rows": "11.3",
    "base64": "11.4",
    "compact": "12.1",
    "scorer": "13.1",
}


def section(subject: str, form: str) -> str:
    """The spec section (a number such as ``4.3``, or a section marker) a case of ``form`` cites."""
    if subject in ("layouts", "json"):
        return FORM_SECTIONS[form]
    return SECTIONS.get(subject, subject)


class File:
    """One case file being built."""

    def __init__(self, form: str, description: str, book: Book) -> None:
        self.form = form
        self.description = description
        self.book = book
        self.cases: list[dict[str, Any]] = []

    def add(
        self,
        slug: str,
        description: str,
        spec: str,
        input: Any,
        expected: dict[str, Any],
        *,
        since: str,
        op: str = "decode",
        level: str = REQ,
        options: dict[str, Any] | None = None,
        limits: dict[str, int] | None = None,
    ) -> None:
        """Add the case ``<form>.<slug>``. ``since`` is the spec release whose suite first held it (the
        cases of the frozen 1.0 set are ``"1.0"``, and nothing else is); its ``requirements`` are the
        Appendix A rows that name it."""
        if not release_key(self.book.revision) >= release_key(since) >= (1, 0):
            raise AssertionError(f"{self.form}.{slug}: since {since!r} is no release up to {self.book.revision}")
        case: dict[str, Any] = {
            "id": f"{self.form}.{slug}",
            "description": description,
            "spec": f"SPEC.md#{section(spec, self.form)}",
        }
        if case["id"] in self.book.requirements:
            case["requirements"] = list(self.book.requirements[case["id"]])
        case["since"] = since
        case["level"] = level
        if op != "decode":
            case["op"] = op
        if options is not None:
            case["options"] = options
        if limits is not None:
            case["limits"] = limits
        case["input"] = input
        case["expected"] = expected
        self.cases.append(case)

    def document(self) -> dict[str, Any]:
        return {
            "$schema": "../../test-schema.json",
            "form": self.form,
            "description": self.description,
            "cases": self.cases,
        }


class Book:
    """Every file of the suite, by path relative to ``conformance/``, and what the spec says of its
    cases: its revision and the requirements of Appendix A that name each case."""

    def __init__(self, spec: str | None = None) -> None:
        text = spec if spec is not None else SPEC.read_text(encoding="utf-8")
        self.revision = spec_version(text)
        self.requirements: Mapping[str, Sequence[str]] = case_requirements(text)
        self.files: dict[str, File] = {}

    def file(self, path: str, form: str, description: str = "") -> File:
        """The file at ``path``, created with ``description`` on first use."""
        key = f"{SUITE}/{path}"
        if key not in self.files:
            self.files[key] = File(form, description, self)
        assert self.files[key].form == form, f"{path} holds {self.files[key].form} cases"
        return self.files[key]


def vllm_source() -> dict[str, Any]:
    """``sources/vllm-0.32.json``: slices of vLLM 0.32's own sampler output (a fresh copy per call)."""
    return json.loads((SOURCES / "vllm-0.32.json").read_text(encoding="utf-8"))


def f32_mask_bytes(rows: list[list[int]], segments: int, per_row_companions: int, support: bool) -> int:
    """SPEC 8.1: what a mask takes, 4 bytes per companion value (support_logprobs: one per id)."""
    nnz = sum(map(len, rows))
    return 4 * nnz + 8 * (len(rows) + 1) + 8 * (segments + 1) + 4 * per_row_companions * len(rows) + 4 * nnz * support


def unsorted_model() -> dict[str, Any]:
    """:data:`UNSORTED_ROWS` with ``vocab_size`` and ``support_logprobs`` (permuted with their ids)."""
    return model(UNSORTED_ROWS, vocab_size=10, support_logprobs=[[-0.5, -1.5], [], [0.0]])


def compact_bytes(rows: list[list[int]]) -> bytes:
    """The compact layout of ``rows``, written out from the spec in plain Python (not the library):
    row lengths (``min(k, 255)`` bytes, then LEB128 ``k - 255`` for long rows), one width byte per
    block of 32 delta values, then per width ``w = 1..31`` the ``w x m_w`` matrix of uint32 words of
    that width's blocks (word q of every block contiguous)."""
    out = bytearray(min(len(r), 255) for r in rows)
    for row in rows:
        if len(row) >= 255:
            n = len(row) - 255
            while True:
                out.append((n & 0x7F) | (0x80 if n >= 0x80 else 0))
                n >>= 7
                if not n:
                    break
    values: list[int] = []
    for row in rows:
        prev = -1
        for x in sorted(row):
            values.append(x - prev - 1)
            prev = x
    blocks = [values[i : i + 32] + [0] * (32 - len(values[i : i + 32])) for i in range(0, len(values), 32)]
    widths = [max(b).bit_length() for b in blocks]
    out += bytes(widths)
    for w in range(1, 32):
        group = [b for b, bw in zip(blocks, widths, strict=True) if bw == w]
        packed = [sum(v << (j * w) for j, v in enumerate(b)) for b in group]
        for q in range(w):
            for bits in packed:
                out += ((bits >> (32 * q)) & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(out)
