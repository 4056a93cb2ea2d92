"""Daily batch: load one day (or a range of days) of orders into a Delta table, exactly
once per day. The version is the day as ``yyyymmdd``.

What it does:
  * ``recover()`` first: days a crashed run staged but did not commit are committed;
  * for each day, ascending: read the day's partition of the source and pre-commit it as
    version ``yyyymmdd`` (a day already committed is skipped);
  * then ``commit(last day)``: every staged day is MERGEd into the target, in order,
    with ``txn(app_id, yyyymmdd)`` in the same Delta commit (several days are coalesced
    into one commit carrying the last day's marker).

Re-running a day is a no-op: the target's marker says it is done (no rows change, no
Delta commit is made). A run that dies anywhere can simply be run again. Source
progress here is the scheduler's "run succeeded": it is recorded only after the commit.

Days must go forward per app id. A day OLDER than the last committed day cannot be
loaded under the same app id (its version is below the marker, so deltasink would drop
it as a duplicate). This job therefore checks the target's history: an old day that was
committed is reported as done (exit 0); one that never was is refused (exit 5) instead of
being silently dropped. To restate such a day, run it under its own app id, e.g.
``--app-id orders-daily-restate-20250103`` (each app id has its own marker and staging
table); with ``sequence_by`` older rows never overwrite newer ones (but a key that a
later day deleted comes back: see docs/guarantees.md, "Deletes and late data").

A missing or empty source partition stops the run (exit 4) before that day is staged:
committing an empty day would mark it done, and its data could never be loaded later.
Pass ``--allow-empty`` for days that really have no data.

Run locally (embedded engine, generated demo partitions under LAKE/landing)::

    python jobs/daily_batch.py                     # yesterday, in a temp dir removed at exit
    python jobs/daily_batch.py --lake /tmp/lake --from-date 2025-01-01 --to-date 2025-01-07
    python jobs/daily_batch.py --lake /tmp/lake --date 2025-01-08   # the next day
    python jobs/daily_batch.py --lake /tmp/lake --date 2025-01-02   # again: already committed

On Databricks: the bundle's ``orders_daily`` job passes
``--today {{job.trigger.time.iso_date}}`` (the run's trigger date, so a retry after
midnight still loads the same day) and ``--source-format table --source
main.sales.order_events``. On OSS Spark: ``spark-submit ... jobs/daily_batch.py
--source s3a://.../order_events --target s3a://.../silver/orders`` (docs/deploy.md).

Knobs to change when you copy it: ``--source``/``--source-format``/``--date-column``,
``--target``, ``--app-id``, ``SCHEMA`` and ``MERGE`` below.

Exit codes: 0 done (or nothing to do), 2 usage, 4 a source partition is missing or
empty, 5 a day older than the last committed one was never loaded (refused, as the
``deltasink`` command's 5: nothing done for that day). A deltasink error ends the run
with the ``deltasink`` command's exit code and one line, ``<ErrorName>: <message>``
(docs/usage.md, "Operate it"): 3 configuration, 4 a commit failed (run again: ``recover()``
finishes it), 5 a batch refused, 6 quarantined, 7 fenced (another run of the same app
id took over).
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
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from deltasink import CommitResult, DeltaSink, MergeSpec, embedded_spark
from deltasink.cli.exits import EXIT_REFUSED, run_job
from deltasink.cli.output import row_counts_text

APP_ID = "orders-daily"
SCHEMA = "order_id long, customer string, amount double, status string, updated_at long"
MERGE = MergeSpec(
    keys=["order_id"],
    sequence_by="updated_at",  # the latest event per order wins
    delete_when="status = 'cancelled'",  # a cancellation deletes the order
)
EXIT_NO_SOURCE = 4


def spark_session(kind: str) -> Any:
    """``embedded``: the in-process engine (local runs, tests). ``cluster``: the session of
    the environment (Databricks, spark-submit, or Spark Connect via ``SPARK_REMOTE``).
    ``auto``: ``cluster`` when one of those is detected, else ``embedded``."""
    if kind == "auto":
        markers = ("DATABRICKS_RUNTIME_VERSION", "SPARK_REMOTE", "PYSPARK_GATEWAY_PORT")
        kind = "cluster" if any(m in os.environ for m in markers) else "embedded"
    if kind == "embedded":
        return embedded_spark()
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def version_of(day: date) -> int:
    """The batch version of a day: ``yyyymmdd`` as an int (increases with the date)."""
    return int(day.strftime("%Y%m%d"))


def read_day(spark: Any, args: argparse.Namespace, day: date) -> Any:
    """The source rows of one day."""
    if args.source_format == "table":  # a catalog table, or delta.`path`
        return spark.read.table(args.source).where(f"{args.date_column} = '{day.isoformat()}'")
    return spark.read.schema(SCHEMA).json(f"{args.source}/{args.date_column}={day.isoformat()}")


def write_demo_partition(source: Path, date_column: str, day: date) -> None:
    """Local demo input for ``day``: two new orders; the previous day's first order
    shipped and its second one cancelled. Deterministic; never rewritten."""
    folder = source / f"{date_column}={day.isoformat()}"
    if folder.exists():
        return
    base, prev = version_of(day) * 10, version_of(day - timedelta(days=1)) * 10
    at = int(datetime(day.year, day.month, day.day, tzinfo=timezone.utc).timestamp())
    events = [
        (base + 1, "created", 10.0, at + 3600),
        (base + 2, "created", 20.0, at + 7200),
        (prev + 1, "shipped", 10.0, at + 60),
        (prev + 2, "cancelled", 20.0, at + 120),
    ]
    rows = [
        {"order_id": i, "customer": f"c{i % 3}", "amount": a, "status": s, "updated_at": t}
        for i, s, a, t in events
    ]
    tmp = source / f".{folder.name}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "part-00000.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(folder)  # the partition appears whole


def days_to_load(args: argparse.Namespace) -> list[date]:
    if args.from_date or args.to_date:
        start = args.from_date or args.to_date
        end = args.to_date or args.from_date
        return [start + timedelta(days=n) for n in range((end - start).days + 1)]
    return [args.date or args.today - timedelta(days=1)]


def iso(text: str) -> date | None:
    """A ``YYYY-MM-DD`` argument; empty means unset (job parameters left blank)."""
    return date.fromisoformat(text) if text else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--date", type=iso, help="the day to load (default: the day before --today)"
    )
    parser.add_argument("--today", type=iso, help="default: the current date (UTC)")
    parser.add_argument("--from-date", type=iso, help="backfill: first day (inclusive)")
    parser.add_argument("--to-date", type=iso, help="backfill: last day (inclusive)")
    parser.add_argument("--lake", help="local runs: root of the default paths (default: temp dir)")
    parser.add_argument("--source", help="source (default: LAKE/landing/order_events, generated)")
    parser.add_argument("--source-format", choices=["json", "table"], default="json")
    parser.add_argument("--date-column", default="order_date", help="the partition column")
    parser.add_argument(
        "--target", help="catalog.schema.table or a path (default: LAKE/silver/orders_daily)"
    )
    parser.add_argument("--staging", help="staging table (default: next to the target)")
    parser.add_argument("--app-id", default=APP_ID, help=f"the writer's id (default {APP_ID})")
    parser.add_argument("--allow-empty", action="store_true", help="commit days with no rows")
    parser.add_argument("--spark", choices=["auto", "embedded", "cluster"], default="auto")
    args = parser.parse_args(argv)
    args.today = args.today or datetime.now(timezone.utc).date()
    if args.date and (args.from_date or args.to_date):
        parser.error("pass --date or --from-date/--to-date, not both")
    if args.from_date and args.to_date and args.from_date > args.to_date:
        parser.error("--from-date is after --to-date")
    args.demo = not args.source
    if not (args.source and args.target):
        lake = Path(args.lake or tempfile.mkdtemp(prefix="deltasink-daily-")).absolute()
        print(f"lake: {lake}" + ("" if args.lake else " (removed at exit; --lake keeps it)"))
        if not args.lake:
            atexit.register(shutil.rmtree, lake, ignore_errors=True)
        args.source = args.source or str(lake / "landing" / "order_events")
        # Its own default target: streaming_upsert.py's is LAKE/silver/orders, and one
        # --lake may hold every template's tables.
        args.target = args.target or str(lake / "silver" / "orders_daily")
    return args


def committed_line(result: CommitResult) -> str:
    """What a commit prints: its versions, the target table version and, when the
    engine reported them, the rows inserted, updated and deleted."""
    counts = row_counts_text(result)
    return (
        f"committed versions {list(result.all_versions)} -> target table version "
        f"{result.target_version}" + (f" ({counts})" if counts else "")
    )


def log_setup() -> None:
    """deltasink logs warnings (old pending versions, abandoned ones) and, at INFO, retries."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltasink").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Run the job; deltasink's errors end it with the ``deltasink`` command's exit code
    and one line on stderr (:func:`deltasink.cli.exits.run_job`)."""
    args = parse_args(argv)
    return run_job(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    log_setup()
    days = days_to_load(args)
    if args.demo:
        for day in days:
            write_demo_partition(Path(args.source), args.date_column, day)

    spark = spark_session(args.spark)
    sink = DeltaSink(
        target=args.target, app_id=args.app_id, merge=MERGE, staging=args.staging, spark=spark
    )
    for r in sink.recover().results:  # days a crashed run staged
        print(f"recovered versions {list(r.all_versions)}: {r.outcome}")

    committed = sink.status().committed_version
    done: dict[int, int] | None = None  # version -> target table version, read when needed
    code, last = 0, None
    for day in days:
        version = version_of(day)
        if committed is not None and version <= committed:
            if done is None:
                done = {v: e.target_version for e in sink.history() for v in e.versions}
            if version in done:
                print(f"day {day}: already committed (target table version {done[version]})")
                continue
            print(
                f"day {day}: REFUSED: app {args.app_id!r} already committed day {committed} and "
                f"day {day} is not in the target's history: it was never loaded (or the history "
                "was cleaned up). Load it under its own app id, e.g. "
                f"--app-id {args.app_id}-restate-{version}.",
                file=sys.stderr,
            )
            code = EXIT_REFUSED
            continue
        try:
            df = read_day(spark, args, day)
            empty = df.isEmpty()
        except Exception as exc:  # e.g. Spark's PATH_NOT_FOUND
            print(f"day {day}: source not readable: {exc}", file=sys.stderr)
            code = EXIT_NO_SOURCE
            break
        if empty and not args.allow_empty:
            print(f"day {day}: no source rows; stopping (--allow-empty to commit it empty)")
            code = EXIT_NO_SOURCE
            break
        staged = sink.pre_commit(df, version)  # phase 1: durably staged
        print(f"day {day}: staged as version {version}: {staged.rows} rows ({staged.state})")
        last = version

    if last is not None:  # end of input: commit every staged day, in order
        for r in sink.commit(last).results:
            print(committed_line(r))
    st = sink.status()
    print(f"status: committed version {st.committed_version}, pending {st.pending_versions}")
    return code


if __name__ == "__main__":
    sys.exit(main())
