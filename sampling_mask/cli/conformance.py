"""``sampling-mask conformance ...``: handed whole to :func:`sampling_mask.conformance.runner.main`."""

from __future__ import annotations

HELP = "run the conformance vectors (see its --help)"


def main(argv: list[str]) -> int | None:
    """The conformance runner's exit status for ``argv`` (everything after ``conformance``)."""
    from ..conformance.runner import main as runner_main

    return runner_main(argv)
