"""The values of the two-phase commit: what is staged, what a commit did, and the
handle ``pre_commit`` returns. Engine-free, frozen, and safe to keep."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple

from deltasink.core.telemetry import CommitTelemetry
from deltasink.errors import InvalidVersionError

__all__ = [
    "MAX_VERSION",
    "CommitMarks",
    "CommitReport",
    "CommitResult",
    "Committable",
    "CommittableState",
    "Committed",
    "GcResult",
    "LogState",
    "LostMarker",
    "Outcome",
    "Placement",
    "Prepared",
    "Progress",
    "StagedVersion",
    "check_version",
    "decide_committed",
]

#: Largest version accepted: one below the largest Delta ``txnVersion`` (a signed
#: 64-bit long), so every accepted version ``v`` has a successor ``v + 1`` that a Delta
#: log, Spark's ``txnVersion`` option and a job's ``last + 1`` can still hold. A version
#: committed is the writer's floor for ever (later versions at or below it are replays):
#: a version near this bound, e.g. a ``Long.MAX_VALUE`` sentinel, ends the app id.
MAX_VERSION = 2**63 - 2


@dataclass(frozen=True)
class StagedVersion:
    """One pre-committed version as recorded by the participant.

    Attributes:
        version: The batch version (Delta ``txnVersion``).
        rows: Number of staged rows.
        staged_at: When the version was staged (timezone-aware, UTC).
    """

    version: int
    rows: int
    staged_at: datetime


@dataclass(frozen=True)
class Prepared:
    """A batch validated for ``version`` and not written anywhere yet (direct publish).

    Attributes:
        version: The batch version.
        rows: Number of rows.
        payload: The engine's form of the validated batch (opaque to the core).
        through: Prepared by ``write()``, which publishes it in the same call: its
            stage commit, if it is staged, records the publish intent too.
        origin: Where the batch came from, encoded (:mod:`deltasink.ops.origin`): its
            stage commit and the target commit whose marker is ``version`` record it.
    """

    version: int
    rows: int
    payload: Any = field(compare=False, repr=False)
    through: bool = False
    origin: str | None = None


@dataclass(frozen=True)
class Placement:
    """Where ``write()`` puts a batch whose version is decided from the state it read
    (a stream's micro-batch, :mod:`deltasink.stream.placing`).

    Attributes:
        version: The version to write.
        origin: Its origin, encoded (:mod:`deltasink.ops.origin`).
        batch: The batch to write (the one given, or it without rows to leave out).
        replay: ``version`` already holds this very batch: a committed one is a silent
            no-op (not a stale version), a pending one is published.
    """

    version: int
    origin: str | None
    batch: Any = field(repr=False)
    replay: bool = False


class LostMarker(NamedTuple):
    """The target's ``txn`` marker found below the staging table's committed mark (the
    target was rebuilt or its markers expired), with the publish intent that bounds the
    versions which may already be in the target."""

    #: The target's marker for the app (``None``: none).
    marker: int | None
    #: The committed mark the staging table recorded.
    mark: int
    #: The highest version whose target commit was attempted.
    intent: int


class CommitMarks(NamedTuple):
    """What a participant read about its committed version, not yet decided: plain
    values the core decides on (:meth:`LogState.read`, :func:`decide_committed`)."""

    #: The target's ``txn`` version for the app (``None``: none).
    marker: int | None
    #: The committed mark the staging table recorded (``None``: none, or not kept).
    mark: int | None = None
    #: The highest publish intent of another process without a recorded outcome
    #: (``None``: none, or the engine keeps no intents).
    intent: int | None = None
    #: The target, for messages.
    table: str | None = None
    #: Whether ``marker`` is the target's ``txn`` action itself. ``False``: it was read
    #: from a history that may be truncated (``DESCRIBE HISTORY``), so a higher ``mark``
    #: is trusted without a warning.
    exact: bool = True


class Committed(NamedTuple):
    """The committed version to trust, and the lost marker it was decided over."""

    version: int | None
    lost: LostMarker | None = None


def decide_committed(marker: int | None, mark: int | None, intent: int | None) -> Committed:
    """The committed version to trust: the higher of the target's ``txn`` ``marker`` and
    the staging table's committed ``mark``.

    A ``mark`` above the marker also makes staged versions above the mark ambiguous: the
    clean-up that advances the mark runs *after* a target commit, so such a version may
    have been committed to the target before it lost its marker. The staging table's
    publish ``intent`` (recorded before each target commit) bounds them: the result's
    ``lost`` names them for :func:`deltasink.core.guards.check_publish`. Without an
    intent record (``None``: an engine that does not keep one) nothing is refused."""
    if mark is None or (marker is not None and marker >= mark):
        return Committed(marker)
    return Committed(mark, None if intent is None else LostMarker(marker, mark, intent))


@dataclass(frozen=True)
class LogState:
    """The durable state of one writer, as derived from the participant's logs.

    Attributes:
        committed_version: The target's committed version for the app, or ``None``.
        staged: Every version still present in staging, ascending. Versions ≤
            ``committed_version`` are committed but not yet cleaned up.
        quarantined: Staged versions that failed a pre-commit check, with the reason;
            they and every later version wait until they are aborted or re-staged.
        lost: Set when the committed version was decided over a lost target marker
            (:func:`decide_committed`): the versions a publish must then refuse
            (:func:`deltasink.core.guards.check_publish`, called by the core).
        marks: What the committed version was decided from (:meth:`read`); ``None``
            for a state made with its committed version given.
    """

    committed_version: int | None
    staged: tuple[StagedVersion, ...] = ()
    quarantined: Mapping[int, str] = field(default_factory=dict)
    lost: LostMarker | None = None
    marks: CommitMarks | None = field(default=None, compare=False)

    @classmethod
    def read(
        cls,
        marks: CommitMarks,
        staged: tuple[StagedVersion, ...] = (),
        quarantined: Mapping[int, str] | None = None,
    ) -> LogState:
        """The state of what a participant read: its committed version decided by the
        core from ``marks`` (:func:`decide_committed`), never by the engine."""
        decided = decide_committed(marks.marker, marks.mark, marks.intent)
        return cls(decided.version, staged, dict(quarantined or {}), decided.lost, marks)

    @property
    def pending(self) -> tuple[StagedVersion, ...]:
        """Staged versions greater than the committed one, ascending."""
        return tuple(s for s in self.staged if not self.is_committed(s.version))

    @property
    def leftovers(self) -> tuple[StagedVersion, ...]:
        """Staged versions that are already committed (their staging data is garbage)."""
        return tuple(s for s in self.staged if self.is_committed(s.version))

    def is_committed(self, version: int) -> bool:
        """Whether the target's marker covers ``version``."""
        return self.committed_version is not None and version <= self.committed_version

    def pending_before(self, version: int) -> list[int]:
        """The pending versions below ``version``, ascending."""
        return [s.version for s in self.pending if s.version < version]

    def find(self, version: int) -> StagedVersion | None:
        """The staged entry for ``version``, if any."""
        return next((s for s in self.staged if s.version == version), None)


Outcome = Literal["committed", "already_committed", "abandoned", "quarantined"]


@dataclass(frozen=True)
class CommitResult:
    """What happened to one version (or one coalesced run of versions) during
    ``commit`` or ``recover``.

    These are values the caller can branch on (Flink's ``CommitRequest`` signals):
    ``committed`` (applied now), ``already_committed`` (a replay; nothing changed),
    ``abandoned`` (given up after the transaction timeout; its rows were not applied),
    ``quarantined`` (a pre-commit check failed: the version stays staged, is not
    applied, and later versions wait behind it until it is aborted or re-staged).

    Attributes:
        version: The batch version.
        outcome: See above.
        rows: Rows the staged version held.
        target_version: The target's Delta table version holding the commit, if known.
        rows_inserted: Target rows inserted, when the engine reports it.
        rows_updated: Target rows updated, when the engine reports it.
        rows_deleted: Target rows deleted, when the engine reports it.
        duration_s: Wall time of the publish step, in seconds.
        message: Why a version was abandoned, or other detail.
        versions: Every version this one target commit applied, ascending, when
            several pending versions were coalesced into it (``version`` is the
            highest); empty for a single version.
        telemetry: What the commit cost: attempts, conflicts and who won them, time
            by phase, files and bytes (:class:`~deltasink.core.telemetry.CommitTelemetry`).
    """

    version: int
    outcome: Outcome
    rows: int = 0
    target_version: int | None = None
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    duration_s: float = 0.0
    message: str | None = None
    versions: tuple[int, ...] = ()
    telemetry: CommitTelemetry = field(default_factory=CommitTelemetry, compare=False)

    @property
    def all_versions(self) -> tuple[int, ...]:
        """The versions this result covers (``versions``, or just ``version``)."""
        return self.versions or (self.version,)


@dataclass(frozen=True)
class CommitReport:
    """The result of one ``commit(n)`` or ``recover()`` call.

    Attributes:
        app_id: The writer.
        results: One entry per version handled, in the order handled.
        committed_version: The target's committed version after the call.
        cleaned_versions: Committed versions whose staging data was removed.
        pending_versions: Versions still staged and not committed after the call.
        lag_s: Age in seconds of the oldest of them (how far the target is behind
            what was accepted), ``None`` when nothing is pending.
    """

    app_id: str
    results: tuple[CommitResult, ...] = ()
    committed_version: int | None = None
    cleaned_versions: tuple[int, ...] = ()
    pending_versions: tuple[int, ...] = field(default=(), compare=False)
    lag_s: float | None = field(default=None, compare=False)

    @property
    def committed_versions(self) -> list[int]:
        """Versions applied to the target by this call (coalesced ones included)."""
        return [v for r in self.results if r.outcome == "committed" for v in r.all_versions]

    @property
    def abandoned_versions(self) -> list[int]:
        """Versions given up after the transaction timeout."""
        return [r.version for r in self.results if r.outcome == "abandoned"]

    @property
    def quarantined_versions(self) -> list[int]:
        """The quarantined version that stopped this call (at most one)."""
        return [r.version for r in self.results if r.outcome == "quarantined"]


#: Called with each :class:`CommitResult` as it happens. An object that also has a
#: ``starting(staged)`` method is told before each target commit which staged versions
#: it applies (a long coalesced commit shows what it is doing: ``deltasink recover``).
Progress = Callable[[CommitResult], None]

CommittableState = Literal["staged", "restaged", "duplicate", "already_committed"]


@dataclass(frozen=True)
class Committable:
    """The handle ``pre_commit`` returns: a durably staged version (Flink's committable).

    Attributes:
        app_id: The writer.
        version: The staged version.
        rows: Rows staged for it (0 when nothing was staged now).
        staged_at: When it was staged, or ``None`` when nothing is staged.
        state: ``"staged"`` (staged by this call), ``"restaged"`` (it was quarantined
            and this call replaced its staged data), ``"duplicate"`` (it was already
            staged: nothing written), ``"already_committed"`` (it is already in the
            target: nothing written).
    """

    app_id: str
    version: int
    rows: int
    staged_at: datetime | None
    state: CommittableState


def check_version(version: object, *, what: str = "version") -> int:
    """Return ``version`` as an int, or raise :class:`InvalidVersionError`.

    Args:
        version: The candidate; ints (and integral numbers such as NumPy ints) are
            accepted, bools and everything else are not.
        what: The argument's name, for the message.

    Raises:
        InvalidVersionError: Not an integer, negative, or above :data:`MAX_VERSION`
            (``2**63 - 2``).
    """
    if isinstance(version, bool) or not isinstance(version, numbers.Integral):
        raise InvalidVersionError(
            f"{what} must be an int ≥ 0 (a foreachBatch batch_id, a run number or a "
            f"yyyymmdd date), got {version!r} of type {type(version).__name__}."
        )
    value = int(version)
    if not 0 <= value <= MAX_VERSION:
        raise InvalidVersionError(
            f"{what} must be between 0 and {MAX_VERSION}, got {value}.", version=value
        )
    return value


@dataclass(frozen=True)
class GcResult:
    """What ``gc`` removed (or would remove, on a dry run).

    Attributes:
        files: Data files no longer referenced by the staging snapshot that were
            older than the retention: committed, aborted and abandoned versions, and
            orphans of failed stagings.
        dry_run: Whether nothing was actually deleted.
    """

    files: tuple[str, ...]
    dry_run: bool
