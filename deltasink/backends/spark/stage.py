"""Writing the staging table on Spark (the embedded engine's layout, so an operator can
switch engines): create it, append a version in ONE commit tagged ``txn(app_id,
version)`` with a ``userMetadata`` naming its columns, drop versions by partition, and
record quarantines in its properties.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

from deltasink import _faults
from deltasink.backends.deltalog.commits import commit_properties, log_commit
from deltasink.core.protocol import DiscardReason, StagedVersion
from deltasink.input.sql import quote
from deltasink.ops.history import user_metadata
from deltasink.ops.layout import (
    COMMITTED_SUFFIX,
    FORMAT,
    PROP_APP,
    PROP_EPOCH,
    PROP_FORMAT,
    PROP_SPEC,
    PROP_TARGET,
    VERSION_COLUMN,
    Quarantine,
)
from deltasink.shapes.spec import MergeSpec

from .errors import is_conflict
from .fencing import Fence
from .ledger import LEDGER_SUFFIX
from .logs import SparkLogs
from .session import SparkSql
from .tables import Tables, ddl_columns, fill_select, props_sql
from .validate import PreparedFrame

__all__ = ["StagingWriter"]

logger = logging.getLogger("deltasink")


class StagingWriter:
    """The staging table of one writer, written through Spark.

    Every write checks the writer's epoch before and after (see :class:`Fence`).

    Args:
        sql: The session.
        logs: Reads the staging table back.
        fence: The writer's epoch.
        tables: The writer's tables.
    """

    def __init__(self, sql: SparkSql, logs: SparkLogs, fence: Fence, tables: Tables) -> None:
        self._sql = sql
        self._logs = logs
        self._fence = fence
        self.tables = tables

    def create(self, prepared: PreparedFrame, spec: MergeSpec) -> None:
        """``CREATE TABLE IF NOT EXISTS`` with the owner properties in its first commit
        (a concurrent creator wins; the epoch claim that follows sorts writers out)."""
        t = self.tables
        columns = ddl_columns(prepared.frame.schema)
        props = {
            PROP_TARGET: t.target,
            PROP_APP: t.app_id,
            PROP_FORMAT: FORMAT,
            PROP_SPEC: spec.to_json(),
            PROP_EPOCH: "0",
        }
        try:
            self._sql.sql(
                f"CREATE TABLE IF NOT EXISTS {t.staging_ref} ({columns}, "
                f"{quote(VERSION_COLUMN)} BIGINT) USING DELTA "
                f"PARTITIONED BY ({quote(VERSION_COLUMN)}) TBLPROPERTIES ({props_sql(props)})",
                user_metadata=user_metadata("create", t.app_id, None),
            )
        except Exception:
            if self._logs.staging_props() is None:
                raise

    def append(
        self,
        version: int,
        prepared: PreparedFrame,
        *,
        operation: str,
        origin: str | None = None,
    ) -> StagedVersion:
        """Stage ``prepared`` as ``version`` in one commit (``operation="restage"``:
        replacing its partition with ``replaceWhere``). New columns are added to the
        staging table first; columns the batch lacks are staged as NULL. ``origin``
        (encoded, :mod:`deltasink.ops.origin`) is kept at the end of the commit's
        ``userMetadata`` for a later publish of the version.

        Raises:
            FencedError: A newer writer claimed the staging table.
        """
        t = self.tables
        self._fence.check()
        staging_schema = self._logs.staging_schema()
        self._sql.add_columns(t.staging_ref, prepared.frame.schema, staging_schema.names)
        staging_schema = self._logs.staging_schema()
        select = fill_select(
            [f for f in staging_schema.fields if f.name != VERSION_COLUMN], prepared.frame.columns
        )
        select.append(f"CAST({version} AS BIGINT) AS {quote(VERSION_COLUMN)}")
        out = prepared.frame.selectExpr(*select)
        op = operation if prepared.rows else "stage-empty"
        metadata = (
            f"{user_metadata(op, t.app_id, version)} columns={json.dumps(list(prepared.columns))}"
        )
        if origin is not None:
            metadata += f" origin={origin}"
        _faults.point("stage.after_files")
        self._fence.check()
        try:
            if operation == "restage":
                self._sql.write(
                    out,
                    t.staging,
                    txn=self.ledger_txn(),
                    user_metadata=metadata,
                    mode="overwrite",
                    options={"replaceWhere": f"{quote(VERSION_COLUMN)} = {version}"},
                )
            else:
                self._sql.write(out, t.staging, txn=(t.app_id, version), user_metadata=metadata)
                if self._logs.state().find(version) is None:
                    # Delta skipped the write: the staging txn of the app is already ≥
                    # version (the version was aborted before). Stage it untagged-by-version.
                    self._sql.write(out, t.staging, txn=self.ledger_txn(), user_metadata=metadata)
        except Exception as exc:
            if is_conflict(exc):
                self._fence.check()  # a newer writer's claim is the usual cause
            raise
        self._fence.check()
        _faults.point("stage.after_log_commit")
        return StagedVersion(version, prepared.rows, datetime.now(timezone.utc))

    def record_mark(self, version: int) -> None:
        """Record ``version`` as committed after a direct publish (nothing staged to
        drop): one commit without data, tagged ``txn("<app_id>#committed", version)``
        (the embedded engine's mark, which Delta skips when it is already ≥ ``version``)
        and with a ``committed`` ledger record (the mark for a Spark reader, and where
        a history read may stop: nothing was pending when it was made).

        Made by delta-rs when delta-rs reads the logs (a commit without data or
        metadata: milliseconds, where a Spark write job takes hundreds; it conflicts
        with no append), else, or if delta-rs cannot commit to the table, by Spark."""
        t = self.tables
        metadata = user_metadata("committed", t.app_id, version)
        log = self._logs.delta_rs_staging
        table = None if log is None else log.open()
        if table is not None:
            properties = commit_properties(
                app_id=t.app_id,
                version=None,
                operation="committed",
                markers={t.app_id + COMMITTED_SUFFIX: version},
                extra={"userMetadata": metadata},
            )
            try:
                log_commit(table, [], properties)
                return
            except Exception as exc:  # e.g. a table feature delta-rs cannot write
                logger.debug("app %r: delta-rs could not record the mark: %s", t.app_id, exc)
        frame = self._sql.session().sql(f"SELECT * FROM {t.staging_ref} LIMIT 0")
        self._sql.write(
            frame, t.staging, txn=(t.app_id + COMMITTED_SUFFIX, version), user_metadata=metadata
        )

    def ledger_txn(self) -> tuple[str, int]:
        """A ``txn`` Delta never skips: ``<app_id>#ledger`` at the next table version."""
        latest = self._logs.staging_commits(1)
        return self.tables.app_id + LEDGER_SUFFIX, (int(latest[0]["version"]) + 1 if latest else 0)

    def drop(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        """Remove the staged data of ``versions`` in one ``DELETE`` (by partition, a
        metadata-only commit); empty versions, which have no data, get a commit that
        records their discard. The caller has checked the epoch."""
        t = self.tables
        listed = sorted(set(versions))
        if reason != "committed":
            self.lift_quarantine(listed)
        metadata = user_metadata(f"discard-{reason}", t.app_id, listed[-1], listed)
        ledger = self._logs.read_ledger(self._logs.committed())
        have = {s.version for s in self._logs.partitions()}
        if any(v in have for v in listed):
            self._sql.sql(
                f"DELETE FROM {t.staging_ref} WHERE {quote(VERSION_COLUMN)} IN "
                f"({', '.join(str(v) for v in listed)})",
                user_metadata=metadata,
            )
        if any(v in ledger.empty for v in listed):
            frame = self._sql.session().sql(f"SELECT * FROM {t.staging_ref} LIMIT 0")
            self._sql.write(frame, t.staging, txn=self.ledger_txn(), user_metadata=metadata)

    def quarantine(self, version: int, reason: str) -> None:
        """Record the quarantine of ``version`` in the staging table's properties."""
        records = Quarantine.from_props(self._logs.staging_props() or {})
        self._sql.set_props(
            self.tables.staging_ref,
            records.with_version(version, reason).to_props(),
            user_metadata("quarantine", self.tables.app_id, version),
        )

    def lift_quarantine(self, versions: Iterable[int]) -> None:
        """Lift the quarantine of those of ``versions`` that are quarantined."""
        listed = list(versions)
        records = Quarantine.from_props(self._logs.staging_props() or {})
        if any(v in records for v in listed):
            self._sql.set_props(
                self.tables.staging_ref,
                records.without(listed).to_props(),
                user_metadata("release", self.tables.app_id, None),
            )
