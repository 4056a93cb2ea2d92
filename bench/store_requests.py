"""Requests and latency on object stores: a steady-state 10-row ``sink.write`` and a
coalesced commit, on S3 (moto) and ADLS (Azurite), against the kept-open delta-rs
MERGE carrying the same ``txn`` marker.

    python -m bench.store_requests [--stores s3,adls] [--runs 100] [--delays 20,60]

Every client goes through :class:`tests.storeproxy.StoreProxy`, which counts each
request by verb (``GET``, ``HEAD``, ``PUT``, ``LIST``, ``DELETE``) and, for the latency
part, waits a fixed delay before forwarding it (a round trip to a real store: 20 ms,
and 60 ms as S3's conditional write measures). Parts:

* **write** (requests by verb, per write): each side on its own target, three warm-up
  writes (a running job: tables open, staging present, epoch claimed), then ``--runs``
  counted writes (100: delta-rs reads every commit since a table's last checkpoint to
  answer a marker read, so a side's count moves within a checkpoint interval). Layouts:
  ``spread`` (:mod:`bench.s3_requests`'s: a 10,000-row target, 5 updates of keys spread
  over it and 5 inserts) and ``recent`` (a 1,000-row target, 3 updates of keys of the
  previous batch and 7 inserts). Sides: ``sink`` (``sink.write``, upsert by key) and
  ``merge_txn`` (a ``DeltaTable`` kept open, ``transaction_version`` read to skip a
  replay, one MERGE with ``Transaction(app_id, version)``: the hand-written
  exactly-once upsert).
* **coalesced** (requests): ten batches pending, then one commit. ``sink``: ten
  ``pre_commit`` then ``commit``; ``hand``: the same written by hand, each batch
  appended to a staging table kept open (``write_deltalake`` with its ``txn``), then
  one kept-open MERGE of their union carrying the marker. Both the whole (staging
  writes and commit) and the commit alone against the MERGE alone.
* **latency**: the same write and coalesced commit with every request delayed; median
  wall time per operation, each side measured alternately, and the median of a
  write's sequential round trips (requests sent together count once).
* **trace**: one steady-state ``sink.write`` and one ``merge_txn`` write per store,
  each request with the call that caused it (:class:`bench.stores.Tracer`), so every
  request above the MERGE's is named.

Goals (issue 39): the write at most the data files plus one commit in PUTs, no HEAD or
LIST beyond the MERGE's, at most 1.1x its requests in total; the coalesced commit at
most 1.2x the hand-written one; the delayed write at most 1.2x. Writes
``bench/out/stores.json``, which ``make bench`` renders into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from bench.common import OUT_DIR, Config, log
from bench.stores import KINDS, Store, Tracer, open_store
from deltasink import DeltaSink, MergeSpec

__all__ = ["LAYOUTS", "main", "run", "run_for"]

APP = "bench"
WARM_UP = 3
PENDING = 10

#: name -> (target rows, batch of a version)
LAYOUTS: dict[str, tuple[int, Callable[[int, int], pa.Table]]] = {}


def _spread(version: int, rows: int) -> pa.Table:
    updates = [(version * 37 + i * 101) % rows for i in range(5)]
    inserts = [rows + version * 5 + i for i in range(5)]
    return pa.table({"id": pa.array(updates + inserts, pa.int64()), "v": [f"v{version}"] * 10})


def _recent(version: int, rows: int) -> pa.Table:
    previous = [rows + (version - 1) * 7 + i for i in range(3)] if version else [0, 1, 2]
    inserts = [rows + version * 7 + i for i in range(7)]
    return pa.table({"id": pa.array(previous + inserts, pa.int64()), "v": [f"v{version}"] * 10})


LAYOUTS["spread"] = (10_000, _spread)
LAYOUTS["recent"] = (1_000, _recent)

Write = Callable[[int, pa.Table], None]


def _seed(store: Store, uri: str, rows: int) -> None:
    ids = pa.array(range(rows), pa.int64())
    write_deltalake(uri, pa.table({"id": ids, "v": ["seed"] * rows}), storage_options=store.options)


def _merge(table: DeltaTable, batch: pa.Table, version: int) -> None:
    props = CommitProperties(app_transactions=[Transaction(app_id=APP, version=version)])
    (
        table.merge(
            batch, "t.id = s.id", source_alias="s", target_alias="t", commit_properties=props
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def _merge_txn(store: Store, uri: str) -> Write:
    table = DeltaTable(uri, storage_options=store.options)

    def write(version: int, batch: pa.Table) -> None:
        done = table.transaction_version(APP)
        if done is None or done < version:
            _merge(table, batch, version)

    return write


def _sink(store: Store, uri: str) -> Write:
    sink = DeltaSink(uri, APP, MergeSpec(keys=["id"]), storage_options=store.options)
    return lambda version, batch: sink.write(batch, version) and None


WRITERS: dict[str, Callable[[Store, str], Write]] = {"sink": _sink, "merge_txn": _merge_txn}


def _per_op(counts: dict[str, int], ops: int) -> dict[str, float]:
    per = {k: counts.get(k, 0) / ops for k in KINDS if counts.get(k)}
    per["total"] = sum(counts.values()) / ops
    return per


def _rows(store: Store, uri: str) -> list[dict[str, Any]]:
    return (
        DeltaTable(uri, storage_options=store.options).to_pyarrow_table().sort_by("id").to_pylist()
    )


def write_requests(store: Store, layout: str, runs: int) -> dict[str, Any]:
    """Requests per steady-state write, by verb, of each side in ``layout``."""
    rows, batch = LAYOUTS[layout]
    out: dict[str, Any] = {}
    finals = []
    for side, make in WRITERS.items():
        uri = store.uri(f"{layout}-{side}")
        _seed(store, uri, rows)
        write = make(store, uri)
        for version in range(WARM_UP):
            write(version, batch(version, rows))
        store.proxy.reset()
        for version in range(WARM_UP, WARM_UP + runs):
            write(version, batch(version, rows))
        out[side] = _per_op(store.proxy.counts(), runs)
        finals.append(_rows(store, uri))
        log(f"{store.name} {layout} {side}: {out[side]}")
    out["same_rows"] = all(f == finals[0] for f in finals)
    return out


class _Hand:
    """Ten batches staged by hand (each appended to a staging table kept open, with its
    ``txn``), then one kept-open MERGE of their union (the latest row per key, as
    coalescing keeps it) carrying the last version's marker."""

    def __init__(self, store: Store, target: str) -> None:
        self.store = store
        self.table = DeltaTable(target, storage_options=store.options)
        self.staging_uri = target + "_hand_staging"
        self.staging: DeltaTable | None = None

    def stage(self, first: int, batches: list[pa.Table]) -> None:
        for i, batch in enumerate(batches):
            version = first + i
            data = batch.append_column("_version", pa.array([version] * batch.num_rows, pa.int64()))
            props = CommitProperties(app_transactions=[Transaction(app_id=APP, version=version)])
            if self.staging is None:
                write_deltalake(
                    self.staging_uri,
                    data,
                    partition_by=["_version"],
                    commit_properties=props,
                    storage_options=self.store.options,
                )
                self.staging = DeltaTable(self.staging_uri, storage_options=self.store.options)
            else:
                write_deltalake(self.staging, data, mode="append", commit_properties=props)

    def merge(self, first: int, batches: list[pa.Table]) -> None:
        _merge(self.table, _latest(batches), first + len(batches) - 1)


def _latest(batches: list[pa.Table]) -> pa.Table:
    union = pa.concat_tables(batches)
    keep = {key: i for i, key in enumerate(union.column("id").to_pylist())}
    return union.take(pa.array(sorted(keep.values()), pa.int64()))


def coalesced_requests(store: Store, layout: str, rounds: int) -> dict[str, Any]:
    """Requests of ten pending versions and their commit, sink against by hand."""
    rows, batch = LAYOUTS[layout]
    out: dict[str, Any] = {}
    finals = []
    for side in ("sink", "hand"):
        uri = store.uri(f"coalesced-{layout}-{side}")
        _seed(store, uri, rows)
        stage_counts: dict[str, int] = {}
        commit_counts: dict[str, int] = {}
        sink = DeltaSink(uri, APP, MergeSpec(keys=["id"]), storage_options=store.options)
        hand = _Hand(store, uri)
        if side == "sink":
            sink.write(batch(0, rows), 0)  # warm: tables open, epoch claimed
        else:
            hand.stage(0, [batch(0, rows)])
            hand.merge(0, [batch(0, rows)])
        for r in range(rounds):
            first = 1 + r * PENDING
            batches = [batch(first + i, rows) for i in range(PENDING)]
            store.proxy.reset()
            if side == "sink":
                for i, b in enumerate(batches):
                    sink.pre_commit(b, first + i)
            else:
                hand.stage(first, batches)
            _add(stage_counts, store.proxy.counts(reset=True))
            if side == "sink":
                sink.commit(first + PENDING - 1)
            else:
                hand.merge(first, batches)
            _add(commit_counts, store.proxy.counts(reset=True))
        out[side] = {
            "stage": _per_op(stage_counts, rounds),
            "commit": _per_op(commit_counts, rounds),
            "total": _per_op(_sum(stage_counts, commit_counts), rounds),
        }
        finals.append(_rows(store, uri))
        log(f"{store.name} coalesced {layout} {side}: {out[side]['total']}")
    out["same_rows"] = finals[0] == finals[1]
    return out


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + v


def _sum(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    _add(out, b)
    return out


def latency(store: Store, delay_ms: float, runs: int) -> dict[str, Any]:
    """Median wall time (ms) of a steady-state write and of a coalesced commit of ten
    versions, each request delayed by ``delay_ms``."""
    rows, batch = LAYOUTS["spread"]
    writers = {}
    for side, make in WRITERS.items():
        uri = store.uri(f"latency-{side}")
        _seed(store, uri, rows)
        writers[side] = make(store, uri)
        for version in range(WARM_UP):
            writers[side](version, batch(version, rows))
    store.proxy.set_delay(delay_ms)
    times: dict[str, list[float]] = {side: [] for side in writers}
    trips: dict[str, list[int]] = {side: [] for side in writers}
    try:
        for i in range(runs):
            version = WARM_UP + i
            order = list(writers) if i % 2 == 0 else list(reversed(writers))
            for side in order:
                data = batch(version, rows)
                store.proxy.reset()
                start = time.perf_counter()
                writers[side](version, data)
                times[side].append((time.perf_counter() - start) * 1000)
                trips[side].append(store.proxy.round_trips())
    finally:
        store.proxy.set_delay(0)
    out: dict[str, Any] = {side: _ms(t) for side, t in times.items()}
    for side, counted in trips.items():  # requests one after another (sent together: one)
        out[side]["round_trips"] = statistics.median(counted)
    out["ratio"] = out["sink"]["median"] / out["merge_txn"]["median"]
    out["coalesced"] = _coalesced_latency(store, delay_ms, max(3, runs // 5))
    return out


def _coalesced_latency(store: Store, delay_ms: float, rounds: int) -> dict[str, Any]:
    rows, batch = LAYOUTS["spread"]
    uri = store.uri("latency-coalesced-sink")
    _seed(store, uri, rows)
    sink = DeltaSink(uri, APP, MergeSpec(keys=["id"]), storage_options=store.options)
    sink.write(batch(0, rows), 0)
    other = store.uri("latency-coalesced-hand")
    _seed(store, other, rows)
    hand = _Hand(store, other)
    hand.stage(0, [batch(0, rows)])
    hand.merge(0, [batch(0, rows)])
    samples: dict[str, list[float]] = {
        k: [] for k in ("sink_stage", "sink_commit", "stage", "merge")
    }
    store.proxy.set_delay(delay_ms)
    try:
        for r in range(rounds):
            first = 1 + r * PENDING
            batches = [batch(first + i, rows) for i in range(PENDING)]
            clock = [time.perf_counter()]
            for i, b in enumerate(batches):
                sink.pre_commit(b, first + i)
            clock.append(time.perf_counter())
            sink.commit(first + PENDING - 1)
            clock.append(time.perf_counter())
            hand.stage(first, batches)
            clock.append(time.perf_counter())
            hand.merge(first, batches)
            clock.append(time.perf_counter())
            for name, (a, b) in zip(samples, itertools.pairwise(clock), strict=True):
                samples[name].append((b - a) * 1000)
    finally:
        store.proxy.set_delay(0)
    sink_total = [a + b for a, b in zip(samples["sink_stage"], samples["sink_commit"], strict=True)]
    hand_total = [a + b for a, b in zip(samples["stage"], samples["merge"], strict=True)]
    out = {name: _ms(values) for name, values in samples.items()}
    out["sink_total"] = _ms(sink_total)
    out["hand_total"] = _ms(hand_total)
    out["ratio"] = statistics.median(sink_total) / statistics.median(hand_total)
    out["commit_ratio"] = statistics.median(samples["sink_commit"]) / statistics.median(
        samples["merge"]
    )
    return out


def _ms(samples: list[float]) -> dict[str, Any]:
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "n": len(samples),
    }


def trace(store: Store) -> dict[str, list[list[str]]]:
    """One steady-state write of each side, each request with the call behind it."""
    rows, batch = LAYOUTS["spread"]
    out: dict[str, list[list[str]]] = {}
    for side, make in WRITERS.items():
        uri = store.uri(f"trace-{side}")
        _seed(store, uri, rows)
        write = make(store, uri)
        for version in range(WARM_UP):
            write(version, batch(version, rows))
        tracer = Tracer(store.proxy)
        tracer.install()
        try:
            store.proxy.reset()
            write(WARM_UP, batch(WARM_UP, rows))
            out[side] = [[_short(request), call] for request, call in tracer.trace()]
        finally:
            tracer.remove()
    return out


def _short(request: str) -> str:
    """A request without the bucket, the run's random prefix and query noise."""
    verb, _, path = request.partition(" ")
    route, _, query = path.partition("?")
    parts = [p for p in route.split("/") if p]
    if verb == "LIST":
        prefix = next((q.split("=", 1)[1] for q in query.split("&") if q.startswith("prefix=")), "")
        prefix = prefix.replace("%2F", "/")
        return f"LIST {'/'.join(prefix.split('/')[1:])}"
    # bucket/run/table... (S3) or account/container/run/table... (ADLS)
    skip = 2 if parts and parts[0] != "deltasink" else 3
    return f"{verb} {'/'.join(parts[skip:])}"


@contextmanager
def _stores(names: list[str]) -> Iterator[dict[str, Store]]:
    from contextlib import ExitStack

    with ExitStack() as stack:
        opened = {}
        for name in names:
            try:
                opened[name] = stack.enter_context(open_store(name))
            except RuntimeError as exc:
                log(f"{name}: skipped ({exc})")
        yield opened


def run(
    stores: tuple[str, ...] = ("s3", "adls"),
    runs: int = 100,
    delays: tuple[float, ...] = (20.0, 60.0),
    latency_runs: int = 15,
    rounds: int = 5,
) -> dict[str, Any]:
    """All parts on each store; the results as one JSON-able dict."""
    import os

    out: dict[str, Any] = {
        "runs": runs,
        "rounds": rounds,
        "pending": PENDING,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "stores": {},
    }
    with _stores(list(stores)) as opened:
        for name, store in opened.items():
            result: dict[str, Any] = {"write": {}, "coalesced": {}, "latency": {}}
            for layout in LAYOUTS:
                result["write"][layout] = write_requests(store, layout, runs)
            result["coalesced"]["spread"] = coalesced_requests(store, "spread", rounds)
            for delay in delays:
                result["latency"][str(int(delay))] = latency(store, delay, latency_runs)
                log(
                    f"{name} latency {delay} ms: {result['latency'][str(int(delay))]['ratio']:.2f}x"
                )
            result["trace"] = trace(store)
            out["stores"][name] = result
    out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    return out


def run_for(config: Config) -> dict[str, Any]:
    """:func:`run` as ``make bench`` runs it (``--quick``: fewer writes and rounds)."""
    if config.quick:
        return run(runs=20, latency_runs=5, rounds=2, delays=(20.0,))
    return run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="s3,adls")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--delays", default="20,60")
    parser.add_argument("--latency-runs", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    out = run(
        tuple(args.stores.split(",")),
        args.runs,
        tuple(float(d) for d in args.delays.split(",") if d),
        args.latency_runs,
        args.rounds,
    )
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "stores.json").write_text(json.dumps(out, indent=2))
    from bench.report_stores import render_stores

    print(render_stores(out))


if __name__ == "__main__":
    main()
