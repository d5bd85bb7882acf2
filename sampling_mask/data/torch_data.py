"""A torch data pipeline over mask files: a map-style dataset, a packing collate, a rank sampler.

* :class:`SequenceDataset` indexes the sequences (table rows) of Arrow IPC files (memory-mapped: an
  uncompressed file's ids are views of the mapping, never copied) or Parquet files, and yields one
  :class:`~sampling_mask.codecs.dataset.MaskSequence` per index (a one-segment mask plus its user
  columns). It holds paths only, so it pickles to ``DataLoader`` workers; each process opens the
  files itself. A record batch is validated once per process, when first touched, and only the
  current batch of each file is kept, so a worker's memory stays flat over the dataset.
* :func:`collate_sequences` packs a list of sequences into one :class:`PackedBatch`: the masks
  concatenated (segment order = batch order), ``cu_seqlens`` as an int32 tensor, the label shift of
  :func:`sampling_mask.data.alignment.shift_left` applied by default, the columns as tensors.
* :class:`SequenceShardSampler` gives each data-parallel rank an equal number of sequences per epoch
  (like ``DistributedSampler``), optionally balancing the ranks' token counts.

torch is imported when this module is.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..codecs.batch_reader import BatchReader, MappedFile, arrow_errors, mask_from_batch, user_values
from ..codecs.dataset import FileError, MaskSequence
from ..codecs.ipc_bounds import check as check_cost
from ..codecs.walk import find_files, located, split_by_format
from ..core.errors import ErrorCode, SamplingMaskError
from ..core.limits import DEFAULT_LIMITS, Limits
from ..core.model import SamplingMask, concat
from . import alignment

__all__ = ["PackedBatch", "SequenceDataset", "SequenceShardSampler", "collate_sequences"]


_OPEN_FILES = 4  # files (each with its current batch) a process keeps open


class _OpenFile:
    """One file opened in this process through the codecs' one batch reader: a regular file only,
    each batch's cost checked before it is read, the mask and the returned columns validated
    before use; the last batch decoded is kept."""

    def __init__(self, path: str, fmt: str, limits: Limits, columns: Sequence[str]) -> None:
        self.path = path
        self._mapped = MappedFile(path)
        self._reader = BatchReader(self._mapped.buffer, fmt, limits)
        for index, cost in enumerate(self._reader.costs):  # refused now, before any batch is read
            check_cost(cost, limits, f"{path}: record batch {index}")
        self.schema = self._reader.schema
        self.lengths = list(self._reader.rows)
        self._limits = limits
        self._columns = tuple(columns)
        self._cached: tuple[int, SamplingMask, dict[str, list[Any]]] | None = None

    def release(self) -> None:
        """Drop the file's resident pages (a read-only mapping: views stay valid and re-read on use)."""
        self._mapped.release()

    def batch(self, index: int) -> tuple[SamplingMask, dict[str, list[Any]]]:
        if self._cached is not None and self._cached[0] == index:
            return self._cached[1], self._cached[2]
        self.release()
        try:
            with arrow_errors("dataset file"):
                batch = self._reader.read(index)
                if batch is None:
                    raise SamplingMaskError(ErrorCode.E_ENCODING, "fewer batches than the footer lists", value=index)
                mask = mask_from_batch(batch, self._reader.header, self._limits, True)
                values = {name: user_values(batch, name).tolist() for name in self._columns}
        except SamplingMaskError as exc:
            raise located(self.path, exc) from None
        self._cached = (index, mask, values)
        return mask, values


class SequenceDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Map-style dataset of the sequences of mask files; see the module docstring.

    ``source``: a directory (recursive), glob or list of ``.arrow`` / ``.parquet`` files, one format.
    ``columns``: user columns to return with each sequence (default: none). Files are found as
    :func:`~sampling_mask.codecs.open_dataset` finds them (FIFOs, dangling links and symlinks out of
    the directory refused, symlinked directories not followed; ``follow_symlinks=True`` reads links
    to files outside). ``on_error="raise"`` (default): the first file that cannot be used is
    raised at construction, naming its path; ``"report"``: it is recorded in :attr:`errors` and
    left out, the other files indexed.
    """

    def __init__(
        self,
        source: Any,
        *,
        columns: Sequence[str] = (),
        format: str | None = None,
        limits: Limits = DEFAULT_LIMITS,
        on_error: str = "raise",
        follow_symlinks: bool = False,
    ) -> None:
        if on_error not in ("raise", "report"):
            raise SamplingMaskError(ErrorCode.E_SCHEMA, "on_error is 'raise' or 'report'", value=on_error)
        found = find_files(source, (".arrow", ".parquet"), follow_outside=follow_symlinks)
        self.errors: list[FileError] = [FileError(s.path, s.error) for s in found.skipped]
        if on_error == "raise" and self.errors:
            raise self.errors[0].error
        if not found.files:
            raise FileNotFoundError(f"no .parquet or .arrow files in {source!r}")
        self.format, _others = split_by_format(found.files, format, {"arrow": (".arrow",), "parquet": (".parquet",)})
        self.columns = tuple(columns)
        self.limits = limits
        self.files: list[str] = []
        self._open: dict[int, _OpenFile] = {}
        self._pid = os.getpid()
        # (file, batch) of every batch in order, the sequences each holds, and their token counts.
        spans: list[tuple[int, int]] = []
        counts: list[int] = []
        for path in found.files:
            try:
                if not path.endswith("." + self.format):
                    raise SamplingMaskError(ErrorCode.E_SCHEMA, f"not a {self.format} file", field="path")
                opened = _OpenFile(path, self.format, limits, self.columns)
                for name in self.columns:
                    if opened.schema.get_field_index(name) < 0:
                        raise SamplingMaskError(ErrorCode.E_SCHEMA, "no such user column", field=name)
            except (SamplingMaskError, OSError) as exc:
                error = FileError(path, located(path, exc))
                if on_error == "raise":
                    raise error.error from None
                self.errors.append(error)
                continue
            number = len(self.files)
            self.files.append(path)
            for index, length in enumerate(opened.lengths):
                spans.append((number, index))
                counts.append(length)
        self._spans = spans
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = {}
        return state

    def _file(self, number: int) -> _OpenFile:
        if os.getpid() != self._pid:  # a forked worker: never share the parent's readers
            self._open, self._pid = {}, os.getpid()
        opened = self._open.pop(number, None)
        if self._open and next(reversed(self._open)) != number:
            self._open[next(reversed(self._open))].release()  # moving on to another file
        if opened is None:
            opened = _OpenFile(self.files[number], self.format, self.limits, self.columns)
        self._open[number] = opened  # most recent last; the oldest is let go beyond _OPEN_FILES
        while len(self._open) > _OPEN_FILES:
            del self._open[next(iter(self._open))]
        return opened

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> MaskSequence:
        if not -len(self) <= index < len(self):
            raise IndexError(index)  # the Sequence protocol: iteration stops here
        index = index % len(self)
        span = bisect.bisect_right(self._starts, index) - 1
        number, batch_index = self._spans[span]
        opened = self._file(number)
        mask, columns = opened.batch(batch_index)
        row = index - int(self._starts[span])
        values = {name: column[row] for name, column in columns.items()}
        return MaskSequence(mask.segment(row), values, opened.path)

    def sequence_lengths(self) -> np.ndarray:
        """Token rows per sequence, in index order (reads every batch's offsets once)."""
        lengths = np.empty(len(self), np.int64)
        for span, (number, batch_index) in enumerate(self._spans):
            mask, _ = self._file(number).batch(batch_index)
            lengths[self._starts[span] : self._starts[span + 1]] = np.diff(mask.cu_seqlens)
        return lengths


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """Sequences packed for a trainer: ``mask`` (one segment per sequence; label-aligned when
    ``shift`` was on), ``cu_seqlens`` int32 ``[n + 1]``, ``columns`` as tensors (lists for strings)."""

    mask: SamplingMask
    cu_seqlens: torch.Tensor
    columns: Mapping[str, Any]


def collate_sequences(
    items: Sequence[MaskSequence], *, shift: bool = True, prompt_length_column: str | None = None
) -> PackedBatch:
    """``collate_fn`` for a ``DataLoader`` over :class:`SequenceDataset` (``functools.partial`` sets the options).

    Input-aligned sequences (a row per input token, prompt rows empty) are label-aligned with
    :func:`~sampling_mask.data.alignment.shift_left` (``shift=True``). Sequences of generated rows only are
    label-aligned with :func:`~sampling_mask.data.alignment.label_aligned`, their prompt lengths read from
    the column ``prompt_length_column``. ``shift=False`` and no column: rows as stored.
    """
    if not items:
        raise SamplingMaskError(ErrorCode.E_SHAPE, "an empty batch", field="items")
    mask = concat([item.mask for item in items])
    if prompt_length_column is not None:
        mask = alignment.label_aligned(mask, [item.columns[prompt_length_column] for item in items])
    elif shift:
        mask = alignment.shift_left(mask)
    columns: dict[str, Any] = {}
    for name in items[0].columns:
        values = [item.columns[name] for item in items]
        numeric = all(isinstance(v, (int, float, bool)) for v in values)
        columns[name] = torch.tensor(values) if numeric else values
    return PackedBatch(mask, torch.from_numpy(mask.cu_seqlens.astype(np.int32)), columns)


class SequenceShardSampler(torch.utils.data.Sampler[int]):
    """Indices of rank ``rank`` of ``num_replicas`` for one epoch (call :meth:`set_epoch` each epoch).

    Every rank gets ``ceil(n / num_replicas)`` indices (the shuffled order wraps around to pad, as
    ``DistributedSampler`` does) or ``floor`` with ``drop_last``. With ``lengths`` (token rows per
    sequence, e.g. :meth:`SequenceDataset.sequence_lengths`) the epoch's sequences are dealt
    longest first to the rank with the fewest tokens so far, then each rank's share is put back in
    the epoch's shuffled order: equal counts, nearly equal tokens.
    """

    def __init__(
        self,
        num_sequences: int,
        *,
        num_replicas: int,
        rank: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        lengths: Any = None,
    ) -> None:
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise SamplingMaskError(ErrorCode.E_RANGE, "need 0 <= rank < num_replicas", field="rank", value=rank)
        self.num_sequences = int(num_sequences)
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.lengths = None if lengths is None else np.asarray(lengths, np.int64)
        if self.lengths is not None and self.lengths.shape != (self.num_sequences,):
            raise SamplingMaskError(ErrorCode.E_SHAPE, "one length per sequence", field="lengths")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n, p = self.num_sequences, self.num_replicas
        return n // p if self.drop_last else -(-n // p)

    def __iter__(self) -> Iterator[int]:
        order = np.arange(self.num_sequences)
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_sequences)
        per_rank = len(self)
        total = per_rank * self.num_replicas
        order = order[:total] if self.drop_last else np.resize(order, total)
        if self.lengths is None:
            return iter(order[self.rank :: self.num_replicas].tolist())
        # Longest first to the least-loaded rank that still has room; then back into epoch order.
        position = np.argsort(-self.lengths[order], kind="stable")
        heap = [(0, r) for r in range(self.num_replicas)]  # (tokens so far, rank): the lightest on top
        counts = [0] * self.num_replicas
        owner = np.empty(total, np.int64)
        for slot, tokens in zip(position.tolist(), self.lengths[order[position]].tolist(), strict=True):
            load, chosen = heapq.heappop(heap)  # once per sequence per epoch, O(log P)
            owner[slot] = chosen
            counts[chosen] += 1
            if counts[chosen] < per_rank:
                heapq.heappush(heap, (load + tokens, chosen))
        return iter(order[owner == self.rank].tolist())
