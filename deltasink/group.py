"""Multi-table publish: one version, several Delta tables, all or nothing (eventually).

Delta has no multi-table transactions: each table commits on its own. A
:class:`SinkGroup` gives the next best guarantees, the two-phase way:

* **Phase one for all tables first.** ``pre_commit`` stages the version in every
  table; only when all are staged does it return (acknowledge the source then).
* **Phase two only for complete versions.** A version is *complete* when every table
  has it staged or committed; only complete versions are committed, table by table.
* **Recovery finishes or undoes.** After any crash, ``recover()`` commits every
  complete version in every table, and aborts the newest version if it is staged in
  some tables but not all (its group ``pre_commit`` never returned, so the source
  never acknowledged it and will send it again). An incomplete version *below* a
  complete one means the job went on after a failed ``pre_commit``; recovery then
  stops with a :class:`~deltasink.errors.CommitError` for a person to decide.

So after ``recover()`` every table holds a version or none does. Between the per-table
commits a reader may see table A at version v and table B still at v - 1; readers
that need one consistent view use :meth:`SinkGroup.snapshot` (time travel to the
listed Delta versions), or :meth:`SinkGroup.status`'s ``consistent_version``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltasink.core.protocol import CommitReport, Committable, check_version
from deltasink.errors import CommitError, ConfigurationError, InvalidInputError
from deltasink.inputs import Batch
from deltasink.locations import location_key
from deltasink.sink import DeltaSink, SinkStatus

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["GroupReport", "GroupSnapshot", "GroupStatus", "SinkGroup"]

logger = logging.getLogger("deltasink")


@dataclass(frozen=True)
class GroupReport:
    """What a group ``commit``/``recover`` did.

    Attributes:
        reports: Each table's :class:`~deltasink.CommitReport`.
        aborted: Incomplete versions aborted, per table.
    """

    reports: dict[str, CommitReport]
    aborted: dict[str, list[int]]

    @property
    def committed_versions(self) -> dict[str, list[int]]:
        """Versions committed by this call, per table."""
        return {name: r.committed_versions for name, r in self.reports.items()}


@dataclass(frozen=True)
class GroupSnapshot:
    """A consistent view of the group: every table at the same batch version.

    Attributes:
        version: The batch version every table reflects.
        tables: Table name -> the Delta table version to read (``VERSION AS OF``).
    """

    version: int
    tables: dict[str, int]


@dataclass(frozen=True)
class GroupStatus:
    """The state of every table of the group.

    Attributes:
        tables: Each table's :class:`~deltasink.SinkStatus`.
        consistent_version: The highest version committed in every table.
        incomplete_versions: Versions staged in some tables but not all.
    """

    tables: dict[str, SinkStatus]
    consistent_version: int | None
    incomplete_versions: list[int]


class SinkGroup:
    """Publish each version to several tables (e.g. orders, order_lines, customers).

    Args:
        sinks: Table name -> :class:`DeltaSink`, one per target table. The same
            version numbers are used for every table.

    Raises:
        ConfigurationError: No sinks, or two sinks on the same target.
    """

    def __init__(self, sinks: Mapping[str, DeltaSink]) -> None:
        if not sinks:
            raise ConfigurationError("a SinkGroup needs at least one sink.")
        targets = [s.target for s in sinks.values()]
        if len({location_key(t) for t in targets}) != len(targets):
            raise ConfigurationError(f"two sinks of the group share a target: {targets}.")
        self.sinks = dict(sinks)

    def __repr__(self) -> str:
        return f"SinkGroup({sorted(self.sinks)})"

    # -- phase one -------------------------------------------------------------------

    def pre_commit(self, batches: Mapping[str, Batch], version: int) -> dict[str, Committable]:
        """Stage ``version`` in every table; return only when all are staged.

        Args:
            batches: Table name -> batch, one for every table of the group (pass an
                empty batch for a table with no rows in this version).
            version: The version, the same for every table.

        Raises:
            InvalidInputError: ``batches`` does not name exactly the group's tables.
            Anything a table's ``pre_commit`` raises; the tables staged so far stay
            staged and ``recover()`` aborts the incomplete version.
        """
        v = check_version(version)
        if set(batches) != set(self.sinks):
            raise InvalidInputError(
                f"batches name {sorted(batches)} but the group's tables are "
                f"{sorted(self.sinks)}; pass one batch per table (empty if no rows).",
                version=v,
            )
        return {name: sink.pre_commit(batches[name], v) for name, sink in self.sinks.items()}

    # -- phase two -------------------------------------------------------------------

    def commit(self, version: int) -> GroupReport:
        """Commit every complete version ≤ ``version`` in every table.

        A version staged in only some tables is left alone here (its ``pre_commit``
        may still be running elsewhere); ``recover()`` aborts it.
        """
        limit = check_version(version, what="up_to")
        statuses = self._statuses()
        complete = self._complete(statuses)
        upto = max((v for v in complete if v <= limit), default=None)
        if upto is None:
            return GroupReport({n: CommitReport(s.app_id) for n, s in self.sinks.items()}, {})
        blockers = [v for v in self._incomplete(statuses) if v < upto]
        if blockers:
            raise CommitError(
                f"versions {blockers} are staged in some tables only; run recover() to "
                f"abort them before committing up to {upto}.",
                version=blockers[0],
            )
        return GroupReport({n: s.commit(upto) for n, s in self.sinks.items()}, {})

    def write(self, batches: Mapping[str, Batch], version: int) -> GroupReport:
        """``pre_commit(batches, version)`` then ``commit(version)``."""
        self.pre_commit(batches, version)
        return self.commit(version)

    def recover(self) -> GroupReport:
        """Abort incomplete versions, then commit every complete one, everywhere.

        Raises:
            CommitError: A table lacks a version that another table already committed
                (its staging table was removed by hand): a person must look.
        """
        statuses = self._statuses()
        aborted: dict[str, list[int]] = {}
        newest_complete = max(self._complete(statuses), default=None)
        for version in self._incomplete(statuses):
            holders = [n for n, st in statuses.items() if _has(st, version)]
            if newest_complete is not None and version < newest_complete:
                missing = sorted(set(self.sinks) - set(holders))
                raise CommitError(
                    f"version {version} is staged in {holders} but not in {missing}, while "
                    f"the later version {newest_complete} is complete: the job went on "
                    f"after a failed group pre_commit. Either abort version {version} in "
                    f"{holders} (its rows are dropped), or abort the later versions "
                    f"everywhere and re-send {version} and then them, in order; then "
                    "recover().",
                    version=version,
                )
            committed = [n for n in holders if _committed(statuses[n], version)]
            if committed:
                missing = sorted(set(self.sinks) - set(holders))
                raise CommitError(
                    f"version {version} is committed in {committed} but neither staged nor "
                    f"committed in {missing}; their staging data was lost. Re-send "
                    f"version {version} to {missing} with pre_commit, then recover().",
                    version=version,
                )
            for name in holders:
                self.sinks[name].abort(version)
                aborted.setdefault(name, []).append(version)
                logger.warning(
                    "group: version %s was staged in %s but not in every table; aborted it "
                    "in %s (the source sends it again)",
                    version,
                    holders,
                    name,
                )
        reports = {name: sink.recover() for name, sink in self.sinks.items()}
        return GroupReport(reports, aborted)

    # -- reading -----------------------------------------------------------------------

    def status(self) -> GroupStatus:
        """Every table's status, the consistent version and incomplete versions."""
        statuses = self._statuses()
        committed = [st.committed_version for st in statuses.values()]
        consistent = (
            None
            if any(c is None for c in committed)
            else min(c for c in committed if c is not None)
        )
        return GroupStatus(statuses, consistent, self._incomplete(statuses))

    def snapshot(self) -> GroupSnapshot | None:
        """Delta versions at which every table reflects the same batch version.

        The highest batch version that ends a commit in every table's history, up to
        the consistent version; ``None`` if there is none yet.
        """
        ends: dict[str, dict[int, int]] = {
            name: {e.version: e.target_version for e in sink.history()}
            for name, sink in self.sinks.items()
        }
        common = set.intersection(*(set(e) for e in ends.values()))
        if not common:
            return None
        version = max(common)
        return GroupSnapshot(version, {name: e[version] for name, e in ends.items()})

    def ledger(self, spark: SparkSession | None = None) -> DataFrame:
        """Every table's ledger in one Spark DataFrame, with a ``table_name`` column."""
        frames = [
            sink.ledger(spark).selectExpr(f"'{name}' AS table_name", "*")
            for name, sink in self.sinks.items()
        ]
        result = frames[0]
        for frame in frames[1:]:
            result = result.unionByName(frame)
        return result

    # -- internals ---------------------------------------------------------------------

    def _statuses(self) -> dict[str, SinkStatus]:
        return {name: sink.status() for name, sink in self.sinks.items()}

    def _complete(self, statuses: Mapping[str, SinkStatus]) -> list[int]:
        candidates = {v for st in statuses.values() for v in st.pending_versions}
        return sorted(v for v in candidates if all(_has(st, v) for st in statuses.values()))

    def _incomplete(self, statuses: Mapping[str, SinkStatus]) -> list[int]:
        candidates = {v for st in statuses.values() for v in st.pending_versions}
        return sorted(v for v in candidates if not all(_has(st, v) for st in statuses.values()))


def _committed(status: SinkStatus, version: int) -> bool:
    return status.committed_version is not None and version <= status.committed_version


def _has(status: SinkStatus, version: int) -> bool:
    return _committed(status, version) or version in status.pending_versions
