"""What each target commit cost, recorded while it runs (engine-free).

The core opens a :class:`Recorder` around every publish (one version, a coalesced run,
a direct publish) and makes it the *current* one (a context variable, so the port's
methods keep their signatures); the engine that makes the commit reports into it:
each attempt (:meth:`Recorder.attempt`), each conflict lost to a concurrent writer and
who won it (:meth:`Recorder.conflict`), the backoff waited, the files and bytes the
commit added and removed. What the call spent before the publish (validating and
staging the batch) is carried in by the core. :meth:`Recorder.metadata` is what the
commit itself records under the ``deltasink`` key of its metadata (so ``DESCRIBE
HISTORY`` and ``deltasink history`` show it); :meth:`Recorder.telemetry` is the whole,
which the core puts on the :class:`~deltasink.core.committables.CommitResult` the write
returns.

Object-store requests: a store instrumentation calls :func:`count_requests` (``verb ->
count``) from wherever it observes them; the counts land on the commit being recorded
in that thread (none is lost when none is: they are then dropped).

``DELTASINK_TELEMETRY=off`` turns the recording into a no-op (nothing in the commit
metadata, no file or byte counts, no OpenTelemetry): the benchmark's baseline.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "PHASES",
    "CommitTelemetry",
    "Conflict",
    "Phase",
    "Recorder",
    "changed",
    "count_requests",
    "current",
    "enabled",
    "metadata",
    "recording",
]

#: The phases a write's time is split into: checking the batch (``validate``), writing
#: it to the staging table (``stage``), the target commit that landed (``publish``),
#: and what conflicts cost (``retry``: the attempts that lost and the backoff waits).
Phase = Literal["validate", "stage", "publish", "retry"]
PHASES: tuple[Phase, ...] = ("validate", "stage", "publish", "retry")


def enabled() -> bool:
    """Whether telemetry is recorded (``DELTASINK_TELEMETRY`` is not ``off``)."""
    return os.environ.get("DELTASINK_TELEMETRY", "").strip().lower() not in ("off", "0", "false")


@dataclass(frozen=True)
class Conflict:
    """One attempt lost to a concurrent commit of the target.

    Attributes:
        attempt: The attempt that lost (1-based).
        winner_version: The target's newest Delta version when the loss was seen: the
            commit that won, or one after it.
        winner_app: The deltasink app id that made that commit, if it was one.
        wait_s: The backoff waited before the next attempt, in seconds.
    """

    attempt: int
    winner_version: int | None = None
    winner_app: str | None = None
    wait_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "attempt": self.attempt,
            "winner_version": self.winner_version,
            "winner_app": self.winner_app,
            "wait_s": round(self.wait_s, 4),
        }


@dataclass(frozen=True)
class CommitTelemetry:
    """What one target commit cost.

    Attributes:
        attempts: Attempts made (1: no conflict).
        conflicts: The attempts lost to concurrent writers, in order.
        phases: Seconds per :data:`PHASES` entry spent by this call on the versions of
            the commit (``validate``/``stage`` only when this call validated or staged
            them; a ``recover()`` of versions staged earlier has neither).
        files_added: Data files the commit added, when known.
        files_removed: Data files the commit removed, when known.
        bytes_added: Bytes of the files added, when known.
        bytes_removed: Bytes of the files removed, when known.
        requests: Object-store requests by verb, when a store instrumentation
            reported them (:func:`count_requests`).
        started_at: When the publish began (seconds since the epoch); it took
            ``publish + retry`` seconds.
    """

    attempts: int = 1
    conflicts: tuple[Conflict, ...] = ()
    phases: Mapping[str, float] = field(default_factory=dict)
    files_added: int | None = None
    files_removed: int | None = None
    bytes_added: int | None = None
    bytes_removed: int | None = None
    requests: Mapping[str, int] = field(default_factory=dict)
    started_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "started_at": self.started_at,
            "attempts": self.attempts,
            "conflicts": [c.to_dict() for c in self.conflicts],
            "phases": {k: round(v, 4) for k, v in self.phases.items()},
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "bytes_added": self.bytes_added,
            "bytes_removed": self.bytes_removed,
            "requests": dict(self.requests),
        }


class Recorder:
    """The telemetry of one target commit while it runs (see the module's docstring).

    Args:
        app_id: The writer.
        versions: The versions the commit applies, ascending.
        phases: Seconds this call already spent on them (``validate``, ``stage``).
    """

    def __init__(
        self, app_id: str, versions: Sequence[int], phases: Mapping[str, float] | None = None
    ) -> None:
        self.app_id = app_id
        self.versions = tuple(versions)
        self.phases: dict[str, float] = dict(phases or {})
        self.attempts = 0
        self.conflicts: list[Conflict] = []
        self.retry_s = 0.0
        self.files: tuple[int | None, int | None, int | None, int | None] = (None,) * 4
        self.requests: Counter[str] = Counter()
        self._started = time.perf_counter()
        self._attempt_started = self._started
        self._wall = time.time()

    def attempt(self) -> int:
        """An attempt starts (the engine calls this at each one); its number."""
        now = time.perf_counter()
        if self.attempts:  # the previous attempt lost: its time counts as retry
            self.retry_s += now - self._attempt_started
        self._attempt_started = now
        self.attempts += 1
        return self.attempts

    def conflict(
        self, *, winner_version: int | None, winner_app: str | None, wait_s: float
    ) -> None:
        """The attempt under way lost to a concurrent commit; ``wait_s`` of backoff
        follow (counted with the attempt's time as retry when the next one starts)."""
        self.conflicts.append(Conflict(self.attempts, winner_version, winner_app, wait_s))

    def changed(
        self,
        files_added: int | None,
        files_removed: int | None,
        bytes_added: int | None = None,
        bytes_removed: int | None = None,
    ) -> None:
        """What the commit that landed added and removed."""
        self.files = (files_added, files_removed, bytes_added, bytes_removed)

    def metadata(self) -> dict[str, Any]:
        """What the commit about to be attempted records under its ``deltasink`` key: the
        app, the versions, this attempt's number, the conflicts lost so far (with their
        winners) and the seconds spent so far, by phase (``publish``: this attempt's,
        not over yet, so absent)."""
        phases = {k: round(v, 4) for k, v in self.phases.items()}
        if self.retry_s:
            phases["retry"] = round(self.retry_s, 4)
        return {
            "app": self.app_id,
            "versions": list(self.versions),
            "attempt": max(1, self.attempts),
            "conflicts": [c.to_dict() for c in self.conflicts],
            "phases": phases,
        }

    def telemetry(self) -> CommitTelemetry:
        """The commit's :class:`CommitTelemetry`, now that it landed."""
        phases = dict(self.phases)
        phases["publish"] = time.perf_counter() - self._started - self.retry_s
        phases["retry"] = self.retry_s
        added, removed, bytes_added, bytes_removed = self.files
        return CommitTelemetry(
            attempts=max(1, self.attempts),
            conflicts=tuple(self.conflicts),
            phases=phases,
            files_added=added,
            files_removed=removed,
            bytes_added=bytes_added,
            bytes_removed=bytes_removed,
            requests=dict(self.requests),
            started_at=self._wall,
        )


_CURRENT: ContextVar[Recorder | None] = ContextVar("deltasink_recorder", default=None)


def current() -> Recorder | None:
    """The recorder of the commit under way in this thread, or ``None`` (telemetry off,
    or called outside a publish)."""
    return _CURRENT.get()


@contextlib.contextmanager
def recording(
    app_id: str, versions: Sequence[int], phases: Mapping[str, float] | None = None
) -> Iterator[Recorder]:
    """Make a new :class:`Recorder` the current one for the block (the core's publish
    steps); a recorder that is never current when telemetry is off."""
    recorder = Recorder(app_id, versions, phases)
    if not enabled():
        yield recorder
        return
    token = _CURRENT.set(recorder)
    try:
        yield recorder
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def current_as(recorder: Recorder | None) -> Iterator[None]:
    """Make ``recorder`` (another thread's, e.g. a queued sink's) the current one for
    the block."""
    token = _CURRENT.set(recorder)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def count_requests(counts: Mapping[str, int]) -> None:
    """Attach object-store requests (``verb -> count``, e.g. ``{"GET": 3, "PUT": 1}``) to
    the commit being recorded in this thread; dropped when none is."""
    recorder = _CURRENT.get()
    if recorder is not None:
        recorder.requests.update(counts)


def metadata() -> dict[str, Any] | None:
    """:meth:`Recorder.metadata` of the commit under way in this thread, if any."""
    recorder = _CURRENT.get()
    return None if recorder is None else recorder.metadata()


def changed(
    files_added: int | None,
    files_removed: int | None,
    bytes_added: int | None = None,
    bytes_removed: int | None = None,
) -> None:
    """:meth:`Recorder.changed` on the commit under way in this thread, if any."""
    recorder = _CURRENT.get()
    if recorder is not None:
        recorder.changed(files_added, files_removed, bytes_added, bytes_removed)
