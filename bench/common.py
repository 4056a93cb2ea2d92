"""Shared pieces of the benchmarks: sizes, timing, table copies, machine facts.

Every benchmark compares two (or more) *sides* doing the same work on identical input.
A side is a :data:`Trial`: a callable that does its own untimed set-up (copying a
prepared table directory, opening a sink), then times only the operation under test
and returns the seconds it took. :func:`compare` runs the sides ``runs`` times,
rotating their order on every repetition so that neither side always runs first (warm
caches, a noisy neighbour starting up), and returns the samples per side.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH_DIR",
    "FULL",
    "OUT_DIR",
    "QUICK",
    "REPO_DIR",
    "Config",
    "Results",
    "Sizes",
    "Stats",
    "Trial",
    "clone",
    "compare",
    "fmt_rows",
    "log",
    "machine_info",
    "ratio",
    "remove",
    "stats_dict",
    "stopwatch",
    "tree_bytes",
]

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"

#: A side of a comparison: ``trial(rep)`` sets up (untimed), runs the operation
#: under test, and returns its wall time in seconds.
Trial = Callable[[int], float]


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """Row counts of every benchmark (see bench/README.md for what each one means)."""

    file_rows: int
    p1_target: int
    p1_batch: int
    grid_targets: tuple[int, ...]
    grid_batches: tuple[int, ...]
    grid_uniform: tuple[int, ...]
    p2_batches: int
    p2_batch_rows: int
    p3_batches: tuple[int, ...]
    p4_histories: tuple[int, ...]
    p4_batch_rows: int
    p5_target: int
    p5_batch: int
    p5_runs: int
    #: P5's further batch sizes (issue 14 states its memory goal at 1M rows too).
    p5_also: tuple[int, ...] = ()


FULL = Sizes(
    file_rows=100_000,
    p1_target=1_000_000,
    p1_batch=100_000,
    grid_targets=(1_000_000, 10_000_000),
    grid_batches=(10_000, 100_000, 1_000_000),
    grid_uniform=(1_000_000, 10_000_000),
    p2_batches=100,
    p2_batch_rows=1_000,
    p3_batches=(100_000, 1_000_000),
    p4_histories=(100, 1_000, 10_000),
    p4_batch_rows=10,
    p5_target=10_000_000,
    p5_batch=5_000_000,
    p5_runs=3,
    p5_also=(1_000_000,),
)

QUICK = Sizes(
    file_rows=20_000,
    p1_target=200_000,
    p1_batch=20_000,
    grid_targets=(200_000, 1_000_000),
    grid_batches=(2_000, 20_000),
    grid_uniform=(200_000,),
    p2_batches=20,
    p2_batch_rows=1_000,
    p3_batches=(20_000,),
    p4_histories=(20, 200),
    p4_batch_rows=10,
    p5_target=1_000_000,
    p5_batch=500_000,
    p5_runs=1,
)


@dataclass(frozen=True, kw_only=True)
class Config:
    """One benchmark run.

    Attributes:
        sizes: Row counts.
        runs: Repetitions per side (≥ 5 for a report; 3 in quick mode).
        quick: Smoke-test mode.
        seed: Seed of every random generator (data are identical across runs).
        out: Scratch and cache directory (git-ignored).
    """

    sizes: Sizes
    runs: int
    quick: bool
    seed: int = 20_240_611
    out: Path = OUT_DIR

    @property
    def cache(self) -> Path:
        """Prepared tables and batches, reused between runs (keyed by a stamp)."""
        return self.out / "cache"

    @property
    def scratch(self) -> Path:
        """Per-trial copies of prepared tables; emptied after each trial."""
        return self.out / "scratch"


@dataclass(frozen=True)
class Stats:
    """Samples of one side (seconds, or bytes), with the usual summaries."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    @property
    def iqr(self) -> tuple[float, float]:
        """First and third quartiles (inclusive method; equal to min/max for n < 4)."""
        if len(self.samples) < 2:
            return self.samples[0], self.samples[0]
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[0], q[2]

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": list(self.samples),
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "q1": self.iqr[0],
            "q3": self.iqr[1],
        }


def log(message: str) -> None:
    """Progress on stderr (stdout stays clean)."""
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"[bench {stamp}] {message}", file=sys.stderr, flush=True)


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...`` then ``t[0]`` holds the seconds elapsed.

    Runs a garbage collection first, outside the timed span, so that one side does
    not pay for the other side's garbage.
    """
    gc.collect()
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


def compare(sides: Mapping[str, Trial], runs: int, *, label: str) -> dict[str, Stats]:
    """Run every side ``runs`` times, rotating the order on each repetition.

    With two sides the order alternates A,B / B,A / A,B ...; with three it rotates.
    """
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(runs):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(sides[name](rep))
        summary = ", ".join(f"{n}={samples[n][-1] * 1000:.0f}ms" for n in names)
        log(f"{label} rep {rep + 1}/{runs}: {summary}")
    return {name: Stats(tuple(values)) for name, values in samples.items()}


def clone(template: Path, dest: Path) -> Path:
    """A fresh copy of a prepared directory (``shutil.copytree``), replacing ``dest``.

    Every trial works on its own copy, so both sides of a comparison start from
    byte-identical tables and nothing is regenerated between runs.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(template, dest)
    return dest


def remove(path: Path) -> None:
    """Delete a scratch directory (ignoring one that is already gone)."""
    shutil.rmtree(path, ignore_errors=True)


def tree_bytes(path: Path) -> int:
    """Total size of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "deltasink"],
            cwd=REPO_DIR,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + (" (deltasink/ modified)" if dirty.stdout.strip() else "")


def _cpu_by_process() -> dict[int, tuple[int, float]]:
    """Every process's parent and CPU seconds so far (its own, and its reaped
    children's), from ``/proc`` (empty where there is none)."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / ticks
        found[int(entry)] = (int(fields[1]), cpu)
    return found


def _ours(processes: dict[int, tuple[int, float]]) -> set[int]:
    """This process and its descendants."""
    ours = {os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in processes.items() if parent in ours} - ours
        ours |= more
        grew = bool(more)
    return ours


class OtherWork:
    """The CPU other processes of the machine use while a measurement runs (not this
    process's own children, whose work is the measurement's): a benchmark's own writer
    processes raise the load average, so the load average cannot tell whether anything
    else ran; this can. ``cores``: the others' CPU seconds per second of wall time."""

    def __init__(self) -> None:
        self._start = time.perf_counter()
        processes = _cpu_by_process()
        mine = _ours(processes)
        self._before = {p: cpu for p, (_, cpu) in processes.items() if p not in mine}

    def cores(self) -> float:
        processes = _cpu_by_process()
        mine = _ours(processes)
        used = sum(
            max(0.0, cpu - self._before.get(pid, 0.0))
            for pid, (_, cpu) in processes.items()
            if pid not in mine and pid != 0
        )
        return used / max(time.perf_counter() - self._start, 1e-9)


#: Other processes may use this much of one core on average while a measurement runs
#: before the measurement is not one (a quiet machine's daemons use far less).
QUIET_OTHER_CORES = 0.2


def machine_info() -> dict[str, Any]:
    """The facts a reader needs to judge the numbers."""
    import psutil

    import deltasink

    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "deltasink": f"{deltasink.__version__} @ {_git_commit()}",
        "deltalake": _version("deltalake"),
        "pyarrow": _version("pyarrow"),
        "pysail": _version("pysail"),
        "pyspark": _version("pyspark"),
        "numpy": _version("numpy"),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


@dataclass
class Results:
    """Everything a run measured, as JSON-ready dicts keyed by benchmark."""

    config: dict[str, Any]
    machine: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.__dict__, indent=1, default=str))


def stats_dict(stats: Mapping[str, Stats]) -> dict[str, Any]:
    """``{side: summary}`` for a results file."""
    return {name: s.to_dict() for name, s in stats.items()}


def ratio(stats: Mapping[str, Stats], num: str, den: str) -> float:
    """Ratio of the medians of two sides."""
    return stats[num].median / stats[den].median


def fmt_rows(n: int) -> str:
    """``1000000`` -> ``1M``, ``100000`` -> ``100k``."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % (size // 10 or 1) == 0:
            value = n / size
            return f"{value:g}{unit}"
    return str(n)


def sequence(items: Sequence[int]) -> str:
    """``(1, 2, 3)`` -> ``1, 2, 3`` with row units."""
    return ", ".join(fmt_rows(i) for i in items)
