"""A lifecycle is a model (SPEC, 2026-11-26; issue 37): a Hypothesis state machine whose
rules are what operators and Spark do to a file-source stream writing through
``foreachBatch`` into one target, and an oracle that knows which rows each input file
carries.

Rules: files land; Spark runs a micro-batch (plans it, calls the sink, records it
done); the job crashes at each fault point of the write (killed: nothing after it runs;
or an error the sink handles), or Spark dies between its file log and its offsets
file; the job stops and starts again (with or without ``recover()`` at start-up, with
or without ``--resume``), maybe with another ``maxFilesPerTrigger``; an operator deletes
the checkpoint, backs it up and restores an older copy, runs ``recover()``, aborts a
pending version; a batch job writes a version of its own on the same app id.

Invariants after every step: each row is in the target at most once, and only rows
that were delivered; a micro-batch refused by name (``CheckpointResetError``,
``ReplayMismatchError``) wrote nothing (target and staging at the same Delta version)
and was refused only after something disturbed the stream's identity (a checkpoint
deleted or restored, a batch job's version). At the end the run is drained the way the
refusal messages say (start the job again; refused: start it with ``--resume``) and
every row is in the target exactly once; rows of versions an operator aborted may be
missing (aborting drops them on purpose), never doubled.

Checkpoints are in Spark's own layout, written in Spark's order (``tests/streams.py``;
the same files classic PySpark 4.2 writes: ``tests/test_stream_reset_jvm.py``), the
micro-batches Arrow tables with Spark's ``_metadata`` column, the engine the embedded
one, the crashes in-process. ``make test`` runs a fixed-seed sample; ``make
test-generated`` at least 500 lifecycles with a fresh seed (``tests/generated.py``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from deltasink import (
    CheckpointResetError,
    DeltaSink,
    DeltaSinkError,
    MergeSpec,
    ReplayMismatchError,
    _faults,
)
from deltasink.ops.origin import batch_files, decode, normal_path
from tests import generated, support
from tests.streams import FileStream, Landing, micro_batch

APP = "lifecycle"
APPEND = MergeSpec(mode="append")
JOB_IDS = 1_000_000  # a batch job's rows: ids from here


#: How a stopped job is started: (--resume, maxFilesPerTrigger), or ``None``: as
#: before, without --resume.
Start = tuple[bool, int | None]
#: A crash: (one of the lifecycle's fault points, by index; killed rather than failed).
Crash = tuple[int, bool]
#: What follows a rule: (files landing, micro-batches run, how a stopped job starts,
#: the last batch's crash).
Run = tuple[int, int, Start | None, Crash | None]
STARTS = st.tuples(st.booleans(), st.sampled_from([1, 2, None])) | st.none()
RUNS = st.tuples(
    st.integers(0, 2),
    st.integers(0, 3),
    STARTS,
    st.tuples(st.integers(0, 2), st.booleans()) | st.none(),
)


class Killed(BaseException):
    """The job's process dies at a fault point: no ``except Exception`` in deltasink
    sees it, nothing after it runs (what ``os._exit`` does to a real process)."""


def job_rows(ids: list[int]) -> pa.Table:
    """A batch job's rows, in the stream's columns."""
    paths = pa.array(["job:" + str(i) for i in ids], pa.string())
    metadata = pa.StructArray.from_arrays([paths], names=["file_path"])
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": ["job"] * len(ids), "_metadata": metadata}
    )


class Table:
    """A Delta table as the oracle reads it: its version (the newest commit file in
    ``_delta_log``, one directory listing) and its ids (read again only when the version
    moved)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._table: DeltaTable | None = None
        self._ids: tuple[int | None, list[int]] = (None, [])

    def version(self) -> int | None:
        try:
            names = os.listdir(Path(self.uri) / "_delta_log")
        except FileNotFoundError:
            return None
        found = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
        return max(found, default=None)

    def ids(self) -> list[int]:
        version = self.version()
        if version is not None and version != self._ids[0]:
            if self._table is None:
                self._table = DeltaTable(self.uri)
            else:
                self._table.update_incremental()
            column = self._table.to_pyarrow_table(columns=["id"]).column("id")
            self._ids = (version, column.to_pylist())
        return self._ids[1]


#: A fast temporary directory when there is one (the tables are tiny, the lifecycles many).
SHM = Path("/dev/shm")


class StreamLifecycle(RuleBasedStateMachine):
    """One target, one app id, one landing directory, one checkpoint location."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="lifecycle-", dir=SHM if SHM.is_dir() else None))
        self.landing = Landing(self.root / "in")
        self.target = str(self.root / "target")
        self.staging = str(self.root / "staging")
        self.checkpoint = self.root / "checkpoint"
        self.target_table, self.staging_table = Table(self.target), Table(self.staging)
        self.max_files: int | None = 1
        self.stream = FileStream(self.checkpoint, self.landing, max_files=self.max_files)
        self.sink: DeltaSink | None = None  # the running job's sink (None: job down)
        self.resume = False  # the running job's --resume
        self.backups: list[Path] = []
        self.job_ids: set[int] = set()  # a batch job's rows the target must hold
        self.job_versions: dict[int, list[int]] = {}  # its versions -> ids
        self.optional: set[int] = set()  # rows of aborted versions: at most once
        # Something changed the stream's identity since the query last wrote a version
        # (a checkpoint deleted or restored, a batch job's version): only then may a
        # micro-batch be refused.
        self.disturbed = False
        self.refusals = 0
        self.draining = False
        self.recovers, self.resumes, self.points = True, False, list(_faults.POINTS)

    # -- helpers ----------------------------------------------------------------------

    def new_sink(self) -> DeltaSink:
        return DeltaSink(self.target, APP, APPEND, staging=self.staging, engine="embedded")

    def snapshot(self) -> tuple[int | None, int | None]:
        return self.target_table.version(), self.staging_table.version()

    def batch(self, *, fault: str | None = None, kill: bool = False) -> None:
        """Spark runs the next micro-batch (if any) in the running job."""
        assert self.sink is not None
        planned = self.stream.next_batch()
        if planned is None and not self.draining:
            self.landing.add(2)  # Spark waits for input: a file lands
            planned = self.stream.next_batch()
        if planned is None:
            return
        batch_id, files = planned
        data = micro_batch(self.landing, files)
        before = self.snapshot()
        refused: DeltaSinkError | None = None
        try:
            if fault is None:
                report = self.sink.foreach_batch(
                    data, batch_id, resume=self.resume, checkpoint=self.stream.root
                )
            else:

                def die() -> None:
                    raise Killed(fault)

                with _faults.armed(fault, die if kill else "raise"):
                    report = self.sink.foreach_batch(
                        data, batch_id, resume=self.resume, checkpoint=self.stream.root
                    )
        except (CheckpointResetError, ReplayMismatchError) as exc:
            refused = exc
        except (Killed, _faults.FaultInjected, DeltaSinkError):
            if self.draining:
                raise  # nothing is armed while draining: no error but a refusal is due
            event(f"died at {fault}" + (" (killed)" if kill else ""))
            self.sink = None  # the job's process died, or its query failed
            return
        if refused is not None:
            assert self.snapshot() == before, f"refused ({refused}) but something was written"
            assert self.disturbed, f"refused with nothing disturbing the stream: {refused}"
            self.refusals += 1
            event(f"refused: {type(refused).__name__}" + (" (draining)" if self.draining else ""))
            self.sink = None  # the query fails
            return
        event(
            "batch: "
            + ("replay" if not report.results else "written")
            + (" resuming" if self.resume else "")
        )
        self.stream.commit(batch_id)  # Spark records the batch done, after the sink
        if any(r.outcome == "committed" for r in report.results):
            self.disturbed = False  # the query wrote past the target: its own again

    def pending(self) -> list[int]:
        return self.new_sink().status().pending_versions if support.exists(self.staging) else []

    # -- rules: input, Spark and the job -------------------------------------------------

    @initialize(
        rows=st.integers(1, 3),
        max_files=st.sampled_from([1, 2, None]),
        recovers=st.booleans(),
        resumes=st.booleans(),
        points=st.lists(st.sampled_from(_faults.POINTS), min_size=1, max_size=3, unique=True),
    )
    def first_file(
        self, rows: int, max_files: int | None, recovers: bool, resumes: bool, points: list[str]
    ) -> None:
        """The first file, and this lifecycle's habits (swarm testing: each lifecycle
        leans one way, so rare combinations are common in some): whether the job calls
        ``recover()`` at start-up (the templates do; a job calling ``foreach_batch``
        alone may not, and its pending versions then wait for a replay, an operator or
        a resumed query), whether its operator always starts it with ``--resume``, and
        the fault points its crashes hit."""
        self.landing.add(rows)
        self.max_files = max_files
        self.recovers = recovers
        self.resumes = resumes
        self.points = points

    def start_job(self, *, resume: bool, max_files: int | None) -> None:
        self.max_files = max_files
        self.stream = FileStream(self.checkpoint, self.landing, max_files=max_files)
        self.sink = self.new_sink()
        self.resume = resume
        if self.recovers:
            self.sink.recover()

    def then(self, run: Run, *, fault: str | None = None) -> None:
        """After a rule's own action: files land, and the job runs ``batches``
        micro-batches, started first if it is down (``start``: with ``--resume``, its
        ``maxFilesPerTrigger``; ``None``: as before, without ``--resume``); with
        ``crash``, the last one dies (killed) or fails at a fault point of the write."""
        land, batches, start, crash = run
        for _ in range(land):
            self.landing.add(2)
        if batches == 0:
            return
        if self.sink is None:
            resume, max_files = start or (False, self.max_files)
            self.start_job(resume=resume or self.resumes, max_files=max_files)
        for n in range(batches):
            if self.sink is None:
                break
            if (crash is not None or fault is not None) and n == batches - 1:
                which, kill = crash or (0, False)
                self.batch(fault=fault or self.points[which % len(self.points)], kill=kill)
                self.sink = None  # died, or (the point not reached) stopped after it
            else:
                self.batch()

    # -- rules: Spark and the job ----------------------------------------------------

    @rule(run=RUNS)
    def run_batches(self, run: Run) -> None:
        """Spark runs micro-batches (after files land)."""
        self.then(run)

    @rule(land=st.integers(0, 2), start=STARTS)
    def target_commit_fails(self, land: int, start: Start | None) -> None:
        """The target refuses a commit (storage unavailable): the micro-batch's publish
        fails, the sink stages it (pending) and raises, the query stops."""
        self.then((land, 1, start, None), fault="publish.before_target_commit")

    @rule(run=RUNS)
    def crash_while_spark_plans(self, run: Run) -> None:
        """Spark dies after writing its file log entry, before the offsets file."""
        self.landing.add(1)
        self.stream.plan_log_only()
        self.sink = None
        self.then(run)

    @rule(run=RUNS)
    def restart(self, run: Run) -> None:
        """The job stops; it starts again (maybe with ``--resume``, another
        ``maxFilesPerTrigger``)."""
        self.sink = None
        self.then(run)

    # -- rules: operators (the job stopped first, run again after) -------------------

    @rule(run=RUNS)
    def delete_checkpoint(self, run: Run) -> None:
        self.sink = None
        shutil.rmtree(self.checkpoint, ignore_errors=True)
        self.disturbed = True
        self.then(run)

    @rule(run=RUNS)
    def back_up_checkpoint(self, run: Run) -> None:
        if self.checkpoint.exists():
            copy = self.root / f"backup-{len(self.backups)}"
            self.stream.copy_to(copy)
            self.backups.append(copy)
        self.then(run)

    @rule(data=st.data(), run=RUNS)
    def restore_checkpoint(self, data: Any, run: Run) -> None:
        if self.backups:
            self.sink = None
            copy = data.draw(st.sampled_from(self.backups))
            shutil.rmtree(self.checkpoint, ignore_errors=True)
            shutil.copytree(copy, self.checkpoint)
            self.disturbed = True
        self.then(run)

    @rule(run=RUNS)
    def recover(self, run: Run) -> None:
        self.sink = None
        self.new_sink().recover()
        self.then(run)

    @rule(newest=st.booleans(), run=RUNS)
    def abort(self, newest: bool, run: Run) -> None:
        self.sink = None
        pending = self.pending()
        if pending:
            self.abort_one(pending[-1] if newest else pending[0])
        self.then(run)

    def abort_one(self, version: int) -> None:
        sink = self.new_sink()
        origin = decode(sink._backend.staged_origin(version))
        assert sink.abort(version)
        event("aborted a pending version")
        ids = self.job_versions.pop(version, None)
        if ids is not None:
            self.job_ids.difference_update(ids)
        # An aborted stream version's rows come back if Spark or a resumed query reads
        # their files again; dropped on purpose otherwise: at most once, maybe never.
        files = {normal_path(f) for f in batch_files(origin)} if origin else set()
        for uri, rows in self.landing.rows_per_file.items():
            if normal_path(uri) in files:
                self.optional.update(rows)

    @rule(rows=st.integers(1, 2), run=RUNS)
    def batch_job_writes(self, rows: int, run: Run) -> None:
        self.sink = None
        sink = self.new_sink()
        status = sink.status()
        held = [v for v in (status.committed_version, *status.pending_versions) if v is not None]
        version = max(held, default=-1) + 1
        ids = [JOB_IDS + 10 * version + r for r in range(rows)]
        sink.write(job_rows(ids), version, position={"run": version})
        self.job_ids.update(ids)
        self.job_versions[version] = ids
        self.disturbed = True
        self.then(run)

    # -- the oracle ----------------------------------------------------------------------

    def delivered(self) -> set[int]:
        return set(self.landing.ids()) | self.job_ids

    @invariant()
    def each_row_at_most_once(self) -> None:
        found = self.target_table.ids()
        assert len(found) == len(set(found)), f"a row twice: {sorted(found)}"
        assert set(found) <= self.delivered(), "a row nobody delivered"

    def teardown(self) -> None:
        try:
            self.drain()
        finally:
            self.sink = None
            shutil.rmtree(self.root, ignore_errors=True)

    def drain(self) -> None:
        """Run the job to the end of its input, the way the messages say: start it
        (``recover()`` at start-up, as the templates do); refused, start it again with
        ``--resume``. Then every row is in the target exactly once."""
        resume = False
        self.draining = True
        for _ in range(8):
            self.sink = None
            self.stream = FileStream(self.checkpoint, self.landing, max_files=self.max_files)
            self.sink = self.new_sink()
            self.resume = resume
            self.sink.recover()
            refused = self.refusals
            for _ in range(len(self.landing.order) * 2 + 4):
                if self.sink is None or self.stream.next_batch() is None:
                    break
                self.batch()
            if self.sink is not None and self.refusals == refused:
                break
            resume = True  # refused: the way out the message names
            event("drain: run again with --resume")
        else:
            pytest.fail("the stream never drained")
        assert self.pending() == []
        found = self.target_table.ids()
        assert len(found) == len(set(found)), f"a row twice: {sorted(found)}"
        missing = (self.delivered() - set(found)) - self.optional
        assert not missing, f"rows never written: {sorted(missing)}"


StreamLifecycle = generated.hypothesis_run(sample=6, ci=500, stateful_step_count=10)(
    StreamLifecycle
)
# 500 lifecycles take minutes: past pytest-timeout's 300 s default on a loaded machine.
TestStreamLifecycle = pytest.mark.timeout(1800)(pytest.mark.generated(StreamLifecycle.TestCase))
