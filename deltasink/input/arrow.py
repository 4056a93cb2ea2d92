"""Spark DataFrames to Arrow and back: the rows through ``toArrow``, the schema without a
job, Arrow data for a Spark session, and a DataFrame's zero rows (PySpark 3.5 and 4.x)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    InvalidInputError,
    SchemaMismatchError,
)
from deltasink.reserved import PREFIX
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.spec import MergeSpec

from .sql import delete_expr

__all__ = [
    "SUPPORTED_PYSPARK",
    "SparkToArrow",
    "check_names",
    "collect_empty",
    "is_spark_dataframe",
    "spark_arrow",
    "spark_arrow_schema",
    "spark_empty",
    "spark_frame",
    "spark_input",
    "spark_to_arrow",
]


#: PySpark releases whose DataFrames deltasink reads (Databricks 14.3 LTS and later).
SUPPORTED_PYSPARK = "3.5 and 4.x"


def is_spark_dataframe(obj: object) -> bool:
    """Whether ``obj`` is a PySpark DataFrame, classic or Spark Connect (any release;
    :func:`spark_arrow` refuses the unsupported ones)."""
    return (
        type(obj).__module__.startswith("pyspark.sql")
        and type(obj).__name__ == "DataFrame"
        and hasattr(obj, "schema")
    )


def spark_arrow(df: Any) -> pa.Table:
    """A PySpark DataFrame's rows as one Arrow table, without Python row objects.

    PySpark 4 has ``DataFrame.toArrow``. PySpark 3.5 (Databricks 14.3-15.4 LTS) does
    not: a classic DataFrame is collected with the Arrow batches ``toPandas`` itself
    uses, a Spark Connect one through ``toPandas`` with the Arrow schema of its Spark
    schema.

    Raises:
        InvalidInputError: A PySpark release older than 3.5.
    """
    to_arrow = getattr(df, "toArrow", None)
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    import pyspark
    from pyspark.sql.pandas.types import to_arrow_schema

    if tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (3, 5):
        raise InvalidInputError(
            f"PySpark {pyspark.__version__} is not supported: deltasink reads DataFrames "
            f"of PySpark {SUPPORTED_PYSPARK} (Databricks Runtime 14.3 LTS and later). "
            "Upgrade the runtime, or pass a pyarrow.Table."
        )
    schema = to_arrow_schema(df.schema)
    collect = getattr(df, "_collect_as_arrow", None)
    if collect is not None:  # classic 3.5
        batches = collect()
        return pa.Table.from_batches(batches) if batches else schema.empty_table()
    frame = df.toPandas()  # Spark Connect 3.5
    return pa.Table.from_pandas(frame, schema=schema, preserve_index=False)


def spark_arrow_schema(df: Any) -> pa.Schema | None:
    """The Arrow schema ``DataFrame.toArrow`` gives ``df``'s table, built from
    ``df.schema`` as PySpark 4 builds it (classic: ``to_arrow_schema`` with toArrow's
    arguments and the large-types setting; Spark Connect: the schema its ``toArrow``
    casts the fetched table to), without running a job; ``None`` where toArrow builds
    it otherwise (PySpark 3.5, another signature)."""
    module = type(df).__module__
    if module not in ("pyspark.sql.classic.dataframe", "pyspark.sql.connect.dataframe"):
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    options: dict[str, Any] = {"error_on_duplicated_field_names_in_struct": True, "timezone": "UTC"}
    if module == "pyspark.sql.classic.dataframe":
        large = df.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")
        options["prefers_large_types"] = str(large).lower() == "true"
    try:
        schema: pa.Schema = to_arrow_schema(df.schema, **options)
    except TypeError:  # a release whose toArrow builds it otherwise
        return None
    return schema


def spark_empty(df: Any) -> pa.Table:
    """``spark_arrow(df.limit(0))``: the DataFrame's zero-row Arrow form. On PySpark 4
    it is built from ``df.schema`` (:func:`spark_arrow_schema`), without running a
    Spark job; anywhere else (PySpark 3.5, another signature) by a job over zero
    rows."""
    schema = spark_arrow_schema(df)
    if schema is not None:
        empty: pa.Table = schema.empty_table()
        return empty
    return spark_arrow(df.limit(0))


def spark_input(table: pa.Table) -> pa.Table:
    """``table`` for ``SparkSession.createDataFrame``: without empty record batches,
    which make classic PySpark (4.2) lose rows of the table (the Arrow batch after an
    empty one is dropped); zero-copy."""
    batches = [b for b in table.to_batches() if b.num_rows]
    return pa.Table.from_batches(batches, schema=table.schema)


def spark_frame(spark: Any, table: pa.Table, schema: Any = None) -> Any:
    """``spark.createDataFrame(table, schema)`` for an Arrow table (its empty record
    batches dropped, :func:`spark_input`), on every supported PySpark.

    PySpark 4 takes a ``pyarrow.Table``. Classic PySpark 3.5 does not (it reads the
    table as rows: ``CANNOT_INFER_SCHEMA_FOR_TYPE``); there the record batches go to the
    JVM as one Arrow stream, as PySpark 4 sends them and as 3.5 sends its own pandas
    input: cast to the Arrow form of the Spark schema (nanoseconds floored to
    microseconds; a zone-less timestamp for a ``TIMESTAMP`` column read in the session
    time zone), no pandas in between (NaN stays apart from null).

    Args:
        spark: The session.
        table: The rows.
        schema: A Spark ``StructType``, or ``None`` for the table's own
            (``from_arrow_schema``).
    """
    import pyspark
    from pyspark.sql.pandas.types import from_arrow_schema

    data = spark_input(table)
    if data.num_rows == 0:  # no batch left: PySpark 4.2 fails on a nested column then
        return spark.createDataFrame([], schema or from_arrow_schema(data.schema))
    if not pyspark.__version__.startswith("3.") or getattr(spark, "_jsparkSession", None) is None:
        # PySpark 4 (classic and Spark Connect), or not a classic session
        return (
            spark.createDataFrame(data) if schema is None else spark.createDataFrame(data, schema)
        )
    import pyarrow.types as types
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import TimestampType

    if schema is None:
        schema = from_arrow_schema(data.schema)
    zone = spark.conf.get("spark.sql.session.timeZone")
    columns: list[Any] = []
    for raw, field in zip(data.columns, schema.fields, strict=True):
        column: Any = raw
        if types.is_timestamp(column.type) and column.type.unit == "ns":
            column = pc.floor_temporal(column, unit="microsecond")
        if (
            types.is_timestamp(column.type)
            and column.type.tz is None
            and isinstance(field.dataType, TimestampType)
        ):
            column = pc.assume_timezone(column, zone)
        columns.append(column)
    data = pa.Table.from_arrays(columns, names=data.column_names).cast(to_arrow_schema(schema))

    def reader(path: str) -> Any:
        return spark._jvm.PythonSQLUtils.readArrowStreamFromFile(path)

    def server() -> Any:
        return spark._jvm.ArrowIteratorServer()

    batches = data.to_batches()
    jiter = spark.sparkContext._serialize_to_jvm(batches, ArrowStreamSerializer(), reader, server)
    frame = spark._jvm.PythonSQLUtils.toDataFrame(jiter, schema.json(), spark._jsparkSession)
    from pyspark.sql import DataFrame

    return DataFrame(frame, spark)


def check_names(names: Sequence[str]) -> None:
    if not names:
        raise SchemaMismatchError("the batch has no columns; a batch needs at least one.")
    # Delta (like Spark) resolves column names case-insensitively.
    lowered = Counter(n.lower() for n in names)
    duplicated = sorted(n for n in names if lowered[n.lower()] > 1)
    if duplicated:
        raise SchemaMismatchError(
            f"the batch has duplicate column names {duplicated} (Delta compares names "
            "case-insensitively); rename or drop them.",
            column=duplicated[0],
        )
    reserved = [n for n in names if n.lower().startswith(PREFIX)]
    if reserved:
        raise SchemaMismatchError(
            f"column(s) {reserved} use the prefix {PREFIX!r}, which deltasink "
            "reserves for its own columns; rename them in the job.",
            column=reserved[0],
        )


#: How a Spark DataFrame's rows become one Arrow table: ``(df, ordered)``, where
#: ``ordered`` asks for the DataFrame's row order (which ``sequence_by`` ties need).
SparkToArrow = Callable[[Any, bool], pa.Table]


def _to_arrow(df: Any, ordered: bool) -> pa.Table:
    return spark_arrow(df)  # toArrow keeps the DataFrame's order


def _zero_rows(df: Any, ordered: bool) -> pa.Table:
    return spark_empty(df)


def spark_to_arrow(
    df: Any, spec: MergeSpec, *, empty: bool = False, to_arrow: SparkToArrow | None = None
) -> pa.Table:
    check_names(list(df.columns))
    ordered = spec.sequence_by is not None
    if empty:
        to_arrow = _zero_rows
    elif to_arrow is None:
        to_arrow = _to_arrow
    if not spec.delete_when:
        return to_arrow(df, ordered)
    flag = delete_expr(spec, types_of(df.schema))  # refusals and unknown columns: named
    try:
        flagged = to_arrow(df.selectExpr("*", flag), ordered)
    except InvalidInputError:
        raise
    except Exception as exc:
        try:  # is it the predicate, or the DataFrame itself?
            spark_arrow(df.limit(0))
        except Exception:
            raise exc from None
        raise InvalidInputError(
            f"MergeSpec.delete_when {spec.delete_when!r} is not a valid Spark SQL "
            f"predicate over the batch columns {list(df.columns)}: {exc}"
        ) from exc
    return flagged


def collect_empty(df: Any, spec: MergeSpec) -> pa.Table:
    """:func:`collect` of a Spark DataFrame's zero rows (names checked, the delete flag
    typed and its predicate checked), from :func:`spark_empty`: no job on classic
    PySpark 4."""
    return spark_to_arrow(df, spec, empty=True)
