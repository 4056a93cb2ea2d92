"""docs/migrating.md's promise, proven against delta-spark: a job that wrote with
``foreachBatch`` + ``MERGE`` and Delta's own ``txnAppId``/``txnVersion`` moves to
deltasink under the same app id and continues after the last version it wrote, on
either engine: nothing written twice, nothing skipped.

The plain job is the pattern the guide starts from: the first micro-batch creates the
table with the ``txnAppId``/``txnVersion`` writer options, later ones run ``MERGE`` with
the ``spark.databricks.delta.write.txnAppId``/``txnVersion`` session confs set around
it. Runs on the delta-spark suite's classic session (the ``delta_spark`` fixture),
beside the embedded engine fed with ``pyarrow`` tables; inside the full suite in that
suite's own process (``CHILD_MODULES``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import DeltaSink, MergeSpec
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]  # the delta-spark suite's session fixture, shared

APP = "orders-foreachbatch"
SCHEMA = pa.schema([("order_id", pa.int64()), ("status", pa.string())])


def rows(batch_id: int) -> pa.Table:
    """Micro-batch ``batch_id``: a new order, and the previous batch's order shipped."""
    new = {"order_id": batch_id + 1, "status": "created"}
    shipped = [{"order_id": batch_id, "status": f"shipped in {batch_id}"}] if batch_id else []
    return pa.Table.from_pylist([new, *shipped], SCHEMA)


def plain_foreach_batch(spark: Any, target: str, df: Any, batch_id: int) -> None:
    """The job before deltasink: Delta's idempotent writes, by hand."""
    if batch_id == 0:  # the first micro-batch creates the table
        writer = df.write.format("delta").option("txnAppId", APP)
        writer.option("txnVersion", str(batch_id)).save(target)
        return
    df.createOrReplaceTempView("batch")
    spark.conf.set("spark.databricks.delta.write.txnAppId", APP)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
    try:
        spark.sql(
            f"MERGE INTO delta.`{target}` t USING batch s ON t.order_id = s.order_id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


# Both engines in make test-delta-spark (FULL): about 11 s each with a warm session,
# too slow for make test's budget (docs/reliability.md, "The test suite's time").
@pytest.mark.parametrize("engine", [pytest.param(e, marks=FULL) for e in ("embedded", "spark")])
def test_deltasink_continues_after_a_plain_foreach_batch_jobs_txn_version(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    target = str(tmp_path / "orders")
    for batch_id in range(3):
        frame = delta_spark.createDataFrame(
            rows(batch_id).to_pylist(), "order_id long, status string"
        )
        plain_foreach_batch(delta_spark, target, frame, batch_id)
    assert support.marker(target, APP) == 2  # what the plain job left: Delta's txn marker
    before = support.table_version(target)

    extra = {"spark": delta_spark} if engine == "spark" else {}
    sink = DeltaSink(target, APP, MergeSpec(keys=["order_id"]), engine=engine, **extra)
    assert sink.status().committed_version == 2

    def batch(batch_id: int) -> Any:
        if engine == "embedded":
            return rows(batch_id)
        return delta_spark.createDataFrame(
            rows(batch_id).to_pylist(), "order_id long, status string"
        )

    replay = sink.write(batch(2), 2)  # the restart's replay of the last plain batch
    assert not replay.results  # nothing to do: already committed
    assert support.table_version(target) == before  # no commit at all
    report = sink.write(batch(3), 3)
    assert list(report.committed_versions) == [3]
    assert support.marker(target, APP) == 3
    assert support.rows(target, sort_by="order_id") == [
        {"order_id": 1, "status": "shipped in 1"},
        {"order_id": 2, "status": "shipped in 2"},
        {"order_id": 3, "status": "shipped in 3"},
        {"order_id": 4, "status": "created"},
    ]
    assert list(support.txn_commits(target, APP)) == [0, 1, 2, 3]
    assert all(len(c) == 1 for c in support.txn_commits(target, APP).values())
