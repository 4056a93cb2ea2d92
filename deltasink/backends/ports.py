"""The two ports an engine offers the facade, as narrow as Flink's ``SinkWriter`` /
``Committer`` split: committing (the protocol's participant) and maintenance.

* :class:`CommitPort`: stage, publish, drop and read state (the protocol core's
  :class:`~deltasink.core.participant.Participant`), claim the writer role, and the two
  facts ``status()`` reports beside the state. Engines add the optional capabilities
  of :mod:`deltasink.core.participant` (coalescing, write-audit-publish).
* :class:`MaintenancePort`: what operators and post-commit hooks run beside the
  writer: history, gc, optimize. Never on the commit path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Protocol

from deltasink.checks import Check
from deltasink.core.committables import GcResult
from deltasink.core.participant import Participant, SupportsFencing
from deltasink.ops.history import HistoryEntry
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec

__all__ = ["CommitPort", "EngineParts", "MaintenancePort", "SinkConfig"]


class CommitPort(Participant[object], SupportsFencing, Protocol):
    """What the facade commits through: the protocol's participant, plus fencing
    (``claim``) and what ``status()`` reads beside the state."""

    #: ``embedded`` or ``spark``.
    name: str

    def refresh(self) -> None:
        """Make the next ``read_state`` read both logs as a new process would, without
        what this process assumes from its own commits (``status()`` and ``offsets()``
        call it: another writer, e.g. plain Delta with this app's ``txnAppId``, may
        have moved the target's marker). The commit path does not need it: each
        target commit reads the marker again in the snapshot it commits on."""
        ...

    def recorded_spec(self) -> MergeSpec | None:
        """The MergeSpec recorded in the staging table, if any (as of the last
        ``read_state``, when there was one: ``status()`` reads each log once)."""
        ...

    def target_exists(self) -> bool:
        """Whether the target table exists yet (as of the last ``read_state``, when
        there was one)."""
        ...

    def staged_origin(self, version: int) -> str | None:
        """The encoded origin (:mod:`deltasink.ops.origin`) staged version ``version``'s
        stage commit recorded, if any."""
        ...


class MaintenancePort(Protocol):
    """Operations beside the writer, never on the commit path."""

    def history(self, limit: int | None) -> list[HistoryEntry]:
        """This writer's commits to the target, newest first."""
        ...

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        """Expire unreferenced staging files and compact the staging log."""
        ...

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """Compact the target's files (OPTIMIZE, Z-ORDER when columns are given)."""
        ...

    def commits_since_optimize(self, limit: int) -> int:
        """This writer's target commits since the last OPTIMIZE, counting up to ``limit``."""
        ...


@dataclass(frozen=True, kw_only=True)
class SinkConfig:
    """What an engine needs to open a writer's tables (validated by the facade)."""

    target: str
    staging: str
    app_id: str
    merge: MergeSpec | None
    max_commit_attempts: int = 8
    storage_options: Mapping[str, str] | None = None
    checks: Sequence[Check] | None = None
    unverifiable_checks: Literal["refuse", "skip"] = "refuse"
    check_samples: bool = False
    table: TableSpec | None = None
    spark: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class EngineParts:
    """An engine opened for one writer: its two ports."""

    commit: CommitPort
    maintenance: MaintenancePort
