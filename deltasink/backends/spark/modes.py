"""How each ``MergeSpec`` mode commits a batch into the target through Spark, chosen from
one table (:data:`WRITE_MODE`), as the embedded engine's
:data:`deltasink.backends.embedded.modes.WRITE_MODE`: ``append`` (a DataFrameWriter
append), ``replace`` (an overwrite with ``replaceWhere``, the slice the batch replaces),
``scd2`` (the keys' history MERGEd) and ``upsert``/``insert`` (one ``MERGE INTO``). A target
that does not exist yet is created by an append, whatever the mode.

Each runs the statement of ONE attempt (:meth:`.publish.TargetWriter.apply_once` reads the
target and the batch once and dispatches); the statement carries ``txn(app_id, version)``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltasink.input.arrow import spark_arrow
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN, quote
from deltasink.shapes.computed import Computed
from deltasink.shapes.merge import replace_predicate
from deltasink.shapes.spec import MergeMode, MergeSpec
from deltasink.shapes.table import TableSpec

from .computed import write_select
from .conf import delta_txn
from .definition import create_target, string_partitions
from .prune import key_prune
from .scd2 import history_changes, history_merge_sql
from .session import SparkSql
from .sources import guarded, merge_sql, target_sql
from .tables import Tables, struct

__all__ = ["WRITE_MODE", "Attempt"]


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One attempt's statement: the batch, the target as read for it, and what the
    commit carries."""

    sql: SparkSql
    tables: Tables
    #: The session the statement runs on (a direct publish: the frame's own).
    spark: Any
    #: The versions committed, the marker the last's.
    versions: Sequence[int]
    #: The staged columns.
    columns: Sequence[str]
    spec: MergeSpec
    #: Where the batch is read: the staging table, or a direct publish's view.
    relation: str
    #: The batch's rows, as a query of :attr:`relation` (:func:`.sources.source_sql`).
    source: str
    #: The target as a DataFrame, or ``None`` when it does not exist yet.
    target: Any | None
    #: The target's computed columns, on the snapshot the commit is made on.
    computed: tuple[Computed, ...]
    #: The commit's ``userMetadata``.
    metadata: str
    #: The definition a new target is created with.
    table_spec: TableSpec | None
    #: A direct publish's key-range predicate (its validation's), and whether the batch
    #: is unstaged at all: a staged batch's MERGE bounds its keys itself.
    unstaged: bool
    prune: str | None
    #: The marker read again right before a statement that would apply a coalesced run
    #: twice (:meth:`.publish.TargetWriter._last_look`).
    last_look: Callable[[], None]

    @property
    def version(self) -> int:
        """The version whose marker the commit carries."""
        return self.versions[-1]


def _append(a: Attempt, history: Any = None) -> None:
    """An append of the batch (``history``: SCD2's rows instead, flagged rows dropped),
    creating the target from the TableSpec when it does not exist yet; every target
    column written (its default, or NULL, or computed)."""
    t, spec, target, computed, spark = a.tables, a.spec, a.target, a.computed, a.spark
    frame = spark.sql(a.source) if history is None else history
    if spec.delete_when or history is not None:
        frame = frame.where(f"NOT {quote(DELETE_COLUMN)}").drop(DELETE_COLUMN)
    # A coalesced run creating the target: its guard is compared, never written.
    frame = frame.drop(GUARD_COLUMN)
    options = {"mergeSchema": "true"} if spec.schema_evolution else {}
    if target is None and a.table_spec is not None:
        create_target(a.sql, t, frame.schema, a.table_spec)
    if target is not None:  # every target column: its default, or NULL, or computed
        select = write_select(target.schema.fields, frame.columns, computed)
        select += [quote(c) for c in frame.columns if c not in set(target.columns)]
        frame = frame.selectExpr(*select)
    a.last_look()
    a.sql.write(
        frame, t.target, txn=(t.app_id, a.version), user_metadata=a.metadata, options=options
    )


def _replace(a: Attempt) -> None:
    """An overwrite of the slice the batch replaces (``replaceWhere``), or an append
    carrying the marker when there is nothing to replace."""
    t, spec, target, computed, spark = a.tables, a.spec, a.target, a.computed, a.spark
    if target is None:
        _append(a)
        return
    frame = spark.sql(a.source)
    select = write_select(target.schema.fields, frame.columns, computed)
    select += [quote(c) for c in frame.columns if c not in set(target.columns)]
    distinct = (
        spark_arrow(frame.select(*spec.replace_by).distinct()) if spec.replace_by else pa.table({})
    )
    blank = string_partitions(a.sql, t.target_ref, spec.replace_by or (), target)
    predicate = replace_predicate(spec, distinct, sql=target_sql(spec, target), empty_as_null=blank)
    options = {"mergeSchema": "true"} if spec.schema_evolution else {}
    if predicate is not None:
        options["replaceWhere"] = predicate
    a.sql.write(  # nothing to replace: an empty append carries the marker
        frame.selectExpr(*select),
        t.target,
        txn=(t.app_id, a.version),
        user_metadata=a.metadata,
        mode="append" if predicate is None else "overwrite",
        options=options,
    )


def _scd2(a: Attempt) -> None:
    """The changes to the target's history (:func:`.scd2.history_changes`) MERGEd into
    it, or appended when it does not exist yet."""
    t, spec, target, spark = a.tables, a.spec, a.target, a.spark
    blank = list[str]()
    if target is not None:
        blank = string_partitions(a.sql, t.target_ref, spec.keys, target)
    history = history_changes(spark, a.source, target, spec, blank)
    if target is None:
        _append(a, history)
        return
    if spec.schema_evolution:
        wanted = struct([f for f in history.schema.fields if f.name != DELETE_COLUMN])
        a.sql.add_columns(t.target_ref, wanted, target.columns)
    view = f"deltasink_history_{uuid.uuid4().hex}"
    history.createOrReplaceTempView(view)
    statement = history_merge_sql(t.target_ref, spec, list(history.columns), view, blank)
    a.last_look()
    try:
        with delta_txn(
            spark, t.app_id, a.version, user_metadata=a.metadata, extra=a.sql.write_confs
        ):
            spark.sql(statement).collect()
    finally:
        spark.catalog.dropTempView(view)


def _merge(a: Attempt) -> None:
    """One ``MERGE INTO`` (:func:`.sources.merge_sql`), bounded by the batch's key range
    when that is safe, or an append when the target does not exist yet."""
    t, spec, target, spark = a.tables, a.spec, a.target, a.spark
    if target is None:
        _append(a)
        return
    source, columns, versions = a.source, a.columns, a.versions
    if spec.schema_evolution:
        staged = spark.sql(source).schema
        wanted = struct([f for f in staged.fields if f.name in set(columns)])
        a.sql.add_columns(t.target_ref, wanted, target.columns)
    if a.unstaged:  # bounded by its validation
        prune = a.prune
    elif spec.prunable:  # never with NOT MATCHED BY SOURCE: see MergeSpec.prunable
        prune = key_prune(spark, a.relation, versions, spec.keys, target.schema)
    else:
        prune = None
    statement = merge_sql(
        t.target_ref,
        spec,
        columns,
        source,
        prune=prune,
        has_guard=guarded(spec, versions),
        empty_as_null=string_partitions(a.sql, t.target_ref, spec.keys, target),
        sql=target_sql(spec, target),
    )
    a.last_look()
    with delta_txn(spark, t.app_id, a.version, user_metadata=a.metadata, extra=a.sql.write_confs):
        spark.sql(statement).collect()


#: The statement of each mode.
WRITE_MODE: dict[MergeMode, Callable[[Attempt], None]] = {
    "append": _append,
    "replace": _replace,
    "scd2": _scd2,
    "upsert": _merge,
    "insert": _merge,
}
