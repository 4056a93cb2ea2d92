"""Maintenance for deltasink writers: recover, status report, staging clean-up.

What it does, for each ``--app-id`` writing into ``--target``:
  1. status: committed version, pending (staged, uncommitted) versions and their age,
     and whether the target expires its ``txn`` markers
     (``delta.setTransactionRetentionDuration``; exactly-once holds only while they live);
  2. recover: commit every pending version, in order, when the writer looks stopped
     (``--recover auto``: its newest pending version is older than ``--idle-minutes``).
     ``recover()`` claims the writer role, so a LIVE writer with the same app id would
     be fenced (its next write raises ``FencedError``): that is why ``auto`` leaves
     young pending versions to their writer;
  3. gc: removes the staging files of committed, aborted and abandoned versions older
     than ``--gc-retention-hours`` (VACUUM of the staging table; the embedded engine
     counts whole hours) and compacts the staging log. Pending versions are never
     touched; safe while the writer runs. (A file left by a staging that crashed
     before its commit is not removed yet: see "Known gaps" in docs/reliability.md.)
     The target itself is not vacuumed or optimized here: that is the table owner's
     job (e.g. predictive optimization).

Exit codes (the most severe over all app ids):
  0  healthy: nothing pending, or only young pending versions of a live writer
  1  unexpected error (traceback)
  2  usage error
  3  configuration error (not a Delta table, staging of another target/app, no such
     target or writer: a mistyped --target or --app-id names the writers found, ...)
  4  a commit failed during recover: the versions stay staged; fix the cause, re-run
  6  needs attention: a version is quarantined (a pre-commit check failed: abort or
     re-stage it, see docs/runbook.md), or was abandoned (``--abandon-after-timeout``:
     its rows were dropped), or a pending version is older than
     ``--transaction-timeout-hours`` and was not recovered
  7  fenced: another writer with the same app id took over while this job ran
(the same numbers as the ``deltasink`` command's, where they overlap)

Run locally (no Spark needed: the embedded engine reads and writes with delta-rs)::

    python jobs/maintenance.py                  # demo (in a temp dir removed at exit)
    python jobs/maintenance.py --target /tmp/lake/silver/orders --app-id orders-stream

On Databricks: the bundle's ``deltasink_maintenance`` job (daily). With a catalog table
name as target, the cluster's session is used (``--spark auto``). Ad hoc, the
``deltasink`` command does the same per step (``deltasink status|recover ...``).

Knobs to change when you copy it: ``--target``, ``--app-id`` (repeat it, one per writer
of that target), ``--idle-minutes`` (longer than one batch of your slowest writer),
``--transaction-timeout-hours``, ``--gc-retention-hours``.
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from deltasink import DeltaSink, DeltaSinkError, MergeSpec, SinkStatus
from deltasink.cli.exits import (
    EXIT_COMMIT,
    EXIT_CONFIG,
    EXIT_FENCED,
    EXIT_OK,
    EXIT_QUARANTINED,
    exit_code,
)
from deltasink.status import require_writer

EXIT_ATTENTION = EXIT_QUARANTINED  # 6: a version is quarantined, or needs a look
#: The demo's target under ``--lake`` (each template has its own: one --lake holds them all).
DEFAULT_TARGET = Path("silver") / "orders_maintenance_demo"
RETENTION_PROPERTY = "delta.setTransactionRetentionDuration"
DEMO_APP = "orders-demo-writer"
LABELS = {EXIT_CONFIG: "configuration error", EXIT_COMMIT: "commit failed", EXIT_FENCED: "fenced"}


def cluster_session(kind: str) -> Any:
    """The Spark session to hand to the sink, or ``None`` (the embedded engine needs none).

    ``auto``: the environment's session on Databricks, under spark-submit or with
    ``SPARK_REMOTE`` (so the sink picks the same engine as the job that wrote); else none.
    """
    markers = ("DATABRICKS_RUNTIME_VERSION", "SPARK_REMOTE", "PYSPARK_GATEWAY_PORT")
    if kind == "none" or (kind == "auto" and not any(m in os.environ for m in markers)):
        return None
    from pyspark.sql import SparkSession

    return SparkSession.builder.getOrCreate()


def txn_retention(sink: DeltaSink, spark: Any) -> str | None:
    """The target's ``delta.setTransactionRetentionDuration``, or ``None`` if unset."""
    if spark is not None:  # the cluster's view (catalog names, cloud credentials)
        table = sink.target if "/" not in sink.target else f"delta.`{sink.target}`"
        rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
        return {r[0]: r[1] for r in rows}.get(RETENTION_PROPERTY)
    from deltalake import DeltaTable

    return DeltaTable(sink.target).metadata().configuration.get(RETENTION_PROPERTY)


def print_status(st: SinkStatus, now: float) -> None:
    print(f"app {st.app_id} -> {st.target} (engine {st.engine}; staging {st.staging})")
    ages = ", ".join(
        f"{p.version} staged {(now - p.staged_at.timestamp()) / 60:.1f} min ago, {p.rows} rows"
        for p in st.pending
    )
    print(
        f"  committed version {st.committed_version}; pending {st.pending_versions}"
        + (f" ({ages})" if ages else "")
    )
    if st.leftover_versions:
        print(f"  committed versions with staging data left: {st.leftover_versions}")
    for version, reason in sorted(st.quarantined.items()):
        print(f"  QUARANTINED version {version}: {reason}")


def maintain(target: str, app_id: str, args: argparse.Namespace, spark: Any) -> int:
    """Maintain one writer; returns its exit code."""
    timeout = timedelta(hours=args.transaction_timeout_hours)
    sink = DeltaSink(
        target=target,
        app_id=app_id,
        merge=None,  # committing uses the MergeSpec recorded with the staged versions
        staging=args.staging,
        spark=spark,
        transaction_timeout=timeout,
        timeout_warning_ratio=0.5,  # log a warning for versions pending half that long
        ignore_failures_after_timeout=args.abandon_after_timeout,
        # The job's recorded checks run before anything is published; callables only
        # the job can run make recover refuse (exit 3) unless explicitly skipped.
        unverifiable_checks="skip" if args.skip_unverifiable_checks else "refuse",
    )
    now = time.time()
    st = sink.status()
    require_writer(st)  # a mistyped --target or --app-id is not "healthy": exit 3
    print_status(st, now)
    try:
        retention = txn_retention(sink, spark) if st.target_exists else None
    except Exception as exc:  # a report line is not worth failing maintenance for
        print(f"  txn markers: retention unknown ({type(exc).__name__}: {exc})")
    else:
        print(
            "  txn markers: kept forever"
            if retention is None
            else f"  txn markers expire after {retention}: never replay a batch older than that"
        )

    code = EXIT_OK
    newest_age = min((now - p.staged_at.timestamp() for p in st.pending), default=None)
    if not st.pending and not st.leftover_versions:
        print("  recover: nothing to do")
    elif args.recover == "never":
        print("  recover: skipped (--recover never)")
    elif args.recover == "auto" and newest_age is not None and newest_age < args.idle_minutes * 60:
        print(
            f"  recover: skipped, the writer looks live (a version was staged {newest_age / 60:.1f}"
            f" min ago, less than --idle-minutes {args.idle_minutes:g})"
        )
    else:
        report = sink.recover()
        for r in report.results:
            print(f"  recovered versions {list(r.all_versions)}: {r.outcome}")
            if r.outcome not in ("committed", "already_committed"):
                code = EXIT_ATTENTION
        if report.cleaned_versions:
            print(f"  removed staging data of committed versions {list(report.cleaned_versions)}")

    if not args.no_gc:
        gc = sink.gc(timedelta(hours=args.gc_retention_hours), dry_run=args.dry_run)
        print(f"  gc: {len(gc.files)} staging files {'would be ' if gc.dry_run else ''}removed")

    st = sink.status()
    overdue = [
        p.version for p in st.pending if now - p.staged_at.timestamp() > timeout.total_seconds()
    ]
    if overdue:
        print(f"  ATTENTION: versions {overdue} pending for longer than {timeout}")
        code = EXIT_ATTENTION
    if st.quarantined:
        code = EXIT_ATTENTION
    return code


def make_demo(lake: Path) -> str:
    """A target whose writer crashed: version 0 committed, version 1 only staged."""
    import pyarrow as pa

    target = str(lake / DEFAULT_TARGET)
    writer = DeltaSink(target, DEMO_APP, MergeSpec(keys=["order_id"]))
    writer.write(pa.table({"order_id": [1, 2], "status": ["created", "created"]}), 0)
    writer.pre_commit(pa.table({"order_id": [2, 3], "status": ["shipped", "created"]}), 1)
    print(f"demo: {target}: version 0 committed, version 1 staged, then the writer crashed")
    return target


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="target table (default: a demo in --lake)")
    parser.add_argument("--app-id", action="append", help="a writer of the target; repeatable")
    parser.add_argument("--staging", help="staging table, if the writer set one (one app id)")
    parser.add_argument("--recover", choices=["auto", "always", "never"], default="auto")
    parser.add_argument("--idle-minutes", type=float, default=30.0)
    parser.add_argument("--transaction-timeout-hours", type=float, default=24.0)
    parser.add_argument(
        "--abandon-after-timeout",
        action="store_true",
        help="drop a version that fails to commit once older than the timeout (DATA LOSS)",
    )
    parser.add_argument("--gc-retention-hours", type=float, default=168.0)
    parser.add_argument("--no-gc", action="store_true")
    parser.add_argument(
        "--skip-unverifiable-checks",
        action="store_true",
        help="recover even though the job's checks include callables this job cannot run",
    )
    parser.add_argument("--dry-run", action="store_true", help="gc: only list the files")
    parser.add_argument("--spark", choices=["auto", "none", "cluster"], default="auto")
    parser.add_argument("--lake", help="demo: where to create it (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.staging and args.app_id and len(args.app_id) > 1:
        parser.error("--staging belongs to one writer: pass a single --app-id with it")
    if args.target is None:
        if args.app_id:
            parser.error("--app-id needs --target")
        args.app_id = [DEMO_APP]
        args.recover = "always"  # the demo writer is known to be stopped
    elif not args.app_id:
        parser.error("pass --app-id (one per writer of the target)")
    return args


def log_setup() -> None:
    """deltasink logs warnings (old pending versions, abandoned ones) and, at INFO, retries."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltasink").setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log_setup()
    if args.target is None:  # the demo: a writer that crashed with a version staged
        lake = Path(args.lake or tempfile.mkdtemp(prefix="deltasink-maintenance-")).absolute()
        if not args.lake:
            atexit.register(shutil.rmtree, lake, ignore_errors=True)
        args.target = make_demo(lake)
    spark = cluster_session(args.spark)
    worst = EXIT_OK
    for app_id in args.app_id:
        try:
            code = maintain(args.target, app_id, args, spark)
        except DeltaSinkError as exc:  # the deltasink command's exit codes
            code = exit_code(exc)
            what = LABELS.get(code, type(exc).__name__)
            print(f"  {what}: {exc}", file=sys.stderr)
        print(f"RESULT app={app_id} exit={code}")
        worst = max(worst, code)
    return worst


if __name__ == "__main__":
    sys.exit(main())
