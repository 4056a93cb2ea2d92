"""The SQL a user writes, parsed before any of it reaches an engine.

Every SQL fragment of the configuration is parsed by a real SQL parser (sqlglot, its
``spark`` dialect: what users write for Spark) when the configuration is built, and
refused by name (:class:`~deltasink.errors.ConfigurationError`) unless it is exactly
what its place needs:

* a *predicate* (``MergeSpec.delete_when``, ``replace_where``, ``target_predicate``,
  ``not_matched_by_source_condition``, ``checks.expect``) is exactly one row-level
  boolean expression: no second expression or statement (``;``), no unbalanced
  parenthesis, no subquery, aggregate, window or parameter placeholder, and not a
  value of another known type (``1 + 1``, ``'x'``, ``upper(a)``). A bare column or a
  function whose type the parser cannot tell is left to the engine to type.
* a *query* (``checks.sql``) is exactly one ``SELECT`` (``WITH``/``UNION`` included).

Nothing the user wrote is spliced into SQL text. Spark itself gets the parsed
expression re-emitted (:func:`render`, sqlglot's ``spark`` output, comments dropped);
the other engines (the embedded engine's Sail and delta-rs, whose DataFusion parser
reads one expression and silently ignores whatever follows it) get the parse
translated with Spark's meaning, or refused (:mod:`deltasink.shapes.sparksql`).
A predicate must also be Spark's grammar where sqlglot's is wider
(:mod:`deltasink.shapes.sparksql.chains`).

Parses are cached per text, so the cost is paid once per process.
"""

from __future__ import annotations

import functools
from typing import Literal

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import SqlglotError

from deltasink.errors import ConfigurationError

from .sparksql.chains import chained

__all__ = ["Dialect", "parse_predicate", "parse_query", "render", "render_query"]

#: Who reads a predicate: Spark SQL (Spark, and Sail: translated), or delta-rs
#: (DataFusion's parser: translated).
Dialect = Literal["spark", "delta-rs"]


_FORBIDDEN: tuple[tuple[type, str], ...] = (
    (exp.Query, "a subquery"),
    (exp.Subquery, "a subquery"),
    (exp.AggFunc, "an aggregate function"),
    (exp.Window, "a window function"),
    (exp.Placeholder, "a parameter placeholder"),
    (exp.Parameter, "a parameter"),
)

#: Types a predicate may have: boolean, or unknown to the parser (a bare column, a
#: function it does not type), which the engine checks.
_BOOLEAN_TYPES = ("BOOLEAN", "UNKNOWN")


def _parse(text: object, what: str) -> exp.Expr:
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"{what} must be a non-empty SQL string, got {text!r}.")
    try:
        parsed = sqlglot.parse(text, read="spark")
    except SqlglotError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigurationError(
            f"{what} {text!r} does not parse as Spark SQL ({first}); check its "
            "parentheses and quotes."
        ) from None
    found = [p for p in parsed if p is not None]
    if len(found) != 1:
        raise ConfigurationError(
            f"{what} {text!r} holds {len(found)} SQL statements (split by ';'); it must "
            "be exactly one."
        )
    return found[0]


@functools.lru_cache(maxsize=256)
def parse_predicate(text: str, what: str) -> exp.Expr:
    """``text`` parsed as exactly one row-level boolean expression.

    Args:
        text: The predicate, in Spark SQL.
        what: Where it comes from, for the message (e.g. ``"MergeSpec.delete_when"``).

    Returns:
        The parsed expression (shared: do not modify it).

    Raises:
        ConfigurationError: It does not parse, is not exactly one expression, holds a
            subquery, aggregate, window or placeholder, or is typed as a non-boolean.
    """
    tree = _parse(text, what)
    if not isinstance(tree, exp.Condition):
        raise ConfigurationError(
            f"{what} {text!r} is not one boolean expression (it parses as "
            f"{_kind(tree)}); write a condition such as \"op = 'D'\"."
        )
    for node in tree.walk():
        for kind, name in _FORBIDDEN:
            if isinstance(node, kind):
                raise ConfigurationError(
                    f"{what} {text!r} contains {name} ({node.sql(dialect='spark')}); a "
                    "predicate is evaluated on one row at a time and may name only that "
                    "row's columns."
                )
    following = chained(text)
    if following:
        raise ConfigurationError(
            f"{what} {text!r} puts {following} right after another predicate; Spark's grammar "
            "does not parse that (x LIKE 'a%' IS NULL): put the inner predicate in "
            "parentheses."
        )
    typed = _type_of(tree)
    if typed is not None and typed not in _BOOLEAN_TYPES:
        raise ConfigurationError(
            f"{what} {text!r} is not a boolean expression (its type is {typed}); "
            "write a condition such as \"op = 'D'\"."
        )
    return tree


def _kind(tree: exp.Expr) -> str:
    if isinstance(tree, exp.Alias):
        return "an expression with an alias: two expressions side by side"
    if isinstance(tree, exp.Query):
        return "a query"
    return f"a {type(tree).__name__} statement"


def _type_of(tree: exp.Expr) -> str | None:
    """The type sqlglot infers for ``tree`` without a schema (``None``: it cannot)."""
    from sqlglot.optimizer.annotate_types import annotate_types

    try:
        typed = annotate_types(tree.copy(), dialect="spark").type
    except Exception:  # the annotator is a best effort: the engine types it anyway
        return None
    return None if typed is None else str(typed.this.value)


@functools.lru_cache(maxsize=512)
def render(text: str, dialect: Literal["spark"] = "spark", what: str = "predicate") -> str:
    """The predicate ``text`` re-emitted from its parse for Spark itself (comments
    dropped): what the ``spark`` engine evaluates. The other engines get it translated
    (:func:`deltasink.shapes.sparksql.fields.translate`).

    Raises:
        ConfigurationError: As :func:`parse_predicate`.
    """
    if dialect != "spark":
        raise ValueError("only Spark reads a predicate re-emitted as written")
    tree = parse_predicate(text, what)
    return tree.sql(dialect="spark", comments=False)


@functools.lru_cache(maxsize=256)
def parse_query(text: str, what: str) -> exp.Query:
    """``text`` parsed as exactly one query (``SELECT``, ``WITH``, ``UNION``...).

    Raises:
        ConfigurationError: It does not parse, is not exactly one statement, is not a
            query, or defines its own ``staged`` (the name deltasink binds).
    """
    tree = _parse(text, what)
    if not isinstance(tree, exp.Query):
        raise ConfigurationError(
            f"{what} {text!r} is not a query ({_kind(tree)}); write one SELECT over `staged`."
        )
    for cte in tree.find_all(exp.CTE):
        if cte.alias_or_name.lower() == "staged":
            raise ConfigurationError(
                f"{what} {text!r} defines its own `staged`; that name is the staged "
                "batch: rename the CTE."
            )
    return tree


def render_query(text: str, view: str, what: str = "checks.sql") -> str:
    """The query ``text`` re-emitted as Spark SQL, its table ``staged`` read from
    ``view`` (still aliased ``staged``, so ``staged.col`` resolves).

    Raises:
        ConfigurationError: As :func:`parse_query`.
    """
    tree = parse_query(text, what).copy()
    for table in tree.find_all(exp.Table):
        if table.name.lower() == "staged" and not table.db and not table.catalog:
            table.set("this", exp.to_identifier(view))
            if not table.alias:
                table.set("alias", exp.TableAlias(this=exp.to_identifier("staged")))
    return tree.sql(dialect="spark", comments=False)
