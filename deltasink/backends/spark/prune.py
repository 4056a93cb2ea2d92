"""The key-range predicate of the Spark MERGE (:func:`~deltasink.shapes.merge.key_ranges`, the
embedded engine's): each integer or date key bounded to the batch's ``[min, max]``, so
Delta skips target files whose key statistics cannot match. The bounds come from an
aggregation the caller already runs (:func:`bound_exprs`), read by
:func:`predicate_from_bounds`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from deltasink.input.arrow import spark_arrow
from deltasink.input.sql import quote
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.shapes.merge import key_ranges

__all__ = ["bound_exprs", "key_prune", "predicate_from_bounds", "prunable_keys"]

#: Key types pruned by range: their bounds are literals that read the same in Spark SQL
#: as in :func:`~deltasink.shapes.merge.key_ranges` (whose string literals are DataFusion's, and
#: a string column's order may follow a collation).
_PRUNABLE = ("byte", "short", "integer", "long", "date")


def prunable_keys(keys: Sequence[str], target: Any) -> list[str]:
    """The keys whose type in ``target`` (a Spark ``StructType``) is pruned by range."""
    types = {f.name: f.dataType.typeName() for f in target.fields}
    return [k for k in keys if types.get(k) in _PRUNABLE]


def bound_exprs(keys: Sequence[str]) -> list[str]:
    """Aggregate expressions for the bounds of ``keys`` (``lo_<i>``, ``hi_<i>``)."""
    exprs = []
    for i, k in enumerate(keys):
        exprs += [
            f"min({quote(k)}) AS {quote(f'lo_{i}')}",
            f"max({quote(k)}) AS {quote(f'hi_{i}')}",
        ]
    return exprs


def predicate_from_bounds(row: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    """The predicate from one row of :func:`bound_exprs` over ``keys`` (Arrow arrays or
    Python values); a key whose bounds are not integers or dates (or are null: no rows)
    is left unbounded."""
    columns = {
        k: pa.concat_arrays([_array(row[f"lo_{i}"]), _array(row[f"hi_{i}"])])
        for i, k in enumerate(keys)
    }
    bounded = [
        k for k, c in columns.items() if pa.types.is_integer(c.type) or pa.types.is_date(c.type)
    ]
    return key_ranges(pa.table(columns), bounded) if bounded else None


def _array(value: Any) -> pa.Array[Any]:
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    return value if isinstance(value, pa.Array) else pa.array([value])


def key_prune(
    spark: Any, staging_ref: str, versions: Sequence[int], keys: Sequence[str], target: Any
) -> str | None:
    """The embedded engine's key-range predicate (:func:`~deltasink.shapes.merge.key_ranges`)
    for the staged rows of ``versions``, so the MERGE skips target files whose key
    statistics cannot match: the bounds come from ONE aggregation over the staged
    partitions. Only integer and date keys (in the target and the staging table).

    Args:
        spark: The session.
        staging_ref: The staging table.
        versions: The versions committed together.
        keys: The merge keys.
        target: The target's Spark schema (``StructType``).
    """
    prunable = prunable_keys(keys, target)
    if not prunable:
        return None
    listed = ", ".join(str(v) for v in versions)
    row: pa.Table = spark_arrow(
        spark.sql(
            f"SELECT {', '.join(bound_exprs(prunable))} FROM {staging_ref} "
            f"WHERE {quote(VERSION_COLUMN)} IN ({listed})"
        )
    )
    return predicate_from_bounds({n: row.column(n) for n in row.column_names}, prunable)
