"""Post-commit hooks (Flink's ``SupportsPostCommitTopology``).

Hooks run after a ``commit``/``recover``/``write`` call that committed something, in
the order given. They see a :class:`PostCommit`: the report and the sink. A hook that
raises is logged and skipped: the commit it follows is already durable. Staging
clean-up is built in and always runs first.

    from deltasink import hooks

    sink = DeltaSink(..., post_commit=[
        hooks.optimize_every(50, z_order_by=["customer_id"]),  # compact the target
        hooks.gc_every(500, retention=timedelta(days=7)),    # expire staging files
        lambda done: notify(done.report.committed_versions),  # your own
    ])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from deltasink.core.protocol import CommitReport

if TYPE_CHECKING:
    from deltasink.core.committables import GcResult
    from deltasink.ops.history import HistoryEntry
    from deltasink.status import SinkStatus

__all__ = [
    "OperatedSink",
    "PostCommit",
    "PostCommitHook",
    "gc_every",
    "optimize_every",
    "run_hooks",
]

logger = logging.getLogger("deltasink")


class OperatedSink(Protocol):
    """What a hook may read and run on the sink that committed: the operator side of a
    :class:`~deltasink.sink.DeltaSink` (not that class, which imports this module)."""

    target: str
    app_id: str

    def status(self, *, with_origin: bool = False) -> SinkStatus: ...

    def history(self, limit: int | None = None) -> list[HistoryEntry]: ...

    def gc(self, retention: timedelta | float = ..., *, dry_run: bool = False) -> GcResult: ...

    def optimize(self, *, z_order_by: Sequence[str] = ()) -> None: ...

    def commits_since_optimize(self, limit: int = 1000) -> int: ...


@dataclass(frozen=True)
class PostCommit:
    """What a post-commit hook sees.

    Attributes:
        report: The report of the call that committed.
        sink: The sink (a :class:`~deltasink.sink.DeltaSink`), typed by its operator
            side: its target, app id, ``status()``, ``history()``, ``gc()``,
            ``optimize()``.
    """

    report: CommitReport
    sink: OperatedSink


PostCommitHook = Callable[[PostCommit], None]


def run_hooks(hooks: Sequence[PostCommitHook], done: PostCommit) -> None:
    """Run ``hooks`` in order; log and skip the ones that raise."""
    if not done.report.committed_versions:
        return
    for hook in hooks:
        try:
            hook(done)
        except Exception as exc:
            logger.warning(
                "app %r: post-commit hook %s failed (%s); the commit is durable, the hook "
                "runs again after the next commit",
                done.sink.app_id,
                getattr(hook, "__name__", type(hook).__name__),
                exc,
            )


@dataclass
class optimize_every:
    """Compact the target (OPTIMIZE, optionally Z-ORDER) once ``commits`` deltasink
    commits of this app have landed since the target's last OPTIMIZE.

    The count is read from the target's Delta history, so it survives restarts.
    """

    commits: int
    z_order_by: Sequence[str] = ()

    def __call__(self, done: PostCommit) -> None:
        if done.sink.commits_since_optimize(limit=self.commits) >= self.commits:
            done.sink.optimize(z_order_by=self.z_order_by)


@dataclass
class gc_every:
    """Run :meth:`DeltaSink.gc` every ``commits`` commits of this process."""

    commits: int
    retention: timedelta = timedelta(days=7)
    _seen: int = field(default=0, repr=False)

    def __call__(self, done: PostCommit) -> None:
        self._seen += len(done.report.committed_versions)
        if self._seen >= self.commits:
            self._seen = 0
            done.sink.gc(self.retention)
