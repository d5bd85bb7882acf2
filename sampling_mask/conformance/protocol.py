"""The implementation protocol: one JSON request per case, exactly one JSON response.

Request (conformance/README.md, "Runner protocol")::

    {"id": CASE_ID, "op": "decode" | "encode" | "validate" | "score" | "concatenate" | "slice" | "take",
     "form": FORM, "input": PAYLOAD, "options": {...}?, "limits": {...}?}

Response: an object with exactly one of these keys (``id`` may be echoed)::

    {"ok": RESULT}                                a result: model mask, payload, true, or scores
    {"rejected": {"code": "E_...", "message": ...}} the input is invalid; ``code`` from the spec
    {"unsupported": "why"}                        the implementation does not do this op / form
    {"error": "what went wrong"}                  a crash or bug; never a verdict on the input

The first request of a run is ``{"id": "describe", "op": "describe"}``: an implementation may answer
``{"ok": {"classes": [CLASS, ...]}}`` (class names or globs, see :func:`suite.conformance_classes`)
to declare what it implements; ``unsupported`` (or anything else) declares nothing.

A Python implementation is any object with ``handle(request: dict) -> dict`` (a class is
instantiated without arguments; a bare function is used as ``handle``), named ``module:object``.
A program speaks the same JSON over stdin / stdout, one line each way per case, in order.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import queue
import shlex
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol, runtime_checkable

__all__ = [
    "DEFAULT_TIMEOUT",
    "DESCRIBE",
    "RESPONSE_KINDS",
    "CommandImplementation",
    "FunctionImplementation",
    "Implementation",
    "LaunchError",
    "RunStopped",
    "load_python_implementation",
    "response_kind",
    "serve",
]

RESPONSE_KINDS = ("ok", "rejected", "unsupported", "error")
#: The request that opens a run; its answer may declare the implementation's conformance classes.
DESCRIBE: dict[str, Any] = {"id": "describe", "op": "describe"}
#: Seconds a ``--command`` program has for each answer (the first answer after the first start gets
#: :data:`STARTUP_GRACE` more, for an interpreter or JIT warming up).
DEFAULT_TIMEOUT = 10.0
STARTUP_GRACE = 30.0


class LaunchError(Exception):
    """The program cannot be started, or exited or hung before answering its first request."""


class RunStopped(Exception):
    """A run that cannot go on: the program cannot be started or keeps crashing (exit status 2).

    It lives here, beside the protocol, so that the runner and the generated mode both import it
    (the runner re-exports it as ``runner.RunStopped``)."""


@runtime_checkable
class Implementation(Protocol):
    """What the runner drives: ``handle`` answers one request; ``close`` (optional) releases resources."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]: ...


def response_kind(response: Any, request_id: str | None = None) -> tuple[str, Any]:
    """``(kind, value)`` of a well-formed response; a malformed one is ``("error", why)``."""
    if not isinstance(response, Mapping):
        return "error", f"protocol: the response is not a JSON object: {response!r:.200}"
    if "id" in response and request_id is not None and response["id"] != request_id:
        return "error", f"protocol: response id {response['id']!r} answers another request"
    kinds = [k for k in RESPONSE_KINDS if k in response]
    if len(kinds) != 1:
        return "error", f"protocol: a response holds exactly one of {RESPONSE_KINDS}, got keys {sorted(response)}"
    kind = kinds[0]
    value = response[kind]
    if kind == "rejected":
        code = value.get("code") if isinstance(value, Mapping) else None
        if not isinstance(code, str):
            return "error", f"protocol: 'rejected' needs an object with a string 'code', got {value!r:.200}"
    return kind, value


class FunctionImplementation:
    """Adapts a plain ``handle(request) -> response`` function."""

    def __init__(self, function: Callable[[dict[str, Any]], dict[str, Any]], name: str) -> None:
        self._function = function
        self.name = name

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        return self._function(request)


def load_python_implementation(spec: str) -> Implementation:
    """The implementation named ``module:object`` (a class is instantiated; a function wrapped)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'module:object', got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as ``python -m`` does: a module beside you is found
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type):
        obj = obj()
    if hasattr(obj, "handle"):
        if not hasattr(obj, "name"):
            try:
                obj.name = spec
            except AttributeError:  # pragma: no cover - objects with __slots__
                pass
        return obj  # type: ignore[no-any-return]
    if callable(obj):
        return FunctionImplementation(obj, spec)
    raise TypeError(f"{spec} is neither an object with handle() nor a function")


class CommandImplementation:
    """Drives a program over JSON lines on its stdin / stdout: one process for the whole run,
    restarted only after it died or did not answer within ``timeout`` seconds (then ``crashed`` is
    true for that request). An answer that is not a JSON object is no answer to the protocol:
    ``garbled`` and ``crashed`` are true for that request, so ``--max-crashes`` stops a program that
    writes anything else. The last lines of its stderr are kept for reports. A program that cannot
    be started, or that dies or hangs before its first answer, raises :class:`LaunchError`.
    """

    def __init__(
        self,
        command: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        startup_grace: float = STARTUP_GRACE,
        cwd: str | None = None,
    ) -> None:
        self.command = command
        self.name = command
        self.timeout = timeout
        self.startup_grace = startup_grace
        self.cwd = cwd
        self._argv = shlex.split(command)
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.starts = 0
        self.answers = 0
        self.crashed = False
        self.garbled = False
        self._stderr_reader: threading.Thread | None = None

    def _start(self) -> subprocess.Popen[str]:
        if not self._argv:
            raise LaunchError("the command is empty")
        try:
            proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                bufsize=1,
                cwd=self.cwd,
            )
        except OSError as exc:
            raise LaunchError(f"cannot start {self._argv[0]!r}: {exc.strerror or exc}") from None
        self.starts += 1
        lines: queue.Queue[str | None] = queue.Queue()
        assert proc.stdout is not None and proc.stderr is not None
        threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True).start()
        self._stderr_reader = threading.Thread(target=_pump, args=(proc.stderr, self._keep_stderr), daemon=True)
        self._stderr_reader.start()
        self._proc, self._lines = proc, lines
        return proc

    def _keep_stderr(self, line: str | None) -> None:
        if line is not None:
            self.stderr_tail.append(line.rstrip("\n"))

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        self.crashed = self.garbled = False
        proc = self._proc if self._proc is not None and self._proc.poll() is None else self._start()
        assert proc.stdin is not None
        first = self.answers == 0
        try:
            proc.stdin.write(json.dumps(request, separators=(",", ":")) + "\n")
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            return self._crash(first, f"could not write the request ({exc})")
        timeout = self.timeout + (self.startup_grace if first and self.starts == 1 else 0.0)
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return self._crash(first, f"no response within {timeout:g} s", hung=True)
        if line is None:
            return self._crash(first, "the program exited")
        self.answers += 1
        try:
            response = json.loads(line)
        except ValueError:
            self.crashed = self.garbled = True
            return {"error": f"protocol: the response line is not JSON: {line.strip()!r:.200}"}
        if not isinstance(response, dict):
            self.crashed = self.garbled = True
            return {"error": f"protocol: the response is not a JSON object: {line.strip()!r:.200}"}
        return response

    def _crash(self, first: bool, what: str, *, hung: bool = False) -> dict[str, Any]:
        """Close the program; before any answer this is a :class:`LaunchError`, else an ``error``."""
        proc = self._proc
        self.close(kill=hung)
        status = None if proc is None or hung else proc.returncode
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=1.0)  # the last words on stderr explain the exit
        how = f"{what} (exit status {status})" if status is not None else what
        if first:
            raise LaunchError(f"{self.command!r} did not answer its first request: {how}; {self._stderr_hint()}")
        self.crashed = True
        return {"error": f"protocol: {how}; {self._stderr_hint()}"}

    def _stderr_hint(self) -> str:
        return "stderr: " + (" | ".join(self.stderr_tail) if self.stderr_tail else "(empty)")

    def close(self, *, kill: bool = False) -> None:
        """End the program: close its stdin and wait (``kill``: at once)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
            proc.wait()
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def _pump(stream: IO[str], put: Callable[[str | None], None]) -> None:
    for line in stream:
        put(line)
    put(None)


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats spelled ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def serve(implementation: Implementation, infile: IO[str] | None = None, outfile: IO[str] | None = None) -> int:
    """Answer JSON-line requests from ``infile`` until EOF: makes a Python implementation a program."""
    infile = infile if infile is not None else sys.stdin
    outfile = outfile if outfile is not None else sys.stdout
    for line in infile:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            response = implementation.handle(request)
        except Exception as exc:  # noqa: BLE001 - a crash is reported as an 'error' response
            response = {"error": f"{type(exc).__name__}: {exc}"}
        try:
            text = json.dumps(_json_safe(response), separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            text = json.dumps({"error": f"the response is not JSON: {exc}"})
        outfile.write(text + "\n")
        outfile.flush()
    return 0
