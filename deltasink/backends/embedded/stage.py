"""Writing the staging table: stage, re-stage and drop versions, and record the spec,
the checks, the quarantine and the publish intent.

Staging version ``v`` writes its rows (possibly zero) to one Parquet file in partition
``v`` and commits it in ONE Delta commit carrying ``txn(app_id, v)`` and commit
metadata. Clean-up commits also record ``txn("<app_id>#committed", v)``, the highest
version the writer saw committed (:class:`~deltasink.core.guards.MarkGuard`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from deltasink import _faults
from deltasink.backends.deltalog.commits import commit_properties, now_ms, post_commit_hooks
from deltasink.backends.deltalog.staging import StagingLog, props
from deltasink.backends.deltalog.tables import arrow_schema, note_commit
from deltasink.core.protocol import DiscardReason, StagedVersion
from deltasink.errors import StorageError
from deltasink.locations import is_local
from deltasink.ops.layout import (
    COMMITTED_SUFFIX,
    INTENT_SUFFIX,
    PROP_CHECKS,
    PROP_SPEC,
    VERSION_COLUMN,
)
from deltasink.ops.origin import ORIGIN_KEY
from deltasink.shapes.spec import MergeSpec

from .fencing import Fence
from .retention import log_commit  # the commit, then the log kept by count

__all__ = ["STAGING_PARQUET", "StagingWriter"]

logger = logging.getLogger("deltasink")

#: Staged files are short-lived and read back whole, once: favour writing speed.
STAGING_PARQUET: dict[str, Any] = {
    "compression": "lz4",
    "use_dictionary": False,
    "write_statistics": False,
}


class StagingWriter:
    """The staging table's commits (every one checks the writer epoch first).

    Args:
        log: The staging table's reader.
        epochs: Its fencing.
    """

    def __init__(self, log: StagingLog, epochs: Fence) -> None:
        self.log = log
        self.epochs = epochs

    # -- versions --------------------------------------------------------------------

    def append(
        self,
        version: int,
        data: pa.Table,
        *,
        epoch: int,
        verified: bool = False,
        intent: bool = False,
        origin: str | None = None,
    ) -> StagedVersion:
        """Stage ``data`` as ``version`` in one Delta commit with ``txn(app_id, version)``
        (and, with ``intent``, the publish intent of :meth:`record_intent`, for a
        version published right after: ``write()``). ``origin``: the encoded
        :class:`~deltasink.ops.origin.BatchOrigin` of the batch, kept in the commit's
        metadata so that a later publish of the version (``recover()``) records it.

        A failure before the commit leaves at most an unreferenced file (removed here
        when possible, otherwise by ``VACUUM``); the version is then not staged.

        Args:
            verified: The caller checked ``epoch`` on the latest snapshot just now.

        Raises:
            FencedError: ``epoch`` is no longer current (checked before writing, and
                again if the commit conflicts).
        """
        return self._commit_version(
            version,
            data,
            epoch=epoch,
            replace=False,
            verified=verified,
            intent=intent,
            origin=origin,
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
        origin: str | None = None,
    ) -> StagedVersion:
        log = self.log
        table = log.open(fresh=False) if verified else self.epochs.check(epoch)
        if table is None:
            raise StorageError(
                f"the staging table {log.uri} disappeared while staging version {version}.",
                table=log.uri,
                app_id=log.app_id,
                version=version,
            )
        _evolve(table, data.schema)
        properties = commit_properties(
            app_id=log.app_id,
            version=version,
            operation="restage" if replace else "stage",
            markers={log.app_id + INTENT_SUFFIX: version} if intent else None,
            extra={
                "deltasink.rows": data.num_rows,
                "deltasink.target": log.target,
                "deltasink.epoch": epoch,
                **({ORIGIN_KEY: origin} if origin is not None else {}),
            },
        )
        if not replace and _written_by_delta_rs(table, data, log.uri):
            stamp = now_ms()
            _faults.point("stage.after_files")  # here: before the file is written
            try:
                log_commit(table, [], properties, data=_with_version(data, version))
            except CommitFailedError:
                self.epochs.check(epoch)  # a newer writer's claim is the usual cause
                raise
            _faults.point("stage.after_log_commit")
            return StagedVersion(
                version, data.num_rows, datetime.fromtimestamp(stamp / 1000, timezone.utc)
            )
        removes = _removes(table, [version]) if replace else []
        relative = f"{VERSION_COLUMN}={version}/part-{uuid.uuid4()}.c000.parquet"
        fs = log.filesystem()
        fs.create_dir(relative.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(relative) as out:
            with pq.ParquetWriter(out, data.schema, **STAGING_PARQUET) as writer:
                writer.write_table(data)
            size = out.tell()  # what was written: no request to the store for it
        stamp = now_ms()
        try:
            _faults.point("stage.after_files")
            add = AddAction(
                path=relative,
                size=size,
                partition_values={VERSION_COLUMN: str(version)},
                modification_time=stamp,
                data_change=True,
                stats=json.dumps({"numRecords": data.num_rows}),
            )
            log_commit(table, [*removes, add], properties)
        except CommitFailedError:
            _remove_orphan(fs, relative)
            self.epochs.check(epoch)  # a newer writer's claim is the usual cause
            raise
        except BaseException:
            _remove_orphan(fs, relative)
            raise
        _faults.point("stage.after_log_commit")
        return StagedVersion(
            version, data.num_rows, datetime.fromtimestamp(stamp / 1000, timezone.utc)
        )

    def drop(
        self,
        versions: Sequence[int],
        *,
        reason: DiscardReason,
        epoch: int | None,
        verified: bool = False,
    ) -> None:
        """Remove the staged data of ``versions`` in one Delta commit (with reason
        ``"committed"``, the commit also records the committed mark).

        The files stay on storage (reachable by time travel) until ``VACUUM`` removes
        them after the table's retention; that is how aborted and abandoned versions
        remain inspectable for a while.
        """
        log = self.log
        if not versions or log.open(fresh=False) is None:
            return
        if verified or epoch is None:
            table = log.open(fresh=not verified)
        else:
            table = self.epochs.check(epoch)
        if table is None:
            return
        _faults.point("discard.before_log_commit")
        if reason != "committed":
            for version in versions:
                self.set_quarantine(version, None, epoch=epoch)
            table = log.open()
            assert table is not None
        properties = commit_properties(
            app_id=log.app_id,
            version=None,
            operation=f"discard-{reason}",
            extra={"deltasink.versions": sorted(versions)},
        )
        if reason == "committed":
            properties.app_transactions = [
                Transaction(
                    app_id=log.app_id + COMMITTED_SUFFIX,
                    version=max(versions),
                    last_updated=now_ms(),
                )
            ]
        # The files of a partition, removed by one commit of their remove actions: a
        # DELETE by partition predicate does the same, after planning a scan. The
        # table object then reads that commit, as a DELETE would have updated it: a
        # later commit made on this state must not see its own removes as a conflict.
        base = table.version()
        try:
            log_commit(table, _removes(table, versions), properties)
        except CommitFailedError:
            if epoch is not None:
                self.epochs.check(epoch)  # a newer writer's claim is the usual cause
            raise
        table.update_incremental()
        # its markers known without reading it back (the committed mark, when recorded)
        note_commit(table, base, {t.app_id: t.version for t in properties.app_transactions or ()})

    # -- records ---------------------------------------------------------------------

    def record_intent(
        self, version: int, *, epoch: int, verified: bool = False, mark: int | None = None
    ) -> None:
        """Record, in one commit, that a target commit of versions up to ``version``
        is about to be attempted (``txn("<app_id>#publishing", version)``).

        Args:
            verified: The caller checked ``epoch`` on the state read in this call; the
                commit is made on that state without reading the log again. Safe: a
                claim since then changed the table's metadata, so Delta fails this
                commit, and the epoch is then checked freshly.
            mark: The committed mark to record in the same commit
                (``txn("<app_id>#committed", mark)``): the version the caller saw
                committed, which a direct publish did not record (no commit of its own).

        Raises:
            FencedError: ``epoch`` is no longer current.
        """
        markers = {self.log.app_id + INTENT_SUFFIX: version}
        if mark is not None:
            markers[self.log.app_id + COMMITTED_SUFFIX] = mark
        self._marker_commit("publish-intent", markers, epoch, verified)

    def _marker_commit(
        self, operation: str, markers: dict[str, int], epoch: int, verified: bool
    ) -> None:
        """One commit without data carrying ``txn(marker, version)`` for each of
        ``markers``, after an epoch check (on the state read last when ``verified``)."""
        table = self.epochs.check(epoch, fresh=not verified)
        if table is None:
            return
        properties = commit_properties(
            app_id=self.log.app_id,
            version=None,
            operation=operation,
            markers=markers,
            extra={"deltasink.epoch": epoch, "deltasink.commitId": uuid.uuid4().hex},
        )
        try:
            # The table object moves to this commit (its markers known, no listing).
            log_commit(table, [], properties)
        except CommitFailedError:
            # Only a metadata (or protocol) change since the state read fails a
            # commit without data: the usual one is a newer writer's claim.
            self.epochs.check(epoch)
            raise

    def record_checks(self, encoded: str) -> None:
        """Record the job's checks (one commit, only when they changed)."""
        table = self.log.open(fresh=False)
        if table is not None and props(table).get(PROP_CHECKS) != encoded:
            table.alter.set_table_properties({PROP_CHECKS: encoded}, raise_if_not_exists=False)
            table.update_incremental()

    def record_spec(self, spec: MergeSpec) -> None:
        """Record ``spec`` as the one future versions are staged with."""
        table = self.log.open()
        if table is not None and props(table).get(PROP_SPEC) != spec.to_json():
            table.alter.set_table_properties({PROP_SPEC: spec.to_json()}, raise_if_not_exists=False)

    def set_quarantine(self, version: int, reason: str | None, *, epoch: int | None) -> None:
        """Record (``reason``) or lift (``None``) the quarantine of ``version``."""
        log = self.log
        table = self.epochs.check(epoch) if epoch is not None else log.open()
        if table is None:
            return
        records = log.quarantine(fresh=False)
        if reason is None and version not in records:
            return
        records = (
            records.with_version(version, reason)
            if reason is not None
            else records.without([version])
        )
        table.alter.set_table_properties(
            records.to_props(),
            raise_if_not_exists=False,
            post_commithook_properties=post_commit_hooks(table),
            commit_properties=commit_properties(
                app_id=log.app_id,
                version=None,
                operation="quarantine" if reason else "release",
                extra={"deltasink.versions": [version]},
            ),
        )


def _written_by_delta_rs(table: DeltaTable, data: pa.Table, uri: str) -> bool:
    """Whether the staged file of ``data`` is written by delta-rs, in the commit's own
    call: on an object store, for rows whose schema is the staging table's (so the file
    reads back with the columns and types the version was staged with). deltalake's
    Python output stream uploads a file in parts (three requests on S3, two on Azure);
    delta-rs puts a small one in one request, and the commit moves the table object to
    it (no listing to see it afterwards). Locally, and for an empty version (a file is
    written even for zero rows: the version is a partition of the snapshot), the file
    is written here (:data:`STAGING_PARQUET`) and committed as written."""
    if is_local(uri) or data.num_rows == 0:
        return False
    staged = arrow_schema(table)
    return pa.schema([f for f in staged if f.name != VERSION_COLUMN]) == data.schema


def _with_version(data: pa.Table, version: int) -> pa.Table:
    """``data`` with its partition column."""
    return data.append_column(
        pa.field(VERSION_COLUMN, pa.int64()), pa.array(np.full(data.num_rows, version, np.int64))
    )


def _evolve(table: DeltaTable, schema: pa.Schema) -> None:
    """Add the columns of ``schema`` the staging table does not have yet."""
    current = arrow_schema(table)
    new = [f for f in schema if f.name not in current.names]
    if new:
        table.alter.add_columns([Field.from_arrow(f) for f in new])


def _removes(table: DeltaTable, versions: Sequence[int]) -> list[RemoveAction]:
    """Remove actions for every file of ``versions`` in ``table``'s snapshot."""
    actions = pa.table(table.get_add_actions(flatten=True))
    partition = f"partition.{VERSION_COLUMN}"
    mask = pc.is_in(actions.column(partition), pa.array(list(versions), pa.int64()))
    stamp = now_ms()
    return [
        RemoveAction(
            row["path"],
            True,
            stamp,
            size=row["size_bytes"],
            partition_values={VERSION_COLUMN: str(row[partition])},
        )
        for row in actions.filter(mask).select(["path", "size_bytes", partition]).to_pylist()
    ]


def _remove_orphan(fs: pafs.FileSystem, relative: str) -> None:
    try:
        fs.delete_file(relative)
    except Exception:  # the file is unreferenced: VACUUM removes it later
        logger.debug("could not remove orphan staging file %s", relative)
