"""Fan-in: N writers (app ids) into one target at once (part ``fanin`` of ``make bench``;
alone: ``python -m bench.fanin [--engine embedded|spark] [--writers 1,2,4,8,16]``).

Each writer writes ``--versions`` versions of ``--rows`` rows, upserting by key with
``sequence_by`` (every row's sequence is unique, so the final table does not depend on
the order the commits land in). Two key layouts:

* ``overlap``: every writer draws its rows from the same ``--keys`` keys (the issue's
  case: several feeds updating one silver table's hot keys);
* ``disjoint``: each writer owns a key range of its own (feeds per region).

A *writer* on the embedded engine is a process of its own (started with ``spawn``,
imports done before the clock starts). On the spark engine it is a thread with a
session of its own (``newSession()``) on one JVM: on a 2-core machine, 16 JVMs would
spend the machine on start-up and heaps, and the threads of one driver commit to Delta
exactly as separate clusters do (each its own snapshot, its own optimistic commit);
the session per thread keeps their ``txn`` confs apart.

Beside each case, one writer writes the same batches serially (``serial``), so the
ratio of rates is measured side by side. Reported per case: wall time, versions/s,
the ratio to serial, each write's wait (mean, p99 of the slowest writer), attempts and
conflicts, failures, and the correctness checks: the target equals the oracle (the
highest sequence per key), every ``(app, version)`` is in exactly one commit, and every
writer finished (nobody starved).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

__all__ = ["goal_rows", "main", "render", "run"]

LAYOUTS = ("overlap", "disjoint")


@dataclass(frozen=True)
class Case:
    """One fan-in run."""

    engine: str
    writers: int
    layout: str
    versions: int
    rows: int
    keys: int
    seed: int = 38
    #: The embedded engine's writers: ``processes`` (one each) or ``threads`` (sinks of
    #: one process, whose commits are grouped); the spark engine's are threads.
    placement: str = "processes"

    def batch(self, writer: int, version: int) -> pa.Table:
        """Writer ``writer``'s batch ``version``: distinct keys, unique sequences."""
        import numpy as np

        rng = np.random.default_rng((self.seed, writer, version))
        if self.layout == "overlap":
            ids = rng.choice(self.keys, size=min(self.rows, self.keys), replace=False)
        else:
            ids = writer * self.keys + rng.choice(
                self.keys, size=min(self.rows, self.keys), replace=False
            )
        # unique per row across writers and versions: the oracle is the highest per key
        seq = (version * 64 + writer) * 100_000 + np.arange(len(ids))
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "seq": pa.array(seq, pa.int64()),
                "writer": pa.array([f"w{writer}"] * len(ids)),
                "value": pa.array(rng.integers(0, 1_000_000, len(ids)), pa.int64()),
            }
        )

    def oracle(self) -> dict[int, tuple[int, str, int]]:
        """key -> (seq, writer, value) of the highest sequence written."""
        best: dict[int, tuple[int, str, int]] = {}
        for writer in range(self.writers):
            for version in range(self.versions):
                table = self.batch(writer, version).to_pydict()
                for k, s, w, v in zip(
                    table["id"], table["seq"], table["writer"], table["value"], strict=True
                ):
                    if k not in best or s > best[k][0]:
                        best[k] = (s, w, v)
        return best


def _spec() -> Any:
    from deltasink import MergeSpec

    return MergeSpec(keys=["id"], sequence_by="seq")


def _write_all(sink: Any, case: Case, writer: int, frame: Any = None) -> dict[str, Any]:
    """One writer's versions: each write's wait, attempts and conflicts."""
    waits, attempts, conflicts, failures = [], [], 0, []
    for version in range(case.versions):
        batch = case.batch(writer, version)
        data = batch if frame is None else frame(batch)
        start = time.perf_counter()
        try:
            report = sink.write(data, version)
        except Exception as exc:  # counted: the goal is none
            failures.append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        waits.append(time.perf_counter() - start)
        for result in report.results:
            attempts.append(result.telemetry.attempts)
            conflicts += len(result.telemetry.conflicts)
    return {
        "writer": writer,
        "waits": waits,
        "attempts": attempts,
        "conflicts": conflicts,
        "failures": failures,
        "finished": time.time(),
    }


def _process_writer(target: str, case: Case, writer: int, ready: Any, go: Any, out: Any) -> None:
    from deltasink import DeltaSink

    sink = DeltaSink(target, f"writer-{writer}", _spec(), engine="embedded", max_commit_attempts=64)
    sink.status()  # imports done, tables opened: then wait for the others
    ready.put(writer)
    go.wait()
    out.put(_write_all(sink, case, writer))


def _run_processes(case: Case, target: str, writers: Sequence[int]) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_process_writer, args=(target, case, w, ready, go, out)) for w in writers
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)
    start_at = time.time()
    go.set()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    for r in results:
        r["start_at"] = start_at
    return results


def _run_threads(
    case: Case, target: str, writers: Sequence[int], spark: Any
) -> list[dict[str, Any]]:
    from deltasink import DeltaSink

    start = threading.Barrier(len(writers))
    results: list[dict[str, Any]] = []
    stamp: list[float] = []

    def run(writer: int) -> None:
        if spark is None:  # the embedded engine: sinks of one process
            sink = DeltaSink(target, f"writer-{writer}", _spec(), max_commit_attempts=64)
            sink.status()  # tables opened before the clock starts
            if start.wait() == 0:
                stamp.append(time.time())
            results.append(_write_all(sink, case, writer))
            return
        session = spark.newSession()
        sink = DeltaSink(
            target,
            f"writer-{writer}",
            _spec(),
            engine="spark",
            spark=session,
            max_commit_attempts=64,
        )
        schema = "id long, seq long, writer string, value long"
        frame = lambda t: session.createDataFrame(t.to_pylist(), schema)  # noqa: E731
        if start.wait() == 0:
            stamp.append(time.time())
        results.append(_write_all(sink, case, writer, frame))

    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        r["start_at"] = stamp[0]
    return results


def _serial(case: Case, target: str, spark: Any) -> float:
    """One writer writing every batch of the case, in turn: seconds."""
    from deltasink import DeltaSink

    engine = "spark" if spark is not None else "embedded"
    sink = DeltaSink(target, "serial", _spec(), engine=engine, spark=spark)
    sink.status() if spark is None else None
    schema = "id long, seq long, writer string, value long"
    batches = [case.batch(w, v) for v in range(case.versions) for w in range(case.writers)]
    start = time.perf_counter()
    for version, batch in enumerate(batches):
        data = batch if spark is None else spark.createDataFrame(batch.to_pylist(), schema)
        sink.write(data, version)
    return time.perf_counter() - start


def checks(case: Case, target: str, results: list[dict[str, Any]]) -> dict[str, bool]:
    from deltalake import DeltaTable

    table = DeltaTable(target).to_pyarrow_table().to_pydict()
    found = {
        k: (s, w, v)
        for k, s, w, v in zip(
            table["id"], table["seq"], table["writer"], table["value"], strict=True
        )
    }
    once = True
    commits: dict[tuple[str, int], int] = {}
    log = Path(target) / "_delta_log"
    for path in log.glob("*.json"):
        for line in path.read_text().splitlines():
            if '"txn"' in line:
                txn = json.loads(line).get("txn")
                if txn:
                    key = (txn["appId"], int(txn["version"]))
                    commits[key] = commits.get(key, 0) + 1
    for w in range(case.writers):
        for v in range(case.versions):
            once &= commits.get((f"writer-{w}", v), 0) == 1
    return {
        "oracle": found == case.oracle() and len(table["id"]) == len(found),
        "one_commit_each": once,
        "nobody_starved": all(not r["failures"] for r in results)
        and all(len(r["waits"]) == case.versions for r in results),
    }


def run_case(
    case: Case, work: Path, spark: Any = None, *, serial_first: bool = True
) -> dict[str, Any]:
    """The case and its serial twin, side by side (``serial_first``: which goes first;
    the repeats alternate)."""
    target = str(work / f"{case.engine}-{case.placement}-{case.layout}-{case.writers}")
    serial_target = target + "-serial"
    from bench.common import OtherWork

    load_start = [round(x, 2) for x in os.getloadavg()]
    others = OtherWork()
    writers = range(case.writers)
    serial_s = _serial(case, serial_target, spark) if serial_first else 0.0
    if case.engine == "spark" or case.placement == "threads":
        results = _run_threads(case, target, writers, spark)
    else:
        results = _run_processes(case, target, writers)
    if not serial_first:
        serial_s = _serial(case, serial_target, spark)
    wall = max(r["finished"] for r in results) - results[0]["start_at"]
    waits = [x for r in results for x in r["waits"]]
    p99s = [_p99(r["waits"]) for r in results if r["waits"]]
    total = case.writers * case.versions
    out = {
        "case": case.__dict__,
        "wall_s": wall,
        "serial_s": serial_s,
        "rate": total / wall,
        "serial_rate": total / serial_s,
        "ratio": (total / wall) / (total / serial_s),
        "wait_mean_s": statistics.mean(waits) if waits else None,
        "wait_p99_slowest_s": max(p99s) if p99s else None,
        "attempts_mean": statistics.mean(a for r in results for a in r["attempts"]),
        "attempts_max": max(a for r in results for a in r["attempts"]),
        "conflicts": sum(r["conflicts"] for r in results),
        "failures": [f for r in results for f in r["failures"]][:5],
        "failed": sum(len(r["failures"]) for r in results),
        "checks": checks(case, target, results),
        "loadavg_start": load_start,
        "other_cores": round(others.cores(), 3),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "serial_first": serial_first,
    }
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(serial_target, ignore_errors=True)
    for path in work.glob(f"{Path(target).name}*"):
        shutil.rmtree(path, ignore_errors=True)
    return out


def _p99(xs: Sequence[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def _spark_session() -> Any:
    from bench.p6_delta_spark import delta_spark_session  # the one delta-spark builder

    return delta_spark_session("deltasink-bench-fanin")


def measure(
    engine: str,
    writers: Sequence[int],
    layouts: Sequence[str],
    *,
    versions: int,
    rows: int,
    keys: int,
    runs: int,
    placement: str = "processes",
) -> list[dict[str, Any]]:
    """Every (layout, N) case, ``runs`` times each, the serial twin first in every other
    run (A B, B A, ...)."""
    placement = "threads" if engine == "spark" else placement  # sessions of one JVM
    work = Path(tempfile.mkdtemp(prefix="fanin-"))
    spark = _spark_session() if engine == "spark" else None
    cases = []
    try:
        for layout in layouts:
            for n in writers:
                case = Case(engine, n, layout, versions, rows, keys, placement=placement)
                repeats = [
                    run_case(case, work, spark, serial_first=i % 2 == 0) for i in range(runs)
                ]
                cases.append({"case": case.__dict__, "runs": repeats})
                best = statistics.median(r["ratio"] for r in repeats)
                print(
                    f"[fanin] {engine} {placement} {layout} N={n}: {best:.2f}x serial",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return cases


def group_commit(apps: int, rounds: int, case_rows: int = 200, keys: int = 600) -> dict[str, Any]:
    """Several sinks in one process writing one target: ``apps`` batches per round
    committed as ``apps`` delta-rs MERGEs, each with its own ``txn`` marker (what the
    sinks do today, minus their protocol), against ONE MERGE of the batches folded by
    ``sequence_by`` carrying the ``apps`` markers (what a group commit would do). Bare
    delta-rs on both sides, alternating, each on its own target: seconds per round."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

    from deltasink.core.coalesce import coalesce

    case = Case("embedded", apps, "overlap", rounds, case_rows, keys)
    spec = _spec()
    work = Path(tempfile.mkdtemp(prefix="fanin-group-"))
    times: dict[str, list[float]] = {"separate": [], "group": []}

    def merge(table: DeltaTable, data: pa.Table, markers: list[tuple[str, int]]) -> None:
        props = CommitProperties(
            app_transactions=[Transaction(app_id=a, version=v) for a, v in markers]
        )
        (
            table.merge(
                data, "t.id = s.id", source_alias="s", target_alias="t", commit_properties=props
            )
            .when_matched_update_all(predicate="s.seq > t.seq")
            .when_not_matched_insert_all()
            .execute()
        )

    try:
        tables = {}
        for side in times:
            path = str(work / side)
            write_deltalake(path, case.batch(0, 0).slice(0, 0))
            tables[side] = DeltaTable(path)
        for version in range(rounds):
            batches = [case.batch(w, version) for w in range(apps)]
            for side in ("separate", "group") if version % 2 else ("group", "separate"):
                table = tables[side]
                start = time.perf_counter()
                if side == "separate":
                    for w, data in enumerate(batches):
                        merge(table, data, [(f"app-{w}", version)])
                else:
                    folded = coalesce(list(enumerate(batches)), spec)
                    merge(table, folded, [(f"app-{w}", version) for w in range(apps)])
                times[side].append(time.perf_counter() - start)
        same = sorted(
            tables["separate"].to_pyarrow_table().to_pylist(), key=lambda r: r["id"]
        ) == sorted(tables["group"].to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    separate = statistics.median(times["separate"][1:])
    group = statistics.median(times["group"][1:])
    return {
        "apps": apps,
        "rounds": rounds,
        "separate_s": separate,
        "group_s": group,
        "speedup": separate / group,
        "same_rows": same,
    }


#: Writers per case, and the case the goals are judged on.
WRITERS = (1, 2, 4, 8, 16)
GOAL_RATE = 0.9  # aggregate versions/s with 8 writers, against one writer's serial rate
GOAL_P99 = 5.0  # the slowest writer's p99 wait, against the mean wait
GOAL_GROUP = 4.0  # 16 sinks of one process: aggregate versions/s against serial
#: A run is not a measurement when the 1-minute load average exceeded this (2 cores)
#: at a case's start or end, or its serial baseline moved more than this between runs.
NOISY_LOAD = 1.5
NOISY_SPREAD = 1.5


def _summary(case: dict[str, Any]) -> dict[str, Any]:
    """A case's runs: medians of the ratios and waits, their spread, totals of the
    failures, the highest load seen and whether the run measured anything."""
    runs = case["runs"]

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    from bench.common import QUIET_OTHER_CORES

    serial = [r["serial_rate"] for r in runs]
    load = max(max(r.get("loadavg_start", [0.0])[0], r.get("loadavg", [0.0])[0]) for r in runs)
    spread = max(serial) / min(serial)
    # The writers' own processes raise the load average: what other processes used
    # judges the machine (older results, without it: the load average against 1.5).
    measured = all("other_cores" in r for r in runs)
    other = max((r["other_cores"] for r in runs), default=0.0) if measured else 0.0
    noisy = None
    if not measured and load > NOISY_LOAD:
        noisy = f"load {load:.1f}"
    elif other > QUIET_OTHER_CORES:
        noisy = f"other work used {other:.2f} cores"
    elif len(runs) > 1 and spread > NOISY_SPREAD:
        noisy = f"serial baseline moved {spread:.2f}x"
    return {
        **case["case"],
        "ratio": median("ratio"),
        "ratio_min": min(r["ratio"] for r in runs),
        "ratio_max": max(r["ratio"] for r in runs),
        "rate": median("rate"),
        "serial_rate": median("serial_rate"),
        "serial_spread": spread,
        "wait_mean_s": median("wait_mean_s"),
        "wait_p99_slowest_s": median("wait_p99_slowest_s"),
        "p99_over_mean": float(
            statistics.median(r["wait_p99_slowest_s"] / r["wait_mean_s"] for r in runs)
        ),
        "attempts_mean": median("attempts_mean"),
        "attempts_max": max(r["attempts_max"] for r in runs),
        "conflicts": sum(r["conflicts"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "checks": all(all(r["checks"].values()) for r in runs),
        "runs": len(runs),
        "load_max": load,
        "other_cores_max": other,
        "noisy": noisy,
    }


def run(config: Any) -> dict[str, Any]:
    """``make bench``'s part ``fanin``: the embedded engine's writer processes and its
    sinks of one process (group commit) here, the spark engine in a process of its own
    (a classic JVM session cannot share this one with Sail). ``FANIN`` narrows the
    embedded run (``"writers:versions:layouts"``, e.g. ``"8,16:10:overlap"``);
    ``FANIN_SPARK`` the spark engine's (``"off"``: not run)."""
    from bench.common import OUT_DIR, log

    runs = 1 if config.quick else max(5, config.runs)
    narrowed = os.environ.get("FANIN", "").split(":")
    writers = (
        tuple(int(n) for n in narrowed[0].split(","))
        if narrowed[0]
        else (1, 2, 4)
        if config.quick
        else WRITERS
    )
    versions = int(narrowed[1]) if len(narrowed) > 1 else 5 if config.quick else 15
    layouts = narrowed[2].split(",") if len(narrowed) > 2 else LAYOUTS
    log(f"fanin: embedded engine, N in {writers}, {runs} run(s) per case, sides alternating")
    embedded = measure(
        "embedded", writers, layouts, versions=versions, rows=200, keys=600, runs=runs
    )
    log("fanin: embedded engine, sinks of one process (group commit)")
    threads = measure(
        "embedded",
        [n for n in writers if n > 1],
        ["overlap"],
        versions=versions,
        rows=200,
        keys=600,
        runs=runs,
        placement="threads",
    )
    spark: list[dict[str, Any]] = []
    failed = False
    narrowed = os.environ.get("FANIN_SPARK", "").split(":")
    if narrowed[0] != "off":
        spark_out = OUT_DIR / "fanin-spark.json"
        spark_writers = narrowed[0] if narrowed[0] else ",".join(str(n) for n in writers)
        spark_versions = narrowed[1] if len(narrowed) > 1 else str(2 if config.quick else 3)
        spark_layouts = narrowed[2] if len(narrowed) > 2 else ",".join(LAYOUTS)
        log("fanin: spark engine (its own process)")
        command = [
            sys.executable,
            "-m",
            "bench.fanin",
            "--engine",
            "spark",
            "--writers",
            spark_writers,
            "--versions",
            spark_versions,
            "--layouts",
            spark_layouts,
            "--runs",
            "1",
            "--json",
            str(spark_out),
        ]
        done = subprocess.run(command, check=False)
        failed = done.returncode != 0
        spark = [] if failed else json.loads(spark_out.read_text())["cases"]
    log("fanin: one commit for several sinks of one process, against one commit each")
    group = [group_commit(k, 5 if config.quick else 15) for k in (2, 4, 8)]
    return {
        "cases": [_summary(c) for c in embedded + threads + spark],
        "group": group,
        "runs": runs,
        "spark_failed": failed,
    }


def _at(
    section: dict[str, Any], engine: str, layout: str, writers: int, placement: str
) -> dict[str, Any] | None:
    return next(
        (
            c
            for c in section["cases"]
            if (c["engine"], c["layout"], c["writers"], c.get("placement", "processes"))
            == (engine, layout, writers, placement)
        ),
        None,
    )


def _verdict(case: dict[str, Any], met: bool) -> str:
    """A goal's verdict, or why the case measured nothing (a count is never noisy)."""
    if case.get("noisy"):
        return f"noisy ({case['noisy']}), not a measurement"
    return "**met**" if met else "**missed**"


def _spread(case: dict[str, Any]) -> str:
    return (
        f"{case['ratio']:.2f}x ({case['ratio_min']:.2f}-{case['ratio_max']:.2f} over "
        f"{case['runs']} runs; {case['rate']:.2f} vs {case['serial_rate']:.2f} versions/s)"
        if "ratio_min" in case
        else f"{case['ratio']:.2f}x ({case['rate']:.2f} vs {case['serial_rate']:.2f} versions/s)"
    )


def goal_rows(section: dict[str, Any]) -> list[list[str]]:
    """The goal table's rows: per engine, at 16 writers no failed or lost write, at 8
    the rate and the slowest writer's p99, overlapping keys (the hard case); sinks of
    one process (group commit) at the most writers: the rate."""
    rows = []
    for engine, placement in (("embedded", "processes"), ("spark", "threads")):
        own = [c for c in section["cases"] if c["engine"] == engine]
        top = max((c["writers"] for c in own), default=0)
        at16 = _at(section, engine, "overlap", top, placement)
        at8 = _at(section, engine, "overlap", min(8, top), placement)
        if at16 is None or at8 is None:
            continue
        rows.append(
            [
                f"Fan-in ({engine} engine), {top} writers on overlapping keys: failed or "
                "lost writes, the target against the oracle",
                "0, equal",
                f"{at16['failed']}, {'equal' if at16['checks'] else '**not equal**'}",
                "**met**" if at16["failed"] == 0 and at16["checks"] else "**missed**",
            ]
        )
        rows.append(
            [
                f"Fan-in ({engine}), {at8['writers']} writers: the slowest writer's p99 wait "
                "against the mean wait",
                f"≤ {GOAL_P99:.0f}x",
                f"{at8['p99_over_mean']:.2f}x",
                _verdict(at8, at8["p99_over_mean"] <= GOAL_P99),
            ]
        )
        rows.append(
            [
                f"Fan-in ({engine}), {at8['writers']} writers: aggregate versions/s against "
                "one writer's serial rate",
                f"≥ {GOAL_RATE}x",
                _spread(at8),
                _verdict(at8, at8["ratio"] >= GOAL_RATE),
            ]
        )
    grouped = [
        c for c in section["cases"] if c.get("placement") == "threads" and c["engine"] == "embedded"
    ]
    if grouped:
        top = max(grouped, key=lambda c: c["writers"])
        rows.append(
            [
                f"Group commit (embedded), {top['writers']} sinks of one process: aggregate "
                "versions/s against one writer's serial rate",
                f"≥ {GOAL_GROUP:.0f}x",
                _spread(top),
                _verdict(top, top["ratio"] >= GOAL_GROUP and top["checks"]),
            ]
        )
    return rows


def render(section: dict[str, Any]) -> str:
    """The section of the report."""
    header = (
        "| engine | writers as | keys | writers | versions/s | serial | ratio (min-max) "
        "| serial moved | load (max), others' cores | wait mean | slowest p99 | p99/mean "
        "| attempts (mean, max) | conflicts | failed | oracle, once, all done |"
    )
    lines = [
        "`python -m bench.fanin`: N writers (app ids) write 15 versions (spark engine: 3) "
        "of 200 rows each into one target, upserting with `sequence_by`; `overlap`: "
        "every writer's keys drawn from the same 600, `disjoint`: 600 keys per writer. "
        "Embedded engine: one process per writer (*processes*: they take turns at the "
        "target), or sinks of one process (*threads*: their commits are grouped); "
        "spark engine: one thread per writer, each with a session of its own on one "
        "JVM (16 JVMs do not fit 2 cores). *serial*: one writer writing the same "
        "batches in turn, measured in the same run, before the writers in every other "
        "run and after them in the rest; *ratio*: versions/s of the N writers over the "
        "serial rate, the median of the runs; *serial moved*: the serial rate's max/min "
        f"over the runs; *load*: the 1-minute load average (the writers' own processes "
        "raise it); *others' cores*: the CPU the machine's other processes used during "
        f"the case (a case above {NOISY_SPREAD}x, or whose others used more than "
        "0.2 cores, measured nothing).",
        "",
        header,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in section["cases"]:
        ratio = f"{c['ratio']:.2f}x"
        if "ratio_min" in c:
            ratio += f" ({c['ratio_min']:.2f}-{c['ratio_max']:.2f})"
        lines.append(
            f"| {c['engine']} | {c.get('placement', 'processes')} | {c['layout']} | "
            f"{c['writers']} | {c['rate']:.2f} | {c['serial_rate']:.2f} | {ratio} | "
            f"{c.get('serial_spread', 1.0):.2f}x | {c.get('load_max', 0.0):.2f}, "
            f"{c.get('other_cores_max', 0.0):.2f} | "
            f"{c['wait_mean_s'] * 1000:.0f} ms | "
            f"{c['wait_p99_slowest_s'] * 1000:.0f} ms | {c['p99_over_mean']:.2f}x | "
            f"{c['attempts_mean']:.2f}, {c['attempts_max']} | {c['conflicts']} | "
            f"{c['failed']} | {'yes' if c['checks'] else '**no**'} |"
        )
    if section.get("spark_failed"):
        lines += ["", "The spark engine's run failed (see the log of `make bench`)."]
    if section.get("group"):
        lines += [
            "",
            "Several sinks of one process writing one target (`bench.fanin.group_commit`, "
            "bare delta-rs on both sides, alternating): K batches per round as K MERGEs "
            "each carrying its own `txn` marker, against one MERGE of the K batches "
            "folded by `sequence_by` carrying the K markers.",
            "",
            "| sinks | one commit each | one commit for all | speedup | same rows |",
            "|---|---|---|---|---|",
            *(
                f"| {g['apps']} | {g['separate_s'] * 1000:.0f} ms | {g['group_s'] * 1000:.0f} ms "
                f"| {g['speedup']:.1f}x | {'yes' if g['same_rows'] else '**no**'} |"
                for g in section["group"]
            ),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fanin", description=__doc__)
    parser.add_argument("--engine", choices=("embedded", "spark"), default="embedded")
    parser.add_argument("--writers", default=",".join(str(n) for n in WRITERS))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--versions", type=int, default=15)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--keys", type=int, default=600)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--placement", choices=("processes", "threads"), default="processes")
    parser.add_argument("--json", help="write the cases here (else print a summary)")
    args = parser.parse_args(argv)
    cases = measure(
        args.engine,
        [int(n) for n in args.writers.split(",")],
        args.layouts.split(","),
        versions=args.versions,
        rows=args.rows,
        keys=args.keys,
        runs=args.runs,
        placement=args.placement,
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"cases": cases}, indent=1))
    else:
        print(render({"cases": [_summary(c) for c in cases]}))


if __name__ == "__main__":
    main()
