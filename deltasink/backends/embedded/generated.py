"""Generated columns on the embedded engine: computed as Spark computes them, or refused
by name before anything is staged.

delta-rs 1.6 evaluates a generated column's expression (the column metadata
``delta.generationExpression``) itself, with DataFusion's meaning: it computes the
column when an append omits it, checks ``col <=> expr`` on every row it writes (a
failed check fails the commit, on every try), and does not recompute the column when a
MERGE updates the columns it reads. Where DataFusion's meaning is not Spark's, the
values differ (``x / 4`` divides integers; ``CAST(ts AS DATE)`` is taken in UTC, not
in the session's zone).

So deltasink computes each generated column itself, with Spark's meaning, through the
translation the predicates use (:mod:`deltasink.shapes.sparksql`), and writes it with
every row (a MERGE's update sets it from the new values). A column is written only
where delta-rs's own evaluation is proven to agree:

* at open and before each commit (:func:`plan`, on the snapshot the commit is made on),
  an expression the translation cannot give Spark's meaning is refused by name;
* before a batch is staged (:func:`check_batch`), every row's value with Spark's meaning
  is compared with delta-rs's and with the value the batch carries, if any.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.errors import ConfigurationError, InvalidInputError, UnsupportedTableFeatureError
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.reserved import ROW_COLUMN
from deltasink.shapes.computed import computed_columns, parse_expression
from deltasink.shapes.sparksql import DELTA_RS, Refusal, Scope, of_arrow
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.sparksql.walker import Walker
from deltasink.shapes.spec import MergeSpec

__all__ = ["Generated", "check_batch", "check_generated", "check_rewritable", "fill", "plan"]

#: Modes whose MERGE updates existing rows from the batch's values.
_UPDATING = ("upsert", "scd2")
#: Modes whose commit writes no existing row again (delta-rs appends new files only).
_APPENDING = ("append", "insert")
_ROW = "_" + ROW_COLUMN


@dataclass(frozen=True)
class Generated:
    """One generated column of the target, and its expression in two meanings.

    Attributes:
        name: The column.
        field: Its Arrow field in the target.
        text: The expression as the table defines it.
        spark: The expression with Spark's meaning, for DataFusion.
        delta_rs: The expression as delta-rs evaluates it (its text, cast to the type).
        reads: The target columns it reads.
    """

    name: str
    field: pa.Field[Any]
    text: str
    spark: str
    delta_rs: str
    reads: tuple[str, ...]


def _refuse(uri: str, column: str, text: str, why: str) -> UnsupportedTableFeatureError:
    return UnsupportedTableFeatureError(
        f"the target {uri} computes its generated column {column} as ({text}), which the "
        f"embedded engine (delta-rs) cannot write as Spark computes it: {why}. Write it "
        "with engine='spark' (a Delta-enabled Spark session, e.g. Databricks). Nothing "
        "was written.",
        table=uri,
        features=[f"generatedColumns: {column}"],
    )


def plan(table: DeltaTable, uri: str) -> tuple[Generated, ...]:
    """The target's generated columns, each with Spark's meaning for DataFusion.

    Raises:
        UnsupportedTableFeatureError: An expression the translation does not give
            Spark's meaning (e.g. ``CAST(ts AS DATE)``, which depends on the session's
            time zone), or whose type is not its column's.
    """
    schema = arrow_schema(table)
    fields = [(f.name, f.metadata) for f in table.schema().fields]
    generated = [c for c in computed_columns(fields) if c.kind == "generated"]
    if not generated:
        return ()
    types = types_of(schema)
    by_lower = {name.lower(): name for name in schema.names}
    found = []
    for column in generated:
        text = column.expression or ""
        try:
            tree = parse_expression(text, column.name)
            walker = Walker(columns=types, dialect="datafusion", evaluators=DELTA_RS, scope=Scope())
            typed = walker.walk(tree)
        except Refusal as exc:
            raise _refuse(uri, column.name, text, str(exc)) from exc
        except (KeyError, ConfigurationError) as exc:
            raise _refuse(uri, column.name, text, f"it does not resolve ({exc})") from exc
        field = schema.field(column.name)
        kind = of_arrow(field.type)
        if typed.type != kind or kind.name in ("timestamp", "other"):
            raise _refuse(uri, column.name, text, f"its type is {typed.type}, the column's {kind}")
        reads = tuple(sorted(by_lower[c] for c in column.columns() if c in by_lower))
        raw = f"CAST(({text}) AS {kind.datafusion()})"
        found.append(Generated(column.name, field, text, typed.sql, raw, reads))
    return tuple(found)


def _evaluate(rows: pa.Table, expressions: Sequence[str]) -> pa.Table:
    """``expressions`` evaluated by DataFusion (delta-rs's) over ``rows``, in order."""
    if not expressions:
        return pa.table({})
    indexed = rows.append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    items = ", ".join(f'{e} AS "c{i}"' for i, e in enumerate(expressions))
    with tempfile.TemporaryDirectory(prefix="deltasink-generated-") as folder:
        write_deltalake(folder, indexed)
        query = f'SELECT {items} FROM "b" ORDER BY "{_ROW}"'
        return pa.table(QueryBuilder().register("b", DeltaTable(folder)).execute(query))


def _inputs(data: pa.Table, schema: pa.Schema, reads: Iterable[str]) -> pa.Table:
    """The columns the expressions read, in the target's types: nulls where ``data``
    has none (a row inserted without them)."""
    present = {name.lower(): name for name in data.column_names}
    columns: dict[str, pa.Array[Any] | pa.ChunkedArray[Any]] = {}
    for name in reads:
        kind = schema.field(name).type
        given = present.get(name.lower())
        if given is None:
            columns[name] = pa.nulls(data.num_rows, kind)
        else:
            columns[name] = data.column(given).cast(kind)
    if not columns:  # an expression of constants: one column to count the rows
        columns["_"] = pa.array([0] * data.num_rows, pa.int8())
    return pa.table(columns)


def check_batch(
    generated: Sequence[Generated], data: pa.Table, spec: MergeSpec, table: DeltaTable, uri: str
) -> None:
    """Before a batch is staged: each generated column's value with Spark's meaning is
    the one delta-rs computes and checks, and the one the batch carries, if any.

    Raises:
        InvalidInputError: The batch carries a value other than the expression's, or
            (an updating mode) omits a column the expression reads, or the expression
            fails on a row (as Spark's would: an overflow).
        UnsupportedTableFeatureError: delta-rs would compute another value.
    """
    if not generated or data.num_rows == 0:
        return
    rows = data.drop_columns([c for c in (DELETE_COLUMN, GUARD_COLUMN) if c in data.column_names])
    # Computed on every row (the publish computes deletes too), compared on those written.
    written: pa.ChunkedArray[Any] | None = None
    if DELETE_COLUMN in data.column_names:
        flag: pa.ChunkedArray[Any] = data.column(DELETE_COLUMN)
        written = pc.invert(flag.fill_null(pa.scalar(False)))
    present = {name.lower(): name for name in rows.column_names}
    schema = arrow_schema(table)
    for column in generated:
        absent = [c for c in column.reads if c.lower() not in present]
        if absent and spec.mode in _UPDATING:
            raise InvalidInputError(
                f"the batch omits {absent}, which the generated column {column.name} of "
                f"{uri} is computed from ({column.text}): an update would have to read "
                "them from the target row. Carry them in the batch, or write with "
                "engine='spark'. Nothing was written.",
                table=uri,
                column=column.name,
            )
        inputs = _inputs(rows, schema, column.reads)
        try:
            spark = _evaluate(inputs, [column.spark]).column(0)
        except Exception as exc:
            raise InvalidInputError(
                f"the generated column {column.name} of {uri} ({column.text}) fails on "
                f"the batch as Spark's would: {exc}. Nothing was written.",
                table=uri,
                column=column.name,
            ) from exc
        spark = _written(spark.cast(column.field.type), written)
        try:
            theirs = _evaluate(inputs, [column.delta_rs]).column(0).cast(column.field.type)
        except Exception as exc:
            raise _refuse(uri, column.name, column.text, f"delta-rs fails on it ({exc})") from exc
        if not spark.equals(_written(theirs, written)):
            raise _refuse(
                uri, column.name, column.text, "delta-rs computes other values for this batch"
            )
        carried = present.get(column.name.lower())
        given = None if carried is None else rows.column(carried).cast(column.field.type)
        if given is not None and not _written(given, written).equals(spark):
            raise InvalidInputError(
                f"the batch carries values for the generated column {column.name} of "
                f"{uri} other than its expression's ({column.text}): Delta refuses such "
                "a row. Leave the column out of the batch (it is computed), or give the "
                "expression's value. Nothing was written.",
                table=uri,
                column=column.name,
            )


def _written(values: pa.ChunkedArray[Any], written: pa.ChunkedArray[Any] | None) -> Any:
    """``values`` of the rows written (``written``: the mask; ``None``: every row)."""
    return values if written is None else values.filter(written)


def fill(generated: Sequence[Generated], values: pa.Table, schema: pa.Schema) -> pa.Table:
    """``values`` (aligned to the target) with every generated column it omits computed
    with Spark's meaning, so that delta-rs writes (and a MERGE's update sets) them."""
    present = {name.lower() for name in values.column_names}
    missing = [g for g in generated if g.name.lower() not in present]
    if not missing or values.num_rows == 0:
        for g in missing:
            values = values.append_column(g.field, pa.nulls(values.num_rows, g.field.type))
        return values
    reads = sorted({c for g in missing for c in g.reads})
    computed = _evaluate(_inputs(values, schema, reads), [g.spark for g in missing])
    for i, g in enumerate(missing):
        values = values.append_column(g.field, computed.column(i).cast(g.field.type))
    return values


def check_rewritable(table: DeltaTable, spec: MergeSpec, uri: str) -> None:
    """Before a version is staged and again before its commit, on that snapshot: no row
    of the target holds a generated value delta-rs would refuse to write again.

    A MERGE or an overwrite copies the untouched rows of every file it rewrites (and,
    with the change data feed, writes the changed rows' pre-images), and delta-rs checks
    each against its own meaning of the expression: a row delta-spark wrote where the
    meanings differ (``n / 4`` for an odd ``n``) fails that commit on every try. Append
    and insert write no existing row. One query over the target's generated columns and
    the columns they read (delta-rs's DataFusion, the snapshot given).

    Raises:
        UnsupportedTableFeatureError: Such a row exists (the mode is refused, by name).
    """
    if spec.mode in _APPENDING:
        return
    generated = plan(table, uri)
    for column in generated:
        test = f'NOT ("{column.name}" IS NOT DISTINCT FROM {column.delta_rs})'
        try:
            query = QueryBuilder().register("t", table)
            found = pa.table(query.execute(f'SELECT count(*) AS "n" FROM "t" WHERE {test}'))
        except Exception as exc:
            raise _refuse(uri, column.name, column.text, f"delta-rs fails on it ({exc})") from exc
        if found.column(0)[0].as_py():
            raise _refuse(
                uri,
                column.name,
                column.text,
                f"{found.column(0)[0].as_py()} row(s) of the target hold Spark's value where "
                f"delta-rs computes another, and a {spec.mode} rewrites rows, each checked "
                "by delta-rs against its own value (the commit would fail on every try; "
                "mode='append' or 'insert' writes no existing row again)",
            )


def check_generated(table: DeltaTable | None, data: pa.Table, spec: MergeSpec, uri: str) -> None:
    """Before a batch is staged into an existing target: :func:`plan` and
    :func:`check_batch` (nothing for a target not created yet). Raises as they do."""
    if table is not None:
        check_batch(plan(table, uri), data, spec, table, uri)
