"""Group commit: the sinks of one process that publish to one target at the same moment
share one Delta commit, which carries every one's ``txn(app_id, version)`` marker.

Under Delta's optimistic concurrency a table takes one commit at a time, so sinks of one
process that each MERGE on their own mostly wait for each other, and each lost race redoes
a MERGE. Here a sink that finds another sink of the process committing to the same target
queues its version instead; when that commit is done, the first queued sink leads the
next one and carries every queued version that can go with its own (:func:`compatible`):
their batches are folded in queue order as pending versions of one app are
(:func:`~deltasink.core.coalesce.coalesce`: the effect of applying them one by one, in
that order) and committed in one MERGE with all their markers.

What it keeps:

* **Each version in exactly one target commit.** Every marker is checked on the snapshot
  each attempt reads (a version already committed is answered ``already_committed`` and
  left out); two commits that carry a marker of the same app conflict in Delta (delta-rs
  checks concurrent ``txn`` app ids), so the loser re-reads and leaves it out.
* **Every app's versions in order.** A sink publishes one version at a time; a group
  holds at most one request per app.
* **A failure stays with its sink.** A version whose fencing check or constraint check
  fails is taken out of the group with its error; if the group commit itself fails,
  each version is published alone (its marker checked again), so each sink sees the
  error its own commit would have raised.
* **A crash** of the process loses nothing: every version was staged or announced by its
  own sink before it queued, and each sink's recovery replays what its marker lacks.

Nothing is grouped when only one sink publishes at a time: the commit is the one a
sink alone makes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
from deltalake import DeltaTable

from deltasink import _faults
from deltasink.backends.deltalog.tables import txn_version
from deltasink.core import telemetry
from deltasink.core.coalesce import coalesce
from deltasink.core.protocol import CommitResult
from deltasink.input.sql import GUARD_COLUMN
from deltasink.locations import location_key
from deltasink.shapes.spec import MergeSpec


class TargetWriter(Protocol):
    """What a group commit uses of the target's writer (:class:`~.publish.TargetWriter`)."""

    uri: str

    def open(self, *, fresh: bool = True) -> DeltaTable | None: ...

    def apply_alone(
        self,
        data: pa.Table,
        *,
        spec: MergeSpec,
        app_id: str,
        version: int,
        versions: Sequence[int] = (),
        metadata: Mapping[str, Any],
        before_attempt: Callable[[], object] | None = None,
        markers: Mapping[str, int] | None = None,
    ) -> CommitResult: ...


__all__ = ["GROUP_KEY", "Request", "StaleGroup", "compatible", "publish_group", "queue_for"]

#: Commit metadata of a group commit: app id -> the versions it applied, for every app
#: the commit carried besides the one named by ``deltasink.appId``.
GROUP_KEY = "deltasink.group"


class StaleGroup(Exception):
    """A version a group commit carries was found in the target already (committed by
    another process meanwhile): the group is formed again without it."""


@dataclass(eq=False)
class Request:
    """One sink's version waiting to be published (the arguments of
    :meth:`TargetWriter.apply`)."""

    writer: TargetWriter
    data: pa.Table
    spec: MergeSpec
    app_id: str
    version: int
    versions: Sequence[int]
    metadata: Mapping[str, Any]
    before_attempt: Callable[[], object] | None
    recorder: telemetry.Recorder | None = field(default_factory=telemetry.current)
    done: bool = False
    result: CommitResult | None = None
    error: BaseException | None = None

    def finish(
        self, result: CommitResult | None = None, error: BaseException | None = None
    ) -> None:
        self.result, self.error, self.done = result, error, True

    def outcome(self) -> CommitResult:
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def compatible(first: Request, other: Request) -> bool:
    """Whether ``other`` can be folded into one commit with ``first``: the same spec, one
    whose versions may be coalesced, another app, the same columns, and neither batch
    already a coalesced run (its guard column is the fold's own)."""
    return (
        other.app_id != first.app_id
        and other.spec == first.spec
        and first.spec.coalescable
        and len(first.versions) <= 1
        and len(other.versions) <= 1
        and GUARD_COLUMN not in first.data.column_names
        and GUARD_COLUMN not in other.data.column_names
        and (
            first.spec.mode == "append"
            or sorted(first.data.column_names) == sorted(other.data.column_names)
        )
    )


class CommitQueue:
    """The versions the sinks of this process publish to one target, one commit at a time.

    Args:
        limit: The most versions one group commit carries.
    """

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._waiting: list[Request] = []
        self._leading = False
        self._leader: int | None = None

    def submit(self, request: Request) -> CommitResult:
        """Publish ``request``: alone when no other sink of the process is publishing to
        the target, else in the next group commit. Returns its own result or raises its
        own error (see the module's docstring)."""
        with self._cond:
            if self._leading and self._leader == threading.get_ident():
                inner = True  # called from within this thread's own commit (a hook)
            else:
                inner = False
                self._waiting.append(request)
        if inner:
            _alone(request)
            return request.outcome()
        with self._cond:
            try:
                while self._leading and not request.done:
                    self._cond.wait()
            except BaseException:  # interrupted while queued: not published by anyone
                if request in self._waiting:
                    self._waiting.remove(request)
                raise
            if request.done:
                return request.outcome()
            self._leading, self._leader = True, threading.get_ident()
            group = [request]
            for other in list(self._waiting):
                if (
                    other is not request
                    and len(group) < self.limit
                    and compatible(request, other)
                    and all(o.app_id != other.app_id for o in group)
                ):
                    group.append(other)
            for taken in group:
                self._waiting.remove(taken)
        try:
            publish_group(request.writer, group)
        finally:
            with self._cond:
                for taken in group:
                    if not taken.done and taken is not request:
                        self._waiting.insert(0, taken)  # not published: led next
                self._leading = False
                self._cond.notify_all()
        return request.outcome()


_QUEUES: dict[str, CommitQueue] = {}
_QUEUES_LOCK = threading.Lock()


def queue_for(uri: str) -> CommitQueue:
    """The process's commit queue of the target at ``uri``."""
    key = location_key(uri)
    with _QUEUES_LOCK:
        queue = _QUEUES.get(key)
        if queue is None:
            queue = _QUEUES[key] = CommitQueue()
        return queue


def _alone(request: Request) -> None:
    """Publish ``request`` by its own writer, as if no other sink were publishing."""
    with telemetry.current_as(request.recorder):
        try:
            result = request.writer.apply_alone(
                request.data,
                spec=request.spec,
                app_id=request.app_id,
                version=request.version,
                versions=request.versions,
                metadata=request.metadata,
                before_attempt=request.before_attempt,
            )
        except Exception as exc:  # its own error, raised in its own thread
            request.finish(error=exc)
        else:
            request.finish(result)


def _fenced_all(group: Sequence[Request]) -> Callable[[], object]:
    def check() -> None:
        for request in group:
            if request.before_attempt is not None:
                request.before_attempt()

    return check


def publish_group(writer: TargetWriter, group: Sequence[Request]) -> None:
    """Publish every request of ``group`` (the first is the leader's, ``writer`` its
    writer) in one commit; each request is finished with its result or error. Versions
    found committed are answered ``already_committed``; if the group commit fails, the
    rest are published one by one."""
    live = list(group)
    for _ in range(len(group) - 1):  # each pass ends, or leaves out one committed version
        table = writer.open()
        if table is None:  # the first version creates the target: one by one
            break
        waiting = []
        for request in live:
            marker = txn_version(table, request.app_id)
            if marker is not None and marker >= request.version:
                request.finish(
                    CommitResult(request.version, "already_committed", request.data.num_rows)
                )
            else:
                waiting.append(request)
        live = waiting
        if len(live) < 2:
            break
        first, rest = live[0], live[1:]
        _faults.point("group.formed", apps=[r.app_id for r in live])
        data = coalesce([(i, r.data) for i, r in enumerate(live)], first.spec)
        metadata = {
            **first.metadata,
            "deltasink.rows": sum(r.data.num_rows for r in live),
            GROUP_KEY: {r.app_id: [r.version] for r in rest},
        }
        try:
            result = writer.apply_alone(
                data,
                spec=first.spec,
                app_id=first.app_id,
                version=first.version,
                metadata=metadata,
                before_attempt=_fenced_all(live),
                markers={r.app_id: r.version for r in rest},
            )
        except StaleGroup:
            continue  # read again: who is in the target now is left out
        except Exception:
            break  # one by one: each its own outcome or error
        others = ", ".join(f"{r.app_id}@{r.version}" for r in live)
        for request in live:
            if result.outcome == "committed":
                shared = CommitResult(
                    request.version,
                    "committed",
                    rows=request.data.num_rows,
                    target_version=result.target_version,
                    duration_s=result.duration_s,
                    message=f"group commit: one Delta commit carried {others}",
                    telemetry=result.telemetry,
                )
                request.finish(shared)
        if all(r.done for r in live):
            return
        break
    for request in live:
        if not request.done:
            _alone(request)
