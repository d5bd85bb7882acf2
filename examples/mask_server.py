"""An example HTTP service that accepts sampling masks from the network, on the stack vLLM and SGLang
serve through: uvicorn (with its h11 protocol) and Starlette. ``pip install 'sampling-mask[serve]'``.

``POST /decode`` (optional ``?format=msgpack|arrows|json|...``; detected from the bytes otherwise)
with the encoded mask as the body. Answers ``200 {"ok": true, "num_rows", "num_segments", "nnz",
"checksum"}`` or ``400 {"ok": false, "code": "E_...", "message"}``. ``GET /stats`` reports requests
served and the process's peak RSS. Every answer is JSON, the refusals before a request reaches the
application included; every refusal closes its connection.

What keeps it up under hostile input (each tested in ``tests/test_server_limits.py`` /
``tests/test_server_floods.py`` / ``tests/test_server_hostile.py``, and shown by
``benchmarks/bench_server_load.py``):

- **Framing is h11's.** uvicorn runs with ``http="h11"`` (never httptools), ``loop="asyncio"``. The
  request line, the headers, ``Content-Length`` and chunked bodies are read by h11 only, and this
  file holds no HTTP parsing: what h11 refuses is answered with the status h11 names (400; 431 for
  an unfinished head past ``HEADER_BYTES``; 501 for a transfer coding it does not know), conflicting
  ``Content-Length`` values included. A request that carries ``Transfer-Encoding`` is refused
  before its body is read: with ``Content-Length`` too it is 400 (RFC 9112 section 6.1: reject),
  without it 411 (a body is reserved for by its declared size before it is read); its connection is
  closed, so nothing inside such a body is ever answered as a request. ``Content-Length`` above
  ``--max-body`` is 413.
- **Headers are bounded.** At most ``HEADER_BYTES`` (32 KiB) of request line and headers: h11 stops
  an unfinished head at that size (``h11_max_incomplete_event_size``), and a finished head above it
  is 431 before any routing.
- **Time is bounded.** The request line and headers must arrive within ``--header-timeout`` of the
  connection's opening or of its previous answer (408, or the idle connection is closed): uvicorn
  times only idle keep-alive connections, so :class:`GuardedH11Protocol` adds that deadline. Once a
  body has begun, no read waits more than ``--stall-timeout`` and the whole body arrives within
  ``--read-timeout`` of its admission (408, and its reservation is given back at once).
- **Connections are bounded.** At most ``--max-connections`` are open at once; one more is answered
  503 and closed at once. An open connection holds at most ``CONNECTION_COST`` before its request is
  admitted (h11's buffer of an unfinished head, uvicorn's read-ahead of a body), and nothing of the
  memory lanes, so slow or silent clients below that cap cannot delay other requests.
- **Memory is reserved whole, in a bounded order.** Every body is decoded under
  ``Limits.for_untrusted_input(len(body))``, which grows memory by at most max(16 x body, 64 MiB)
  (SECURITY.md); :func:`request_cost` is that plus the body. Bodies of at most ``SMALL_BODY``
  (64 KiB) have a lane of their own (``--small-decoders x request_cost(64 KiB)``), larger ones share
  ``--decoders x request_cost(--max-body)``. When a body's first bytes have come (a client that
  declares a body and sends nothing holds no reservation, and is answered 408 after the stall
  timeout), the request takes its whole cost from its lane in one step, first come first served,
  waiting at most ``--queue-timeout`` while holding nothing (503 after it); only then is the rest of
  its body read, into a buffer whose pages appear as bytes arrive. A request that holds a
  reservation needs nothing more to finish, and one that waits holds nothing, so no set of bodies
  can wedge a lane: admitted requests finish (or are answered 408 at their stall timeout) and the
  next in line is admitted.
- Peak memory above the idle process: at most :func:`memory_bound` (800 MiB by default: the two
  lanes and ``--max-connections x CONNECTION_COST``), whatever the clients send.
- Every ``SamplingMaskError`` becomes a 400 with its code; anything else becomes a 500 that names
  the exception (the load test counts those as failures).

Run: ``python examples/mask_server.py --port 8000`` (binds 127.0.0.1 by default; ``--port 0``: any
free port, printed). The load test (``benchmarks/bench_server_load.py``) starts it on an ephemeral
port and drives it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import mmap
import resource
import socket
import sys
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import sampling_mask
from sampling_mask import Limits, SamplingMask, SamplingMaskError

try:
    import h11
    import uvicorn
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from uvicorn.protocols.http.h11_impl import H11Protocol
except ModuleNotFoundError as exc:  # the example's own dependencies: an optional extra
    message = f"{exc}: the example server needs pip install 'sampling-mask[serve]'"
    raise ModuleNotFoundError(message, name=exc.name) from None

MiB = 1 << 20
MAX_BODY = 8 << 20  # bytes
HEADER_TIMEOUT = 5.0  # seconds for the request line and headers
READ_TIMEOUT = 5.0  # seconds for a body, from its admission
STALL_TIMEOUT = 2.0  # seconds one read of a started body may wait
QUEUE_TIMEOUT = 30.0  # seconds a request may wait for memory, holding nothing, before a 503
DECODERS = 4  # decodes of --max-body bytes at once (smaller bodies weigh less)
SMALL_BODY = 64 << 10  # bytes: bodies up to this size have a lane of their own ...
SMALL_DECODERS = 2  # ... with this many decodes at once
MAX_CONNECTIONS = 256  # connections open at once; one more is answered 503
HEADER_BYTES = 32 << 10  # the request line and headers of one request, at most (else 431)
#: What one open connection may hold before its request is admitted: h11's buffer of an unfinished
#: head (HEADER_BYTES), uvicorn's read-ahead of a body (64 KiB, plus one 256 KiB read of asyncio's
#: transport) and the connection's own objects.
CONNECTION_COST = 512 << 10


def request_cost(size: int) -> int:
    """Bytes one request of a ``size``-byte body may hold: the body, and what its decode may grow
    under the untrusted preset, max(16 x size, 64 MiB) (SECURITY.md)."""
    return size + max(16 * size, 64 * MiB)


def memory_bound(
    max_body: int = MAX_BODY,
    decoders: int = DECODERS,
    small_decoders: int = SMALL_DECODERS,
    max_connections: int = MAX_CONNECTIONS,
) -> int:
    """The server's documented bound: peak memory above the idle process, in bytes (default 800 MiB):
    the two lanes' pools and what the open connections may hold before admission."""
    lanes = decoders * request_cost(max_body) + small_decoders * request_cost(min(SMALL_BODY, max_body))
    return lanes + max_connections * CONNECTION_COST


@dataclass(frozen=True)
class Settings:
    """The server's limits (the command line's flags)."""

    max_body: int = MAX_BODY
    header_timeout: float = HEADER_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    stall_timeout: float = STALL_TIMEOUT
    queue_timeout: float = QUEUE_TIMEOUT
    decoders: int = DECODERS
    small_decoders: int = SMALL_DECODERS
    max_connections: int = MAX_CONNECTIONS

    @property
    def memory_bound(self) -> int:
        return memory_bound(self.max_body, self.decoders, self.small_decoders, self.max_connections)


class MemoryGate:
    """A memory-weighted semaphore on one event loop, first come first served: :meth:`reserve` takes
    ``cost`` bytes of the pool in one step. A waiter holds nothing while it waits, and one that
    cannot be served blocks the waiters behind it (so a large request is never passed over for
    ever by smaller ones)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def reserve(self, cost: int, timeout: float) -> bool:
        """Take ``cost`` bytes (at most the capacity) within ``timeout`` seconds; False when it could not."""
        cost = min(cost, self.capacity)
        if not self._waiting and self.free >= cost:
            self.free -= cost
            return True
        entry = (cost, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(entry[1]), timeout)
            return True
        except asyncio.TimeoutError:
            return self._withdraw(entry)
        except BaseException:
            if self._withdraw(entry):
                self.release(cost)
            raise

    def release(self, cost: int) -> None:
        self.free += min(cost, self.capacity)
        self._grant()

    def _withdraw(self, entry: tuple[int, asyncio.Future[None]]) -> bool:
        """Leave the queue; True when the reservation was granted as the wait ended (the caller holds it)."""
        if entry[1].done():
            return True
        self._waiting.remove(entry)
        entry[1].cancel()
        self._grant()  # the next in line may fit now
        return False

    def _grant(self) -> None:
        while self._waiting and self.free >= self._waiting[0][0]:
            cost, granted = self._waiting.popleft()
            self.free -= cost
            granted.set_result(None)


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


def refusal(status: int, message: str, **fields: Any) -> JSONResponse:
    """A JSON refusal that closes its connection (any body still on the way is never read)."""
    return JSONResponse({"ok": False, **fields, "message": message}, status, headers={"connection": "close"})


class _Refused(Exception):
    """A request answered before its body was read whole (408, 503, a client gone)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class MaskService:
    """The application: routes, the two lanes and the decoder threads (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.small_body = min(SMALL_BODY, settings.max_body)
        self.large = MemoryGate(settings.decoders * request_cost(settings.max_body))
        self.small = MemoryGate(settings.small_decoders * request_cost(self.small_body))
        self.decoders = ThreadPoolExecutor(settings.decoders + settings.small_decoders, "decode")
        self.requests = 0
        handlers = {HTTPException: self._http_error}
        routes = [Route("/decode", self.decode, methods=["POST"]), Route("/stats", self.stats, methods=["GET"])]
        self.app = Starlette(routes=routes, exception_handlers=handlers)  # type: ignore[dict-item]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Refuse a finished head above ``HEADER_BYTES`` (h11 bounds an unfinished one), then route."""
        if scope["type"] == "http":
            head = (
                len(scope["raw_path"]) + len(scope["query_string"]) + sum(len(k) + len(v) for k, v in scope["headers"])
            )
            if head > HEADER_BYTES:
                await refusal(431, f"request line and headers over {HEADER_BYTES} bytes")(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        return JSONResponse({"ok": False, "message": HTTPStatus(status).phrase}, status)

    async def stats(self, request: Request) -> Response:
        bound = self.settings.memory_bound / MiB
        return JSONResponse({"ok": True, "requests": self.requests, "memory_bound_mib": bound, **memory_mib()})

    async def decode(self, request: Request) -> Response:
        headers = request.headers
        if "transfer-encoding" in headers:
            if "content-length" in headers:  # two framings of one body: the request-smuggling class
                return refusal(400, "both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)")
            return refusal(411, "Content-Length required: a body is reserved for by its size before it is read")
        if "content-length" not in headers:
            return refusal(411, "Content-Length required")
        size = int(headers["content-length"])  # h11 checked it: one value of at most 20 digits
        if size > self.settings.max_body:
            return refusal(413, f"body over {self.settings.max_body} bytes")
        lane = self.small if size <= self.small_body else self.large
        cost = request_cost(size)
        try:
            first = await self._receive(request, self.settings.stall_timeout) if size else (b"", False)
            if not await lane.reserve(cost, self.settings.queue_timeout):
                return refusal(503, "server busy; retry later")
            try:
                body = await self._read_body(request, size, first)
                fmt = request.query_params.get("format")
                self.requests += 1
                loop = asyncio.get_running_loop()
                status, answer = await loop.run_in_executor(self.decoders, self._decode_body, body, fmt)
                del body
            finally:
                lane.release(cost)
        except _Refused as refused:
            return refusal(refused.status, refused.message)
        return JSONResponse(answer, status)

    async def _receive(self, request: Request, timeout: float) -> tuple[bytes, bool]:
        """The next piece of the body within ``timeout`` seconds: (bytes, more to come)."""
        try:
            message = await asyncio.wait_for(request.receive(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            raise _Refused(408, "request body too slow") from None
        if message["type"] != "http.request":  # the client went away
            raise _Refused(400, "body shorter than Content-Length")
        return message.get("body", b""), message.get("more_body", False)

    async def _read_body(self, request: Request, size: int, first: tuple[bytes, bool]) -> memoryview:
        """The ``size``-byte body, its first piece already received, into one buffer within
        ``--read-timeout`` (no read waiting more than ``--stall-timeout``); a read-only view, so the
        decoder reads it in place. A large body's buffer is an anonymous mapping whose pages appear
        as bytes arrive."""
        buffer: Any = bytearray(size) if size <= SMALL_BODY else mmap.mmap(-1, size)
        view = memoryview(buffer)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.read_timeout
        (piece, more), got = first, 0
        while True:
            if got + len(piece) > size:  # h11 frames by Content-Length: never more than declared
                raise _Refused(400, "body longer than Content-Length")
            view[got : got + len(piece)] = piece
            got += len(piece)
            if not more:
                break
            piece, more = await self._receive(request, min(self.settings.stall_timeout, deadline - loop.time()))
        if got != size:
            raise _Refused(400, "body shorter than Content-Length")
        return view.toreadonly()

    def _decode_body(self, body: memoryview, fmt: str | None) -> tuple[int, dict[str, Any]]:
        """In a decoder thread: the mask's summary (200), its error (400), or a bug named (500)."""
        try:
            mask = sampling_mask.decode(body, format=fmt, limits=Limits.for_untrusted_input(len(body)))
            return 200, summary(mask)
        except SamplingMaskError as exc:
            return 400, {"ok": False, "code": exc.code.value, "message": exc.message[:200]}
        except Exception as exc:  # a bug: reported, never a dead server
            return 500, {"ok": False, "code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"[:200]}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with what uvicorn leaves open: a deadline for the request line and
    headers, a cap on open connections, and h11's own status for what it refuses (431 for an
    unfinished head past its limit, where uvicorn answers 400). It reads no bytes itself: h11 parses,
    and its answers are written through h11."""

    def __init__(self, *args: Any, settings: Settings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = settings
        self._deadline: asyncio.TimerHandle | None = None
        self._request_started = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.server_state.connections) > self.settings.max_connections:
            self._refuse(503, "too many connections; retry later")
            return
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._request_started = True  # bytes of the next request's head have come
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_deadline()  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this while it handles h11's ``RemoteProtocolError``: answer the status h11
        names for it (``error_status_hint``: 431, 501, else 400), with h11's reason."""
        error = sys.exc_info()[1]
        status = error.error_status_hint if isinstance(error, h11.RemoteProtocolError) else 400
        self._refuse(status, f"{HTTPStatus(status).phrase}: {error or msg}"[:200])

    def _arm_header_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._request_started = False
        self._deadline = self.loop.call_later(self.settings.header_timeout, self._headers_overdue)

    def _headers_overdue(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return  # the head came in time: the application times the body
        if self._request_started:
            self._refuse(408, "request line and headers too slow")
        else:
            self.transport.close()  # an idle connection: nothing to answer

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` with a JSON body through h11, then close the connection."""
        if self.transport.is_closing():
            return
        body = json.dumps({"ok": False, "message": message}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        try:
            data = self.conn.send(h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase))
            data = (data or b"") + (self.conn.send(h11.Data(data=body)) or b"")
            data += self.conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # an answer was already begun on this connection
            data = b""
        self.transport.write(data)
        self.transport.close()


def make_server(settings: Settings, sock: socket.socket) -> uvicorn.Server:
    """A uvicorn server of :class:`MaskService` on the bound socket ``sock`` (h11, asyncio, quiet)."""
    config = uvicorn.Config(
        MaskService(settings),
        http=functools.partial(GuardedH11Protocol, settings=settings),  # type: ignore[arg-type]
        loop="asyncio",
        lifespan="off",
        h11_max_incomplete_event_size=HEADER_BYTES,
        timeout_keep_alive=max(1, round(settings.header_timeout)),
        backlog=settings.max_connections,
        log_config=None,
        log_level="error",
        access_log=False,
        server_header=False,
        date_header=False,
    )
    return uvicorn.Server(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    parser.add_argument("--max-body", type=int, default=MAX_BODY)
    parser.add_argument("--header-timeout", type=float, default=HEADER_TIMEOUT, help="seconds for the head")
    parser.add_argument("--read-timeout", type=float, default=READ_TIMEOUT, help="seconds for an admitted body")
    parser.add_argument("--stall-timeout", type=float, default=STALL_TIMEOUT, help="seconds a body read may wait")
    parser.add_argument("--queue-timeout", type=float, default=QUEUE_TIMEOUT, help="seconds to wait for memory")
    parser.add_argument("--decoders", type=int, default=DECODERS, help="decodes of --max-body bytes at once")
    parser.add_argument("--small-decoders", type=int, default=SMALL_DECODERS, help="small-body decodes at once")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, help="open connections at once")
    args = parser.parse_args(argv)
    settings = Settings(
        max_body=args.max_body,
        header_timeout=args.header_timeout,
        read_timeout=args.read_timeout,
        stall_timeout=args.stall_timeout,
        queue_timeout=args.queue_timeout,
        decoders=args.decoders,
        small_decoders=args.small_decoders,
        max_connections=args.max_connections,
    )
    sock = socket.create_server((args.host, args.port), backlog=settings.max_connections)
    host, port = sock.getsockname()[:2]
    print(f"listening on {host}:{port}", flush=True)
    make_server(settings, sock).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
