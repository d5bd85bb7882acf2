"""The source of every conformance vector; the committed files are its output (a maintainer tool,
not part of the package: it runs from a source checkout with the package installed).

``python tools/conformance/generate.py`` checks that ``conformance/v1`` is exactly what the case
modules produce (exit 1 on a missing, stale or stray file); ``--write`` regenerates the files.
Nothing regenerates them implicitly: a changed golden is a reviewed change.

The cases live in ``cases/``, one module per form (``cases/dense.py`` writes ``dense/*.json`` and
``invalid/dense.json``), as the vectors are one folder per form. Expected results are written by
hand there (masks) or computed by an independent float64 formula
(:func:`~sampling_mask.conformance.properties.float64_scores`); binary payloads are built from the
spec's layouts with numpy / pyarrow / msgpack directly, never by this library's encoders, so the
library is tested against them, not with them. Real data comes from ``sources/vllm-0.32.json``
(slices of vLLM 0.32's own output). Every case is added with the spec release whose suite first held
it (``since``); the requirements it holds are read from SPEC.md's Appendix A.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded by path (the tests do): the case modules sit beside this file
    sys.path.insert(0, str(HERE))

from cases import build_book  # noqa: E402
from cases.arrow_payloads import rebuild_binaries  # noqa: E402
from cases.common import SUITE, stable_float  # noqa: E402

from sampling_mask.conformance.payloads import render  # noqa: E402

__all__ = ["build", "main", "rebuild_binaries", "stable_float"]


def build() -> dict[str, Any]:
    """Every case file's document, by path relative to the suite root."""
    return {path: f.document() for path, f in sorted(build_book().files.items())}


def suite_root() -> Path:
    """``<repo>/conformance`` of the checkout this module lives in (the generator needs a checkout)."""
    root = HERE.parents[1] / "conformance"
    if not root.is_dir():
        raise FileNotFoundError(f"{root} not found: the generator runs from a source checkout")
    return root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/conformance/generate.py",
        description="Check (default) or regenerate (--write) the committed conformance vectors.",
    )
    parser.add_argument("--write", action="store_true", help="rewrite conformance/v1 from the case modules")
    parser.add_argument(
        "--rebuild-binaries", action="store_true", help="rewrite sources/arrow-payloads.json with pyarrow first"
    )
    parser.add_argument("--root", type=Path, default=None, help="suite root (default: <repo>/conformance)")
    args = parser.parse_args(argv)
    root = args.root or suite_root()
    if args.rebuild_binaries:
        print(f"wrote {rebuild_binaries()}")
    docs = {path: render(doc) + "\n" for path, doc in build().items()}
    existing = {p.relative_to(root).as_posix() for p in (root / SUITE).glob("*/*.json")}
    stray = sorted(existing - set(docs))
    if args.write:
        for path, text in docs.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
        for path in stray:
            (root / path).unlink()
            print(f"removed {path}")
        return 0
    problems = [f"missing: {p}" for p in docs if p not in existing]
    problems += [
        f"differs from the generator: {p}"
        for p in docs
        if p in existing and (root / p).read_text(encoding="utf-8") != docs[p]
    ]
    problems += [f"not produced by the generator: {p}" for p in stray]
    for line in problems:
        print(line)
    if problems:
        print("run `python tools/conformance/generate.py --write` and review the diff")
        return 1
    print(f"{len(docs)} case files match the generator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
