"""P3: Spark input. ``sink.write(df)`` against the engine's own ``MERGE INTO``.

The DataFrame is the P1 batch (layout ``recent``) read by the embedded engine (Sail)
from one Parquet file: ``df = spark.read.parquet(path)``, the usual start of a Spark
job. Sides, each on its own copy of the cached target:

* ``sink``: ``sink.write(df, 1)`` on a steady-state sink (the engine hands deltasink
  the rows as Parquet files, deltasink MERGEs them with delta-rs).
* ``sail``: ``MERGE INTO delta.`path` AS t USING <temp view of df> AS s ON t.id = s.id
  WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *`` run by Sail.
* ``transfer``: what moving the batch from the engine into Arrow costs the sink (part
  of ``sink``): the engine writes it as Parquet, Arrow reads it
  (:func:`deltasink.backends.embedded.transfer.engine_arrow`).
* ``collect``: ``df.toArrow()`` alone, the usual way (what the sink did before).

After the runs the ``sink`` and ``sail`` tables are compared row by row.
"""

from __future__ import annotations

from typing import Any

from bench.baselines import sail_merge, same_rows
from bench.common import Config, compare, log, remove, stats_dict, stopwatch
from bench.data import fresh_target, parquet_batch, steady_sink, target_template
from deltasink.backends.embedded.transfer import engine_arrow

__all__ = ["run"]

VIEW = "deltasink_bench_source"


def _case(config: Config, spark: Any, batch_rows: int) -> dict[str, Any]:
    target_rows = config.sizes.p1_target
    template = target_template(config, target_rows)
    df = spark.read.parquet(str(parquet_batch(config, target_rows, batch_rows, "recent")))
    df.createOrReplaceTempView(VIEW)
    scratch = config.scratch / "p3"

    def sink(rep: int) -> float:
        s = steady_sink(fresh_target(template, scratch / "sink"))
        with stopwatch() as t:
            s.write(df, 1)
        return t[0]

    def sail(rep: int) -> float:
        target = fresh_target(template, scratch / "sail")
        with stopwatch() as t:
            sail_merge(spark, target, VIEW)
        return t[0]

    def transfer(rep: int) -> float:
        with stopwatch() as t:
            engine_arrow(df, False)
        return t[0]

    def collect(rep: int) -> float:
        with stopwatch() as t:
            df.toArrow()
        return t[0]

    stats = compare(
        {"sink": sink, "sail": sail, "transfer": transfer, "collect": collect},
        config.runs,
        label=f"P3 {batch_rows:,} rows",
    )
    checks = {"sink = sail": same_rows(scratch / "sink" / "target", scratch / "sail" / "target")}
    if not all(checks.values()):
        log(f"P3: TABLES DIFFER {checks}")
    remove(scratch)
    return {
        "target_rows": target_rows,
        "batch_rows": batch_rows,
        "stats": stats_dict(stats),
        "ratio": stats["sink"].median / stats["sail"].median,
        "transfer_share": stats["transfer"].median / stats["sink"].median,
        "checks": checks,
    }


def run(config: Config) -> list[dict[str, Any]]:
    """Measure P3 at each batch size."""
    from deltasink import embedded_spark

    spark = embedded_spark()
    return [_case(config, spark, rows) for rows in config.sizes.p3_batches]
