"""Proof of teeth for spec 1.3: the planted-bug kinds an implementation written from the 1.2 text
passed every fixed case with, each now failed by a named case (written from the spec sentence the
bug breaks), while the reference passes the same cases."""

from __future__ import annotations

import io
from typing import Any

import msgpack
import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.conformance import runner
from sampling_mask.conformance.generated import run_generated
from sampling_mask.conformance.payloads import array_from_json, mask_from_json
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import load_cases
from sampling_mask.core.limits import DEFAULT_LIMITS, Limits
from sampling_mask.core.model import concat

CASES = load_cases()


def _envelope(payload: Any) -> dict[str, Any]:
    return msgpack.unpackb(bytes.fromhex(payload["hex"]), raw=False, strict_map_key=False)  # type: ignore[no-any-return]


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


class TakeNothingDropsTheRest(ReferenceImplementation):
    """``take([])`` gives a bare empty mask: no companions, no metadata."""

    def operate(self, op: str, payload: Any, limits: Limits = DEFAULT_LIMITS) -> SamplingMask:
        if op == "take" and payload.get("segments") == []:
            mask = mask_from_json(payload["mask"], limits=limits)
            return SamplingMask.from_rows([], cu_seqlens=[0], vocab_size=mask.vocab_size)
        return super().operate(op, payload, limits)


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
        import pyarrow as pa

        from sampling_mask.codecs.arrow import mask_from_table

        reader = pa.ipc.open_file(pa.BufferReader(data))
        table = pa.Table.from_batches([reader.get_batch(i) for i in range(reader.num_record_batches)])
        return mask_from_table(table)


class CountsStoredBuffers(ReferenceImplementation):
    """Bounds a batch by the buffers it stores (9.5 of 1.2 read literally)."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form in ("arrow", "arrows"):
            import pyarrow as pa

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


class BoundsSegmentsByMaxRows(ReferenceImplementation):
    """Bounds the length of a JSON document's cu_seqlens by max_rows + 1 (the reference's 1.2 bug)."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "json":
            import json

            cu = json.loads(data).get("cu_seqlens") or []
            if len(cu) > limits.max_rows + 1:
                raise SamplingMaskError(ErrorCode.E_LIMIT, "list length exceeds the limit", field="cu_seqlens")
        return super().decode_bytes(form, data, limits)


class IntegralFloatTopK(ReferenceImplementation):
    """Reads a JSON top_k of 4.0 as the integer 4."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        if form == "json":
            data = data.replace(b'"top_k": 4.0', b'"top_k": 4')
        return super().decode_bytes(form, data, limits)


BROKEN = [
    (SliceCountsFromTheEnd, "model.slice-negative-start-valid-from-the-end", "accepted invalid input"),
    (SliceCountsFromTheEnd, "model.slice-negative-stop", "accepted invalid input"),
    (SliceDefaultsOmittedBounds, "model.slice-stop-omitted", "accepted invalid input"),
    (SliceDefaultsOmittedBounds, "model.slice-start-omitted", "accepted invalid input"),
    (EmptySliceKeepsTouchingSegments, "model.slice-empty-between-segments", "cu_seqlens"),
    (ConcatKeepsLastMetadata, "model.concatenate-keeps-first-metadata-kind", "metadata 'seed'"),
    (ConcatNanMetadataUnequal, "model.concatenate-metadata-nan-equals-nan", "rejected valid input with E_SCHEMA"),
    (TakeNothingDropsTheRest, "model.take-no-segment-keeps-companions-and-metadata", "sampled_token_ids"),
    (NilShapeIsSchema, "msgpack.array-shape-nil", "rejected with E_SCHEMA, expected E_SHAPE"),
    (MissingOffsetsIsOffsets, "msgpack.offsets-and-counts-missing", "rejected with E_OFFSETS, expected E_SCHEMA"),
    (WritesCountsByDefault, "msgpack.encode-ragged-roundtrip", "not within the 1.0 profile"),
    (WritesNilMetadata, "msgpack.encode-unsorted-rows", "'metadata' is nil"),
    (WrapsSampledIds, "ragged.sampled-id-int64-beyond-int32", "accepted invalid input"),
    (AcceptsStreamWithoutEnd, "arrows.no-end-of-stream-marker-after-one-batch", "accepted invalid input"),
    (AcceptsRepeatedFooterBlocks, "arrow.footer-block-repeated", "accepted invalid input"),
    (CountsStoredBuffers, "arrow.large-user-column-within-max-bytes", "rejected valid input with E_LIMIT"),
    (BoundsSegmentsByMaxRows, "json.empty-segments-under-max-rows-zero", "rejected valid input with E_LIMIT"),
    (IntegralFloatTopK, "json.metadata-top-k-integral-float", "accepted invalid input"),
]


@pytest.mark.parametrize(("broken", "case_id", "why"), BROKEN, ids=[f"{b[0].__name__}-{b[1]}" for b in BROKEN])
def test_each_planted_bug_fails_a_named_case(broken: type[ReferenceImplementation], case_id: str, why: str) -> None:
    case = next(c for c in CASES if c.id == case_id)
    result = runner.run(broken(), [case]).results[0]
    assert result.status == "FAIL", (result.status, result.detail)
    assert why in result.detail, result.detail
    assert runner.run(ReferenceImplementation(), [case]).ok  # the failure is the bug's, not the case's


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
    import sys
    import types

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
