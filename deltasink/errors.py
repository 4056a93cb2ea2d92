"""Errors raised by deltasink.

Every error derives from :class:`DeltaSinkError`. The tree is shallow and split by
what the caller should do next::

    DeltaSinkError
    ├── InvalidInputError          fix the batch or the call; nothing was written
    │   ├── InvalidVersionError    negative / not an int / goes backwards
    │   │   └── CheckpointResetError a micro-batch of another streaming query (a new
    │   │                          or reset checkpoint) than the writer of the newest
    │   │                          version held (another query, a batch job)
    │   ├── ReplayMismatchError    a micro-batch maps to a version held that does not
    │   │                          record it with these source positions
    │   ├── SchemaMismatchError    batch columns or types do not fit the target
    │   ├── KeyColumnError         key column missing, or a key value is null
    │   │   └── InvalidKeyError    a key value no key can match (NaN in a float key)
    │   ├── DuplicateKeyError      one key twice in a batch without ``sequence_by``
    │   └── ConstraintViolationError rows break a CHECK constraint of the target
    ├── ConfigurationError         fix the sink's configuration or the tables
    │   ├── NotADeltaTableError    the target path holds something that is not Delta
    │   ├── StagingOwnershipError  the staging table belongs to another target or app
    │   ├── StagingFormatError     the staging table has a newer layout than this
    │   │                          release reads: upgrade deltasink
    │   ├── MarkerLostError        the target lost this app's txn marker (rewritten or
    │   │                          expired) while versions are pending: check by hand
    │   ├── UnverifiableChecksError the job's checks include callables an operator's
    │   │                          sink cannot run: recover from the job, or skip them
    │   └── UnsafeStoreError       the storage options declare an object store without
    │                              put-if-absent commits: fix them, or opt in to the risk
    ├── CommitError                the target was not changed for this version;
    │   │                          ``recover()`` finishes the job once the cause is gone
    │   └── AlreadyCommittedError  the version is already committed (e.g. ``abort``)
    ├── FencedError                another live writer with the same app_id took over;
    │   │                          stop this one
    │   └── ForeignWriterError     a writer outside deltasink's fencing committed a
    │                              version of this app inside a coalesced run: stop it
    ├── QuarantinedError           a version failed its checks and waits (raised only
    │                              with ``on_quarantine="raise"``); abort or re-stage it
    └── StorageError               a table's storage or Delta log is unusable (unreadable,
        │                          corrupt, not writable); nothing committed is lost
        └── StorageAccessError     the storage refused the credentials or permissions;
                                   the table is not damaged

Errors carry the context they are about as attributes (``table``, ``app_id``,
``version``, ``column``) so that callers can branch without parsing messages.
Messages say what was found, what was expected and the next step.
"""

from __future__ import annotations

__all__ = [
    "AlreadyCommittedError",
    "CheckpointResetError",
    "CommitError",
    "ConfigurationError",
    "ConstraintViolationError",
    "DeltaSinkError",
    "DuplicateKeyError",
    "FencedError",
    "ForeignWriterError",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidVersionError",
    "KeyColumnError",
    "MarkerLostError",
    "NotADeltaTableError",
    "QuarantinedError",
    "ReplayMismatchError",
    "SchemaMismatchError",
    "StagingFormatError",
    "StagingOwnershipError",
    "StorageAccessError",
    "StorageError",
    "TableDefinitionError",
    "UnsafeStoreError",
    "UnsupportedTableFeatureError",
    "UnverifiableChecksError",
]


class DeltaSinkError(Exception):
    """Root of every error deltasink raises.

    Attributes:
        table: The Delta table (path or name) the error is about, if any.
        app_id: The writer's ``app_id``, if known.
        version: The batch version the error is about, if any.
        column: The column the error is about, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.app_id = app_id
        self.version = version
        self.column = column


class InvalidInputError(DeltaSinkError):
    """The batch or the call's arguments are invalid. Nothing was written."""


class InvalidVersionError(InvalidInputError):
    """The version is negative, not an int, or goes backwards."""


class CheckpointResetError(InvalidVersionError):
    """A micro-batch comes from another streaming query (a deleted, reset or changed
    checkpoint) than the writer of the newest version the app id holds (another query,
    or a batch job): its ``batch_id`` is never taken for a replay. Nothing was written.
    Ways out (the message names them): ``resume=True`` (right after the newest version;
    ``deltasink offsets`` prints the positions), the old checkpoint, or another
    ``app_id``. Also raised when a resumed file-source batch mixes held and new files
    whose rows do not say which file they came from.

    Attributes:
        committed_by: The streaming query id that committed the current version.
        query_id: The query id of the refused micro-batch.
    """

    def __init__(
        self,
        message: str,
        *,
        committed_by: str | None = None,
        query_id: str | None = None,
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id, version=version)
        self.committed_by = committed_by
        self.query_id = query_id


class ReplayMismatchError(InvalidInputError):
    """A micro-batch of the query that wrote the newest version maps to a version the
    app id holds, but that version does not record this batch with these source
    positions (offsets, a file source's files): the checkpoint was restored from an
    older copy that re-planned the batch, or its offsets were changed, so skipping the
    batch as a replay could drop rows. Nothing was written. ``resume=True`` writes a
    file source's batch after the newest version, its held files' rows left out."""


class SchemaMismatchError(InvalidInputError):
    """The batch's columns or types are incompatible with the target table."""


class KeyColumnError(InvalidInputError):
    """A key column is missing from the batch, or a key value is null."""


class InvalidKeyError(KeyColumnError):
    """A key value has no equality to match a target row by: NaN in a floating-point
    key column (NaN equals nothing under IEEE 754, and the engines disagree on it).
    Raised before anything is written; ``column`` names the key column."""


class DuplicateKeyError(InvalidInputError):
    """The same key appears twice in one batch and no ``sequence_by`` orders them."""


class ConstraintViolationError(InvalidInputError):
    """Rows break the target's ``CHECK`` constraint ``constraint`` (null breaks it too)."""

    constraint: str | None = None


class ConfigurationError(DeltaSinkError):
    """The sink's configuration, or the tables it points at, must be fixed first."""


class NotADeltaTableError(ConfigurationError):
    """The target location exists but is not a Delta table."""


class TableDefinitionError(ConfigurationError):
    """The target's definition (partitioning, clustering, properties, comment)
    contradicts the sink's :class:`~deltasink.shapes.table.TableSpec`, or the batch that would
    create the target lacks a column the spec names. Raised before anything is written."""


class UnsupportedTableFeatureError(ConfigurationError):
    """The target uses a Delta table feature the chosen engine cannot write (e.g.
    identity columns, row tracking or liquid clustering on the embedded engine).
    Raised before anything is written.

    Attributes:
        features: The features in question.
    """

    def __init__(self, message: str, *, table: str | None = None, features: list[str]) -> None:
        super().__init__(message, table=table)
        self.features = features


class StagingOwnershipError(ConfigurationError):
    """The staging table records another target or app id than this sink's."""


class StagingFormatError(ConfigurationError):
    """The staging table records a layout format (``deltasink.format``) newer than
    this release reads: a newer deltasink release wrote it. Nothing is read or
    written; upgrade deltasink where this sink runs (docs/guarantees.md,
    "Compatibility")."""


class MarkerLostError(ConfigurationError):
    """The target's ``txn`` marker for this app is below the staging table's committed
    mark (the target was rebuilt, restored or its markers expired) while versions above
    it are staged, any of which the target may hold: none is published; a person
    aborts the versions the target already holds.

    Attributes:
        marker: The target's marker (``None``: none).
        mark: The staging table's committed mark.
    """

    def __init__(
        self,
        message: str,
        *,
        marker: int | None,
        mark: int,
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id, version=version)
        self.marker = marker
        self.mark = mark


class UnverifiableChecksError(ConfigurationError):
    """The staged versions' job has callable checks that a sink without its code (the
    CLI, the maintenance job) cannot run. Nothing was published: recover from the job,
    or pass ``unverifiable_checks="skip"`` (CLI ``--skip-unverifiable-checks``).

    Attributes:
        checks: The names of the checks that cannot be run.
    """

    def __init__(
        self,
        message: str,
        *,
        checks: tuple[str, ...],
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id, version=version)
        self.checks = checks


class UnsafeStoreError(ConfigurationError):
    """The storage options declare an object store on which delta-rs would not create
    Delta commit files only-if-absent (e.g. ``AWS_S3_ALLOW_UNSAFE_RENAME=true``): two
    writers could both win one table version. Raised when the sink is built, before
    anything is written; see :mod:`deltasink.stores`. Remove the options, or opt in
    with ``allow_unsafe_commits=True`` (CLI ``-o deltasink.allow_unsafe_commits=true``).

    Attributes:
        reasons: What each offending option means.
    """

    def __init__(self, message: str, *, table: str | None = None, reasons: tuple[str, ...]) -> None:
        super().__init__(message, table=table)
        self.reasons = reasons


class CommitError(DeltaSinkError):
    """Committing a version failed; the target holds no part of that version.

    Earlier versions of the same call stay committed, the failed version and every
    later one stay staged, and ``recover()`` finishes the job once the cause is gone.

    Attributes:
        report: The :class:`~deltasink.CommitReport` of what the call did commit
            before the failure (may be ``None`` when nothing ran).
    """

    def __init__(
        self,
        message: str,
        *,
        report: object | None = None,
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id, version=version)
        self.report = report


class AlreadyCommittedError(CommitError):
    """The version is already committed to the target and can no longer be changed."""


class FencedError(DeltaSinkError):
    """A newer writer with the same ``app_id`` took over the staging table.

    Kafka's producer-epoch fencing: every :class:`~deltasink.DeltaSink` claims a new
    epoch in the staging table on its first write, and a sink whose epoch is no longer
    the current one refuses to pre-commit, commit or abort. Nothing was written by the
    refused call; the newer writer carries on.

    Attributes:
        epoch: This sink's epoch.
        current_epoch: The epoch recorded in the staging table.
    """

    def __init__(
        self,
        message: str,
        *,
        epoch: int,
        current_epoch: int,
        table: str | None = None,
        app_id: str | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id)
        self.epoch = epoch
        self.current_epoch = current_epoch


class ForeignWriterError(FencedError):
    """Another writer with the same ``app_id``, outside this sink's fencing (a plain
    Delta job writing with ``txnAppId``/``txnVersion``, a replaced process still
    running), committed a version into the target in the moment before the spark
    engine's coalesced commit of a run holding it took its snapshot: that version is in
    the target twice. Raised after that commit (it cannot be undone): stop the other
    writer, check those versions' rows by hand; ``coalesce=False`` keeps Delta's check.

    Attributes:
        versions: The versions the commit applied that the other writer had committed.
    """

    def __init__(
        self,
        message: str,
        *,
        epoch: int,
        versions: tuple[int, ...],
        table: str | None = None,
        app_id: str | None = None,
    ) -> None:
        super().__init__(message, epoch=epoch, current_epoch=epoch, table=table, app_id=app_id)
        self.versions = versions


class QuarantinedError(DeltaSinkError):
    """A version failed its pre-commit checks and is quarantined (raised instead of
    returned under ``DeltaSink(..., on_quarantine="raise")``, e.g. to stop a stream).

    The version stays staged and unpublished, later versions wait behind it; versions
    before it that the call committed stay committed (``report``). Release it with
    ``sink.abort(version)`` (``deltasink abort``) or by re-staging fixed data.

    Attributes:
        reason: The failed check.
        report: The :class:`~deltasink.CommitReport` of the call.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        report: object,
        table: str | None = None,
        app_id: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, table=table, app_id=app_id, version=version)
        self.reason = reason
        self.report = report


class StorageError(DeltaSinkError):
    """A table's storage or Delta log is unusable: the log cannot be read (corrupt,
    torn, files missing), or the location cannot be created or written.

    Nothing committed is lost; a person must repair the storage (restore the
    ``_delta_log`` from a backup, fix permissions or paths). ``table`` names it.
    """


class StorageAccessError(StorageError):
    """The storage refused deltasink's credentials or permissions for a table (an
    object store's 401/403, a denied path). The table is not damaged: fix the
    credentials or grants and run again."""
