"""The reference implementation of the runner protocol: this library behind :func:`handle`.

It is what the suite runs by default, and the base class for Python implementations that want to
override one step (``decode``, ``encode``, ``validate``, ``score``) and keep the rest; the tests'
deliberately broken implementations do exactly that. ``python -m sampling_mask.conformance.reference``
serves it over stdin / stdout (the ``--command`` protocol).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask
from .payloads import (
    LAYOUT_FORMS,
    array_from_json,
    decode_layout,
    encode_layout,
    limits_from_json,
    mask_from_json,
    mask_to_json,
)
from .suite import OPERATIONS

__all__ = ["BYTE_FORMS", "ReferenceImplementation", "Unsupported", "payload_bytes"]

#: Forms whose payload is one byte string: ``{"text": UTF-8 text}`` or ``{"hex": bytes}``; the value
#: says which one an encoder returns.
BYTE_FORMS: Mapping[str, str] = {
    "json-rows": "text",
    "json": "text",
    "base64": "text",
    "msgpack": "hex",
    "arrow": "hex",
    "arrows": "hex",
    "parquet": "hex",
    "compact": "hex",
}


class Unsupported(Exception):
    """Raised by a step that the implementation does not provide; answered as ``unsupported``."""


def payload_bytes(payload: Any) -> bytes:
    """The bytes of a byte-form payload (``text`` is UTF-8, ``hex`` is raw bytes)."""
    if isinstance(payload, Mapping) and isinstance(payload.get("text"), str) and "hex" not in payload:
        return str(payload["text"]).encode("utf-8", "surrogatepass")
    if isinstance(payload, Mapping) and isinstance(payload.get("hex"), str) and "text" not in payload:
        try:
            return bytes.fromhex(payload["hex"])
        except ValueError:
            raise SamplingMaskError(ErrorCode.E_ENCODING, "hex is not hexadecimal", field="hex") from None
    raise SamplingMaskError(ErrorCode.E_SCHEMA, "a byte payload is {text} or {hex}")


def _codec(name: str) -> Any:
    """``sampling_mask.encode`` / ``decode`` when the codecs are installed, else :class:`Unsupported`."""
    import sampling_mask

    function = getattr(sampling_mask, name, None)
    if function is None:
        raise Unsupported(f"sampling_mask.{name} is not available in this build")
    return function


def _library_options(form: str, options: dict[str, Any]) -> dict[str, Any]:
    """The protocol's encode options in this library's spelling: the Arrow layout the protocol calls
    ``list`` (its schema-metadata name, SPEC 9.2) is the library's ``ragged``."""
    if form in ("arrow", "arrows", "parquet") and options.get("layout") == "list":
        return {**options, "layout": "ragged"}
    return options


class ReferenceImplementation:
    """This library as a conformance implementation. Override a step to build a variant."""

    name = "reference"

    # ------------------------------------------------------------------ protocol
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """One response for one request; see :mod:`sampling_mask.conformance.protocol`."""
        try:
            op, form = request.get("op"), request.get("form")
            if op == "describe":
                return {"ok": self.describe()}
            if not isinstance(form, str):
                raise Unsupported(f"form {form!r}")
            limits = limits_from_json(request.get("limits"))
            payload = request.get("input")
            if op == "decode":
                return {"ok": mask_to_json(self.decode(form, payload, limits))}
            if op == "validate":
                self.validate(form, payload, limits)
                return {"ok": True}
            if op == "encode":
                mask = mask_from_json(payload, limits=limits)
                return {"ok": self.encode(form, mask, dict(request.get("options") or {}))}
            if op == "score":
                return {"ok": self.score(form, payload, dict(request.get("options") or {}), limits)}
            if op in OPERATIONS and form == "model":
                return {"ok": mask_to_json(self.operate(op, payload, limits))}
            raise Unsupported(f"op {op!r}")
        except SamplingMaskError as exc:
            return {"rejected": exc.to_dict()}
        except Unsupported as exc:
            return {"unsupported": str(exc)}
        except Exception as exc:  # noqa: BLE001 - any other exception is a bug, reported as 'error'
            return {"error": f"{type(exc).__name__}: {exc}"}

    # ------------------------------------------------------------------ steps
    #: The conformance classes this implementation claims (names or globs); the reference claims all.
    classes: tuple[str, ...] = ("*",)

    def describe(self) -> dict[str, Any]:
        """The answer to the ``describe`` request: ``{"classes": [...]}``."""
        return {"classes": list(self.classes)}

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        """A validated mask from a payload of ``form``."""
        if form in LAYOUT_FORMS:
            return decode_layout(form, payload, limits=limits)
        if form == "model":
            return mask_from_json(payload, limits=limits)
        if form in BYTE_FORMS:
            return self.decode_bytes(form, payload_bytes(payload), limits)
        raise Unsupported(f"form {form!r}")

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        """A byte form through ``sampling_mask.decode`` (the library's codecs)."""
        mask: SamplingMask = _codec("decode")(data, format=form, limits=limits)
        return mask

    def validate(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> None:
        """Raise :class:`SamplingMaskError` when the payload is invalid."""
        self.decode(form, payload, limits)

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        """A payload of ``form`` holding ``mask``."""
        if form in LAYOUT_FORMS:
            return encode_layout(form, mask, options)
        if form == "model":
            return mask_to_json(mask)
        if form in BYTE_FORMS:
            data: bytes = _codec("encode")(mask, form, **_library_options(form, options))
            if BYTE_FORMS[form] == "text":
                return {"text": data.decode("utf-8")}
            return {"hex": data.hex()}
        raise Unsupported(f"form {form!r}")

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        """SPEC 3.6 on model masks: ``concatenate`` ``{"masks": [MODEL, ...]}``, ``slice``
        ``{"mask": MODEL, "start": a, "stop": b}``, ``take`` ``{"mask": MODEL, "segments": [b, ...]}``."""
        from ..core.model import concat

        if not isinstance(payload, Mapping):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"a {op} payload is an object")
        if op == "concatenate":
            masks = payload.get("masks")
            if not isinstance(masks, list):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "masks is a list of model masks", field="masks")
            return concat([mask_from_json(m, limits=limits) for m in masks])
        mask = mask_from_json(payload.get("mask"), limits=limits)
        if op == "take":
            segments = payload.get("segments")
            if not isinstance(segments, list) or not all(type(b) is int for b in segments):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "segments is a list of integers", field="segments")
            return mask.take(np.asarray(segments, dtype=np.int64))
        start, stop = payload.get("start"), payload.get("stop")
        if type(start) is not int or type(stop) is not int:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "start and stop are integers", field="start")
        if not 0 <= start <= stop <= mask.num_rows:  # SPEC 3.6: never clipped, never from the end
            raise SamplingMaskError(ErrorCode.E_RANGE, f"0 <= start <= stop <= T = {mask.num_rows}", field="start")
        sliced: SamplingMask = mask[start:stop]
        return sliced

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        """Masked log-probs and entropy of a ``scorer`` payload (see :func:`score_payload`)."""
        if form != "scorer":
            raise Unsupported(f"score on form {form!r}")
        return score_payload(payload, DEFAULT_LIMITS if limits is None else limits)


def _tensor(payload: Mapping[str, Any], key: str, limits: Limits) -> Any:
    import torch

    return torch.from_numpy(np.array(array_from_json(payload.get(key), field=key, limits=limits)))


def _scores_to_json(values: Any) -> list[float | str | None]:
    """Per-row values; NaN (a row with no value) is ``null``, ``-inf`` is ``"-Infinity"``."""
    out: list[float | str | None] = []
    for v in values.detach().cpu().double().tolist():
        out.append(None if math.isnan(v) else (v if math.isfinite(v) else ("-Infinity" if v < 0 else "Infinity")))
    return out


def score_payload(payload: Any, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """Scores of a ``scorer`` payload through ``sampling_mask.reference_scorer``.

    Payload: ``mask`` (a model mask), ``targets`` (typed int array [T]), ``temperature`` (a number or
    a typed float array [T]; absent: the mask's ``temperature`` companion, else 1), ``empty_rows`` (``"full"`` / ``"exclude"``), and either ``logits``
    (typed float array [T, V]) or ``hidden`` [T, d] + ``weight`` [V, d] (+ ``bias`` [V]).
    """
    try:
        scorer = importlib.import_module("sampling_mask.reference_scorer")
    except ImportError:
        raise Unsupported("sampling_mask.reference_scorer (torch) is not available") from None
    if not isinstance(payload, Mapping):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "a scorer payload must be an object")
    mask = mask_from_json(payload.get("mask"), limits=limits)
    targets = _tensor(payload, "targets", limits)
    temperature = payload.get("temperature")  # absent: the mask's temperature companion, else 1 (SPEC 13.1)
    if isinstance(temperature, Mapping):
        temperature = _tensor(payload, "temperature", limits)
    elif temperature is not None and (isinstance(temperature, bool) or not isinstance(temperature, (int, float))):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "temperature is a number or a typed array", field="temperature")
    policies = {
        "empty_rows": payload.get("empty_rows", "full"),
        "missing_target": payload.get("missing_target", "error"),
        "ignore_index": None,  # the spec's targets: -1 on empty rows only, any other negative is E_RANGE
    }
    if "logits" in payload:
        result = scorer.masked_logprobs(
            _tensor(payload, "logits", limits), mask, targets, temperature=temperature, with_entropy=True, **policies
        )
    else:
        bias = _tensor(payload, "bias", limits) if payload.get("bias") is not None else None
        result = scorer.masked_logprobs_from_hidden(
            _tensor(payload, "hidden", limits),
            _tensor(payload, "weight", limits),
            mask,
            targets,
            bias=bias,
            temperature=temperature,
            with_entropy=True,
            **policies,
        )
    return {"logprobs": _scores_to_json(result.logprobs), "entropy": _scores_to_json(result.entropy)}


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    import contextlib
    import sys

    from .protocol import serve

    with contextlib.suppress(ImportError):  # load torch now, inside the runner's start-up grace
        importlib.import_module("sampling_mask.reference_scorer")
    sys.exit(serve(ReferenceImplementation()))
