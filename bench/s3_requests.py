"""Requests, not seconds: what a steady-state 10-row ``sink.write`` sends to an S3 API,
against the best hand-written delta-rs MERGE of the same batch, on the same server.

    python -m bench.s3_requests [--runs 100] [--rows 10000]

On an object store each request costs a round trip (10-50 ms on S3), which dominates a
small batch's time; so this counts requests instead of timing them. The server is moto
on 127.0.0.1 (``tests/s3server.py``, a child process that counts every request it
answers by kind). Sides, each on its own target holding the same ``--rows`` rows, each
warmed up with three batches first (a running job: tables open, staging present, epoch
claimed), then ``--runs`` batches counted (100 by default: delta-rs reads every commit
since a table's last checkpoint to answer a marker read, so the count grows between
checkpoints; 100 batches average over a whole checkpoint interval of the target):

* ``sink``: ``sink.write(batch, v)`` (upsert by key; a direct publish when nothing is
  pending), the sink kept across batches as a job keeps it;
* ``merge``: a ``DeltaTable`` kept open across batches, one delta-rs MERGE per batch
  (``when_matched_update_all`` + ``when_not_matched_insert_all``), no marker;
* ``merge_txn``: the same MERGE carrying ``Transaction(app_id, version)`` and skipping a
  version the table's marker already holds: the hand-written exactly-once upsert.

``best`` is the hand-written side with the fewest requests per batch. The goal of issue
26 is ``sink`` at most 1.2x ``best``. Prints a Markdown table (GET / HEAD / PUT / LIST /
DELETE / other per batch) and writes ``bench/out/s3-requests.json``, which ``make bench``
(``python -m bench.run``) adds to ``docs/benchmarks.md`` when it exists (like P6, it
runs on its own).
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from bench.common import OUT_DIR, log
from bench.report import render_s3
from deltasink import DeltaSink, MergeSpec
from tests.s3server import BUCKET, S3Server

__all__ = ["KINDS", "main", "run"]

KINDS = ("GET", "HEAD", "PUT", "LIST", "DELETE", "COPY", "POST", "DYNAMODB")
WARM_UP = 3


def _batch(version: int, rows: int) -> pa.Table:
    """Ten rows: five updates of existing keys, five new keys."""
    updates = [(version * 37 + i * 101) % rows for i in range(5)]
    inserts = [rows + version * 5 + i for i in range(5)]
    ids = updates + inserts
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{version}"] * 10})


def _seed(uri: str, options: dict[str, str], rows: int) -> None:
    ids = pa.array(range(rows), pa.int64())
    write_deltalake(uri, pa.table({"id": ids, "v": ["seed"] * rows}), storage_options=options)


def _side_sink(uri: str, options: dict[str, str]) -> Callable[[int, pa.Table], None]:
    sink = DeltaSink(uri, "bench", MergeSpec(keys=["id"]), storage_options=options)

    def write(version: int, batch: pa.Table) -> None:
        sink.write(batch, version)

    return write


def _merge(table: Any, batch: pa.Table, props: Any = None) -> None:
    (
        table.merge(
            batch,
            "t.id = s.id",
            source_alias="s",
            target_alias="t",
            commit_properties=props,
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _side_merge(uri: str, options: dict[str, str]) -> Callable[[int, pa.Table], None]:
    table = DeltaTable(uri, storage_options=options)
    return lambda _version, batch: _merge(table, batch)


def _side_merge_txn(uri: str, options: dict[str, str]) -> Callable[[int, pa.Table], None]:
    table = DeltaTable(uri, storage_options=options)

    def write(version: int, batch: pa.Table) -> None:
        done = table.transaction_version("bench")
        if done is not None and done >= version:
            return
        props = CommitProperties(app_transactions=[Transaction(app_id="bench", version=version)])
        _merge(table, batch, props)

    return write


SIDES: dict[str, Callable[[str, dict[str, str]], Callable[[int, pa.Table], None]]] = {
    "sink": _side_sink,
    "merge": _side_merge,
    "merge_txn": _side_merge_txn,
}


def run(runs: int = 100, rows: int = 10_000) -> dict[str, Any]:
    """Count the requests of each side; returns per-side totals and per-batch means."""
    server = S3Server()
    try:
        server.client().create_bucket(Bucket=BUCKET)
        options = server.storage_options()
        results: dict[str, Any] = {}
        finals: dict[str, list[dict[str, Any]]] = {}
        for name, make in SIDES.items():
            uri = f"s3://{BUCKET}/bench-{uuid.uuid4().hex[:8]}/{name}"
            _seed(uri, options, rows)
            write = make(uri, options)
            for version in range(WARM_UP):
                write(version, _batch(version, rows))
            server.counts(reset=True)
            for version in range(WARM_UP, WARM_UP + runs):
                write(version, _batch(version, rows))
            counts = server.counts(reset=True)
            total = sum(counts.values())
            results[name] = {
                "total": total,
                "per_batch": total / runs,
                "by_kind": {k: counts.get(k, 0) / runs for k in KINDS if counts.get(k)},
            }
            table = DeltaTable(uri, storage_options=options).to_pyarrow_table()
            finals[name] = table.sort_by("id").to_pylist()
            log(f"{name}: {total / runs:.1f} requests per batch {results[name]['by_kind']}")
        best = min(("merge", "merge_txn"), key=lambda n: results[n]["per_batch"])
        ratio = results["sink"]["per_batch"] / results[best]["per_batch"]
        same = finals["sink"] == finals["merge"] == finals["merge_txn"]
        return {
            "runs": runs,
            "rows": rows,
            "sides": results,
            "best": best,
            "ratio": ratio,
            "same_rows": same,
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    out = run(args.runs, args.rows)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "s3-requests.json").write_text(json.dumps(out, indent=2))
    print(render_s3(out))


if __name__ == "__main__":
    main()
