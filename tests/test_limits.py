"""``Limits`` and its presets (``core/limits.py``): the defaults are the spec's table, the untrusted
preset's budget is 12 bytes per input byte within its floor and cap, so padding raises it by no more,
and the local-file preset fits a real run's file. What the decoders hold under these limits is
measured in ``test_limits_forged_sizes.py``, ``test_limits_amplification.py`` and
``test_limits_accounting.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from sampling_mask import DEFAULT_LIMITS

SPEC = Path(__file__).resolve().parents[1] / "spec" / "v1" / "SPEC.md"
MiB = 1 << 20
PAD = 11_200_000  # 11.2 MB of padding: raises the untrusted budget to 134 MB


def test_spec_limits_table_matches_defaults() -> None:
    """Each limit's default appears in the spec's limits table next to its field name."""
    text = SPEC.read_text(encoding="utf-8")
    for field, default in vars(DEFAULT_LIMITS).items():
        row = re.search(rf"^\|\s*`{field}`\s*\|([^\n]*)$", text, flags=re.M)
        assert row is not None, f"{field} missing from the spec's limits table"
        assert f"{default:,}" in row.group(1) or str(default) in row.group(1), (field, row.group(0))


def test_untrusted_preset_scales_with_the_input() -> None:
    from sampling_mask import Limits
    from sampling_mask.core.limits import UNTRUSTED_EXPANSION, UNTRUSTED_FLOOR_BYTES

    assert Limits.for_untrusted_input(0).max_bytes == UNTRUSTED_FLOOR_BYTES
    assert Limits.for_untrusted_input(50 * MiB).max_bytes == UNTRUSTED_EXPANSION * 50 * MiB
    assert Limits.for_untrusted_input(1 << 40).max_bytes == 1 << 30  # the absolute cap


def test_local_file_preset_fits_a_real_run() -> None:
    """10M tokens x 512 ids: 5.1e9 ids, 20.5 GB of int32 plus offsets, within LOCAL_FILE_LIMITS."""
    from sampling_mask import DEFAULT_LIMITS, LOCAL_FILE_LIMITS
    from sampling_mask.codecs import _parquet_bounds, ipc_bounds
    from sampling_mask.core.limits import check_output

    rows, nnz, segments = 10_000_000, 10_000_000 * 512, 20_000
    assert rows <= LOCAL_FILE_LIMITS.max_rows and nnz <= LOCAL_FILE_LIMITS.max_nnz
    assert check_output(LOCAL_FILE_LIMITS, rows, nnz, segments=segments, per_row=12) > 20 * 10**9
    # What the Arrow and Parquet readers charge for such a file fits the preset's max_bytes too.
    ipc_cost = ipc_bounds._NODE_ELEMENT_BYTES * (segments + rows + nnz)
    parquet_cost = _parquet_bounds.VALUE_BYTES * (nnz + rows) + 4 * nnz + 8 * segments
    assert max(ipc_cost, parquet_cost) <= LOCAL_FILE_LIMITS.max_bytes
    assert nnz > DEFAULT_LIMITS.max_nnz, "the network defaults stay tighter"


def test_padding_raises_the_budget_by_12_bytes_a_byte_only() -> None:
    from sampling_mask import Limits
    from sampling_mask.core.limits import DECODE_ROW_BYTES, UNTRUSTED_EXPANSION

    limits = Limits.for_untrusted_input(PAD)
    assert limits.max_bytes == UNTRUSTED_EXPANSION * PAD < 16 * PAD
    assert limits.max_rows * DECODE_ROW_BYTES <= limits.max_bytes
