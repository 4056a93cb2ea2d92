"""Engines: who makes the Delta commits. Two rooms of the same shape, each offering
the facade the two ports of :mod:`deltasink.backends.ports` through ``connect``:

* ``embedded`` (:mod:`deltasink.backends.embedded`): delta-rs makes every commit; data
  arrives as Arrow from any PySpark session (Sail, classic without Delta jars) or Arrow.
* ``spark`` (:mod:`deltasink.backends.spark`): the Spark session makes the commits with
  Delta's own idempotent writes (``txnAppId``/``txnVersion``); needs delta-spark or
  Databricks.

Each is an entry of :data:`ENGINES` (name -> how to open it and what it can do); this
module picks one (:func:`select_engine`) and opens it (:func:`connect`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from deltasink.backends.ports import CommitPort, EngineParts, MaintenancePort, SinkConfig
from deltasink.backends.sessions import delta_enabled, require_delta
from deltasink.errors import ConfigurationError
from deltasink.locations import is_catalog_name

__all__ = [
    "ENGINES",
    "CommitPort",
    "Engine",
    "EngineEntry",
    "EngineName",
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
EngineName = Literal["embedded", "spark"]


@dataclass(frozen=True)
class EngineEntry:
    """One engine as the facade sees it before opening it.

    Attributes:
        open: Opens a writer's tables on the engine (imports the engine's package only
            when called).
        writes_catalog_tables: Whether it can write a target named in a catalog
            (``main.sales.orders``) rather than by path.
        commits_through_storage_options: Whether its own commits go through the storage
            options (delta-rs), so an unsafe store must be refused (:mod:`deltasink.stores`);
            an engine that commits through Spark's LogStore only reads with them.
        refuse_session: Raises when the engine cannot work with the given session
            (``None``: any session will do).
    """

    open: Callable[[SinkConfig], EngineParts]
    writes_catalog_tables: bool
    commits_through_storage_options: bool
    refuse_session: Callable[[Any], None] | None = None


def _open_embedded(config: SinkConfig) -> EngineParts:
    from deltasink.backends import embedded

    return embedded.connect(config)


def _open_spark(config: SinkConfig) -> EngineParts:
    from deltasink.backends import spark

    return spark.connect(config)


def _refuse_embedded_session(spark: Any) -> None:
    if embedded_session(spark if spark is not None else active_session()):
        raise ConfigurationError(
            "engine='spark' with the embedded session (embedded_spark(), Sail): Sail "
            "ignores Delta's idempotent-write options, so its commits would carry no "
            "txn marker. Use engine='embedded' (or 'auto') with this session, or a "
            "Delta-enabled session (Databricks, Spark with delta-spark) for the spark "
            "engine."
        )


#: The engines by name: a new engine is one more entry, and nothing else branches on names.
ENGINES: Mapping[EngineName, EngineEntry] = {
    "embedded": EngineEntry(
        _open_embedded, writes_catalog_tables=False, commits_through_storage_options=True
    ),
    "spark": EngineEntry(
        _open_spark,
        writes_catalog_tables=True,
        commits_through_storage_options=False,
        refuse_session=_refuse_embedded_session,
    ),
}


def connect(engine: EngineName, config: SinkConfig) -> EngineParts:
    """Open ``config``'s tables on ``engine`` (imported only when chosen)."""
    return ENGINES[engine].open(config)


def select_engine(engine: Engine, spark: Any, target: str) -> tuple[EngineName, str]:
    """Pick the backend: ``(name, reason)``.

    Args:
        engine: ``"auto"``, or an explicit choice (a name of :data:`ENGINES`).
        spark: The session given to the sink, or ``None`` (then the active one).
        target: The target, for the catalog-name rule.

    Raises:
        ConfigurationError: The explicit engine cannot work with the session, or a
            catalog target with the embedded session.
    """
    if engine != "auto":
        refuse = ENGINES[engine].refuse_session
        if refuse is not None:
            refuse(spark)
        return engine, f"engine={engine!r} was given"
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
