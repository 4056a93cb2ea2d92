"""Run the benchmarks and write the report: ``python -m bench.run [--quick]``.

The full run writes ``docs/benchmarks.md`` and ``docs/benchmarks.png``; ``--quick``
(small sizes, 3 runs, a smoke test) writes ``bench/out/benchmarks-quick.md`` and its
PNG instead, so it never overwrites the published numbers. Raw results always go to
``bench/out/results[-quick].json``; ``--report-only`` re-renders from that file.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import (
    FULL,
    OUT_DIR,
    QUICK,
    REPO_DIR,
    Config,
    OtherWork,
    Results,
    log,
    machine_info,
    remove,
)
from bench.plot import plot
from bench.report import render, splice

__all__ = ["main"]

PARTS = ("p1", "grid", "p2", "p2u", "p3", "p4", "p5", "p7", "fanin", "telemetry", "stores")
#: Parts run only when ``--only`` names them (each takes long: its module says how long).
OPTIONAL = ("size",)


def _sections(config: Config, only: set[str], *, rebuild: bool) -> dict[str, Any]:
    from bench import (
        fanin,
        p1_overhead,
        p2_coalesce,
        p2_union,
        p3_spark,
        p4_planning,
        p5_memory,
        p7_floor,
        size,
        store_requests,
        telemetry_cost,
    )

    out: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("p1", lambda: p1_overhead.run_p1(config)),
        ("p7", lambda: p7_floor.run(config)),
        ("p2", lambda: p2_coalesce.run(config)),
        ("p2u", lambda: p2_union.run(config, 10 if config.quick else p2_union.VERSIONS)),
        ("p3", lambda: p3_spark.run(config)),
        ("p5", lambda: p5_memory.run(config)),
        ("telemetry", lambda: telemetry_cost.run(config)),
        ("fanin", lambda: fanin.run(config)),
        ("grid", lambda: p1_overhead.run_grid(config, out.get("p1", {}))),
        # moto and Azurite in child processes (issue 39); quick: S3 only, fewer writes
        ("stores", lambda: store_requests.run_for(config)),
        # last: the first full run builds (or waits for) the 10,000-batch history
        ("p4", lambda: p4_planning.run(config, rebuild=rebuild)),
        # only with --only size: a standalone cluster, 10M rows (about an hour)
        ("size", lambda: size.run(config)),
    ]
    for name, step in steps:
        if name in only:
            start = time.perf_counter()
            log(f"--- {name} ---")
            out[name] = step()
            log(f"--- {name} done in {time.perf_counter() - start:.0f} s ---")
    return out


def _paths(args: argparse.Namespace) -> tuple[Path, Path, Path]:
    suffix = "-quick" if args.quick else "-splice" if args.splice else ""
    results = OUT_DIR / f"results{suffix}.json"
    if args.report:
        report = Path(args.report)
    elif args.quick:
        report = OUT_DIR / "benchmarks-quick.md"
    else:
        report = REPO_DIR / "docs" / "benchmarks.md"
    return results, report, report.with_suffix(".png")


#: The parts whose sections and goal rows ``--splice`` replaces (bench.report.splice).
SPLICEABLE = ("fanin", "telemetry", "size")


def _add_saved(sections: dict[str, Any]) -> None:
    """The results of the parts that run on their own, saved under ``bench/out``."""
    p6 = OUT_DIR / "p6.json"  # the delta-spark benchmark runs on its own (a JVM session)
    if p6.exists():
        sections["p6"] = json.loads(p6.read_text())
    size_out = OUT_DIR / "size.json"  # bench.size runs only when named (a cluster, an hour)
    if size_out.exists() and "size" not in sections:
        sections["size"] = json.loads(size_out.read_text())
    s3 = OUT_DIR / "s3-requests.json"  # bench.s3_requests runs on its own (a moto server)
    if s3.exists():
        sections["s3"] = json.loads(s3.read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 runs (smoke test)")
    parser.add_argument("--runs", type=int, help="repetitions per side (default 5, quick 3)")
    parser.add_argument(
        "--only",
        help=f"comma-separated subset of {','.join(PARTS)} (grid needs p1), or of the "
        f"parts run only when named: {','.join(OPTIONAL)}",
    )
    parser.add_argument("--report", help="where to write the Markdown report")
    parser.add_argument(
        "--rebuild-history",
        action="store_true",
        help="rebuild P4's cached histories (after a change to deltasink's log layout)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="re-render the report from saved results"
    )
    parser.add_argument(
        "--splice",
        action="store_true",
        help="with --only: run those parts and replace only their sections (and goal "
        "rows) in the existing report, keeping the rest as the last full run left it",
    )
    args = parser.parse_args(argv)
    results_path, report_path, plot_path = _paths(args)
    if args.report_only:
        data = json.loads(results_path.read_text())
    else:
        only = set(args.only.split(",")) if args.only else set(PARTS)
        unknown = only - set(PARTS) - set(OPTIONAL)
        if unknown:
            parser.error(f"unknown part(s) {sorted(unknown)}; choose from {PARTS + OPTIONAL}")
        if args.splice and only - set(SPLICEABLE):
            parser.error(
                f"--splice replaces only the sections of {list(SPLICEABLE)}; "
                f"{sorted(only - set(SPLICEABLE))} need a full run (or --report to write "
                "a report of their own)"
            )
        if "grid" in only:
            only.add("p1")
        runs = args.runs or (3 if args.quick else 5)
        config = Config(sizes=QUICK if args.quick else FULL, runs=runs, quick=args.quick)
        start = time.perf_counter()
        machine = machine_info()
        others = OtherWork()
        load = os.getloadavg()[0]
        if load > 0.75 * (os.cpu_count() or 2):
            log(
                f"load average {load:.1f} on {os.cpu_count()} cores: something else runs on "
                "this machine; every timed result of this run will be marked noisy, not a "
                "measurement (run make bench alone)"
            )
        remove(config.scratch)
        sections = _sections(config, only, rebuild=args.rebuild_history)
        remove(config.scratch)
        cfg = {
            "quick": config.quick,
            "runs": config.runs,
            "seed": config.seed,
            "sizes": asdict(config.sizes),
            "elapsed_min": (time.perf_counter() - start) / 60,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            # what the machine's other processes used meanwhile (the run's own raise the load)
            "other_cores": round(others.cores(), 3),
            "argv": sys.argv[1:] if argv is None else argv,
            # the parts' own settings (bench.fanin): part of the command that repeats it
            "env": {
                k: os.environ[k] for k in ("FANIN", "FANIN_SPARK", "SIZE") if os.environ.get(k)
            },
        }
        results = Results(config=cfg, machine=machine, sections=sections)
        results.save(results_path)
        data = json.loads(results_path.read_text())
    if not (args.quick or args.splice):  # a splice shows only the parts it measured
        _add_saved(data["sections"])
    argv_text = shlex.join(data["config"]["argv"])
    env = data["config"].get("env") or {}
    command = "".join(f"{k}={v} " for k, v in env.items()) + "make bench"
    command += f" BENCH_ARGS='{argv_text}'" if argv_text else ""
    if args.splice:
        report_path.write_text(splice(report_path.read_text(), data, command=command))
        log(f"report: {report_path} (sections {sorted(data['sections'])} replaced)")
        return
    plot(data, plot_path)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(render(data, command=command, plot_name=plot_path.name))
    log(f"report: {report_path}  plot: {plot_path}  results: {results_path}")


if __name__ == "__main__":
    main()
