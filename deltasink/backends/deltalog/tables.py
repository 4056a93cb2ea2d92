"""Opening and reading Delta tables with delta-rs, for both engines: a table opened
safely (a damaged or half-written log told apart), refreshed, its schema, and one
writer's ``txn`` version read once per table version."""

from __future__ import annotations

import contextvars
import json
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
from deltalake import DeltaTable
from deltalake._internal import DeltaFileSystemHandler
from deltalake.exceptions import DeltaError, TableNotFoundError

from deltasink.errors import NotADeltaTableError, StorageError
from deltasink.failures import plain, storage_failure
from deltasink.locations import is_local, normalize_uri
from deltasink.reserved import attribute

from .damage import checked, unreadable_log

__all__ = [
    "arrow_schema",
    "begin",
    "commit_file",
    "mark_latest",
    "note_commit",
    "open_table",
    "plain",
    "recently_latest",
    "refresh",
    "together",
]

# What this module caches on a DeltaTable it opened (plain attributes of the object).
_LATEST_AT = attribute("latest_at")  # when it was last brought up to date (monotonic)
_STORE = attribute("store")  # its object-store handler
_TXNS = attribute("txns")  # txn markers read, by (log version, app id)
_COMMITS = attribute("commits")  # commit texts read, by log version
_PROBE = attribute("probe")  # (first version, handler) probing commit files


def _has_commits(uri: str) -> bool:
    """For a local table: does its ``_delta_log`` hold any commit or checkpoint?"""
    with os.scandir(os.path.join(uri, "_delta_log")) as entries:
        return any(e.name.endswith((".json", ".checkpoint.parquet")) for e in entries)


#: A table another writer is creating looks, for a moment, like a data directory without
#: a log, or a log whose first commit is not readable yet: wait this long (seconds, in
#: doubling steps) for it to settle before calling it broken.
SETTLE_S = 1.5


class _Unsettled(Exception):
    def __init__(self, error: Exception) -> None:
        self.error = error


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """Open the Delta table at ``uri``; ``None`` when nothing is there yet.

    A location whose ``_delta_log`` holds no commit yet (a writer died while creating
    the table) counts as "nothing there yet": the next write creates it. A location that
    looks broken is looked at again for up to :data:`SETTLE_S` seconds first (another
    writer may be creating the table right now).

    Raises:
        NotADeltaTableError: ``uri`` is a local file, or a directory with files but
            no Delta log.
        StorageError: The Delta log exists but cannot be read (corrupt, torn, missing
            commits).
    """
    delay, waited = 0.05, 0.0
    while True:
        try:
            return _open_once(uri, storage_options)
        except _Unsettled as unsettled:
            if waited >= SETTLE_S:
                raise unsettled.error from None
        time.sleep(delay)
        waited += delay
        delay *= 2


def _open_once(uri: str, storage_options: Mapping[str, str] | None) -> DeltaTable | None:
    local = is_local(uri)
    if local and os.path.isfile(uri):
        raise NotADeltaTableError(
            f"{uri} is not a Delta table (it is a file). Point the sink at a Delta table "
            "directory or a new location.",
            table=uri,
        )
    try:
        table = DeltaTable(uri, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        if not (local and os.path.isdir(uri)):
            return None
        entries = sorted(os.listdir(uri))
        if "_delta_log" in entries:
            if not _has_commits(uri):
                return None  # half-created: no commit reached the log
            raise _Unsettled(
                StorageError(
                    f"the Delta log of {uri} cannot be read (commit files are missing). "
                    "Restore its _delta_log from a backup.",
                    table=uri,
                )
            ) from None
        if entries:
            raise _Unsettled(
                NotADeltaTableError(
                    f"{uri} exists but is not a Delta table (no _delta_log; it holds "
                    f"{entries[:5]}). Point the sink at a Delta table or a new location, "
                    "or convert the data first (deltalake.convert_to_deltalake).",
                    table=uri,
                )
            ) from None
        return None
    except OSError as exc:  # the object store's words: access, network, outage
        raise storage_failure(exc, uri) from exc
    except DeltaError as exc:
        error = StorageError(unreadable_log(uri, exc), table=uri)
        if _checkpoint_gone(exc):
            # A log clean-up (gc, retention) removed the checkpoint _last_checkpoint
            # named between delta-rs's two reads: the next read finds the newer one.
            raise _Unsettled(error) from exc
        raise error from exc
    mark_latest(table)
    return checked(table, uri)


def _checkpoint_gone(exc: DeltaError) -> bool:
    text = str(exc)
    return ".checkpoint" in text and "not found" in text.lower()


def refresh(
    table: DeltaTable | None, uri: str, storage_options: Mapping[str, str] | None
) -> DeltaTable | None:
    """``table`` brought to the latest version, or the table re-opened from scratch
    (``None`` if it is gone) when its log moved under it (dropped, recreated).

    A table whose next commit file does not exist is returned as it is: Delta numbers
    commits without gaps, so nothing was committed after ``table``'s version. On a local
    filesystem that is one ``stat`` (and one more that ``table``'s own commit file is
    still there) instead of delta-rs's listing of the whole ``_delta_log``; on an object
    store one read of that file's first byte (:func:`_exists`) instead of delta-rs's
    ``LIST`` and ``_last_checkpoint`` ``GET``, for a snapshot known to have been the latest less than
    :data:`FRESH_S` seconds ago (so no log clean-up can have removed the next commit
    file since: a staging log keeps ten minutes). So a writer that made the last commit
    itself refreshes at a cost independent of the table's history."""
    if table is None:
        return open_table(uri, storage_options)
    version = table.version()
    if is_local(uri):
        if not os.path.exists(commit_file(uri, version)):
            return open_table(uri, storage_options)  # dropped (and maybe recreated) meanwhile
        if not os.path.exists(commit_file(uri, version + 1)):
            # Commits are numbered without gaps: no commit after ``version`` exists, so
            # ``table`` is up to date (delta-rs would list the whole log to find that).
            return table
    elif recently_latest(table) and not _exists(table, version + 1):
        mark_latest(table)
        return table
    try:
        table.update_incremental()
    except DeltaError:
        return open_table(uri, storage_options)
    mark_latest(table)
    return table


#: How long (seconds) after a snapshot was known to be the latest a probe of its next
#: commit file may stand in for a listing of an object store's log (:func:`refresh`).
FRESH_S = 60.0


def mark_latest(table: DeltaTable) -> None:
    """Record that ``table``'s snapshot is the latest version right now (it was just
    listed, or this process just made its commit)."""
    setattr(table, _LATEST_AT, time.monotonic())


def recently_latest(table: DeltaTable) -> bool:
    """Whether ``table``'s snapshot was the latest version less than :data:`FRESH_S`
    seconds ago (:func:`mark_latest`)."""
    seen: float | None = getattr(table, _LATEST_AT, None)
    return seen is not None and time.monotonic() - seen < FRESH_S


def _exists(table: DeltaTable, version: int) -> bool:
    """Whether commit file ``version`` exists in the table's store: one ranged ``GET``
    of its first byte, made without holding the GIL (so a probe of another log on
    another thread goes out at the same time, :func:`together`; deltalake's
    ``open_input_file`` makes a ``HEAD`` holding it); ``True`` when that cannot be told
    (the caller then reads the log)."""
    path = f"_delta_log/{version:020d}.json"
    try:
        _probe(table, version).open_input_file(path).read(1)
    except FileNotFoundError:
        return False
    except Exception:  # anything else (an empty file, an outage): read the log
        return True
    return True


#: Commit files a probe handler knows (:func:`_probe`): one is made per this many versions.
_PROBE_SPAN = 1024


def _probe(table: DeltaTable, version: int) -> DeltaFileSystemHandler:
    """A handler for ``table``'s root told a size of one byte for the commit files from
    about ``version`` on, so opening one makes no request and reading its first byte
    is the only one (deltalake releases the GIL for reads, not for the ``HEAD`` of an
    opening). Made again once versions move past it (making one takes milliseconds)."""
    held: tuple[int, DeltaFileSystemHandler] | None = getattr(table, _PROBE, None)
    if held is not None and held[0] <= version < held[0] + _PROBE_SPAN:
        return held[1]
    options = dict(getattr(table, "_storage_options", None) or {})
    sizes = {f"_delta_log/{n:020d}.json": 1 for n in range(version, version + _PROBE_SPAN)}
    handler = DeltaFileSystemHandler(str(table.table_uri), options, known_sizes=sizes)
    setattr(table, _PROBE, (version, handler))
    return handler


_T = TypeVar("_T")


def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="deltasink-read")


#: Threads for requests that go out together (:func:`begin`); a forked child gets its
#: own (the parent's threads are not in it).
_POOL = [_pool()]
os.register_at_fork(after_in_child=lambda: _POOL.__setitem__(0, _pool()))


def begin(call: Callable[[], _T]) -> Future[_T]:
    """``call`` started on a pool thread, with the caller's context variables."""
    return _POOL[0].submit(contextvars.copy_context().run, call)


def together(first: Callable[[], object] | None, second: Callable[[], _T], *, apart: bool) -> _T:
    """Run ``first`` and ``second`` at the same time (``first`` on a pool thread, with
    the caller's context variables) and return ``second``'s result once both are done;
    ``first``'s error is raised before ``second``'s. ``apart``: one after the other
    instead (``first`` first), for reads that cost no round trip (local files);
    ``first`` may be ``None`` (nothing to run beside ``second``).

    For independent reads of object stores (a probe of each log, :func:`refresh`):
    each waits on a round trip, and the two waits overlap."""
    if first is None or apart:
        if first is not None:
            first()
        return second()
    future = begin(first)
    try:
        result = second()
    finally:
        error = future.exception()
    if error is not None:
        raise error
    return result


def _store(table: DeltaTable) -> DeltaFileSystemHandler:
    """delta-rs's object store for ``table``'s root, made once per table object."""
    store: DeltaFileSystemHandler | None = getattr(table, _STORE, None)
    if store is None:
        options = dict(getattr(table, "_storage_options", None) or {})
        store = DeltaFileSystemHandler(str(table.table_uri), options)
        setattr(table, _STORE, store)
    return store


def note_commit(table: DeltaTable, base: int, markers: Mapping[str, int | None]) -> None:
    """Record what this process's own commit, which brought ``table`` from version
    ``base`` to its current version, did to the ``txn`` markers: each of ``markers``
    is the app's marker now (``None``: unchanged by the commit). Only a commit that
    landed right after ``base`` (no other commit in between) carries the other apps'
    markers over as they were; so :func:`txn_version` answers for this version without
    reading the commit file back. The snapshot is the latest (:func:`mark_latest`).
    Nothing is recorded for a table whose markers expire
    (``delta.setTransactionRetentionDuration``: delta-rs judges them)."""
    mark_latest(table)
    seen = _txn_cache(table)
    version = table.version()
    if version != base + 1:
        return
    if "delta.setTransactionRetentionDuration" in table.metadata().configuration:
        return
    for (at, app), marker in list(seen.items()):
        if at == base and app not in markers:
            seen[(version, app)] = marker
    for app, marker in markers.items():
        if marker is not None:
            seen[(version, app)] = marker
        elif (base, app) in seen:
            seen[(version, app)] = seen[(base, app)]


def _txn_cache(table: DeltaTable) -> dict[tuple[int, str], int | None]:
    seen: dict[tuple[int, str], int | None] | None = getattr(table, _TXNS, None)
    if seen is None:
        seen = {}
        setattr(table, _TXNS, seen)
    return seen


def txn_version(table: DeltaTable, app_id: str) -> int | None:
    """``table.transaction_version(app_id)``, read once per table version.

    delta-rs answers it by replaying every commit since the last checkpoint (on an
    object store: one ``GET`` per commit file, each time); a snapshot's markers never
    change, so a second read at the same version is answered from the first. Once the
    same table object has moved on by a few commits, only those commit files are read
    (one ``GET`` each on an object store): the marker is the one of the last ``txn``
    action for the app, the earlier answer if none of them has one. delta-rs reads
    it whenever that cannot be told so: a table with
    ``delta.setTransactionRetentionDuration`` (markers expire), a missing or
    unreadable commit file, or more than :data:`_INCREMENTAL_MAX` commits to read."""
    seen = _txn_cache(table)
    version = table.version()
    key = (version, app_id)
    if key in seen:
        return seen[key]
    known = [v for (v, app) in seen if app == app_id and v < version]
    found = _txn_since(table, app_id, max(known), seen) if known else _UNKNOWN
    if len(seen) > 64:  # keep the newest version's answers: the next incremental read's base
        newest = max(at for at, _ in seen)
        for old in [k for k in seen if k[0] < newest]:
            del seen[old]
    seen[key] = table.transaction_version(app_id) if found is _UNKNOWN else found
    return seen[key]


_INCREMENTAL_MAX = 20
_UNKNOWN: Any = object()


def _txn_since(
    table: DeltaTable, app_id: str, base: int, seen: dict[tuple[int, str], int | None]
) -> Any:
    """``app_id``'s marker at ``table.version()`` from its marker at ``base`` and the
    commit files after it; :data:`_UNKNOWN` when that cannot be told (see
    :func:`txn_version`)."""
    version = table.version()
    uri = str(table.table_uri)
    if version - base > _INCREMENTAL_MAX:
        return _UNKNOWN
    if "delta.setTransactionRetentionDuration" in table.metadata().configuration:
        return _UNKNOWN
    marker = seen[(base, app_id)]
    local = is_local(uri)
    try:
        store = None if local else _store(table)
        texts: dict[int, str] = getattr(table, _COMMITS, {})
        for n in range(base + 1, version + 1):
            if n in texts:  # read for another app's marker at this version
                text = texts[n]
            elif store is None:
                with open(commit_file(normalize_uri(uri), n), encoding="utf-8") as f:
                    text = f.read()
            else:
                stream = store.open_input_file(f"_delta_log/{n:020d}.json")
                text = stream.read(stream.size()).decode("utf-8")
                texts = {k: t for k, t in texts.items() if k > version - _INCREMENTAL_MAX}
                texts[n] = text
                setattr(table, _COMMITS, texts)
            if not text.strip():
                return _UNKNOWN  # a torn commit: let delta-rs judge it
            for line in text.splitlines():
                txn = json.loads(line).get("txn") if line.strip() else None
                if txn and txn.get("appId") == app_id:
                    marker = int(txn["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return _UNKNOWN
    return marker


def commit_file(uri: str, version: int) -> str:
    """The path of commit ``version`` in the local table at ``uri``."""
    return os.path.join(uri, "_delta_log", f"{version:020d}.json")


def arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as a ``pyarrow.Schema``."""
    arrow: Any = table.schema().to_arrow()
    return pa.schema(arrow)
