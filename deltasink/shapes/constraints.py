"""A target's ``CHECK`` constraints, checked against a batch before it is staged.

Delta keeps a table's ``CHECK`` constraints as the properties ``delta.constraints.<name>``,
each a Spark SQL expression; every writer refuses a commit with a row for which one is
false or null (delta-spark and delta-rs both do, at commit). A version with such a row
could never be published, so each engine evaluates the constraints over the batch when it
is prepared and refuses it by name, nothing staged
(:class:`~deltasink.errors.ConstraintViolationError`); the embedded engine evaluates them
again on the snapshot each commit is made on (a constraint may be added in between), the
spark engine's Delta does so itself.

The rows judged are those the commit writes: the batch's rows (those it deletes left
out), with null for a target column the batch lacks, as an insert writes it. A row that
``upsert`` matches keeps the target's values of the columns the update does not write
(``update_columns``, ``except_columns``, a batch without them): a constraint over a column
the update writes *and* one it keeps cannot be judged from the batch, so that spec is
refused on that table by name (:class:`~deltasink.errors.ConfigurationError`). A
constraint over ``scd2``'s history columns (which deltasink computes at commit) is left
to the commit's own check.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import sqlglot.expressions as exp

from deltasink.errors import ConfigurationError, ConstraintViolationError
from deltasink.shapes.spec import MergeSpec

__all__ = [
    "PREFIX",
    "Constraint",
    "constraints_of",
    "judged",
    "violation",
]

#: The table property prefix of a ``CHECK`` constraint (Delta's protocol).
PREFIX = "delta.constraints."


@dataclass(frozen=True)
class Constraint:
    """One ``CHECK`` constraint: its name and Spark SQL expression."""

    name: str
    expression: str

    @property
    def columns(self) -> frozenset[str]:
        """The top-level columns the expression reads, lower-cased (Spark resolves
        names case-insensitively)."""
        return _columns(self.expression)

    @property
    def what(self) -> str:
        """The constraint in messages."""
        return f"CHECK constraint {self.name} ({self.expression})"


@functools.lru_cache(maxsize=256)
def _columns(expression: str) -> frozenset[str]:
    from deltasink.shapes.predicates import parse_predicate

    tree = parse_predicate(expression, "a CHECK constraint of the target")
    return frozenset(c.parts[0].name.lower() for c in tree.find_all(exp.Column) if c.parts)


def constraints_of(configuration: Mapping[str, str] | None) -> tuple[Constraint, ...]:
    """The ``CHECK`` constraints among a table's properties, by name."""
    found = [
        Constraint(key[len(PREFIX) :], value)
        for key, value in (configuration or {}).items()
        if key.lower().startswith(PREFIX) and value
    ]
    return tuple(sorted(found, key=lambda c: c.name))


def judged(
    constraints: Sequence[Constraint],
    spec: MergeSpec,
    batch_columns: Iterable[str],
    target_columns: Iterable[str],
    *,
    table: str,
    generated: Iterable[str] = (),
) -> tuple[Constraint, ...]:
    """The constraints a batch with ``batch_columns`` can be judged by (see the module
    docstring), after refusing a spec whose updates straddle one. The ``generated``
    columns are written with every row (computed from the row's values).

    Raises:
        ConfigurationError: An ``upsert`` writes some of a constraint's columns on a
            matched row and keeps others.
    """
    batch = list(batch_columns)
    history = {c.lower() for c in spec.history_columns or ()} if spec.mode == "scd2" else set()
    keys = {k.lower() for k in spec.keys}
    written = None
    if spec.mode == "upsert":
        written = {c.lower() for c in [*spec.updated(batch), *generated]}
    kept = {c.lower() for c in target_columns} - written - keys if written is not None else set()
    out = []
    for constraint in constraints:
        columns = constraint.columns
        if columns & history:
            continue  # computed at commit: the commit's own check judges it
        if written is not None and columns & written and columns & kept:
            raise ConfigurationError(
                f"the target {table} has the {constraint.what}, over columns "
                f"{sorted(columns & written)} that this upsert writes on a matched row and "
                f"{sorted(columns & kept)} that it keeps, so whether a row keeps it can only "
                "be told at commit, after the version is staged. Write every column it reads "
                "(update_columns / except_columns, or a batch with those columns), or drop "
                "the constraint. Nothing was written.",
                table=table,
            )
        out.append(constraint)
    return tuple(out)


def violation(
    constraint: Constraint, rows: int, *, table: str, version: int | None, app_id: str | None
) -> ConstraintViolationError:
    """The named error for ``rows`` rows of a version breaking ``constraint``."""
    error = ConstraintViolationError(
        f"{rows} row(s) of version {version} break the {constraint.what} of target {table} "
        "(a null result breaks it too, as in Delta): every writer would refuse the commit. "
        "Nothing was staged: fix or filter those rows in the job, or drop the constraint "
        f"(ALTER TABLE ... DROP CONSTRAINT {constraint.name}).",
        table=table,
        app_id=app_id,
        version=version,
    )
    error.constraint = constraint.name
    return error
