"""Size (issue 47): the spark engine on a Spark standalone cluster, a 10M-row target and
1M-row batches, against Delta's own ``MERGE INTO`` with the txn confs.

    python -m bench.size [--target-rows 10000000] [--batch-rows 1000000] [--runs 5]
        [--modes upsert,scd2] [--updates 0.5] [--json FILE]

Not in the default ``make bench`` set (about an hour at full size on 2 cores):
``make bench BENCH_ARGS='--only size --splice'`` runs it at full size and replaces its
section in docs/benchmarks.md (``SIZE=200000:20000`` narrows it).

A master and two workers on 127.0.0.1 (:class:`tests.cluster.StandaloneCluster`), each
worker one core and one executor of :data:`EXECUTOR_MEMORY`; the driver gets
:data:`DRIVER_MEMORY`. Spark's own optimizer settings (adaptive execution, code
generation, the JIT), not the tests' cheap ones. Per mode (``upsert``, ``scd2``), a
target and a batch are generated on the cluster once (:mod:`bench.size_trial`, cached
under ``bench/out/cache``); the batch updates the ``--updates`` fraction of its rows'
keys among the target's most recent keys and inserts the rest. Every trial is a driver
application of its own (a fresh driver JVM, so each side's peak memory is its own) on
its own copy of the target: deltasink's ``sink.write`` (``sink``) or the ``MERGE INTO``
(``native``), each after an untimed empty version 0; the order of the two rotates on
every repetition (A B, B A, ...). After each repetition both targets must hold the same
rows (count and content hash).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import OUT_DIR, QUIET_OTHER_CORES, REPO_DIR, OtherWork, compare, fmt_rows, log

__all__ = ["Settings", "goal_rows", "measure", "render", "run"]

MODES = ("upsert", "scd2")
SIDES = ("sink", "native")
#: The goals (issue 47): time and the driver JVM's peak RSS, deltasink over native.
GOAL_TIME = 1.2
GOAL_MEMORY = 1.2
#: Memory on a 24 GiB, 2-core machine: the driver, and each of the two executors.
DRIVER_MEMORY = "2g"
EXECUTOR_MEMORY = "3g"
#: The cached inputs' format: bump when bench/size_trial.py's data change.
DATA_VERSION = 1
TRIAL_TIMEOUT_S = 3600


@dataclass(frozen=True, kw_only=True)
class Settings:
    """One run: sizes, repetitions, memory."""

    target_rows: int = 10_000_000
    batch_rows: int = 1_000_000
    updates: float = 0.5
    runs: int = 5
    modes: tuple[str, ...] = MODES
    driver_memory: str = DRIVER_MEMORY
    executor_memory: str = EXECUTOR_MEMORY
    shuffle_partitions: int = 8


def cluster_conf(s: Settings) -> dict[str, str]:
    """The drivers' settings over the tests' cluster defaults (:func:`tests.cluster.app_conf`)."""
    return {
        "spark.driver.memory": s.driver_memory,
        "spark.executor.memory": s.executor_memory,
        "spark.executor.cores": "1",
        "spark.executor.instances": "2",
        "spark.cores.max": "2",
        "spark.driver.maxResultSize": "1g",
        # what a user runs: the JVM's full JIT (not the tests' C1 only), its default
        # collector, Spark's optimizer
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC",
        "spark.executor.extraJavaOptions": "-XX:+UseG1GC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.codegen.wholeStage": "true",
        "spark.sql.codegen.factoryMode": "FALLBACK",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
    }


class Driver:
    """Runs :mod:`bench.size_trial` as driver applications on one cluster."""

    def __init__(self, cluster: Any, work: Path) -> None:
        self.cluster, self.work = cluster, work
        self.count = 0

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        logfile = self.work / f"driver-{self.count}.log"
        with logfile.open("w") as err:
            done = subprocess.run(
                [sys.executable, "-m", "bench.size_trial", json.dumps(args)],
                cwd=REPO_DIR,
                env=self.cluster.driver_env(),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=TRIAL_TIMEOUT_S,
                check=False,
            )
        if done.returncode != 0:
            tail = logfile.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"driver {args} failed ({done.returncode}):\n{tail}")
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return out


def _inputs(s: Settings, mode: str, drive: Driver) -> tuple[Path, Path, dict[str, Any]]:
    """The mode's target template and batch, generated once (cached by their sizes)."""
    stamp = f"size-v{DATA_VERSION}-{mode}-{s.target_rows}-{s.batch_rows}-{s.updates}"
    home = OUT_DIR / "cache" / stamp
    facts = home / "facts.json"
    if not facts.exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        log(f"size: generating the {mode} target and batch on the cluster ({stamp})")
        made = drive(
            {
                "cmd": "prepare",
                "mode": mode,
                "target_rows": s.target_rows,
                "batch_rows": s.batch_rows,
                "updates": s.updates,
                "template": str(home / "target"),
                "batch": str(home / "batch"),
            }
        )
        facts.write_text(json.dumps(made))
    return home / "target", home / "batch", json.loads(facts.read_text())


def _mode(s: Settings, mode: str, drive: Driver, work: Path) -> dict[str, Any]:
    """Both sides of ``mode``, ``s.runs`` times each, order rotating."""
    template, batch, facts = _inputs(s, mode, drive)
    load_start = [round(x, 2) for x in os.getloadavg()]
    others = OtherWork()
    trials: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}

    def side(name: str) -> Any:
        def trial(rep: int) -> float:
            target = work / name / "target"
            shutil.rmtree(target.parent, ignore_errors=True)
            shutil.copytree(template, target)
            args = {"cmd": "trial", "side": name, "mode": mode, "rep": rep}
            out = drive({**args, "target": str(target), "batch": str(batch)})
            shutil.rmtree(target.parent, ignore_errors=True)
            trials[name].append(out)
            return float(out["seconds"])

        return trial

    stats = compare({name: side(name) for name in SIDES}, s.runs, label=f"size {mode}")
    pairs = list(zip(trials["sink"], trials["native"], strict=True))
    return {
        "mode": mode,
        **facts,
        "batch_rows": s.batch_rows,
        "update_fraction": s.updates,
        "runs": s.runs,
        "stats": {name: st.to_dict() for name, st in stats.items()},
        "time_ratios": [a["seconds"] / b["seconds"] for a, b in pairs],
        "jvm_ratios": [a["rss_peak"]["jvm"] / b["rss_peak"]["jvm"] for a, b in pairs],
        "same": [(a["rows"], a["hash"]) == (b["rows"], b["hash"]) for a, b in pairs],
        "trials": trials,
        "loadavg_start": load_start,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "other_cores": round(others.cores(), 3),
        "cores": os.cpu_count(),
    }


def measure(s: Settings, work: Path) -> dict[str, Any]:
    """Every mode of ``s`` on one cluster, started and stopped here."""
    from tests.cluster import StandaloneCluster

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    conf = cluster_conf(s)
    cluster = StandaloneCluster(
        work / "cluster", worker_cores=1, worker_memory=s.executor_memory, conf=conf
    )
    try:
        drive = Driver(cluster, work)
        modes = [_mode(s, mode, drive, work) for mode in s.modes]
    finally:
        cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
    return {"settings": asdict(s), "conf": conf, "modes": modes}


def run(config: Any) -> dict[str, Any]:
    """``make bench``'s part ``size`` (only with ``--only size``): full size, or
    200k / 20k rows with ``--quick``; ``SIZE="<target rows>:<batch rows>"`` narrows it.
    Full-size results also go to ``bench/out/size.json`` (a later full run keeps them)."""
    narrowed = [int(n) for n in os.environ.get("SIZE", "").split(":") if n]
    rows = narrowed or ([200_000, 20_000] if config.quick else [10_000_000, 1_000_000])
    runs = config.runs if config.quick else max(5, config.runs)
    s = Settings(target_rows=rows[0], batch_rows=rows[1], runs=runs)
    section = measure(s, config.scratch / "size")
    if not config.quick and not narrowed:
        (OUT_DIR / "size.json").write_text(json.dumps(section, indent=1))
    return section


def _spread(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def _noisy(m: dict[str, Any]) -> str | None:
    """Why a mode measured nothing: the load average at its start above 0.75 per core,
    other processes using more than ``QUIET_OTHER_CORES`` cores meanwhile, or the
    native MERGE's time moving more than 1.5x between its runs (bench/report.py's rules)."""
    from bench.report import QUIET_LOAD_PER_CORE, STEADY_SPREAD

    native = m["stats"]["native"]
    if m["loadavg_start"][0] > QUIET_LOAD_PER_CORE * (m.get("cores") or 2):
        return f"load {m['loadavg_start'][0]:.1f}"
    if m["other_cores"] > QUIET_OTHER_CORES:
        return f"other work used {m['other_cores']:.2f} cores"
    if native["max"] / native["min"] > STEADY_SPREAD:
        return f"baseline moved {native['max'] / native['min']:.2f}x"
    return None


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _peak(m: dict[str, Any], side: str, process: str) -> float:
    return float(statistics.median(t["rss_peak"][process] for t in m["trials"][side]))


def _what(m: dict[str, Any]) -> str:
    return f"{m['mode']}, {fmt_rows(m['batch_rows'])} rows into {fmt_rows(m['target_rows'])}"


def goal_rows(section: dict[str, Any]) -> list[list[str]]:
    """The goal table's rows: per mode, the time ratio (no verdict from a noisy run or
    from unequal targets) and the driver JVM's peak RSS ratio (a memory figure: the
    load does not move it)."""
    rows = []
    for m in section["modes"]:
        ratio = statistics.median(m["time_ratios"])
        noisy = _noisy(m)
        same = all(m["same"])
        verdict = "**missed**" if not same or ratio > GOAL_TIME else "**met**"
        if noisy and same:
            verdict = f"noisy ({noisy}), not a measurement"
        rows.append(
            [
                f"Size on a cluster: spark engine `sink.write` vs `MERGE INTO` + txn confs, "
                f"{_what(m)}",
                f"≤ {GOAL_TIME}x",
                _spread(m["time_ratios"]) + ("" if same else ", **targets differ**"),
                verdict,
            ]
        )
        memory = statistics.median(m["jvm_ratios"])
        rows.append(
            [
                f"Size on a cluster: driver JVM peak RSS of `sink.write` vs `MERGE INTO`, "
                f"{_what(m)}",
                f"≤ {GOAL_MEMORY}x",
                f"{_spread(m['jvm_ratios'])}: {_mib(_peak(m, 'sink', 'jvm'))} vs "
                f"{_mib(_peak(m, 'native', 'jvm'))}",
                "**met**" if memory <= GOAL_MEMORY else "**missed**",
            ]
        )
    return rows


def render(section: dict[str, Any]) -> str:
    """The section of the report."""
    s, conf = section["settings"], section["conf"]
    lines = [
        f"`python -m bench.size --target-rows {s['target_rows']} --batch-rows "
        f"{s['batch_rows']} --runs {s['runs']}`: a Spark standalone cluster on 127.0.0.1 "
        "(a master and two workers, `tests/cluster.py`), two executors of 1 core and "
        f"{conf['spark.executor.memory']}, the driver {conf['spark.driver.memory']}, "
        "adaptive execution and code generation on. Each trial is a driver application "
        "of its own, on its own copy of the target generated on the cluster: `sink` is "
        "the spark engine's `sink.write` (a direct publish), `native` Delta's "
        "`MERGE INTO` under `spark.databricks.delta.write.txnAppId`/`txnVersion` "
        "(`upsert`: `UPDATE SET *`/`INSERT *`; `scd2`: the standard SCD2 MERGE of a "
        'union of the staged rows, against `MergeSpec(mode="scd2")`); both after an '
        "untimed empty version 0, order rotated per repetition. The batch updates "
        f"{s['updates']:.0%} of its keys (the target's most recent) and inserts the rest. "
        "*ratio*: sink/native per repetition, median (min-max). *Peak RSS*: `VmHWM` of "
        "the driver JVM (and of the driver's Python) over the timed write, reset "
        "through `/proc/<pid>/clear_refs` right before it; *heap*: the JVM heap pools' "
        "peak use (`MemoryPoolMXBean`) over the same span. *same*: both targets equal "
        "after every repetition (row count and a hash of every column). A mode whose "
        "load average started above 1.5, whose other processes used more than "
        f"{QUIET_OTHER_CORES} cores, or whose native time moved more than 1.5x measured "
        "nothing.",
        "",
        "| mode | rows | sink | native | ratio | driver JVM peak RSS sink / native "
        "| ratio | heap peak sink / native | driver Python peak RSS sink / native "
        "| same | load start, end; others' cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    from bench.report import cell

    for m in section["modes"]:
        heap = {
            side: statistics.median(t["heap_peak"] for t in m["trials"][side]) for side in SIDES
        }
        noisy = _noisy(m)
        lines.append(
            f"| {m['mode']} | {fmt_rows(m['batch_rows'])} into {fmt_rows(m['target_rows'])} "
            f"({m['updates']:,} updates) | {cell(m['stats']['sink'])} | "
            f"{cell(m['stats']['native'])} | {_spread(m['time_ratios'])} | "
            f"{_mib(_peak(m, 'sink', 'jvm'))} / {_mib(_peak(m, 'native', 'jvm'))} | "
            f"{_spread(m['jvm_ratios'])} | {_mib(heap['sink'])} / {_mib(heap['native'])} | "
            f"{_mib(_peak(m, 'sink', 'python'))} / {_mib(_peak(m, 'native', 'python'))} | "
            f"{'yes' if all(m['same']) else '**no**'} | {m['loadavg_start'][0]:.2f}, "
            f"{m['loadavg'][0]:.2f}; {m['other_cores']:.2f}"
            f"{f' (noisy: {noisy})' if noisy else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.size", description=__doc__)
    parser.add_argument("--target-rows", type=int, default=10_000_000)
    parser.add_argument("--batch-rows", type=int, default=1_000_000)
    parser.add_argument("--updates", type=float, default=0.5, help="fraction of the batch")
    parser.add_argument("--runs", type=int, default=5, help="repetitions per side")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--driver-memory", default=DRIVER_MEMORY)
    parser.add_argument("--executor-memory", default=EXECUTOR_MEMORY)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    s = Settings(
        target_rows=args.target_rows,
        batch_rows=args.batch_rows,
        updates=args.updates,
        runs=args.runs,
        modes=tuple(args.modes.split(",")),
        driver_memory=args.driver_memory,
        executor_memory=args.executor_memory,
    )
    section = measure(s, OUT_DIR / "scratch" / "size")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(section, indent=1))
    print(render(section))
    print("\n".join(f"| {' | '.join(row)} |" for row in goal_rows(section)))


if __name__ == "__main__":
    main()
