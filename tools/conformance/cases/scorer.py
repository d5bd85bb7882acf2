"""The scoring rule (SPEC 13): renormalized log-probs and entropy over each row's support, the
policies of 13.2, and the requests a scorer refuses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sampling_mask.conformance.properties import float64_scores

from .common import REC, REQ, Book, arr, err, model, stable_scores, vllm_source


def add_cases(book: Book) -> None:
    """Every scorer case: ``scorer/score.json`` and ``invalid/scorer.json``."""
    rng = np.random.default_rng(20260601)
    f = book.file("scorer/score.json", "scorer", "Renormalized log-probs and entropy over each row's support.")
    tol = 1e-6

    def add(
        slug: str,
        why: str,
        logits: np.ndarray,
        rows: list[list[int]],
        targets: list[int],
        temperature: Any = 1.0,
        empty_rows: str = "full",
        *,
        missing_target: str | None = None,
        payload_logits: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        level: str = REQ,
        tolerance: float = tol,
        spec: str = "scoring",
        vocab_size: int | None = None,
        since: str,
    ) -> None:
        payload: dict[str, Any] = {
            "mask": model(rows, vocab_size=vocab_size),
            "targets": arr(targets, "int64", shape=[len(targets)]),
            "temperature": temperature if not isinstance(temperature, list) else arr(temperature, "float64"),
            "empty_rows": empty_rows,
        }
        if missing_target is not None:
            payload["missing_target"] = missing_target
        values = [["-Infinity" if v == -math.inf else v for v in row] for row in logits.tolist()]
        payload.update(extra or {"logits": payload_logits or arr(values, "float64", shape=logits.shape)})
        expected = stable_scores(
            float64_scores(logits, rows, targets, temperature, empty_rows, missing_target or "error")
        )
        f.add(
            slug, why, spec, payload, {"scores": expected, "tolerance": tolerance}, op="score", level=level, since=since
        )

    def logits_of(t: int, v: int, scale: float = 3.0) -> np.ndarray:
        return np.round(rng.normal(0.0, scale, size=(t, v)), 3)

    z = logits_of(3, 6)
    add("basic", "Three rows, temperature 1.", z, [[0, 2, 5], [1, 3], [4]], [2, 1, 4], since="1.0")
    add(
        "temperature-scalar",
        "One temperature for every row: logits are divided by it before the logsumexp.",
        z,
        [[0, 2, 5], [1, 3], [4, 5]],
        [5, 3, 4],
        0.7,
        since="1.0",
    )
    add(
        "temperature-per-row",
        "A temperature per row.",
        z,
        [[0, 2, 5], [1, 3], [4, 5]],
        [0, 1, 5],
        [0.5, 1.0, 2.0],
        since="1.0",
    )
    z2 = logits_of(2, 5)
    add(
        "support-is-vocabulary",
        "A support of every id gives the full log_softmax.",
        z2,
        [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]],
        [3, 0],
        1.3,
        since="1.0",
    )
    add("singleton-rows", "A one-id support: log-prob 0, entropy 0.", z2, [[3], [1]], [3, 1], 0.9, since="1.0")
    add(
        "empty-row-full-vocabulary",
        "An empty row (no support recorded) is scored against the full vocabulary by default.",
        z2,
        [[1, 2], []],
        [2, 4],
        spec="scoring-policies",
        since="1.0",
    )
    add(
        "empty-row-excluded",
        "With empty_rows = exclude an empty row has no score (null).",
        z2,
        [[1, 2], []],
        [2, 4],
        empty_rows="exclude",
        spec="scoring-policies",
        since="1.0",
    )
    inf = -math.inf
    add(
        "minus-one-target-on-empty-row",
        "A target of -1 (nothing known sampled) gives no value, whatever the empty-row policy.",
        z2,
        [[1, 2], []],
        [2, -1],
        spec="scoring-policies",
        since="1.0",
    )
    add(
        "missing-target-full",
        "Policy missing_target = full scores a row whose target is outside its support over the vocabulary.",
        z2,
        [[1, 2], [0, 3]],
        [2, 4],
        missing_target="full",
        spec="scoring-policies",
        level=REC,
        since="1.0",
    )
    add(
        "missing-target-neg-inf",
        "Policy missing_target = neg_inf: log-prob -inf, entropy over the recorded support.",
        z2,
        [[1, 2], [0, 3]],
        [2, 4],
        missing_target="neg_inf",
        spec="scoring-policies",
        level=REC,
        since="1.0",
    )
    add(
        "minus-inf-logit-in-support",
        "A -inf logit is a token of probability 0: it adds nothing.",
        np.array([[0.5, inf, 1.5, -0.25], [inf, 2.0, inf, 1.0]]),
        [[0, 1, 2], [0, 1, 3]],
        [2, 3],
        0.8,
        since="1.0",
    )
    add(
        "target-logit-minus-inf",
        "A target whose logit is -inf has log-prob -inf.",
        np.array([[0.5, inf, 1.5, -0.25]]),
        [[0, 1, 2]],
        [1],
        since="1.0",
    )
    add(
        "support-all-minus-inf",
        "A support holding only -inf logits has no distribution: no value.",
        np.array([[inf, inf, 1.5, -0.25], [0.0, 1.0, 2.0, 3.0]]),
        [[0, 1], [1, 2]],
        [0, 2],
        since="1.0",
    )
    padded = np.concatenate([logits_of(2, 5), np.full((2, 3), inf)], axis=1)
    add(
        "padded-vocabulary",
        "Logits padded past vocab_size (lm heads rounded up) with -inf: an empty row scores over all 8 columns.",
        padded,
        [[1, 4], []],
        [4, 2],
        1.2,
        vocab_size=5,
        spec="scoring-policies",
        since="1.0",
    )
    add(
        "unsorted-support",
        "Order inside a row does not change the result.",
        z,
        [[5, 0, 2], [3, 1], [5, 4]],
        [0, 3, 5],
        0.8,
        since="1.0",
    )
    hidden = np.round(rng.normal(0.0, 1.0, size=(3, 4)), 3)
    weight = np.round(rng.normal(0.0, 1.0, size=(7, 4)), 3)
    bias = np.round(rng.normal(0.0, 0.5, size=7), 3)
    add(
        "hidden-and-weight",
        "Logits as hidden [T, d] @ weight[V, d].T; only the support's logits are needed.",
        hidden @ weight.T,
        [[0, 6, 3], [2], [1, 4, 5]],
        [6, 2, 1],
        0.9,
        extra={"hidden": arr(hidden.tolist(), "float64"), "weight": arr(weight.tolist(), "float64")},
        since="1.0",
    )
    add(
        "hidden-weight-bias",
        "The same with an lm-head bias.",
        hidden @ weight.T + bias,
        [[0, 6, 3], [2, 5], [1, 4, 5]],
        [3, 5, 4],
        1.0,
        extra={
            "hidden": arr(hidden.tolist(), "float64"),
            "weight": arr(weight.tolist(), "float64"),
            "bias": arr(bias.tolist(), "float64"),
        },
        since="1.0",
    )
    big = np.array([[1000.0, 999.0, -1000.0, 998.5], [-5000.0, -5001.0, -4999.0, 0.0]])
    add(
        "large-logits",
        "Logits of magnitude 1000s: a stable logsumexp is required.",
        big,
        [[0, 1, 3], [0, 1, 2]],
        [1, 2],
        since="1.0",
    )
    add(
        "tied-logits",
        "Equal logits: log-prob -log|S|, entropy log|S|.",
        np.zeros((2, 8)),
        [[0, 1, 2, 3], [5, 7]],
        [2, 7],
        0.6,
        since="1.0",
    )
    add(
        "zero-rows",
        "T = 0 gives empty results.",
        np.zeros((0, 4)),
        [],
        [],
        since="1.0",
    )
    src = vllm_source()
    picks = ["17", "18"]
    logits32 = np.concatenate(
        [np.frombuffer(bytes.fromhex(src["logits_float32_hex"][i]), dtype="<f4") for i in picks]
    ).reshape(len(picks), -1)
    temps32 = [src["temperature"][i] for i in picks]
    rows = [src["rows"][i] for i in picks]
    targets = [src["sampled_token_ids"][i] for i in picks]
    expected = float64_scores(logits32.astype(np.float64), rows, targets, temps32, "full")
    engine = [src["processed_logprobs_of_sampled"][i] for i in picks]
    for ours, theirs in zip(expected["logprobs"], engine, strict=True):
        assert ours is not None and abs(ours - theirs) < 1e-5, (ours, theirs)  # agrees with vLLM's own value
    add(
        "vllm-0.32-processed-logprobs",
        "Real vLLM 0.32 logits (float32), per-row temperature and top-k / top-p supports; the expected "
        "log-probs agree with the engine's processed_logprobs to 1e-5.",
        logits32.astype(np.float64),
        rows,
        targets,
        temps32,
        payload_logits={
            "dtype": "float32",
            "shape": list(logits32.shape),
            "hex": logits32.astype("<f4").tobytes().hex(),
        },
        tolerance=1e-5,
        since="1.0",
    )

    rng11 = np.random.default_rng(20261130)  # its own generator: the cases above keep their inputs
    padded = np.round(rng11.normal(0.0, 3.0, size=(2, 7)), 3)
    add(
        "empty-row-over-padded-vocabulary",
        "An empty row under the full policy scores over all V' = 7 logit columns, not over V = 5: the padded "
        "columns here hold finite values, so the two answers differ.",
        padded,
        [[1, 3], []],
        [3, 2],
        spec="scoring-policies",
        vocab_size=5,
        since="1.1",
    )

    add(
        "nan-temperature-on-rows-without-value",
        "A NaN (unknown) temperature is no fault on rows that get no value: an empty row with target -1.",
        np.round(rng11.normal(0.0, 3.0, size=(2, 4)), 3),
        [[0, 2], []],
        [2, -1],
        [0.5, "NaN"],
        spec="scoring-policies",
        since="1.1",
    )

    bad = book.file("invalid/scorer.json", "scorer", "Scoring requests that must be refused.")
    z3 = logits_of(2, 5)

    def payload(
        rows: list[list[int]], targets: list[int], temperature: Any = 1.0, logits: Any = None
    ) -> dict[str, Any]:
        return {
            "mask": model(rows),
            "targets": arr(targets, "int64", shape=[len(targets)]),
            "temperature": temperature,
            "empty_rows": "full",
            "logits": logits if logits is not None else arr(z3.tolist(), "float64"),
        }

    bad.add(
        "minus-one-target-on-non-empty-row",
        "A target of -1 (unknown) is allowed on empty rows only: on a non-empty row it is E_RANGE.",
        "scoring-policies",
        payload([[0, 1], [2, 3]], [0, -1]),
        err("E_RANGE"),
        op="score",
        since="1.1",
    )
    bad.add(
        "nan-temperature-on-scored-row",
        "A NaN temperature (unknown) cannot scale a row that is scored: E_RANGE, as zero or infinity.",
        "scoring",
        payload([[0, 1], [2, 3]], [0, 2], temperature=arr(["NaN", 1.0], "float64")),
        err("E_RANGE"),
        op="score",
        since="1.1",
    )
    bad.add(
        "target-not-in-support",
        "By default a target outside its row's support is an error naming the row.",
        "scoring-policies",
        payload([[0, 1], [2, 3]], [0, 4]),
        err("E_MISSING_SAMPLED"),
        op="score",
        since="1.1",
    )
    bad.add(
        "temperature-zero",
        "temperature > 0.",
        "scoring",
        payload([[0, 1], [2, 3]], [0, 2], 0.0),
        err("E_RANGE"),
        op="score",
        since="1.1",
    )
    bad.add(
        "logits-rows-mismatch",
        "logits has one row per mask row.",
        "scoring",
        payload([[0, 1], [2, 3], [4]], [0, 2, 4]),
        err("E_SHAPE"),
        op="score",
        since="1.1",
    )
    bad.add(
        "target-beyond-logits",
        "A target must index the logits' vocabulary (an empty row, scored over all of it).",
        "scoring-policies",
        payload([[0, 1], []], [0, 5]),
        err("E_RANGE"),
        op="score",
        since="1.1",
    )
    bad.add(
        "support-id-beyond-logits",
        "A support id must index the logits' vocabulary.",
        "scoring",
        payload([[0, 7], [2, 3]], [0, 2]),
        err("E_RANGE"),
        op="score",
        since="1.1",
    )

    # 13.1 / 13.2: the caller's temperature replaces the companion; a NaN that reaches a scored row is E_RANGE.
    z = np.round(np.random.default_rng(20261201).normal(0.0, 3.0, size=(2, 5)), 3)
    rows, targets = [[0, 2, 4], [1, 3]], [2, 3]
    logits = arr(z.tolist(), "float64")
    base = {"targets": arr(targets, "int64"), "empty_rows": "full", "logits": logits}
    f.add(
        "temperature-from-companion",
        "No temperature in the request: each row's temperature companion scales it (13.1).",
        "scoring",
        {"mask": model(rows, temperature=[0.5, 2.0]), **base},
        {"scores": stable_scores(float64_scores(z, rows, targets, [0.5, 2.0])), "tolerance": 1e-6},
        op="score",
        since="1.2",
    )
    f.add(
        "caller-temperature-replaces-nan-companion",
        "The caller's temperature replaces a companion holding NaN (unknown) on every row (13.1).",
        "scoring",
        {"mask": model(rows, temperature=["NaN", 2.0]), **base, "temperature": 0.75},
        {"scores": stable_scores(float64_scores(z, rows, targets, 0.75)), "tolerance": 1e-6},
        op="score",
        since="1.2",
    )
    bad.add(
        "nan-companion-temperature-without-caller-value",
        "A NaN temperature companion on a scored row and no temperature from the caller: E_RANGE (13.2), not 1.",
        "scoring-policies",
        {"mask": model(rows, temperature=["NaN", 2.0]), **base},
        err("E_RANGE"),
        op="score",
        since="1.2",
    )

    # 13.2: a second angle on each policy.
    z = np.round(np.random.default_rng(20261202).normal(0.0, 2.0, size=(2, 6)), 3)
    logits = arr(z.tolist(), "float64")
    bad.add(
        "minus-one-target-on-non-empty-row-excluded",
        "A target of -1 on a non-empty row is E_RANGE under empty_rows = exclude too.",
        "scoring-policies",
        {"mask": model([[0, 1], []]), "targets": arr([-1, 2], "int64"), "empty_rows": "exclude", "logits": logits},
        err("E_RANGE"),
        op="score",
        since="1.2",
    )
    h = np.round(np.random.default_rng(20261203).normal(0.0, 1.0, size=(2, 3)), 3)
    w = np.round(np.random.default_rng(20261204).normal(0.0, 1.0, size=(6, 3)), 3)
    hidden_payload = {"hidden": arr(h.tolist(), "float64"), "weight": arr(w.tolist(), "float64")}
    bad.add(
        "target-not-in-support-hidden",
        "From hidden states too, a target outside its row's support is E_MISSING_SAMPLED by default.",
        "scoring-policies",
        {"mask": model([[0, 1], [2, 3]]), "targets": arr([0, 5], "int64"), "temperature": 1.0, **hidden_payload},
        err("E_MISSING_SAMPLED"),
        op="score",
        since="1.2",
    )
    bad.add(
        "support-id-beyond-weight-rows",
        "An id of the mask at or beyond V' (the rows of the lm-head weight) is E_RANGE.",
        "scoring-policies",
        {
            "mask": model([[0, 6]]),
            "targets": arr([0], "int64"),
            "temperature": 1.0,
            "hidden": arr(h[:1].tolist(), "float64"),
            "weight": hidden_payload["weight"],
        },
        err("E_RANGE"),
        op="score",
        since="1.2",
    )
    padded = np.concatenate([z, np.full((2, 2), 0.25)], axis=1)  # V' = 8 > V = 6, finite padding
    rows, targets = [[0, 3], [1, 2]], [3, 5]
    f.add(
        "missing-target-full-over-padded-vocabulary",
        "missing_target = full scores over all V' = 8 logits, padded columns included, not over V = 6.",
        "scoring-policies",
        {
            "mask": model(rows, vocab_size=6),
            "targets": arr(targets, "int64"),
            "temperature": 1.0,
            "empty_rows": "full",
            "missing_target": "full",
            "logits": arr(padded.tolist(), "float64"),
        },
        {
            "scores": stable_scores(float64_scores(padded, rows, targets, 1.0, "full", "full")),
            "tolerance": 1e-6,
        },
        op="score",
        level=REC,
        since="1.2",
    )
    zh = h @ w.T
    f.add(
        "empty-row-excluded-hidden",
        "With empty_rows = exclude an empty row has no score (null), from hidden states too.",
        "scoring-policies",
        {
            "mask": model([[0, 4], []]),
            "targets": arr([4, 1], "int64"),
            "temperature": 1.0,
            "empty_rows": "exclude",
            **hidden_payload,
        },
        {
            "scores": stable_scores(float64_scores(zh, [[0, 4], []], [4, 1], 1.0, "exclude")),
            "tolerance": 1e-6,
        },
        op="score",
        level=REC,
        since="1.2",
    )
