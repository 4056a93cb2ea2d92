"""Planning cost against history, quickly: one sink's ``status()``, ``recover()`` and a
10-row ``write`` after ``--batches`` committed 10-row batches (P4's measures, without
P4's hour-long 10,000-batch build), beside the bare delta-rs work for the same question.

    python -m bench.history_probe --batches 2000 [--runs 9] [--json out.json]
    python -m bench.history_probe --batches 1000 --mixed [--auto-compact]

The history is built once into ``bench/out/probe-<batches>`` (about 2.5 min per 1,000
batches) and measured in place (a copy would not do: the staging table records its
target's location), so each run adds ``2 x --runs`` commits to it (under 1%).
``--mixed`` builds P4's shape with inserts instead (batch 0 inserts 1,000 keys; odd
batches update 10 of them, even ones insert 10 new keys, one small file each), and
``--auto-compact`` creates the target with ``delta.autoOptimize.autoCompact=true`` (each
in a history of its own, ``probe-<batches>[-mixed][-ac]``): the active file count is
printed beside the times.
Run it from another checkout's directory (``python -m`` puts the working directory
first on ``sys.path``) with ``--dir`` at the same history to measure that code on it
(an A/B of a change).

Sides (medians of ``--runs``, order rotated):

* ``status (new sink)``: ``DeltaSink(...).status()`` in a fresh sink;
* ``status (same sink)``: ``status()`` again on a sink that has read the logs before;
* ``recover (new sink)``: ``recover()`` with nothing pending;
* ``write 10 rows``: a steady-state sink's ``write`` of a 10-row batch (a MERGE; the
  sink claimed the writer role before, untimed);
* ``write 10 rows (warm sink)``: the same, on a sink that wrote once before (untimed):
  what each micro-batch of a running stream costs;
* ``bare: open + txn``: ``DeltaTable(target).transaction_version(app)`` (the least
  any engine must read to know the committed version);
* ``bare: MERGE 10 rows``: the same 10-row upsert with delta-rs, its txn marker in the
  commit;
* ``bare: best MERGE 10 rows``: the same, written as well as a user can by hand (the
  batch's key range in the join, ``streamed_exec=False``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction

from bench.common import OUT_DIR, Stats, compare, log, machine_info, stats_dict
from deltasink import DeltaSink, MergeSpec, TableSpec

__all__ = ["main"]

APP = "probe"
SPEC = MergeSpec(keys=["id"])


def rows(start: int, n: int = 10, *, ids: list[int] | None = None) -> pa.Table:
    ids = list(range(start, start + n)) if ids is None else ids
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def mixed(version: int) -> pa.Table:
    """Batch ``version`` of ``--mixed``: P4's 1,000 keys, updated 10 at a time in odd
    batches (a MERGE rewriting the file that holds them), 10 new keys in even ones (an
    append: one more small file)."""
    if version == 0:
        return rows(0, 1000)
    if version % 2:
        return rows(0, ids=[(version * 7 + 97 * k) % 1000 for k in range(10)])
    return rows(1000 + version * 10)


def build(
    batches: int, where: Path = OUT_DIR, *, shape: str = "inserts", auto_compact: bool = False
) -> Path:
    """The cached lake: a target with ``batches`` committed versions of one writer."""
    suffix = ("-mixed" if shape == "mixed" else "") + ("-ac" if auto_compact else "")
    lake = where / f"probe-{batches}{suffix}"
    done = lake / "done"
    if done.exists():
        return lake
    shutil.rmtree(lake, ignore_errors=True)
    props = {"delta.autoOptimize.autoCompact": "true"} if auto_compact else {}
    sink = DeltaSink(str(lake / "target"), APP, SPEC, table=TableSpec(properties=props))
    started = time.perf_counter()
    took = []
    for version in range(batches):
        data = mixed(version) if shape == "mixed" else rows(version * 10)
        began = time.perf_counter()
        sink.write(data, version)
        took.append(time.perf_counter() - began)
        if version % 500 == 499:
            log(f"probe history: {version + 1}/{batches} ({time.perf_counter() - started:.0f} s)")
    # what the build's writes cost, the ones that compacted included
    (lake / "build.json").write_text(json.dumps(Stats(tuple(took)).to_dict()))
    done.write_text(str(batches))
    return lake


def measure(lake: Path, runs: int) -> dict[str, Stats]:
    target = str(lake / "target")
    warm = DeltaSink(target, APP, SPEC)
    warm.status()
    next_version = [int(warm.status().committed_version or 0) + 1]
    bare_version = [10**9]

    def timed(call: Any) -> float:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    def write(_rep: int) -> float:
        version = next_version[0]
        next_version[0] += 1
        batch = rows(5)
        writer = DeltaSink(target, APP, SPEC)  # the recover side fenced the last one
        writer.recover()  # untimed: claims the writer role, so the write is steady-state
        return timed(lambda: writer.write(batch, version))

    def write_warm(_rep: int) -> float:
        first, version = next_version[0], next_version[0] + 1
        next_version[0] += 2
        writer = DeltaSink(target, APP, SPEC)
        writer.recover()
        writer.write(rows(5), first)  # untimed: the sink has read both logs before
        return timed(lambda: writer.write(rows(5), version))

    def bare_merge(_rep: int, *, best: bool = False) -> float:
        bare_version[0] += 1
        batch = rows(5)
        # The best a user can write by hand: the batch's key range in the join, the
        # source not streamed (so delta-rs prunes the target's files by it).
        predicate = "t.id >= 5 AND t.id <= 14 AND t.id = s.id" if best else "t.id = s.id"

        def merge() -> None:
            (
                DeltaTable(target)
                .merge(
                    batch,
                    predicate,
                    source_alias="s",
                    target_alias="t",
                    streamed_exec=not best,
                    commit_properties=CommitProperties(
                        app_transactions=[Transaction("bare", bare_version[0])]
                    ),
                )
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )

        return timed(merge)

    sides = {
        "status (new sink)": lambda _rep: timed(lambda: DeltaSink(target, APP, SPEC).status()),
        "status (same sink)": lambda _rep: timed(warm.status),
        "recover (new sink)": lambda _rep: timed(lambda: DeltaSink(target, APP, SPEC).recover()),
        "write 10 rows": write,
        "write 10 rows (warm sink)": write_warm,
        "bare: open + txn": lambda _rep: timed(lambda: DeltaTable(target).transaction_version(APP)),
        "bare: MERGE 10 rows": bare_merge,
        "bare: best MERGE 10 rows": lambda rep: bare_merge(rep, best=True),
    }
    return compare(sides, runs, label="history probe")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dir", type=Path, default=OUT_DIR, help="where the history is kept")
    parser.add_argument("--mixed", action="store_true", help="P4's shape with inserts")
    parser.add_argument("--auto-compact", action="store_true", help="autoCompact on the target")
    args = parser.parse_args(argv)
    shape = "mixed" if args.mixed else "inserts"
    lake = build(args.batches, args.dir.resolve(), shape=shape, auto_compact=args.auto_compact)
    target = DeltaTable(str(lake / "target"))
    before = target.get_add_actions().num_rows
    optimized = sum(c.get("operation") == "OPTIMIZE" for c in target.history())
    built = (
        json.loads((lake / "build.json").read_text()) if (lake / "build.json").exists() else None
    )
    stats = measure(lake, args.runs)
    after = DeltaTable(str(lake / "target")).get_add_actions().num_rows
    print(
        f"history probe: {args.batches} batches ({shape}, autoCompact "
        f"{'on' if args.auto_compact else 'off'}), {args.runs} runs (median [min-max]); "
        f"target files: {before} before, {after} after; {optimized} OPTIMIZE commits"
    )
    if built is not None:
        took = built["samples"]
        print(
            f"  build: {len(took)} writes, median {built['median'] * 1000:.1f} ms, "
            f"mean {sum(took) / len(took) * 1000:.1f} ms, max {built['max'] * 1000:.1f} ms"
        )
    for name, s in stats.items():
        print(f"  {name:22} {s.median * 1000:8.1f} ms [{s.min * 1000:.1f}-{s.max * 1000:.1f}]")
    if args.json:
        payload = {
            "batches": args.batches,
            "shape": shape,
            "auto_compact": args.auto_compact,
            "files": [before, after],
            "optimize_commits": optimized,
            "build": built,
            "machine": machine_info(),
            "sides": stats_dict(stats),
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
