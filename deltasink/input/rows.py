"""Predicates over a batch's rows, evaluated by Spark before anything is written:
``replace_where`` and ``target_predicate`` hold on every row, and the ``delete_when``
flag of Arrow input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    InvalidInputError,
)
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.sparksql.types import SqlType
from deltasink.shapes.spec import MergeSpec

from .arrow import spark_arrow, spark_input
from .sql import DELETE_COLUMN, ROW_COLUMN, delete_expr, quote

__all__ = ["arrow_frame", "check_row_predicates", "flag_arrow", "outside"]


def outside(predicate: str) -> str:
    """A Spark SQL expression true for a row ``predicate`` does not hold for."""
    return f"NOT coalesce(({predicate}), false)"


def check_row_predicates(
    frame: Any,
    spec: MergeSpec,
    columns: Sequence[str],
    types: Mapping[str, SqlType] | None = None,
) -> None:
    """Every row of ``frame`` (a Spark DataFrame of the batch) satisfies
    ``replace_where`` (a version replaces only rows the predicate selects, so it may
    only write such rows; Delta refuses the others at commit time, deltasink before
    anything is written) and ``target_predicate`` (evaluated with the batch as ``t``:
    the MERGE sees only target rows satisfying it, so a row outside it would insert a
    key again). One Spark job for both.

    Both are first translated for delta-rs over the batch's column types (``types``, or
    ``frame``'s), which the embedded engine will evaluate them with on the target: a
    construct refused for these types is refused now, before anything is staged.

    Raises:
        ConfigurationError: A construct refused for the batch's column types.
        InvalidInputError: Some rows do not satisfy one, or one does not evaluate.
    """
    if not (spec.replace_where or spec.target_predicate):
        return
    types = types_of(frame.schema) if types is None else types
    for name in ("replace_where", "target_predicate"):
        spec.predicate(name, "delta-rs", types)
    checks = [
        (name, predicate)
        for name, predicate in (
            ("replace_where", spec.predicate("replace_where", "spark", types)),
            ("target_predicate", spec.predicate("target_predicate", "spark", types)),
        )
        if predicate
    ]
    if not checks:
        return
    flags = [f"{outside(predicate)} AS `{name}`" for name, predicate in checks]
    counts = [f"count_if(`{name}`) AS `{name}`" for name, _ in checks]
    try:
        aliased = frame.alias("t") if spec.target_predicate else frame
        # the flags projected first, then counted: Sail fails to plan an aggregate over
        # an expression it splits into common sub-expressions (a nullability mismatch)
        row = aliased.selectExpr(*flags).selectExpr(*counts).collect()[0].asDict()
    except Exception as exc:
        listed = " and ".join(f"MergeSpec.{n} {getattr(spec, n)!r}" for n, _ in checks)
        raise InvalidInputError(
            f"{listed} is not a valid Spark SQL predicate over the batch columns "
            f"{list(columns)}: {exc}"
        ) from exc
    for name, _ in checks:
        if row[name]:
            why = (
                "a version may only write rows of the slice it replaces"
                if name == "replace_where"
                else "the MERGE sees only target rows satisfying it, so such a row "
                "could insert its key again"
            )
            raise InvalidInputError(
                f"{row[name]} row(s) of the batch do not satisfy MergeSpec.{name} "
                f"{getattr(spec, name)!r}: {why}. Filter them in the job."
            )


def arrow_frame(data: pa.Table) -> Any:
    """``data`` as a DataFrame of the embedded engine (Spark SQL over Arrow rows)."""
    from deltasink.backends.embedded.sail import embedded_spark

    spark = embedded_spark()
    if data.num_rows == 0:  # Spark cannot infer a schema from no rows: give it one
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], schema=from_arrow_schema(data.schema))
    return spark.createDataFrame(spark_input(data))


def flag_arrow(data: pa.Table, spec: MergeSpec) -> pa.Table:
    """``data`` with the ``delete_when`` flag appended, evaluated by the embedded engine.

    Only the flag comes back from Spark (matched by row number): the rows themselves stay
    the caller's Arrow data, because a round trip through Spark changes types (a naive
    timestamp returns as a UTC one, and would no longer fit the target)."""
    from deltasink.backends.embedded.sail import embedded_spark

    spark = embedded_spark()
    numbered = data.append_column(ROW_COLUMN, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    if data.num_rows == 0:  # Spark cannot infer a schema from no rows: give it one
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = spark.createDataFrame([], schema=from_arrow_schema(numbered.schema))
    else:
        frame = spark.createDataFrame(spark_input(numbered))
    assert spec.delete_when is not None
    flag = delete_expr(spec, types_of(data.schema))  # refusals and unknown columns: named
    try:
        flagged = spark_arrow(frame.selectExpr(quote(ROW_COLUMN), flag)).sort_by(ROW_COLUMN)
    except InvalidInputError:
        raise
    except Exception as exc:  # the rows came from Arrow: it is the predicate
        raise InvalidInputError(
            f"MergeSpec.delete_when {spec.delete_when!r} is not a valid Spark SQL "
            f"predicate over the batch columns {data.column_names}: {exc}"
        ) from exc
    if (
        not pc.all(pc.equal(flagged.column(ROW_COLUMN), numbered.column(ROW_COLUMN))).as_py()
        and data.num_rows
    ):
        raise AssertionError("the embedded engine lost or repeated rows of the batch")
    return data.append_column(
        pa.field(DELETE_COLUMN, pa.bool_(), True), flagged.column(DELETE_COLUMN)
    )
