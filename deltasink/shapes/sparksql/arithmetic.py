"""Arithmetic in a predicate (part of :class:`~.walker.Walker`): Spark's result types,
integers computed exactly and narrowed back with an overflow check, ``/`` as doubles,
``div`` as integers, ``%`` with the dividend's sign; a divisor must be a non-zero
literal for delta-rs (Spark fails on zero in ANSI mode; DataFusion returns infinity)."""

from __future__ import annotations

import sqlglot.expressions as exp

from .base import DELTA_RS, UNKNOWN, Base, Typed
from .base import EXACT as _EXACT
from .literals import Refusal, emit
from .types import BOOLEAN, DOUBLE, STRING, SqlType, arithmetic_type

__all__ = ["ARITHMETIC", "Arithmetic"]

ARITHMETIC: dict[type, str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*"}


class Arithmetic(Base):
    """Arithmetic rules of the walker."""

    # -- arithmetic --------------------------------------------------------------------

    def arithmetic(self, node: exp.Binary) -> Typed:
        op = ARITHMETIC[type(node)]
        left, right = self.operands(node)
        for part in (left, right):
            self.need_number(part, op)
        if UNKNOWN in (left.type, right.type):
            return Typed(f"({left.sql} {op} {right.sql})", UNKNOWN)
        kind = arithmetic_type(op, self.numeric(left), self.numeric(right))
        if kind is None:
            raise Refusal(
                f"{op} of {left.type} and {right.type}",
                "its decimal result would be wider than 38 digits, where Spark rounds",
                "CAST the operands to narrower decimals",
            )
        if kind.integral:
            a, b = self.cast(left, _EXACT), self.cast(right, _EXACT)
            return self.exact(f"({a.sql} {op} {b.sql})", kind, node)
        if kind.name == "decimal":
            a, b = (
                self.cast(left, left.type.as_decimal()),
                self.cast(right, right.type.as_decimal()),
            )
            return Typed(self.cast_sql(f"({a.sql} {op} {b.sql})", kind, kind), kind)
        a, b = self.cast(left, kind), self.cast(right, kind)
        return Typed(f"({a.sql} {op} {b.sql})", kind)

    @staticmethod
    def numeric(part: Typed) -> SqlType:
        return SqlType("int") if part.type.name == "void" else part.type

    def divisor(self, part: Typed, op: str, *, minus_one: bool) -> None:
        """``op``'s divisor must be a non-zero number literal on delta-rs: Spark fails
        on a zero divisor in ANSI mode, DataFusion gives infinity or fails."""
        value = part.value
        if part.literal and value is not None and value != 0 and (minus_one or value != -1):
            return
        if part.type.name == "unknown" and not part.literal:
            pass
        self.refuse(
            f"{op} by {'a column or expression' if not part.literal else part.value}",
            "Spark fails on a zero divisor (ANSI mode) where DataFusion returns infinity "
            "or null; deltasink divides only by a non-zero number literal"
            + ("" if minus_one else " other than -1 (the smallest integer overflows)"),
            f"divide by a literal (x {op} 2), or multiply the other side (x > 2 * y, for "
            "positive y)",
            on=DELTA_RS,
        )

    def divide(self, node: exp.Div) -> Typed:
        left, right = self.operands(node)
        for part in (left, right):
            self.need_number(part, "/")
        if "decimal" in (left.type.name, right.type.name):
            raise Refusal(
                "/ of a decimal",
                "Spark's decimal division rounds to a scale of its own; the other engines "
                "round differently",
                "CAST the operands to DOUBLE, or compare a product (x > 2.5 * y)",
            )
        a, b = self.cast(left, DOUBLE), self.cast(right, DOUBLE)
        if right.literal:
            self.divisor(right, "/", minus_one=True)
        if right.literal or UNKNOWN in (left.type, right.type):
            return Typed(f"({a.sql} / {b.sql})", DOUBLE)
        return Typed(self.guarded(a.sql, b.sql), DOUBLE)

    def guarded(self, a: str, b: str) -> str:
        """``a / b`` of doubles with Spark's zero divisor: Spark fails (ANSI mode; 0.0
        and -0.0 alike) where it evaluates the division, DataFusion would give infinity
        or NaN, Sail fails also where Spark does not evaluate it (the right side of an
        AND whose left is false; seed 1116029113). The
        failure is a text that does not convert, built from ``b`` (a constant one is
        folded, and fails, even where not evaluated); where Spark does not evaluate
        this part, null (:meth:`~.base.Base.narrow`)."""
        text = self.cast_sql(b, DOUBLE, STRING)
        fails = self.cast_sql(f"({text} || ' divides by zero')", STRING, DOUBLE)
        skip = " OR ".join(f"({s})" for s in self.skips if s)
        if skip:
            fails = f"(CASE WHEN {skip} THEN CAST(NULL AS DOUBLE) ELSE {fails} END)"
        # Spark: a null dividend is null before the divisor is looked at
        zero = f"{b} = CAST('0.0' AS DOUBLE) AND {a} IS NOT NULL"
        return f"(CASE WHEN {zero} THEN {fails} ELSE ({a} / {b}) END)"

    def modulo(self, node: exp.Mod) -> Typed:
        left, right = self.operands(node)
        for part in (left, right):
            self.need_number(part, "%")
        if "decimal" in (left.type.name, right.type.name):
            raise Refusal("% of a decimal", "deltasink does not translate it", "CAST to an integer")
        self.divisor(right, "%", minus_one=False)
        if UNKNOWN in (left.type, right.type):
            return Typed(f"({left.sql} % {right.sql})", UNKNOWN)
        kind = arithmetic_type("%", self.numeric(left), self.numeric(right))
        assert kind is not None
        a, b = self.cast(left, kind), self.cast(right, kind)
        return Typed(f"({a.sql} % {b.sql})", kind)

    def int_divide(self, node: exp.IntDiv) -> Typed:
        left, right = self.operands(node)
        for part in (left, right):
            if part.type.name not in ("unknown", "void") and not part.type.integral:
                raise Refusal(
                    f"div of a {part.type}",
                    "deltasink takes div over integers only",
                    "CAST the operands to BIGINT",
                )
        self.divisor(right, "div", minus_one=False)
        bigint = SqlType("bigint")
        a, b = self.cast(left, bigint), self.cast(right, bigint)
        if self.dialect == "spark":
            return Typed(f"({a.sql} div {b.sql})", bigint)
        return Typed(f"({a.sql} / {b.sql})", bigint)

    def abs_(self, node: exp.Abs) -> Typed:
        part = self.walk(node.this)
        self.need_number(part, "abs")
        if part.type.integral:
            exact = self.cast(part, SqlType("decimal", 20, 0))
            return self.exact(f"abs({exact.sql})", part.type, node)
        return Typed(f"abs({part.sql})", part.type)

    def isnan(self, node: exp.IsNan) -> Typed:
        part = self.walk(node.this)
        if part.type.integral or part.type.name == "decimal":
            # Spark converts it to a double, never NaN: false, also for null
            return Typed(f"({part.sql} IS NULL AND {part.sql} IS NOT NULL)", BOOLEAN)
        if part.type.name not in ("float", "double", "unknown", "void"):
            raise Refusal(
                f"isnan of a {part.type}", "Spark takes a double", "write isnan(x) of a double"
            )
        # Spark: isnan(null) is false; Sail and DataFusion: null
        return Typed(f"coalesce(isnan({part.sql}), FALSE)", BOOLEAN)

    def round_double(self, part: Typed, places: int) -> Typed:
        """``round`` of a double: Spark rounds its shortest decimal text (Java's
        ``Double.toString``) half up, where Sail and DataFusion round its binary value
        (``round(1.005, 2)``: 1.01 in Spark, 1.0 there). Written out: that text as a
        decimal, rounded; a value of 2**52 or more is an integer already, one below
        half a unit of the last place is 0.0, NaN and the infinities stay."""
        if part.type.name == "float" or places > 4:
            raise Refusal(
                f"round of a {part.type} to {places} places" if places > 4 else "round of a float",
                "deltasink rounds a double's decimal text to at most 4 places",
                "round a double to 0 to 4 places, or CAST a float to DOUBLE first",
            )
        if part.literal and isinstance(part.value, float):
            return self.cast(part, part.type)._replace(
                sql=emit(_round_text(part.value, places), part.type, self.dialect),
                value=_round_text(part.value, places),
            )
        x = part.sql
        double = SqlType("double")
        whole = emit(float(2**52), double, self.dialect)
        tiny = emit(float(f"5e-{places + 1}"), double, self.dialect)
        zero = emit(0.0, double, self.dialect)
        wide = SqlType("decimal", 38, 22)
        # only a value in range is written as text: the engines fold a constant's
        # branch even where it is not taken (round(1e300, 1), seed 1116029113)
        outside = f"isnan({x}) OR abs({x}) >= {whole} OR abs({x}) < {tiny}"
        inside = f"(CASE WHEN {outside} THEN {zero} ELSE {x} END)"
        text = self.cast_sql(self.cast_sql(inside, double, STRING), STRING, wide)
        rounded = self.cast_sql(f"round({text}, {places})", wide, double)
        return Typed(
            f"(CASE WHEN isnan({x}) OR abs({x}) >= {whole} THEN {x} "
            f"WHEN abs({x}) < {tiny} THEN {zero} ELSE {rounded} END)",
            double,
        )


def _round_text(value: float, places: int) -> float:
    """Spark's ``round`` of a double literal: its shortest text rounded half up."""
    import math
    from decimal import ROUND_HALF_UP, Decimal

    if math.isnan(value) or abs(value) >= 2.0**52:  # an integer already (or inf)
        return value
    step = Decimal(1).scaleb(-places)
    return float(Decimal(repr(value)).quantize(step, rounding=ROUND_HALF_UP)) + 0.0
