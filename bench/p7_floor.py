"""P7: ``sink.write`` against the best MERGE a user can write by hand with delta-rs.

    python -m bench.p7_floor [--runs 5] [--quick]

Cases (issue 14): a 10-row micro-batch, 100k rows with recent keys, 100k rows with
uniformly spread keys, and a 1M-row batch, each into a 1M-row target (half updates,
half inserts; the 200k-row target of ``--quick`` for a smoke run). Sides, each on its
own fresh copy of the same cached target, order rotated every repetition:

* ``sink``: ``sink.write(batch, 1)`` on a steady-state sink (staging table present,
  epoch claimed): with nothing pending, a *direct publish*;
* ``sink_staged``: ``pre_commit`` + ``commit`` of the same batch: the two-phase path
  ``write`` took before direct publish;
* ``bare``: delta-rs MERGE with its default options;
* ``bare_pruned``: the same with ``streamed_exec=False`` (delta-rs may prune files);
* ``bare_keyrange``: ``streamed_exec=False`` plus the batch's key range in the MERGE
  predicate (``t.id >= lo AND t.id <= hi``), what a careful user writes.

``best`` is, per repetition, the fastest of the three bare sides; the goal of issue 14
is ``sink`` ≤ 1.0x ``best``. After the runs the tables of every side are compared row
by row with the default MERGE's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.baselines import open_table, same_rows
from bench.common import (
    FULL,
    QUICK,
    Config,
    Stats,
    Trial,
    compare,
    machine_info,
    remove,
    stats_dict,
    stopwatch,
)
from bench.data import (
    KEY,
    Layout,
    fresh_target,
    make_batch,
    steady_sink,
    steady_write,
    target_template,
)

__all__ = ["main", "run", "run_case", "table"]

BARE = ("bare", "bare_pruned", "bare_keyrange")


def hand_merge(table: Any, batch: pa.Table, *, streamed_exec: bool, key_range: bool) -> None:
    """The upsert a user writes with delta-rs, optionally narrowed to the key range."""
    predicate = f"t.{KEY} = s.{KEY}"
    if key_range:
        lo, hi = pc.min_max(batch.column(KEY)).values()
        predicate += f" AND t.{KEY} >= {lo.as_py()} AND t.{KEY} <= {hi.as_py()}"
    (
        table.merge(
            batch, predicate, source_alias="s", target_alias="t", streamed_exec=streamed_exec
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )


def run_case(config: Config, target_rows: int, batch_rows: int, layout: Layout) -> dict[str, Any]:
    """One case: every side ``config.runs`` times; stats, the best baseline, ratios."""
    template = target_template(config, target_rows)
    batch = make_batch(config, target_rows, batch_rows, layout)
    scratch = config.scratch / "p7"
    sides = ("sink", "sink_staged", *BARE)
    dirs = {side: scratch / side for side in sides}

    sink = steady_write(template, dirs["sink"], batch)

    def sink_staged(rep: int) -> float:
        s = steady_sink(fresh_target(template, dirs["sink_staged"]))
        with stopwatch() as t:
            s.pre_commit(batch, 1)
            s.commit(1)
        return t[0]

    def bare(name: str, streamed_exec: bool, key_range: bool) -> Trial:
        def trial(rep: int) -> float:
            table = open_table(fresh_target(template, dirs[name]))
            with stopwatch() as t:
                hand_merge(table, batch, streamed_exec=streamed_exec, key_range=key_range)
            return t[0]

        return trial

    label = f"P7 {batch_rows:,} rows {layout} into {target_rows:,}"
    stats = compare(
        {
            "sink": sink,
            "sink_staged": sink_staged,
            "bare": bare("bare", True, False),
            "bare_pruned": bare("bare_pruned", False, False),
            "bare_keyrange": bare("bare_keyrange", False, True),
        },
        config.runs,
        label=label,
    )
    best = Stats(tuple(min(stats[b].samples[i] for b in BARE) for i in range(config.runs)))
    stats["best"] = best
    checks = {
        f"{side} = bare": same_rows(dirs[side] / "target", dirs["bare"] / "target")
        for side in sides
        if side != "bare"
    }
    remove(scratch)
    return {
        "target_rows": target_rows,
        "batch_rows": batch_rows,
        "layout": layout,
        "stats": stats_dict(stats),
        "best_of": {
            b: sum(stats[b].samples[i] == best.samples[i] for i in range(config.runs)) for b in BARE
        },
        "ratio_best": {s: stats[s].median / best.median for s in ("sink", "sink_staged")},
        "ratio_default": {
            s: stats[s].median / stats["bare"].median for s in ("sink", "sink_staged")
        },
        "checks": checks,
    }


def _ms(stats: dict[str, Any]) -> str:
    """``median ms (min-max)``."""
    lo, mid, hi = (stats[k] * 1000 for k in ("min", "median", "max"))
    return f"{mid:,.0f} ms ({lo:,.0f}-{hi:,.0f})"


def table(results: list[dict[str, Any]]) -> str:
    """The markdown rows of the report."""
    lines = [
        "| case | `write` (direct) | two-phase | default MERGE | best MERGE | write / best | two-phase / best | rows equal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["stats"]
        case = f"{r['batch_rows']:,} rows, {r['layout']} keys, into {r['target_rows']:,}"
        cells = [_ms(s[side]) for side in ("sink", "sink_staged", "bare", "best")]
        lines.append(
            f"| {case} | {' | '.join(cells)} "
            f"| **{r['ratio_best']['sink']:.2f}x** | {r['ratio_best']['sink_staged']:.2f}x "
            f"| {'yes' if all(r['checks'].values()) else 'NO'} |"
        )
    return "\n".join(lines)


def run(config: Config) -> list[dict[str, Any]]:
    """Every case of issue 14's table, into the P1 target size."""
    sizes = config.sizes
    cases: list[tuple[int, Layout]] = [
        (10, "recent"),
        (sizes.p1_batch, "recent"),
        (sizes.p1_batch, "uniform"),
        (sizes.p1_target, "recent"),
    ]
    return [run_case(config, sizes.p1_target, rows, layout) for rows, layout in cases]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    config = Config(sizes=QUICK if args.quick else FULL, runs=args.runs, quick=args.quick)
    results = run(config)
    out = args.out or config.out / ("p7-quick.json" if args.quick else "p7.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_info(), "runs": args.runs, "p7": results}
    out.write_text(json.dumps(payload, indent=2))
    print(table(results))


if __name__ == "__main__":
    main()
