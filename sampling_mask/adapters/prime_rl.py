"""prime-rl / verifiers adapter: the ``{ids, counts, logprobs}`` payload and prime-rl's packed trainer tensor.

| | |
| --- | --- |
| upstream | PrimeIntellect-ai/prime-rl (source only); verifiers 0.4.0 and renderers 0.1.12 (PyPI wheels) |
| version | prime-rl ``src/prime_rl/transport/types.py``: ``SamplingMask(msgspec.Struct, array_like=True, gc=False, omit_defaults=True)`` with ``ids: bytes``, ``counts: bytes``, ``logprobs: bytes | None = None``, the field ``TrainingSample.sampling_mask`` / ``MicroBatch.sampling_mask`` (main after PR #3235; the code-index copy, commit not resolvable here; PR #3235 @ d09488d57ae4 named the same struct ``KeptTokens(ids, counts)``). Trainer: PR #3235 @ d09488d57ae4 ``src/prime_rl/trainer/rl/data.py`` (packing), ``trainer/rl/train.py`` (shift), ``utils/cp.py`` ``shard_for_cp`` (split); capture: ``inference/vllm/kept_tokens.py`` (cap 512, ``{"ids", "counts"}`` base64 on ``/inference/v1/generate``). verifiers 0.4.0 ``verifiers/v1/types.py`` ``SamplingMask`` (dataclass ``ids``, ``counts``), ``verifiers/v1/graph.py`` (``MessageNode.sampling_mask`` serialized as ``{"ids": nd, "counts": nd}``, ``nd = {"__nd__": True, "dtype", "shape", "data": bytes}``); renderers 0.1.12 ``renderers/client.py`` passes vLLM's ``choices[i].sampling_mask`` (``list[list[int]]``) through. |
| fields | ``ids`` int32 little-endian bytes [nnz]; ``counts`` int32 bytes [num_tokens] (one per token of the sample, prompt and observation tokens included); ``logprobs`` float32 bytes [nnz] parallel to ``ids`` (the sampler's renormalized log-prob of each kept id), optional |
| wire | msgpack **array** (``array_like``), never a map: ``[ids, counts, logprobs]`` with ``nil`` for absent logprobs (msgspec 0.23 keeps the trailing default); PR #3235's ``KeptTokens`` is ``[ids, counts]``. The HTTP form is a map of base64 text. |
| verifiers writer | :func:`to_verifiers` / :func:`to_verifiers_msgpack`: a ``MessageNode.sampling_mask`` as verifiers 0.4.0 dumps it (``{"ids": nd, "counts": nd}``, int32 ``__nd__`` dicts, one row per sampled token of the node) and as ``serve/delta.py`` ``pack`` puts it on the env-server wire (byte for byte); verifiers' ``deserialize_sampling_mask`` and ``Branch.sampling_mask`` read it back (``tests/fixtures/upstream/verifiers/make_verifiers_nd.py``) |
| ordering | rows in token order; ids in each row in capture order (kept as stored) |
| count 0 | no mask: a prompt / observation / tool / padding token, a position that was not truncated, **or** a kept set wider than the 512 capture cap (``kept_tokens.py``). The payload cannot tell these apart; with the sample's trainable-token mask, :func:`sampled_without_support` lists the sampled positions that have none (over cap or untruncated). prime-rl's trainer scores those rows over the full vocabulary. |
| over cap | rows wider than 512 are never produced by prime-rl's capture; :func:`to_payload` writes any width, :func:`empty_rows_over_cap` is the opt-in, counted way to reproduce the cap |
| trainer | ``[1, N, K]`` int32, ``-1`` padded, K = max(max count, 1) over the packed micro batch; shifted left **once over the whole packed sequence** (``shift_tensor_left(pad_value=-1)``: position t holds token t+1's row, across sample boundaries; the last position is all ``-1``); split for context parallelism with ``torch.chunk`` over the packed sequence (N must divide by the CP size) |
| tests build | prime-rl ``SamplingMask`` structs (copied definition) encoded by ``msgspec.msgpack``, with and without logprobs, empty / over-cap / prompt rows; verifiers ``SamplingMask.from_sampling_mask`` objects and ``MessageNode`` serialized masks; prime-rl's packing + ``shift_tensor_left`` + ``shard_for_cp`` on a packed micro batch (``tests/fixtures/upstream/make_trainers.py``) |

``None`` (no mask at all) reads as ``num_tokens`` empty rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codecs import msgpack as msgpack_codec
from ..core import layouts
from ..core.checks import as_float_array, get_field, is_int
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import Limits, check_count
from ..core.model import ReaderOptions, SamplingMask, as_sampling_mask, mask_options
from ..data import alignment
from ._common import array_from_base64, array_from_bytes, array_to_base64, int_array

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "CAPTURE_CAP",
    "context_parallel_packed_rows",
    "empty_rows_over_cap",
    "from_trainer_tensor",
    "from_wire",
    "sampled_without_support",
    "shard",
    "shift_packed_left",
    "to_msgpack",
    "to_payload",
    "to_trainer_tensor",
    "to_verifiers",
    "to_verifiers_msgpack",
    "to_wire",
    "unshift_packed",
]

#: prime-rl's capture width (``kept_tokens.py`` ``SAMPLING_MASK_MAX``): wider kept sets ship count 0.
CAPTURE_CAP = 512


def _buffer(value: Any, name: str, dtype: str, limits: Limits) -> np.ndarray:
    """One payload field: base64 text, raw little-endian bytes, a verifiers ``__nd__`` dict or an array."""
    if isinstance(value, str):
        return array_from_base64(value, dtype, field=name, limits=limits)
    if isinstance(value, Mapping) and value.get("__nd__"):
        return _nd_array(value, name, dtype, limits)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return array_from_bytes(value, dtype, field=name, limits=limits)
    if dtype == "int32":
        return int_array(value, np.int32, field=name)
    return as_float_array(value, field=name, integers=True)


def _nd_array(value: Mapping[str, Any], name: str, dtype: str, limits: Limits) -> np.ndarray:
    """verifiers' ``{"__nd__": True, "dtype", "shape", "data"}`` (``graph._encode_ndarray``): 1-D ``dtype`` only."""
    declared, shape, data = value.get("dtype"), value.get("shape"), value.get("data")
    if declared not in (dtype, "<" + ("i4" if dtype == "int32" else "f4")):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"expected {dtype}, got {short_repr(declared)}", field=name)
    if not isinstance(shape, list) or len(shape) != 1 or not is_int(shape[0]):
        raise SamplingMaskError(ErrorCode.E_SHAPE, "expected a 1-D shape", field=name)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "'data' must be bytes", field=name)
    arr = _buffer(data, name, dtype, limits)
    if arr.size != shape[0]:
        raise SamplingMaskError(
            ErrorCode.E_BYTES, f"{arr.size} values for the declared shape {shape}", field=name, value=arr.size
        )
    return arr


def _fields(payload: Any, limits: Limits) -> tuple[Any, Any, Any]:
    """(ids, counts, logprobs) from any of the payload forms (see :func:`from_wire`)."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        if len(payload) > limits.max_bytes:
            raise SamplingMaskError(ErrorCode.E_LIMIT, f"{len(payload)} bytes exceed the limit", field="sampling_mask")
        payload = msgpack_codec.read_value(payload, max_depth=limits.max_json_depth, max_bytes=limits.max_bytes)
    if isinstance(payload, (list, tuple)):
        if len(payload) not in (2, 3):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"an array_like payload has 2 or 3 fields (ids, counts[, logprobs]), got {len(payload)}",
                field="sampling_mask",
            )
        return payload[0], payload[1], payload[2] if len(payload) == 3 else None
    ids = get_field(payload, "ids", where="sampling_mask")
    counts = get_field(payload, "counts", where="sampling_mask")
    return ids, counts, get_field(payload, "logprobs", None)


@mask_options(ReaderOptions)
def from_wire(sampling_mask: Any, *, num_tokens: int | None = None, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """One sample's mask from any upstream form of the payload:

    * prime-rl's struct object, or its ``array_like`` decoding ``[ids, counts]`` / ``[ids, counts, logprobs]``
      (a list of bytes), or the msgpack bytes of that array;
    * a map ``{"ids", "counts"[, "logprobs"]}`` whose values are base64 text (``/inference/v1/generate``),
      raw bytes, verifiers ``__nd__`` dicts or arrays; verifiers' ``SamplingMask`` (numpy fields);
    * ``None``: ``num_tokens`` empty rows.

    ``logprobs`` become ``support_logprobs``. ``num_tokens``, when given, must equal the number of
    counts (``E_SHAPE``); prime-rl pads or cuts counts to the sample length, this never does. The
    keyword options (:class:`~sampling_mask.core.model.ReaderOptions`) go to the mask
    (payload logprobs replace ``support_logprobs``)."""
    limits = options["limits"]
    if sampling_mask is None:
        if num_tokens is None:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "no mask and no num_tokens", field="sampling_mask")
        rows = check_count(num_tokens, limits.max_rows, "num_tokens", field="num_tokens")
        return SamplingMask(np.zeros(0, np.int32), np.zeros(rows + 1, np.int64), **options)
    ids_value, counts_value, logprobs_value = _fields(sampling_mask, limits)
    ids = _buffer(ids_value, "ids", "int32", limits)
    counts = _buffer(counts_value, "counts", "int32", limits)
    if num_tokens is not None and counts.size != int(num_tokens):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{counts.size} counts for a sample of {int(num_tokens)} tokens", field="counts"
        )
    if logprobs_value is not None:
        logprobs = _buffer(logprobs_value, "logprobs", "float32", limits)
        if logprobs.size != ids.size:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"{logprobs.size} logprobs for {ids.size} ids", field="logprobs")
        options["support_logprobs"] = logprobs
    return SamplingMask.from_counts(ids, counts, **options)


def _counts(mask: SamplingMask) -> tuple[np.ndarray, np.ndarray]:
    ids, counts = mask.to_counts()
    return np.ascontiguousarray(ids, "<i4"), np.ascontiguousarray(counts, "<i4")


def to_payload(mask: SamplingMask, *, logprobs: bool = True) -> list[bytes | None]:
    """prime-rl's ``SamplingMask`` struct as its ``array_like`` fields ``[ids, counts, logprobs]``;
    ``logprobs`` is the float32 bytes of ``support_logprobs`` (``None`` without them or with
    ``logprobs=False``). Pass it to ``msgspec.convert(payload, SamplingMask)``. Every row is written
    as it is (see :func:`empty_rows_over_cap` for prime-rl's capture cap)."""
    mask = as_sampling_mask(mask)
    ids, counts = _counts(mask)
    lp = mask.support_logprobs if logprobs else None
    return [ids.tobytes(), counts.tobytes(), None if lp is None else np.ascontiguousarray(lp, "<f4").tobytes()]


def to_msgpack(mask: SamplingMask, *, logprobs: bool = True) -> bytes:
    """The bytes ``msgspec.msgpack.encode`` (msgspec 0.23) gives for the struct of :func:`to_payload`:
    a 3-element array of ``bin`` values, ``nil`` for absent logprobs (``omit_defaults`` does not drop
    a trailing default of an ``array_like`` struct)."""
    import msgpack

    return msgpack.packb(to_payload(mask, logprobs=logprobs), use_bin_type=True)


def _nd(array: np.ndarray) -> dict[str, Any]:
    """verifiers 0.4.0 ``graph._encode_ndarray``: ``{"__nd__": True, "dtype", "shape", "data"}``."""
    return {"__nd__": True, "dtype": "int32", "shape": [int(array.size)], "data": array.tobytes()}


def to_verifiers(mask: SamplingMask) -> dict[str, dict[str, Any]]:
    """A verifiers ``MessageNode.sampling_mask`` as verifiers 0.4.0 serializes it
    (``MessageNode.serialize_sampling_mask``, ``model_dump(mode="python")``): ``{"ids": nd,
    "counts": nd}``, each ``nd`` an int32 ``__nd__`` dict with raw little-endian bytes. A node's mask
    has one row per *sampled* token of the node (``sum(node.mask)``; ``_attribute_sampling_mask``
    drops a mask of any other length), so write the node's rows, not a branch's: ``Branch.sampling_mask``
    rebuilds the branch from its nodes. Logprobs have no place in verifiers' struct and are not written."""
    mask = as_sampling_mask(mask)
    ids, counts = _counts(mask)
    return {"ids": _nd(ids), "counts": _nd(counts)}


def to_verifiers_msgpack(mask: SamplingMask) -> bytes:
    """:func:`to_verifiers` packed as verifiers' env-server wire packs it (``serve/delta.py`` ``pack``:
    ``msgpack.packb(..., use_bin_type=True)``): a map, ``bin`` data. Needs the ``msgpack`` package.
    :func:`from_wire` reads it back."""
    import msgpack

    return msgpack.packb(to_verifiers(mask), use_bin_type=True)


def to_wire(mask: SamplingMask) -> dict[str, str]:
    """``{"ids": base64 int32, "counts": base64 int32}`` of a one-sample mask (the HTTP form of
    ``kept_tokens.serialize_kept_tokens``, which sends ``None`` instead when every count is 0)."""
    mask = as_sampling_mask(mask)
    ids, counts = _counts(mask)
    return {"ids": array_to_base64(ids, "int32"), "counts": array_to_base64(counts, "int32")}


def empty_rows_over_cap(mask: SamplingMask, cap: int = CAPTURE_CAP) -> tuple[SamplingMask, np.ndarray]:
    """Opt-in repair that reproduces prime-rl's capture: rows wider than ``cap`` become empty (count 0,
    "no mask"). Returns the new mask and the indices of the rows emptied (the count of the repair)."""
    mask = as_sampling_mask(mask)
    lengths = mask.row_lengths
    over = np.flatnonzero(lengths > int(cap))
    if over.size == 0:
        return mask, over
    keep = np.repeat(lengths <= int(cap), lengths)
    new_lengths = np.where(lengths > int(cap), 0, lengths)
    companions: dict[str, Any] = dict(mask.companions)
    if "support_logprobs" in companions:
        companions["support_logprobs"] = companions["support_logprobs"][keep]
    repaired = SamplingMask(
        mask.ids[keep],
        layouts.counts_to_offsets(new_lengths),
        cu_seqlens=mask.cu_seqlens,
        vocab_size=mask.vocab_size,
        metadata=mask.metadata,
        validate=False,
        **companions,
    )
    return repaired, over


def sampled_without_support(mask: SamplingMask, trainable: Any) -> np.ndarray:
    """Row indices where the token is trainable (``TrainingSample.mask`` true: model-sampled) but the
    row is empty: count 0 there means the kept set was wider than the capture cap or the position was
    not truncated, not a prompt token. prime-rl scores these rows over the full vocabulary."""
    mask = as_sampling_mask(mask)
    flags = np.asarray(alignment.as_host_array(trainable, field="trainable"))
    if flags.ndim != 1 or flags.size != mask.num_rows:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"expected {mask.num_rows} trainable flags", field="trainable", value=int(flags.size)
        )
    return np.flatnonzero(flags.astype(bool) & (mask.row_lengths == 0))


# ---------------------------------------------------------------------- trainer (packed micro batch)
def shift_packed_left(mask: SamplingMask) -> SamplingMask:
    """prime-rl's ``shift_tensor_left(kept, pad_value=-1)``: one shift over the whole packed sequence
    (segments are the packed samples, kept as ``cu_seqlens``). Position t gets row t+1, across
    sample boundaries; the last position is empty. Row 0 must be empty (``E_SCHEMA``): no logits
    score it, and prime-rl drops it. Not :func:`sampling_mask.data.alignment.shift_left`, which
    shifts inside each segment."""
    mask = as_sampling_mask(mask)
    n = mask.num_rows
    if n and mask.row_lengths[0] > 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the first packed row has support, but no logits score the first token", row=0
        )
    rows = np.arange(1, n + 1, dtype=np.int64)
    if n:
        rows[-1] = -1
    return alignment.take_rows(mask, rows, mask.cu_seqlens)


def unshift_packed(mask: SamplingMask) -> SamplingMask:
    """Inverse of :func:`shift_packed_left` (not :func:`sampling_mask.data.alignment.unshift`, which
    works per segment); the last packed row must be empty (``E_SCHEMA``)."""
    mask = as_sampling_mask(mask)
    n = mask.num_rows
    if n and mask.row_lengths[-1] > 0:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "the last packed position scores nothing and must be empty", row=n - 1
        )
    return alignment.take_rows(mask, np.arange(-1, n - 1, dtype=np.int64), mask.cu_seqlens)


def to_trainer_tensor(mask: SamplingMask, *, width: int | None = None) -> np.ndarray:
    """The trainer's ``kept`` tensor after ``shift_tensor_left``: int32 ``[1, N, K]``, ``-1`` padded,
    from the token-aligned rows of one packed micro batch (all samples concatenated). K defaults to
    ``max(max count, 1)`` as in prime-rl's ``DataLoader``."""
    mask = as_sampling_mask(mask)
    shifted = shift_packed_left(mask)
    if width is None:
        width = max(int(shifted.row_lengths.max(initial=0)), 1)
    return shifted.to_dense(width)[None]


@mask_options(ReaderOptions)
def from_trainer_tensor(tensor: Any, cu_seqlens: Any = None, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """Token-aligned rows from a shifted ``[1, N, K]`` (or ``[N, K]``) tensor; inverse of
    :func:`to_trainer_tensor`. ``cu_seqlens`` (the packed samples) segments the result. Keyword
    options (:class:`~sampling_mask.core.model.ReaderOptions`) apply to the shifted rows."""
    dense = alignment.as_host_array(tensor, field="tensor")
    if dense.ndim == 3:
        if dense.shape[0] != 1:
            raise SamplingMaskError(ErrorCode.E_SHAPE, "a packed micro batch has batch size 1", field="tensor")
        dense = dense[0]
    shifted = SamplingMask.from_dense(dense, **options)
    if cu_seqlens is not None:
        shifted = shifted.replace(cu_seqlens=cu_seqlens)
    return unshift_packed(shifted)


def context_parallel_packed_rows(num_rows: int, world_size: int, rank: int) -> np.ndarray:
    """The packed positions context-parallel ``rank`` holds in prime-rl: ``shard_for_cp`` is
    ``torch.chunk(t, world_size, dim=1)[rank]`` over the whole packed sequence, which must divide
    evenly (``E_SHAPE``, as prime-rl refuses it). cu=[0, 5, 12], P=2: ``[0..5]`` and ``[6..11]``.
    Not :func:`sampling_mask.data.alignment.context_parallel_rows`, which splits each sequence of
    ``cu_seqlens``. A non-integer argument is ``E_DTYPE``."""
    for name, value in (("num_rows", num_rows), ("world_size", world_size), ("rank", rank)):
        if not is_int(value):
            raise SamplingMaskError(
                ErrorCode.E_DTYPE, f"{name} must be an integer", field=name, value=short_repr(value)
            )
    n = check_count(num_rows, 2**62, "num_rows", field="num_rows")
    p = int(world_size)
    if p < 1 or not 0 <= int(rank) < p:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"rank {rank} outside world size {world_size}", field="rank")
    if n % p:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{n} packed positions do not divide by the CP size {p}", field="num_rows", value=n
        )
    size = n // p
    return np.arange(int(rank) * size, (int(rank) + 1) * size, dtype=np.int64)


def shard(value: Any, world_size: int, rank: int) -> Any:
    """``rank``'s part of a label-aligned packed mask (one segment) or of a ``[1, N, ...]`` / ``[N, ...]``
    array, exactly as prime-rl's ``shard_for_cp`` splits the labels."""
    if hasattr(value, "__sampling_mask__"):  # a SamplingMask, or one of another copy (the mask protocol)
        value = as_sampling_mask(value)
        rows = context_parallel_packed_rows(value.num_rows, world_size, rank)
        return alignment.take_rows(value, rows, [0, rows.size])
    arr = alignment.as_host_array(value, field="array")
    if arr.ndim >= 2 and arr.shape[0] == 1:
        return arr[:, context_parallel_packed_rows(arr.shape[1], world_size, rank)]
    return arr[context_parallel_packed_rows(arr.shape[0] if arr.ndim else 0, world_size, rank)]
