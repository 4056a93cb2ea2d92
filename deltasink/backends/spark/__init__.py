"""The Spark backend: the Spark session makes every target commit (and every staging
commit with data), with Delta's own idempotent writes (delta-spark ≥ 2.3, any Databricks runtime, classic or Spark Connect).

What each step does (the staging layout is the embedded backend's, so an operator can
switch engines on the same tables; see ``docs/spark-backend.md``):

* **stage**: the batch is validated on Spark (schema checks on the schema, null and
  duplicate-key checks as one aggregation, nothing collected to the driver), then
  appended to the staging table partitioned by ``_deltasink_version`` with the
  DataFrameWriter options ``txnAppId``/``txnVersion`` and a ``userMetadata`` naming
  the version and its columns: ONE Delta commit. An empty batch writes no file (Spark's
  Delta writer writes none for a partitioned table) but still makes that commit,
  tagged ``stage-empty``; the staging table's history is how such a version is found.
* **publish**: the staged rows are MERGEd into the target by ``MERGE INTO`` compiled
  from the same :class:`~deltasink.shapes.merge.MergePlan` as the embedded engine's, with the
  SQL confs ``spark.databricks.delta.write.txnAppId``/``.txnVersion`` (and
  ``commitInfo.userMetadata``) set around that one statement and restored afterwards
  (:mod:`~deltasink.backends.spark.conf`): the data change and ``txn(app_id, version)`` are one
  commit, and Delta itself skips a replay.
* **direct publish** (``write()`` with nothing pending): the validated frame is MERGEd
  the same way without being staged, then one staging commit without data records the
  committed mark (by delta-rs where it reads the logs, else by Spark).
* **read the logs**: through delta-rs when the tables are paths it can open (the
  target's ``txn`` version, the staging partitions); otherwise through Spark
  (``DESCRIBE HISTORY`` ``userMetadata`` and a ``GROUP BY`` over the staging
  partitions), where Delta's ``txn`` check is what makes a re-applied version a no-op.
* **fencing**: the writer epoch is the staging table property ``deltasink.epoch``,
  claimed with ``ALTER TABLE ... SET TBLPROPERTIES``: a metadata change, which Delta
  makes conflict with every concurrent staging commit.

The modules, one concept each:

* :mod:`~deltasink.backends.spark.backend`: :class:`SparkBackend`, the commit port,
  wiring the parts below; :mod:`~deltasink.backends.spark.maintenance`: the
  maintenance port.
* :mod:`~deltasink.backends.spark.tables`: table references, DDL, SQL literals.
* :mod:`~deltasink.backends.spark.session`: statements and ``txn``-tagged writes on the
  session; :mod:`~deltasink.backends.spark.conf`: the scoped ``txn`` confs;
  :mod:`~deltasink.backends.spark.errors`: which errors are conflicts, by type.
* :mod:`~deltasink.backends.spark.validate`: batch validation on Spark;
  :mod:`~deltasink.backends.spark.keys`: the batch's keys (normalised, bounded, one row
  per key).
* :mod:`~deltasink.backends.spark.ledger`: the staging history's ``userMetadata``
  records (empty versions, columns per version).
* :mod:`~deltasink.backends.spark.logs`: the writer's state from both logs, read by one
  of the two readers of :mod:`~deltasink.backends.spark.readers` (delta-rs or Spark).
* :mod:`~deltasink.backends.spark.schemas`: what a batch must fit.
* :mod:`~deltasink.backends.spark.fencing`: the writer epoch.
* :mod:`~deltasink.backends.spark.stage`: writing the staging table.
* :mod:`~deltasink.backends.spark.publish`: the target commit, its marker and retries;
  :mod:`~deltasink.backends.spark.modes`: each mode's statement (``WRITE_MODE``);
  :mod:`~deltasink.backends.spark.sources`: the source query and the MERGE;
  :mod:`~deltasink.backends.spark.prune`: the MERGE's key-range predicate.
"""

from __future__ import annotations

from deltasink.backends.ports import EngineParts, SinkConfig

from .backend import SparkBackend
from .ledger import StagingLedger
from .logs import LogReader
from .maintenance import SparkMaintenance
from .tables import ddl_type, table_ref
from .validate import prepare_frame

__all__ = [
    "LogReader",
    "SparkBackend",
    "SparkMaintenance",
    "StagingLedger",
    "connect",
    "ddl_type",
    "prepare_frame",
    "table_ref",
]


def connect(config: SinkConfig) -> EngineParts:
    """Open one writer's tables on the spark engine (nothing is read or written yet)."""
    commit = SparkBackend(
        spark=config.spark,
        target=config.target,
        staging=config.staging,
        app_id=config.app_id,
        spec=config.merge,
        max_attempts=config.max_commit_attempts,
        storage_options=config.storage_options,
        checks=config.checks or (),
        check_samples=config.check_samples,
        table=config.table,
    )
    return EngineParts(commit, commit.maintenance())
