"""vLLM adapter: the layouts of vLLM 0.32 with ``--return-sampling-mask`` (``enable_return_sampling_mask``).

Matches (field names exactly as vLLM 0.32 spells them):

* ``CompletionOutput.sampling_mask``: an object whose ``token_ids: list[list[int]]`` holds one
  ascending row per generated token, aligned with ``CompletionOutput.token_ids`` (the sampled ids);
  ``None`` when the feature is off or the request was aborted (vllm-project/vllm #49577, #50520).
* HTTP (``/v1/completions``, ``/v1/chat/completions``, generate): ``choices[i].sampling_mask`` with
  the same nesting, ``null`` when off or aborted; ``choices[i].token_ids`` when ``return_token_ids``.
* Engine CSR (``SamplingMaskLists``): ``token_ids`` int32 [nnz], ``offsets`` int64 [rows+1] and the
  optional ``cu_num_generated_tokens`` [requests+1] that splits rows by request.
* Engine compact buffer + bitmask fallback (``SamplingMaskTensors``; names as in
  ``tests/fixtures/vllm-0.32``): ``compact_token_ids`` int32 [rows, W] (ascending, ``-1`` past the
  row's count), ``compact_counts`` int32 [rows], and ``bitmask`` uint8 [rows, ceil(V/8)] (little bit
  order) read for the rows whose count exceeds W.
* ``FlatLogprobs`` (``CompletionOutput.logprobs`` with ``flat_logprobs=True`` and
  ``logprobs_mode="processed_logprobs"``): ``start_indices``, ``end_indices``, ``token_ids``,
  ``logprobs``, ``ranks``; position t owns entries ``start_indices[t]:end_indices[t]``: entry 0 is the
  sampled token with its true rank, then the top-k candidates ranked 1..k (the sampled token may
  appear again among them). A processed logprob of ``-inf`` means the sampler filtered it out.
  The support row is the top-k candidates that were not filtered, in rank order (as SkyRL builds it).

Rows keep the order they arrive in; ``to_*`` functions write ascending rows where vLLM does.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ..core import layouts
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits, check_count
from ..core.model import SamplingMask
from ._common import get_field, int_array, ragged_from_lists

__all__ = [
    "from_completion_output",
    "from_compact",
    "from_engine_csr",
    "from_flat_logprobs",
    "from_flat_logprobs_repairing",
    "from_http_choice",
    "from_http_response",
    "from_token_ids",
    "to_compact",
    "to_engine_csr",
    "to_flat_logprobs",
    "to_http_choice",
    "to_token_ids",
]

OnMissing = Literal["raise", "none"]


def _missing(on_missing: OnMissing, where: str, finish_reason: Any = None) -> SamplingMask | None:
    if on_missing == "none":
        return None
    if on_missing != "raise":
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "on_missing must be 'raise' or 'none'", field="on_missing")
    why = f" (finish_reason {finish_reason!r})" if finish_reason is not None else ""
    raise SamplingMaskError(
        ErrorCode.E_SCHEMA,
        "sampling_mask is null: vLLM ran without --return-sampling-mask or the request was aborted" + why,
        field=where,
    )


def from_token_ids(
    rows: Sequence[Sequence[int]],
    *,
    sampled_token_ids: Any = None,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """From ``sampling_mask.token_ids`` nested lists (the fast path for Python lists of ints)."""
    ids, offsets = ragged_from_lists(rows, limits=limits)
    sampled = None
    if sampled_token_ids is not None:
        sampled = int_array(sampled_token_ids, np.int32, field="token_ids")
        if sampled.size != offsets.size - 1:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"{sampled.size} generated token ids but {offsets.size - 1} mask rows",
                field="token_ids",
            )
    return SamplingMask(
        ids, offsets, sampled_token_ids=sampled, vocab_size=vocab_size, metadata=metadata, limits=limits
    )


def _rows_of(sampling_mask: Any, where: str) -> Any:
    if isinstance(sampling_mask, (list, tuple)):
        return list(sampling_mask) if isinstance(sampling_mask, tuple) else sampling_mask
    return get_field(sampling_mask, "token_ids", where=where)


def from_completion_output(
    output: Any,
    *,
    on_missing: OnMissing = "raise",
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask | None:
    """From a ``CompletionOutput`` (or a mapping with the same fields): rows from
    ``sampling_mask.token_ids``, sampled ids from ``token_ids``. A null mask raises ``E_SCHEMA``
    (``on_missing="raise"``) or returns ``None`` (``on_missing="none"``)."""
    mask = get_field(output, "sampling_mask", None)
    if mask is None:
        return _missing(on_missing, "sampling_mask", get_field(output, "finish_reason", None))
    sampled = get_field(output, "token_ids", None)
    if not isinstance(mask, (list, tuple)) and get_field(mask, "offsets", None) is not None:
        # vLLM before #50520 exposed the CSR object (token_ids + offsets) here.
        return from_engine_csr(
            mask,
            vocab_size=vocab_size,
            metadata=metadata,
            limits=limits,
            sampled_token_ids=None if sampled is None else int_array(sampled, np.int32, field="token_ids"),
        )
    return from_token_ids(
        _rows_of(mask, "sampling_mask"),
        sampled_token_ids=sampled,
        vocab_size=vocab_size,
        metadata=metadata,
        limits=limits,
    )


def from_http_choice(
    choice: Mapping[str, Any] | Any,
    *,
    on_missing: OnMissing = "raise",
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask | None:
    """From one HTTP ``choices[i]`` (decoded JSON): ``sampling_mask`` and, when present, ``token_ids``."""
    rows = get_field(choice, "sampling_mask", None)
    if rows is None:
        return _missing(on_missing, "choices[].sampling_mask", get_field(choice, "finish_reason", None))
    if not isinstance(rows, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "sampling_mask must be a list of lists", field="sampling_mask")
    return from_token_ids(
        rows,
        sampled_token_ids=get_field(choice, "token_ids", None),
        vocab_size=vocab_size,
        metadata=metadata,
        limits=limits,
    )


def from_http_response(
    response: Mapping[str, Any] | Any,
    *,
    on_missing: OnMissing = "raise",
    vocab_size: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[SamplingMask | None]:
    """One mask (or ``None``, see ``on_missing``) per ``choices[i]``, in choice order."""
    choices = get_field(response, "choices")
    if not isinstance(choices, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "choices must be a list", field="choices")
    return [from_http_choice(c, on_missing=on_missing, vocab_size=vocab_size, limits=limits) for c in choices]


def to_token_ids(mask: SamplingMask) -> list[list[int]]:
    """``CompletionOutput.sampling_mask.token_ids``: ascending rows as nested lists."""
    return mask.canonical().to_rows()


def to_http_choice(mask: SamplingMask) -> dict[str, Any]:
    """The mask fields of an HTTP choice: ``sampling_mask`` and, with sampled ids, ``token_ids``."""
    out: dict[str, Any] = {"sampling_mask": to_token_ids(mask)}
    if mask.sampled_token_ids is not None:
        out["token_ids"] = mask.sampled_token_ids.tolist()
    return out


# ---------------------------------------------------------------------------- engine layouts
def from_engine_csr(
    lists: Any, *, vocab_size: int | None = None, limits: Limits = DEFAULT_LIMITS, **kwargs: Any
) -> SamplingMask:
    """From ``SamplingMaskLists`` (or a mapping): ``token_ids``, ``offsets``, optional
    ``cu_num_generated_tokens`` (becomes ``cu_seqlens``: one segment per request)."""
    ids = int_array(get_field(lists, "token_ids"), np.int32, field="token_ids")
    offsets = int_array(get_field(lists, "offsets"), np.int64, field="offsets")
    cu = get_field(lists, "cu_num_generated_tokens", None)
    cu_arr = None if cu is None else int_array(cu, np.int64, field="cu_num_generated_tokens")
    return SamplingMask(ids, offsets, cu_seqlens=cu_arr, vocab_size=vocab_size, limits=limits, **kwargs)


def to_engine_csr(mask: SamplingMask) -> dict[str, Any]:
    """``{"token_ids": int32, "offsets": int64, "cu_num_generated_tokens": list[int]}``, ascending rows."""
    canon = mask.canonical()
    return {
        "token_ids": np.array(canon.ids, dtype=np.int32),
        "offsets": np.array(canon.offsets, dtype=np.int64),
        "cu_num_generated_tokens": canon.cu_seqlens.tolist(),
    }


def from_compact(
    compact_token_ids: Any,
    compact_counts: Any,
    bitmask: Any = None,
    *,
    vocab_size: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **kwargs: Any,
) -> SamplingMask:
    """From the engine's compact buffer ``[rows, W]`` + counts, reading rows wider than W from
    ``bitmask`` (``[rows, ceil(V/8)]``, needs ``vocab_size``). A narrow row must be ``-1`` past its
    count (``E_PADDING``); a wide row's popcount must equal its count (``E_OFFSETS``)."""
    compact = int_array(compact_token_ids, np.int32, field="compact_token_ids", ndim=2)
    counts = int_array(compact_counts, np.int64, field="compact_counts")
    num_rows, width = compact.shape
    check_count(num_rows, limits.max_rows, "row count", field="compact_token_ids")
    if counts.size != num_rows:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {num_rows} counts", field="compact_counts")
    if counts.size and int(counts.min()) < 0:
        row = int(np.flatnonzero(counts < 0)[0])
        raise SamplingMaskError(ErrorCode.E_RANGE, "negative count", field="compact_counts", row=row)
    wide = counts > width
    cols = np.arange(width, dtype=np.int64)[None, :]
    inside = cols < counts[:, None]
    stray = ~inside & ~wide[:, None] & (compact != layouts.PAD)
    if stray.any():
        row, col = (int(v) for v in np.argwhere(stray)[0])
        raise SamplingMaskError(
            ErrorCode.E_PADDING, f"value past the row's count at column {col}", field="compact_token_ids", row=row
        )
    narrow_ids = compact[inside & ~wide[:, None]]
    lengths = counts.copy()
    row_of = np.repeat(np.flatnonzero(~wide), counts[~wide])
    if wide.any():
        if bitmask is None or vocab_size is None:
            row = int(np.flatnonzero(wide)[0])
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "a row is wider than the compact buffer: pass bitmask and vocab_size",
                field="bitmask",
                row=row,
            )
        bits = np.asarray(bitmask)
        if bits.ndim != 2 or bits.shape[0] != num_rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"bitmask must be [{num_rows}, ceil(V/8)], got {list(bits.shape)}", field="bitmask"
            )
        wide_mask = SamplingMask.from_bitmask(bits[wide], vocab_size, limits=limits)
        wide_rows = np.flatnonzero(wide)
        mismatch = wide_mask.row_lengths != counts[wide]
        if mismatch.any():
            row = int(wide_rows[np.flatnonzero(mismatch)[0]])
            raise SamplingMaskError(
                ErrorCode.E_OFFSETS, "bitmask popcount differs from the row's count", field="bitmask", row=row
            )
        all_ids = np.concatenate([narrow_ids, wide_mask.ids])
        all_rows = np.concatenate([row_of, np.repeat(wide_rows, counts[wide])])
        order = np.argsort(all_rows, kind="stable")
        ids = all_ids[order]
    else:
        ids = narrow_ids
    return SamplingMask(ids, layouts.counts_to_offsets(lengths), vocab_size=vocab_size, limits=limits, **kwargs)


def to_compact(mask: SamplingMask, width: int, vocab_size: int | None = None) -> dict[str, np.ndarray]:
    """``{"compact_token_ids" [rows, width], "compact_counts", "bitmask"}``: ascending rows, the first
    ``width`` ids of wider rows in the compact buffer, and every row in the bitmask."""
    canon = mask.canonical()
    counts = canon.row_lengths
    clipped = np.minimum(counts, width)
    keep = layouts.range_indices(canon.offsets[:-1], clipped)
    compact = layouts.ragged_to_dense(canon.ids[keep], layouts.counts_to_offsets(clipped), int(width))
    return {
        "compact_token_ids": compact,
        "compact_counts": counts.astype(np.int32),
        "bitmask": canon.to_bitmask(vocab_size),
    }


# ---------------------------------------------------------------------------- flat logprobs
def _flat_arrays(flat: Any, limits: Limits) -> tuple[np.ndarray, ...]:
    starts = int_array(get_field(flat, "start_indices"), np.int64, field="start_indices")
    ends = int_array(get_field(flat, "end_indices"), np.int64, field="end_indices")
    token_ids = int_array(get_field(flat, "token_ids"), np.int64, field="token_ids")
    logprobs = layouts.as_float_array(get_field(flat, "logprobs"), field="logprobs", size=token_ids.size)
    check_count(starts.size, limits.max_rows, "position count", field="start_indices")
    if ends.size != starts.size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, "start_indices and end_indices differ in length", field="end_indices"
        )
    bad = (starts < 0) | (ends > token_ids.size) | (ends - starts < 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS,
            "each position needs entries start < end <= len(token_ids) (entry 0: the sampled token)",
            field="end_indices",
            row=row,
            value=int(ends[row]),
        )
    overlap = starts[1:] < ends[:-1]
    if overlap.any():
        row = int(np.flatnonzero(overlap)[0]) + 1
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS, "positions must not overlap or go backwards", field="start_indices", row=row
        )
    nan = np.isnan(logprobs) | (logprobs == np.inf)
    if nan.any():
        entry = int(np.flatnonzero(nan)[0])
        row = int(np.searchsorted(ends, entry, side="right"))
        raise SamplingMaskError(ErrorCode.E_RANGE, "logprob is NaN or +inf", field="logprobs", row=row)
    return starts, ends, token_ids, logprobs


def _check_ranks(flat: Any, n_top: np.ndarray, top_pos: np.ndarray) -> None:
    """The candidates after entry 0 must be ranked 1..k: that is what makes entry 0 the sampled token."""
    ranks_value = get_field(flat, "ranks", None)
    if ranks_value is None or top_pos.size == 0:
        return
    if isinstance(ranks_value, (str, bytes, Mapping)) or not hasattr(ranks_value, "__len__"):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "ranks must be a list of ints", field="ranks")
    raw = np.asarray(ranks_value if isinstance(ranks_value, np.ndarray) else list(ranks_value), dtype=object)
    if raw.ndim != 1 or raw.size <= int(top_pos.max()):
        raise SamplingMaskError(ErrorCode.E_SHAPE, "ranks must hold one rank per entry", field="ranks")
    top = raw[top_pos]
    unknown = top == np.full(top.shape, None, dtype=object)
    if unknown.any():
        return  # ranks not recorded: nothing to check against
    try:
        # operator.index refuses floats and strings instead of truncating or parsing them
        # (a string rank was a ValueError: fuzz/regressions/adapter_vllm/b1d91626ff7a1195.bin).
        ranks = np.fromiter(map(operator.index, top), dtype=np.int64, count=top.size)
    except (TypeError, OverflowError):
        raise SamplingMaskError(ErrorCode.E_DTYPE, "ranks must be integers", field="ranks") from None
    expected = layouts.range_indices(np.ones(n_top.size, dtype=np.int64), n_top)
    wrong = ranks != expected
    if wrong.any():
        entry = int(np.flatnonzero(wrong)[0])
        row = int(np.repeat(np.arange(n_top.size), n_top)[entry])
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "entries after the sampled one must be the top-k ranked 1..k (is this processed FlatLogprobs?)",
            field="ranks",
            row=row,
            value=int(ranks[entry]),
        )


def _from_flat(
    flat: Any,
    *,
    top_k: int | None,
    repair: bool,
    sampled_token_ids: Any,
    vocab_size: int | None,
    metadata: Mapping[str, Any] | None,
    limits: Limits,
) -> tuple[SamplingMask, int]:
    starts, ends, token_ids, logprobs = _flat_arrays(flat, limits)
    num_rows = starts.size
    sampled = token_ids[starts]
    sampled_lp = logprobs[starts]
    if sampled_token_ids is not None:
        given = int_array(sampled_token_ids, np.int64, field="sampled_token_ids")
        if given.size != num_rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"{given.size} sampled ids for {num_rows} positions", field="sampled_token_ids"
            )
        differ = np.flatnonzero(given != sampled)
        if differ.size:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "entry 0 of a position is not its sampled token",
                field="sampled_token_ids",
                row=int(differ[0]),
                value=int(given[differ[0]]),
            )
    filtered_sampled = np.isneginf(sampled_lp)
    if filtered_sampled.any():
        row = int(np.flatnonzero(filtered_sampled)[0])
        raise SamplingMaskError(ErrorCode.E_RANGE, "the sampled token's logprob is -inf", field="logprobs", row=row)
    n_top = ends - starts - 1
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise SamplingMaskError(ErrorCode.E_RANGE, "top_k must be an integer >= 1", field="top_k", value=top_k)
        n_top = np.minimum(n_top, int(top_k))
    top_pos = layouts.range_indices(starts + 1, n_top)
    _check_ranks(flat, ends - starts - 1, layouts.range_indices(starts + 1, ends - starts - 1))
    kept = top_pos[~np.isneginf(logprobs[top_pos])]
    kept_rows = np.repeat(np.arange(num_rows, dtype=np.int64), n_top)[~np.isneginf(logprobs[top_pos])]
    ids = token_ids[kept]
    support_lp = logprobs[kept]
    counts = np.bincount(kept_rows, minlength=num_rows).astype(np.int64)
    found = np.zeros(num_rows, dtype=bool)
    found[kept_rows[ids == sampled[kept_rows]]] = True
    missing = (n_top > 0) & ~found
    repaired = int(np.count_nonzero(missing))
    if repaired and not repair:
        row = int(np.flatnonzero(missing)[0])
        raise SamplingMaskError(
            ErrorCode.E_MISSING_SAMPLED,
            "the sampled token is not among the kept top-k candidates (use from_flat_logprobs_repairing to repair)",
            field="token_ids",
            row=row,
            value=int(sampled[row]),
        )
    offsets = layouts.counts_to_offsets(counts)
    if repaired:
        # Replace the weakest kept candidate (the row's last) by the sampled id; a row with no kept
        # candidate gets the sampled id as its only entry.
        replace = missing & (counts > 0)
        last = offsets[1:][replace] - 1
        ids[last] = sampled[replace]
        support_lp[last] = sampled_lp[replace]
        insert = missing & (counts == 0)
        if insert.any():
            new_counts = counts + insert
            new_offsets = layouts.counts_to_offsets(new_counts)
            old_pos = np.arange(ids.size, dtype=np.int64) + np.repeat(np.cumsum(insert) - insert, counts)
            full_ids = np.empty(int(new_offsets[-1]), dtype=np.int64)
            full_lp = np.empty(full_ids.size, dtype=np.float32)
            full_ids[old_pos] = ids
            full_lp[old_pos] = support_lp
            full_ids[new_offsets[:-1][insert]] = sampled[insert]
            full_lp[new_offsets[:-1][insert]] = sampled_lp[insert]
            ids, support_lp, offsets = full_ids, full_lp, new_offsets
    mask = SamplingMask(
        layouts.as_int_array(ids, np.int32, field="token_ids"),
        offsets,
        vocab_size=vocab_size,
        sampled_token_ids=layouts.as_int_array(sampled, np.int32, field="token_ids"),
        sampled_logprobs=sampled_lp,
        support_logprobs=support_lp,
        metadata=metadata,
        limits=limits,
    )
    return mask, repaired


def from_flat_logprobs(
    flat: Any,
    *,
    top_k: int | None = None,
    sampled_token_ids: Any = None,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> SamplingMask:
    """Support rows from processed ``FlatLogprobs``: the top-k candidates (at most ``top_k`` columns)
    whose logprob is not ``-inf``, in rank order, with ``support_logprobs``, ``sampled_token_ids`` and
    ``sampled_logprobs`` (entry 0). A position with candidates but without its sampled id among the
    kept ones is ``E_MISSING_SAMPLED``; a position with no candidate gets an empty row.
    ``sampled_token_ids`` (e.g. ``CompletionOutput.token_ids``), when given, must match entry 0."""
    mask, _ = _from_flat(
        flat,
        top_k=top_k,
        repair=False,
        sampled_token_ids=sampled_token_ids,
        vocab_size=vocab_size,
        metadata=metadata,
        limits=limits,
    )
    return mask


def from_flat_logprobs_repairing(
    flat: Any,
    *,
    top_k: int | None = None,
    sampled_token_ids: Any = None,
    vocab_size: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> tuple[SamplingMask, int]:
    """Opt-in repair (SkyRL's): like :func:`from_flat_logprobs`, but a row missing its sampled id gets
    it in place of its weakest kept candidate (or as its only id when none was kept). Returns the mask
    and the number of rows repaired; a repaired row is not the engine's support, so count them."""
    return _from_flat(
        flat,
        top_k=top_k,
        repair=True,
        sampled_token_ids=sampled_token_ids,
        vocab_size=vocab_size,
        metadata=metadata,
        limits=limits,
    )


def to_flat_logprobs(mask: SamplingMask) -> dict[str, list[Any]]:
    """``FlatLogprobs`` fields from a mask with ``sampled_token_ids``, ``sampled_logprobs`` and
    ``support_logprobs``: entry 0 the sampled token (rank = its position in the row + 1), then the row
    in stored order ranked 1..n. Filtered candidates are not known to the mask and are not written."""
    for name in ("sampled_token_ids", "sampled_logprobs", "support_logprobs"):
        if name not in mask.companions:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"to_flat_logprobs needs the {name} companion", field=name)
    sampled = mask.companions["sampled_token_ids"].astype(np.int64)
    lengths = mask.row_lengths
    n = mask.num_rows
    starts = mask.offsets[:-1] + np.arange(n, dtype=np.int64)
    ends = starts + 1 + lengths
    total = int(ends[-1]) if n else 0
    token_ids = np.empty(total, dtype=np.int64)
    logprobs = np.empty(total, dtype=np.float32)
    ranks = np.empty(total, dtype=np.int64)
    token_ids[starts] = sampled
    logprobs[starts] = mask.companions["sampled_logprobs"]
    rows = layouts.row_of_ids(mask.offsets)
    hit = mask.ids == sampled[rows]
    position = np.full(n, -1, dtype=np.int64)
    col = np.arange(mask.nnz, dtype=np.int64) - mask.offsets[:-1][rows]
    position[rows[hit]] = col[hit]
    ranks[starts] = position + 1
    top = layouts.range_indices(starts + 1, lengths)
    token_ids[top] = mask.ids
    logprobs[top] = mask.companions["support_logprobs"]
    ranks[top] = col + 1
    rank_list: list[Any] = ranks.tolist()
    for row in np.flatnonzero(position < 0).tolist():  # sampled rank unknown when the row is empty
        rank_list[int(starts[row])] = None
    return {
        "start_indices": starts.tolist(),
        "end_indices": ends.tolist(),
        "token_ids": token_ids.tolist(),
        "logprobs": logprobs.tolist(),
        "ranks": rank_list,
    }
