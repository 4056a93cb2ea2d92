"""The target's definition on Spark: created by DDL from a :class:`TableSpec`, read
back with ``DESCRIBE DETAIL`` to check an existing target against it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltasink.input.sql import quote
from deltasink.ops.history import user_metadata
from deltasink.shapes.table import TableDefinition, TableSpec

from .session import SparkSql
from .tables import Tables, ddl_columns, props_sql, sql_string

__all__ = ["create_target", "read_definition", "string_partitions"]


def read_definition(sql: SparkSql, ref: str) -> TableDefinition:
    """The definition of the existing table ``ref`` (``DESCRIBE DETAIL``); clustering
    columns are ``None`` where Delta does not report them (before Delta 3.1)."""
    row = sql.sql(f"DESCRIBE DETAIL {ref}", user_metadata=None)[0].asDict(recursive=True)
    clustering = row.get("clusteringColumns") if "clusteringColumns" in row else None
    return TableDefinition(
        partition_by=tuple(row.get("partitionColumns") or ()),
        cluster_by=None if clustering is None else tuple(clustering),
        properties=dict(row.get("properties") or {}),
        comment=row.get("description"),
    )


def create_target(sql: SparkSql, tables: Tables, schema: Any, spec: TableSpec) -> None:
    """``CREATE TABLE IF NOT EXISTS`` the target with ``schema`` and the spec's
    partitioning or clustering, properties and comment: a commit without data (the
    rows follow in the marked commit; a crash between leaves an empty target, which
    the retried publish MERGEs into)."""
    clauses = ["USING DELTA"]
    if spec.partition_by:
        clauses.append(f"PARTITIONED BY ({', '.join(quote(c) for c in spec.partition_by)})")
    if spec.cluster_by:
        clauses.append(f"CLUSTER BY ({', '.join(quote(c) for c in spec.cluster_by)})")
    if spec.comment is not None:
        clauses.append(f"COMMENT {sql_string(spec.comment)}")
    if spec.properties:
        clauses.append(f"TBLPROPERTIES ({props_sql(spec.properties)})")
    sql.sql(
        f"CREATE TABLE IF NOT EXISTS {tables.target_ref} ({ddl_columns(schema)}) "
        + " ".join(clauses),
        user_metadata=user_metadata("create", tables.app_id, None),
    )


def string_partitions(sql: SparkSql, ref: str, columns: Sequence[str], target: Any) -> list[str]:
    """The ``columns`` that are string partition columns of the target (a Spark
    DataFrame): Delta-Spark stores their empty string as null and reads it back so,
    so a batch's ``''`` must match a null there. ``DESCRIBE DETAIL`` runs only when
    one of ``columns`` is a string column."""
    from pyspark.sql.types import StringType

    types = {f.name: f.dataType for f in target.schema.fields}
    strings = [c for c in columns if isinstance(types.get(c), StringType)]
    if not strings:
        return []
    partitions = set(read_definition(sql, ref).partition_by)
    return [c for c in strings if c in partitions]
