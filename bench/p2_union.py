"""P2u: a coalesced ``commit()`` of 50 pending 1k-row versions into a 100k-row target,
against the best hand-written delta-rs MERGE of their union (issue 39).

    python -m bench.p2_union [--runs 7] [--versions 50]

Coalescing is that MERGE plus reading the staged rows, so the union is the floor:

* ``sink_commit``: a steady-state sink pre-commits the batches (untimed), then
  ``commit(last)`` is timed (one coalesced target commit, and the staging clean-up).
* ``union_*``: the latest row of each key over the batches (computed untimed), merged
  by one delta-rs MERGE (:func:`bench.p7_floor.hand_merge`: the default call,
  ``streamed_exec=False``, and that with the union's key range); ``best`` is, per
  repetition, the fastest of the three (goal: ``sink_commit`` ≤ 1.2x ``best``).

P2's batch shape (:func:`bench.data.p2_batches`: half inserts, half updates of recent
keys, later batches overwriting earlier ones); the tables are compared row by row.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

import pyarrow as pa

from bench.baselines import open_table, same_rows
from bench.common import (
    FULL,
    OUT_DIR,
    Config,
    Stats,
    Trial,
    compare,
    log,
    remove,
    stats_dict,
    stopwatch,
)
from bench.data import KEY, fresh_target, p2_batches, steady_sink, target_template
from bench.p7_floor import hand_merge

__all__ = ["run", "union"]

TARGET_ROWS = 100_000
VERSIONS = 50
_SIDES = {
    "union_default": (True, False),
    "union_pruned": (False, False),
    "union_keyrange": (False, True),
}


def union(batches: list[pa.Table]) -> pa.Table:
    """The latest row per key over ``batches`` (in order), as coalescing keeps it."""
    rows = pa.concat_tables(batches)
    keep = {key: i for i, key in enumerate(rows.column(KEY).to_pylist())}
    return rows.take(pa.array(sorted(keep.values()), pa.int64()))


def run(config: Config, versions: int = VERSIONS) -> dict[str, Any]:
    """Measure P2u."""
    sized = replace(config, sizes=replace(config.sizes, p2_batches=versions, p2_batch_rows=1_000))
    template = target_template(sized, TARGET_ROWS)
    batches = p2_batches(sized, TARGET_ROWS)
    merged = union(batches)
    scratch = config.scratch / "p2u"

    def sink_commit(rep: int) -> float:
        sink = steady_sink(fresh_target(template, scratch / "sink_commit"))
        for version, batch in enumerate(batches, start=1):
            sink.pre_commit(batch, version)
        with stopwatch() as t:
            report = sink.commit(len(batches))
        assert report.committed_version == len(batches)
        return t[0]

    def hand(name: str) -> Trial:
        streamed_exec, key_range = _SIDES[name]

        def trial(rep: int) -> float:
            table = open_table(fresh_target(template, scratch / name))
            with stopwatch() as t:
                hand_merge(table, merged, streamed_exec=streamed_exec, key_range=key_range)
            return t[0]

        return trial

    sides: dict[str, Trial] = {"sink_commit": sink_commit, **{n: hand(n) for n in _SIDES}}
    stats = compare(sides, config.runs, label=f"P2u {versions} versions into {TARGET_ROWS:,}")
    best = tuple(min(stats[n].samples[i] for n in _SIDES) for i in range(config.runs))
    stats["best"] = Stats(best)
    same = same_rows(scratch / "sink_commit" / "target", scratch / "union_default" / "target")
    if not same:
        log("P2u: TABLES DIFFER")
    remove(scratch)
    return {
        "target_rows": TARGET_ROWS,
        "versions": versions,
        "batch_rows": 1_000,
        "union_rows": merged.num_rows,
        "stats": stats_dict(stats),
        "ratio": stats["sink_commit"].median / stats["best"].median,
        "same_rows": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--versions", type=int, default=VERSIONS)
    args = parser.parse_args()
    out = run(Config(sizes=FULL, runs=args.runs, quick=False), args.versions)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "p2u.json").write_text(json.dumps(out, indent=2))
    s = out["stats"]
    print(
        f"sink_commit {s['sink_commit']['median'] * 1000:.0f} ms, best MERGE of the union "
        f"{s['best']['median'] * 1000:.0f} ms: {out['ratio']:.2f}x (same rows: {out['same_rows']})"
    )


if __name__ == "__main__":
    main()
