"""Backends: who makes the Delta commits. The facade talks to them through
:class:`Backend`, the protocol core through its :class:`~deltasink.protocol.Participant`
part.

* ``embedded`` (:mod:`deltasink.backends.embedded`): delta-rs makes every commit; data
  arrives as Arrow from any PySpark session (Sail, classic without Delta jars) or Arrow.
* ``spark`` (:mod:`deltasink.backends.spark`): the Spark session makes the commits with
  Delta's own idempotent writes (``txnAppId``/``txnVersion``); needs delta-spark or
  Databricks.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal, Protocol

from deltasink.history import HistoryEntry
from deltasink.protocol import Participant
from deltasink.spec import MergeSpec
from deltasink.staging import GcResult

__all__ = ["Backend", "Engine", "delta_enabled", "is_catalog_name", "select_engine"]

Engine = Literal["auto", "embedded", "spark"]


class Backend(Participant[object], Protocol):
    """What :class:`~deltasink.DeltaSink` needs from a backend, beyond the port."""

    name: str

    def claim(self) -> None:
        """Take over the writer role (fencing older writers)."""
        ...

    def recorded_spec(self) -> MergeSpec | None:
        """The MergeSpec recorded in the staging table, if any."""
        ...

    def target_exists(self) -> bool:
        """Whether the target table exists yet."""
        ...

    def history(self, limit: int | None) -> list[HistoryEntry]:
        """This writer's commits to the target, newest first."""
        ...

    def gc(self, retention: timedelta, *, dry_run: bool) -> GcResult:
        """Expire unreferenced staging files and compact the staging log."""
        ...

    def optimize(self, z_order_by: Sequence[str]) -> None:
        """Compact the target's files (OPTIMIZE, Z-ORDER when columns are given)."""
        ...

    def commits_since_optimize(self, limit: int) -> int:
        """This writer's target commits since the last OPTIMIZE, counting up to ``limit``."""
        ...


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


def is_catalog_name(target: str) -> bool:
    """``catalog.schema.table`` or ``schema.table`` (no slash, no scheme)."""
    return "/" not in target and "\\" not in target and ":" not in target and "." in target
