"""Proof of teeth for the 1.4 sentences: each planted bug reads one of them another way, changes an
answer, and is failed by a named fixed case, which the reference passes.

The byte-count bugs of 8.5 are readers that count exactly what their reading of the text says (no
temporaries, so that nothing but the reading decides): they compare their own count with
``max_bytes`` and then let the reference read the payload with ``max_bytes`` lifted. Grouped by spec
section.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.conformance import runner
from sampling_mask.conformance.reference import ReferenceImplementation
from sampling_mask.conformance.suite import load_cases
from sampling_mask.core.limits import DEFAULT_LIMITS, Limits

CASES = load_cases()
ARROW_FORMS = ("arrow", "arrows", "parquet")


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


# ------------------------------------------------------------------------------------------ 8.5, 8.5.6
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


# ------------------------------------------------------------------------------------------ 8.5.7
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


# ------------------------------------------------------------------------------------------ 8.5.2, 8.5.4
class StoredArraysNeverRefused(ReferenceImplementation):
    """Never refuses an array the payload stores (1.3's 8.1 read literally): only the mask's bytes count."""

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


# ------------------------------------------------------------------------------------------ 5.2, 9.2, 9.3
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


class WritesReservedSchemaKey(ReferenceImplementation):
    """Writes a schema-metadata key of its own under the format's prefix (reserved, 9.2)."""

    def encode(self, form: str, mask: SamplingMask, options: dict[str, Any]) -> dict[str, Any]:
        out = super().encode(form, mask, options)
        if form in ARROW_FORMS:
            data = _rewritten(form, bytes.fromhex(out["hex"]), lambda m: {**m, b"sampling_mask.writer": b'"x"'})
            out = {"hex": data.hex()}
        return out


class NoBatchDropsCompanions(ReferenceImplementation):
    """Gives a file of no batch the bare empty mask: no companions, no metadata."""

    def decode_bytes(self, form: str, data: bytes, limits: Limits) -> SamplingMask:
        mask = super().decode_bytes(form, data, limits)
        if form in ARROW_FORMS and mask.num_segments == 0:
            return SamplingMask.from_rows([], cu_seqlens=[0], vocab_size=mask.vocab_size)
        return mask


# ------------------------------------------------------------------------------------------ 3.6, 11.2
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


BROKEN = [
    # 8.5, 8.5.6: one count per decode, the compressed lengths and the mask's bytes together.
    (CountsEitherNotTheSum, "arrow.compressed-lengths-and-mask-count-together", "accepted invalid input"),
    (CountsEitherNotTheSum, "arrows.compressed-lengths-and-mask-count-together", "accepted invalid input"),
    (CountsEachBatchAlone, "arrow.batches-count-together", "accepted invalid input"),
    (CountsEachBatchAlone, "arrows.compressed-lengths-of-batches-count-together", "accepted invalid input"),
    (CountsEachBatchAlone, "parquet.row-groups-count-together", "accepted invalid input"),
    (LimitsEachBatchAlone, "arrow.batches-together-over-max-rows", "accepted invalid input"),
    (LimitsEachBatchAlone, "parquet.batches-together-over-max-rows", "accepted invalid input"),
    (CountsBuffersStoredUncompressed, "arrow.buffer-stored-uncompressed-not-counted", "rejected valid input"),
    (CountsBuffersStoredUncompressed, "arrows.buffer-stored-uncompressed-not-counted", "rejected valid input"),
    (SkipsUnreadBitmaps, "arrow.unread-validity-bitmap-declared-length-counted", "accepted invalid input"),
    (SkipsUnreadBitmaps, "arrows.unread-validity-bitmap-declared-length-counted", "accepted invalid input"),
    (CompactRowsNotCounted, "arrow.compact-many-empty-rows-over-max-bytes", "accepted invalid input"),
    # 8.5.7
    (ParquetRowsAloneInTheCompactCount, "parquet.compact-pages-and-rows-count-together", "accepted invalid input"),
    (AcceptsDamagedParquetMagic, "parquet.leading-magic-damaged", "accepted invalid input"),
    (AcceptsDamagedParquetMagic, "parquet.leading-magic-last-byte", "accepted invalid input"),
    # 8.5.2, 8.5.4: declared arrays, and the base64 text's decoded bytes in the count.
    (StoredArraysNeverRefused, "msgpack.array-over-max-bytes-with-its-bytes", "accepted invalid input"),
    (Base64PartsAlone, "base64.decoded-bytes-and-mask-count-together", "accepted invalid input"),
    # 5.2, 9.2, 9.3
    (ReadsIntegralFloatMetadataAsInteger, "arrow.metadata-top-k-integral-float", "accepted invalid input"),
    (ReadsIntegralFloatMetadataAsInteger, "parquet.metadata-top-k-integral-float", "accepted invalid input"),
    (WritesReservedSchemaKey, "arrow.encode-roundtrip-companions", "not within the 1.0 profile"),
    (WritesReservedSchemaKey, "parquet.encode-roundtrip-companions", "not within the 1.0 profile"),
    (NoBatchDropsCompanions, "arrow.no-batches-keeps-companions-and-metadata", "sampled_token_ids"),
    (NoBatchDropsCompanions, "parquet.no-batches-keeps-companions-and-metadata", "sampled_token_ids"),
    # 3.6, 11.2: the metadata string "NaN" is a string.
    (StringNanIsTheFloat, "json.metadata-string-nan", "metadata"),
    (StringNanIsTheFloat, "model.concatenate-metadata-string-nan-against-float-nan", "accepted invalid input"),
]


@pytest.mark.parametrize(("broken", "case_id", "why"), BROKEN, ids=[f"{b[0].__name__}-{b[1]}" for b in BROKEN])
def test_each_planted_bug_fails_a_named_case(broken: type[ReferenceImplementation], case_id: str, why: str) -> None:
    case = next(c for c in CASES if c.id == case_id)
    result = runner.run(broken(), [case]).results[0]
    assert result.status == "FAIL", (result.status, result.detail)
    assert why in result.detail, result.detail
    assert runner.run(ReferenceImplementation(), [case]).ok  # the failure is the bug's, not the case's


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


def test_string_nan_stays_a_string_through_the_reference() -> None:
    """The reference keeps a metadata string "NaN" a string in every form that carries metadata."""
    import sampling_mask

    mask = SamplingMask.from_rows([[1]], metadata={"note": "NaN", "x": math.nan})
    for form in ("json", "msgpack", "arrow", "parquet"):
        back = sampling_mask.decode(sampling_mask.encode(mask, form), format=form)
        assert back.metadata["note"] == "NaN", form
        assert isinstance(back.metadata["x"], float) and math.isnan(back.metadata["x"]), form
