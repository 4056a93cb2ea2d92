"""The spark engine's judge of a target's ``CHECK`` constraints
(:mod:`deltasink.shapes.constraints`): the batch's rows are evaluated by Spark, in one
aggregation, before the version is staged; a row that breaks one is refused by name
(:class:`~deltasink.errors.ConstraintViolationError`). At commit Delta checks them itself,
on the snapshot the commit is made on.
"""

from __future__ import annotations

from typing import Any

from deltasink.input.sql import DELETE_COLUMN, quote
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
    *,
    table: str,
    version: int,
    app_id: str,
) -> None:
    """Judge the prepared batch ``frame`` (its data ``columns``, with deltasink's delete
    flag where ``delete_when`` applies) by the constraints among the target's
    ``properties``; ``target`` is the target as a DataFrame (``None``: not created yet).

    Raises:
        ConstraintViolationError: A row breaks a constraint.
        ConfigurationError: An upsert writes part of a constraint's columns.
    """
    constraints = constraints_of(properties)
    if target is None or not constraints:
        return
    fields = target.schema.fields
    chosen = judged(constraints, spec, columns, [f.name for f in fields], table=table)
    if not chosen:
        return
    if DELETE_COLUMN in frame.columns:
        frame = frame.where(f"NOT coalesce({quote(DELETE_COLUMN)}, false)")
    have = {c.lower() for c in frame.columns}
    wanted = set().union(*(c.columns for c in chosen))
    nulls = [  # what an insert writes where the batch has no value
        f"CAST(NULL AS {ddl_type(f.dataType)}) AS {quote(f.name)}"
        for f in fields
        if f.name.lower() in wanted and f.name.lower() not in have
    ]
    if nulls:
        frame = frame.selectExpr("*", *nulls)
    sums = [
        f"CAST(coalesce(sum(CASE WHEN coalesce(({render(c.expression, 'spark', c.what)}), false) "
        f"THEN 0 ELSE 1 END), 0) AS BIGINT) AS c{i}"
        for i, c in enumerate(chosen)
    ]
    row = frame.selectExpr(*sums).collect()[0]
    for i, constraint in enumerate(chosen):
        if row[f"c{i}"]:
            raise violation(
                constraint, int(row[f"c{i}"]), table=table, version=version, app_id=app_id
            )
