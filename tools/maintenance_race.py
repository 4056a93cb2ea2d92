#!/usr/bin/env python
"""Maintenance beside live writers, raced for real: compactions that must not change
rows, and ``gc`` that must not stop a writer.

    python -m tools.maintenance_race compaction --trials 50 --seed 1
    python -m tools.maintenance_race gc --runs 20 --versions 400

``compaction``: each trial is a fresh target written by two writer processes (apps
``a`` and ``b``, 100 upsert batches each: a new key per batch, and every other batch an
update of one of the app's earlier keys, so small files gather and MERGEs rewrite files),
beside compactions, by scenario (``--scenario``, default: each in turn):

* ``apps``: the target has ``delta.autoOptimize.autoCompact=true``, so both writers
  auto-compact it after their commits, racing each other;
* ``optimize``: an operator process calls ``sink.optimize()`` in a loop while the two
  writers run (no auto compaction);
* ``operators``: two such operator processes (two ``optimize()`` loops racing);
* ``both``: auto compaction and one operator together.

After the writers finish, the target is read with delta-rs and compared with the
oracle (the last value each app wrote for each of its keys): *duplicated* rows (a key
more than once), *wrong* values (a key whose value is not the latest, e.g. an older one
a compaction brought back) and *missing* keys. Prints per trial and a summary (with
the compaction commits made) and exits 1 on any violation.

``gc``: each run is a writer staging and committing ``--versions`` append versions
(``pre_commit`` then ``commit``, one row each) while ``deltasink gc --retention-hours 0``
runs in a loop in other processes. A run passes when the writer finishes and the
target holds exactly its rows; prints how many of ``--runs`` passed, exits 1 otherwise.

Both are for the record (docs/reliability.md); the test suite runs small samples of the
same mechanisms (tests/test_maintenance_race.py).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

SCRIPT = Path(__file__).resolve()
APPS = ("a", "b")
SCENARIOS = ("apps", "optimize", "operators", "both")
_FIELDS: list[pa.Field[Any]] = [pa.field("id", pa.int64()), pa.field("v", pa.string())]
SCHEMA = pa.schema(_FIELDS)


# -- the source and its oracle ------------------------------------------------------


def batch_rows(seed: int, app: str, version: int) -> list[dict[str, Any]]:
    """Batch ``version`` of ``app``: a new key, and on odd versions an update of one of
    the app's earlier keys (keys of the two apps never meet)."""
    base = (APPS.index(app) + 1) * 100_000
    rows = [{"id": base + version, "v": f"{app}{version}"}]
    if version % 2:
        rng = random.Random(f"{seed}/{app}/{version}")
        rows.append({"id": base + rng.randrange(version), "v": f"{app}{version}u"})
    return rows


def oracle(seed: int, batches: int) -> dict[int, str]:
    """The value each key must end with: the app's last write of it."""
    expected: dict[int, str] = {}
    for app in APPS:
        for version in range(batches):
            for row in batch_rows(seed, app, version):
                expected[row["id"]] = row["v"]
    return expected


# -- the processes --------------------------------------------------------------------


def run_writer(target: str, app: str, seed: int, batches: int, auto: bool) -> None:
    """One writer: ``batches`` upserts, each with ``write()``."""
    from deltasink import DeltaSink, MergeSpec, TableSpec

    table = TableSpec(properties={"delta.autoOptimize.autoCompact": "true"}) if auto else None
    sink = DeltaSink(target, app, MergeSpec(keys=["id"]), table=table)
    for version in range(batches):
        sink.write(pa.Table.from_pylist(batch_rows(seed, app, version), schema=SCHEMA), version)


def run_operator(target: str, stop_file: str) -> None:
    """``sink.optimize()`` in a loop until ``stop_file`` exists; prints the calls made
    and the named errors met (a lost round is retried inside optimize())."""
    from deltasink import DeltaSink, DeltaSinkError, MergeSpec

    calls, named, raw = 0, Counter[str](), Counter[str]()
    while not os.path.exists(stop_file):
        if os.path.exists(os.path.join(target, "_delta_log")):
            calls += 1
            try:
                DeltaSink(target, "operator", MergeSpec(keys=["id"])).optimize()
            except DeltaSinkError as exc:
                named[type(exc).__name__] += 1
            except Exception as exc:  # not a DeltaSinkError: what an operator must not see
                raw[type(exc).__name__] += 1
        time.sleep(0.05)
    print(json.dumps({"optimize_calls": calls, "named_errors": named, "raw_errors": raw}))


def run_gc_loop(target: str, app: str, stop_file: str) -> None:
    """``deltasink gc --retention-hours 0`` in a loop until ``stop_file`` exists."""
    from deltasink.cli import app as cli

    runs = 0
    while not os.path.exists(stop_file):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                cli(
                    ["gc", target, "--app", app, "--retention-hours", "0"],
                    standalone_mode=False,
                )
        except SystemExit:
            pass
        except Exception as exc:  # printed, the loop goes on: the writer is under test
            print(f"gc: {type(exc).__name__}: {exc}", file=sys.stderr)
        runs += 1
    print(json.dumps({"gc_runs": runs}))


def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


# -- compaction trials ----------------------------------------------------------------


@dataclass
class Trial:
    scenario: str
    duplicated: int
    wrong: int
    missing: int
    compactions: int
    writers_failed: int
    seconds: float
    note: str = ""


def _is_compaction(commit: dict[str, Any]) -> bool:
    """Delta's OPTIMIZE, or a compaction commit of the embedded engine."""
    operation = commit.get("deltasink.operation")
    return commit.get("operation") == "OPTIMIZE" or operation in ("autoCompact", "optimize")


def _stored_rows(table: Any) -> int:
    """The table's row count from its files' statistics (nothing read)."""
    stored = pa.table(table.get_add_actions(flatten=False)).column("num_records")
    return sum(int(n or 0) for n in stored.to_pylist())


def _timed_out(target: str, scenario: str, seed: int, batches: int, seconds: float) -> Trial:
    """A trial whose writers did not finish in time, or whose table grew beyond reading:
    rows counted from the log's statistics (duplicates compound: each compaction of
    duplicated rows copies them again)."""
    from deltalake import DeltaTable

    table = DeltaTable(target)
    rows = _stored_rows(table)
    keys = len(oracle(seed, batches))
    return Trial(
        scenario=scenario,
        duplicated=max(0, rows - keys),
        wrong=0,
        missing=0,
        compactions=sum(1 for c in table.history() if _is_compaction(c)),
        writers_failed=len(APPS),
        seconds=seconds,
        note=f"{rows:,} rows at Delta version {table.version()} for {keys} keys (not read)",
    )


def compaction_trial(
    workdir: Path, scenario: str, seed: int, batches: int, timeout: float = 600.0
) -> Trial:
    """One trial: two writers (and operators) on a fresh target, then the check; writers
    not done after ``timeout`` seconds are stopped and the trial counted as failed."""
    from deltalake import DeltaTable

    target = str(workdir / "target")
    stop = str(workdir / "stop")
    auto = scenario in ("apps", "both")
    started = time.perf_counter()
    writers = [
        _child("--writer", target, app, str(seed), str(batches), "1" if auto else "0")
        for app in APPS
    ]
    operators = {"optimize": 1, "both": 1, "operators": 2}.get(scenario, 0)
    loops = [_child("--operator", target, stop) for _ in range(operators)]
    failed, notes = 0, []
    deadline = started + timeout
    keys = len(oracle(seed, batches))
    # Watch the writers: stop a trial that runs too long, or whose table grew far past
    # its keys (compounding duplicates would soon take every writer's memory).
    while any(w.poll() is None for w in writers):
        time.sleep(1.0)
        try:
            grown = _stored_rows(DeltaTable(target)) > 4 * keys
        except Exception:  # not created yet
            grown = False
        if grown or time.perf_counter() > deadline:
            for child in [*writers, *loops]:
                child.kill()
                child.communicate()
            return _timed_out(target, scenario, seed, batches, time.perf_counter() - started)
    for writer in writers:
        _, err = writer.communicate()
        if writer.returncode:
            failed += 1
            notes.append(
                err.strip().splitlines()[-1] if err.strip() else f"exit {writer.returncode}"
            )
    Path(stop).touch()
    for loop in loops:
        out, err = loop.communicate()
        notes.append(out.strip() or err.strip()[-300:])
    table = DeltaTable(target)
    expected = oracle(seed, batches)
    if _stored_rows(table) > 4 * len(expected):  # duplicates compounded: do not load them
        return _timed_out(target, scenario, seed, batches, time.perf_counter() - started)
    rows = table.to_pyarrow_table().to_pylist()
    counts = Counter(r["id"] for r in rows)
    found = {r["id"]: r["v"] for r in rows}
    compactions = sum(1 for c in table.history() if _is_compaction(c))
    return Trial(
        scenario=scenario,
        duplicated=sum(n - 1 for n in counts.values() if n > 1),
        wrong=sum(1 for k, v in expected.items() if k in found and found[k] != v),
        missing=sum(1 for k in expected if k not in found),
        compactions=compactions,
        writers_failed=failed,
        seconds=time.perf_counter() - started,
        note="; ".join(n for n in notes if n),
    )


def run_compaction(args: argparse.Namespace) -> int:
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    trials: list[Trial] = []
    began = time.perf_counter()
    for i in range(args.trials):
        scenario = scenarios[i % len(scenarios)]
        workdir = Path(tempfile.mkdtemp(prefix="deltasink-race-"))
        try:
            trial = compaction_trial(
                workdir, scenario, args.seed + i, args.batches, args.trial_timeout
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        trials.append(trial)
        print(
            f"trial {i + 1:3d} {trial.scenario:8s} duplicated={trial.duplicated} "
            f"wrong={trial.wrong} missing={trial.missing} compactions={trial.compactions} "
            f"writers_failed={trial.writers_failed} {trial.seconds:.1f}s {trial.note}",
            flush=True,
        )
    bad = [t for t in trials if t.duplicated or t.wrong or t.missing or t.writers_failed]
    print(
        f"summary: {len(trials)} trials ({', '.join(scenarios)}), seed {args.seed}, "
        f"{args.batches} batches per writer: {len(bad)} with a violation; duplicated rows "
        f"{sum(t.duplicated for t in trials)}, wrong values {sum(t.wrong for t in trials)}, "
        f"missing keys {sum(t.missing for t in trials)}, writers failed "
        f"{sum(t.writers_failed for t in trials)}; compaction commits "
        f"{sum(t.compactions for t in trials)}; {time.perf_counter() - began:.0f} s",
        flush=True,
    )
    return 1 if bad else 0


# -- gc beside a writer ---------------------------------------------------------------


def gc_run(workdir: Path, versions: int, loops: int) -> tuple[bool, str]:
    """One writer staging and committing ``versions`` versions beside ``loops`` gc loops."""
    from deltalake import DeltaTable

    from deltasink import DeltaSink, DeltaSinkError, MergeSpec

    target = str(workdir / "target")
    stop = str(workdir / "stop")
    sink = DeltaSink(target, "app", MergeSpec(mode="append"))
    sink.write(pa.table({"id": pa.array([-1], pa.int64())}), 0)  # the tables exist
    gcs = [_child("--gc-loop", target, "app", stop) for _ in range(loops)]
    try:
        for version in range(1, versions):
            sink.pre_commit(pa.table({"id": pa.array([version], pa.int64())}), version)
            sink.commit(version)
        ok, note = True, ""
    except DeltaSinkError as exc:
        ok, note = False, f"version {version}: {type(exc).__name__}: {str(exc)[:300]}"
    finally:
        Path(stop).touch()
        runs = []
        for gc in gcs:
            out, _ = gc.communicate()
            runs.append(out.strip().splitlines()[-1] if out.strip() else "")
    if ok:
        ids = sorted(int(i or 0) for i in DeltaTable(target).to_pyarrow_table()["id"].to_pylist())
        if ids != [-1, *range(1, versions)]:
            ok, note = False, f"the target holds {len(ids)} rows, not exactly the writer's"
    return ok, f"{note} {' '.join(runs)}".strip()


def run_gc(args: argparse.Namespace) -> int:
    passed = 0
    began = time.perf_counter()
    for i in range(args.runs):
        workdir = Path(tempfile.mkdtemp(prefix="deltasink-gcrace-"))
        started = time.perf_counter()
        try:
            ok, note = gc_run(workdir, args.versions, args.loops)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        passed += ok
        print(
            f"run {i + 1:3d} {'finished' if ok else 'FAILED  '} "
            f"{time.perf_counter() - started:.1f}s {note}",
            flush=True,
        )
    print(
        f"summary: the writer finished in {passed} of {args.runs} runs ({args.versions} "
        f"versions, {args.loops} gc loop(s)); {time.perf_counter() - began:.0f} s",
        flush=True,
    )
    return 0 if passed == args.runs else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--writer":
        target, app, seed, batches, auto = argv[1:6]
        run_writer(target, app, int(seed), int(batches), auto == "1")
        return 0
    if argv and argv[0] == "--operator":
        run_operator(argv[1], argv[2])
        return 0
    if argv and argv[0] == "--gc-loop":
        run_gc_loop(argv[1], argv[2], argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    race = sub.add_parser("compaction", help="racing compactions beside two writers")
    race.add_argument("--trials", type=int, default=12)
    race.add_argument("--seed", type=int, default=1)
    race.add_argument("--batches", type=int, default=100)
    race.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all")
    race.add_argument("--trial-timeout", type=float, default=600.0)
    gc = sub.add_parser("gc", help="a writer beside a gc loop")
    gc.add_argument("--runs", type=int, default=20)
    gc.add_argument("--versions", type=int, default=400)
    gc.add_argument("--loops", type=int, default=1)
    args = parser.parse_args(argv)
    return run_compaction(args) if args.command == "compaction" else run_gc(args)


if __name__ == "__main__":
    sys.exit(main())
