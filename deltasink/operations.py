"""The operations part of a :class:`~deltasink.sink.DeltaSink`: what an operator reads
and runs on one writer (status, where a stream resumes, the history and ledger of the
target commits, gc and OPTIMIZE), through the engine's two ports."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from deltasink.backends.ports import CommitPort, MaintenancePort
from deltasink.core.committables import GcResult, LogState
from deltasink.core.protocol import TwoPhaseCommit
from deltasink.errors import ConfigurationError
from deltasink.input.arrow import spark_frame
from deltasink.observe import record_pending
from deltasink.ops.history import HistoryEntry, ledger_table
from deltasink.ops.origin import BatchOrigin
from deltasink.status import SinkStatus
from deltasink.stream.origins import StreamOrigins
from deltasink.stream.resume import ResumePoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Operations"]


def _active_spark() -> Any:
    """The active Spark session (classic or Connect), or ``None``."""
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:  # pyspark missing or no usable session
        return None


class Operations:
    """What an operator reads and runs on one writer.

    Args:
        target: The target as the sink names it.
        staging: The staging table's location.
        app_id: The writer.
        engine_reason: Why the engine was chosen (reported by :meth:`status`).
        backend: The engine's commit port (state, the recorded spec).
        maintenance: The engine's maintenance port (history, gc, optimize).
        core: The two-phase commit, which decides the committed version.
        origins: What the writer's versions recorded of their streams.
        spark: The session the sink was given, if any (for :meth:`ledger`).
    """

    def __init__(
        self,
        *,
        target: str,
        staging: str,
        app_id: str,
        engine_reason: str,
        backend: CommitPort,
        maintenance: MaintenancePort,
        core: TwoPhaseCommit[object],
        origins: StreamOrigins,
        spark: Any,
    ) -> None:
        self.target = target
        self.staging = staging
        self.app_id = app_id
        self.engine_reason = engine_reason
        self._backend = backend
        self._maintenance = maintenance
        self._core = core
        self._origins = origins
        self._spark = spark

    @property
    def engine(self) -> str:
        """The backend doing the Delta writes."""
        return self._backend.name

    def offsets(self) -> ResumePoint:
        """Where a new streaming query starts to continue right after the newest
        version this writer holds (``deltasink offsets``): the committed version, the
        pending ones (a query resumed with ``resume=True`` publishes them before its
        first batch), the newest one's origin and, per source, Kafka
        ``startingOffsets`` JSON, a Delta source's ``startingVersion``, or the files a
        file source already delivered (every version's: a resumed query leaves their
        rows out by itself). ``exact`` is false when the newest version recorded no
        origin (a batch job's write): the positions are then older than it.
        """
        return self._origins.resume_point(self._fresh_state())

    def status(self, *, with_origin: bool = False) -> SinkStatus:
        """The committed version and the pending versions, from the Delta logs.

        Args:
            with_origin: Also read the origin of the newest commit that recorded one
                (:attr:`SinkStatus.origin`; one read of the target's recent history).
        """
        state = self._fresh_state()
        pending = state.pending
        lag = time.time() - pending[0].staged_at.timestamp() if pending else None
        record_pending(self.app_id, len(pending), lag)
        return SinkStatus(
            target=self.target,
            staging=self.staging,
            app_id=self.app_id,
            engine=self.engine,
            engine_reason=self.engine_reason,
            committed_version=state.committed_version,
            pending_versions=[s.version for s in state.pending],
            pending=state.pending,
            leftover_versions=[s.version for s in state.leftovers],
            target_exists=self._backend.target_exists(),
            merge=self._backend.recorded_spec(),
            quarantined=dict(state.quarantined),
            origin=self._last_origin(state.committed_version) if with_origin else None,
        )

    def _fresh_state(self) -> LogState:
        """The state as a new process (``deltasink status``) reads it: what this sink
        assumes from its own commits is dropped first (another writer, e.g. plain Delta
        with this app's ``txnAppId``, may have moved the target's marker)."""
        self._backend.refresh()
        return self._core.state()

    def _last_origin(self, committed: int | None) -> BatchOrigin | None:
        """The origin of the newest committed version that recorded one."""
        found: BatchOrigin | None = None
        for limit in (64, None):
            if committed is None:
                break
            entries = self.history(limit)
            found = next((e.origin for e in entries if e.origin is not None), None)
            if found is not None:
                break
        return found

    def gc(
        self, retention: timedelta | float = timedelta(days=7), *, dry_run: bool = False
    ) -> GcResult:
        """Expire staging data nothing needs any more, and compact the staging log.

        Removes files of committed, aborted and abandoned versions (and orphans of
        failed stagings) older than ``retention``, then checkpoints the staging log
        and drops expired log files. Staged, pending versions are never touched.
        Safe to run while the job runs.

        Args:
            retention: Keep unreferenced files younger than this (timedelta or
                seconds), for time travel and forensics.
            dry_run: Only list what would be removed.
        """
        seconds = retention.total_seconds() if isinstance(retention, timedelta) else retention
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ConfigurationError(f"retention must be ≥ 0, got {retention!r}.")
        return self._maintenance.gc(timedelta(seconds=seconds), dry_run=dry_run)

    def optimize(self, *, z_order_by: Sequence[str] = ()) -> None:
        """Compact the target's small files (OPTIMIZE; Z-ORDER by ``z_order_by``).

        Never changes a row, beside live writers and other compactions: the compaction
        commits only if every file it rewrites is still in the target (the spark engine:
        Delta's OPTIMIZE, which refuses the same way). A round that loses to a
        concurrent commit commits nothing and is tried again on the new table state,
        a bounded number of times. Safe to run while the job runs; a writer whose
        commit conflicts with it redoes its commit.

        Raises:
            CommitError: Concurrent commits won every round; nothing was committed.
            UnsupportedTableFeatureError: On the embedded engine, the target uses column
                mapping or deletion vectors (compact it with Delta on Spark).
            ConfigurationError: A ``z_order_by`` column is not a non-partition column of
                the target (embedded engine).
            StorageError: The storage refused a read or a write.
        """
        self._maintenance.optimize(z_order_by)

    def commits_since_optimize(self, limit: int = 1000) -> int:
        """This writer's target commits since the target's last OPTIMIZE (up to
        ``limit``), from the Delta history."""
        return self._maintenance.commits_since_optimize(limit)

    def ledger(self, spark: SparkSession | None = None, *, limit: int | None = None) -> DataFrame:
        """The commit ledger as a Spark DataFrame, one row per committed version.

        Columns: ``app_id``, ``version``, ``target_version`` (the Delta version to
        time-travel to), ``committed_at``, ``operation``, ``rows_inserted``,
        ``rows_updated``, ``rows_deleted``, ``execution_ms``, ``staged_rows``,
        ``commit_versions`` (all versions of that target commit, when coalesced).
        Register it as a view for SQL users: ``sink.ledger().createOrReplaceTempView(
        "orders_ledger")``.

        Args:
            spark: The session to build it on (default: the sink's session, else the
                active one, as on a cluster; the embedded engine only when there is
                none).
            limit: Read at most this many recent target commits.
        """
        session = spark or self._spark or _active_spark()
        if session is None:
            from deltasink.backends.embedded import embedded_spark

            session = embedded_spark()
        frame: DataFrame = spark_frame(session, ledger_table(self.app_id, self.history(limit)))
        return frame

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """This writer's commits to the target, newest first, from the Delta history.

        Args:
            limit: Look at most at this many of the target's most recent commits.
        """
        return self._maintenance.history(limit)
