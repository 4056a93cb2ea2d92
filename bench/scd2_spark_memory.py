"""The spark engine's SCD2 write of a large batch: the Python driver's memory.

    python -m bench.scd2_spark_memory [--rows 1000000] [--out FILE]

Issue 29 asked that the spark engine rebuild an SCD2 history without collecting the
batch on the driver. This measures it: a classic ``local[2]`` session with delta-spark
(``../shared/delta-spark`` or ``DELTASINK_DELTA_JARS``), a target made by a first SCD2
batch of ``--rows`` keys (version 0, untimed), then the measured batch: ``--rows`` events,
one per key, every one a newer version of a key already in the history, so the write
closes ``--rows`` current rows and opens as many. Sampled every 5 ms during that write:
the RSS of this Python process (the driver program, where a collect lands) and of the
JVM (in ``local`` mode the JVM is driver and executors at once, so its figure is not
the driver's alone). Rows are checked after the write: ``2 x --rows`` history rows,
``--rows`` of them current.

``python -m`` puts the working directory first on ``sys.path``: run it from another
checkout's directory (this file copied there) to measure that checkout's deltasink, the
A/B of a change; the output names the deltasink it measured.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bench.p6_delta_spark import delta_spark_session

APP = "bench-scd2"


class Sampler:
    """Peak RSS of this process and of its JVM child, sampled on a thread."""

    def __init__(self) -> None:
        me = psutil.Process()
        self.procs = {"python": me, "jvm": max(me.children(recursive=True), key=_rss)}
        self.peak = dict.fromkeys(self.procs, 0)
        self.base = {name: _rss(p) for name, p in self.procs.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, proc in self.procs.items():
                self.peak[name] = max(self.peak[name], _rss(proc))
            time.sleep(0.005)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _rss(proc: psutil.Process) -> int:
    return int(proc.memory_info().rss)


def run(rows: int, work: Path) -> dict[str, Any]:
    import deltasink
    from deltasink import DeltaSink, MergeSpec

    spark = delta_spark_session("deltasink-bench-scd2")
    spec = MergeSpec(mode="scd2", keys=["id"], sequence_by="seq")
    path = str(work / "target")
    sink = DeltaSink(path, APP, spec, engine="spark", spark=spark)

    def batch(seq: int) -> Any:
        frame = spark.range(0, rows, numPartitions=4).selectExpr(
            "id", f"concat('v{seq}-', CAST(id AS STRING)) AS value", f"{seq} AS seq"
        )
        frame = frame.cache()
        frame.count()
        return frame

    sink.write(batch(0), 0)  # the history: one current row per key
    measured = batch(1)
    with Sampler() as sampler:
        started = time.perf_counter()
        sink.write(measured, 1)
        took = time.perf_counter() - started
    table = spark.read.format("delta").load(path)
    history_rows = table.count()
    current_rows = table.where(f"{spec.history[2]}").count()
    spark.stop()
    if (history_rows, current_rows) != (2 * rows, rows):
        raise SystemExit(f"wrong rows: {history_rows} history, {current_rows} current")
    return {
        "rows": rows,
        "seconds": took,
        "deltasink": str(Path(deltasink.__file__).parent),
        "history_rows": history_rows,
        "current_rows": current_rows,
        "rss": {
            name: {"base": sampler.base[name], "peak": sampler.peak[name]} for name in sampler.procs
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="deltasink-scd2-") as work:
        result = run(args.rows, Path(work))
    mib = 2**20
    for name, r in result["rss"].items():
        print(
            f"{name:6} RSS {r['base'] / mib:7,.0f} MiB before the write, peak "
            f"{r['peak'] / mib:7,.0f} MiB: {(r['peak'] - r['base']) / mib:+,.0f} MiB"
        )
    print(
        f"scd2 write of {args.rows:,} rows into a {args.rows:,}-row history: "
        f"{result['seconds']:.1f} s; {result['history_rows']:,} history rows, "
        f"{result['current_rows']:,} current"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
