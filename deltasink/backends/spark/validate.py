"""Validating a batch on Spark before anything is staged: the embedded engine's checks
and named errors (:func:`deltasink.input.batch.prepare`), with the row-level ones counted
in one Spark pass over the batch (:func:`_batch_stats`), so no row reaches the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

import pyarrow as pa

from deltasink.errors import (
    KeyColumnError,
    SchemaMismatchError,
)
from deltasink.input.arrow import collect_empty, is_spark_dataframe, spark_empty, spark_frame
from deltasink.input.batch import check_required, collect, prepare
from deltasink.input.keys import nan_key_error
from deltasink.input.rows import check_row_predicates
from deltasink.input.sql import DELETE_COLUMN, delete_expr, quote
from deltasink.reserved import column
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.spec_rules import check_source_condition

from .keys import blank_keys, bounded_keys, normalise_keys, one_row_per_key
from .prune import bound_exprs, predicate_from_bounds
from .session import SparkSql
from .sources import target_sql
from .tables import ddl_type

__all__ = [
    "Expected",
    "PreparedFrame",
    "as_dataframe",
    "check_condition",
    "prepare_frame",
    "require_dataframe",
]


@dataclass(frozen=True)
class PreparedFrame:
    """A validated batch, shaped for staging (still lazy: nothing is written).

    Attributes:
        frame: The staged form: target types, one row per key, the delete flag last.
        columns: Its data columns (without the delete flag).
        rows: Rows it holds.
        prune: The MERGE's key-range predicate for these rows
            (:mod:`~deltasink.backends.spark.prune`), from the validating aggregation;
            ``None``: no key is bounded.
    """

    frame: Any
    columns: tuple[str, ...]
    rows: int
    prune: str | None = None


@dataclass(frozen=True)
class Expected:
    """The schema a batch must fit when versions are pending before it: the target's
    once they are published (:func:`deltasink.core.pending.schema_after`).

    Attributes:
        schema: That schema, in Arrow (the check :func:`~deltasink.input.batch.prepare` makes).
        types: The Spark types its columns are stored as (the target's, else the
            staging table's), which the batch's columns are cast to.
        pending: The versions pending before the batch.
    """

    schema: pa.Schema
    types: Mapping[str, Any]
    pending: tuple[int, ...] = ()


def as_dataframe(batch: object, sql: SparkSql) -> Any:
    """``batch`` as a Spark DataFrame: Arrow data is created on the session; anything
    else is returned as it is (see :func:`require_dataframe`)."""
    if isinstance(batch, pa.RecordBatch | pa.RecordBatchReader):
        batch = (
            pa.Table.from_batches([batch])
            if isinstance(batch, pa.RecordBatch)
            else batch.read_all()
        )
    if isinstance(batch, pa.Table):
        from pyspark.sql.pandas.types import from_arrow_schema

        # A zone-less Arrow timestamp is TIMESTAMP_NTZ (PySpark would make it a
        # session-zone TIMESTAMP, another type and another instant).
        schema = from_arrow_schema(batch.schema, prefer_timestamp_ntz=True)
        return spark_frame(sql.session(), batch, schema)  # PySpark 3.5 classic too
    return batch


def require_dataframe(df: Any) -> Any:
    """``df`` if it is a Spark DataFrame; else the named error :func:`collect` raises."""
    if not is_spark_dataframe(df):
        collect(df, MergeSpec(mode="append"))  # raises InvalidInputError for the type
    return df


def prepare_frame(
    df: Any,
    spec: MergeSpec,
    target: Any | None,
    *,
    table: str,
    expected: Expected | None = None,
    blank: Sequence[str] = (),
    computed: Sequence[str] = (),
) -> PreparedFrame:
    """Validate a Spark DataFrame as :func:`deltasink.input.batch.prepare` validates Arrow, on
    Spark, raising the same named errors, in the same order, with the same messages.

    Schema checks run on a zero-row Arrow form of the batch (the embedded engine's own
    code); null, NOT NULL and duplicate-key checks are counted in ONE Spark pass; with
    ``sequence_by`` the latest row per key is kept by a window (ties: the later row in
    the DataFrame's order). No row reaches the driver.

    Args:
        df: The batch (classic or Spark Connect).
        spec: The merge spec.
        target: The target as a Spark DataFrame (its schema is used), or ``None`` if it
            does not exist yet.
        table: The target's name, for messages.
        expected: With versions pending before this one, the schema they leave
            (the batch is checked against it instead of the target's).
        blank: Key columns that are string partition columns of the target, whose
            null is the key ``''`` (``null_safe_keys``: the one null partition,
            :mod:`deltasink.shapes.partitions`).
        computed: The target's generated, default and identity columns (a batch may
            lack them).

    Raises:
        InvalidInputError: As :func:`~deltasink.input.batch.prepare`, plus a bad
            ``delete_when``.
    """
    zero, target_arrow = _checked_schema(df, spec, target, expected)
    frame = df.selectExpr("*", delete_expr(spec, types_of(zero.schema))) if spec.delete_when else df
    frame, float_keys = normalise_keys(frame, spec.keys)
    frame = blank_keys(frame, blank)  # '' and null: one key, carried as ''
    not_null = [
        f.name
        for f in (target_arrow or [])
        if not f.nullable and f.name in zero.column_names and f.name != DELETE_COLUMN
    ]
    bounded = bounded_keys(spec, target, frame)
    stats, bounds = _batch_stats(frame, spec, not_null, bounded, float_keys)
    _check_required_values(spec, stats)
    staged = prepare(zero, spec, target_arrow, target=table, computed=computed)  # types, columns
    _check_not_null_and_nan(stats, not_null, float_keys, table=table)
    frame, rows = one_row_per_key(frame, spec, stats)
    columns = tuple(c for c in staged.column_names if c != DELETE_COLUMN)
    select = _target_typed(frame, spec, columns, target, expected)
    prune = predicate_from_bounds(bounds, bounded) if bounded else None
    return PreparedFrame(frame.selectExpr(*select), columns, int(rows), prune)


def _checked_schema(
    df: Any, spec: MergeSpec, target: Any | None, expected: Expected | None
) -> tuple[pa.Table, pa.Schema | None]:
    """The checks on the batch's names, before any row is counted: the key and
    ``sequence_by`` columns present, every row satisfying ``replace_where`` and
    ``target_predicate``. Returns the batch's zero-row Arrow form and the schema it must
    fit (the target's, or the one ``expected`` pending versions leave; ``None``: no
    target yet)."""
    zero = collect_empty(df, spec)  # names; delete_when analysed by the df's session
    check_required(zero, spec)  # missing key / sequence_by columns
    if spec.replace_where or spec.target_predicate:  # every row satisfies them
        check_row_predicates(df, spec, zero.column_names, types_of(zero.schema))
    target_arrow: pa.Schema | None = None if target is None else spark_empty(target).schema
    if expected is not None:
        target_arrow = expected.schema
    return zero, target_arrow


def _check_required_values(spec: MergeSpec, stats: Mapping[str, int]) -> None:
    """No key or ``sequence_by`` value is null, save where the spec allows it.

    Raises:
        KeyColumnError: One is, in the rows ``stats`` counted.
    """
    for i, name in enumerate(spec.required_columns):
        if stats[f"null_{i}"] and not spec.nullable(name):
            role = spec.role(name)
            raise KeyColumnError(
                f"{role} column {name!r} is null in {stats[f'null_{i}']} row(s) of the batch; "
                f"every row needs a {role}. Filter or fill them in the job.",
                column=name,
            )


def _check_not_null_and_nan(
    stats: Mapping[str, int], not_null: Sequence[str], float_keys: Sequence[str], *, table: str
) -> None:
    """No live row is null in a NOT NULL column of the target, no float key is NaN.

    Raises:
        SchemaMismatchError: A NOT NULL column is null.
        InvalidInputError: A float key is NaN (:func:`~deltasink.input.keys.nan_key_error`).
    """
    for i, name in enumerate(not_null):
        if stats[f"notnull_{i}"]:
            raise SchemaMismatchError(
                f"column {name!r} is NOT NULL in target {table} but {stats[f'notnull_{i}']} "
                "row(s) of the batch are null. Fill or filter them in the job.",
                table=table,
                column=name,
            )
    for i, name in enumerate(float_keys):
        if stats[f"nan_{i}"]:
            raise nan_key_error(name, stats[f"nan_{i}"])


def _target_typed(
    frame: Any,
    spec: MergeSpec,
    columns: Sequence[str],
    target: Any | None,
    expected: Expected | None,
) -> list[str]:
    """The staged form's projection: ``columns``, each cast to the type it is stored as
    (the target's, or ``expected``'s) where the batch's differs, the delete flag last."""
    target_types: Mapping[str, Any] = (
        {} if target is None else {f.name: f.dataType for f in target.schema.fields}
    )
    if expected is not None:
        target_types = expected.types
    batch_types = {f.name: f.dataType for f in frame.schema.fields}
    select = []
    for name in columns:
        wanted = target_types.get(name)
        if wanted is not None and ddl_type(wanted) != ddl_type(batch_types[name]):
            select.append(f"CAST({quote(name)} AS {ddl_type(wanted)}) AS {quote(name)}")
        else:
            select.append(quote(name))
    if spec.delete_when:
        select.append(quote(DELETE_COLUMN))
    return select


def check_condition(spec: MergeSpec, target: Any | None, *, table: str) -> None:
    """``not_matched_by_source_condition`` resolves on the existing target (a Spark
    DataFrame aliased ``t``), before anything is written
    (:func:`~deltasink.shapes.spec_rules.check_source_condition`); Spark analyses it
    without running a job (on Spark Connect too: see the projection below).

    Raises:
        InvalidInputError: It does not.
    """
    if target is None:
        return

    def resolves(condition: str) -> None:
        # A projection over the filter: Spark Connect answers a filter's ``schema`` from
        # its input's cached schema, without asking the server to analyse the condition.
        target.alias("t").where(condition).selectExpr("1 AS c").schema  # noqa: B018

    check_source_condition(
        spec, types_of(target.schema), sql=target_sql(spec, target), table=table, resolves=resolves
    )


def _batch_stats(
    frame: Any,
    spec: MergeSpec,
    not_null: Sequence[str],
    bounded: Sequence[str] = (),
    float_keys: Sequence[str] = (),
) -> tuple[dict[str, int], dict[str, Any]]:
    """The validating aggregation: counts (rows, nulls, NOT NULL violations, NaN float
    keys, distinct keys), and the bounds of ``bounded`` keys (:func:`~.prune.bound_exprs`).

    On a classic session, one pass whose totals are Spark's observed metrics (each
    task's partial sums, merged on the driver: no exchange to a single partition, no
    second job): with keys, the batch grouped by its event columns (the one shuffle, which
    brings a key's rows together; none when the batch is partitioned by them already)
    and each group's counts observed. On Spark Connect (where PySpark 3.5 cannot read
    observed metrics and Sail has none) the same counts by one aggregation, collected."""
    live = f" AND NOT {quote(DELETE_COLUMN)}" if spec.delete_when else ""
    flags = {"n": "1"}  # each count: the sum of a row's flag
    for i, name in enumerate(spec.required_columns):
        flags[f"null_{i}"] = f"CASE WHEN {quote(name)} IS NULL THEN 1 ELSE 0 END"
    for i, name in enumerate(not_null):
        flags[f"notnull_{i}"] = f"CASE WHEN {quote(name)} IS NULL{live} THEN 1 ELSE 0 END"
    for i, name in enumerate(float_keys):
        flags[f"nan_{i}"] = f"CASE WHEN isnan({quote(name)}) THEN 1 ELSE 0 END"
    events = [quote(k) for k in spec.event_columns]
    how = _observed if getattr(frame, "_jdf", None) is not None else _collected  # classic?
    row = how(frame, events, flags, spec.null_safe_keys, bound_exprs(bounded))
    bounds = {k: v for k, v in row.items() if k.startswith(("lo_", "hi_"))}
    return {k: int(v or 0) for k, v in row.items() if k not in bounds}, bounds


def _collected(
    frame: Any, events: Sequence[str], flags: Mapping[str, str], null_safe: bool, bounds: list[str]
) -> dict[str, Any]:
    """:func:`_batch_stats` as one aggregation, collected: the sums of ``flags``, the
    distinct ``events`` (the event columns, quoted) and ``bounds``."""
    exprs = [f"sum({flag}) AS {quote(name)}" for name, flag in flags.items()]
    if events:
        # count(DISTINCT a, b) skips rows with a null; a struct is never null
        listed = ", ".join(events)
        exprs.append(f"count(DISTINCT {f'struct({listed})' if null_safe else listed}) AS `keys`")
    row: dict[str, Any] = frame.selectExpr(*exprs, *bounds).collect()[0].asDict()
    return row


def _observed(
    frame: Any, events: Sequence[str], flags: Mapping[str, str], null_safe: bool, bounds: list[str]
) -> dict[str, Any]:
    """:func:`_collected`'s answer as the observed metrics of one pass (a ``noop``
    write): with ``events``, of the batch grouped by them."""
    from pyspark.sql import Observation
    from pyspark.sql.functions import col, expr

    metrics = [f"sum({flag}) AS {quote(name)}" for name, flag in flags.items()]
    observed = frame
    if events:
        sums = {name: quote(column(name)) for name in flags}
        observed = frame.groupBy(*(col(c) for c in events)).agg(
            *(expr(f"sum({flag}) AS {sums[name]}") for name, flag in flags.items())
        )
        metrics = [f"sum({sums[name]}) AS {quote(name)}" for name in flags]
        # as count(DISTINCT a, b): a key with a null is left out, unless nulls match
        present = " AND ".join(f"{c} IS NOT NULL" for c in events)
        metrics.append(
            "count(1) AS `keys`"
            if null_safe
            else f"sum(CASE WHEN {present} THEN 1 ELSE 0 END) AS `keys`"
        )
    observation = Observation()
    observed.observe(observation, *(expr(m) for m in [*metrics, *bounds])).write.format(
        "noop"
    ).mode("overwrite").save()
    return {name: _from_jvm(value) for name, value in observation.get.items()}


def _from_jvm(value: Any) -> Any:
    """An observed metric as Python: PySpark 3.5's ``Observation.get`` hands a date over
    as the JVM's object (4.x converts it). The only JVM objects here are the bounds of
    date keys; one that does not read as an ISO date is left out (``None``: that key
    unbounded, as for a batch without rows)."""
    if type(value).__name__ != "JavaObject":  # py4j.java_gateway.JavaObject
        return value
    try:
        return date.fromisoformat(str(value.toString()))
    except ValueError:
        return None
