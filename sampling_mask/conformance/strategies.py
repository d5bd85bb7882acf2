"""Hypothesis strategies for spec-v1 masks, exported for any implementation's property tests.

``masks`` / ``rows_lists`` draw masks; ``payloads(form)`` draws a payload of any conformance form
(conformance/README.md, "Payloads") together with the mask it holds; ``scorer_inputs`` draws scorer
payloads. Needs ``hypothesis`` (the ``test`` extra). Sizes stay tiny by default so suites run fast.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..core.model import SamplingMask
from .suite import FORMS

__all__ = [
    "PAYLOAD_FORMS",
    "masks",
    "limited_payloads",
    "masks_for",
    "operation_requests",
    "payloads",
    "rows_lists",
    "scorer_edge_inputs",
    "scorer_inputs",
    "shuffled_rows",
    "typed_arrays",
]


@st.composite
def rows_lists(
    draw: Any, *, vocab_size: int = 50, max_rows: int = 12, max_width: int = 8, ascending: bool | None = None
) -> list[list[int]]:
    """Nested lists of unique ids in ``[0, vocab_size)``; empty rows included; order per ``ascending``
    (True: ascending, False/None: any order)."""
    width = min(max_width, vocab_size)
    row = st.lists(st.integers(0, vocab_size - 1), min_size=0, max_size=width, unique=True)
    rows = draw(st.lists(row, min_size=0, max_size=max_rows))
    if ascending:
        rows = [sorted(r) for r in rows]
    return rows


@st.composite
def masks(
    draw: Any,
    *,
    vocab_size: int | None = None,
    max_rows: int = 12,
    max_width: int = 8,
    companions: bool | None = None,
    metadata: bool | None = None,
) -> SamplingMask:
    """Valid masks: empty rows, empty segments and zero rows included; companions and metadata drawn
    unless forced with ``companions=`` / ``metadata=``."""
    vocab = vocab_size if vocab_size is not None else draw(st.integers(1, 64))
    rows = draw(rows_lists(vocab_size=vocab, max_rows=max_rows, max_width=max_width))
    num_rows = len(rows)
    cuts = sorted(draw(st.lists(st.integers(0, num_rows), min_size=0, max_size=4)))
    cu_seqlens = [0, *cuts, num_rows]
    kwargs: dict[str, Any] = {"cu_seqlens": cu_seqlens}
    if draw(st.booleans()) or vocab_size is not None:
        kwargs["vocab_size"] = vocab
    with_companions = draw(st.booleans()) if companions is None else companions
    if with_companions:
        sampled = [draw(st.sampled_from(r)) if r else draw(st.integers(-1, vocab - 1)) for r in rows]
        nnz = sum(len(r) for r in rows)
        floats = st.floats(-30.0, 0.0, width=32)
        kwargs["sampled_token_ids"] = np.array(sampled, dtype=np.int32)
        kwargs["sampled_logprobs"] = np.array(draw(st.lists(floats, min_size=num_rows, max_size=num_rows)), np.float32)
        temps = st.floats(0.0625, 2.0, width=32)
        kwargs["temperature"] = np.array(draw(st.lists(temps, min_size=num_rows, max_size=num_rows)), np.float32)
        kwargs["support_logprobs"] = np.array(draw(st.lists(floats, min_size=nnz, max_size=nnz)), np.float32)
    with_metadata = draw(st.booleans()) if metadata is None else metadata
    if with_metadata:
        kwargs["metadata"] = {
            "top_k": draw(st.integers(1, 512)),
            "top_p": draw(st.floats(0.05, 1.0)),
            "producer": draw(st.sampled_from(["vllm-0.32", "sglang", "test"])),
        }
    return SamplingMask.from_rows(rows, **kwargs)


# ------------------------------------------------------------------------------------------ payloads
#: Forms :func:`payloads` draws: every suite form that carries a mask, i.e. all but ``scorer`` (the
#: byte forms other than json-rows / base64 are written by this library's encoder, so they exercise a
#: decoder, not an independent writer).
PAYLOAD_FORMS = tuple(form for form in FORMS if form != "scorer")
_ROWS_ONLY = ("json-rows", "base64")  # these forms carry rows and nothing else


@st.composite
def typed_arrays(draw: Any, arr: np.ndarray) -> dict[str, Any]:
    """``arr`` as a suite typed array, drawn as readable ``values`` or as little-endian ``hex``."""
    from .payloads import array_to_json

    if draw(st.booleans()):
        return array_to_json(arr)
    le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    return {"dtype": arr.dtype.name, "shape": list(arr.shape), "hex": np.ascontiguousarray(le).tobytes().hex()}


@st.composite
def shuffled_rows(draw: Any, mask: SamplingMask) -> SamplingMask:
    """The same mask with the ids of every row in a drawn order (``support_logprobs`` follows)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    keys = np.repeat(np.arange(mask.num_rows), mask.row_lengths) * 2.0 + rng.random(mask.nnz)
    perm = np.argsort(keys, kind="stable")
    kwargs: dict[str, Any] = dict(mask.companions)
    if "support_logprobs" in kwargs:
        kwargs["support_logprobs"] = kwargs["support_logprobs"][perm]
    return SamplingMask(
        mask.ids[perm],
        mask.offsets,
        cu_seqlens=mask.cu_seqlens,
        vocab_size=mask.vocab_size,
        metadata=mask.metadata,
        **kwargs,
    )


def masks_for(form: str) -> st.SearchStrategy[SamplingMask]:
    """Masks a payload of ``form`` can hold (rows only for json-rows / base64; a vocab_size for bitmask)."""
    if form in _ROWS_ONLY:
        return rows_lists(max_rows=8, max_width=6).map(SamplingMask.from_rows)
    if form == "bitmask":
        return st.integers(1, 40).flatmap(lambda v: masks(vocab_size=v, max_rows=8))
    return masks(max_rows=8)


@st.composite
def payloads(draw: Any, form: str, *, mask: SamplingMask | None = None) -> tuple[dict[str, Any], SamplingMask]:
    """``(payload, mask)``: a payload of ``form`` (conformance/README.md, "Payloads") and the mask it holds.

    Payloads vary what must not matter: the id order inside rows, dense padding width, values vs hex
    arrays, int32 vs int64 ``cu_seqlens`` (packed). ``mask`` fixes the mask instead of drawing one.
    """
    m = mask if mask is not None else draw(masks_for(form))
    if form in ("bitmask", "compact"):  # no id order: per-id companions follow ascending ids
        stored = m.canonical()
    elif form in ("arrow", "arrows", "parquet"):
        stored = m
    else:
        stored = draw(shuffled_rows(m))
    if form in ("dense", "packed", "ragged", "counts", "bitmask"):
        widest = int(stored.row_lengths.max()) if stored.num_rows else 0
        arrays: dict[str, np.ndarray] = {}
        if form in ("dense", "packed"):
            arrays["dense"] = stored.to_dense(widest + draw(st.integers(0, 3)))
            if form == "packed":
                arrays["cu_seqlens"] = stored.cu_seqlens.astype(draw(st.sampled_from([np.int32, np.int64])))
        elif form == "ragged":
            arrays["ids"], arrays["offsets"] = stored.ids, stored.offsets
        elif form == "counts":
            arrays["ids"], arrays["counts"] = stored.to_counts()
        else:
            arrays["bitmask"] = stored.to_bitmask()
        if form != "packed" and stored.num_segments != 1:
            arrays["cu_seqlens"] = stored.cu_seqlens
        arrays.update(stored.companions)
        payload: dict[str, Any] = {key: draw(typed_arrays(arr)) for key, arr in arrays.items()}
        if stored.vocab_size is not None:
            payload["vocab_size"] = stored.vocab_size
        if stored.metadata:
            payload["metadata"] = dict(stored.metadata)
        return payload, m
    if form == "compact":  # the library's compact writer; the container keys as typed arrays
        from .payloads import encode_layout

        payload = encode_layout("compact", stored)
        for key, arr in (("cu_seqlens", stored.cu_seqlens), *stored.companions.items()):
            if key in payload:
                payload[key] = draw(typed_arrays(arr))
        return payload, m
    if form == "model":
        from .payloads import mask_to_json

        doc = mask_to_json(m)
        doc["rows"] = stored.to_rows()
        if "support_logprobs" in doc:
            bounds = stored.offsets.tolist()
            values = [float(v) for v in stored.support_logprobs.tolist()]  # type: ignore[union-attr]
            doc["support_logprobs"] = [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        return doc, m
    if form == "json-rows":
        import json

        spaced = draw(st.booleans())
        return {"text": json.dumps(stored.to_rows(), separators=(", ", ": ") if spaced else (",", ":"))}, m
    if form == "base64":
        import base64
        import json

        widest = int(stored.row_lengths.max()) if stored.num_rows else 0
        dense = stored.to_dense(widest + draw(st.integers(0, 2))).astype("<i4")
        env = {"data": base64.b64encode(dense.tobytes()).decode("ascii"), "shape": list(dense.shape), "dtype": "int32"}
        return {"text": json.dumps(env)}, m
    import sampling_mask

    data = sampling_mask.encode(stored, form)
    return ({"text": data.decode("utf-8")} if form == "json" else {"hex": data.hex()}), m


@st.composite
def limited_payloads(draw: Any, form: str) -> tuple[dict[str, Any], dict[str, int]]:
    """``(payload, limits)``: a payload of ``form`` with limits drawn at and just below its own sizes
    (SPEC 8.1: inclusive maxima, so ``T`` rows pass ``max_rows = T`` and fail ``T - 1``). ``max_bytes``
    is not drawn: a reader MAY count more than 8.1's bytes where it builds more on the way."""
    payload, m = draw(payloads(form))
    widest = int(m.row_lengths.max()) if m.num_rows else 0
    sizes = {"max_rows": m.num_rows, "max_nnz": m.nnz, "max_width": widest, "max_segments": m.num_segments}
    if m.vocab_size is not None and form != "bitmask":
        sizes["max_vocab"] = m.vocab_size
    names = draw(st.lists(st.sampled_from(sorted(sizes)), min_size=1, max_size=2, unique=True))
    return payload, {name: max(sizes[name] - draw(st.integers(0, 1)), 0) for name in names}


# ------------------------------------------------------------------------------------------ model operations
#: What :func:`operation_requests` may change in one of the masks it concatenates (SPEC 3.6).
_CONCAT_CHANGES = ("none", "drop-vocab", "other-vocab", "drop-companion", "metadata-float", "other-metadata")


@st.composite
def operation_requests(draw: Any, *, max_rows: int = 6) -> dict[str, Any]:
    """A ``concatenate``, ``slice`` or ``take`` request of class ``model operations`` (SPEC 3.6):
    compatible masks and ones that differ in V, companions or metadata (a float metadata value equal
    to an integer one is the same metadata, 3.5, and NaN equals NaN), zero masks, slice bounds
    negative, reversed, beyond T, omitted or null, and segment indices inside and outside ``[-B, B)``."""
    from .payloads import mask_to_json

    op = draw(st.sampled_from(["concatenate", "slice", "take"]))
    vocab = draw(st.integers(1, 40))
    companions = draw(st.booleans())
    metadata = draw(
        st.sampled_from(
            [None, {"seed": 4}, {"seed": 4, "producer": "test", "top_p": 0.5}, {"seed": 4.0, "x": {"float": "NaN"}}]
        )
    )

    def one() -> dict[str, Any]:
        doc = mask_to_json(draw(masks(vocab_size=vocab, max_rows=max_rows, companions=companions, metadata=False)))
        if metadata is not None:
            doc["metadata"] = dict(metadata)
        return doc

    if op == "concatenate":
        change = draw(st.sampled_from(_CONCAT_CHANGES))
        # a change is drawn with at least two masks, where it can make them disagree
        docs = [one() for _ in range(draw(st.integers(0 if change == "none" else 2, 3)))]
        if docs:
            at = draw(st.integers(0, len(docs) - 1))
            doc = docs[at]
            if change == "drop-vocab":
                doc["vocab_size"] = None  # adopts V; E_RANGE when an id of it is not below another's V
                if draw(st.booleans()):
                    doc["rows"] = [*doc["rows"][:-1], [vocab + draw(st.integers(0, 3))]] if doc["rows"] else [[vocab]]
                    _fit_companions(doc)
            elif change == "other-vocab":
                doc["vocab_size"] = vocab + 1
            elif change == "drop-companion" and companions:
                del doc[draw(st.sampled_from(["sampled_token_ids", "temperature", "support_logprobs"]))]
            elif change == "metadata-float" and metadata is not None:
                # equal by value (3.5): the same metadata; the result keeps the first mask's kind (3.6)
                doc["metadata"] = {**metadata, "seed": 4 if isinstance(metadata["seed"], float) else 4.0}
            elif change == "other-metadata":
                doc["metadata"] = {**(metadata or {}), "seed": draw(st.sampled_from([5, True, "4"]))}
        return {"op": "concatenate", "form": "model", "input": {"masks": docs}}
    doc = one()
    num_rows = len(doc["rows"])
    if op == "slice":
        start = draw(st.integers(-2, num_rows + 2))
        stop = draw(st.integers(-2, num_rows + 2))
        payload: dict[str, Any] = {"mask": doc, "start": start, "stop": stop}
        omitted = draw(st.sampled_from([None, None, None, None, "start", "stop"]))
        if omitted is not None:  # an omitted or null bound is E_SCHEMA, never a default (3.6, 1.3)
            if draw(st.booleans()):
                del payload[omitted]
            else:
                payload[omitted] = None
        return {"op": "slice", "form": "model", "input": payload}
    num_segments = len(doc["cu_seqlens"]) - 1
    segments = draw(st.lists(st.integers(-num_segments - 2, num_segments + 1), max_size=4))
    return {"op": "take", "form": "model", "input": {"mask": doc, "segments": segments}}


def _fit_companions(doc: dict[str, Any]) -> None:
    """After the last row of a model mask changed: its companions made to fit again."""
    rows = doc["rows"]
    doc["cu_seqlens"] = [min(c, len(rows)) for c in doc["cu_seqlens"][:-1]] + [len(rows)]
    if "sampled_token_ids" in doc:
        doc["sampled_token_ids"] = [r[0] if r else -1 for r in rows]
    for name in ("sampled_logprobs", "temperature"):
        if name in doc:
            doc[name] = (doc[name] + [1.0])[: len(rows)]
    if "support_logprobs" in doc:
        doc["support_logprobs"] = [[-1.0] * len(r) for r in rows]


# ------------------------------------------------------------------------------------------ scorer inputs
@st.composite
def scorer_inputs(
    draw: Any, *, max_rows: int = 5, max_vocab: int = 12, empty_rows: bool = True, hidden: bool | None = None
) -> dict[str, Any]:
    """A ``scorer`` payload: float64 logits (or hidden + weight), a mask of the logits' vocabulary,
    targets inside each non-empty row's support, a scalar or per-row temperature."""
    vocab = draw(st.integers(1, max_vocab))
    num_rows = draw(st.integers(0, max_rows))
    rows = []
    for _ in range(num_rows):
        low = 0 if empty_rows else 1
        rows.append(draw(st.lists(st.integers(0, vocab - 1), min_size=low, max_size=vocab, unique=True)))
    targets = [draw(st.sampled_from(r)) if r else draw(st.integers(0, vocab - 1)) for r in rows]
    finite = st.floats(-20.0, 20.0, allow_nan=False, width=64)
    temps = st.floats(0.25, 2.0, allow_nan=False, width=64)
    temperature: Any = draw(temps) if draw(st.booleans()) else [draw(temps) for _ in rows]
    payload: dict[str, Any] = {
        "mask": {"rows": rows},
        "targets": {"dtype": "int64", "shape": [num_rows], "values": targets},
        "temperature": temperature
        if not isinstance(temperature, list)
        else {"dtype": "float64", "shape": [num_rows], "values": temperature},
        "empty_rows": "full",
    }
    use_hidden = draw(st.booleans()) if hidden is None else hidden
    if use_hidden:
        dim = draw(st.integers(1, 4))
        h = [[draw(finite) / 5 for _ in range(dim)] for _ in range(num_rows)]
        w = [[draw(finite) / 5 for _ in range(dim)] for _ in range(vocab)]
        payload["hidden"] = {"dtype": "float64", "shape": [num_rows, dim], "values": h}
        payload["weight"] = {"dtype": "float64", "shape": [vocab, dim], "values": w}
    else:
        z = [[draw(finite) for _ in range(vocab)] for _ in range(num_rows)]
        payload["logits"] = {"dtype": "float64", "shape": [num_rows, vocab], "values": z}
    return payload


@st.composite
def scorer_edge_inputs(draw: Any) -> dict[str, Any]:
    """A :func:`scorer_inputs` payload with one of the rows 13.2 covers: a target of -1 (on an empty or
    a non-empty row), a target outside its row's support under a drawn ``missing_target`` policy, a
    NaN, zero or negative temperature on one row, the ``exclude`` policy, an id or target at or
    beyond the logits' width (under any ``missing_target`` policy), or a temperature companion in the
    mask instead of the caller's."""
    payload = draw(scorer_inputs(hidden=False))
    rows = payload["mask"]["rows"]
    targets = list(payload["targets"]["values"])
    vocab = payload["logits"]["shape"][1]
    how = draw(
        st.sampled_from(
            ["minus-one", "outside", "temperature", "exclude", "beyond", "companion", "companion-nan", "none"]
        )
    )
    if rows and how in ("minus-one", "outside", "temperature", "beyond", "companion-nan"):
        t = draw(st.integers(0, len(rows) - 1))
        if how == "minus-one":
            targets[t] = -1
        elif how == "outside":
            outside = [j for j in range(vocab) if j not in rows[t]]
            if outside:
                targets[t] = draw(st.sampled_from(outside))
            payload["missing_target"] = draw(st.sampled_from(["error", "full", "neg_inf"]))
        elif how == "temperature":
            values: list[Any] = [1.0] * len(rows)
            values[t] = draw(st.sampled_from(["NaN", 0.0, -1.0, 0.5]))
            payload["temperature"] = {"dtype": "float64", "shape": [len(rows)], "values": values}
        elif how == "beyond":  # E_RANGE under every missing_target policy
            beyond = vocab + draw(st.integers(0, 2))
            if draw(st.booleans()):
                targets[t] = beyond
            else:
                rows = [sorted({*row, beyond}) if i == t else row for i, row in enumerate(rows)]
                payload["mask"] = {**payload["mask"], "rows": rows}
            payload["missing_target"] = draw(st.sampled_from(["error", "full", "neg_inf"]))
        else:
            payload.pop("temperature")
            companion: list[Any] = [1.0] * len(rows)
            companion[t] = "NaN"
            payload["mask"] = {**payload["mask"], "temperature": companion}
    elif how == "exclude":
        payload["empty_rows"] = "exclude"
    elif how == "companion":
        payload.pop("temperature")
        temps = st.floats(0.25, 2.0, allow_nan=False, width=32)
        payload["mask"] = {**payload["mask"], "temperature": [draw(temps) for _ in rows]}
    payload["targets"] = {**payload["targets"], "values": targets}
    return payload
