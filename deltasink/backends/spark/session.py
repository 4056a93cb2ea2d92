"""The Spark session as the Spark backend uses it: statements run with Delta's ``txn``
confs scoped around them (:mod:`.conf`), DataFrameWriter commits tagged
``txn(app_id, version)``, ``DESCRIBE HISTORY`` as dicts, table properties and columns
altered (which errors are conflicts or missing tables: :mod:`.errors`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from deltasink.backends.sessions import require_delta
from deltasink.errors import ConfigurationError
from deltasink.locations import is_catalog_name
from deltasink.ops.history import user_metadata

from .conf import (
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    WRITE_CONFS,
    require_settable,
    session_conf,
    settable,
)
from .errors import is_missing
from .tables import Tables, ddl_columns, props_sql, struct

__all__ = ["SparkSql"]


class SparkSql:
    """Runs the backend's statements and writes on one Spark session.

    Args:
        spark: The session, or ``None``: the first batch's own session, else the
            active one (looked up on first use).
        tables: The writer's tables (for messages and commit metadata).
    """

    def __init__(self, spark: Any, tables: Tables) -> None:
        self._spark = spark
        self._delta_checked = False
        self.tables = tables
        #: The write confs (:data:`.conf.WRITE_CONFS`) this session lets the engine set
        #: around its statements (all on a classic session).
        self.write_confs: dict[str, str] = {}

    def session(self, df: Any = None) -> Any:
        """The session; without one yet, ``df``'s session or the active one.

        Raises:
            ConfigurationError: No session was given and none is active, the
                session is a classic one without Delta, or a Spark Connect one that
                refuses the engine's confs (Databricks serverless; checked once, before
                the first statement).
        """
        spark = self._resolve(df)
        if not self._delta_checked:
            require_delta(spark, table=self.tables.target, app_id=self.tables.app_id)
            require_settable(spark, table=self.tables.target, app_id=self.tables.app_id)
            self.write_confs = {k: v for k, v in WRITE_CONFS.items() if settable(spark, k, v)}
            self._delta_checked = True
        return spark

    def _resolve(self, df: Any = None) -> Any:
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
                    table=self.tables.target,
                    app_id=self.tables.app_id,
                )
            self._spark = active
        return self._spark

    def sql(self, statement: str, *, user_metadata: str | None = None) -> list[Any]:
        """Run one statement with the txn confs unset (a leftover from other code must
        not make Delta skip it) and ``userMetadata`` as given."""
        spark = self.session()
        settings = {TXN_APP_ID: None, TXN_VERSION: None, USER_METADATA: user_metadata}
        with session_conf(spark, {**settings, **self.write_confs}):
            rows: list[Any] = spark.sql(statement).collect()
        return rows

    def write(
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
        # The conf as well as the option: a CREATE TABLE AS SELECT (saveAsTable of a new
        # catalog table) and saveAsTable appends record only the conf's userMetadata.
        settings = {TXN_APP_ID: None, TXN_VERSION: None, USER_METADATA: user_metadata}
        with session_conf(self.session(), {**settings, **self.write_confs}):
            if is_catalog_name(ref_location):
                writer.saveAsTable(ref_location)
            else:
                writer.save(ref_location)

    def history(self, ref: str, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` commits of a table via ``DESCRIBE HISTORY``, as dicts
        (timestamps in epoch milliseconds, whatever the session time zone); ``[]`` for
        a table that does not exist."""
        try:
            frame = self.session().sql(f"DESCRIBE HISTORY {ref} LIMIT {int(limit)}")
        except Exception as exc:
            if is_missing(exc):
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

    def set_props(self, ref: str, props: Mapping[str, str], metadata: str) -> None:
        """``ALTER TABLE ... SET TBLPROPERTIES``: a metadata commit, which Delta makes
        conflict with every concurrent commit to the table."""
        self.sql(
            f"ALTER TABLE {ref} SET TBLPROPERTIES ({props_sql(props)})", user_metadata=metadata
        )

    def add_columns(self, ref: str, schema: Any, have: Iterable[str]) -> None:
        """``ALTER TABLE ... ADD COLUMNS`` for the fields of ``schema`` not in ``have``
        (a metadata commit of its own; harmless if the next step fails)."""
        present = {name.lower() for name in have}
        new = [f for f in schema.fields if f.name.lower() not in present]
        if new:
            self.sql(
                f"ALTER TABLE {ref} ADD COLUMNS ({ddl_columns(struct(new))})",
                user_metadata=user_metadata("add-columns", self.tables.app_id, None),
            )
