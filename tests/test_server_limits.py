"""The example server's own limits: admission by declared size keeps its memory within
``mask_server.memory_bound()`` under concurrent 8 MiB adversarial bodies, a small request is answered
at once while large ones are in flight, slow headers get a 408 within the header timeout, and a
malformed ``Content-Length`` a 400 (h11's). Loopback only; every loop is bounded and every socket has
a timeout, and the server child is killed at the end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples")]
from example_server import TIMEOUT, exchange, head, parse_answers, post, receive_all, serve, stats  # noqa: E402
from mask_server import CONNECTION_COST, MAX_CONNECTIONS, MemoryGate, memory_bound, request_cost  # noqa: E402

pytestmark = pytest.mark.slow  # forks or spawns processes, or runs for seconds

pytest.importorskip("msgpack")
HEADER_TIMEOUT = 1.5
MiB = 1 << 20


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    yield from serve(f"--header-timeout={HEADER_TIMEOUT}", "--decoders=2", "--queue-timeout=20")


@pytest.fixture(scope="module")
def patient_port() -> Iterator[int]:
    """A server whose deadlines (30 s a body, 20 s a stalled read or a wait for memory) no loaded
    machine reaches in these tests: what they check is the order of answers, never a time."""
    yield from serve("--read-timeout=30", "--stall-timeout=20", "--decoders=2", "--queue-timeout=20")


def _send_held(port: int, body: bytes, hold: threading.Event) -> tuple[int, dict[str, Any]]:
    """POST ``body``: its first MiB, then, once ``hold`` is set, the rest; (status, JSON)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sock.sendall(head(len(body)) + body[:MiB])
        hold.wait(TIMEOUT)
        sock.sendall(body[MiB:])
        (answer,) = parse_answers(receive_all(sock))
    return answer


def _adversarial(size: int = 8 << 20) -> bytes:
    """A dense [2**24, 0] mask and an ignored bin that pads the body to ``size`` bytes."""
    import msgpack

    dense = {"dtype": "int32", "shape": [1 << 24, 0], "data": b""}
    env = {"sampling_mask": 1, "layout": "dense", "dense": dense, "junk": b""}
    pad = size - len(msgpack.packb(env, use_bin_type=True)) - 4
    return msgpack.packb({**env, "junk": bytes(pad)}, use_bin_type=True)  # type: ignore[no-any-return]


def _small_valid() -> tuple[bytes, int]:
    import sampling_mask

    mask = sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8)
    return sampling_mask.encode(mask, "msgpack"), mask.nnz


def _parallel(count: int, call: Any) -> list[Any]:
    results: list[Any] = [None] * count

    def one(i: int) -> None:
        try:
            results[i] = call(i)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    return results


def test_memory_gate_reserves_whole_costs_first_come_first_served() -> None:
    """A reservation is taken whole or not at all; a waiter holds nothing, and the first in line is
    served first (a small request behind a large one does not pass it)."""

    async def scenario() -> list[str]:
        gate = MemoryGate(100)
        order: list[str] = []
        assert await gate.reserve(60, 0.1)
        assert not await gate.reserve(60, 0.05) and gate.free == 40  # would overcommit: nothing taken

        async def wait(label: str, cost: int) -> None:
            if await gate.reserve(cost, 5.0):
                order.append(label)

        large = asyncio.ensure_future(wait("large", 100))  # capped at the capacity: the whole pool
        await asyncio.sleep(0.01)
        small = asyncio.ensure_future(wait("small", 30))  # fits now, but the large one is first in line
        await asyncio.sleep(0.05)
        assert order == [] and gate.free == 40
        gate.release(60)
        await asyncio.wait_for(large, 5.0)
        assert order == ["large"] and gate.free == 0
        gate.release(100)
        await asyncio.wait_for(small, 5.0)
        assert not await gate.reserve(80, 0.05)  # timed out: withdrawn, nothing held
        gate.release(30)
        assert gate.free == 100
        return order

    assert asyncio.run(scenario()) == ["large", "small"]


def test_documented_bound_covers_the_largest_requests() -> None:
    assert request_cost(8 << 20) == (8 << 20) + 128 * MiB
    connections = MAX_CONNECTIONS * CONNECTION_COST  # what open connections hold before admission
    assert memory_bound(8 << 20, 2, 2) == 2 * request_cost(8 << 20) + 2 * request_cost(64 << 10) + connections


def test_a_shape_past_numpy_is_a_400(port: int) -> None:
    import msgpack

    body = msgpack.packb(
        {"sampling_mask": 1, "layout": "dense", "dense": {"dtype": "int32", "shape": [(1 << 64) - 1, 0], "data": b""}}
    )
    status, answer = post(port, body)
    assert (status, answer.get("code")) in ((400, "E_LIMIT"), (400, "E_SHAPE")), answer


def test_concurrent_adversarial_bodies_stay_within_the_bound(port: int) -> None:
    idle = stats(port)
    body = _adversarial()
    answers = _parallel(8, lambda i: post(port, body))
    assert all(isinstance(a, tuple) and a[0] == 400 and a[1]["code"] == "E_LIMIT" for a in answers), answers
    after = stats(port)
    growth = after["peak_rss_mib"] - idle["rss_mib"]
    assert growth <= after["memory_bound_mib"], (growth, after)


def test_a_small_request_is_answered_while_large_ones_are_in_flight(patient_port: int) -> None:
    small, nnz = _small_valid()
    large = _adversarial(6 << 20)
    # Six large requests in flight: each sends a MiB and holds its reservation (or waits for one,
    # holding nothing) until the small request has been answered, so the small one cannot be
    # answered after them.
    answered = threading.Event()
    larges: list[Any] = []
    background = threading.Thread(
        target=lambda: larges.extend(_parallel(6, lambda i: _send_held(patient_port, large, answered)))
    )
    background.start()
    time.sleep(0.3)
    try:
        status, answer = post(patient_port, small)
    finally:
        answered.set()
    background.join(TIMEOUT * 2)
    assert status == 200 and answer["nnz"] == nnz, answer
    # None of the six was dropped by a deadline while it waited: each held on until the end, then got its answer.
    assert len(larges) == 6 and all(isinstance(a, tuple) and a[0] == 400 for a in larges), larges


def _one_row_row_groups(rows: int) -> bytes:
    """A valid Parquet file of one-row row groups (about 230 bytes each), built in a child
    process so that pyarrow's pools in this one stay untouched."""
    code = (
        "import io, sys, numpy as np, pyarrow.parquet as pq, sampling_mask as sm\n"
        "from sampling_mask.codecs import arrow\n"
        f"n = {rows}\n"
        "mask = sm.SamplingMask.from_rows([[1]] * n, vocab_size=10, cu_seqlens=np.arange(n + 1))\n"
        "buf = io.BytesIO(); pq.write_table(arrow.table_from_mask(mask), buf, row_group_size=1, compression='none')\n"
        "sys.stdout.buffer.write(buf.getvalue())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, env=env, timeout=120).stdout


def test_a_small_request_is_answered_while_one_row_row_group_bodies_are_decoded(patient_port: int) -> None:
    """Six concurrent Parquet bodies of one-row row groups (5 MB, each refused
    by its per-row-group cost after reading its footer), then one small valid request, answered before
    the last of the six (an order, not a time: it is not queued behind them)."""
    small, nnz = _small_valid()
    large = _one_row_row_groups(24_000)
    assert len(large) > 4 << 20
    answers: list[Any] = []
    finished: list[float] = []

    def one_large(_: int) -> Any:
        try:
            return post(patient_port, large)
        finally:
            finished.append(time.monotonic())

    background = threading.Thread(target=lambda: answers.extend(_parallel(6, one_large)))
    background.start()
    time.sleep(0.1)  # the six are being sent (5 MB each over loopback) and decoded
    status, answer = post(patient_port, small)
    small_finished = time.monotonic()
    background.join(TIMEOUT * 2)
    assert status == 200 and answer["nnz"] == nnz, answer
    assert small_finished < max(finished), "the small request was answered after all six large ones"
    # Each large body is refused: 400 E_LIMIT once read, or its connection closed while it waited for
    # admission (the sender then sees a broken pipe); none is decoded, and the server stays up.
    refused = [isinstance(a, OSError) or (a[0] == 400 and a[1]["code"] == "E_LIMIT") for a in answers]
    assert len(answers) == 6 and all(refused), answers
    assert "rss_mib" in stats(patient_port)


def test_slow_headers_get_408_within_the_header_timeout(port: int) -> None:
    def trickle(_: int) -> tuple[int, float]:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(b"POST /decode HTTP/1.1\r\n")
            answer = b""
            for _ in range(int(4 * HEADER_TIMEOUT / 0.2)):  # bounded: past the deadline by far
                try:
                    sock.sendall(b"X")
                except OSError:
                    break
                sock.settimeout(0.2)
                try:
                    answer = sock.recv(1 << 16)
                    break
                except TimeoutError:
                    continue
        return int(answer.split(b" ", 2)[1]) if answer else 0, time.monotonic() - start

    results = _parallel(20, trickle)
    # Each trickler got its 408 inside its bounded loop (at least 4 header timeouts of trickling).
    assert all(isinstance(r, tuple) and r[0] == 408 for r in results), results


def test_malformed_content_length_is_a_400(port: int) -> None:
    """h11 reads ``Content-Length``: anything but one decimal number of at most 20 digits is 400."""
    for value in ("\u00b2".encode("latin-1"), b"-1", b"1e3", b" 1 2", b"99999999999999999999999"):
        data = b"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: " + value + b"\r\nConnection: close\r\n\r\n"
        status, answer = exchange(port, data)
        assert status == 400 and "Content-Length" in answer["message"], (value, status, answer)
    assert stats(port)["ok"]


def test_a_silent_connection_is_closed_at_the_header_timeout(port: int) -> None:
    """A connection that sends nothing is closed, unanswered, once the header timeout has passed (the
    socket's own timeout, 4 header timeouts, fails the test if it is not)."""
    with socket.create_connection(("127.0.0.1", port), timeout=4 * HEADER_TIMEOUT) as sock:
        assert receive_all(sock) == b""
