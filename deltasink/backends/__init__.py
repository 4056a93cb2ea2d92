"""Engines: who makes the Delta commits. Two rooms of the same shape, each offering
the facade the two ports of :mod:`deltasink.backends.ports` through ``connect``:

* ``embedded`` (:mod:`deltasink.backends.embedded`): delta-rs makes every commit; data
  arrives as Arrow from any PySpark session (Sail, classic without Delta jars) or Arrow.
* ``spark`` (:mod:`deltasink.backends.spark`): the Spark session makes the commits with
  Delta's own idempotent writes (``txnAppId``/``txnVersion``); needs delta-spark or
  Databricks.

This module picks one (:func:`select_engine`) and opens it (:func:`connect`).
"""

from __future__ import annotations

from typing import Any, Literal

from deltasink.backends.ports import CommitPort, EngineParts, MaintenancePort, SinkConfig
from deltasink.errors import ConfigurationError
from deltasink.locations import is_catalog_name

__all__ = [
    "CommitPort",
    "Engine",
    "EngineParts",
    "MaintenancePort",
    "SinkConfig",
    "active_session",
    "connect",
    "connect_session",
    "delta_enabled",
    "embedded_session",
    "is_catalog_name",
    "require_delta",
    "select_engine",
]

Engine = Literal["auto", "embedded", "spark"]


def connect(engine: Literal["embedded", "spark"], config: SinkConfig) -> EngineParts:
    """Open ``config``'s tables on ``engine`` (imported only when chosen)."""
    if engine == "spark":
        from deltasink.backends import spark

        return spark.connect(config)
    from deltasink.backends import embedded

    return embedded.connect(config)


def delta_enabled(spark: Any) -> str | None:
    """Why ``spark`` can make Delta commits with ``txn`` markers itself, or ``None``.

    True for Databricks (any runtime, classic or Spark Connect) and for classic
    sessions with delta-spark's ``DeltaSparkSessionExtension``. Sail (the embedded
    engine) ignores the ``txn`` options, so it is never selected here.
    """
    import os

    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return f"Databricks runtime {os.environ['DATABRICKS_RUNTIME_VERSION']}"
    conf = getattr(spark, "conf", None)
    if conf is None:
        return None
    try:
        cluster = conf.get("spark.databricks.clusterUsageTags.clusterId", None)
    except Exception:
        cluster = None
    if cluster:
        return "a Databricks cluster session"
    try:
        extensions = conf.get("spark.sql.extensions", "") or ""
    except Exception:
        extensions = ""
    if "DeltaSparkSessionExtension" in extensions:
        return "a Spark session with delta-spark's DeltaSparkSessionExtension"
    return None


#: What a classic session needs for the spark engine (delta-spark's SQL and catalog).
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def require_delta(spark: Any, *, table: str | None = None, app_id: str | None = None) -> None:
    """Refuse a classic (JVM) Spark session without Delta for the spark engine, before
    any statement runs (without it, the first Delta statement fails deep in Spark).

    Spark Connect sessions (Databricks Connect, serverless, a Connect server started
    with the Delta jars) are not judged here: their server's configuration is not
    visible to the client for certain, so their own errors stand.

    Raises:
        ConfigurationError: ``spark`` is a classic session whose configuration lacks
            ``spark.sql.extensions`` with delta-spark's extension (and is not Databricks).
    """
    if spark is None or delta_enabled(spark) is not None:
        return
    if getattr(spark, "_jsparkSession", None) is None:  # not classic: Connect, or a stand-in
        return

    def conf(key: str) -> str:
        try:
            return str(spark.conf.get(key, None) or "unset")
        except Exception:
            return "unset"

    raise ConfigurationError(
        "the spark engine needs a Delta-enabled Spark session, and this one has no Delta "
        f"configuration: spark.sql.extensions is {conf('spark.sql.extensions')} (needs "
        f"{DELTA_EXTENSION}) and spark.sql.catalog.spark_catalog is "
        f"{conf('spark.sql.catalog.spark_catalog')} (needs {DELTA_CATALOG}). Start the "
        "session with delta-spark configured (e.g. delta.configure_spark_with_delta_pip), "
        "run on Databricks, or write a path table with the embedded engine.",
        table=table,
        app_id=app_id,
    )


def select_engine(
    engine: Engine, spark: Any, target: str
) -> tuple[Literal["embedded", "spark"], str]:
    """Pick the backend: ``(name, reason)``.

    Args:
        engine: ``"auto"``, or an explicit choice.
        spark: The session given to the sink, or ``None`` (then the active one).
        target: The target, for the catalog-name rule.
    """
    if engine == "embedded":
        return "embedded", "engine='embedded' was given"
    if engine == "spark":
        if embedded_session(spark if spark is not None else active_session()):
            raise ConfigurationError(
                "engine='spark' with the embedded session (embedded_spark(), Sail): Sail "
                "ignores Delta's idempotent-write options, so its commits would carry no "
                "txn marker. Use engine='embedded' (or 'auto') with this session, or a "
                "Delta-enabled session (Databricks, Spark with delta-spark) for the spark "
                "engine."
            )
        return "spark", "engine='spark' was given"
    if spark is None:
        spark = active_session()
    reason = delta_enabled(spark) if spark is not None else None
    if reason is not None:
        return "spark", f"auto: {reason}"
    if is_catalog_name(target):
        if spark is not None and embedded_session(spark):
            raise ConfigurationError(
                f"target {target!r} is a catalog table name, and the session is the "
                "embedded one (embedded_spark(), Sail), which cannot write catalog tables "
                "nor make Delta's idempotent commits. Pass the table's path (the embedded "
                "engine writes it with delta-rs), or run with a Delta-enabled session: "
                "Databricks, or Spark with delta-spark (docs/deploy.md).",
                table=target,
            )
        return "spark", "auto: the target is a catalog table name"
    return "embedded", "auto: no Delta-enabled Spark session, so delta-rs makes the commits"


def active_session() -> Any:
    """The process's active PySpark session, or ``None`` (also without PySpark)."""
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:
        return None


def embedded_session(spark: Any) -> bool:
    """Whether ``spark`` is the embedded engine's session (Sail, in this process):
    no ``foreachBatch``, no catalog tables, and Delta's ``txn`` options ignored."""
    from deltasink.backends.embedded.sail import serves

    return serves(spark)


def connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (serverless, standard access mode,
    Databricks Connect, a Spark Connect server; the embedded engine's too)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
