#!/usr/bin/env python
"""Soak test: SIGKILL a writer process at random moments, restart it, and check that no
batch is lost and none is applied twice.

    python tools/soak.py --trials 200 --seed 1

Each trial is one job writing ``--min-batches``..``--max-batches`` (6-12) versions into a fresh
target (``append`` mode, so a replayed batch would show up as repeated rows, or
``upsert`` by key). The job runs in a child process (this file with ``--writer``) the
way a real job does: on start ``sink.recover()``, then for each next batch of a
deterministic source ``pre_commit``, record the source progress in a file (only after
``pre_commit`` returned), and commit with a lag chosen at random per start: every
batch, after 1-5 batches have piled up, one batch behind (a delayed notification), or
``write()`` (both phases, progress after the commit); now and then ``gc(retention=0)``.

The parent kills the child with SIGKILL after a random delay (timed from the end of
its recovery, or from its start), or arms a fault point with
``DELTASINK_FAULTS=<point>=exit@<n>`` so the child dies there with ``os._exit``; then
restarts it, 1-3 times per trial (``--max-kills``), and lets the last start run to the end. After every
kill it checks the logs as the crash left them; after the trial it runs
``recover()`` itself and checks the end state. It reads the Delta logs directly
(delta-rs and the raw JSON log), never through the sink under test.

Checks, with ``progress`` the last source version acknowledged by the job and ``m``
the target's ``txn`` marker for the app:

* after each kill: every version ≤ ``progress`` is committed (≤ ``m``) or staged;
  the versions applied to the target are exactly ``0..m``, each in one commit, with
  exactly its source rows; no row of a version > ``m`` is visible; in upsert mode the
  ``latest`` row holds the newest non-empty version ≤ ``m`` (order);
* at the end: ``m`` is the last version; every version is applied in exactly one
  target commit with exactly its rows (*lost*: a version ≤ ``progress`` missing or
  incomplete; *duplicated*: a version applied twice or with repeated rows); staging
  holds nothing ≤ ``m``; a final ``recover()`` commits nothing.

Prints a summary (trials, kills, lost and duplicated batches, wall time, kills per
phase) and exits 1 if anything was lost, duplicated or inconsistent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from deltasink._faults import EXIT_CODE, POINTS

__all__ = [
    "Observed",
    "Summary",
    "Trial",
    "TrialResult",
    "Verdict",
    "check",
    "main",
    "observe",
    "run_soak",
    "source_batch",
    "source_rows",
    "txn_ledger",
]

APP_ID = "soak"
SCRIPT = Path(__file__).resolve()
_FIELDS: list[pa.Field[Any]] = [
    pa.field("id", pa.int64()),
    pa.field("version", pa.int64()),
    pa.field("row", pa.int64()),
    pa.field("payload", pa.string()),
]
SCHEMA = pa.schema(_FIELDS)
MODES = ("append", "upsert")
POLICIES = ("every", "pile", "delayed", "write")
#: How long one start of the writer may take before it counts as hung.
LAUNCH_TIMEOUT_S = 120.0
GC_PROBABILITY = 0.08


# -- the deterministic source ---------------------------------------------------------


def source_rows(trial_seed: int, version: int, mode: str) -> list[dict[str, Any]]:
    """The rows of ``version`` (0-5 rows, tagged ``(version, row)``; some batches are
    empty). Upsert batches also update the ``latest`` row (id -1) to their version."""
    rng = random.Random(f"{trial_seed}/{version}")
    n = rng.choice((0, 1, 2, 3, 4, 5))
    rows: list[dict[str, Any]] = [
        {
            "id": version * 1000 + r,
            "version": version,
            "row": r,
            "payload": f"s{trial_seed}-v{version}-r{r}",
        }
        for r in range(n)
    ]
    if mode == "upsert" and n:
        rows.append({"id": -1, "version": version, "row": -1, "payload": "latest"})
    return rows


def source_batch(trial_seed: int, version: int, mode: str) -> pa.Table:
    """:func:`source_rows` as an Arrow table."""
    return pa.Table.from_pylist(source_rows(trial_seed, version, mode), schema=SCHEMA)


def merge_spec(mode: str) -> Any:
    """The MergeSpec of a trial's target."""
    from deltasink import MergeSpec

    return MergeSpec(mode="append") if mode == "append" else MergeSpec(keys=["id"])


def read_progress(path: Path) -> int:
    """The last version the job acknowledged to its source, or -1."""
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return -1


def write_progress(path: Path, version: int) -> None:
    """Record source progress atomically (a crash leaves the old or the new value)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(version))
    os.replace(tmp, path)


# -- the writer (child process) -------------------------------------------------------


def writer(config: dict[str, Any]) -> int:
    """The job: recover, then stage, acknowledge and commit the remaining batches.

    Prints one line per step (``<phase> <version>``) so that the parent knows where it
    killed the process.
    """
    from deltasink import DeltaSink

    def phase(name: str, version: int | None = None) -> None:
        print(name, "-" if version is None else version, flush=True)

    target, mode, batches = config["target"], config["mode"], int(config["batches"])
    trial_seed = int(config["trial_seed"])
    progress_path = Path(config["progress"])
    rng = random.Random(config["launch_seed"])
    policy = config["policy"]

    phase("recover")
    sink = DeltaSink(target, APP_ID, merge_spec(mode))
    sink.recover()
    progress = read_progress(progress_path)
    phase("ready", progress)
    piled, pile_limit = 0, rng.randint(1, 5)
    for version in range(progress + 1, batches):
        batch = source_batch(trial_seed, version, mode)
        if policy == "write":
            phase("write", version)
            sink.write(batch, version)
            phase("progress", version)
            write_progress(progress_path, version)
        else:
            phase("pre_commit", version)
            sink.pre_commit(batch, version)
            phase("progress", version)  # only after pre_commit returned
            write_progress(progress_path, version)
            if policy == "every":
                phase("commit", version)
                sink.commit(version)
            elif policy == "delayed":
                if version > 0:
                    phase("commit", version - 1)
                    sink.commit(version - 1)
            else:
                piled += 1
                if piled >= pile_limit:
                    phase("commit", version)
                    sink.commit(version)
                    piled, pile_limit = 0, rng.randint(1, 5)
        if rng.random() < GC_PROBABILITY:
            phase("gc")
            sink.gc(retention=0)
    phase("end_commit", batches - 1)
    sink.commit(batches - 1)  # end of input
    phase("done")
    return 0


# -- reading and checking the tables (parent) ------------------------------------------


@dataclass(frozen=True)
class Observed:
    """What the logs hold at one moment.

    Attributes:
        marker: The target's ``txn`` version for the app, or ``None``.
        ledger: Batch version -> number of target commits that applied it.
        rows: Every target row.
        staged: Versions present in the staging snapshot.
        progress: The last version the job acknowledged to its source (-1: none).
    """

    marker: int | None
    ledger: dict[int, int]
    rows: list[dict[str, Any]]
    staged: frozenset[int]
    progress: int


def txn_ledger(target: Path, app_id: str = APP_ID) -> dict[int, int]:
    """Batch version -> how many target commits applied it, from the raw JSON log
    (a coalesced commit lists its versions in ``commitInfo``)."""
    counts: Counter[int] = Counter()
    for path in sorted((target / "_delta_log").glob("*.json")):
        lines = path.read_text().splitlines()
        actions: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
        txns = [a["txn"] for a in actions if "txn" in a and a["txn"]["appId"] == app_id]
        if not txns:
            continue
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        versions = info.get("deltasink.versions") or [txns[0]["version"]]
        counts.update(int(v) for v in versions)
    return dict(counts)


def observe(target: Path, staging: Path, progress: Path) -> Observed:
    """Read the target and staging logs and the source progress."""
    from deltalake import DeltaTable

    marker, rows, staged = None, [], frozenset[int]()
    if DeltaTable.is_deltatable(str(target)):
        table = DeltaTable(str(target))
        marker = table.transaction_version(APP_ID)
        rows = table.to_pyarrow_table().to_pylist()
    if DeltaTable.is_deltatable(str(staging)):
        actions = pa.table(DeltaTable(str(staging)).get_add_actions(flatten=True))
        if actions.num_rows:
            column = actions.column("partition._deltasink_version").to_pylist()
            staged = frozenset(int(v) for v in column if v is not None)
    return Observed(marker, txn_ledger(target), rows, staged, read_progress(progress))


@dataclass(frozen=True)
class Verdict:
    """The result of :func:`check`."""

    lost: tuple[int, ...]
    duplicated: tuple[int, ...]
    violations: tuple[str, ...]


def check(obs: Observed, *, trial_seed: int, mode: str, final_version: int | None) -> Verdict:
    """Check ``obs`` against the source.

    Args:
        obs: The observed state.
        trial_seed: The source's seed.
        mode: ``append`` or ``upsert``.
        final_version: The last version of the job when checking the end state, or
            ``None`` for the state a crash left.
    """
    top = -1 if obs.marker is None else obs.marker
    lost: set[int] = set()
    duplicated: set[int] = {v for v, n in obs.ledger.items() if n > 1}
    violations: list[str] = []
    seen: Counter[tuple[int, int]] = Counter()
    payloads: dict[tuple[int, int], str] = {}
    latest: list[int] = []
    for row in obs.rows:
        if row["row"] < 0:
            latest.append(row["version"])
            continue
        key = (row["version"], row["row"])
        seen[key] += 1
        payloads[key] = row["payload"]
    duplicated |= {v for (v, _), n in seen.items() if n > 1}
    last = max([top, obs.progress, *obs.ledger, *(v for v, _ in seen)])
    newest_nonempty = -1
    for version in range(last + 1):
        expected = {
            (r["version"], r["row"]): r["payload"]
            for r in source_rows(trial_seed, version, mode)
            if r["row"] >= 0
        }
        present = {k: payloads[k] for k in seen if k[0] == version}
        if version <= top:
            if expected:
                newest_nonempty = version
            if obs.ledger.get(version, 0) == 0 or present != expected:
                lost.add(version)
        elif present:
            violations.append(f"rows of version {version} are visible above the marker {top}")
        elif version in obs.ledger:
            violations.append(f"version {version} was applied above the marker {top}")
        if version <= obs.progress and version > top and version not in obs.staged:
            lost.add(version)  # acknowledged to the source, but neither committed nor staged
    if mode == "upsert":
        want = [newest_nonempty] if newest_nonempty >= 0 else []
        latest.sort()
        if latest != want:
            violations.append(f"the latest row holds versions {latest}, expected {want}")
    if final_version is not None:
        if obs.marker != final_version:
            violations.append(f"the marker is {obs.marker}, expected {final_version}")
        if obs.progress != final_version:
            violations.append(f"source progress is {obs.progress}, expected {final_version}")
        leftovers = sorted(v for v in obs.staged if v <= top)
        if leftovers:
            violations.append(f"staging still holds committed versions {leftovers}")
    return Verdict(tuple(sorted(lost)), tuple(sorted(duplicated)), tuple(violations))


# -- the parent: one trial ---------------------------------------------------------------


class PhaseReader(threading.Thread):
    """Reads the writer's ``<phase> <version>`` lines as they come."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[tuple[float, str]] = []
        self.started = threading.Event()  # the writer began its recovery
        self.ready = threading.Event()  # the writer finished its recovery

    def run(self) -> None:
        for line in self.stream:
            self.lines.append((time.monotonic(), line.strip()))
            if line.startswith("recover"):
                self.started.set()
            elif line.startswith("ready"):
                self.ready.set()

    @property
    def last_phase(self) -> str:
        return self.lines[-1][1].split()[0] if self.lines else "startup"

    def batch_times(self) -> list[float]:
        return [t for t, line in self.lines if line.split()[0] in ("pre_commit", "write")]


@dataclass
class KillPlan:
    """How one start of the writer is ended: ``timer`` (SIGKILL a random delay after
    its recovery), ``recover`` (SIGKILL a random delay into its recovery) or ``fault``
    (``os._exit`` at the ``nth`` pass of a fault point)."""

    kind: str
    delay: float = 0.0
    point: str = ""
    nth: int = 1


@dataclass
class TrialResult:
    """What one trial saw."""

    trial: int
    mode: str
    batches: int
    kills: list[tuple[str, str]] = field(default_factory=list)  # (kind, phase)
    missed: int = 0
    launches: int = 0
    policies: list[str] = field(default_factory=list)
    lost: tuple[int, ...] = ()
    duplicated: tuple[int, ...] = ()
    violations: list[str] = field(default_factory=list)
    violations_by_phase: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.violations or self.errors)


class Trial:
    """One job against one fresh target, killed and restarted."""

    def __init__(
        self,
        root: Path,
        seed: int,
        trial: int,
        *,
        min_batches: int,
        max_batches: int,
        max_kills: int,
    ):
        self.rng = random.Random(f"soak/{seed}/{trial}")
        self.trial_seed = self.rng.randrange(2**31)
        self.dir = root / f"trial-{trial:04d}"
        self.dir.mkdir(parents=True)
        self.target = self.dir / "target"
        self.staging = Path(f"{self.target}_deltasink_staging") / APP_ID
        self.progress = self.dir / "progress"
        mode = self.rng.choices(MODES, weights=(2, 1))[0]
        batches = self.rng.randint(min_batches, max_batches)
        self.result = TrialResult(trial=trial, mode=mode, batches=batches)
        self.kills = self.rng.randint(1, max_kills)
        self.batch_s = 0.03  # seconds per batch, refined from what the writer reports

    def plan(self) -> KillPlan:
        kind = self.rng.choices(("timer", "fault", "recover"), weights=(5, 3, 1))[0]
        if kind == "fault":
            return KillPlan("fault", point=self.rng.choice(POINTS), nth=self.rng.randint(1, 3))
        if kind == "recover":
            return KillPlan("recover", delay=self.rng.uniform(0, 0.3))
        remaining = self.result.batches - read_progress(self.progress)
        return KillPlan("timer", delay=self.rng.uniform(0, max(1, remaining) * self.batch_s * 1.2))

    def run(self) -> TrialResult:
        start = time.monotonic()
        try:
            self._run()
        except Exception as exc:  # the harness itself must never hide a failure
            self.result.errors.append(f"harness error: {type(exc).__name__}: {exc}")
        self.result.seconds = time.monotonic() - start
        return self.result

    def _run(self) -> None:
        for _ in range(self.kills):
            outcome = self.launch(self.plan())
            if outcome == "done":
                break
            if outcome == "error":
                self.check_after_error()
                return
        else:
            if self.launch(None) != "done":
                self.check_after_error()
                return
        self.final_check()

    def check_after_error(self) -> None:
        """The job cannot go on: still count what is lost or duplicated so far."""
        verdict = self.observe_and_check(None)
        self.result.lost, self.result.duplicated = verdict.lost, verdict.duplicated
        self.result.violations.extend(verdict.violations)

    def launch(self, plan: KillPlan | None) -> str:
        """Start the writer once; ``done``, ``killed``, ``missed`` or ``error``."""
        result = self.result
        result.launches += 1
        policy = self.rng.choice(POLICIES)
        result.policies.append(policy)
        config = {
            "target": str(self.target),
            "mode": result.mode,
            "batches": result.batches,
            "trial_seed": self.trial_seed,
            "progress": str(self.progress),
            "launch_seed": self.rng.randrange(2**31),
            "policy": policy,
        }
        env = {k: v for k, v in os.environ.items() if k != "DELTASINK_FAULTS"}
        if plan is not None and plan.kind == "fault":
            env["DELTASINK_FAULTS"] = f"{plan.point}=exit@{plan.nth}"
        stderr_path = self.dir / f"launch-{result.launches}.stderr"
        with stderr_path.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, str(SCRIPT), "--writer", json.dumps(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=env,
                text=True,
            )
            assert proc.stdout is not None
            reader = PhaseReader(proc.stdout)
            reader.start()
            killed = self._wait(proc, reader, plan)
            reader.join()
            proc.stdout.close()
        times = reader.batch_times()
        if len(times) >= 2:
            measured = (times[-1] - times[0]) / (len(times) - 1)
            self.batch_s = 0.5 * self.batch_s + 0.5 * measured
        rc = proc.returncode
        phase = reader.last_phase
        if rc == 0 and not killed:
            if plan is not None and plan.kind == "fault":
                result.missed += 1  # the fault point was not reached
            return "done" if phase == "done" else self._error(rc, stderr_path, "exited early")
        if killed:
            assert plan is not None
            result.kills.append((plan.kind, phase))
        elif rc == EXIT_CODE and plan is not None and plan.kind == "fault":
            phase = f"fault:{plan.point}"
            result.kills.append(("fault", phase))
        else:
            return self._error(rc, stderr_path, f"failed in phase {phase}")
        verdict = self.observe_and_check(None)
        for problem in (*verdict.violations, *self._describe(verdict)):
            result.violations.append(f"after a kill in {phase}: {problem}")
            result.violations_by_phase[phase] += 1
        return "killed"

    def _wait(
        self, proc: subprocess.Popen[str], reader: PhaseReader, plan: KillPlan | None
    ) -> bool:
        """Wait for the writer to end, killing it as planned; whether we killed it."""
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        try:
            if plan is None or plan.kind == "fault":
                proc.wait(timeout=LAUNCH_TIMEOUT_S)
                return False
            event = reader.ready if plan.kind == "timer" else reader.started
            while not event.wait(0.005):
                if proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(proc.args, LAUNCH_TIMEOUT_S)
            try:
                proc.wait(timeout=plan.delay)
            except subprocess.TimeoutExpired:
                proc.kill()  # SIGKILL, this child only
                proc.wait(timeout=LAUNCH_TIMEOUT_S)
                return True
            self.result.missed += 1  # it finished before the kill
            return False
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.result.errors.append(f"writer hung for {LAUNCH_TIMEOUT_S} s; killed")
            return False

    def _error(self, rc: int | None, stderr_path: Path, what: str) -> str:
        tail = stderr_path.read_text().strip().splitlines()[-6:]
        self.result.errors.append(f"writer {what} (exit code {rc}): " + " | ".join(tail))
        return "error"

    @staticmethod
    def _describe(verdict: Verdict) -> list[str]:
        problems = []
        if verdict.lost:
            problems.append(f"versions {list(verdict.lost)} lost")
        if verdict.duplicated:
            problems.append(f"versions {list(verdict.duplicated)} duplicated")
        return problems

    def observe_and_check(self, final_version: int | None) -> Verdict:
        obs = observe(self.target, self.staging, self.progress)
        return check(
            obs, trial_seed=self.trial_seed, mode=self.result.mode, final_version=final_version
        )

    def final_check(self) -> None:
        from deltasink import DeltaSink

        result = self.result
        report = DeltaSink(str(self.target), APP_ID, merge_spec(result.mode)).recover()
        if report.results:
            result.violations.append(
                f"a final recover() committed {report.committed_versions} after the job ended"
            )
        verdict = self.observe_and_check(result.batches - 1)
        result.lost, result.duplicated = verdict.lost, verdict.duplicated
        result.violations.extend(verdict.violations)


# -- the run and its summary --------------------------------------------------------------


@dataclass
class Summary:
    """Totals over all trials."""

    seed: int
    trials: list[TrialResult]
    wall_s: float
    workdir: str

    @property
    def kills(self) -> int:
        return sum(len(t.kills) for t in self.trials)

    @property
    def lost(self) -> int:
        return sum(len(t.lost) for t in self.trials)

    @property
    def duplicated(self) -> int:
        return sum(len(t.duplicated) for t in self.trials)

    @property
    def violations(self) -> list[str]:
        return [f"trial {t.trial}: {v}" for t in self.trials for v in t.violations]

    @property
    def errors(self) -> list[str]:
        return [f"trial {t.trial}: {e}" for t in self.trials for e in t.errors]

    @property
    def batches(self) -> int:
        return sum(t.batches for t in self.trials)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.trials)

    def kills_by(self, index: int) -> Counter[str]:
        return Counter(kill[index] for t in self.trials for kill in t.kills)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "seed": self.seed,
            "trials": len(self.trials),
            "kills": self.kills,
            "kills_by_kind": dict(self.kills_by(0)),
            "kills_by_phase": dict(self.kills_by(1)),
            "restarts": sum(t.launches for t in self.trials) - len(self.trials),
            "batches": self.batches,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "violations": self.violations,
            "errors": self.errors,
            "wall_s": round(self.wall_s, 1),
            "ok": self.ok,
        }

    def render(self) -> str:
        """The printed report."""
        kinds = self.kills_by(0)
        phases = self.kills_by(1)
        bad_phases: Counter[str] = Counter()
        for t in self.trials:
            bad_phases.update(t.violations_by_phase)
        modes = Counter(t.mode for t in self.trials)
        policies = Counter(p for t in self.trials for p in t.policies)
        lines = [
            f"deltasink soak: seed {self.seed}, {len(self.trials)} trials, "
            f"{min(t.batches for t in self.trials)}-{max(t.batches for t in self.trials)} "
            "batches per trial",
            "",
            f"  trials               {len(self.trials):>6}",
            f"  kills                {self.kills:>6}   ("
            + ", ".join(f"{k} {kinds[k]}" for k in ("timer", "fault", "recover"))
            + ")",
            f"  restarts             {sum(t.launches for t in self.trials) - len(self.trials):>6}",
            f"  kills that missed    {sum(t.missed for t in self.trials):>6}   "
            "(the writer finished first)",
            f"  batches checked      {self.batches:>6}",
            f"  lost batches         {self.lost:>6}",
            f"  duplicated batches   {self.duplicated:>6}",
            f"  other violations     {len(self.violations):>6}",
            f"  writer errors        {len(self.errors):>6}",
            f"  wall time            {self.wall_s:>8.1f} s",
            "",
            "  kills by phase                      kills  violations",
        ]
        order = [*("startup", "recover", "ready", "pre_commit", "progress", "commit")]
        order += ["write", "gc", "end_commit", "done"]
        order += sorted(p for p in phases if p not in order)
        for phase in order:
            if phases[phase]:
                lines.append(f"    {phase:<32} {phases[phase]:>6}  {bad_phases[phase]:>10}")
        lines += [
            "",
            "  targets: " + ", ".join(f"{m} {modes[m]}" for m in MODES),
            "  commit policy per start: " + ", ".join(f"{p} {policies[p]}" for p in POLICIES),
        ]
        problems = self.violations + self.errors
        problems += [
            f"trial {t.trial}: lost {list(t.lost)}, duplicated {list(t.duplicated)}"
            for t in self.trials
            if t.lost or t.duplicated
        ]
        if problems:
            lines += ["", f"  PROBLEMS (tables kept in {self.workdir}):"]
            lines += [f"    {p}" for p in problems[:50]]
        lines += ["", "  result: " + ("OK" if self.ok else "FAILED")]
        return "\n".join(lines)


def run_soak(
    *,
    trials: int,
    seed: int,
    min_batches: int = 6,
    max_batches: int = 12,
    max_kills: int = 3,
    workdir: Path | None = None,
    keep: bool = False,
    progress: IO[str] | None = None,
) -> Summary:
    """Run ``trials`` trials and return the summary (tables of failed trials are kept)."""
    root = Path(tempfile.mkdtemp(prefix="deltasink-soak-", dir=workdir))
    start = time.monotonic()
    results = []
    for trial in range(trials):
        result = Trial(
            root, seed, trial, min_batches=min_batches, max_batches=max_batches, max_kills=max_kills
        ).run()
        results.append(result)
        if result.ok and not keep:
            shutil.rmtree(root / f"trial-{trial:04d}", ignore_errors=True)
        if progress is not None:
            mark = "." if result.ok else "F"
            end = "\n" if (trial + 1) % 50 == 0 or trial + 1 == trials else ""
            progress.write(mark + end)
            progress.flush()
    summary = Summary(seed, results, time.monotonic() - start, str(root))
    if summary.ok and not keep:
        shutil.rmtree(root, ignore_errors=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL a deltasink writer at random moments; check no loss, no duplicate."
    )
    parser.add_argument("--trials", type=int, default=200, help="number of trials (default 200)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--min-batches", type=int, default=6, help="batches per trial, at least")
    parser.add_argument("--max-batches", type=int, default=12, help="batches per trial, at most")
    parser.add_argument("--max-kills", type=int, default=3, help="kills per trial, at most")
    parser.add_argument("--workdir", type=Path, default=None, help="where trial tables go")
    parser.add_argument("--keep", action="store_true", help="keep every trial's tables")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument("--writer", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    if args.writer:
        return writer(json.loads(args.writer))
    if args.trials < 1 or args.max_kills < 1 or not 1 <= args.min_batches <= args.max_batches:
        parser.error("need --trials ≥ 1, --max-kills ≥ 1 and 1 ≤ --min-batches ≤ --max-batches")
    summary = run_soak(
        trials=args.trials,
        seed=args.seed,
        min_batches=args.min_batches,
        max_batches=args.max_batches,
        max_kills=args.max_kills,
        workdir=args.workdir,
        keep=args.keep,
        progress=sys.stderr,
    )
    print(summary.render())
    if args.json:
        args.json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
