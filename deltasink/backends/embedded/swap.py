"""The commit of a compaction (:mod:`.rewrite`): old files removed and new ones added, all
``dataChange=false``, recorded as Delta's ``OPTIMIZE``, landing only on a snapshot that
still holds every file it removes, unchanged.

What the log holds (the Delta protocol; delta-spark and delta-rs read it so):

* ``add.path`` and ``remove.path`` are URI-encoded paths relative to the table, encoded
  exactly once: the removed files' paths as the log already holds them, the new files'
  as delta-rs wrote them into the scratch table (its directory ``p=US%20East`` is the
  path ``p=US%2520East``). delta-rs's ``create_write_transaction`` encodes the paths it
  is given, so it is given them decoded;
* a new file's partition values are those delta-rs wrote, except ``TIMESTAMP`` values,
  written as the UTC instant delta-rs read from the old files' (``2024-01-01T18:00:00.000000Z``,
  the form Delta 4 writes): delta-rs's own form has no zone, which Spark reads in its
  session time zone;
* the commit is an ``OPTIMIZE`` (``DESCRIBE HISTORY``'s operation), with Delta's
  ``operationParameters`` (``predicate``, ``zOrderBy``, ``clusterBy``, ``auto``) and
  ``operationMetrics`` (files and bytes added and removed, the added sizes' spread).
  delta-rs names every commit of ``create_write_transaction`` a ``WRITE`` and refuses
  another ``operation``, so on a local table the commit file is written here, created
  only if absent (a hard link, atomic); on an object store, or a table with a writer
  feature this commit does not know (row tracking, in-commit timestamps, ...), delta-rs
  commits it, as a ``WRITE`` carrying the same parameters and metrics.

A commit is tried on exactly the version after the snapshot it was checked against. When
another commit took that version, the table is read again and the commit tried on the
new snapshot only if every removed file is still live and unchanged (its size and
deletion vector) and the schema, partitioning, protocol and the features the rewrite
cannot read are as planned; otherwise :class:`Lost`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from deltasink._version import __version__
from deltasink.backends.deltalog.commits import now_ms, post_commit_hooks
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.errors import UnsupportedTableFeatureError

from .features import REWRITTEN_PATHS, refuse_timestamp_partitions, rewritten_paths
from .files import File, Lost, files_of, unreadable

__all__ = ["COMMIT_ATTEMPTS", "commit_swap", "metrics", "parameters"]

#: Commits tried on a newer snapshot when others took the version (their files checked).
COMMIT_ATTEMPTS = 8

#: Writer features a commit of ``dataChange=false`` files written here may be made on
#: (the file written by this module); any other: delta-rs makes the commit.
_KNOWN_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "domainMetadata",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
        "allowColumnDefaults",
    }
)


def parameters(*, auto: bool, z_order_by: Sequence[str] = ()) -> dict[str, Any]:
    """Delta's ``operationParameters`` of an ``OPTIMIZE`` (every partition: no predicate)."""
    return {
        "predicate": "[]",
        "zOrderBy": json.dumps(list(z_order_by)),
        "clusterBy": "[]",
        "auto": auto,
    }


def metrics(files: Sequence[File], adds: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Delta's ``operationMetrics`` of an ``OPTIMIZE`` removing ``files`` for ``adds``."""
    sizes = sorted(int(a["size"]) for a in adds) or [0]

    def at(q: float) -> int:
        return sizes[min(len(sizes) - 1, int(q * len(sizes)))]

    return {
        "numRemovedFiles": str(len(files)),
        "numRemovedBytes": str(sum(f.size for f in files)),
        "numAddedFiles": str(len(adds)),
        "numAddedBytes": str(sum(int(a["size"]) for a in adds)),
        "minFileSize": str(sizes[0]),
        "p25FileSize": str(at(0.25)),
        "p50FileSize": str(at(0.5)),
        "p75FileSize": str(at(0.75)),
        "maxFileSize": str(sizes[-1]),
        "numDeletionVectorsRemoved": "0",
    }


def commit_swap(
    table: DeltaTable,
    files: Sequence[File],
    adds: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any],
    *,
    local_root: str | None,
    operation_parameters: Mapping[str, Any],
) -> int:
    """Commit the swap of ``files`` for ``adds`` (the scratch table's add actions) on
    exactly the next version of a snapshot that still holds every file of ``files``
    unchanged; the version committed. ``local_root``: the table's directory when it is
    local (the commit file is then written here).

    Raises:
        Lost: A commit removed or changed one of ``files``, or changed the table.
    """
    stamp = now_ms()
    new = [_add(a, table) for a in adds]
    removes = [
        {
            "path": f.path,
            "deletionTimestamp": stamp,
            "dataChange": False,
            "extendedFileMetadata": False,
            "size": f.size,
        }
        for f in files
    ]
    info = {
        **metadata,
        "operationMetrics": metrics(files, adds),
        "deltasink.libraryVersion": __version__,
    }
    if local_root is None or not _writes_here(table):  # delta-rs records them zone-less
        partition_by = table.metadata().partition_columns
        uri = str(table.table_uri)
        refuse_timestamp_partitions(arrow_schema(table), partition_by, uri, creating=False)
        if set(rewritten_paths(table)) & {f.path for f in files}:  # it would keep them live
            raise UnsupportedTableFeatureError(
                f"the compaction of {uri} would remove files whose logged paths delta-rs "
                "writes otherwise (characters Spark leaves unencoded), and they would stay "
                "live beside their copies; compact it with Spark's OPTIMIZE",
                table=uri,
                features=[REWRITTEN_PATHS],
            )
    planned = _shape(table)
    wanted = set(files)
    for _ in range(COMMIT_ATTEMPTS):
        base = table.version()
        try:
            if local_root is not None and _writes_here(table):
                _write_commit(table, local_root, base + 1, new, removes, info, operation_parameters)
            else:
                _delta_rs_commit(table, files, new, info, operation_parameters)
        except (CommitFailedError, FileExistsError):
            # Another commit took version base + 1: go on only if it left every file
            # this rewrite removes as it was, and the table as it was planned on.
            table.update_incremental()
            if _shape(table) != planned or not wanted <= set(files_of(table)):
                raise Lost(
                    f"files being compacted were removed or changed, or the table changed, "
                    f"at versions {base + 1}-{table.version()}"
                ) from None
            continue
        table.update_incremental()
        return base + 1
    raise Lost(f"{COMMIT_ATTEMPTS} newer commits took the version first")


def _add(add: Mapping[str, Any], table: DeltaTable) -> dict[str, Any]:
    """The log's add action of a new file (``add``: the scratch's, path encoded once)."""
    values = dict(add.get("partitionValues") or {})
    schema = arrow_schema(table)
    for name, value in values.items():
        field = schema.field(name)
        if value and pa.types.is_timestamp(field.type) and field.type.tz is not None:
            values[name] = _utc(value)
    return {
        "path": add["path"],
        "partitionValues": values,
        "size": int(add["size"]),
        "modificationTime": int(add["modificationTime"]),
        "dataChange": False,
        "stats": add.get("stats") or "{}",
    }


def _utc(value: str) -> str:
    """delta-rs's zone-less UTC partition value as the instant it is, Delta 4's form."""
    parsed = dt.datetime.fromisoformat(value.replace(" ", "T"))
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return parsed.isoformat(timespec="microseconds") + "Z"  # years padded to four digits


def _writes_here(table: DeltaTable) -> bool:
    """Whether this module may write the commit file itself: a protocol whose writer
    features it knows."""
    protocol = table.protocol()
    if protocol.min_writer_version < 7:
        return True
    return set(protocol.writer_features or ()) <= _KNOWN_WRITER_FEATURES


def _write_commit(
    table: DeltaTable,
    root: str,
    version: int,
    adds: Sequence[Mapping[str, Any]],
    removes: Sequence[Mapping[str, Any]],
    info: Mapping[str, Any],
    operation_parameters: Mapping[str, Any],
) -> None:
    """Create the commit file of ``version`` if absent (``FileExistsError`` otherwise),
    then write a checkpoint when the table's interval asks for one (and clean up the
    expired log then, as :func:`~deltasink.backends.deltalog.commits.post_commit_hooks`
    has delta-rs do)."""
    commit_info = {
        "timestamp": now_ms(),
        "operation": "OPTIMIZE",
        "operationParameters": dict(operation_parameters),
        "readVersion": version - 1,
        "isolationLevel": "SnapshotIsolation",
        "isBlindAppend": False,
        **info,
        "engineInfo": f"deltasink/{__version__}",
        "txnId": str(uuid.uuid4()),
    }
    lines: list[dict[str, Any]] = [{"commitInfo": commit_info}]
    lines += [{"add": a} for a in adds] + [{"remove": r} for r in removes]
    log = os.path.join(root, "_delta_log")
    final = os.path.join(log, f"{version:020d}.json")
    temp = os.path.join(log, f".{version:020d}.json.{uuid.uuid4().hex}.tmp")
    with open(temp, "w", encoding="utf-8") as out:
        out.write("\n".join(json.dumps(line, separators=(",", ":")) for line in lines) + "\n")
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temp, final)  # atomic, and fails if another commit holds the version
    finally:
        os.remove(temp)
    hooks = post_commit_hooks(table)  # as delta-rs would run them after its commit
    if hooks.create_checkpoint and _checkpoint_due(table, version):
        table.update_incremental()
        table.create_checkpoint()
        if hooks.cleanup_expired_logs:
            table.cleanup_metadata()


def _checkpoint_due(table: DeltaTable, version: int) -> bool:
    """delta-rs's rule: version v is checkpointed when (v + 1) % interval == 0."""
    try:
        interval = max(
            1, int(table.metadata().configuration.get("delta.checkpointInterval", "100"))
        )
    except ValueError:
        interval = 100
    return (version + 1) % interval == 0


def _delta_rs_commit(
    table: DeltaTable,
    files: Sequence[File],
    adds: Sequence[Mapping[str, Any]],
    info: Mapping[str, Any],
    operation_parameters: Mapping[str, Any],
) -> None:
    """The commit by delta-rs (a ``WRITE``), which encodes the paths it is given once:
    they are given decoded."""
    stamp = now_ms()
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            path=unquote(a["path"]),
            size=a["size"],
            partition_values=a["partitionValues"],
            modification_time=a["modificationTime"],
            data_change=False,
            stats=a["stats"],
        )
        for a in adds
    ]
    actions += [RemoveAction(unquote(f.path), False, stamp, size=f.size) for f in files]
    custom = dict(info)
    custom["operationParameters"] = {
        k: str(v).lower() if isinstance(v, bool) else v for k, v in operation_parameters.items()
    }
    props = CommitProperties(custom_metadata=custom, max_commit_retries=0)
    table.create_write_transaction(
        actions,
        mode="append",
        schema=table.schema(),
        partition_by=list(table.metadata().partition_columns),
        commit_properties=props,
        post_commithook_properties=post_commit_hooks(table),
    )


def _shape(table: DeltaTable) -> tuple[Any, ...]:
    """What a rewrite planned on must not change under it: the schema, the partition
    columns, the protocol and the features whose files it cannot read."""
    protocol = table.protocol()
    return (
        table.schema().to_json(),
        tuple(table.metadata().partition_columns),
        (
            protocol.min_reader_version,
            protocol.min_writer_version,
            tuple(sorted(protocol.reader_features or ())),
            tuple(sorted(protocol.writer_features or ())),
        ),
        tuple(unreadable(table)),
    )
