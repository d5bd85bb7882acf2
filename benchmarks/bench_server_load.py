"""Load test of the example server (examples/mask_server.py) under mixed, partly hostile traffic
and floods, beside the server it replaced.

    python benchmarks/bench_server_load.py                      # 32 clients, 20,000 requests
    python benchmarks/bench_server_load.py --clients 64 --requests 50000 --json out.json
    python benchmarks/bench_server_load.py --no-old             # the example server alone

Starts the server on 127.0.0.1 (an ephemeral port, loopback only) in a child process and sends a
fixed, seeded mix of requests from ``--clients`` threads, one connection each:

- ``valid``: realistic masks (``synthetic.rollout``, 46% singleton rows, mean ~8 ids) of 500 to 4,000
  rows in msgpack, Arrow IPC file and zstd stream, Parquet, json and json-rows;
- ``amplification``: every input of SECURITY.md's amplification table (``tests/amplification_payloads.py``);
- ``truncated``: a valid body cut short (a complete HTTP request); ``corrupted``: 1 to 8 bytes flipped;
- ``short``: fewer body bytes than Content-Length, then the client closes its side;
- ``slow``: a valid body sent in 8 pieces 30 ms apart; ``stalled``: half a body, then silence past
  the server's stall timeout.

Then the floods (:func:`floods`; ``--no-floods`` skips them), on a fresh server with its default
settings: a header flood of 48 connections; a
20 B and a 200 KB request timed beside 4 clients that declare a body and send nothing; two
Content-Length headers; a body framed by both Content-Length and Transfer-Encoding with a
``GET /stats`` inside it; 64 clients that send all but the last byte of a valid 7.7 MB body, then
the last bytes together; 22 small requests beside 70 connections that send part of a head and stop.
The peak RSS is read after the mix and after the floods.

Every answer is checked: valid and slow bodies get 200 with the mask's own summary (rows, segments,
ids and a CRC of ids and offsets), amplification inputs their exact error code, truncated and
corrupted bodies 200 or 400 with a spec error code (a flipped id can still be a valid mask), short
bodies 400 ``E_BYTES`` or a closed connection (the client has gone), stalled ones 408. A 500, a
refused or reset connection or a wrong answer is an error. Prints throughput, latency percentiles,
the server's peak RSS over its idle size, and the errors; exit status 1 on any error of the example
server, a dead server, or a peak above ``--rss-bound-mib``. Stops by itself: bounded request count,
``--max-seconds`` for the whole run, and a timeout per request.

Unless ``--no-old``, the same run then drives the server this example replaced (a stdlib
``ThreadingHTTPServer`` that parsed HTTP itself), taken from git history at ``OLD_SERVER`` into a
temporary folder, and prints its figures beside the example's (its wrong answers are reported, not
counted as errors of this run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "tests")]

from amplification_payloads import PAYLOADS  # noqa: E402
from mask_server import summary  # noqa: E402

import sampling_mask  # noqa: E402
from sampling_mask.data.synthetic import rollout  # noqa: E402

#: Share of each kind in the mix (the rest of the requests are valid).
MIX = {"amplification": 0.08, "truncated": 0.08, "corrupted": 0.08, "short": 0.02, "slow": 0.03, "stalled": 0.004}
VALID_FORMATS = ("msgpack", "arrow", "arrows", "parquet", "json", "json-rows")
REQUEST_TIMEOUT = 60.0
#: The commit whose examples/mask_server.py is the replaced server (--no-old skips it).
OLD_SERVER = "bef4c69"
SMUGGLED = b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass
class Request:
    kind: str
    body: bytes
    fmt: str | None
    expect: Any  # a summary dict, an error code, a set of statuses


@dataclass
class Result:
    kind: str
    seconds: float
    error: str | None


def _corpus(seed: int) -> tuple[list[Request], list[Request]]:
    """(valid requests, hostile requests) to draw from."""
    valid = []
    for i, fmt in enumerate(VALID_FORMATS * 2):
        mask = rollout(500 + 700 * i, seed=seed + i)
        if fmt == "json-rows":
            mask = sampling_mask.SamplingMask(mask.ids, mask.offsets)
        opts: dict[str, Any] = {"compression": "zstd"} if fmt == "arrows" else {}
        body = sampling_mask.encode(mask, fmt, **opts)
        valid.append(Request("valid", body, fmt, summary(mask)))
    hostile = [Request("amplification", build(), fmt, code) for build, fmt, code in PAYLOADS.values()]
    return valid, hostile


def _plan(count: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    valid, amplification = _corpus(seed)
    requests = []
    kinds = list(MIX)
    weights = [MIX[k] for k in kinds] + [1 - sum(MIX.values())]
    for kind in rng.choices([*kinds, "valid"], weights=weights, k=count):
        base = rng.choice(valid)
        if kind == "valid":
            requests.append(base)
        elif kind == "amplification":
            requests.append(rng.choice(amplification))
        elif kind == "truncated":
            cut = rng.randrange(0, len(base.body))
            requests.append(Request(kind, base.body[:cut], base.fmt, None))
        elif kind == "corrupted":
            body = bytearray(base.body)
            for _ in range(rng.randint(1, 8)):
                body[rng.randrange(len(body))] = rng.randrange(256)
            requests.append(Request(kind, bytes(body), base.fmt, None))
        else:  # short, slow, stalled: the transport misbehaves, the body is valid
            requests.append(Request(kind, base.body, base.fmt, base.expect))
    return requests


def _send(port: int, request: Request, read_timeout: float) -> tuple[int, dict[str, Any]]:
    """One request on its own connection; (status, JSON answer)."""
    path = "/decode" + (f"?format={request.fmt}" if request.fmt else "")
    body = request.body
    declared = len(body) + (100 if request.kind == "short" else 0)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {declared}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) as sock:
        sock.sendall(head.encode())
        if request.kind == "slow":
            step = -(-len(body) // 8)
            for start in range(0, len(body), step):
                sock.sendall(body[start : start + step])
                time.sleep(0.03)
        elif request.kind == "stalled":
            sock.sendall(body[: len(body) // 2])
            time.sleep(read_timeout + 1.0)
        else:
            sock.sendall(body)
        if request.kind == "short":
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw:
        return 0, {}  # closed without an answer
    header, _, payload = raw.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    return status, json.loads(payload)


def _check(request: Request, status: int, answer: dict[str, Any]) -> str | None:
    """None when the answer is right, else what is wrong."""
    kind = request.kind
    if kind in ("valid", "slow"):
        return None if status == 200 and answer == request.expect else f"expected the summary, got {status} {answer}"
    if kind == "amplification":
        ok = status == 400 and answer.get("code") == request.expect
        return None if ok else f"expected 400 {request.expect}, got {status} {answer}"
    if kind in ("truncated", "corrupted"):
        ok = status == 200 or (status == 400 and str(answer.get("code", "")).startswith("E_"))
        return None if ok else f"expected 200 or 400 E_*, got {status} {answer}"
    if kind == "short":  # the client closed its side: an answer it may never read, or none
        ok = status == 0 or (status == 400 and answer.get("code") == "E_BYTES")
        return None if ok else f"expected 400 E_BYTES or no answer, got {status}"
    return None if status == 408 else f"expected 408, got {status} {answer}"  # stalled


def _run_one(port: int, request: Request, read_timeout: float) -> Result:
    start = time.perf_counter()
    try:
        status, answer = _send(port, request, read_timeout)
        error = _check(request, status, answer)
    except (OSError, ValueError, IndexError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    return Result(request.kind, time.perf_counter() - start, error)


def _stats(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) as sock:
        sock.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    return json.loads(raw.partition(b"\r\n\r\n")[2])  # type: ignore[no-any-return]


def _start_server(args: argparse.Namespace | None, server: Path) -> tuple[subprocess.Popen[str], int]:
    """``server`` on a free port, with the mix's settings from ``args`` (None: the server's defaults)."""
    command = [sys.executable, str(server), "--port=0"]
    if args is not None:
        command += [f"--read-timeout={args.read_timeout}", f"--decoders={args.decoders}", f"--max-body={args.max_body}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on"):
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    return proc, int(line.rsplit(":", 1)[1])


def _raw_answers(port: int, data: bytes) -> list[int]:
    """Send ``data`` on a connection of its own (the server may close it early); the status of every
    answer it got before the server closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) as sock:
        try:
            sock.sendall(data)
        except OSError:  # answered and closed before taking it all
            pass
        raw = b"".join(iter(lambda: sock.recv(1 << 16), b""))
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]  # an answer may follow a body directly


def _raw_exchange(port: int, data: bytes) -> int:
    """The status of the first answer to ``data``."""
    return _raw_answers(port, data)[0]


def _header_floods(port: int, max_body: int) -> dict[str, Any]:
    """48 connections each sending 97 header lines of 64 KB (each answered 431); 4 clients that
    declare ``max_body`` and send nothing while a 20 B and a 200 KB request are timed (answered at
    once: the silent clients hold no reservation); two conflicting Content-Length headers (400).
    Returns the statuses and the two latencies; ``errors`` lists wrong answers."""
    line = b"X-Pad: " + b"a" * (64_000 - 9) + b"\r\n"
    flood = b"POST /decode HTTP/1.1\r\nHost: x\r\n" + line * 97 + b"Content-Length: 0\r\n\r\n"

    def flooded(_: int) -> str:
        try:
            return str(_raw_exchange(port, flood))
        except (OSError, ValueError, IndexError) as exc:
            return type(exc).__name__

    with ThreadPoolExecutor(48) as pool:
        statuses = list(pool.map(flooded, range(48)))
    head = "POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n"
    silent = [socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) for _ in range(4)]
    timed: dict[str, float] = {}
    small_statuses = []
    try:
        for sock in silent:
            sock.sendall(head.format(max_body).encode())
        mask = sampling_mask.SamplingMask.from_rows([[1, 2]] * 16_000)
        for label, body in (("20 B", b"[[1,2],[1,2],[1,2]]"), ("200 KB", sampling_mask.encode(mask, "msgpack"))):
            start = time.perf_counter()
            small_statuses.append(_raw_exchange(port, head.format(len(body)).encode() + body))
            timed[f"{label} ({len(body):,} bytes)"] = round(1e3 * (time.perf_counter() - start), 2)
    finally:
        for sock in silent:
            sock.close()
    twice = _raw_exchange(
        port, head.format(5).replace("\r\n\r\n", "\r\nContent-Length: 500\r\n\r\n").encode() + b"[[1]]"
    )
    errors = [f"header flood: {s}" for s in statuses if s not in ("431", "ConnectionResetError")]
    errors += [f"beside silent bodies: {s}" for s in small_statuses if s != 200]
    errors += [] if twice == 400 else [f"two Content-Length headers: {twice}"]
    return {
        "header_flood_answers": {s: statuses.count(s) for s in sorted(set(statuses))},
        "beside_4_silent_bodies_ms": timed,
        "two_content_lengths": twice,
        "errors": errors,
    }


def _smuggling(port: int) -> dict[str, Any]:
    """One request with ``Content-Length`` (framing only the chunk-size line) and ``Transfer-Encoding:
    chunked``, a ``GET /stats`` inside the chunk: the statuses of every answer on the connection (one
    refusal, and the connection closed; a second answer is the smuggled GET)."""
    chunk = b"%x\r\n" % len(SMUGGLED)
    head = f"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: {len(chunk)}\r\nTransfer-Encoding: chunked\r\n\r\n"
    statuses = _raw_answers(port, head.encode() + chunk + SMUGGLED + b"\r\n0\r\n\r\n")
    errors = [] if len(statuses) == 1 and statuses[0] >= 400 else [f"CL + TE: answers {statuses}"]
    return {"answers": statuses, "errors": errors}


def _completed_together(port: int, clients: int = 64) -> dict[str, Any]:
    """``clients`` clients each send all but the last byte of a valid 7.7 MB msgpack body, then (once
    all have, or after 1.5 s: within the server's 2 s stall timeout) the last bytes together: the
    statuses, and the seconds from the last bytes to the first and to the last answer."""
    mask = rollout(160_000, seed=3)
    body, expected = sampling_mask.encode(mask, "msgpack"), summary(mask)
    head = f"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    together = threading.Barrier(clients)
    released: list[float] = []
    answered: list[tuple[float, str]] = []

    def client(_: int) -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) as sock:
                sock.sendall(head.encode() + body[:-1])
                try:
                    together.wait(1.5)
                except threading.BrokenBarrierError:
                    pass
                released.append(time.perf_counter())
                sock.sendall(body[-1:])
                raw = b"".join(iter(lambda: sock.recv(1 << 16), b""))
            status = int(raw.split(b" ", 2)[1])
            ok = status != 200 or json.loads(raw.partition(b"\r\n\r\n")[2]) == expected
            outcome = str(status) if ok else "200 with a wrong summary"
        except (OSError, ValueError, IndexError) as exc:
            outcome = type(exc).__name__
        answered.append((time.perf_counter(), outcome))

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    outcomes = [o for _, o in answered]
    start = min(released) if released else float("nan")
    times = sorted(t - start for t, _ in answered)
    return {
        "answers": {o: outcomes.count(o) for o in sorted(set(outcomes))},
        "first_answer_s": round(times[0], 2),
        "last_answer_s": round(times[-1], 2),
        "errors": [f"bodies completed together: {o}" for o in sorted(set(outcomes)) if o != "200"],
    }


def _slow_heads(port: int, slow: int = 70, small: int = 22) -> dict[str, Any]:
    """``slow`` connections each send part of a head and stop; then ``small`` small requests, sent
    together: their statuses and latencies (ms)."""
    body = sampling_mask.encode(sampling_mask.SamplingMask.from_rows([[1, 2], [], [3]], vocab_size=8), "msgpack")
    request = f"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    held = [socket.create_connection(("127.0.0.1", port), timeout=REQUEST_TIMEOUT) for _ in range(slow)]

    def one(_: int) -> tuple[str, float]:
        start = time.perf_counter()
        try:
            status = str(_raw_exchange(port, request.encode() + body))
        except (OSError, ValueError, IndexError) as exc:
            status = type(exc).__name__
        return status, 1e3 * (time.perf_counter() - start)

    try:
        for sock in held:
            sock.sendall(b"POST /decode HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        with ThreadPoolExecutor(small) as pool:
            results = list(pool.map(one, range(small)))
    finally:
        for sock in held:
            sock.close()
    statuses = [s for s, _ in results]
    latencies = [ms for _, ms in results]
    return {
        "answers": {s: statuses.count(s) for s in sorted(set(statuses))},
        "latency_ms": {"p50": round(percentile(latencies, 0.5), 2), "max": round(max(latencies), 2)},
        "errors": [f"beside slow heads: {s}" for s in sorted(set(statuses)) if s != "200"],
    }


def floods(port: int, max_body: int) -> dict[str, Any]:
    """Every flood, after the mix, each with its statuses, latencies and wrong answers (``errors``)."""
    figures = {
        "headers": _header_floods(port, max_body),
        "cl_plus_te": _smuggling(port),
        "bodies_completed_together": _completed_together(port),
        "slow_heads": _slow_heads(port),
    }
    errors = [e for part in figures.values() for e in part.pop("errors")]
    return {**figures, "errors": errors}


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _floods_on(server: Path) -> dict[str, Any]:
    """:func:`floods` against a fresh ``server`` with its default settings, and its peak RSS growth
    over them against its documented bound."""
    proc, port = _start_server(None, server)
    try:
        before = _stats(port)
        figures = floods(port, 8 << 20)
        alive = proc.poll() is None
        peak = _stats(port)["peak_rss_mib"] if alive else float("nan")
    finally:
        _stop(proc)
    growth = round(peak - before["rss_mib"], 1)
    figures["server_alive"], figures["peak_growth_mib"] = alive, growth
    figures["rss_bound_mib"] = round(before["memory_bound_mib"], 1)
    if not alive or not growth <= before["memory_bound_mib"]:
        figures["errors"].append(f"after the floods: alive {alive}, peak growth {growth} MiB")
    return figures


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def replaced_server(folder: Path) -> Path | None:
    """The server this example replaced, from git history (``OLD_SERVER``) into ``folder``; None
    without git or that commit."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{OLD_SERVER}:examples/mask_server.py"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    path = folder / "replaced_mask_server.py"
    path.write_bytes(source)
    return path


def run(args: argparse.Namespace, server: Path = ROOT / "examples" / "mask_server.py") -> dict[str, Any]:
    """The mix, then the floods, against ``server``: its figures (see the module docstring)."""
    requests = _plan(args.requests, args.seed)
    largest = max(len(r.body) for r in requests)
    proc, port = _start_server(args, server)
    try:
        for request in requests[:20]:  # warm up imports and pools before the idle size is taken
            if request.kind == "valid":
                _run_one(port, request, args.read_timeout)
        before = _stats(port)
        idle, bound = before["peak_rss_mib"], before["memory_bound_mib"]  # the server's documented bound
        stop = threading.Event()
        timer = threading.Timer(args.max_seconds, stop.set)
        timer.start()
        start = time.perf_counter()
        results: list[Result] = []
        with ThreadPoolExecutor(args.clients) as pool:

            def one(request: Request) -> Result:
                if stop.is_set():
                    return Result(request.kind, 0.0, "not sent: --max-seconds ran out")
                return _run_one(port, request, args.read_timeout)

            results = list(pool.map(one, requests))
        wall = time.perf_counter() - start
        timer.cancel()
        alive = proc.poll() is None
        peak = _stats(port)["peak_rss_mib"] if alive else float("nan")
    finally:
        _stop(proc)
    flooded = _floods_on(server) if getattr(args, "floods", True) else None
    errors = [r for r in results if r.error]
    by_kind: dict[str, int] = {}
    for r in results:
        by_kind[r.kind] = by_kind.get(r.kind, 0) + 1
    fast = [r.seconds for r in results if r.kind not in ("slow", "stalled")]
    valid = [r.seconds for r in results if r.kind == "valid"]
    return {
        "requests": len(results),
        "clients": args.clients,
        "by_kind": by_kind,
        "seconds": round(wall, 2),
        "throughput_rps": round(len(results) / wall, 1),
        "latency_ms": {
            "p50": round(1e3 * percentile(fast, 0.50), 2),
            "p99": round(1e3 * percentile(fast, 0.99), 2),
            "valid_p50": round(1e3 * percentile(valid, 0.50), 2),
            "valid_p99": round(1e3 * percentile(valid, 0.99), 2),
            "valid_mean": round(1e3 * statistics.fmean(valid), 2) if valid else None,
        },
        "server_alive": alive,
        "idle_rss_mib": round(idle, 1),
        "peak_rss_mib": round(peak, 1),
        "peak_growth_mib": round(peak - idle, 1),
        "rss_bound_mib": round(args.rss_bound_mib if args.rss_bound_mib else bound, 1),
        "largest_body_bytes": largest,
        "floods": flooded,
        "errors": len(errors) + len(flooded["errors"] if flooded else []),
        "error_examples": (flooded["errors"] if flooded else [])[:5]
        + sorted({f"{r.kind}: {r.error}"[:300] for r in errors})[:10],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--decoders", type=int, default=4, help="server: decodes at once")
    parser.add_argument("--read-timeout", type=float, default=2.0, help="server: seconds to send a request")
    parser.add_argument("--max-body", type=int, default=8 << 20, help="server: largest body")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="stop sending after this long")
    parser.add_argument("--rss-bound-mib", type=float, default=0.0, help="default: the server's memory_bound()")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--no-floods", dest="floods", action="store_false", help="skip the floods")
    parser.add_argument("--no-old", dest="old", action="store_false", help="skip the replaced server")
    args = parser.parse_args(argv)
    figures = {"example_server": run(args)}
    with tempfile.TemporaryDirectory(prefix="bench-server-") as folder:
        old = replaced_server(Path(folder)) if args.old else None
        if old is not None:
            figures["replaced_server"] = run(args, old)
        elif args.old:
            figures["replaced_server"] = {"skipped": f"no git history with {OLD_SERVER}"}
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    ours = figures["example_server"]
    ok = ours["errors"] == 0 and ours["server_alive"] and ours["peak_growth_mib"] <= ours["rss_bound_mib"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
