"""Auto compaction of the target on the embedded engine: Delta's own table property
``delta.autoOptimize.autoCompact``, honoured after each target commit delta-rs makes.

Delta on Spark (and Databricks) runs auto compaction as a post-commit hook of the writing
session; delta-rs has no such hook, so a stream of small batches leaves small files behind
(an insert adds one per batch) and every MERGE plans over more of them. The rules follow
Delta's (delta-io/delta ``hooks/AutoCompact.scala``, ``AutoCompactUtils.scala`` and the
``spark.databricks.delta.autoCompact.*`` confs):

* on when ``delta.autoOptimize.autoCompact`` is ``true`` (also Databricks' ``auto`` and
  ``legacy``, any case) or the deprecated ``delta.autoOptimize`` is ``true``; off when
  unset or ``false``. Any other value is a :class:`~deltasink.errors.ConfigurationError`
  (Delta refuses it too), raised when the sink is built or at its first write;
* files are compacted toward ``delta.targetFileSize`` when the table sets it (bytes, or a
  size such as ``64mb``), else 128 MiB (``autoCompact.maxFileSize``); a file is *small*
  below half of that (``autoCompact.minFileSize``'s default);
* it runs when a partition the commit wrote files to holds at least 50 small files
  (``autoCompact.minNumFiles``), and rewrites those small files of such partitions.
  Partition values are compared as the protocol reads them: ``''`` is null, so a slice
  one writer stored under ``''`` and another under null is one partition.

The decision reads the table state delta-rs already holds after the commit (its add
actions' sizes and times), not storage. The compaction is a commit of its own
(:func:`~.rewrite.rewrite`: files removed and added with ``dataChange=false``) without a
``txn`` action: the markers stay as the data commit left them (a table's ``txn`` state
carries over every later commit). It lands only on a snapshot that still holds every
file it rewrites, so it never commits on files another compaction or writer removed
first: it then commits nothing and plans again. It never fails the write, whose commit
has landed: any other failure (storage) is logged as a warning and the next commit
tries again.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from deltasink._version import __version__
from deltasink.errors import ConfigurationError

from .rewrite import Lost, files_of, rewrite, unreadable

__all__ = [
    "AUTO_COMPACT",
    "MAX_FILE_SIZE",
    "MIN_NUM_FILES",
    "TARGET_FILE_SIZE",
    "AutoCompact",
    "Partition",
    "auto_compact",
    "compact_after_commit",
    "plan",
]

logger = logging.getLogger("deltasink")

#: The table property that turns auto compaction on.
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
#: Its deprecated predecessor (``true`` turns auto compaction on, as in Delta).
AUTO_OPTIMIZE = "delta.autoOptimize"
#: The table property giving the size compacted files aim at.
TARGET_FILE_SIZE = "delta.targetFileSize"
#: Delta's default target of auto compaction (``spark.databricks.delta.autoCompact.maxFileSize``).
MAX_FILE_SIZE = 128 * 1024 * 1024
#: Small files a partition needs before it is compacted (``autoCompact.minNumFiles``).
MIN_NUM_FILES = 50

#: A partition's values, one per partition column (``()``: an unpartitioned table).
Partition = tuple[Any, ...]

_ON = ("true", "auto", "legacy")
_OFF = ("false",)
_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_UNITS = {"": 0, "b": 0, "k": 1, "kb": 1, "m": 2, "mb": 2, "g": 3, "gb": 3, "t": 4, "tb": 4}


@dataclass(frozen=True, kw_only=True)
class AutoCompact:
    """Auto compaction as a table's properties ask for it.

    Attributes:
        target_size: The size compacted files aim at, in bytes.
        min_num_files: Small files a partition needs before it is compacted.
    """

    target_size: int
    min_num_files: int = MIN_NUM_FILES

    @property
    def small_below(self) -> int:
        """Files smaller than this (bytes) are small: half the target, as in Delta."""
        return max(1, self.target_size // 2)


def auto_compact(config: Mapping[str, str], *, table: str) -> AutoCompact | None:
    """The auto compaction the table properties ``config`` ask for (``None``: off).

    Raises:
        ConfigurationError: ``delta.autoOptimize.autoCompact`` or ``delta.autoOptimize``
            holds a value Delta does not accept, or, with auto compaction on,
            ``delta.targetFileSize`` is not a size.
    """
    # Delta matches the names of its own properties in any case
    config = {name.lower(): value for name, value in config.items() if name[:6].lower() == "delta."}
    legacy = _flag(config, AUTO_OPTIMIZE, ("true",), table=table)
    if not (legacy or _flag(config, AUTO_COMPACT, _ON, table=table)):
        return None
    size = config.get(TARGET_FILE_SIZE.lower())
    return AutoCompact(target_size=MAX_FILE_SIZE if size is None else parse_size(size, table=table))


def _flag(config: Mapping[str, str], name: str, on: tuple[str, ...], *, table: str) -> bool:
    value = config.get(name.lower())
    if value is None:
        return False
    text = value.strip().lower()
    if text in on:
        return True
    if text in _OFF:
        return False
    allowed = ", ".join(repr(v) for v in (*on, *_OFF))
    raise ConfigurationError(
        f"the target {table} has the table property {name}={value!r}; Delta accepts "
        f"{allowed} (any case) for auto compaction. Set it to one of those (ALTER TABLE ... "
        "SET TBLPROPERTIES, or TableSpec(properties=...) for a new target).",
        table=table,
    )


def parse_size(text: str, *, table: str) -> int:
    """``delta.targetFileSize`` in bytes: a number of bytes, or one with a binary unit
    (``b``, ``k``/``kb``, ``m``/``mb``, ``g``/``gb``, ``t``/``tb``; any case), as Spark
    reads byte sizes."""
    match = _SIZE.match(text.lower())
    if match is None or match[2] not in _UNITS or int(match[1]) <= 0:
        raise ConfigurationError(
            f"the target {table} has the table property {TARGET_FILE_SIZE}={text!r}, which "
            "is not a positive size (bytes, or e.g. '128mb'). Auto compaction needs it.",
            table=table,
        )
    size: int = int(match[1]) * 1024 ** _UNITS[match[2]]
    return size


def plan(table: DeltaTable, setting: AutoCompact, *, since_ms: int) -> list[Partition] | None:
    """What to compact after a commit that began at ``since_ms`` (epoch milliseconds), read
    from the add actions of the state ``table`` holds.

    Returns:
        ``None`` when nothing is due; else the partitions to compact, each as its
        values (one per partition column, in order; ``()`` for an unpartitioned
        table). A partition is due when the commit wrote a file to it (modified at or
        after ``since_ms``) and it holds ``min_num_files`` small files. Partition values
        are taken as the protocol reads them: an empty string is null, so files a writer
        stored under ``''`` and under null are one partition.
    """
    actions = pa.table(table.get_add_actions(flatten=False))  # flattened: 5x slower
    if actions.num_rows < setting.min_num_files:
        return None
    # delta-rs stamps an add action with the writer's clock when it writes the file: this
    # process's, so the commit's files are those stamped since it began (and any a
    # concurrent writer added meanwhile; a clock stepping back only delays a compaction)
    written = pc.greater_equal(actions.column("modification_time"), pa.scalar(since_ms))
    small = pc.less(actions.column("size_bytes"), pa.scalar(setting.small_below))
    columns = list(table.metadata().partition_columns)
    if not columns:
        count = pc.sum(small.cast(pa.int64())).as_py() if pc.any(written).as_py() else 0
        return [()] if count >= setting.min_num_files else None
    partition = actions.column("partition")
    keys = [f"_{i}" for i in range(len(columns))]
    counts = (
        pa.table([_protocol_value(pc.struct_field(partition, c)) for c in columns], names=keys)
        .append_column("small", small.cast(pa.int64()))
        .append_column("written", written.cast(pa.int64()))
        .group_by(keys, use_threads=False)
        .aggregate([("small", "sum"), ("written", "sum")])
    )
    due = [
        tuple(row[k] for k in keys)
        for row in counts.to_pylist()
        if row["written_sum"] and row["small_sum"] >= setting.min_num_files
    ]
    return due or None


def _protocol_value(values: Any) -> Any:
    """Partition values as the protocol reads them: ``''`` (of any type) is null."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        empty = pc.equal(values, pa.scalar("", values.type))
        return pc.if_else(empty, pa.scalar(None, values.type), values)
    return values


#: Rounds of plan and rewrite after a compaction lost its files to a concurrent commit.
_ROUNDS = 3
_unreadable_warned: set[str] = set()


def compact_after_commit(
    table: DeltaTable,
    *,
    uri: str,
    app_id: str,
    version: int,
    since_ms: int,
    storage_options: Mapping[str, str] | None = None,
) -> int:
    """Auto-compact ``table`` after the commit of ``version`` (begun at ``since_ms``) if
    its properties ask for it and enough small files have gathered. Never raises: the
    data commit is durable; a failure is logged as a warning and left to the next commit.

    The compaction is one commit (:func:`~.rewrite.rewrite`) that lands only on a
    snapshot still holding every file it rewrites: when another compaction or writer
    removed one first, it commits nothing, plans again on the new snapshot (at most
    three rounds) and otherwise leaves the partition to the next commit.

    Returns:
        The compaction commits made (0 or 1).
    """
    try:
        setting = auto_compact(table.metadata().configuration, table=uri)
        for _ in range(_ROUNDS):
            due = None if setting is None else plan(table, setting, since_ms=since_ms)
            if setting is None or due is None:
                return 0
            features = unreadable(table)
            if features:
                if uri not in _unreadable_warned:
                    _unreadable_warned.add(uri)
                    logger.warning(
                        "app %r: auto compaction of %s skipped: it uses %s, whose files "
                        "deltasink cannot rewrite row for row",
                        app_id,
                        uri,
                        features,
                    )
                return 0
            wanted = set(due)
            files = [
                f for f in files_of(table) if f.partition in wanted and f.size < setting.small_below
            ]
            if len(files) < 2:  # the small files are named by absolute URIs (a clone)
                return 0
            started = time.perf_counter()
            try:
                done = rewrite(
                    table,
                    files,
                    uri=uri,
                    storage_options=storage_options,
                    target_size=setting.target_size,
                    metadata={
                        "deltasink.operation": "autoCompact",
                        "deltasink.libraryVersion": __version__,
                    },
                    auto=True,
                )
            except Lost as lost:
                logger.info(
                    "app %r: auto compaction of %s after version %d lost to a concurrent "
                    "commit (%s); planning again",
                    app_id,
                    uri,
                    version,
                    lost,
                )
                continue
            logger.info(
                "app %r: auto-compacted %s after version %d (%d files into %d, Delta "
                "version %d, %.3f s)",
                app_id,
                uri,
                version,
                done.removed,
                done.added,
                done.version,
                time.perf_counter() - started,
            )
            return 1
    except Exception as exc:
        logger.warning(
            "app %r: auto compaction of %s after version %d failed (%s: %s); the commit of "
            "version %d is durable, the next commit tries again",
            app_id,
            uri,
            version,
            type(exc).__name__,
            exc,
            version,
        )
    return 0
