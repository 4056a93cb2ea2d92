"""The SQL an engine writes its target statements in (:class:`TargetSql`): the one place
a spec's predicates are rendered for a target statement, whichever engine makes it.

Each engine names its dialect once (``DIALECT`` in its ``modes`` module: ``"delta-rs"``
for the embedded engine, ``"spark"`` for the spark engine) and hands a ``TargetSql`` to
the shared shapes (:func:`~deltasink.shapes.merge.compile_merge`,
:func:`~deltasink.shapes.merge.replace_predicate`,
:func:`~deltasink.shapes.spec_rules.check_source_condition`), which never choose one.
The batch side (``deltasink.input``) evaluates predicates on the batch's own Spark
session (classic Spark or Sail), always in Spark's dialect.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from deltasink.shapes.predicates import Dialect
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.sparksql.types import SqlType

__all__ = ["RendersPredicates", "TargetSql", "literal"]


class RendersPredicates(Protocol):
    """What :class:`TargetSql` uses of a :class:`~deltasink.MergeSpec`."""

    def predicate(
        self, name: Any, dialect: Any, columns: Mapping[str, Any] | None = None
    ) -> str | None: ...


@dataclass(frozen=True)
class TargetSql:
    """How one target statement is written.

    Attributes:
        dialect: The parser that reads it: ``"delta-rs"`` (DataFusion, through
            delta-rs) or ``"spark"`` (Spark SQL).
        types: The target's column types (Spark's), which the spec's predicates are
            translated for with Spark's meaning (:mod:`deltasink.shapes.sparksql`): the
            recorded time zone and ANSI mode, whatever the evaluating session's. ``None``:
            Spark gets a predicate re-emitted from its parse as written; delta-rs, which
            always needs the translation, refuses a predicate then (``ValueError``).
    """

    dialect: Dialect
    types: Mapping[str, SqlType] | None = None

    @classmethod
    def over(cls, dialect: Dialect, schema: pa.Schema | None) -> TargetSql:
        """For a target (or batch) with this Arrow ``schema`` (``None``: no types)."""
        return cls(dialect, None if schema is None else types_of(schema))

    def predicate(self, spec: RendersPredicates, name: str) -> str | None:
        """``spec``'s predicate field ``name`` as this statement's parser reads it
        (:meth:`~deltasink.MergeSpec.predicate`); ``None`` when unset."""
        return spec.predicate(name, self.dialect, self.types)

    def literal(self, value: object) -> str | None:
        """``value`` as a literal of this dialect; ``None`` for a type without one."""
        if isinstance(value, str) and self.dialect == "spark":
            # Spark reads 'a''b' as two adjacent literals ('ab'): backslash escapes.
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return literal(value)


def literal(value: object) -> str | None:
    """``value`` as a SQL literal both engines parse alike; ``None`` for a type without
    one (a float, bytes, a nested value)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, datetime.datetime):
        return None  # time zones make timestamp literals engine-specific
    if isinstance(value, datetime.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    return None
