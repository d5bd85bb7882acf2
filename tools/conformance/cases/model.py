"""The model form (SPEC 3, 4.6): the suite's plain-JSON statement of a mask, read by ``decode`` and
``validate``, and the optional operations of SPEC 3.6 on it (``concatenate``, ``slice``, ``take``).
"""

from __future__ import annotations

from typing import Any

from .common import ISSUE_ROWS, Book, err, f32_mask_bytes, mask, model, ok, roundtrip_model


def add_cases(book: Book) -> None:
    """Every model case: ``model/decode.json``, ``model/validate.json``, ``model/operations.json``,
    ``invalid/model.json``."""
    f = book.file(
        "model/decode.json",
        "model",
        "The suite's logical form: rows as nested lists plus cu_seqlens, vocab_size, companions, metadata.",
    )
    f.add(
        "segments-and-vocab",
        "The issue example as a model mask.",
        "segments",
        model([[5, 1], [], [7]], cu_seqlens=[0, 2, 3], vocab_size=10),
        ok(mask(ISSUE_ROWS, cu=[0, 2, 3], vocab=10)),
        since="1.0",
    )
    f.add(
        "unsorted-rows-with-support-logprobs",
        "Canonicalization permutes support_logprobs with the ids.",
        "companions",
        model([[9, 2, 5]], support_logprobs=[[-0.5, -2.0, -1.0]], sampled_token_ids=[5]),
        ok(mask([[2, 5, 9]], support_logprobs=[[-2.0, -1.0, -0.5]], sampled_token_ids=[5])),
        since="1.0",
    )
    f.add("zero-rows", "An empty mask.", "model", model([]), ok(mask([])), since="1.0")
    f.add(
        "non-finite-as-strings",
        'Non-finite float companions are spelled "-Infinity", "Infinity", "NaN".',
        "companions",
        model([[1], []], sampled_logprobs=["-Infinity", 0.0]),
        ok(mask([[1], []], sampled_logprobs=["-Infinity", 0.0])),
        since="1.0",
    )
    v = book.file("model/validate.json", "model", "validate: is this a valid mask?")
    v.add(
        "validate-companions",
        "A mask with every companion validates.",
        "companions",
        model(
            [[1, 5], [], [7]],
            cu_seqlens=[0, 2, 3],
            vocab_size=10,
            sampled_token_ids=[5, -1, 7],
            sampled_logprobs=[-0.5, 0.0, 0.0],
            temperature=[1.0, 1.0, 0.5],
            support_logprobs=[[-1.0, -0.5], [], [0.0]],
        ),
        {"valid": True},
        op="validate",
        since="1.0",
    )
    v.add(
        "validate-empty-segments",
        "Empty segments validate.",
        "segments",
        model([[2]], cu_seqlens=[0, 0, 1, 1]),
        {"valid": True},
        op="validate",
        since="1.0",
    )

    bad = book.file("invalid/model.json", "model", "Model masks that break an invariant of the logical model.")
    cases: list[tuple[str, str, str, dict[str, Any], tuple[str, ...], dict[str, int] | None]] = [
        (
            "sampled-id-not-in-row",
            "A non-empty row must contain its sampled id.",
            "companions",
            model([[1, 5], [7]], sampled_token_ids=[5, 8]),
            ("E_MISSING_SAMPLED",),
            None,
        ),
        ("temperature-zero", "temperature > 0.", "companions", model([[1]], temperature=[0.0]), ("E_RANGE",), None),
        (
            "temperature-infinite",
            "temperature is finite.",
            "companions",
            model([[1]], temperature=["Infinity"]),
            ("E_RANGE",),
            None,
        ),
        (
            "cu-seqlens-not-tiling",
            "cu_seqlens must end at T.",
            "segments",
            model([[1], [2]], cu_seqlens=[0, 1]),
            ("E_SEGMENTS",),
            None,
        ),
        ("rows-not-list", "rows is a list.", "model", {"rows": {"0": [1]}}, ("E_SCHEMA",), None),
        ("row-not-list", "Each row is a list.", "model", {"rows": [[1], 2]}, ("E_SCHEMA",), None),
        ("float-id", "Ids are integers.", "model", {"rows": [[1.5]]}, ("E_DTYPE",), None),
        ("boolean-id", "true is not an id.", "model", {"rows": [[True]]}, ("E_DTYPE",), None),
        ("duplicate-id", "Rows are sets.", "model", {"rows": [[2, 2]]}, ("E_DUPLICATE",), None),
        (
            "support-logprobs-not-like-rows",
            "support_logprobs nests like rows.",
            "companions",
            model([[1, 2]], support_logprobs=[[-0.5]]),
            ("E_SHAPE",),
            None,
        ),
        (
            "sampled-ids-too-short",
            "sampled_token_ids has T entries.",
            "companions",
            model([[1], [2]], sampled_token_ids=[1]),
            ("E_SHAPE",),
            None,
        ),
        (
            "vocab-size-boolean",
            "vocab_size is an integer.",
            "model",
            model([[1]], vocab_size=True),
            ("E_SCHEMA",),
            None,
        ),
        ("rows-over-limit", "T above max_rows.", "limits", model([[1], [2], [3]]), ("E_LIMIT",), {"max_rows": 2}),
        (
            "metadata-list",
            "metadata is an object.",
            "metadata",
            model([[1]], metadata=["top_k"]),
            ("E_SCHEMA",),
            None,
        ),
    ]
    for slug, why, spec, payload, codes, limits in cases:
        bad.add(slug, why, spec, payload, err(*codes), op="validate", limits=limits, since="1.0")

    # The optional operations of 3.6, for implementations that offer them (class "model operations").
    ops = book.file("model/operations.json", "model", "Concatenation, row slices and take (SPEC 3.6).")
    a = model([[1], [2, 3]], cu_seqlens=[0, 1, 2], vocab_size=10)
    b = model([[4]], vocab_size=10)
    ops.add(
        "concatenate",
        "Rows and segments one after another: cu = [0] ++ (cu_i[1:] + rows before).",
        "3.6",
        {"masks": [a, b]},
        ok(mask([[1], [2, 3], [4]], cu=[0, 1, 2, 3], vocab=10)),
        op="concatenate",
        since="1.1",
    )
    ops.add(
        "concatenate-adopts-vocab-size",
        "A mask without V adopts the others' V when its ids are below it.",
        "3.6",
        {"masks": [a, model([[5]])]},
        ok(mask([[1], [2, 3], [5]], cu=[0, 1, 2, 3], vocab=10)),
        op="concatenate",
        since="1.1",
    )
    four_with_logprobs = model(
        [[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], support_logprobs=[[-1.0], [-2.0], [-3.0], [-4.0]]
    )
    ops.add(
        "slice-clips-segments",
        "M[1:3]: segments sharing a row are clipped, the empty segment at 2 is kept, companions follow.",
        "3.6",
        {"mask": four_with_logprobs, "start": 1, "stop": 3},
        ok(mask([[2], [3]], cu=[0, 1, 1, 2], support_logprobs=[[-2.0], [-3.0]])),
        op="slice",
        since="1.1",
    )
    ops.add(
        "slice-whole-mask",
        "M[0:T] = M.",
        "3.6",
        {"mask": four_with_logprobs, "start": 0, "stop": 4},
        ok(mask([[1], [2], [3], [4]], cu=[0, 2, 2, 4], support_logprobs=[[-1.0], [-2.0], [-3.0], [-4.0]])),
        op="slice",
        since="1.1",
    )
    ops.add(
        "slice-empty-keeps-empty-segments-at-its-position",
        "M[2:2] keeps only the empty segments sitting at row 2.",
        "3.6",
        {"mask": four_with_logprobs, "start": 2, "stop": 2},
        ok(mask([], cu=[0, 0], support_logprobs=[])),
        op="slice",
        since="1.1",
    )
    ops.add(
        "take-reorders-and-repeats",
        "take([2, 0, 2]): segments in that order, repeats allowed.",
        "3.6",
        {"mask": four_with_logprobs, "segments": [2, 0, 2]},
        ok(
            mask(
                [[3], [4], [1], [2], [3], [4]],
                cu=[0, 2, 4, 6],
                support_logprobs=[[-3.0], [-4.0], [-1.0], [-2.0], [-3.0], [-4.0]],
            )
        ),
        op="take",
        since="1.1",
    )
    ops.add(
        "take-negative-index",
        "An index in [-B, 0) counts from the end.",
        "3.6",
        {"mask": four_with_logprobs, "segments": [-1]},
        ok(mask([[3], [4]], cu=[0, 2], support_logprobs=[[-3.0], [-4.0]])),
        op="take",
        since="1.1",
    )
    op_cases: list[tuple[str, str, dict[str, Any], tuple[str, ...], str]] = [
        (
            "concatenate-different-vocab-sizes",
            "concatenate",
            {"masks": [a, model([[4]], vocab_size=12)]},
            ("E_SCHEMA",),
            "Every mask has the same V.",
        ),
        (
            "concatenate-adopted-vocab-size-too-small",
            "concatenate",
            {"masks": [model([[1]], vocab_size=5), model([[7]])]},
            ("E_RANGE",),
            "A mask without V adopts V = 5, and its id 7 is not below it.",
        ),
        (
            "concatenate-different-companions",
            "concatenate",
            {"masks": [model([[1]], sampled_token_ids=[1]), model([[2]])]},
            ("E_SCHEMA",),
            "Every mask carries the same companions.",
        ),
        (
            "concatenate-different-metadata",
            "concatenate",
            {"masks": [model([[1]], metadata={"top_k": 2}), model([[2]], metadata={"top_k": 3})]},
            ("E_SCHEMA",),
            "Every mask carries the same metadata.",
        ),
        (
            "take-index-out-of-range",
            "take",
            {"mask": four_with_logprobs, "segments": [3]},
            ("E_SEGMENTS",),
            "Segment 3 of B = 3.",
        ),
        (
            "take-negative-index-out-of-range",
            "take",
            {"mask": four_with_logprobs, "segments": [-4]},
            ("E_SEGMENTS",),
            "Segment -4 of B = 3.",
        ),
    ]
    for slug, op, payload, codes, why in op_cases:
        bad.add(slug, why, "3.6", payload, err(*codes), op=op, since="1.1")

    # A null among integers is E_DTYPE, never a crash (section 7, 4.6).
    bad.add(
        "cu-seqlens-null-entry",
        "A null inside cu_seqlens is not an integer: E_DTYPE.",
        "segments",
        {"rows": [], "cu_seqlens": [None, 0]},
        err("E_DTYPE"),
        op="validate",
        since="1.2",
    )
    bad.add(
        "sampled-id-null",
        "A null inside sampled_token_ids is not an integer: E_DTYPE.",
        "companions",
        model([[1]], sampled_token_ids=[None]),
        err("E_DTYPE"),
        op="validate",
        since="1.2",
    )

    # 3.6: slice bounds, zero masks, "the same metadata" (3.5), take of no segment.
    four = model([[1], [2], [3], [4]], cu_seqlens=[0, 2, 2, 4], vocab_size=10)
    for slug, start, stop, why in (
        ("slice-negative-start", -1, 2, "A negative bound is E_RANGE: it is not counted from the end."),
        ("slice-reversed-bounds", 3, 1, "start > stop is E_RANGE: never an empty slice."),
        ("slice-stop-beyond-rows", 2, 5, "A bound beyond T is E_RANGE: it is not clipped."),
    ):
        bad.add(slug, why, "3.6", {"mask": four, "start": start, "stop": stop}, err("E_RANGE"), op="slice", since="1.2")
    bad.add(
        "concatenate-zero-masks",
        "Concatenating no mask at all is E_SCHEMA: nothing gives the result its V, companions, metadata.",
        "3.6",
        {"masks": []},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.2",
    )
    bad.add(
        "concatenate-boolean-against-integer-metadata",
        "true and 1 are different metadata values (3.5: a boolean is not a number): E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]], metadata={"flag": 1}), model([[2]], metadata={"flag": True})]},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "concatenate-metadata-equal-by-value",
        "4 and 4.0 are the same metadata (3.5: numbers compare by value); the first mask's values are kept.",
        "3.6",
        {"masks": [model([[1]], metadata={"seed": 4}), model([[2]], metadata={"seed": 4.0})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"seed": 4})),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "concatenate-one-mask",
        "Concatenating one mask gives that mask.",
        "3.6",
        {"masks": [four]},
        ok(mask([[1], [2], [3], [4]], cu=[0, 2, 2, 4], vocab=10)),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "take-no-segment",
        "take([]) gives T = 0 and B = 0, with the mask's V.",
        "3.6",
        {"mask": four, "segments": []},
        ok(mask([], cu=[0], vocab=10)),
        op="take",
        since="1.2",
    )
    ops.add(
        "slice-at-the-end",
        "M[T:T] is valid: no row, and the segments that are empty at T.",
        "3.6",
        {"mask": four, "start": 4, "stop": 4},
        ok(mask([], cu=[0], vocab=10)),
        op="slice",
        since="1.2",
    )

    # 8.1: the bytes a mask takes, 4 per companion value.
    every = roundtrip_model()
    every_bytes = f32_mask_bytes(every["rows"], 2, 3, True)
    bad.add(
        "companions-over-max-bytes",
        f"Every companion: the mask takes {every_bytes} bytes (4 per companion value, 8.1); max_bytes "
        f"{every_bytes - 1} is E_LIMIT.",
        "limits",
        every,
        err("E_LIMIT"),
        op="validate",
        limits={"max_bytes": every_bytes - 1},
        since="1.2",
    )
    v.add(
        "companions-at-max-bytes",
        f"Every companion: the mask takes exactly {every_bytes} bytes (8.1), which max_bytes {every_bytes} allows.",
        "limits",
        every,
        {"valid": True},
        op="validate",
        limits={"max_bytes": every_bytes},
        since="1.2",
    )

    # 3.6 concatenation: V, companions and segments, from a second angle each; take repeats and counts
    # from the end.
    bad.add(
        "concatenate-vocab-size-disagrees-after-one-without",
        "The masks that carry V must agree on it, whatever comes first: [none, 10, 12] is E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]]), model([[2]], vocab_size=10), model([[3]], vocab_size=12)]},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.2",
    )
    bad.add(
        "concatenate-adopted-vocab-size-first-mask-without",
        "The first mask has no V and adopts the second's V = 5: its id 7 is not below it, E_RANGE.",
        "3.6",
        {"masks": [model([[7]]), model([[1]], vocab_size=5)]},
        err("E_RANGE"),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "concatenate-adopts-vocab-size-first-without",
        "The first mask has no V: the result carries the V of the others.",
        "3.6",
        {"masks": [model([[2]]), model([[1]], vocab_size=10)]},
        ok(mask([[2], [1]], cu=[0, 1, 2], vocab=10)),
        op="concatenate",
        since="1.2",
    )
    bad.add(
        "concatenate-companions-same-count-different-names",
        "One companion each, but not the same one (temperature, sampled_logprobs): E_SCHEMA.",
        "3.6",
        {"masks": [model([[1]], temperature=[1.0]), model([[2]], sampled_logprobs=[-0.5])]},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "concatenate-with-empty-parts",
        "A mask of one empty segment and one of no segment are joined too: cu = [0, 1, 2, 2, 3].",
        "3.6",
        {
            "masks": [
                model([[1], [2, 3]], cu_seqlens=[0, 1, 2], vocab_size=10),
                model([], cu_seqlens=[0, 0], vocab_size=10),
                model([], cu_seqlens=[0], vocab_size=10),
                model([[4]], vocab_size=10),
            ]
        },
        ok(mask([[1], [2, 3], [4]], cu=[0, 1, 2, 2, 3], vocab=10)),
        op="concatenate",
        since="1.2",
    )
    ops.add(
        "take-repeats-one-segment",
        "take([2, 2]): a segment taken twice appears twice.",
        "3.6",
        {"mask": four, "segments": [2, 2]},
        ok(mask([[3], [4], [3], [4]], cu=[0, 2, 4], vocab=10)),
        op="take",
        since="1.2",
    )
    ops.add(
        "take-negative-and-positive",
        "take([-1, 0]): -1 is the last segment (B - 1), then segment 0.",
        "3.6",
        {"mask": four, "segments": [-1, 0]},
        ok(mask([[3], [4], [1], [2]], cu=[0, 2, 4], vocab=10)),
        op="take",
        since="1.2",
    )

    # 8.1: a size at its limit is within it.
    v.add(
        "rows-at-limit",
        "T = max_rows is within the limit (limits are inclusive maxima).",
        "limits",
        model([[1], [2]]),
        {"valid": True},
        op="validate",
        limits={"max_rows": 2},
        since="1.2",
    )

    # 3.6: the result keeps the first mask's metadata values, kinds included; NaN equals NaN (3.5).
    ops.add(
        "concatenate-keeps-first-metadata-kind",
        "{seed: 4.0} then {seed: 4}: the same metadata (3.5), and the result keeps the first mask's value, "
        "the float 4.0 (3.6; the kind is compared).",
        "3.6",
        {"masks": [model([[1]], metadata={"seed": 4.0}), model([[2]], metadata={"seed": 4})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"seed": 4.0})),
        op="concatenate",
        since="1.3",
    )
    ops.add(
        "concatenate-keeps-first-metadata-of-three",
        "Three masks, {seed: 1} {seed: 1.0} {seed: 1.0}: the result keeps the first one's integer 1, not the last's float.",
        "3.6",
        {
            "masks": [
                model([[1]], metadata={"seed": 1}),
                model([[2]], metadata={"seed": 1.0}),
                model([[3]], metadata={"seed": 1.0}),
            ]
        },
        ok(mask([[1], [2], [3]], cu=[0, 1, 2, 3], metadata={"seed": 1})),
        op="concatenate",
        since="1.3",
    )
    nan = {"float": "NaN"}
    ops.add(
        "concatenate-metadata-nan-equals-nan",
        'NaN metadata values are equal (3.5: NaN equals NaN; a model mask spells NaN {"float": "NaN"} as 11.2 does).',
        "3.6",
        {"masks": [model([[1]], metadata={"x": nan}), model([[2]], metadata={"x": nan})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"x": nan})),
        op="concatenate",
        since="1.3",
    )
    bad.add(
        "concatenate-metadata-nan-against-number",
        "NaN and 1.0 are different metadata values: E_SCHEMA (3.5, 3.6).",
        "3.6",
        {"masks": [model([[1]], metadata={"x": nan}), model([[2]], metadata={"x": 1.0})]},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.3",
    )

    # 3.6: both bounds given; negative bounds are never counted from the end; empty slices keep only the
    # empty segments at their position.
    for slug, bounds, why in (
        ("slice-stop-omitted", {"start": 0}, "The stop bound omitted: the bounds are integers, E_SCHEMA, never T."),
        ("slice-start-omitted", {"stop": 2}, "The start bound omitted: E_SCHEMA, never 0."),
        ("slice-stop-null", {"start": 0, "stop": None}, "A null bound is no integer: E_SCHEMA."),
    ):
        bad.add(slug, why, "3.6", {"mask": four, **bounds}, err("E_SCHEMA"), op="slice", since="1.3")
    for slug, start, stop, why in (
        (
            "slice-negative-start-valid-from-the-end",
            -2,
            4,
            "M[-2:4] of 4 rows is E_RANGE: counted from the end it would be M[2:4], which is valid.",
        ),
        ("slice-negative-stop", 0, -1, "M[0:-1] is E_RANGE: counted from the end it would be M[0:3]."),
    ):
        bad.add(slug, why, "3.6", {"mask": four, "start": start, "stop": stop}, err("E_RANGE"), op="slice", since="1.3")
    ops.add(
        "slice-empty-between-segments",
        "M[2:2] where segments [0, 2) and [2, 4) touch 2 and [2, 2) is empty at 2: only the empty one is kept.",
        "3.6",
        {"mask": four, "start": 2, "stop": 2},
        ok(mask([], cu=[0, 0], vocab=10)),
        op="slice",
        since="1.3",
    )
    ops.add(
        "slice-empty-inside-a-segment",
        "M[1:1] lies inside segment [0, 2), which shares no row with it: no segment, B = 0.",
        "3.6",
        {"mask": four, "start": 1, "stop": 1},
        ok(mask([], cu=[0], vocab=10)),
        op="slice",
        since="1.3",
    )

    # 3.6 take: k = 0 keeps V, companions (empty) and metadata.
    full = model(
        [[1], [2]],
        cu_seqlens=[0, 1, 2],
        vocab_size=10,
        sampled_token_ids=[1, 2],
        temperature=[1.0, 0.5],
        support_logprobs=[[0.0], [0.0]],
        metadata={"top_k": 4, "producer": "test"},
    )
    ops.add(
        "take-no-segment-keeps-companions-and-metadata",
        "take([]) keeps the mask's V, its companions (empty) and its metadata (3.6).",
        "3.6",
        {"mask": full, "segments": []},
        ok(
            mask(
                [],
                cu=[0],
                vocab=10,
                sampled_token_ids=[],
                temperature=[],
                support_logprobs=[],
                metadata={"top_k": 4, "producer": "test"},
            )
        ),
        op="take",
        since="1.3",
    )
    v.add(
        "empty-segments-under-max-rows-zero",
        "T = 0 in B = 2 empty segments is within max_rows = 0 (8.1).",
        "limits",
        model([], cu_seqlens=[0, 0, 0]),
        {"valid": True},
        op="validate",
        limits={"max_rows": 0},
        since="1.3",
    )

    # 3.6, 5.2: the metadata string "NaN" is a string, never the float NaN.
    ops.add(
        "concatenate-metadata-string-nan",
        'Two masks whose metadata note is the string "NaN": the same metadata, kept a string (3.5, 3.6).',
        "3.6",
        {"masks": [model([[1]], metadata={"note": "NaN"}), model([[2]], metadata={"note": "NaN"})]},
        ok(mask([[1], [2]], cu=[0, 1, 2], metadata={"note": "NaN"})),
        op="concatenate",
        since="1.4",
    )
    bad.add(
        "concatenate-metadata-string-nan-against-float-nan",
        'The string "NaN" and the float NaN ({"float": "NaN"}) are different metadata values: E_SCHEMA (3.5, 3.6).',
        "3.6",
        {"masks": [model([[1]], metadata={"note": "NaN"}), model([[2]], metadata={"note": {"float": "NaN"}})]},
        err("E_SCHEMA"),
        op="concatenate",
        since="1.4",
    )
