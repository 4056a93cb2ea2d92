"""Coalescing: several staged versions folded into one batch whose single MERGE has the
effect of applying them one by one, in version order (docs/guarantees.md states the
rules: the latest version wins per key; with ``sequence_by`` the highest sequence wins,
and deletes are folded with a guard column the MERGE compares with the target)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.input.keys import SortOrder, edge_per_key, first_per_key, normalise_keys
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.reserved import COALESCED_VERSION_COLUMN
from deltasink.shapes.spec import MergeSpec

__all__ = ["coalesce"]

_VERSION = COALESCED_VERSION_COLUMN


def coalesce(staged: Sequence[tuple[int, pa.Table]], spec: MergeSpec) -> pa.Table:
    """Combine several staged versions into one batch with the same effect as
    applying them one by one, in ascending version order.

    ``append`` concatenates. ``scd2`` keeps every event, the latest version's for a
    key and sequence seen twice (:mod:`deltasink.shapes.scd2`). ``insert`` keeps the row of the earliest version
    (insert-if-absent: the first insert wins). ``upsert`` without ``sequence_by``
    keeps, per key, the row of the latest version, deletes included.

    ``upsert`` with ``sequence_by`` and deletes needs more than one row per key can
    say, because a delete leaves no sequence behind: after ``delete(seq 5)``, an older
    ``upsert(seq 3)`` inserts the key again. Applied one by one, the versions of a key
    act on a target row of sequence ``t`` (absent, or ``t`` null, counting as older
    than everything) like this, where ``Q`` is the highest sequence among them:

    * absent, null, or ``t <= Q``: the key ends as ``R``, a state that does not depend
      on ``t``;
    * ``t > Q``: nothing fires, the target row stays.

    ``R`` is found on the *records* of the key: its rows whose sequence is higher
    than that of every later row (the first record is the last row with sequence
    ``Q``). From the first record on, every state the fold reaches is absent or older
    than the next record, so each record fires: ``R`` is the first record that is an
    upsert, or absent when every record is a delete. The coalesced batch holds ``R``
    (a delete row when absent) and, in :data:`GUARD_COLUMN`, ``Q``, which the MERGE
    compares with the target's sequence instead of the row's own.
    """
    tables = []
    for version, table in staged:
        column = pa.array(np.full(table.num_rows, version, dtype=np.int64))
        tables.append(table.append_column(pa.field(_VERSION, pa.int64()), column))
    combined = pa.concat_tables(tables, promote_options="default")
    # Staged by this release, float keys are normal already; an earlier release's
    # staged -0.0 must still be one key with 0.0 (its NaN is published as staged).
    combined = normalise_keys(combined, spec.keys, refuse_nan=False)
    if DELETE_COLUMN in combined.column_names:
        flags: Any = pc.fill_null(combined.column(DELETE_COLUMN), pa.scalar(False))
        index = combined.column_names.index(DELETE_COLUMN)
        combined = combined.set_column(index, pa.field(DELETE_COLUMN, pa.bool_(), True), flags)
    # Concatenated in ascending version order with one row per key and version, the
    # latest version's row of a key is its last row, the earliest version's its first.
    ascending = all(a < b for (a, _), (b, _) in pairwise(staged))
    if spec.mode == "upsert" and spec.sequence_by and DELETE_COLUMN in combined.column_names:
        combined = _fold_with_deletes(combined, spec.keys, spec.sequence_by)
    elif spec.mode == "upsert" and not spec.sequence_by and ascending:
        combined = edge_per_key(combined, spec.keys, last=True)
    elif spec.mode == "insert" and ascending:
        combined = edge_per_key(combined, spec.keys, last=False)
    elif spec.mode == "upsert":
        order: list[tuple[str, SortOrder]] = (
            [(spec.sequence_by, "descending")] if spec.sequence_by else []
        )
        combined = first_per_key(combined, spec.keys, [*order, (_VERSION, "descending")])
    elif spec.mode == "scd2":  # one event per key and sequence: the latest version's
        assert spec.sequence_by is not None
        combined = first_per_key(
            combined, [*spec.keys, spec.sequence_by], [(_VERSION, "descending")]
        )
    elif spec.mode == "insert":
        combined = first_per_key(combined, spec.keys, [(_VERSION, "ascending")])
    return combined.drop_columns([_VERSION])


def _fold_with_deletes(combined: pa.Table, keys: Sequence[str], sequence_by: str) -> pa.Table:
    """The ``R`` row and the ``Q`` guard of every key (see :func:`coalesce`).

    ``combined`` holds at most one row per key and version; vectorised over all keys:
    rows sorted by key and version, segmented suffix maxima of the sequence's dense
    rank give the records.
    """
    order = pc.sort_indices(
        combined, sort_keys=[*((k, "ascending") for k in keys), (_VERSION, "ascending")]
    )
    rows = combined.take(order)
    n = rows.num_rows
    if n == 0:
        return rows.append_column(
            pa.field(GUARD_COLUMN, rows.schema.field(sequence_by).type, True),
            rows.column(sequence_by),
        )
    # Group boundaries: a row starts a group when any key differs from the row before.
    starts = np.zeros(n, dtype=bool)
    starts[0] = True
    for key in keys:
        column: Any = rows.column(key)
        after, before = column.slice(1), column.slice(0, n - 1)
        both_null = pc.and_(pc.is_null(after), pc.is_null(before))  # null-safe keys
        differs: Any = pc.and_(
            pc.fill_null(pc.not_equal(after, before), True), pc.invert(both_null)
        )
        starts[1:] |= np.asarray(differs.to_numpy(zero_copy_only=False), dtype=bool)
    group = np.cumsum(starts) - 1
    rank = np.asarray(
        pc.rank(rows.column(sequence_by), sort_keys="ascending", tiebreaker="dense").to_numpy(),
        dtype=np.int64,
    )
    width = int(rank.max()) + 1
    # Suffix maximum of the rank within each group (inclusive), by a cumulative max
    # over the reversed rows with each group lifted above every later-visited one.
    lifted = rank - group * width
    suffix = np.maximum.accumulate(lifted[::-1])[::-1] + group * width
    later = np.full(n, -1, dtype=np.int64)  # highest rank strictly after the row
    same = group[1:] == group[:-1]
    later[:-1] = np.where(same, suffix[1:], -1)
    record = rank > later
    deletes = np.asarray(rows.column(DELETE_COLUMN).to_numpy(zero_copy_only=False), dtype=bool)
    first_record = np.full(group[-1] + 1, n, dtype=np.int64)
    first_upsert = np.full(group[-1] + 1, n, dtype=np.int64)
    positions = np.arange(n, dtype=np.int64)
    np.minimum.at(first_record, group[record], positions[record])
    upsert_records = record & ~deletes
    np.minimum.at(first_upsert, group[upsert_records], positions[upsert_records])
    chosen = np.where(first_upsert < n, first_upsert, first_record)
    result = rows.take(chosen)
    guard = rows.column(sequence_by).take(first_record)
    return result.append_column(
        pa.field(GUARD_COLUMN, rows.schema.field(sequence_by).type, True), guard
    )
