"""The commit ledger: which target commit applied which versions of a writer.

Read from the target's Delta history. Each deltasink commit carries commit metadata:
``deltasink.appId`` / ``deltasink.batchVersion`` / ``deltasink.versions`` where the
engine can write custom keys (delta-rs), and always a ``userMetadata`` string
``deltasink commit app=<app_id> version=<v>[ versions=<v1,v2,...>]`` (the only field
Spark's writers can set), so the ledger can be rebuilt from either. A commit whose
version came from a stream (or a batch job's own position) records that origin
(:mod:`deltasink.ops.origin`) as JSON: ``deltasink.origin`` (delta-rs), or after
`` origin=`` at the end of ``userMetadata`` (Spark). A target commit also records what
it cost so far (:meth:`deltasink.core.telemetry.Recorder.metadata`: the attempt, the
conflicts lost and who won them, the seconds by phase) as JSON: the ``deltasink`` key
(delta-rs), and after `` deltasink=`` in ``userMetadata`` (both engines: the field
``DESCRIBE HISTORY`` shows), before any origin.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from deltasink.ops.origin import ORIGIN_KEY, BatchOrigin, decode, encode

__all__ = [
    "COMPACTIONS",
    "TELEMETRY_KEY",
    "HistoryEntry",
    "commit_app",
    "commit_origin",
    "commit_telemetry",
    "count_since_optimize",
    "history_from_commits",
    "is_compaction",
    "ledger_table",
    "previous_rows",
    "user_metadata",
]

_USER_METADATA = re.compile(
    r"^deltasink commit app=(?P<app>\S+) version=(?P<version>\d+)(?: versions=(?P<versions>[\d,]+))?"
)
_ANY_COMMIT = re.compile(r"^deltasink \S+ app=(?P<app>\S+)")
_ORIGIN_SUFFIX = " origin="
_TELEMETRY = " deltasink="
#: The commit metadata key of a target commit's telemetry (delta-rs).
TELEMETRY_KEY = "deltasink"


def user_metadata(
    operation: str,
    app_id: str,
    version: int | None,
    versions: Iterable[int] = (),
    origin: str | None = None,
    telemetry: Mapping[str, Any] | None = None,
) -> str:
    """The ``userMetadata`` text of a deltasink commit; ``telemetry``: what the commit
    cost so far (compact JSON after `` deltasink=``); ``origin``: the encoded
    :class:`~deltasink.ops.origin.BatchOrigin`, appended last (it is JSON)."""
    text = f"deltasink {operation} app={app_id}"
    if version is not None:
        text += f" version={version}"
    listed = list(versions)
    if len(listed) > 1:
        text += " versions=" + ",".join(str(v) for v in listed)
    if telemetry is not None:
        text += _TELEMETRY + json.dumps(telemetry, separators=(",", ":"))
    if origin is not None:
        text += _ORIGIN_SUFFIX + origin
    return text


def _telemetry_text(text: str) -> tuple[dict[str, Any] | None, int]:
    """The telemetry JSON in a ``userMetadata`` text and where it ends (``0``: none)."""
    at = text.find(_TELEMETRY)
    if at < 0:
        return None, 0
    try:
        value, end = json.JSONDecoder().raw_decode(text, at + len(_TELEMETRY))
    except ValueError:
        return None, 0
    return (value if isinstance(value, dict) else None), end


def commit_telemetry(commit: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a target commit recorded of its cost (a history record), if anything."""
    value = commit.get(TELEMETRY_KEY)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if isinstance(value, dict):
        return value
    return _telemetry_text(str(commit.get("userMetadata") or ""))[0]


def commit_app(commit: Mapping[str, Any]) -> str | None:
    """The deltasink app id that made a commit (a history record), if one did."""
    app = commit.get("deltasink.appId")
    if app is not None:
        return str(app)
    match = _ANY_COMMIT.match(str(commit.get("userMetadata") or ""))
    return None if match is None else match["app"]


def commit_origin(commit: Mapping[str, Any]) -> BatchOrigin | None:
    """The origin a commit (a history record) recorded, if any."""
    if commit.get(ORIGIN_KEY) is not None:
        return decode(commit[ORIGIN_KEY])
    text = str(commit.get("userMetadata") or "")
    at = text.find(_ORIGIN_SUFFIX, _telemetry_text(text)[1])
    return decode(text[at + len(_ORIGIN_SUFFIX) :]) if at >= 0 else None


@dataclass(frozen=True)
class HistoryEntry:
    """One target commit made by a writer (from the target's Delta history).

    Attributes:
        version: The batch version committed (the highest, when several were
            coalesced into this commit).
        versions: Every batch version this commit applied, ascending.
        target_version: The target's Delta table version of that commit.
        timestamp: When the commit was made (UTC).
        operation: The Delta operation (``MERGE``, ``WRITE``, ...).
        rows_inserted: Target rows inserted, when recorded.
        rows_updated: Target rows updated, when recorded.
        rows_deleted: Target rows deleted, when recorded.
        execution_ms: The engine's reported execution time, when recorded.
        staged_rows: Rows staged for the versions of this commit, when recorded.
        origin: The streaming query, batch and source positions (or a batch job's
            position) the commit recorded, if any (:mod:`deltasink.ops.origin`).
        files_added: Data files the commit added, when the engine recorded it.
        files_removed: Data files the commit removed, when recorded.
        bytes_added: Bytes added, when recorded (Spark's ``operationMetrics``).
        bytes_removed: Bytes removed, when recorded.
        telemetry: What the commit recorded of its cost when it was made (its attempt,
            the conflicts it lost and who won them, seconds by phase), if anything.
    """

    version: int
    versions: tuple[int, ...]
    target_version: int
    timestamp: datetime
    operation: str
    rows_inserted: int | None = None
    rows_updated: int | None = None
    rows_deleted: int | None = None
    execution_ms: int | None = None
    staged_rows: int | None = None
    origin: BatchOrigin | None = None
    files_added: int | None = None
    files_removed: int | None = None
    bytes_added: int | None = None
    bytes_removed: int | None = None
    telemetry: Mapping[str, Any] | None = None

    @property
    def changes(self) -> tuple[int | None, int | None, int | None, int | None]:
        """Files added and removed, bytes added and removed (each when recorded)."""
        return self.files_added, self.files_removed, self.bytes_added, self.bytes_removed

    @property
    def attempt(self) -> int | None:
        """The attempt that landed (1: no conflict), when recorded."""
        value = None if self.telemetry is None else self.telemetry.get("attempt")
        return None if value is None else int(value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "version": self.version,
            "versions": list(self.versions),
            "target_version": self.target_version,
            "timestamp": self.timestamp.isoformat(),
            "operation": self.operation,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "execution_ms": self.execution_ms,
            "staged_rows": self.staged_rows,
            "origin": None if self.origin is None else self.origin.to_dict(),
            "files_added": self.files_added,
            "files_removed": self.files_removed,
            "bytes_added": self.bytes_added,
            "bytes_removed": self.bytes_removed,
            "telemetry": None if self.telemetry is None else dict(self.telemetry),
        }


def _int(metrics: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        if metrics.get(name) is not None:
            return int(metrics[name])
    return None


def _versions(commit: Mapping[str, Any], app_id: str) -> tuple[int, ...] | None:
    if commit.get("operation") == "OPTIMIZE":
        # Delta's auto compaction on Spark is a post-commit hook of the writing session:
        # its OPTIMIZE commit carries the session's userMetadata, so it names the batch
        # the write it followed applied. It applies no version.
        return None
    group = commit.get("deltasink.group")  # a group commit carried the app's version
    if isinstance(group, Mapping) and app_id in group:
        return tuple(int(v) for v in group[app_id])
    if commit.get("deltasink.appId") == app_id and "deltasink.batchVersion" in commit:
        version = int(commit["deltasink.batchVersion"])
        return tuple(int(v) for v in commit.get("deltasink.versions", [version]))
    match = _USER_METADATA.match(str(commit.get("userMetadata") or ""))
    if match is None or match["app"] != app_id:
        return None
    if match["versions"]:
        return tuple(int(v) for v in match["versions"].split(","))
    return (int(match["version"]),)


def _timestamp(value: Any) -> datetime:
    """A commit timestamp as an aware UTC datetime: epoch milliseconds (delta-rs), or a
    datetime; a naive one is local time, as classic Spark's ``DESCRIBE HISTORY``
    returns it (``astimezone`` reads a naive datetime as local time)."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return datetime.fromtimestamp(int(value) / 1000, timezone.utc)


def history_from_commits(commits: Iterable[Mapping[str, Any]], app_id: str) -> list[HistoryEntry]:
    """The entries of ``app_id`` among Delta history records (newest first).

    Accepts delta-rs ``DeltaTable.history()`` dicts and Spark ``DESCRIBE HISTORY`` rows
    as dicts (``version``, ``timestamp``, ``operation``, ``operationMetrics``,
    ``userMetadata``).
    """
    entries = []
    for commit in commits:
        versions = _versions(commit, app_id)
        if versions is None:
            continue
        metrics = commit.get("operationMetrics") or {}
        entries.append(
            HistoryEntry(
                version=versions[-1],
                versions=versions,
                target_version=int(commit["version"]),
                timestamp=_timestamp(commit["timestamp"]),
                operation=str(commit.get("operation")),
                rows_inserted=_int(
                    metrics, "num_target_rows_inserted", "numTargetRowsInserted", "num_added_rows"
                ),
                rows_updated=_int(metrics, "num_target_rows_updated", "numTargetRowsUpdated"),
                rows_deleted=_int(metrics, "num_target_rows_deleted", "numTargetRowsDeleted"),
                execution_ms=_int(metrics, "execution_time_ms", "executionTimeMs"),
                staged_rows=_int(commit, "deltasink.rows")
                if commit.get("deltasink.rows") is not None
                else _int(metrics, "num_source_rows", "numSourceRows"),
                origin=commit_origin(commit),
                files_added=_int(
                    metrics,
                    "num_target_files_added",
                    "numTargetFilesAdded",
                    "num_added_files",
                    "numFiles",
                    "numAddedFiles",
                ),
                files_removed=_int(
                    metrics,
                    "num_target_files_removed",
                    "numTargetFilesRemoved",
                    "num_removed_files",
                    "numRemovedFiles",
                ),
                bytes_added=_int(metrics, "numTargetBytesAdded", "numOutputBytes", "numAddedBytes"),
                bytes_removed=_int(metrics, "numTargetBytesRemoved", "numRemovedBytes"),
                telemetry=commit_telemetry(commit),
            )
        )
    return entries


def previous_rows(entries: list[HistoryEntry]) -> float | None:
    """Staged rows per version of the most recent commit that records them."""
    for entry in entries:
        if entry.staged_rows is not None:
            return entry.staged_rows / len(entry.versions)
    return None


_LEDGER_FIELDS: list[pa.Field[Any]] = [
    pa.field("app_id", pa.string()),
    pa.field("version", pa.int64()),
    pa.field("target_version", pa.int64()),
    pa.field("committed_at", pa.timestamp("us", tz="UTC")),
    pa.field("operation", pa.string()),
    pa.field("rows_inserted", pa.int64()),
    pa.field("rows_updated", pa.int64()),
    pa.field("rows_deleted", pa.int64()),
    pa.field("execution_ms", pa.int64()),
    pa.field("staged_rows", pa.int64()),
    pa.field("commit_versions", pa.list_(pa.int64())),
    pa.field("origin", pa.string()),
]
LEDGER_SCHEMA = pa.schema(_LEDGER_FIELDS)


def ledger_table(app_id: str, entries: list[HistoryEntry]) -> pa.Table:
    """The ledger as Arrow: one row per committed version, newest first. Metrics are
    per target commit, so coalesced versions share them (see ``commit_versions``)."""
    rows = [
        {
            "app_id": app_id,
            "version": version,
            "target_version": e.target_version,
            "committed_at": e.timestamp,
            "operation": e.operation,
            "rows_inserted": e.rows_inserted,
            "rows_updated": e.rows_updated,
            "rows_deleted": e.rows_deleted,
            "execution_ms": e.execution_ms,
            "staged_rows": e.staged_rows,
            "commit_versions": list(e.versions),
            "origin": None if e.origin is None else encode(e.origin),
        }
        for e in entries
        for version in reversed(e.versions)
    ]
    return pa.Table.from_pylist(rows, schema=LEDGER_SCHEMA)


#: The ``deltasink.operation`` of the compaction commits the embedded engine makes
#: (recorded by Delta as ``WRITE`` commits of ``dataChange=false`` files).
COMPACTIONS = ("autoCompact", "optimize")


def is_compaction(commit: Mapping[str, Any]) -> bool:
    """Whether a history record is a compaction: Delta's ``OPTIMIZE`` (any engine's), or
    one the embedded engine made (:data:`COMPACTIONS`)."""
    return commit.get("operation") == "OPTIMIZE" or commit.get("deltasink.operation") in COMPACTIONS


def count_since_optimize(commits: Iterable[Mapping[str, Any]], app_id: str, limit: int) -> int:
    """``app_id``'s commits among ``commits`` (newest first) before the first compaction
    (:func:`is_compaction`), counting up to ``limit``."""
    count = 0
    for commit in commits:
        if is_compaction(commit):
            break
        if history_from_commits([commit], app_id):
            count += 1
            if count >= limit:
                break
    return count
