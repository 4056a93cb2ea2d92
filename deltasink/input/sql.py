"""The Spark SQL names a batch is read and staged with, on both engines: identifier
quoting, the reserved delete-flag and sequence-guard columns, the delete flag's
expression."""

from __future__ import annotations

from collections.abc import Mapping

from deltasink.reserved import DELETE_COLUMN, GUARD_COLUMN, ROW_COLUMN
from deltasink.shapes.sparksql.types import SqlType
from deltasink.shapes.spec import MergeSpec

__all__ = ["DELETE_COLUMN", "GUARD_COLUMN", "ROW_COLUMN", "delete_expr", "quote"]


def quote(name: str) -> str:
    """Quote a column name for Spark SQL and delta-rs predicates (backticks)."""
    return "`" + name.replace("`", "``") + "`"


def delete_expr(spec: MergeSpec, columns: Mapping[str, SqlType]) -> str:
    """The Spark SQL column of the delete flag: ``spec.delete_when`` translated for the
    batch's ``columns`` with Spark's meaning on Spark and Sail alike
    (:meth:`MergeSpec.predicate`), a null result counting as false.

    Raises:
        ConfigurationError: A construct refused for these column types.
        InvalidInputError: It names a column the batch does not have."""
    predicate = spec.predicate("delete_when", "spark", columns)
    assert predicate is not None
    return f"coalesce(({predicate}), false) AS {quote(DELETE_COLUMN)}"
