"""Publishing on Spark: the staged rows of one or more versions as one query
(:func:`source_sql`), the ``MERGE INTO`` compiled from the embedded engine's
:class:`~deltasink.shapes.merge.MergePlan` (:func:`merge_sql`), and :class:`TargetWriter`,
which commits them to the target in ONE commit carrying ``txn(app_id, version)``: the
SQL confs set around the MERGE, or the DataFrameWriter options for an append.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from deltasink import _faults
from deltasink.core.protocol import CommitResult
from deltasink.errors import CommitError
from deltasink.input.arrow import spark_arrow
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN, quote
from deltasink.ops.history import history_from_commits, user_metadata
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.retry import retry
from deltasink.shapes.merge import compile_merge, replace_predicate
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec, check_definition

from .conf import delta_txn
from .definition import create_target, read_definition, string_partitions
from .errors import is_conflict
from .fencing import Fence
from .logs import SparkLogs
from .prune import key_prune
from .scd2 import history_changes, history_merge_sql
from .session import SparkSql
from .tables import RANK_COLUMN, Tables, fill_select, struct
from .validate import PreparedFrame

__all__ = ["TargetWriter", "Unstaged", "guarded", "merge_sql", "source_sql"]

logger = logging.getLogger("deltasink")


def guarded(spec: MergeSpec, versions: Sequence[int]) -> bool:
    """Whether :func:`source_sql` of ``versions`` carries the sequence guard column
    (several versions coalesced, ``upsert`` with ``sequence_by`` and ``delete_when``)."""
    return (
        len(versions) > 1
        and spec.mode == "upsert"
        and spec.sequence_by is not None
        and spec.delete_when is not None
    )


def source_sql(
    staging_ref: str, versions: Sequence[int], columns: Sequence[str], spec: MergeSpec
) -> str:
    """The staged rows of ``versions`` as one query; several versions are coalesced
    as :func:`deltasink.core.coalesce.coalesce` does (upsert: the latest row per key, by
    ``sequence_by`` then version; insert: the earliest version's row; upsert with
    ``sequence_by`` and deletes: the fold's row and its guard, see :func:`guarded`)."""
    cols = [quote(c) for c in columns]
    if spec.delete_when:
        cols.append(f"coalesce({quote(DELETE_COLUMN)}, false) AS {quote(DELETE_COLUMN)}")
    listed = ", ".join(str(v) for v in versions)
    where = f"{quote(VERSION_COLUMN)} IN ({listed})"
    if len(versions) == 1 or spec.mode in ("append", "replace"):
        return f"SELECT {', '.join(cols)} FROM {staging_ref} WHERE {where}"
    partition = ", ".join(quote(k) for k in spec.event_columns)
    if guarded(spec, versions):
        assert spec.sequence_by is not None
        return _folded_sql(staging_ref, where, cols, partition, quote(spec.sequence_by))
    order = (
        [f"{quote(spec.sequence_by)} DESC"] if spec.mode == "upsert" and spec.sequence_by else []
    )
    latest = spec.mode in ("upsert", "scd2")  # scd2: the latest version's event wins
    order.append(f"{quote(VERSION_COLUMN)} {'DESC' if latest else 'ASC'}")
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY {', '.join(order)}) "
        f"AS {quote(RANK_COLUMN)} FROM {staging_ref} WHERE {where}"
    )
    return f"SELECT {', '.join(cols)} FROM ({ranked}) WHERE {quote(RANK_COLUMN)} = 1"


def _folded_sql(staging_ref: str, where: str, cols: Sequence[str], partition: str, seq: str) -> str:
    """:func:`deltasink.core.coalesce.coalesce`'s fold for ``sequence_by`` with deletes, in SQL:
    the *records* of a key are its rows whose sequence is above every later version's;
    the row kept is the first record that is not a delete (else the first record), and
    the guard is the key's highest sequence."""
    version, delete = quote(VERSION_COLUMN), quote(DELETE_COLUMN)
    later = (
        f"max({seq}) OVER (PARTITION BY {partition} ORDER BY {version} "
        "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
    )
    scored = (
        f"SELECT *, max({seq}) OVER (PARTITION BY {partition}) AS {quote(GUARD_COLUMN)}, "
        f"{later} AS `_deltasink_later` FROM {staging_ref} WHERE {where}"
    )
    records = (
        f"SELECT * FROM ({scored}) WHERE `_deltasink_later` IS NULL OR {seq} > `_deltasink_later`"
    )
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY "
        f"CASE WHEN coalesce({delete}, false) THEN 1 ELSE 0 END, {version}) "
        f"AS {quote(RANK_COLUMN)} FROM ({records})"
    )
    selected = [*cols, quote(GUARD_COLUMN)]
    return f"SELECT {', '.join(selected)} FROM ({ranked}) WHERE {quote(RANK_COLUMN)} = 1"


def merge_sql(
    target_ref: str,
    spec: MergeSpec,
    columns: Sequence[str],
    source: str,
    *,
    prune: str | None = None,
    has_guard: bool = False,
    empty_as_null: Sequence[str] = (),
) -> str:
    """The ``MERGE INTO`` of ``source`` (a query) into the target, from the same
    :class:`~deltasink.shapes.merge.MergePlan` the embedded engine runs; ``prune`` (see
    :func:`.prune.key_prune`) is added to its join condition; ``has_guard``: the source
    carries the sequence guard (:func:`guarded`); ``empty_as_null``: see
    :func:`.definition.string_partitions`."""
    plan = compile_merge(
        spec,
        columns,
        has_delete=spec.delete_when is not None,
        prune=prune,
        has_guard=has_guard,
        spark=True,
        empty_as_null=empty_as_null,
    )
    return plan.to_sql(target_ref, f"({source})")


@dataclass(frozen=True)
class Unstaged:
    """Where a direct publish reads its batch instead of the staging table: a temporary
    view with the staging table's layout, the session that sees it, and the key-range
    predicate its validation found (``None``: no key bounded)."""

    view: str
    session: Any
    prune: str | None


class TargetWriter:
    """Commits staged versions to the target through Spark, idempotently.

    Args:
        sql: The session.
        logs: Reads the target's committed version and history.
        fence: The writer's epoch, checked before each attempt.
        tables: The writer's tables.
        max_attempts: Attempts per commit when concurrent writers conflict.
        table: The definition the target is created with, and checked against.
    """

    def __init__(
        self,
        sql: SparkSql,
        logs: SparkLogs,
        fence: Fence,
        tables: Tables,
        *,
        max_attempts: int,
        table: TableSpec | None = None,
    ) -> None:
        self._sql = sql
        self._logs = logs
        self._fence = fence
        self.tables = tables
        self.max_attempts = max_attempts
        self.table_spec = table
        self._definition_checked = False

    def check_definition(self, columns: Sequence[str]) -> None:
        """Before a writer's first write: the batch has the columns a new target's
        definition needs, or the existing target agrees with the TableSpec (checked
        once per writer). Raises :class:`~deltasink.errors.TableDefinitionError`."""
        spec = self.table_spec
        if spec is None or self._definition_checked:
            return
        if not self._logs.target_exists():
            spec.check_columns(columns, table=self.tables.target)
            return
        found = read_definition(self._sql, self.tables.target_ref)
        check_definition(spec, found, table=self.tables.target)
        self._definition_checked = True

    def apply_frame(
        self,
        version: int,
        prepared: PreparedFrame,
        spec: MergeSpec,
        rows: int,
        *,
        origin: str | None = None,
    ) -> CommitResult:
        """Commit a validated, unstaged batch as ``version`` (direct publish): the same
        statements as for a staged version, reading the batch from a temporary view of
        the frame instead of the staging table. As :meth:`apply`.

        The statements run on the frame's own session: a ``foreachBatch`` micro-batch
        belongs to the streaming query's session, whose temporary views no other
        session sees."""
        spark = getattr(prepared.frame, "sparkSession", None) or self._sql.session()
        view = f"deltasink_batch_{uuid.uuid4().hex}"
        prepared.frame.selectExpr(
            "*", f"CAST({version} AS BIGINT) AS {quote(VERSION_COLUMN)}"
        ).createOrReplaceTempView(view)
        try:
            unstaged = Unstaged(view, spark, prepared.prune)
            return self.apply(
                [version], prepared.columns, spec, rows, unstaged=unstaged, origin=origin
            )
        finally:
            spark.catalog.dropTempView(view)

    def apply(
        self,
        versions: Sequence[int],
        columns: Sequence[str],
        spec: MergeSpec,
        rows: int,
        *,
        unstaged: Unstaged | None = None,
        origin: str | None = None,
    ) -> CommitResult:
        """Commit ``versions`` (staged with ``columns``) in one commit carrying the
        marker of the last; ``already_committed`` when the target's marker covers it.
        ``unstaged``: the batch of a direct publish, read there instead of the staging
        table. ``origin``: the encoded origin the commit records
        (:mod:`deltasink.ops.origin`).

        Raises:
            CommitError: The marker moved inside the coalesced ``versions``, or the
                commit conflicted ``max_attempts`` times in a row.
        """
        t = self.tables
        version = versions[-1]

        def once() -> CommitResult:
            self._fence.check()
            committed = self._logs.committed()
            if committed is not None and committed >= version:
                return CommitResult(version, "already_committed", rows=rows)
            if committed is not None and committed >= versions[0]:
                raise CommitError(
                    f"the target's marker moved to {committed}, inside the coalesced "
                    f"versions {list(versions)}",
                    table=t.target,
                    app_id=t.app_id,
                    version=version,
                )
            start = time.perf_counter()
            self.apply_once(versions, columns, spec, unstaged=unstaged, origin=origin)
            return self.result(version, rows, time.perf_counter() - start)

        return retry(
            once,
            attempts=self.max_attempts,
            retryable=is_conflict,
            exhausted=lambda n, exc: CommitError(
                f"the commit of version {version} into {t.target} conflicted with "
                f"concurrent writers {n} times in a row (last: {exc}). Retry later "
                "(recover()), or reduce concurrent writes to the table.",
                table=t.target,
                app_id=t.app_id,
                version=version,
            ),
            what=f"the commit of version {version} into {t.target}",
        )

    def apply_once(
        self,
        versions: Sequence[int],
        columns: Sequence[str],
        spec: MergeSpec,
        *,
        unstaged: Unstaged | None = None,
        origin: str | None = None,
    ) -> None:
        """One attempt, without checking the marker first: Delta's own ``txn`` check
        skips the commit when the target's marker already covers the version."""
        t = self.tables
        version = versions[-1]
        relation = t.staging_ref if unstaged is None else unstaged.view
        metadata = user_metadata("commit", t.app_id, version, versions, origin)
        source = source_sql(relation, versions, columns, spec)
        spark = self._sql.session() if unstaged is None else unstaged.session
        target = self._logs.target_frame(spark)  # one session per statement
        _faults.point("publish.before_target_commit", versions=list(versions))
        history, blank = None, list[str]()
        if spec.mode == "scd2":  # the changes to the target's history, merged below
            if target is not None:
                blank = string_partitions(self._sql, t.target_ref, spec.keys, target)
            history = history_changes(spark, source, target, spec, blank)
        if target is not None and history is not None:
            if spec.schema_evolution:
                wanted = struct([f for f in history.schema.fields if f.name != DELETE_COLUMN])
                self._sql.add_columns(t.target_ref, wanted, target.columns)
            view = f"deltasink_history_{uuid.uuid4().hex}"
            history.createOrReplaceTempView(view)
            statement = history_merge_sql(t.target_ref, spec, list(history.columns), view, blank)
            try:
                with delta_txn(
                    spark, t.app_id, version, user_metadata=metadata, extra=self._sql.write_confs
                ):
                    spark.sql(statement).collect()
            finally:
                spark.catalog.dropTempView(view)
        elif target is not None and spec.mode == "replace":
            frame = spark.sql(source)
            select = fill_select(target.schema.fields, frame.columns)
            select += [quote(c) for c in frame.columns if c not in set(target.columns)]
            distinct = (
                spark_arrow(frame.select(*spec.replace_by).distinct())
                if spec.replace_by
                else pa.table({})
            )
            blank = string_partitions(self._sql, t.target_ref, spec.replace_by or (), target)
            predicate = replace_predicate(spec, distinct, spark=True, empty_as_null=blank)
            options = {"mergeSchema": "true"} if spec.schema_evolution else {}
            if predicate is not None:
                options["replaceWhere"] = predicate
            self._sql.write(  # nothing to replace: an empty append carries the marker
                frame.selectExpr(*select),
                t.target,
                txn=(t.app_id, version),
                user_metadata=metadata,
                mode="append" if predicate is None else "overwrite",
                options=options,
            )
        elif target is None or spec.mode in ("append", "replace"):
            frame = spark.sql(source) if history is None else history
            if spec.delete_when or history is not None:
                frame = frame.where(f"NOT {quote(DELETE_COLUMN)}").drop(DELETE_COLUMN)
            # A coalesced run creating the target: its guard is compared, never written.
            frame = frame.drop(GUARD_COLUMN)
            options = {"mergeSchema": "true"} if spec.schema_evolution else {}
            if target is None and self.table_spec is not None:
                create_target(self._sql, t, frame.schema, self.table_spec)
            if target is not None:  # every target column, NULL where the batch has none
                select = fill_select(target.schema.fields, frame.columns)
                select += [quote(c) for c in frame.columns if c not in set(target.columns)]
                frame = frame.selectExpr(*select)
            self._sql.write(
                frame, t.target, txn=(t.app_id, version), user_metadata=metadata, options=options
            )
        else:
            if spec.schema_evolution:
                staged = spark.sql(source).schema
                wanted = struct([f for f in staged.fields if f.name in set(columns)])
                self._sql.add_columns(t.target_ref, wanted, target.columns)
            if unstaged is not None:  # bounded by its validation
                prune = unstaged.prune
            elif spec.prunable:  # never with NOT MATCHED BY SOURCE: see MergeSpec.prunable
                prune = key_prune(spark, relation, versions, spec.keys, target.schema)
            else:
                prune = None
            statement = merge_sql(
                t.target_ref,
                spec,
                columns,
                source,
                prune=prune,
                has_guard=guarded(spec, versions),
                empty_as_null=string_partitions(self._sql, t.target_ref, spec.keys, target),
            )
            with delta_txn(
                spark, t.app_id, version, user_metadata=metadata, extra=self._sql.write_confs
            ):
                spark.sql(statement).collect()
        _faults.point("publish.after_target_commit")

    def result(self, version: int, rows: int, seconds: float) -> CommitResult:
        """The result of a target commit, from the target's history: when no commit of
        this version is found, Delta skipped it as already applied (another writer)."""
        entries = history_from_commits(self._logs.target_commits(32), self.tables.app_id)
        entry = next((e for e in entries if e.version == version), None)
        if entry is None:
            return CommitResult(version, "already_committed", rows=rows, duration_s=seconds)
        return CommitResult(
            version,
            "committed",
            rows=rows,
            target_version=entry.target_version,
            rows_inserted=entry.rows_inserted,
            rows_updated=entry.rows_updated,
            rows_deleted=entry.rows_deleted,
            duration_s=seconds,
        )
