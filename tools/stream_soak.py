#!/usr/bin/env python
"""Streaming soak on the cluster path: a classic PySpark ``foreachBatch`` job killed
with SIGKILL at random instants, restarted from its checkpoint, checked for loss and
duplicates after every kill.

    python tools/stream_soak.py --kills 50 --seed 1            # spark engine, delta-spark
    python tools/stream_soak.py --kills 10 --engine embedded   # delta-rs makes the commits

Each trial is a fresh target and a fresh input of ``--files`` JSON files of three rows
each (ids unique; ``value`` holds the file's number, a counter that says which batch a
row came from). The job is ``tests/jvm/stream_job.py``: ``readStream.json`` with
``maxFilesPerTrigger=1``, its own checkpoint, ``foreachBatch(sink.foreach_batch)``
into an ``append`` target, so a batch applied twice shows as repeated ids. With
``--engine spark`` (the default) the session loads Delta's jars (``DELTASINK_DELTA_JARS``,
else ``../shared/delta-spark``, ``../shared/delta-spark-3.5`` under PySpark 3.5) and
delta-spark makes every commit.

Every start of the job is killed (its whole process group, the JVM included) at one
instant chosen at random, up to ``--max-kills`` times per trial; then a last start runs
to the end of the input. The instants:

* ``timer``: a random delay after the job's ``recover()``;
* ``in-batch``: 0-1.5 s after ``foreachBatch`` was entered for the n-th batch: Spark has
  written that batch's offsets, the sink has not returned (often inside the sink);
* ``sink-done``: as soon as ``foreach_batch`` returned for the n-th batch: the sink has
  committed, Spark has not yet written its commit log, so the batch will be replayed;
* ``fault``: ``os._exit`` at a deltasink fault point (``DELTASINK_FAULTS``) on its n-th
  pass, inside the sink.

Checks, read from the Delta log with delta-rs and the raw JSON log (never through the
sink), with ``m`` the target's ``txn`` marker for the app and the input files of each
micro-batch taken from the query's own checkpoint (Spark decides them: a batch
replanned after a kill may read two files):

* after each kill: the target holds exactly the rows of micro-batches ``0..m``, each
  once, and every version ``0..m`` was applied by exactly one target commit; none above;
* at the end: ``m`` is Spark's last micro-batch, every input file was read, every row
  is in the target once, and the staging table holds no version any more.

With ``--reset`` (issue 24), each trial also loses its checkpoint: after the killed
starts (at least one version committed), the checkpoint is deleted and the job started
again on the same input: its first batch must be refused (``CheckpointResetError``, exit
3) with the target unchanged. Then the files ``sink.offsets()`` lists as committed are
moved out of the input, and a new checkpoint resumes (``resume=True``), killed at random
instants too, then run to the end. At the end every row of every input file must be in
the target exactly once, each version applied by exactly one target commit, versions
``0..m`` without a gap, and staging empty.

Prints a summary and exits 1 if anything was lost, duplicated or inconsistent.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shutil
import signal
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

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: ``tools`` is a package of the repo
    sys.path.insert(0, str(ROOT))

from deltasink._faults import EXIT_CODE, POINTS  # noqa: E402
from tools.soak import txn_ledger  # noqa: E402

__all__ = ["Kill", "StreamTrial", "Summary", "check", "main", "run_soak", "write_input"]

JOB = ROOT / "tests" / "jvm" / "stream_job.py"
APP_ID = "stream-soak"
ROWS_PER_FILE = 3
KINDS = ("timer", "in-batch", "sink-done", "fault")
#: How long one start of the job may take before it counts as hung.
START_TIMEOUT_S = 300.0
#: The job sleeps this long after each batch, so that a ``sink-done`` kill lands
#: before Spark writes its commit log.
JOB_DELAY_S = 0.3


def write_input(directory: Path, files: int) -> None:
    """``files`` JSON files, oldest first, ``ROWS_PER_FILE`` rows each."""
    directory.mkdir(parents=True)
    for number in range(files):
        rows = [{"id": number * 100 + r, "value": str(number)} for r in range(ROWS_PER_FILE)]
        path = directory / f"part-{number:04d}.json"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        stamp = 1_700_000_000 + number  # the file source takes the oldest file first
        os.utime(path, (stamp, stamp))


def file_ids(number: int) -> list[int]:
    """The ids of input file ``number``."""
    return [number * 100 + r for r in range(ROWS_PER_FILE)]


def spark_batches(checkpoint: Path) -> dict[int, list[int]]:
    """Micro-batch id -> the input files it read, from the query's own checkpoint
    (``offsets/<batch>`` names the file-source log offset a batch ends at; the source
    log names the files of each offset). Spark decides this, not deltasink: after a
    kill, a replanned batch may read more than one file despite ``maxFilesPerTrigger``.
    """
    log: dict[int, list[int]] = {}
    sources = checkpoint / "sources" / "0"
    for path in sorted(sources.glob("[0-9]*")) if sources.is_dir() else []:
        for line in path.read_text().splitlines()[1:]:
            entry = json.loads(line)
            number = int(entry["path"].rsplit("part-", 1)[1].split(".")[0])
            log.setdefault(int(entry["batchId"]), []).append(number)
    ends: dict[int, int] = {}
    offsets = checkpoint / "offsets"
    for path in offsets.glob("[0-9]*") if offsets.is_dir() else []:
        lines = path.read_text().splitlines()
        if len(lines) >= 3:  # a half-written offset file is Spark's to redo
            ends[int(path.name)] = int(json.loads(lines[2])["logOffset"])
    batches, start = {}, -1
    for batch in sorted(ends):
        batches[batch] = sorted(
            n for k in range(start + 1, ends[batch] + 1) for n in log.get(k, [])
        )
        start = ends[batch]
    return batches


@dataclass(frozen=True)
class Kill:
    """When one start of the job is killed."""

    kind: str
    nth: int = 0  # the n-th batch of this start (in-batch, sink-done), or pass (fault)
    delay_s: float = 0.0  # timer: after recover(); in-batch: after the batch began
    point: str = ""  # fault: the fault point

    @classmethod
    def parse(cls, text: str) -> Kill:
        """``timer:SECONDS``, ``in-batch:N[+SECONDS]``, ``sink-done:N`` or
        ``fault:POINT@N`` (the form :meth:`describe` prints, for ``--plan``)."""
        kind, _, arg = text.strip().partition(":")
        try:
            if kind == "timer":
                return cls(kind, delay_s=float(arg))
            if kind in ("in-batch", "sink-done"):
                nth, _, delay = arg.partition("+")
                return cls(kind, nth=int(nth), delay_s=float(delay or 0))
            if kind == "fault":
                point, _, nth = arg.partition("@")
                if point in POINTS:
                    return cls(kind, nth=int(nth or 1), point=point)
        except ValueError:
            pass
        raise ValueError(
            f"not a kill: {text!r} (timer:S, in-batch:N[+S], sink-done:N, fault:POINT@N)"
        )

    def describe(self) -> str:
        if self.kind == "fault":
            return f"fault:{self.point}@{self.nth}"
        if self.kind == "timer":
            return f"timer:{self.delay_s:.1f}"
        return f"{self.kind}:{self.nth}" + (f"+{self.delay_s:.2f}" if self.delay_s else "")


def plan_kill(rng: random.Random, remaining: int, batch_s: float) -> Kill:
    """A random kill for a start that has ``remaining`` files ahead of it."""
    kind = rng.choice(KINDS)
    nth = rng.randint(1, max(1, min(remaining, 4)))
    if kind == "timer":
        return Kill(kind, delay_s=rng.uniform(0.0, batch_s * max(1, min(remaining, 4))))
    if kind == "in-batch":
        return Kill(kind, nth=nth, delay_s=rng.uniform(0.0, 1.5))
    if kind == "fault":
        return Kill(kind, nth=rng.randint(1, 2), point=rng.choice(POINTS))
    return Kill(kind, nth=nth)


@dataclass
class Observed:
    marker: int | None
    ledger: dict[int, int]
    ids: list[int]
    staged: list[int]


def observe(target: Path, staging: Path) -> Observed:
    """The target's marker, commits and ids, and the versions staging holds."""
    import pyarrow as pa
    from deltalake import DeltaTable

    marker: int | None = None
    ids: list[int] = []
    staged: list[int] = []
    if DeltaTable.is_deltatable(str(target)):
        table = DeltaTable(str(target))
        marker = table.transaction_version(APP_ID)
        column = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
        ids = sorted(int(i) for i in column if i is not None)
    if DeltaTable.is_deltatable(str(staging)):
        actions = pa.table(DeltaTable(str(staging)).get_add_actions(flatten=True))
        if actions.num_rows and "partition._deltasink_version" in actions.column_names:
            column = actions.column("partition._deltasink_version").to_pylist()
            staged = sorted({int(v) for v in column if v is not None})
    ledger = txn_ledger(target, APP_ID) if (target / "_delta_log").is_dir() else {}
    return Observed(marker, ledger, ids, staged)


def check(
    obs: Observed, batches: dict[int, list[int]], *, files: int, final: bool
) -> tuple[set[int], set[int], list[str]]:
    """(lost versions, duplicated versions, other violations) of ``obs``, given the
    input files of each micro-batch (:func:`spark_batches`)."""
    top = -1 if obs.marker is None else obs.marker
    batch_of = {n: b for b, numbers in batches.items() for n in numbers}
    counts = Counter(obs.ids)
    duplicated = {v for v, n in obs.ledger.items() if n > 1}
    duplicated |= {batch_of.get(i // 100, -1) for i, n in counts.items() if n > 1}
    lost = set()
    violations = []
    for version in range(top + 1):
        if version not in batches:
            violations.append(f"version {version} is committed but Spark never planned it")
            continue
        wanted = [i for n in batches[version] for i in file_ids(n)]
        if obs.ledger.get(version, 0) == 0 or any(i not in counts for i in wanted):
            lost.add(version)
    above = sorted(
        {batch_of.get(i // 100, -1) for i in counts if batch_of.get(i // 100, -1) > top}
        | {v for v in obs.ledger if v > top}
        | ({-1} if any(i // 100 not in batch_of for i in counts) else set())
    )
    if above:
        violations.append(f"versions {above} are visible above the marker {top}")
    if final:
        last = max(batches, default=-1)
        if obs.marker != last:
            violations.append(f"the marker is {obs.marker}, Spark's last batch {last}")
        unread = sorted(set(range(files)) - set(batch_of))
        if unread:
            violations.append(f"Spark never read files {unread}")
        if obs.staged:
            violations.append(f"staging still holds versions {obs.staged}")
    return lost, duplicated, violations


class EventReader(threading.Thread):
    """Queues the job's JSON event lines with the time they arrived."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.events: queue.Queue[tuple[float, dict[str, Any]] | None] = queue.Queue()

    def run(self) -> None:
        for line in self.stream:
            if line.startswith('{"event"'):
                self.events.put((time.monotonic(), json.loads(line)))
        self.events.put(None)


@dataclass
class StreamTrial:
    """One target and input: killed starts, then a start that runs to the end."""

    root: Path
    trial: int
    seed: int
    files: int
    max_kills: int
    engine: str
    env: dict[str, str]
    batch_s: float = 3.0  # a running estimate of one micro-batch's duration
    plan: tuple[Kill, ...] | None = None  # fixed kills instead of random ones
    kills: list[tuple[str, str]] = field(default_factory=list)  # (kind, where it landed)
    missed: int = 0
    lost: set[int] = field(default_factory=set)
    duplicated: set[int] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    batches_run: int = 0
    multi_file: int = 0  # micro-batches Spark planned with more than one file
    reset: bool = False  # lose the checkpoint mid-trial, then resume (issue 24)
    refused: int = 0  # starts after a reset whose first batch was refused, as it must be
    resumed_versions: int = 0  # versions the resumed query committed

    @property
    def dir(self) -> Path:
        return self.root / f"trial-{self.trial:04d}"

    @property
    def target(self) -> Path:
        return self.dir / "lake" / "events"

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.violations or self.errors)

    def run(self) -> StreamTrial:
        if self.reset:
            return self.run_reset()
        from deltasink.locations import default_staging

        rng = random.Random(f"{self.seed}/{self.trial}")
        write_input(self.dir / "input", self.files)
        staging = Path(default_staging(str(self.target), APP_ID))
        planned = len(self.plan) if self.plan is not None else rng.randint(1, self.max_kills)
        for number in range(planned):
            done = observe(self.target, staging).marker
            remaining = self.files - 1 - (-1 if done is None else done)
            if self.plan is not None:
                kill = self.plan[number]
            else:
                kill = plan_kill(rng, remaining, self.batch_s)
            outcome = self.start(kill)
            if outcome == "finished":
                self.missed += 1
                break
            if outcome != "killed":
                return self
            self.record(observe(self.target, staging), final=False)
        if self.start(None) != "finished":
            return self
        self.record(observe(self.target, staging), final=True)
        return self

    def run_reset(self) -> StreamTrial:
        """Killed starts, a lost checkpoint (refused), a resumed checkpoint (killed
        too), then a start to the end; checked on rows and commits (see the module
        docstring)."""
        from deltasink import DeltaSink
        from deltasink.locations import default_staging

        rng = random.Random(f"{self.seed}/{self.trial}/reset")
        source, checkpoint = self.dir / "input", self.dir / "checkpoint"
        write_input(source, self.files)
        staging = Path(default_staging(str(self.target), APP_ID))
        # Phase 1: the first query, killed 1..max_kills times, with a version committed.
        for number in range(rng.randint(1, self.max_kills)):
            kill = plan_kill(rng, self.files - 1, self.batch_s)
            if number == 0 and kill.kind == "timer":
                kill = Kill("sink-done", nth=rng.randint(1, 2))
            outcome = self.start(kill)
            if outcome == "error":
                return self
        if observe(self.target, staging).marker is None and (
            self.start(Kill("sink-done", nth=1)) == "error"
        ):
            return self
        before = observe(self.target, staging)
        if before.marker is None:
            self.errors.append("phase 1 committed nothing: nothing to reset")
            return self
        if before.marker >= self.files - 1:  # the first query read everything: more input
            self.missed += 1
            for number in range(self.files, self.files + 2):
                rows = [{"id": i, "value": str(number)} for i in file_ids(number)]
                path = source / f"part-{number:04d}.json"
                path.write_text("".join(json.dumps(row) + "\n" for row in rows))
                stamp = 1_700_000_000 + number
                os.utime(path, (stamp, stamp))
            self.files += 2
        # The checkpoint is lost; the job starts again on the same input.
        shutil.rmtree(checkpoint, ignore_errors=True)
        outcome = self.start(None, expect_refusal=True)
        after = observe(self.target, staging)
        if outcome != "refused":
            self.errors.append(f"the start after the reset was not refused ({outcome})")
            return self
        self.refused += 1
        if (after.marker, after.ledger, after.ids) != (before.marker, before.ledger, before.ids):
            self.violations.append("the refused start changed the target")
        # Resume: the committed files leave the input, a new checkpoint continues.
        point = DeltaSink(str(self.target), APP_ID).offsets()
        if not point.exact:
            self.violations.append("offsets are behind the committed version")
        held = [f for s in point.starting if s["kind"] == "files" for f in s["files"]]
        archive = self.dir / "archive"
        archive.mkdir()
        for uri in held:
            name = Path(uri.removeprefix("file://")).name
            if (source / name).exists():
                (source / name).rename(archive / name)
        shutil.rmtree(checkpoint, ignore_errors=True)  # the refused query planned batch 0
        resume = {"DELTASINK_STREAM_RESUME": "1"}
        for _ in range(rng.randint(0, self.max_kills)):
            remaining = len(list(source.glob("part-*.json")))
            outcome = self.start(plan_kill(rng, remaining, self.batch_s), extra=resume)
            if outcome == "finished":
                self.missed += 1
                break
            if outcome != "killed":
                return self
        if self.start(None, extra=resume) != "finished":
            return self
        final = observe(self.target, staging)
        self.resumed_versions = (final.marker or 0) - before.marker
        self.check_rows(final)
        return self

    def check_rows(self, obs: Observed) -> None:
        """Every input row once, every version once and without gaps, staging empty."""
        counts = Counter(obs.ids)
        wanted = {i for n in range(self.files) for i in file_ids(n)}
        lost_files = {i // 100 for i in wanted if i not in counts}
        self.lost |= lost_files
        self.duplicated |= {i // 100 for i, n in counts.items() if n > 1}
        self.duplicated |= {v for v, n in obs.ledger.items() if n > 1}
        extra = sorted(set(counts) - wanted)
        if extra:
            self.violations.append(f"rows that are no input: {extra[:5]}")
        top = -1 if obs.marker is None else obs.marker
        if sorted(obs.ledger) != list(range(top + 1)):
            self.violations.append(f"versions {sorted(obs.ledger)} are not 0..{top}")
        if obs.staged:
            self.violations.append(f"staging still holds versions {obs.staged}")

    def record(self, obs: Observed, *, final: bool) -> None:
        batches = spark_batches(self.dir / "checkpoint")
        self.multi_file += sum(1 for b in batches.values() if len(b) > 1) if final else 0
        lost, duplicated, violations = check(obs, batches, files=self.files, final=final)
        self.lost |= lost
        self.duplicated |= duplicated
        when = "at the end" if final else f"after kill {len(self.kills)} ({self.kills[-1][1]})"
        self.violations += [f"{when}: {v}" for v in violations]

    def start(
        self,
        kill: Kill | None,
        *,
        extra: dict[str, str] | None = None,
        expect_refusal: bool = False,
    ) -> str:
        """Run the job once; ``killed``, ``finished``, ``refused`` (exit 3, with
        ``expect_refusal``) or ``error``."""
        env = {**self.env, **(extra or {})}
        if kill is not None and kill.kind == "fault":
            env["DELTASINK_FAULTS"] = f"{kill.point}=exit@{kill.nth}"
        command = [sys.executable, str(JOB), str(self.dir / "input"), str(self.dir / "checkpoint")]
        command += [str(self.target), APP_ID, str(JOB_DELAY_S)]
        stderr_path = self.dir / "stderr.log"
        with stderr_path.open("w") as stderr:
            job = subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # a killed soak leaves no job behind
            )
            assert job.stdout is not None
            reader = EventReader(job.stdout)
            reader.start()
            where, killed = self.follow(job, reader, kill)
            if killed:
                os.killpg(job.pid, signal.SIGKILL)
            rc = job.wait(timeout=60)
            reader.join(timeout=30)
        _reap(job.pid)
        if kill is not None and kill.kind == "fault" and rc == EXIT_CODE and not killed:
            killed, where = True, f"fault {kill.point}"
        if killed:
            assert kill is not None
            self.kills.append((kill.describe(), where))
            return "killed"
        if expect_refusal and rc == 3:
            return "refused"
        if rc != 0:
            tail = stderr_path.read_text()[-2000:]
            self.errors.append(f"a start ended with exit code {rc} ({where}): {tail}")
            return "error"
        return "finished"

    def follow(
        self, job: subprocess.Popen[str], reader: EventReader, kill: Kill | None
    ) -> tuple[str, bool]:
        """Read events until the kill is due (True) or the job ended (False)."""
        where, batches, began = "startup", 0, None
        recovered_at: float | None = None
        deadline = time.monotonic() + START_TIMEOUT_S
        due: float | None = None
        while True:
            timeout = max(0.0, min(deadline, due or deadline) - time.monotonic())
            try:
                item = reader.events.get(timeout=timeout)
            except queue.Empty:
                if due is not None and time.monotonic() >= due:
                    return where, True
                self.errors.append(
                    f"a start made no progress for {START_TIMEOUT_S:.0f} s ({where})"
                )
                return where, True
            if item is None:
                return where, False
            at, event = item
            name = event["event"]
            if name == "recovered":
                where, recovered_at = "running", at
                if kill is not None and kill.kind == "timer":
                    due = at + kill.delay_s
            elif name == "batch":
                batches += 1
                self.batches_run += 1
                where, began = "in the sink", at
                if kill is not None and kill.kind == "in-batch" and batches == kill.nth:
                    due = at + kill.delay_s
            elif name == "committed":
                if began is not None:
                    self.batch_s = 0.7 * self.batch_s + 0.3 * (at - began + JOB_DELAY_S)
                where = "sink committed, Spark's commit log not written"
                if kill is not None and kill.kind == "sink-done" and batches == kill.nth:
                    return where, True
            elif name == "done":
                where = "done"
            if recovered_at is None and name == "started":
                where = "recover"
            if due is not None and time.monotonic() >= due:
                return where, True


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """The job gets SIGKILL when the soak dies (Linux; its JVM exits with it, on the
    end of its stdin, as PySpark's gateway does)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _reap(pgid: int) -> None:
    """Make sure nothing of a start survives (a JVM whose driver died included)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@dataclass
class Summary:
    seed: int
    engine: str
    trials: list[StreamTrial]
    wall_s: float
    workdir: str

    @property
    def kills(self) -> int:
        return sum(len(t.kills) for t in self.trials)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.trials)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "engine": self.engine,
            "trials": len(self.trials),
            "kills": self.kills,
            "kills_by_kind": dict(
                Counter(k.split(":")[0] for t in self.trials for k, _ in t.kills)
            ),
            "kills_done": [k for t in self.trials for k, _ in t.kills],
            "kills_by_moment": dict(Counter(w for t in self.trials for _, w in t.kills)),
            "missed": sum(t.missed for t in self.trials),
            "batches_run": sum(t.batches_run for t in self.trials),
            "multi_file_batches": sum(t.multi_file for t in self.trials),
            "files_checked": sum(t.files for t in self.trials),
            "reset_trials": sum(1 for t in self.trials if t.reset),
            "refused_after_reset": sum(t.refused for t in self.trials),
            "resumed_versions": sum(t.resumed_versions for t in self.trials),
            "lost": sum(len(t.lost) for t in self.trials),
            "duplicated": sum(len(t.duplicated) for t in self.trials),
            "violations": [f"trial {t.trial}: {v}" for t in self.trials for v in t.violations],
            "errors": [f"trial {t.trial}: {e}" for t in self.trials for e in t.errors],
            "wall_s": round(self.wall_s, 1),
            "ok": self.ok,
        }

    def render(self) -> str:
        d = self.to_dict()
        lines = [
            f"deltasink streaming soak: engine {self.engine}, seed {self.seed}, "
            f"{d['trials']} trials",
            "",
            f"  kills                 {d['kills']:>6}   ("
            + ", ".join(f"{k} {d['kills_by_kind'].get(k, 0)}" for k in KINDS)
            + ")",
            f"  kills that missed     {d['missed']:>6}   (the job finished first)",
            f"  micro-batches run     {d['batches_run']:>6}   (replays included)",
            f"  input files checked   {d['files_checked']:>6}   "
            f"({d['multi_file_batches']} micro-batches read two or more after a kill)",
            *(
                [
                    f"  checkpoints lost      {d['reset_trials']:>6}   ("
                    f"{d['refused_after_reset']} refused, nothing written; "
                    f"{d['resumed_versions']} versions committed after resume)"
                ]
                if d["reset_trials"]
                else []
            ),
            f"  lost versions         {d['lost']:>6}",
            f"  duplicated versions   {d['duplicated']:>6}",
            f"  other violations      {len(d['violations']):>6}",
            f"  job errors            {len(d['errors']):>6}",
            f"  wall time             {self.wall_s:>8.1f} s",
            "",
            "  where the kills landed",
        ]
        for moment, n in sorted(d["kills_by_moment"].items(), key=lambda kv: -kv[1]):
            lines.append(f"    {moment:<52} {n:>4}")
        problems = d["violations"] + d["errors"]
        if problems:
            lines += ["", f"  PROBLEMS (tables kept in {self.workdir}):"]
            lines += [f"    {p[:400]}" for p in problems[:30]]
        lines += ["", "  result: " + ("OK" if self.ok else "FAILED")]
        return "\n".join(lines)


def shared_jar_folder() -> str:
    """The folder of ``../shared`` with Delta's jars for this interpreter's PySpark:
    ``delta-spark-3.5`` (Delta 3.3.3, Scala 2.12) under PySpark 3.5, else ``delta-spark``
    (Delta 4.4, Scala 2.13)."""
    from importlib.metadata import version

    return "delta-spark-3.5" if version("pyspark").startswith("3.5.") else "delta-spark"


def job_env(engine: str) -> dict[str, str]:
    """This environment for a classic PySpark job (no Spark Connect markers)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    }
    env.pop("DELTASINK_FAULTS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["DELTASINK_STREAM_ENGINE"] = engine
    if engine == "spark" and not env.get("DELTASINK_DELTA_JARS"):
        folder = ROOT.parent / "shared" / shared_jar_folder()
        jars = sorted(str(p) for p in folder.glob("*.jar"))
        if not jars:
            raise SystemExit(f"the spark engine needs DELTASINK_DELTA_JARS or {folder}")
        env["DELTASINK_DELTA_JARS"] = os.pathsep.join(jars)
    return env


def run_soak(
    *,
    kills: int,
    seed: int,
    engine: str = "spark",
    files: int = 6,
    max_kills: int = 3,
    max_trials: int = 1000,
    plan: tuple[Kill, ...] | None = None,
    workdir: Path | None = None,
    keep: bool = False,
    progress: IO[str] | None = None,
    reset: bool = False,
) -> Summary:
    """Run trials until ``kills`` kills landed (or ``max_trials`` trials ran); with
    ``plan``, one trial with exactly those kills; with ``reset``, trials that lose
    their checkpoint and resume (lost/duplicated then count input files)."""
    root = Path(tempfile.mkdtemp(prefix="deltasink-stream-soak-", dir=workdir))
    env = job_env(engine)
    began = time.monotonic()
    trials: list[StreamTrial] = []
    batch_s = 3.0
    if plan is not None:
        kills, max_trials = 1, 1
    while sum(len(t.kills) for t in trials) < kills and len(trials) < max_trials:
        trial = StreamTrial(
            root, len(trials), seed, files, max_kills, engine, env, batch_s, plan, reset=reset
        )
        trials.append(trial.run())
        batch_s = trial.batch_s
        if trial.ok and not keep:
            shutil.rmtree(trial.dir, ignore_errors=True)
        if progress is not None:
            progress.write(
                f"trial {trial.trial}: {'ok' if trial.ok else 'FAILED'}, kills "
                f"{[k for k, _ in trial.kills]} ({sum(len(t.kills) for t in trials)} in all, "
                f"{time.monotonic() - began:.0f} s)\n"
            )
            progress.flush()
    summary = Summary(seed, engine, trials, time.monotonic() - began, str(root))
    if summary.ok and not keep:
        shutil.rmtree(root, ignore_errors=True)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="SIGKILL a foreachBatch streaming job at random instants; check that "
        "every batch is applied exactly once."
    )
    parser.add_argument("--kills", type=int, default=50, help="kills to land, at least")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--engine", choices=("spark", "embedded"), default="spark")
    parser.add_argument("--files", type=int, default=6, help="micro-batches per trial")
    parser.add_argument("--max-kills", type=int, default=3, help="kills per trial, at most")
    parser.add_argument("--max-trials", type=int, default=1000, help="trials, at most")
    parser.add_argument(
        "--plan",
        help="one trial with these kills, comma-separated (timer:S, in-batch:N[+S], "
        "sink-done:N, fault:POINT@N)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where trial tables go")
    parser.add_argument("--keep", action="store_true", help="keep every trial's tables")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument(
        "--reset",
        action="store_true",
        help="trials lose their checkpoint mid-stream and resume (issue 24)",
    )
    args = parser.parse_args(argv)
    try:
        plan = tuple(Kill.parse(k) for k in args.plan.split(",")) if args.plan else None
    except ValueError as exc:
        parser.error(str(exc))
    if args.kills < 1 or args.max_kills < 1 or args.files < 2:
        parser.error("need --kills ≥ 1, --max-kills ≥ 1 and --files ≥ 2")
    summary = run_soak(
        kills=args.kills,
        seed=args.seed,
        engine=args.engine,
        files=args.files,
        max_kills=args.max_kills,
        max_trials=args.max_trials,
        plan=plan,
        workdir=args.workdir,
        keep=args.keep,
        progress=sys.stderr,
        reset=args.reset,
    )
    print(summary.render())
    if args.json:
        args.json.write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
