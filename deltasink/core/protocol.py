"""The engine-free two-phase-commit core (Flink's ``TwoPhaseCommitSinkFunction``).

The core knows nothing about Spark, Arrow or Delta. It drives a :class:`Participant`
(the *backend port*): something that can report the durable state of one writer
(``read_state``), durably stage a batch (``stage``), publish one staged version into
the target together with its idempotency marker (``publish``), and drop staged data
(``discard``). The core adds the rules that make the whole exactly-once:

* versions are ints ≥ 0, strictly increasing per ``app_id``; a repeated version is a
  no-op (Kafka's idempotent producer), a version lower than a pending one is refused;
* ``commit(n)`` publishes **every** pending version ≤ n in ascending order
  (subsumption of skipped notifications) and stops at the first failure, so version
  ``k + 1`` is never published before version ``k``;
* ``recover()`` publishes everything that is staged and not yet committed;
* the transaction timeout, the warning ratio and ``ignore_failures_after_timeout``
  behave as Flink's, measured on the age of a staged version with an injectable clock.

All state lives in the participant; a :class:`TwoPhaseCommit` may be thrown away and
re-created at any moment (that is what a crash does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, Literal, TypeVar

from deltasink.core.committables import (
    MAX_VERSION,
    CommitReport,
    CommitResult,
    Committable,
    LogState,
    Placement,
    Prepared,
    Progress,
    StagedVersion,
    check_version,
)
from deltasink.core.direct import audit_passes, publish_directly
from deltasink.core.guards import MarkGuard, same_spec, stale
from deltasink.core.interrupts import Interrupted, noted_interrupt
from deltasink.core.participant import (
    DiscardReason,
    Participant,
    SupportsCoalescing,
    SupportsDirectPublish,
    SupportsFencing,
    SupportsQuarantine,
    SupportsSpecs,
)
from deltasink.core.publishing import Phases, PublishRun
from deltasink.core.timeouts import Timeouts
from deltasink.errors import (
    AlreadyCommittedError,
    InvalidVersionError,
)

__all__ = [
    "MAX_VERSION",
    "CommitReport",
    "CommitResult",
    "Committable",
    "DiscardReason",
    "LogState",
    "Participant",
    "Prepared",
    "Progress",
    "StagedVersion",
    "SupportsCoalescing",
    "SupportsDirectPublish",
    "SupportsFencing",
    "SupportsQuarantine",
    "Timeouts",
    "TwoPhaseCommit",
    "check_version",
]

logger = logging.getLogger("deltasink")

B = TypeVar("B")


@dataclass
class TwoPhaseCommit(Generic[B]):
    """Flink's two-phase-commit rules over a :class:`Participant`.

    Args:
        participant: The backend port.
        app_id: The writer's identity (for messages and reports).
        timeouts: Transaction-timeout settings.
        clock: Seconds since the epoch, like :func:`time.time`; injectable for tests.
        coalesce: When several versions are pending and the participant
            :class:`SupportsCoalescing`, publish them in one target commit (up to
            ``coalesce_max_rows`` staged rows per commit). If that commit fails, the
            versions are retried one by one, so a failure still stops at the first
            failing version with the earlier ones committed.
        coalesce_max_rows: Bound on the rows of one coalesced commit (memory).
        on_stale: A version *below* the committed one (not a replay of the last
            version, which is normal after a crash): ``"skip"`` it with a warning
            (default) or ``"raise"`` :class:`AlreadyCommittedError`.
        table: The target, named in the core's errors.
    """

    participant: Participant[B]
    app_id: str
    timeouts: Timeouts = field(default_factory=Timeouts)
    clock: Callable[[], float] = time.time
    coalesce: bool = True
    coalesce_max_rows: int = 2_000_000
    on_stale: Literal["skip", "raise"] = "skip"
    table: str | None = None
    _marks: MarkGuard = field(init=False, repr=False, compare=False)
    _phases: Phases = field(init=False, repr=False, compare=False)
    _publishing: PublishRun[B] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._marks, self._phases = MarkGuard(self.app_id), Phases()
        self._publishing = PublishRun(
            self.participant,
            app_id=self.app_id,
            timeouts=self.timeouts,
            clock=self.clock,
            coalesce=self.coalesce,
            coalesce_max_rows=self.coalesce_max_rows,
            read=self._read,
            phases=self._phases,
        )

    def _read(self) -> LogState:
        """The participant's state, its committed version decided here (from the plain
        values it read), with a warning when the staging mark overrules a lost marker."""
        return self._marks.observe(self.participant.read_state())

    def state(self) -> LogState:
        """The writer's durable state (one read of the participant's logs; the committed
        version decided here)."""
        return self._read()

    def pre_commit(self, batch: B, version: object) -> Committable:
        """Phase one: durably stage ``batch`` as ``version``.

        Idempotent: a version that is already staged, or already committed, stages
        nothing and returns a :class:`Committable` saying so. Safe to call again after a
        crash. Acknowledge source progress only after this returns.

        Raises:
            InvalidVersionError: ``version`` is invalid or lower than a pending version.
            InvalidInputError: The batch is invalid (raised by the participant before
                anything is written).
            AlreadyCommittedError: ``version`` is below the committed version and
                ``on_stale="raise"``.
        """
        v = check_version(version)
        with noted_interrupt(Interrupted("pre_commit", self.app_id, v), self._read):
            return self._pre_commit(batch, v, self._read())

    def _pre_commit(
        self,
        batch: B,
        v: int,
        state: LogState,
        *,
        through: bool = False,
        origin: str | None = None,
        expected_replay: bool = False,
    ) -> Committable:
        """Stage ``batch`` as ``v`` unless ``state`` has it already. ``through``: for
        ``write()``, which publishes it next; a participant that
        :class:`SupportsDirectPublish` then stages it as :class:`Prepared` carrying that
        and ``origin``. ``expected_replay``: a committed ``v`` is a source's normal
        replay (a stream's last batch), without a :class:`ReplayWarning`."""
        if state.is_committed(v):
            stale(
                v,
                state.committed_version,
                on_stale=self.on_stale,
                app_id=self.app_id,
                warn=not expected_replay,
            )
            return Committable(self.app_id, v, 0, None, "already_committed")
        existing = state.find(v)
        if existing is not None:
            if v in state.quarantined and isinstance(self.participant, SupportsQuarantine):
                staged = self.participant.restage(batch, v)
                logger.info("app %r: quarantined version %s re-staged", self.app_id, v)
                return Committable(self.app_id, v, staged.rows, staged.staged_at, "restaged")
            return Committable(self.app_id, v, existing.rows, existing.staged_at, "duplicate")
        pending = state.pending
        if pending and v < pending[-1].version:
            raise InvalidVersionError(
                f"version {v} goes backwards: app {self.app_id!r} already staged version "
                f"{pending[-1].version}. Versions must increase; abort the newer versions "
                f"first if {v} really must be staged again.",
                app_id=self.app_id,
                version=v,
            )
        participant = self.participant
        if isinstance(participant, SupportsSpecs):
            same_spec(participant, state.pending, app_id=self.app_id, table=self.table, version=v)
        if isinstance(participant, SupportsDirectPublish):
            start = time.perf_counter()
            prepared = participant.prepare(batch, v)
            if through:
                prepared = replace(prepared, through=True, origin=origin)
            self._phases.add(v, "validate", time.perf_counter() - start)
            start = time.perf_counter()
            staged = participant.stage_prepared(prepared)
        else:
            start = time.perf_counter()
            staged = participant.stage(batch, v)
        self._phases.add(v, "stage", time.perf_counter() - start)
        return Committable(self.app_id, v, staged.rows, staged.staged_at, "staged")

    def commit(self, up_to: object, *, progress: Progress | None = None) -> CommitReport:
        """Phase two: publish every pending version ≤ ``up_to``, in ascending order.

        A no-op when nothing is pending up to ``up_to``. Replaying a commit changes
        nothing (the participant's marker check). Afterwards the staging data of every
        committed version is removed. A version failing a pre-commit check is
        quarantined and stops the call (outcome ``quarantined``; no exception).
        ``progress`` is called with each result as it happens.

        Raises:
            CommitError: Publishing a version failed. Versions before it stay committed;
                it and every later version stay pending. ``error.report`` tells what
                was committed.
        """
        limit = check_version(up_to, what="up_to")
        with noted_interrupt(Interrupted("commit", self.app_id, limit), self._read):
            return self._publishing.run(limit, recovering=False, progress=progress)

    def write(
        self,
        batch: B,
        version: object,
        *,
        progress: Progress | None = None,
        replays_last_only: bool = False,
        origin: str | None = None,
        place: Callable[[LogState], Placement] | None = None,
    ) -> CommitReport:
        """Both phases for one batch whose source is not acknowledged yet.

        ``replays_last_only``: the versions come from a source that only ever replays
        its *last* version (Spark's ``foreachBatch`` ``batch_id``), so a version below
        the committed one means its checkpoint was reset or belongs to another job:
        :class:`InvalidVersionError`, nothing written (instead of the ``on_stale``
        policy). One read of the participant's state serves this check and the write.

        ``origin``: where the batch came from, encoded (:mod:`deltasink.ops.origin`),
        recorded by its stage commit and by the target commit whose marker is its version
        (both travel to the participant on the :class:`Prepared` batch).

        ``place``: called with that same state before anything else, returns the
        :class:`Placement` to write instead of ``batch``, ``version`` and ``origin`` (a
        stream's micro-batch mapped by the origins the writer's versions recorded,
        :mod:`deltasink.stream.placing`); it may raise to refuse the batch, nothing written.
        A placement that is a ``replay`` of a committed version changes nothing and is
        never a stale version.

        With nothing staged and a participant that :class:`SupportsDirectPublish`, the
        validated batch is published straight into the target (its marker makes a
        retry a no-op) and staged only when needed: a failing check (then quarantined
        as by :meth:`commit`) or a failing publish (then staged for :meth:`recover`,
        and the error raised). Otherwise ``pre_commit`` then ``commit``: pending
        versions ahead of it are published first (coalesced with it when possible).

        Raises:
            As :meth:`pre_commit` and :meth:`commit`. A ``KeyboardInterrupt`` or
            ``SystemExit`` inside carries a note saying what the logs then hold of the
            version (:mod:`deltasink.core.interrupts`).
        """
        v = check_version(version)
        with noted_interrupt(Interrupted("write", self.app_id, v), self._read) as call:
            return self._write(batch, v, progress, replays_last_only, origin, place, call)

    def _write(
        self,
        batch: B,
        v: int,
        progress: Progress | None,
        replays_last_only: bool,
        origin: str | None,
        place: Callable[[LogState], Placement] | None,
        call: Interrupted,
    ) -> CommitReport:
        participant = self.participant
        state = self._read()
        committed = state.committed_version
        if place is not None:
            placement = place(state)
            v, origin, batch = check_version(placement.version), placement.origin, placement.batch
            call.version = v
            if placement.replay and state.is_committed(v):
                return self._publishing.run(v, recovering=False, progress=progress)
        if replays_last_only and committed is not None and v < committed:
            raise InvalidVersionError(
                f"batch {v} is below the committed version {committed} of app {self.app_id!r}: "
                "its source replays only its last batch, so the checkpoint was reset or "
                "belongs to another query. Give the new query its own app_id (or its old "
                "checkpoint).",
                app_id=self.app_id,
                version=v,
            )
        if (
            isinstance(participant, SupportsDirectPublish)
            and not state.staged
            and not state.is_committed(v)
        ):
            start = time.perf_counter()
            prepared = replace(participant.prepare(batch, v), through=True, origin=origin)
            passes = audit_passes(participant, prepared)
            self._phases.add(v, "validate", time.perf_counter() - start)
            if passes:
                result = publish_directly(
                    participant,
                    prepared,
                    state,
                    app_id=self.app_id,
                    clock=self.clock,
                    phases=self._phases.take([v]),
                )
                if progress is not None:
                    progress(result)
                return CommitReport(self.app_id, (result,), v, ())
            start = time.perf_counter()
            participant.stage_prepared(prepared)  # the gate audits again, quarantines
            self._phases.add(v, "stage", time.perf_counter() - start)
            return self._publishing.run(v, recovering=False, progress=progress)
        self._pre_commit(
            batch, v, state, through=True, origin=origin, expected_replay=replays_last_only
        )
        return self._publishing.run(v, recovering=False, progress=progress)

    def recover(self, *, progress: Progress | None = None) -> CommitReport:
        """Publish every staged, uncommitted version (Flink's ``recoverAndCommit``).

        Safe to run at any time and any number of times. With
        ``ignore_failures_after_timeout``, a version that fails and is older than the
        transaction timeout is abandoned and recovery goes on. A participant that
        :class:`SupportsFencing` first claims the writer role, fencing older writers.

        Raises:
            CommitError: As for :meth:`commit`.
            FencedError: A newer writer holds the role (never wrapped in CommitError).
        """
        if isinstance(self.participant, SupportsFencing):
            self.participant.claim()
        return self._publishing.run(None, recovering=True, progress=progress)

    def abort(self, version: object) -> bool:
        """Drop the staged data of ``version`` without committing it.

        Returns:
            ``True`` if the version was staged and is now dropped, ``False`` if it was
            not staged (abort is idempotent).

        Raises:
            AlreadyCommittedError: The version is already committed to the target.
        """
        v = check_version(version)
        state = self._read()
        if state.is_committed(v):
            raise AlreadyCommittedError(
                f"version {v} of app {self.app_id!r} is already committed to the target "
                f"(committed version {state.committed_version}); abort only drops staged, "
                "uncommitted versions.",
                app_id=self.app_id,
                version=v,
            )
        self._phases.take([v])
        if state.find(v) is None:
            return False
        self.participant.discard([v], reason="aborted")
        logger.info("aborted version %s of app %r", v, self.app_id)
        return True

    # -- internals ---------------------------------------------------------------
