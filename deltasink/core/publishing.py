"""The publishing run of the two-phase-commit core: the pending versions published in
ascending order, grouped for coalescing, each one's failure handled (stop, a publish
that landed despite an error, abandonment past the transaction timeout), then the
staging data of committed versions cleaned up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from deltasink import _faults
from deltasink.core.committables import (
    CommitReport,
    CommitResult,
    LogState,
    Progress,
    StagedVersion,
)
from deltasink.core.direct import landed_despite
from deltasink.core.gate import audit_group
from deltasink.core.guards import check_publish
from deltasink.core.participant import (
    Participant,
    SupportsCoalescing,
)
from deltasink.core.telemetry import recording
from deltasink.core.timeouts import Timeouts
from deltasink.errors import (
    CommitError,
    DeltaSinkError,
    FencedError,
)

__all__ = ["Phases", "PublishRun"]

logger = logging.getLogger("deltasink")

B = TypeVar("B")


class Phases:
    """Seconds spent validating and staging each version not yet published, carried
    into the telemetry of the commit that publishes it (its own state: the core records,
    the publishing run takes)."""

    def __init__(self) -> None:
        self._spent: dict[int, dict[str, float]] = {}

    def add(self, version: int, phase: str, seconds: float) -> None:
        """Record ``seconds`` of ``phase`` (``validate``, ``stage``) spent on ``version``."""
        spent = self._spent.setdefault(version, {})
        spent[phase] = spent.get(phase, 0.0) + seconds

    def take(self, versions: Iterable[int]) -> dict[str, float]:
        """The seconds recorded for ``versions``, by phase (forgotten now)."""
        total: dict[str, float] = {}
        for version in versions:
            for phase, seconds in self._spent.pop(version, {}).items():
                total[phase] = total.get(phase, 0.0) + seconds
        return total


class PublishRun(Generic[B]):
    """The run behind :meth:`TwoPhaseCommit.commit` and :meth:`TwoPhaseCommit.recover`:
    a part of :class:`~deltasink.core.protocol.TwoPhaseCommit`, given what it needs.

    Args:
        participant: The backend port.
        app_id: The writer (for messages and reports).
        timeouts: The transaction-timeout settings (warnings, abandonment).
        clock: Seconds since the epoch.
        coalesce: Publish runs of pending versions in one commit when the participant
            :class:`SupportsCoalescing`.
        coalesce_max_rows: Bound on the rows of one coalesced commit.
        read: The writer's state with its committed version decided (the core's read).
        phases: The seconds spent on each version before its publish.
    """

    def __init__(
        self,
        participant: Participant[B],
        *,
        app_id: str,
        timeouts: Timeouts,
        clock: Callable[[], float],
        coalesce: bool,
        coalesce_max_rows: int,
        read: Callable[[], LogState],
        phases: Phases,
    ) -> None:
        self.participant = participant
        self.app_id = app_id
        self.timeouts = timeouts
        self.clock = clock
        self.coalesce = coalesce
        self.coalesce_max_rows = coalesce_max_rows
        self._read = read
        self._phases = phases

    def run(
        self, limit: int | None, *, recovering: bool, progress: Progress | None = None
    ) -> CommitReport:
        """Publish the pending versions up to ``limit`` (all: ``None``) in ascending
        order, stopping at the first failure, then clean up; the report of it all."""
        state = self._read()
        self.timeouts.warn_if_old(self.app_id, state.pending, self.clock())
        todo = [s for s in state.pending if limit is None or s.version <= limit]
        results: list[CommitResult] = []

        def record(result: CommitResult) -> None:
            results.append(result)
            if progress is not None:
                progress(result)

        # A progress callable may also be told when a commit starts (``starting``).
        starting = getattr(progress, "starting", None)
        committed = state.committed_version
        for group in self._groups(todo):
            passing, stopped = audit_group(self.participant, group, state, self.app_id)
            if len(passing) > 1:
                if starting is not None:
                    starting(passing)
                coalesced = self._try_coalesced(passing, state)
                if coalesced is not None:
                    record(coalesced)
                    committed = passing[-1].version
                    passing = []
            for staged in passing:
                if starting is not None:
                    starting([staged])
                result = self._publish_one(staged, recovering, results, committed, state)
                record(result)
                if result.outcome != "abandoned":
                    committed = staged.version
            if stopped is not None:
                record(stopped)
                break
        cleaned = self._clean(state, committed, results)
        abandoned = {r.version for r in results if r.outcome == "abandoned"}
        waiting = [
            s
            for s in state.pending
            if (committed is None or s.version > committed) and s.version not in abandoned
        ]
        lag = self.clock() - waiting[0].staged_at.timestamp() if waiting else None
        pending = tuple(s.version for s in waiting)
        return CommitReport(self.app_id, tuple(results), committed, cleaned, pending, lag)

    def _groups(self, todo: Sequence[StagedVersion]) -> list[list[StagedVersion]]:
        """Runs of versions to publish together (singletons unless coalescing)."""
        if not (
            self.coalesce
            and len(todo) > 1
            and isinstance(self.participant, SupportsCoalescing)
            and self.participant.can_coalesce()
        ):
            return [[s] for s in todo]
        groups: list[list[StagedVersion]] = []
        rows = 0
        for staged in todo:
            if groups and rows + staged.rows <= self.coalesce_max_rows:
                groups[-1].append(staged)
                rows += staged.rows
            else:
                groups.append([staged])
                rows = staged.rows
        return groups

    def _try_coalesced(
        self, group: Sequence[StagedVersion], state: LogState
    ) -> CommitResult | None:
        """One commit for ``group``; ``None`` (after logging) if it failed, so the
        caller falls back to one version at a time."""
        assert isinstance(self.participant, SupportsCoalescing)
        try:
            _faults.point("commit.before_publish", versions=[s.version for s in group])
            check_publish(state, group[0].version, app_id=self.app_id)
            versions = [s.version for s in group]
            with recording(self.app_id, versions, self._phases.take(versions)) as recorder:
                result = self.participant.publish_many(group)
            result = replace(result, telemetry=recorder.telemetry())
        except FencedError:
            raise
        except Exception as exc:
            logger.info(
                "app %r: coalesced commit of versions %s failed (%s); committing them one by one",
                self.app_id,
                [s.version for s in group],
                exc,
            )
            return None
        _faults.point("commit.after_publish", versions=list(result.all_versions))
        return result

    def _publish_one(
        self,
        staged: StagedVersion,
        recovering: bool,
        results: Sequence[CommitResult],
        committed: int | None,
        state: LogState,
    ) -> CommitResult:
        try:
            _faults.point("commit.before_publish", versions=[staged.version])
            check_publish(state, staged.version, app_id=self.app_id)
            spent = self._phases.take([staged.version])
            with recording(self.app_id, [staged.version], spent) as recorder:
                result = self.participant.publish(staged)
            result = replace(result, telemetry=recorder.telemetry())
        except FencedError:
            raise  # another writer owns the app now: stop, do not retry or abandon
        except Exception as exc:
            landed = landed_despite(self._read, staged, exc, self.app_id)
            if landed is not None:
                result = landed
            elif (
                recovering
                and self.timeouts.ignore_failures_after_timeout
                and self.timeouts.timed_out(staged, self.clock())
            ):
                return self._abandon(staged, exc, results, committed)
            else:
                report = CommitReport(self.app_id, tuple(results), committed)
                self._clean(state, committed, results)
                raise CommitError(
                    f"committing version {staged.version} of app {self.app_id!r} failed: "
                    f"{str(exc).rstrip('.')}. Committed before it: {report.committed_versions or 'none'}; "
                    f"version {staged.version} and later stay staged. Fix the cause and "
                    "run recover() (or `deltasink recover`).",
                    report=report,
                    table=exc.table if isinstance(exc, DeltaSinkError) else None,
                    app_id=self.app_id,
                    version=staged.version,
                ) from exc
        _faults.point("commit.after_publish", versions=[staged.version])
        return result

    def _clean(
        self, state: LogState, committed: int | None, results: Sequence[CommitResult]
    ) -> tuple[int, ...]:
        """Post-commit clean-up of committed versions' staging data. A failure here is
        logged, never raised (the next commit or recover retries it)."""
        if committed is None:
            return ()
        abandoned = {r.version for r in results if r.outcome == "abandoned"}
        garbage = tuple(
            s.version for s in state.staged if s.version <= committed and s.version not in abandoned
        )
        if not garbage:
            return ()
        try:
            self.participant.discard(garbage, reason="committed")
        except Exception as exc:
            logger.warning(
                "app %r: removing the staging data of committed versions %s failed (%s); "
                "it is retried by the next commit or recover",
                self.app_id,
                list(garbage),
                exc,
            )
            return ()
        return garbage

    def _abandon(
        self,
        staged: StagedVersion,
        exc: Exception,
        results: Sequence[CommitResult],
        committed: int | None,
    ) -> CommitResult:
        age = self.timeouts.age(staged, self.clock())
        message = (
            f"version {staged.version} of app {self.app_id!r} failed to commit ({exc}) and is "
            f"{age:.1f} s old, past the transaction timeout; ignore_failures_after_timeout "
            f"is set, so it is abandoned: its {staged.rows} staged rows are dropped and "
            "never reach the target"
        )
        logger.warning(message)
        try:
            self.participant.discard([staged.version], reason="abandoned")
        except Exception as discard_exc:
            raise CommitError(
                f"version {staged.version} of app {self.app_id!r} timed out and was to be "
                f"abandoned, but dropping its staged data failed: {discard_exc}. It stays "
                "staged; run recover() again.",
                report=CommitReport(self.app_id, tuple(results), committed),
                app_id=self.app_id,
                version=staged.version,
            ) from discard_exc
        return CommitResult(staged.version, "abandoned", rows=staged.rows, message=message)
