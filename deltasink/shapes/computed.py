"""The computed columns of a target (generated, default and identity columns), read
from its schema's column metadata as delta-spark writes it, and what a batch may carry
for them: engine-free (each engine computes or refuses, see
:mod:`deltasink.backends.embedded.generated` and :mod:`deltasink.backends.spark.computed`).

Delta keeps them in each column's metadata:

* ``delta.generationExpression``: a generated column (``GENERATED ALWAYS AS (expr)``,
  writer feature ``generatedColumns``). A batch may omit it (the writer computes it) or
  carry it (Delta then checks ``col <=> expr`` and fails the commit otherwise).
* ``CURRENT_DEFAULT``: a column default (``DEFAULT expr``, feature
  ``allowColumnDefaults``): a row inserted without the column gets ``expr``.
* ``delta.identity.start`` (and ``.step``, ``.allowExplicitInsert``, ``.highWaterMark``):
  an identity column (feature ``identityColumns``). ``GENERATED ALWAYS`` ones
  (``allowExplicitInsert`` false) take no value from a batch.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import SqlglotError

from deltasink.errors import ConfigurationError, InvalidInputError

__all__ = [
    "DEFAULT_KEY",
    "GENERATION_KEY",
    "IDENTITY_PREFIX",
    "Computed",
    "computed_columns",
    "parse_expression",
    "refuse_carried_identity",
    "refuse_unparsable",
]

GENERATION_KEY = "delta.generationExpression"
DEFAULT_KEY = "CURRENT_DEFAULT"
IDENTITY_PREFIX = "delta.identity."
_EXPLICIT_INSERT = "delta.identity.allowExplicitInsert"


@dataclass(frozen=True)
class Computed:
    """One computed column of the target.

    Attributes:
        name: The column.
        kind: ``"generated"``, ``"default"`` or ``"identity"``.
        expression: The Spark SQL text of a generated column's expression or of a
            default; ``None`` for an identity column.
        always: An identity column ``GENERATED ALWAYS`` (takes no value from a batch).
    """

    name: str
    kind: Literal["generated", "default", "identity"]
    expression: str | None = None
    always: bool = False

    def columns(self) -> frozenset[str]:
        """The columns (lower case) a generated column's expression reads."""
        if self.kind != "generated" or self.expression is None:
            return frozenset()
        tree = parse_expression(self.expression, self.name)
        return frozenset(c.name.lower() for c in tree.find_all(exp.Column))


def _flag(value: object) -> bool:
    return str(value).strip().lower() == "true"


def computed_columns(fields: Iterable[tuple[str, Mapping[str, object]]]) -> tuple[Computed, ...]:
    """The computed columns among ``fields`` (top-level ``(name, metadata)`` pairs, as
    delta-rs's ``Field.metadata`` or Spark's ``StructField.metadata`` give them)."""
    found: list[Computed] = []
    for name, metadata in fields:
        meta = metadata or {}
        if GENERATION_KEY in meta:
            found.append(Computed(name, "generated", str(meta[GENERATION_KEY])))
        elif any(str(k).startswith(IDENTITY_PREFIX) for k in meta):
            found.append(Computed(name, "identity", always=not _flag(meta.get(_EXPLICIT_INSERT))))
        elif DEFAULT_KEY in meta:
            found.append(Computed(name, "default", str(meta[DEFAULT_KEY])))
    return tuple(found)


def parse_expression(text: str, column: str) -> exp.Expr:
    """A computed column's expression parsed as Spark SQL.

    Raises:
        ConfigurationError: It does not parse as one Spark SQL expression.
    """
    tree = _parsed(text)
    return tree.copy() if tree is not None else _unparsable(text, column)


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> exp.Expr | None:
    try:
        found = [p for p in sqlglot.parse(text, read="spark") if p is not None]
    except SqlglotError:
        return None
    return found[0] if len(found) == 1 else None


def _unparsable(text: str, column: str) -> exp.Expr:
    raise ConfigurationError(
        f"the expression {text!r} of the computed column {column} does not parse as one "
        "Spark SQL expression: write the table with engine='spark'."
    )


def refuse_carried_identity(
    computed: Sequence[Computed], columns: Iterable[str], *, table: str
) -> None:
    """A batch carrying a ``GENERATED ALWAYS`` identity column is refused: Delta fails
    the commit on every try.

    Raises:
        InvalidInputError: Naming the column and the way out.
    """
    have = {c.lower() for c in columns}
    for column in computed:
        if column.kind == "identity" and column.always and column.name.lower() in have:
            raise InvalidInputError(
                f"the batch carries the column {column.name}, which the target {table} "
                "defines as an identity column GENERATED ALWAYS: Delta generates its "
                "values and refuses any given. Leave the column out of the batch (or "
                "define it GENERATED BY DEFAULT AS IDENTITY). Nothing was written.",
                table=table,
                column=column.name,
            )


def refuse_unparsable(computed: Sequence[Computed], *, table: str) -> None:
    """Every generated column's and default's expression parses as Spark SQL.

    Raises:
        ConfigurationError: Naming the column.
    """
    for column in computed:
        if column.expression is not None:
            try:
                parse_expression(column.expression, column.name)
            except ConfigurationError as exc:
                raise ConfigurationError(f"target {table}: {exc}", table=table) from exc
