"""``TIMESTAMP`` partition values in the protocol's UTC form, whichever reader.

delta-rs 1.6 records a ``TIMESTAMP`` partition value without a zone
(``2024-01-01 20:00:00.000000``, the UTC wall clock), which it reads back as UTC; Spark
reads a zone-less value in its session time zone, so in ``America/Los_Angeles`` that
row's hour comes back 8 hours off (7 in summer). Delta's PROTOCOL.md ("Partition Value
Serialization") lets a timestamp be recorded as ISO 8601 adjusted to UTC
(``2024-01-01T20:00:00.000000Z``), which delta-spark 4 itself writes and every reader
takes as one instant. ``TIMESTAMP_NTZ`` values have no zone: their zone-less form is
right and is left alone.

delta-rs offers no option for it and commits its MERGE, overwrite and append itself,
so :func:`restamp` follows such a commit with one of its own: the commit's files added
again (same paths, sizes and statistics, ``dataChange=false``: no row changes, so
streams and change feeds skip it) with their partition values in the UTC form. Until it
lands (it follows at once; after a crash in between, the app's next publish in a new
process restamps it), a Spark reader outside UTC sees those files' hours off (delta-rs
reads either form right).
The log records a file's path URI-encoded (over the partition directory's own escapes);
delta-rs encodes the path it is given, so each is handed over decoded exactly once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction

from deltasink._version import __version__
from deltasink.backends.deltalog.commits import post_commit_hooks
from deltasink.backends.deltalog.history import commit_actions, commits
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.backends.deltalog.target import TargetLog
from deltasink.core.protocol import CommitResult
from deltasink.ops.history import commit_app

from .rewrite import files_of

__all__ = ["RESTAMP", "restamp", "restamp_after", "timestamp_partitions", "utc_value"]

logger = logging.getLogger("deltasink")

#: The ``deltasink.operation`` of the commit that records the UTC form.
RESTAMP = "utcPartitionValues"
OPERATION = "deltasink.operation"
#: How many of the latest commits a writer process looks through once for its app's
#: commits left zone-less (:func:`restamp_after`).
_SWEEP = 64
#: ``(target, app id)`` swept in this process.
_swept: set[tuple[str, str]] = set()
#: Attempts of that commit when others commit first (its files checked each time).
_ATTEMPTS = 8
#: A zone-less timestamp partition value (delta-rs's, and the protocol's first form).
_ZONELESS = re.compile(r"^(-?\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?$")


def timestamp_partitions(table: DeltaTable) -> list[str]:
    """The partition columns of ``table`` typed ``TIMESTAMP`` (with a zone; not NTZ)."""
    columns = {c.lower() for c in table.metadata().partition_columns}
    return [
        f.name
        for f in arrow_schema(table)
        if f.name.lower() in columns and pa.types.is_timestamp(f.type) and f.type.tz is not None
    ]


def utc_value(text: str | None) -> str | None:
    """A zone-less timestamp partition value read as UTC, in the protocol's ISO 8601 UTC
    form (``2024-01-01 20:00:00`` -> ``2024-01-01T20:00:00.000000Z``); any other value
    (null, already zoned) unchanged."""
    found = _ZONELESS.match(text) if text is not None else None
    if found is None:
        return text
    year, month, day, hour, minute, second, fraction = found.groups()
    digits = (fraction or "").ljust(6, "0")
    return f"{year}-{month}-{day}T{hour}:{minute}:{second}.{digits}Z"


def restamp_after(log: TargetLog, result: CommitResult, app_id: str) -> None:
    """After a publish of ``app_id`` into the target ``log`` reads (a target with a
    ``TIMESTAMP`` partition column only): the commit it made is restamped
    (:func:`restamp`); and once per writer process, the app's earlier commits among the
    latest :data:`_SWEEP` that no restamp followed (a crash may have come between a
    commit and its restamp; the recovery that follows writes nothing): one commit file
    read each, a commit only where values are still zone-less. Never raises (the
    publish landed): a failure is logged."""
    try:
        _restamp_after(log, result, app_id)
    except Exception as exc:  # the publish landed: report, never fail it afterwards
        logger.warning(
            "deltasink: the UTC form of the TIMESTAMP partition values of %s could not be "
            "recorded after a publish of %s (Spark outside UTC reads those files' hours "
            "off until the app's next publish in a new process): %s",
            log.uri,
            app_id,
            exc,
        )


def _restamp_after(log: TargetLog, result: CommitResult, app_id: str) -> None:
    table = log.open(fresh=False)
    if table is None or not timestamp_partitions(table):
        return
    if result.outcome == "committed" and result.target_version is not None:
        restamp(table, result.target_version)
    key = (log.uri, app_id)
    if key in _swept or result.outcome not in ("committed", "already_committed"):
        return
    _swept.add(key)
    history = list(commits(table, _SWEEP))
    done = {c.get("deltasink.ofVersion") for c in history if c.get(OPERATION) == RESTAMP}
    for info in history:
        version = info["version"]
        if commit_app(info) == app_id and version not in done and version != result.target_version:
            restamp(table, version)


def restamp(table: DeltaTable, version: int) -> int | None:
    """After deltasink's delta-rs commit ``version`` of ``table`` (the latest snapshot
    ``table`` holds, or older), record its added files' zone-less ``TIMESTAMP``
    partition values in the UTC form, in one commit of ``dataChange=false`` adds (see
    the module doc). Files another commit removed since are left out (adding them
    again would bring their rows back). Returns the version of that commit, ``None``
    when nothing needed it. Never raises for a lost race: after :data:`_ATTEMPTS`
    commits of others in between it logs a warning and leaves the values as delta-rs
    recorded them (read right by delta-rs, by Spark in UTC)."""
    columns = timestamp_partitions(table)
    if not columns:
        return None
    adds = _zoneless_adds(table, version, columns)
    if not adds:
        return None
    props = CommitProperties(
        custom_metadata={
            OPERATION: RESTAMP,
            "deltasink.libraryVersion": __version__,
            "deltasink.ofVersion": version,
        },
        max_commit_retries=0,  # lands right after the snapshot its files were checked on
    )
    for _ in range(_ATTEMPTS):
        live = {f.path for f in files_of(table)}
        actions = [_utc_add(a, columns) for a in adds if a["path"] in live]
        if not actions:
            return None
        try:
            table.create_write_transaction(
                list(actions),
                mode="append",
                schema=table.schema(),
                partition_by=list(table.metadata().partition_columns),
                commit_properties=props,
                post_commithook_properties=post_commit_hooks(table),
            )
        except CommitFailedError:
            table.update_incremental()
            continue
        table.update_incremental()
        return table.version()
    logger.warning(
        "deltasink: the UTC form of the TIMESTAMP partition values of version %s of %s "
        "lost to %s other commits and was not recorded (Spark outside UTC reads those "
        "files' hours off; delta-rs reads them right)",
        version,
        table.table_uri,
        _ATTEMPTS,
    )
    return None


def _zoneless_adds(table: DeltaTable, version: int, columns: list[str]) -> list[dict[str, Any]]:
    """The add actions of commit ``version`` with a zone-less value in ``columns``."""
    found = []
    for action in commit_actions(table, version) or ():
        add = action.get("add")
        if not isinstance(add, dict):
            continue
        values: Mapping[str, Any] = add.get("partitionValues") or {}
        if any(utc_value(values.get(c)) != values.get(c) for c in columns):
            found.append(add)
    return found


def _utc_add(add: Mapping[str, Any], columns: list[str]) -> AddAction:
    values = dict(add.get("partitionValues") or {})
    for column in columns:
        if column in values:
            values[column] = utc_value(values[column])
    return AddAction(
        path=unquote(add["path"]),  # delta-rs encodes the path it is given, once
        size=int(add["size"]),
        partition_values=values,
        modification_time=int(add["modificationTime"]),
        data_change=False,
        stats=add.get("stats") or "{}",
    )
