"""P6: the spark engine against what a Databricks user writes instead.

The baseline is the ``foreachBatch`` idiom from Delta's documentation: ``MERGE INTO``
the target with ``spark.databricks.delta.write.txnAppId`` / ``.txnVersion`` set on the
session for that statement, which makes the MERGE idempotent by itself. deltasink's
spark engine does the same MERGE plus the two-phase commit around it (a staging commit,
reading both logs, fencing, clean-up). Same classic delta-spark session, same input,
identical copies of the target, order alternating, medians.

Cases: a 100k-row batch of recent keys into a 1M-row target, and a 10-row
micro-batch, written by a steady-state sink: before the timing, an empty batch 0 on
both sides (the sink's staging table made and its epoch claimed, as in a running job). Runs in its own process (a classic JVM session cannot share one with the
embedded engine's Spark Connect session):

    python -m bench.p6_delta_spark [--runs N] [--target-rows N] [--out FILE]

Needs delta-spark's jars: ``DELTASINK_DELTA_JARS``, else ``../shared/delta-spark/``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.common import REPO_DIR, Stats, compare, log, machine_info, stats_dict, stopwatch

__all__ = ["delta_spark_session", "main"]

APP = "bench-p6"


def _jars() -> list[str]:
    listed = os.environ.get("DELTASINK_DELTA_JARS")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    return sorted(glob.glob(str(REPO_DIR.parent / "shared" / "delta-spark" / "*.jar")))


def delta_spark_session(app: str = "deltasink-bench-p6") -> Any:
    """A classic ``local[2]`` session with delta-spark (the jars of ``DELTASINK_DELTA_JARS``
    or ``../shared/delta-spark``), a 4 GiB driver; the benchmarks' one JVM."""
    from pyspark.sql import SparkSession

    jars = _jars()
    if not jars:
        raise SystemExit(
            f"{app} needs delta-spark's jars (DELTASINK_DELTA_JARS or ../shared/delta-spark)"
        )
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _batch(spark: Any, version: int, rows: int, target_rows: int) -> Any:
    """``rows`` keys from the top of the target's key range (recent keys: updates),
    values depending on ``version``; cached so that both sides read the same input."""
    start = target_rows - rows // 2  # half updates, half new keys
    frame = spark.range(start, start + rows, numPartitions=2).selectExpr(
        "id", f"concat('v{version}-', CAST(id AS STRING)) AS value", f"{version} AS batch"
    )
    frame = frame.cache()
    frame.count()
    return frame


def _merge_into(spark: Any, path: str, frame: Any, version: int) -> None:
    """The user's idempotent foreachBatch MERGE (Delta's documented idiom)."""
    frame.createOrReplaceTempView("p6_source")
    spark.conf.set("spark.databricks.delta.write.txnAppId", APP)
    spark.conf.set("spark.databricks.delta.write.txnVersion", str(version))
    try:
        spark.sql(
            f"MERGE INTO delta.`{path}` t USING p6_source s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        ).collect()
    finally:
        spark.conf.unset("spark.databricks.delta.write.txnAppId")
        spark.conf.unset("spark.databricks.delta.write.txnVersion")


def run(runs: int, target_rows: int, work: Path) -> dict[str, Any]:
    from deltasink import DeltaSink, MergeSpec

    spark = delta_spark_session()
    template = work / "template"
    log(f"P6: building the {target_rows:,}-row target")
    spark.range(0, target_rows, numPartitions=4).selectExpr(
        "id", "concat('v0-', CAST(id AS STRING)) AS value", "0 AS batch"
    ).write.format("delta").save(str(template))
    empty = spark.range(0).selectExpr("id", "'' AS value", "0 AS batch")
    results: dict[str, Any] = {}
    for case, rows in (("100k", 100_000), ("10 rows", 10)):
        if rows > target_rows:
            continue
        batches = {v: _batch(spark, v, rows, target_rows) for v in range(1, runs + 1)}

        def fresh(name: str) -> str:
            dest = work / name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.rmtree(str(dest) + "_deltasink_staging", ignore_errors=True)
            shutil.copytree(template, dest)
            return str(dest)

        def sink_side(rep: int, batches: dict[int, Any] = batches) -> float:
            path = fresh("sink")
            sink = DeltaSink(path, APP, MergeSpec(keys=["id"]), engine="spark", spark=spark)
            sink.write(empty, 0)  # a steady-state sink: staging made, epoch claimed
            with stopwatch() as t:
                sink.write(batches[rep + 1], rep + 1)
            return t[0]

        def two_phase_side(rep: int, batches: dict[int, Any] = batches) -> float:
            path = fresh("two-phase")
            sink = DeltaSink(path, APP, MergeSpec(keys=["id"]), engine="spark", spark=spark)
            sink.write(empty, 0)
            with stopwatch() as t:  # what write() did before direct publish
                sink.pre_commit(batches[rep + 1], rep + 1)
                sink.commit(rep + 1)
            return t[0]

        def merge_side(rep: int, batches: dict[int, Any] = batches) -> float:
            path = fresh("merge")
            _merge_into(spark, path, empty, 0)  # the same warm-up and empty commit
            with stopwatch() as t:
                _merge_into(spark, path, batches[rep + 1], rep + 1)
            return t[0]

        stats: dict[str, Stats] = compare(
            {
                "deltasink spark engine": sink_side,
                "two-phase (pre_commit + commit)": two_phase_side,
                "MERGE INTO + txn confs": merge_side,
            },
            runs,
            label=f"P6 {case}",
        )
        results[case] = {
            "rows": rows,
            "target_rows": target_rows,
            "stats": stats_dict(stats),
            "ratio": stats["deltasink spark engine"].median
            / stats["MERGE INTO + txn confs"].median,
            "two_phase_ratio": stats["two-phase (pre_commit + commit)"].median
            / stats["MERGE INTO + txn confs"].median,
        }
        for frame in batches.values():
            frame.unpersist()
    spark.stop()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target-rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=REPO_DIR / "bench" / "out" / "p6.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="deltasink-p6-") as work:
        results = run(args.runs, args.target_rows, Path(work))
    payload = {"machine": machine_info(), "runs": args.runs, "p6": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2))
    for case, result in results.items():
        medians = {k: round(v["median"] * 1000) for k, v in result["stats"].items()}
        print(
            f"P6 {case}: {medians} ms, write {result['ratio']:.2f}x, "
            f"two-phase {result['two_phase_ratio']:.2f}x"
        )


if __name__ == "__main__":
    main()
