"""Multi-turn trace: build one trajectory's mask in lock-step with its token ids and logprobs.

Invariants of :class:`TraceBuilder` (checked on every call, so a trajectory can never drift):

* token ids, logprobs and rows always have the same length T; row t describes token t;
* generated tokens carry their captured rows (a non-empty row must contain its token) and logprobs;
  prompt / observation / tool tokens carry empty rows and NaN logprobs;
* step k ends where generation k ends; tokens after the last generation join the last step (with
  no generation at all, the whole trace is one step). :attr:`Trace.turn_bounds` splits the same
  tokens the other way, SkyRL's step-wise way: step k runs from generation k's first token to
  generation k+1's first token, so it holds generation k *and the observation that follows it*
  (tokens before the first generation join step 0);
* :meth:`TraceBuilder.remove_eos` takes the last generated token off the stream and remembers its
  position: at :meth:`~TraceBuilder.finalize` it can be restored *at that position*, with its own row,
  ahead of any observation tokens appended after it (restoring it at the end of the stream, after
  pending observation rows, is the bug this design rules out);
* :meth:`TraceBuilder.truncate` cuts ids, logprobs, rows and step bounds at the same token.

Appends are O(new tokens); per-token work is whole-array numpy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..core import layouts
from ..core.checks import as_float_array, as_host_array
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, as_sampling_mask
from ._args import count_arg
from .alignment import take_rows

__all__ = ["Trace", "TraceBuilder"]

RestoreEos = Literal["none", "last", "all"]
StepEnds = Literal["generation", "observation"]


@dataclasses.dataclass(frozen=True)
class Trace:
    """A finalized trajectory. ``mask`` has one segment and carries ``sampled_token_ids`` (= the
    token ids) and ``sampled_logprobs`` (= ``logprobs``); ``generated[t]`` tells generated tokens;
    ``step_bounds`` (int64 [S+1]) splits the tokens into steps that end with their generation;
    ``turn_bounds`` (int64 [S+1]) into steps that end with the observation after it (SkyRL's
    step-wise samples); ``generation_starts`` (int64 [S]) is where each generation begins."""

    token_ids: np.ndarray
    logprobs: np.ndarray
    generated: np.ndarray
    mask: SamplingMask
    step_bounds: np.ndarray
    generation_starts: np.ndarray | None = None

    @property
    def turn_bounds(self) -> np.ndarray:
        """int64 [S+1]: ``[0, start of generation 1, ..., start of generation S-1, T]``."""
        starts = self.generation_starts
        if starts is None or starts.size == 0:
            return self.step_bounds
        return np.concatenate([[0], starts[1:], [self.token_ids.size]]).astype(np.int64)

    def step_mask(self, *, cumulative: bool = False, step_ends: StepEnds = "generation") -> SamplingMask:
        """One segment per step. ``cumulative=False``: segment k holds step k's rows (the segments
        tile the trace). ``cumulative=True``: segment k holds every token up to the end of step k,
        with the rows of earlier steps emptied (step-wise training: earlier turns are context).

        ``step_ends="generation"``: step k ends with generation k (:attr:`step_bounds`).
        ``"observation"``: step k also holds the observation after generation k (:attr:`turn_bounds`),
        as SkyRL's step-wise trajectories do: there sample k is the prompt (every token before
        generation k) plus the response (generation k, then its observation, rows ``-1``), so with
        ``cumulative=True`` segment k is sample k, its first ``generation_starts[k]`` rows empty and
        the rest its ``rollout_sample_support`` (:func:`sampling_mask.adapters.skyrl.step_samples`)."""
        if step_ends == "generation":
            bounds = self.step_bounds
        elif step_ends == "observation":
            bounds = self.turn_bounds
        else:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "step_ends must be 'generation' or 'observation'", field="step_ends"
            )
        if not cumulative:
            return self.mask.replace(cu_seqlens=bounds)
        ends = bounds[1:]
        seg_len = ends
        cu = layouts.counts_to_offsets(seg_len)
        rows = layouts.range_indices(np.zeros(ends.size, np.int64), seg_len)
        step_start = np.repeat(bounds[:-1], seg_len)
        rows = np.where(rows >= step_start, rows, -1)
        return take_rows(self.mask, rows, cu)


@dataclasses.dataclass
class _Removed:
    position: int  # where the token sat when it was removed (tokens before it: position)
    generation: int  # index of the generation it ended
    token_id: int
    row: np.ndarray
    logprob: float


class TraceBuilder:
    """Assembles token ids, logprobs and mask rows of one trajectory (see the module docstring)."""

    def __init__(self, *, vocab_size: int | None = None, limits: Limits = DEFAULT_LIMITS) -> None:
        self._vocab_size = vocab_size
        self._limits = limits
        self._ids: list[np.ndarray] = []
        self._logprobs: list[np.ndarray] = []
        self._generated: list[np.ndarray] = []
        self._row_ids: list[np.ndarray] = []
        self._row_lengths: list[np.ndarray] = []
        self._length = 0
        self._generation_ends: list[int] = []  # where each generation ended (steps end there)
        self._generation_starts: list[int] = []  # where each generation began (SkyRL's steps begin there)
        self._removed: list[_Removed] = []
        self._last_generated_end: int | None = None  # stream length right after the last generation

    @property
    def num_tokens(self) -> int:
        return self._length

    # ------------------------------------------------------------------ appends
    def _append(
        self, ids: np.ndarray, logprobs: np.ndarray, generated: bool, row_ids: np.ndarray, lengths: np.ndarray
    ) -> None:
        self._ids.append(ids)
        self._logprobs.append(logprobs)
        self._generated.append(np.full(ids.size, generated))
        self._row_ids.append(row_ids)
        self._row_lengths.append(lengths)
        self._length += ids.size

    def _token_ids(self, token_ids: Any) -> np.ndarray:
        ids = layouts.as_int_array(as_host_array(token_ids), np.int32, field="token_ids")
        bad = (ids < 0) | ((ids >= self._vocab_size) if self._vocab_size is not None else False)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SamplingMaskError(
                ErrorCode.E_RANGE, "token id out of range", field="token_ids", row=self._length + i, value=int(ids[i])
            )
        return ids.copy()  # the caller may reuse its buffer

    def add_observation(self, token_ids: Any) -> None:
        """Append prompt / observation / tool tokens: empty rows, NaN logprobs."""
        ids = self._token_ids(token_ids)
        self._append(
            ids, np.full(ids.size, np.nan, np.float32), False, np.zeros(0, np.int32), np.zeros(ids.size, np.int64)
        )
        self._last_generated_end = None

    add_prompt = add_observation

    def add_generated(self, token_ids: Any, rows: Any, logprobs: Any = None) -> None:
        """Append one generation's tokens with their rows (a :class:`SamplingMask`, nested lists or a
        ``-1``-padded ``[n, W]`` array) and logprobs (NaN when None); closes the current step."""
        ids = self._token_ids(token_ids)
        if hasattr(rows, "__sampling_mask__"):  # a SamplingMask, or one of another copy (the mask protocol)
            rows = as_sampling_mask(rows, field="rows")
            row_ids, row_offsets = rows.ids, rows.offsets
        elif isinstance(rows, np.ndarray) or hasattr(rows, "detach"):
            dense = SamplingMask.from_dense(as_host_array(rows), limits=self._limits, validate=False)
            row_ids, row_offsets = dense.ids, dense.offsets
        else:
            ragged = SamplingMask.from_rows(rows, limits=self._limits, validate=False)
            row_ids, row_offsets = ragged.ids, ragged.offsets
        if row_offsets.size - 1 != ids.size:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"{row_offsets.size - 1} rows for {ids.size} generated tokens",
                field="rows",
                row=self._length,
            )
        if logprobs is None:
            lp = np.full(ids.size, np.nan, np.float32)
        else:
            lp = as_float_array(logprobs, field="logprobs", size=ids.size, integers=True).copy()
        try:
            SamplingMask(row_ids, row_offsets, sampled_token_ids=ids, vocab_size=self._vocab_size, limits=self._limits)
        except SamplingMaskError as exc:  # name the row in trace coordinates
            row = None if exc.row is None else exc.row + self._length
            raise SamplingMaskError(exc.code, exc.message, row=row, field=exc.field, value=exc.value) from None
        self._generation_starts.append(self._length)
        self._append(ids, lp, True, np.asarray(row_ids, np.int32), np.diff(row_offsets))
        self._generation_ends.append(self._length)
        self._last_generated_end = self._length

    def remove_eos(self, eos_token_id: int | None = None) -> None:
        """Take the last generated token (the EOS) off the stream, keeping its row and logprob for
        :meth:`finalize`. Must follow :meth:`add_generated` directly; ``eos_token_id``, when given, must
        match the token (``E_SCHEMA``)."""
        if self._last_generated_end is None or self._last_generated_end != self._length or not self._ids:
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA, "remove_eos must directly follow add_generated", field="token_ids", row=self._length
            )
        ids, lengths = self._ids[-1], self._row_lengths[-1]
        if ids.size == 0:
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "the last generation has no token to remove", field="token_ids")
        token = int(ids[-1])
        if eos_token_id is not None and token != int(eos_token_id):
            raise SamplingMaskError(
                ErrorCode.E_SCHEMA,
                f"last token {token} is not the EOS {int(eos_token_id)}",
                field="token_ids",
                row=self._length - 1,
                value=token,
            )
        width = int(lengths[-1])
        row_ids = self._row_ids[-1]
        self._removed.append(
            _Removed(
                self._length - 1,
                len(self._generation_ends) - 1,
                token,
                row_ids[row_ids.size - width :].copy(),
                float(self._logprobs[-1][-1]),
            )
        )
        self._ids[-1] = ids[:-1]
        self._logprobs[-1] = self._logprobs[-1][:-1]
        self._generated[-1] = self._generated[-1][:-1]
        self._row_ids[-1] = row_ids[: row_ids.size - width]
        self._row_lengths[-1] = lengths[:-1]
        self._length -= 1
        self._generation_ends[-1] = self._length
        self._last_generated_end = None

    # ------------------------------------------------------------------ whole-stream operations
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        def cat(chunks: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype)

        return (
            cat(self._ids, np.int32),
            cat(self._logprobs, np.float32),
            cat(self._generated, bool),
            cat(self._row_ids, np.int32),
            cat(self._row_lengths, np.int64),
        )

    def truncate(self, num_tokens: int) -> None:
        """Keep the first ``num_tokens`` tokens: ids, logprobs, rows and step bounds are cut together.
        A removed EOS sits before the token at its position, so one whose position equals the cut is
        kept (it ends the kept tokens, as in SkyRL's cut of the final observation); one past the cut
        is forgotten."""
        n = count_arg(num_tokens, field="num_tokens")
        if n > self._length:
            raise SamplingMaskError(
                ErrorCode.E_RANGE, f"cannot truncate {self._length} tokens to {n}", field="num_tokens", value=n
            )
        ids, lp, gen, row_ids, lengths = self._arrays()
        offsets = layouts.counts_to_offsets(lengths)
        self._ids, self._logprobs, self._generated = [ids[:n]], [lp[:n]], [gen[:n]]
        self._row_ids, self._row_lengths = [row_ids[: int(offsets[n])]], [lengths[:n]]
        if n < self._length:
            self._last_generated_end = None
        self._length = n
        cut = [e for e in self._generation_ends if e >= n]
        self._generation_ends = [e for e in self._generation_ends if e < n] + ([n] if cut else [])
        # The first generation the cut reaches ends (and, if it began past the cut, begins) at the cut.
        self._generation_starts = [min(s, n) for s in self._generation_starts[: len(self._generation_ends)]]
        self._removed = [r for r in self._removed if r.position <= n]

    def finalize(
        self, token_count: int, *, restore_eos: RestoreEos = "none", token_ids: Sequence[int] | np.ndarray | None = None
    ) -> Trace:
        """The trajectory, with removed EOS tokens restored at their positions (``"last"``: the EOS
        removed from the final generation, if it ended with one, as SkyRL restores only that one;
        ``"all"``; ``"none"``). ``token_count`` must equal the final token count exactly
        (``E_SHAPE``); ``token_ids``, when given, must equal the final ids (``E_SCHEMA`` naming the row).
        The builder is not changed."""
        if restore_eos not in ("none", "last", "all"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "restore_eos must be none, last or all", field="restore_eos")
        ids, lp, gen, row_ids, lengths = self._arrays()
        final = self._removed[-1:]
        if final and final[0].generation != len(self._generation_ends) - 1:
            final = []  # the final generation kept its last token: no EOS of an earlier turn comes back
        restored = {"none": [], "last": final, "all": self._removed}[restore_eos]
        bounds = np.array([0, *self._generation_ends[:-1], self._length], dtype=np.int64)
        starts = np.array(self._generation_starts, dtype=np.int64)
        if restored:
            ids, lp, gen, row_ids, lengths, bounds = _insert(restored, ids, lp, gen, row_ids, lengths, bounds)
            starts = _shift(restored, starts, ends=False)
        count = count_arg(token_count, field="token_count")
        if ids.size != count:
            raise SamplingMaskError(
                ErrorCode.E_SHAPE,
                f"the trace holds {ids.size} tokens but the trajectory has {count}",
                field="token_count",
                value=count,
            )
        if token_ids is not None:
            expected = layouts.as_int_array(as_host_array(token_ids), np.int64, field="token_ids")
            if expected.size != ids.size:
                raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {ids.size} token ids", field="token_ids")
            differ = np.flatnonzero(expected != ids)
            if differ.size:
                row = int(differ[0])
                raise SamplingMaskError(
                    ErrorCode.E_SCHEMA,
                    f"trace token {int(ids[row])} differs from the trajectory's",
                    field="token_ids",
                    row=row,
                    value=int(expected[row]),
                )
        mask = SamplingMask(
            row_ids,
            layouts.counts_to_offsets(lengths),
            sampled_token_ids=ids,
            sampled_logprobs=lp,
            vocab_size=self._vocab_size,
            limits=self._limits,
        )
        return Trace(token_ids=ids, logprobs=lp, generated=gen, mask=mask, step_bounds=bounds, generation_starts=starts)


def _shift(restored: list[_Removed], points: np.ndarray, *, ends: bool) -> np.ndarray:
    """Generation g's start (``ends=False``) or end (``ends=True``), ``points[g]``, in final
    coordinates: it moves by the restored tokens that land before it. Those removed before the point
    always do; one removed *at* the point does when it belongs to an earlier generation (a start) or
    to generation g or earlier (an end: the EOS is generation g's own last token). Keys (position,
    generation) ordered lexicographically, compared at once."""
    scale = max(len(points), max(r.generation for r in restored)) + 1
    keys = np.sort(np.array([r.position * scale + r.generation for r in restored], dtype=np.int64))
    point_keys = points * scale + np.arange(points.size, dtype=np.int64)
    return points + np.searchsorted(keys, point_keys, side="right" if ends else "left")


def _insert(
    restored: list[_Removed],
    ids: np.ndarray,
    lp: np.ndarray,
    gen: np.ndarray,
    row_ids: np.ndarray,
    lengths: np.ndarray,
    bounds: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Put each restored token back where it was removed. Record j was removed when records < j were
    already out of the stream, so its position counts only the tokens present then: in final
    coordinates it lands at ``position_j + j`` (j among the restored), before every token that sat
    at or after ``position_j``; the step whose EOS it is ends one later (see :func:`_shift`)."""
    positions = np.array([r.position for r in restored], dtype=np.int64)
    n = ids.size
    final_index = np.arange(n, dtype=np.int64) + np.searchsorted(positions, np.arange(n), side="right")
    slots = positions + np.arange(positions.size, dtype=np.int64)
    total = n + positions.size
    out_ids = np.empty(total, np.int32)
    out_lp = np.empty(total, np.float32)
    out_gen = np.empty(total, bool)
    out_len = np.empty(total, np.int64)
    out_ids[final_index], out_lp[final_index], out_gen[final_index], out_len[final_index] = ids, lp, gen, lengths
    out_ids[slots] = [r.token_id for r in restored]
    out_lp[slots] = [r.logprob for r in restored]
    out_gen[slots] = True
    out_len[slots] = [r.row.size for r in restored]
    out_offsets = layouts.counts_to_offsets(out_len)
    out_rows = np.empty(int(out_offsets[-1]), np.int32)
    out_rows[layouts.range_indices(out_offsets[:-1][final_index], lengths)] = row_ids
    for slot, record in zip(slots.tolist(), restored, strict=True):  # one per restored EOS, not per token
        out_rows[int(out_offsets[slot]) : int(out_offsets[slot + 1])] = record.row
    new_bounds = bounds.copy()
    new_bounds[1:-1] = _shift(restored, bounds[1:-1], ends=True)
    new_bounds[-1] = total
    return out_ids, out_lp, out_gen, out_rows, out_len, new_bounds
