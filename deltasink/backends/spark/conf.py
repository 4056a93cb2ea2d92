"""Scoped Spark SQL confs: set some keys for one block, then put back what was there.

Delta reads the identity of an idempotent DML commit (``MERGE``, ``DELETE``,
``UPDATE``, ``INSERT``) from two session confs, ``spark.databricks.delta.write.txnAppId``
and ``.txnVersion`` (Delta ≥ 2.3), and its commit message from
``spark.databricks.delta.commitInfo.userMetadata``. Delta leaves them set after the
commit, so a later, unrelated write on the same session would be tagged with the same
``(app_id, version)`` and silently skipped as "already applied". :func:`session_conf`
therefore sets them for exactly one statement and restores the previous state
afterwards: the previous value where there was one, *unset* where there was none, on
success and on error alike.

Confs are per session, so two threads running scoped blocks on one session would see
each other's values; :func:`session_conf` serialises the blocks of one session object
within this process (other code on the same session is not covered: give deltasink its
own session, or do not write from other threads while it commits).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = [
    "PARQUET_TIMESTAMPS",
    "TXN_APP_ID",
    "TXN_VERSION",
    "USER_METADATA",
    "WRITE_CONFS",
    "delta_txn",
    "require_ansi",
    "require_settable",
    "session_conf",
    "settable",
]

logger = logging.getLogger("deltasink")

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
#: How Spark writes ``TIMESTAMP`` to Parquet: ``INT96`` by default, which delta-rs reads
#: as nanoseconds (wrapped outside 1677-2262). The engine's own writes use
#: ``TIMESTAMP_MICROS`` (the protocol's type, exact for 0001-9999) through
#: :data:`WRITE_CONFS`, scoped to its statements: the user's other writes keep theirs.
PARQUET_TIMESTAMPS = "spark.sql.parquet.outputTimestampType"
#: The confs the engine sets around each of its writes (besides the txn confs).
WRITE_CONFS: dict[str, str] = {PARQUET_TIMESTAMPS: "TIMESTAMP_MICROS"}

_guard = threading.Lock()
_locks: dict[int, threading.RLock] = {}


def _lock_for(spark: Any) -> threading.RLock:
    with _guard:
        lock = _locks.get(id(spark))
        if lock is None:
            lock = _locks[id(spark)] = threading.RLock()
        return lock


def _get(spark: Any, key: str) -> str | None:
    """The session's value for ``key``, or ``None`` when it is not set.

    ``conf.get(key, None)`` answers ``None`` for an unset key on classic sessions
    (registered optional confs included) and on Spark Connect.
    """
    value = spark.conf.get(key, None)
    return None if value is None else str(value)


def _put(spark: Any, key: str, value: str | None) -> None:
    if value is None:
        spark.conf.unset(key)
    else:
        spark.conf.set(key, value)


@contextmanager
def session_conf(spark: Any, settings: Mapping[str, str | int | None]) -> Iterator[None]:
    """Set ``settings`` on ``spark`` for the ``with`` block, then restore them.

    Each key gets its value for the block (``None`` unsets it for the block); on exit,
    normal or by an exception, each key is set back to the value it had before, or
    unset if it had none. Blocks on the same session object are serialised within the
    process and may nest.

    Args:
        spark: A PySpark ``SparkSession``, classic or Spark Connect.
        settings: ``{conf key: value}``; values are passed as strings.

    Raises:
        Whatever ``spark.conf.set`` raises for a key that cannot be set (a static
        conf, say); the keys already set are restored first.
    """
    lock = _lock_for(spark)
    with lock:
        previous: dict[str, str | None] = {}
        try:
            for key, value in settings.items():
                previous[key] = _get(spark, key)
                _put(spark, key, None if value is None else str(value))
            yield
        finally:
            failures: list[str] = []
            for key, value in reversed(previous.items()):
                try:
                    _put(spark, key, value)
                except Exception as exc:  # keep restoring the others
                    failures.append(f"{key}: {exc}")
            if failures:
                logger.warning("could not restore Spark confs %s", "; ".join(failures))


def delta_txn(
    spark: Any,
    app_id: str,
    version: int,
    *,
    user_metadata: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> AbstractContextManager[None]:
    """:func:`session_conf` for one idempotent Delta DML statement.

    Inside the block, Delta commits the statement with ``txn(app_id, version)`` and
    ``userMetadata``, or skips it when the table's ``txn`` version for ``app_id`` is
    already ≥ ``version``; ``extra`` confs (:data:`WRITE_CONFS`) are scoped with them.
    """
    settings: dict[str, str | int | None] = {TXN_APP_ID: app_id, TXN_VERSION: version}
    if user_metadata is not None:
        settings[USER_METADATA] = user_metadata
    settings.update(extra or {})
    return session_conf(spark, settings)


def settable(spark: Any, key: str, value: str) -> bool:
    """Whether ``key`` can be set to ``value`` on ``spark`` (probed and restored on Spark
    Connect, whose server may refuse it; a classic session sets any non-static conf)."""
    if getattr(spark, "_jsparkSession", None) is not None:
        return True
    try:
        with session_conf(spark, {key: value}):
            return True
    except Exception:  # the server's refusal, whatever its class: not settable
        return False


#: The confs the spark engine sets around its statements.
ENGINE_CONFS = (TXN_APP_ID, TXN_VERSION, USER_METADATA)


def require_settable(
    spark: Any,
    keys: tuple[str, ...] = ENGINE_CONFS,
    *,
    table: str | None = None,
    app_id: str | None = None,
) -> None:
    """Refuse a Spark Connect session whose server will not let the engine set its
    confs, before any statement runs.

    Databricks serverless lets a session set only a documented list of Spark confs and
    answers any other ``spark.conf.set`` with ``CONFIG_NOT_AVAILABLE``; without
    ``txnAppId``/``txnVersion`` around the MERGE, Delta cannot make the target commit
    idempotent. Each key is set to a probe value and restored (:func:`session_conf`),
    so the session is left as it was. Classic sessions are not probed: they set any
    non-static conf.

    Raises:
        ConfigurationError: A key cannot be set; the message names it and the server's
            error condition.
    """
    if getattr(spark, "_jsparkSession", None) is not None:
        return
    from deltasink.errors import ConfigurationError

    from .errors import error_types

    for key in keys:
        try:
            with session_conf(spark, {key: "0"}):
                pass
        except Exception as exc:
            condition = next(iter(error_types(exc)), type(exc).__name__)
            raise ConfigurationError(
                f"the spark engine cannot set the Spark conf {key} on this Spark Connect "
                f"session ({condition}): it sets {', '.join(ENGINE_CONFS)} around each "
                "commit so that Delta records txn(app_id, version) with the data. "
                "Databricks serverless allows only a documented list of confs; run the "
                "job on classic or standard access mode compute (or write a path table "
                "with the embedded engine).",
                table=table,
                app_id=app_id,
            ) from exc


ANSI = "spark.sql.ansi.enabled"


def require_ansi(spark: Any, spec: Any) -> None:
    """Refuse a session whose ANSI mode (``spark.sql.ansi.enabled``) is not the one
    ``spec`` (a :class:`~deltasink.MergeSpec`) records for its predicates, before any
    statement runs: this engine evaluates them in the session, where an overflow or a
    zero divisor fails with ANSI mode on and is null (or wraps around) with it off,
    while the embedded engine and a later recovery evaluate the recorded mode."""
    from deltasink.errors import ConfigurationError
    from deltasink.shapes.spec import PREDICATES

    if not any(getattr(spec, name) for name in PREDICATES):
        return
    try:  # the effective value: unset, the version's default (off before Spark 4)
        value: str | None = str(spark.conf.get(ANSI))
    except Exception:  # a session that answers only keys that are set
        value = _get(spark, ANSI)
    session = value is None or value.strip().lower() != "false"
    if session == spec.ansi:
        return
    recorded, found = ("on", "off") if spec.ansi else ("off", "on")
    raise ConfigurationError(
        f"The MergeSpec's predicates mean Spark's ANSI mode {recorded} (ansi_mode="
        f"{spec.ansi_mode!r}, recorded when the spec was built), but this Spark session has "
        f"{ANSI}={'false' if spec.ansi else 'true'} (ANSI mode {found}), where they would "
        f"fail or select other rows. Set {ANSI}={'true' if spec.ansi else 'false'} in the "
        f"session, or build the spec with MergeSpec(ansi_mode={not spec.ansi}) for new "
        "versions (versions already staged keep the recorded mode)."
    )
