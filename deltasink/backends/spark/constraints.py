"""The spark engine's judge of a target's ``CHECK`` constraints
(:mod:`deltasink.shapes.constraints`): the batch's rows are evaluated by Spark, in one
aggregation, before the version is staged; a row that breaks one is refused by name
(:class:`~deltasink.errors.ConstraintViolationError`). At commit Delta checks them itself,
on the snapshot the commit is made on.
"""

from __future__ import annotations

from typing import Any

from deltasink.input.sql import DELETE_COLUMN, quote
from deltasink.shapes.computed import Computed, parse_expression
from deltasink.shapes.constraints import constraints_of, judged, violation
from deltasink.shapes.predicates import render
from deltasink.shapes.spec import MergeSpec

from .tables import ddl_type

__all__ = ["check_constraints"]


def check_constraints(
    frame: Any,
    columns: tuple[str, ...],
    spec: MergeSpec,
    target: Any | None,
    properties: dict[str, str],
    computed: tuple[Computed, ...] = (),
    *,
    table: str,
    version: int,
    app_id: str,
) -> None:
    """Judge the prepared batch ``frame`` (its data ``columns``, with deltasink's delete
    flag where ``delete_when`` applies) by the constraints among the target's
    ``properties``; ``target`` is the target as a DataFrame (``None``: not created yet).
    An insert's rows whose key the target holds are not judged (Delta's MERGE writes
    none of them). A column the batch omits is judged as the commit writes it: a generated column's or
    a default's expression evaluated by Spark, else null; a constraint over an identity
    column the batch omits is left to the commit's own check (its value is Delta's).

    Raises:
        ConstraintViolationError: A row breaks a constraint.
        ConfigurationError: An upsert writes part of a constraint's columns.
    """
    constraints = constraints_of(properties)
    if target is None or not constraints:
        return
    fields = target.schema.fields
    generated = [c.name for c in computed if c.kind == "generated"]
    names = [f.name for f in fields]
    chosen = judged(constraints, spec, columns, names, table=table, generated=generated)
    have = {c.lower() for c in frame.columns}
    by_name = {c.name.lower(): c for c in computed}
    unknown = {n for n, c in by_name.items() if c.kind == "identity" and n not in have}
    chosen = tuple(c for c in chosen if not c.columns & unknown)
    if not chosen:
        return
    if DELETE_COLUMN in frame.columns:
        frame = frame.where(f"NOT coalesce({quote(DELETE_COLUMN)}, false)")
    wanted = set().union(*(c.columns for c in chosen))
    absent = [  # what an insert writes where the batch has no value
        f"CAST(({_written(by_name.get(f.name.lower()), f.name)}) AS {ddl_type(f.dataType)}) "
        f"AS {quote(f.name)}"
        for f in fields
        if f.name.lower() in wanted and f.name.lower() not in have
    ]
    if absent:
        frame = frame.selectExpr("*", *absent)
    sums = [
        f"CAST(coalesce(sum(CASE WHEN coalesce(({render(c.expression, 'spark', c.what)}), false) "
        f"THEN 0 ELSE 1 END), 0) AS BIGINT) AS c{i}"
        for i, c in enumerate(chosen)
    ]
    row = frame.selectExpr(*sums).collect()[0]
    if spec.mode == "insert" and spec.keys and any(row[f"c{i}"] for i in range(len(chosen))):
        # Delta's MERGE inserts only the rows whose key the target lacks: judge those.
        keys = list(spec.keys)
        frame = frame.join(target.select(*keys), on=keys, how="left_anti")
        row = frame.selectExpr(*sums).collect()[0]
    for i, constraint in enumerate(chosen):
        if row[f"c{i}"]:
            raise violation(
                constraint, int(row[f"c{i}"]), table=table, version=version, app_id=app_id
            )


def _written(column: Computed | None, name: str) -> str:
    """What a commit writes into the column ``name`` that a batch omits: its generated
    expression or default (re-emitted from its parse), else null."""
    if column is None or column.expression is None:
        return "NULL"
    return parse_expression(column.expression, name).sql(dialect="spark", comments=False)
