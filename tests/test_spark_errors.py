"""Spark errors classified by type (error condition, JVM exception class), with the
exception types Spark Connect raises (Databricks Connect, serverless)."""

from __future__ import annotations

import pytest
from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException

from deltasink.backends.spark.errors import error_types, is_conflict, is_missing


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
