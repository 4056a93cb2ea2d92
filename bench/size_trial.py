"""One driver application of the size benchmark (:mod:`bench.size`) on its cluster:
``python -m bench.size_trial '<json>'``, started by :mod:`bench.size` with the
cluster's ``SPARK_CONF_DIR`` (master, jars, memory: ``spark-defaults.conf``). It prints
one JSON line last.

``{"cmd": "prepare", ...}`` generates a mode's target and batch on the cluster
(``spark.range``: no row passes through the driver). ``{"cmd": "trial", ...}`` is one
side's write: a steady-state write of an empty version 0 first (untimed: the sink's
staging table made and its epoch claimed, the MERGE's classes loaded), then the timed
write of the batch as version 1, with the driver JVM's and this process's peak RSS
over that write (``VmHWM`` of ``/proc/<pid>/status``, reset through ``clear_refs``
right before it) and the JVM heap pools' peak use (``MemoryPoolMXBean``), then the
resulting target's row count and content hash.

Sides: ``sink`` is deltasink's spark engine (``DeltaSink(..., engine="spark")``,
``sink.write``); ``native`` is Delta's own ``MERGE INTO`` under
``spark.databricks.delta.write.txnAppId``/``txnVersion`` (Delta's idempotent
``foreachBatch`` write): for ``upsert`` ``UPDATE SET * / INSERT *``, for ``scd2`` the
standard SCD2 MERGE of Delta's documentation (the batch's rows twice, once keyed to
close the current row, once with a null key to insert the new one).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

APP = "bench-size"
#: The columns of a mode's target (the content hash reads them in this order).
COLUMNS = {
    "upsert": ("id", "value", "amount", "seq"),
    "scd2": ("id", "value", "amount", "seq", "valid_from", "valid_to", "is_current"),
}


def session(name: str) -> Any:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(name).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def keyspace(mode: str, target_rows: int) -> int:
    """How many keys a mode's target holds: every row its own key (``upsert``); for
    ``scd2`` a current row per key and a closed earlier row for every ninth key, so
    that the history has about ``target_rows`` rows."""
    return target_rows if mode == "upsert" else target_rows - target_rows // 10


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    """The target template (Delta) and the batch (Parquet) of ``args["mode"]``."""
    mode, rows, batch_rows = args["mode"], args["target_rows"], args["batch_rows"]
    spark = session(f"deltasink-size-prepare-{mode}")
    files = max(2, rows // 250_000)
    keys = keyspace(mode, rows)
    row = [
        "id",
        "concat('v1-', CAST(id AS STRING)) AS value",
        "CAST(id % 1000 AS DOUBLE) / 10 AS amount",
        "CAST(1 AS BIGINT) AS seq",
    ]
    target = spark.range(0, keys, numPartitions=files).selectExpr(*row)
    if mode == "scd2":
        current = target.selectExpr(
            "*", "seq AS valid_from", "CAST(NULL AS BIGINT) AS valid_to", "true AS is_current"
        )
        closed = spark.range(0, keys, 9, numPartitions=files).selectExpr(
            "id",
            "concat('v0-', CAST(id AS STRING)) AS value",
            "CAST(0 AS DOUBLE) AS amount",
            "CAST(0 AS BIGINT) AS seq",
            "CAST(0 AS BIGINT) AS valid_from",
            "CAST(1 AS BIGINT) AS valid_to",
            "false AS is_current",
        )
        target = current.unionByName(closed).repartitionByRange(files, "id")
        target = target.sortWithinPartitions("id", "valid_from")
    target.write.format("delta").save(args["template"])
    updates = round(batch_rows * args["updates"])  # the most recent keys, then new ones
    start = keys - updates
    spark.range(start, start + batch_rows, numPartitions=max(2, batch_rows // 250_000)).selectExpr(
        "id",
        "concat('v2-', CAST(id AS STRING)) AS value",
        "CAST(id % 997 AS DOUBLE) / 10 + 1000 AS amount",
        "CAST(2 AS BIGINT) AS seq",
    ).write.parquet(args["batch"])
    counted = spark.read.format("delta").load(args["template"]).count()
    spark.stop()
    return {"target_rows": counted, "keys": keys, "updates": updates, "files": files}


def _native(spark: Any, path: str, mode: str, frame: Any, version: int) -> None:
    """Delta's idempotent ``foreachBatch`` MERGE of ``frame`` as ``version``."""
    frame.createOrReplaceTempView("size_source")
    if mode == "upsert":
        statement = (
            f"MERGE INTO delta.`{path}` t USING size_source s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    else:
        statement = (
            f"MERGE INTO delta.`{path}` t USING ("
            "SELECT s.id AS merge_key, s.* FROM size_source s UNION ALL "
            "SELECT NULL AS merge_key, s.* FROM size_source s "
            f"JOIN delta.`{path}` c ON s.id = c.id WHERE c.is_current AND s.seq > c.valid_from"
            ") u ON t.id = u.merge_key "
            "WHEN MATCHED AND t.is_current AND u.seq > t.valid_from THEN "
            "UPDATE SET is_current = false, valid_to = u.seq "
            "WHEN NOT MATCHED THEN INSERT (id, value, amount, seq, valid_from, valid_to, "
            "is_current) VALUES (u.id, u.value, u.amount, u.seq, u.seq, NULL, true)"
        )
    spark.conf.set("spark.databricks.delta.write.txnAppId", APP)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        spark.sql(statement).collect()
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")
        spark.catalog.dropTempView("size_source")


def _status(pid: int, field: str) -> int:
    """``field`` (``VmHWM``, ``VmRSS``) of ``/proc/<pid>/status``, in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    """``VmHWM`` of ``pid`` back to its current RSS (``clear_refs``, Linux ≥ 4.0)."""
    with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


def trial(args: dict[str, Any]) -> dict[str, Any]:
    """One side's steady-state write of the batch (see the module docstring)."""
    side, mode, path = args["side"], args["mode"], args["target"]
    spark = session(f"deltasink-size-{mode}-{side}-{args['rep']}")
    jvm = spark._jvm  # the driver JVM's pid and memory beans
    pids = {"jvm": int(jvm.java.lang.ProcessHandle.current().pid()), "python": os.getpid()}
    batch = spark.read.parquet(args["batch"])
    sink: Any = None
    if side == "sink":
        from deltasink import DeltaSink, MergeSpec

        spec = (
            MergeSpec(keys=["id"])
            if mode == "upsert"
            else MergeSpec(mode="scd2", keys=["id"], sequence_by="seq")
        )
        sink = DeltaSink(path, APP, spec, engine="spark", spark=spark)

    def write(frame: Any, version: int) -> None:
        if sink is not None:
            sink.write(frame, version)
        else:
            _native(spark, path, mode, frame, version)

    write(batch.where("false"), 0)  # steady state (module docstring)
    pools = [
        p
        for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        if str(p.getType().name()) == "HEAP"
    ]
    jvm.java.lang.System.gc()  # the heap as the write finds it, without the set-up's garbage
    gc.collect()
    base = {name: _status(pid, "VmRSS") for name, pid in pids.items()}
    for pid in pids.values():
        _reset_peak(pid)
    for pool in pools:
        pool.resetPeakUsage()
    start = time.perf_counter()
    write(batch, 1)
    seconds = time.perf_counter() - start
    peak = {name: _status(pid, "VmHWM") for name, pid in pids.items()}
    heap_peak = sum(int(pool.getPeakUsage().getUsed()) for pool in pools)
    columns = ", ".join(COLUMNS[mode])
    found = (
        spark.read.format("delta")
        .load(path)
        .selectExpr("count(1) AS n", f"sum(CAST(xxhash64({columns}) AS DECIMAL(20, 0))) AS h")
        .first()
    )
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first()
    spark.stop()
    return {
        "side": side,
        "mode": mode,
        "rep": args["rep"],
        "seconds": seconds,
        "rss_base": base,
        "rss_peak": peak,
        "heap_peak": heap_peak,
        "rows": int(found["n"]),
        "hash": str(found["h"]),
        "operation": last["operation"],
        "metrics": dict(last["operationMetrics"] or {}),
    }


def main() -> None:
    args = json.loads(sys.argv[1])
    out = prepare(args) if args["cmd"] == "prepare" else trial(args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
