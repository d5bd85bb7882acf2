"""An example HTTP service that accepts sampling masks from the network (standard library only).

``POST /decode`` (optional ``?format=msgpack|arrows|json|...``; detected from the bytes otherwise)
with the encoded mask as the body. Answers ``200 {"ok": true, "num_rows", "num_segments", "nnz",
"checksum"}`` or ``400 {"ok": false, "code": "E_...", "message"}``; ``411`` without a
Content-Length, ``400`` for one that is not a decimal number or for two Content-Length headers,
``413`` above ``--max-body``, ``431`` for a request line and headers over ``HEADER_BYTES`` (32 KiB),
``408`` for a client that does not send its whole request (request line, headers and body) within
``--read-timeout`` seconds or stops sending for ``--stall-timeout`` seconds once it has started,
``503`` when no memory frees up for it in time. ``GET /stats`` reports requests served and the
process's peak RSS.

What keeps it up under hostile input (the bounds that hold, each tested in
``tests/test_server_limits.py`` / ``tests/test_server_floods.py`` and shown by
``benchmarks/bench_server_load.py``):

- every body is decoded under ``Limits.for_untrusted_input(len(body))``, so one decode grows memory
  by at most max(16 x body, 64 MiB) (SECURITY.md): :func:`request_cost` is that plus the body;
- admission by size, in two lanes: bodies of at most ``SMALL_BODY`` (64 KiB) go through a pool of
  their own (``--small-decoders x request_cost(64 KiB)``), larger ones through a pool of
  ``--decoders x request_cost(--max-body)`` (memory-weighted semaphores). A body's bytes are
  reserved from its lane as they arrive (256 KiB at a time, into an anonymous mapping whose pages
  appear as they are written), the rest of its cost once the whole body is in, before it is decoded:
  a client that declares a body and sends nothing holds no memory and no reservation, so small
  requests are answered at once beside it;
- headers are memory too: one request's request line and headers are at most ``HEADER_BYTES``
  (431 past it, counted as they are read), and they are read only with a slot of the header pool
  (``HEADER_SLOTS x HEADER_COST``, 64 x 512 KiB), held until the request is answered;
- peak memory above the idle process: at most :func:`memory_bound` (704 MiB by default: the two
  lanes and the header pool), whatever the number of clients; a connection waiting for a slot holds
  only its thread and a 16 KiB read buffer (the operating system's thread and socket limits apply);
- one deadline per request covers the request line, the headers and the body (a client trickling
  one byte a second is answered 408 after ``--read-timeout``), and once a request has started each
  read waits at most ``--stall-timeout`` (2 s): a client that stops sending is answered 408 and its
  reservation given back at once, not at the request's deadline;
- every ``SamplingMaskError`` becomes a 400 with its code; nothing else is expected, and anything
  else becomes a 500 that names the exception (the load test counts those as failures); the
  server's own protocol errors are JSON too.

Run: ``python examples/mask_server.py --port 8000`` (binds 127.0.0.1 by default). The load test
(``benchmarks/bench_server_load.py``) starts it on an ephemeral port and drives it.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import io
import json
import mmap
import resource
import socket
import sys
import threading
import time
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import sampling_mask
from sampling_mask import Limits, SamplingMask, SamplingMaskError

MAX_BODY = 8 << 20  # bytes
READ_TIMEOUT = 5.0  # seconds a client may take to send its request
DECODERS = 4  # decodes of --max-body bytes at once (smaller bodies weigh less)
SMALL_BODY = 64 << 10  # bytes: bodies up to this size have a lane of their own ...
SMALL_DECODERS = 2  # ... with this many decodes at once
QUEUE_TIMEOUT = 30.0  # seconds a request may wait for memory before a 503
STALL_TIMEOUT = 2.0  # seconds one read of a started request may wait for a byte before a 408
HEADER_BYTES = 32 << 10  # the request line and headers of one request together, at most (else 431)
HEADER_COST = 16 * HEADER_BYTES  # what parsing them may hold (lines, text, the message object)
HEADER_SLOTS = 64  # requests whose headers are read at once (the header pool: 32 MiB)
BODY_STEP = 256 << 10  # body bytes reserved at a time, as they arrive
MiB = 1 << 20


def request_cost(size: int) -> int:
    """Bytes one request of a ``size``-byte body may hold: the body, and what its decode may grow
    under the untrusted preset, max(16 x size, 64 MiB) (SECURITY.md)."""
    return size + max(16 * size, 64 * MiB)


def memory_bound(max_body: int = MAX_BODY, decoders: int = DECODERS, small_decoders: int = SMALL_DECODERS) -> int:
    """The server's documented bound: peak memory above the idle process, in bytes (default 704 MiB):
    the two lanes' pools and the header pool (connections beyond them wait, holding a thread and a
    16 KiB read buffer each)."""
    lanes = decoders * request_cost(max_body) + small_decoders * request_cost(min(SMALL_BODY, max_body))
    return lanes + HEADER_SLOTS * HEADER_COST


class MemoryGate:
    """A memory-weighted semaphore: :meth:`reserve` waits until ``cost`` bytes of the pool are free."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._changed = threading.Condition()

    def reserve(self, cost: int, timeout: float) -> bool:
        """Take ``cost`` bytes (at most the capacity) within ``timeout`` seconds; False when it could not."""
        cost = min(cost, self.capacity)
        with self._changed:
            if not self._changed.wait_for(lambda: self._free >= cost, timeout):
                return False
            self._free -= cost
            return True

    def release(self, cost: int) -> None:
        with self._changed:
            self._free += min(cost, self.capacity)
            self._changed.notify_all()


class _Reservation:
    """What one request holds of a gate, taken in steps and given back at once."""

    def __init__(self, gate: MemoryGate) -> None:
        self.gate, self.held = gate, 0

    def take(self, cost: int, timeout: float) -> bool:
        if cost <= 0:
            return True
        if not self.gate.reserve(cost, timeout):
            return False
        self.held += min(cost, self.gate.capacity)
        return True

    def release(self) -> None:
        self.gate.release(self.held)
        self.held = 0


class _DeadlineSocket(io.RawIOBase):
    """The connection's reads, each given only what is left of the request's deadline."""

    def __init__(self, sock: socket.socket, stall_timeout: float) -> None:
        self._sock = sock
        self.deadline = float("inf")
        self.stall_timeout = stall_timeout
        self.timed_out = False
        self.received = 0  # bytes of the current request

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        """One read within what is left of the request's deadline and, once the request has started,
        within ``stall_timeout``: a client that stops sending loses what it holds at once."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.timed_out = True
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(min(left, self.stall_timeout) if self.received else left)
        try:
            count = self._sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True
            raise
        self.received += count
        return count


class _HeaderCap:
    """The connection's buffered reader, but ``readline`` (the request line and the headers: what
    http.server reads with it) stops at ``room`` bytes per request: one more is ``LineTooLong``,
    which http.server answers 431."""

    def __init__(self, reader: io.BufferedReader) -> None:
        self._reader = reader
        self.room = HEADER_BYTES

    def readline(self, size: int = -1) -> bytes:
        limit = self.room + 1 if size is None or size < 0 else min(size, self.room + 1)
        line = self._reader.readline(limit)
        self.room -= len(line)
        if self.room < 0:
            raise http.client.LineTooLong(f"request line and headers over {HEADER_BYTES} bytes")
        return line

    def __getattr__(self, name: str) -> Any:  # read, readinto, peek, close: the reader's own
        return getattr(self._reader, name)


def summary(mask: SamplingMask) -> dict[str, Any]:
    """What the server answers for a valid mask (the load test computes the same from its own copy)."""
    checksum = zlib.crc32(mask.ids.tobytes()) ^ zlib.crc32(mask.offsets.tobytes())
    return {
        "ok": True,
        "num_rows": mask.num_rows,
        "num_segments": mask.num_segments,
        "nnz": mask.nnz,
        "checksum": checksum,
    }


def memory_mib() -> dict[str, float]:
    """This process's current and peak RSS in MiB: ``VmRSS`` / ``VmHWM`` where /proc has them (they
    start afresh at exec, unlike ``ru_maxrss``, which keeps the launching process's peak)."""
    found = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    found[line[:5]] = int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = found.get("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"rss_mib": found.get("VmRSS", peak), "peak_rss_mib": peak}


class MaskHandler(BaseHTTPRequestHandler):
    """One request: read a bounded body in bounded time, decode it under the untrusted preset."""

    server: MaskServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket file http.server made: every read goes through the deadline instead
        self._raw = _DeadlineSocket(self.connection, self.server.stall_timeout)
        self._reader = _HeaderCap(io.BufferedReader(self._raw, 16 << 10))
        self.rfile = self._reader  # type: ignore[assignment]

    def handle_one_request(self) -> None:
        """One request under one deadline: the request line, the headers and the body together
        (http.server's own timeout is per read, so a trickling sender could hold it for ever), each
        read once started within the stall timeout. Its headers are read only with a slot of the
        header pool, and at most ``HEADER_BYTES`` of them (431)."""
        self._raw.deadline = time.monotonic() + self.server.read_timeout
        self._raw.timed_out = False
        self._raw.received = 0
        self._reader.room = HEADER_BYTES
        self._answered = False
        self.request_version, self.requestline, self.command = "HTTP/1.1", "", ""  # until parsed
        try:
            started = self._reader.peek(1)  # an idle keep-alive connection holds no slot
        except (TimeoutError, OSError):
            self.close_connection = True
            return
        if not started:
            self.close_connection = True
            return
        headers = self.server.header_gate
        if not headers.reserve(HEADER_COST, self.server.stall_timeout):
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._answer(503, {"ok": False, "message": "server busy; retry later"})
            return
        try:
            super().handle_one_request()
        except http.client.LineTooLong:  # the request line alone is over the cap
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._answer(431, {"ok": False, "message": f"request line and headers over {HEADER_BYTES} bytes"})
        finally:
            headers.release(HEADER_COST)
        # http.server drops a timed-out request silently: answer 408 when the client had started
        # one (an idle keep-alive connection is just closed).
        if self._raw.timed_out and self._raw.received and not self._answered:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._answer(408, {"ok": False, "message": "request too slow"})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: the load test sends tens of thousands of requests

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (431, 400, 414, 501, ...) as JSON too, closing the connection."""
        self.close_connection = True
        self._answer(code, {"ok": False, "message": message or HTTPStatus(code).phrase})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        self._answered = True
        self.connection.settimeout(self.server.read_timeout)  # writing the answer has its own time
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self, size: int, held: _Reservation) -> memoryview | None:
        """``size`` bytes (fewer if the client closes) read into one buffer, within the request's
        deadline, each step's bytes reserved from ``held``'s lane before they are read (None when the
        lane stays full past the stall timeout); a read-only view, so the decoder reads it in place.
        The buffer is an anonymous mapping whose pages appear as bytes arrive: a client that declares
        a body and sends nothing holds neither memory nor a reservation."""
        buffer: Any = bytearray(size) if size <= SMALL_BODY else mmap.mmap(-1, size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            if not got:
                self._reader.peek(1)  # the first byte of the body before anything is reserved
            end = got + min(BODY_STEP, size - got)
            if not held.take(end - got, self.server.stall_timeout):
                return None
            while got < end:
                count = self.rfile.readinto(view[got:end])
                if not count:  # the client closed early
                    return view[:got].toreadonly()
                got += count
        return view[:got].toreadonly()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if urlparse(self.path).path != "/stats":
            self._answer(404, {"ok": False, "message": "GET /stats or POST /decode"})
            return
        self._answer(
            200,
            {
                "ok": True,
                "requests": self.server.requests,
                "memory_bound_mib": self.server.memory_bound / MiB,
                **memory_mib(),
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        if url.path != "/decode":
            self._answer(404, {"ok": False, "message": "POST /decode"})
            return
        fmt = parse_qs(url.query).get("format", [None])[0]
        lengths = self.headers.get_all("Content-Length") or []
        if len(lengths) > 1:  # two framings of one body: the request smuggling class
            self.close_connection = True
            self._answer(400, {"ok": False, "message": "more than one Content-Length header"})
            return
        length = lengths[0] if lengths else None
        if length is None:
            self.close_connection = True
            self._answer(411, {"ok": False, "message": "Content-Length required"})
            return
        if not (length.isascii() and length.strip().isdigit() and len(length) <= 20):  # not "²", not "-1"
            self.close_connection = True
            self._answer(400, {"ok": False, "message": "Content-Length must be a decimal number of bytes"})
            return
        size = int(length)
        if size > self.server.max_body:
            self.close_connection = True
            self._answer(413, {"ok": False, "message": f"body over {self.server.max_body} bytes"})
            return
        gate, cost = self.server.gate_for(size)
        held = _Reservation(gate)  # the body's bytes as they arrive, then its decode's bound
        try:
            try:
                body = self._read_body(size, held)
            except TimeoutError:
                self.close_connection = True
                self._answer(408, {"ok": False, "message": "request body too slow"})
                return
            if body is None or not held.take(cost - held.held, self.server.queue_timeout):
                self.close_connection = True
                self._answer(503, {"ok": False, "message": "server busy; retry later"})
                return
            if len(body) < size:  # the client closed early
                self.close_connection = True
                self._answer(400, {"ok": False, "code": "E_BYTES", "message": "body shorter than Content-Length"})
                return
            status, answer = self.server.decode(body, fmt)
            del body
        finally:
            held.release()
        self._answer(status, answer)


class MaskServer(ThreadingHTTPServer):
    """A threading HTTP server that admits requests by declared size (see the module docstring)."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        *,
        max_body: int = MAX_BODY,
        read_timeout: float = READ_TIMEOUT,
        decoders: int = DECODERS,
        small_decoders: int = SMALL_DECODERS,
        queue_timeout: float = QUEUE_TIMEOUT,
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None:
        super().__init__(address, MaskHandler)
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.queue_timeout = queue_timeout
        self.stall_timeout = stall_timeout
        self.header_gate = MemoryGate(HEADER_SLOTS * HEADER_COST)
        self.requests = 0
        self.small_body = min(SMALL_BODY, max_body)
        self.memory_bound = memory_bound(max_body, decoders, small_decoders)
        self._large = MemoryGate(decoders * request_cost(max_body))
        self._small = MemoryGate(small_decoders * request_cost(self.small_body))
        self._count = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # a client that went away: nothing to report
            return
        super().handle_error(request, client_address)

    def gate_for(self, size: int) -> tuple[MemoryGate, int]:
        """The lane of a ``size``-byte body and what it reserves there."""
        cost = request_cost(size)
        return (self._small if size <= self.small_body else self._large), cost

    def decode(self, body: Any, fmt: str | None) -> tuple[int, dict[str, Any]]:
        with self._count:
            self.requests += 1
        try:
            mask = sampling_mask.decode(body, format=fmt, limits=Limits.for_untrusted_input(len(body)))
            return 200, summary(mask)
        except SamplingMaskError as exc:
            return 400, {"ok": False, "code": exc.code.value, "message": exc.message[:200]}
        except Exception as exc:  # a bug: reported, never a dead server
            return 500, {"ok": False, "code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"[:200]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    parser.add_argument("--max-body", type=int, default=MAX_BODY)
    parser.add_argument("--read-timeout", type=float, default=READ_TIMEOUT)
    parser.add_argument("--decoders", type=int, default=DECODERS, help="decodes of --max-body bytes at once")
    parser.add_argument("--small-decoders", type=int, default=SMALL_DECODERS, help="small-body decodes at once")
    parser.add_argument("--queue-timeout", type=float, default=QUEUE_TIMEOUT)
    parser.add_argument("--stall-timeout", type=float, default=STALL_TIMEOUT, help="seconds a read may wait")
    args = parser.parse_args(argv)
    server = MaskServer(
        (args.host, args.port),
        max_body=args.max_body,
        read_timeout=args.read_timeout,
        decoders=args.decoders,
        small_decoders=args.small_decoders,
        queue_timeout=args.queue_timeout,
        stall_timeout=args.stall_timeout,
    )
    print(f"listening on {server.server_address[0]}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
