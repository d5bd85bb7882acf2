"""Property checks that run against any implementation of the runner protocol.

Each ``check_*`` sends requests through ``implementation.handle`` and raises ``AssertionError``
naming what differs, or :class:`NotSupported` when the implementation answers ``unsupported``
(callers skip). Inputs come from :mod:`sampling_mask.conformance.strategies`. The float64 rule of
:func:`float64_scores` is the suite's independent statement of spec/v1/SPEC.md, section scoring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.model import SamplingMask
from .payloads import array_from_json, compare_masks, mask_to_json
from .protocol import Implementation, response_kind

__all__ = [
    "NotSupported",
    "check_decode",
    "check_encode_round_trip",
    "check_same_result",
    "check_scorer_identities",
    "float64_scores",
    "request",
]


class NotSupported(Exception):
    """The implementation answered ``unsupported``."""


def request(implementation: Implementation, op: str, form: str, payload: Any, **extra: Any) -> Any:
    """The ``ok`` result of one request; ``AssertionError`` for any other answer."""
    response = implementation.handle({"id": f"property.{op}.{form}", "op": op, "form": form, "input": payload, **extra})
    kind, value = response_kind(response)
    if kind == "unsupported":
        raise NotSupported(f"{op} {form}: {value}")
    if kind != "ok":
        raise AssertionError(f"{op} {form}: expected ok, got {kind}: {value!r:.500}")
    return value


def check_decode(implementation: Implementation, form: str, payload: Any, expected: SamplingMask) -> None:
    """Decoding ``payload`` gives the canonical form of ``expected``."""
    why = compare_masks(mask_to_json(expected), request(implementation, "decode", form, payload))
    assert why is None, f"decode {form}: {why}"


def check_same_result(implementation: Implementation, form: str, a: Any, b: Any) -> None:
    """Two payloads of the same mask (other row order, padding, array spelling) decode identically."""
    first = request(implementation, "decode", form, a)
    why = compare_masks(first, request(implementation, "decode", form, b))
    assert why is None, f"decode {form} depends on how the payload is written: {why}"


def check_encode_round_trip(
    implementation: Implementation, form: str, mask: SamplingMask, options: Mapping[str, Any] | None = None
) -> None:
    """Encoding then decoding with the same implementation gives the mask back (canonical)."""
    model = mask_to_json(mask)
    extra = {"options": dict(options)} if options else {}
    payload = request(implementation, "encode", form, model, **extra)
    why = compare_masks(model, request(implementation, "decode", form, payload))
    assert why is None, f"encode / decode {form}: {why}"


# ------------------------------------------------------------------------------------------ scoring
def _logsumexp(z: np.ndarray) -> float:
    m = float(np.max(z))
    return m + math.log(float(np.sum(np.exp(z - m))))


def float64_scores(
    logits: np.ndarray,
    rows: Sequence[Sequence[int]],
    targets: Sequence[int],
    temperature: Any,
    empty_rows: str = "full",
    missing_target: str = "error",
) -> dict[str, list[float | str | None]]:
    """The rule of spec/v1/SPEC.md section 13 in float64, one row at a time.

    ``logp = z_y/T - logsumexp_{j in S}(z_j/T)``, ``H = -sum_{j in S} p_j log p_j`` (0 log 0 = 0).
    ``None`` is "no value": an excluded empty row, a target of -1, a support of only ``-inf``
    logits. ``"-Infinity"`` is a log-prob of ``-inf``. A target outside a non-empty row follows
    ``missing_target`` (``full``: score over the vocabulary; ``neg_inf``; ``error`` raises).
    """
    temps = np.broadcast_to(np.asarray(temperature, dtype=np.float64), (len(rows),))
    logprobs: list[float | str | None] = []
    entropy: list[float | str | None] = []
    for t, row in enumerate(rows):
        z = np.asarray(logits[t], dtype=np.float64) / temps[t]
        y = int(targets[t])
        if not row and (empty_rows == "exclude" or y == -1):
            logprobs.append(None)
            entropy.append(None)
            continue
        missing = bool(row) and y not in row
        if missing and missing_target == "error":
            raise ValueError(f"row {t}: target {y} is not in its support (E_MISSING_SAMPLED)")
        support = np.asarray(row if row and not (missing and missing_target == "full") else range(z.size), np.int64)
        zs = z[support]
        m = float(np.max(zs))
        if m == -math.inf:
            logprobs.append(None)
            entropy.append(None)
            continue
        lse = m + math.log(float(np.sum(np.exp(zs - m))))
        logp = -math.inf if missing and missing_target == "neg_inf" else float(z[y] - lse)
        logprobs.append(logp if math.isfinite(logp) else "-Infinity")
        each = zs - lse
        p = np.exp(each)
        entropy.append(float(-np.sum(p[p > 0] * each[p > 0])))
    return {"logprobs": logprobs, "entropy": entropy}


def _payload_logits(payload: Mapping[str, Any]) -> np.ndarray:
    if "logits" in payload:
        return np.asarray(array_from_json(payload["logits"], field="logits"), dtype=np.float64)
    hidden = np.asarray(array_from_json(payload["hidden"], field="hidden"), dtype=np.float64)
    weight = np.asarray(array_from_json(payload["weight"], field="weight"), dtype=np.float64)
    return hidden @ weight.T


def _close(got: Sequence[Any], want: Sequence[Any], tolerance: float, what: str) -> None:
    assert len(got) == len(want), f"{what}: expected {len(want)} values, got {len(got)}"
    for t, (a, b) in enumerate(zip(got, want, strict=True)):
        if b is None or isinstance(b, str):
            assert a == b, f"{what}[{t}]: expected {b!r}, got {a!r}"
            continue
        assert a is not None and abs(a - b) <= tolerance * max(1.0, abs(b)), f"{what}[{t}]: got {a!r}, want {b!r}"


def check_scorer_identities(
    implementation: Implementation, payload: dict[str, Any], *, tolerance: float = 1e-7
) -> None:
    """Scores equal the float64 rule; a support of the whole vocabulary gives the full log_softmax;
    the probabilities of a row's support sum to 1; the order of ids inside rows does not matter."""
    logits = _payload_logits(payload)
    rows = [list(r) for r in payload["mask"]["rows"]]
    targets = list(array_from_json(payload["targets"], field="targets").tolist())
    temp_spec = payload["temperature"]
    temperature = array_from_json(temp_spec, field="temperature") if isinstance(temp_spec, Mapping) else temp_spec
    got = request(implementation, "score", "scorer", payload)
    want = float64_scores(logits, rows, targets, temperature, payload.get("empty_rows", "full"))
    _close(got["logprobs"], want["logprobs"], tolerance, "logprobs")
    _close(got["entropy"], want["entropy"], tolerance, "entropy")
    num_rows, vocab = logits.shape
    if num_rows == 0:
        return
    # Support = vocabulary is the plain log_softmax.
    full = {**payload, "mask": {"rows": [list(range(vocab))] * num_rows}}
    z = logits / np.broadcast_to(np.asarray(temperature, dtype=np.float64), (num_rows,))[:, None]
    log_softmax = z - np.array([_logsumexp(row) for row in z])[:, None]
    _close(
        request(implementation, "score", "scorer", full)["logprobs"],
        [float(log_softmax[t, y]) for t, y in enumerate(targets)],
        tolerance,
        "full-vocabulary logprobs",
    )
    # Reversed id order inside rows changes nothing.
    reordered = {**payload, "mask": {"rows": [r[::-1] for r in rows]}}
    again = request(implementation, "score", "scorer", reordered)
    _close(again["logprobs"], got["logprobs"], tolerance, "logprobs after reordering ids")
    _close(again["entropy"], got["entropy"], tolerance, "entropy after reordering ids")
    # The probabilities of the first non-empty row's support sum to 1.
    t = next((i for i, r in enumerate(rows) if r), None)
    if t is None:
        return
    support = rows[t]
    per_id = {
        "mask": {"rows": [support] * len(support)},
        "targets": {"dtype": "int64", "shape": [len(support)], "values": support},
        "temperature": float(np.broadcast_to(np.asarray(temperature, dtype=np.float64), (num_rows,))[t]),
        "empty_rows": "full",
        "logits": {"dtype": "float64", "shape": [len(support), vocab], "values": [logits[t].tolist()] * len(support)},
    }
    total = math.fsum(math.exp(v) for v in request(implementation, "score", "scorer", per_id)["logprobs"])
    assert abs(total - 1.0) <= 1e-6, f"row {t}: exp(log-probs) over the support sums to {total}"
