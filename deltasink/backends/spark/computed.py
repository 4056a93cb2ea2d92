"""Computed columns on the spark engine (:mod:`deltasink.shapes.computed`): Delta
computes them, as it does for plain delta-spark, and a batch whose values it would
refuse is refused by name before it is staged.

* A write (``append``, ``replace``) names only the columns the batch has, plus each
  absent column's default (``CAST((default) AS type)``, as delta-spark's
  ``INSERT INTO t (cols)`` fills it) and a NULL for any other absent column; an absent
  generated or identity column is left out, for Delta to compute or generate.
* A MERGE names only the batch's columns (:mod:`.sources`): Delta computes generated
  columns, fills defaults and generates identity values itself.
* A batch that carries a ``GENERATED ALWAYS`` identity column, or a generated column
  with a value other than its expression's (Delta's ``col <=> expr``, evaluated by
  Spark on the batch), is refused before staging: Delta would fail the commit on
  every try.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from deltasink.errors import InvalidInputError
from deltasink.input.sql import DELETE_COLUMN, quote
from deltasink.shapes.computed import (
    Computed,
    computed_columns,
    parse_expression,
    refuse_carried_identity,
    refuse_unparsable,
)
from deltasink.shapes.spec import MergeSpec

from .tables import Tables, ddl_type

__all__ = ["check_computed", "computed_of", "write_select"]


def computed_of(spark: Any, tables: Tables, target: Any | None) -> tuple[Computed, ...]:
    """The computed columns of the target (``target``: a Spark DataFrame of it;
    ``None``: not created yet), read from its Delta log's schema: Delta leaves the
    generation and identity metadata out of a DataFrame's schema."""
    if target is None:
        return ()
    fields = _logged_fields(spark, tables)
    if fields is None:  # neither reader reached the log: what the DataFrame shows
        fields = [(f.name, f.metadata) for f in target.schema.fields]
    return computed_columns(fields)


def _logged_fields(spark: Any, tables: Tables) -> list[tuple[str, Mapping[str, Any]]] | None:
    """The target's columns and their metadata from its newest snapshot: Delta's own
    ``DeltaLog`` on a classic session, else delta-rs where it opens the location
    (``None``: neither does)."""
    location = tables.target
    if tables.target_in_catalog:
        rows = spark.sql(f"DESCRIBE DETAIL {tables.target_ref}").collect()
        location = rows[0]["location"]
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None:
        empty = jvm.scala.Option.empty()
        for extra in ((empty, empty), (empty,)):  # Delta 4's update(), then Delta 3's
            try:
                log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
                    spark._jsparkSession, location
                )
                schema = json.loads(log.update(False, *extra).schema().json())
                return [(f["name"], f.get("metadata") or {}) for f in schema["fields"]]
            except Exception:  # another release's signature: the next, then delta-rs
                continue
    try:
        from deltalake import DeltaTable

        return [(f.name, f.metadata) for f in DeltaTable(location).schema().fields]
    except Exception:  # a store delta-rs cannot open without options
        return None


def _spark(text: str, column: str) -> str:
    """A computed column's expression re-emitted from its parse for Spark."""
    return parse_expression(text, column).sql(dialect="spark", comments=False)


def write_select(
    fields: Iterable[Any], present: Iterable[str], computed: Sequence[Computed]
) -> list[str]:
    """``SELECT`` items for a DataFrame write of a batch with the columns ``present``
    into a target of ``fields`` (Spark ``StructField``\\ s): the batch's columns; for an
    absent one, its default, nothing for a generated or identity column (Delta
    computes it), else a NULL of its type."""
    by_name = {c.name: c for c in computed}
    have = {c.lower() for c in present}
    select = []
    for f in fields:
        column = by_name.get(f.name)
        if f.name.lower() in have:
            select.append(quote(f.name))
        elif column is not None and column.kind == "default" and column.expression:
            value = _spark(column.expression, f.name)
            select.append(f"CAST(({value}) AS {ddl_type(f.dataType)}) AS {quote(f.name)}")
        elif column is None:
            select.append(f"CAST(NULL AS {ddl_type(f.dataType)}) AS {quote(f.name)}")
    return select


def check_computed(
    frame: Any,
    columns: Sequence[str],
    computed: Sequence[Computed],
    target: Any | None,
    spec: MergeSpec,
    *,
    table: str,
) -> None:
    """Before a batch is staged: it carries no ``GENERATED ALWAYS`` identity column, and
    every generated column it carries holds its expression's value (Spark evaluates
    ``col <=> CAST((expr) AS type)`` on the batch, deletes left out; a column whose
    expression reads a column the batch lacks is left to Delta). One Spark job, only
    when the batch carries a generated column.

    Raises:
        InvalidInputError: Naming the column and the way out.
    """
    if not computed or target is None:
        return
    refuse_unparsable(computed, table=table)  # a default is written from its parse
    refuse_carried_identity(computed, columns, table=table)
    have = {c.lower(): c for c in columns}
    types = {f.name: f.dataType for f in target.schema.fields}
    checked = [
        c
        for c in computed
        if c.kind == "generated" and c.name.lower() in have and c.columns() <= set(have)
    ]
    if not checked:
        return
    rows = frame.where(f"NOT {quote(DELETE_COLUMN)}") if spec.delete_when else frame
    counts = [
        f"count_if(NOT ({quote(have[c.name.lower()])} <=> CAST(({_spark(c.expression or '', c.name)})"
        f" AS {ddl_type(types[c.name])})))"
        for c in checked
    ]
    found = rows.selectExpr(*counts).collect()[0]
    for i, column in enumerate(checked):
        if found[i]:
            raise InvalidInputError(
                f"the batch carries values for the generated column {column.name} of "
                f"{table} other than its expression's ({column.expression}) in "
                f"{found[i]} row(s): Delta refuses such a row. Leave the column out of "
                "the batch (Delta computes it), or give the expression's value. Nothing "
                "was written.",
                table=table,
                column=column.name,
            )
