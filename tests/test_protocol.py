"""The engine-free two-phase-commit core over the two fake participants.

Every SPEC scenario that makes sense without Delta runs over both fakes of
:mod:`tests.fakes` (the ``fake`` fixture): the in-memory participant and Flink's
file-rename seed example. "A new process" is a new participant object and a new
:class:`TwoPhaseCommit` over the same storage; assertions read the storage directly.
"""

from __future__ import annotations

import errno
import logging
import math
from dataclasses import FrozenInstanceError, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from deltasink import _faults
from deltasink.core.committables import CommitMarks, LostMarker
from deltasink.core.guards import MarkGuard
from deltasink.core.protocol import (
    MAX_VERSION,
    CommitReport,
    LogState,
    StagedVersion,
    Timeouts,
    TwoPhaseCommit,
    check_version,
)
from deltasink.errors import (
    AlreadyCommittedError,
    CommitError,
    ConfigurationError,
    DeltaSinkError,
    InvalidInputError,
    InvalidVersionError,
    MarkerLostError,
)
from tests.fakes import (
    DirectInMemoryParticipant,
    FileRenameParticipant,
    InMemoryParticipant,
    MemoryStore,
)

APP = "orders-ingest"
T0 = 1_700_000_000.0


class FakeClock:
    """An injectable clock: epoch seconds that only move when told to."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Fake:
    """How a test drives one kind of fake participant over one storage."""

    kind: str

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def participant(self, *, fail_publish: set[int] | None = None) -> Any:
        """A brand-new participant object over the same storage (a restarted process)."""
        raise NotImplementedError

    def core(self, participant: Any, *, timeouts: Timeouts | None = None) -> TwoPhaseCommit[Any]:
        return TwoPhaseCommit(participant, APP, timeouts or Timeouts(), self.clock)

    def batch(self, *values: int) -> Any:
        raise NotImplementedError

    def bad_batch(self) -> Any:
        raise NotImplementedError

    def contents(self) -> list[int]:
        """The target's data, in the order it was applied."""
        raise NotImplementedError

    def marker(self) -> int | None:
        raise NotImplementedError

    def table_version(self) -> int | None:
        raise NotImplementedError

    def staged_versions(self) -> list[int]:
        """Versions whose staged data exists in storage."""
        raise NotImplementedError


class MemoryFake(Fake):
    kind = "memory"

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.store = MemoryStore()

    def participant(self, *, fail_publish: set[int] | None = None) -> InMemoryParticipant:
        return InMemoryParticipant(self.store, clock=self.clock, fail_publish=fail_publish)

    def batch(self, *values: int) -> list[dict[str, Any]]:
        return [{"id": v, "value": f"v{v}"} for v in values]

    def bad_batch(self) -> list[dict[str, Any]]:
        return [{"id": 1, "value": "a"}, {"id": None, "value": "b"}]

    def contents(self) -> list[int]:
        assert all(row == {"id": key, "value": f"v{key}"} for key, row in self.store.target.items())
        return list(self.store.target)

    def marker(self) -> int | None:
        return self.store.marker

    def table_version(self) -> int | None:
        return self.store.table_version

    def staged_versions(self) -> list[int]:
        return sorted(self.store.staged)


class FileFake(Fake):
    kind = "file"

    def __init__(self, clock: FakeClock, root: Path) -> None:
        super().__init__(clock)
        self.root = root

    def participant(self, *, fail_publish: set[int] | None = None) -> FileRenameParticipant:
        return FileRenameParticipant(self.root, clock=self.clock, fail_publish=fail_publish)

    def batch(self, *values: int) -> list[str]:
        return [str(v) for v in values]

    def bad_batch(self) -> list[str]:
        return ["1", "2\n3"]

    def contents(self) -> list[int]:
        return [int(line) for line in FileRenameParticipant(self.root).read_target()[2]]

    def marker(self) -> int | None:
        return FileRenameParticipant(self.root).read_target()[0]

    def table_version(self) -> int | None:
        return FileRenameParticipant(self.root).read_target()[1]

    def staged_versions(self) -> list[int]:
        return FileRenameParticipant(self.root).pending_versions_on_disk()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "file"])
def fake(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Fake:
    if request.param == "memory":
        return MemoryFake(clock)
    return FileFake(clock, tmp_path / "sink")


@pytest.fixture
def file_fake(clock: FakeClock, tmp_path: Path) -> FileFake:
    return FileFake(clock, tmp_path / "sink")


@pytest.fixture
def memory_fake(clock: FakeClock) -> MemoryFake:
    return MemoryFake(clock)


def pending(core: TwoPhaseCommit[Any]) -> list[int]:
    return [s.version for s in core.state().pending]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "deltasink" and r.levelno == logging.WARNING
    ]


# -- SPEC scenario 1: notify a middle checkpoint --------------------------------------


def test_commit_of_a_middle_checkpoint_publishes_only_up_to_it(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    for version, value in enumerate([42, 43, 44]):
        assert core.pre_commit(fake.batch(value), version).state == "staged"

    report = core.commit(1)

    assert fake.contents() == [42, 43]
    assert fake.marker() == 1
    assert report.committed_versions == [0, 1]
    assert report.committed_version == 1
    assert pending(core) == [2]
    assert fake.staged_versions() == [2]
    assert p.publish_calls == [0, 1]


# -- SPEC scenario 2: fail before notify, recover in a new process --------------------


def _disk_full() -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_staging_failure_reaches_caller_and_new_process_recovers(fake: Fake) -> None:
    core = fake.core(fake.participant())
    core.pre_commit(fake.batch(42), 0)
    core.pre_commit(fake.batch(43), 1)

    with _faults.armed("stage.after_files", _disk_full), pytest.raises(OSError, match="No space"):
        core.pre_commit(fake.batch(44), 2)

    # Nothing half-written is visible: v2 is not staged, the target is untouched.
    assert pending(core) == [0, 1]
    assert fake.staged_versions() == [0, 1]
    assert fake.contents() == []
    assert fake.marker() is None

    # The process dies; a new one recovers over the same storage.
    del core
    p2 = fake.participant()
    report = fake.core(p2).recover()

    assert report.committed_versions == [0, 1]
    assert fake.contents() == [42, 43]
    assert fake.marker() == 1
    assert fake.staged_versions() == []
    state = fake.core(fake.participant()).state()
    assert state == LogState(1, ())
    assert state.find(2) is None
    assert p2.publish_calls == [0, 1]


def test_file_staging_failure_leaves_only_an_ignored_orphan_temp_file(file_fake: FileFake) -> None:
    core = file_fake.core(file_fake.participant())
    with _faults.armed("stage.after_files"), pytest.raises(_faults.FaultInjected):
        core.pre_commit(file_fake.batch(44), 2)

    pending_dir = file_fake.root / "pending"
    orphans = [p.name for p in pending_dir.iterdir()]
    assert len(orphans) == 1
    assert orphans[0].startswith(".2.txt.")
    assert orphans[0].endswith(".tmp")
    assert core.state() == LogState(None, ())
    # The version can be staged again once storage works.
    assert core.pre_commit(file_fake.batch(44), 2).state == "staged"
    assert file_fake.staged_versions() == [2]


# -- SPEC scenario 3: commit keeps failing during recovery ------------------------------


def _stage_committed_then_failing(fake: Fake) -> None:
    """v0 (42) committed earlier; v1 (43) and v2 (44) staged at T0."""
    core = fake.core(fake.participant())
    core.pre_commit(fake.batch(42), 0)
    core.commit(0)
    core.pre_commit(fake.batch(43), 1)
    core.pre_commit(fake.batch(44), 2)
    assert fake.contents() == [42]


def test_recover_with_ignore_failures_raises_while_young_abandons_once_old(
    fake: Fake, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltasink")
    _stage_committed_then_failing(fake)
    timeouts = Timeouts(transaction_timeout=100, ignore_failures_after_timeout=True)

    clock.advance(50)
    young = fake.core(fake.participant(fail_publish={1}), timeouts=timeouts)
    with pytest.raises(CommitError, match="committing version 1") as info:
        young.recover()
    assert info.value.version == 1
    assert info.value.app_id == APP
    assert fake.contents() == [42]
    assert fake.marker() == 0
    assert fake.staged_versions() == [1, 2]
    assert warnings_of(caplog) == []

    clock.advance(100)  # now 150 s old
    p = fake.participant(fail_publish={1})
    report = fake.core(p, timeouts=timeouts).recover()

    assert [(r.version, r.outcome) for r in report.results] == [(1, "abandoned"), (2, "committed")]
    assert report.abandoned_versions == [1]
    assert report.committed_versions == [2]
    assert report.results[0].rows == 1
    assert fake.contents() == [42, 44]  # 42 untouched, 43 dropped, recovery went on
    assert fake.marker() == 2
    assert fake.staged_versions() == []
    assert ((1,), "abandoned") in p.discards
    messages = warnings_of(caplog)
    assert len(messages) == 1
    assert "version 1" in messages[0]
    assert repr(APP) in messages[0]
    assert "abandoned" in messages[0]
    assert "150.0 s" in messages[0]
    assert report.results[0].message == messages[0]


def test_recover_without_ignore_flag_always_raises(fake: Fake, clock: FakeClock) -> None:
    _stage_committed_then_failing(fake)
    timeouts = Timeouts(transaction_timeout=100)
    for _ in range(3):
        clock.advance(1_000)
        with pytest.raises(CommitError) as info:
            fake.core(fake.participant(fail_publish={1}), timeouts=timeouts).recover()
        assert info.value.version == 1
        assert fake.contents() == [42]
        assert fake.marker() == 0
        assert fake.staged_versions() == [1, 2]


def test_commit_never_abandons_only_recover_does(fake: Fake, clock: FakeClock) -> None:
    _stage_committed_then_failing(fake)
    timeouts = Timeouts(transaction_timeout=100, ignore_failures_after_timeout=True)
    clock.advance(1_000)
    with pytest.raises(CommitError):
        fake.core(fake.participant(fail_publish={1}), timeouts=timeouts).commit(2)
    assert fake.contents() == [42]
    assert fake.staged_versions() == [1, 2]


# -- SPEC scenarios 4, 5, 6: subsumption, delayed notification, nothing pending ----------


def test_skipped_notifications_are_subsumed_in_order(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    for version in (1, 2, 3):
        core.pre_commit(fake.batch(version * 10), version)

    report = core.commit(3)

    assert [(r.version, r.outcome) for r in report.results] == [
        (1, "committed"),
        (2, "committed"),
        (3, "committed"),
    ]
    assert [r.target_version for r in report.results] == [0, 1, 2]
    assert p.publish_calls == [1, 2, 3]
    assert fake.contents() == [10, 20, 30]
    assert fake.marker() == 3
    assert fake.table_version() == 2
    assert report.cleaned_versions == (1, 2, 3)
    assert fake.staged_versions() == []


def test_delayed_notification_commits_only_what_it_covers(fake: Fake) -> None:
    core = fake.core(fake.participant())
    for version in (1, 2, 3):
        core.pre_commit(fake.batch(version * 10), version)

    assert core.commit(1).committed_versions == [1]
    assert fake.contents() == [10]
    assert pending(core) == [2, 3]
    assert fake.staged_versions() == [2, 3]

    assert core.commit(3).committed_versions == [2, 3]
    assert fake.contents() == [10, 20, 30]


def test_commit_with_nothing_pending_is_a_no_op(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    assert core.commit(5) == CommitReport(APP, (), None, ())

    core.pre_commit(fake.batch(7), 3)
    report = core.commit(2)
    assert report == CommitReport(APP, (), None, ())
    assert pending(core) == [3]
    assert p.publish_calls == []
    assert fake.contents() == []


# -- SPEC scenario 7: ordered failure ----------------------------------------------------


def test_failure_in_the_middle_stops_in_order(fake: Fake) -> None:
    p = fake.participant(fail_publish={2})
    core = fake.core(p)
    for version in (1, 2, 3):
        core.pre_commit(fake.batch(version * 10), version)

    with pytest.raises(CommitError, match="committing version 2") as info:
        core.commit(3)

    err = info.value
    assert err.version == 2
    assert err.app_id == APP
    assert isinstance(err.__cause__, OSError)
    assert isinstance(err.report, CommitReport)
    assert err.report.committed_versions == [1]
    assert err.report.committed_version == 1
    assert p.publish_calls == [1, 2]  # v3 never attempted before v2
    assert fake.contents() == [10]
    assert fake.marker() == 1
    assert pending(core) == [2, 3]
    # Versions committed before the failure are cleaned up all the same.
    assert fake.staged_versions() == [2, 3]
    assert core.state().leftovers == ()

    # Once the cause is gone, recover() finishes the job.
    report = fake.core(fake.participant()).recover()
    assert report.committed_versions == [2, 3]
    assert report.cleaned_versions == (2, 3)
    assert fake.contents() == [10, 20, 30]
    assert fake.staged_versions() == []


# -- SPEC scenario 8: timeout warning --------------------------------------------------


def test_old_pending_version_logs_warning_naming_app_version_and_age(
    fake: Fake, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltasink")
    timeouts = Timeouts(transaction_timeout=100, warning_ratio=0.5)
    core = fake.core(fake.participant(), timeouts=timeouts)
    core.pre_commit(fake.batch(1), 1)
    clock.advance(30)
    core.pre_commit(fake.batch(2), 2)

    clock.advance(10)  # v1 is 40 s old: below 50 s
    assert core.commit(0).results == ()
    assert warnings_of(caplog) == []

    clock.advance(20)  # v1 60 s old, v2 30 s old
    core.commit(0)
    messages = warnings_of(caplog)
    assert len(messages) == 1
    assert repr(APP) in messages[0]
    assert "version 1 " in messages[0]
    assert "60.0 s" in messages[0]
    assert "60%" in messages[0]
    assert pending(core) == [1, 2]  # a warning changes nothing


def test_no_warning_without_ratio(
    fake: Fake, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltasink")
    core = fake.core(fake.participant(), timeouts=Timeouts(transaction_timeout=100))
    core.pre_commit(fake.batch(1), 1)
    clock.advance(99)
    core.commit(0)
    assert warnings_of(caplog) == []


# -- SPEC scenario 9: duplicates ---------------------------------------------------------


def test_pre_commit_twice_stages_once(fake: Fake, clock: FakeClock) -> None:
    p = fake.participant()
    core = fake.core(p)
    first = core.pre_commit(fake.batch(1, 2), 5)
    state_before = core.state()
    clock.advance(10)
    second = core.pre_commit(fake.batch(1, 2, 3), 5)

    assert first.state == "staged"
    assert first.rows == 2
    assert first.staged_at == datetime.fromtimestamp(T0, tz=timezone.utc)
    assert second.state == "duplicate"
    assert second.rows == 2
    assert second.staged_at == first.staged_at
    assert second.app_id == APP
    assert second.version == 5
    assert p.stage_calls == [5]
    assert core.state() == state_before
    assert fake.staged_versions() == [5]


def test_pre_commit_of_a_committed_version_stages_nothing(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    core.pre_commit(fake.batch(1), 4)
    core.commit(4)

    for version in (4, 3, 0):
        committable = core.pre_commit(fake.batch(99), version)
        assert committable.state == "already_committed"
        assert committable.rows == 0
        assert committable.staged_at is None
    assert p.stage_calls == [4]
    assert fake.staged_versions() == []
    assert fake.contents() == [1]


def test_commit_twice_changes_the_target_once(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    core.pre_commit(fake.batch(42), 0)
    staged = core.state().find(0)
    assert staged is not None
    first = core.commit(0)
    assert first.results[0].target_version == 0

    assert core.commit(0) == CommitReport(APP, (), 0, ())
    assert fake.table_version() == 0
    assert fake.contents() == [42]

    # The participant's own marker check: a stale replay of publish changes nothing.
    replay = fake.participant().publish(staged)
    assert replay.outcome == "already_committed"
    assert replay.target_version == 0
    assert fake.table_version() == 0
    assert fake.contents() == [42]


def test_crash_after_staging_before_pre_commit_returns_is_a_duplicate(fake: Fake) -> None:
    core = fake.core(fake.participant())
    with _faults.armed("stage.after_log_commit"), pytest.raises(_faults.FaultInjected):
        core.pre_commit(fake.batch(7), 0)
    p = fake.participant()
    assert fake.core(p).pre_commit(fake.batch(7), 0).state == "duplicate"
    assert p.stage_calls == []
    assert fake.staged_versions() == [0]


# -- SPEC scenario 10: end of input --------------------------------------------------


def test_end_of_input_commits_everything_staged(fake: Fake) -> None:
    core = fake.core(fake.participant())
    for version in (20240101, 20240102, 20240103):
        core.pre_commit(fake.batch(version % 100), version)
    assert fake.contents() == []

    report = core.recover()  # the batch job's last step

    assert report.committed_versions == [20240101, 20240102, 20240103]
    assert report.committed_version == 20240103
    assert fake.contents() == [1, 2, 3]
    assert core.state() == LogState(20240103, ())
    assert core.recover() == CommitReport(APP, (), 20240103, ())


# -- SPEC scenarios 11 and 12: source progress vs sink commit (seed 001) ---------------


class Crash(Exception):
    """The process dies here."""


@dataclass
class Pipeline:
    """A source with an offset file feeding the sink, Flink-style.

    Each batch: ``pre_commit`` (snapshot), then the two notifications in ``order``:
    the sink commits, the source records its progress (the offset file). On start, the
    sink recovers first (``initializeState``), then the source resumes from its offset.
    """

    fake: Fake
    source: list[list[int]]
    offsets: Path
    order: Literal["sink_first", "source_first"]
    crash_at: tuple[int, str] | None = None
    log: list[tuple[Any, ...]] = field(default_factory=list)

    def offset(self) -> int:
        return int(self.offsets.read_text()) if self.offsets.exists() else 0

    def record_progress(self, next_offset: int) -> None:
        tmp = self.offsets.with_suffix(".tmp")
        tmp.write_text(str(next_offset))
        tmp.replace(self.offsets)

    def step_done(self, version: int, step: str) -> None:
        if self.crash_at == (version, step):
            raise Crash(f"crash after {step} of version {version}")

    def run(self) -> None:
        core = self.fake.core(self.fake.participant())
        self.log.append(("recover", core.recover().committed_versions))
        for version in range(self.offset(), len(self.source)):
            committable = core.pre_commit(self.fake.batch(*self.source[version]), version)
            self.log.append(("pre_commit", version, committable.state))
            self.step_done(version, "pre_commit")
            steps = ["sink_commit", "source_progress"]
            if self.order == "source_first":
                steps.reverse()
            for step in steps:
                if step == "sink_commit":
                    self.log.append(("commit", version, core.commit(version).committed_versions))
                else:
                    self.record_progress(version + 1)
                self.step_done(version, step)


SOURCE = [[1, 2], [3], [4, 5]]


def test_crash_after_sink_commit_before_source_progress_replays_without_duplicates(
    fake: Fake, tmp_path: Path
) -> None:
    pipe = Pipeline(fake, SOURCE, tmp_path / "offset", "sink_first", crash_at=(1, "sink_commit"))
    with pytest.raises(Crash):
        pipe.run()
    assert fake.contents() == [1, 2, 3]
    assert fake.marker() == 1
    assert pipe.offset() == 1  # the source did not record batch 1

    replay = Pipeline(fake, SOURCE, tmp_path / "offset", "sink_first")
    replay.run()

    assert replay.log == [
        ("recover", []),
        ("pre_commit", 1, "already_committed"),  # replayed with the same version: a no-op
        ("commit", 1, []),
        ("pre_commit", 2, "staged"),
        ("commit", 2, [2]),
    ]
    assert fake.contents() == [1, 2, 3, 4, 5]
    assert fake.table_version() == 2  # three publishes in all, none repeated
    assert fake.staged_versions() == []
    assert replay.offset() == 3


def test_crash_after_source_progress_before_sink_commit_recovers_without_loss(
    fake: Fake, tmp_path: Path
) -> None:
    pipe = Pipeline(
        fake, SOURCE, tmp_path / "offset", "source_first", crash_at=(1, "source_progress")
    )
    with pytest.raises(Crash):
        pipe.run()
    assert fake.contents() == [1, 2]
    assert pipe.offset() == 2  # the source will not replay batch 1
    assert fake.staged_versions() == [1]

    restart = Pipeline(fake, SOURCE, tmp_path / "offset", "source_first")
    restart.run()

    assert restart.log == [
        ("recover", [1]),  # the staged batch is committed: no loss
        ("pre_commit", 2, "staged"),
        ("commit", 2, [2]),
    ]
    assert fake.contents() == [1, 2, 3, 4, 5]
    assert fake.marker() == 2
    assert fake.staged_versions() == []


def test_crash_during_pre_commit_leaves_source_unacknowledged(fake: Fake, tmp_path: Path) -> None:
    pipe = Pipeline(fake, SOURCE, tmp_path / "offset", "source_first")
    with _faults.armed("stage.after_files", after=1), pytest.raises(_faults.FaultInjected):
        pipe.run()
    assert pipe.offset() == 1
    assert fake.contents() == [1, 2]
    assert fake.staged_versions() == []

    Pipeline(fake, SOURCE, tmp_path / "offset", "source_first").run()
    assert fake.contents() == [1, 2, 3, 4, 5]


# -- crashes inside commit ----------------------------------------------------------


def test_crash_before_publish_changes_nothing(fake: Fake) -> None:
    core = fake.core(fake.participant())
    core.pre_commit(fake.batch(1), 1)
    # A crash (FaultInjected) or, if the core wraps it, a CommitError: either way
    # the target is untouched.
    with (
        _faults.armed("commit.before_publish"),
        pytest.raises((_faults.FaultInjected, CommitError), match=r"commit\.before_publish"),
    ):
        core.commit(1)
    assert fake.contents() == []
    assert fake.marker() is None
    assert fake.staged_versions() == [1]


def test_crash_after_publish_is_finished_by_recover_without_republishing(fake: Fake) -> None:
    core = fake.core(fake.participant())
    for version in (1, 2, 3):
        core.pre_commit(fake.batch(version), version)
    with _faults.armed("commit.after_publish"), pytest.raises(_faults.FaultInjected):
        core.commit(3)
    assert fake.contents() == [1]
    assert fake.staged_versions() == [1, 2, 3]  # v1 is a leftover now

    p = fake.participant()
    report = fake.core(p).recover()
    assert report.committed_versions == [2, 3]
    assert report.cleaned_versions == (1, 2, 3)
    assert p.publish_calls == [2, 3]
    assert fake.contents() == [1, 2, 3]
    assert fake.table_version() == 2


def test_failure_reported_after_target_commit_keeps_exactly_once(fake: Fake) -> None:
    core = fake.core(fake.participant())
    core.pre_commit(fake.batch(1), 1)
    with _faults.armed("publish.after_target_commit"):
        report = core.commit(1)  # the error came after the commit landed: it counts
    assert [(r.version, r.outcome) for r in report.results] == [(1, "committed")]
    assert "after the commit landed" in (report.results[0].message or "")
    assert report.cleaned_versions == (1,)
    assert fake.contents() == [1]
    assert fake.marker() == 1

    report = fake.core(fake.participant()).recover()
    assert report.results == ()
    assert fake.contents() == [1]
    assert fake.table_version() == 0


# -- version checks ----------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [True, False, 1.0, 0.0, "1", None, -1, MAX_VERSION + 1, 2**64, np.float64(3.0)],
    ids=repr,
)
def test_check_version_rejects(bad: object) -> None:
    with pytest.raises(InvalidVersionError):
        check_version(bad)


def test_check_version_messages_and_attributes() -> None:
    with pytest.raises(InvalidVersionError, match=r"up_to must be an int .* got True of type bool"):
        check_version(True, what="up_to")
    with pytest.raises(
        InvalidVersionError, match=r"between 0 and 9223372036854775806, got -3"
    ) as e:
        check_version(-3)
    assert e.value.version == -3
    assert isinstance(e.value, InvalidInputError)
    assert isinstance(e.value, DeltaSinkError)


@pytest.mark.parametrize(
    ("good", "expected"),
    [(0, 0), (7, 7), (MAX_VERSION, MAX_VERSION), (np.int64(7), 7), (np.uint8(3), 3)],
    ids=repr,
)
def test_check_version_accepts(good: object, expected: int) -> None:
    value = check_version(good)
    assert value == expected
    assert type(value) is int


def test_numpy_version_is_staged_as_int(fake: Fake) -> None:
    core = fake.core(fake.participant())
    committable = core.pre_commit(fake.batch(1), np.int64(9))
    assert committable.version == 9
    assert type(committable.version) is int
    assert core.commit(np.int64(9)).committed_versions == [9]
    assert fake.marker() == 9


def test_invalid_versions_are_refused_before_anything_happens(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    for bad in (-1, "3", 2.0, None, True):
        with pytest.raises(InvalidVersionError):
            core.pre_commit(fake.batch(1), bad)
        with pytest.raises(InvalidVersionError):
            core.commit(bad)
        with pytest.raises(InvalidVersionError):
            core.abort(bad)
    assert p.stage_calls == []
    assert p.publish_calls == []
    assert fake.staged_versions() == []


def test_version_going_backwards_is_refused_and_stages_nothing(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    core.pre_commit(fake.batch(1), 2)
    core.commit(2)
    core.pre_commit(fake.batch(5), 5)

    for lower in (3, 4):
        with pytest.raises(InvalidVersionError, match=f"version {lower} goes backwards") as info:
            core.pre_commit(fake.batch(4), lower)
        assert info.value.version == lower
        assert info.value.app_id == APP

    assert p.stage_calls == [2, 5]
    assert fake.staged_versions() == [5]
    assert pending(core) == [5]
    # Higher versions are fine, gaps included.
    assert core.pre_commit(fake.batch(9), 9).state == "staged"


def test_invalid_batch_is_refused_before_anything_is_written(fake: Fake) -> None:
    reached: list[str] = []
    core = fake.core(fake.participant())
    with (
        _faults.armed("stage.before_write", lambda: reached.append("before_write")),
        pytest.raises(InvalidInputError) as info,
    ):
        core.pre_commit(fake.bad_batch(), 3)
    assert info.value.version == 3
    assert reached == []
    assert fake.staged_versions() == []
    assert core.state() == LogState(None, ())


# -- abort ---------------------------------------------------------------------------


def test_abort_drops_staged_version_and_is_idempotent(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    core.pre_commit(fake.batch(1), 1)
    core.pre_commit(fake.batch(2), 2)

    assert core.abort(2) is True
    assert p.discards == [((2,), "aborted")]
    assert pending(core) == [1]
    assert fake.staged_versions() == [1]
    assert core.abort(2) is False
    assert core.abort(7) is False
    assert p.discards == [((2,), "aborted")]

    # The aborted version may be staged again, with new data.
    assert core.pre_commit(fake.batch(22), 2).state == "staged"
    assert core.commit(2).committed_versions == [1, 2]
    assert fake.contents() == [1, 22]


def test_abort_of_a_committed_version_raises(fake: Fake) -> None:
    core = fake.core(fake.participant())
    core.pre_commit(fake.batch(1), 1)
    core.pre_commit(fake.batch(2), 2)
    core.commit(1)
    for version in (0, 1):
        with pytest.raises(AlreadyCommittedError, match="already committed") as info:
            core.abort(version)
        assert info.value.version == version
        assert info.value.app_id == APP
        assert isinstance(info.value, CommitError)
    assert fake.contents() == [1]
    assert pending(core) == [2]


# -- Timeouts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"transaction_timeout": 0}, "must be positive"),
        ({"transaction_timeout": -5}, "must be positive"),
        ({"transaction_timeout": timedelta(0)}, "must be positive"),
        ({"transaction_timeout": timedelta(seconds=-1)}, "must be positive"),
        ({"transaction_timeout": True}, "timedelta or seconds"),
        ({"transaction_timeout": "10"}, "timedelta or seconds"),
        ({"ignore_failures_after_timeout": True}, "needs transaction_timeout"),
        ({"warning_ratio": 0.5}, "needs transaction_timeout"),
        ({"transaction_timeout": 10, "warning_ratio": 0}, r"in \(0, 1\]"),
        ({"transaction_timeout": 10, "warning_ratio": 1.5}, r"in \(0, 1\]"),
        ({"transaction_timeout": 10, "warning_ratio": -0.1}, r"in \(0, 1\]"),
        ({"transaction_timeout": 10, "warning_ratio": math.nan}, r"in \(0, 1\]"),
    ],
)
def test_timeouts_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Timeouts(**kwargs)


def test_timeouts_accepted_forms() -> None:
    assert Timeouts().timeout_s is None
    assert Timeouts(transaction_timeout=5).timeout_s == 5.0
    assert Timeouts(transaction_timeout=2.5).timeout_s == 2.5
    assert Timeouts(transaction_timeout=timedelta(minutes=2)).timeout_s == 120.0
    full = Timeouts(transaction_timeout=10, ignore_failures_after_timeout=True, warning_ratio=1)
    assert full.warning_ratio == 1
    with pytest.raises(FrozenInstanceError):
        full.warning_ratio = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        Timeouts(10)  # type: ignore[call-arg]


def test_timedelta_timeout_drives_abandonment(fake: Fake, clock: FakeClock) -> None:
    core = fake.core(
        fake.participant(fail_publish={0}),
        timeouts=Timeouts(
            transaction_timeout=timedelta(minutes=1), ignore_failures_after_timeout=True
        ),
    )
    core.pre_commit(fake.batch(1), 0)
    clock.advance(60)  # exactly the timeout: not older than it
    with pytest.raises(CommitError):
        core.recover()
    clock.advance(1)
    assert core.recover().abandoned_versions == [0]
    assert fake.staged_versions() == []
    assert fake.contents() == []


# -- post-commit clean-up -------------------------------------------------------------


def test_commit_removes_staged_data_of_committed_versions(fake: Fake) -> None:
    p = fake.participant()
    core = fake.core(p)
    for version in (0, 1, 2):
        core.pre_commit(fake.batch(version), version)

    report = core.commit(1)

    assert report.cleaned_versions == (0, 1)
    assert p.discards == [((0, 1), "committed")]
    assert fake.staged_versions() == [2]
    assert core.state().leftovers == ()


def test_cleanup_failure_is_logged_not_raised_and_retried(
    fake: Fake, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="deltasink")
    core = fake.core(fake.participant())
    for version in (0, 1, 2):
        core.pre_commit(fake.batch(version), version)

    with _faults.armed("discard.before_log_commit"):
        report = core.commit(1)

    assert report.committed_versions == [0, 1]
    assert report.cleaned_versions == ()
    assert fake.contents() == [0, 1]
    assert fake.staged_versions() == [0, 1, 2]
    state = core.state()
    assert [s.version for s in state.leftovers] == [0, 1]
    assert [s.version for s in state.pending] == [2]
    messages = warnings_of(caplog)
    assert len(messages) == 1
    assert repr(APP) in messages[0]
    assert "[0, 1]" in messages[0]
    assert "fault injected at discard.before_log_commit" in messages[0]

    # The next call retries the clean-up, even with nothing new to publish.
    retry = fake.core(fake.participant()).commit(1)
    assert retry.results == ()
    assert retry.cleaned_versions == (0, 1)
    assert fake.staged_versions() == [2]


# -- the fakes themselves ----------------------------------------------------------------


def test_log_state_views() -> None:
    at = datetime.fromtimestamp(T0, tz=timezone.utc)
    state = LogState(2, tuple(StagedVersion(v, 1, at) for v in (1, 2, 3, 5)))
    assert [s.version for s in state.pending] == [3, 5]
    assert [s.version for s in state.leftovers] == [1, 2]
    assert state.find(5) == StagedVersion(5, 1, at)
    assert state.find(4) is None
    assert not LogState(None).is_committed(0)
    assert LogState(0).is_committed(0)


def test_in_memory_publish_upserts_by_id(memory_fake: MemoryFake) -> None:
    p = memory_fake.participant()
    core = memory_fake.core(p)
    core.pre_commit([{"id": 1, "value": "a"}, {"id": 2, "value": "b"}], 0)
    core.pre_commit([{"id": 2, "value": "B"}, {"id": 3, "value": "c"}], 1)

    report = core.commit(1)

    assert p.target == {
        1: {"id": 1, "value": "a"},
        2: {"id": 2, "value": "B"},
        3: {"id": 3, "value": "c"},
    }
    assert [(r.rows_inserted, r.rows_updated) for r in report.results] == [(2, 0), (1, 1)]
    assert p.marker == 1
    assert p.staged == {}


def test_file_participant_reads_everything_back_from_disk(
    file_fake: FileFake, clock: FakeClock
) -> None:
    core = file_fake.core(file_fake.participant())
    core.pre_commit(["a", "b"], 0)
    clock.advance(5)
    core.pre_commit(["c"], 1)
    core.commit(0)

    fresh = FileRenameParticipant(file_fake.root)
    assert fresh.read_state() == LogState(
        0, (StagedVersion(1, 1, datetime.fromtimestamp(T0 + 5, tz=timezone.utc)),)
    )
    text = (file_fake.root / "target.txt").read_text(encoding="utf-8")
    assert text == '{"marker": 0, "table_version": 0}\na\nb\n'
    assert (file_fake.root / "pending" / "1.txt").read_text() == f"{T0 + 5!r}\nc\n"
    # Only the two files: no temp file left behind by the renames.
    assert sorted(p.name for p in file_fake.root.rglob("*") if p.is_file()) == [
        "1.txt",
        "target.txt",
    ]


# -- regressions: bugs found in the core during review ------------------------------


def test_nan_transaction_timeout_is_rejected() -> None:
    with pytest.raises(ConfigurationError):
        Timeouts(transaction_timeout=math.nan)


def test_non_numeric_warning_ratio_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        Timeouts(transaction_timeout=10, warning_ratio="0.5")  # type: ignore[arg-type]


def test_non_bool_ignore_failures_flag_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        Timeouts(transaction_timeout=10, ignore_failures_after_timeout="no")  # type: ignore[arg-type]


def test_publish_that_landed_before_failing_is_not_reported_abandoned(
    fake: Fake, clock: FakeClock
) -> None:
    core = fake.core(
        fake.participant(),
        timeouts=Timeouts(transaction_timeout=100, ignore_failures_after_timeout=True),
    )
    core.pre_commit(fake.batch(7), 0)
    clock.advance(1_000)
    with _faults.armed("publish.after_target_commit"):
        report = core.recover()
    assert fake.contents() == [7]  # the data did land
    assert report.abandoned_versions == []


# -- direct publish (write() with nothing staged) ----------------------------------------


def direct_core(participant: DirectInMemoryParticipant) -> TwoPhaseCommit[Any]:
    return TwoPhaseCommit(participant, "direct")


def test_write_with_nothing_staged_publishes_without_staging() -> None:
    p = DirectInMemoryParticipant()
    report = direct_core(p).write([{"id": 1}], 0)
    assert [(r.version, r.outcome) for r in report.results] == [(0, "committed")]
    assert (report.committed_version, report.cleaned_versions) == (0, ())
    assert (p.direct_calls, p.stage_calls, p.publish_calls) == ([0], [], [])
    assert (p.marker, p.target, p.staged) == (0, {1: {"id": 1}}, {})
    # A replay of the version: the marker says committed; nothing is staged or written.
    assert direct_core(p).write([{"id": 9}], 0).results == ()
    assert (p.direct_calls, p.stage_calls, p.store.table_version) == ([0], [], 0)


def test_write_behind_a_pending_version_takes_the_two_phase_path() -> None:
    p = DirectInMemoryParticipant()
    direct_core(p).pre_commit([{"id": 1}], 0)
    report = direct_core(p).write([{"id": 2}], 1)
    assert report.committed_versions == [0, 1]
    assert (p.direct_calls, p.stage_calls, p.publish_calls) == ([], [0, 1], [0, 1])
    assert (p.marker, p.staged) == (1, {})


def test_a_failed_direct_publish_is_staged_and_raised() -> None:
    p = DirectInMemoryParticipant(fail_publish={1})
    direct_core(p).write([{"id": 1}], 0)
    with pytest.raises(CommitError, match=r"version 1 is staged now") as info:
        direct_core(p).write([{"id": 2}], 1)
    assert (info.value.version, info.value.report.committed_version) == (1, 0)
    assert (p.marker, sorted(p.staged)) == (0, [1])
    p.fail_publish.clear()
    assert direct_core(DirectInMemoryParticipant(p.store)).recover().committed_versions == [1]
    assert (p.marker, p.target, p.staged) == (1, {1: {"id": 1}, 2: {"id": 2}}, {})


def test_a_failed_direct_publish_that_cannot_be_staged_says_to_send_it_again() -> None:
    p = DirectInMemoryParticipant(fail_publish={0}, fail_stage={0})
    with pytest.raises(CommitError, match=r"staging it failed too .*send version 0 again"):
        direct_core(p).write([{"id": 1}], 0)
    assert (p.marker, p.target, p.staged) == (None, {}, {})


def test_a_direct_publish_that_raised_after_landing_is_reported_committed() -> None:
    p = DirectInMemoryParticipant(fail_after_commit={0})
    report = direct_core(p).write([{"id": 1}], 0)
    assert [(r.version, r.outcome) for r in report.results] == [(0, "committed")]
    assert "raised after the commit landed" in (report.results[0].message or "")
    assert (p.marker, p.staged) == (0, {})


def test_invalid_input_to_write_is_refused_before_anything_is_written() -> None:
    p = DirectInMemoryParticipant()
    with pytest.raises(InvalidInputError):
        direct_core(p).write([{"id": None}], 0)
    assert (p.marker, p.target, p.staged, p.direct_calls) == (None, {}, {}, [])


# -- the replay decision is the core's ---------------------------------------------------


class MarkedParticipant(InMemoryParticipant):
    """A participant that, like the real engines, keeps a committed mark beside the
    target's marker and hands both to the core as plain values (``CommitMarks``)."""

    def __init__(self, store: MemoryStore, *, mark: int, intent: int | None) -> None:
        super().__init__(store)
        self.mark, self.intent = mark, intent

    def read_state(self) -> LogState:
        staged = super().read_state().staged
        marks = CommitMarks(self.store.marker, self.mark, self.intent, table="/lake/t")
        return LogState.read(marks, staged)


def test_the_core_decides_the_committed_version_and_refuses_a_lost_marker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine reads marker 1 and mark 3 (the target lost its markers) with an intent
    of 4: the core trusts 3, warns once, and refuses to publish 4 (it may be in the
    target already) without calling the participant; 5 above the intent is published
    after 4 is aborted."""
    caplog.set_level(logging.WARNING, logger="deltasink")
    store = MemoryStore(marker=1)
    participant = MarkedParticipant(store, mark=3, intent=4)
    core = TwoPhaseCommit(participant, APP)
    for version in (2, 3, 4):
        store.staged[version] = ([{"id": version}], datetime.now(timezone.utc))
    assert core.state().committed_version == 3
    assert [s.version for s in core.state().pending] == [4]
    with pytest.raises(CommitError) as info:
        core.commit(4)
    assert isinstance(info.value.__cause__, MarkerLostError)
    assert info.value.__cause__.table == "/lake/t"
    assert participant.publish_calls == []
    assert store.marker == 1
    assert len([m for m in warnings_of(caplog) if "records version 1" in m]) == 1
    assert core.abort(4)
    core.write([{"id": 5}], 5)
    assert store.marker == 5
    assert participant.publish_calls == [5]


def test_a_marker_read_from_history_is_overruled_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``exact=False`` (the spark engine reading the marker from a history that log
    retention truncates): the higher mark wins without a warning, and without an intent
    nothing is refused."""
    caplog.set_level(logging.WARNING, logger="deltasink")
    marks = CommitMarks(None, 7, table="t", exact=False)
    state = LogState.read(marks)
    assert (state.committed_version, state.lost) == (7, None)
    assert MarkGuard(APP).observe(state) is state
    assert warnings_of(caplog) == []
    assert LogState.read(CommitMarks(9, 7)).committed_version == 9
    assert LogState.read(CommitMarks(None, 7, 8)).lost == LostMarker(None, 7, 8)
    assert LogState.read(CommitMarks(5, 7, 8)) == LogState(7, (), {}, LostMarker(5, 7, 8))


class SpecParticipant(InMemoryParticipant):
    """A participant that records the spec its versions are staged with (``recorded``)
    and stages new ones with ``spec``."""

    def __init__(self, recorded: Any, spec: Any) -> None:
        super().__init__()
        self.recorded, self.spec = recorded, spec

    def recorded_spec(self) -> Any:
        return self.recorded

    def spec_for_new_versions(self) -> Any:
        return self.spec


def test_the_core_refuses_a_spec_change_while_versions_are_pending() -> None:
    """One refusal, in the core, for every engine: a participant that reports its specs
    (``SupportsSpecs``) is not asked to stage a version with another spec than the
    pending ones were staged with; ``allow_missing_columns`` alone may change."""
    from deltasink.errors import ConfigurationError
    from deltasink.shapes.spec import MergeSpec

    upsert = MergeSpec(keys=["id"])
    participant = SpecParticipant(upsert, MergeSpec(keys=["id"], mode="insert"))
    core = TwoPhaseCommit(participant, app_id=APP, table="/lake/t")
    core.pre_commit([{"id": 1}], 0)  # nothing pending yet: staged
    with pytest.raises(ConfigurationError, match=r"versions \[0\].*staged with") as caught:
        core.pre_commit([{"id": 2}], 1)
    assert (caught.value.table, caught.value.version) == ("/lake/t", 1)
    assert participant.stage_calls == [0]
    participant.spec = MergeSpec(keys=["id"], allow_missing_columns=True)
    assert core.pre_commit([{"id": 2}], 1).state == "staged"
    assert participant.stage_calls == [0, 1]
