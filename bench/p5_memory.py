"""P5: peak memory while staging and committing a large batch from Spark.

Each configuration runs in its own child process (``python -m bench.p5_memory``),
so that no configuration inherits another's heap. The child starts the embedded
engine (Sail runs *inside* the process, so its memory counts too), defines
``df = spark.read.parquet(batch)``, warms the engine up on a few rows, opens what the
configuration needs, then records its **baseline RSS** and runs the operation while a
thread samples RSS every 2 ms. It reports the peak above the baseline, which is the
cost of the batch, and ``ru_maxrss`` as a cross-check.

Configurations:

* ``collect``: ``df.toArrow()``, the batch moved into Python (floor for any
  Arrow-based writer).
* ``parquet``: ``df.toArrow()`` then ``pyarrow.parquet.write_table``: the physical
  reference.
* ``bare_merge``: ``df.toArrow()`` then one delta-rs MERGE into the target.
* ``sail_merge``: the engine's own ``MERGE INTO`` (the batch never enters Python).
* ``sink_pre_commit``: ``sink.pre_commit(df, 1)``: staging only.
* ``sink_write``: ``sink.write(df, 1)``: staging and committing (the goal).

The ratio is (peak - baseline) / the batch's Arrow size (``pyarrow.Table.nbytes`` of
the batch as ``pyarrow.parquet`` reads it).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Config, log, remove
from bench.data import fresh_target, parquet_batch, target_template

__all__ = ["CONFIGS", "run"]

CONFIGS = ("collect", "parquet", "bare_merge", "sail_merge", "sink_pre_commit", "sink_write")
VIEW = "deltasink_bench_source"


class PeakSampler:
    """Samples this process's RSS in a thread; ``peak`` is the highest seen."""

    def __init__(self, interval: float = 0.002) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.peak = 0
        self.samples = 0

    def rss(self) -> int:
        value: int = self._proc.memory_info().rss
        return value

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self.samples += 1
            time.sleep(self._interval)

    def __enter__(self) -> PeakSampler:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def _operation(name: str, spark: Any, df: Any, work: Path) -> Callable[[], object]:
    """Set up ``name`` (untimed, before the baseline) and return the operation."""
    import pyarrow.parquet as pq

    from bench.baselines import bare_merge, open_table, sail_merge
    from bench.data import steady_sink

    target = work / "target"
    if name == "collect":
        return lambda: df.toArrow()
    if name == "parquet":
        return lambda: pq.write_table(df.toArrow(), work / "batch.parquet")
    if name == "bare_merge":
        table = open_table(target)
        return lambda: bare_merge(table, df.toArrow())
    if name == "sail_merge":
        df.createOrReplaceTempView(VIEW)
        return lambda: sail_merge(spark, target, VIEW)
    sink = steady_sink(target)
    if name == "sink_pre_commit":
        return lambda: sink.pre_commit(df, 1)
    if name == "sink_write":
        return lambda: sink.write(df, 1)
    raise ValueError(f"unknown configuration {name!r}")


def child(name: str, batch: Path, work: Path) -> dict[str, Any]:
    """Run one configuration in this process and return its measurements."""
    from deltasink import embedded_spark

    spark = embedded_spark()
    df = spark.read.parquet(str(batch))
    df.limit(100).toArrow()  # load the reader and the Arrow path before the baseline
    operation = _operation(name, spark, df, work)
    gc.collect()
    with PeakSampler() as sampler:
        baseline = sampler.peak
        start = time.perf_counter()
        operation()
        seconds = time.perf_counter() - start
    return {
        "config": name,
        "baseline_rss": baseline,
        "peak_rss": sampler.peak,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "seconds": seconds,
        "samples": sampler.samples,
    }


def _spawn(name: str, batch: Path, work: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.p5_memory", name, str(batch), str(work)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"P5 child {name} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run(config: Config) -> dict[str, Any]:
    """Measure P5 for ``p5_batch`` rows and, under ``"more"``, for each of ``p5_also``."""
    main = _measure(config, config.sizes.p5_batch)
    main["more"] = [_measure(config, rows) for rows in config.sizes.p5_also]
    return main


def _measure(config: Config, batch_rows: int) -> dict[str, Any]:
    """Every configuration ``p5_runs`` times, order rotated per round."""
    import pyarrow.parquet as pq

    sizes = config.sizes
    template = target_template(config, sizes.p5_target)
    batch = parquet_batch(config, sizes.p5_target, batch_rows, "recent")
    arrow_bytes = pq.read_table(batch).nbytes
    work = config.scratch / "p5"
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for rep in range(sizes.p5_runs):
        shift = rep % len(CONFIGS)
        for name in CONFIGS[shift:] + CONFIGS[:shift]:
            fresh_target(template, work)
            result = _spawn(name, batch, work)
            results[name].append(result)
            cost = (result["peak_rss"] - result["baseline_rss"]) / 2**20
            log(
                f"P5 {batch_rows:,} rows {name} rep {rep + 1}/{sizes.p5_runs}: "
                f"+{cost:.0f} MiB, {result['seconds']:.1f} s"
            )
    remove(work)
    return {
        "target_rows": sizes.p5_target,
        "batch_rows": batch_rows,
        "arrow_bytes": arrow_bytes,
        "parquet_bytes": batch.stat().st_size,
        "runs": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="One P5 configuration (a child process).")
    parser.add_argument("config", choices=CONFIGS)
    parser.add_argument("batch", type=Path)
    parser.add_argument("work", type=Path)
    args = parser.parse_args()
    print(json.dumps(child(args.config, args.batch, args.work)))


if __name__ == "__main__":
    main()
