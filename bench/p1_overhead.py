"""P1 and the cost-growth grid: ``sink.write(batch)`` against a bare delta-rs MERGE.

One *merge case* is (target rows, batch rows, key layout). Its sides, each on its own
copy of the same cached target table (:func:`bench.data.target_template`):

* ``sink``: ``sink.write(batch, 1)`` on a sink in its steady state (staging table
  present and writer epoch claimed, untimed: :func:`bench.data.steady_sink`).
* ``bare``: ``DeltaTable(path)`` opened untimed, then one delta-rs MERGE with default
  options (:func:`bench.baselines.bare_merge`). This is the ratio the goal is about.
* ``bare_pruned``: the same MERGE with ``streamed_exec=False`` (delta-rs then prunes
  target files by the batch's key range): what delta-rs can do at best.
* ``sink_first``: the first write of a brand-new sink (creates the staging table and
  claims the writer epoch); P1 cases only.
* ``parquet_batch`` / ``parquet_output``: the physical reference, ``pyarrow.parquet``
  writing the batch once, and writing as many rows as the MERGE wrote (rewritten
  target rows plus inserts) once.

After the runs, the tables of ``sink`` and ``bare`` are compared row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.baselines import bare_merge, open_table, parquet_write, same_rows
from bench.common import Config, Trial, compare, log, remove, stats_dict, stopwatch
from bench.data import (
    APP_ID,
    KEY,
    Layout,
    fresh_target,
    make_batch,
    make_rows,
    steady_write,
    target_template,
)

__all__ = ["merge_case", "run_grid", "run_p1"]

P1_SIDES = ("sink", "bare", "bare_pruned", "sink_first", "parquet_batch", "parquet_output")
GRID_SIDES = ("sink", "bare", "bare_pruned", "parquet_batch")


def merge_case(
    config: Config, target_rows: int, batch_rows: int, layout: Layout, sides: Sequence[str]
) -> dict[str, Any]:
    """Measure one merge case; returns params, per-side stats, ratios and checks."""
    from deltasink import DeltaSink, MergeSpec

    template = target_template(config, target_rows)
    batch = make_batch(config, target_rows, batch_rows, layout)
    scratch = config.scratch / "merge"
    dirs = {side: scratch / side for side in sides}
    metrics: dict[str, Any] = {}

    # The rows a MERGE has to write: learnt from one untimed bare MERGE.
    metrics = bare_merge(open_table(fresh_target(template, scratch / "probe")), batch)
    output = make_rows(
        np.arange(int(metrics["num_output_rows"]), dtype=np.int64),
        np.random.default_rng([config.seed, 9]),
    )

    sink = steady_write(template, dirs["sink"], batch)

    def sink_first(rep: int) -> float:
        s = DeltaSink(fresh_target(template, dirs["sink_first"]), APP_ID, MergeSpec(keys=[KEY]))
        with stopwatch() as t:
            s.write(batch, 1)
        return t[0]

    def bare_side(streamed: bool, name: str) -> Trial:
        def trial(rep: int) -> float:
            table = open_table(fresh_target(template, dirs[name]))
            with stopwatch() as t:
                bare_merge(table, batch, streamed_exec=streamed)
            return t[0]

        return trial

    def parquet(rows: Any, name: str) -> Trial:
        def trial(rep: int) -> float:
            dirs[name].mkdir(parents=True, exist_ok=True)
            path: Path = dirs[name] / f"rep{rep}.parquet"
            with stopwatch() as t:
                parquet_write(rows, path)
            path.unlink()
            return t[0]

        return trial

    available: dict[str, Trial] = {
        "sink": sink,
        "bare": bare_side(True, "bare"),
        "bare_pruned": bare_side(False, "bare_pruned"),
        "sink_first": sink_first,
        "parquet_batch": parquet(batch, "parquet_batch"),
        "parquet_output": parquet(output, "parquet_output"),
    }
    label = f"merge {target_rows:,}/{batch_rows:,} {layout}"
    stats = compare({s: available[s] for s in sides}, config.runs, label=label)
    checks = {
        f"{side} = bare": same_rows(dirs[side] / "target", dirs["bare"] / "target")
        for side in sides
        if side in ("sink", "bare_pruned", "sink_first")
    }
    if not all(checks.values()):
        log(f"{label}: TABLES DIFFER {checks}")
    remove(scratch)
    return {
        "target_rows": target_rows,
        "batch_rows": batch_rows,
        "layout": layout,
        "stats": stats_dict(stats),
        "ratio": {
            side: stats[side].median / stats["bare"].median for side in sides if side != "bare"
        },
        "checks": checks,
        "merge": {
            key: metrics.get(key)
            for key in (
                "num_output_rows",
                "num_target_files_scanned",
                "num_target_files_skipped_during_scan",
                "num_target_files_added",
                "num_target_files_removed",
                "num_target_rows_copied",
            )
        },
        "arrow_bytes": batch.nbytes,
    }


def run_p1(config: Config) -> dict[str, Any]:
    """P1: the overhead of ``sink.write`` at the issue's size, both key layouts."""
    sizes = config.sizes
    return {
        layout: merge_case(config, sizes.p1_target, sizes.p1_batch, layout, P1_SIDES)
        for layout in ("recent", "uniform")
    }


def run_grid(config: Config, p1: dict[str, Any]) -> list[dict[str, Any]]:
    """Cost growth with target and batch size (P1's cells are reused, not re-run)."""
    sizes = config.sizes
    cells: list[tuple[int, int, Layout]] = [
        (t, b, "recent") for t in sizes.grid_targets for b in sizes.grid_batches
    ]
    cells += [(t, sizes.p1_batch, "uniform") for t in sizes.grid_uniform]
    out = []
    for target_rows, batch_rows, layout in cells:
        if (target_rows, batch_rows) == (sizes.p1_target, sizes.p1_batch):
            out.append(p1[layout])
            continue
        out.append(merge_case(config, target_rows, batch_rows, layout, GRID_SIDES))
    return out
