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


# ---------------------------------------------------------------------- spec 1.2: two angles per MUST
# Each planted bug breaks one MUST of sections 3.6, 4, 8.1-8.4 or 13.2, and at least two cases (from
# different angles) fail it; the reference passes every one of them.
def _model_op(op: str, payload: Any, limits: Limits) -> list[SamplingMask]:
    """The masks of a model-operation payload."""
    from sampling_mask.conformance.payloads import mask_from_json

    if op == "concatenate":
        return [mask_from_json(m, limits=limits) for m in payload["masks"]]
    return [mask_from_json(payload["mask"], limits=limits)]


class ConcatIgnoresVocabMismatch(ReferenceImplementation):
    """Concatenates masks of different V, keeping the first V it meets."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate":
            vocab = next((m.get("vocab_size") for m in payload["masks"] if m.get("vocab_size")), None)
            payload = {"masks": [{**m, "vocab_size": vocab} for m in payload["masks"]]}
        return super().operate(op, payload, limits)


class ConcatSkipsAdoptedRangeCheck(ReferenceImplementation):
    """A mask without V adopts the others' V, but its ids are not checked against it."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate" and payload["masks"]:
            masks = _model_op(op, payload, limits)
            vocab = next((m.vocab_size for m in masks if m.vocab_size is not None), None)
            rows = [r for m in masks for r in m.to_rows()]
            cu = [0]
            for m in masks:
                cu += [c + cu[-1] for c in m.cu_seqlens.tolist()[1:]]
            mask = SamplingMask.from_rows(rows, cu_seqlens=cu, validate=False)
            return SamplingMask(mask.ids, mask.offsets, cu_seqlens=mask.cu_seqlens, validate=False, vocab_size=vocab)
        return super().operate(op, payload, limits)


class ConcatIgnoresCompanions(ReferenceImplementation):
    """Concatenates masks whatever companions they carry, dropping the companions."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate":
            keep = ("rows", "cu_seqlens", "vocab_size", "metadata")
            payload = {"masks": [{k: v for k, v in m.items() if k in keep} for m in payload["masks"]]}
        return super().operate(op, payload, limits)


class ConcatIgnoresMetadata(ReferenceImplementation):
    """Concatenates masks whatever their metadata, keeping the first mask's."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate" and payload["masks"]:
            first = payload["masks"][0].get("metadata")
            payload = {"masks": [{**m, "metadata": first} for m in payload["masks"]]}
        return super().operate(op, payload, limits)


class ConcatOneSegmentPerMask(ReferenceImplementation):
    """Concatenates rows but makes each input mask one segment (its own cu_seqlens is lost)."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        out = super().operate(op, payload, limits)
        if op != "concatenate":
            return out
        sizes = [len(m["rows"]) for m in payload["masks"]]
        cu = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return SamplingMask(out.ids, out.offsets, cu_seqlens=cu, vocab_size=out.vocab_size, **dict(out.companions))


class SliceLikePython(ReferenceImplementation):
    """Slices with the host language's rules: negative bounds count from the end, others are clipped."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "slice":
            masks = _model_op(op, payload, limits)
            out: SamplingMask = masks[0][payload["start"] : payload["stop"]]
            return out
        return super().operate(op, payload, limits)


class TakeDeduplicates(ReferenceImplementation):
    """Takes each requested segment once (a set of indices, in first-seen order)."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "take":
            payload = {**payload, "segments": list(dict.fromkeys(payload["segments"]))}
        return super().operate(op, payload, limits)


class TakeRefusesNegative(ReferenceImplementation):
    """Treats a negative segment index as out of range."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "take" and any(b < 0 for b in payload["segments"]):
            raise SamplingMaskError(ErrorCode.E_SEGMENTS, "negative segment index")
        return super().operate(op, payload, limits)


class TakeWrapsAround(ReferenceImplementation):
    """Reduces segment indices modulo B instead of refusing those outside [-B, B)."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "take":
            num_segments = len(payload["mask"].get("cu_seqlens", [0, 0])) - 1
            if num_segments:
                payload = {**payload, "segments": [b % num_segments for b in payload["segments"]]}
        return super().operate(op, payload, limits)


def _cast_arrays(payload: Any, to: str, *, kinds: str) -> Any:
    """The payload with every typed array of a dtype kind in ``kinds`` rewritten as ``to`` values."""
    if not isinstance(payload, dict):
        return payload
    out = dict(payload)
    for key, item in payload.items():
        if isinstance(item, dict) and "dtype" in item and "shape" in item:
            try:
                arr = array_from_json(item, field=key)
            except SamplingMaskError:
                continue
            if arr.dtype.kind in kinds:
                info = np.iinfo(to) if np.dtype(to).kind == "i" else None
                cast = (np.clip(arr, info.min, info.max) if info is not None and arr.dtype.kind == "i" else arr).astype(
                    to
                )
                out[key] = {"dtype": to, "shape": list(cast.shape), "values": cast.tolist()}
    return out


class CastsFloatArrays(ReferenceImplementation):
    """Casts float arrays to integers where integers are listed (1.5 becomes 1) instead of E_DTYPE."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form in ("ragged", "counts", "dense", "packed"):
            keep = {k: v for k, v in payload.items() if k in ("sampled_logprobs", "temperature", "support_logprobs")}
            payload = {**_cast_arrays(payload, "int64", kinds="f"), **keep}
        return super().decode(form, payload, limits)


class TruncatesToInt32(ReferenceImplementation):
    """Reads int64 arrays into int32 with a saturating cast (2^31 becomes 2^31 - 1) instead of refusing."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form in ("ragged", "dense", "packed"):
            payload = _cast_arrays(payload, "int32", kinds="i")
            for key in ("offsets", "cu_seqlens"):
                if key in payload:
                    payload[key] = {**payload[key], "dtype": "int64"}
        return super().decode(form, payload, limits)


class FlattensArrays(ReferenceImplementation):
    """Reads a 1-D array of any number of dimensions by flattening it instead of E_SHAPE."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form in ("ragged", "counts"):
            payload = dict(payload)
            for key in ("ids", "offsets", "counts"):
                item = payload.get(key)
                if isinstance(item, dict) and len(item.get("shape", [])) > 1:
                    flat = array_from_json(item, field=key).reshape(-1)
                    payload[key] = {"dtype": item["dtype"], "shape": [flat.size], "values": flat.tolist()}
        return super().decode(form, payload, limits)


class MissingIdsAreEmpty(ReferenceImplementation):
    """Reads an absent ids array as an empty one instead of E_SCHEMA."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form in ("ragged", "counts") and isinstance(payload, dict) and "ids" not in payload:
            payload = {**payload, "ids": {"dtype": "int32", "shape": [0], "values": []}}
        return super().decode(form, payload, limits)


def _companion_bytes(form: str, payload: Any) -> int:
    """4 bytes per companion value of a model mask or a layout payload (what 8.1 counts)."""
    total = 0
    for name in ("sampled_token_ids", "sampled_logprobs", "temperature", "support_logprobs"):
        value = payload.get(name) if isinstance(payload, dict) else None
        if isinstance(value, dict):
            total += 4 * int(np.prod(value["shape"]))
        elif isinstance(value, list):
            total += 4 * sum(len(v) if isinstance(v, list) else 1 for v in value)
    return total


class ForgetsCompanionBytes(ReferenceImplementation):
    """Counts ids, offsets and cu_seqlens against max_bytes, but not the companions (8.1)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form in ("model", "ragged"):
            limits = limits.replace(max_bytes=limits.max_bytes + _companion_bytes(form, payload))
        return super().decode(form, payload, limits)


class LimitsAreExclusive(ReferenceImplementation):
    """Treats each limit as an exclusive maximum: a size equal to its limit is refused."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        changes = {name: getattr(limits, name) - 1 for name in ("max_rows", "max_nnz", "max_width", "max_bytes")}
        return super().decode(form, payload, limits.replace(**changes))


class ArrowIgnoresFieldNodes(ReferenceImplementation):
    """Bounds an Arrow / Parquet batch by its compressed lengths only: uncompressed batches pass any max_bytes."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ("arrow", "arrows", "parquet"):
            limits = limits.replace(max_bytes=DEFAULT_LIMITS.max_bytes)
        return super().decode_bytes(form, data, limits)


class ChecksBytesBeforeLimit(ReferenceImplementation):
    """Compares a typed array's bytes with its declaration before its size with max_bytes (8.2, 8.4)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if isinstance(payload, dict):
            for key, item in payload.items():
                if isinstance(item, dict) and "hex" in item and "shape" in item:
                    size = int(np.prod(item["shape"], dtype=object)) * np.dtype(item["dtype"]).itemsize
                    if len(item["hex"]) // 2 != size:
                        raise SamplingMaskError(ErrorCode.E_BYTES, "bytes disagree with the shape", field=key)
        return super().decode(form, payload, limits)


class DecompressesEveryIpcFirst(DecompressesFirst):
    """:class:`DecompressesFirst` for the IPC stream format too."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "arrows":
            import pyarrow as pa

            try:
                pa.ipc.open_stream(pa.BufferReader(data)).read_all()
            except (pa.ArrowException, OSError) as exc:
                raise SamplingMaskError(ErrorCode.E_ENCODING, f"not Arrow: {exc}") from None
        return super().decode_bytes(form, data, limits)


def _scorer_payload(payload: Any, **changes: Any) -> Any:
    return {**payload, **changes} if isinstance(payload, dict) else payload


class PadsLogitsToTheIds(ReferenceImplementation):
    """Pads logits (and lm-head weights) with -inf columns up to the largest id or target instead of E_RANGE."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        rows = payload["mask"]["rows"]
        targets = array_from_json(payload["targets"], field="targets").tolist()
        need = max([v for r in rows for v in r] + targets + [0]) + 1
        if "logits" in payload:
            z = array_from_json(payload["logits"], field="logits")
            if z.shape[1] < need:
                z = np.concatenate([z, np.full((z.shape[0], need - z.shape[1]), -np.inf)], axis=1)
                values = [["-Infinity" if v == -np.inf else v for v in row] for row in z.tolist()]
                payload = _scorer_payload(
                    payload, logits={"dtype": "float64", "shape": list(z.shape), "values": values}
                )
        else:
            w = array_from_json(payload["weight"], field="weight")
            if w.shape[0] < need:
                w = np.concatenate([w, np.zeros((need - w.shape[0], w.shape[1]))])
                payload = _scorer_payload(
                    payload, weight={"dtype": "float64", "shape": list(w.shape), "values": w.tolist()}
                )
        return super().score(form, payload, options, limits)


class MinusOneTargetIsNoValue(ReferenceImplementation):
    """Gives a target of -1 no value on any row, non-empty ones included, instead of E_RANGE."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        targets = array_from_json(payload["targets"], field="targets").tolist()
        rows = payload["mask"]["rows"]
        if any(t == -1 and r for t, r in zip(targets, rows, strict=False)):
            cleared = [[] if t == -1 else r for t, r in zip(targets, rows, strict=False)]
            payload = _scorer_payload(payload, mask={**payload["mask"], "rows": cleared})
        return super().score(form, payload, options, limits)


class NanTemperatureIsOne(ReferenceImplementation):
    """Reads a NaN temperature (the caller's or the companion's) as 1 on every row."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        temperature = payload.get("temperature")
        if isinstance(temperature, dict):
            values = [1.0 if v != v else v for v in array_from_json(temperature, field="temperature").tolist()]
            payload = _scorer_payload(payload, temperature={**temperature, "values": values})
            payload["temperature"].pop("hex", None)
        companion = payload["mask"].get("temperature")
        if isinstance(companion, list):
            payload = _scorer_payload(
                payload, mask={**payload["mask"], "temperature": [1.0 if v == "NaN" else v for v in companion]}
            )
        return super().score(form, payload, options, limits)


class IgnoresTemperatureCompanion(ReferenceImplementation):
    """Scores at temperature 1 unless the caller passes one: the mask's temperature companion is ignored."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        if "temperature" not in payload:
            payload = _scorer_payload(payload, temperature=1.0)
        return super().score(form, payload, options, limits)


class MissingTargetScoredFull(ReferenceImplementation):
    """Defaults missing_target to full: a target outside its support is scored, not E_MISSING_SAMPLED."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        return super().score(form, {"missing_target": "full", **payload}, options, limits)


class ExcludeIsFull(ReferenceImplementation):
    """Ignores empty_rows = exclude: empty rows are always scored over the vocabulary."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        return super().score(form, _scorer_payload(payload, empty_rows="full"), options, limits)


# (broken implementation, the forms it runs on, {case that must fail: what its failure says})
TWO_ANGLES = [
    # 3.6
    (
        ConcatIgnoresVocabMismatch,
        {
            "model.concatenate-different-vocab-sizes": "accepted invalid input",
            "model.concatenate-vocab-size-disagrees-after-one-without": "accepted invalid input",
        },
    ),
    (
        ConcatSkipsAdoptedRangeCheck,
        {
            "model.concatenate-adopted-vocab-size-too-small": "accepted invalid input",
            "model.concatenate-adopted-vocab-size-first-mask-without": "accepted invalid input",
        },
    ),
    (
        ConcatIgnoresCompanions,
        {
            "model.concatenate-different-companions": "accepted invalid input",
            "model.concatenate-companions-same-count-different-names": "accepted invalid input",
        },
    ),
    (
        ConcatIgnoresMetadata,
        {
            "model.concatenate-different-metadata": "accepted invalid input",
            "model.concatenate-boolean-against-integer-metadata": "accepted invalid input",
        },
    ),
    (
        ConcatOneSegmentPerMask,
        {"model.concatenate": "cu_seqlens", "model.concatenate-with-empty-parts": "cu_seqlens"},
    ),
    (
        SliceLikePython,
        {
            "model.slice-negative-start": "accepted invalid input",
            "model.slice-reversed-bounds": "accepted invalid input",
            "model.slice-stop-beyond-rows": "accepted invalid input",
        },
    ),
    (
        SliceDropsEmptySegments,
        {
            "model.slice-clips-segments": "cu_seqlens",
            "model.slice-empty-keeps-empty-segments-at-its-position": "cu_seqlens",
        },
    ),
    (TakeDeduplicates, {"model.take-reorders-and-repeats": "rows", "model.take-repeats-one-segment": "rows"}),
    (
        TakeRefusesNegative,
        {
            "model.take-negative-index": "rejected valid input",
            "model.take-negative-and-positive": "rejected valid input",
        },
    ),
    (
        TakeWrapsAround,
        {
            "model.take-index-out-of-range": "accepted invalid input",
            "model.take-negative-index-out-of-range": "accepted invalid input",
        },
    ),
    # 4
    (
        CastsFloatArrays,
        {"ragged.float-ids": "accepted invalid input", "counts.float-counts": "accepted invalid input"},
    ),
    (
        TruncatesToInt32,
        {
            "ragged.int64-id-beyond-int32": "accepted invalid input",
            "dense.int64-id-beyond-int32": "accepted invalid input",
        },
    ),
    (
        FlattensArrays,
        {
            "ragged.two-dimensional-ids": "accepted invalid input",
            "counts.two-dimensional-counts": "accepted invalid input",
        },
    ),
    (
        MissingIdsAreEmpty,
        {"ragged.ids-missing": "accepted invalid input", "counts.ids-missing": "accepted invalid input"},
    ),
    # 8.1 - 8.4
    (
        ForgetsCompanionBytes,
        {
            "model.companions-over-max-bytes": "accepted invalid input",
            "ragged.companions-over-max-bytes": "accepted invalid input",
        },
    ),
    (
        LimitsAreExclusive,
        {
            "model.companions-at-max-bytes": "rejected valid input with E_LIMIT",
            "model.rows-at-limit": "rejected valid input with E_LIMIT",
            "ragged.nnz-and-width-at-limit": "rejected valid input with E_LIMIT",
        },
    ),
    (
        ArrowIgnoresFieldNodes,
        {
            "arrow.companions-over-max-bytes": "accepted invalid input",
            "parquet.companions-over-max-bytes": "accepted invalid input",
        },
    ),
    (
        ChecksBytesBeforeLimit,
        {"ragged.forged-shape": "expected E_LIMIT", "dense.forged-shape": "expected E_LIMIT"},
    ),
    (
        DecompressesEveryIpcFirst,
        {
            "arrow.compressed-length-beyond-limit": "expected E_LIMIT",
            "arrows.compressed-length-beyond-limit": "expected E_LIMIT",
        },
    ),
    # 13.2
    (
        PadsLogitsToTheIds,
        {
            "scorer.target-beyond-logits": "accepted invalid input",
            "scorer.support-id-beyond-logits": "accepted invalid input",
            "scorer.support-id-beyond-weight-rows": "accepted invalid input",
        },
    ),
    (
        MinusOneTargetIsNoValue,
        {
            "scorer.minus-one-target-on-non-empty-row": "accepted invalid input",
            "scorer.minus-one-target-on-non-empty-row-excluded": "accepted invalid input",
        },
    ),
    (
        NanTemperatureIsOne,
        {
            "scorer.nan-temperature-on-scored-row": "accepted invalid input",
            "scorer.nan-companion-temperature-without-caller-value": "accepted invalid input",
        },
    ),
    (
        IgnoresTemperatureCompanion,
        {
            "scorer.temperature-from-companion": "logprobs[0]",
            "scorer.nan-companion-temperature-without-caller-value": "accepted invalid input",
        },
    ),
    (
        MissingTargetScoredFull,
        {
            "scorer.target-not-in-support": "accepted invalid input",
            "scorer.target-not-in-support-hidden": "accepted invalid input",
        },
    ),
    (
        ScoresEmptyRowsOverV,
        {
            "scorer.empty-row-over-padded-vocabulary": "logprobs[1]",
            "scorer.missing-target-full-over-padded-vocabulary": "logprobs[1]",
        },
    ),
    (ExcludeIsFull, {"scorer.empty-row-excluded": "logprobs[1]", "scorer.empty-row-excluded-hidden": "logprobs[1]"}),
]


@pytest.mark.parametrize(("broken", "failures"), TWO_ANGLES, ids=[b[0].__name__ for b in TWO_ANGLES])
def test_each_must_has_two_cases_that_fail_its_planted_bug(
    broken: type[ReferenceImplementation], failures: dict[str, str]
) -> None:
    assert len(failures) >= 2
    by_id = {c.id: c for c in CASES}
    cases = [by_id[cid] for cid in failures]
    report = runner.run(broken(), cases)
    for cid, why in failures.items():
        result = report.by_id()[cid]
        assert result.status == "FAIL", (cid, result.status, result.detail)
        assert why in result.detail, (cid, result.detail)
    assert runner.run(ReferenceImplementation(), cases).ok  # the failures are the bug's, not the cases'


@pytest.mark.parametrize(
    ("broken", "name", "kind"),
    [
        (SliceLikePython, "model operations", "operation"),
        (TakeWrapsAround, "model operations", "operation"),
        (ConcatIgnoresVocabMismatch, "model operations", "operation"),
        (LimitsAreExclusive, "ragged reader", "payload at its limits"),
        (NanTemperatureIsOne, "scorer", "edge-row payload"),
        (PadsLogitsToTheIds, "scorer", "edge-row payload"),
    ],
)
def test_generated_cases_catch_planted_bugs_of_3_6_8_1_and_13_2(
    broken: type[ReferenceImplementation], name: str, kind: str
) -> None:
    """The generated strategies of model operations, limits and scoring rows find these bugs too, under
    one seed (a seed draws the same cases in every process), and agree with the reference itself."""
    import io

    from sampling_mask.conformance.generated import run_generated

    n = 200 if name == "model operations" else 60
    out = io.StringIO()
    assert run_generated(broken(), n, seed=3, classes=[name], out=out) == 1, out.getvalue()[-2000:]
    assert f"FAIL        {name}: {kind}:" in out.getvalue()
    out = io.StringIO()
    assert run_generated(ReferenceImplementation(), n, seed=3, classes=[name], out=out) == 0, out.getvalue()
