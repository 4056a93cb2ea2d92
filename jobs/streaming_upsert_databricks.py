"""Streaming upsert on Databricks (or any Spark cluster): Auto Loader -> foreachBatch ->
MERGE into a Delta table, exactly once.

What it does:
  * reads new order events with Structured Streaming: Auto Loader (``cloudFiles``) over a
    landing path (a Unity Catalog volume, cloud storage), or a Delta table, or plain
    JSON files (OSS Spark, local runs);
  * ``writeStream.foreachBatch(...)`` hands each micro-batch to deltasink; the
    ``batch_id`` is the version: the batch is pre-committed (staged) and committed
    (MERGEd into the target, by ``order_id``, with ``txn(app_id, batch_id)`` in the same
    Delta commit);
  * ``sink.recover()`` runs at start-up, before the query starts.

Exactly once with Spark's checkpoint (source progress vs. sink commit): Spark
writes ``offsets/n`` (which input forms batch n) BEFORE running batch n and
``commits/n`` (the source progress) only AFTER ``foreachBatch`` returned, i.e. after the
sink committed. A crash in between makes Spark run batch n again after the restart, with
the same input and the same ``batch_id``: the target's marker makes it a no-op. A crash
between pre-commit and commit leaves batch n staged: ``recover()`` commits it, then the
replay is a no-op. Two rules follow:
  * a stream is an identity, not a counter: each target commit records the query's id
    (from ``<checkpoint>/metadata``), its batch id and source positions. A new or
    deleted checkpoint starts again at batch 0; its batches are refused with
    ``CheckpointResetError`` (exit 5, nothing written), never taken for replays. Run the
    same command again with ``--resume`` to continue right after the target: for file
    sources (JSON files, Auto Loader) the rows of files the target already holds are
    left out by themselves (``_metadata.file_path``, or ``input_file_name()`` on classic
    compute: on Unity Catalog shared or serverless compute select the file metadata
    into the stream); a Delta source starts at the ``--starting-version`` that
    ``deltasink offsets TARGET --app APP`` prints (docs/runbook.md, "I lost or changed
    my checkpoint");
  * run one query per app id (the bundle sets ``max_concurrent_runs: 1``); a second
    writer fences the first, which then fails with ``FencedError`` (exit 7).

Exit codes are the ``deltasink`` command's (docs/usage.md, "Operate it"): a deltasink error
raised in a micro-batch stops the query, and the job ends with one line,
``<ErrorName>: <message>``, printed last (Spark's log of the failed query is left out:
it quotes the same error in three tracebacks), and that error's code: 5 refused with
nothing written, 7 fenced, 6 quarantined (``on_quarantine="raise"``), 4 a commit failed
(run again: ``recover()`` finishes it), 3 configuration. Any other failure of the query
is Spark's own error, as Spark reports it.

Run on Databricks: deploy the bundle (``databricks.yml``, job ``orders_stream``) or make
a Python script task with, e.g.:

    --source /Volumes/main/sales/landing/orders --target main.sales.orders
    --checkpoint /Volumes/main/sales/checkpoints/orders_stream --app-id orders-stream

Run on OSS Spark 4 with delta-spark (then Spark itself makes the Delta commits; the
tested PySpark and Delta pairs are in docs/deploy.md, "Tested PySpark and Delta
versions")::

    spark-submit --packages io.delta:delta-spark_2.13:4.4.0 \\
      --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension \\
      --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog \\
      jobs/streaming_upsert_databricks.py --source-format json --source s3://... \\
      --target s3://.../silver/orders --checkpoint s3://.../_checkpoints/orders_stream

Run locally (classic PySpark on a JVM: needs Java 17, ~10 s to start; no Delta jars:
deltasink's embedded engine writes the tables with delta-rs)::

    python jobs/streaming_upsert_databricks.py                  # demo, temp dir removed at exit
    python jobs/streaming_upsert_databricks.py --lake /tmp/lake --demo-files 5
    rm -r /tmp/lake/_checkpoints            # a lost checkpoint, and a new file lands:
    python jobs/streaming_upsert_databricks.py --lake /tmp/lake --demo-files 6            # exit 5
    python jobs/streaming_upsert_databricks.py --lake /tmp/lake --demo-files 6 --resume   # new rows only

Knobs to change when you copy it: ``--source``/``--source-format``, ``--target`` (a
``catalog.schema.table`` name or a path), ``--checkpoint``, ``--app-id``, ``SCHEMA`` and
``MERGE`` below, ``--trigger`` (``available-now``: process the backlog and stop, for a
scheduled job; or an interval such as ``"1 minute"`` for an always-on stream).
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from deltasink import (
    CheckpointResetError,
    DeltaSinkError,
    ForeachBatchWriter,
    MergeSpec,
    ReplayMismatchError,
    foreach_batch_writer,
)
from deltasink.cli.exits import run_job

APP_ID = "orders-stream"
SCHEMA = "order_id long, customer string, amount double, status string, updated_at long"
MERGE = MergeSpec(
    keys=["order_id"],
    sequence_by="updated_at",  # the latest event per order wins, even out of order
    delete_when="status = 'cancelled'",  # a cancellation deletes the order
)
ON_DATABRICKS = "DATABRICKS_RUNTIME_VERSION" in os.environ


def build_writer(args: argparse.Namespace) -> ForeachBatchWriter:
    """deltasink's ``foreachBatch`` function for this job. It pickles (Spark Connect
    compute, serverless and standard access mode, runs the function in another Python
    process) and builds its sink there, from the micro-batch's own session, once per
    process; ``engine='auto'`` picks Spark's own Delta writes on Databricks or with
    delta-spark, and the embedded engine (delta-rs) otherwise. ``checkpoint`` lets it
    read the query's identity and positions wherever it runs; ``resume`` continues a
    new checkpoint after the version another query committed."""
    return foreach_batch_writer(
        args.target,
        args.app_id,
        MERGE,
        staging=args.staging,
        checkpoint=args.checkpoint,
        resume=args.resume,
    )


def batch_writer(
    writer: ForeachBatchWriter, failed: list[DeltaSinkError]
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function: the writer, plus a log line per micro-batch.
    A deltasink error is also kept in ``failed`` (on classic compute, where the function
    runs in this process) for ``main`` to report in one line."""

    def write_batch(batch_df: Any, batch_id: int) -> None:
        # pre-commit + commit from one read of the Delta logs, the query's id, batch id
        # and source positions recorded in the target commit. A batch of another query
        # (a new or reset checkpoint) raises CheckpointResetError, one that does not
        # replay its version (a checkpoint restored from an older copy) raises
        # ReplayMismatchError: nothing written either way. Raising stops the query
        # before Spark records the batch as done.
        try:
            report = writer(batch_df, batch_id)
        except DeltaSinkError as exc:
            failed.append(exc)
            raise
        if report.quarantined_versions:  # a failed check (with checks=[...])
            print(f"batch {batch_id}: quarantined, waiting behind {report.quarantined_versions}")
        elif report.results:
            print(f"batch {batch_id}: committed as version {report.committed_version}")
        else:
            print(
                f"batch {batch_id}: already committed as version {report.committed_version} "
                "(a replay)"
            )

    return write_batch


class _NotDeltaSinkErrors(logging.Filter):
    """Drops py4j's log of a deltasink error raised in ``foreachBatch`` (the job reports
    it in one line); py4j's other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DeltaSinkError))


#: Spark's loggers of "Query ... terminated with error" (Spark 4; Spark 3.5).
QUERY_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)


def quiet_query_errors(spark: Any) -> None:
    """Leave out the logs that repeat a failed query's error (py4j's Python traceback,
    Spark's "terminated with error" with the same traceback inside Java's): ``main``
    prints a deltasink error once, last, and re-raises any other error as Spark's own
    exception, so nothing is lost. Classic sessions only (Spark Connect logs nothing
    of it on the client)."""
    logging.getLogger("py4j.clientserver").addFilter(_NotDeltaSinkErrors())
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in QUERY_LOGGERS:
            configurator.setLevel(name, off)
    except Exception:  # another logging backend: keep Spark's logs as they are
        return


def read_stream(spark: Any, args: argparse.Namespace) -> Any:
    """The source stream of order events."""
    if args.source_format == "delta":  # a Delta table, by name or path
        reader = spark.readStream.format("delta").option("maxFilesPerTrigger", args.max_files)
        if args.starting_version is not None:
            reader = reader.option("startingVersion", args.starting_version)
        is_path = "/" in args.source or ":" in args.source
        return reader.load(args.source) if is_path else reader.table(args.source)
    if args.source_format == "cloudFiles":  # Auto Loader (Databricks only)
        return (
            spark.readStream.format("cloudFiles")
            .schema(SCHEMA)
            .option("cloudFiles.format", "json")
            .option("cloudFiles.maxFilesPerTrigger", args.max_files)
            .load(args.source)
        )
    return (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.max_files)
        .json(args.source)
    )


DEMO_EVENTS = [  # (order_id, status, amount, updated_at) per demo file
    [(1, "created", 10.0, 100), (2, "created", 20.0, 100), (3, "created", 30.0, 100)],
    [(2, "shipped", 20.0, 200), (3, "cancelled", 30.0, 200), (4, "created", 40.0, 200)],
    [(1, "shipped", 10.0, 300), (2, "created", 20.0, 150)],  # order 2: stale, ignored
]


def write_demo_files(source: Path, count: int) -> None:
    """Local demo input: JSON-lines event files 0 .. count-1 (never rewritten)."""
    source.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        path = source / f"events-{n:05d}.json"
        if path.exists():
            continue
        events = DEMO_EVENTS[n] if n < len(DEMO_EVENTS) else [(10 + n, "created", 1.0 * n, n)]
        lines = [
            json.dumps(
                {"order_id": i, "customer": f"c{i % 3}", "amount": a, "status": s, "updated_at": t}
            )
            for i, s, a, t in events
        ]
        tmp = source / f".{path.name}.tmp"  # Spark's file sources skip dot files
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", help="local runs: root of the default paths (default: temp dir)")
    parser.add_argument("--source", help="landing path, or Delta table (default: LAKE/landing)")
    parser.add_argument(
        "--source-format",
        choices=["cloudFiles", "delta", "json"],
        default="cloudFiles" if ON_DATABRICKS else "json",
        help="Auto Loader (default on Databricks), a Delta table, or JSON files (elsewhere)",
    )
    parser.add_argument("--target", help="catalog.schema.table or a path (default: LAKE/silver)")
    parser.add_argument("--staging", help="staging table (default: next to the target)")
    parser.add_argument("--checkpoint", help="streaming checkpoint (default: LAKE/_checkpoints)")
    parser.add_argument("--app-id", default=APP_ID, help=f"the writer's id (default {APP_ID})")
    parser.add_argument("--trigger", default="available-now", help="available-now or an interval")
    parser.add_argument("--max-files", type=int, default=1000, help="maxFilesPerTrigger")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="a new or restored checkpoint continues right after the target (file "
        "sources: rows of files the target holds are left out; a Delta source: pass "
        "the --starting-version `deltasink offsets` prints)",
    )
    parser.add_argument(
        "--starting-version", help="Delta source: startingVersion (from `deltasink offsets`)"
    )
    parser.add_argument(
        "--demo-files", type=int, default=3, help="demo input files (only without --source)"
    )
    args = parser.parse_args(argv)
    if not (args.source and args.target and args.checkpoint):
        if ON_DATABRICKS:
            parser.error("on Databricks, pass --source, --target and --checkpoint")
        lake = Path(args.lake or tempfile.mkdtemp(prefix="deltasink-stream-"))
        print(f"lake: {lake}")
        if not args.lake:
            atexit.register(shutil.rmtree, lake, ignore_errors=True)
        # Local defaults of their own (not streaming_upsert.py's): one --lake holds both.
        if not args.source:  # the local demo: generated input files
            args.source = str((lake / "landing" / "orders_spark").absolute())
            if args.source_format == "json" and args.demo_files:
                write_demo_files(Path(args.source), args.demo_files)
        args.target = args.target or str((lake / "silver" / "orders_spark").absolute())
        args.checkpoint = args.checkpoint or str(
            (lake / "_checkpoints" / "orders_stream_spark").absolute()
        )
    return args


def log_setup() -> None:
    """deltasink logs warnings (old pending versions, abandoned ones) and, at INFO, retries."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltasink").setLevel(logging.INFO)


def resume_hint(exc: DeltaSinkError, args: argparse.Namespace) -> str | None:
    """What to do after a refused checkpoint (printed after the error's line)."""
    if not isinstance(exc, CheckpointResetError | ReplayMismatchError):
        return None
    return (
        "  to continue right after the target, run the same command again with --resume "
        "(file sources: the rows of files it already holds are left out; a Delta source: "
        f"add the --starting-version `deltasink offsets {args.target} --app {args.app_id}` "
        "prints). docs/runbook.md, 'I lost or changed my checkpoint'"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the job; deltasink's errors end it with the ``deltasink`` command's exit code
    and one line on stderr, printed last (:func:`deltasink.cli.exits.run_job`)."""
    args = parse_args(argv)
    return run_job(lambda: run(args), hint=lambda exc: resume_hint(exc, args))


def run(args: argparse.Namespace) -> int:
    log_setup()
    spark = SparkSession.builder.appName(f"deltasink {args.app_id}").getOrCreate()

    writer = build_writer(args)
    sink = writer.sink(spark)  # this process's sink, shared with foreachBatch on classic
    print(f"engine: {sink.engine} ({sink.engine_reason})")
    for r in sink.recover().results:  # start-up: finish what a crash left staged
        print(f"recovered versions {list(r.all_versions)}: {r.outcome}")

    failed: list[DeltaSinkError] = []
    quiet_query_errors(spark)
    stream = (
        read_stream(spark, args)
        .writeStream.foreachBatch(batch_writer(writer, failed))
        .option("checkpointLocation", args.checkpoint)
        .queryName(args.app_id)
    )
    if args.trigger == "available-now":
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=args.trigger)
    query = stream.start()
    try:
        query.awaitTermination()
    except Exception:
        if not failed:
            raise  # not deltasink's: Spark's own error, as Spark reports it
        raise failed[-1] from None  # main prints it in one line, with its exit code

    st = sink.status()
    print(f"status: committed version {st.committed_version}, pending {st.pending_versions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
