"""How each ``MergeSpec`` mode writes a batch into the target with delta-rs, chosen from one
table (:data:`WRITE_MODE`): ``append``, ``replace`` (the slice the batch replaces), ``scd2``
(the keys' history rebuilt) and ``upsert``/``insert`` (one MERGE, or a blind append when
the target's statistics prove no key of the batch exists). Each returns delta-rs's
metrics; the caller commits the marker alone when nothing changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, write_deltalake

from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.shapes.merge import SOURCE, TARGET, compile_merge, key_ranges, replace_predicate
from deltasink.shapes.partitions import blank_as_null
from deltasink.shapes.predicates import Dialect
from deltasink.shapes.spec import MergeMode, MergeSpec
from deltasink.shapes.target_sql import TargetSql

from .generated import fill, plan
from .prune import PRUNE_WHEN_OVERLAP_AT_MOST, STREAM_ABOVE_ROWS, overlap
from .scd2 import merge_history

__all__ = [
    "DIALECT",
    "WRITE_MODE",
    "ModeBatch",
    "append",
    "gated",
    "replace_slice",
    "target_sql",
]

#: The SQL this engine's target statements are written in: delta-rs's (DataFusion).
DIALECT: Dialect = "delta-rs"


def target_sql(table: DeltaTable) -> TargetSql:
    """How a statement on ``table`` is written: this engine's dialect, the predicates
    translated for the target's columns."""
    return TargetSql.over(DIALECT, arrow_schema(table))


class ModeBatch(NamedTuple):
    """One attempt's batch, aligned to the target, and what its commit carries."""

    #: The target as read for this attempt.
    table: DeltaTable
    #: The rows, aligned to the target's schema (flag and guard columns removed).
    values: pa.Table
    #: The ``delete_when`` flag per row, if the spec has one.
    flag: pa.ChunkedArray[Any] | None
    #: The sequence guard of a coalesced batch, if any.
    guard: pa.ChunkedArray[Any] | None
    spec: MergeSpec
    #: The commit properties: the ``txn`` marker and the commit metadata.
    props: CommitProperties
    #: The target's location (for messages).
    uri: str
    #: The target's string partition columns, whose ``''`` is null
    #: (:mod:`deltasink.shapes.partitions`).
    blank: tuple[str, ...] = ()
    #: Called before a write that rewrites target files (MERGE, overwrite, SCD2):
    #: refuses a target whose files delta-rs would read back wrong
    #: (:class:`~.timestamps.Int96Guard`).
    before_rewrite: Callable[[DeltaTable], None] | None = None
    #: To pass before the commit (a direct write's intent and fencing check, still
    #: running: :class:`~.attempt.Gate`); raises when they failed.
    gate: Callable[[], None] | None = None

    @property
    def sql(self) -> TargetSql:
        """How this attempt's statements on the target are written."""
        return target_sql(self.table)

    def rewrites(self) -> None:
        """Run :attr:`before_rewrite` on this attempt's table."""
        if self.before_rewrite is not None:
            self.before_rewrite(self.table)


def append(
    table: DeltaTable,
    values: pa.Table,
    spec: MergeSpec,
    props: CommitProperties,
    *,
    max_commit_retries: int | None = None,
    blank: tuple[str, ...] = (),
) -> int:
    """Append ``values`` (absent nullable columns filled with nulls, as Delta does;
    ``''`` in the string partition columns ``blank`` written as null).

    ``max_commit_retries=0`` makes the append fail, rather than land on a newer
    snapshot, when anyone committed since ``table`` was read."""
    if max_commit_retries is not None:
        props = CommitProperties(
            custom_metadata=props.custom_metadata,
            app_transactions=props.app_transactions,
            max_commit_retries=max_commit_retries,
        )
    for column in arrow_schema(table):
        if column.name not in values.column_names:
            values = values.append_column(column.name, pa.nulls(values.num_rows, column.type))
    values = blank_as_null(values, blank)
    if values.num_rows:
        write_deltalake(
            table,
            values,
            mode="append",
            schema_mode="merge" if spec.schema_evolution else None,
            commit_properties=props,
            post_commithook_properties=post_commit_hooks(table),
        )
    return values.num_rows


def replace_slice(
    table: DeltaTable,
    values: pa.Table,
    spec: MergeSpec,
    props: CommitProperties,
    *,
    blank: tuple[str, ...] = (),
) -> tuple[int, int]:
    """Replace the rows :func:`~deltasink.shapes.merge.replace_predicate` selects with
    ``values``, in one overwrite commit; nothing when it selects nothing (the caller
    then commits the marker alone). Returns (rows inserted, rows deleted): delta-rs
    reports no deleted rows for an overwrite, so they are counted first, on the
    snapshot the overwrite replaces (files pruned by the predicate). A ``replace_by``
    value ``''`` in a string partition column (``blank``) is the null partition."""
    predicate = replace_predicate(spec, values, sql=target_sql(table), empty_as_null=blank)
    if predicate is None:
        return 0, 0
    query = f"SELECT count(*) AS n FROM {TARGET} WHERE {predicate}"
    counted = pa.table(QueryBuilder().register(TARGET, table).execute(query))
    deleted = int(counted.column(0)[0].as_py()) if counted.num_rows else 0
    for column in arrow_schema(table):
        if column.name not in values.column_names:
            values = values.append_column(column.name, pa.nulls(values.num_rows, column.type))
    write_deltalake(
        table,
        blank_as_null(values, blank),
        mode="overwrite",
        predicate=predicate,
        schema_mode="merge" if spec.schema_evolution else None,
        commit_properties=props,
        post_commithook_properties=post_commit_hooks(table),
    )
    return values.num_rows, deleted


def gated(source: pa.Table, gate: Callable[[], None]) -> pa.RecordBatchReader:
    """``source`` as a stream whose first read waits for ``gate`` (and raises its
    error): a MERGE given it reads the target's files meanwhile, and cannot commit
    before it has read its whole source, so not before ``gate`` passed."""

    def batches() -> Any:
        gate()
        yield from source.to_batches()

    return pa.RecordBatchReader.from_batches(source.schema, batches())


def _append_mode(b: ModeBatch) -> dict[str, Any]:
    inserted = append(b.table, b.values, b.spec, b.props, blank=b.blank)
    return {"num_target_rows_inserted": inserted}


def _replace_mode(b: ModeBatch) -> dict[str, Any]:
    if replace_predicate(b.spec, b.values, sql=b.sql, empty_as_null=b.blank) is not None:
        b.rewrites()
    inserted, deleted = replace_slice(b.table, b.values, b.spec, b.props, blank=b.blank)
    return {"num_target_rows_inserted": inserted, "num_target_rows_deleted": deleted}


def _scd2_mode(b: ModeBatch) -> dict[str, Any]:
    b.rewrites()
    return merge_history(
        b.table, b.values, b.flag, b.spec, b.props, uri=b.uri, blank=b.blank, sql=b.sql
    )


def _merge_mode(b: ModeBatch) -> dict[str, Any]:
    """``upsert`` and ``insert``: one MERGE by key, or the insert-only fast path."""
    table, values, flag, guard, spec, props = b.table, b.values, b.flag, b.guard, b.spec, b.props
    share = overlap(table, values, spec) if spec.prunable else None
    if spec.prunable and share == 0.0:
        # Insert-only fast path: no key of the batch can exist in the target, so
        # the MERGE would only insert. Deletes of absent keys are no-ops.
        # The append is blind (Delta checks it against nothing), so it must land on
        # exactly the snapshot whose statistics proved the keys absent: no commit
        # retries; a concurrent commit fails it and the next attempt decides anew.
        rows = values if flag is None else values.filter(pc.invert(flag))
        if b.gate is not None:
            b.gate()
        inserted = append(table, rows, spec, props, max_commit_retries=0, blank=b.blank)
        return {"num_target_rows_inserted": inserted}
    b.rewrites()
    source = values if flag is None else values.append_column(DELETE_COLUMN, flag)
    if guard is not None:
        source = source.append_column(GUARD_COLUMN, guard)
    # Pruning pays when the batch's key range misses most of the target's files;
    # when it touches most of them, the plain streamed MERGE is cheaper.
    # Never when the MERGE deletes target rows absent from the batch: every
    # row outside the batch's key range would be "not matched by source".
    prune = spec.prunable and (share is None or share <= PRUNE_WHEN_OVERLAP_AT_MOST)
    ranges = key_ranges(values, spec.keys, skip=b.blank) if prune else None
    plan = compile_merge(
        spec,
        values.column_names,
        has_delete=flag is not None,
        prune=ranges,
        has_guard=guard is not None,
        sql=b.sql,
        empty_as_null=b.blank,
    )
    streamed = ranges is None or values.num_rows >= STREAM_ABOVE_ROWS
    if b.gate is not None and not streamed:
        b.gate()  # a source held whole is read before the target: nothing to overlap
    merger = table.merge(
        gated(source, b.gate) if b.gate is not None and streamed else source,
        plan.on,
        source_alias=SOURCE,
        target_alias=TARGET,
        merge_schema=spec.schema_evolution,
        # A non-streamed source lets delta-rs prune target files, but it holds
        # the whole source in the join: large batches stream instead (memory). Only
        # with a key-range predicate of exact statistics: without one, delta-rs's read
        # predicate is its filter of the source's keys, which its conflict checker
        # compares with statistics truncated to the millisecond for timestamps: a
        # compaction of the row's file beside the MERGE went unseen and the key was
        # inserted a second time (found by the writers model, seed 865641963).
        streamed_exec=streamed,
        commit_properties=props,
        post_commithook_properties=post_commit_hooks(table),
    )
    metrics: dict[str, Any] = plan.apply_to(merger).execute()
    return metrics


def _computed(
    write: Callable[[ModeBatch], dict[str, Any]],
) -> Callable[[ModeBatch], dict[str, Any]]:
    """``write`` of the batch with the target's generated columns it omits computed as
    Spark computes them, on this attempt's snapshot (:mod:`.generated`: refused by name
    there when delta-rs would not write Spark's values)."""

    def run(b: ModeBatch) -> dict[str, Any]:
        generated = plan(b.table, b.uri)
        return write(b._replace(values=fill(generated, b.values, arrow_schema(b.table))))

    return run


#: The writer of each mode.
WRITE_MODE: dict[MergeMode, Callable[[ModeBatch], dict[str, Any]]] = {
    "append": _computed(_append_mode),
    "replace": _computed(_replace_mode),
    "scd2": _computed(_scd2_mode),
    "upsert": _computed(_merge_mode),
    "insert": _computed(_merge_mode),
}
