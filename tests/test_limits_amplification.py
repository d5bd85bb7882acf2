"""Small inputs cannot cost large memory: every amplification payload (``amplification_payloads``:
compressed empty rows, zero-width envelopes, a footer naming one batch a thousand times, the legacy
compression key) and valid masks of a few MB in every format, decoded in a fork with their peak RSS
growth measured.

Each case has the error code it must give and a memory bound: under
``Limits.for_untrusted_input(len(payload))`` peak RSS may grow at most max(16 x payload, 64 MiB)
(``memory_probe.untrusted_bound_mb``), and the table's own ``max_bytes = 1 MiB`` cases at most
64 MiB. ``max_bytes`` bounds what a decode produces, checked from the counts the input declares
before anything is decompressed or allocated. Runs as a child process (this file as a script);
POSIX only.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from amplification_payloads import (
    ROWS,
    base64_zero_width,
    footer_repeating_one_batch,
    legacy_compressed_stream,
    msgpack_zero_width,
    parquet_of_empty_rows,
    realistic,
    zstd_stream_of_empty_rows,
)
from memory_probe import child_main, child_results, untrusted_bound_mb

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


# ---------------------------------------------------------------------------------------------- calls
def _untrusted(data: bytes) -> Any:
    from sampling_mask import Limits

    return Limits.for_untrusted_input(len(data))


def _one_mib(_: bytes) -> Any:
    from sampling_mask import Limits

    return Limits(max_bytes=MiB)


def _default(_: bytes) -> Any:
    from sampling_mask import DEFAULT_LIMITS

    return DEFAULT_LIMITS


def _decode(fmt: str, limits: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        import sampling_mask

        return sampling_mask.decode(data, format=fmt, limits=limits(data))

    return run


def _iter(fmt: str, limits: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        import sampling_mask

        return list(sampling_mask.codecs.iter_masks(data, format=fmt, limits=limits(data)))

    return run


def _load(suffix: str, limits: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def run(data: bytes) -> Any:
        import sampling_mask

        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"mask{suffix}"
            path.write_bytes(data)
            return sampling_mask.load(path, limits=limits(data))

    return run


#: label -> (payload builder, decoder, expected code, whether the untrusted preset applies)
CASES: dict[str, tuple[Callable[[], bytes], Callable[[bytes], Any], str, bool]] = {
    "arrows legacy V4 compression key, max_bytes 1 MiB": (
        legacy_compressed_stream,
        _decode("arrows", _one_mib),
        "E_LIMIT",
        False,
    ),
    "arrows legacy V4 compression key, untrusted": (
        legacy_compressed_stream,
        _decode("arrows", _untrusted),
        "E_LIMIT",
        True,
    ),
    "arrows zstd 16M empty rows, untrusted": (
        zstd_stream_of_empty_rows,
        _decode("arrows", _untrusted),
        "E_LIMIT",
        True,
    ),
    "arrows zstd 16M empty rows, streamed, untrusted": (
        zstd_stream_of_empty_rows,
        _iter("arrows", _untrusted),
        "E_LIMIT",
        True,
    ),
    "parquet 16M empty rows, untrusted": (parquet_of_empty_rows, _decode("parquet", _untrusted), "E_LIMIT", True),
    "parquet 16M empty rows, max_bytes 1 MiB": (parquet_of_empty_rows, _decode("parquet", _one_mib), "E_LIMIT", False),
    "parquet 16M empty rows, streamed, untrusted": (
        parquet_of_empty_rows,
        _iter("parquet", _untrusted),
        "E_LIMIT",
        True,
    ),
    "base64 shape [2**24, 0], untrusted": (
        lambda: base64_zero_width(ROWS),
        _decode("base64", _untrusted),
        "E_LIMIT",
        True,
    ),
    "base64 shape [2**28, 0], untrusted": (
        lambda: base64_zero_width(1 << 28),
        _decode("base64", _untrusted),
        "E_LIMIT",
        True,
    ),
    "msgpack dense [2**24, 0], untrusted": (msgpack_zero_width, _decode("msgpack", _untrusted), "E_LIMIT", True),
    "arrow footer lists one batch 1000 times, decode": (
        footer_repeating_one_batch,
        _decode("arrow", _default),
        "E_ENCODING",
        False,
    ),
    "arrow footer lists one batch 1000 times, load": (
        footer_repeating_one_batch,
        _load(".arrow", _default),
        "E_ENCODING",
        False,
    ),
    "arrow footer lists one batch 1000 times, untrusted": (
        footer_repeating_one_batch,
        _decode("arrow", _untrusted),
        "E_ENCODING",
        True,
    ),
}
for _fmt in ("arrow", "arrows", "parquet", "msgpack", "json", "json-rows", "base64"):
    CASES[f"valid realistic {_fmt}, untrusted"] = (
        lambda fmt=_fmt: realistic(fmt),  # type: ignore[misc]
        _decode(_fmt, _untrusted),
        "E_LIMIT" if _fmt == "parquet" else "OK",  # Arrow C++ reads Parquet at ~35 bytes a value
        True,
    )
CASES["valid realistic parquet of 10,000 rows, untrusted"] = (
    lambda: realistic("parquet", 10_000),
    _decode("parquet", _untrusted),
    "OK",
    True,
)


def _warm_up() -> None:
    """Every decoder once on valid input, so lazy imports and pools are in the baseline."""
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8)
    limits = sampling_mask.Limits.for_untrusted_input(100)
    for fmt in ("arrow", "arrows", "parquet", "msgpack", "json"):
        sampling_mask.decode(sampling_mask.encode(mask, fmt), format=fmt, limits=limits)
    sampling_mask.decode(sampling_mask.encode(mask, "arrows", compression="zstd"), format="arrows", limits=limits)
    plain = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]])
    for fmt in ("base64", "json-rows"):
        sampling_mask.decode(sampling_mask.encode(plain, fmt), format=fmt, limits=limits)


# ---------------------------------------------------------------------------------------------- parent
@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return child_results(__file__)


@pytest.mark.parametrize("label", list(CASES))
def test_input_gets_its_code_within_the_memory_bound(results: dict[str, dict[str, Any]], label: str) -> None:
    event = results[label]
    expected, untrusted = CASES[label][2], CASES[label][3]
    assert event["code"] == expected, f"{label}: got {event['code']}"
    bound = untrusted_bound_mb(event["size"]) if untrusted else 64
    assert event["rss"] <= bound, f"{label}: peak RSS grew {event['rss']} MiB, bound {bound:.0f} MiB"


def test_table_inputs_are_small(results: dict[str, dict[str, Any]]) -> None:
    """The table's payloads are a few KB; the valid ones a few MB (so the 16 x input part is tested)."""
    for label, event in results.items():
        if label.startswith("valid"):
            assert event["size"] > 4 * MiB or "base64" in label or "10,000" in label, (label, event["size"])
        else:
            assert event["size"] < 1 * MiB, (label, event["size"])


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    child_main(((label, build, call) for label, (build, call, _, _) in CASES.items()), _warm_up)
