"""Spark SQL predicates given to other engines with Spark's meaning: the types
(:mod:`.types`), literals (:mod:`.literals`) and the walker that writes a parsed
predicate out for Spark/Sail or DataFusion, or refuses it (:mod:`.walker`)."""

from __future__ import annotations

from collections.abc import Mapping

import sqlglot.expressions as exp

from .base import DELTA_RS, EVERY, SAIL, Evaluator, Scope
from .literals import Dialect, Refusal
from .types import SqlType, of_arrow
from .walker import Walker

__all__ = [
    "DELTA_RS",
    "EVERY",
    "SAIL",
    "Dialect",
    "Evaluator",
    "Refusal",
    "Scope",
    "SqlType",
    "of_arrow",
    "write",
]


def write(
    tree: exp.Expr,
    *,
    columns: Mapping[str, SqlType] | None,
    dialect: Dialect,
    evaluators: frozenset[Evaluator],
    scope: Scope,
    zone: str | None = None,
    ansi: bool = True,
) -> tuple[str, bool]:
    """``tree`` written out for ``dialect`` with Spark's meaning.

    Args:
        tree: The parsed predicate.
        columns: The columns it may name and their Spark types; ``None`` when not known
            yet (only the rules that need no types are applied).
        dialect: ``"spark"`` (Spark and Sail) or ``"datafusion"`` (delta-rs).
        evaluators: The engines the field reaches; rules for others are not applied.
        scope: How it names columns.
        zone: The recorded session time zone (a zone-less timestamp literal, ``year``
            of a timestamp...); ``None``: those are refused.
        ansi: Spark's ANSI mode the predicate means (``spark.sql.ansi.enabled``).

    Returns:
        The text, and whether it read ``zone``.

    Raises:
        Refusal: A construct deltasink does not give these evaluators.
        KeyError: A column that is not in ``columns`` (its name).
    """
    walker = Walker(
        columns=columns, dialect=dialect, evaluators=evaluators, scope=scope, zone=zone, ansi=ansi
    )
    return walker.predicate(tree), walker.zone_read
