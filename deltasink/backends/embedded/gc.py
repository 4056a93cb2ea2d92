"""Expiring the staging table: files no staged version needs, and its log."""

from __future__ import annotations

import math
import os
from datetime import timedelta

from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from deltasink.backends.deltalog.commits import commit_properties
from deltasink.backends.deltalog.staging import StagingLog
from deltasink.backends.deltalog.tables import plain
from deltasink.core.committables import GcResult
from deltasink.errors import CommitError
from deltasink.locations import is_local
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.retry import retry

from .retention import base_gone, expire_log

__all__ = ["ORPHAN_SAFETY_HOURS", "StagingGc"]

#: Never-referenced files younger than this are kept by gc (a staging in flight).
ORPHAN_SAFETY_HOURS = 1
_GC_ATTEMPTS = 8


class StagingGc:
    """Garbage collection of one staging table.

    Args:
        log: The staging table's reader.
    """

    def __init__(self, log: StagingLog) -> None:
        self.log = log

    def gc(self, retention: timedelta, *, dry_run: bool = False) -> GcResult:
        """Expire what no staged version needs any more, and compact the log.

        Deletes data files that the current snapshot no longer references and that
        are older than ``retention`` (VACUUM, in whole hours, rounded up so nothing
        younger goes): the staging data of committed, aborted and abandoned versions,
        and orphans of failed stagings. Then writes a checkpoint and removes expired
        log files, by age and by count, as every checkpoint of the staging log does
        (:func:`~.retention.expire_log`; none with
        ``delta.enableExpiredLogCleanup=false``), so reading the staging state stays
        fast after thousands of versions. Staged versions are never touched. Safe
        beside a live writer: a conflict with its commits is retried on the new
        snapshot.

        Raises:
            CommitError: The writer's commits conflicted with every attempt.
        """
        log = self.log
        table = log.open()
        if table is None:
            return GcResult((), dry_run)
        files: set[str] = set()

        def once() -> GcResult:
            files.update(self._gc_once(table, retention, dry_run))
            return GcResult(tuple(sorted(files)), dry_run)

        return retry(
            once,
            attempts=_GC_ATTEMPTS,
            # A live writer committed to the staging log meanwhile (VACUUM writes
            # commits too): nothing is lost; go again on the new snapshot.
            # A snapshot older than the log kept by count cannot be conflict-checked
            # (its commit file is gone): the same, a long way behind.
            retryable=lambda exc: (
                isinstance(exc, CommitFailedError)
                or (isinstance(exc, DeltaError) and base_gone(table))
            ),
            exhausted=lambda n, exc: CommitError(
                f"gc of {log.uri} conflicted with the writer's commits {n} times in a row "
                f"(last: {plain(exc)}). Nothing was lost; run gc again later, or from a "
                "post-commit hook (hooks.gc_every).",
                table=log.uri,
                app_id=log.app_id,
            ),
            what=f"gc of {log.uri}",
            cap=1.0,
            before_retry=table.update_incremental,
        )

    def _gc_once(self, table: DeltaTable, retention: timedelta, dry_run: bool) -> set[str]:
        hours = math.ceil(retention.total_seconds() / 3600)
        props = commit_properties(app_id=self.log.app_id, version=None, operation="gc")
        # Files the log removed (committed, aborted, abandoned versions): by retention.
        files = set(
            table.vacuum(
                retention_hours=hours,
                dry_run=dry_run,
                enforce_retention_duration=False,
                commit_properties=props,
            )
        )
        # Files the log never referenced (failed stagings): never younger than the
        # safety margin, so a pre_commit writing its file right now keeps it.
        table.update_incremental()
        files |= set(
            table.vacuum(
                retention_hours=max(hours, ORPHAN_SAFETY_HOURS),
                dry_run=dry_run,
                enforce_retention_duration=False,
                full=True,
                commit_properties=props,
            )
        )
        if not dry_run:
            table.update_incremental()
            table.create_checkpoint()
            expire_log(table)
            if is_local(self.log.uri):
                self._remove_empty_directories(table)
        return files

    def _remove_empty_directories(self, table: DeltaTable) -> None:
        """Remove the empty partition directories VACUUM leaves behind on a local
        filesystem (one per version ever staged), but only of versions at or below
        the committed mark: those are never staged again, so no writer is about to
        put a file into them. Object stores have no directories to leave behind."""
        mark = self.log.mark(table)
        if mark is None:
            return
        prefix = f"{VERSION_COLUMN}="
        with os.scandir(self.log.uri) as entries:
            for entry in entries:
                if not entry.name.startswith(prefix) or not entry.is_dir():
                    continue
                try:
                    if int(entry.name[len(prefix) :]) <= mark:
                        os.rmdir(entry.path)  # fails, harmlessly, unless empty
                except (ValueError, OSError):
                    continue
