"""A streaming job on classic JVM PySpark, run as its own process by
``tests/test_streaming_jvm.py`` (a classic session cannot share a process with the
embedded engine's Spark Connect session).

It reads JSON files one per micro-batch (``maxFilesPerTrigger=1``, ``availableNow``)
and writes them with ``writeStream.foreachBatch(sink.foreach_batch)``: on the embedded
engine (default; the micro-batches are classic DataFrames and delta-rs makes the
commits) or, with ``DELTASINK_STREAM_ENGINE=spark`` and ``DELTASINK_DELTA_JARS``, on the
spark engine over real delta-spark.
Progress goes to stdout as JSON lines. It runs on ``local[1]``, or on the cluster
``DELTASINK_SPARK_MASTER`` names (``tests/test_cluster.py``: the executors and Delta's
jars from the cluster's ``spark-defaults.conf`` in ``SPARK_CONF_DIR``).

Issue 24 (a lost or changed checkpoint): ``DELTASINK_STREAM_SOURCE=delta`` reads INPUT
as a Delta table (``readStream.format("delta")``, delta-spark's jars needed) instead of
JSON files, from ``DELTASINK_STREAM_STARTING_VERSION`` when set;
``DELTASINK_STREAM_RESUME=1`` passes ``resume=True`` to ``foreach_batch``. A micro-batch
the sink refuses (:class:`~deltasink.errors.CheckpointResetError`) is reported as a
``refused`` event and the job exits 3.

Usage: ``python tests/jvm/stream_job.py INPUT CHECKPOINT TARGET APP_ID [DELAY_S]``
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from deltasink import CheckpointResetError, DeltaSink, MergeSpec, ReplayMismatchError
from deltasink.backends import select_engine
from deltasink.backends.spark.conf import (
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    delta_txn,
    session_conf,
)
from tests.support import CHEAP_SPARK_CONF


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def conf_checks(spark: Any) -> dict[str, Any]:
    """:mod:`deltasink.backends.spark.conf` on a classic session's ``RuntimeConfig``."""
    key = "spark.deltasink.test.key"
    found: dict[str, Any] = {"before": spark.conf.get(key, None)}
    with session_conf(spark, {key: "inside"}):
        found["inside"] = spark.conf.get(key, None)
    found["after"] = spark.conf.get(key, None)
    spark.conf.set(TXN_APP_ID, "someone-else")
    with delta_txn(spark, "app", 5, user_metadata="deltasink commit app=app version=5"):
        found["txn_inside"] = [
            spark.conf.get(k, None) for k in (TXN_APP_ID, TXN_VERSION, USER_METADATA)
        ]
    found["txn_after"] = [spark.conf.get(k, None) for k in (TXN_APP_ID, TXN_VERSION, USER_METADATA)]
    spark.conf.unset(TXN_APP_ID)
    with session_conf(spark, {"spark.sql.shuffle.partitions": "3"}):
        found["registered_inside"] = spark.conf.get("spark.sql.shuffle.partitions")
    found["registered_after"] = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        with session_conf(spark, {key: "x", "spark.sql.warehouse.dir": "/elsewhere"}):
            pass
    except Exception as exc:  # a static conf cannot be set at runtime
        found["static_error"] = type(exc).__name__
    found["after_static_error"] = spark.conf.get(key, None)
    return found


def run_query(
    spark: Any,
    source: str,
    checkpoint: str,
    target: str,
    app_id: str,
    *,
    engine: str,
    say: Callable[..., None] = say,
    delay: float = 0.0,
    source_format: str = "json",
    starting_version: str | None = None,
    resume: bool = False,
    max_files: int = 1,
    recover: bool = True,
) -> int:
    """One run of the query on ``spark``: 0 when it reached the end of its input, 3 when
    the sink refused a micro-batch (:class:`~deltasink.errors.CheckpointResetError` or
    :class:`~deltasink.errors.ReplayMismatchError`).
    ``main`` runs it in this process's own session; ``tests/test_stream_reset_jvm.py``
    runs it on the delta-spark suite's session (the same query, no JVM of its own)."""
    sink = DeltaSink(target, app_id, MergeSpec(mode="append"), engine=engine, spark=spark)  # type: ignore[arg-type]
    say(
        "started",
        auto=list(select_engine("auto", spark, target)),
        engine=sink.engine,
        engine_reason=sink.engine_reason,
        session=type(spark).__module__,
        conf=conf_checks(spark),
    )
    if recover:
        recovered = sink.recover()
        say("recovered", versions=recovered.committed_versions)

    refused: list[str] = []

    def handle(df: Any, batch_id: int) -> None:
        say("batch", batch=batch_id, frame=type(df).__module__)
        try:
            report = sink.foreach_batch(df, batch_id, resume=resume)
        except CheckpointResetError as exc:
            refused.append(str(exc))
            say("refused", batch=batch_id, committed_by=exc.committed_by, query=exc.query_id)
            raise
        except ReplayMismatchError as exc:
            refused.append(str(exc))
            say("refused", batch=batch_id, mismatch=True)
            raise
        say("committed", batch=batch_id, version=report.committed_version)
        time.sleep(delay)

    if source_format == "delta":
        reader = spark.readStream.format("delta").option("maxFilesPerTrigger", max_files)
        if starting_version:
            reader = reader.option("startingVersion", starting_version)
        stream = reader.load(source)
    else:
        stream = (
            spark.readStream.schema("id long, value string")
            .option("maxFilesPerTrigger", max_files)
            .json(source)
        )
    query = (
        stream.writeStream.foreachBatch(handle)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception:
        if refused:
            return 3
        raise
    status = sink.status()
    say("done", committed=status.committed_version, pending=status.pending_versions)
    return 0


def main() -> None:
    source, checkpoint, target, app_id = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    engine = os.environ.get("DELTASINK_STREAM_ENGINE", "embedded")
    builder = (
        # DELTASINK_SPARK_MASTER: a cluster (tests/cluster.py), its executors and jars
        # from spark-defaults.conf in SPARK_CONF_DIR
        SparkSession.builder.master(os.environ.get("DELTASINK_SPARK_MASTER", "local[1]"))
        .appName("deltasink-stream-test")
        .config(map=CHEAP_SPARK_CONF)  # the suite's cheap settings (tests/support.py)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # For the embedded engine configured without its jars: enough for engine
        # auto-detection to see a Delta-enabled session; the sink below says which.
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    )
    if engine == "spark":  # real delta-spark: Spark makes the commits
        builder = (
            builder.config(
                "spark.jars", os.environ["DELTASINK_DELTA_JARS"].replace(os.pathsep, ",")
            )
            .config(
                "spark.sql.catalog.spark_catalog",
                "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            )
            .config("spark.databricks.delta.snapshotPartitions", "1")
            .config("spark.ui.showConsoleProgress", "false")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    code = run_query(
        spark,
        source,
        checkpoint,
        target,
        app_id,
        engine=engine,
        delay=delay,
        source_format=os.environ.get("DELTASINK_STREAM_SOURCE", "json"),
        starting_version=os.environ.get("DELTASINK_STREAM_STARTING_VERSION"),
        resume=os.environ.get("DELTASINK_STREAM_RESUME") == "1",
    )
    spark.stop()
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
