"""``MergeSpec(mode="scd2")`` on Spark: the history of the staged versions' keys is
rebuilt by Spark itself, as a lazy DataFrame the MERGE on ``(keys, valid_from)`` reads,
so no row reaches the driver (whatever the batch's size).

It is :func:`deltasink.shapes.scd2.changes` (the embedded engine's rebuild, in Arrow)
written as window functions over the events of the batch's keys, and must give the same
rows (``tests/test_spark_backend.py`` compares the two on generated histories):

* events: each staged row (an upsert, or a delete by the delete flag); each target row of
  the batch's keys (an upsert at ``valid_from``, or a delete for a tombstone, whose
  ``valid_from`` equals its ``valid_to``); and each target ``valid_to`` where no target
  row of the key starts (a delete that closed that row), in one pass over the target;
* one event per key and sequence: the batch's over the target's, a row's over a
  ``valid_to``'s; it "had a row" when a target row starts there;
* per key, ordered by sequence: ``valid_to`` is the next event's sequence, a delete after
  a delete (or first) is a tombstone, an upsert that is last is current; the target's
  rows that keep their interval are left out, rows that lose theirs are removed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from deltasink.input.sql import DELETE_COLUMN, quote
from deltasink.reserved import column
from deltasink.shapes.merge import compile_merge
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.target_sql import TargetSql

from .sources import DIALECT
from .tables import ddl_type

__all__ = ["history_changes", "history_merge_sql"]

# Scratch columns of the rebuild (never written).
_SEQ = column("seq")  # the event's sequence
_DEL = column("del")  # the event is a delete
_ORIGIN = column("origin")  # 1: the batch's event, 0: the target's
_RANK = column("kind")  # among the events of one key and sequence: 0 batch, 1 row, 2 end
_HAD = column("had_row")  # a target row starts at (key, sequence)
_OLD_END = column("old_end")  # the target row's valid_to
_OLD_NOW = column("old_current")  # the target row's is_current
_END = column("end")  # the event's new valid_to
_NOW = column("now")  # the event's new is_current
_OUT = column("out")  # u: upsert row, t: tombstone row, r: a target row to remove
_FIRST = column("first")  # the first event of its key and sequence
_HAD_ANY = column("had")  # some event of its key and sequence had a target row
_TOMB = column("tombstone")  # the event ends its key's history


def history_changes(
    spark: Any, source: str, target: Any | None, spec: MergeSpec, blank: Sequence[str] = ()
) -> Any:
    """The rows to MERGE (see :func:`deltasink.shapes.scd2.changes`) as a lazy Spark
    DataFrame: the target's columns (then the batch's), the history columns, and
    :data:`DELETE_COLUMN` last (true: remove the target row at ``(keys, valid_from)``).

    Args:
        spark: The session.
        source: The staged versions' rows, as a query (:func:`.publish.source_sql`).
        target: The target as a DataFrame, or ``None`` if it does not exist yet.
        spec: A ``scd2`` spec.
        blank: Key columns whose empty string the target reads back as null
            (:func:`.definition.string_partitions`): read as ``''`` again here.
    """
    from pyspark.sql.types import BooleanType

    assert spec.sequence_by is not None
    staged = spark.sql(source)
    start, end, now = spec.history
    seq_by = spec.sequence_by
    # The Spark types of the target, else of the staged rows.
    types = {f.name: f.dataType for f in staged.schema.fields}
    seq = ddl_type(types[seq_by])
    types[start] = types[end] = types[seq_by]
    types[now] = BooleanType()
    history = (start, end, now)
    columns = [] if target is None else [c for c in target.columns if c not in history]
    columns += [
        c for c in staged.columns if c not in columns and c not in (DELETE_COLUMN, *history)
    ]
    if target is not None:
        types.update({f.name: f.dataType for f in target.schema.fields})

    def typed(expr: str, name: str) -> str:
        return f"CAST({expr} AS {ddl_type(types[name])})"

    flag = (
        f"coalesce({quote(DELETE_COLUMN)}, false)" if DELETE_COLUMN in staged.columns else "false"
    )
    events = staged.selectExpr(
        *(
            f"{typed(quote(c) if c in staged.columns else 'NULL', c)} AS {quote(c)}"
            for c in columns
        ),
        f"CAST({quote(seq_by)} AS {seq}) AS {_SEQ}",
        f"{flag} AS {_DEL}",
        f"1 AS {_ORIGIN}",
        f"0 AS {_RANK}",
        f"false AS {_HAD}",
        f"CAST(NULL AS {seq}) AS {_OLD_END}",
        f"CAST(NULL AS BOOLEAN) AS {_OLD_NOW}",
    )
    if target is not None:
        events = events.unionByName(_target_events(target, staged, spec, columns, blank, typed))
    return _rebuilt(events, spec, columns, typed)


def _target_events(
    target: Any,
    staged: Any,
    spec: MergeSpec,
    columns: Sequence[str],
    blank: Sequence[str],
    typed: Callable[[str, str], str],
) -> Any:
    """The events the target's rows of the staged keys stand for, in one pass: each
    row's (an upsert, or a tombstone's delete) and, for each ``valid_to``, a delete there
    (kept only where no row of the key starts: see :func:`_rebuilt`)."""
    start, end, now = spec.history
    assert spec.sequence_by is not None
    seq = ddl_type(staged.schema[spec.sequence_by].dataType)
    kinds = {f.name: f.dataType.typeName() for f in target.schema.fields}
    read = []
    for c in target.columns:
        if c in blank:
            read.append(f"coalesce({quote(c)}, '') AS {quote(c)}")
        elif c in spec.keys and kinds[c] in ("float", "double"):  # -0.0 is the key 0.0
            read.append(f"CASE WHEN {quote(c)} = 0 THEN 0 ELSE {quote(c)} END AS {quote(c)}")
        else:
            read.append(quote(c))
    current = target.selectExpr(*read).join(
        staged.select(*spec.keys).distinct(), on=list(spec.keys), how="left_semi"
    )
    begins, ends = f"CAST({quote(start)} AS {seq})", f"CAST({quote(end)} AS {seq})"
    tombstone = f"coalesce({begins} = {ends}, false)"
    marker = column("marker")  # false: the row's event; true: its valid_to's
    row = f"NOT {marker} AND NOT {tombstone}"
    present = set(target.columns)
    data = []
    for c in columns:
        if c in spec.keys:
            data.append(f"{typed(quote(c), c)} AS {quote(c)}")
        else:
            value = f"CASE WHEN {row} THEN {quote(c)} END" if c in present else "NULL"
            data.append(f"{typed(value, c)} AS {quote(c)}")
    return (
        current.selectExpr("*", f"explode(array(false, true)) AS {marker}")
        .where(f"NOT {marker} OR {ends} IS NOT NULL")
        .selectExpr(
            *data,
            f"CASE WHEN {marker} THEN {ends} ELSE {begins} END AS {_SEQ}",
            f"{marker} OR {tombstone} AS {_DEL}",
            f"0 AS {_ORIGIN}",
            f"CASE WHEN {marker} THEN 2 ELSE 1 END AS {_RANK}",
            f"NOT {marker} AS {_HAD}",
            f"CASE WHEN NOT {marker} THEN {ends} END AS {_OLD_END}",
            f"CASE WHEN NOT {marker} THEN CAST({quote(now)} AS BOOLEAN) END AS {_OLD_NOW}",
        )
    )


def _rebuilt(
    events: Any, spec: MergeSpec, columns: Sequence[str], typed: Callable[[str, str], str]
) -> Any:
    """The output rows of ``events`` (:func:`history_changes`)."""
    start, end, now = spec.history
    by_key = ", ".join(quote(k) for k in spec.keys)
    # One shuffle (by key) for every window below: a key's events ordered by sequence,
    # the batch's first, then a row's, then a valid_to's; the first of each sequence
    # stays, and had a row if any event there did (its peers: the same sequence).
    ordered = f"PARTITION BY {by_key} ORDER BY {_SEQ} ASC NULLS LAST"
    ranked = f"{ordered}, {_ORIGIN} DESC, {_RANK}"
    first = f"(row_number() OVER ({ranked}) = 1 OR NOT (lag({_SEQ}) OVER ({ranked}) <=> {_SEQ}))"
    peers = f"{ordered} RANGE BETWEEN CURRENT ROW AND CURRENT ROW"
    one = events.selectExpr(
        "*", f"{first} AS {_FIRST}", f"bool_or({_HAD}) OVER ({peers}) AS {_HAD_ANY}"
    ).where(_FIRST)
    tombstone = f"({_DEL} AND coalesce(lag({_DEL}) OVER ({ordered}), true))"
    stepped = one.selectExpr(
        "*",
        f"{tombstone} AS {_TOMB}",
        f"CASE WHEN {tombstone} THEN {_SEQ} ELSE lead({_SEQ}) OVER ({ordered}) END AS {_END}",
        f"NOT {_DEL} AND lead(true) OVER ({ordered}) IS NULL AS {_NOW}",
    )
    has_row = f"(NOT {_DEL} OR {_TOMB})"
    unchanged = (
        f"({has_row} AND {_ORIGIN} = 0 AND {_END} <=> {_OLD_END} "
        f"AND coalesce({_NOW} = {_OLD_NOW}, false))"
    )
    kind = (
        f"CASE WHEN NOT {_DEL} AND NOT {unchanged} THEN 'u' "
        f"WHEN {_TOMB} AND NOT {unchanged} THEN 't' "
        f"WHEN NOT {has_row} AND {_HAD_ANY} THEN 'r' END"
    )
    kept = f"CASE WHEN {_OUT} <> 'r' THEN {_END} END"
    out = []
    for c in columns:
        if c in spec.keys:
            out.append(quote(c))
        elif c == spec.sequence_by:
            value = f"CASE {_OUT} WHEN 'u' THEN {quote(c)} WHEN 't' THEN {_SEQ} END"
            out.append(f"{typed(value, c)} AS {quote(c)}")
        else:
            out.append(f"CASE WHEN {_OUT} = 'u' THEN {quote(c)} END AS {quote(c)}")
    return (
        stepped.selectExpr("*", f"{kind} AS {_OUT}")
        .where(f"{_OUT} IS NOT NULL")
        .selectExpr(
            *out,
            f"{typed(_SEQ, start)} AS {quote(start)}",
            f"{typed(kept, end)} AS {quote(end)}",
            f"CASE WHEN {_OUT} <> 'r' THEN {_NOW} END AS {quote(now)}",
            f"{_OUT} = 'r' AS {quote(DELETE_COLUMN)}",
        )
    )


def history_merge_sql(
    target_ref: str, spec: MergeSpec, columns: list[str], view: str, blank: Sequence[str] = ()
) -> str:
    """``MERGE INTO`` the target ``USING`` the view of :func:`history_changes`
    (``blank``: as there)."""
    start = spec.history[0]
    on_rows = MergeSpec(mode="upsert", keys=(*spec.keys, start), delete_when="removed")
    plan = compile_merge(
        on_rows, columns, has_delete=True, sql=TargetSql(DIALECT), empty_as_null=blank
    )
    return plan.to_sql(target_ref, view)
