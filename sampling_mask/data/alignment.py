"""Trainer-side alignment: put each mask row where the trainer's logits score its token.

Conventions (every function here keeps them):

* An *input-aligned* mask has one row per input token of each sequence (segment): prompt and
  observation tokens have empty rows, generated tokens their captured rows.
* A *label-aligned* mask is what a causal LM trainer consumes: the logits at position t score token
  t+1 (the label at t), so row t+1 of the input-aligned mask sits at position t. The last position
  of every sequence scores nothing and gets an empty row (:func:`shift_left`).
* Padding positions and padding segments are empty rows; empty rows are never scored.
* Companions follow their rows; an inserted empty row gets sampled id ``-1``, ``NaN`` logprob and
  ``NaN`` temperature.

Context parallelism (:func:`context_parallel_rows`) splits every sequence of length L into
n = P chunks (``"contiguous"``: rank r takes chunk r) or n = 2P chunks (``"zigzag"``: rank r
takes chunks r and 2P-1-r, in that order), P = world_size. Uneven lengths are split the way
``np.array_split`` splits: the first ``L mod n`` chunks hold ``ceil(L/n)`` rows and the others
``floor(L/n)`` (a chunk may be empty). Megatron / TransformerEngine first pad every sequence to a
multiple of 2P (``pad_segments(mask, multiple=2 * P)``), after which all chunks are equal. Split the
labels with :func:`shard_array` and the mask with :func:`shard_mask`: both use the same row indices.

prime-rl does neither: it shifts the packed micro batch once as a whole and splits it with
``torch.chunk`` (cu=[0, 5, 12], P=2: rows 0..5 and 6..11); that is
:func:`sampling_mask.adapters.prime_rl.shift_packed_left` / ``context_parallel_packed_rows`` / ``shard``.

Everything is whole-array numpy; torch tensors are accepted through :func:`as_host_array` and
numpy results can be turned into tensors with :func:`to_torch` (torch is imported only there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import layouts
from ..core.checks import is_int, raise_at_first
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.layouts import as_host_array
from ..core.limits import DEFAULT_LIMITS, checked_nbytes
from ..core.model import ReaderOptions, SamplingMask, as_sampling_mask, concat, mask_options
from ._args import count_arg

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "append_padding_segment",
    "as_host_array",
    "context_parallel_rows",
    "from_batch_dense",
    "input_aligned",
    "label_aligned",
    "pad_segments",
    "shard_array",
    "shard_mask",
    "shift_left",
    "take_rows",
    "to_batch_dense",
    "to_packed_dense",
    "to_torch",
    "unshard_array",
    "unshard_mask",
    "unshift",
]

CPMode = str  # "contiguous" or "zigzag" (checked at run time)
_PER_ROW_FILL = {"sampled_token_ids": -1, "sampled_logprobs": np.nan, "temperature": np.nan}


def to_torch(array: np.ndarray, *, device: Any = None) -> Any:
    """A torch tensor with ``array``'s values (a copy when ``array`` is read-only); imports torch here."""
    import torch

    arr = np.asarray(array)
    if not arr.flags.writeable or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C")
    tensor = torch.from_numpy(arr)
    return tensor if device is None else tensor.to(device)


def _cu(value: Any, *, field: str = "cu_seqlens") -> np.ndarray:
    cu = layouts.as_int_array(as_host_array(value, field=field), np.int64, field=field)
    if cu.size == 0 or int(cu[0]) != 0:
        raise SamplingMaskError(ErrorCode.E_SEGMENTS, "cu_seqlens must start with 0", field=field)
    raise_at_first(np.diff(cu) < 0, ErrorCode.E_SEGMENTS, "cu_seqlens decrease", field=field, at="segment")
    return cu


def _lengths(value: Any, count: int, *, field: str) -> np.ndarray:
    arr = layouts.as_int_array(as_host_array(value, field=field), np.int64, field=field)
    if arr.size != count:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {count} lengths, got {arr.size}", field=field)
    raise_at_first(arr < 0, ErrorCode.E_RANGE, "lengths must be >= 0", field=field, at="segment")
    return arr


def take_rows(mask: SamplingMask, rows: Any, cu_seqlens: Any) -> SamplingMask:
    """A mask whose row i is ``mask`` row ``rows[i]``, or an empty row where ``rows[i] == -1``.

    ``cu_seqlens`` segments the result. Companions follow their rows (see the module docstring
    for inserted empty rows); vocab_size and metadata are kept.
    """
    mask = as_sampling_mask(mask)
    rows = layouts.as_int_array(rows, np.int64, field="rows")
    cu = _cu(cu_seqlens)
    if int(cu[-1]) != rows.size:
        raise SamplingMaskError(
            ErrorCode.E_SEGMENTS, f"cu_seqlens must end at the row count {rows.size}", field="cu_seqlens"
        )
    if rows.size and (int(rows.min()) < -1 or int(rows.max()) >= mask.num_rows):
        bad = int(rows[(rows < -1) | (rows >= mask.num_rows)][0])
        raise SamplingMaskError(ErrorCode.E_RANGE, f"row index outside [-1, {mask.num_rows})", field="rows", value=bad)
    present = rows >= 0
    src = rows[present]
    lengths = np.zeros(rows.size, dtype=np.int64)
    lengths[present] = mask.row_lengths[src]
    id_pos = layouts.range_indices(mask.stored_offsets[:-1][src], lengths[present])
    companions: dict[str, Any] = {}
    for name, arr in mask.companions.items():
        if name == "support_logprobs":
            companions[name] = arr[id_pos]
        else:
            out = np.full(rows.size, _PER_ROW_FILL[name], dtype=arr.dtype)
            out[present] = arr[src]
            companions[name] = out
    return SamplingMask(
        mask.ids[id_pos],
        layouts.counts_to_offsets(lengths),
        cu_seqlens=cu,
        vocab_size=mask.vocab_size,
        metadata=mask.metadata,
        validate=False,
        **companions,
    )


def _segment_of_rows(cu: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(cu.size - 1, dtype=np.int64), np.diff(cu))


def _row_has_support(mask: SamplingMask, nonempty: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per segment: whether its row ``rows[b]`` has ids (False for an empty segment)."""
    out = np.zeros(nonempty.size, dtype=bool)
    out[nonempty] = mask.row_lengths[rows[nonempty]] > 0
    return out


def shift_left(mask: SamplingMask) -> SamplingMask:
    """Input-aligned -> label-aligned: row t+1 moves to position t inside each segment; the last
    position of each segment becomes empty. Row 0 of a segment is scored by no logits, so it must
    be empty (``E_SCHEMA`` otherwise: it would be dropped)."""
    mask = as_sampling_mask(mask)
    cu = mask.cu_seqlens
    starts, ends = cu[:-1], cu[1:]
    nonempty = ends > starts
    raise_at_first(
        _row_has_support(mask, nonempty, starts),
        ErrorCode.E_SCHEMA,
        "the first row of a sequence has support, but no logits score the first token",
        at="segment",
        row=lambda seg: starts[seg],
    )
    rows = np.arange(1, mask.num_rows + 1, dtype=np.int64)
    rows[ends[nonempty] - 1] = -1
    return take_rows(mask, rows, cu)


def unshift(mask: SamplingMask) -> SamplingMask:
    """Label-aligned -> input-aligned (inverse of :func:`shift_left`). The last row of every
    segment must be empty (``E_SCHEMA`` otherwise)."""
    mask = as_sampling_mask(mask)
    cu = mask.cu_seqlens
    starts, ends = cu[:-1], cu[1:]
    nonempty = ends > starts
    raise_at_first(
        _row_has_support(mask, nonempty, ends - 1),
        ErrorCode.E_SCHEMA,
        "the last position of a label-aligned sequence scores nothing and must be empty",
        at="segment",
        row=lambda seg: ends[seg] - 1,
    )
    rows = np.arange(-1, mask.num_rows - 1, dtype=np.int64)
    rows[starts[nonempty]] = -1
    return take_rows(mask, rows, cu)


def input_aligned(generated: SamplingMask, prompt_lengths: Any) -> SamplingMask:
    """Prepend ``prompt_lengths[b]`` empty rows to segment b of a mask of generated rows only."""
    generated = as_sampling_mask(generated)
    cu = generated.cu_seqlens
    prompt = _lengths(prompt_lengths, cu.size - 1, field="prompt_lengths")
    gen = np.diff(cu)
    new_cu = layouts.counts_to_offsets(prompt + gen)
    rows = np.full(int(new_cu[-1]), -1, dtype=np.int64)
    rows[layouts.range_indices(new_cu[:-1] + prompt, gen)] = np.arange(generated.num_rows, dtype=np.int64)
    return take_rows(generated, rows, new_cu)


def label_aligned(generated: SamplingMask, prompt_lengths: Any) -> SamplingMask:
    """``shift_left(input_aligned(generated, prompt_lengths))``: each prompt must hold >= 1 token."""
    generated = as_sampling_mask(generated)
    prompt = _lengths(prompt_lengths, generated.num_segments, field="prompt_lengths")
    gen = np.diff(generated.cu_seqlens)
    raise_at_first(
        (prompt < 1) & (gen > 0),
        ErrorCode.E_RANGE,
        "a sequence with generated tokens needs a prompt of >= 1 token",
        field="prompt_lengths",
        at="segment",
    )
    return shift_left(input_aligned(generated, prompt))


def pad_segments(mask: SamplingMask, *, multiple: int = 1, lengths: Any = None) -> SamplingMask:
    """Append empty rows to each segment: up to ``lengths[b]`` when given, else up to the next
    multiple of ``multiple`` (e.g. ``2 * cp_world_size``). A target below a segment's length is ``E_RANGE``."""
    mask = as_sampling_mask(mask)
    cu = mask.cu_seqlens
    current = np.diff(cu)
    if lengths is not None:
        target = _lengths(lengths, current.size, field="lengths")
        raise_at_first(
            target < current,
            ErrorCode.E_RANGE,
            "target length below the segment's length",
            field="lengths",
            values=target,
            at="segment",
        )
    else:
        if not is_int(multiple) or multiple < 1:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, "multiple must be an integer >= 1", field="multiple", value=multiple
            )
        target = -(-current // int(multiple)) * int(multiple)
    new_cu = layouts.counts_to_offsets(target)
    rows = np.full(int(new_cu[-1]), -1, dtype=np.int64)
    rows[layouts.range_indices(new_cu[:-1], current)] = np.arange(mask.num_rows, dtype=np.int64)
    return take_rows(mask, rows, new_cu)


def append_padding_segment(mask: SamplingMask, total_rows: int) -> SamplingMask:
    """Append one segment of empty rows so the mask has exactly ``total_rows`` rows (a packed
    micro-batch padded to a fixed token count). ``E_RANGE`` when ``total_rows`` is below the row count."""
    mask = as_sampling_mask(mask)
    total = count_arg(total_rows, field="total_rows")
    if total < mask.num_rows:
        raise SamplingMaskError(
            ErrorCode.E_RANGE, f"total_rows is below the row count {mask.num_rows}", field="total_rows", value=total
        )
    rows = np.concatenate([np.arange(mask.num_rows, dtype=np.int64), np.full(total - mask.num_rows, -1, np.int64)])
    return take_rows(mask, rows, np.append(mask.cu_seqlens, total))


def to_packed_dense(mask: SamplingMask, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(int32 ``[sum(seqlen), W]`` ``-1``-padded, int32 ``cu_seqlens`` ``[B+1]``) for a packed micro-batch."""
    mask = as_sampling_mask(mask)
    return mask.to_dense(width), mask.cu_seqlens.astype(np.int32)


def to_batch_dense(
    mask: SamplingMask, seq_len: int | None = None, width: int | None = None, *, shift: int = 0
) -> np.ndarray:
    """int32 ``[B, S, W]``, the padded batch of the trainers (verl, NeMo-RL): row t of segment b at
    ``out[b, t + shift]``, ``-1`` elsewhere. ``S`` defaults to the longest segment plus ``shift``
    (``E_SHAPE`` naming the first segment that does not fit in ``seq_len``); ``W`` as
    :meth:`SamplingMask.to_dense`. ``E_LIMIT`` when the batch would exceed ``DEFAULT_LIMITS.max_bytes``."""
    mask = as_sampling_mask(mask)
    cu = mask.cu_seqlens
    seg_len = np.diff(cu) + count_arg(shift, field="shift")
    s = int(seg_len.max(initial=0)) if seq_len is None else count_arg(seq_len, field="seq_len")
    message = f"segment does not fit in seq_len {s}"
    raise_at_first(seg_len > s, ErrorCode.E_SHAPE, message, field="seq_len", values=seg_len, at="segment")
    dense = mask.to_dense(width)
    checked_nbytes((seg_len.size, s, dense.shape[1]), 4, DEFAULT_LIMITS, field="dense")
    out = np.full((seg_len.size, s, dense.shape[1]), layouts.PAD, dtype=np.int32)
    row_segment = _segment_of_rows(cu)
    out[row_segment, np.arange(mask.num_rows, dtype=np.int64) - cu[:-1][row_segment] + shift] = dense
    return out


@mask_options(ReaderOptions)
def from_batch_dense(dense: Any, lengths: Any, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """Inverse of :func:`to_batch_dense`: ``dense`` ``[B, S, W]`` (``-1``-padded) and the sequence
    lengths ``[B]``; positions at or past a length must be all ``-1`` (``E_PADDING`` otherwise).
    Keyword options: :class:`~sampling_mask.core.model.ReaderOptions`."""
    arr = layouts.as_int_array(as_host_array(dense, field="dense"), np.int32, field="dense", ndim=3)
    b, s, _ = arr.shape
    lens = _lengths(lengths, b, field="lengths")
    if lens.size and int(lens.max()) > s:
        seg = int(np.argmax(lens))
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"length exceeds the {s} positions", field="lengths", segment=seg)
    inside = np.arange(s, dtype=np.int64)[None, :] < lens[:, None]
    outside = ~inside & (arr != layouts.PAD).any(axis=2)
    if outside.any():
        seg, pos = (int(v) for v in np.argwhere(outside)[0])
        raise SamplingMaskError(
            ErrorCode.E_PADDING, f"data at position {pos}, past the sequence length", field="dense", segment=seg
        )
    return SamplingMask.from_dense(arr[inside], cu_seqlens=layouts.counts_to_offsets(lens), **options)


# ---------------------------------------------------------------------------- context parallelism
def context_parallel_rows(cu_seqlens: Any, world_size: int, rank: int, mode: CPMode = "contiguous") -> np.ndarray:
    """int64 indices of the rows context-parallel ``rank`` holds, in order (see the module docstring).

    For every sequence in turn: chunk ``rank`` of P (``"contiguous"``), or chunk ``rank`` then chunk
    ``2P-1-rank`` of 2P (``"zigzag"``); chunks follow ``np.array_split``.
    """
    cu = _cu(cu_seqlens)
    for name, value in (("world_size", world_size), ("rank", rank)):
        if not is_int(value):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, f"{name} must be an integer", field=name, value=short_repr(value)
            )
    p, r = int(world_size), int(rank)
    if p < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "world_size must be >= 1", field="world_size", value=p)
    if not 0 <= r < p:
        raise SamplingMaskError(ErrorCode.E_RANGE, f"rank must be in [0, {p})", field="rank", value=r)
    if mode == "contiguous":
        n, chunks = p, np.array([r], dtype=np.int64)
    elif mode == "zigzag":
        n, chunks = 2 * p, np.array([r, 2 * p - 1 - r], dtype=np.int64)
    else:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "mode must be 'contiguous' or 'zigzag'", field="mode", value=mode)
    seq_len = np.diff(cu)[:, None]
    base, extra = seq_len // n, seq_len % n
    starts = cu[:-1, None] + chunks[None, :] * base + np.minimum(chunks[None, :], extra)
    sizes = base + (chunks[None, :] < extra)
    return layouts.range_indices(starts.reshape(-1), sizes.reshape(-1))


def _shard_cu(cu: np.ndarray, world_size: int, rank: int, mode: CPMode) -> tuple[np.ndarray, np.ndarray]:
    rows = context_parallel_rows(cu, world_size, rank, mode)
    seg_counts = (
        np.bincount(_segment_of_rows(cu)[rows], minlength=cu.size - 1) if rows.size else np.zeros(cu.size - 1, np.int64)
    )
    return rows, layouts.counts_to_offsets(seg_counts.astype(np.int64))


def shard_mask(mask: SamplingMask, world_size: int, rank: int, mode: CPMode = "contiguous") -> SamplingMask:
    """The rows of ``rank`` as a mask with one segment per sequence (same split as :func:`shard_array`)."""
    mask = as_sampling_mask(mask)
    rows, cu = _shard_cu(mask.cu_seqlens, world_size, rank, mode)
    return take_rows(mask, rows, cu)


def shard_array(array: Any, cu_seqlens: Any, world_size: int, rank: int, mode: CPMode = "contiguous") -> Any:
    """``array[rows]`` along axis 0 (labels, logprobs, ...); numpy arrays and torch tensors alike."""
    rows = context_parallel_rows(cu_seqlens, world_size, rank, mode)
    if hasattr(array, "detach") and hasattr(array, "index_select"):  # torch: stay on its device
        import torch

        return array.index_select(0, torch.from_numpy(rows).to(array.device))
    return np.asarray(array)[rows]


def _inverse_order(cu: np.ndarray, world_size: int, mode: CPMode) -> np.ndarray:
    order = np.concatenate([context_parallel_rows(cu, world_size, r, mode) for r in range(world_size)])
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size, dtype=np.int64)
    return inverse


def unshard_mask(shards: Sequence[SamplingMask], cu_seqlens: Any, mode: CPMode = "contiguous") -> SamplingMask:
    """Re-assemble the masks of ranks 0..P-1 (in rank order) into the unsharded mask segmented by ``cu_seqlens``."""
    cu = _cu(cu_seqlens)
    if not shards:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "need the shards of every rank", field="shards")
    shards = [as_sampling_mask(shard, field=f"shards[{r}]") for r, shard in enumerate(shards)]
    for r, shard in enumerate(shards):
        expected = context_parallel_rows(cu, len(shards), r, mode).size
        if shard.num_rows != expected:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"rank {r} holds {shard.num_rows} rows, expected {expected}", field="shards"
            )
    joined = concat(list(shards))
    return take_rows(joined, _inverse_order(cu, len(shards), mode), cu)


def unshard_array(arrays: Sequence[Any], cu_seqlens: Any, mode: CPMode = "contiguous") -> np.ndarray:
    """Inverse of :func:`shard_array` for numpy inputs (ranks 0..P-1 in order)."""
    cu = _cu(cu_seqlens)
    joined = np.concatenate([as_host_array(a) for a in arrays])
    if joined.shape[0] != int(cu[-1]):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"shards hold {joined.shape[0]} rows, expected {int(cu[-1])}")
    return joined[_inverse_order(cu, len(arrays), mode)]
