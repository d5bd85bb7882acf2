"""Generated cases through the runner protocol: ``sampling-mask conformance --generated N [--seed S]``.

For every conformance class the implementation claims (``--class`` or its ``describe`` answer; all
classes when it declares none), hypothesis draws N cases with the exported strategies
(:mod:`sampling_mask.conformance.strategies`) and sends them as ordinary requests:

- ``<form> reader``: N valid payloads (any row order, padding, values / hex spelling) that must
  decode to their mask, N *mutated* payloads (a byte or value changed, dropped or inserted) whose
  verdict must agree with the reference: both accept the same mask, or both reject (the codes may
  differ: a mutation can make several faults, SPEC 7), and N payloads under limits drawn at and
  just below their own sizes (SPEC 8.1);
- ``<form> writer``: N masks whose encoding the reference decodes back to the mask;
- ``model operations``: N concatenate / slice / take requests (compatible and incompatible masks,
  zero masks, bounds and segment indices in and out of range) answered as the reference answers;
- ``scorer``: N scorer payloads scored within 1e-6 of the reference, and N with a row of SPEC 13.2
  (targets of -1 or outside the support, bad temperatures, the exclude policy, ids beyond the logits).

A disagreement is shrunk by hypothesis to a minimal case, printed with the seed as a vector ready to
paste into a case file. Needs ``hypothesis`` (the ``test`` extra).

The same ``--generated N --seed S`` draws the same cases in any process, whatever ran before it,
with the same versions of hypothesis and of this package: every kind is drawn by a fresh run seeded
with ``S``, under hypothesis's built-in settings (never a loaded profile), with no example database,
and without hypothesis's pool of constants read from the modules a process has imported (which
would make the draws depend on what was imported before, and from where).
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

from .payloads import array_from_json, compare_masks, mask_to_json, metadata_kinds_differ, render
from .profile import default_output_findings
from .protocol import Implementation, RunStopped, response_kind
from .reference import BYTE_FORMS, ReferenceImplementation
from .suite import FORMS, class_matches

__all__ = ["GENERATED_CLASSES", "Disagreement", "mutated_payloads", "run_generated"]

#: The classes generated cases cover, in :data:`FORMS` order.
GENERATED_CLASSES = tuple(
    [f"{form} reader" for form in FORMS if form != "scorer"]
    + [f"{form} writer" for form in FORMS if form not in ("scorer", "model")]
    + ["model operations", "scorer"]
)
#: Ops whose ``ok`` answer is a model mask, compared with the reference's in canonical form.
_MASK_OPS = ("decode", "concatenate", "slice", "take")
_TOLERANCE = 1e-6


@dataclasses.dataclass
class Disagreement(Exception):
    """The implementation and the reference disagree on one request."""

    why: str
    request: dict[str, Any]
    expected: dict[str, Any]

    def __str__(self) -> str:
        return self.why


# ------------------------------------------------------------------------------------------ mutations
def mutated_payloads(form: str) -> Any:
    """A strategy of payloads of ``form`` with one drawn change: bytes flipped, cut or inserted (byte
    forms), or a typed array's value, dtype or shape changed, or a key dropped (array forms)."""
    from hypothesis import strategies as st

    from .strategies import payloads

    @st.composite
    def draw_one(draw: Any) -> dict[str, Any]:
        payload, _ = draw(payloads(form))
        if form in BYTE_FORMS and form != "compact":
            data = payload["text"].encode("utf-8") if "text" in payload else bytes.fromhex(payload["hex"])
            return {"hex": _mutate_bytes(draw, data).hex()}
        return _mutate_object(draw, payload)

    return draw_one()


def _mutate_bytes(draw: Any, data: bytes) -> bytes:
    from hypothesis import strategies as st

    how = draw(st.sampled_from(["set", "cut", "insert", "delete"]))
    at = draw(st.integers(0, max(len(data) - 1, 0)))
    value = draw(st.integers(0, 255))
    if how == "set" and data:
        return data[:at] + bytes([value]) + data[at + 1 :]
    if how == "cut":
        return data[:at]
    if how == "insert":
        return data[:at] + bytes([value]) + data[at:]
    return data[:at] + data[at + 1 :]


def _mutate_object(draw: Any, payload: dict[str, Any]) -> dict[str, Any]:
    from hypothesis import strategies as st

    keys = sorted(payload)
    key = draw(st.sampled_from(keys))
    out = dict(payload)
    item = out[key]
    if isinstance(item, dict) and "dtype" in item and "shape" in item:
        arr = array_from_json(item, field=key)
        how = draw(st.sampled_from(["value", "dtype", "shape", "drop"]))
        flat = arr.reshape(-1).tolist()
        if how == "value" and flat:
            flat[draw(st.integers(0, len(flat) - 1))] = draw(st.integers(-3, 70))
            out[key] = {"dtype": item["dtype"], "shape": list(arr.shape), "values": _nest(flat, list(arr.shape))}
        elif how == "dtype":
            dtype = draw(st.sampled_from(["int32", "int64", "uint8", "float32", "int16"]))
            out[key] = {**item, "dtype": dtype}
        elif how == "shape":
            out[key] = {**item, "shape": [*item["shape"], 1] if draw(st.booleans()) else item["shape"][:-1]}
        else:
            del out[key]
        return out
    if isinstance(item, list) and item and draw(st.booleans()):  # model rows and friends
        at = draw(st.integers(0, len(item) - 1))
        out[key] = [*item[:at], draw(st.sampled_from([[], -1, 1.5, "x", None, [0, 0]])), *item[at + 1 :]]
        return out
    if draw(st.booleans()):
        del out[key]
    else:
        out[key] = draw(st.sampled_from([None, -1, 0, 2**31, "1", [], {}]))
    return out


def _nest(flat: list[Any], shape: list[int]) -> Any:
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


# ------------------------------------------------------------------------------------------ checks
def _ask(implementation: Implementation, request: dict[str, Any]) -> tuple[str, Any]:
    try:
        return response_kind(implementation.handle(request), request["id"])
    except RunStopped:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash is a disagreement, not the runner's
        return "error", f"{type(exc).__name__}: {exc}"


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return abs(a - b) <= _TOLERANCE * max(1.0, abs(a))
    return bool(a == b)


def _agree(request: dict[str, Any], implementation: Implementation, reference: ReferenceImplementation) -> None:
    """Raise :class:`Disagreement` unless both answer alike (see the module docstring)."""
    want_kind, want = response_kind(reference.handle(request))
    got_kind, got = _ask(implementation, request)
    expected = {"ok": want} if want_kind == "ok" else {"error": want.get("code") if want_kind == "rejected" else want}
    if got_kind == "unsupported":
        raise Disagreement(f"answered unsupported: {got}", request, expected)
    if got_kind != want_kind or got_kind == "error":
        detail = got.get("code") if got_kind == "rejected" else got
        raise Disagreement(
            f"the reference answers {want_kind}, the implementation {got_kind}: {detail!r:.300}", request, expected
        )
    if want_kind != "ok":
        return
    if request["op"] == "score":
        for key in ("logprobs", "entropy"):
            a, b = want.get(key, []), got.get(key) if isinstance(got, dict) else None
            if not isinstance(b, list) or len(a) != len(b) or not all(_close(x, y) for x, y in zip(a, b, strict=True)):
                raise Disagreement(f"{key}: expected {a!r:.300}, got {b!r:.300}", request, expected)
    elif request["op"] == "encode":
        kind, decoded = response_kind(reference.handle({**request, "op": "decode", "input": got}))
        if kind != "ok":
            raise Disagreement(f"the reference cannot decode the encoded payload: {decoded!r:.300}", request, expected)
        why = compare_masks(mask_to_json(_input_mask(request)), decoded)
        if why is not None:
            raise Disagreement(f"round trip: {why}", request, expected)
        why = default_output_findings(request["form"], got)
        if why is not None:
            raise Disagreement(why, request, expected)
    elif request["op"] in _MASK_OPS:
        why = compare_masks(want, got)
        if why is None and request["op"] == "concatenate":
            why = metadata_kinds_differ(want, got)
        if why is not None:
            raise Disagreement(why, request, expected)


def _input_mask(request: dict[str, Any]) -> Any:
    from .payloads import mask_from_json

    return mask_from_json(request["input"])


# ------------------------------------------------------------------------------------------ running
#: What a kind of request is called in the report: ``kind`` -> the plural a PASS line counts.
_PLURALS = {
    "payload": "payloads",
    "edge-row payload": "edge-row payloads",
    "operation": "operations",
    "mask": "masks",
    "valid payload": "valid payloads",
    "mutated payload": "mutated payloads",
    "payload at its limits": "payloads at their limits",
}


def _strategies(name: str) -> list[tuple[str, Any]]:
    """``(kind, strategy of requests)`` for one class."""
    from .strategies import (
        limited_payloads,
        masks_for,
        operation_requests,
        payloads,
        scorer_edge_inputs,
        scorer_inputs,
    )

    if name == "scorer":
        return [
            ("payload", scorer_inputs().map(lambda p: {"op": "score", "form": "scorer", "input": p})),
            ("edge-row payload", scorer_edge_inputs().map(lambda p: {"op": "score", "form": "scorer", "input": p})),
        ]
    if name == "model operations":
        return [("operation", operation_requests())]
    form, role = name.rsplit(" ", 1)
    if role == "writer":
        return [("mask", masks_for(form).map(lambda m: {"op": "encode", "form": form, "input": mask_to_json(m)}))]
    op = "validate" if form == "model" else "decode"
    return [
        ("valid payload", payloads(form).map(lambda pm: {"op": op, "form": form, "input": pm[0]})),
        ("mutated payload", mutated_payloads(form).map(lambda p: {"op": op, "form": form, "input": p})),
        (
            "payload at its limits",
            limited_payloads(form).map(lambda pl: {"op": op, "form": form, "input": pl[0], "limits": pl[1]}),
        ),
    ]


@contextlib.contextmanager
def _no_local_constants() -> Iterator[None]:
    """Hypothesis (6.131 and later) draws, now and then, a constant it read from the source of the
    modules the process has imported from outside site-packages: what a seed draws would change with
    what ran before, the working directory and the implementation under test. Within this block that
    pool is empty, and the cache of the constants it allowed is cleared before and after (hypothesis's
    own constants, the same in every process, stay). Not thread-safe: generated runs are sequential."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # a hypothesis without that module has no such pool
        yield
        return
    pool = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if pool is None or cache is None:  # a hypothesis without the pool
        yield
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty  # noqa: SLF001 - no public switch exists
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = pool  # noqa: SLF001
        cache.cache.clear()


def _check_kind(name: str, strategy: Any, implementation: Implementation, n: int, seed: int) -> Disagreement | None:
    """Run ``n`` requests drawn from ``strategy`` by a fresh hypothesis run seeded with ``seed``; the
    shrunk disagreement, or ``None``."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed

    reference = ReferenceImplementation()
    last: list[Disagreement] = []
    stopped: list[RunStopped] = []  # kept out of hypothesis, which would shrink or group it
    counter = [0]

    @hypothesis_seed(seed)
    @settings(
        settings.get_profile("default"),  # hypothesis's own defaults, never a profile loaded elsewhere
        max_examples=n,
        deadline=None,
        database=None,
        derandomize=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    @given(strategy)
    def check(request: dict[str, Any]) -> None:
        counter[0] += 1
        request = {"id": f"generated.{name.replace(' ', '-')}.{counter[0]}", **request}
        if stopped:
            return
        try:
            _agree(request, implementation, reference)
        except RunStopped as exc:
            stopped.append(exc)
        except Disagreement as exc:
            last[:] = [exc]  # the last failure hypothesis replays is the shrunk one
            raise

    try:
        with _no_local_constants():
            check()
    except Disagreement:  # one, shrunk (report_multiple_bugs is off); the last one raised is it
        if stopped:
            raise stopped[0] from None
        return last[0]
    except Exception:
        if stopped:
            raise stopped[0] from None
        raise
    if stopped:
        raise stopped[0]
    return None


def _check_class(
    name: str, implementation: Implementation, n: int, seed: int, report: Callable[[str], None]
) -> list[Disagreement]:
    failures = []
    for kind, strategy in _strategies(name):
        failure = _check_kind(name, strategy, implementation, n, seed)
        if failure is None:
            report(f"PASS        {name}: {n} generated {_PLURALS[kind]} agree with the reference")
        else:
            failures.append(failure)
            report(f"FAIL        {name}: {kind}: {failure.why}")
    return failures


def as_vector(failure: Disagreement, seed: int) -> dict[str, Any]:
    """The minimal failing request as a case of the suite's case files (conformance/README.md)."""
    request = failure.request
    expected = failure.expected
    case: dict[str, Any] = {
        "id": f"{request['form']}.generated-seed-{seed}",
        "description": f"Found by --generated (seed {seed}): {failure.why}"[:300],
        "spec": "SPEC.md#<section>",
        "level": "required",
    }
    if request["op"] != "decode":
        case["op"] = request["op"]
    case["input"] = request["input"]
    if "ok" in expected:
        ok = expected["ok"]
        case["expected"] = (
            {"mask": ok}
            if request["op"] in _MASK_OPS
            else {"roundtrip": True}
            if request["op"] == "encode"
            else {"valid": True}
            if request["op"] == "validate"
            else {"scores": ok, "tolerance": _TOLERANCE}
        )
    else:
        case["expected"] = expected
    return case


class _CrashGuard:
    """``implementation`` that raises :class:`~.protocol.RunStopped` after ``max_crashes`` consecutive
    crashes (the program died, hung or wrote no JSON), and at once on every request after that."""

    def __init__(self, implementation: Implementation, max_crashes: int) -> None:
        self.implementation = implementation
        self.max_crashes = max_crashes
        self.crashes = 0
        self.name = getattr(implementation, "name", type(implementation).__name__)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.crashes >= self.max_crashes:
            raise RunStopped(f"stopped after {self.crashes} consecutive crashes")
        response = self.implementation.handle(request)
        self.crashes = self.crashes + 1 if getattr(self.implementation, "crashed", False) else 0
        if self.crashes >= self.max_crashes:
            raise RunStopped(f"stopped after {self.crashes} consecutive crashes; the last: {response!r:.300}")
        return response


def run_generated(
    implementation: Implementation,
    n: int,
    *,
    seed: int | None = None,
    classes: Sequence[str] | None = None,
    forms: Sequence[str] = (),
    out: TextIO,
    max_crashes: int | None = None,
) -> int:
    """Check ``n`` generated cases (and ``n`` mutated payloads) per claimed class; 0 when every one
    agrees with the reference, 1 otherwise, 2 when nothing could be checked. With ``max_crashes``,
    that many consecutive crashes raise :class:`~.protocol.RunStopped` (the CLI: exit status 2)."""
    if max_crashes is not None:
        implementation = _CrashGuard(implementation, max_crashes)
    seed = random.randrange(2**32) if seed is None else seed
    out.write(f"sampling-mask conformance --generated {n} --seed {seed}\n")
    names = [
        c
        for c in GENERATED_CLASSES
        if (classes is None or class_matches(c, classes)) and (not forms or c.rsplit(" ", 1)[0] in forms or c in forms)
    ]
    failures: list[Disagreement] = []
    checked = 0
    for name in names:
        if classes is None and _unsupported(implementation, name):
            out.write(f"SKIP        {name}: unsupported (declare classes to make this a failure)\n")
            continue
        checked += 1
        failures += _check_class(name, implementation, n, seed, lambda line: print(line, file=out))
    if not checked:
        out.write("nothing checked: the implementation supports none of the classes\n")
        return 2
    for failure in failures:
        out.write(f"\nminimal case (seed {seed}), ready to paste into a case file:\n")
        out.write(render(as_vector(failure, seed)) + "\n")
    if failures:
        out.write(f"FAILED: {len(failures)} disagreement(s); rerun with --generated {n} --seed {seed}\n")
        return 1
    out.write(f"OK: {checked} class(es), {n} generated cases per kind\n")
    return 0


def _unsupported(implementation: Implementation, name: str) -> bool:
    """Whether the implementation answers ``unsupported`` to a trivial request of class ``name``."""
    if name == "scorer":
        payload: Any = {
            "mask": {"rows": [[0]]},
            "targets": {"dtype": "int64", "shape": [1], "values": [0]},
            "temperature": 1.0,
            "logits": {"dtype": "float64", "shape": [1, 1], "values": [[0.0]]},
        }
        request = {"id": "probe", "op": "score", "form": "scorer", "input": payload}
    elif name == "model operations":
        request = {
            "id": "probe",
            "op": "slice",
            "form": "model",
            "input": {"mask": {"rows": [[1]]}, "start": 0, "stop": 1},
        }
    else:
        form, role = name.rsplit(" ", 1)
        model: dict[str, Any] = {"rows": [[1]]} if form in ("json-rows", "base64") else {"rows": [[1]], "vocab_size": 4}
        if role == "writer":
            request = {"id": "probe", "op": "encode", "form": form, "input": model}
        else:
            op = "validate" if form == "model" else "decode"
            try:
                payload = (
                    model
                    if form == "model"
                    else ReferenceImplementation().encode(form, _input_mask({"input": model}), {})
                )
            except Exception:  # noqa: BLE001 - the reference cannot write it here (a missing extra)
                return True
            request = {"id": "probe", "op": op, "form": form, "input": payload}
    kind, _ = _ask(implementation, request)
    return kind == "unsupported"
