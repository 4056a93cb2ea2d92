#!/usr/bin/env python
"""Which Delta table features each engine writes: a table per feature, made by
delta-spark, then written by deltasink on the embedded engine (delta-rs) and on the
spark engine (delta-spark), an upsert replayed once.

    python tools/feature_matrix.py            # prints a markdown table (docs/deploy.md)

Needs Java 17 and Delta's jars (``DELTASINK_DELTA_JARS``, else ``../shared/delta-spark``).
A cell is ``writes`` when the target then holds exactly the expected rows with the
writer's ``txn`` marker, else the error the writer raised.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from deltasink import DeltaSink, MergeSpec  # noqa: E402

#: feature -> (extra column DDL, clause after USING DELTA, statement after the insert)
FEATURES: dict[str, tuple[str, str, str | None]] = {
    "none (writer protocol 2)": ("", "", None),
    "deletion vectors": (
        "",
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        "DELETE FROM {t} WHERE id = 3",
    ),
    "column mapping (name)": ("", "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')", None),
    "change data feed": ("", "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')", None),
    "check constraint": ("", "", "ALTER TABLE {t} ADD CONSTRAINT positive CHECK (id > 0)"),
    "generated column": (", d DATE GENERATED ALWAYS AS (CAST('2026-01-01' AS DATE))", "", None),
    "timestamp without time zone": (", ts TIMESTAMP_NTZ", "", None),
    "variant": (", v VARIANT", "", None),
    "v2 checkpoints": ("", "TBLPROPERTIES ('delta.checkpointPolicy' = 'v2')", None),
    "liquid clustering": ("", "CLUSTER BY (id)", None),
    "identity column": (", sk BIGINT GENERATED ALWAYS AS IDENTITY", "", None),
    "row tracking": ("", "TBLPROPERTIES ('delta.enableRowTracking' = 'true')", None),
    "type widening": ("", "TBLPROPERTIES ('delta.enableTypeWidening' = 'true')", None),
    "in-commit timestamps": ("", "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')", None),
    "vacuum protocol check": (
        "",
        "TBLPROPERTIES ('delta.feature.vacuumProtocolCheck' = 'supported')",
        None,
    ),
    "column defaults": (
        ", n INT DEFAULT 7",
        "TBLPROPERTIES ('delta.feature.allowColumnDefaults' = 'supported')",
        None,
    ),
}


def session() -> Any:
    from pyspark.sql import SparkSession

    from tools.stream_soak import job_env

    jars = job_env("spark")["DELTASINK_DELTA_JARS"].split(os.pathsep)
    return (
        SparkSession.builder.master("local[2]")
        .appName("deltasink-feature-matrix")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )


def attempt(spark: Any, path: str, engine: str, feature: tuple[str, str, str | None]) -> str:
    """Create the table with ``feature``, write it with deltasink on ``engine``."""
    extra, clause, after = feature
    table = f"delta.`{path}`"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, value STRING{extra}) USING DELTA {clause}")
    spark.sql(f"INSERT INTO {table} (id, value) VALUES (1, 'a'), (3, 'c')")
    if after:
        spark.sql(after.format(t=table))
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "value": ["A", "b"]})
    options: dict[str, Any] = {"engine": engine}
    source: Any = batch
    if engine == "spark":
        options["spark"] = spark
        source = spark.createDataFrame([(1, "A"), (2, "b")], "id long, value string")
    try:
        sink = DeltaSink(path, "matrix", MergeSpec(keys=["id"]), **options)
        sink.write(source, 0)
        sink.write(source, 0)  # a replay: dropped
    except Exception as exc:
        return f"refused: `{type(exc).__name__}`"
    got = sorted(
        (r.id, r.value)
        for r in spark.read.format("delta").load(path).select("id", "value").collect()
    )
    expected = sorted([(1, "A"), (2, "b")] + ([] if after and "DELETE" in after else [(3, "c")]))
    marker = DeltaTable(path).transaction_version("matrix")
    return "writes" if got == expected and marker == 0 else f"WRONG: {got}, marker {marker}"


def main() -> int:
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    work = tempfile.mkdtemp(prefix="deltasink-feature-matrix-")
    lines = [
        "| table feature (made by delta-spark) | writer features | embedded engine | spark engine |",
        "|---|---|---|---|",
    ]
    wrong = False
    for i, (name, feature) in enumerate(FEATURES.items()):
        cells = []
        features = ""
        for engine in ("embedded", "spark"):
            path = os.path.join(work, f"{i}-{engine}")
            cells.append(attempt(spark, path, engine, feature))
            protocol = DeltaTable(path).protocol()
            listed = sorted(set(protocol.writer_features or ()) - {"appendOnly", "invariants"})
            features = (
                ", ".join(f"`{f}`" for f in listed) or f"(protocol {protocol.min_writer_version})"
            )
        wrong |= any(cell.startswith("WRONG") for cell in cells)
        lines.append(f"| {name} | {features} | {cells[0]} | {cells[1]} |")
        print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    spark.stop()
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
