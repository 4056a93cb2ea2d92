"""What giving predicates Spark's meaning on the embedded engine costs a 10-row write.

    python -m bench.predicate_cost [--writes 60] [--rounds 3] [--baseline PATH]

Sides, each a steady sink on its own target (pre-filled with ``--target-rows`` rows),
written in turn, one 10-row Arrow batch (half updates, half inserts) each, ``--writes``
times:

* ``plain``: ``MergeSpec(keys=["id"])``, no predicate (the control);
* ``predicates``: ``delete_when``, ``target_predicate`` and a ``checks.expect``: what
  translating them and checking their types adds, per write (the row checks and the
  delete flag run on Sail, the MERGE condition on delta-rs);
* ``replace``: ``mode="replace"`` with ``replace_where`` (the overwrite's predicate).

With ``--baseline PATH`` (another checkout of deltasink, e.g. the commit before) each
round runs the sides twice, in processes of their own, alternating: once with this
checkout's ``deltasink`` and once with ``PATH``'s, so the ratio is taken side by side.
Prints one JSON line per side and code: median, p10 and p90 of the per-write seconds;
then one line ``translate``: the translation alone (a cold one, and a cached one), timed
over many repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIDES = ("plain", "predicates", "replace")


def _batch(start: int, rows: int = 10) -> Any:
    import pyarrow as pa

    ids = list(range(start, start + rows))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": pa.array(["2026-01-02"] * rows, pa.string()),
            "op": ["D" if i % 7 == 0 else "U" for i in ids],
            "amount": pa.array([float(i % 100) for i in ids], pa.float64()),
        }
    )


def _spec(side: str) -> tuple[Any, list[Any]]:
    from deltasink import MergeSpec, checks

    if side == "plain":
        return MergeSpec(keys=["id"]), []
    if side == "predicates":
        spec = MergeSpec(
            keys=["id"], delete_when="op = 'D'", target_predicate="t.day >= '2026-01-01'"
        )
        return spec, [checks.expect("amount >= 0")]
    return MergeSpec(mode="replace", replace_where="day >= '2026-01-01'"), []


def run_sides(writes: int, target_rows: int) -> dict[str, list[float]]:
    """Each side's per-write seconds, the sides interleaved write by write."""
    from deltalake import write_deltalake

    from deltasink import DeltaSink

    work = Path(tempfile.mkdtemp(prefix="predicate-cost-"))
    sinks = {}
    for side in SIDES:
        path = str(work / side)
        write_deltalake(path, _batch(0, target_rows))
        spec, checks = _spec(side)
        sink = DeltaSink(path, f"cost-{side}", spec, checks=checks or None)
        sink.write(_batch(target_rows - 5), 0)  # the first write, untimed (steady state)
        sinks[side] = sink
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    for version in range(1, writes + 1):
        for side in SIDES:
            batch = _batch(target_rows + version * 10 - 5)
            began = time.perf_counter()
            sinks[side].write(batch, version)
            times[side].append(time.perf_counter() - began)
    return times


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {
        "median_ms": round(1000 * statistics.median(ordered), 2),
        "p10_ms": round(1000 * ordered[len(ordered) // 10], 2),
        "p90_ms": round(1000 * ordered[(9 * len(ordered)) // 10], 2),
    }


def translate_cost() -> dict[str, float]:
    """The translation alone: a cold one (parse, type, write out) and a cached one."""
    import pyarrow as pa

    from deltasink.shapes.sparksql import fields

    columns = fields.types_of(
        pa.schema(
            [
                ("id", pa.int64()),
                ("day", pa.string()),
                ("op", pa.string()),
                ("amount", pa.float64()),
            ]
        )
    )
    text = "t.day >= '2026-01-01' AND t.amount * 2 > 1"
    began = time.perf_counter()
    for i in range(200):
        fields.check(f"{text} AND t.id <> {i}", "target_predicate")
        fields.translate(f"{text} AND t.id <> {i}", "target_predicate", columns, "delta-rs")
    cold = (time.perf_counter() - began) / 200
    began = time.perf_counter()
    for _ in range(2000):
        fields.translate(text + " AND t.id <> 0", "target_predicate", columns, "delta-rs")
    cached = (time.perf_counter() - began) / 2000
    return {"cold_ms": round(1000 * cold, 3), "cached_ms": round(1000 * cached, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--target-rows", type=int, default=10_000)
    parser.add_argument("--baseline", help="another checkout's root, measured beside this one")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one round in this process, with the deltasink PYTHONPATH names
        import deltasink

        print(f"deltasink from {deltasink.__file__}", file=sys.stderr)
        print(json.dumps(run_sides(args.writes, args.target_rows)))
        return
    codes = {"this": str(ROOT)}
    if args.baseline:
        codes["baseline"] = str(Path(args.baseline).resolve())
    samples: dict[str, dict[str, list[float]]] = {c: {s: [] for s in SIDES} for c in codes}
    for round_ in range(args.rounds):
        order = list(codes) if round_ % 2 == 0 else list(reversed(codes))
        for code in order:
            # run as a file from the checkout's root: its deltasink comes first on
            # sys.path (PYTHONPATH), before the one installed in the environment
            env = dict(os.environ, PYTHONPATH=codes[code])
            command = [sys.executable, __file__, "--child", "--writes", str(args.writes)]
            command += ["--target-rows", str(args.target_rows)]
            done = subprocess.run(
                command, env=env, cwd=codes[code], capture_output=True, text=True, check=True
            )
            print(f"round {round_} {code}: {done.stderr.strip().splitlines()[0]}", file=sys.stderr)
            for side, seconds in json.loads(done.stdout.strip().splitlines()[-1]).items():
                samples[code][side].extend(seconds)
    for code, sides in samples.items():
        for side, seconds in sides.items():
            print(
                json.dumps(
                    {"code": code, "side": side, "writes": len(seconds), **_summary(seconds)}
                )
            )
    if "baseline" in samples:
        for side in SIDES:
            ratio = statistics.median(samples["this"][side]) / statistics.median(
                samples["baseline"][side]
            )
            print(json.dumps({"ratio": side, "this / baseline": round(ratio, 3)}))
    print(json.dumps({"translate": translate_cost(), "load": os.getloadavg()}))


if __name__ == "__main__":
    if "--child" in sys.argv:  # run as a file: bench/ holds a profile.py, not the stdlib's
        here = Path(__file__).resolve().parent
        sys.path = [p for p in sys.path if Path(p or ".").resolve() != here]
    main()
