"""The embedded engine's staging log, kept by commit count.

delta-rs removes expired log files by age (``delta.logRetentionDuration``, ten minutes
on a staging table this engine creates), so a job writing a batch every few seconds
keeps thousands of staging commits, and every read that lists the log grows with
them (issue 29, P4). Here, whenever a staging commit of this engine writes a
checkpoint, the commit files and older checkpoints that lie before the newest
checkpoint *and* more than :data:`KEEP_COMMITS` commits back are deleted too
(:func:`trim_log`), so the log holds at most about ``KEEP_COMMITS`` plus one
checkpoint interval of commits, whatever the batch rate. ``gc`` applies the same rule
(:func:`expire_log`).

What deltasink reads from a staging table is in its snapshot, which a checkpoint
carries whole: the ``txn`` markers (``<app_id>``, ``<app_id>#publishing``,
``<app_id>#committed``), the table properties (epoch, spec, checks, quarantine) and the
``add`` actions of staged files. Only two readers need commit *history*: the origin of
a pending version (:meth:`StagingLog.origin_of`, its stage commit's metadata) and the
spark engine's ledger (empty versions, columns and origins of pending versions). So
the rule deletes only when nothing is pending in the state the commit was made on,
and only commits before that state's version: a version pending now was then either
already staged (and nothing is deleted) or staged by a later commit, which is kept.
While a version is pending, only delta-rs's clean-up by age runs, as before (it
bounds a log that is never seen without a pending version at a checkpoint).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import cast

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction

from deltasink.backends.deltalog import commits
from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.tables import txn_version
from deltasink.ops.layout import COMMITTED_SUFFIX, PROP_APP

__all__ = [
    "KEEP_COMMITS",
    "LOG_RETENTION",
    "base_gone",
    "delete_old_log",
    "expire_log",
    "log_commit",
    "trim_log",
    "trimmable",
]

logger = logging.getLogger("deltasink")

#: Staging commits kept behind the tip, whatever their age. 200 is two checkpoint
#: intervals of a local staging table (200 direct writes at one commit each, about 70
#: pre-committed batches at three): a sink, a ``gc`` or a zombie whose snapshot lags
#: by fewer commits still reads the log incrementally and has its commits
#: conflict-checked as usual (a lag beyond it turns into a conflict, see
#: :func:`log_commit`); operators keep the last couple of hundred batches in the
#: staging history; and a listing of the log stays at about ``KEEP_COMMITS +
#: delta.checkpointInterval`` (300) files, a few milliseconds on local disk, where ten
#: minutes of a fast job kept thousands (9,400 files after 10,000 batches, 1,067 after
#: 1,000 batches built in 71 s).
KEEP_COMMITS = 200

#: The log retention by age this engine sets on its staging tables
#: (``delta.logRetentionDuration``, :data:`~.fencing.LOG_SETTINGS`); a table with
#: another one (chosen by someone, or the spark engine's default) is not trimmed by
#: count.
LOG_RETENTION = "interval 10 minutes"

#: At most this many checkpoint intervals' worth of files are deleted per trim, oldest
#: first (one request each on an object store): a staging log an earlier release let
#: grow is worked down over a few checkpoints instead of stalling one write.
_CATCH_UP_INTERVALS = 10

#: The log files the rule may delete: commits, classic (single- or multi-part)
#: checkpoints and Spark's checksums, named by their version. Anything else
#: (``_last_checkpoint``, v2 checkpoints, compacted logs, ``_commits/``) is left alone.
_LOG_FILE = re.compile(r"(\d{20})\.(?:json|crc|checkpoint\.parquet|checkpoint\.\d+\.\d+\.parquet)")

_LOG = "_delta_log"


def log_commit(
    table: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    props: CommitProperties,
    *,
    ahead: int = 0,
    data: pa.Table | None = None,
) -> None:
    """:func:`deltasink.backends.deltalog.commits.log_commit` for this engine's staging
    table (with ``data``: those rows appended by delta-rs, one staged version,
    :func:`~deltasink.backends.deltalog.commits.data_commit`; with neither actions nor
    data: :func:`~deltasink.backends.deltalog.commits.marker_commit`). If that commit
    is the one to write a checkpoint, then the log is trimmed
    (:func:`trim_log`) as the state it was made on allows (``table``'s, with this
    commit's actions and markers), judged before the commit (whose clean-up by age
    may remove files that state was read from).

    A commit made on a snapshot older than the commits the rule removed cannot be
    checked for conflicts (delta-rs fails it: "Invalid table version"); the log moved
    on by more than :data:`KEEP_COMMITS` commits since it was read, so it is raised as
    the conflict it is (``CommitFailedError``): the caller then checks the epoch
    freshly, as after any conflict (a newer writer's claim is the usual cause)."""
    due = post_commit_hooks(table, ahead=ahead).cleanup_expired_logs
    # a staged version's rows leave it pending: nothing to trim
    settled = bool(due) and data is None and trimmable(table, after=(actions, props))
    base = table.version()
    try:
        if data is not None:
            commits.data_commit(table, data, props, ahead=ahead)
        elif actions:
            commits.log_commit(table, actions, props, ahead=ahead)
        else:  # markers only: the table object moves to the commit (no listing after it)
            commits.marker_commit(table, props, ahead=ahead)
    except CommitFailedError:
        raise
    except DeltaError as exc:
        if base_gone(table):
            raise CommitFailedError(
                f"the staging log moved on past the snapshot at version {base} "
                f"this commit was made on ({exc})"
            ) from exc
        raise
    if settled:
        delete_old_log(table, base=base)


def expire_log(table: DeltaTable) -> None:
    """Remove the expired log files of a staging table just checkpointed (``gc``): by
    age, as delta-rs does (``delta.logRetentionDuration``), and by count
    (:func:`trim_log`), both only when ``delta.enableExpiredLogCleanup`` allows it."""
    if not _cleanup_enabled(table):
        return
    settled = trimmable(table)  # judged before the clean-up by age removes files
    table.cleanup_metadata()
    if settled:
        delete_old_log(table)


def trim_log(
    table: DeltaTable,
    *,
    after: tuple[Sequence[AddAction | RemoveAction], CommitProperties] | None = None,
) -> list[str]:
    """Delete the staging log files before the newest checkpoint that are more than
    :data:`KEEP_COMMITS` commits older than ``table``'s version, if
    :func:`trimmable`; the names deleted.

    Never deletes the newest checkpoint, any file after it, nor ``_last_checkpoint``,
    and keeps everything when the newest checkpoint is not a classic single-file one.
    Oldest first, so a failure leaves the log without gaps; at most
    ``_CATCH_UP_INTERVALS`` checkpoint intervals' worth at a time. A failure is logged
    and ignored: this is clean-up.
    """
    return delete_old_log(table) if trimmable(table, after=after) else []


def trimmable(
    table: DeltaTable,
    *,
    after: tuple[Sequence[AddAction | RemoveAction], CommitProperties] | None = None,
) -> bool:
    """Whether the rule may delete from ``table``'s log: expired-log clean-up is on
    (``delta.enableExpiredLogCleanup``); the log retention is the one this engine sets
    (not one someone chose to keep history by, nor the spark engine's default); and
    no version is pending in ``table``'s state (with ``after``: once this commit's
    actions and markers are applied), i.e. no staged file remains and the app's
    highest staged version is not above its committed mark. ``False`` when that
    cannot be read."""
    config = table.metadata().configuration
    if not _cleanup_enabled(table):
        return False
    if config.get("delta.logRetentionDuration") != LOG_RETENTION:
        return False
    if table.version() + 1 - KEEP_COMMITS <= 0:
        return False
    try:
        return not _pending(table, after)
    except Exception as exc:
        logger.debug("staging log of %s not trimmed: %s", table.table_uri, exc)
        return False


def delete_old_log(table: DeltaTable, *, base: int | None = None) -> list[str]:
    """The deleting half of :func:`trim_log`, for a caller that found the table
    :func:`trimmable` before its commit (whose clean-up by age may remove files the
    state it judged was read from; ``base``: the version of that state, when the
    commit moved ``table`` past it); never raises."""
    config = table.metadata().configuration
    horizon = (table.version() if base is None else base) + 1 - KEEP_COMMITS
    deleted: list[str] = []
    try:
        fs = _log_filesystem(table)
        with fs.open_input_stream(f"{_LOG}/_last_checkpoint") as stream:
            checkpoint = int(json.loads(stream.read())["version"])
        names = {info.base_name for info in fs.get_file_info(pafs.FileSelector(_LOG))}
        if f"{checkpoint:020d}.checkpoint.parquet" not in names:
            return []  # a multi-part or v2 checkpoint, or gone meanwhile: keep all
        cutoff = min(checkpoint, horizon)
        doomed = sorted(
            (int(m[1]), name)
            for name in names
            if (m := _LOG_FILE.fullmatch(name)) is not None and int(m[1]) < cutoff
        )
        limit = _CATCH_UP_INTERVALS * _interval(config)
        for _version, name in doomed[:limit]:
            fs.delete_file(f"{_LOG}/{name}")
            deleted.append(name)
    except Exception as exc:  # clean-up: the next checkpoint tries again
        logger.warning(
            "could not remove old staging log files of %s (%s); %d removed, the rest are "
            "tried again at the next checkpoint",
            table.table_uri,
            exc,
            len(deleted),
        )
        return deleted
    if deleted:
        logger.debug("removed %d staging log files of %s", len(deleted), table.table_uri)
    return deleted


def _cleanup_enabled(table: DeltaTable) -> bool:
    config = table.metadata().configuration
    return config.get("delta.enableExpiredLogCleanup", "true").strip().lower() != "false"


def _interval(config: dict[str, str]) -> int:
    try:
        return max(1, int(config.get("delta.checkpointInterval", "100")))
    except ValueError:
        return 100


def _pending(
    table: DeltaTable,
    after: tuple[Sequence[AddAction | RemoveAction], CommitProperties] | None,
) -> bool:
    """Whether a version is pending in ``table``'s state, with ``after``'s actions and
    markers applied: a staged file remains, or the app's highest staged version (its
    ``txn``, which a stage commit records even for a version without files) is above
    its committed mark."""
    actions, props = after if after is not None else ((), None)
    if any(isinstance(a, AddAction) for a in actions):
        return True
    removed = {a.path for a in actions if isinstance(a, RemoveAction)}
    files = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    if any(path not in removed for path in files):
        return True
    app = table.metadata().configuration.get(PROP_APP)
    if app is None:
        return True  # not a deltasink staging table: nothing can be told
    markers = {t.app_id: t.version for t in (props.app_transactions or [])} if props else {}

    def marker(app_id: str) -> int | None:
        return markers[app_id] if app_id in markers else txn_version(table, app_id)

    staged, mark = marker(app), marker(app + COMMITTED_SUFFIX)
    return staged is not None and (mark is None or staged > mark)


def _log_filesystem(table: DeltaTable) -> pafs.FileSystem:
    """The table's storage, rooted at the table, through the table's own object store
    (its location and credentials), local or remote alike."""
    handler = DeltaStorageHandler.from_table(table._table)  # a DeltaStorageHandler
    return pafs.PyFileSystem(cast(pafs.FileSystemHandler, handler))


def base_gone(table: DeltaTable) -> bool:
    """Whether the commit file of ``table``'s snapshot version has been removed."""
    try:
        fs = _log_filesystem(table)
        info = fs.get_file_info(f"{_LOG}/{table.version():020d}.json")
    except Exception:
        return False
    return info.type == pafs.FileType.NotFound
