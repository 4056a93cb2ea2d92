"""The spark engine's :class:`~deltasink.backends.ports.MaintenancePort`: history
(``DESCRIBE HISTORY`` or the delta-rs log), ``VACUUM`` and ``OPTIMIZE`` on the session,
beside the writer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from deltasink.core.committables import GcResult
from deltasink.errors import CommitError
from deltasink.input.sql import quote
from deltasink.ops.history import (
    HistoryEntry,
    count_since_optimize,
    history_from_commits,
    user_metadata,
)
from deltasink.retry import retry

from .conf import session_conf
from .errors import is_conflict
from .logs import SparkLogs
from .session import SparkSql
from .tables import Tables

__all__ = ["OPTIMIZE_ATTEMPTS", "SparkMaintenance"]

#: Attempts of ``OPTIMIZE`` when concurrent commits conflict with it.
OPTIMIZE_ATTEMPTS = 6


class SparkMaintenance:
    """History, gc and optimize of one writer's tables, on its Spark session.

    Args:
        sql: The session.
        logs: Reads both logs.
        tables: The writer's tables.
    """

    def __init__(self, sql: SparkSql, logs: SparkLogs, tables: Tables) -> None:
        self._sql = sql
        self._logs = logs
        self.tables = tables

    def history(self, limit: int | None) -> list[HistoryEntry]:
        return history_from_commits(self._logs.target_commits(limit), self.tables.app_id)

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        """``VACUUM`` the staging table (files of committed, aborted and abandoned
        versions, and orphans); Delta checkpoints and expires its log by itself."""
        if self._logs.staging_props() is None:
            return GcResult((), dry_run)
        hours = retention.total_seconds() / 3600
        vacuum = f"VACUUM {self.tables.staging_ref} RETAIN {hours:.6f} HOURS"
        settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}
        with session_conf(self._sql.session(), settings):
            files = tuple(sorted(str(r[0]) for r in self._sql.sql(vacuum + " DRY RUN")))
            if not dry_run and files:
                metadata = user_metadata("gc", self.tables.app_id, None)
                self._sql.sql(vacuum, user_metadata=metadata)
        return GcResult(files, dry_run)

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """``OPTIMIZE`` the target (``ZORDER BY`` the given columns), Delta's own: its
        conflict checker refuses an OPTIMIZE whose files a concurrent commit removed
        (``ConcurrentDeleteDeleteException`` and its siblings), so it never commits on
        files another compaction or writer rewrote. Such a conflict is retried, with
        backoff, up to :data:`OPTIMIZE_ATTEMPTS` times.

        Raises:
            CommitError: It conflicted with concurrent commits every time; nothing
                was committed.
        """
        if not self._logs.target_exists():
            return
        zorder = f" ZORDER BY ({', '.join(quote(c) for c in z_order_by)})" if z_order_by else ""
        target = self.tables.target
        retry(
            lambda: self._sql.sql(f"OPTIMIZE {self.tables.target_ref}{zorder}"),
            attempts=OPTIMIZE_ATTEMPTS,
            retryable=is_conflict,
            exhausted=lambda n, exc: CommitError(
                f"OPTIMIZE of {target} conflicted with concurrent commits {n} times in a "
                f"row (last: {type(exc).__name__}); nothing was committed and no row "
                "changed. Run it again when the writers are quieter.",
                table=target,
                app_id=self.tables.app_id,
            ),
            what=f"OPTIMIZE of {target}",
            cap=1.0,
        )

    def commits_since_optimize(self, limit: int) -> int:
        """This app's target commits since the target's last OPTIMIZE (up to ``limit``)."""
        commits = self._logs.target_commits(4 * limit + 16)
        return count_since_optimize(commits, self.tables.app_id, limit)
