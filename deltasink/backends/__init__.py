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
from deltasink.locations import is_catalog_name

__all__ = [
    "CommitPort",
    "Engine",
    "EngineParts",
    "MaintenancePort",
    "SinkConfig",
    "connect",
    "delta_enabled",
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
        return "spark", "engine='spark' was given"
    if spark is None:
        try:
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
        except Exception:
            spark = None
    reason = delta_enabled(spark) if spark is not None else None
    if reason is not None:
        return "spark", f"auto: {reason}"
    if is_catalog_name(target):
        return "spark", "auto: the target is a catalog table name"
    return "embedded", "auto: no Delta-enabled Spark session, so delta-rs makes the commits"
