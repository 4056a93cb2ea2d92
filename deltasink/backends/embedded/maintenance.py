"""The embedded engine's :class:`~deltasink.backends.ports.MaintenancePort`: history,
gc and optimize with delta-rs, beside the writer."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.core.committables import GcResult
from deltasink.ops.history import HistoryEntry, count_since_optimize, history_from_commits

from .gc import StagingGc
from .publish import TargetWriter

__all__ = ["EmbeddedMaintenance", "target_history"]


def target_history(target: TargetWriter, app_id: str, limit: int | None) -> list[HistoryEntry]:
    """``app_id``'s commits to ``target``, newest first, among its ``limit`` latest."""
    table = target.open()
    if table is None:
        return []
    return history_from_commits(table.history(limit), app_id)


class EmbeddedMaintenance:
    """History, gc and optimize of one writer's tables.

    Args:
        target: The target table.
        staging: The staging table's reader.
    """

    def __init__(self, target: TargetWriter, staging: StagingLog) -> None:
        self.target = target
        self.app_id = staging.app_id
        self._gc = StagingGc(staging)

    def history(self, limit: int | None) -> list[HistoryEntry]:
        return target_history(self.target, self.app_id, limit)

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        return self._gc.gc(retention, dry_run=dry_run)

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """Compact the target's small files (Z-ORDER by ``z_order_by`` if given)."""
        table = self.target.open()
        if table is None:
            return
        if z_order_by:
            table.optimize.z_order(list(z_order_by))
        else:
            table.optimize.compact()

    def commits_since_optimize(self, limit: int) -> int:
        """This app's target commits since the target's last OPTIMIZE (counting stops
        at ``limit``)."""
        table = self.target.open()
        if table is None:
            return 0
        return count_since_optimize(table.history(4 * limit + 16), self.app_id, limit)
