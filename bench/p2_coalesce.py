"""P2: 100 pending small batches committed by one ``commit()`` against 100 bare MERGEs.

Sides, each on its own copy of the cached target (the P1 target size):

* ``sink_commit``: a steady-state sink pre-commits the batches (untimed, reported
  separately as ``sink_stage``), then ``commit(last)`` is timed: with coalescing on
  (the default) that is one MERGE for all of them.
* ``bare``: one delta-rs MERGE per batch, in order (timed together), the default call;
  ``bare_pruned`` (``streamed_exec=False``) and ``bare_keyrange`` (``streamed_exec=False``
  and each batch's key range in the predicate) are the other two a user can write
  (:func:`bench.p7_floor.hand_merge`); ``best`` is, per repetition, the fastest of the
  three, the baseline the goal is stated against (issue 14).
* ``sink_one_by_one``: as ``sink_commit`` with ``coalesce=False`` (one MERGE per
  version): what coalescing saves.

The batches overlap (later ones update rows of earlier ones, see
:func:`bench.data.p2_batches`), and after the runs the three tables are compared row
by row: a coalesced commit must equal applying the batches one by one.
"""

from __future__ import annotations

from typing import Any

from bench.baselines import open_table, same_rows
from bench.common import Config, Stats, Trial, compare, log, remove, stats_dict, stopwatch
from bench.data import fresh_target, p2_batches, steady_sink, target_template
from bench.p7_floor import BARE, hand_merge

__all__ = ["run"]


def run(config: Config) -> dict[str, Any]:
    """Measure P2."""
    target_rows = config.sizes.p1_target
    template = target_template(config, target_rows)
    batches = p2_batches(config, target_rows)
    last = len(batches)  # versions 1 .. len(batches)
    scratch = config.scratch / "p2"
    stage_times: list[float] = []
    commit_shape: dict[str, Any] = {}

    def sink_side(name: str, *, coalesce: bool) -> Trial:
        def trial(rep: int) -> float:
            sink = steady_sink(fresh_target(template, scratch / name), coalesce=coalesce)
            with stopwatch() as stage:
                for version, batch in enumerate(batches, start=1):
                    sink.pre_commit(batch, version)
            if coalesce:
                stage_times.append(stage[0])
            with stopwatch() as t:
                report = sink.commit(last)
            assert report.committed_version == last
            commit_shape[name] = len(report.results)
            return t[0]

        return trial

    def bare(name: str, streamed_exec: bool, key_range: bool) -> Trial:
        def trial(rep: int) -> float:
            table = open_table(fresh_target(template, scratch / name))
            with stopwatch() as t:
                for batch in batches:
                    hand_merge(table, batch, streamed_exec=streamed_exec, key_range=key_range)
            return t[0]

        return trial

    sides: dict[str, Trial] = {
        "sink_commit": sink_side("sink_commit", coalesce=True),
        "bare": bare("bare", True, False),
        "bare_pruned": bare("bare_pruned", False, False),
        "bare_keyrange": bare("bare_keyrange", False, True),
        "sink_one_by_one": sink_side("sink_one_by_one", coalesce=False),
    }
    stats = compare(sides, config.runs, label=f"P2 {len(batches)} batches")
    stats["sink_stage"] = Stats(tuple(stage_times))
    stats["best"] = Stats(tuple(min(stats[b].samples[i] for b in BARE) for i in range(config.runs)))
    checks = {
        f"{side} = bare": same_rows(scratch / side / "target", scratch / "bare" / "target")
        for side in ("sink_commit", "sink_one_by_one", "bare_pruned", "bare_keyrange")
    }
    if not all(checks.values()):
        log(f"P2: TABLES DIFFER {checks}")
    remove(scratch)
    bare_s = stats["best"].median
    return {
        "target_rows": target_rows,
        "batches": len(batches),
        "batch_rows": config.sizes.p2_batch_rows,
        "stats": stats_dict(stats),
        "speedup": bare_s / stats["sink_commit"].median,
        "speedup_end_to_end": bare_s / (stats["sink_commit"].median + stats["sink_stage"].median),
        "speedup_one_by_one": bare_s / stats["sink_one_by_one"].median,
        "speedup_default": stats["bare"].median / stats["sink_commit"].median,
        "best_of": {
            b: sum(stats[b].samples[i] == stats["best"].samples[i] for i in range(config.runs))
            for b in BARE
        },
        "target_commits": commit_shape,
        "checks": checks,
    }
