"""The target table, written with delta-rs: one commit per published version, the
data change and the ``txn(app_id, version)`` marker in the same commit (then, when the
table's properties ask for it, an auto compaction commit of its own: :mod:`.compaction`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import CommitFailedError

from deltasink import _faults
from deltasink.backends.deltalog.commits import commit_properties, now_ms
from deltasink.backends.deltalog.history import commits
from deltasink.backends.deltalog.tables import arrow_schema, note_commit
from deltasink.backends.deltalog.target import TargetLog
from deltasink.backends.deltalog.turns import turn
from deltasink.core import telemetry
from deltasink.core.protocol import CommitResult
from deltasink.errors import CommitError, ConfigurationError
from deltasink.locations import is_local
from deltasink.ops.history import TELEMETRY_KEY, is_compaction
from deltasink.retry import retry
from deltasink.shapes.merge import TARGET
from deltasink.shapes.partitions import string_partitions
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.spec_rules import check_source_condition
from deltasink.shapes.table import TableDefinition, TableSpec, check_definition

from .attempt import covered, mode_batch, read_fenced, settled, write
from .compaction import auto_compact, compact_after_commit
from .constraints import ConstraintJudge
from .creating import create_target
from .features import definition_takes, refuse_unwritable
from .grouping import Request, queue_for
from .modes import target_sql
from .scd2 import created_rows
from .timestamps import Int96Guard

__all__ = ["TargetWriter"]

#: Attempts of a commit that lost only to compactions, beyond ``max_attempts``.
_COMPACTION_RETRIES = 16
#: The row counts a commit's result gives (delta-rs's ``num_target_rows_<count>``).
_COUNTS = ("inserted", "updated", "deleted")


class TargetWriter(TargetLog):
    """The target Delta table of a sink, written with delta-rs (read as :class:`TargetLog`).

    Args:
        uri: Location of the target table.
        storage_options: delta-rs storage options.
        max_attempts: Attempts per commit when concurrent writers conflict.
        table: The definition the target is created with, and checked against.
    """

    def __init__(
        self,
        uri: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = 8,
        table: TableSpec | None = None,
    ) -> None:
        if table is not None and table.cluster_by:
            raise ConfigurationError(
                "TableSpec(cluster_by=...) needs the spark engine: delta-rs (the embedded "
                "engine) cannot create liquid-clustered tables. Use partition_by, or "
                "engine='spark' with a Delta-enabled session.",
                table=uri,
            )
        if table is not None:
            auto_compact(table.properties, table=uri)  # a value Delta refuses: now
        super().__init__(uri, storage_options=storage_options)
        self.max_attempts = max_attempts
        self.table_spec = table
        self._definition_checked = False
        self._condition_checked: str | None = None
        self._attempt_base: int | None = None  # the version the last attempt read
        self._int96 = Int96Guard(uri, storage_options)
        self.constraints = ConstraintJudge(uri)

    def check_writable(self, columns: Sequence[str]) -> None:
        """Before a writer's first write (checked once per writer): the existing target
        uses no table feature delta-rs cannot write (:class:`UnsupportedTableFeatureError`),
        sets no auto compaction property Delta would refuse (:class:`ConfigurationError`,
        :mod:`.compaction`) and agrees with the TableSpec, or the batch has the columns a new target's
        definition needs (:class:`TableDefinitionError`)."""
        if self._definition_checked:
            return
        spec = self.table_spec
        table = self.open(fresh=False)
        if table is None:
            if spec is not None:
                spec.check_columns(columns, table=self.uri)
            return
        refuse_unwritable(table, self.uri)
        auto_compact(table.metadata().configuration, table=self.uri)
        if spec is None:
            self._definition_checked = True
            return
        meta = table.metadata()
        found = TableDefinition(
            partition_by=tuple(meta.partition_columns),
            cluster_by=None,  # delta-rs does not expose clustering columns
            properties=dict(meta.configuration),
            comment=meta.description,
        )
        check_definition(spec, found, table=self.uri)
        self._definition_checked = True

    def check_values(self, spec: MergeSpec) -> None:
        """Before a version is staged: a mode that rewrites target files (every mode
        but ``append``) refuses a target whose files hold values delta-rs would write
        back changed (:class:`~.timestamps.Int96Guard`; checked again before each
        publish). Raises :class:`~deltasink.errors.UnsupportedTableFeatureError`."""
        if spec.mode == "append":
            return
        table = self.open(fresh=False)
        if table is not None and self._int96.concerns(table):
            # the newest snapshot: another writer (Spark) may have added such files since
            # this writer last read the target (a pre_commit reads the staging log only)
            table = self.open()
        if table is not None:
            self._int96.check(table)

    def blank(self, schema: pa.Schema | None = None) -> tuple[str, ...]:
        """The target's string partition columns (the ``TableSpec``'s for a target not
        created yet, over ``schema``), whose ``''`` is null
        (:mod:`deltasink.shapes.partitions`); as the target was read last."""
        table = self.open(fresh=False)
        if table is not None:
            return string_partitions(arrow_schema(table), table.metadata().partition_columns)
        spec = self.table_spec
        return string_partitions(schema, spec.partition_by) if spec is not None else ()

    def check_condition(self, spec: MergeSpec) -> None:
        """``not_matched_by_source_condition`` parses and resolves on the existing
        target (as the MERGE will read it), before anything is written; once per
        condition. Raises :class:`~deltasink.errors.InvalidInputError`."""
        condition = spec.not_matched_by_source_condition
        if condition is None or condition == self._condition_checked:
            return
        table = self.open(fresh=False)
        if table is None:  # the first version creates the target: nothing to delete
            return
        check_source_condition(
            spec,
            types_of(arrow_schema(table)),
            sql=target_sql(table),
            table=self.uri,
            resolves=lambda sql: (
                QueryBuilder()
                .register(TARGET, table)
                .execute(f"SELECT 1 FROM {TARGET} WHERE {sql} LIMIT 0")
                .read_all()
            ),
        )
        self._condition_checked = condition

    def apply(
        self,
        data: pa.Table,
        *,
        spec: MergeSpec,
        app_id: str,
        version: int,
        versions: Sequence[int] = (),
        metadata: Mapping[str, Any],
        before_attempt: Callable[[], object] | None = None,
    ) -> CommitResult:
        """:meth:`apply_alone`, or, while another sink of this process publishes to the
        same target, in the next group commit (:mod:`.grouping`), with the same
        arguments, outcome and errors."""
        request = Request(self, data, spec, app_id, version, versions, metadata, before_attempt)
        return queue_for(self.uri).submit(request)

    def apply_alone(
        self,
        data: pa.Table,
        *,
        spec: MergeSpec,
        app_id: str,
        version: int,
        versions: Sequence[int] = (),
        metadata: Mapping[str, Any],
        before_attempt: Callable[[], object] | None = None,
        markers: Mapping[str, int] | None = None,
    ) -> CommitResult:
        """Apply staged data in one Delta commit carrying ``txn(app_id, version)``.

        Idempotent: returns ``already_committed`` without writing when the target's
        marker for ``app_id`` is already ≥ ``version``. Creates the target from the
        batch when it does not exist yet. A commit that conflicts with a concurrent
        writer (Delta's optimistic concurrency) is redone on the new table state, up
        to ``max_attempts`` times with jittered backoff; one that lost only to
        compactions (which change no row) is redone at once without counting, up to
        16 times more, so that a busy compactor cannot stop the writer. After a commit, the target is
        auto-compacted in a commit of its own when its properties ask for it
        (:mod:`.compaction`; never raises, never touches the marker).

        Args:
            data: The staged rows (one version, or several coalesced).
            spec: The merge spec.
            app_id: The writer.
            version: The (highest) version applied: the marker.
            versions: Every version applied, when several were coalesced.
            metadata: Extra commit metadata.
            before_attempt: Called before each attempt (the writer's fencing check).
            markers: Further ``txn`` markers the commit carries (a group commit's other
                apps: app id -> version); their batches are folded into ``data``.

        Raises:
            CommitError: Conflicts persisted after ``max_attempts`` attempts.
            StaleGroup: One of ``markers`` is already in the target (a group commit
                then leaves it out).
        """
        recorder = telemetry.current()
        once = self._attempt(
            data, spec, app_id, version, versions, metadata, before_attempt, markers, recorder
        )
        since = now_ms()
        with turn(self.uri):  # this machine's writers of the target: one at a time
            result = self._retried(once, app_id, version, recorder)
        self._after_commit(result, app_id, version, since, recorder)
        return result

    def _attempt(
        self,
        data: pa.Table,
        spec: MergeSpec,
        app_id: str,
        version: int,
        versions: Sequence[int],
        metadata: Mapping[str, Any],
        before_attempt: Callable[[], object] | None,
        markers: Mapping[str, int] | None,
        recorder: telemetry.Recorder | None,
    ) -> Callable[[], CommitResult]:
        """One attempt as :meth:`_retried` runs it: the fencing check (sent with the
        target's read, :func:`~.attempt.read_fenced`) and the commit's telemetry so far
        before each :meth:`_apply_once`; one that lost only to
        compactions (rows unchanged) is redone at once, without using up an attempt, so
        a busy compactor cannot stop the writer."""
        extra = dict(metadata)

        def once() -> CommitResult:
            for free in range(_COMPACTION_RETRIES, -1, -1):
                table, gate = read_fenced(before_attempt, self.open, apart=is_local(self.uri))
                if recorder is not None:
                    extra[TELEMETRY_KEY] = recorder.metadata()
                self._attempt_base = None
                try:
                    result = settled(
                        gate, self._apply_once, table, data, spec, app_id, version, extra,
                        versions, markers, gate,
                    )  # fmt: skip
                except CommitFailedError:
                    if free and self._only_compactions_since(self._attempt_base):
                        continue
                    raise
                return replace(result, versions=tuple(versions)) if len(versions) > 1 else result
            raise AssertionError("unreachable")

        return once

    def _retried(
        self,
        once: Callable[[], CommitResult],
        app_id: str,
        version: int,
        recorder: telemetry.Recorder | None,
    ) -> CommitResult:
        """``once`` until it does not conflict, up to ``max_attempts`` times (jittered
        backoff, :func:`~deltasink.retry.retry`). Raises :class:`CommitError` after."""
        return retry(
            once,
            attempts=self.max_attempts,
            retryable=lambda exc: isinstance(exc, CommitFailedError),
            exhausted=lambda n, exc: CommitError(
                f"the commit of version {version} into {self.uri} conflicted with "
                f"concurrent writers {n} times in a row (last: {exc}). Retry later "
                "(recover()), or reduce concurrent writes to the table.",
                table=self.uri,
                app_id=app_id,
                version=version,
            ),
            what=f"the commit of version {version} into {self.uri}",
            recorder=recorder,
            winner=self.newest_commit,
        )

    def _after_commit(
        self,
        result: CommitResult,
        app_id: str,
        version: int,
        since: int,
        recorder: telemetry.Recorder | None,
    ) -> None:
        """After the commit: the rows it changed to the telemetry, then the target
        auto-compacted when its properties ask for it (never raises)."""
        if recorder is not None and result.target_version is not None:
            changes = self.changes(result.target_version)
            if changes is not None:
                recorder.changed(*changes)
        table = self.open(fresh=False) if result.outcome == "committed" else None
        if table is not None:
            compact_after_commit(
                table,
                uri=self.uri,
                app_id=app_id,
                version=version,
                since_ms=since,
                storage_options=self._options,
            )

    def _apply_once(
        self,
        table: DeltaTable | None,
        data: pa.Table,
        spec: MergeSpec,
        app_id: str,
        version: int,
        metadata: Mapping[str, Any],
        versions: Sequence[int],
        markers: Mapping[str, int] | None = None,
        gate: Callable[[], None] | None = None,
    ) -> CommitResult:
        """One attempt on ``table`` just read (``None``: no target; ``gate``: checks to pass
        before its commit, :class:`~.attempt.Gate`): the target created from the batch,
        or the batch checked against it (definition, constraints, then the markers:
        :func:`~.attempt.covered`), shaped for its mode and written
        (:func:`~.attempt.write`); then the commit's marker noted as the target's state."""
        start = time.perf_counter()
        props = commit_properties(
            app_id=app_id,
            version=version,
            operation="commit",
            extra=metadata,
            versions=versions,
            markers=markers,
        )
        if table is None:
            if gate is not None:
                gate()
            rows = created_rows(data, spec) if spec.mode == "scd2" else data
            created = create_target(self, rows, props, list(versions) or [version])
            if created is not None:
                return self._result(version, data, created[0], start, {"inserted": created[1]})
            table = self.open()
            assert table is not None
        spec = definition_takes(table, data, spec, self.uri)  # refused, not a lost race
        self.constraints.check(table, data, spec, versions=versions or [version], app_id=app_id)
        if covered(table, self.uri, app_id, version, versions, markers):
            return CommitResult(version, "already_committed", rows=data.num_rows)
        batch = mode_batch(table, data, spec, props, self.uri, self._int96.check, gate)
        before = self._attempt_base = table.version()
        _faults.point("publish.before_target_commit", versions=list(versions) or [version])
        metrics = write(batch, before)
        # This commit's marker, known without reading the commit back (the state read of
        # the next write, and a replay, answer from it).
        note_commit(table, before, {app_id: version, **(markers or {})})
        if table.version() == before + 1:
            self.note_own_commit(table)
        _faults.point("publish.after_target_commit")
        counts = {k: int(metrics.get(f"num_target_rows_{k}", 0)) for k in _COUNTS}
        return self._result(version, data, table.version(), start, counts)

    def _only_compactions_since(self, base: int | None) -> bool:
        """Whether every commit after version ``base`` of the target is a compaction
        (its files rewritten with ``dataChange=false``: no row changed), read from the
        commits themselves (:func:`~deltasink.backends.deltalog.history.commits`)."""
        table = self.open()
        if base is None or table is None or table.version() <= base:
            return False
        since = list(commits(table, table.version() - base))
        return len(since) == table.version() - base and all(is_compaction(c) for c in since)

    @staticmethod
    def _result(
        version: int, data: pa.Table, target_version: int, start: float, rows: Mapping[str, int]
    ) -> CommitResult:
        """A committed version's result: ``rows`` inserted, updated and deleted."""
        return CommitResult(
            version,
            "committed",
            rows=data.num_rows,
            target_version=target_version,
            rows_inserted=rows.get("inserted", 0),
            rows_updated=rows.get("updated", 0),
            rows_deleted=rows.get("deleted", 0),
            duration_s=time.perf_counter() - start,
        )
