"""deltasink: exactly-once, idempotent writes from PySpark into Delta Lake tables.

Flink's two-phase-commit sink for Spark + Delta: :meth:`DeltaSink.pre_commit` stages a
batch in one Delta commit tagged ``txn(app_id, version)``, :meth:`DeltaSink.commit`
MERGEs staged versions into the target with the marker in the same commit, and
:meth:`DeltaSink.recover` finishes whatever a crash left staged.

    >>> from deltasink import DeltaSink, MergeSpec, embedded_spark
    >>> sink = DeltaSink(target="/lake/orders", app_id="orders-ingest",
    ...                  merge=MergeSpec(keys=["order_id"]))   # doctest: +SKIP
    >>> sink.write(df, version=7)                               # doctest: +SKIP
"""

from __future__ import annotations

import logging as _logging

from deltasink import checks, hooks
from deltasink._version import __version__
from deltasink.backends.embedded.sail import embedded_spark
from deltasink.core.committables import (
    CommitReport,
    CommitResult,
    Committable,
    GcResult,
    StagedVersion,
)
from deltasink.errors import (
    AlreadyCommittedError,
    CheckpointResetError,
    CommitError,
    ConfigurationError,
    ConstraintViolationError,
    DeltaSinkError,
    DuplicateKeyError,
    FencedError,
    ForeignWriterError,
    InvalidInputError,
    InvalidKeyError,
    InvalidVersionError,
    KeyColumnError,
    MarkerLostError,
    NotADeltaTableError,
    QuarantinedError,
    ReplayMismatchError,
    SchemaMismatchError,
    StagingFormatError,
    StagingOwnershipError,
    StorageAccessError,
    StorageError,
    TableDefinitionError,
    UnsafeStoreError,
    UnsupportedTableFeatureError,
    UnverifiableChecksError,
)
from deltasink.group import GroupReport, GroupSnapshot, GroupStatus, SinkGroup
from deltasink.notices import ReplayWarning
from deltasink.ops.history import HistoryEntry
from deltasink.settings import AuditChecks, StoreOptions, Timeouts
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec
from deltasink.sink import DeltaSink, SinkStatus
from deltasink.streaming import ForeachBatchWriter, foreach_batch_writer

# Every module logs to the "deltasink" logger (warnings: stale versions, timeouts,
# failed compactions; errors: quarantined versions). As libraries do, it has a
# NullHandler and no output of its own: the application configures logging (e.g.
# logging.basicConfig(level=logging.INFO)), and its handlers receive the records.
_logging.getLogger("deltasink").addHandler(_logging.NullHandler())

__all__ = [
    "AlreadyCommittedError",
    "AuditChecks",
    "CheckpointResetError",
    "CommitError",
    "CommitReport",
    "CommitResult",
    "Committable",
    "ConfigurationError",
    "ConstraintViolationError",
    "DeltaSink",
    "DeltaSinkError",
    "DuplicateKeyError",
    "FencedError",
    "ForeachBatchWriter",
    "ForeignWriterError",
    "GcResult",
    "GroupReport",
    "GroupSnapshot",
    "GroupStatus",
    "HistoryEntry",
    "InvalidInputError",
    "InvalidKeyError",
    "InvalidVersionError",
    "KeyColumnError",
    "MarkerLostError",
    "MergeSpec",
    "NotADeltaTableError",
    "QuarantinedError",
    "ReplayMismatchError",
    "ReplayWarning",
    "SchemaMismatchError",
    "SinkGroup",
    "SinkStatus",
    "StagedVersion",
    "StagingFormatError",
    "StagingOwnershipError",
    "StorageAccessError",
    "StorageError",
    "StoreOptions",
    "TableDefinitionError",
    "TableSpec",
    "Timeouts",
    "UnsafeStoreError",
    "UnsupportedTableFeatureError",
    "UnverifiableChecksError",
    "__version__",
    "checks",
    "embedded_spark",
    "foreach_batch_writer",
    "hooks",
]
