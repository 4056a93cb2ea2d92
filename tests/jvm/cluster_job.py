"""One deltasink job on the spark engine over real delta-spark, run as its own process
by ``tests/test_local_cluster.py`` with a given Spark master: ``local[2]`` (one JVM) or
``local-cluster[2,1,1024]`` (a driver and two executor JVMs, so staging, the MERGE and
recovery run on executors).

The job stages and commits six versions of an upsert with ``sequence_by`` and
``delete_when``, crashes once between staging and the target commit, recovers, and
prints one JSON line: the target's rows, its marker, the commits per version and how
many executors the session had.

Usage: ``python tests/jvm/cluster_job.py MASTER JARS WORK_DIR``
"""

from __future__ import annotations

import json
import os
import sys

import pyspark
from pyspark.sql import SparkSession

from deltasink import CommitError, DeltaSink, MergeSpec
from deltasink._faults import FaultInjected, armed
from tests import support

SPEC = MergeSpec(keys=["id"], sequence_by="seq", delete_when="op = 'D'")


def batch(spark: SparkSession, version: int) -> object:
    """200 keys per version, overlapping the previous one; some rows delete their key."""
    return spark.range(version * 120, version * 120 + 200, numPartitions=2).selectExpr(
        "id",
        f"CAST({version} AS BIGINT) AS seq",
        "CASE WHEN id % 13 = 0 THEN 'D' ELSE 'U' END AS op",
        f"concat('v{version}-', CAST(id AS STRING)) AS value",
    )


def main() -> None:
    master, jars, work = sys.argv[1:4]
    os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))
    # Cheap on tiny tables (tests/support.py), with two shuffle partitions kept so that
    # both executors get tasks.
    conf = {**support.CHEAP_SPARK_CONF, "spark.sql.shuffle.partitions": "2"}
    spark = (
        SparkSession.builder.master(master)
        .config(map=conf)
        .appName("deltasink-cluster-job")
        .config("spark.jars", jars)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    target = os.path.join(work, "orders")

    sink = DeltaSink(target, "cluster", SPEC, engine="spark", spark=spark)
    sink.write(batch(spark, 0), 0)
    sink.pre_commit(batch(spark, 1), 1)
    sink.pre_commit(batch(spark, 2), 2)
    sink.commit(1)
    with armed("publish.before_target_commit", "raise"):
        try:
            sink.commit(2)
        except CommitError as exc:  # the crash: version 2 stays staged
            if not isinstance(exc.__cause__, FaultInjected):
                raise
    restarted = DeltaSink(target, "cluster", SPEC, engine="spark", spark=spark)
    restarted.pre_commit(batch(spark, 3), 3)  # pending beside the crashed version 2
    restarted.recover()
    for version in (4, 5):
        restarted.write(batch(spark, version), version)
    restarted.write(batch(spark, 5), 5)  # a replay

    executors = spark.sparkContext._jsc.sc().getExecutorIds().size()  # type: ignore[union-attr]
    rows = [
        (r.id, r.seq, r.op, r.value)
        for r in spark.read.format("delta").load(target).orderBy("id").collect()
    ]
    print(
        json.dumps(
            {
                "rows": rows,
                "marker": support.marker(target, "cluster"),
                "commits": {
                    str(k): len(v) for k, v in support.txn_commits(target, "cluster").items()
                },
                "pending": restarted.status().pending_versions,
                "executors": executors,
            }
        ),
        flush=True,
    )
    spark.stop()


if __name__ == "__main__":
    main()
