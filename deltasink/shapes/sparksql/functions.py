"""Functions and ``CAST`` in a predicate: each written out with Spark's meaning for Spark
and Sail, and translated for DataFusion (delta-rs), or refused.

Where DataFusion's function of the same name means something else, the translation
spells Spark's meaning out: ``substring`` (Spark counts a position 0 as 1 and a negative
one from the end), ``concat`` (null if any argument is), ``floor``/``ceil`` of a double
(Spark returns a ``bigint``, 0 for NaN, clamped to its range), ``date_format`` (Java's
pattern letters, translated to strftime's for the few deltasink accepts), ``year`` and
friends (an ``int``), ``isnan`` (false for null).
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot.expressions as exp

from .arithmetic import Arithmetic
from .base import DELTA_RS, EVERY, Base, Typed, reads_columns
from .literals import Refusal, emit, zone_info
from .strings import Strings
from .types import INT, SqlType

__all__ = ["Functions", "type_of"]

_TYPES = {
    "BOOLEAN": "boolean",
    "TINYINT": "tinyint",
    "SMALLINT": "smallint",
    "INT": "int",
    "BIGINT": "bigint",
    "FLOAT": "float",
    "DOUBLE": "double",
    "TEXT": "string",
    "DATE": "date",
    "TIMESTAMPTZ": "timestamp",
    "TIMESTAMPLTZ": "timestamp",
    "TIMESTAMPNTZ": "timestamp_ntz",
}
_JAVA_PATTERN = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_PATTERN_TEXT = set("-/:. T_")
_PARTS = {
    exp.Year: "year",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
}
_DAY_MICROS = 86_400_000_000
_BIGINT = SqlType("bigint")


def type_of(node: exp.DataType) -> SqlType:
    """The Spark type a ``CAST`` names, or a :class:`Refusal`."""
    name = node.this.name if hasattr(node.this, "name") else str(node.this)
    if name == "DECIMAL":
        params = [int(p.this.this) for p in node.expressions]
        precision, scale = (params + [10, 0][len(params) :])[:2] if params else (10, 0)
        return SqlType("decimal", precision, scale)
    if name in _TYPES:
        return SqlType(_TYPES[name])
    raise Refusal(
        f"CAST AS {node.sql('spark')}",
        "deltasink translates casts to scalar types only",
        "cast to a number, decimal, string, boolean, date or timestamp",
    )


class Functions(Strings, Base):
    """The function and cast rules of :class:`~.walker.Walker`."""

    def function(self, node: exp.Expr) -> Typed:
        handler = _FUNCTIONS.get(type(node))
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "bround":
            return self.bround(node)
        if handler is None:
            name = node.sql_name() if isinstance(node, exp.Func) else type(node).__name__
            if isinstance(node, exp.Anonymous):
                name = str(node.this)
            raise Refusal(
                f"{name.lower()}",
                "it is not among the constructs deltasink proves equal to Spark on every "
                "engine (docs/predicates.md lists them)",
                "rewrite it with the constructs listed there, or compute the value in the "
                "job as a column of the batch",
            )
        return handler(self, node)  # type: ignore[no-any-return]

    def rounded(self, value: exp.Expr, digits: exp.Expr | None, *, even: bool) -> Typed:
        raise NotImplementedError  # pragma: no cover - the walker's (arithmetic.py)

    def bround(self, node: exp.Anonymous) -> Typed:
        raise NotImplementedError  # pragma: no cover - the walker's (arithmetic.py)

    def legacy_decimal(self, sql: str, source: SqlType, target: SqlType) -> str:
        raise NotImplementedError  # pragma: no cover - the walker's (arithmetic.py)

    # -- CAST ----------------------------------------------------------------------------

    def cast_node(self, node: exp.Cast) -> Typed:
        if isinstance(node, exp.TryCast) and node.args.get("safe"):
            return self.try_cast(node)
        if node.args.get("format"):
            raise Refusal("CAST ... FORMAT", "not Spark SQL", "write CAST(x AS type)")
        target = type_of(node.to)
        part = self.walk(node.this)
        source = part.type
        if part.literal or source.name in ("unknown", "void") or source == target:
            return self.cast(part, target)
        rule = _cast_rule(source, target)
        if rule is not None:
            why, on = rule
            self.refuse(
                f"CAST of a {source} AS {target}",
                why,
                "compare values of one type, or compute the value in the job",
                on=on,
            )
        if target.integral and not (source.integral and _wider(target, source)) and source.numeric:
            return Typed(self.narrow(part.sql, source, target, node), target)
        converted = self.cast_sql(part.sql, source, target)
        if target.name == "decimal" and source.numeric and not self.ansi:
            return Typed(self.legacy_decimal(part.sql, source, target), target)
        skip = " OR ".join(f"({s})" for s in self.skips if s)
        if target.name == "decimal" and source.numeric and skip:
            # A value too large for the decimal fails, on every engine, but only where
            # Spark evaluates this part (differential suite, seed 1453115599: the right
            # side of an AND whose left is false)
            null = emit(None, target, self.dialect)
            converted = f"(CASE WHEN {skip} THEN {null} ELSE {converted} END)"
        return Typed(converted, target)

    def try_cast(self, node: exp.TryCast) -> Typed:
        """``try_cast``: ``CAST`` with null where Spark's conversion fails. Of a string
        to an integer Spark's parser is spelled out (characters up to a space and DEL
        trimmed, a sign, digits; out of range null): the engines' own parsers trim
        other characters. Of a number to a narrower integer, null out of range."""
        target = type_of(node.to)
        part = self.walk(node.this)
        source = part.type
        if part.literal:
            try:
                return self.cast(part, target)
            except Refusal as refusal:
                if not refusal.why.startswith("Spark cannot convert"):
                    raise
                return Typed(emit(None, target, self.dialect), target, None)
        if not reads_columns(node.this) and source.name not in ("unknown", "void"):
            self.refuse(
                "try_cast of a constant expression",
                "Sail and DataFusion fold it by rules of their own and fail where Spark "
                "answers null",
                "write the literal, or try_cast a column",
            )
        if source.name == "string" and target.integral:
            return Typed(self.parse_integer(part.sql, target), target)
        if source.numeric and target.integral and not (source.integral and _wider(target, source)):
            return Typed(self.narrow(part.sql, source, target, node, fails=False), target)
        if source.name in ("unknown", "void"):
            return Typed(f"try_cast({part.sql} AS {str(target).upper()})", target)
        if target.name == "decimal" or source.name == "string":
            self.refuse(
                f"try_cast of a {source} AS {target}",
                "deltasink spells out try_cast of a string to an integer, and of a number "
                "to an integer, only",
                "CAST a value you know converts",
            )
        return self.cast_node(exp.Cast(this=node.this.copy(), to=node.to.copy()))

    # -- numbers -------------------------------------------------------------------------

    def round_(self, node: exp.Round) -> Typed:
        return self.rounded(node.this, node.args.get("decimals"), even=False)

    def floor_ceil(self, node: exp.Floor | exp.Ceil) -> Typed:
        name = "floor" if isinstance(node, exp.Floor) else "ceil"
        if node.args.get("decimals") or node.args.get("to"):
            raise Refusal(
                f"{name} with a scale", "deltasink translates floor(x) only", f"write {name}(x)"
            )
        part = self.walk(node.this)
        kind = part.type
        if kind.name == "decimal":
            self.refuse(
                f"{name} of a decimal",
                "DataFusion's result is not Spark's decimal",
                "CAST to DOUBLE first",
                on=DELTA_RS,
            )
        self.need_number(part, name)
        if kind.integral:
            return Typed(self.cast_sql(part.sql, kind, _BIGINT), _BIGINT)
        if kind.name in ("unknown", "decimal"):
            return Typed(f"{name}({part.sql})", _BIGINT if kind.fractional else kind)
        # Written out for Spark too: Sail, which evaluates the spark dialect on the
        # embedded engine, answers NaN for floor(NaN) where Spark answers 0 (found by the
        # differential suite, seed 909907858).
        whole = f"{name}({part.sql})"
        big = "CAST('9223372036854775807' AS DOUBLE)"
        small = "CAST('-9223372036854775808' AS DOUBLE)"
        outside = f"isnan({part.sql}) OR {whole} >= {big} OR {whole} <= {small}"
        # Spark: NaN is 0, beyond the range its ends; the ELSE never converts one of
        # those (DataFusion folds a constant branch even when it is not taken)
        return Typed(
            f"(CASE WHEN isnan({part.sql}) THEN CAST(0 AS BIGINT) "
            f"WHEN {whole} >= {big} THEN CAST(9223372036854775807 AS BIGINT) "
            f"WHEN {whole} <= {small} THEN CAST(-9223372036854775808 AS BIGINT) "
            f"ELSE CAST((CASE WHEN {outside} THEN CAST(0 AS DOUBLE) ELSE {whole} END) AS BIGINT) END)",
            _BIGINT,
        )

    # -- dates ---------------------------------------------------------------------------

    def temporal(self, part: Typed, name: str) -> None:
        kind = part.type.name
        if kind == "timestamp":
            self.refuse(
                f"{name} of a timestamp",
                "it reads the instant in the session's time zone, which the engines, "
                "sessions and a later recovery need not share",
                "compare the timestamp with TIMESTAMP '...Z' literals, or store the date "
                "as a column",
                on=DELTA_RS,
            )
        elif kind not in ("date", "timestamp_ntz", "unknown", "void", "timestamp"):
            raise Refusal(
                f"{name} of a {part.type}",
                "Spark would first convert it to a date by rules that depend on ANSI mode",
                f"apply {name} to a date column",
            )

    def date_part(self, node: exp.Func) -> Typed:
        inner = node.this
        if isinstance(inner, exp.TsOrDsToDate) and not inner.args.get("format"):
            inner = inner.this
        part = self.walk(inner)
        name = _PARTS[type(node)]
        if part.literal and part.type.name == "string":  # Spark converts it to a date
            part = self.cast(part, SqlType("date" if name != "hour" else "timestamp"))
        if part.type.name == "timestamp":
            return self.zoned_part(part, name)
        if part.type.name == "unknown" and self.zone is not None:
            self.zone_read = True  # a timestamp column would read it: recorded
        self.temporal(part, name)
        if name == "hour" and part.type.name == "date":
            raise Refusal("hour of a date", "Spark reads the date as a timestamp", "hour(ts)")
        if self.dialect == "spark":
            return Typed(f"{name}({part.sql})", INT)
        return Typed(f"CAST(date_part('{name}', {part.sql}) AS INT)", INT)

    def zoned_part(self, part: Typed, name: str) -> Typed:
        """``name`` (year, month, day, hour) of an instant read in the recorded session
        time zone, whichever session evaluates it: DataFusion reads a timestamp in the
        zone of its type; for Spark and Sail the wall-clock microseconds in that zone
        (``from_utc_timestamp``, which does not read the session's zone) give the day
        and the hour."""
        zone = self.session_zone(f"{name} of a timestamp")
        if self.dialect == "datafusion":
            shown = (
                part.sql
                if zone == "UTC"
                else (f"arrow_cast({part.sql}, 'Timestamp(Microsecond, Some(\"{zone}\"))')")
            )
            return Typed(f"CAST(date_part('{name}', {shown}) AS INT)", INT)
        offset = zone_info(zone).utcoffset(None) if "/" not in zone else None
        if offset is not None:  # UTC or an offset: Sail's from_utc_timestamp refuses +01:00
            micros = (offset.days * 86_400 + offset.seconds) * 1_000_000
            wall = f"(unix_micros({part.sql}) + {micros})"
        else:
            wall = f"unix_micros(from_utc_timestamp({part.sql}, '{zone}'))"
        within = f"pmod({wall}, {_DAY_MICROS})"
        if name == "hour":
            return Typed(f"CAST({within} div 3600000000 AS INT)", INT)
        day = f"date_from_unix_date(CAST(({wall} - {within}) div {_DAY_MICROS} AS INT))"
        return Typed(f"{name}({day})", INT)

    def date_format(self, node: exp.TimeToStr) -> Typed:
        inner = node.this
        if isinstance(inner, exp.TimeStrToTime):
            inner = inner.this
        part = self.walk(inner)
        if part.literal and part.type.name == "string":  # Spark converts it to a date
            part = self.cast(part, SqlType("date"))
        self.temporal(part, "date_format")
        spark_sql = node.sql("spark")
        found = re.search(r",\s*'((?:[^'\\]|\\.)*)'\)$", spark_sql)
        if not found or not isinstance(node.args.get("format"), exp.Literal):
            raise Refusal(
                "date_format with a format that is not a literal", "-", "write a literal format"
            )
        java = found.group(1)
        chrono = _strftime(java)
        if self.dialect == "spark":
            return Typed(f"date_format({part.sql}, '{java}')", SqlType("string"))
        return Typed(f"to_char({part.sql}, '{chrono}')", SqlType("string"))


def _strftime(java: str) -> str:
    out, rest = [], java
    while rest:
        for token, chrono in _JAVA_PATTERN.items():
            if rest.startswith(token) and rest[len(token) : len(token) + 1] != token[0]:
                out.append(chrono)
                rest = rest[len(token) :]
                break
        else:
            if rest[0] not in _PATTERN_TEXT:
                raise Refusal(
                    f"the date_format pattern '{java}'",
                    "deltasink translates the letters yyyy MM dd HH mm ss and the "
                    "separators - / : . space T only",
                    "format with those (date_format(d, 'yyyy-MM-dd'))",
                )
            out.append(rest[0])
            rest = rest[1:]
    return "".join(out)


def _wider(a: SqlType, b: SqlType) -> bool:
    """Whether integral ``a`` holds every value of integral ``b``."""
    order = ["tinyint", "smallint", "int", "bigint"]
    return order.index(a.name) >= order.index(b.name)


def _cast_rule(source: SqlType, target: SqlType) -> tuple[str, frozenset[Any]] | None:
    """Why a ``CAST`` of a column from ``source`` to ``target`` is refused, and on which
    evaluators; ``None`` when it is translated."""
    s, t = source.name, target.name
    numeric = source.numeric or s == "boolean"
    if s == "binary" or t == "binary" or s == "other":
        return "deltasink does not convert binary values", EVERY
    if s == "string":
        return (
            "Spark's conversion of text (formats, spaces, ANSI mode errors) differs "
            "from the other engines'",
            EVERY,
        )
    if source.fractional and t == "decimal":
        return "Spark converts the double's decimal text, the others its binary value", EVERY
    if source.fractional and t == "string":
        return "Spark writes doubles as 1.0E10, the others as 10000000000", EVERY
    if s == "decimal" and t == "float":
        return "the engines round a decimal to float differently", EVERY
    if s == "decimal" and t == "double" and source.precision > 15:
        return "a decimal of more than 15 digits may not give the same double", EVERY
    if s == "decimal" and t == "boolean":
        return "deltasink does not convert decimals to booleans", EVERY
    if s == "boolean" and t in ("decimal", "date", "timestamp", "timestamp_ntz"):
        return "Spark refuses it", EVERY
    if s == "timestamp" or t == "timestamp":
        if {s, t} <= {"timestamp", "date", "timestamp_ntz", "string"}:
            return (
                "it depends on the session's time zone, which the engines, sessions and "
                "a later recovery need not share",
                DELTA_RS,
            )
        return "deltasink does not convert between instants and numbers", EVERY
    if s == "timestamp_ntz" and t != "date":
        return "deltasink converts a timestamp_ntz to a date only", EVERY
    if s == "date" and t not in ("string", "timestamp_ntz"):
        return "deltasink converts a date to a string or timestamp_ntz only", EVERY
    if (numeric and t in ("date", "timestamp_ntz")) or (t == "boolean" and not numeric):
        return "Spark refuses it", EVERY
    return None


_FUNCTIONS: dict[type, Any] = {
    exp.Cast: Functions.cast_node,
    exp.TryCast: Functions.cast_node,
    exp.Abs: Arithmetic.abs_,
    exp.Round: Functions.round_,
    exp.Floor: Functions.floor_ceil,
    exp.Ceil: Functions.floor_ceil,
    exp.IsNan: Arithmetic.isnan,
    exp.TimeToStr: Functions.date_format,
    **dict.fromkeys(_PARTS, Functions.date_part),
    **Strings.HANDLERS,
}
