"""The staging table: where pre-committed versions wait, one Delta commit each.

Layout: a Delta table partitioned by ``_deltasink_version``. Staging version ``v``
writes its rows (possibly zero) to one Parquet file in partition ``v`` and commits it
in ONE Delta commit carrying ``txn(app_id, v)`` and commit metadata. The set of
staged versions is therefore the set of partitions in the current snapshot: it is
read from the Delta log alone, checkpoints included, with no extra file of ours.

The table records whom it belongs to in its properties (``deltasink.target``,
``deltasink.appId``), the :class:`~deltasink.MergeSpec` its versions were staged with
(``deltasink.mergeSpec``, so that an operator can recover without the job's code), and
the current writer epoch (``deltasink.epoch``): every sink claims a new epoch with a
metadata commit, which Delta's optimistic concurrency turns into fencing: an older
writer's next staging commit conflicts, and its next call sees the newer epoch.

Clean-up commits also record ``txn("<app_id>#committed", v)``: the highest version the
writer saw committed. It guards against re-applying versions if the target's own
``txn`` marker disappears (the table was rewritten, or its markers expired under
``delta.setTransactionRetentionDuration``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Field, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.fs import DeltaStorageHandler
from deltalake.schema import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from deltasink import _faults
from deltasink.deltalog import (
    arrow_schema,
    commit_properties,
    is_local,
    now_ms,
    plain,
    post_commit_hooks,
    refresh,
)
from deltasink.errors import CommitError, FencedError, StorageError
from deltasink.guards import PROP_APP, PROP_TARGET, check_owner
from deltasink.protocol import DiscardReason, StagedVersion
from deltasink.spec import MergeSpec

__all__ = ["VERSION_COLUMN", "GcResult", "StagingTable"]

logger = logging.getLogger("deltasink")

VERSION_COLUMN = "_deltasink_version"
FORMAT = "1"
PROP_FORMAT = "deltasink.format"
PROP_SPEC = "deltasink.mergeSpec"
PROP_CHECKS = "deltasink.checks"
PROP_EPOCH = "deltasink.epoch"
PROP_QUARANTINE = "deltasink.quarantine"
COMMITTED_SUFFIX = "#committed"
#: ``txn("<app_id>#publishing", v)``: a target commit of versions up to ``v`` may have
#: been made (recorded before it is attempted; see :class:`~deltasink.guards.MarkGuard`).
INTENT_SUFFIX = "#publishing"
#: Staged files are short-lived and read back whole, once: favour writing speed.
STAGING_PARQUET: dict[str, Any] = {
    "compression": "lz4",
    "use_dictionary": False,
    "write_statistics": False,
}
#: Never-referenced files younger than this are kept by gc (a staging in flight).
ORPHAN_SAFETY_HOURS = 1
_CLAIM_ATTEMPTS = 20
_GC_ATTEMPTS = 8


@dataclass(frozen=True)
class GcResult:
    """What :meth:`StagingTable.gc` removed (or would remove, on a dry run).

    Attributes:
        files: Data files no longer referenced by the staging snapshot that were
            older than the retention: committed, aborted and abandoned versions, and
            orphans of failed stagings.
        dry_run: Whether nothing was actually deleted.
    """

    files: tuple[str, ...]
    dry_run: bool


class StagingTable:
    """The staging Delta table of one ``(target, app_id)``, written with delta-rs.

    Args:
        uri: Location of the staging table.
        target: Normalised location of the target it belongs to.
        app_id: The writer it belongs to.
        storage_options: delta-rs storage options (object-store credentials).
    """

    def __init__(
        self,
        uri: str,
        *,
        target: str,
        app_id: str,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.uri = uri
        self.target = target
        self.app_id = app_id
        self._options = dict(storage_options or {})
        self._table: DeltaTable | None = None
        self._fs: pafs.FileSystem | None = None

    # -- reading -----------------------------------------------------------------

    def open(self, *, fresh: bool = True) -> DeltaTable | None:
        """The staging table, or ``None`` if not created yet.

        Args:
            fresh: Bring it to the latest version (one log read). ``False`` reuses the
                state read last, for a caller that just refreshed it in the same call.

        Raises:
            StagingOwnershipError: The table belongs to another target or app.
        """
        if not fresh and self._table is not None:
            return self._table
        table = refresh(self._table, self.uri, self._options)
        if table is not None and table is not self._table:
            self._check_owner(table)
        self._table = table
        return table

    def _check_owner(self, table: DeltaTable) -> None:
        config = table.metadata().configuration
        check_owner(config, staging=self.uri, target=self.target, app_id=self.app_id)

    def versions(self) -> tuple[StagedVersion, ...]:
        """Every staged version, ascending, with its row count and staging time."""
        table = self.open()
        return () if table is None else self._versions(table)

    def snapshot(
        self,
    ) -> tuple[tuple[StagedVersion, ...], dict[int, str], int | None, int | None]:
        """Staged versions, quarantined versions, the committed mark and the publish
        intent, from ONE read of the log."""
        table = self.open()
        if table is None:
            return (), {}, None, None
        intent: int | None = table.transaction_version(self.app_id + INTENT_SUFFIX)
        return self._versions(table), _quarantine_of(table), self._mark(table), intent

    def quarantined(self) -> dict[int, str]:
        """Quarantined versions and why (from the table properties)."""
        table = self.open()
        return {} if table is None else _quarantine_of(table)

    @staticmethod
    def _versions(table: DeltaTable) -> tuple[StagedVersion, ...]:
        actions = pa.table(table.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return ()
        grouped = (
            actions.select([f"partition.{VERSION_COLUMN}", "num_records", "modification_time"])
            .group_by(f"partition.{VERSION_COLUMN}")
            .aggregate([("num_records", "sum"), ("modification_time", "min")])
            .sort_by(f"partition.{VERSION_COLUMN}")
        )
        return tuple(
            StagedVersion(
                version=int(row[f"partition.{VERSION_COLUMN}"]),
                rows=int(row["num_records_sum"] or 0),
                staged_at=datetime.fromtimestamp(row["modification_time_min"] / 1000, timezone.utc),
            )
            for row in grouped.to_pylist()
        )

    def recorded_spec(self, *, fresh: bool = True) -> MergeSpec | None:
        """The MergeSpec recorded in the table, or ``None``."""
        table = self.open(fresh=fresh)
        if table is None:
            return None
        text = table.metadata().configuration.get(PROP_SPEC)
        return MergeSpec.from_json(text) if text else None

    def read(self, version: int) -> pa.Table:
        """The rows staged for ``version``, with the schema they were staged with."""
        return self.read_many([version])[version]

    def read_many(self, versions: Sequence[int], *, fresh: bool = True) -> dict[int, pa.Table]:
        """The rows staged for each of ``versions``, from one read of the log."""
        table = self.open(fresh=fresh)
        if table is None:
            raise FileNotFoundError(f"staging table {self.uri} does not exist")
        actions = pa.table(table.get_add_actions(flatten=True)).select(
            [f"partition.{VERSION_COLUMN}", "path"]
        )
        paths: dict[int, list[str]] = {}
        for row in actions.to_pylist():
            paths.setdefault(int(row[f"partition.{VERSION_COLUMN}"]), []).append(str(row["path"]))
        result = {}
        for version in versions:
            if version not in paths:
                raise FileNotFoundError(f"version {version} is not staged in {self.uri}")
            try:
                dataset = ds.dataset(
                    paths[version], filesystem=self._filesystem(), format="parquet"
                )
                result[version] = dataset.to_table()
            except OSError as exc:
                raise StorageError(
                    f"the staged data of version {version} in {self.uri} cannot be read "
                    f"({plain(exc)}): file not found or unreadable (removed by hand?). "
                    f"Abort version {version} (`deltasink abort`) and let the source send "
                    "it again.",
                    table=self.uri,
                    app_id=self.app_id,
                    version=version,
                ) from exc
        return result

    # -- writing -----------------------------------------------------------------

    def _filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            if is_local(self.uri):  # pyarrow's own filesystem: no Python in the I/O path
                self._fs = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
            else:
                self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self._options))
        return self._fs

    def _create(self, schema: pa.Schema, spec: MergeSpec) -> DeltaTable:
        full = pa.schema([*schema, pa.field(VERSION_COLUMN, pa.int64(), True)])
        try:
            self._create_table(full, spec)
        except (DeltaError, OSError) as exc:
            raise StorageError(
                f"cannot create the staging table at {self.uri}: {plain(exc)}. Check that "
                "the location is a writable directory path (or pass staging=...).",
                table=self.uri,
                app_id=self.app_id,
            ) from exc
        table = self.open()
        assert table is not None
        return table

    def _create_table(self, full: pa.Schema, spec: MergeSpec) -> None:
        DeltaTable.create(
            self.uri,
            full,
            mode="ignore",  # a concurrent creator wins; the claim below sorts it out
            partition_by=[VERSION_COLUMN],
            name="deltasink_staging",
            description=f"deltasink staging for target {self.target}, app {self.app_id}",
            configuration={
                PROP_TARGET: self.target,
                PROP_APP: self.app_id,
                PROP_FORMAT: FORMAT,
                PROP_SPEC: spec.to_json(),
                PROP_EPOCH: "0",
                # The staging log is deltasink's alone and grows by two commits per
                # batch: keep it short so reading it stays fast after many batches.
                "delta.logRetentionDuration": "interval 1 hours",
                "delta.deletedFileRetentionDuration": "interval 1 hours",
                "delta.enableExpiredLogCleanup": "true",
            },
            storage_options=self._options,
            raise_if_key_not_exists=False,
        )

    def epoch(self) -> int | None:
        """The current writer epoch, or ``None`` if the table does not exist."""
        table = self.open()
        if table is None:
            return None
        return int(table.metadata().configuration.get(PROP_EPOCH, "0"))

    def claim(self, schema: pa.Schema | None, spec: MergeSpec) -> int | None:
        """Claim a new writer epoch (creating the table first when ``schema`` is given).

        Returns:
            The claimed epoch, or ``None`` when the table does not exist and no
            ``schema`` was given (nothing is staged, so there is nothing to fence).
        """
        table = self.open()
        if table is None:
            if schema is None:
                return None
            table = self._create(schema, spec)
        for _ in range(_CLAIM_ATTEMPTS):
            epoch = int(table.metadata().configuration.get(PROP_EPOCH, "0")) + 1
            try:
                table.alter.set_table_properties(
                    {PROP_EPOCH: str(epoch)},
                    raise_if_not_exists=False,
                    post_commithook_properties=post_commit_hooks(table),
                    commit_properties=commit_properties(
                        app_id=self.app_id,
                        version=None,
                        operation="claim-epoch",
                        extra={"deltasink.epoch": epoch},
                    ),
                )
            except CommitFailedError:  # another writer claimed at the same time
                table.update_incremental()
                continue
            logger.debug("app %r claimed staging epoch %s", self.app_id, epoch)
            return epoch
        raise CommitError(
            f"could not claim a writer epoch on {self.uri} after {_CLAIM_ATTEMPTS} attempts: "
            "other writers with the same app_id keep claiming it. Run one writer per app_id.",
            table=self.uri,
            app_id=self.app_id,
        )

    def check_epoch(self, epoch: int) -> DeltaTable | None:
        """The table at its latest version (one log read), if ``epoch`` is still the
        current one; ``None`` if the table is gone (deleted under the sink).

        Raises:
            FencedError: A newer writer claimed the table.
        """
        table = self.open()
        if table is None:
            return None
        current = int(table.metadata().configuration.get(PROP_EPOCH, "0"))
        if current != epoch:
            raise FencedError(
                f"app {self.app_id!r} on {self.target}: another writer with the same app_id "
                f"took over the staging table (epoch {current}; this sink holds epoch "
                f"{epoch}). This sink must stop; the newer writer carries on. If that one "
                "is gone, create a new DeltaSink to take over.",
                epoch=epoch,
                current_epoch=current,
                table=self.uri,
                app_id=self.app_id,
            )
        return table

    def _evolve(self, table: DeltaTable, schema: pa.Schema) -> None:
        current = arrow_schema(table)
        new = [f for f in schema if f.name not in current.names]
        if new:
            table.alter.add_columns([Field.from_arrow(f) for f in new])

    def committed_mark(self) -> int | None:
        """The highest committed version recorded by a clean-up commit, if any."""
        table = self.open()
        if table is None:
            return None
        return self._mark(table)

    def _mark(self, table: DeltaTable) -> int | None:
        mark: int | None = table.transaction_version(self.app_id + COMMITTED_SUFFIX)
        return mark

    def record_intent(self, version: int, *, epoch: int) -> None:
        """Record, in one commit, that a target commit of versions up to ``version``
        is about to be attempted (``txn("<app_id>#publishing", version)``).

        Raises:
            FencedError: ``epoch`` is no longer current.
        """
        table = self.check_epoch(epoch)
        if table is None:
            return
        _log_commit(
            table,
            [],
            commit_properties(
                app_id=self.app_id,
                version=None,
                operation="publish-intent",
                markers={self.app_id + INTENT_SUFFIX: version},
                extra={"deltasink.epoch": epoch},
            ),
        )
        table.update_incremental()

    def recorded_checks(self, *, fresh: bool = True) -> str | None:
        """The job's checks as recorded (:func:`deltasink.checks.encode`), or ``None``."""
        table = self.open(fresh=fresh)
        return None if table is None else table.metadata().configuration.get(PROP_CHECKS)

    def record_checks(self, encoded: str) -> None:
        """Record the job's checks (one commit, only when they changed)."""
        table = self.open(fresh=False)
        if table is not None and table.metadata().configuration.get(PROP_CHECKS) != encoded:
            table.alter.set_table_properties({PROP_CHECKS: encoded}, raise_if_not_exists=False)
            table.update_incremental()

    def record_spec(self, spec: MergeSpec) -> None:
        """Record ``spec`` as the one future versions are staged with."""
        table = self.open()
        if table is not None and table.metadata().configuration.get(PROP_SPEC) != spec.to_json():
            table.alter.set_table_properties({PROP_SPEC: spec.to_json()}, raise_if_not_exists=False)

    def append(
        self,
        version: int,
        data: pa.Table,
        *,
        epoch: int,
        verified: bool = False,
        intent: bool = False,
    ) -> StagedVersion:
        """Stage ``data`` as ``version`` in one Delta commit with ``txn(app_id, version)``
        (and, with ``intent``, the publish intent of :meth:`record_intent`, for a
        version published right after: ``write()``).

        A failure before the commit leaves at most an unreferenced file (removed here
        when possible, otherwise by ``VACUUM``); the version is then not staged.

        Raises:
            FencedError: ``epoch`` is no longer current (checked before writing, and
                again if the commit conflicts).
        """
        return self._commit_version(
            version, data, epoch=epoch, replace=False, verified=verified, intent=intent
        )

    def replace(self, version: int, data: pa.Table, *, epoch: int) -> StagedVersion:
        """Replace the staged data of ``version`` with ``data`` in ONE commit (the old
        files removed, the new one added), lifting its quarantine first.

        Lifting first is the safe order: after a crash in between, the old data is
        audited again by the next commit and quarantined again if it still fails.
        """
        self.set_quarantine(version, None, epoch=epoch)
        return self._commit_version(version, data, epoch=epoch, replace=True)

    def _commit_version(
        self,
        version: int,
        data: pa.Table,
        *,
        epoch: int,
        replace: bool,
        verified: bool = False,
        intent: bool = False,
    ) -> StagedVersion:
        table = self.open(fresh=False) if verified else self.check_epoch(epoch)
        if table is None:
            raise StorageError(
                f"the staging table {self.uri} disappeared while staging version {version}.",
                table=self.uri,
                app_id=self.app_id,
                version=version,
            )
        self._evolve(table, data.schema)
        removes = self._removes(table, version) if replace else []
        directory = f"{VERSION_COLUMN}={version}"
        relative = f"{directory}/part-{uuid.uuid4()}.c000.parquet"
        fs = self._filesystem()
        fs.create_dir(directory, recursive=True)
        with (
            fs.open_output_stream(relative) as out,
            pq.ParquetWriter(out, data.schema, **STAGING_PARQUET) as writer,
        ):
            writer.write_table(data)
        try:
            _faults.point("stage.after_files")
            now_ms = int(time.time() * 1000)
            add = AddAction(
                path=relative,
                size=fs.get_file_info(relative).size,
                partition_values={VERSION_COLUMN: str(version)},
                modification_time=now_ms,
                data_change=True,
                stats=json.dumps({"numRecords": data.num_rows}),
            )
            _log_commit(
                table,
                [*removes, add],
                commit_properties(
                    app_id=self.app_id,
                    version=version,
                    operation="restage" if replace else "stage",
                    markers={self.app_id + INTENT_SUFFIX: version} if intent else None,
                    extra={
                        "deltasink.rows": data.num_rows,
                        "deltasink.target": self.target,
                        "deltasink.epoch": epoch,
                    },
                ),
            )
        except CommitFailedError:
            self._remove_orphan(fs, relative)
            self.check_epoch(epoch)  # a newer writer's claim is the usual cause
            raise
        except BaseException:
            self._remove_orphan(fs, relative)
            raise
        _faults.point("stage.after_log_commit")
        return StagedVersion(
            version, data.num_rows, datetime.fromtimestamp(now_ms / 1000, timezone.utc)
        )

    @staticmethod
    def _removes(table: DeltaTable, version: int) -> list[RemoveAction]:
        actions = pa.table(table.get_add_actions(flatten=True))
        mask = pc.equal(
            actions.column(f"partition.{VERSION_COLUMN}"), pa.scalar(version, pa.int64())
        )
        now_ms = int(time.time() * 1000)
        return [
            RemoveAction(
                row["path"],
                True,
                now_ms,
                size=row["size_bytes"],
                partition_values={VERSION_COLUMN: str(version)},
            )
            for row in actions.filter(mask).select(["path", "size_bytes"]).to_pylist()
        ]

    def set_quarantine(self, version: int, reason: str | None, *, epoch: int | None) -> None:
        """Record (``reason``) or lift (``None``) the quarantine of ``version``."""
        table = self.check_epoch(epoch) if epoch is not None else self.open()
        if table is None:
            return
        records = _quarantine_records(table)
        if reason is None and str(version) not in records:
            return
        if reason is not None:
            records[str(version)] = {
                "reason": reason,
                "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
        else:
            records.pop(str(version))
        table.alter.set_table_properties(
            {PROP_QUARANTINE: json.dumps(records, sort_keys=True)},
            raise_if_not_exists=False,
            post_commithook_properties=post_commit_hooks(table),
            commit_properties=commit_properties(
                app_id=self.app_id,
                version=None,
                operation="quarantine" if reason else "release",
                extra={"deltasink.versions": [version]},
            ),
        )

    @staticmethod
    def _remove_orphan(fs: pafs.FileSystem, relative: str) -> None:
        try:
            fs.delete_file(relative)
        except Exception:  # the file is unreferenced: VACUUM removes it later
            logger.debug("could not remove orphan staging file %s", relative)

    def drop(
        self,
        versions: Sequence[int],
        *,
        reason: DiscardReason,
        epoch: int | None,
        verified: bool = False,
    ) -> None:
        """Remove the staged data of ``versions`` in one Delta commit.

        The files stay on storage (reachable by time travel) until ``VACUUM`` removes
        them after the table's retention; that is how aborted and abandoned versions
        remain inspectable for a while.
        """
        if not versions or self.open(fresh=False) is None:
            return
        if verified or epoch is None:
            table = self.open(fresh=not verified)
        else:
            table = self.check_epoch(epoch)
        if table is None:
            return
        _faults.point("discard.before_log_commit")
        if reason != "committed":
            for version in versions:
                self.set_quarantine(version, None, epoch=epoch)
            table = self.open()
            assert table is not None
        listed = ", ".join(str(v) for v in sorted(versions))
        props = commit_properties(
            app_id=self.app_id,
            version=None,
            operation=f"discard-{reason}",
            extra={"deltasink.versions": sorted(versions)},
        )
        if reason == "committed":
            props.app_transactions = [
                Transaction(
                    app_id=self.app_id + COMMITTED_SUFFIX,
                    version=max(versions),
                    last_updated=now_ms(),
                )
            ]
        table.delete(
            f"{VERSION_COLUMN} IN ({listed})",
            commit_properties=props,
            post_commithook_properties=post_commit_hooks(table),
        )

    def gc(self, retention: timedelta, *, dry_run: bool = False) -> GcResult:
        """Expire what no staged version needs any more, and compact the log.

        Deletes data files that the current snapshot no longer references and that
        are older than ``retention`` (VACUUM, in whole hours, rounded up so nothing younger goes): the
        staging data of committed, aborted and abandoned versions, and orphans of
        failed stagings. Then writes a
        checkpoint and removes expired log files, so reading the staging state stays
        fast after thousands of versions. Staged versions are never touched.
        """
        table = self.open()
        if table is None:
            return GcResult((), dry_run)
        files: set[str] = set()
        for attempt in range(1, _GC_ATTEMPTS + 1):
            try:
                return GcResult(
                    tuple(sorted(files | self._gc_once(table, retention, dry_run))), dry_run
                )
            except CommitFailedError as exc:
                # A live writer committed to the staging log meanwhile (VACUUM writes
                # commits too): nothing is lost; go again on the new snapshot.
                if attempt == _GC_ATTEMPTS:
                    raise CommitError(
                        f"gc of {self.uri} conflicted with the writer's commits {attempt} "
                        f"times in a row (last: {plain(exc)}). Nothing was lost; run gc "
                        "again later, or from a post-commit hook (hooks.gc_every).",
                        table=self.uri,
                        app_id=self.app_id,
                    ) from exc
                time.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random()))
                table.update_incremental()
        raise AssertionError("unreachable")

    def _gc_once(self, table: DeltaTable, retention: timedelta, dry_run: bool) -> set[str]:
        hours = math.ceil(retention.total_seconds() / 3600)
        props = commit_properties(app_id=self.app_id, version=None, operation="gc")
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
            table.cleanup_metadata()
            if is_local(self.uri):
                self._remove_empty_directories(table)
        return files

    def _remove_empty_directories(self, table: DeltaTable) -> None:
        """Remove the empty partition directories VACUUM leaves behind on a local
        filesystem (one per version ever staged), but only of versions at or below
        the committed mark: those are never staged again, so no writer is about to
        put a file into them. Object stores have no directories to leave behind."""
        mark = self._mark(table)
        if mark is None:
            return
        prefix = f"{VERSION_COLUMN}="
        with os.scandir(self.uri) as entries:
            for entry in entries:
                if not entry.name.startswith(prefix) or not entry.is_dir():
                    continue
                try:
                    if int(entry.name[len(prefix) :]) <= mark:
                        os.rmdir(entry.path)  # fails, harmlessly, unless empty
                except (ValueError, OSError):
                    continue


def _quarantine_records(table: DeltaTable) -> dict[str, dict[str, str]]:
    text = table.metadata().configuration.get(PROP_QUARANTINE)
    records: dict[str, dict[str, str]] = json.loads(text) if text else {}
    return records


def _quarantine_of(table: DeltaTable) -> dict[int, str]:
    return {int(v): r["reason"] for v, r in _quarantine_records(table).items()}


def _log_commit(
    table: DeltaTable, actions: Sequence[AddAction | RemoveAction], props: CommitProperties
) -> None:
    """Commit ``actions`` (possibly none: markers only) to the staging log as written."""
    table.create_write_transaction(
        list(actions),
        mode="append",
        schema=DeltaSchema.from_arrow(arrow_schema(table)),
        partition_by=[VERSION_COLUMN],
        post_commithook_properties=post_commit_hooks(table),
        commit_properties=props,
    )
