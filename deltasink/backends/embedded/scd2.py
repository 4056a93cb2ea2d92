"""``MergeSpec(mode="scd2")`` on delta-rs: read the history of the batch's keys, rebuild
it with :func:`deltasink.shapes.scd2.changes`, MERGE the differences on ``(keys, valid_from)``
with the ``txn`` marker in that commit."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder

from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.input.sql import DELETE_COLUMN
from deltasink.shapes.merge import SOURCE, TARGET, compile_merge, key_ranges
from deltasink.shapes.partitions import blank_keys
from deltasink.shapes.scd2 import changes
from deltasink.shapes.schema import align_to_target
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.target_sql import TargetSql

from .prune import STREAM_ABOVE_ROWS

__all__ = ["created_rows", "merge_history"]


def created_rows(data: pa.Table, spec: MergeSpec) -> pa.Table:
    """The rows a new target is created with: the batch's history (with the delete
    flag, all false)."""
    return changes(None, data, spec)


def merge_history(
    table: DeltaTable,
    values: pa.Table,
    flag: pa.ChunkedArray[Any] | None,
    spec: MergeSpec,
    props: CommitProperties,
    *,
    uri: str,
    blank: tuple[str, ...] = (),
    sql: TargetSql,
) -> dict[str, Any]:
    """One MERGE making the target's history of the batch's keys the one their events
    define; no commit when nothing changes and no column is added (the caller then
    commits the marker alone).

    It may land only on the snapshot it read the history from (no commit retries): a
    concurrent commit fails it with ``CommitFailedError``, and the caller's next
    attempt reads the history again.

    Args:
        table: The target, at the snapshot the history is read from.
        values: The staged rows, aligned to the target.
        flag: The delete flag of ``values`` (``delete_when``), or ``None``.
        spec: A ``scd2`` spec.
        props: The commit's properties (marker and metadata).
        uri: The target, for messages.
        blank: The target's string partition columns: a key there reads its stored
            null (or ``""``) as the key ``''`` (:mod:`deltasink.shapes.partitions`).
        sql: How the engine writes a statement on ``table``.

    Returns:
        delta-rs's MERGE metrics (empty when nothing was written).
    """
    start = spec.history[0]
    batch = values if flag is None else values.append_column(DELETE_COLUMN, flag)
    prune = key_ranges(values, spec.keys, skip=blank)
    current = read_rows(table, prune) if values.num_rows else None
    if current is not None:  # the null partition is the key '' (as the batch has it)
        current = blank_keys(current, spec.keys, blank)
    rows = changes(current, batch, spec)
    known = set(arrow_schema(table).names)
    if rows.num_rows == 0 and not (
        spec.schema_evolution and any(c not in known for c in values.column_names)
    ):
        return {}  # (with new columns the empty MERGE still adds them)
    removed = rows.column(DELETE_COLUMN)
    source = align_to_target(
        rows.drop_columns([DELETE_COLUMN]),
        arrow_schema(table),
        evolve=spec.schema_evolution,
        table=uri,
        non_null_mask=pc.invert(removed),
    ).append_column(DELETE_COLUMN, removed)
    on_rows = MergeSpec(mode="upsert", keys=(*spec.keys, start), delete_when="removed")
    plan = compile_merge(
        on_rows, source.column_names, has_delete=True, sql=sql, prune=prune, empty_as_null=blank
    )
    once = CommitProperties(
        custom_metadata=props.custom_metadata,
        app_transactions=props.app_transactions,
        max_commit_retries=0,
    )
    merger = table.merge(
        source,
        plan.on,
        source_alias=SOURCE,
        target_alias=TARGET,
        merge_schema=spec.schema_evolution,
        streamed_exec=prune is None or source.num_rows >= STREAM_ABOVE_ROWS,
        commit_properties=once,
        post_commithook_properties=post_commit_hooks(table),
    )
    metrics: dict[str, Any] = plan.apply_to(merger).execute()
    return metrics


def read_rows(table: DeltaTable, predicate: str | None) -> pa.Table:
    """The target's rows satisfying ``predicate`` (over ``t.<column>``; ``None``: all),
    in the target's Arrow types, read through delta-rs (deletion vectors applied)."""
    query = f"SELECT * FROM {TARGET}" + (f" WHERE {predicate}" if predicate else "")
    reader = QueryBuilder().register(TARGET, table).execute(query)
    rows = pa.table(reader)
    schema = arrow_schema(table)
    return rows.select(schema.names).cast(schema)
