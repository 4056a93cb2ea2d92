"""Spark errors classified by type (error condition, JVM exception class), with the
exception types Spark Connect raises (Databricks Connect, serverless)."""

from __future__ import annotations

import pytest
from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException

from deltasink.backends.spark import maintenance as spark_maintenance
from deltasink.backends.spark.errors import error_types, is_conflict, is_missing
from deltasink.backends.spark.maintenance import SparkMaintenance
from deltasink.backends.spark.tables import Tables
from deltasink.errors import CommitError


def connect_error(condition: str, message: str = "details") -> Exception:
    return AnalysisException(message=f"[{condition}] {message}", errorClass=condition)


@pytest.mark.parametrize(
    "condition",
    [
        "DELTA_CONCURRENT_APPEND.WITHOUT_HINT",
        "DELTA_CONCURRENT_DELETE_READ",
        "DELTA_CONCURRENT_TRANSACTION",
        "DELTA_CONCURRENT_WRITE",
        "DELTA_METADATA_CHANGED",
        "DELTA_PROTOCOL_CHANGED",
    ],
)
def test_delta_conflicts_are_told_by_their_condition(condition: str) -> None:
    error = connect_error(condition)
    assert next(iter(error_types(error))) == condition
    assert is_conflict(error)
    assert not is_missing(error)


@pytest.mark.parametrize(
    "condition",
    [
        "DELTA_MISSING_DELTA_TABLE",
        "DELTA_TABLE_NOT_FOUND",
        "DELTA_TABLE_ONLY_OPERATION",
        "PATH_NOT_FOUND",
        "TABLE_OR_VIEW_NOT_FOUND",
    ],
)
def test_missing_tables_are_told_by_their_condition(condition: str) -> None:
    error = connect_error(condition)
    assert is_missing(error)
    assert not is_conflict(error)


def test_a_typed_error_is_not_classified_by_the_words_of_its_message() -> None:
    # Its condition is what counts, not text that happens to name another error.
    error = connect_error(
        "INSUFFICIENT_PERMISSIONS", "retry after ConcurrentAppendException: table does not exist"
    )
    assert not is_conflict(error)
    assert not is_missing(error)


def test_the_cause_of_a_wrapping_error_counts() -> None:
    wrapped = SparkConnectGrpcException(message="the MERGE failed")
    wrapped.__cause__ = connect_error("DELTA_CONCURRENT_APPEND")
    assert is_conflict(wrapped)
    assert not is_conflict(SparkConnectGrpcException(message="the MERGE failed"))


class _Session:
    """Stands in for the spark engine's session: ``OPTIMIZE`` raises Spark Connect's own
    conflict exception ``conflicts`` times, then succeeds (Delta's OPTIMIZE refuses a
    commit whose files another compaction or writer removed)."""

    def __init__(self, conflicts: int) -> None:
        self.conflicts = conflicts
        self.statements: list[str] = []

    def sql(self, statement: str, **_: object) -> list[object]:
        self.statements.append(statement)
        if len(self.statements) <= self.conflicts:
            raise connect_error("DELTA_CONCURRENT_DELETE_DELETE", "a concurrent OPTIMIZE")
        return []


class _Logs:
    def target_exists(self) -> bool:
        return True


def _maintenance(session: _Session) -> SparkMaintenance:
    tables = Tables(target="/lake/t", staging="/lake/t_staging", app_id="app")
    return SparkMaintenance(session, _Logs(), tables)  # type: ignore[arg-type]


def test_optimize_on_the_spark_engine_retries_delta_conflicts_then_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spark_maintenance, "OPTIMIZE_ATTEMPTS", 3)
    monkeypatch.setattr("deltasink.retry.backoff", lambda attempt, cap: 0.0)
    session = _Session(conflicts=2)
    _maintenance(session).optimize(["id"])
    assert session.statements == ["OPTIMIZE delta.`/lake/t` ZORDER BY (`id`)"] * 3

    always = _Session(conflicts=10)
    with pytest.raises(CommitError, match="conflicted with concurrent commits 3 times") as raised:
        _maintenance(always).optimize([])
    assert raised.value.table == "/lake/t"
    assert isinstance(raised.value.__cause__, AnalysisException)
    assert len(always.statements) == 3
