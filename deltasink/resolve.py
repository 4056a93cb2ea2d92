"""A ``DeltaSink``'s arguments resolved in one step (:func:`resolve`): checked up front in
the order the constructor meets them, grouped, the engine chosen, the two tables
located and the store checked, into one frozen :class:`SinkSettings`."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, get_args

from deltasink.backends import ENGINES, Engine, EngineName, select_engine
from deltasink.backends.ports import SinkConfig
from deltasink.checks import Check
from deltasink.errors import ConfigurationError
from deltasink.hooks import PostCommitHook
from deltasink.locations import default_staging, is_catalog_name, normalize_uri, same_location
from deltasink.reserved import STAGING_SUFFIX
from deltasink.settings import AuditChecks, StoreOptions, Timeouts, grouped
from deltasink.shapes.spec import PREDICATES, MergeSpec
from deltasink.shapes.spec_rules import with_session_mode
from deltasink.shapes.table import TableSpec
from deltasink.stores import check_spark_log_store, checked_options, opted_in

__all__ = ["SinkSettings", "locate", "resolve"]

_APP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass(frozen=True, kw_only=True)
class SinkSettings:
    """Everything a :class:`~deltasink.DeltaSink` was configured with, resolved: valid,
    grouped, its engine chosen (and why), its tables located, its store options checked.

    Attributes:
        target: The target as the sink names it (normalised URI, or a catalog name).
        staging: The staging table's location.
        app_id: The writer.
        merge: The spec new versions are staged with (``None``: the recorded one).
        table: How the target is created on the first publish.
        engine: The engine that makes the commits, and ``engine_reason`` why.
        timeouts: The transaction-timeout settings.
        audit: Write-audit-publish (its checks validated).
        storage_options: The storage options handed to the engine (checked).
        coalesce, on_stale, max_commit_attempts, post_commit, clock: As the
            constructor's arguments.
        spark: The session given, if any.
    """

    target: str
    staging: str
    app_id: str
    merge: MergeSpec | None
    table: TableSpec | None
    engine: EngineName
    engine_reason: str
    timeouts: Timeouts
    audit: AuditChecks
    storage_options: dict[str, str] | None
    coalesce: bool
    on_stale: Literal["skip", "raise"]
    max_commit_attempts: int
    post_commit: tuple[PostCommitHook, ...]
    clock: Callable[[], float]
    spark: Any = field(default=None, compare=False)

    def config(self) -> SinkConfig:
        """What the engine needs to open the writer's tables."""
        return SinkConfig(
            target=self.target,
            staging=self.staging,
            app_id=self.app_id,
            merge=self.merge,
            max_commit_attempts=self.max_commit_attempts,
            storage_options=self.storage_options,
            checks=self.audit.checks,
            unverifiable_checks=self.audit.unverifiable_checks,
            check_samples=self.audit.check_samples,
            table=self.table,
            spark=self.spark,
        )


def resolve(
    target: object,
    app_id: object,
    merge: object,
    staging: str | None,
    *,
    timeouts: Timeouts | None,
    audit: AuditChecks | None,
    store: StoreOptions | None,
    transaction_timeout: timedelta | float | None,
    ignore_failures_after_timeout: bool,
    timeout_warning_ratio: float | None,
    checks: Sequence[Check] | None,
    unverifiable_checks: Literal["refuse", "skip"],
    on_quarantine: Literal["continue", "raise"],
    check_samples: bool,
    storage_options: Mapping[str, str] | None,
    allow_unsafe_commits: bool,
    coalesce: bool,
    on_stale: object,
    max_commit_attempts: object,
    engine: object,
    spark: Any,
    post_commit: Sequence[PostCommitHook],
    table: object,
    clock: Callable[[], float],
) -> SinkSettings:
    """The constructor's arguments (:class:`~deltasink.DeltaSink`), resolved. A group
    (``timeouts``, ``audit``, ``store``) or its flat keywords, not both.

    Raises:
        ConfigurationError: The first argument that is not valid, in the order the
            constructor documents them; a group given beside its flat keywords.
        UnsafeStoreError: The storage options declare an unsafe store, not opted in.
    """
    target, app_id, merge, table = _kinds(target, app_id, merge, table)
    flat_audit = {
        "checks": checks,
        "unverifiable_checks": unverifiable_checks,
        "on_quarantine": on_quarantine,
        "check_samples": check_samples,
    }
    grouped("audit", audit, flat_audit, _defaults(AuditChecks))
    audit = audit or AuditChecks(**flat_audit)  # type: ignore[arg-type]
    if on_stale not in ("skip", "raise"):
        raise ConfigurationError(f"on_stale must be 'skip' or 'raise', got {on_stale!r}.")
    if engine not in get_args(Engine):
        raise ConfigurationError(f"engine must be one of {list(get_args(Engine))}, got {engine!r}.")
    chosen, reason = select_engine(engine, spark, os.fspath(target))  # type: ignore[arg-type]
    located, staged_at, catalog = locate(target, staging, app_id)
    flat_timeouts = {
        "transaction_timeout": transaction_timeout,
        "ignore_failures_after_timeout": ignore_failures_after_timeout,
        "timeout_warning_ratio": timeout_warning_ratio,
    }
    grouped("timeouts", timeouts, flat_timeouts, _TIMEOUT_DEFAULTS)
    timeouts = timeouts or Timeouts(
        transaction_timeout=transaction_timeout,
        ignore_failures_after_timeout=ignore_failures_after_timeout,
        warning_ratio=timeout_warning_ratio,
    )
    _check_engine_fit(
        chosen, max_commit_attempts=max_commit_attempts, catalog=catalog, target=located
    )
    flat_store = {"storage_options": storage_options, "allow_unsafe_commits": allow_unsafe_commits}
    grouped("store", store, flat_store, _defaults(StoreOptions))
    store = store or StoreOptions(**flat_store)  # type: ignore[arg-type]
    session = spark if spark is not None else _active_spark()
    options = _checked_store(chosen, [located, staged_at], store, session)
    return SinkSettings(
        target=located,
        staging=staged_at,
        app_id=app_id,
        merge=with_session_mode(merge, session, PREDICATES),  # a spec made before it
        table=table,
        engine=chosen,
        engine_reason=reason,
        timeouts=timeouts,
        audit=audit,
        storage_options=options,
        coalesce=coalesce,
        on_stale=on_stale,
        max_commit_attempts=max_commit_attempts,  # type: ignore[arg-type]
        post_commit=tuple(post_commit),
        clock=clock,
        spark=spark,
    )


def _kinds(
    target: object, app_id: object, merge: object, table: object
) -> tuple[str | os.PathLike[str], str, MergeSpec | None, TableSpec | None]:
    """The first four arguments, each of its kind (in the constructor's order)."""
    if not isinstance(target, str | os.PathLike):
        raise ConfigurationError(f"target must be a path or URI string, got {target!r}.")
    if not isinstance(app_id, str) or not _APP_ID.match(app_id):
        raise ConfigurationError(
            f"app_id must be 1-200 characters of letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit; got {app_id!r}.",
            app_id=app_id if isinstance(app_id, str) else None,
        )
    if merge is not None and not isinstance(merge, MergeSpec):
        raise ConfigurationError(f"merge must be a MergeSpec or None, got {merge!r}.")
    if table is not None and not isinstance(table, TableSpec):
        raise ConfigurationError(f"table must be a TableSpec or None, got {table!r}.")
    return target, app_id, merge, table


def _checked_store(
    engine: EngineName, locations: list[str], store: StoreOptions, session: Any
) -> dict[str, str] | None:
    """The storage options the engine gets, checked for ``locations``: the embedded
    engine commits through them (an unsafe store refused unless opted in); an engine
    that commits through Spark's LogStore only reads with them, and its ``session``'s
    LogStore is checked instead (opted in by the flat keyword or the storage option,
    the CLI's ``-o``).

    Raises:
        UnsafeStoreError: The store (or the session's LogStore) is unsafe, not opted in.
    """
    through_options = ENGINES[engine].commits_through_storage_options
    options = checked_options(
        locations,
        store.storage_options,
        allow_unsafe_commits=store.allow_unsafe_commits or not through_options,
    )
    if session is not None and not through_options:
        check_spark_log_store(
            session,
            locations,
            allow_unsafe_commits=store.allow_unsafe_commits or opted_in(store.storage_options),
        )
    return options


_TIMEOUT_DEFAULTS: Mapping[str, object] = {
    "transaction_timeout": None,
    "ignore_failures_after_timeout": False,
    "timeout_warning_ratio": None,
}


def _defaults(group: type) -> dict[str, object]:
    """The defaults of a settings group's fields."""
    return {f.name: f.default for f in group.__dataclass_fields__.values()}  # type: ignore[attr-defined]


def locate(
    target: str | os.PathLike[str], staging: str | None, app_id: str
) -> tuple[str, str, bool]:
    """The target and staging locations as the sink names them, and whether the target
    is a catalog name (a catalog target's default staging table sits beside it).

    Raises:
        ConfigurationError: Staging and target are the same location.
    """
    catalog = is_catalog_name(os.fspath(target))
    located = os.fspath(target) if catalog else normalize_uri(target)
    if staging:
        staged_at = staging if is_catalog_name(staging) else normalize_uri(staging)
    elif catalog:
        staged_at = f"{located}_{STAGING_SUFFIX}_{app_id.replace('-', '_').replace('.', '_')}"
    else:
        staged_at = default_staging(located, app_id)
    if same_location(staged_at, located):
        raise ConfigurationError("staging must be a different location than target.", table=located)
    return located, staged_at, catalog


def _check_engine_fit(
    chosen: EngineName, *, max_commit_attempts: object, catalog: bool, target: str
) -> None:
    """``max_commit_attempts`` is valid and the chosen engine can write ``target``.

    Raises:
        ConfigurationError: Either is not so.
    """
    if not isinstance(max_commit_attempts, int) or max_commit_attempts < 1:
        raise ConfigurationError(
            f"max_commit_attempts must be an int ≥ 1, got {max_commit_attempts!r}."
        )
    if catalog and not ENGINES[chosen].writes_catalog_tables:
        raise ConfigurationError(
            f"target {target!r} is a catalog table name; the {chosen} engine "
            "writes Delta tables by path. Pass a path, or use engine='spark' with a "
            "Delta-enabled session.",
            table=target,
        )


def _active_spark() -> Any:
    """The classic session PySpark holds active, if any (the spark engine's default).
    Without PySpark loaded there is none: a sink of a job that never imported it does
    not import it here."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()
