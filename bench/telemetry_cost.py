"""What recording every commit's telemetry costs a 10-row write (part ``telemetry`` of
``make bench``; alone: ``python -m bench.telemetry_cost [--writes 80]``).

Two sides, each a steady-state sink on its own copy of a 10,000-row target, written in
turn (order rotated), one 10-row batch each (half updates, half inserts):

* ``off``: ``DELTASINK_TELEMETRY=off``, nothing recorded (no telemetry in the commit,
  no file and byte counts, no OpenTelemetry);
* ``on``: everything, with OpenTelemetry's SDK installed as an application would: a
  meter provider with an in-memory reader and a tracer provider with a batching span
  processor, so every metric and span is really made.

The difference of two medians of ~30 ms writes on a loaded machine is noisier than the
1% it is compared with, so the added work is also timed alone, over many repetitions
(``parts``): the recorder of a commit with a conflict, its metadata and ``userMetadata``
text, the file and byte counts read from the commit's log entry, and the OpenTelemetry
records of the report (metrics and the commit's span). ``parts / off`` is the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.common import Config, log

__all__ = ["GOAL", "goal_rows", "main", "render", "run"]

#: The cost allowed, as a fraction of the 10-row write.
GOAL = 0.01


def _batch(rows: int, start: int) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "value": [f"v{i}" for i in ids]})


def _providers() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer


def _parts(work: Path) -> float:
    """Seconds of the added work of one commit, timed alone (median of 7 x 200)."""
    from deltasink import observe
    from deltasink.backends.deltalog.target import TargetLog
    from deltasink.core import telemetry
    from deltasink.core.committables import CommitReport, CommitResult
    from deltasink.ops.history import user_metadata

    target = TargetLog(str(work / "on"))
    table = target.open()
    assert table is not None
    version = table.version()
    made = observe._instruments()
    assert made is not None

    def added() -> None:
        with telemetry.recording("cost", [7], {"validate": 0.001}) as recorder:
            recorder.attempt()
            recorder.conflict(winner_version=3, winner_app="other", wait_s=0.1)
            recorder.attempt()
            user_metadata("commit", "cost", 7, [7], telemetry=recorder.metadata())
            changes = target.changes(version)
            assert changes is not None
            recorder.changed(*changes)
        result = CommitResult(7, "committed", 10, version, 5, 5, 0, telemetry=recorder.telemetry())
        with made.tracer.start_as_current_span("deltasink.write") as span:
            observe._record(made, CommitReport("cost", (result,), 7), span)

    runs = [timeit.timeit(added, number=200) / 200 for _ in range(7)]
    return statistics.median(runs)


def measure(writes: int, target_rows: int) -> dict[str, Any]:
    """The two sides and the parts (see the module's docstring)."""
    from deltasink import DeltaSink, MergeSpec, observe

    sides = ("off", "on")
    work = Path(tempfile.mkdtemp(prefix="telemetry-cost-"))
    meter, tracer = _providers()
    observe.use(meter, tracer)
    previous = os.environ.get("DELTASINK_TELEMETRY")
    try:
        sinks: dict[str, Any] = {}
        for side in sides:
            sink = DeltaSink(str(work / side), "cost", MergeSpec(keys=["id"]), engine="embedded")
            sink.write(_batch(target_rows, 0), 0)
            sinks[side] = sink
        times: dict[str, list[float]] = {s: [] for s in sides}
        for n in range(1, writes + 1):
            batch = _batch(10, target_rows - 5 + 5 * n)  # 5 updates, 5 inserts
            for side in sides[n % 2 :] + sides[: n % 2]:
                os.environ["DELTASINK_TELEMETRY"] = side
                start = time.perf_counter()
                sinks[side].write(batch, n)
                times[side].append(time.perf_counter() - start)
        os.environ["DELTASINK_TELEMETRY"] = "on"
        parts = _parts(work)
    finally:
        if previous is None:
            os.environ.pop("DELTASINK_TELEMETRY", None)
        else:
            os.environ["DELTASINK_TELEMETRY"] = previous
        observe.use(None, None)
        meter.shutdown()
        tracer.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    stats = {}
    for side in sides:
        xs = sorted(times[side][5:])  # the first writes warm caches up
        deciles = statistics.quantiles(xs, n=10)
        stats[side] = {
            "writes": len(xs),
            "median": statistics.median(xs),
            "p10": deciles[0],
            "p90": deciles[-1],
        }
    off = stats["off"]["median"]
    return {
        "writes": writes,
        "target_rows": target_rows,
        "stats": stats,
        "ratio": stats["on"]["median"] / off,
        "parts_s": parts,
        "cost": parts / off,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def run(config: Config) -> dict[str, Any]:
    """``make bench``'s part ``telemetry``."""
    writes = 30 if config.quick else 16 * config.runs
    log(f"telemetry: {writes} 10-row writes per side")
    return measure(writes, 10_000)


def goal_rows(section: dict[str, Any]) -> list[list[str]]:
    """The goal table's row."""
    ok = section["cost"] <= GOAL
    return [
        [
            "Telemetry of a steady-state 10-row `write` (report, commit metadata, "
            "OpenTelemetry metrics and spans)",
            f"≤ {GOAL:.0%} of the write",
            f"{section['cost']:.2%} (the added work alone); on/off medians {section['ratio']:.3f}x",
            "**met**" if ok else "**missed**",
        ]
    ]


def render(section: dict[str, Any]) -> str:
    """The section of the report."""
    st = section["stats"]

    def ms(x: float) -> str:
        return f"{x * 1000:.2f} ms"

    rows = [
        f"| `{side}` | {ms(s['median'])} | {ms(s['p10'])}-{ms(s['p90'])} | {s['writes']} |"
        for side, s in st.items()
    ]
    return "\n".join(
        [
            "`python -m bench.telemetry_cost`: two steady-state sinks on copies of a "
            f"{section['target_rows']:,}-row target, 10-row upserts written in turn; `off` is "
            "`DELTASINK_TELEMETRY=off`, `on` records everything with OpenTelemetry's SDK "
            "(in-memory reader, batching span processor). The added work is also timed "
            "alone (a commit with one conflict: recorder, metadata, the commit's file and "
            f"byte counts, metrics and span): **{ms(section['parts_s'])} per commit, "
            f"{section['cost']:.2%} of the `off` write** (goal ≤ {GOAL:.0%}). Load at the "
            f"end: {section['loadavg']}.",
            "",
            "| side | median | p10-p90 | writes |",
            "|---|---|---|---|",
            *rows,
            "",
            f"on / off (ratio of medians): {section['ratio']:.3f}x.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=80)
    parser.add_argument("--target-rows", type=int, default=10_000)
    args = parser.parse_args()
    print(json.dumps(measure(args.writes, args.target_rows), indent=1))


if __name__ == "__main__":
    main()
