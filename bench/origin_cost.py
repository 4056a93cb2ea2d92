"""What recording a batch's origin (issue 24) costs a 10-row micro-batch write.

    python -m bench.origin_cost [--writes 60] [--target-rows 10000] [--sides write,position,stream]

Sides, each on its own target (pre-filled with ``--target-rows`` rows, upsert by key),
written in turn, one 10-row batch (half updates, half inserts) each, ``--writes`` times:

* ``write``: ``sink.write(batch, v)``, nothing recorded (also runs on a checkout
  without origins, for the before/after comparison);
* ``position``: ``sink.write(batch, v, position=...)``, a batch job's position recorded;
* ``stream``: ``sink.foreach_batch(batch, v, checkpoint=...)`` with a checkpoint in
  Spark's format (Kafka offsets): the query identity and offsets read and recorded.

Prints one JSON line per side: median, p10 and p90 of the per-write seconds. Then one
line ``parts``: the added work alone, timed over many repetitions (steadier than the
difference of two noisy medians on a loaded machine): reading the query id and the
batch's offsets from the checkpoint, mapping the batch (:func:`deltasink.ops.placing.resolve`)
and encoding the origin for the commit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa


def _batch(rows: int, start: int) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "value": [f"v{i}" for i in ids]})


def _checkpoint(root: Path, writes: int) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "metadata").write_text('{"id":"4d1c2a3b-0000-4000-8000-000000000001"}\n')
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    for batch in range(writes + 1):
        offsets = json.dumps({"orders": {str(p): 100 * batch + p for p in range(8)}})
        (root / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{offsets}")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--writes", type=int, default=60)
    parser.add_argument("--target-rows", type=int, default=10_000)
    parser.add_argument("--sides", default="write,position,stream")
    args = parser.parse_args()
    import deltasink
    from deltasink import DeltaSink, MergeSpec

    sides = args.sides.split(",")
    work = Path(tempfile.mkdtemp(prefix="origin-cost-"))
    try:
        sinks: dict[str, Any] = {}
        for side in sides:
            sink = DeltaSink(str(work / side), "cost", MergeSpec(keys=["id"]))
            sink.write(_batch(args.target_rows, 0), 0)
            sinks[side] = sink
        checkpoint = _checkpoint(work / "checkpoint", args.writes)
        times: dict[str, list[float]] = {s: [] for s in sides}
        for n in range(1, args.writes + 1):
            # Half the keys exist (updates), half are new (inserts).
            batch = _batch(10, args.target_rows - 5 + 5 * n)
            for side in sides[n % len(sides) :] + sides[: n % len(sides)]:
                sink = sinks[side]
                start = time.perf_counter()
                if side == "write":
                    sink.write(batch, n)
                elif side == "position":
                    sink.write(batch, n, position={"date": "2026-11-25", "run": n})
                else:
                    sink.foreach_batch(batch, n, checkpoint=checkpoint)
                times[side].append(time.perf_counter() - start)
        for side in sides:
            xs = sorted(times[side][5:])  # the first writes warm caches up
            deciles = statistics.quantiles(xs, n=10)
            print(
                json.dumps(
                    {
                        "side": side,
                        "deltasink": deltasink.__file__,
                        "writes": len(xs),
                        "median_ms": round(statistics.median(xs) * 1000, 3),
                        "p10_ms": round(deciles[0] * 1000, 3),
                        "p90_ms": round(deciles[-1] * 1000, 3),
                    }
                )
            )
        if "stream" in sides:
            import timeit

            from deltasink.ops.checkpoint import stream_origin
            from deltasink.ops.origin import encode
            from deltasink.ops.placing import Held, resolve

            seen = stream_origin(batch, 6, checkpoint=str(checkpoint))
            held = Held(6, (), seen, True, lambda _: None)

            def added() -> None:  # per micro-batch (the committed origin is remembered)
                origin = stream_origin(batch, 7, checkpoint=str(checkpoint))
                assert origin is not None
                decision = resolve(origin, held, resume=False, app_id="a", table="t")
                encode(decision.origin)

            runs = [timeit.timeit(added, number=200) / 200 for _ in range(7)]
            print(
                json.dumps({"side": "parts", "median_ms": round(statistics.median(runs) * 1000, 4)})
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
