"""What the predicate walker's parts share: a typed piece of output, the evaluators a
field reaches, how its columns are named, and the walker's refusal and cast helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

import sqlglot.expressions as exp

from .literals import Dialect, Refusal, emit, integral_bounds
from .types import STRING, SqlType

__all__ = [
    "DELTA_RS",
    "EXACT",
    "NO_VALUE",
    "SAIL",
    "UNKNOWN",
    "Base",
    "Evaluator",
    "Scope",
    "Typed",
]

#: The engines deltasink hands predicates to besides Spark itself: the embedded
#: engine's Sail (Spark SQL, its own implementation) and delta-rs (DataFusion).
Evaluator = Literal["sail", "delta-rs"]
SAIL: frozenset[Evaluator] = frozenset({"sail"})
DELTA_RS: frozenset[Evaluator] = frozenset({"delta-rs"})
EVERY: frozenset[Evaluator] = frozenset({"sail", "delta-rs"})

#: The type of a column when the schema is not known yet (the spec being built): rules
#: that need types wait for the first batch.
UNKNOWN = SqlType("unknown")
#: Integer arithmetic is computed in this decimal: it holds every integral value, and the
#: product of two (38 digits).
EXACT = SqlType("decimal", 20, 0)
#: The text an out-of-range value fails with (``'128 overflows'`` does not convert).
OVERFLOWS = " overflows"
NO_VALUE = object()


class Typed(NamedTuple):
    """A translated sub-expression: its text, its Spark type, and its value when it is a
    literal (:data:`NO_VALUE` otherwise)."""

    sql: str
    type: SqlType
    value: object = NO_VALUE

    @property
    def literal(self) -> bool:
        return self.value is not NO_VALUE


@dataclass(frozen=True)
class Scope:
    """How a field names its columns.

    Attributes:
        qualifier: ``"never"`` (plain column names: the batch's or the target's),
            ``"required"`` (``t.col`` only: a MERGE condition, where ``s`` is the batch)
            or ``"optional"`` (``t.col`` or ``col``, both the target's).
        alias: The qualifier written out (``"t"``), or ``None``.
    """

    qualifier: Literal["never", "required", "optional"] = "never"
    alias: str | None = None


class Base:
    """State and helpers of a walk over one predicate."""

    def __init__(
        self,
        *,
        columns: Mapping[str, SqlType] | None,
        dialect: Dialect,
        evaluators: frozenset[Evaluator],
        scope: Scope,
        zone: str | None = None,
        ansi: bool = True,
    ) -> None:
        self.columns = columns
        #: Spark's ANSI mode the predicate means (``spark.sql.ansi.enabled``): on, an
        #: overflow or a zero divisor fails; off, integers wrap around and those are null.
        self.ansi = ansi
        #: The recorded session time zone (``None``: none recorded, what reads it is
        #: refused); :attr:`zone_read` tells whether the walk read it.
        self.zone = zone
        self.zone_read = False
        self.by_lower = None if columns is None else {name.lower(): name for name in columns}
        self.dialect = dialect
        self.evaluators = evaluators
        self.scope = scope
        #: Conditions under which the part being walked is not evaluated by Spark (the
        #: right side of AND/OR once the left decides, a CASE branch not taken...): a
        #: range check there must not fail (:meth:`narrow`).
        self.skips: list[str] = []

    def skipping(self, condition: str) -> _Skip:
        """``with self.skipping(c):`` walk a part Spark evaluates only when ``c`` is not
        true (``""``: always evaluated)."""
        return _Skip(self.skips, condition)

    def operands(self, node: exp.Binary, *, null_safe: bool = False) -> tuple[Typed, Typed]:
        """The two sides of a binary operator, walked. Spark evaluates the right side of
        a null-intolerant one (comparisons, arithmetic) only when the left is not null:
        a range check there must not fail on those rows (found by the differential
        suite, seed 865641963: ``CASE ... END > abs(tiny)``). ``null_safe``: ``<=>``,
        which evaluates both."""
        left = self.walk(node.this)
        skip = "" if null_safe or left.literal else f"({left.sql}) IS NULL"
        with self.skipping(skip):
            right = self.walk(node.expression)
        return left, right

    @property
    def typed(self) -> bool:
        """Whether column types are known (else typed rules wait)."""
        return self.columns is not None

    def refuse(
        self, construct: str, why: str, way_out: str, on: frozenset[Evaluator] = EVERY
    ) -> None:
        """Refuse ``construct`` when this field reaches an evaluator of ``on``."""
        if self.evaluators & on:
            raise Refusal(construct, why, way_out)

    def cast(self, part: Typed, to: SqlType) -> Typed:
        """``part`` converted to ``to`` (a literal converted in Python, under Spark's rules)."""
        if part.type == to or to.name == "unknown" or part.type.name == "unknown":
            return part
        if part.literal:
            from .literals import convert

            def zone() -> str:
                return self.session_zone("a timestamp literal without its zone")

            value = convert(part.value, part.type, to, zone)
            return Typed(emit(value, to, self.dialect), to, value)
        return Typed(self.cast_sql(part.sql, part.type, to), to)

    def cast_sql(self, sql: str, source: SqlType, to: SqlType) -> str:
        """``CAST`` text in this walk's dialect (timestamps keep microseconds)."""
        if self.dialect == "datafusion" and to.name in ("timestamp", "timestamp_ntz"):
            zone = 'Some("UTC")' if to.name == "timestamp" else "None"
            return f"arrow_cast({sql}, 'Timestamp(Microsecond, {zone})')"
        if self.dialect == "spark":
            if to.name == "decimal":
                return f"CAST({sql} AS DECIMAL({to.precision},{to.scale}))"
            return f"CAST({sql} AS {str(to).upper()})"
        return f"CAST({sql} AS {to.datafusion()})"

    def session_zone(self, construct: str) -> str:
        """The recorded session time zone ``construct`` reads, or a :class:`Refusal`."""
        if self.zone is None:
            raise Refusal(
                construct,
                "Spark reads it in the session's time zone, and this setting has no recorded one",
                "give the zone (TIMESTAMP '2024-01-01 12:00:00Z'), or build the spec or "
                "check with a time zone (time_zone='UTC')",
            )
        self.zone_read = True
        return self.zone

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def walk(self, node: exp.Expr) -> Typed:  # pragma: no cover - the walker's
        raise NotImplementedError

    def unify(self, parts: list[Typed], where: str) -> list[Typed]:  # pragma: no cover
        raise NotImplementedError

    def need_boolean(self, part: Typed, where: str) -> None:
        if part.type.name not in ("boolean", "void", "unknown"):
            raise Refusal(
                f"{where} over a {part.type}",
                "Spark takes only booleans there",
                "compare the value, e.g. col = 1",
            )

    def need_number(self, part: Typed, where: str) -> None:
        if part.type.name not in ("void", "unknown") and not part.type.numeric:
            raise Refusal(
                f"{where} over a {part.type}",
                "deltasink does arithmetic on numbers only",
                "convert the value to a number first",
            )

    def exact(self, sql: str, kind: SqlType, node: exp.Expr) -> Typed:
        """An exact (:data:`EXACT`) integer result of ``node`` converted back to
        ``kind``: an overflow fails, as in Spark's ANSI mode (:meth:`narrow`)."""
        return Typed(self.narrow(sql, EXACT, kind, node), kind)

    def narrow(
        self, sql: str, source: SqlType, kind: SqlType, node: exp.Expr, *, fails: bool = True
    ) -> str:
        """``CAST(sql AS kind)`` to an integral ``kind`` that fails, as Spark's ANSI
        mode does, when the value (truncated toward zero) is out of ``kind``'s range.

        The range is checked in the expression itself: DataFusion (and Sail, built on
        it) drop a narrowing ``CAST`` that is compared with a literal, and the failure
        with it. The text of an out-of-range value does not convert, on every engine
        (nor does NaN's). A constant ``node`` is converted plainly: the engines fold it
        (a failure then fails the query, as Spark's does), where they would also fold
        the failing branch."""
        converted = self.cast_sql(sql, source, kind)
        if fails and not self.ansi:
            return self.legacy_narrow(sql, source, kind)
        if not reads_columns(node) and fails:
            return converted
        low, high = integral_bounds(kind)
        if source.integral or (source.name == "decimal" and source.scale == 0):
            inside = f"{sql} BETWEEN {emit(low, source, self.dialect)} AND {emit(high, source, self.dialect)}"
        elif source.name == "decimal":
            from decimal import Decimal

            step = Decimal(1).scaleb(-source.scale)
            below, above = Decimal(low - 1).quantize(step), Decimal(high + 1).quantize(step)
            wide = SqlType("decimal", max(source.precision, 21) + 1, source.scale)
            sql_wide = self.cast_sql(sql, source, wide)
            inside = (
                f"{sql_wide} > {emit(below, wide, self.dialect)}"
                f" AND {sql_wide} < {emit(above, wide, self.dialect)}"
            )
        else:
            double = SqlType("double")
            as_double = self.cast_sql(sql, source, double) if source.name == "float" else sql
            # -2**63 - 1 is no double: bigint takes >= -2**63, narrower types > low - 1
            lower = (
                f">= {emit(float(low), double, self.dialect)}"
                if kind.name == "bigint"
                else f"> {emit(float(low - 1), double, self.dialect)}"
            )
            upper = f"< {emit(float(high + 1), double, self.dialect)}"
            inside = f"{as_double} {lower} AND {as_double} {upper}"
        text = self.cast_sql(sql, source, STRING)
        if not fails:
            return f"(CASE WHEN {inside} THEN {converted} END)"
        failing = self.cast_sql(f"({text} || '{OVERFLOWS}')", STRING, kind)  # null stays null
        # where Spark would not evaluate this part, neither fail: DataFusion evaluates
        # both sides of AND/OR, and rewrites a boolean CASE into them
        skip = " OR ".join(f"({s})" for s in self.skips if s)
        skipped = f" WHEN {skip} THEN {emit(None, kind, self.dialect)}" if skip else ""
        return f"(CASE WHEN {inside} THEN {converted}{skipped} ELSE {failing} END)"

    def legacy_narrow(self, sql: str, source: SqlType, kind: SqlType) -> str:
        """``CAST(sql AS kind)`` to an integral ``kind`` with ANSI mode off, as Spark
        converts (Java's conversions): a whole number wraps around to ``kind``'s range
        (a decimal truncated toward zero first); a float or double is truncated and
        clamped to an ``int`` or ``bigint``'s range, NaN is 0, and for a narrower type
        then wraps around. Never fails, so evaluated alike where Spark skips it."""
        exact = SqlType("decimal", 38, 0)
        if source.integral or source.name == "decimal":
            whole = sql
            if source.name == "decimal" and source.scale:  # the remainder has x's sign
                one = emit(1, SqlType("decimal", 1, 0), self.dialect)
                whole = f"({sql} - ({sql} % {one}))"
            return self.wrap(self.cast_sql(whole, source, exact), kind)
        double = SqlType("double")
        x = self.cast_sql(sql, source, double) if source.name == "float" else sql
        wide = kind if kind.name == "bigint" else SqlType("int")
        low, high = integral_bounds(wide)
        top, bottom = (
            emit(float(high + 1), double, self.dialect),
            emit(float(low), double, self.dialect),
        )
        outside = f"isnan({x}) OR {x} >= {top} OR {x} <= {bottom}"
        inside = f"(CASE WHEN {outside} THEN {emit(0.0, double, self.dialect)} ELSE {x} END)"
        clamped = (
            f"(CASE WHEN isnan({x}) THEN {emit(0, wide, self.dialect)} "
            f"WHEN {x} >= {top} THEN {emit(high, wide, self.dialect)} "
            f"WHEN {x} <= {bottom} THEN {emit(low, wide, self.dialect)} "
            f"ELSE {self.cast_sql(inside, double, wide)} END)"
        )
        if wide == kind:
            return clamped
        return self.wrap(self.cast_sql(clamped, wide, exact), kind)

    def wrap(self, exact: str, kind: SqlType) -> str:
        """The whole number ``exact`` (a ``DECIMAL(38,0)``) wrapped around to integral
        ``kind``'s range, as Java's integer arithmetic and narrowing do: ``((x - low)
        mod 2**bits) + low``, in decimals (exact on every engine)."""
        low, high = integral_bounds(kind)
        count = SqlType("decimal", 20, 0)
        size, first = emit(high - low + 1, count, self.dialect), emit(low, count, self.dialect)
        within = f"(((({exact} - {first}) % {size}) + {size}) % {size} + {first})"
        return self.cast_sql(within, SqlType("decimal", 38, 0), kind)

    def nan_safe(self, part: Typed, *, zero: bool = False) -> Typed:
        """A float or double with every NaN made the one NaN Spark has, and -0.0 made
        0.0: DataFusion and Sail order a NaN with the sign bit set (what x86 arithmetic
        yields, e.g. inf % 7) below every number, Spark above, equal to every other NaN;
        and DataFusion turns four or more ``=`` joined by OR into an ``IN`` list, whose
        hashing finds -0.0 outside (0.0) (differential suite, seed 20261126): ``zero``
        (``IN``'s terms) writes -0.0 as 0.0 too."""
        if not part.type.fractional:
            return part
        if part.literal:
            if isinstance(part.value, float) and part.value == 0.0:
                return Typed(emit(0.0, part.type, self.dialect), part.type, 0.0)
            return part
        nan = emit(float("nan"), part.type, self.dialect)
        naught = emit(0.0, part.type, self.dialect)
        plus = f"WHEN {part.sql} = {naught} THEN {naught} " if zero else ""
        return part._replace(
            sql=f"(CASE WHEN isnan({part.sql}) THEN {nan} {plus}ELSE {part.sql} END)"
        )


def reads_columns(node: exp.Expr) -> bool:
    """Whether ``node``'s value depends on a column. A ``coalesce`` stops at its first
    non-null literal, as the engines' constant folding does (Sail folded
    ``coalesce(100000, tiny)`` to 100000 and then a range check's failing branch;
    differential suite, seed 1453115599)."""
    if isinstance(node, exp.Column):
        return True
    if isinstance(node, exp.Case) and node.this is None:  # a literal condition: folded
        for branch in node.args.get("ifs") or []:  # (seed 250658533: WHEN True THEN 10)
            condition = branch.this
            if reads_columns(condition):
                return True
            if isinstance(condition, exp.Boolean) and condition.this:
                return reads_columns(branch.args["true"])
            if not isinstance(condition, exp.Boolean | exp.Null) and reads_columns(
                branch.args["true"]
            ):
                return True
        default = node.args.get("default")
        return default is not None and reads_columns(default)
    if isinstance(node, exp.Coalesce):
        for arg in [node.this, *node.expressions]:
            if reads_columns(arg):
                return True
            literal = arg.this if isinstance(arg, exp.Neg) else arg  # -128 too (seed 1116029113)
            if isinstance(literal, exp.Literal):  # a non-null constant: the rest is not read
                return False
        return False
    return any(reads_columns(child) for child in node.iter_expressions())


class _Skip:
    """The context manager of :meth:`Base.skipping`."""

    def __init__(self, skips: list[str], condition: str) -> None:
        self.skips, self.condition = skips, condition

    def __enter__(self) -> None:
        self.skips.append(self.condition)

    def __exit__(self, *exc: object) -> None:
        self.skips.pop()
