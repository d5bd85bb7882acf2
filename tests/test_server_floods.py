"""The example server under floods: header bytes are capped per request (431, h11's limit on an
unfinished head and the server's on a finished one), so a header flood stays within
``memory_bound()``; a client that declares a body and sends nothing holds no reservation, so small
requests are answered while it waits, and one that stops half-way loses its reservation at the
per-read stall timeout (408); conflicting ``Content-Length`` headers are a 400 (h11's).

Loopback only, two server children killed at the end; every loop is bounded and every socket has a
timeout. No assertion needs a fast machine: "promptly" means "before the stalled clients are
answered", which the server does only after its 20 s stall timeout, and "released" means "answered
408 well before the body's 30 s deadline".
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples")]
from example_server import TIMEOUT, answers, exchange, head, parse_answers, receive_all, serve, stats  # noqa: E402
from mask_server import HEADER_BYTES  # noqa: E402

pytestmark = pytest.mark.slow  # spawns processes, runs for seconds

pytest.importorskip("msgpack")
READ_TIMEOUT = 30.0
MiB = 1 << 20


@pytest.fixture(scope="module")
def patient() -> Iterator[int]:
    """A server that waits 20 s for a stalled read (30 s for a whole body)."""
    yield from serve(f"--read-timeout={READ_TIMEOUT}", "--stall-timeout=20", "--decoders=2")


@pytest.fixture(scope="module")
def strict() -> Iterator[int]:
    """A server that drops a read stalled for 1 s (30 s for a whole body), whose large lane holds one
    body of ``--max-body`` (8 MiB) at a time."""
    yield from serve(f"--read-timeout={READ_TIMEOUT}", "--stall-timeout=1", "--decoders=1")


def _valid(rows: int, fmt: str = "msgpack") -> bytes:
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2]] * rows)
    return sampling_mask.encode(mask, fmt)


def test_header_flood_stays_within_the_bound(patient: int) -> None:
    """48 connections each sending 97 header lines of 64 KB (6.3 MB): each is
    answered 431 after ``HEADER_BYTES`` and the server's peak memory stays within its bound."""
    idle = stats(patient)
    line = b"X-Pad: " + b"a" * (64_000 - 9) + b"\r\n"
    flood = b"POST /decode HTTP/1.1\r\nHost: x\r\n" + line * 97 + b"Content-Length: 0\r\n\r\n"
    results: list[Any] = [None] * 48

    def one(i: int) -> None:
        try:
            found = answers(patient, flood)
            results[i] = found[0][0] if len(found) == 1 else found
        except OSError as exc:  # reset after the 431: nothing to read
            results[i] = type(exc).__name__

    threads = [threading.Thread(target=one, args=(i,)) for i in range(48)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert results.count(431) >= 1 and all(r in (431, "ConnectionResetError") for r in results), results
    after = stats(patient)
    growth = after["peak_rss_mib"] - idle["rss_mib"]
    assert growth <= after["memory_bound_mib"], (growth, after)


def test_headers_over_the_cap_are_a_431(patient: int) -> None:
    """Past ``HEADER_BYTES``: an unfinished head (h11's limit), a finished one sent at once and a
    long request line (the server's check of a finished head) are each 431."""
    unfinished = b"POST /decode HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (HEADER_BYTES + 100)
    assert exchange(patient, unfinished)[0] == 431
    pad = "X-Pad: " + "a" * 1000
    assert exchange(patient, head(0, *[pad] * (HEADER_BYTES // 1000 + 1)))[0] == 431
    assert exchange(patient, b"POST /" + b"a" * HEADER_BYTES + b" HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 431
    assert exchange(patient, head(0, *[pad] * 8))[0] == 400  # within the cap: an empty body, E_...


def test_small_requests_are_answered_while_declared_bodies_never_come(patient: int) -> None:
    """Four clients declare 8 MiB and send nothing; a 20 B and a
    200 KB request are answered while the four still wait (the server answers them only after its
    20 s stall timeout), so they were not queued behind them."""
    stalled = [socket.create_connection(("127.0.0.1", patient), timeout=TIMEOUT) for _ in range(4)]
    try:
        for sock in stalled:
            sock.sendall(head(8 << 20))
        small, medium = _valid(3, "json-rows"), _valid(16_000)
        assert len(small) <= 20 and 150_000 < len(medium) < 250_000
        for body in (small, medium):
            status, answer = exchange(patient, head(len(body)) + body)
            assert status == 200 and answer["ok"], answer
        for sock in stalled:  # still waiting: no answer yet
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in stalled:
            sock.close()


def test_a_stalled_body_loses_its_reservation_at_the_stall_timeout(strict: int) -> None:
    """A client that sends 1 MiB of an 8 MiB body and stops is
    answered 408 at the 1 s stall timeout, long before the body's 30 s deadline; then a 5 MB request,
    which fits the large lane only once the 8 MiB reservation is given back, is admitted and decoded
    (held, it would wait the 30 s queue timeout and get a 503)."""
    with socket.create_connection(("127.0.0.1", strict), timeout=READ_TIMEOUT / 2) as sock:
        sock.sendall(head(8 << 20) + bytes(MiB))
        (status, _), *more = parse_answers(receive_all(sock))  # a recv timeout (15 s) fails the test
    assert status == 408 and not more
    body = _valid(400_000)
    assert len(body) > 4 << 20
    assert exchange(strict, head(len(body)) + body)[0] == 200


@pytest.mark.parametrize(
    "lengths",
    [("5", "500"), ("500", "5"), ("5", "5, 500")],
    ids=["conflicting", "conflicting, large first", "conflicting in one header"],
)
def test_conflicting_content_length_headers_are_a_400(patient: int, lengths: tuple[str, str]) -> None:
    body = _valid(1)[:5]
    status, answer = exchange(patient, head(lengths[0], f"Content-Length: {lengths[1]}") + body)
    assert status == 400 and "Content-Length" in answer["message"], answer


def test_a_repeated_equal_content_length_is_one_length(patient: int) -> None:
    """RFC 9110 section 8.6 lets a recipient take repeated equal values as one length; h11 does, so
    the body is framed by it and decoded."""
    body = _valid(3)
    status, answer = exchange(patient, head(len(body), f"Content-Length: {len(body)}") + body)
    assert status == 200 and answer["num_rows"] == 3, answer
