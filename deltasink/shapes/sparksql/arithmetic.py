"""Arithmetic in a predicate (part of :class:`~.walker.Walker`): Spark's result types,
integers computed exactly and narrowed back with an overflow check, ``/`` as doubles,
``div`` as integers, ``%`` with the dividend's sign; a divisor must be a non-zero
literal for delta-rs (Spark fails on zero in ANSI mode; DataFusion returns infinity)."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

import sqlglot.expressions as exp

from .base import DELTA_RS, UNKNOWN, Base, Typed
from .base import EXACT as _EXACT
from .literals import Refusal, emit
from .types import BOOLEAN, DOUBLE, INT, STRING, SqlType, arithmetic_type

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
        kind = arithmetic_type(op, self.numeric(left), self.numeric(right), ansi=self.ansi)
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
        if not self.ansi:  # Spark without ANSI mode: null
            return f"(CASE WHEN {b} = {emit(0.0, DOUBLE, self.dialect)} THEN {emit(None, DOUBLE, self.dialect)} ELSE ({a} / {b}) END)"
        text = self.cast_sql(b, DOUBLE, STRING)
        fails = self.cast_sql(f"({text} || ' divides by zero')", STRING, DOUBLE)
        skip = " OR ".join(f"({s})" for s in self.skips if s)
        if skip:
            fails = f"(CASE WHEN {skip} THEN CAST(NULL AS DOUBLE) ELSE {fails} END)"
        # Spark: a null dividend is null before the divisor is looked at; Sail fails on
        # a zero divisor even beside a null dividend, so a zero one never reaches the
        # division (seed 250658533: try_cast(zone AS INT) / price)
        zero = f"{b} = CAST('0.0' AS DOUBLE)"
        return (
            f"(CASE WHEN {zero} THEN (CASE WHEN {a} IS NOT NULL THEN {fails} END) "
            f"ELSE ({a} / {b}) END)"
        )

    def modulo(self, node: exp.Mod) -> Typed:
        left, right = self.operands(node)
        for part in (left, right):
            self.need_number(part, "%")
        if "decimal" in (left.type.name, right.type.name):
            raise Refusal("% of a decimal", "deltasink does not translate it", "CAST to an integer")
        self.divisor(right, "%", minus_one=False)
        if UNKNOWN in (left.type, right.type):
            return Typed(f"({left.sql} % {right.sql})", UNKNOWN)
        kind = arithmetic_type("%", self.numeric(left), self.numeric(right), ansi=self.ansi)
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

    def bround(self, node: exp.Anonymous) -> Typed:
        """``bround(x, d)``: ``round`` with ties to the even neighbour (HALF_EVEN)."""
        args = node.expressions
        if not 1 <= len(args) <= 2:
            raise Refusal(
                "bround with other arguments", "Spark takes bround(x[, d])", "bround(x, 2)"
            )
        return self.rounded(args[0], args[1] if len(args) > 1 else None, even=True)

    def rounded(self, value: exp.Expr, digits: exp.Expr | None, *, even: bool) -> Typed:
        """``round`` (half up) or ``bround`` (``even``: half even) of ``value`` to the
        literal number of places ``digits`` (0 when ``None``)."""
        name = "bround" if even else "round"
        part = self.walk(value)
        places = self.walk(digits) if digits is not None else Typed("0", INT, 0)
        if not (places.literal and isinstance(places.value, int)) or places.value < 0:
            raise Refusal(
                f"{name} with digits that are not a literal integer >= 0",
                "deltasink rounds to a literal number of decimal places",
                f"write {name}(x, 2)",
            )
        kind = part.type
        if kind.fractional:
            return self.round_double(part, places.value, even=even)
        self.need_number(part, name)
        if kind.name == "void" and even:  # Spark: a null double
            return Typed(emit(None, SqlType("double"), self.dialect), SqlType("double"))
        if kind.integral or kind.name in ("unknown", "void"):
            return part if kind.integral else Typed(f"{name}({part.sql}, {places.value})", kind)
        scale = min(kind.scale, places.value)
        result = SqlType("decimal", min(38, kind.precision - kind.scale + scale + 1), scale)
        if not even:
            return Typed(self.cast_sql(f"round({part.sql}, {places.value})", kind, result), result)
        if part.literal and part.value is not None:
            exact = Decimal(part.value).quantize(  # type: ignore[arg-type]
                Decimal(1).scaleb(-scale), rounding=ROUND_HALF_EVEN
            )
            return Typed(emit(exact, result, self.dialect), result, exact)
        if places.value >= kind.scale:
            return Typed(self.cast_sql(part.sql, kind, result), result)
        sql, exact_type = self.half_even(part.sql, kind, places.value)
        return Typed(self.cast_sql(sql, exact_type, result), result)

    def legacy_decimal(self, sql: str, source: SqlType, target: SqlType) -> str:
        """``CAST(sql AS target)`` of an integer or decimal with ANSI mode off: null
        where the value, rounded half up to the target's scale, does not fit."""
        whole = target.precision - target.scale
        exact = source.as_decimal()
        grows = exact.scale > target.scale  # rounding may add a digit (9.96 -> 10.0)
        if exact.precision - exact.scale + int(grows) <= whole:
            return self.cast_sql(sql, source, target)  # it always fits
        if exact.precision - exact.scale + target.scale > 37:
            raise Refusal(
                f"CAST of a {source} AS {target} with ANSI mode off",
                "deltasink checks the range of such a conversion in 38 digits",
                "CAST to a decimal with fewer digits after the point",
            )
        wide = SqlType("decimal", 38, max(exact.scale, target.scale))
        value = self.cast_sql(sql, source, wide)
        rounded = f"round({value}, {target.scale})" if grows else value
        bound = emit(Decimal(10) ** whole, SqlType("decimal", 38, wide.scale), self.dialect)
        fits = f"abs({self.cast_sql(rounded, wide, wide)}) < {bound}"
        zero = emit(Decimal(0) if source.name == "decimal" else 0, source, self.dialect)
        safe = f"(CASE WHEN {fits} THEN {sql} ELSE {zero} END)"
        return f"(CASE WHEN {fits} THEN {self.cast_sql(safe, source, target)} END)"

    def round_double(self, part: Typed, places: int, *, even: bool = False) -> Typed:
        """``round`` (``bround``: ``even``) of a double: Spark rounds its shortest
        decimal text (Java's ``Double.toString``) half up (half even), where Sail and
        DataFusion round its binary value (``round(1.005, 2)``: 1.01 in Spark, 1.0
        there; DataFusion has no ``bround``). Written out: that text as a decimal,
        rounded (:meth:`half_even`); a value of 2**52 or more is an integer already, one
        below half a unit of the last place is 0.0, NaN and the infinities stay."""
        name = "bround" if even else "round"
        if part.type.name == "float" or places > 4:
            raise Refusal(
                f"{name} of a {part.type} to {places} places"
                if places > 4
                else f"{name} of a float",
                "deltasink rounds a double's decimal text to at most 4 places",
                f"{name} a double to 0 to 4 places, or CAST a float to DOUBLE first",
            )
        if part.literal and isinstance(part.value, float):
            value = _round_text(part.value, places, even=even)
            return self.cast(part, part.type)._replace(
                sql=emit(value, part.type, self.dialect), value=value
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
        exact, kind = (
            self.half_even(text, wide, places) if even else (f"round({text}, {places})", wide)
        )
        # back to a double through its text, which every engine parses to the nearest
        # double; DataFusion divides the unscaled integer, off by one bit beyond 2**53
        # (bround(1.0000000000000005E15, 4); seed 4401)
        rounded = self.cast_sql(self.cast_sql(exact, kind, STRING), STRING, double)
        return Typed(
            f"(CASE WHEN isnan({x}) OR abs({x}) >= {whole} THEN {x} "
            f"WHEN abs({x}) < {tiny} THEN {zero} ELSE {rounded} END)",
            double,
        )

    def half_even(self, value: str, kind: SqlType, places: int) -> tuple[str, SqlType]:
        """The decimal ``value`` of type ``kind`` (scale above ``places``) rounded to
        ``places`` half even, Spark's ``bround``, with its exact type; no engine but
        Spark has it for decimals. The engines' ``round`` rounds half away from zero,
        which differs only at a tie (the remainder by a unit of the last place kept is
        exactly half of one) whose rounded value is odd: there the neighbour toward
        zero. Remainders and sums of decimals are exact in every engine."""

        def number(x: Decimal, scale: int) -> str:
            return emit(x, SqlType("decimal", max(scale + 1, 1), scale), self.dialect)

        step = Decimal(1).scaleb(-places)
        kept = SqlType("decimal", min(38, kind.precision - kind.scale + places + 1), places)
        exact = SqlType("decimal", 38, kind.scale)
        rounded = self.cast_sql(f"round({value}, {places})", kind, kept)
        rest = self.cast_sql(f"abs({value} % {number(step, places)})", kind, exact)
        tie = f"{rest} = {emit(Decimal(5).scaleb(-places - 1), exact, self.dialect)}"
        parity = self.cast_sql(f"abs({rounded} % {number(2 * step, places)})", kept, kept)
        odd = f"{parity} <> {emit(Decimal(0), kept, self.dialect)}"
        positive = f"{value} > {emit(Decimal(0), kind, self.dialect)}"
        down = self.cast_sql(f"({rounded} - {emit(step, kept, self.dialect)})", kept, kept)
        up = self.cast_sql(f"({rounded} + {emit(step, kept, self.dialect)})", kept, kept)
        return (
            f"(CASE WHEN {tie} AND {odd} THEN (CASE WHEN {positive} THEN {down} ELSE {up} END) "
            f"ELSE {rounded} END)",
            kept,
        )


def _round_text(value: float, places: int, *, even: bool = False) -> float:
    """Spark's ``round`` (``bround``: ``even``) of a double literal: its shortest text
    rounded half up (half even)."""
    import math
    from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

    if math.isnan(value) or abs(value) >= 2.0**52:  # an integer already (or inf)
        return value
    step = Decimal(1).scaleb(-places)
    mode = ROUND_HALF_EVEN if even else ROUND_HALF_UP
    return float(Decimal(repr(value)).quantize(step, rounding=mode)) + 0.0
