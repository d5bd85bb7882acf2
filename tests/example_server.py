"""The example server (examples/mask_server.py) as a child process on 127.0.0.1, and the raw-socket
client the server tests share (imported as ``from example_server import ...``).

The client writes requests byte for byte (hostile framings included) and reads answers with the
standard library's ``http.client``, until the server closes the connection: so a test sees every
answer the server gave on a connection, not only the first.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60.0  # seconds any socket of the server tests waits, at most
Answer = tuple[int, dict[str, Any]]


def serve(*flags: str) -> Iterator[int]:
    """Start the server with ``flags`` on a free port, yield the port, kill it at the end."""
    if not sys.platform.startswith("linux"):
        pytest.skip("peak RSS from /proc")
    command = [sys.executable, str(ROOT / "examples" / "mask_server.py"), "--port=0", *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on"), line
        yield int(line.rsplit(":", 1)[1])
    finally:
        proc.kill()
        proc.wait(timeout=10)


def head(length: int | str | None, *extra: str, target: str = "/decode") -> bytes:
    """A POST head declaring ``length`` (none when None) with ``extra`` header lines, ``Connection: close``."""
    lines = [f"POST {target} HTTP/1.1", "Host: x"]
    lines += [f"Content-Length: {length}"] if length is not None else []
    return "\r\n".join([*lines, *extra, "Connection: close", "", ""]).encode()


def receive_all(sock: socket.socket) -> bytes:
    """What ``sock`` receives until the server closes it (a reset after an answer ends it too)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(1 << 16)
        except ConnectionResetError:
            if chunks:
                break
            raise
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class _Received(io.BytesIO):
    """The received bytes as the socket ``http.client.HTTPResponse`` reads from (its file stays open
    after an answer that closes the connection, for the next answer's bytes)."""

    def makefile(self, mode: str) -> _Received:
        return self

    def close(self) -> None:
        pass


def parse_answers(raw: bytes) -> list[Answer]:
    """Every answer in ``raw``, in order: (status, JSON body) each, read by ``http.client``."""
    stream, found = _Received(raw), []
    while stream.tell() < len(raw):
        response = http.client.HTTPResponse(stream)  # type: ignore[arg-type]
        response.begin()
        body = response.read()
        found.append((response.status, json.loads(body or b"{}")))
    return found


def answers(port: int, data: bytes, *, timeout: float = TIMEOUT) -> list[Answer]:
    """Send ``data`` on a connection of its own; every answer the server gave before closing it."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except OSError:  # the server answered and closed before taking all of it
            pass
        return parse_answers(receive_all(sock))


def exchange(port: int, data: bytes, *, timeout: float = TIMEOUT) -> Answer:
    """The one answer to ``data`` (a connection that gets two answers or none fails the test)."""
    found = answers(port, data, timeout=timeout)
    assert len(found) == 1, found
    return found[0]


def post(port: int, body: bytes, *extra: str) -> Answer:
    return exchange(port, head(len(body), *extra) + body)


def stats(port: int) -> dict[str, Any]:
    return exchange(port, b"GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[1]
