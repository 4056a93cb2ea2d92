"""The two ways the spark engine reads the raw Delta logs, behind one interface
(:class:`LogSource`): :class:`DeltaRsSource` (delta-rs, for path tables it can open:
the target's ``txn`` version, the staging snapshot's partitions) and
:class:`SparkSource` (``SHOW TBLPROPERTIES``, ``DESCRIBE HISTORY`` and a ``GROUP BY``
over the staging partitions). :class:`~deltasink.backends.spark.logs.SparkLogs` picks one
and builds the writer's state on it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from deltasink.backends.deltalog.history import history
from deltasink.backends.deltalog.staging import StagingLog
from deltasink.backends.deltalog.target import TargetLog
from deltasink.core.committables import CommitMarks
from deltasink.core.guards import check_owner
from deltasink.core.protocol import StagedVersion
from deltasink.input.sql import quote
from deltasink.ops.history import history_from_commits
from deltasink.ops.layout import VERSION_COLUMN

from .definition import read_definition
from .errors import is_missing
from .ledger import new_commits
from .session import SparkSql
from .tables import Tables

__all__ = ["DeltaRsSource", "LogSource", "SparkSource"]


class LogSource(Protocol):
    """What the raw logs say, read one way."""

    #: Who reads: ``"delta-rs"`` or ``"spark"``.
    name: Literal["delta-rs", "spark"]
    #: The staging table as delta-rs reads it (``None``: Spark reads the logs).
    delta_rs_staging: StagingLog | None

    def staging_props(self) -> dict[str, str] | None:
        """The staging table's properties (ownership checked), ``None`` if absent."""
        ...

    def staging_commits(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` staging commits, newest first."""
        ...

    def partitions(self) -> tuple[StagedVersion, ...]:
        """Staged versions that have data files (the staging table's partitions)."""
        ...

    def target_commits(self, limit: int | None) -> list[dict[str, Any]]:
        """The newest ``limit`` target commits (all of them: ``None``), newest first."""
        ...

    def committed(self) -> int | None:
        """The target's committed version for the app (see :meth:`SparkLogs.committed`)."""
        ...

    def target_exists(self) -> bool:
        """Whether the target table exists yet."""
        ...

    def target_properties(self) -> dict[str, str]:
        """The existing target's table properties, as the target was read last."""
        ...

    def marks(self, committed: int | None, mark: int | None) -> CommitMarks:
        """What decides the committed version (in the core), from :meth:`committed` and
        the committed ``mark`` the staging ledger recorded."""
        ...


class DeltaRsSource:
    """The logs of two path tables, read with delta-rs (:mod:`deltasink.backends.deltalog`)."""

    name: Literal["delta-rs", "spark"] = "delta-rs"

    def __init__(self, tables: Tables, storage_options: Mapping[str, str] | None) -> None:
        self.app_id = tables.app_id
        self.table = tables.target
        self.target = TargetLog(tables.target, storage_options=storage_options)
        self.staging = StagingLog(
            tables.staging,
            target=tables.target,
            app_id=tables.app_id,
            storage_options=storage_options,
        )
        self.delta_rs_staging: StagingLog | None = self.staging

    def staging_props(self) -> dict[str, str] | None:
        table = self.staging.open()  # checks the owner
        return None if table is None else dict(table.metadata().configuration)

    def staging_commits(self, limit: int) -> list[dict[str, Any]]:
        table = self.staging.open()
        return [] if table is None else history(table, limit)

    def partitions(self) -> tuple[StagedVersion, ...]:
        return self.staging.versions()

    def target_commits(self, limit: int | None) -> list[dict[str, Any]]:
        table = self.target.open()
        return [] if table is None else history(table, limit)

    def committed(self) -> int | None:
        return self.target.committed_version(self.app_id)

    def marker_at(self, table_version: int) -> int | None:
        return self.target.marker_at(table_version, self.app_id)

    def target_exists(self) -> bool:
        return self.target.open() is not None

    def target_properties(self) -> dict[str, str]:
        table = self.target.open(fresh=False)
        return {} if table is None else dict(table.metadata().configuration)

    def marks(self, committed: int | None, mark: int | None) -> CommitMarks:
        rs_mark = self.staging.committed_mark()
        if rs_mark is not None and (mark is None or rs_mark > mark):
            mark = rs_mark
        # the target's own marker was read: the core warns on a gap
        return CommitMarks(committed, mark, table=self.table)


class SparkSource:
    """The logs of two tables (paths or catalog names), read through Spark SQL."""

    name: Literal["delta-rs", "spark"] = "spark"
    delta_rs_staging: StagingLog | None = None

    def __init__(self, sql: SparkSql, tables: Tables) -> None:
        self._sql = sql
        self.tables = tables
        self._target_through: int | None = None
        self._target_committed: int | None = None

    def staging_props(self) -> dict[str, str] | None:
        t = self.tables
        try:
            rows = self._sql.sql(f"SHOW TBLPROPERTIES {t.staging_ref}")
        except Exception as exc:
            if is_missing(exc):
                return None
            raise
        props = {str(r[0]): str(r[1]) for r in rows}
        check_owner(props, staging=t.staging, target=t.target, app_id=t.app_id)
        return props

    def staging_commits(self, limit: int) -> list[dict[str, Any]]:
        return self._sql.history(self.tables.staging_ref, limit)

    def partitions(self) -> tuple[StagedVersion, ...]:
        rows = self._sql.sql(
            f"SELECT {quote(VERSION_COLUMN)} AS v, count(1) AS n, "
            "unix_millis(min(_metadata.file_modification_time)) AS t "
            f"FROM {self.tables.staging_ref} GROUP BY {quote(VERSION_COLUMN)}"
        )
        found = [
            StagedVersion(
                int(r["v"]), int(r["n"]), datetime.fromtimestamp(r["t"] / 1000, timezone.utc)
            )
            for r in rows
        ]
        return tuple(sorted(found, key=lambda s: s.version))

    def target_commits(self, limit: int | None) -> list[dict[str, Any]]:
        return self._sql.history(self.tables.target_ref, limit or 1_000_000)

    def committed(self) -> int | None:
        app_id, ref = self.tables.app_id, self.tables.target_ref
        latest = self._sql.history(ref, 1)
        if not latest:
            self._target_through = self._target_committed = None
            return None
        if self._target_through is not None and int(latest[0]["version"]) < self._target_through:
            self._target_through = self._target_committed = None  # the table was recreated
        fresh = new_commits(
            lambda n: self._sql.history(ref, n),
            self._target_through,
            lambda c: bool(history_from_commits([c], app_id)),
        )
        for entry in history_from_commits(reversed(fresh), app_id):
            if self._target_committed is None or entry.version > self._target_committed:
                self._target_committed = entry.version
        self._target_through = int(latest[0]["version"])
        return self._target_committed

    def target_exists(self) -> bool:
        spark = self._sql.session()
        if self.tables.target_in_catalog:
            return bool(spark.catalog.tableExists(self.tables.target))
        try:
            spark.sql(f"SELECT * FROM {self.tables.target_ref} LIMIT 0").schema  # noqa: B018
        except Exception as exc:
            if is_missing(exc):
                return False
            raise
        return True

    def target_properties(self) -> dict[str, str]:
        return dict(read_definition(self._sql, self.tables.target_ref).properties)

    def marks(self, committed: int | None, mark: int | None) -> CommitMarks:
        # ``committed`` comes from DESCRIBE HISTORY, which log retention truncates: a
        # higher mark is trusted without a warning
        return CommitMarks(committed, mark, table=self.tables.target, exact=False)
