"""Where does the memory of ``sink.write(df)`` go? ``python -m bench.memprofile``.

Runs the P5 ``sink_write`` configuration in this process with an RSS sampler (every
2 ms) and wraps deltasink's steps (at runtime, nothing is edited) to record when each
starts and ends. Prints, per step: duration, RSS when it started, the peak during it
and RSS when it ended, all relative to the baseline before the write. Steps that a
refactor renamed are skipped with a note.

``--bare`` profiles ``df.toArrow()`` + a bare delta-rs MERGE instead, ``--streamed``
chooses that MERGE's ``streamed_exec``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import threading
import time
from collections.abc import Callable
from typing import Any

from bench.common import FULL, QUICK, Config, remove
from bench.data import fresh_target, parquet_batch, steady_sink, target_template

__all__ = ["main"]

#: (module, attribute path) of the steps to time; the module is where it is *used*.
STEPS = (
    ("deltasink.backends.embedded.backend", "collect"),
    ("deltasink.backends.embedded.backend", "prepare"),
    ("deltasink.backends.embedded.stage", "StagingWriter.append"),
    ("deltasink.backends.deltalog.staging", "StagingLog.read"),
    ("deltasink.backends.embedded.backend", "coalesce"),
    ("deltasink.backends.embedded.publish", "TargetWriter.apply"),
    ("deltasink.backends.embedded.attempt", "align_to_target"),
    ("deltalake.table", "TableMerger.execute"),
    ("deltalake.writer", "write_deltalake"),
    ("deltasink.backends.embedded.stage", "StagingWriter.drop"),
    ("pyspark.sql.connect.dataframe", "DataFrame.toArrow"),
)


class Timeline:
    """RSS samples and step events on one clock."""

    def __init__(self) -> None:
        import psutil

        self._proc = psutil.Process()
        self.samples: list[tuple[float, int]] = []
        self.events: list[tuple[str, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        value: int = self._proc.memory_info().rss
        return value

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self.rss()))
            time.sleep(0.002)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def wrap(self, module: str, path: str) -> bool:
        """Record calls of ``module.path``; ``False`` if it does not exist."""
        try:
            owner: Any = importlib.import_module(module)
        except ImportError:
            return False
        *parents, name = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        original = getattr(owner, name, None) if owner is not None else None
        if original is None:
            return False
        events = self.events

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                events.append((path, start, time.perf_counter()))

        setattr(owner, name, wrapper)
        return True

    def window(self, start: float, end: float) -> tuple[int, int, int]:
        """RSS at ``start``, the peak in [start, end], RSS at ``end``."""
        inside = [rss for t, rss in self.samples if start <= t <= end]
        before = [rss for t, rss in self.samples if t <= start] or [self.samples[0][1]]
        after = [rss for t, rss in self.samples if t >= end] or [self.samples[-1][1]]
        return before[-1], max(inside or [before[-1]]), after[0]


def _mib(n: int) -> str:
    return f"{n / 2**20:+8.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.memprofile", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the quick-mode P5 sizes")
    parser.add_argument("--bare", action="store_true", help="toArrow + bare MERGE instead")
    parser.add_argument("--streamed", choices=("true", "false"), default="true")
    args = parser.parse_args()
    import pyarrow.parquet as pq

    from bench.baselines import bare_merge, open_table
    from deltasink import embedded_spark

    config = Config(sizes=QUICK if args.quick else FULL, runs=1, quick=args.quick)
    sizes = config.sizes
    batch = parquet_batch(config, sizes.p5_target, sizes.p5_batch, "recent")
    arrow_bytes = pq.read_table(batch).nbytes
    work = config.scratch / "memprofile"
    target = fresh_target(target_template(config, sizes.p5_target), work)
    spark = embedded_spark()
    df = spark.read.parquet(str(batch))
    df.limit(100).toArrow()
    timeline = Timeline()
    missing = [f"{m}.{p}" for m, p in STEPS if not timeline.wrap(m, p)]
    operation: Callable[[], object]
    if args.bare:
        table = open_table(target)
        streamed = args.streamed == "true"
        operation = functools.partial(
            lambda: bare_merge(table, df.toArrow(), streamed_exec=streamed)
        )
    else:
        sink = steady_sink(target)
        operation = functools.partial(sink.write, df, 1)
    gc.collect()
    timeline.start()
    time.sleep(0.05)
    start = time.perf_counter()
    operation()
    end = time.perf_counter()
    time.sleep(0.05)
    timeline.stop()
    remove(work)
    base, peak, _ = timeline.window(start, end)
    print(
        f"{'bare MERGE' if args.bare else 'sink.write(df)'}: {sizes.p5_batch:,} rows, Arrow "
        f"{arrow_bytes / 2**20:.0f} MiB; baseline RSS {base / 2**20:.0f} MiB; peak "
        f"{(peak - base) / 2**20:+.0f} MiB = {(peak - base) / arrow_bytes:.1f}x Arrow; "
        f"{end - start:.2f} s"
    )
    print(f"\n{'step':34} {'start s':>8} {'dur s':>7} {'at start':>9} {'peak':>8} {'at end':>8}")
    steps = [ev for ev in timeline.events if ev[1] >= start]  # not the untimed set-up
    for name, s, e in sorted(steps, key=lambda ev: ev[1]):
        at_start, top, at_end = timeline.window(s, e)
        print(
            f"{name:34} {s - start:8.2f} {e - s:7.2f} {_mib(at_start - base):>9} "
            f"{_mib(top - base):>8} {_mib(at_end - base):>8}"
        )
    print("(MiB relative to the baseline)")
    if missing:
        print(f"not found (renamed?): {', '.join(missing)}")


if __name__ == "__main__":
    main()
