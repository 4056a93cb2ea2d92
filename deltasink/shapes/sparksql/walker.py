"""The predicate walker: a parsed predicate, typed under Spark's rules and written out for
one engine with every conversion explicit, or refused (:class:`~.literals.Refusal`).

Logic, comparisons, ``IN``, ``BETWEEN``, ``LIKE``, arithmetic, ``CASE``/``if``/
``coalesce`` live here; functions and ``CAST`` in :mod:`.functions`. Each rule is
Spark's, written so that Spark, Sail and DataFusion compute the same thing:

* a comparison, ``IN`` list, ``CASE`` or ``coalesce`` converts its operands to the type
  Spark picks (:func:`~.types.common_type`) explicitly; ``IN`` is written as ``=``
  comparisons joined by ``OR`` (DataFusion and Sail find -0.0 outside ``IN (0.0)``,
  Spark inside), which means the same under SQL's three-valued logic;
* integer ``+ - *``, unary ``-`` and ``abs`` are computed exactly (as decimals) and
  converted back to Spark's result type, which fails on overflow as Spark does in ANSI
  mode (DataFusion and Sail would wrap around);
* ``/`` divides as doubles (Spark's rule for non-decimals), ``div`` as integers
  (truncating, like Java), ``%`` keeps the dividend's sign in all three.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot.expressions as exp

from .arithmetic import ARITHMETIC, Arithmetic
from .base import DELTA_RS, OVERFLOWS, UNKNOWN, Typed, reads_columns
from .base import EXACT as _EXACT
from .functions import Functions
from .literals import Refusal, convert, emit, integral_bounds, number
from .types import BOOLEAN, STRING, SqlType, common_type

__all__ = ["Walker"]

_COMPARISONS: dict[type, str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.NullSafeEQ: "IS NOT DISTINCT FROM",
    exp.NullSafeNEQ: "IS DISTINCT FROM",
}


class Walker(Arithmetic, Functions):
    """One walk: :meth:`predicate` types and writes out a whole predicate."""

    def predicate(self, tree: exp.Expr) -> str:
        """``tree`` written out for this walk's dialect; it must be a boolean."""
        part = self.walk(tree)
        if part.type.name not in ("boolean", "void", "unknown"):
            raise Refusal(
                f"a predicate of type {part.type}",
                "a predicate selects rows: it must be true, false or null",
                "write a condition, e.g. col = 'x'",
            )
        if not reads_columns(tree):
            self.refuse(
                "a predicate of constants only",
                "Sail and DataFusion fold it by rules of their own, and some fail while "
                "folding what Spark answers (a DECIMAL(38,10) compared with a round)",
                "leave the setting out (a constant selects every row or none), or compare a column",
            )
        return part.sql

    def walk(self, node: exp.Expr) -> Typed:
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node)  # type: ignore[no-any-return]
        return self.function(node)

    # -- names and literals ------------------------------------------------------------

    def column(self, node: exp.Column) -> Typed:
        table, name = node.table, node.name
        scope = self.scope
        if node.args.get("db") or node.args.get("catalog") or isinstance(node.this, exp.Star):
            self.refuse(
                f"the name {node.sql('spark')}", "it is not a column of the row", "name a column"
            )
        if table and (scope.qualifier == "never" or table.lower() != (scope.alias or "").lower()):
            expected = (
                "a plain column name" if scope.qualifier == "never" else f"{scope.alias}.<column>"
            )
            raise Refusal(
                f"the qualified name {node.sql('spark')}",
                "this predicate reads the columns of one row and does not take that "
                "qualifier (nor fields of nested columns)",
                f"write {expected}",
            )
        if not table and scope.qualifier == "required":
            raise Refusal(
                f"the unqualified column {name}",
                f"in the MERGE the batch's columns have the same names; Spark finds "
                f"{name} ambiguous there",
                f"qualify it with the target alias: {scope.alias}.{name}",
            )
        resolved, kind = name, UNKNOWN
        if self.columns is not None:
            assert self.by_lower is not None
            found = self.by_lower.get(name.lower())
            if found is None:
                raise KeyError(name)
            resolved, kind = found, self.columns[found]
            if kind.name == "other":
                raise Refusal(
                    f"the column {resolved} of a nested type",
                    "deltasink translates predicates over scalar columns only",
                    "compare a scalar column, or add one to the batch",
                )
        prefix = f"{scope.alias}." if scope.alias and scope.qualifier != "never" else ""
        return Typed(prefix + self.quote(resolved), kind)

    def literal(self, node: exp.Literal) -> Typed:
        if node.is_string:
            return Typed(emit(node.this, STRING, self.dialect), STRING, node.this)
        value, kind = number(node.this)
        return Typed(emit(value, kind, self.dialect), kind, value)

    def boolean(self, node: exp.Boolean) -> Typed:
        value = bool(node.this)
        return Typed(emit(value, BOOLEAN, self.dialect), BOOLEAN, value)

    def binary(self, node: exp.HexString) -> Typed:
        text = str(node.this)
        value = bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)
        kind = SqlType("binary")
        return Typed(emit(value, kind, self.dialect), kind, value)

    def null(self, node: exp.Null) -> Typed:
        return Typed("NULL", SqlType("void"), None)

    def paren(self, node: exp.Paren) -> Typed:
        inner = self.walk(node.this)
        return inner if inner.literal else Typed(f"({inner.sql})", inner.type)

    def neg(self, node: exp.Neg) -> Typed:
        inner = node.this
        if isinstance(inner, exp.Literal) and not inner.is_string:
            value, kind = number(inner.this, negative=True)  # Spark: -5 is one literal
            return Typed(emit(value, kind, self.dialect), kind, value)
        part = self.walk(inner)
        self.need_number(part, "unary -")
        if part.literal and part.value is not None:
            negated = convert(-part.value, part.type, part.type)  # type: ignore[operator]
            if part.type.integral:
                low, high = integral_bounds(part.type)
                if not low <= negated <= high:  # type: ignore[operator]
                    raise Refusal(f"-({part.value})", "it overflows", "write the literal")
            return Typed(emit(negated, part.type, self.dialect), part.type, negated)
        if part.type.integral:
            return self.exact(f"(- {self.cast(part, _EXACT).sql})", part.type, node)
        return Typed(f"(- {part.sql})", part.type)

    # -- logic -------------------------------------------------------------------------

    def logic(self, node: exp.Connector) -> Typed:
        op = "AND" if isinstance(node, exp.And) else "OR"
        left = self.walk(node.this)
        # Spark evaluates the right side only when the left does not decide
        with self.skipping(f"{left.sql} IS {'FALSE' if op == 'AND' else 'TRUE'}"):
            right = self.walk(node.expression)
        for part in (left, right):
            self.need_boolean(part, op)
        return Typed(f"({left.sql} {op} {right.sql})", BOOLEAN)

    def not_(self, node: exp.Not) -> Typed:
        part = self.walk(node.this)
        self.need_boolean(part, "NOT")
        return Typed(f"(NOT {part.sql})", BOOLEAN)

    # -- comparisons -------------------------------------------------------------------

    def unify(self, parts: list[Typed], where: str) -> list[Typed]:
        """``parts`` converted to the one type Spark compares them in. A string literal
        meeting a value of another type is converted by value, as Spark converts it (a
        date, an instant with its zone, a number, a boolean); strings that are not
        literals convert to nothing else."""
        if any(p.type.name == "unknown" for p in parts):
            return parts
        anchors = [p.type for p in parts if not (p.literal and p.type.name == "string")]
        target: SqlType | None = SqlType("void")
        for kind in anchors:
            assert target is not None
            target = common_type(target, kind, ansi=self.ansi)
            if target is None:
                break
        if target is not None and target.name == "void" and len(anchors) < len(parts):
            target = STRING  # only string literals (and nulls)
        if target is not None and target.name == "double":
            wide = [k for k in anchors if k.name == "decimal" and k.precision > 15]
            if wide:
                target = None  # a decimal of over 15 digits need not be one double
        converting = target is not None and target.name != "string" and len(anchors) < len(parts)
        if converting and target is not None and not self.ansi:
            self.legacy_strings(parts, target, where)
        if converting and target is not None and not self.converts(target):
            target = None
        if target is None:
            kinds = sorted({str(p.type) for p in parts})
            raise Refusal(
                f"{where} between {' and '.join(kinds)}",
                "Spark converts one side implicitly, by rules that depend on ANSI mode "
                "or the session's time zone (or, for wide decimals and doubles, on digits "
                "one side cannot hold)",
                "compare values of one type: a literal of the column's type "
                "(DATE '2024-01-31', 3, 'text') or an explicit CAST",
            )
        return [self.cast(p, target) for p in parts]

    @staticmethod
    def legacy_strings(parts: list[Typed], target: SqlType, where: str) -> None:
        """With ANSI mode off Spark converts a string literal beside a number by other
        rules, and meets a date in ``IN``, ``CASE``, ``if``, ``coalesce`` as strings:
        refused, but in ``IN`` a date spelled as Spark writes one (the same rows)."""
        texts = [p.value for p in parts if p.literal and p.type.name == "string"]
        spelled = all(isinstance(t, str) and _ISO_DATE.fullmatch(t) for t in texts)
        if target.name in _DATES and where not in ("IN", "CASE", "if", "coalesce"):
            return
        if target.name == "date" and where == "IN" and spelled:
            return
        raise Refusal(
            f"{where} between a string literal and a {target} with ANSI mode off",
            "without ANSI mode Spark converts the two sides by other rules (a string "
            "that does not convert is null, a number's text is truncated; beside a "
            "date in a list, the date's text is compared)",
            f"write a literal of the {target} type (3, not '3'; DATE '2024-01-05')",
        )

    @staticmethod
    def converts(kind: SqlType) -> bool:
        """Types a string literal is converted to by value (checked in Python)."""
        return kind.name in ("date", "timestamp", "timestamp_ntz", "boolean", "void") or (
            kind.integral or kind.fractional
        )

    def comparison(self, node: exp.Binary) -> Typed:
        op = _COMPARISONS[type(node)]
        self.no_chain(node)
        null_safe = isinstance(node, (exp.NullSafeEQ, exp.NullSafeNEQ))
        left, right = self.unify(list(self.operands(node, null_safe=null_safe)), op)
        # = with a literal: DataFusion may join several into an IN list (nan_safe)
        listed = op in ("=", "<>") and (left.literal or right.literal)
        left, right = self.nan_safe(left, zero=listed), self.nan_safe(right, zero=listed)
        if {left.type.name, right.type.name} & {"binary"} and op not in ("=", "<>"):
            self.refuse(
                f"{op} between binary values",
                "deltasink compares binary values for equality only",
                "compare with = or <>",
                on=DELTA_RS,
            )
        return Typed(f"({left.sql} {op} {right.sql})", BOOLEAN)

    def no_chain(self, node: exp.Expr) -> None:
        """Spark's grammar takes one predicate (``IS``, ``LIKE``, ``IN``, ``BETWEEN``)
        after a value and nothing after it: ``x LIKE 'a%' IS NULL`` does not parse in
        Spark (sqlglot reads it); refused rather than given a meaning."""
        operands = [node.this] + ([node.expression] if isinstance(node, exp.Binary) else [])
        for operand in operands:
            inner = operand.this if isinstance(operand, exp.Not) else operand
            if isinstance(inner, _PREDICATES):
                raise Refusal(
                    f"{operand.sql('spark')} used as a value of {node.key.upper()}",
                    "Spark's grammar does not parse a predicate (IS, LIKE, IN, BETWEEN) "
                    "as the operand of another one",
                    "put the inner predicate in parentheses",
                )

    def is_(self, node: exp.Is) -> Typed:
        self.no_chain(node)
        part = self.walk(node.this)
        other = node.expression
        if isinstance(other, exp.Null):
            return Typed(f"({part.sql} IS NULL)", BOOLEAN)
        if isinstance(other, exp.Boolean):
            self.need_boolean(part, "IS TRUE / IS FALSE")
            return Typed(f"({part.sql} IS {'TRUE' if other.this else 'FALSE'})", BOOLEAN)
        raise Refusal(f"IS {other.sql('spark')}", "not a null or truth test", "write IS NULL")

    def in_(self, node: exp.In) -> Typed:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise Refusal("IN over a query", "a predicate reads one row", "list the values")
        self.no_chain(node)
        value = self.walk(node.this)
        items = [self.walk(i) for i in node.expressions]
        unified = self.unify([value, *items], "IN")
        terms: list[str] = []
        for item, first in zip(node.expressions, unified[1:], strict=True):
            part = first
            if terms and OVERFLOWS in first.sql:  # Spark stops at the first match
                with self.skipping(" OR ".join(f"coalesce({t}, FALSE)" for t in terms)):
                    part = self.cast(self.walk(item), first.type)
            left, right = self.nan_safe(unified[0], zero=True), self.nan_safe(part, zero=True)
            terms.append(f"({left.sql} = {right.sql})")
        return Typed("(" + " OR ".join(terms) + ")", BOOLEAN)

    def between(self, node: exp.Between) -> Typed:
        if node.args.get("symmetric"):
            raise Refusal("BETWEEN SYMMETRIC", "not Spark SQL", "write two comparisons")
        self.no_chain(node)
        value = self.walk(node.this)
        low = self.walk(node.args["low"])
        a, b = (self.nan_safe(p) for p in self.unify([value, low], "BETWEEN"))
        lower = f"({a.sql} >= {b.sql})"
        with self.skipping(f"{lower} IS FALSE"):  # Spark: lower AND upper
            high = self.walk(node.args["high"])
        c, d = (self.nan_safe(p) for p in self.unify([value, high], "BETWEEN"))
        return Typed(f"({lower} AND ({c.sql} <= {d.sql}))", BOOLEAN)

    # -- conditionals ------------------------------------------------------------------

    def case(self, node: exp.Case) -> Typed:
        subject = node.this
        tests: list[Typed] = []
        values: list[Typed] = []
        for branch in node.args.get("ifs") or []:
            taken = [f"coalesce({t.sql}, FALSE)" for t in tests]
            with self.skipping(" OR ".join(taken)):  # an earlier WHEN held
                if subject is not None:
                    test = self.comparison(
                        exp.EQ(this=subject.copy(), expression=branch.this.copy())
                    )
                else:
                    test = self.walk(branch.this)
                    self.need_boolean(test, "CASE WHEN")
                    if test.type.name == "void":
                        raise Refusal(
                            "CASE WHEN NULL",
                            "Spark refuses a NULL condition there",
                            "write a condition",
                        )
            with (
                self.skipping(f"NOT coalesce({test.sql}, FALSE)"),
                self.skipping(" OR ".join(taken)),
            ):
                values.append(self.walk(branch.args["true"]))
            tests.append(test)
        default = node.args.get("default")
        if default is not None:
            with self.skipping(" OR ".join(f"coalesce({t.sql}, FALSE)" for t in tests)):
                values.append(self.walk(default))
        values = self.unify(values, "CASE")
        text = " ".join(f"WHEN {t.sql} THEN {v.sql}" for t, v in zip(tests, values, strict=False))
        if default is not None:
            text += f" ELSE {values[-1].sql}"
        kind = next((v.type for v in values if v.type.name != "void"), values[0].type)
        return Typed(f"(CASE {text} END)", kind)

    def if_(self, node: exp.If) -> Typed:
        test = self.walk(node.this)
        self.need_boolean(test, "if")
        with self.skipping(f"NOT coalesce({test.sql}, FALSE)"):
            yes = self.walk(node.args["true"])
        with self.skipping(f"coalesce({test.sql}, FALSE)"):
            no = self.walk(node.args["false"])
        values = self.unify([yes, no], "if")
        kind = next((v.type for v in values if v.type.name != "void"), values[0].type)
        return Typed(f"(CASE WHEN {test.sql} THEN {values[0].sql} ELSE {values[1].sql} END)", kind)

    def coalesce(self, node: exp.Coalesce) -> Typed:
        walked: list[Typed] = []
        for arg in [node.this, *node.expressions]:  # Spark stops at the first non-null
            earlier = " OR ".join(f"({p.sql} IS NOT NULL)" for p in walked)
            with self.skipping(earlier):
                walked.append(self.walk(arg))
        parts = self.unify(walked, "coalesce")
        kind = next((v.type for v in parts if v.type.name != "void"), parts[0].type)
        return Typed("coalesce(" + ", ".join(p.sql for p in parts) + ")", kind)


_DATES = ("date", "timestamp", "timestamp_ntz", "void")
_ISO_DATE = re.compile(r"(?!0000)[0-9]{4}-[0-9]{2}-[0-9]{2}")
_PREDICATES = (exp.Is, exp.Like, exp.ILike, exp.RegexpLike, exp.In, exp.Between, exp.Escape)

_HANDLERS: dict[type, Any] = {
    exp.Column: Walker.column,
    exp.Literal: Walker.literal,
    exp.Boolean: Walker.boolean,
    exp.Null: Walker.null,
    exp.HexString: Walker.binary,
    exp.Paren: Walker.paren,
    exp.Neg: Walker.neg,
    exp.And: Walker.logic,
    exp.Or: Walker.logic,
    exp.Not: Walker.not_,
    **dict.fromkeys(_COMPARISONS, Walker.comparison),
    exp.Is: Walker.is_,
    exp.In: Walker.in_,
    exp.Between: Walker.between,
    **dict.fromkeys(ARITHMETIC, Walker.arithmetic),
    exp.Div: Walker.divide,
    exp.Mod: Walker.modulo,
    exp.IntDiv: Walker.int_divide,
    exp.Case: Walker.case,
    exp.If: Walker.if_,
    exp.Coalesce: Walker.coalesce,
}
