"""What the two Delta logs say for one writer on the spark engine: its state (committed
version, staged and quarantined versions), the staging ledger (empty versions, columns,
origins) and the recorded spec, built on one of the two raw readers of
:mod:`~deltasink.backends.spark.readers` (delta-rs for path tables it can open, Spark
otherwise)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Literal

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.core.committables import CommitMarks
from deltasink.core.protocol import LogState, StagedVersion
from deltasink.errors import ConfigurationError
from deltasink.input.sql import DELETE_COLUMN
from deltasink.locations import is_local
from deltasink.ops.history import commit_app
from deltasink.ops.layout import PROP_SPEC, VERSION_COLUMN, Quarantine
from deltasink.shapes.spec import MergeSpec

from .ledger import StagingLedger, new_commits
from .readers import DeltaRsSource, LogSource, SparkSource
from .session import SparkSql
from .tables import Tables

__all__ = ["LogReader", "SparkLogs"]

logger = logging.getLogger("deltasink")

LogReader = Literal["auto", "delta-rs", "spark"]


def _uses_delta_rs(reader: LogReader, tables: Tables, options: Mapping[str, str] | None) -> bool:
    if reader not in ("auto", "delta-rs", "spark"):
        raise ConfigurationError(f"log_reader must be auto, delta-rs or spark, got {reader!r}.")
    if tables.target_in_catalog or tables.staging_in_catalog:
        if reader == "delta-rs":
            raise ConfigurationError(
                "log_reader='delta-rs' needs path tables; catalog names are read by Spark.",
                table=tables.target,
            )
        return False
    if reader != "auto":
        return reader == "delta-rs"
    if is_local(tables.target) and is_local(tables.staging):
        return not os.environ.get("DATABRICKS_RUNTIME_VERSION")
    return bool(options)


class SparkLogs:
    """What the two logs say, for one writer; reads incrementally where it can.

    Args:
        sql: The session.
        tables: The writer's tables.
        reader: Who reads the logs (``"auto"``: delta-rs for local paths, except on
            Databricks, and for remote paths with ``storage_options``; Spark otherwise).
        storage_options: delta-rs storage options.

    Raises:
        ConfigurationError: An unknown ``reader``, or ``"delta-rs"`` for catalog names.
    """

    def __init__(
        self,
        sql: SparkSql,
        tables: Tables,
        *,
        reader: LogReader,
        storage_options: Mapping[str, str] | None,
    ) -> None:
        self._sql = sql
        self.tables = tables
        self._source: LogSource = (
            DeltaRsSource(tables, storage_options)
            if _uses_delta_rs(reader, tables, storage_options)
            else SparkSource(sql, tables)
        )
        self.reader: Literal["delta-rs", "spark"] = self._source.name
        self.ledger = StagingLedger(tables.app_id)

    @property
    def delta_rs_staging(self) -> StagingLog | None:
        """The staging table as delta-rs reads it, when delta-rs reads the logs."""
        return self._source.delta_rs_staging

    # -- the staging table -------------------------------------------------------------

    def staging_props(self) -> dict[str, str] | None:
        """The staging table's properties (ownership checked), ``None`` if absent."""
        return self._source.staging_props()

    def recorded_spec(self, props: Mapping[str, str] | None = None) -> MergeSpec | None:
        """The MergeSpec recorded in the staging table, if any (in ``props``, the
        staging properties as read already, when given)."""
        if props is None:
            props = self.staging_props()
        text = None if props is None else props.get(PROP_SPEC)
        return MergeSpec.from_json(text) if text else None

    def staging_commits(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` staging commits, newest first."""
        return self._source.staging_commits(limit)

    def staging_schema(self) -> Any:
        """The staging table's Spark schema."""
        return self._sql.session().sql(f"SELECT * FROM {self.tables.staging_ref} LIMIT 0").schema

    def partitions(self) -> tuple[StagedVersion, ...]:
        """Staged versions that have data files (the staging table's partitions)."""
        return self._source.partitions()

    def read_ledger(self, committed: int | None) -> StagingLedger:
        """The ledger, brought up to the staging table's latest commit."""
        latest = self.staging_commits(1)
        if not latest:
            self.ledger = StagingLedger(self.tables.app_id)
            return self.ledger
        if self.ledger.through is not None and int(latest[0]["version"]) < self.ledger.through:
            self.ledger = StagingLedger(self.tables.app_id)  # the table was recreated
        fresh = new_commits(
            self.staging_commits,
            self.ledger.through,
            lambda c: StagingLedger.stops_scan(c, self.tables.app_id, committed),
        )
        self.ledger.apply(fresh)
        return self.ledger

    def columns(self, version: int) -> tuple[str, ...]:
        """The data columns ``version`` was staged with (its ``userMetadata``); the
        staging table's data columns when that commit is out of reach."""
        if self.ledger.through is None:
            self.state()
        columns = self.ledger.columns.get(version)
        if columns is None:
            skip = {VERSION_COLUMN, DELETE_COLUMN}
            columns = tuple(n for n in self.staging_schema().names if n not in skip)
        return columns

    def origin(self, version: int) -> str | None:
        """The encoded origin ``version`` was staged with, if its commit recorded one."""
        if self.ledger.through is None:
            self.state()
        return self.ledger.origins.get(version)

    # -- the target ----------------------------------------------------------------------

    def target_commits(self, limit: int | None) -> list[dict[str, Any]]:
        """The newest ``limit`` target commits (all of them: ``None``), newest first."""
        return self._source.target_commits(limit)

    def newest_commit(self) -> tuple[int | None, str | None]:
        """The target's newest Delta version and the deltasink app that made it (after a
        lost conflict: who won, or a commit after it)."""
        commits = self.target_commits(1)
        if not commits:
            return None, None
        return int(commits[0]["version"]), commit_app(commits[0])

    def committed(self) -> int | None:
        """The target's committed version: its ``txn`` through delta-rs, else the newest
        deltasink commit of the app in ``DESCRIBE HISTORY`` (``None`` when none is found
        in the recent history: Delta's ``txn`` check then skips re-applied versions)."""
        return self._source.committed()

    def marker_at(self, table_version: int) -> int | None:
        """The app's ``txn`` version in the target's snapshot ``table_version``, where
        delta-rs reads the logs (Spark SQL shows no ``txn`` action: ``None`` there)."""
        if not isinstance(self._source, DeltaRsSource):
            return None
        return self._source.marker_at(table_version)

    def target_exists(self) -> bool:
        """Whether the target table exists yet."""
        return self._source.target_exists()

    def target_properties(self) -> dict[str, str]:
        """The existing target's table properties (its ``CHECK`` constraints among them)."""
        return self._source.target_properties()

    def target_frame(self, session: Any = None) -> Any | None:
        """The target as a Spark DataFrame (for its schema) on ``session`` (default: the
        backend's), or ``None`` if absent."""
        if not self.target_exists():
            return None
        spark = session if session is not None else self._sql.session()
        return spark.sql(f"SELECT * FROM {self.tables.target_ref}")

    # -- both ----------------------------------------------------------------------------

    def state(self) -> LogState:
        """The committed version and the staged versions, from the two logs.

        Staged versions are the staging partitions plus the empty versions the staging
        history records (Spark writes no file for an empty batch). A committed mark in
        the staging table above the target's own marker wins (decided by the core,
        :meth:`LogState.read <deltasink.core.committables.LogState.read>`).
        """
        committed = self.committed()
        props = self.staging_props()
        if props is None:
            return LogState.read(CommitMarks(committed, table=self.tables.target))
        ledger = self.read_ledger(committed)
        marks = self._source.marks(committed, ledger.mark)
        decided = LogState.read(marks)
        committed = decided.committed_version
        parts = self.partitions()
        have = {s.version for s in parts}
        empties = [
            StagedVersion(v, 0, at)
            for v, at in ledger.empty.items()
            if v not in have and (committed is None or v > committed)
        ]
        staged = tuple(sorted([*parts, *empties], key=lambda s: s.version))
        quarantined = Quarantine.from_props(props).reasons()
        return LogState.read(marks, staged, quarantined)
