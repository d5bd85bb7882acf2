"""SGLang adapter: ``return_sampling_mask`` responses of SGLang 0.5.23 (sgl-project/sglang #27408, #33593).

Every name below was read in the ``sglang==0.5.23`` wheel; ``tests/fixtures/upstream/
make_vllm_sglang.py`` builds the test fixtures with its ``SamplingMaskChunk`` (``to_lists``) and its
OpenAI pydantic classes, plus copies (cited there) of the few ``tokenizer_manager.py`` lines that put
the rows in ``meta_info``; ``tests/fixtures/upstream/sglang-0.5.23/VERSIONS.json`` records the version.

+-------------------------------------+---------------------------------------------+------------------------------------------+------------------------+
| upstream (file)                     | fields, dtypes                              | empty / no mask / over the cap           | here                   |
+=====================================+=============================================+==========================================+========================+
| ``/generate`` ``meta_info``         | ``output_token_sampling_mask:               | key absent: ``return_sampling_mask``     | ``from_meta_info``,    |
| (``srt/managers/                    | list[list[int]]``, one row per output token | off; a support wider than                | ``from_response``,     |
| tokenizer_manager.py``)             | in the sampler's order (highest weight      | ``--sampling-mask-max-tokens`` (4096)    | ``to_meta_info``       |
|                                     | first, not ascending; ties at the cutoff    | aborts the request (``finish_reason``    |                        |
|                                     | are kept, so rows can be wider than top_k); | ``{"type": "abort"}``, HTTP 400): no     |                        |
|                                     | ``output_token_sampling_logprobs``:         | rows are ever cut in 0.5.23              |                        |
|                                     | ``list[float]`` (``sampling_logprobs_mode=  |                                          |                        |
|                                     | "selected"``, the sampled token's logprob   |                                          |                        |
|                                     | over its row) or ``list[list[float]]``      |                                          |                        |
|                                     | (``"support"``, one per id of the row);     |                                          |                        |
|                                     | ``output_token_sampling_mask_length: int``  |                                          |                        |
|                                     | (rows accumulated so far); ``output_ids``   |                                          |                        |
|                                     | beside ``meta_info``: the sampled ids       |                                          |                        |
+-------------------------------------+---------------------------------------------+------------------------------------------+------------------------+
| incremental streaming               | each chunk's ``output_ids`` and the two     | ``output_token_sampling_mask_length``    | ``from_stream``        |
| (``_slice_streaming_output_         | row lists hold the new tokens only          | stays the running total                  |                        |
| meta_info``)                        |                                             |                                          |                        |
+-------------------------------------+---------------------------------------------+------------------------------------------+------------------------+
| ``/v1/chat/completions``            | ``choices[i].meta_info`` (needs             | as above                                 | ``from_chat_choice``,  |
| (``srt/entrypoints/openai/          | ``return_meta_info=true``, no streaming),   |                                          | ``from_chat_response`` |
| protocol.py``, ``serving_chat.py``) | ``choices[i].response_token_ids``           |                                          |                        |
|                                     | (``return_token_ids``)                      |                                          |                        |
+-------------------------------------+---------------------------------------------+------------------------------------------+------------------------+
| ``SamplingMaskChunk`` (msgspec,     | ``lengths`` int32 [rows], ``token_ids``     | --                                       | ``from_chunked``,      |
| ``srt/sampling/sampling_mask.py``)  | int32 [nnz], ``logprobs`` float32 [nnz]     |                                          | ``to_chunked``         |
|                                     | (support) or [rows] (selected)              |                                          |                        |
+-------------------------------------+---------------------------------------------+------------------------------------------+------------------------+

**Rows of one id (greedy).** SGLang writes one value for such a row in both modes: the log-prob
of the sampled token over its row, which is its only id (``Sampler._build_greedy_sampling_mask_output``:
``0.0`` for every greedy row, ``selected_logprobs`` and ``support_logprobs`` alike). In the spec's
terms (section 5) that one value is both the row's ``sampled_logprobs`` (the sampled token's
log-prob renormalized over the row) and its id's ``support_logprobs``. The rule here, for every
reader (``from_meta_info``, ``from_stream``, ``from_chat_choice``, ``from_chunked``) in every mode:
when every row holds one id, the values are stored as **both** companions; otherwise as the one the
mode names. The same response then gives the same mask through ``meta_info`` and through a
``SamplingMaskChunk``, and either writer mode writes it back.

Not in 0.5.23 (kept out of the defaults): the bounded mode of the unmerged, closed PR #34037 would
add ``output_token_sampling_mask_truncated``, one bool per row, ``True`` where the row was cut to
the cap. If the key is present it is read per row: ``False`` rows are ordinary, a ``True`` row is
refused unless ``allow_truncated=True`` (then ``metadata`` gets ``truncated`` and
``truncated_rows``). Rows keep SGLang's order (``to_meta_info`` writes them back as they were);
compare masks with ``==``, which compares row sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..core import checks, layouts
from ..core.checks import get_field
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.model import ResponseOptions, SamplingMask, as_sampling_mask, mask_options
from ._common import int_array, ragged_from_lists

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "from_chat_choice",
    "from_chat_response",
    "from_chunked",
    "from_meta_info",
    "from_response",
    "from_stream",
    "to_chunked",
    "to_meta_info",
]

OnMissing = Literal["raise", "none"]
LogprobsMode = Literal["auto", "selected", "support"]

MASK = "output_token_sampling_mask"
LOGPROBS = "output_token_sampling_logprobs"
LENGTH = "output_token_sampling_mask_length"
TRUNCATED = "output_token_sampling_mask_truncated"  # unmerged PR #34037 only


def _check_length(declared: Any, expected: int) -> None:
    if declared is None:
        return
    if not checks.is_int(declared):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{LENGTH} must be an integer", field=LENGTH)
    if int(declared) != expected:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"{LENGTH} {int(declared)} != {expected} rows", field=LENGTH)


def _logprob_companions(values: Any, offsets: np.ndarray, mode: LogprobsMode) -> dict[str, np.ndarray]:
    """``sampled_logprobs`` from ``list[float]`` (selected) or ``support_logprobs`` from
    ``list[list[float]]`` (support, each inner list as long as its row)."""
    if values is None:
        return {}
    if not isinstance(values, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{LOGPROBS} must be a list", field=LOGPROBS)
    if mode not in ("auto", "selected", "support"):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "sampling_logprobs_mode must be auto, selected or support",
            field="sampling_logprobs_mode",
        )
    num_rows = offsets.size - 1
    nested = [isinstance(v, list) for v in values]
    if mode == "auto":
        mode = "support" if values and all(nested) else "selected"
    if mode == "selected":
        if any(nested):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "selected mode has one float per row", field=LOGPROBS, row=nested.index(True)
            )
        return {"sampled_logprobs": checks.as_float_array(values, field=LOGPROBS, size=num_rows, integers=True)}
    if len(values) != num_rows or not all(nested):
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"support mode needs {num_rows} lists, one per row", field=LOGPROBS)
    flat_values, value_offsets = _float_rows(values)
    checks.raise_at_first(
        np.diff(value_offsets) != np.diff(offsets),
        ErrorCode.E_OFFSETS,
        "a row's logprobs and ids differ in number",
        field=LOGPROBS,
    )
    return {"support_logprobs": flat_values}


def _singleton_rows(companions: dict[str, np.ndarray], offsets: np.ndarray) -> dict[str, np.ndarray]:
    """The module docstring's rule: when every row holds one id, per-row and per-id values are the
    same numbers, stored as both ``sampled_logprobs`` and ``support_logprobs``."""
    if len(companions) != 1 or offsets.size < 2 or not bool(np.all(np.diff(offsets) == 1)):
        return companions
    values = next(iter(companions.values()))
    return {"sampled_logprobs": values, "support_logprobs": values}


def _float_rows(rows: list[list[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(float32 values, int64 offsets) from nested lists of numbers."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = list(chain.from_iterable(rows))
    return checks.as_float_array(flat, field=LOGPROBS, integers=True), layouts.counts_to_offsets(lengths)


def _truncated_flags(value: Any, num_rows: int, allow_truncated: bool, meta: dict[str, Any]) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        flags = np.full(num_rows, value, dtype=bool)
    else:
        if not isinstance(value, list) or not all(isinstance(v, bool) for v in value):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{TRUNCATED} must be a list of bools", field=TRUNCATED)
        if len(value) != num_rows:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"{len(value)} flags for {num_rows} rows", field=TRUNCATED)
        flags = np.array(value, dtype=bool)
    if not flags.any():
        return
    if not allow_truncated:
        checks.raise_at_first(
            flags,
            ErrorCode.E_SCHEMA,
            "the row was cut to --sampling-mask-max-tokens and is not the full support (pass allow_truncated=True)",
            field=TRUNCATED,
        )
    meta["truncated"] = True
    meta["truncated_rows"] = int(np.count_nonzero(flags))


@mask_options(ResponseOptions)
def from_meta_info(
    meta_info: Mapping[str, Any],
    *,
    output_ids: Any = None,
    on_missing: OnMissing = "raise",
    sampling_logprobs_mode: LogprobsMode = "auto",
    allow_truncated: bool = False,
    **options: Unpack[ResponseOptions],
) -> SamplingMask | None:
    """From a complete response's ``meta_info``; ``output_ids`` (the sampled ids) are optional.
    ``output_token_sampling_mask_length`` must equal the number of rows. ``sampling_logprobs_mode``
    ``"auto"`` reads nested lists as support mode, flat floats as selected mode. A missing mask
    raises ``E_SCHEMA`` or returns ``None`` per ``on_missing``. Keyword options:
    :class:`~sampling_mask.core.model.ResponseOptions`."""
    rows = get_field(meta_info, MASK, None)
    if rows is None:
        if on_missing == "none":
            return None
        reason = get_field(meta_info, "finish_reason", None)
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            f"no {MASK} (return_sampling_mask off or request aborted; finish_reason {short_repr(reason)})",
            field=f"meta_info.{MASK}",
        )
    if not isinstance(rows, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{MASK} must be a list of lists", field=MASK)
    ids, offsets = ragged_from_lists(rows, limits=options["limits"])
    num_rows = offsets.size - 1
    _check_length(get_field(meta_info, LENGTH, None), num_rows)
    meta = dict(options["metadata"] or {})
    _truncated_flags(get_field(meta_info, TRUNCATED, None), num_rows, allow_truncated, meta)
    options["metadata"] = meta or None
    companions = _singleton_rows(
        _logprob_companions(get_field(meta_info, LOGPROBS, None), offsets, sampling_logprobs_mode), offsets
    )
    return SamplingMask(
        ids,
        offsets,
        sampled_token_ids=None if output_ids is None else int_array(output_ids, np.int32, field="output_ids"),
        sampled_logprobs=companions.get("sampled_logprobs"),
        support_logprobs=companions.get("support_logprobs"),
        **options,
    )


@mask_options(ResponseOptions)
def from_response(
    response: Mapping[str, Any],
    *,
    on_missing: OnMissing = "raise",
    sampling_logprobs_mode: LogprobsMode = "auto",
    allow_truncated: bool = False,
    **options: Unpack[ResponseOptions],
) -> SamplingMask | None:
    """From a ``/generate`` response: ``meta_info`` plus ``output_ids`` when present. Keyword
    arguments as :func:`from_meta_info`."""
    return from_meta_info(
        get_field(response, "meta_info"),
        output_ids=get_field(response, "output_ids", None),
        on_missing=on_missing,
        sampling_logprobs_mode=sampling_logprobs_mode,
        allow_truncated=allow_truncated,
        **options,
    )


@mask_options(ResponseOptions)
def from_stream(
    chunks: Iterable[Mapping[str, Any]],
    *,
    on_missing: OnMissing = "raise",
    sampling_logprobs_mode: LogprobsMode = "auto",
    allow_truncated: bool = False,
    **options: Unpack[ResponseOptions],
) -> SamplingMask | None:
    """From the chunks of an incremental ``/generate`` stream (``--incremental-streaming-output``):
    ``output_ids`` and the two row lists are concatenated; each chunk's
    ``output_token_sampling_mask_length`` must equal the rows received so far. Keyword arguments as
    :func:`from_meta_info`. (A cumulative stream's last chunk is a whole response: :func:`from_response`.)"""
    rows: list[Any] = []
    logprobs: list[Any] = []
    output_ids: list[Any] = []
    truncated: list[Any] | None = None
    last: Mapping[str, Any] = {}
    if isinstance(chunks, (str, bytes, Mapping)) or not isinstance(chunks, Iterable):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected an iterable of stream chunks", field="chunks")
    for n, chunk in enumerate(chunks):
        meta = get_field(chunk, "meta_info", where=f"chunk[{n}]")
        new_rows = get_field(meta, MASK, None)
        if new_rows is None:
            continue
        for key, store in ((MASK, rows), (LOGPROBS, logprobs), ("output_ids", output_ids)):
            part = get_field(chunk if key == "output_ids" else meta, key, None) or []
            if not isinstance(part, list):
                raise SamplingMaskError(ErrorCode.E_SCHEMA, f"{key} must be a list", field=f"chunk[{n}].{key}")
            store.extend(part)
        flags = get_field(meta, TRUNCATED, None)
        if flags is not None:
            truncated = (truncated or []) + (flags if isinstance(flags, list) else [flags] * len(new_rows))
        declared = get_field(meta, LENGTH, None)
        if declared is not None and declared != len(rows):
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"{LENGTH} {short_repr(declared)} != {len(rows)} rows so far",
                field=f"chunk[{n}].{LENGTH}",
            )
        last = meta
    merged: dict[str, Any] = {"finish_reason": get_field(last, "finish_reason", None)}
    if last:
        merged.update({MASK: rows, LOGPROBS: logprobs or None})
        if truncated is not None:
            merged[TRUNCATED] = truncated
    return from_meta_info(
        merged,
        output_ids=output_ids or None,
        on_missing=on_missing,
        sampling_logprobs_mode=sampling_logprobs_mode,
        allow_truncated=allow_truncated,
        **options,
    )


@mask_options(ResponseOptions)
def from_chat_choice(
    choice: Mapping[str, Any] | Any,
    *,
    on_missing: OnMissing = "raise",
    sampling_logprobs_mode: LogprobsMode = "auto",
    allow_truncated: bool = False,
    **options: Unpack[ResponseOptions],
) -> SamplingMask | None:
    """From one ``/v1/chat/completions`` choice: ``meta_info`` (``return_meta_info=true``) and, when
    present, ``response_token_ids`` as the sampled ids. Keyword arguments as :func:`from_meta_info`."""
    meta = get_field(choice, "meta_info", None)
    if meta is None:
        if on_missing == "none":
            return None
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "no meta_info: request return_meta_info=true", field="choices[].meta_info"
        )
    return from_meta_info(
        meta,
        output_ids=get_field(choice, "response_token_ids", None),
        on_missing=on_missing,
        sampling_logprobs_mode=sampling_logprobs_mode,
        allow_truncated=allow_truncated,
        **options,
    )


@mask_options(ResponseOptions)
def from_chat_response(
    response: Mapping[str, Any] | Any,
    *,
    on_missing: OnMissing = "raise",
    sampling_logprobs_mode: LogprobsMode = "auto",
    allow_truncated: bool = False,
    **options: Unpack[ResponseOptions],
) -> list[SamplingMask | None]:
    """One mask (or ``None``) per ``choices[i]`` of a chat completion, in list order; keyword
    arguments as :func:`from_meta_info`."""
    choices = get_field(response, "choices")
    if not isinstance(choices, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "choices must be a list", field="choices")
    return [
        from_chat_choice(
            c,
            on_missing=on_missing,
            sampling_logprobs_mode=sampling_logprobs_mode,
            allow_truncated=allow_truncated,
            **options,
        )
        for c in choices
    ]


def to_meta_info(
    mask: SamplingMask, *, sampling_logprobs_mode: Literal["selected", "support"] = "selected"
) -> dict[str, Any]:
    """``output_token_sampling_mask`` (stored order), ``output_token_sampling_mask_length`` and, when
    the mask has them, ``output_token_sampling_logprobs``: ``sampled_logprobs`` (selected) or
    ``support_logprobs`` as one list per row (support)."""
    mask = as_sampling_mask(mask)
    out: dict[str, Any] = {MASK: mask.to_rows(), LENGTH: mask.num_rows}
    if sampling_logprobs_mode == "selected" and mask.sampled_logprobs is not None:
        out[LOGPROBS] = mask.sampled_logprobs.tolist()
    elif sampling_logprobs_mode == "support" and mask.support_logprobs is not None:
        values = mask.support_logprobs.tolist()
        bounds = mask.offsets.tolist()
        out[LOGPROBS] = [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    return out


@mask_options(ResponseOptions)
def from_chunked(
    chunked: Any, *, sampling_logprobs_mode: LogprobsMode = "auto", **options: Unpack[ResponseOptions]
) -> SamplingMask:
    """From a ``SamplingMaskChunk`` (or a mapping): ``lengths``, ``token_ids``, ``logprobs``. With
    ``"auto"``, ``logprobs`` is per id when it has nnz values and per row when it has one per row;
    when nnz equals the row count the two readings coincide only if every row holds one id (then
    both companions, the module docstring's rule), otherwise pass ``sampling_logprobs_mode``
    (``E_SCHEMA``)."""
    lengths = int_array(get_field(chunked, "lengths"), np.int64, field="lengths")
    token_ids = int_array(get_field(chunked, "token_ids"), np.int32, field="token_ids")
    logprobs_value = get_field(chunked, "logprobs", None)
    kwargs: dict[str, Any] = {}
    if logprobs_value is not None:
        values = checks.as_float_array(logprobs_value, field="logprobs", integers=True)
        mode = sampling_logprobs_mode
        if mode == "auto":
            if values.size == token_ids.size and values.size != lengths.size:
                mode = "support"
            elif values.size == lengths.size and (values.size != token_ids.size or bool(np.all(lengths == 1))):
                mode = "selected"
            else:
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    "cannot tell per-id from per-row logprobs: pass sampling_logprobs_mode",
                    field="logprobs",
                )
        if mode == "support":
            kwargs["support_logprobs"] = values
        elif mode == "selected":
            kwargs["sampled_logprobs"] = values
        else:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                "sampling_logprobs_mode must be auto, selected or support",
                field="sampling_logprobs_mode",
            )
        kwargs = _singleton_rows(kwargs, layouts.counts_to_offsets(lengths))
    return SamplingMask.from_counts(token_ids, lengths, **options, **kwargs)


def to_chunked(
    mask: SamplingMask, *, sampling_logprobs_mode: Literal["selected", "support"] = "selected"
) -> dict[str, np.ndarray]:
    """``SamplingMaskChunk`` fields: ``lengths`` int32, ``token_ids`` int32 and ``logprobs`` float32
    from ``sampled_logprobs`` (selected) or ``support_logprobs`` (support) when the mask has them."""
    mask = as_sampling_mask(mask)
    ids, counts = mask.to_counts()
    out = {"lengths": counts, "token_ids": np.array(ids)}
    source = mask.sampled_logprobs if sampling_logprobs_mode == "selected" else mask.support_logprobs
    if source is not None:
        out["logprobs"] = np.array(source, dtype=np.float32)
    return out
