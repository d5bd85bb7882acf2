"""An example HTTP service that accepts sampling masks from the network (standard library only).

``POST /decode`` (optional ``?format=msgpack|arrows|json|...``; detected from the bytes otherwise)
with the encoded mask as the body. Answers ``200 {"ok": true, "num_rows", "num_segments", "nnz",
"checksum"}`` or ``400 {"ok": false, "code": "E_...", "message"}``; ``411`` without a
Content-Length, ``413`` above ``--max-body``, ``408`` for a sender slower than ``--read-timeout``.
``GET /stats`` reports requests served and the process's peak RSS.

What keeps it up under hostile input:

- every body is decoded under ``Limits.for_untrusted_input(len(body))``, so one decode grows memory
  by at most max(16 x body, 64 MiB) (SECURITY.md);
- the body size is capped before reading, and reading has a per-socket timeout (slow senders);
- at most ``--decoders`` decodes run at once (a semaphore), so the peak is bounded by
  ``decoders x max(16 x max_body, 64 MiB)`` above the idle process, whatever the number of clients;
- every ``SamplingMaskError`` becomes a 400 with its code; nothing else is expected, and anything
  else becomes a 500 that names the exception (the load test counts those as failures).

Run: ``python examples/mask_server.py --port 8000`` (binds 127.0.0.1 by default). The load test
(``benchmarks/bench_server_load.py``) starts it on an ephemeral port and drives it.
"""

from __future__ import annotations

import argparse
import json
import resource
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
DECODERS = 4  # decodes at once


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
        self.connection.settimeout(self.server.read_timeout)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # quiet: the load test sends tens of thousands of requests

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self, size: int) -> bytes:
        """``size`` bytes (fewer if the client closes), all within ``read_timeout`` seconds in total:
        a sender trickling one byte a second cannot hold a connection open for ever."""
        deadline = time.monotonic() + self.server.read_timeout
        parts, remaining = [], size
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError
            chunk = self.rfile.read1(min(remaining, 1 << 16))
            if not chunk:
                break
            parts.append(chunk)
            remaining -= len(chunk)
        return b"".join(parts)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if urlparse(self.path).path != "/stats":
            self._answer(404, {"ok": False, "message": "GET /stats or POST /decode"})
            return
        self._answer(200, {"ok": True, "requests": self.server.requests, **memory_mib()})

    def do_POST(self) -> None:  # noqa: N802
        url = urlparse(self.path)
        if url.path != "/decode":
            self._answer(404, {"ok": False, "message": "POST /decode"})
            return
        fmt = parse_qs(url.query).get("format", [None])[0]
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._answer(411, {"ok": False, "message": "Content-Length required"})
            return
        size = int(length)
        if size > self.server.max_body:
            self.close_connection = True
            self._answer(413, {"ok": False, "message": f"body over {self.server.max_body} bytes"})
            return
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
        self._answer(status, answer)


class MaskServer(ThreadingHTTPServer):
    """A threading HTTP server with a bounded number of concurrent decodes."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        *,
        max_body: int = MAX_BODY,
        read_timeout: float = READ_TIMEOUT,
        decoders: int = DECODERS,
    ) -> None:
        super().__init__(address, MaskHandler)
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.requests = 0
        self._decoders = threading.BoundedSemaphore(decoders)
        self._count = threading.Lock()

    def decode(self, body: bytes, fmt: str | None) -> tuple[int, dict[str, Any]]:
        with self._count:
            self.requests += 1
        try:
            with self._decoders:
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
    parser.add_argument("--decoders", type=int, default=DECODERS)
    args = parser.parse_args(argv)
    server = MaskServer(
        (args.host, args.port), max_body=args.max_body, read_timeout=args.read_timeout, decoders=args.decoders
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
