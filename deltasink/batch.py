"""Batches: user input (a PySpark DataFrame or Arrow data) to a validated Arrow table.

Validation is vectorised in Arrow and happens before anything is written:
reserved and duplicate column names, key and ``sequence_by`` columns present and
non-null, types compatible with the target, float keys normalised (-0.0 is 0.0; NaN
refused), and one row per key (or the latest row per key with ``sequence_by``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from deltasink.errors import (
    DuplicateKeyError,
    InvalidInputError,
    InvalidKeyError,
    KeyColumnError,
    SchemaMismatchError,
)
from deltasink.schema import align_to_target, to_delta_types
from deltasink.spec import RESERVED_PREFIX, MergeSpec

__all__ = [
    "DELETE_COLUMN",
    "GUARD_COLUMN",
    "SCD2_DUPLICATES",
    "SparkToArrow",
    "check_required",
    "check_row_predicates",
    "collect",
    "delete_expr",
    "distinct_floats",
    "distinct_ints",
    "edge_per_key",
    "first_per_key",
    "is_spark_dataframe",
    "nan_key_error",
    "normalise_keys",
    "prepare",
    "quote",
    "spark_arrow",
    "spark_arrow_schema",
    "spark_frame",
    "spark_input",
]

#: Staged boolean column: the row deletes its key (``MergeSpec.delete_when``).
DELETE_COLUMN = "_deltasink_delete"
#: Coalesced batches only: the sequence value a target row is compared with (see
#: :func:`deltasink.coalesce.coalesce`); never written to a table.
GUARD_COLUMN = "_deltasink_sequence_guard"
_ROW = "_deltasink_row"
#: The advice of an ``scd2`` batch's :class:`DuplicateKeyError`.
SCD2_DUPLICATES = (
    "An scd2 batch has one event per key and sequence_by value (the same pair in a "
    "later version corrects it); deduplicate in the job."
)


def quote(name: str) -> str:
    """Quote a column name for Spark SQL and delta-rs predicates (backticks)."""
    return "`" + name.replace("`", "``") + "`"


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


def _check_names(names: Sequence[str]) -> None:
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
    reserved = [n for n in names if n.lower().startswith(RESERVED_PREFIX)]
    if reserved:
        raise SchemaMismatchError(
            f"column(s) {reserved} use the prefix {RESERVED_PREFIX!r}, which deltasink "
            "reserves for its own columns; rename them in the job.",
            column=reserved[0],
        )


def delete_expr(spec: MergeSpec) -> str:
    """The Spark SQL column of the delete flag: ``spec.delete_when`` as parsed and
    re-emitted (:meth:`MergeSpec.predicate`), a null result counting as false."""
    predicate = spec.predicate("delete_when", "spark")
    assert predicate is not None
    return f"coalesce(({predicate}), false) AS {quote(DELETE_COLUMN)}"


#: How a Spark DataFrame's rows become one Arrow table: ``(df, ordered)``, where
#: ``ordered`` asks for the DataFrame's row order (which ``sequence_by`` ties need).
SparkToArrow = Callable[[Any, bool], pa.Table]


def _to_arrow(df: Any, ordered: bool) -> pa.Table:
    return spark_arrow(df)  # toArrow keeps the DataFrame's order


def _zero_rows(df: Any, ordered: bool) -> pa.Table:
    return spark_empty(df)


def _spark_to_arrow(
    df: Any, spec: MergeSpec, *, empty: bool = False, to_arrow: SparkToArrow | None = None
) -> pa.Table:
    _check_names(list(df.columns))
    ordered = spec.sequence_by is not None
    if empty:
        to_arrow = _zero_rows
    elif to_arrow is None:
        to_arrow = _to_arrow
    if not spec.delete_when:
        return to_arrow(df, ordered)
    try:
        flagged = to_arrow(df.selectExpr("*", delete_expr(spec)), ordered)
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
    return _spark_to_arrow(df, spec, empty=True)


def collect(data: object, spec: MergeSpec, *, to_arrow: SparkToArrow | None = None) -> pa.Table:
    """Turn ``data`` into one Arrow table, adding the delete flag when configured.

    Spark DataFrames are collected through Arrow (``DataFrame.toArrow``, no Python
    row objects), or by ``to_arrow`` when given (the embedded engine's
    :func:`~deltasink.backends.embedded.transfer.engine_arrow`). ``delete_when`` is
    evaluated by Spark SQL: by the DataFrame's own session, or, for Arrow input, by the
    embedded engine.

    Raises:
        InvalidInputError: Unsupported input type, or a ``delete_when`` that does not
            evaluate on this batch.
        SchemaMismatchError: Duplicate or reserved column names.
    """
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.RecordBatchReader):
        data = data.read_all()
    if isinstance(data, pa.Table):
        _check_names(data.column_names)
        if spec.replace_where or spec.target_predicate:
            check_row_predicates(_arrow_frame(data), spec, data.column_names)
        if not spec.delete_when:
            return data
        return _flag_arrow(data, spec)
    if is_spark_dataframe(data):
        frame: Any = data
        _check_names(list(frame.columns))
        if spec.replace_where or spec.target_predicate:
            check_row_predicates(frame, spec, list(frame.columns))
        return _spark_to_arrow(frame, spec, to_arrow=to_arrow)
    raise InvalidInputError(
        "a batch must be a PySpark DataFrame (classic or Spark Connect), a pyarrow.Table, "
        f"RecordBatch or RecordBatchReader; got {type(data).__module__}.{type(data).__name__}."
    )


def outside(predicate: str) -> str:
    """A Spark SQL expression true for a row ``predicate`` does not hold for."""
    return f"NOT coalesce(({predicate}), false)"


def check_row_predicates(frame: Any, spec: MergeSpec, columns: Sequence[str]) -> None:
    """Every row of ``frame`` (a Spark DataFrame of the batch) satisfies
    ``replace_where`` (a version replaces only rows the predicate selects, so it may
    only write such rows; Delta refuses the others at commit time, deltasink before
    anything is written) and ``target_predicate`` (evaluated with the batch as ``t``:
    the MERGE sees only target rows satisfying it, so a row outside it would insert a
    key again). One Spark job for both.

    Raises:
        InvalidInputError: Some rows do not satisfy one, or one does not evaluate.
    """
    checks = [
        (name, predicate)
        for name, predicate in (
            ("replace_where", spec.predicate("replace_where", "spark")),
            ("target_predicate", spec.predicate("target_predicate", "spark")),
        )
        if predicate
    ]
    if not checks:
        return
    counts = ", ".join(
        f"sum(CASE WHEN {outside(predicate)} THEN 1 ELSE 0 END) AS `{name}`"
        for name, predicate in checks
    )
    try:
        aliased = frame.alias("t") if spec.target_predicate else frame
        row = aliased.selectExpr(counts).collect()[0].asDict()
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


def _arrow_frame(data: pa.Table) -> Any:
    """``data`` as a DataFrame of the embedded engine (Spark SQL over Arrow rows)."""
    from deltasink.backends.embedded.session import embedded_spark

    spark = embedded_spark()
    if data.num_rows == 0:  # Spark cannot infer a schema from no rows: give it one
        from pyspark.sql.pandas.types import from_arrow_schema

        return spark.createDataFrame([], schema=from_arrow_schema(data.schema))
    return spark.createDataFrame(spark_input(data))


def _flag_arrow(data: pa.Table, spec: MergeSpec) -> pa.Table:
    """``data`` with the ``delete_when`` flag appended, evaluated by the embedded engine.

    Only the flag comes back from Spark (matched by row number): the rows themselves stay
    the caller's Arrow data, because a round trip through Spark changes types (a naive
    timestamp returns as a UTC one, and would no longer fit the target)."""
    from deltasink.backends.embedded.session import embedded_spark

    spark = embedded_spark()
    numbered = data.append_column(_ROW, pa.array(np.arange(data.num_rows, dtype=np.int64)))
    if data.num_rows == 0:  # Spark cannot infer a schema from no rows: give it one
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = spark.createDataFrame([], schema=from_arrow_schema(numbered.schema))
    else:
        frame = spark.createDataFrame(spark_input(numbered))
    assert spec.delete_when is not None
    try:
        flagged = spark_arrow(frame.selectExpr(quote(_ROW), delete_expr(spec))).sort_by(_ROW)
    except InvalidInputError:
        raise
    except Exception as exc:  # the rows came from Arrow: it is the predicate
        raise InvalidInputError(
            f"MergeSpec.delete_when {spec.delete_when!r} is not a valid Spark SQL "
            f"predicate over the batch columns {data.column_names}: {exc}"
        ) from exc
    if not pc.all(pc.equal(flagged.column(_ROW), numbered.column(_ROW))).as_py() and data.num_rows:
        raise AssertionError("the embedded engine lost or repeated rows of the batch")
    return data.append_column(
        pa.field(DELETE_COLUMN, pa.bool_(), True), flagged.column(DELETE_COLUMN)
    )


def check_required(table: pa.Table, spec: MergeSpec) -> None:
    """The key and ``sequence_by`` columns are present, scalar and non-null; the
    ``update_columns``/``except_columns`` are present.

    Raises:
        KeyColumnError: A key or ``sequence_by`` column is missing, nested or null.
        SchemaMismatchError: A column ``update_columns``/``except_columns`` names is
            missing from the batch.
    """
    for name in spec.required_columns:
        role = spec.role(name)
        if name not in table.column_names:
            raise KeyColumnError(
                f"{role} column {name!r} is missing from the batch, whose columns are "
                f"{table.column_names}.",
                column=name,
            )
        kind = table.schema.field(name).type
        if pa.types.is_nested(kind):
            raise KeyColumnError(
                f"{role} column {name!r} has the nested type {kind}; keys and sequence "
                "columns must be scalars (numbers, strings, dates, timestamps). Use its "
                "fields as keys instead.",
                column=name,
            )
        nulls = table.column(name).null_count
        if nulls and not spec.nullable(name):
            raise KeyColumnError(
                f"{role} column {name!r} is null in {nulls} row(s) of the batch; every row "
                f"needs a {role}. Filter or fill them in the job.",
                column=name,
            )

    for name in spec.replace_by or ():
        kind = table.schema.field(name).type
        if not (
            pa.types.is_integer(kind)
            or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_date(kind)
        ):
            raise KeyColumnError(
                f"replace_by column {name!r} has the type {kind}; replace_by columns must "
                "be integers, strings or dates (their values become SQL literals).",
                column=name,
            )
    listing = "update_columns" if spec.update_columns is not None else "except_columns"
    missing = [c for c in spec.listed_columns if c not in table.column_names]
    if missing:
        raise SchemaMismatchError(
            f"MergeSpec.{listing} names {missing}, missing from the batch, whose columns "
            f"are {[c for c in table.column_names if c != DELETE_COLUMN]}; every batch "
            "must contain them.",
            column=missing[0],
        )


def nan_key_error(column: str, rows: int) -> InvalidKeyError:
    """The error for ``rows`` NaN values in the float key ``column`` (both engines)."""
    return InvalidKeyError(
        f"key column {column!r} is NaN in {rows} row(s) of the batch; a NaN key matches "
        "no row (NaN equals nothing), so deltasink refuses it in every mode. Filter the "
        "rows or map NaN to a real value (or null, with null_safe_keys) in the job.",
        column=column,
    )


def normalise_keys(table: pa.Table, keys: Sequence[str], *, refuse_nan: bool = True) -> pa.Table:
    """One equality per key type: floating-point key values -0.0 become 0.0 (they are
    equal, and must be one key in the staged batch, its duplicate check and every later
    MERGE), and a NaN key value is refused (unless ``refuse_nan`` is false: staged data
    of an earlier release is only normalised). Other columns and types are untouched;
    keys are scalars (:func:`check_required`).

    Raises:
        InvalidKeyError: A float key holds NaN.
    """
    for key in keys:
        if key not in table.column_names:
            continue
        field = table.schema.field(key)
        if not pa.types.is_floating(field.type):
            continue
        column = table.column(key)
        if refuse_nan:
            nans = pc.sum(pc.cast(pc.is_nan(column), pa.int64())).as_py() or 0
            if nans:
                raise nan_key_error(key, nans)
        zero = pa.scalar(0, field.type)
        normal = pc.if_else(pc.equal(column, zero), zero, column)  # -0.0 == 0.0
        table = table.set_column(table.column_names.index(key), field, normal)
    return table


SortOrder = Literal["ascending", "descending"]


def first_per_key(
    table: pa.Table, keys: Sequence[str], order: Sequence[tuple[str, SortOrder]]
) -> pa.Table:
    """One row per key: the first by ``order`` (column, "ascending"/"descending"),
    ties going to the later row. Rows keep their original order.

    The rows are sorted by key then ``order``; the first row of each key is where the
    key changes in that order (:func:`_group_starts`, for key types whose equality is
    exact), else the first of a hash aggregation over the sorted rows."""
    columns = list(dict.fromkeys([*keys, *(name for name, _ in order)]))
    indexed = table.select(columns).append_column(
        _ROW, pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    sort_keys: list[tuple[str, SortOrder]] = [(k, "ascending") for k in keys]
    sort_keys += [*order, (_ROW, "descending")]
    ordered = indexed.take(pc.sort_indices(indexed, sort_keys=sort_keys))
    starts = _group_starts(ordered, keys)
    if starts is not None:
        firsts = ordered.column(_ROW).filter(starts)
    else:
        firsts = (
            ordered.group_by(list(keys), use_threads=False)
            .aggregate([(_ROW, "first")])
            .column(f"{_ROW}_first")
        )
    if len(firsts) == table.num_rows:
        return table
    return table.take(pc.take(firsts, pc.sort_indices(firsts)))


def edge_per_key(table: pa.Table, keys: Sequence[str], *, last: bool) -> pa.Table:
    """One row per key: the first row of each key in row order, or with ``last`` the
    last one. Rows keep their original order.

    :func:`first_per_key` with the row order as the only order, in one stable sort by
    the keys (no tie-break columns, no second sort to restore the order) for key types
    with exact equality; through :func:`first_per_key` otherwise."""
    n = table.num_rows
    keyed = table.select(list(keys))
    if n == 0:
        return table
    if not all(_exact_equality(keyed.schema.field(k).type) for k in keys):
        if last:
            return first_per_key(table, keys, [])
        position = RESERVED_PREFIX + "position"
        indexed = table.append_column(position, pa.array(np.arange(n, dtype=np.int64)))
        return first_per_key(indexed, keys, [(position, "ascending")]).drop_columns([position])
    order = pc.sort_indices(keyed, sort_keys=[(k, "ascending") for k in keys])  # stable
    starts = _group_starts(keyed.take(order), keys)
    assert starts is not None  # exact key types
    edges = np.asarray(starts.to_numpy(zero_copy_only=False), dtype=bool)
    if last:  # a group's last row is the one before the next group's start
        edges = np.append(edges[1:], True)
    if edges.all():
        return table
    keep = np.zeros(n, dtype=bool)
    keep[order.to_numpy()[edges]] = True
    return table.filter(pa.array(keep))


def _exact_equality(column_type: pa.DataType) -> bool:
    """Key types whose ``not_equal`` is the grouping's equality (no NaN, no
    collation, no nesting)."""
    return (
        pa.types.is_integer(column_type)
        or pa.types.is_string(column_type)
        or pa.types.is_large_string(column_type)
        or pa.types.is_binary(column_type)
        or pa.types.is_large_binary(column_type)
        or pa.types.is_boolean(column_type)
        or pa.types.is_date(column_type)
        or pa.types.is_timestamp(column_type)
        or pa.types.is_decimal(column_type)
    )


def _group_starts(ordered: pa.Table, keys: Sequence[str]) -> pa.Array[Any] | None:
    """For rows sorted by ``keys``: a mask of the first row of each key (a null equal to
    a null, as in a grouping); ``None`` if a key's type is not exactly comparable."""
    n = ordered.num_rows
    if not all(_exact_equality(ordered.schema.field(k).type) for k in keys):
        return None
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    for key in keys:
        column = ordered.column(key)
        later, earlier = column.slice(1), column.slice(0, max(n - 1, 0))
        unequal: Any = pc.not_equal(later, earlier)
        nulls: Any = pc.not_equal(pc.is_null(later), pc.is_null(earlier))
        changed |= pc.or_(pc.fill_null(unequal, False), nulls).to_numpy(zero_copy_only=False)
    starts = np.ones(n, dtype=bool)
    starts[1:] = changed
    return pa.array(starts)


def _latest_per_key(table: pa.Table, keys: Sequence[str], sequence_by: str) -> pa.Table:
    """One row per key: the highest ``sequence_by``, ties going to the later row."""
    return first_per_key(table, keys, [(sequence_by, "descending")])


#: :func:`distinct_ints` marks a key's values in a bitmap of one byte per value in the
#: batch's key range when that range is at most this many times the row count (plus
#: :data:`_BITMAP_SLACK`): a few MB for a million rows.
_BITMAP_PER_ROW = 16
_BITMAP_SLACK = 1 << 16


def distinct_ints(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> bool | None:
    """Whether the values of an integer column without nulls are all distinct, decided
    exactly with a bitmap over the column's value range (linear, no hashing); ``None``
    when that does not apply (another type, nulls, or a range too wide for the bitmap).

    The fast twin of the hash aggregation in :func:`_check_unique`, which stays the
    fallback and the one that reports duplicates; ``test_optimizations.py`` compares
    the two on generated columns."""
    n = len(column)
    if n < 2:
        return True
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    low, high = (int(v.as_py()) for v in pc.min_max(column).values())
    span = high - low + 1
    if span < n:
        return False  # more values than room for them
    if span > _BITMAP_PER_ROW * n + _BITMAP_SLACK:
        return None
    values = column.to_numpy()
    # Offsets from the lowest value fit in int64 (span is small); subtract in the
    # widest type of the column's signedness, so a narrow type cannot wrap.
    wide = values.astype(np.uint64 if values.dtype.kind == "u" else np.int64, copy=False)
    offsets = wide - wide.dtype.type(low)
    seen = np.zeros(span, dtype=np.bool_)
    seen[offsets] = True
    return int(np.count_nonzero(seen)) == n


def distinct_floats(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> bool | None:
    """Whether the values of a floating-point column without nulls or NaN are all
    distinct, decided exactly by sorting (equal values, 0.0 and -0.0 included, sit side
    by side); ``None`` when that does not apply (another type, nulls or NaN).

    Arrow's hash aggregation on doubles grows faster than linearly (100k distinct keys:
    seconds), a sort does not. The fast twin of that aggregation in
    :func:`_check_unique`, which stays the fallback and the one that reports duplicates;
    ``test_optimizations.py`` compares the two on generated columns."""
    if not pa.types.is_floating(column.type) or column.null_count:
        return None
    values = np.sort(column.to_numpy())
    if len(values) and np.isnan(values[-1]):  # NaN sorts last; it equals nothing
        return None
    return not bool(np.any(values[1:] == values[:-1]))


def _check_unique(table: pa.Table, keys: Sequence[str], hint: str) -> None:
    if len(keys) == 1:
        column = table.column(keys[0])
        if distinct_ints(column) or distinct_floats(column):
            return
    counts = table.select(list(keys)).group_by(list(keys)).aggregate([([], "count_all")])
    if counts.num_rows == table.num_rows:
        return
    dup = counts.filter(pc.greater(counts.column("count_all"), pa.scalar(1, pa.int64())))
    example = dup.slice(0, 1).to_pylist()[0]
    times = example.pop("count_all")
    raise DuplicateKeyError(
        f"{dup.num_rows} key(s) appear more than once in the batch, e.g. {example} "
        f"({times} times). {hint}",
        column=keys[0],
    )


def _check_history_columns(
    table: pa.Table, spec: MergeSpec, target_schema: pa.Schema | None, target: str
) -> None:
    """An ``scd2`` batch does not have the history columns; an existing target does,
    typed like ``sequence_by`` (and boolean).

    Raises:
        SchemaMismatchError: Either is not so.
    """
    names = spec.history
    clash = [c for c in names if c in table.column_names]
    if clash:
        raise SchemaMismatchError(
            f"the batch has the column(s) {clash}, which MergeSpec(mode='scd2') writes "
            "itself (history_columns); drop or rename them in the job, or pick other "
            "history_columns.",
            column=clash[0],
        )
    if target_schema is None:
        return
    seq = spec.sequence_by
    assert seq is not None
    wanted = {names[0]: None, names[1]: None, names[2]: pa.bool_()}
    for name, kind in wanted.items():
        if name not in target_schema.names:
            raise SchemaMismatchError(
                f"target {target} has no column {name!r}: an scd2 target needs the "
                f"history columns {list(names)}; it was not created by an scd2 sink, or "
                "with other history_columns.",
                table=target,
                column=name,
            )
        found = target_schema.field(name).type
        expected = kind or (target_schema.field(seq).type if seq in target_schema.names else found)
        if not found.equals(expected):
            raise SchemaMismatchError(
                f"target {target} stores {name!r} as {found}, but scd2 writes it as "
                f"{expected} (the type of {seq!r}, or boolean for is_current).",
                table=target,
                column=name,
            )


def prepare(
    table: pa.Table,
    spec: MergeSpec,
    target_schema: pa.Schema | None,
    *,
    target: str,
) -> pa.Table:
    """Validate a collected batch and shape it for staging.

    Args:
        table: The output of :func:`collect`.
        spec: The merge spec.
        target_schema: The target's Arrow schema, or ``None`` if it does not exist yet.
        target: The target's name, for messages.

    Returns:
        The staged form: target types, nullable fields, float keys normalised
        (:func:`normalise_keys`: -0.0 is 0.0), one row per key (for
        ``upsert``/``insert``), the delete flag last when ``delete_when`` is set.

    Raises:
        KeyColumnError, DuplicateKeyError, SchemaMismatchError: see the module doc.
        InvalidKeyError: A float key is NaN.
    """
    check_required(table, spec)
    if spec.mode == "scd2":
        _check_history_columns(table, spec, target_schema, target)
    flag = table.column(DELETE_COLUMN) if DELETE_COLUMN in table.column_names else None
    data = table.drop_columns([DELETE_COLUMN]) if flag is not None else table
    if target_schema is not None:
        data = align_to_target(
            data,
            target_schema,
            evolve=spec.schema_evolution,
            table=target,
            non_null_mask=None if flag is None else pc.invert(flag),
        )
    else:
        data = to_delta_types(data, table=target)
    if flag is not None:
        data = data.append_column(pa.field(DELETE_COLUMN, pa.bool_(), True), flag)
    data = normalise_keys(data, spec.keys)
    if spec.mode == "scd2":
        _check_unique(data, spec.event_columns, SCD2_DUPLICATES)
    elif spec.keys:
        if spec.sequence_by:
            data = _latest_per_key(data, spec.keys, spec.sequence_by)
        else:
            _check_unique(
                data,
                spec.keys,
                "Deduplicate in the job, or set MergeSpec(sequence_by=...) to keep the "
                "latest row per key.",
            )
    return data
