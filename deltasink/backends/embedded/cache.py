"""The batches a backend staged itself, kept in memory so that committing them does not
read them back from storage."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

__all__ = ["StagedCache"]

#: How much Arrow data :class:`StagedCache` keeps besides the newest batch: enough for
#: the hundreds of small versions a job pre-commits before one coalesced commit, not
#: enough to matter next to the batches themselves.
DEFAULT_BUDGET = 64 << 20


class StagedCache:
    """Version → the Arrow table this backend staged (or validated and is about to
    publish) as that version, under its writer epoch.

    The newest table is always kept (``write()`` publishes the batch it just
    validated); older ones while all of them fit in ``budget`` bytes, the oldest
    evicted first. An entry is exactly the staged data: the caller drops it when the
    version is committed, discarded or re-staged by someone else (a lost epoch clears
    the cache), so a hit never differs from reading the staging table.
    """

    def __init__(self, budget: int | None = None) -> None:
        self.budget = DEFAULT_BUDGET if budget is None else budget
        self._tables: dict[int, pa.Table] = {}

    def put(self, version: int, table: pa.Table) -> None:
        """Keep ``table`` as ``version`` (replacing an older entry), then evict the
        oldest entries until the others fit in the budget."""
        self._tables.pop(version, None)
        self._tables[version] = table
        size = sum(t.nbytes for t in self._tables.values())
        for old in list(self._tables)[:-1]:
            if size <= self.budget + table.nbytes:
                break
            size -= self._tables.pop(old).nbytes

    def get(self, version: int) -> pa.Table | None:
        """The table kept for ``version``, if any."""
        return self._tables.get(version)

    def drop(self, versions: Iterable[int]) -> None:
        """Forget ``versions`` (committed, discarded or replaced)."""
        for version in versions:
            self._tables.pop(version, None)

    def clear(self) -> None:
        """Forget everything (the writer epoch was lost)."""
        self._tables.clear()

    def __contains__(self, version: object) -> bool:
        return version in self._tables
