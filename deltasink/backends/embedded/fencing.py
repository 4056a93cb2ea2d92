"""Creating the staging table and fencing its writers.

Every sink claims a new writer epoch (the table property ``deltasink.epoch``) with a
metadata commit, which Delta's optimistic concurrency turns into fencing: an older
writer's next staging commit conflicts, and its next call sees the newer epoch.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError

from deltasink.backends.deltalog.commits import commit_properties, post_commit_hooks
from deltasink.backends.deltalog.staging import StagingLog, epoch_of
from deltasink.backends.deltalog.tables import plain
from deltasink.core.guards import claim_exhausted
from deltasink.errors import FencedError, StorageError
from deltasink.locations import is_local
from deltasink.ops.layout import (
    FORMAT,
    PROP_APP,
    PROP_EPOCH,
    PROP_FORMAT,
    PROP_SPEC,
    PROP_TARGET,
    VERSION_COLUMN,
)
from deltasink.retry import retry
from deltasink.shapes.spec import MergeSpec

from .retention import LOG_RETENTION, delete_old_log, trimmable

__all__ = ["LOG_SETTINGS", "Fence"]

logger = logging.getLogger("deltasink")

_CLAIM_ATTEMPTS = 20

#: The staging log is deltasink's alone and grows by two commits per batch; delta-rs
#: lists all of it on every read that finds a new commit. Its expired commits go at
#: each checkpoint (every 100 commits): those older than ten minutes, and, with
#: nothing pending, all but the last :data:`~.retention.KEEP_COMMITS` whatever their
#: age (:mod:`.retention`), so reads of it stay short after any number of batches at
#: any rate. Set when the table is created, and at a claim of a table an earlier
#: release made (it kept an hour); a table with another retention keeps it, and is
#: not trimmed by count. A staging table the spark engine created keeps Delta's
#: default: its ledger reads staging commits back to the oldest pending version.
LOG_SETTINGS = {
    "delta.logRetentionDuration": LOG_RETENTION,
    "delta.enableExpiredLogCleanup": "true",
}
_EARLIER_RETENTION = "interval 1 hours"
#: A staging table on an object store checkpoints every this many commits: delta-rs
#: reads every commit since the last checkpoint (one request each, on each marker read)
#: to answer the sink's state reads, and a write makes two staging commits.
OBJECT_STORE_CHECKPOINT_INTERVAL = 10


class Fence:
    """The writer epoch of a staging table (and its creation, which the first claim
    does).

    Args:
        log: The staging table's reader.
    """

    def __init__(self, log: StagingLog) -> None:
        self.log = log

    def claim(self, schema: pa.Schema | None, spec: MergeSpec) -> int | None:
        """Claim a new writer epoch (creating the table first when ``schema`` is given).

        Returns:
            The claimed epoch, or ``None`` when the table does not exist and no
            ``schema`` was given (nothing is staged, so there is nothing to fence).

        Raises:
            CommitError: Other writers with the same app_id kept claiming it.
        """
        table = self.log.open()
        if table is None:
            if schema is None:
                return None
            table = self._create(schema, spec)
        log = self.log

        def once() -> int:
            epoch = epoch_of(table) + 1
            retention = table.metadata().configuration.get("delta.logRetentionDuration")
            settings = LOG_SETTINGS if retention == _EARLIER_RETENTION else {}
            # A claim commit that writes a checkpoint trims the log by count too (a
            # job restarted for every batch may have its checkpoints on claims).
            hooks = post_commit_hooks(table)
            trim = bool(hooks.cleanup_expired_logs) and trimmable(table)
            table.alter.set_table_properties(
                {PROP_EPOCH: str(epoch), **settings},
                raise_if_not_exists=False,
                post_commithook_properties=hooks,
                commit_properties=commit_properties(
                    app_id=log.app_id,
                    version=None,
                    operation="claim-epoch",
                    extra={"deltasink.epoch": epoch},
                ),
            )
            if trim:
                delete_old_log(table)
            return epoch

        epoch = retry(
            once,
            attempts=_CLAIM_ATTEMPTS,
            retryable=lambda exc: isinstance(exc, CommitFailedError),  # a concurrent claim
            exhausted=lambda n, _exc: claim_exhausted(log.uri, log.app_id, n),
            what=f"claiming an epoch on {log.uri}",
            cap=0.0,
            before_retry=table.update_incremental,
        )
        logger.debug("app %r claimed staging epoch %s", log.app_id, epoch)
        return epoch

    def check(self, epoch: int, *, fresh: bool = True) -> DeltaTable | None:
        """The table at its latest version (one log read), if ``epoch`` is still the
        current one; ``None`` if the table is gone (deleted under the sink).

        Args:
            fresh: Read the log first. ``False`` checks the state read last in this
                call, for a caller whose next step is a staging commit: Delta fails
                that commit if any writer claimed since that state was read (a claim
                changes the table's metadata), and the caller then checks again
                freshly (``StagingWriter.record_intent`` in :mod:`.stage`).

        Raises:
            FencedError: A newer writer claimed the table.
        """
        # This sink's own commits without data (the publish intent) leave the table
        # object at them, so a fresh read finds nothing new by one probe of the next
        # commit file (tables.refresh), not by listing the log.
        table = self.log.open(fresh=fresh)
        if table is None:
            return None
        current = epoch_of(table)
        if current != epoch:
            log = self.log
            raise FencedError(
                f"app {log.app_id!r} on {log.target}: another writer with the same app_id "
                f"took over the staging table (epoch {current}; this sink holds epoch "
                f"{epoch}). This sink must stop; the newer writer carries on. If that one "
                "is gone, create a new DeltaSink to take over.",
                epoch=epoch,
                current_epoch=current,
                table=log.uri,
                app_id=log.app_id,
            )
        return table

    def _create(self, schema: pa.Schema, spec: MergeSpec) -> DeltaTable:
        log = self.log
        full = pa.schema([*schema, pa.field(VERSION_COLUMN, pa.int64(), True)])
        try:
            DeltaTable.create(
                log.uri,
                full,
                mode="ignore",  # a concurrent creator wins; the claim sorts it out
                partition_by=[VERSION_COLUMN],
                name="deltasink_staging",
                description=f"deltasink staging for target {log.target}, app {log.app_id}",
                configuration={
                    PROP_TARGET: log.target,
                    PROP_APP: log.app_id,
                    PROP_FORMAT: FORMAT,
                    PROP_SPEC: spec.to_json(),
                    PROP_EPOCH: "0",
                    **LOG_SETTINGS,
                    "delta.deletedFileRetentionDuration": "interval 1 hours",
                    **(
                        {}
                        if is_local(log.uri)
                        else {"delta.checkpointInterval": str(OBJECT_STORE_CHECKPOINT_INTERVAL)}
                    ),
                },
                storage_options=log.options,
                raise_if_key_not_exists=False,
            )
        except (DeltaError, OSError) as exc:
            raise StorageError(
                f"cannot create the staging table at {log.uri}: {plain(exc)}. Check that "
                "the location is a writable directory path (or pass staging=...).",
                table=log.uri,
                app_id=log.app_id,
            ) from exc
        table = log.open()
        assert table is not None
        return table
