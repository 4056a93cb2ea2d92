"""Reading a Delta log's commit history so that log retention beside the reader cannot
break it: commit files are read by number, newest first, from the snapshot the reader
holds, and the history ends where retention has removed the older ones.

delta-rs's ``DeltaTable.history()`` lists ``_delta_log`` and then reads every commit
file the listing named. A ``gc`` or any writer's log clean-up (by age, or the staging
log's trim by count) that deletes old commit files between that listing and those reads
makes the whole call fail ("... .json not found"), and with it whatever needed one
commit's metadata (a writer publishing a version whose origin its stage commit
recorded). Retention deletes oldest first and never anything after the newest
checkpoint, so a reader that starts at its snapshot's version and walks down needs no
listing and no file retention may remove: the first commit file found missing marks
where the retained history ends, and everything older is gone too (or going).

The records are the commits' ``commitInfo`` with ``version`` added, as
``DeltaTable.history()`` returns them; unlike it, a commit without ``commitInfo`` keeps
the versions of the others exact, and commits newer than the snapshot are not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from deltalake import DeltaTable
from deltalake._internal import DeltaFileSystemHandler

from deltasink.locations import is_local, normalize_uri

from .tables import commit_file

__all__ = ["commits", "history"]

#: Commit files read side by side on an object store (one GET each).
_REMOTE_PAGE = 16


def commits(table: DeltaTable, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The ``commitInfo`` of ``table``'s commits, newest first, from the version it
    holds down to the oldest retained one (at most ``limit``), each with its
    ``version``. Lazy: a caller that stops early reads no further commit file.

    A commit file found missing ends the history (log retention removed it, and the
    older ones with it); the files of the snapshot itself are never needed, so a
    clean-up running beside the reader cannot make it fail.
    """
    top = table.version()
    bottom = 0 if limit is None else max(0, top - limit + 1)
    uri = str(table.table_uri)
    if is_local(uri):
        root = normalize_uri(uri)
        for version in range(top, bottom - 1, -1):
            text = _read_local(root, version)
            if text is None:
                return
            info = _commit_info(text, version)
            if info is not None:
                yield info
        return
    store = DeltaFileSystemHandler(uri, dict(getattr(table, "_storage_options", None) or {}))
    with ThreadPoolExecutor(max_workers=_REMOTE_PAGE) as pool:
        version = top
        while version >= bottom:
            page = list(range(version, max(bottom, version - _REMOTE_PAGE + 1) - 1, -1))
            for v, text in zip(page, pool.map(lambda n: _read_remote(store, n), page), strict=True):
                if text is None:
                    return
                info = _commit_info(text, v)
                if info is not None:
                    yield info
            version = page[-1] - 1


def history(table: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
    """:func:`commits` as a list (``DeltaTable.history(limit)``'s records)."""
    return list(commits(table, limit))


def _read_local(root: str, version: int) -> str | None:
    try:
        with open(commit_file(root, version), encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _read_remote(store: DeltaFileSystemHandler, version: int) -> str | None:
    try:
        stream = store.open_input_file(f"_delta_log/{version:020d}.json")
        return str(stream.read(stream.size()).decode("utf-8"))
    except FileNotFoundError:
        return None


def _commit_info(text: str, version: int) -> dict[str, Any] | None:
    """The ``commitInfo`` of one commit file's text, with its ``version``."""
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        info = action.get("commitInfo")
        if isinstance(info, dict):
            return {**info, "version": version}
    return None
