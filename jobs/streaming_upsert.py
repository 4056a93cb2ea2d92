"""Streaming upsert, local variant: a landing directory of order events, micro-batch by
micro-batch, MERGEd into a Delta table exactly once.

What it does:
  * every JSON-lines file that lands in ``--source`` is an event file (order created,
    shipped, cancelled, ...); new files are cut into micro-batches of
    ``--max-files-per-batch`` files, numbered 0, 1, 2, ... (the batch id);
  * each micro-batch is upserted into ``--target`` by ``order_id`` with deltasink:
    ``sink.write(df, batch_id)``, which is exactly what
    ``writeStream.foreachBatch(sink.foreach_batch)`` does on a cluster (pre-commit, then
    commit; the batch id is the version);
  * a small checkpoint (``--checkpoint``), in Spark's own file-source format, records
    which files form batch *n* (``offsets/n`` and ``sources/0/n``, written BEFORE the
    batch runs) and that batch *n* is done (``commits/n``, written only AFTER the sink
    returned); its ``metadata`` holds the query's id. Given the checkpoint, the sink
    records that id, the batch id and the batch's files with each version.

Why a loop and not ``writeStream.foreachBatch`` here: the embedded engine (Sail) has no
``foreachBatch``, and classic PySpark needs a JVM (Java 17, ~10 s to start). This loop
keeps the local run at about two seconds and shows what Spark's checkpoint does for you
on a cluster. For the real ``writeStream.foreachBatch`` (Auto Loader, Delta or file
sources, with a Spark checkpoint) use ``jobs/streaming_upsert_databricks.py``, which also
runs locally on classic PySpark. Copy this loop when your source is one Spark streaming
cannot read (a queue or an API you acknowledge yourself): keep its order of steps.

Why it is exactly once (source progress vs. sink commit):
  * crash after the sink committed batch *n* but before ``commits/n``: the restart runs
    batch *n* again with the SAME files and the SAME id; the target's
    ``txn(app_id, n)`` marker makes that a no-op;
  * crash after the batch was staged (pre-commit) but before its commit: ``recover()``
    at start-up commits it; the replay is then a no-op;
  * source progress (``commits/n``) is never recorded before the sink returned, so a
    batch can never be skipped. Never delete or move a source file before that.

Run locally (embedded engine; nothing to install beyond deltasink):

    python jobs/streaming_upsert.py                       # demo in a temp dir removed at exit
    python jobs/streaming_upsert.py --lake /tmp/lake      # again: "nothing new"
    python jobs/streaming_upsert.py --lake /tmp/lake --demo-files 5   # 2 more files

A lost or new checkpoint: its batch ids start at 0 again, so the sink refuses its first
batch (``CheckpointResetError``, exit code 5, nothing written); a checkpoint restored
from an older copy whose batch does not replay its version is refused the same way
(``ReplayMismatchError``). The same command with ``--resume`` continues right after the
target: the files the target already holds (``sink.offsets()``, also ``deltasink
offsets``) are left out and the first new batch becomes the next version::

    rm -r /tmp/lake/_checkpoints
    python jobs/streaming_upsert.py --lake /tmp/lake --demo-files 6            # exit 5
    python jobs/streaming_upsert.py --lake /tmp/lake --demo-files 6 --resume   # new file only

Exit codes are the ``deltasink`` command's (docs/usage.md, "Operate it"): a deltasink error
ends the run with one line, ``<ErrorName>: <message>``, and its code: 5 refused with
nothing written (a checkpoint reset), 7 fenced (a second copy of the job took over the
app id), 4 a commit failed (run again: ``recover()`` finishes it), 3 configuration.

Knobs to change when you copy it: ``--source``/``--target``/``--checkpoint`` (or just
``--lake``), ``--app-id`` (stable for the life of the target), ``SCHEMA`` and ``MERGE``
below, ``--max-files-per-batch`` and ``--poll-seconds`` (0: process what is there and
stop, like ``trigger(availableNow)``).
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from deltasink import (
    CheckpointResetError,
    CommitReport,
    DeltaSink,
    DeltaSinkError,
    MergeSpec,
    ReplayMismatchError,
    embedded_spark,
)
from deltasink.cli.exits import run_job
from deltasink.cli.output import row_counts_text

APP_ID = "orders-stream"
SCHEMA = "order_id long, customer string, amount double, status string, updated_at long"
MERGE = MergeSpec(
    keys=["order_id"],
    sequence_by="updated_at",  # the latest event per order wins, even out of order
    delete_when="status = 'cancelled'",  # a cancellation deletes the order
)


def demo_events(n: int) -> list[dict[str, Any]]:
    """The events of demo file ``n`` (deterministic, so re-creating a file is harmless)."""

    def event(order_id: int, status: str, amount: float, updated_at: int) -> dict[str, Any]:
        return {
            "order_id": order_id,
            "customer": f"customer-{order_id % 3}",
            "amount": amount,
            "status": status,
            "updated_at": updated_at,
        }

    if n == 0:
        return [event(i, "created", 10.0 * i, 100) for i in (1, 2, 3, 4)]
    if n == 1:
        return [
            event(2, "shipped", 20.0, 200),
            event(3, "cancelled", 30.0, 200),
            event(5, "created", 50.0, 200),
        ]
    if n == 2:  # the last event is a late, stale update of order 2: ignored
        return [
            event(1, "shipped", 10.0, 300),
            event(5, "shipped", 50.0, 300),
            event(2, "created", 20.0, 150),
        ]
    return [  # later files: a new order, and order 4 re-priced
        event(10 + n, "created", 10.0 * (10 + n), 100 * (n + 1)),
        event(4, "repriced", 40.0 + n, 100 * (n + 1)),
    ]


def write_demo_files(source: Path, count: int) -> None:
    """Make sure demo files 0 .. count-1 exist (written atomically, never rewritten)."""
    source.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        path = source / f"events-{n:05d}.json"
        if not path.exists():
            text = "".join(json.dumps(e) + "\n" for e in demo_events(n))
            tmp = source / f".{path.name}.tmp"  # readers skip dot files
            tmp.write_text(text)
            tmp.replace(path)


# -- the checkpoint, in Spark's file-source format ------------------------------------
# metadata: {"id": query id}; offsets/<n>: "v1", batch metadata, {"logOffset": n};
# sources/0/<n>: "v1", one {"path", "timestamp", "batchId"} per file; commits/<n>: done.


def _atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(text)
    tmp.replace(path)  # atomic: the entry exists whole or not at all


def start_checkpoint(checkpoint: Path) -> str:
    """The query id of ``checkpoint``, created with a new one if it is new."""
    meta = checkpoint / "metadata"
    if not meta.exists():
        _atomic(meta, json.dumps({"id": str(uuid.uuid4())}) + "\n")
    return str(json.loads(meta.read_text())["id"])


def planned(checkpoint: Path) -> dict[int, list[str]]:
    """Batch id -> its files (as ``file:`` URIs), from ``sources/0``."""
    folder = checkpoint / "sources" / "0"
    if not folder.is_dir():
        return {}
    return {
        int(p.name): [json.loads(line)["path"] for line in p.read_text().splitlines()[1:]]
        for p in folder.iterdir()
        if p.name.isdigit()
    }


def done(checkpoint: Path) -> set[int]:
    folder = checkpoint / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def plan(checkpoint: Path, batch_id: int, files: list[str]) -> None:
    """Record which files form ``batch_id``, BEFORE it runs (Spark's offset log)."""
    entries = [json.dumps({"path": f, "timestamp": 0, "batchId": batch_id}) for f in files]
    _atomic(checkpoint / "sources" / "0" / str(batch_id), "\n".join(["v1", *entries]))
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000)})
    offset = json.dumps({"logOffset": batch_id})
    _atomic(checkpoint / "offsets" / str(batch_id), f"v1\n{meta}\n{offset}")


def run_batch(
    spark: Any,
    sink: DeltaSink,
    checkpoint: Path,
    batch_id: int,
    files: list[str],
    *,
    resume: bool = False,
) -> None:
    """One micro-batch: read its files, write it through the sink, then record progress."""
    df = spark.read.schema(SCHEMA).json(files)
    # What writeStream.foreachBatch(sink.foreach_batch) runs on a cluster; the checkpoint
    # gives the sink the query's id and the batch's files, recorded with the version.
    report: CommitReport = sink.foreach_batch(df, batch_id, resume=resume, checkpoint=checkpoint)
    _atomic(checkpoint / "commits" / str(batch_id), "v1\n{}")  # progress, AFTER the sink
    names = [Path(f).name for f in files]
    if not report.results:
        print(f"batch {batch_id}: {names} already committed, nothing changed (replay)")
    for r in report.results:
        counts = row_counts_text(r)  # "" when the engine did not report them
        print(
            f"batch {batch_id}: {names} {r.outcome} versions {list(r.all_versions)}: "
            + (f"{counts} " if counts else "")
            + f"-> target table version {r.target_version}"
        )


def log_setup() -> None:
    """deltasink logs warnings (old pending versions, abandoned ones) and, at INFO, retries."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("deltasink").setLevel(logging.INFO)


def resume_hint(exc: DeltaSinkError, args: argparse.Namespace) -> str | None:
    """What to do after a refused checkpoint (printed after the error's line)."""
    if not isinstance(exc, CheckpointResetError | ReplayMismatchError):
        return None
    return (
        "To continue with this checkpoint right after the target, run again with --resume "
        f"(the files `deltasink offsets {args.target} --app {args.app_id}` lists are left "
        "out)."
    )


def main(argv: list[str] | None = None) -> int:
    """Run the job; deltasink's errors end it with the ``deltasink`` command's exit code
    and one line on stderr (:func:`deltasink.cli.exits.run_job`)."""
    args = parse_args(argv)
    return run_job(lambda: run(args), hint=lambda exc: resume_hint(exc, args))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", help="root for the default paths (default: a new temp dir)")
    parser.add_argument("--source", help="landing directory (default: LAKE/landing/orders)")
    parser.add_argument("--target", help="target Delta table (default: LAKE/silver/orders)")
    parser.add_argument("--checkpoint", help="default: LAKE/_checkpoints/orders_stream")
    parser.add_argument("--app-id", default=APP_ID, help=f"the writer's id (default {APP_ID})")
    parser.add_argument(
        "--demo-files",
        type=int,
        help="ensure demo files 0..N-1 exist in the source (default: 3 without --source)",
    )
    parser.add_argument("--max-files-per-batch", type=int, default=1)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="a new or restored checkpoint continues right after the target (leaves out "
        "the files it holds)",
    )
    parser.add_argument(
        "--poll-seconds", type=float, default=0, help="0: process what is there, then stop"
    )
    args = parser.parse_args(argv)
    args.demo_files = 3 if args.demo_files is None and not args.source else args.demo_files
    lake = Path(args.lake or tempfile.mkdtemp(prefix="deltasink-streaming-"))
    if not args.lake:
        atexit.register(shutil.rmtree, lake, ignore_errors=True)
    args.lake = str(lake)
    args.source = str(Path(args.source or lake / "landing" / "orders").absolute())
    args.target = str(args.target or lake / "silver" / "orders")
    args.checkpoint = str(args.checkpoint or lake / "_checkpoints" / "orders_stream")
    return args


def run(args: argparse.Namespace) -> int:
    log_setup()
    source, target, checkpoint = Path(args.source), args.target, Path(args.checkpoint)
    print(f"lake: {args.lake}")
    demo_files = args.demo_files
    if demo_files:
        write_demo_files(source, demo_files)

    spark = embedded_spark()
    sink = DeltaSink(target=target, app_id=args.app_id, merge=MERGE, spark=spark)

    # Start-up: finish whatever a crash left staged (Flink's recoverAndCommit).
    for r in sink.recover().results:
        print(f"recovered versions {list(r.all_versions)}: {r.outcome}")

    if args.resume and checkpoint.exists() and not done(checkpoint):
        # A refused run planned its batch 0 from the start of the input: start over.
        print(f"resume: the checkpoint {checkpoint} committed nothing; starting it afresh")
        shutil.rmtree(checkpoint)
    start_checkpoint(checkpoint)
    offsets, commits = planned(checkpoint), done(checkpoint)
    last = max(offsets, default=-1)
    seen = {f for files in offsets.values() for f in files}
    # The files the target holds stay out, whichever checkpoint delivered them (after a
    # resume, the earlier query's; Spark's file source only knows its own checkpoint's).
    point = sink.offsets()
    held = {f for s in point.starting if s["kind"] == "files" for f in s["files"]}
    if args.resume and last < 0:
        print(f"resuming after version {point.version}: {len(held)} file(s) already committed")
    seen |= held
    # 1. The last planned batch may not be done: run it again, same files, same id.
    ran = last >= 0 and last not in commits
    if ran:
        run_batch(spark, sink, checkpoint, last, offsets[last], resume=args.resume)

    # 2. New files -> new batches: plan (offsets/n), run, record (commits/n).
    while True:
        new = sorted(
            p.absolute().as_uri()
            for p in source.glob("*.json")
            if not p.name.startswith(".") and p.absolute().as_uri() not in seen
        )
        if not new:
            if args.poll_seconds <= 0:
                break
            time.sleep(args.poll_seconds)
            continue
        last += 1
        files = new[: args.max_files_per_batch]
        plan(checkpoint, last, files)  # plan first: a replay reads the same files
        run_batch(spark, sink, checkpoint, last, files, resume=args.resume)
        seen.update(files)
        ran = True

    if not ran:
        print(f"nothing new: every file in {source} is in a committed batch (last {last})")
    st = sink.status()
    print(f"status: committed version {st.committed_version}, pending {st.pending_versions}")
    if st.target_exists:
        rows = spark.sql(
            f"SELECT order_id, status, amount FROM delta.`{sink.target}` ORDER BY order_id"
        ).collect()
        print("target: " + ", ".join(f"{r.order_id}={r.status}/{r.amount:g}" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
