"""The Spark backend: the Spark session makes every Delta commit, with Delta's own
idempotent writes (delta-spark ≥ 2.3, any Databricks runtime, classic or Spark Connect).

What each step does (the staging layout is the embedded backend's, so an operator can
switch engines on the same tables; see ``docs/spark-backend.md``):

* **stage**: the batch is validated on Spark (schema checks on the schema, null and
  duplicate-key checks as one aggregation, nothing collected to the driver), then
  appended to the staging table partitioned by ``_deltasink_version`` with the
  DataFrameWriter options ``txnAppId``/``txnVersion`` and a ``userMetadata`` naming
  the version and its columns: ONE Delta commit. An empty batch writes no file (Spark's
  Delta writer writes none for a partitioned table) but still makes that commit,
  tagged ``stage-empty``; the staging table's history is how such a version is found.
* **publish**: the staged rows are MERGEd into the target by ``MERGE INTO`` compiled
  from the same :class:`~deltasink.merge.MergePlan` as the embedded engine's, with the
  SQL confs ``spark.databricks.delta.write.txnAppId``/``.txnVersion`` (and
  ``commitInfo.userMetadata``) set around that one statement and restored afterwards
  (:mod:`deltasink.sparkconf`): the data change and ``txn(app_id, version)`` are one
  commit, and Delta itself skips a replay.
* **read the logs**: through delta-rs when the tables are paths it can open (the
  target's ``txn`` version, the staging partitions); otherwise through Spark
  (``DESCRIBE HISTORY`` ``userMetadata`` and a ``GROUP BY`` over the staging
  partitions), where Delta's ``txn`` check is what makes a re-applied version a no-op.
* **fencing**: the writer epoch is the staging table property ``deltasink.epoch``,
  claimed with ``ALTER TABLE ... SET TBLPROPERTIES``: a metadata change, which Delta
  makes conflict with every concurrent staging commit.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, Literal

import pyarrow as pa

from deltasink import _faults
from deltasink.backends import is_catalog_name
from deltasink.batch import DELETE_COLUMN, check_required, collect, delete_expr, prepare, quote
from deltasink.checks import Check, StagedBatch, run_checks
from deltasink.deltalog import is_local
from deltasink.errors import (
    CommitError,
    ConfigurationError,
    DuplicateKeyError,
    FencedError,
    KeyColumnError,
    SchemaMismatchError,
    StagingOwnershipError,
)
from deltasink.history import HistoryEntry, history_from_commits, previous_rows, user_metadata
from deltasink.merge import compile_merge
from deltasink.protocol import CommitResult, DiscardReason, LogState, StagedVersion
from deltasink.sparkconf import TXN_APP_ID, TXN_VERSION, USER_METADATA, session_conf
from deltasink.spec import MergeSpec
from deltasink.staging import (
    FORMAT,
    PROP_APP,
    PROP_EPOCH,
    PROP_FORMAT,
    PROP_QUARANTINE,
    PROP_SPEC,
    PROP_TARGET,
    VERSION_COLUMN,
    GcResult,
    StagingTable,
)
from deltasink.target import TargetTable

__all__ = ["LogReader", "SparkBackend", "StagingLedger", "ddl_type", "prepare_frame", "table_ref"]

logger = logging.getLogger("deltasink")

LogReader = Literal["auto", "delta-rs", "spark"]

#: Staging table property: the token of the writer that claimed the current epoch.
PROP_EPOCH_OWNER = "deltasink.epochOwner"
#: ``txnAppId`` suffix of staging commits that must not be skipped by Delta's ``txn``
#: check (re-staging an aborted version, recording the discard of an empty one); their
#: ``txnVersion`` is the staging table's next version, so it always increases.
LEDGER_SUFFIX = "#ledger"
_ROW, _RANK = "_deltasink_row", "_deltasink_rank"
#: How many recent commits one history read looks at, growing until it finds what it
#: needs: a staged version still pending must have been staged within the last
#: ``_PAGES[-1]`` staging commits to be found by its history alone (empty versions).
_PAGES = (16, 256, 2048)
_CLAIM_ATTEMPTS = 20
_CONFLICT = re.compile(
    r"Concurrent\w*Exception|MetadataChangedException|ProtocolChangedException|"
    r"DELTA_CONCURRENT_\w+|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED"
)
_MISSING = re.compile(
    r"DELTA_MISSING_DELTA_TABLE|DELTA_TABLE_NOT_FOUND|TABLE_OR_VIEW_NOT_FOUND|PATH_NOT_FOUND|"
    r"is not a Delta table|does not exist|doesn't exist|Table or view not found",
    re.IGNORECASE,
)
_EVENT = re.compile(
    r"^deltasink (?P<op>[a-z-]+) app=(?P<app>\S+)(?: version=(?P<version>\d+))?"
    r"(?: versions=(?P<versions>[\d,]+))?(?: columns=(?P<columns>\[.*\]))?$",
    re.DOTALL,
)


# -- SQL text -----------------------------------------------------------------------------


def _name_parts(name: str) -> list[str]:
    """``cat.db.tbl`` (parts optionally backtick-quoted) as its unquoted parts."""
    parts: list[str] = []
    i, n = 0, len(name)
    while True:
        if name.startswith("`", i):
            start, chars = i + 1, []
            while True:
                close = name.find("`", start)
                if close < 0:
                    raise ConfigurationError(f"unbalanced backtick in table name {name!r}.")
                chars.append(name[start:close])
                if not name.startswith("``", close):
                    break
                chars.append("`")
                start = close + 2
            part, i = "".join(chars), close + 1
        else:
            dot = name.find(".", i)
            end = n if dot < 0 else dot
            part, i = name[i:end], end
            if "`" in part:
                raise ConfigurationError(f"table name {name!r}: a backtick inside part {part!r}.")
        if not part:
            raise ConfigurationError(f"table name {name!r} has an empty part.")
        parts.append(part)
        if i == n:
            return parts
        if name[i] != ".":
            raise ConfigurationError(f"table name {name!r}: expected '.' at position {i}.")
        i += 1


def table_ref(location: str) -> str:
    """A Spark SQL reference to a Delta table: ``delta.`/path``` for a path or URI,
    the quoted parts for a catalog name (``catalog.schema.table``)."""
    if is_catalog_name(location):
        return ".".join(quote(part) for part in _name_parts(location))
    return f"delta.{quote(location)}"


def ddl_type(data_type: Any) -> str:
    """A Spark SQL type as DDL text, field names quoted (``simpleString`` does not quote
    them). Every nested field is nullable, as in tables deltasink creates."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, StructType):
        fields = ", ".join(f"{quote(f.name)}: {ddl_type(f.dataType)}" for f in data_type.fields)
        return f"STRUCT<{fields}>"
    if isinstance(data_type, ArrayType):
        return f"ARRAY<{ddl_type(data_type.elementType)}>"
    if isinstance(data_type, MapType):
        return f"MAP<{ddl_type(data_type.keyType)}, {ddl_type(data_type.valueType)}>"
    return str(data_type.simpleString())


def ddl_columns(schema: Any) -> str:
    """``\\`a\\` BIGINT, \\`b\\` STRING`` for a Spark ``StructType``."""
    return ", ".join(f"{quote(f.name)} {ddl_type(f.dataType)}" for f in schema.fields)


def _sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _matches(exc: BaseException, pattern: re.Pattern[str]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if pattern.search(f"{type(seen).__name__}: {seen}"):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a Delta optimistic-concurrency conflict (worth retrying)."""
    return _matches(exc, _CONFLICT)


# -- validation on Spark ------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedFrame:
    """A validated batch, shaped for staging (still lazy: nothing is written).

    Attributes:
        frame: The staged form: target types, one row per key, the delete flag last.
        columns: Its data columns (without the delete flag).
        rows: Rows it holds.
    """

    frame: Any
    columns: tuple[str, ...]
    rows: int


def prepare_frame(df: Any, spec: MergeSpec, target: Any | None, *, table: str) -> PreparedFrame:
    """Validate a Spark DataFrame as :func:`deltasink.batch.prepare` validates Arrow, on
    Spark, raising the same named errors, in the same order, with the same messages.

    Schema checks run on a zero-row Arrow form of the batch (the embedded engine's own
    code); null, NOT NULL and duplicate-key checks run as ONE Spark aggregation; with
    ``sequence_by`` the latest row per key is kept by a window (ties: the later row in
    the DataFrame's order). No row reaches the driver.

    Args:
        df: The batch (classic or Spark Connect).
        spec: The merge spec.
        target: The target as a Spark DataFrame (its schema is used), or ``None`` if it
            does not exist yet.
        table: The target's name, for messages.

    Raises:
        InvalidInputError: As :func:`~deltasink.batch.prepare`, plus a bad
            ``delete_when``.
    """
    zero = collect(df.limit(0), spec)  # names; delete_when evaluated by the df's session
    check_required(zero, spec)  # missing key / sequence_by columns
    target_arrow: pa.Schema | None = None if target is None else target.limit(0).toArrow().schema
    frame = df.selectExpr("*", delete_expr(spec.delete_when)) if spec.delete_when else df
    not_null = [
        f.name
        for f in (target_arrow or [])
        if not f.nullable and f.name in zero.column_names and f.name != DELETE_COLUMN
    ]
    stats = _batch_stats(frame, spec, not_null)
    for i, name in enumerate(spec.required_columns):
        if stats[f"null_{i}"]:
            role = "sequence_by" if name == spec.sequence_by else "key"
            raise KeyColumnError(
                f"{role} column {name!r} is null in {stats[f'null_{i}']} row(s) of the batch; "
                f"every row needs a {role}. Filter or fill them in the job.",
                column=name,
            )
    staged = prepare(zero, spec, target_arrow, target=table)  # types, unknown columns
    for i, name in enumerate(not_null):
        if stats[f"notnull_{i}"]:
            raise SchemaMismatchError(
                f"column {name!r} is NOT NULL in target {table} but {stats[f'notnull_{i}']} "
                "row(s) of the batch are null. Fill or filter them in the job.",
                table=table,
                column=name,
            )
    rows = stats["n"]
    if spec.keys:
        if spec.sequence_by:
            frame = _latest_per_key(frame, spec.keys, spec.sequence_by)
            rows = stats["keys"]
        elif stats["keys"] != stats["n"]:
            _raise_duplicates(frame, spec.keys, stats["n"] - stats["keys"])
    columns = tuple(c for c in staged.column_names if c != DELETE_COLUMN)
    target_types = {} if target is None else {f.name: f.dataType for f in target.schema.fields}
    batch_types = {f.name: f.dataType for f in frame.schema.fields}
    select = []
    for name in columns:
        wanted = target_types.get(name)
        if wanted is not None and ddl_type(wanted) != ddl_type(batch_types[name]):
            select.append(f"CAST({quote(name)} AS {ddl_type(wanted)}) AS {quote(name)}")
        else:
            select.append(quote(name))
    if spec.delete_when:
        select.append(quote(DELETE_COLUMN))
    return PreparedFrame(frame.selectExpr(*select), columns, int(rows))


def _batch_stats(frame: Any, spec: MergeSpec, not_null: Sequence[str]) -> dict[str, int]:
    exprs = ["count(1) AS `n`"]
    for i, name in enumerate(spec.required_columns):
        exprs.append(f"sum(CASE WHEN {quote(name)} IS NULL THEN 1 ELSE 0 END) AS `null_{i}`")
    live = f" AND NOT {quote(DELETE_COLUMN)}" if spec.delete_when else ""
    for i, name in enumerate(not_null):
        exprs.append(
            f"sum(CASE WHEN {quote(name)} IS NULL{live} THEN 1 ELSE 0 END) AS `notnull_{i}`"
        )
    if spec.keys:
        exprs.append(f"count(DISTINCT {', '.join(quote(k) for k in spec.keys)}) AS `keys`")
    row = frame.selectExpr(*exprs).collect()[0].asDict()
    return {k: int(v or 0) for k, v in row.items()}


def _latest_per_key(frame: Any, keys: Sequence[str], sequence_by: str) -> Any:
    partition = ", ".join(quote(k) for k in keys)
    return (
        frame.selectExpr("*", f"monotonically_increasing_id() AS {quote(_ROW)}")
        .selectExpr(
            "*",
            f"row_number() OVER (PARTITION BY {partition} ORDER BY {quote(sequence_by)} DESC, "
            f"{quote(_ROW)} DESC) AS {quote(_RANK)}",
        )
        .where(f"{quote(_RANK)} = 1")
        .drop(_RANK, _ROW)
    )


def _raise_duplicates(frame: Any, keys: Sequence[str], extra: int) -> None:
    counted = frame.groupBy(*keys).count().where("`count` > 1")
    dup = counted.selectExpr("count(1) AS n").collect()[0]["n"]
    example = counted.limit(1).collect()[0].asDict()
    times = example.pop("count")
    raise DuplicateKeyError(
        f"{dup} key(s) appear more than once in the batch, e.g. {example} ({times} times). "
        "Deduplicate in the job, or set MergeSpec(sequence_by=...) to keep the latest row "
        "per key.",
        column=keys[0],
    )


# -- the staging ledger -------------------------------------------------------------------


def _millis(value: Any) -> int:
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return int(aware.timestamp() * 1000)
    return int(value)


@dataclass
class StagingLedger:
    """What the staging table's commit history adds to its partitions.

    Fed with the staging commits oldest first (delta-rs ``DeltaTable.history()`` dicts
    or ``DESCRIBE HISTORY`` rows as dicts), it tracks from their ``userMetadata``:

    Attributes:
        app_id: The writer.
        empty: Empty versions staged by Spark (a commit without files) and not
            discarded since, with their staging time.
        columns: The data columns each version was staged with.
        mark: The highest version a ``discard-committed`` commit recorded as committed.
        through: The newest staging table version applied.
    """

    app_id: str
    empty: dict[int, datetime] = field(default_factory=dict)
    columns: dict[int, tuple[str, ...]] = field(default_factory=dict)
    mark: int | None = None
    through: int | None = None

    @staticmethod
    def event(commit: Mapping[str, Any], app_id: str) -> dict[str, Any] | None:
        """``{op, version, versions, columns}`` of a deltasink staging commit of
        ``app_id``, or ``None``."""
        match = _EVENT.match(str(commit.get("userMetadata") or ""))
        if match is None or match["app"] != app_id:
            return None
        version = None if match["version"] is None else int(match["version"])
        if match["versions"]:
            versions = tuple(int(v) for v in match["versions"].split(","))
        else:
            versions = () if version is None else (version,)
        columns = tuple(json.loads(match["columns"])) if match["columns"] else None
        return {"op": match["op"], "version": version, "versions": versions, "columns": columns}

    def apply(self, commits: Iterable[Mapping[str, Any]]) -> None:
        """Apply ``commits`` (oldest first) to the ledger."""
        for commit in commits:
            self.through = int(commit["version"])
            event = self.event(commit, self.app_id)
            if event is None:
                continue
            op, version = event["op"], event["version"]
            if op in ("stage", "stage-empty", "restage") and version is not None:
                self.empty.pop(version, None)
                if op == "stage-empty":
                    staged_at = datetime.fromtimestamp(
                        _millis(commit["timestamp"]) / 1000, timezone.utc
                    )
                    self.empty[version] = staged_at
                if event["columns"] is not None:
                    self.columns[version] = event["columns"]
            elif op.startswith("discard-"):
                for v in event["versions"]:
                    self.empty.pop(v, None)
                if op == "discard-committed" and version is not None:
                    self.mark = version if self.mark is None else max(self.mark, version)

    @classmethod
    def stops_scan(cls, commit: Mapping[str, Any], app_id: str, committed: int | None) -> bool:
        """Reading history backwards may stop at a staging commit of a version ≤ the
        committed one: a version still pending was staged after it (versions are staged
        in increasing order while one is pending)."""
        event = cls.event(commit, app_id)
        return (
            committed is not None
            and event is not None
            and event["op"] in ("stage", "stage-empty", "restage")
            and event["version"] is not None
            and event["version"] <= committed
        )


def new_commits(
    fetch: Callable[[int], list[dict[str, Any]]],
    through: int | None,
    stop: Callable[[Mapping[str, Any]], bool],
) -> list[dict[str, Any]]:
    """The commits newer than ``through`` (all of them, back to ``stop``, when
    ``through`` is ``None``), oldest first, reading growing pages of ``fetch(limit)``
    (newest first) so a caught-up reader touches only the latest commits."""
    fresh: list[dict[str, Any]] = []
    for limit in _PAGES:
        page = fetch(limit)
        fresh = []
        done = len(page) < limit
        for commit in page:
            version = int(commit["version"])
            if through is not None and version <= through:
                done = True
                break
            fresh.append(commit)
            if through is None and stop(commit):
                done = True
                break
        if done:
            break
    return list(reversed(fresh))


# -- the backend ----------------------------------------------------------------------------


class SparkBackend:
    """:class:`~deltasink.protocol.Participant` whose Delta commits are made by Spark
    (with fencing, coalescing and write-audit-publish).

    Every method may be called again after a crash: state is read back from the two
    Delta logs, and every target commit is tagged ``txn(app_id, version)``, which Delta
    checks before committing.

    Args:
        spark: The session (default: the active session, or the batch's own).
        target: Target path/URI or catalog name (``catalog.schema.table``).
        staging: Staging path/URI or catalog name.
        app_id: The writer.
        spec: The MergeSpec for new versions; ``None`` means the recorded one.
        max_attempts: Attempts per target commit when concurrent writers conflict.
        storage_options: delta-rs storage options, for reading the logs of tables on
            object stores through delta-rs.
        checks: Pre-commit checks (write-audit-publish).
        log_reader: Who reads the logs: ``"delta-rs"``, ``"spark"``, or ``"auto"``
            (default, :attr:`default_log_reader`): delta-rs for local paths (except
            on Databricks, where a bare path means DBFS) and for remote paths when
            ``storage_options`` are given, Spark otherwise.
    """

    name = "spark"
    reason = "Spark makes every Delta commit, with Delta's own txn idempotency"
    default_log_reader: ClassVar[LogReader] = "auto"

    def __init__(
        self,
        *,
        spark: Any,
        target: str,
        staging: str,
        app_id: str,
        spec: MergeSpec | None,
        max_attempts: int = 8,
        storage_options: Mapping[str, str] | None = None,
        checks: Sequence[Check] = (),
        log_reader: LogReader | None = None,
    ) -> None:
        self._spark = spark
        self.target = target
        self.staging = staging
        self.app_id = app_id
        self.max_attempts = max_attempts
        self.checks = tuple(checks)
        self._spec = spec
        self._epoch: int | None = None
        self._owner: str | None = None
        self._warned_mark: int | None = None
        self.target_ref = table_ref(target)
        self.staging_ref = table_ref(staging)
        self._catalog = is_catalog_name(target), is_catalog_name(staging)
        reader = log_reader or self.default_log_reader
        self._rs: tuple[TargetTable, StagingTable] | None = None
        if self._uses_delta_rs(reader, storage_options):
            self._rs = (
                TargetTable(target, storage_options=storage_options, max_attempts=max_attempts),
                StagingTable(
                    staging, target=target, app_id=app_id, storage_options=storage_options
                ),
            )
        self.log_reader: Literal["delta-rs", "spark"] = "delta-rs" if self._rs else "spark"
        self._ledger = StagingLedger(app_id)
        self._target_through: int | None = None
        self._target_committed: int | None = None

    def _uses_delta_rs(self, reader: LogReader, options: Mapping[str, str] | None) -> bool:
        if reader not in ("auto", "delta-rs", "spark"):
            raise ConfigurationError(f"log_reader must be auto, delta-rs or spark, got {reader!r}.")
        if any(self._catalog):
            if reader == "delta-rs":
                raise ConfigurationError(
                    "log_reader='delta-rs' needs path tables; catalog names are read by Spark.",
                    table=self.target,
                )
            return False
        if reader != "auto":
            return reader == "delta-rs"
        import os

        if is_local(self.target) and is_local(self.staging):
            return not os.environ.get("DATABRICKS_RUNTIME_VERSION")
        return bool(options)

    # -- sessions and SQL ----------------------------------------------------------------

    def _session(self, df: Any = None) -> Any:
        if self._spark is None:
            if df is not None and hasattr(df, "sparkSession"):
                self._spark = df.sparkSession
                return self._spark
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is None:
                raise ConfigurationError(
                    "the spark engine needs a Spark session: pass DeltaSink(..., spark=spark) "
                    "or create one first (a Delta-enabled session, or Databricks).",
                    table=self.target,
                    app_id=self.app_id,
                )
            self._spark = active
        return self._spark

    def _sql(self, statement: str, *, user_metadata: str | None = None) -> list[Any]:
        """Run one statement with the txn confs unset (a leftover from other code must
        not make Delta skip it) and ``userMetadata`` as given."""
        spark = self._session()
        settings = {TXN_APP_ID: None, TXN_VERSION: None, USER_METADATA: user_metadata}
        with session_conf(spark, settings):
            rows: list[Any] = spark.sql(statement).collect()
        return rows

    def _write(
        self,
        frame: Any,
        ref_location: str,
        *,
        txn: tuple[str, int],
        user_metadata: str,
        mode: str = "append",
        options: Mapping[str, str] | None = None,
    ) -> None:
        """One DataFrameWriter commit tagged ``txn`` (skipped by Delta when the table's
        ``txn`` version for that app is already ≥ it)."""
        writer = (
            frame.write.format("delta")
            .mode(mode)
            .option("txnAppId", txn[0])
            .option("txnVersion", str(txn[1]))
            .option("userMetadata", user_metadata)
        )
        for key, value in (options or {}).items():
            writer = writer.option(key, value)
        with session_conf(self._session(), {TXN_APP_ID: None, TXN_VERSION: None}):
            if is_catalog_name(ref_location):
                writer.saveAsTable(ref_location)
            else:
                writer.save(ref_location)

    def _history(self, ref: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits of a table via ``DESCRIBE HISTORY``, as dicts
        (timestamps in epoch milliseconds, whatever the session time zone)."""
        try:
            frame = self._session().sql(f"DESCRIBE HISTORY {ref} LIMIT {int(limit)}")
        except Exception as exc:
            if _matches(exc, _MISSING):
                return []
            raise
        rows = frame.selectExpr(
            "version",
            "unix_millis(timestamp) AS timestamp",
            "operation",
            "operationMetrics",
            "userMetadata",
        ).collect()
        return [row.asDict(recursive=True) for row in rows]

    # -- configuration ---------------------------------------------------------------------

    def recorded_spec(self) -> MergeSpec | None:
        props = self._staging_props()
        text = None if props is None else props.get(PROP_SPEC)
        return MergeSpec.from_json(text) if text else None

    def spec_for_new_versions(self) -> MergeSpec:
        """The spec new versions are staged with."""
        spec = self._spec or self.recorded_spec()
        if spec is None:
            raise ConfigurationError(
                f"no MergeSpec given for app {self.app_id!r} on {self.target} and none is "
                "recorded in its staging table; pass merge=MergeSpec(...).",
                table=self.target,
                app_id=self.app_id,
            )
        return spec

    def spec_for_staged(self) -> MergeSpec:
        """The spec staged versions are committed with (the one they were staged with)."""
        return self.recorded_spec() or self.spec_for_new_versions()

    # -- reading the logs ------------------------------------------------------------------

    def _staging_props(self) -> dict[str, str] | None:
        """The staging table's properties (ownership checked), ``None`` if absent."""
        if self._rs is not None:
            table = self._rs[1].open()  # checks the owner
            return None if table is None else dict(table.metadata().configuration)
        try:
            rows = self._sql(f"SHOW TBLPROPERTIES {self.staging_ref}")
        except Exception as exc:
            if _matches(exc, _MISSING):
                return None
            raise
        props = {str(r[0]): str(r[1]) for r in rows}
        target, app = props.get(PROP_TARGET), props.get(PROP_APP)
        if target is None or app is None:
            raise StagingOwnershipError(
                f"{self.staging} is a Delta table that deltasink did not create (no "
                f"{PROP_TARGET}/{PROP_APP} properties); refusing to use it as staging. "
                "Choose another staging location.",
                table=self.staging,
                app_id=self.app_id,
            )
        if target != self.target or app != self.app_id:
            raise StagingOwnershipError(
                f"staging table {self.staging} belongs to target {target!r} and app {app!r}, "
                f"not to target {self.target!r} and app {self.app_id!r}. Each (target, "
                "app_id) needs its own staging table: pass another staging= location.",
                table=self.staging,
                app_id=self.app_id,
            )
        return props

    def _staging_commits(self, limit: int) -> list[dict[str, Any]]:
        if self._rs is not None:
            table = self._rs[1].open()
            return [] if table is None else list(table.history(limit))
        return self._history(self.staging_ref, limit)

    def _target_commits(self, limit: int | None) -> list[dict[str, Any]]:
        if self._rs is not None:
            table = self._rs[0].open()
            return [] if table is None else list(table.history(limit))
        return self._history(self.target_ref, limit or 1_000_000)

    def _partitions(self) -> tuple[StagedVersion, ...]:
        """Staged versions that have data files (the staging table's partitions)."""
        if self._rs is not None:
            return self._rs[1].versions()
        rows = self._sql(
            f"SELECT {quote(VERSION_COLUMN)} AS v, count(1) AS n, "
            "unix_millis(min(_metadata.file_modification_time)) AS t "
            f"FROM {self.staging_ref} GROUP BY {quote(VERSION_COLUMN)}"
        )
        found = [
            StagedVersion(
                int(r["v"]), int(r["n"]), datetime.fromtimestamp(r["t"] / 1000, timezone.utc)
            )
            for r in rows
        ]
        return tuple(sorted(found, key=lambda s: s.version))

    def _committed(self) -> int | None:
        """The target's committed version: its ``txn`` through delta-rs, else the newest
        deltasink commit of the app in ``DESCRIBE HISTORY`` (``None`` when none is found
        in the recent history: Delta's ``txn`` check then skips re-applied versions)."""
        if self._rs is not None:
            return self._rs[0].committed_version(self.app_id)
        latest = self._history(self.target_ref, 1)
        if not latest:
            self._target_through = self._target_committed = None
            return None
        if self._target_through is not None and int(latest[0]["version"]) < self._target_through:
            self._target_through = self._target_committed = None  # the table was recreated
        fresh = new_commits(
            lambda n: self._history(self.target_ref, n),
            self._target_through,
            lambda c: bool(history_from_commits([c], self.app_id)),
        )
        for entry in history_from_commits(reversed(fresh), self.app_id):
            if self._target_committed is None or entry.version > self._target_committed:
                self._target_committed = entry.version
        self._target_through = int(latest[0]["version"])
        return self._target_committed

    def _read_ledger(self, committed: int | None) -> StagingLedger:
        latest = self._staging_commits(1)
        if not latest:
            self._ledger = StagingLedger(self.app_id)
            return self._ledger
        if self._ledger.through is not None and int(latest[0]["version"]) < self._ledger.through:
            self._ledger = StagingLedger(self.app_id)  # the table was recreated
        fresh = new_commits(
            self._staging_commits,
            self._ledger.through,
            lambda c: StagingLedger.stops_scan(c, self.app_id, committed),
        )
        self._ledger.apply(fresh)
        return self._ledger

    def read_state(self) -> LogState:
        """The committed version and the staged versions, from the two logs.

        Staged versions are the staging partitions plus the empty versions the staging
        history records (Spark writes no file for an empty batch).
        """
        committed = self._committed()
        props = self._staging_props()
        if props is None:
            return LogState(committed, ())
        ledger = self._read_ledger(committed)
        mark = ledger.mark
        if self._rs is not None:
            rs_mark = self._rs[1].committed_mark()
            if rs_mark is not None and (mark is None or rs_mark > mark):
                mark = rs_mark
        if mark is not None and (committed is None or mark > committed):
            if self._rs is not None and self._warned_mark != mark:
                logger.warning(
                    "app %r: the target %s records version %s as committed but the staging "
                    "table saw %s committed; the target was rewritten or its txn markers "
                    "expired. Versions ≤ %s are not applied again.",
                    self.app_id,
                    self.target,
                    committed,
                    mark,
                    mark,
                )
                self._warned_mark = mark
            committed = mark
        parts = self._partitions()
        have = {s.version for s in parts}
        empties = [
            StagedVersion(v, 0, at)
            for v, at in ledger.empty.items()
            if v not in have and (committed is None or v > committed)
        ]
        staged = tuple(sorted([*parts, *empties], key=lambda s: s.version))
        return LogState(committed, staged, _quarantine_of(props))

    def target_exists(self) -> bool:
        if self._rs is not None:
            return self._rs[0].open() is not None
        if self._catalog[0]:
            return bool(self._session().catalog.tableExists(self.target))
        try:
            self._session().sql(f"SELECT * FROM {self.target_ref} LIMIT 0").schema  # noqa: B018
        except Exception as exc:
            if _matches(exc, _MISSING):
                return False
            raise
        return True

    def _target_frame(self) -> Any | None:
        """The target as a Spark DataFrame (for its schema), or ``None`` if absent."""
        if not self.target_exists():
            return None
        return self._session().sql(f"SELECT * FROM {self.target_ref}")

    def _staging_schema(self) -> Any:
        return self._session().sql(f"SELECT * FROM {self.staging_ref} LIMIT 0").schema

    # -- fencing ---------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        """This writer's epoch, once claimed."""
        return self._epoch

    def claim(self) -> None:
        """Take over the writer role now (``recover()`` calls this first); a no-op if
        this backend already holds the current epoch, or if nothing is staged yet."""
        if self._epoch is None:
            self._fence()
        else:
            self._check()

    def _fence(self) -> int | None:
        """Claim an epoch on first use, check it afterwards; ``None``: no staging table,
        so nothing to fence."""
        if self._epoch is None:
            if self._staging_props() is not None:
                self._epoch = self._claim_epoch()
        else:
            self._check()
        return self._epoch

    def _claim_epoch(self) -> int:
        """Set ``deltasink.epoch`` to the next value, with this writer's token in
        ``deltasink.epochOwner``. A Spark ``ALTER TABLE`` reads the table when it starts,
        not when the epoch was read, so two claimers may write the same epoch; the token
        tells them apart (the last one wins, the other claims again)."""
        token = uuid.uuid4().hex
        for _ in range(_CLAIM_ATTEMPTS):
            props = self._staging_props()
            assert props is not None
            epoch = int(props.get(PROP_EPOCH, "0")) + 1
            try:
                self._set_props(
                    {PROP_EPOCH: str(epoch), PROP_EPOCH_OWNER: token},
                    user_metadata("claim-epoch", self.app_id, None),
                )
            except Exception as exc:
                if is_conflict(exc):  # another writer claimed at the same time
                    continue
                raise
            now = self._staging_props() or {}
            if now.get(PROP_EPOCH) == str(epoch) and now.get(PROP_EPOCH_OWNER) == token:
                logger.debug("app %r claimed staging epoch %s", self.app_id, epoch)
                self._owner = token
                return epoch
        raise CommitError(
            f"could not claim a writer epoch on {self.staging} after {_CLAIM_ATTEMPTS} "
            "attempts: other writers with the same app_id keep claiming it. Run one writer "
            "per app_id.",
            table=self.staging,
            app_id=self.app_id,
        )

    def _check(self) -> None:
        """Raise :class:`FencedError` if a newer writer claimed the staging table."""
        if self._epoch is None:
            return
        props = self._staging_props() or {}
        current = int(props.get(PROP_EPOCH, "0"))
        if current != self._epoch or props.get(PROP_EPOCH_OWNER) != self._owner:
            raise FencedError(
                f"app {self.app_id!r} on {self.target}: another writer with the same app_id "
                f"took over the staging table (epoch {current}; this sink holds epoch "
                f"{self._epoch}). This sink must stop; the newer writer carries on. If that "
                "one is gone, create a new DeltaSink to take over.",
                epoch=self._epoch,
                current_epoch=current,
                table=self.staging,
                app_id=self.app_id,
            )

    def _set_props(self, props: Mapping[str, str], metadata: str) -> None:
        listed = ", ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in props.items())
        self._sql(
            f"ALTER TABLE {self.staging_ref} SET TBLPROPERTIES ({listed})", user_metadata=metadata
        )

    # -- staging -----------------------------------------------------------------------------

    def _frame(self, batch: object) -> Any:
        if isinstance(batch, pa.RecordBatch | pa.RecordBatchReader):
            batch = (
                pa.Table.from_batches([batch])
                if isinstance(batch, pa.RecordBatch)
                else batch.read_all()
            )
        if isinstance(batch, pa.Table):
            return self._session().createDataFrame(batch)
        return batch

    def _prepare(self, batch: object, spec: MergeSpec) -> PreparedFrame:
        df = self._frame(batch)
        self._session(df)
        prepared = prepare_frame(
            _require_dataframe(df), spec, self._target_frame(), table=self.target
        )
        _faults.point("stage.before_write")
        return prepared

    def stage(self, batch: object, version: int) -> StagedVersion:
        """Validate ``batch`` on Spark, then append it to the staging table in one commit
        tagged ``txn(app_id, version)``; the first stage creates the table.

        A failure before that commit leaves nothing staged (Spark removes the files of a
        failed write job; anything left is unreferenced and goes with ``VACUUM``).
        """
        spec = self.spec_for_new_versions()
        recorded = self.recorded_spec()
        if recorded is not None and recorded != spec:
            pending = self.read_state().pending
            if pending:
                raise ConfigurationError(
                    f"versions {[s.version for s in pending]} of app {self.app_id!r} were "
                    f"staged with {recorded} and are not committed yet; commit or recover "
                    f"them (or abort them) before staging with {spec}.",
                    table=self.target,
                    app_id=self.app_id,
                    version=version,
                )
        prepared = self._prepare(batch, spec)
        if self._staging_props() is None:
            self._create_staging(prepared, spec)
        epoch = self._fence()
        assert epoch is not None
        if recorded is not None and recorded != spec:
            self._check()
            self._set_props({PROP_SPEC: spec.to_json()}, user_metadata("spec", self.app_id, None))
        return self._append(version, prepared, operation="stage")

    def _create_staging(self, prepared: PreparedFrame, spec: MergeSpec) -> None:
        """``CREATE TABLE IF NOT EXISTS`` with the owner properties in its first commit
        (a concurrent creator wins; the epoch claim that follows sorts writers out)."""
        columns = ddl_columns(prepared.frame.schema)
        props = {
            PROP_TARGET: self.target,
            PROP_APP: self.app_id,
            PROP_FORMAT: FORMAT,
            PROP_SPEC: spec.to_json(),
            PROP_EPOCH: "0",
        }
        listed = ", ".join(f"{_sql_string(k)} = {_sql_string(v)}" for k, v in props.items())
        try:
            self._sql(
                f"CREATE TABLE IF NOT EXISTS {self.staging_ref} ({columns}, "
                f"{quote(VERSION_COLUMN)} BIGINT) USING DELTA "
                f"PARTITIONED BY ({quote(VERSION_COLUMN)}) TBLPROPERTIES ({listed})",
                user_metadata=user_metadata("create", self.app_id, None),
            )
        except Exception:
            if self._staging_props() is None:
                raise

    def _add_columns(self, ref: str, schema: Any, have: Iterable[str]) -> None:
        """``ALTER TABLE ... ADD COLUMNS`` for the fields of ``schema`` not in ``have``
        (a metadata commit of its own; harmless if the next step fails)."""
        present = {name.lower() for name in have}
        new = [f for f in schema.fields if f.name.lower() not in present]
        if new:
            self._sql(
                f"ALTER TABLE {ref} ADD COLUMNS ({ddl_columns(_struct(new))})",
                user_metadata=user_metadata("add-columns", self.app_id, None),
            )

    def _append(self, version: int, prepared: PreparedFrame, *, operation: str) -> StagedVersion:
        self._check()
        staging_schema = self._staging_schema()
        self._add_columns(self.staging_ref, prepared.frame.schema, staging_schema.names)
        staging_schema = self._staging_schema()
        present = set(prepared.frame.columns)
        select = [
            quote(f.name)
            if f.name in present
            else f"CAST(NULL AS {ddl_type(f.dataType)}) AS {quote(f.name)}"
            for f in staging_schema.fields
            if f.name != VERSION_COLUMN
        ]
        select.append(f"CAST({version} AS BIGINT) AS {quote(VERSION_COLUMN)}")
        out = prepared.frame.selectExpr(*select)
        op = operation if prepared.rows else "stage-empty"
        metadata = f"{user_metadata(op, self.app_id, version)} columns={json.dumps(list(prepared.columns))}"
        _faults.point("stage.after_files")
        self._check()
        try:
            if operation == "restage":
                self._write(
                    out,
                    self.staging,
                    txn=self._ledger_txn(),
                    user_metadata=metadata,
                    mode="overwrite",
                    options={"replaceWhere": f"{quote(VERSION_COLUMN)} = {version}"},
                )
            else:
                self._write(out, self.staging, txn=(self.app_id, version), user_metadata=metadata)
                if not self._is_staged(version):
                    # Delta skipped the write: the staging txn of the app is already ≥
                    # version (the version was aborted before). Stage it untagged-by-version.
                    self._write(out, self.staging, txn=self._ledger_txn(), user_metadata=metadata)
        except Exception as exc:
            if is_conflict(exc):
                self._check()  # a newer writer's claim is the usual cause
            raise
        self._check()
        _faults.point("stage.after_log_commit")
        return StagedVersion(version, prepared.rows, datetime.now(timezone.utc))

    def _ledger_txn(self) -> tuple[str, int]:
        latest = self._staging_commits(1)
        return self.app_id + LEDGER_SUFFIX, (int(latest[0]["version"]) + 1 if latest else 0)

    def _is_staged(self, version: int) -> bool:
        return self.read_state().find(version) is not None

    # -- publishing --------------------------------------------------------------------------

    def _columns(self, version: int) -> tuple[str, ...]:
        """The data columns ``version`` was staged with (its ``userMetadata``); the
        staging table's data columns when that commit is out of reach."""
        if self._ledger.through is None:
            self.read_state()
        columns = self._ledger.columns.get(version)
        if columns is None:
            skip = {VERSION_COLUMN, DELETE_COLUMN}
            columns = tuple(n for n in self._staging_schema().names if n not in skip)
        return columns

    def source_sql(self, versions: Sequence[int], columns: Sequence[str], spec: MergeSpec) -> str:
        """The staged rows of ``versions`` as one query; several versions are coalesced
        as :func:`deltasink.batch.coalesce` does (upsert: the latest row per key, by
        ``sequence_by`` then version; insert: the earliest version's row)."""
        cols = [quote(c) for c in columns]
        if spec.delete_when:
            cols.append(f"coalesce({quote(DELETE_COLUMN)}, false) AS {quote(DELETE_COLUMN)}")
        listed = ", ".join(str(v) for v in versions)
        where = f"{quote(VERSION_COLUMN)} IN ({listed})"
        if len(versions) == 1 or spec.mode == "append":
            return f"SELECT {', '.join(cols)} FROM {self.staging_ref} WHERE {where}"
        order = (
            [f"{quote(spec.sequence_by)} DESC"]
            if spec.mode == "upsert" and spec.sequence_by
            else []
        )
        order.append(f"{quote(VERSION_COLUMN)} {'DESC' if spec.mode == 'upsert' else 'ASC'}")
        partition = ", ".join(quote(k) for k in spec.keys)
        ranked = (
            f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY {', '.join(order)}) "
            f"AS {quote(_RANK)} FROM {self.staging_ref} WHERE {where}"
        )
        return f"SELECT {', '.join(cols)} FROM ({ranked}) WHERE {quote(_RANK)} = 1"

    def merge_sql(self, spec: MergeSpec, columns: Sequence[str], source: str) -> str:
        """The ``MERGE INTO`` of ``source`` (a query) into the target, from the same
        :class:`~deltasink.merge.MergePlan` the embedded engine runs."""
        plan = compile_merge(spec, columns, has_delete=spec.delete_when is not None)
        return plan.to_sql(self.target_ref, f"({source})")

    def publish(self, staged: StagedVersion) -> CommitResult:
        """MERGE (or append) version ``staged`` into the target in one commit carrying
        ``txn(app_id, version)``; a no-op returning ``already_committed`` when the
        target's marker covers it (checked here, and by Delta itself in the commit)."""
        self._fence()
        spec = self.spec_for_staged()
        return self._apply([staged.version], self._columns(staged.version), spec, staged.rows)

    def publish_many(self, staged: Sequence[StagedVersion]) -> CommitResult:
        """One commit for ``staged`` (coalesced, the marker of the highest version).

        Raises:
            CommitError: The versions were staged with different columns (committing
                them together could null the columns some of them left out), or the
                marker moved inside the run; the caller then goes one by one.
        """
        self._fence()
        spec = self.spec_for_staged()
        versions = [s.version for s in staged]
        columns = {self._columns(v) for v in versions}
        if len(columns) != 1:
            raise CommitError(
                f"versions {versions} were staged with different columns; committing them "
                "one by one",
                table=self.target,
                app_id=self.app_id,
            )
        result = self._apply(versions, columns.pop(), spec, sum(s.rows for s in staged))
        return replace(result, versions=tuple(versions)) if len(versions) > 1 else result

    def _apply(
        self, versions: Sequence[int], columns: Sequence[str], spec: MergeSpec, rows: int
    ) -> CommitResult:
        version = versions[-1]
        for attempt in range(1, self.max_attempts + 1):
            self._check()
            committed = self._committed()
            if committed is not None and committed >= version:
                return CommitResult(version, "already_committed", rows=rows)
            if committed is not None and committed >= versions[0]:
                raise CommitError(
                    f"the target's marker moved to {committed}, inside the coalesced "
                    f"versions {list(versions)}",
                    table=self.target,
                    app_id=self.app_id,
                    version=version,
                )
            start = time.perf_counter()
            try:
                self._apply_once(versions, columns, spec)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                if attempt == self.max_attempts:
                    raise CommitError(
                        f"the commit of version {version} into {self.target} conflicted with "
                        f"concurrent writers {attempt} times in a row (last: {exc}). Retry "
                        "later (recover()), or reduce concurrent writes to the table.",
                        table=self.target,
                        app_id=self.app_id,
                        version=version,
                    ) from exc
                delay = min(2.0, 0.05 * 2**attempt) * (0.5 + random.random())
                logger.info("commit of version %s conflicted (%s); retrying", version, exc)
                time.sleep(delay)
                continue
            return self._result(version, rows, time.perf_counter() - start)
        raise AssertionError("unreachable")

    def _apply_once(self, versions: Sequence[int], columns: Sequence[str], spec: MergeSpec) -> None:
        version = versions[-1]
        metadata = user_metadata("commit", self.app_id, version, versions)
        source = self.source_sql(versions, columns, spec)
        spark = self._session()
        target = self._target_frame()
        _faults.point("publish.before_target_commit", versions=list(versions))
        if target is None or spec.mode == "append":
            frame = spark.sql(source)
            if spec.delete_when:
                frame = frame.where(f"NOT {quote(DELETE_COLUMN)}").drop(DELETE_COLUMN)
            options = {"mergeSchema": "true"} if spec.schema_evolution else {}
            if target is not None:  # every target column, NULL where the batch has none
                have = set(frame.columns)
                select = [
                    quote(f.name)
                    if f.name in have
                    else f"CAST(NULL AS {ddl_type(f.dataType)}) AS {quote(f.name)}"
                    for f in target.schema.fields
                ]
                select += [quote(c) for c in frame.columns if c not in set(target.columns)]
                frame = frame.selectExpr(*select)
            self._write(
                frame,
                self.target,
                txn=(self.app_id, version),
                user_metadata=metadata,
                options=options,
            )
        else:
            if spec.schema_evolution:
                staged = spark.sql(source).schema
                wanted = _struct([f for f in staged.fields if f.name in set(columns)])
                self._add_columns(self.target_ref, wanted, target.columns)
            statement = self.merge_sql(spec, columns, source)
            settings: dict[str, str | int | None] = {
                TXN_APP_ID: self.app_id,
                TXN_VERSION: version,
                USER_METADATA: metadata,
            }
            with session_conf(spark, settings):
                spark.sql(statement).collect()
        _faults.point("publish.after_target_commit")

    def _result(self, version: int, rows: int, seconds: float) -> CommitResult:
        """The result of a target commit, from the target's history: when no commit of
        this version is found, Delta skipped it as already applied (another writer)."""
        entry = next((e for e in self.history(32) if e.version == version), None)
        if entry is None:
            return CommitResult(version, "already_committed", rows=rows, duration_s=seconds)
        return CommitResult(
            version,
            "committed",
            rows=rows,
            target_version=entry.target_version,
            rows_inserted=entry.rows_inserted,
            rows_updated=entry.rows_updated,
            rows_deleted=entry.rows_deleted,
            duration_s=seconds,
        )

    # -- discarding ----------------------------------------------------------------------------

    def discard(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        """Remove the staged data of ``versions`` in one ``DELETE`` (by partition, a
        metadata-only commit); empty versions, which have no data, get a commit that
        records their discard. Files stay for time travel until ``VACUUM``."""
        if not versions or self._staging_props() is None:
            return
        self._fence()
        _faults.point("discard.before_log_commit")
        listed = sorted(set(versions))
        if reason != "committed":
            self._lift_quarantine(listed)
        metadata = user_metadata(f"discard-{reason}", self.app_id, listed[-1], listed)
        self._read_ledger(self._committed())
        have = {s.version for s in self._partitions()}
        if any(v in have for v in listed):
            self._sql(
                f"DELETE FROM {self.staging_ref} WHERE {quote(VERSION_COLUMN)} IN "
                f"({', '.join(str(v) for v in listed)})",
                user_metadata=metadata,
            )
        if any(v in self._ledger.empty for v in listed):
            frame = self._session().sql(f"SELECT * FROM {self.staging_ref} LIMIT 0")
            self._write(frame, self.staging, txn=self._ledger_txn(), user_metadata=metadata)

    # -- write-audit-publish ----------------------------------------------------------------------

    def audit(self, staged: StagedVersion) -> str | None:
        """Run the pre-commit checks on ``staged`` (SQL checks on this session)."""
        if not self.checks:
            return None
        version = staged.version
        spec = self.spec_for_staged()
        plain = replace(spec, delete_when=None) if spec.delete_when else spec

        def dataframe() -> Any:
            return self._session().sql(self.source_sql([version], self._columns(version), plain))

        batch = StagedBatch(
            app_id=self.app_id,
            version=version,
            rows=staged.rows,
            target=self.target,
            _arrow=lambda: dataframe().toArrow(),
            _dataframe=dataframe,
            _previous_rows=lambda: previous_rows(self.history(20)),
        )
        return run_checks(self.checks, batch)

    def quarantine(self, version: int, reason: str) -> None:
        """Record the quarantine of ``version`` in the staging table's properties."""
        self._fence()
        records = _quarantine_records(self._staging_props() or {})
        records[str(version)] = {
            "reason": reason,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        self._set_props(
            {PROP_QUARANTINE: json.dumps(records, sort_keys=True)},
            user_metadata("quarantine", self.app_id, version),
        )

    def _lift_quarantine(self, versions: Iterable[int]) -> None:
        records = _quarantine_records(self._staging_props() or {})
        lifted = [str(v) for v in versions if str(v) in records]
        if lifted:
            for key in lifted:
                records.pop(key)
            self._set_props(
                {PROP_QUARANTINE: json.dumps(records, sort_keys=True)},
                user_metadata("release", self.app_id, None),
            )

    def restage(self, batch: object, version: int) -> StagedVersion:
        """Replace the staged data of quarantined ``version`` in one commit
        (``replaceWhere`` on its partition), lifting the quarantine first (after a crash
        in between, the old data is audited, and quarantined, again)."""
        prepared = self._prepare(batch, self.spec_for_staged())
        self._fence()
        self._lift_quarantine([version])
        return self._append(version, prepared, operation="restage")

    # -- operations -------------------------------------------------------------------------------

    def history(self, limit: int | None) -> list[HistoryEntry]:
        return history_from_commits(self._target_commits(limit), self.app_id)

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        """``VACUUM`` the staging table (files of committed, aborted and abandoned
        versions, and orphans); Delta checkpoints and expires its log by itself."""
        if self._staging_props() is None:
            return GcResult((), dry_run)
        hours = retention.total_seconds() / 3600
        vacuum = f"VACUUM {self.staging_ref} RETAIN {hours:.6f} HOURS"
        settings = {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}
        with session_conf(self._session(), settings):
            files = tuple(sorted(str(r[0]) for r in self._sql(vacuum + " DRY RUN")))
            if not dry_run and files:
                self._sql(vacuum, user_metadata=user_metadata("gc", self.app_id, None))
        return GcResult(files, dry_run)

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """``OPTIMIZE`` the target (``ZORDER BY`` the given columns)."""
        if not self.target_exists():
            return
        zorder = f" ZORDER BY ({', '.join(quote(c) for c in z_order_by)})" if z_order_by else ""
        self._sql(f"OPTIMIZE {self.target_ref}{zorder}")

    def commits_since_optimize(self, limit: int) -> int:
        """This app's target commits since the target's last OPTIMIZE (up to ``limit``)."""
        count = 0
        for commit in self._target_commits(4 * limit + 16):
            if commit.get("operation") == "OPTIMIZE":
                break
            if history_from_commits([commit], self.app_id):
                count += 1
                if count >= limit:
                    break
        return count


def _require_dataframe(df: Any) -> Any:
    """``df`` if it is a Spark DataFrame; else the named error :func:`collect` raises."""
    from deltasink.batch import is_spark_dataframe

    if not is_spark_dataframe(df):
        collect(df, MergeSpec(mode="append"))  # raises InvalidInputError for the type
    return df


def _struct(fields: Sequence[Any]) -> Any:
    from pyspark.sql.types import StructType

    return StructType(list(fields))


def _quarantine_records(props: Mapping[str, str]) -> dict[str, dict[str, str]]:
    text = props.get(PROP_QUARANTINE)
    records: dict[str, dict[str, str]] = json.loads(text) if text else {}
    return records


def _quarantine_of(props: Mapping[str, str]) -> dict[int, str]:
    return {int(v): r["reason"] for v, r in _quarantine_records(props).items()}
