"""``sampling-mask bench ...``: handed whole to :func:`sampling_mask.bench.main`."""

from __future__ import annotations

HELP = "run the benchmark report (see its --help)"


def main(argv: list[str]) -> int | None:
    """The benchmark report's exit status for ``argv`` (everything after ``bench``)."""
    from ..bench import main as bench_main

    return bench_main(argv)
