"""Publishing on Spark: :class:`TargetWriter` commits the staged rows of one or more
versions (:mod:`.sources`: one query, and the ``MERGE INTO`` compiled from the embedded
engine's :class:`~deltasink.shapes.merge.MergePlan`) to the target in ONE commit carrying
``txn(app_id, version)``: the SQL confs set around the MERGE, or the DataFrameWriter
options for an append (each mode's statement: :data:`.modes.WRITE_MODE`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deltasink import _faults
from deltasink.backends.deltalog.turns import turn
from deltasink.core import telemetry
from deltasink.core.protocol import CommitResult
from deltasink.errors import CommitError, ForeignWriterError
from deltasink.input.sql import quote
from deltasink.ops.history import history_from_commits, user_metadata
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.retry import retry
from deltasink.shapes.computed import refuse_carried_identity
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec, check_definition

from .computed import computed_of
from .conf import require_ansi
from .definition import read_definition
from .errors import is_conflict
from .fencing import Fence
from .logs import SparkLogs
from .modes import WRITE_MODE, Attempt
from .session import SparkSql
from .sources import source_sql
from .tables import Tables
from .validate import PreparedFrame

__all__ = ["TargetWriter", "Unstaged"]

logger = logging.getLogger("deltasink")


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
        require_ansi(unstaged.session if unstaged is not None else self._sql.session(), spec)

        def once() -> CommitResult:
            self._fence.check()
            if self._covered(versions):
                return CommitResult(version, "already_committed", rows=rows)
            start = time.perf_counter()
            self.apply_once(versions, columns, spec, unstaged=unstaged, origin=origin)
            result = self.result(version, rows, time.perf_counter() - start)
            if len(versions) > 1 and result.target_version is not None:
                self._check_own_snapshot(versions, result.target_version)
            return result

        with turn(t.target):  # this machine's writers of a local target: one at a time
            return self._retried(once, version)

    def _retried(self, once: Callable[[], CommitResult], version: int) -> CommitResult:
        t = self.tables
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
            recorder=telemetry.current(),
            winner=self._logs.newest_commit,
        )

    def _covered(self, versions: Sequence[int]) -> bool:
        """Whether the target's marker covers the last of ``versions`` (already
        committed).

        Raises:
            CommitError: It moved inside the coalesced ``versions``: another writer of
                the app committed some of them, so publishing the run would apply those
                twice (the core then goes one by one).
        """
        committed = self._logs.committed()
        if committed is not None and committed >= versions[-1]:
            return True
        if committed is not None and committed >= versions[0]:
            t = self.tables
            raise CommitError(
                f"the target's marker moved to {committed}, inside the coalesced "
                f"versions {list(versions)}",
                table=t.target,
                app_id=t.app_id,
                version=versions[-1],
            )
        return False

    def _last_look(self, versions: Sequence[int]) -> None:
        """Right before a coalesced run's statement, after the jobs that prepare it: the
        marker read again. Delta's MERGE takes its snapshot when the statement starts
        and checks only ``txn(app, last) > marker``; a writer of the same app that
        committed a version inside the run since :meth:`apply` looked would have it
        applied twice (commits after the statement's snapshot conflict with it)."""
        if len(versions) > 1:
            self._covered(versions)  # covered entirely: Delta's own check skips it

    def _check_own_snapshot(self, versions: Sequence[int], target_version: int) -> None:
        """After a coalesced commit: the marker in the very snapshot the statement read
        (its ``readVersion``) was below the run, else a version of the run that another
        writer committed in the moment between :meth:`_last_look` and the statement's
        snapshot was applied again. That cannot be undone here: stop, loudly.

        Raises:
            ForeignWriterError: Another writer of this app id committed inside the run.
        """
        commit = next(
            (c for c in self._logs.target_commits(32) if c.get("version") == target_version), None
        )
        read = None if commit is None else commit.get("readVersion")
        marker = None if read is None else self._logs.marker_at(int(read))
        if marker is None or marker < versions[0]:
            return
        t = self.tables
        raise ForeignWriterError(
            f"another writer with app id {t.app_id!r} committed version {marker} to "
            f"{t.target} while deltasink published versions {list(versions)} in one "
            f"commit (Delta version {target_version}, read at {read}): the versions from "
            f"{versions[0]} to {marker} are in the target twice. Stop the other writer, "
            "check those versions' rows by hand, and keep one writer per app id (or "
            "coalesce=False while another job may still write with it).",
            epoch=self._fence.epoch or 0,
            versions=tuple(v for v in versions if v <= marker),
            table=t.target,
            app_id=t.app_id,
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
        skips the commit when the target's marker already covers the version. The
        target and the batch are read once (the snapshot the commit is made on), then
        the mode's statement runs (:data:`.modes.WRITE_MODE`)."""
        t = self.tables
        relation = t.staging_ref if unstaged is None else unstaged.view
        cost = telemetry.metadata()  # what the commit cost so far (its attempt, conflicts)
        metadata = user_metadata("commit", t.app_id, versions[-1], versions, origin, cost)
        source = source_sql(relation, versions, columns, spec)
        spark = self._sql.session() if unstaged is None else unstaged.session
        target = self._logs.target_frame(spark)  # one session per statement
        computed = computed_of(spark, t, target)  # on the snapshot the commit is made on
        refuse_carried_identity(computed, columns, table=t.target)
        _faults.point("publish.before_target_commit", versions=list(versions))
        attempt = Attempt(
            sql=self._sql,
            tables=t,
            spark=spark,
            versions=versions,
            columns=columns,
            spec=spec,
            relation=relation,
            source=source,
            target=target,
            computed=computed,
            metadata=metadata,
            table_spec=self.table_spec,
            unstaged=unstaged is not None,
            prune=None if unstaged is None else unstaged.prune,
            last_look=lambda: self._last_look(versions),
        )
        WRITE_MODE[spec.mode](attempt)
        _faults.point("publish.after_target_commit")

    def result(self, version: int, rows: int, seconds: float) -> CommitResult:
        """The result of a target commit, from the target's history: when no commit of
        this version is found, Delta skipped it as already applied (another writer)."""
        entries = history_from_commits(self._logs.target_commits(32), self.tables.app_id)
        entry = next((e for e in entries if e.version == version), None)
        if entry is None:
            return CommitResult(version, "already_committed", rows=rows, duration_s=seconds)
        telemetry.changed(*entry.changes)
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
