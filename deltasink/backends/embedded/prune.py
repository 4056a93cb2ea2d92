"""Which target files a batch can touch, from the target's file statistics: the
insert-only fast path (no key of the batch can exist in the target) and the choice
whether to prune the MERGE by the batch's key range."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from deltasink.shapes.spec import MergeSpec

__all__ = ["PRUNE_WHEN_OVERLAP_AT_MOST", "STREAM_ABOVE_ROWS", "overlap"]

#: Prune the MERGE by the batch's key range only if at most this share of the
#: target's files can hold a key of the batch (by their statistics).
PRUNE_WHEN_OVERLAP_AT_MOST = 0.5
#: Batches at least this large are streamed into the MERGE (the key-range predicate
#: still limits the target files read), which bounds the MERGE's memory.
STREAM_ABOVE_ROWS = 1_000_000


def overlap(table: DeltaTable, values: pa.Table, spec: MergeSpec) -> float | None:
    """The share of the target's files whose key statistics overlap the batch's key
    range: 0.0 proves that no key of the batch exists in the target.

    ``None`` when the statistics cannot prove it exactly: several keys; a key type
    whose statistics are not exact bounds (strings and binary may be truncated
    prefixes, floats ignore NaN and order -0.0 with 0.0, decimals and booleans are
    left to the MERGE); files without statistics for the key. Integers and dates
    are exact; timestamps are stored to the microsecond but their statistics are
    truncated to the millisecond, so each file's range is widened by 1 ms.
    """
    if len(spec.keys) != 1 or values.num_rows == 0:
        return None
    key = spec.keys[0]
    column = values.column(key)
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0.0
    names = (f"min.{key}", f"max.{key}")
    if any(n not in actions.column_names for n in names):
        return None
    mins, maxs = actions.column(names[0]), actions.column(names[1])
    if mins.null_count or maxs.null_count:
        return None
    bounds = pc.min_max(column)
    low, high = bounds["min"], bounds["max"]
    try:
        mins, maxs = mins.cast(kind), maxs.cast(kind)
        if pa.types.is_timestamp(kind):
            slack: Any = pa.scalar(1_000, pa.duration("us")).cast(pa.duration(kind.unit))
            mins = pc.subtract_checked(mins, slack)
            maxs = pc.add_checked(maxs, slack)
        overlap = pc.and_(pc.less_equal(mins, high), pc.greater_equal(maxs, low))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return float(pc.sum(overlap.cast(pa.int64())).as_py() or 0) / actions.num_rows
