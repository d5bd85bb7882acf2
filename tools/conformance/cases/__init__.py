"""The conformance cases, one module per form (``dense``, ``json_rows``, ``arrow``, ...): each module's
``add_cases(book)`` writes the case files of its form, ``<form>/*.json`` and ``invalid/<form>.json``,
every file's cases in the order they were published.

:mod:`.common` holds what the forms share (typed arrays, masks, the spec sections, :class:`File`
and :class:`Book`); :mod:`.arrow_payloads` the Arrow IPC and Parquet payloads of the three Arrow forms.
"""

from __future__ import annotations

from types import ModuleType

from . import (
    arrow,
    arrows,
    base64,
    bitmask,
    compact,
    counts,
    dense,
    json,
    json_rows,
    model,
    msgpack,
    packed,
    parquet,
    ragged,
    scorer,
)
from .common import Book

__all__ = ["FORM_MODULES", "build_book"]

#: Every form's module, in the order of the suite's forms (``sampling_mask.conformance.suite.FORMS``);
#: each ``add_cases(book)`` writes that form's files.
FORM_MODULES: tuple[ModuleType, ...] = (
    dense,
    packed,
    ragged,
    counts,
    bitmask,
    model,
    json_rows,
    base64,
    json,
    msgpack,
    arrow,
    arrows,
    parquet,
    compact,
    scorer,
)


def build_book() -> Book:
    """Every case file of the suite, built by the form modules."""
    book = Book()
    for module in FORM_MODULES:
        module.add_cases(book)
    return book
