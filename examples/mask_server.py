"""An example HTTP service that accepts sampling masks from the network (standard library only).

``POST /decode`` (optional ``?format=msgpack|arrows|json|...``; detected from the bytes otherwise)
with the encoded mask as the body. Answers ``200 {"ok": true, "num_rows", "num_segments", "nnz",
"checksum"}`` or ``400 {"ok": false, "code": "E_...", "message"}``; ``411`` without a
Content-Length, ``400`` for one that is not a decimal number, ``413`` above ``--max-body``,
``408`` for a client that does not send its whole request (request line, headers and body)
within ``--read-timeout`` seconds, ``503`` when no memory frees up for it within ``--queue-timeout``.
``GET /stats`` reports requests served and the process's peak RSS.

What keeps it up under hostile input:

- every body is decoded under ``Limits.for_untrusted_input(len(body))``, so one decode grows memory
  by at most max(16 x body, 64 MiB) (SECURITY.md): :func:`request_cost` is that plus the body;
- admission by declared size: before a byte of the body is read, a request reserves its
  :func:`request_cost` from a memory pool of ``--decoders x request_cost(--max-body)`` (a
  memory-weighted semaphore); bodies of at most ``--small-body`` bytes go through a lane of their
  own (``--small-decoders`` at once), so a small request is answered at once while large ones are
  read and decoded. Peak memory above the idle process: at most :func:`memory_bound`, whatever the
  number of clients (``tests/test_server_limits.py``);
- one deadline per request covers the request line, the headers and the body (a client trickling
  one byte a second is answered 408 and dropped after ``--read-timeout``);
- every ``SamplingMaskError`` becomes a 400 with its code; nothing else is expected, and anything
  else becomes a 500 that names the exception (the load test counts those as failures).

Run: ``python examples/mask_server.py --port 8000`` (binds 127.0.0.1 by default). The load test
(``benchmarks/bench_server_load.py``) starts it on an ephemeral port and drives it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import socket
import sys
import threading
import time
import zlib
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
MiB = 1 << 20


def request_cost(size: int) -> int:
    """Bytes one request of a ``size``-byte body may hold: the body, and what its decode may grow
    under the untrusted preset, max(16 x size, 64 MiB) (SECURITY.md)."""
    return size + max(16 * size, 64 * MiB)


def memory_bound(max_body: int = MAX_BODY, decoders: int = DECODERS, small_decoders: int = SMALL_DECODERS) -> int:
    """The server's documented bound: peak memory above the idle process, in bytes (default 672 MiB)."""
    return decoders * request_cost(max_body) + small_decoders * request_cost(min(SMALL_BODY, max_body))


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


class _DeadlineSocket(io.RawIOBase):
    """The connection's reads, each given only what is left of the request's deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = float("inf")
        self.timed_out = False
        self.received = 0  # bytes of the current request

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.timed_out = True
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(left)
        try:
            count = self._sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True
            raise
        self.received += count
        return count


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
        self._raw = _DeadlineSocket(self.connection)
        self.rfile = io.BufferedReader(self._raw, 1 << 16)

    def handle_one_request(self) -> None:
        """One request under one deadline: the request line, the headers and the body together
        (http.server's own timeout is per read, so a trickling sender could hold it for ever)."""
        self._raw.deadline = time.monotonic() + self.server.read_timeout
        self._raw.timed_out = False
        self._raw.received = 0
        self._answered = False
        self.request_version, self.requestline, self.command = "HTTP/1.1", "", ""  # until parsed
        super().handle_one_request()
        # http.server drops a timed-out request silently: answer 408 when the client had started
        # one (an idle keep-alive connection is just closed).
        if self._raw.timed_out and self._raw.received and not self._answered:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._answer(408, {"ok": False, "message": "request too slow"})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: the load test sends tens of thousands of requests

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        self._answered = True
        self.connection.settimeout(self.server.read_timeout)  # writing the answer has its own time
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self, size: int) -> memoryview:
        """``size`` bytes (fewer if the client closes) read into one buffer, within the request's
        deadline; a read-only view, so the decoder reads it in place (no second copy)."""
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            count = self.rfile.readinto(view[got:])
            if not count:
                break
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
        length = self.headers.get("Content-Length")
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
        if not gate.reserve(cost, self.server.queue_timeout):  # nothing of the body read yet
            self.close_connection = True
            self._answer(503, {"ok": False, "message": "server busy; retry later"})
            return
        try:
            try:
                body = self._read_body(size)
            except TimeoutError:
                self.close_connection = True
                self._answer(408, {"ok": False, "message": "request body too slow"})
                return
            if len(body) < size:  # the client closed early
                self.close_connection = True
                self._answer(400, {"ok": False, "code": "E_BYTES", "message": "body shorter than Content-Length"})
                return
            status, answer = self.server.decode(body, fmt)
            del body
        finally:
            gate.release(cost)
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
    ) -> None:
        super().__init__(address, MaskHandler)
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.queue_timeout = queue_timeout
        self.requests = 0
        self.small_body = min(SMALL_BODY, max_body)
        self.memory_bound = memory_bound(max_body, decoders, small_decoders)
        self._large = MemoryGate(decoders * request_cost(max_body))
        self._small = MemoryGate(small_decoders * request_cost(self.small_body))
        self._count = threading.Lock()

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
    args = parser.parse_args(argv)
    server = MaskServer(
        (args.host, args.port),
        max_body=args.max_body,
        read_timeout=args.read_timeout,
        decoders=args.decoders,
        small_decoders=args.small_decoders,
        queue_timeout=args.queue_timeout,
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
