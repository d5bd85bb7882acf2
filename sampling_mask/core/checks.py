# sampling-mask 0.1.0, Apache-2.0 (see LICENSE): sampling_mask/core/checks.py, vendorable (README: Vendoring)
"""Input checks every layer shares (numpy and the standard library only).

Each raises :class:`~.errors.SamplingMaskError` with the field (and the first bad row) named.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import ErrorCode, SamplingMaskError
from .limits import Limits, check_count

__all__ = ["check_structure"]

#: Companions with one value per id; the others have one per row.
_PER_ID = ("support_logprobs",)


def check_structure(ids: np.ndarray, offsets: np.ndarray, arrays: Mapping[str, np.ndarray], limits: Limits) -> None:
    """The O(1) checks a decoder keeps when content validation is skipped (``validate=False``): the
    offsets run from 0 to nnz, ``arrays["cu_seqlens"]`` (when given) from 0 to T, and each companion
    in ``arrays`` has T values (``support_logprobs``: nnz)."""
    if offsets.size == 0 or int(offsets[0]) != 0 or int(offsets[-1]) != ids.size:
        raise SamplingMaskError(ErrorCode.E_OFFSETS, "offsets must run from 0 to nnz", field="offsets")
    num_rows = offsets.size - 1
    check_count(num_rows, limits.max_rows, "row count", field="offsets")
    for name, arr in arrays.items():
        if name == "cu_seqlens":
            if arr.size == 0 or int(arr[0]) != 0 or int(arr[-1]) != num_rows:
                raise SamplingMaskError(ErrorCode.E_SEGMENTS, "cu_seqlens must run from 0 to T", field="cu_seqlens")
            continue
        expected = ids.size if name in _PER_ID else num_rows
        if arr.size != expected:
            raise SamplingMaskError(ErrorCode.E_SHAPE, f"expected {expected} values, got {arr.size}", field=name)
