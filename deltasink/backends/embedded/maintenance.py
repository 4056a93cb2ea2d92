"""The embedded engine's :class:`~deltasink.backends.ports.MaintenancePort`: history,
gc and optimize with delta-rs, beside the writer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from deltasink._version import __version__
from deltasink.backends.deltalog.history import commits, history
from deltasink.backends.deltalog.staging import StagingLog
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.core.committables import GcResult
from deltasink.errors import CommitError, ConfigurationError, UnsupportedTableFeatureError
from deltasink.failures import plain
from deltasink.ops.history import HistoryEntry, count_since_optimize, history_from_commits
from deltasink.retry import retry

from .compaction import TARGET_FILE_SIZE, parse_size
from .features import unwritable_features
from .gc import StagingGc
from .publish import TargetWriter
from .rewrite import File, Lost, files_of, rewrite, unreadable

__all__ = ["OPTIMIZE_ATTEMPTS", "OPTIMIZE_FILE_SIZE", "EmbeddedMaintenance", "target_history"]

#: The size ``optimize()`` compacts toward when the table sets no ``delta.targetFileSize``
#: (delta-rs's ``optimize`` default, 100 MiB); files below it are compacted.
OPTIMIZE_FILE_SIZE = 100 * 1024 * 1024
#: Rounds of plan and rewrite ``optimize()`` makes when concurrent commits took its files.
OPTIMIZE_ATTEMPTS = 6


def target_history(target: TargetWriter, app_id: str, limit: int | None) -> list[HistoryEntry]:
    """``app_id``'s commits to ``target``, newest first, among its ``limit`` latest."""
    table = target.open()
    if table is None:
        return []
    return history_from_commits(history(table, limit), app_id)


class EmbeddedMaintenance:
    """History, gc and optimize of one writer's tables.

    Args:
        target: The target table.
        staging: The staging table's reader.
    """

    def __init__(self, target: TargetWriter, staging: StagingLog) -> None:
        self.target = target
        self.app_id = staging.app_id
        self._gc = StagingGc(staging)

    def history(self, limit: int | None) -> list[HistoryEntry]:
        return target_history(self.target, self.app_id, limit)

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        return self._gc.gc(retention, dry_run=dry_run)

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """Compact the target's files below its target size (``delta.targetFileSize``,
        else 100 MiB), or with ``z_order_by`` Z-ORDER every partition by those columns,
        in one ``OPTIMIZE`` commit of ``dataChange=false`` files that cannot change rows
        (:func:`~.rewrite.rewrite`): it commits only on a snapshot that still holds
        every file it rewrites, unchanged. When a concurrent compaction or writer
        removed or changed one first, it commits nothing and plans again on the new
        snapshot (checked again as below), with backoff, up to
        :data:`OPTIMIZE_ATTEMPTS` times. Safe beside live writers; a writer whose
        commit conflicts with it redoes its commit.

        Raises:
            UnsupportedTableFeatureError: The target uses column mapping or deletion
                vectors, whose files cannot be rewritten row for row here (also when
                a concurrent commit enabled them while it ran: nothing committed).
            ConfigurationError: A ``z_order_by`` column is not a column of the target,
                or is a partition column.
            CommitError: Concurrent commits took its files every time, or delta-rs
                refused the commit; nothing was committed.
        """
        table = self.target.open()
        if table is None:
            return
        _check_readable(table, self.target.uri)
        _check_z_order(table, z_order_by, self.target.uri)
        uri = self.target.uri

        def once() -> None:
            current = self.target.open()
            assert current is not None
            # each round plans on a new snapshot: a commit in between may have enabled
            # deletion vectors (and deleted rows by them) or column mapping
            _check_readable(current, uri)
            size = _target_size(current, uri)
            chosen = _chosen(current, size, z_order=bool(z_order_by))
            if not chosen:
                return
            metadata = {
                "deltasink.operation": "optimize",
                "deltasink.libraryVersion": __version__,
            }
            if z_order_by:
                metadata["deltasink.zOrderBy"] = ",".join(z_order_by)
            try:
                rewrite(
                    current,
                    chosen,
                    uri=uri,
                    storage_options=self.target.storage_options,
                    target_size=size,
                    metadata=metadata,
                    z_order_by=z_order_by,
                    auto=False,
                )
            except DeltaError as exc:
                raise CommitError(
                    f"optimize() of {uri} committed nothing: delta-rs refused the "
                    f"compaction ({type(exc).__name__}: {plain(exc)}). The table is as "
                    "it was; fix the cause and run optimize() again.",
                    table=uri,
                    app_id=self.app_id,
                ) from exc

        retry(
            once,
            attempts=OPTIMIZE_ATTEMPTS,
            retryable=lambda exc: isinstance(exc, Lost),
            exhausted=lambda n, exc: CommitError(
                f"optimize() of {uri} lost its files to concurrent commits {n} times in a "
                f"row (last: {exc}); nothing was committed and no row changed. Run it "
                "again when the writers are quieter.",
                table=uri,
                app_id=self.app_id,
            ),
            what=f"optimize() of {uri}",
            cap=1.0,
        )

    def commits_since_optimize(self, limit: int) -> int:
        """This app's target commits since the target's last compaction (counting stops
        at ``limit``)."""
        table = self.target.open()
        if table is None:
            return 0
        return count_since_optimize(commits(table, 4 * limit + 16), self.app_id, limit)


def _check_readable(table: DeltaTable, uri: str) -> None:
    # a writer feature delta-rs cannot write (liquid clustering, row tracking, ...) failed
    # each commit as if lost to a concurrent one
    features = unreadable(table) + unwritable_features(table)
    if features:
        raise UnsupportedTableFeatureError(
            f"optimize() cannot compact {uri} (version {table.version()}): it uses "
            f"{features}, whose data files the embedded engine cannot rewrite (row for "
            "row, or at all). Run OPTIMIZE with Delta on Spark (engine='spark'). Nothing was written.",
            table=uri,
            features=features,
        )


def _target_size(table: DeltaTable, uri: str) -> int:
    size = table.metadata().configuration.get(TARGET_FILE_SIZE)
    return OPTIMIZE_FILE_SIZE if size is None else parse_size(size, table=uri)


def _chosen(table: DeltaTable, size: int, *, z_order: bool) -> list[File]:
    """The files ``optimize()`` rewrites: every file of each partition for Z-ORDER, else
    the files below ``size`` of each partition holding two or more of them."""
    groups: dict[tuple[object, ...], list[File]] = {}
    for file in files_of(table):
        if z_order or file.size < size:
            groups.setdefault(file.partition, []).append(file)
    return [f for group in groups.values() if z_order or len(group) > 1 for f in group]


def _check_z_order(table: DeltaTable, columns: Sequence[str], uri: str) -> None:
    if not columns:
        return
    names = set(arrow_schema(table).names)
    partitions = set(table.metadata().partition_columns)
    wrong = [c for c in columns if c not in names or c in partitions]
    if wrong:
        raise ConfigurationError(
            f"optimize(z_order_by={list(columns)}) on {uri}: {wrong} not among the "
            f"target's non-partition columns {sorted(names - partitions)}. Nothing was "
            "written.",
            table=uri,
        )
