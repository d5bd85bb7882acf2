"""Proof of teeth: each planted bug is an implementation that reads one requirement of the spec
another way, and named cases of the suite fail it while the reference passes the same cases; the
generated cases find some of them too. Grouped by the spec section whose requirement the bug breaks;
every section's test says which guarantee it holds.

The byte-count bugs of 8.5 are readers that count exactly what their reading of the text says (no
temporaries, so that nothing but the reading decides): they compare their own count with
``max_bytes`` and then let the reference read the payload with ``max_bytes`` lifted.
"""

from __future__ import annotations

import io
import json
import math
import sys
import types
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.conformance import runner
from sampling_mask.conformance.generated import run_generated
from sampling_mask.conformance.payloads import array_from_json, mask_from_json, mask_to_json
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import load_cases
from sampling_mask.core.limits import DEFAULT_LIMITS, Limits
from sampling_mask.core.model import concat

CASES = load_cases()
ARROW_FORMS = ("arrow", "arrows", "parquet")
#: A planted bug and the cases that fail it, each with what its failure says.
Planted = tuple[type[ReferenceImplementation], dict[str, str]]


def _fails(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """``broken`` fails every named case, each with a detail saying ``failures[case]``; the reference
    passes the same cases (the failures are the bug's, not the cases')."""
    by_id = {c.id: c for c in CASES}
    cases = [by_id[cid] for cid in failures]
    report = runner.run(broken(), cases)
    for cid, why in failures.items():
        result = report.by_id()[cid]
        assert result.status == "FAIL", (cid, result.status, result.detail)
        assert why in result.detail, (cid, result.detail)
    assert runner.run(ReferenceImplementation(), cases).ok


def _ids(planted: list[Planted]) -> list[str]:
    return [broken.__name__ for broken, _ in planted]


# ------------------------------------------------------------------------------------------ 3 the logical model
class ReturnsStoredOrder(ReferenceImplementation):
    """Answers rows in the order they were stored, not in canonical ascending order."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        response = super().handle(request)
        if request.get("op") == "decode" and "ok" in response:
            mask = self.decode(request["form"], request["input"])
            response["ok"] = {**mask_to_json(mask), "rows": mask.to_rows()}
        return response


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


class ConcatKeepsLastMetadata(ReferenceImplementation):
    """The concatenation's metadata is the last mask's."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        result = super().operate(op, payload, limits)
        if op == "concatenate":
            last = mask_from_json(payload["masks"][-1], limits=limits)
            companions = {name: result.companions[name] for name in result.companions}
            return SamplingMask(
                result.ids,
                result.offsets,
                cu_seqlens=result.cu_seqlens,
                vocab_size=result.vocab_size,
                metadata=last.metadata,
                **companions,
            )
        return result


class ConcatNanMetadataUnequal(ReferenceImplementation):
    """Compares metadata with ``!=``, so NaN never equals NaN."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate":
            masks = [mask_from_json(m, limits=limits) for m in payload["masks"]]
            first = masks[0].metadata
            if any(
                m.metadata.keys() != first.keys() or any(m.metadata[k] != v for k, v in first.items())
                for m in masks[1:]
            ):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "masks carry different metadata", field="metadata")
            return concat(masks)
        return super().operate(op, payload, limits)


class SliceLikePython(ReferenceImplementation):
    """Slices with the host language's rules: negative bounds count from the end, others are clipped."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "slice":
            masks = _model_op(op, payload, limits)
            out: SamplingMask = masks[0][payload["start"] : payload["stop"]]
            return out
        return super().operate(op, payload, limits)


class SliceCountsFromTheEnd(ReferenceImplementation):
    """Slices like Python: negative bounds count from the end."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "slice":
            mask = mask_from_json(payload["mask"], limits=limits)
            start, stop, _ = slice(payload["start"], payload["stop"]).indices(mask.num_rows)
            payload = {**payload, "start": start, "stop": max(start, stop)}
        return super().operate(op, payload, limits)


class SliceDefaultsOmittedBounds(ReferenceImplementation):
    """An omitted bound is 0 or T."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "slice":
            rows = len(payload["mask"]["rows"])
            payload = {"start": 0, "stop": rows, **{k: v for k, v in payload.items() if v is not None}}
        return super().operate(op, payload, limits)


class SliceDropsEmptySegments(ReferenceImplementation):
    """Slices rows but keeps only the segments that hold a row of the slice."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        out = super().operate(op, payload, limits)
        if op != "slice":
            return out
        cu = out.cu_seqlens
        return SamplingMask(out.ids, out.offsets, cu_seqlens=np.unique(cu), **dict(out.companions))


class EmptySliceKeepsTouchingSegments(ReferenceImplementation):
    """``M[a:a]`` keeps every segment that starts or ends at ``a``, as an empty one."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "slice" and payload["start"] == payload["stop"]:
            mask = mask_from_json(payload["mask"], limits=limits)
            at = payload["start"]
            cu = mask.cu_seqlens.tolist()
            touching = sum(1 for b in range(len(cu) - 1) if cu[b] <= at <= cu[b + 1])
            return SamplingMask.from_rows([], cu_seqlens=[0] * (touching + 1), vocab_size=mask.vocab_size)
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


class TakeNothingDropsTheRest(ReferenceImplementation):
    """``take([])`` gives a bare empty mask: no companions, no metadata."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "take" and payload.get("segments") == []:
            mask = mask_from_json(payload["mask"], limits=limits)
            return SamplingMask.from_rows([], cu_seqlens=[0], vocab_size=mask.vocab_size)
        return super().operate(op, payload, limits)


SECTION_3: list[Planted] = [
    (ReturnsStoredOrder, {"ragged.unsorted-rows": "not in canonical (ascending) order"}),
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
    (ConcatOneSegmentPerMask, {"model.concatenate": "cu_seqlens", "model.concatenate-with-empty-parts": "cu_seqlens"}),
    (ConcatKeepsLastMetadata, {"model.concatenate-keeps-first-metadata-kind": "metadata 'seed'"}),
    (ConcatNanMetadataUnequal, {"model.concatenate-metadata-nan-equals-nan": "rejected valid input with E_SCHEMA"}),
    (
        SliceLikePython,
        {
            "model.slice-negative-start": "accepted invalid input",
            "model.slice-reversed-bounds": "accepted invalid input",
            "model.slice-stop-beyond-rows": "accepted invalid input",
        },
    ),
    (
        SliceCountsFromTheEnd,
        {
            "model.slice-negative-start-valid-from-the-end": "accepted invalid input",
            "model.slice-negative-stop": "accepted invalid input",
        },
    ),
    (
        SliceDefaultsOmittedBounds,
        {"model.slice-stop-omitted": "accepted invalid input", "model.slice-start-omitted": "accepted invalid input"},
    ),
    (
        SliceDropsEmptySegments,
        {
            "model.slice-clips-segments": "cu_seqlens",
            "model.slice-empty-keeps-empty-segments-at-its-position": "cu_seqlens",
        },
    ),
    (EmptySliceKeepsTouchingSegments, {"model.slice-empty-between-segments": "cu_seqlens"}),
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
    (TakeNothingDropsTheRest, {"model.take-no-segment-keeps-companions-and-metadata": "sampled_token_ids"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_3, ids=_ids(SECTION_3))
def test_3_the_logical_model(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 3.4 and 3.6: a decoded mask is answered in canonical order, and concatenation, row slices
    and take give the results 3.6 states (V adopted and checked, companions and metadata compared and
    kept as the first mask spells them, segments clipped or kept where they sit) and refuse what it
    refuses (bounds never counted from the end or defaulted, indices never wrapped)."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 4 array layouts
class DropsTrailingEmptyRows(ReferenceImplementation):
    """Trims empty rows at the end of a mask (a classic `rstrip` of padding rows)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        mask = super().decode(form, payload, limits)
        rows = mask.to_rows()
        while rows and not rows[-1]:
            rows.pop()
        return SamplingMask.from_rows(rows, vocab_size=mask.vocab_size, metadata=mask.metadata)


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


class AcceptsNonTrailingPadding(ReferenceImplementation):
    """Drops every -1 wherever it sits, so a -1 between ids goes unnoticed."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form not in ("dense", "packed"):
            return super().decode(form, payload, limits)
        dense = array_from_json(payload["dense"], field="dense")
        rows = [[int(v) for v in row if v != -1] for row in dense.tolist()]
        cu = array_from_json(payload["cu_seqlens"], field="cu_seqlens") if "cu_seqlens" in payload else None
        return SamplingMask.from_rows(rows, cu_seqlens=cu, vocab_size=payload.get("vocab_size"))


class DenseWriterSorts(ReferenceImplementation):
    """A dense writer that sorts every row before writing it."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        return super().encode(form, mask.canonical() if form == "dense" else mask, options)


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


class WrapsSampledIds(ReferenceImplementation):
    """Casts int64 sampled ids to int32, wrapping values beyond it."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "ragged" and isinstance(payload.get("sampled_token_ids"), dict):
            sampled = array_from_json(payload["sampled_token_ids"], field="sampled_token_ids").astype(np.int32)
            payload = {
                **payload,
                "sampled_token_ids": {"dtype": "int32", "shape": [sampled.size], "values": sampled.tolist()},
            }
        return super().decode(form, payload, limits)


SECTION_4: list[Planted] = [
    (DropsTrailingEmptyRows, {"dense.trailing-empty-rows": "expected 3 rows, got 1"}),
    (MinusOneIsAnId, {"dense.issue-example": "rejected valid input with E_RANGE"}),
    (
        AcceptsNonTrailingPadding,
        {"dense.padding-between-ids": "accepted invalid input (expected rejection with E_PADDING)"},
    ),
    (DenseWriterSorts, {"dense.encode-keeps-stored-order": "dense: expected [[5, 1]"}),
    (OffByOneOffsets, {"ragged.offsets-end-past-nnz": "accepted invalid input (expected rejection with E_OFFSETS)"}),
    (TruncatesInt64Offsets, {"ragged.offsets-int64-not-truncated": "accepted invalid input"}),
    (CastsFloatArrays, {"ragged.float-ids": "accepted invalid input", "counts.float-counts": "accepted invalid input"}),
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
    (WrapsSampledIds, {"ragged.sampled-id-int64-beyond-int32": "accepted invalid input"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_4, ids=_ids(SECTION_4))
def test_4_array_layouts(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 4: empty rows are kept, -1 is padding only after a row's ids, offsets tile the ids, no
    value is truncated, cast or flattened into another dtype or shape, a missing array is refused,
    and a writer keeps the stored order."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 5 companions and metadata
class IntegralFloatTopK(ReferenceImplementation):
    """Reads a JSON top_k of 4.0 as the integer 4."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "json":
            data = data.replace(b'"top_k": 4.0', b'"top_k": 4')
        return super().decode_bytes(form, data, limits)


def _rewritten(form: str, data: bytes, schema_metadata: Any) -> bytes:
    """``data`` written again by pyarrow with other schema metadata."""
    table = pa.Table.from_batches(_batches(form, data)) if form != "parquet" else pq.read_table(pa.BufferReader(data))
    table = table.replace_schema_metadata(schema_metadata(table.schema.metadata))
    sink = io.BytesIO()
    if form == "parquet":
        pq.write_table(table, sink)
    else:
        with (pa.ipc.new_file if form == "arrow" else pa.ipc.new_stream)(sink, table.schema) as out:
            out.write_table(table)
    return sink.getvalue()


class ReadsIntegralFloatMetadataAsInteger(ReferenceImplementation):
    """Parses an Arrow metadata value with a number parser that makes 4.0 the integer 4."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ARROW_FORMS:

            def integral(meta: dict[bytes, bytes]) -> dict[bytes, bytes]:
                return {k: (v[:-2] if v.endswith(b".0") else v) for k, v in meta.items()}

            data = _rewritten(form, data, integral)
        return super().decode_bytes(form, data, limits)


def _string_nan_to_float(metadata: Any) -> Any:
    if not isinstance(metadata, dict):
        return metadata
    return {k: ({"float": "NaN"} if v == "NaN" else v) for k, v in metadata.items()}


class StringNanIsTheFloat(ReferenceImplementation):
    """Reads the metadata string "NaN" as the float NaN (the companions' spelling applied to metadata)."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "json":
            doc = json.loads(data)
            doc["metadata"] = _string_nan_to_float(doc.get("metadata"))
            data = json.dumps(doc).encode()
        return super().decode_bytes(form, data, limits)

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "concatenate":
            masks = [{**m, "metadata": _string_nan_to_float(m.get("metadata"))} for m in payload["masks"]]
            payload = {**payload, "masks": masks}
        return super().operate(op, payload, limits)


SECTION_5: list[Planted] = [
    (IntegralFloatTopK, {"json.metadata-top-k-integral-float": "accepted invalid input"}),
    (
        ReadsIntegralFloatMetadataAsInteger,
        {
            "arrow.metadata-top-k-integral-float": "accepted invalid input",
            "parquet.metadata-top-k-integral-float": "accepted invalid input",
        },
    ),
    (
        StringNanIsTheFloat,
        {
            "json.metadata-string-nan": "metadata",
            "model.concatenate-metadata-string-nan-against-float-nan": "accepted invalid input",
        },
    ),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_5, ids=_ids(SECTION_5))
def test_5_companions_and_metadata(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 5.2: a metadata value keeps its kind in every encoding (4.0 is a float, never top_k's
    integer 4; the string "NaN" is a string, never the float NaN)."""
    _fails(broken, failures)


def test_string_nan_stays_a_string_through_the_reference() -> None:
    """The reference keeps a metadata string "NaN" a string in every form that carries metadata."""
    import sampling_mask

    mask = SamplingMask.from_rows([[1]], metadata={"note": "NaN", "x": math.nan})
    for form in ("json", "msgpack", "arrow", "parquet"):
        back = sampling_mask.decode(sampling_mask.encode(mask, form), format=form)
        assert back.metadata["note"] == "NaN", form
        assert isinstance(back.metadata["x"], float) and math.isnan(back.metadata["x"]), form


# ------------------------------------------------------------------------------------------ 6 versioning
def _envelope(payload: Any) -> dict[str, Any]:
    return msgpack.unpackb(bytes.fromhex(payload["hex"]), raw=False, strict_map_key=False)


class WritesCountsByDefault(ReferenceImplementation):
    """Writes msgpack ``counts`` (1.1) when asked for nothing: a 1.0 reader cannot read it."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        if form == "msgpack" and options.get("layout", "ragged") == "ragged":
            import sampling_mask

            return {"hex": sampling_mask.encode(mask, "msgpack", counts=True).hex()}
        return super().encode(form, mask, options)


class WritesNilMetadata(ReferenceImplementation):
    """Writes ``metadata: nil`` for a mask without metadata (1.0 defines nil for vocab_size only)."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "msgpack":
            env = _envelope(out)
            env.setdefault("metadata", None)
            out = {"hex": msgpack.packb(env, use_bin_type=True).hex()}
        return out


class WritesReservedSchemaKey(ReferenceImplementation):
    """Writes a schema-metadata key of its own under the format's prefix (reserved, 9.2)."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form in ARROW_FORMS:
            data = _rewritten(form, bytes.fromhex(out["hex"]), lambda m: {**m, b"sampling_mask.writer": b'"x"'})
            out = {"hex": data.hex()}
        return out


SECTION_6: list[Planted] = [
    (WritesCountsByDefault, {"msgpack.encode-ragged-roundtrip": "not within the 1.0 profile"}),
    (WritesNilMetadata, {"msgpack.encode-unsorted-rows": "'metadata' is nil"}),
    (
        WritesReservedSchemaKey,
        {
            "arrow.encode-roundtrip-companions": "not within the 1.0 profile",
            "parquet.encode-roundtrip-companions": "not within the 1.0 profile",
        },
    ),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_6, ids=_ids(SECTION_6))
def test_6_default_output_is_1_0_output(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 6: what a writer writes when asked for nothing else is valid under 1.0 (no msgpack
    counts, no nil metadata, no schema-metadata key 1.0 does not define), checked on every encode
    answer."""
    _fails(broken, failures)


def test_generated_writer_cases_check_the_1_0_profile() -> None:
    """`--generated` checks what an implementation writes against the 1.0 profile too."""
    out = io.StringIO()
    code = run_generated(WritesCountsByDefault(), 5, seed=3, classes=["msgpack writer"], out=out)
    assert code == 1, out.getvalue()[-2000:]
    assert "not within the 1.0 profile" in out.getvalue()
    out = io.StringIO()
    assert run_generated(ReferenceImplementation(), 5, seed=3, classes=["msgpack writer"], out=out) == 0, out.getvalue()


def test_profile_option_without_a_file_checks_what_the_implementation_writes(tmp_path: Any) -> None:
    """`--profile-1.0` with no FILE runs the implementation's encode answers through the profile."""
    module = types.ModuleType("broken_writers_1_3")
    module.WritesCountsByDefault = WritesCountsByDefault  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        out = io.StringIO()
        code = runner.main(["--impl", "broken_writers_1_3:WritesCountsByDefault", "--profile-1.0"], out=out)
    finally:
        del sys.modules[module.__name__]
    assert code == 1
    assert "NOT 1.0     msgpack.encode-ragged-roundtrip" in out.getvalue()
    assert "'counts' (uint8) is spec 1.1" in out.getvalue()
    out = io.StringIO()
    assert runner.main(["--profile-1.0", "--form", "msgpack"], out=out) == 0, out.getvalue()
    assert "within 1.0  msgpack.encode-ragged-roundtrip" in out.getvalue()
    # FILE mode is unchanged: a file the broken writer wrote is NOT 1.0.
    path = tmp_path / "counts.msgpack"
    path.write_bytes(
        bytes.fromhex(
            WritesCountsByDefault().handle(
                {"id": "x", "op": "encode", "form": "msgpack", "input": {"rows": [[1, 2], []]}}
            )["ok"]["hex"]
        )
    )
    out = io.StringIO()
    assert runner.main(["--profile-1.0", str(path)], out=out) == 1
    assert out.getvalue().startswith("NOT 1.0")


# ------------------------------------------------------------------------------------------ 8 limits and reading
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


class DecompressesFirst(ReferenceImplementation):
    """Lets pyarrow decompress an IPC file or stream before any size check: a declared length bomb is
    E_ENCODING, never E_LIMIT."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ("arrow", "arrows"):
            source = pa.BufferReader(data)
            try:
                (pa.ipc.open_file(source) if form == "arrow" else pa.ipc.open_stream(source)).read_all()
            except (pa.ArrowException, OSError) as exc:
                raise SamplingMaskError(ErrorCode.E_ENCODING, f"not Arrow: {exc}") from None
        return super().decode_bytes(form, data, limits)


class BoundsSegmentsByMaxRows(ReferenceImplementation):
    """Bounds the length of a JSON document's cu_seqlens by max_rows + 1 (max_rows read as a bound of B)."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "json":
            cu = json.loads(data).get("cu_seqlens") or []
            if len(cu) > limits.max_rows + 1:
                raise SamplingMaskError(ErrorCode.E_LIMIT, "list length exceeds the limit", field="cu_seqlens")
        return super().decode_bytes(form, data, limits)


class CountsStoredBuffers(ReferenceImplementation):
    """Bounds a batch by the buffers it stores instead of what it produces."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ("arrow", "arrows"):
            opened = pa.ipc.open_file(pa.BufferReader(data)) if form == "arrow" else None
            batches = (
                [opened.get_batch(i) for i in range(opened.num_record_batches)]
                if opened is not None
                else list(pa.ipc.open_stream(pa.BufferReader(data)))
            )
            stored = sum(b.get_total_buffer_size() for b in batches)
            if stored > limits.max_bytes:
                raise SamplingMaskError(ErrorCode.E_LIMIT, f"{stored} bytes of buffers")
        return super().decode_bytes(form, data, limits)


class AcceptsStreamWithoutEnd(ReferenceImplementation):
    """Reads a stream that stops between two batches as complete."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "arrows" and not data.endswith(bytes.fromhex("ffffffff00000000")):
            data += bytes.fromhex("ffffffff00000000")
        return super().decode_bytes(form, data, limits)


class AcceptsRepeatedFooterBlocks(ReferenceImplementation):
    """Reads every block an IPC file footer lists, repeated or not, through pyarrow alone."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        try:
            return super().decode_bytes(form, data, limits)
        except SamplingMaskError as exc:
            if form != "arrow" or "footer" not in str(exc):
                raise

        from sampling_mask.codecs.arrow import mask_from_table

        reader = pa.ipc.open_file(pa.BufferReader(data))
        table = pa.Table.from_batches([reader.get_batch(i) for i in range(reader.num_record_batches)])
        return mask_from_table(table)


def _lifted(limits: Limits) -> Limits:
    """``limits`` with nothing left of ``max_bytes`` to refuse: the planted reader has counted."""
    return limits.replace(max_bytes=1 << 62)


def _over(count: int, limits: Limits) -> None:
    if count > limits.max_bytes:
        raise SamplingMaskError(ErrorCode.E_LIMIT, f"{count} bytes counted, over {limits.max_bytes}")


def _batches(form: str, data: bytes) -> list[Any]:
    """The record batches of IPC file / stream bytes, or the row groups of a Parquet file."""
    source = pa.BufferReader(data)
    if form == "arrow":
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]
    if form == "arrows":
        return list(pa.ipc.open_stream(source))
    parquet = pq.ParquetFile(source)
    return [parquet.read_row_group(i) for i in range(parquet.num_row_groups)]


def _mask_bytes(mask: SamplingMask) -> int:
    """SPEC 8.1: the bytes of a mask."""
    per_row = sum(4 for name in mask.companions if name != "support_logprobs")
    per_id = 4 if "support_logprobs" in mask.companions else 0
    rows, nnz = mask.num_rows, mask.nnz
    return 4 * nnz + 8 * (rows + 1) + 8 * (mask.num_segments + 1) + per_row * rows + per_id * nnz


class _CountingReader(ReferenceImplementation):
    """A reader of Arrow forms that counts as :meth:`count` says, then reads with the reference:
    ``masks`` are the batches' masks, ``buffers`` what pyarrow holds of each batch once read (its
    decompressed buffers and those it reads in place)."""

    def count(self, masks: list[SamplingMask], buffers: list[int], limits: Limits) -> Limits:
        """Raise ``E_LIMIT`` where the planted reading refuses; return the limits to read with."""
        raise NotImplementedError

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form not in ARROW_FORMS:
            return super().decode_bytes(form, data, limits)
        batches = _batches(form, data)
        lifted = _lifted(limits).replace(max_rows=1 << 40)
        read = ReferenceImplementation.decode_bytes
        masks = [read(self, form, _one_batch(form, batch), lifted) for batch in batches]
        buffers = [batch.get_total_buffer_size() for batch in batches]
        return super().decode_bytes(form, data, self.count(masks, buffers, limits))


def _one_batch(form: str, batch: Any) -> bytes:
    """``batch`` alone, written again in ``form`` with its schema."""
    sink = io.BytesIO()
    if form == "parquet":
        pq.write_table(batch, sink)
        return sink.getvalue()
    writer = pa.ipc.new_file if form == "arrow" else pa.ipc.new_stream
    with writer(sink, batch.schema) as out:
        out.write_batch(batch)
    return sink.getvalue()


class CountsEitherNotTheSum(_CountingReader):
    """Refuses when the decompressed buffers or the mask's bytes, either one, exceed max_bytes."""

    def count(self, masks: list[SamplingMask], buffers: list[int], limits: Limits) -> Limits:
        _over(max(sum(buffers), sum(_mask_bytes(m) for m in masks)), limits)
        return _lifted(limits)


class CountsEachBatchAlone(_CountingReader):
    """Counts each batch on its own: its decompressed buffers and its mask's bytes, one at a time."""

    def count(self, masks: list[SamplingMask], buffers: list[int], limits: Limits) -> Limits:
        for mask, size in zip(masks, buffers, strict=True):
            _over(size + _mask_bytes(mask), limits)
        return _lifted(limits)


class LimitsEachBatchAlone(_CountingReader):
    """Bounds each batch's rows by max_rows, never the joined mask's."""

    def count(self, masks: list[SamplingMask], buffers: list[int], limits: Limits) -> Limits:
        if any(mask.num_rows > limits.max_rows for mask in masks):
            raise SamplingMaskError(ErrorCode.E_LIMIT, "a batch's rows exceed max_rows")
        return limits.replace(max_rows=1 << 40)


class CountsBuffersStoredUncompressed(_CountingReader):
    """Counts every buffer of a compressed batch as decompressed, those stored as is (-1) too."""

    def count(self, masks: list[SamplingMask], buffers: list[int], limits: Limits) -> Limits:
        _over(sum(buffers) + sum(_mask_bytes(m) for m in masks), limits)
        return _lifted(limits)


class SkipsUnreadBitmaps(ReferenceImplementation):
    """Counts only the buffers it decompresses: an unread validity bitmap's declared length is skipped."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ARROW_FORMS:
            read = sum(batch.get_total_buffer_size() for batch in _batches(form, data))
            _over(read, limits)
            limits = _lifted(limits)
        return super().decode_bytes(form, data, limits)


class CompactRowsNotCounted(ReferenceImplementation):
    """Bounds a compact batch by what its message declares, never by the rows its count columns hold."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ARROW_FORMS:
            _over(sum(batch.get_total_buffer_size() for batch in _batches(form, data)), limits)
            limits = _lifted(limits)
        return super().decode_bytes(form, data, limits)


class ParquetRowsAloneInTheCompactCount(ReferenceImplementation):
    """Checks a compact row group's rows and ids with the bytes of 8.1 alone, not with its pages."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "parquet":
            mask = super().decode_bytes(form, data, _lifted(limits))
            _over(_mask_bytes(mask), limits)
            return mask
        return super().decode_bytes(form, data, limits)


class AcceptsDamagedParquetMagic(ReferenceImplementation):
    """Reads Parquet through its footer only, as pyarrow does: the leading magic is never looked at."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "parquet":
            data = b"PAR1" + data[4:]
        return super().decode_bytes(form, data, limits)


class StoredArraysNeverRefused(ReferenceImplementation):
    """Never refuses an array the payload stores whatever its size: only the mask's bytes count."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "msgpack":
            mask = super().decode_bytes(form, data, _lifted(limits))
            _over(_mask_bytes(mask), limits)
            return mask
        return super().decode_bytes(form, data, limits)


class Base64PartsAlone(ReferenceImplementation):
    """Compares the decoded bytes and the mask's bytes with max_bytes each alone, never their sum."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "base64":
            env = json.loads(data)
            rows, width = env["shape"]
            _over(rows * width * (8 if env["dtype"] == "int64" else 4), limits)
            mask = super().decode_bytes(form, data, _lifted(limits))
            _over(_mask_bytes(mask), limits)
            return mask
        return super().decode_bytes(form, data, limits)


SECTION_8: list[Planted] = [
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
    (BoundsSegmentsByMaxRows, {"json.empty-segments-under-max-rows-zero": "rejected valid input with E_LIMIT"}),
    (
        ArrowIgnoresFieldNodes,
        {
            "arrow.companions-over-max-bytes": "accepted invalid input",
            "parquet.companions-over-max-bytes": "accepted invalid input",
        },
    ),
    (ChecksBytesBeforeLimit, {"ragged.forged-shape": "expected E_LIMIT", "dense.forged-shape": "expected E_LIMIT"}),
    (
        DecompressesFirst,
        {
            "arrow.compressed-length-beyond-limit": "rejected with E_ENCODING, expected E_LIMIT",
            "arrows.compressed-length-beyond-limit": "expected E_LIMIT",
        },
    ),
    (CountsStoredBuffers, {"arrow.large-user-column-within-max-bytes": "rejected valid input with E_LIMIT"}),
    (AcceptsStreamWithoutEnd, {"arrows.no-end-of-stream-marker-after-one-batch": "accepted invalid input"}),
    (AcceptsRepeatedFooterBlocks, {"arrow.footer-block-repeated": "accepted invalid input"}),
    (
        CountsEitherNotTheSum,
        {
            "arrow.compressed-lengths-and-mask-count-together": "accepted invalid input",
            "arrows.compressed-lengths-and-mask-count-together": "accepted invalid input",
        },
    ),
    (
        CountsEachBatchAlone,
        {
            "arrow.batches-count-together": "accepted invalid input",
            "arrows.compressed-lengths-of-batches-count-together": "accepted invalid input",
            "parquet.row-groups-count-together": "accepted invalid input",
        },
    ),
    (
        LimitsEachBatchAlone,
        {
            "arrow.batches-together-over-max-rows": "accepted invalid input",
            "parquet.batches-together-over-max-rows": "accepted invalid input",
        },
    ),
    (
        CountsBuffersStoredUncompressed,
        {
            "arrow.buffer-stored-uncompressed-not-counted": "rejected valid input",
            "arrows.buffer-stored-uncompressed-not-counted": "rejected valid input",
        },
    ),
    (
        SkipsUnreadBitmaps,
        {
            "arrow.unread-validity-bitmap-declared-length-counted": "accepted invalid input",
            "arrows.unread-validity-bitmap-declared-length-counted": "accepted invalid input",
        },
    ),
    (CompactRowsNotCounted, {"arrow.compact-many-empty-rows-over-max-bytes": "accepted invalid input"}),
    (ParquetRowsAloneInTheCompactCount, {"parquet.compact-pages-and-rows-count-together": "accepted invalid input"}),
    (
        AcceptsDamagedParquetMagic,
        {
            "parquet.leading-magic-damaged": "accepted invalid input",
            "parquet.leading-magic-last-byte": "accepted invalid input",
        },
    ),
    (StoredArraysNeverRefused, {"msgpack.array-over-max-bytes-with-its-bytes": "accepted invalid input"}),
    (Base64PartsAlone, {"base64.decoded-bytes-and-mask-count-together": "accepted invalid input"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_8, ids=_ids(SECTION_8))
def test_8_limits_and_reading_procedures(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 8.1 to 8.5: limits are inclusive maxima of the mask (T, never B; companions counted), a
    declared size is compared with max_bytes before anything is read or decompressed, what a batch
    stores is not what it produces, one count per decode (compressed lengths and the mask's bytes
    together, every batch or row group adding to it), incomplete streams and repeated footer blocks
    are refused, and a Parquet file starts with PAR1."""
    _fails(broken, failures)


@pytest.mark.parametrize(
    "case_id",
    [
        "arrow.zstd-compressed",
        "arrows.one-batch-per-segment",
        "arrows.no-batches-keeps-companions-and-metadata",
        "parquet.two-row-groups",
    ],
)
def test_the_counting_readers_read_what_they_must_accept(case_id: str) -> None:
    """The planted counting readers are readers: they answer valid files of one or more batches,
    compressed or not, as the reference does (what fails them is the reading they plant, never
    their scaffolding)."""
    case = next(c for c in CASES if c.id == case_id)
    for reader in (CountsEitherNotTheSum, CountsEachBatchAlone, LimitsEachBatchAlone, SkipsUnreadBitmaps):
        assert runner.run(reader(), [case]).ok, reader.__name__


# ------------------------------------------------------------------------------------------ 9 Arrow and Parquet
class LenientDecimalMetadata(ReferenceImplementation):
    """Reads Arrow sampling_mask.vocab_size with int(), which takes "+10" and "010"."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "arrow":
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            meta = dict(table.schema.metadata or {})
            if b"sampling_mask.vocab_size" in meta:
                meta[b"sampling_mask.vocab_size"] = str(int(meta[b"sampling_mask.vocab_size"])).encode()
                sink = pa.BufferOutputStream()
                with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
                    writer.write_table(table.replace_schema_metadata(meta))
                data = sink.getvalue().to_pybytes()
        return super().decode_bytes(form, data, limits)


class CompactWithoutIdOrder(ReferenceImplementation):
    """An Arrow compact writer that declares id_order unspecified."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "arrow" and options.get("layout") == "compact":
            table = pa.ipc.open_file(pa.BufferReader(bytes.fromhex(out["hex"]))).read_all()
            meta = {**table.schema.metadata, b"sampling_mask.id_order": b"unspecified"}
            sink = pa.BufferOutputStream()
            with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
                writer.write_table(table.replace_schema_metadata(meta))
            out = {"hex": sink.getvalue().to_pybytes().hex()}
        return out


class NoBatchDropsCompanions(ReferenceImplementation):
    """Gives a file of no batch the bare empty mask: no companions, no metadata."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        mask = super().decode_bytes(form, data, limits)
        if form in ARROW_FORMS and mask.num_segments == 0:
            return SamplingMask.from_rows([], cu_seqlens=[0], vocab_size=mask.vocab_size)
        return mask


SECTION_9: list[Planted] = [
    (LenientDecimalMetadata, {"arrow.vocab-size-plus-sign": "accepted invalid input"}),
    (CompactWithoutIdOrder, {"arrow.encode-compact-canonicalizes": "declares id_order = 'unspecified'"}),
    (
        NoBatchDropsCompanions,
        {
            "arrow.no-batches-keeps-companions-and-metadata": "sampled_token_ids",
            "parquet.no-batches-keeps-companions-and-metadata": "sampled_token_ids",
        },
    ),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_9, ids=_ids(SECTION_9))
def test_9_arrow_and_parquet(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 9: schema-metadata decimals have no sign or leading zero, a compact writer declares its
    ascending ids, and a file of no batch keeps the companions and metadata its schema declares."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 10 msgpack
class VersionKeyLast(ReferenceImplementation):
    """A msgpack writer that puts the version key last."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form == "msgpack":
            env = msgpack.unpackb(bytes.fromhex(out["hex"]), raw=False)
            version = env.pop("sampling_mask")
            out = {"hex": msgpack.packb({**env, "sampling_mask": version}, use_bin_type=True).hex()}
        return out


class NilShapeIsSchema(ReferenceImplementation):
    """Answers a nil ARRAY shape as a missing required key (E_SCHEMA)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "msgpack":
            env = _envelope(payload)
            if any(isinstance(v, dict) and "dtype" in v and v.get("shape") is None for v in env.values()):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, "missing shape")
        return super().decode(form, payload, limits)


class MissingOffsetsIsOffsets(ReferenceImplementation):
    """Reads a ragged envelope without offsets as offsets with no entry (E_OFFSETS)."""

    def decode(self, form: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if form == "msgpack":
            env = _envelope(payload)
            if env.get("layout", "ragged") == "ragged" and env.get("offsets") is None and env.get("counts") is None:
                raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets has no entry")
        return super().decode(form, payload, limits)


SECTION_10: list[Planted] = [
    (VersionKeyLast, {"msgpack.encode-unsorted-rows": "first_key = 'layout'"}),
    (NilShapeIsSchema, {"msgpack.array-shape-nil": "rejected with E_SCHEMA, expected E_SHAPE"}),
    (MissingOffsetsIsOffsets, {"msgpack.offsets-and-counts-missing": "rejected with E_OFFSETS, expected E_SCHEMA"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_10, ids=_ids(SECTION_10))
def test_10_the_msgpack_envelope(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 10.1: the version key comes first, a nil ARRAY entry is answered as a wrong value of that
    entry, and an envelope with neither offsets nor counts is E_SCHEMA."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 11 the JSON forms
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


SECTION_11: list[Planted] = [
    (
        ReplacesInvalidUtf8,
        {
            "json.invalid-utf8-in-string": "accepted invalid input",
            "base64.invalid-utf8-in-ignored-key": "accepted invalid input",
        },
    ),
    (RoundsOverflowToInfinity, {"json.sampled-logprob-beyond-float32": "accepted invalid input"}),
    (DeclaresAscendingAlways, {"json.encode-unsorted-rows": "does not decode with the reference"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_11, ids=_ids(SECTION_11))
def test_11_the_json_forms(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 11: the text is UTF-8 everywhere (no replacement characters), a float beyond float32 is
    refused rather than rounded to infinity, and a writer declares id_order truthfully."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 12 the compact layout
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


class SortsIdsNotTheirLogprobs(ReferenceImplementation):
    """A compact container writer that sorts the ids but leaves support_logprobs in stored order."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        if form == "msgpack" and options.get("layout") == "compact" and mask.support_logprobs is not None:
            sorted_rows = SamplingMask.from_rows([sorted(r) for r in mask.to_rows()], vocab_size=mask.vocab_size)
            mask = SamplingMask(
                sorted_rows.ids, mask.offsets, vocab_size=mask.vocab_size, support_logprobs=mask.support_logprobs
            )
        return super().encode(form, mask, options)


SECTION_12: list[Planted] = [
    (CompactWordsBlockByBlock, {"compact.encode-two-blocks-of-one-width": "compact: expected"}),
    (SortsIdsNotTheirLogprobs, {"msgpack.encode-compact-canonicalizes": "round trip"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_12, ids=_ids(SECTION_12))
def test_12_the_compact_layout(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 12: words are grouped by width, and a writer canonicalizes each row with its support
    log-probs permuted alike."""
    _fails(broken, failures)


# ------------------------------------------------------------------------------------------ 13 scoring
class ForgetsTemperature(ReferenceImplementation):
    """Scores the raw logits: the sampler's temperature never reaches the trainer."""

    def score(self, form: str, payload: Any, options: dict[str, Any], limits: Limits | None = None) -> dict[str, Any]:
        return super().score(form, {**payload, "temperature": 1.0}, options, limits)


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


SECTION_13: list[Planted] = [
    (ForgetsTemperature, {"scorer.temperature-scalar": "logprobs[0]"}),
    (
        ScoresEmptyRowsOverV,
        {
            "scorer.empty-row-over-padded-vocabulary": "logprobs[1]",
            "scorer.missing-target-full-over-padded-vocabulary": "logprobs[1]",
        },
    ),
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
    (ExcludeIsFull, {"scorer.empty-row-excluded": "logprobs[1]", "scorer.empty-row-excluded-hidden": "logprobs[1]"}),
]


@pytest.mark.parametrize(("broken", "failures"), SECTION_13, ids=_ids(SECTION_13))
def test_13_scoring(broken: type[ReferenceImplementation], failures: dict[str, str]) -> None:
    """SPEC 13.1 and 13.2: the temperature (the caller's, else the companion's) scales the logits, an
    empty row is scored over all V' logits or excluded as asked, a target of -1 or a NaN temperature
    on a scored row and an id or target beyond the logits are E_RANGE, and a target outside its
    support is E_MISSING_SAMPLED unless a policy says otherwise."""
    _fails(broken, failures)


#: The planted bugs of the MUSTs of 3.6, 4, 8.1 to 8.4 and 13.2 that the suite fails from two angles.
TWO_ANGLES = (
    ConcatIgnoresVocabMismatch,
    ConcatSkipsAdoptedRangeCheck,
    ConcatIgnoresCompanions,
    ConcatIgnoresMetadata,
    ConcatOneSegmentPerMask,
    SliceLikePython,
    SliceDropsEmptySegments,
    TakeDeduplicates,
    TakeRefusesNegative,
    TakeWrapsAround,
    CastsFloatArrays,
    TruncatesToInt32,
    FlattensArrays,
    MissingIdsAreEmpty,
    ForgetsCompanionBytes,
    LimitsAreExclusive,
    ArrowIgnoresFieldNodes,
    ChecksBytesBeforeLimit,
    DecompressesFirst,
    PadsLogitsToTheIds,
    MinusOneTargetIsNoValue,
    NanTemperatureIsOne,
    IgnoresTemperatureCompanion,
    MissingTargetScoredFull,
    ScoresEmptyRowsOverV,
    ExcludeIsFull,
)


def test_the_musts_of_3_6_4_8_and_13_2_are_failed_from_two_angles() -> None:
    """Each MUST of 3.6, 4, 8.1 to 8.4 and 13.2 that a planted bug breaks is failed by at least two
    cases written from different angles, so that no single case carries a requirement alone."""
    planted = dict(SECTION_3 + SECTION_4 + SECTION_8 + SECTION_13)
    assert len(TWO_ANGLES) == 26
    for broken in TWO_ANGLES:
        assert len(planted[broken]) >= 2, broken.__name__


# ------------------------------------------------------------------------------------------ 16 conformance
def test_broken_implementation_fails_the_cli_too() -> None:
    """Through `--impl module:object`, a broken implementation makes the command exit non-zero."""
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
def test_generated_cases_find_planted_bugs_of_3_6_8_1_and_13_2(
    broken: type[ReferenceImplementation], name: str, kind: str
) -> None:
    """SPEC 16: the generated strategies of the model operations, the limits and the scoring rows find
    these bugs too, under one seed (a seed draws the same cases in every process), and agree with the
    reference itself under it."""
    n = 200 if name == "model operations" else 60
    out = io.StringIO()
    assert run_generated(broken(), n, seed=3, classes=[name], out=out) == 1, out.getvalue()[-2000:]
    assert f"FAIL        {name}: {kind}:" in out.getvalue()
    out = io.StringIO()
    assert run_generated(ReferenceImplementation(), n, seed=3, classes=[name], out=out) == 0, out.getvalue()
