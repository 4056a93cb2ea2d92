"""SCD type 2 (``MergeSpec(mode="scd2")``): a key's history rows from its events.

Engine-free, in Arrow; both engines commit its output with one MERGE on
``(keys, valid_from)``. The rules (docs/guarantees.md, "History (SCD type 2)"):

* The *events* of a key are the rows ever committed for it: an upsert, or a delete
  (``delete_when``), at its ``sequence_by`` value. The same key and sequence again in a
  later version replaces the earlier event (a correction).
* Sorted by sequence, each upsert event is a row: its columns, ``valid_from`` = its
  sequence, ``valid_to`` = the next event's sequence (null when it is the last),
  ``is_current`` = whether it is the last.
* A delete event has no row, except when the event before it is not an upsert (there
  is none, or it is a delete): then it is a *tombstone*, a row with only the keys and
  ``sequence_by`` = ``valid_from`` = ``valid_to`` = its sequence, not current. The
  empty interval is invisible to as-of and current-row queries; it remembers the
  delete, so an older upsert that arrives later still ends there.

The history is then a function of the set of events, so any order, replay or coalescing
of versions leaves the same rows. The target's rows of the batch's keys are read back
into events (an upsert row at ``valid_from``; a tombstone, or a ``valid_to`` where no
row of the key starts, is a delete), the batch's events are added, the rows rebuilt,
and only the differences go into the MERGE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.input.keys import normalise_keys
from deltasink.input.sql import DELETE_COLUMN
from deltasink.reserved import column, is_reserved
from deltasink.shapes.schema import nullable_schema
from deltasink.shapes.spec import MergeSpec

__all__ = ["changes"]

_SEQ = column("seq")
_ORIGIN = column("origin")  # 1: the batch's event, 0: the target's
_HAD_ROW = column("had_row")  # the target has a row at (key, seq)
_OLD_END = column("old_end")
_OLD_CURRENT = column("old_current")


def changes(current: pa.Table | None, batch: pa.Table, spec: MergeSpec) -> pa.Table:
    """The rows to MERGE on ``(keys, valid_from)`` so that the target's history of the
    batch's keys becomes the one their events define.

    Args:
        current: The target's rows of (at least) the batch's keys, every column, or
            ``None`` when the target does not exist.
        batch: The staged events: one row per key and sequence, the delete flag
            :data:`~deltasink.input.sql.DELETE_COLUMN` when ``delete_when`` is set.
        spec: A ``scd2`` spec.

    Returns:
        The target's columns (and the batch's), with :data:`DELETE_COLUMN` last: true
        for a target row to remove (only its keys and ``valid_from`` are set), false
        for a row to insert or update. Rows that stay as they are are left out.
    """
    start, end, now = spec.history
    keys = list(spec.keys)
    if current is not None:  # a -0.0 key written outside deltasink (or before) is 0.0
        current = normalise_keys(current, keys, refuse_nan=False)
    events = _events(current, batch, spec)
    if events.num_rows == 0:
        return _output(batch, current, spec, [])
    events = events.take(
        pc.sort_indices(
            events,
            sort_keys=[
                *((k, "ascending") for k in keys),
                (_SEQ, "ascending"),
                (_ORIGIN, "descending"),
            ],
        )
    )
    # One event per (key, seq): the batch's over the target's.
    same_event = _starts(events, [*keys, _SEQ])
    had = np.logical_or.reduceat(_bools(events.column(_HAD_ROW)), np.flatnonzero(same_event))
    events = events.filter(pa.array(same_event)).set_column(
        events.column_names.index(_HAD_ROW), _HAD_ROW, pa.array(had)
    )
    n = events.num_rows
    first = _starts(events, keys)
    last = np.append(first[1:], True)
    deletes = _bools(events.column(DELETE_COLUMN))
    after = np.flatnonzero(~last) + 1
    next_index = np.full(n, -1, dtype=np.int64)
    next_index[~last] = after
    seq = events.column(_SEQ)
    following: Any = pa.array(next_index, mask=last)  # null: the key's last event
    valid_to = seq.take(following)
    prev_delete = np.ones(n, dtype=bool)  # no event before it counts as "not an upsert"
    prev_delete[1:] = np.where(first[1:], True, deletes[:-1])
    tombstone = deletes & prev_delete
    has_row = ~deletes | tombstone
    new_end: Any = pc.if_else(pa.array(tombstone), seq, valid_to)
    new_current = pa.array(~deletes & last)
    unchanged = (
        has_row
        & ~_bools(events.column(_ORIGIN))
        & _bools(_null_safe_equal(new_end, events.column(_OLD_END)))
        & _bools(pc.equal(new_current, events.column(_OLD_CURRENT)))
    )
    events = (
        events.append_column(start, seq)
        .append_column(f"{_SEQ}_end", new_end)
        .append_column(f"{_SEQ}_now", new_current)
    )
    data_columns = [c for c in events.column_names if not is_reserved(c)]
    data_columns = [c for c in data_columns if c != start]

    def pick(mask: np.ndarray, columns: Sequence[str]) -> pa.Table:
        rows = events.filter(pa.array(mask)).select([*columns, start, f"{_SEQ}_end", f"{_SEQ}_now"])
        return rows.rename_columns([*columns, start, end, now])

    assert spec.sequence_by is not None
    upserts = pick(~deletes & ~unchanged, data_columns)
    tombstones = pick(tombstone & ~unchanged, keys)
    tombstones = tombstones.append_column(spec.sequence_by, tombstones.column(start))
    removed = events.filter(pa.array(~has_row & _bools(events.column(_HAD_ROW))))
    removed = removed.select([*keys, start])
    return _output(batch, current, spec, [upserts, tombstones], removed)


def _output(
    batch: pa.Table,
    current: pa.Table | None,
    spec: MergeSpec,
    rows: Sequence[pa.Table],
    removed: pa.Table | None = None,
) -> pa.Table:
    """``rows`` (written) and ``removed`` (deleted) as one table with every column."""
    start, end, now = spec.history
    columns = [c for c in (current.column_names if current is not None else []) if c]
    columns += [c for c in batch.column_names if c not in columns and c != DELETE_COLUMN]
    columns = [c for c in columns if c not in (start, end, now)]
    seq_type = batch.schema.field(spec.sequence_by or "").type
    fields = {f.name: f.type for f in batch.schema}
    if current is not None:
        fields.update({f.name: f.type for f in current.schema})
    schema = pa.schema(
        [pa.field(c, fields[c]) for c in columns]
        + [
            pa.field(start, fields.get(start, seq_type)),
            pa.field(end, fields.get(end, seq_type)),
            pa.field(now, pa.bool_()),
        ]
    )
    parts = [
        _conform(t, schema).append_column(DELETE_COLUMN, pa.array([False] * t.num_rows, pa.bool_()))
        for t in rows
    ]
    if removed is not None:
        parts.append(
            _conform(removed, schema).append_column(
                DELETE_COLUMN, pa.array([True] * removed.num_rows, pa.bool_())
            )
        )
    if not parts:
        empty = schema.empty_table()
        return empty.append_column(DELETE_COLUMN, pa.array([], pa.bool_()))
    return pa.concat_tables(parts)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with every column of ``schema``, in its order and types (nulls where
    ``table`` has none)."""
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=nullable_schema(schema))


def _events(current: pa.Table | None, batch: pa.Table, spec: MergeSpec) -> pa.Table:
    """The target's and the batch's events of the batch's keys, unsorted."""
    start, end, now = spec.history
    keys = list(spec.keys)
    assert spec.sequence_by is not None
    seq_type = batch.schema.field(spec.sequence_by).type
    flags = (
        pc.fill_null(batch.column(DELETE_COLUMN), pa.scalar(False))
        if DELETE_COLUMN in batch.column_names
        else pa.array([False] * batch.num_rows)
    )
    parts = [
        _tag(
            batch.drop_columns([c for c in (DELETE_COLUMN,) if c in batch.column_names]),
            seq=batch.column(spec.sequence_by),
            delete=flags,
            origin=1,
            had_row=False,
        )
    ]
    if current is not None and current.num_rows:
        current = current.join(
            batch.select(keys).group_by(keys).aggregate([]), keys, join_type="left semi"
        )
        begins, ends = current.column(start).cast(seq_type), current.column(end).cast(seq_type)
        is_tombstone = _bools(pc.equal(begins, ends))  # (nulls: false)
        data = current.filter(pa.array(~is_tombstone)).drop_columns([start, end, now])
        parts.append(
            _tag(
                data,
                seq=begins.filter(pa.array(~is_tombstone)),
                delete=False,
                origin=0,
                had_row=True,
                old_end=ends.filter(pa.array(~is_tombstone)),
                old_current=current.column(now).filter(pa.array(~is_tombstone)),
            )
        )
        tombstones = current.filter(pa.array(is_tombstone))
        parts.append(
            _tag(
                tombstones.select(keys),
                seq=begins.filter(pa.array(is_tombstone)),
                delete=True,
                origin=0,
                had_row=True,
                old_end=ends.filter(pa.array(is_tombstone)),
                old_current=tombstones.column(now),
            )
        )
        # A valid_to where no row of the key starts: a delete that closed that row.
        closed = current.select(keys).append_column(_SEQ, ends).filter(pc.is_valid(ends))
        begun = current.select(keys).append_column(_SEQ, begins)
        derived = closed.join(begun, [*keys, _SEQ], join_type="left anti")
        parts.append(
            _tag(
                derived.select(keys),
                seq=derived.column(_SEQ),
                delete=True,
                origin=0,
                had_row=False,
            )
        )
    tables = [t.cast(nullable_schema(t.schema)) for t in parts]
    return pa.concat_tables(tables, promote_options="default")


def _tag(
    table: pa.Table,
    *,
    seq: Any,
    delete: Any,
    origin: int,
    had_row: bool,
    old_end: Any = None,
    old_current: Any = None,
) -> pa.Table:
    n = table.num_rows
    if isinstance(delete, bool):
        delete = pa.array([delete] * n, pa.bool_())
    return (
        table.append_column(_SEQ, seq)
        .append_column(DELETE_COLUMN, delete)
        .append_column(_ORIGIN, pa.array([origin] * n, pa.int8()))
        .append_column(_HAD_ROW, pa.array([had_row] * n, pa.bool_()))
        .append_column(_OLD_END, old_end if old_end is not None else pa.nulls(n, seq.type))
        .append_column(
            _OLD_CURRENT, old_current if old_current is not None else pa.nulls(n, pa.bool_())
        )
    )


def _starts(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """For sorted ``table``: whether each row differs from the one before in any of
    ``columns`` (the first row always does)."""
    n = table.num_rows
    starts = np.zeros(n, dtype=bool)
    if n == 0:
        return starts
    starts[0] = True
    for name in columns:
        column: Any = table.column(name)
        differs = pc.invert(_null_safe_equal(column.slice(1), column.slice(0, n - 1)))
        starts[1:] |= _bools(differs)
    return starts


def _null_safe_equal(a: Any, b: Any) -> Any:
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)


def _bools(values: Any) -> np.ndarray:
    """A boolean Arrow array (nulls as false) or an integer one (non-zero) as numpy."""
    if pa.types.is_boolean(values.type):
        values = pc.fill_null(values, pa.scalar(False))
    else:
        values = pc.not_equal(values, pa.scalar(0, values.type))
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)
