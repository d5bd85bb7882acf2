"""Proof of teeth: deliberately broken implementations, each failed by a named case of the suite."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.conformance import runner
from sampling_mask.conformance.payloads import array_from_json, mask_to_json
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import load_cases
from sampling_mask.core.limits import DEFAULT_LIMITS, Limits

CASES = load_cases()


class DropsTrailingEmptyRows(ReferenceImplementation):
    """Trims empty rows at the end of a mask (a classic `rstrip` of padding rows)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        mask = super().decode(form, payload, limits)
        rows = mask.to_rows()
        while rows and not rows[-1]:
            rows.pop()
        return SamplingMask.from_rows(rows, vocab_size=mask.vocab_size, metadata=mask.metadata)


class ForgetsTemperature(ReferenceImplementation):
    """Scores the raw logits: the sampler's temperature never reaches the trainer."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        return super().score(form, {**payload, "temperature": 1.0}, options, limits)


class MinusOneIsAnId(ReferenceImplementation):
    """Reads every entry of a dense row as an id, padding included."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form not in ("dense", "packed"):
            return super().decode(form, payload, limits)
        dense = array_from_json(payload["dense"], field="dense")
        rows, width = dense.shape
        return SamplingMask.from_ragged(
            dense.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width, vocab_size=payload.get("vocab_size")
        )


class OffByOneOffsets(ReferenceImplementation):
    """Tolerates offsets[T] == nnz + 1 (an off-by-one end) by clipping it."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "ragged" and isinstance(payload, dict) and "offsets" in payload:
            ids = array_from_json(payload["ids"], field="ids")
            offsets = array_from_json(payload["offsets"], field="offsets")
            if offsets.size and int(offsets[-1]) == ids.size + 1:
                return SamplingMask.from_ragged(
                    ids, np.minimum(offsets, ids.size), vocab_size=payload.get("vocab_size")
                )
        return super().decode(form, payload, limits)


class AcceptsNonTrailingPadding(ReferenceImplementation):
    """Drops every -1 wherever it sits, so a -1 between ids goes unnoticed."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form not in ("dense", "packed"):
            return super().decode(form, payload, limits)
        dense = array_from_json(payload["dense"], field="dense")
        rows = [[int(v) for v in row if v != -1] for row in dense.tolist()]
        cu = array_from_json(payload["cu_seqlens"], field="cu_seqlens") if "cu_seqlens" in payload else None
        return SamplingMask.from_rows(rows, cu_seqlens=cu, vocab_size=payload.get("vocab_size"))


class TruncatesInt64Offsets(ReferenceImplementation):
    """Reads int64 offsets into an int32 array (the high word is lost)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "ragged" and isinstance(payload, dict) and "offsets" in payload:
            offsets = array_from_json(payload["offsets"], field="offsets").astype(np.int32)
            return super().decode(
                form,
                {**payload, "offsets": {"dtype": "int32", "shape": [offsets.size], "values": offsets.tolist()}},
                limits,
            )
        return super().decode(form, payload, limits)


class ReturnsStoredOrder(ReferenceImplementation):
    """Answers rows in the order they were stored, not in canonical ascending order."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        response = super().handle(request)
        if request.get("op") == "decode" and "ok" in response:
            mask = self.decode(request["form"], request["input"])
            response["ok"] = {**mask_to_json(mask), "rows": mask.to_rows()}
        return response


# ---------------------------------------------------------------------- requirements added in spec 1.1
class ReplacesInvalidUtf8(ReferenceImplementation):
    """Decodes JSON text with replacement characters instead of rejecting bytes that are not UTF-8."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ("json", "json-rows", "base64"):
            data = data.decode("utf-8", "replace").encode("utf-8")
        return super().decode_bytes(form, data, limits)


class RoundsOverflowToInfinity(ReferenceImplementation):
    """Rounds a JSON float beyond float32 to -infinity instead of rejecting it."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        return super().decode_bytes(form, data.replace(b"-1e39", b'"-Infinity"'), limits)


class DeclaresAscendingAlways(ReferenceImplementation):
    """A JSON writer that always declares id_order ascending."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "json":
            doc = json.loads(out["text"])
            doc["id_order"] = "ascending"
            out = {"text": json.dumps(doc)}
        return out


def _blocks_one_by_one(rows: list[list[int]]) -> bytes:
    """Compact bytes with every block's words stored together, block by block (not grouped by width)."""
    values: list[int] = []
    for row in rows:
        prev = -1
        for x in sorted(row):
            values.append(x - prev - 1)
            prev = x
    out = bytearray(min(len(r), 255) for r in rows)  # every test row is shorter than 255
    blocks = [values[i : i + 32] + [0] * (32 - len(values[i : i + 32])) for i in range(0, len(values), 32)]
    widths = [max(b).bit_length() for b in blocks]
    out += bytes(widths)
    for block, w in zip(blocks, widths, strict=True):
        bits = sum(v << (j * w) for j, v in enumerate(block))
        out += b"".join(((bits >> (32 * q)) & 0xFFFFFFFF).to_bytes(4, "little") for q in range(w))
    return bytes(out)


class CompactWordsBlockByBlock(ReferenceImplementation):
    """Writes compact words block after block, ignoring the grouping by width of SPEC 12.2."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "compact":
            data = _blocks_one_by_one(mask.canonical().to_rows())
            out["compact"] = {"dtype": "uint8", "shape": [len(data)], "hex": data.hex()}
        return out


class VersionKeyLast(ReferenceImplementation):
    """A msgpack writer that puts the version key last."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "msgpack":
            import msgpack

            env = msgpack.unpackb(bytes.fromhex(out["hex"]), raw=False)
            version = env.pop("sampling_mask")
            out = {"hex": msgpack.packb({**env, "sampling_mask": version}, use_bin_type=True).hex()}
        return out


class CompactWithoutIdOrder(ReferenceImplementation):
    """An Arrow compact writer that declares id_order unspecified."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "arrow" and options.get("layout") == "compact":
            import pyarrow as pa

            table = pa.ipc.open_file(pa.BufferReader(bytes.fromhex(out["hex"]))).read_all()
            meta = {**table.schema.metadata, b"sampling_mask.id_order": b"unspecified"}
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
                writer.write_table(table.replace_schema_metadata(meta))
            out = {"hex": sink.getvalue().to_pybytes().hex()}
        return out


class LenientDecimalMetadata(ReferenceImplementation):
    """Reads Arrow sampling_mask.vocab_size with int(), which takes "+10" and "010"."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "arrow":
            import pyarrow as pa

            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            meta = dict(table.schema.metadata or {})
            if b"sampling_mask.vocab_size" in meta:
                meta[b"sampling_mask.vocab_size"] = str(int(meta[b"sampling_mask.vocab_size"])).encode()
                sink = pa.BufferOutputStream()
                with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
                    writer.write_table(table.replace_schema_metadata(meta))
                data = sink.getvalue().to_pybytes()
        return super().decode_bytes(form, data, limits)


class ScoresEmptyRowsOverV(ReferenceImplementation):
    """Scores empty rows over the mask's V columns instead of all V' logits."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        vocab = payload.get("mask", {}).get("vocab_size") if isinstance(payload, dict) else None
        if vocab is not None and "logits" in payload:
            logits = array_from_json(payload["logits"], field="logits")[:, :vocab]
            payload = {
                **payload,
                "logits": {"dtype": "float64", "shape": list(logits.shape), "values": logits.tolist()},
            }
        return super().score(form, payload, options, limits)


class DenseWriterSorts(ReferenceImplementation):
    """A dense writer that sorts every row before writing it."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        return super().encode(form, mask.canonical() if form == "dense" else mask, options)


class SortsIdsNotTheirLogprobs(ReferenceImplementation):
    """A compact container writer that sorts the ids but leaves support_logprobs in stored order."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        if form == "msgpack" and options.get("layout") == "compact" and mask.support_logprobs is not None:
            sorted_rows = SamplingMask.from_rows([sorted(r) for r in mask.to_rows()], vocab_size=mask.vocab_size)
            mask = SamplingMask(
                sorted_rows.ids, mask.offsets, vocab_size=mask.vocab_size, support_logprobs=mask.support_logprobs
            )
        return super().encode(form, mask, options)


class DecompressesFirst(ReferenceImplementation):
    """Lets pyarrow decompress a batch before any size check: a declared length bomb is E_ENCODING."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "arrow":
            import pyarrow as pa

            try:
                pa.ipc.open_file(pa.BufferReader(data)).read_all()
            except (pa.ArrowException, OSError) as exc:
                raise SamplingMaskError(ErrorCode.E_ENCODING, f"not Arrow: {exc}") from None
        return super().decode_bytes(form, data, limits)


class SliceDropsEmptySegments(ReferenceImplementation):
    """Slices rows but keeps only the segments that hold a row of the slice."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        out = super().operate(op, payload, limits)
        if op != "slice":
            return out
        cu = out.cu_seqlens
        return SamplingMask(out.ids, out.offsets, cu_seqlens=np.unique(cu), **dict(out.companions))


# (broken implementation, the forms it is run on, a case that must fail, what the failure says)
BROKEN = [
    (DropsTrailingEmptyRows, ("dense", "ragged", "json-rows"), "dense.trailing-empty-rows", "expected 3 rows, got 1"),
    (ForgetsTemperature, ("scorer",), "scorer.temperature-scalar", "logprobs[0]"),
    (MinusOneIsAnId, ("dense", "packed"), "dense.issue-example", "rejected valid input with E_RANGE"),
    (
        OffByOneOffsets,
        ("ragged",),
        "ragged.offsets-end-past-nnz",
        "accepted invalid input (expected rejection with E_OFFSETS)",
    ),
    (
        AcceptsNonTrailingPadding,
        ("dense", "packed"),
        "dense.padding-between-ids",
        "accepted invalid input (expected rejection with E_PADDING)",
    ),
    (TruncatesInt64Offsets, ("ragged",), "ragged.offsets-int64-not-truncated", "accepted invalid input"),
    (ReturnsStoredOrder, ("ragged",), "ragged.unsorted-rows", "not in canonical (ascending) order"),
    # spec 1.1: one planted bug per requirement the 1.0 cases did not check (issue 15)
    (ReplacesInvalidUtf8, ("json",), "json.invalid-utf8-in-string", "accepted invalid input"),
    (ReplacesInvalidUtf8, ("base64",), "base64.invalid-utf8-in-ignored-key", "accepted invalid input"),
    (RoundsOverflowToInfinity, ("json",), "json.sampled-logprob-beyond-float32", "accepted invalid input"),
    (DeclaresAscendingAlways, ("json",), "json.encode-unsorted-rows", "does not decode with the reference"),
    (CompactWordsBlockByBlock, ("compact",), "compact.encode-two-blocks-of-one-width", "compact: expected"),
    (VersionKeyLast, ("msgpack",), "msgpack.encode-unsorted-rows", "first_key = 'layout'"),
    (CompactWithoutIdOrder, ("arrow",), "arrow.encode-compact-canonicalizes", "declares id_order = 'unspecified'"),
    (LenientDecimalMetadata, ("arrow",), "arrow.vocab-size-plus-sign", "accepted invalid input"),
    (ScoresEmptyRowsOverV, ("scorer",), "scorer.empty-row-over-padded-vocabulary", "logprobs[1]"),
    (DenseWriterSorts, ("dense",), "dense.encode-keeps-stored-order", "dense: expected [[5, 1]"),
    (SortsIdsNotTheirLogprobs, ("msgpack",), "msgpack.encode-compact-canonicalizes", "round trip"),
    (SliceDropsEmptySegments, ("model",), "model.slice-clips-segments", "cu_seqlens"),
    (
        DecompressesFirst,
        ("arrow",),
        "arrow.compressed-length-beyond-limit",
        "rejected with E_ENCODING, expected E_LIMIT",
    ),
]


@pytest.mark.parametrize(("broken", "forms", "case_id", "why"), BROKEN, ids=[b[2] for b in BROKEN])
def test_suite_fails_each_broken_implementation_with_a_named_case(
    broken: type[ReferenceImplementation], forms: tuple[str, ...], case_id: str, why: str
) -> None:
    cases = [c for c in CASES if c.form in forms]
    report = runner.run(broken(), cases)
    result = report.by_id()[case_id]
    assert not report.ok
    assert result.status == "FAIL", (result.status, result.detail)
    assert why in result.detail
    # The same slice passes against the reference: the failure is the bug's, not the case's.
    assert runner.run(ReferenceImplementation(), cases).ok


def test_broken_implementation_fails_the_cli_too() -> None:
    """Through `--impl module:object`, a broken implementation makes the command exit non-zero."""
    import io
    import sys
    import types

    module = types.ModuleType("broken_conformance_impls")
    module.AcceptsNonTrailingPadding = AcceptsNonTrailingPadding  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        out = io.StringIO()
        code = runner.main(
            ["--impl", "broken_conformance_impls:AcceptsNonTrailingPadding", "--form", "dense", "-q"], out=out
        )
    finally:
        del sys.modules[module.__name__]
    assert code == 1
    assert "FAIL        dense.padding-between-ids" in out.getvalue()
