"""The example server against a hostile client's framings and schedules: a body framed two ways is
refused and its connection closed (nothing inside it is answered as a request), bodies completed
together are all admitted in turn (reservations cannot wedge a lane), slow or silent connections
leave small requests their capacity, and connections past the cap are refused at once. The
server's own code parses no HTTP: h11 does, under uvicorn.

Loopback only; every socket has a timeout and every loop is bounded; the server children are killed
at the end. No assertion reads a clock: what is checked is which answers came, and in what order.
"""

from __future__ import annotations

import ast
import functools
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples")]
import mask_server  # noqa: E402
from example_server import TIMEOUT, answers, exchange, head, parse_answers, post, receive_all, serve, stats  # noqa: E402

pytestmark = pytest.mark.slow  # spawns processes, runs for seconds

pytest.importorskip("msgpack")
SMUGGLED = b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """Default settings, but a 60 s header timeout: slow heads stay open for the whole test."""
    yield from serve("--header-timeout=60")


def _chunked(payload: bytes) -> tuple[bytes, int]:
    """``payload`` as one chunk and the last chunk; and the length of its chunk-size line, the
    ``Content-Length`` under which a reader framing by length would read ``payload`` as the next
    request."""
    size_line = b"%x\r\n" % len(payload)
    return size_line + payload + b"\r\n0\r\n\r\n", len(size_line)


@pytest.mark.parametrize(
    ("framing", "status"),
    [
        ("Content-Length, then Transfer-Encoding", 400),
        ("Transfer-Encoding, then Content-Length", 400),
        ("Transfer-Encoding alone", 411),
        ("Transfer-Encoding ' chunked' (space)", 400),
        ("Transfer-Encoding 'chunked, identity'", 501),
        ("Transfer-Encoding 'xchunked'", 501),
        ("two Transfer-Encoding headers", 501),
    ],
)
def test_a_body_framed_two_ways_is_refused_and_its_connection_closed(port: int, framing: str, status: int) -> None:
    """A smuggling request (``Content-Length`` and ``Transfer-Encoding: chunked``, a
    ``GET /stats`` inside the chunk) and its variants get one refusal and a closed connection: the
    GET inside the body, and one sent after the whole message, are never answered (RFC 9112 section
    6.1: reject, or frame by chunked and close)."""
    body, length = _chunked(SMUGGLED)
    extra = {
        "Content-Length, then Transfer-Encoding": [f"Content-Length: {length}", "Transfer-Encoding: chunked"],
        "Transfer-Encoding, then Content-Length": ["Transfer-Encoding: chunked", f"Content-Length: {length}"],
        "Transfer-Encoding alone": ["Transfer-Encoding: chunked"],
        "Transfer-Encoding ' chunked' (space)": ["Transfer-Encoding:  chunked", f"Content-Length: {length}"],
        "Transfer-Encoding 'chunked, identity'": ["Transfer-Encoding: chunked, identity", f"Content-Length: {length}"],
        "Transfer-Encoding 'xchunked'": ["Transfer-Encoding: xchunked", f"Content-Length: {length}"],
        "two Transfer-Encoding headers": ["Transfer-Encoding: chunked", "Transfer-Encoding: chunked"],
    }[framing]
    request = b"\r\n".join([b"POST /decode HTTP/1.1", b"Host: x", *(e.encode() for e in extra), b"", b""])
    found = answers(port, request + body + SMUGGLED)
    assert [s for s, _ in found] == [status], found  # one answer: neither GET was read as a request
    assert found[0][1]["ok"] is False


def _rollout_body() -> tuple[bytes, dict[str, Any]]:
    """A valid 7.7 MB msgpack mask (a realistic rollout of 160,000 tokens) and its summary."""
    import sampling_mask
    from sampling_mask.data.synthetic import rollout

    mask = rollout(160_000, seed=3)
    return sampling_mask.encode(mask, "msgpack"), mask_server.summary(mask)


@pytest.fixture(scope="module")
def patient() -> Iterator[int]:
    """Default lanes (4 bodies of 8 MiB at once), with deadlines no loaded machine reaches here (a
    stalled read 20 s, a wait for memory 120 s): what the test checks is which requests are admitted
    and in what order, never a time."""
    yield from serve("--stall-timeout=20", "--queue-timeout=120")


def test_bodies_completed_together_are_admitted_in_turn(patient: int) -> None:
    """64 clients each send all but the last byte of a valid 7.7 MB
    body, then, once all have (or after 2 s), the last bytes together. A request takes its whole cost
    from the lane in one step and waits holding nothing, so the lane's four admitted bodies finish
    and the next are admitted: every one of the 64 is decoded. (Reserving a body's bytes as they
    came, then the rest of its cost, wedged the lane: each body held part of it while waiting for
    the rest, nothing decoded until the queue timeout, then 503s.)"""
    body, expected = _rollout_body()
    assert 7_500_000 < len(body) < 8 << 20
    idle = stats(patient)
    together = threading.Barrier(64)
    results: list[Any] = []
    lock = threading.Lock()

    def client() -> None:
        try:
            with socket.create_connection(("127.0.0.1", patient), timeout=TIMEOUT) as sock:
                sock.sendall(head(len(body)) + body[:-1])
                try:
                    together.wait(2.0)
                except threading.BrokenBarrierError:
                    pass  # some are still sending (their request waits for memory): go on
                sock.sendall(body[-1:])
                found: Any = parse_answers(receive_all(sock))
        except OSError as exc:
            found = exc
        with lock:
            results.append(found)

    threads = [threading.Thread(target=client) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    assert len(results) == 64
    assert all(r == [(200, expected)] for r in results), [r for r in results if r != [(200, expected)]][:3]
    after = stats(patient)
    assert after["peak_rss_mib"] - idle["rss_mib"] <= after["memory_bound_mib"], after


def test_slow_heads_leave_small_requests_their_capacity(port: int) -> None:
    """70 connections each send part of a head and stop; then 22 small requests,
    sent together, are all answered 200, while the 70 are still open and unanswered (they hold a
    connection each, nothing of the memory lanes)."""
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8)
    small = sampling_mask.encode(mask, "msgpack")
    slow = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(70)]
    try:
        for sock in slow:
            sock.sendall(b"POST /decode HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        results: list[Any] = [None] * 22

        def one(i: int) -> None:
            try:
                results[i] = post(port, small)
            except OSError as exc:
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(22)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(TIMEOUT)
        assert all(isinstance(r, tuple) and r[0] == 200 and r[1]["nnz"] == mask.nnz for r in results), results
        for sock in slow:  # still open, no answer yet
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in slow:
            sock.close()


@pytest.fixture(scope="module")
def capped() -> Iterator[int]:
    yield from serve("--max-connections=8", "--header-timeout=60")


def test_connections_past_the_cap_are_refused_at_once(capped: int) -> None:
    """Eight open connections fill the cap: the ninth is answered 503 and closed at once (before it
    has sent anything); once the eight are closed, requests are served again."""
    held = [socket.create_connection(("127.0.0.1", capped), timeout=TIMEOUT) for _ in range(8)]
    try:
        for sock in held:
            sock.sendall(b"GET /stats HTTP/1.1\r\n")  # a head begun: the connection is the server's
        with socket.create_connection(("127.0.0.1", capped), timeout=TIMEOUT) as ninth:
            assert [s for s, _ in parse_answers(receive_all(ninth))] == [503]
    finally:
        for sock in held:
            sock.close()
    statuses = []
    for _ in range(100):  # bounded: until the server has seen the eight close
        status = exchange(capped, b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0]
        statuses.append(status)
        if status == 200:
            break
        threading.Event().wait(0.1)
    assert statuses[-1] == 200 and set(statuses) <= {200, 503}, statuses


def test_the_server_parses_no_http() -> None:
    """The example's own code reads no request line, header or chunk size: it runs uvicorn with its
    h11 protocol (never httptools), h11 bounds the head, and the file reads nothing from a socket."""
    assert issubclass(mask_server.GuardedH11Protocol, __import__("uvicorn").protocols.http.h11_impl.H11Protocol)
    with socket.socket() as sock:
        config = mask_server.make_server(mask_server.Settings(), sock).config
    assert isinstance(config.http, functools.partial) and config.http.func is mask_server.GuardedH11Protocol
    assert config.h11_max_incomplete_event_size == mask_server.HEADER_BYTES and config.loop == "asyncio"
    tree = ast.parse(Path(mask_server.__file__).read_text())
    reads = {"recv", "recv_into", "readline", "readinto", "makefile", "parse_headers", "rfile"}
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & reads, names & reads
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, bytes)]
    assert not [b for b in literals if b"\r\n" in b or b"HTTP/" in b or b":" in b], literals
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not modules & {"http.server", "http.client", "socketserver"}, modules
