"""Reading the target table's log with delta-rs, for both engines: the table at its
latest version, whether it exists, its schema and one writer's ``txn`` marker."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import pyarrow as pa
from deltalake import DeltaTable

from deltasink.locations import is_local
from deltasink.ops.history import commit_app, history_from_commits

from .history import commits
from .marker import read_marker
from .tables import arrow_schema, commit_file, recently_latest, refresh, txn_version

__all__ = ["TargetLog"]

#: How many of the target's latest commits :meth:`TargetLog.last_commit_of` reads at most,
#: newest first: enough for any writer's last commit unless thousands of commits of
#: other writers came after it (each commit is one read on an object store).
HISTORY_LIMIT = 4096
#: An add or remove action's own ``size`` (a key inside its escaped ``stats`` text reads
#: ``\"size\"``, a partition value is a quoted string): no JSON parse per commit.
_SIZE = re.compile(r'"size":(\d+)')


def _size(line: str) -> int:
    found = _SIZE.search(line)
    if found is not None:
        return int(found[1])
    action = json.loads(line)  # another layout: read it properly
    return int(next(iter(action.values())).get("size") or 0)


class TargetLog:
    """The target Delta table of a sink, as delta-rs reads it.

    Args:
        uri: Location of the target table.
        storage_options: delta-rs storage options.
    """

    def __init__(self, uri: str, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._options = dict(storage_options or {})
        self._table: DeltaTable | None = None
        self._behind = False  # a marker read saw a newer version than self._table
        self._exists: bool | None = None  # as read last (None: not read yet)
        self._own: int | None = None  # the table version of this process's last commit

    @property
    def storage_options(self) -> dict[str, str]:
        """The delta-rs storage options the table is opened with."""
        return dict(self._options)

    def open(self, *, fresh: bool = True) -> DeltaTable | None:
        """The target at its latest version (``fresh=False``: as read last, for a
        caller that just refreshed it), or ``None`` if it does not exist yet."""
        if not fresh and self._table is not None and not self._behind:
            return self._table
        self._table = refresh(self._table, self.uri, self._options)
        self._behind = False
        self._exists = self._table is not None
        return self._table

    def exists(self) -> bool:
        """Whether the target exists, as read last (read now if it never was)."""
        if self._exists is None:
            self.open()
        return bool(self._exists)

    def committed_version(self, app_id: str) -> int | None:
        """The target's ``txn`` version for ``app_id`` (``None`` if never committed).

        A local target's marker is read from its last checkpoint and the commits after
        it (:func:`~.marker.read_marker`), so the cost does not grow with history; the
        next ``open(fresh=False)`` then refreshes the table if it moved. Elsewhere, or
        where that read cannot tell, through delta-rs: from the table held when it is
        at this process's own last commit (:meth:`note_own_commit`) and was the latest
        less than a minute ago, else after a refresh."""
        if is_local(self.uri):
            read = read_marker(self.uri, app_id)
            if read is not None:
                table = self._table
                self._behind = table is None or table.version() != read.table_version
                self._exists = True
                return read.marker
        table = self._table
        if not (table is not None and table.version() == self._own and recently_latest(table)):
            table = self.open()
        if table is None:
            return None
        return txn_version(table, app_id)

    def marker_at(self, table_version: int, app_id: str) -> int | None:
        """The ``txn`` version of ``app_id`` in the target's snapshot ``table_version``
        (the snapshot a commit read, from its ``readVersion``)."""
        table = DeltaTable(self.uri, version=table_version, storage_options=self._options)
        version: int | None = table.transaction_version(app_id)
        return version

    def note_own_commit(self, table: DeltaTable) -> None:
        """Record that ``table`` is at this process's own commit, the latest version:
        until another commit is seen, a marker read on an object store answers from
        it, without a request (only this writer moves its app's marker; a newer writer
        of the app claims the staging table first, which the next staging read or
        commit sees; the refresh before the next target commit sees any other)."""
        self._table, self._own = table, table.version()

    def forget_own_commit(self) -> None:
        """Stop answering marker reads from this process's own last commit (see
        :meth:`note_own_commit`): the next :meth:`committed_version` reads the log, as a
        new process does. For the operator's reads (``status()``, ``offsets()``): a
        plain Delta writer given this app's ``txnAppId`` moves the marker too."""
        self._own = None

    def last_commit_of(self, app_id: str) -> int | None:
        """The (highest) version of ``app_id``'s newest commit in the target's retained
        history (its commit metadata, not its ``txn`` marker), or ``None`` if the
        history holds none among its latest :data:`HISTORY_LIMIT` commits. Reads the
        newest commits first, one by one (:func:`~.history.commits`: log retention
        beside it cannot fail the read): for deciding whether a publish whose marker is
        missing landed (rare: after a crash, or a lost marker), not on the hot path."""
        table = self.open()
        if table is None:
            return None
        for commit in commits(table, HISTORY_LIMIT):
            entries = history_from_commits([commit], app_id)
            if entries:
                return entries[0].version
        return None

    def newest_commit(self) -> tuple[int | None, str | None]:
        """The target's newest Delta version and the deltasink app id that made it
        (``None`` where not a deltasink commit): after a lost conflict, who won."""
        table = self.open()
        if table is None:
            return None, None
        commits = table.history(1)
        return table.version(), commit_app(commits[0]) if commits else None

    def changes(self, version: int) -> tuple[int, int, int, int] | None:
        """Files and bytes commit ``version`` added and removed, from its log entry:
        ``(files added, files removed, bytes added, bytes removed)``. Local tables only
        (one read of a small file); ``None`` elsewhere (on an object store it would cost
        a request per commit) or when the entry cannot be read."""
        if not is_local(self.uri):
            return None
        added = removed = bytes_added = bytes_removed = 0
        try:
            with open(commit_file(self.uri, version), encoding="utf-8") as log:
                for line in log:  # one action per line; its own "size" key is unescaped
                    if line.startswith('{"add"'):
                        added += 1
                        bytes_added += _size(line)
                    elif line.startswith('{"remove"'):
                        removed += 1
                        bytes_removed += _size(line)
        except (OSError, ValueError, TypeError):
            return None
        return added, removed, bytes_added, bytes_removed

    def schema(self, *, fresh: bool = True) -> pa.Schema | None:
        """The target's Arrow schema, or ``None`` if it does not exist yet."""
        table = self.open(fresh=fresh)
        return None if table is None else arrow_schema(table)
