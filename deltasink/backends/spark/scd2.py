"""``MergeSpec(mode="scd2")`` on Spark: the history of the staged versions' keys is read
from the target, rebuilt by the engine-free :func:`deltasink.shapes.scd2.changes` (the same
code as the embedded engine, so both engines write the same rows), and the differences
are MERGEd on ``(keys, valid_from)``.

The staged events and the target's rows of their keys are brought to the driver (only
those keys' history, not the target).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltasink.input.arrow import spark_arrow, spark_frame
from deltasink.input.sql import DELETE_COLUMN, quote
from deltasink.shapes.merge import compile_merge
from deltasink.shapes.scd2 import changes
from deltasink.shapes.spec import MergeSpec

__all__ = ["history_changes", "history_merge_sql"]


def history_changes(
    spark: Any, source: str, target: Any | None, spec: MergeSpec, blank: Sequence[str] = ()
) -> Any:
    """The rows to MERGE (see :func:`deltasink.shapes.scd2.changes`) as a Spark DataFrame.

    Args:
        spark: The session.
        source: The staged versions' rows, as a query (:func:`.publish.source_sql`).
        target: The target as a DataFrame, or ``None`` if it does not exist yet.
        spec: A ``scd2`` spec.
        blank: Key columns whose empty string the target reads back as null
            (:func:`.definition.string_partitions`): read as ``''`` again here.
    """
    from pyspark.sql.types import BooleanType, StructField, StructType

    staged = spark.sql(source)
    batch = spark_arrow(staged)
    current = None
    if target is not None and blank:
        target = target.selectExpr(
            *(
                f"coalesce({quote(c)}, '') AS {quote(c)}" if c in blank else quote(c)
                for c in target.columns
            )
        )
    if target is not None and batch.num_rows:
        keys = staged.select(*spec.keys).distinct()
        current = spark_arrow(target.join(keys, on=list(spec.keys), how="left_semi"))
    rows = changes(current, batch, spec)
    # The Spark types of the target (else of the staged rows): Arrow alone would not
    # say whether a zone-less timestamp is TIMESTAMP_NTZ.
    types = {f.name: f.dataType for f in staged.schema.fields}
    start, end, now = spec.history
    types[start] = types[end] = types[spec.sequence_by or ""]
    types[now] = types[DELETE_COLUMN] = BooleanType()
    if target is not None:
        types.update({f.name: f.dataType for f in target.schema.fields})
    schema = StructType([StructField(c, types[c], True) for c in rows.column_names])
    return spark_frame(spark, rows, schema)  # PySpark 3.5 classic too


def history_merge_sql(
    target_ref: str, spec: MergeSpec, columns: list[str], view: str, blank: Sequence[str] = ()
) -> str:
    """``MERGE INTO`` the target ``USING`` the view of :func:`history_changes`
    (``blank``: as there)."""
    start = spec.history[0]
    on_rows = MergeSpec(mode="upsert", keys=(*spec.keys, start), delete_when="removed")
    plan = compile_merge(on_rows, columns, has_delete=True, spark=True, empty_as_null=blank)
    return plan.to_sql(target_ref, view)
