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
from deltasink.backends.sessions import delta_enabled, require_delta
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
