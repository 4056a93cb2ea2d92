"""Quickstart: exactly-once upserts of an orders feed, a crash, and recovery.

Runs on the embedded engine (Sail, in-process Spark Connect); needs no cluster:

    make demo                      # or: python jobs/quickstart.py [--lake DIR]

What it does:
  1. builds three batches of an orders feed with PySpark;
  2. writes batch 0 (pre-commit + commit);
  3. pre-commits batches 1 and 2, then "crashes" before committing them;
  4. a fresh sink (a new process would do the same) recovers from the Delta logs;
  5. replays batch 2, as a restarted job would: nothing changes;
  6. queries the target with Spark SQL and prints the status and the rows.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from deltasink import DeltaSink, MergeSpec, embedded_spark

APP_ID = "orders-quickstart"
#: The target under ``--lake`` (each template has its own: one --lake holds them all).
DEFAULT_TARGET = Path("silver") / "orders_quickstart"
MERGE = MergeSpec(
    keys=["order_id"],
    sequence_by="updated_at",  # the latest event per order wins, even out of order
    delete_when="status = 'cancelled'",  # a cancellation deletes the order
)


def orders_batch(spark, batch: int):  # type: ignore[no-untyped-def]
    """Batch 0: orders 1-6 created. Batch 1: orders 2-3 shipped, 7-8 created.
    Batch 2: order 4 cancelled, order 7 shipped, and a late, stale update of order 2."""
    rows = {
        0: [(i, f"customer-{i % 3}", 10.0 * i, "created", 100) for i in range(1, 7)],
        1: [
            (2, "customer-2", 20.0, "shipped", 200),
            (3, "customer-0", 30.0, "shipped", 200),
            (7, "customer-1", 70.0, "created", 200),
            (8, "customer-2", 80.0, "created", 200),
        ],
        2: [
            (4, "customer-1", 40.0, "cancelled", 300),
            (7, "customer-1", 70.0, "shipped", 300),
            (2, "customer-2", 20.0, "created", 150),  # older than batch 1: ignored
        ],
    }[batch]
    return spark.createDataFrame(
        rows, "order_id long, customer string, amount double, status string, updated_at long"
    )


def show_status(sink: DeltaSink, title: str) -> None:
    """Print the writer's status (what `deltasink status TARGET --app APP` shows)."""
    st = sink.status()
    table = Table(title=f"status {title}", title_justify="left")
    for column in ("app", "committed version", "pending versions", "pending rows"):
        table.add_column(column)
    table.add_row(
        st.app_id,
        str(st.committed_version),
        str(st.pending_versions),
        str(sum(p.rows for p in st.pending)),
    )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", help="directory for the tables (default: a new temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir afterwards")
    args = parser.parse_args()
    started = time.perf_counter()
    lake = Path(args.lake) if args.lake else Path(tempfile.mkdtemp(prefix="deltasink-quickstart-"))
    target = str(lake / DEFAULT_TARGET)
    print(f"lake: {lake}")

    spark = embedded_spark()
    print(f"embedded Spark {spark.version} up in {time.perf_counter() - started:.1f} s")

    # 1-2. A normal batch: stage, then commit.
    sink = DeltaSink(target=target, app_id=APP_ID, merge=MERGE)
    sink.write(orders_batch(spark, 0), version=0)
    show_status(sink, "after batch 0")

    # 3. Pre-commit two batches, then the job dies before committing them.
    for version in (1, 2):
        committable = sink.pre_commit(orders_batch(spark, version), version=version)
        print(f"pre-committed version {committable.version}: {committable.rows} rows staged")
    show_status(sink, "crash before commit")
    del sink  # the crash: nothing in memory survives

    # 4. The restarted job: a fresh sink finds the staged versions in the Delta logs.
    sink = DeltaSink(target=target, app_id=APP_ID, merge=MERGE)
    report = sink.recover()  # pending versions are applied in one target commit
    for result in report.results:
        print(
            f"recovered versions {list(result.all_versions)}: {result.outcome}, "
            f"+{result.rows_inserted} ~{result.rows_updated} -{result.rows_deleted} rows "
            f"-> target table version {result.target_version}"
        )

    # 5. The source replays batch 2 (its progress was never recorded): a no-op.
    replay = sink.write(orders_batch(spark, 2), version=2)
    print(f"replayed version 2: {replay.results or 'nothing to do (already committed)'}")
    show_status(sink, "after recovery")

    # 6. SQL users see whole batches only, never staged rows.
    table = f"delta.`{target}`"
    spark.sql(
        f"SELECT status, count(*) AS orders, sum(amount) AS amount FROM {table} "
        "GROUP BY status ORDER BY status"
    ).show()
    spark.sql(f"SELECT * FROM {table} ORDER BY order_id").show()
    for entry in sink.history():
        print(
            f"history: versions {list(entry.versions)} -> target table version "
            f"{entry.target_version} ({entry.operation})"
        )
    print(f"quickstart finished in {time.perf_counter() - started:.1f} s")
    if not args.lake and not args.keep:
        shutil.rmtree(lake, ignore_errors=True)


if __name__ == "__main__":
    main()
