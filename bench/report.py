"""Render a results dict (see :mod:`bench.run`) as the Markdown report."""

from __future__ import annotations

import statistics
from typing import Any

from bench.common import QUIET_OTHER_CORES, fmt_rows
from bench.report_stores import goal_rows as store_goal_rows
from bench.report_stores import render_stores

__all__ = ["goals", "render"]

Row = list[str]

#: P3's goal per batch size (issue 14: at most 0.6x Sail's own MERGE INTO at 1M rows);
#: other sizes: no slower than it.
P3_GOALS = {1_000_000: 0.6}

_SIDES = {
    "sink": "deltasink `sink.write(batch)` (steady-state sink)",
    "sink_first": "deltasink, first write of a new sink (creates staging, claims epoch)",
    "bare": "**bare delta-rs MERGE** (default options) — the baseline",
    "bare_pruned": "delta-rs MERGE with `streamed_exec=False` (prunes files by key range)",
    "parquet_batch": "physical: `pyarrow.parquet.write_table(batch)`",
    "parquet_output": "physical: `write_table` of as many rows as the MERGE wrote",
}


def fmt_s(seconds: float) -> str:
    """``0.1234`` -> ``123 ms``; ``12.3`` -> ``12.3 s``."""
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"
    return f"{seconds:.3g} s"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def cell(stat: dict[str, Any]) -> str:
    """``median [min-max]``."""
    return f"{fmt_s(stat['median'])} [{fmt_s(stat['min'])}-{fmt_s(stat['max'])}]"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _table(header: Row, rows: list[Row]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**missed**")


def _p5_summary(p5: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for name, runs in p5["runs"].items():
        costs = [r["peak_rss"] - r["baseline_rss"] for r in runs]
        out[name] = {
            "baseline": statistics.median(r["baseline_rss"] for r in runs),
            "peak": statistics.median(r["peak_rss"] for r in runs),
            "cost": statistics.median(costs),
            "cost_min": min(costs),
            "cost_max": max(costs),
            "ratio": statistics.median(costs) / p5["arrow_bytes"],
            "seconds": statistics.median(r["seconds"] for r in runs),
        }
    return out


#: Load average (per core) above which a run is noise, not a measurement: its goal
#: rows say so instead of met or missed.
QUIET_LOAD_PER_CORE = 0.75


def noisy(results: dict[str, Any]) -> str | None:
    """Why the run measured nothing, or ``None`` for a quiet run: the 1-minute load
    average at its start exceeded :data:`QUIET_LOAD_PER_CORE` per core (1.5 on 2
    cores), or other processes used more than ``QUIET_OTHER_CORES`` cores during it (a
    run that did not measure that: its load average at the end). The run's own
    processes raise the load average at its end: they are not other work."""
    machine, config = results["machine"], results["config"]
    limit = QUIET_LOAD_PER_CORE * int(machine.get("cores") or 2)
    start = float((machine.get("loadavg") or [0.0])[0])
    if start > limit:
        return f"load {start:.1f}"
    if "other_cores" in config:
        other = float(config["other_cores"])
        return f"other work used {other:.2f} cores" if other > QUIET_OTHER_CORES else None
    end = float((config.get("loadavg_end") or [0.0])[0])
    return f"load {end:.1f}" if end > limit else None


def _honest(rows: list[Row], results: dict[str, Any]) -> list[Row]:
    """``rows`` with each verdict of a noisy run replaced by what it is."""
    reason = noisy(results)
    if reason is None:
        return rows
    text = f"noisy ({reason}), not a measurement"
    return [
        [*r[:-1], text if r[-1] in ("**met**", "**missed**") and _timed(r) else r[-1]] for r in rows
    ]


#: Goal rows whose measure the machine's load does not move: counts of requests, of
#: failed or lost writes, memory.
_LOAD_FREE = ("requests", "RSS", "PUT", "HEAD", "failed or lost")


def _timed(row: Row) -> bool:
    return not any(word in row[0] for word in _LOAD_FREE)


#: How far a baseline may move between the runs of one measurement (its max/min)
#: before the measurement is not one.
STEADY_SPREAD = 1.5

#: Which section each timed goal row comes from (its first words).
_ROW_SECTIONS = (
    ("Overhead,", "p1"),
    ("One `commit()` of", "p2"),
    ("`write` vs the best", "p7"),
    ("`sink.write(df)` vs Sail", "p3"),
    ("`sink.status()`", "p4"),
    ("`recover()` planning", "p4"),
    ("10-row `sink.write` of a running stream", "p4"),
    ("Spark engine `sink.write`", "p6"),
)


def baseline_spread(section: Any) -> float:
    """The most any baseline of ``section`` moved between its runs (max/min of its
    samples): every side of a measurement whose name does not start with ``sink`` is
    a baseline (bare MERGEs, Sail's, Delta's own)."""
    worst = 1.0
    if isinstance(section, dict):
        for name, value in section.items():
            if isinstance(value, dict) and {"min", "max", "median"} <= set(value):
                if not str(name).startswith("sink") and value["min"] > 0:
                    worst = max(worst, float(value["max"]) / float(value["min"]))
            else:
                worst = max(worst, baseline_spread(value))
    elif isinstance(section, list):
        for value in section:
            worst = max(worst, baseline_spread(value))
    return worst


def _steady(rows: list[Row], results: dict[str, Any]) -> list[Row]:
    """``rows`` with each verdict whose section's baseline moved more than
    :data:`STEADY_SPREAD` between runs replaced by what it is."""
    spreads = {key: baseline_spread(results["sections"].get(key)) for _, key in _ROW_SECTIONS}
    out = []
    for row in rows:
        key = next((k for prefix, k in _ROW_SECTIONS if row[0].startswith(prefix)), None)
        moved = spreads.get(key, 1.0) if key else 1.0
        if moved > STEADY_SPREAD and row[-1] in ("**met**", "**missed**"):
            row = [*row[:-1], f"noisy (baseline moved {moved:.2f}x), not a measurement"]
        out.append(row)
    return out


def goals(results: dict[str, Any]) -> list[Row]:
    """The goal table: what, goal, measured, verdict (a noisy run's, or one whose
    baseline moved, is not a verdict)."""
    return _steady(_honest(_goals(results), results), results)


def _goals(results: dict[str, Any]) -> list[Row]:
    s = results["sections"]
    rows: list[Row] = []
    if "p1" in s:
        for layout, case in s["p1"].items():
            r = case["ratio"]["sink"]
            what = (
                f"Overhead, {fmt_rows(case['target_rows'])} target, "
                f"{fmt_rows(case['batch_rows'])} batch, {layout} keys"
            )
            verdict = _mark(r <= 1.15) + (" (stretch met)" if r < 1.0 else "")
            rows.append([what, "≤ 1.15x bare MERGE (stretch < 1.0x)", _x(r), verdict])
    if "p2" in s:
        p2 = s["p2"]
        rows.append(
            [
                f"One `commit()` of {p2['batches']} pending {fmt_rows(p2['batch_rows'])}-row "
                f"batches vs {p2['batches']} "
                + ("best hand-written MERGEs" if "best" in p2["stats"] else "bare MERGEs"),
                "≥ 50x faster" if "best" in p2["stats"] else "≥ 20x faster",
                f"{p2['speedup']:.1f}x faster (staging included: {p2['speedup_end_to_end']:.1f}x)",
                _mark(
                    p2["speedup"] >= (50 if "best" in p2["stats"] else 20)
                    and all(p2["checks"].values())
                ),
            ]
        )
    for case in s.get("p7", []):
        r = case["ratio_best"]["sink"]
        rows.append(
            [
                f"`write` vs the best hand-written MERGE, {fmt_rows(case['batch_rows'])} rows "
                f"({case['layout']} keys) into {fmt_rows(case['target_rows'])}",
                "≤ 1.0x",
                _x(r),
                _mark(r <= 1.0 and all(case["checks"].values())),
            ]
        )
    for case in s.get("p3", []):
        goal = P3_GOALS.get(case["batch_rows"], 1.0)
        rows.append(
            [
                f"`sink.write(df)` vs Sail `MERGE INTO`, {fmt_rows(case['batch_rows'])} rows",
                f"≤ {goal}x",
                _x(case["ratio"]),
                _mark(case["ratio"] <= goal),
            ]
        )
    p4 = s.get("p4", {}).get("sizes", {})
    if p4:
        ns = sorted(int(n) for n in p4)
        first, last = p4[str(ns[0])], p4[str(ns[-1])]
        for side, what in (("status", "`sink.status()`"), ("recover", "`recover()` planning")):
            top = last["planning"][side]["median"]
            growth = top / first["planning"][side]["median"]
            rows.append(
                [
                    f"{what}, {ns[0]:,} → {ns[-1]:,} batches",
                    "≤ 1.5x growth and ≤ 50 ms",
                    f"{_x(growth)}, {fmt_s(top)}",
                    _mark(growth <= 1.5 and top <= 0.05),
                ]
            )

        def grown(side: str) -> float:
            return float(last["write"][side]["median"] / first["write"][side]["median"])

        if "write_maintained" in last:
            kept_sink = (
                last["write_maintained"]["sink_warm"]["median"]
                / first["write_maintained"]["sink_warm"]["median"]
            )
            kept_bare = (
                last["write_maintained"]["bare"]["median"]
                / first["write_maintained"]["bare"]["median"]
            )
            rows.append(
                [
                    f"10-row `sink.write` of a running stream after {ns[-1]:,} batches vs "
                    f"after {ns[0]:,}, the target's log kept by its retention",
                    "≤ 1.5x",
                    f"{_x(kept_sink)} (the bare MERGE's own growth: {_x(kept_bare)})",
                    _mark(kept_sink <= 1.5),
                ]
            )
        side = "sink_warm" if "sink_warm" in last["write"] else "sink"
        cold = f"; a new sink's first write: {_x(grown('sink'))}" if side == "sink_warm" else ""
        rows.append(
            [
                f"10-row `sink.write` of a running stream after {ns[-1]:,} batches vs "
                f"after {ns[0]:,}, every commit file of the target kept",
                "≤ 1.5x",
                f"{_x(grown(side))} (the bare MERGE's own growth: {_x(grown('bare'))}{cold})",
                _mark(grown(side) <= 1.5),
            ]
        )
    if "p5" in s:
        p5 = s["p5"]
        for case in [p5, *p5.get("more", [])]:
            summary = _p5_summary(case)
            sink, bare = summary["sink_write"], summary["bare_merge"]
            rows.append(
                [
                    f"Peak RSS of `sink.write(df)`, {fmt_rows(case['batch_rows'])} rows "
                    "from Spark, vs the bare delta-rs MERGE's",
                    "≤ 1.0x",
                    f"+{_mib(sink['cost'])} vs +{_mib(bare['cost'])} = "
                    f"{_x(sink['cost'] / bare['cost'])}",
                    _mark(sink["cost"] <= bare["cost"]),
                ]
            )
            rows.append(
                [
                    f"Peak RSS (first round) the same, {fmt_rows(case['batch_rows'])} rows, vs the "
                    "batch's Arrow size",
                    "≤ 2x",
                    f"{_x(sink['ratio'])} of {_mib(case['arrow_bytes'])}",
                    _mark(sink["ratio"] <= 2),
                ]
            )
    for name, case in s.get("p6", {}).get("p6", {}).items():
        rows.append(
            [
                f"Spark engine `sink.write` vs `MERGE INTO` + txn confs, {name} into "
                f"{fmt_rows(case['target_rows'])} (delta-spark)",
                "≤ 1.2x",
                _x(case["ratio"]),
                _mark(case["ratio"] <= 1.2),
            ]
        )
    rows += _new_goal_rows(s)
    if "s3" in s:
        rows.append(
            [
                "S3 requests of a steady-state 10-row `write` vs the best hand-written "
                "delta-rs MERGE (moto)",
                "≤ 1.2x",
                _x(s["s3"]["ratio"]),
                _mark(s["s3"]["ratio"] <= 1.2 and s["s3"]["same_rows"]),
            ]
        )
    if "p2u" in s:
        p2u = s["p2u"]
        rows.append(
            [
                f"One `commit()` of {p2u['versions']} pending 1k-row versions into "
                f"{fmt_rows(p2u['target_rows'])} vs the best MERGE of their union",
                "≤ 1.2x",
                _x(p2u["ratio"]),
                _mark(p2u["ratio"] <= 1.2 and p2u["same_rows"]),
            ]
        )
    if "stores" in s:
        rows.extend(store_goal_rows(s["stores"]))
    return rows


def _merge_case(case: dict[str, Any]) -> str:
    stats, ratios = case["stats"], case["ratio"]
    rows = [
        [
            _SIDES[side],
            cell(stat),
            f"{fmt_s(stat['q1'])}-{fmt_s(stat['q3'])}",
            "1.00x" if side == "bare" else _x(ratios[side]),
        ]
        for side, stat in stats.items()
    ]
    m = case["merge"]
    checks = ", ".join(
        f"{k}: {'equal' if v else '**DIFFERENT**'}" for k, v in case["checks"].items()
    )
    shape = (
        f"The bare MERGE removed {m['num_target_files_removed']} and added "
        f"{m['num_target_files_added']} files, copying {m['num_target_rows_copied']:,} "
        f"unchanged rows (wrote {m['num_output_rows']:,} rows). Batch Arrow size: "
        f"{_mib(case['arrow_bytes'])}. Tables after the runs: {checks}."
    )
    header = ["side", "median [min-max]", "IQR", "x bare"]
    return _table(header, rows) + "\n\n" + shape


def _grid(grid: list[dict[str, Any]]) -> str:
    rows = []
    for c in sorted(grid, key=lambda c: (c["layout"], c["target_rows"], c["batch_rows"])):
        st = c["stats"]
        m = c["merge"]
        rows.append(
            [
                fmt_rows(c["target_rows"]),
                fmt_rows(c["batch_rows"]),
                c["layout"],
                cell(st["sink"]),
                cell(st["bare"]),
                cell(st["bare_pruned"]) if "bare_pruned" in st else "",
                _x(c["ratio"]["sink"]),
                _x(c["ratio"]["bare_pruned"]) if "bare_pruned" in c["ratio"] else "",
                fmt_s(st["parquet_batch"]["median"]),
                f"{m['num_target_files_removed']}",
            ]
        )
    header = [
        "target",
        "batch",
        "keys",
        "deltasink",
        "bare MERGE",
        "MERGE streamed_exec=False",
        "deltasink / bare",
        "pruned / bare",
        "parquet write of batch",
        "files rewritten",
    ]
    return _table(header, rows)


def _p2(p2: dict[str, Any]) -> str:
    st = p2["stats"]
    best = "best" if "best" in st else "bare"
    names = {
        "sink_commit": "deltasink `commit()` of all pending versions (coalesced, one MERGE)",
        "sink_stage": "deltasink `pre_commit` x N before it (not part of the goal)",
        "bare": "N delta-rs MERGEs, default call",
        "bare_pruned": "N delta-rs MERGEs, `streamed_exec=False`",
        "bare_keyrange": "N delta-rs MERGEs, `streamed_exec=False` + key range",
        "best": "**N best hand-written MERGEs** (fastest of the three per repetition): the baseline",
        "sink_one_by_one": "deltasink `commit()` with `coalesce=False` (N MERGEs)",
    }
    if best == "bare":
        names["bare"] = "**N bare delta-rs MERGEs** — the baseline"
    sides = [
        s
        for s in ("sink_commit", "sink_stage", "bare", "bare_pruned", "bare_keyrange", "best")
        if s in st
    ] + ["sink_one_by_one"]
    rows = [
        [names[side], cell(st[side]), f"{st[best]['median'] / st[side]['median']:.1f}x"]
        for side in sides
    ]
    checks = ", ".join(f"{k}: {'equal' if v else '**DIFFERENT**'}" for k, v in p2["checks"].items())
    return (
        _table(["side", "median [min-max]", f"{best} / side"], rows)
        + f"\n\nTarget commits made: {p2['target_commits']}. Tables after the runs: {checks}."
    )


def _p3(cases: list[dict[str, Any]]) -> str:
    rows = []
    for c in cases:
        st = c["stats"]
        rows.append(
            [
                fmt_rows(c["batch_rows"]),
                cell(st["sink"]),
                cell(st["sail"]),
                _x(c["ratio"]),
                cell(st["transfer"]) if "transfer" in st else "-",
                f"{c['transfer_share']:.0%}" if "transfer_share" in c else "-",
                cell(st["collect"]),
                "equal" if all(c["checks"].values()) else "**DIFFERENT**",
            ]
        )
    header = [
        "batch",
        "deltasink `sink.write(df)`",
        "Sail `MERGE INTO`",
        "deltasink / Sail",
        "the rows into Arrow (engine-written Parquet)",
        "share of sink.write",
        "`df.toArrow()` instead",
        "tables",
    ]
    return _table(header, rows)


def _maintained(size: dict[str, Any]) -> list[str]:
    """P4's cells for the writes on a target whose log its retention keeps."""
    kept = size.get("write_maintained")
    if kept is None:
        return ["-", "-"]
    return [cell(kept["sink_warm"]), cell(kept["bare"])]


def _p4(p4: dict[str, Any]) -> str:
    rows = []
    for n in sorted(p4["sizes"], key=int):
        pl, wr = p4["sizes"][n]["planning"], p4["sizes"][n]["write"]
        rows.append(
            [
                f"{int(n):,}",
                cell(pl["status"]),
                cell(pl["status_warm"]),
                cell(pl["recover"]),
                cell(pl["status_after_gc"]) if "status_after_gc" in pl else "",
                cell(wr["sink_warm"]) if "sink_warm" in wr else "-",
                cell(wr["sink"]),
                cell(wr["bare"]),
                _x(wr["sink_warm"]["median"] / wr["bare"]["median"])
                if "sink_warm" in wr
                else _x(p4["sizes"][n]["write_ratio"]),
                *_maintained(p4["sizes"][n]),
            ]
        )
    header = [
        "batches before",
        "`status()`, new sink",
        "`status()`, same sink again",
        "`recover()`, nothing pending",
        "`status()` after `gc(0)`",
        "`sink.write` 10 rows, running stream",
        "`sink.write` 10 rows, new sink",
        "bare MERGE 10 rows",
        "running write / bare",
        "target log kept: running write",
        "target log kept: bare MERGE",
    ]
    build = p4.get("build", {})
    text = _table(header, rows)
    if build:
        during = ", ".join(
            f"{int(k):,}: {fmt_s(v)}" for k, v in build["write_median_s_last_100"].items()
        )
        text += (
            f"\n\nBuilding the history (cached) took {build['build_s'] / 60:.1f} min; median "
            f"`sink.write` of the 100 batches before each point: {during}."
        )
    return text


def _p5(p5: dict[str, Any]) -> str:
    names = {
        "collect": "`df.toArrow()` only",
        "parquet": "`df.toArrow()` + `pyarrow.parquet.write_table` (physical)",
        "bare_merge": "`df.toArrow()` + bare delta-rs MERGE",
        "sail_merge": "Sail `MERGE INTO` (batch never enters Python)",
        "sink_pre_commit": "deltasink `pre_commit(df)` (staging only)",
        "sink_write": "deltasink `sink.write(df)` (staging + commit)",
    }
    summary = _p5_summary(p5)
    rows = [
        [
            names[name],
            _mib(s["baseline"]),
            _mib(s["peak"]),
            f"+{_mib(s['cost'])} [{_mib(s['cost_min'])}-{_mib(s['cost_max'])}]",
            _x(s["ratio"]),
            fmt_s(s["seconds"]),
        ]
        for name, s in summary.items()
    ]
    header = [
        "configuration (own child process)",
        "baseline RSS",
        "peak RSS",
        "peak - baseline [min-max]",
        "x Arrow size",
        "time",
    ]
    return (
        f"Batch: {p5['batch_rows']:,} rows ({_mib(p5['arrow_bytes'])} as Arrow, "
        f"{_mib(p5['parquet_bytes'])} as Parquet), {fmt_rows(p5['target_rows'])}-row target, "
        f"{len(next(iter(p5['runs'].values())))} run(s) per configuration (medians).\n\n"
        + _table(header, rows)
    )


def _cell_at(grid: list[dict[str, Any]], target: int, batch: int, layout: str) -> Any:
    return next(
        (
            c
            for c in grid
            if (c["target_rows"], c["batch_rows"], c["layout"]) == (target, batch, layout)
        ),
        None,
    )


def _growth(results: dict[str, Any]) -> str:
    """Plain-language growth factors read off the grid and P4 (medians)."""
    s, sizes = results["sections"], results["config"]["sizes"]
    grid, lines = s.get("grid", []), []
    names = {"sink": "deltasink", "bare": "bare MERGE", "bare_pruned": "pruned MERGE"}

    def factors(a: Any, b: Any) -> str:
        return ", ".join(
            f"{names[side]} x{b['stats'][side]['median'] / a['stats'][side]['median']:.1f}"
            for side in names
            if side in a["stats"] and side in b["stats"]
        )

    targets, batches = sizes["grid_targets"], sizes["grid_batches"]
    for layout in ("recent", "uniform"):
        a = _cell_at(grid, targets[0], sizes["p1_batch"], layout)
        b = _cell_at(grid, targets[-1], sizes["p1_batch"], layout)
        if a and b:
            lines.append(
                f"* Target {fmt_rows(targets[0])} -> {fmt_rows(targets[-1])} rows "
                f"({fmt_rows(sizes['p1_batch'])}-row batch, {layout} keys): {factors(a, b)}."
            )
    for target in targets:
        a = _cell_at(grid, target, batches[0], "recent")
        b = _cell_at(grid, target, batches[-1], "recent")
        if a and b:
            lines.append(
                f"* Batch {fmt_rows(batches[0])} -> {fmt_rows(batches[-1])} rows "
                f"({fmt_rows(target)}-row target, recent keys): {factors(a, b)}."
            )
    p4 = s.get("p4", {}).get("sizes", {})
    if len(p4) > 1:
        ns = sorted(p4, key=int)
        lo, hi = p4[ns[0]], p4[ns[-1]]
        parts = [
            f"{label} x{hi[group][side]['median'] / lo[group][side]['median']:.1f}"
            for label, group, side in (
                ("`status()`", "planning", "status"),
                ("`recover()`", "planning", "recover"),
                ("`sink.write` (10 rows)", "write", "sink"),
                ("bare MERGE (10 rows)", "write", "bare"),
            )
        ]
        lines.append(
            f"* History {int(ns[0]):,} -> {int(ns[-1]):,} committed batches: {', '.join(parts)}."
        )
    return "\n".join(lines)


def _p6(p6: dict[str, Any]) -> str:
    """P6 from ``bench/out/p6.json`` (``python -m bench.p6_delta_spark``)."""
    rows = []
    for case, r in p6["p6"].items():
        stats = r["stats"]
        sink, merge = stats["deltasink spark engine"], stats["MERGE INTO + txn confs"]
        two_phase = stats.get("two-phase (pre_commit + commit)")
        rows.append(
            [
                case,
                cell(sink),
                "—" if two_phase is None else f"{cell(two_phase)}, {_x(r['two_phase_ratio'])}",
                cell(merge),
                _x(r["ratio"]),
                "≤ 1.2x",
                _mark(r["ratio"] <= 1.2),
            ]
        )
    intro = (
        f"`python -m bench.p6_delta_spark --runs {p6['runs']}` ({p6['machine']['date']}; its "
        "own process: a classic `local[2]` session with delta-spark). Baseline: Delta's "
        "documented idempotent `foreachBatch` write, `MERGE INTO` under "
        "`spark.databricks.delta.write.txnAppId`/`txnVersion`; same session and input, "
        "identical copies of the target, order rotated. Each side first writes an empty "
        "batch 0, outside the timing (a steady-state sink: its staging table made, its "
        "epoch claimed). `sink.write` publishes directly (the MERGE from the validated "
        "frame, then one staging commit without data for the committed mark); *two-phase* "
        "is `pre_commit` + `commit` of the same batch (what `write` did before)."
    )
    header = [
        "case",
        "`sink.write` (spark engine)",
        "two-phase, ratio",
        "`MERGE INTO` + txn confs",
        "ratio",
        "goal",
        "",
    ]
    return intro + "\n\n" + _table(header, rows)


def _p7(cases: list[dict[str, Any]]) -> str:
    """P7 (``bench/p7_floor.py``)."""
    from bench.p7_floor import table

    intro = (
        "`python -m bench.p7_floor`: every side on its own copy of the same target, order "
        "rotated. *write* is `sink.write` on a steady-state sink (nothing pending: a direct "
        "publish); *two-phase* is `pre_commit` + `commit` of the same batch (what `write` "
        "did before); *best MERGE* is, per repetition, the fastest of three delta-rs calls "
        "a user can write: the default MERGE, `streamed_exec=False`, and `streamed_exec="
        "False` with the batch's key range in the predicate. Goal: write ≤ 1.0x best."
    )
    best_of = "; ".join(
        f"{c['batch_rows']:,} {c['layout']}: "
        + ", ".join(f"{k} {v}" for k, v in c["best_of"].items() if v)
        for c in cases
    )
    return f"{intro}\n\n{table(cases)}\n\nFastest baseline per case (repetitions won): {best_of}."


def _prepared(sections: dict[str, Any]) -> str:
    seconds = sections.get("p4", {}).get("prepare_s", 0)
    if seconds < 60:
        return ""
    return f", of which {seconds / 60:.1f} min building or waiting for P4's cached history"


_S3_KINDS = ("GET", "HEAD", "PUT", "LIST", "DELETE", "COPY", "POST", "DYNAMODB")


def render_s3(out: dict[str, Any]) -> str:
    """The request counts of ``bench.s3_requests`` as a Markdown table and a verdict."""
    sides = out["sides"]
    kinds = [k for k in _S3_KINDS if any(k in side["by_kind"] for side in sides.values())]
    rows = [
        [
            f"`{name}`",
            f"{side['per_batch']:.1f}",
            *(f"{side['by_kind'].get(k, 0):.1f}" for k in kinds),
        ]
        for name, side in sides.items()
    ]
    txn = sides["sink"]["per_batch"] / sides["merge_txn"]["per_batch"]
    return "\n\n".join(
        [
            _table(["side", "requests / batch", *kinds], rows),
            f"`sink` / best (`{out['best']}`): **{_x(out['ratio'])}** requests (goal ≤ 1.2x); "
            f"`sink` / `merge_txn` (the hand-written exactly-once upsert): {_x(txn)}. "
            f"{out['runs']} batches of 10 rows into {fmt_rows(out['rows'])} rows, after "
            f"3 warm-up batches; the three targets hold the same rows afterwards: "
            f"{'yes' if out['same_rows'] else '**no**'}.",
        ]
    )


def render(results: dict[str, Any], *, command: str, plot_name: str | None) -> str:
    """The whole report."""
    m, cfg, s = results["machine"], results["config"], results["sections"]
    parts = [
        "# deltasink benchmarks",
        f"Generated by `{command}` — do not edit by hand. What each benchmark does, the key "
        "layout and how to run one part: [bench/README.md](../bench/README.md). Earlier "
        "runs, and the re-runs of single benchmarks that measured each step of the write "
        "path's tuning: "
        "[benchmark-history.md](benchmark-history.md).",
        f"**Run:** {m['date']}; {cfg['runs']} runs per side, order rotated on every "
        f"repetition; times are medians [min-max]; ratios are ratios of medians; "
        f"{'**quick mode (smoke test, not for conclusions)**; ' if cfg['quick'] else ''}"
        f"wall time {cfg.get('elapsed_min', 0):.1f} min{_prepared(s)}.",
        f"**Machine:** {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}; "
        f"Python {m['python']}, deltalake {m['deltalake']}, pyarrow {m['pyarrow']}, "
        f"pysail {m['pysail']}, pyspark {m['pyspark']}, numpy {m['numpy']}; deltasink "
        f"{m['deltasink']}. Load average at start {m['loadavg']}, at end "
        f"{cfg.get('loadavg_end', '?')}.",
        "## Goals",
        _table(["benchmark", "goal", "measured", ""], goals(results)),
    ]
    if plot_name:
        parts.append(f"![Cost against batch size, target size and history]({plot_name})")
    if "p1" in s:
        parts.append("## Overhead of `sink.write` over a bare MERGE")
        for layout, case in s["p1"].items():
            parts.append(
                f"### {fmt_rows(case['target_rows'])}-row target, "
                f"{fmt_rows(case['batch_rows'])}-row batch, {layout} keys"
            )
            parts.append(_merge_case(case))
    if "p2" in s:
        parts.append(
            f"## {s['p2']['batches']} pending batches, one `commit()` vs "
            f"{s['p2']['batches']} MERGEs"
        )
        parts.append(_p2(s["p2"]))
    if "p2u" in s:
        p2u = s["p2u"]
        parts.append(
            f"## {p2u['versions']} pending versions, one `commit()` vs one MERGE of their union"
        )
        st = p2u["stats"]
        parts.append(
            _table(
                ["side", "median [min-max]"],
                [[f"`{side}`", cell(stat)] for side, stat in st.items()],
            )
        )
        parts.append(
            f"The union holds {p2u['union_rows']:,} rows (the latest per key); "
            f"`sink_commit` / `best`: **{_x(p2u['ratio'])}** (goal ≤ 1.2x); tables equal: "
            f"{'yes' if p2u['same_rows'] else '**no**'}."
        )
    if "p3" in s:
        parts.append("## Spark input, `sink.write(df)` vs the engine's `MERGE INTO`")
        parts.append(_p3(s["p3"]))
    if "p4" in s:
        parts.append("## Planning and commit cost against history")
        parts.append(
            "A running stream's write holds both tables open, as the bare side holds its "
            "`DeltaTable`; a new sink's write opens the target inside it. *Target log kept*: "
            "the same on copies whose target log was trimmed as its own "
            "`delta.logRetentionDuration` trims a long-running job's "
            "(`bench.p4_planning.maintain_target`): delta-rs lists a local table's whole "
            "`_delta_log` whenever it brings a snapshot up to date, inside its own commits "
            "too, so every writer's commit grows with the target's log files."
        )
        parts.append(_p4(s["p4"]))
    if "p5" in s:
        parts.append("## Peak memory for a large batch from Spark")
        parts.extend(_p5(case) for case in [s["p5"], *s["p5"].get("more", [])])
    if "p6" in s:
        parts.append("## The spark engine vs what a Databricks user writes instead")
        parts.append(_p6(s["p6"]))
    if "p7" in s:
        parts.append("## `sink.write` vs the best MERGE a user can write by hand")
        parts.append(_p7(s["p7"]))
    if "s3" in s:
        parts.append("## S3: requests of a steady-state 10-row `write` vs a hand-written MERGE")
        parts.append(
            "`python -m bench.s3_requests` (run on its own; moto on 127.0.0.1 counts the "
            "requests each side sends, by kind): `sink` is `sink.write` on a running sink, "
            "`merge` a kept-open `DeltaTable` with one delta-rs MERGE per batch, `merge_txn` "
            "the same MERGE with `Transaction(app_id, version)` and a marker check."
        )
        parts.append(render_s3(s["s3"]))
    parts.extend(_new_sections(s))
    if "stores" in s:
        parts.append("## Object stores: requests and latency of a write and a coalesced commit")
        parts.append(
            "`python -m bench.store_requests` (part of `make bench`, or on its own): moto (S3) "
            "and Azurite (ADLS) on 127.0.0.1 behind a proxy that counts each request by verb "
            "and, for the latency rows, delays each one. `sink` is `sink.write` on a running "
            "sink, `merge_txn` a kept-open `DeltaTable` with one delta-rs MERGE per batch "
            "carrying `Transaction(app_id, version)` after a marker check; `hand` stages ten "
            "batches by hand (appends to a kept-open staging table) and MERGEs their union. "
            "bench/README.md has the layouts."
        )
        parts.append(render_stores(s["stores"]))
    if "grid" in s:
        parts.append("## Cost growth with target size and batch size")
        parts.append(_grid(s["grid"]))
    growth = _growth(results)
    if growth:
        parts.append("### Growth factors (ratios of medians)")
        parts.append(growth)
    return "\n\n".join(parts) + "\n"


#: Sections rendered by their benchmark's own module: key -> (heading, module).
_OWN_SECTIONS = {
    "fanin": "## Fan-in: many writers into one target",
    "telemetry": "## Telemetry: what recording every commit costs",
    "size": "## Size: the spark engine on a Spark cluster against Delta's MERGE INTO",
}


def _own(key: str) -> Any:
    from bench import fanin, size, telemetry_cost

    return {"fanin": fanin, "telemetry": telemetry_cost, "size": size}[key]


def _new_goal_rows(sections: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for key in _OWN_SECTIONS:
        if key in sections:
            rows += _own(key).goal_rows(sections[key])
    return rows


def _new_sections(sections: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for key, heading in _OWN_SECTIONS.items():
        if key in sections:
            parts += [heading, _own(key).render(sections[key])]
    return parts


def splice(report: str, results: dict[str, Any], *, command: str) -> str:
    """``report`` (a full run's) with the sections and goal rows of ``results``'s parts
    (fan-in, telemetry) replaced or added, and a line saying which command made them."""
    sections = results["sections"]
    keys = [k for k in _OWN_SECTIONS if k in sections]
    headings = {_OWN_SECTIONS[k] for k in keys}
    kept: list[str] = []
    skip = False
    blocks = report.rstrip("\n").replace("\n## ", "\n\n## ").replace("\n\n\n", "\n\n")
    for block in blocks.split("\n\n"):  # a heading always starts a block of its own
        if block.startswith("## "):
            skip = block.split("\n")[0] in headings
        if not skip and not (block.startswith("Sections ") and "--splice" in block):
            kept.append(block)
    mine = tuple(f"| {_OWN_SECTIONS[k][3:].split(':')[0]}" for k in keys)
    lines = [line for line in "\n\n".join(kept).split("\n") if not line.startswith(mine)]
    goals = lines.index("## Goals")
    end = next(i for i in range(goals + 1, len(lines)) if lines[i].startswith("|"))
    while end + 1 < len(lines) and lines[end + 1].startswith("|"):
        end += 1
    rows = _honest(_new_goal_rows(sections), results)
    lines[end + 1 : end + 1] = ["| " + " | ".join(r) + " |" for r in rows]
    note = (
        f"This section (and its goal rows): `{command}` ({results['machine']['date']}, load "
        f"{results['machine']['loadavg']} at start, {results['config'].get('loadavg_end', '?')}"
        " at end); the other sections are the last full run's."
    )
    parts = _new_sections(sections)
    for i in range(0, len(parts), 2):  # heading, body: the note between them
        parts[i] += "\n\n" + note
    return "\n".join(lines) + "\n\n" + "\n\n".join(parts) + "\n"
