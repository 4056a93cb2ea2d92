"""Where does ``sink.write`` spend its time? ``python -m bench.profile [--quick]``.

Profiles ``sink.write(batch)`` of the P1 case (steady-state sink, fresh copy of the
target per repetition) with :mod:`cProfile`, next to the bare MERGE of the same batch,
and prints:

* the wall time of both (median of ``--reps``);
* the functions of deltasink, delta-rs (``deltalake``, including its native
  ``RawDeltaTable`` calls) and ``pyarrow`` with the most cumulative time, per write.
  Native delta-rs calls are leaves here: their time is Rust (MERGE execution, log
  reads and commits).

``--spark`` profiles ``sink.write(df)`` for the P3 DataFrame instead of Arrow input.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
from pathlib import Path
from typing import Any

from bench.baselines import bare_merge, open_table
from bench.common import FULL, QUICK, Config, remove, stopwatch
from bench.data import fresh_target, make_batch, parquet_batch, steady_sink, target_template

__all__ = ["main"]

_REPO = str(Path(__file__).resolve().parent.parent) + "/"
_INTERESTING = ("/deltasink/", "/deltalake/", "/pyarrow/", "RawDeltaTable", "pyarrow.")


def _rows(stats: pstats.Stats, reps: int, top: int) -> list[tuple[float, float, int, str]]:
    raw: Any = stats.stats  # type: ignore[attr-defined]
    rows = []
    for (path, line, func), (_cc, calls, tottime, cumtime, _callers) in raw.items():
        where = f"{path}:{line}({func})"
        if not any(key in where for key in _INTERESTING):
            continue
        short = where.split("/site-packages/")[-1].split(_REPO)[-1]
        rows.append((cumtime / reps, tottime / reps, calls // reps, short))
    rows.sort(reverse=True)
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the quick-mode P1 sizes")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--layout", choices=("recent", "uniform"), default="recent")
    parser.add_argument("--spark", action="store_true", help="Spark DataFrame input (P3)")
    parser.add_argument("--target-rows", type=int, help="default: P1's")
    parser.add_argument("--batch-rows", type=int, help="default: P1's")
    args = parser.parse_args()
    config = Config(sizes=QUICK if args.quick else FULL, runs=args.reps, quick=args.quick)
    target_rows = args.target_rows or config.sizes.p1_target
    batch_rows = args.batch_rows or config.sizes.p1_batch
    template = target_template(config, target_rows)
    batch: Any = make_batch(config, target_rows, batch_rows, args.layout)
    if args.spark:
        from deltasink import embedded_spark

        path = parquet_batch(config, target_rows, batch_rows, args.layout)
        batch = embedded_spark().read.parquet(str(path))
    work = config.scratch / "profile"
    profiler = cProfile.Profile()
    sink_s, bare_s = [], []
    for _ in range(args.reps):
        sink = steady_sink(fresh_target(template, work / "sink"))
        with stopwatch() as t:
            profiler.enable()
            sink.write(batch, 1)
            profiler.disable()
        sink_s.append(t[0])
        table = open_table(fresh_target(template, work / "bare"))
        with stopwatch() as t:  # from Spark, the bare side collects the batch too
            bare_merge(table, batch.toArrow() if args.spark else batch)
        bare_s.append(t[0])
    remove(work)
    sink_med, bare_med = statistics.median(sink_s), statistics.median(bare_s)
    print(
        f"P1 case {target_rows:,} target rows, {batch_rows:,} batch rows, {args.layout} keys"
        f"{', Spark input' if args.spark else ''}; {args.reps} reps"
    )
    print(
        f"sink.write median {sink_med * 1000:.1f} ms (under cProfile), bare MERGE median "
        f"{bare_med * 1000:.1f} ms, ratio {sink_med / bare_med:.2f}"
    )
    print(f"\n{'cum ms':>8} {'own ms':>8} {'calls':>6}  function (per write)")
    for cum, own, calls, name in _rows(pstats.Stats(profiler), args.reps, args.top):
        print(f"{cum * 1000:8.1f} {own * 1000:8.1f} {calls:6d}  {name}")


if __name__ == "__main__":
    main()
