"""Whether a Spark session can make Delta commits with ``txn`` markers itself: the
judgement :func:`~deltasink.backends.select_engine` picks an engine by, and the spark
engine's refusal of a classic session without Delta. Engine-free (no engine imports it
back), so the spark engine can use it without importing :mod:`deltasink.backends`."""

from __future__ import annotations

from typing import Any

from deltasink.errors import ConfigurationError

__all__ = ["DELTA_CATALOG", "DELTA_EXTENSION", "delta_enabled", "require_delta"]


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
