"""Spark SQL's types, as far as a predicate needs them: what a column of an Arrow (Delta)
schema is in Spark, and Spark's rules for the type two operands meet in (a comparison,
``IN``, ``CASE``, ``coalesce``) and for the result of arithmetic.

:mod:`deltasink.shapes.datafusion` uses them to hand delta-rs an expression whose every
conversion is written out, so DataFusion's own coercion rules never decide a result.
Anything these rules do not cover (nested types, intervals, decimal results wider than
38 digits, where Spark starts rounding) is ``None``: the caller refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "SqlType",
    "arithmetic_type",
    "common_type",
    "of_arrow",
    "of_spark",
    "parse_type",
]

#: Integral types, narrowest first, with the decimal precision that holds each.
INTEGRAL = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}
_INTEGRAL_ORDER = list(INTEGRAL)
MAX_PRECISION = 38


@dataclass(frozen=True)
class SqlType:
    """A Spark SQL type: ``name`` is one of ``boolean``, the :data:`INTEGRAL` names,
    ``float``, ``double``, ``decimal`` (with ``precision`` and ``scale``), ``string``,
    ``binary``, ``date``, ``timestamp`` (an instant), ``timestamp_ntz`` (a wall-clock
    time), ``void`` (the type of ``NULL``) or ``other`` (nested and anything else)."""

    name: str
    precision: int = 0
    scale: int = 0

    def __str__(self) -> str:
        if self.name == "decimal":
            return f"decimal({self.precision},{self.scale})"
        return self.name

    @property
    def integral(self) -> bool:
        return self.name in INTEGRAL

    @property
    def fractional(self) -> bool:
        """``float`` or ``double`` (binary floating point)."""
        return self.name in ("float", "double")

    @property
    def numeric(self) -> bool:
        return self.integral or self.fractional or self.name == "decimal"

    def as_decimal(self) -> SqlType:
        """An integral type as the decimal Spark widens it to (``int`` is
        ``decimal(10,0)``); a decimal as itself."""
        if self.integral:
            return SqlType("decimal", INTEGRAL[self.name], 0)
        return self

    def datafusion(self) -> str:
        """The type's name in a DataFusion ``CAST``."""
        if self.name == "decimal":
            return f"DECIMAL({self.precision}, {self.scale})"
        if self.name == "timestamp":
            return "TIMESTAMP"  # callers cast through arrow_cast (precision, zone)
        return _DATAFUSION[self.name]


_DATAFUSION = {
    "boolean": "BOOLEAN",
    "tinyint": "TINYINT",
    "smallint": "SMALLINT",
    "int": "INT",
    "bigint": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "binary": "BYTEA",
    "date": "DATE",
    "timestamp_ntz": "TIMESTAMP",
}

BOOLEAN = SqlType("boolean")
INT = SqlType("int")
BIGINT = SqlType("bigint")
DOUBLE = SqlType("double")
STRING = SqlType("string")
DATE = SqlType("date")
VOID = SqlType("void")


def of_arrow(kind: pa.DataType) -> SqlType:
    """The Spark type of a column of Arrow type ``kind`` (as Delta maps them)."""
    if pa.types.is_boolean(kind):
        return BOOLEAN
    for arrow, name in (
        (pa.int8(), "tinyint"),
        (pa.int16(), "smallint"),
        (pa.int32(), "int"),
        (pa.int64(), "bigint"),
        (pa.float32(), "float"),
        (pa.float64(), "double"),
        (pa.date32(), "date"),
    ):
        if kind == arrow:
            return SqlType(name)
    if pa.types.is_decimal(kind):
        return SqlType("decimal", kind.precision, kind.scale)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return STRING
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return SqlType("binary")
    if pa.types.is_timestamp(kind):
        return SqlType("timestamp" if kind.tz is not None else "timestamp_ntz")
    if pa.types.is_null(kind):
        return VOID
    return SqlType("other")


def parse_type(text: str) -> SqlType:
    """The :class:`SqlType` whose ``str`` is ``text`` (``decimal(10,2)``, ``int``...)."""
    found = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", text)
    if found:
        return SqlType("decimal", int(found.group(1)), int(found.group(2)))
    return SqlType(text)


_SPARK_NAMES = {
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
}


def of_spark(kind: object) -> SqlType:
    """The :class:`SqlType` of a PySpark ``DataType`` (classic or Spark Connect)."""
    text = str(kind.simpleString()).lower()  # type: ignore[attr-defined]
    if text.startswith("decimal"):
        return parse_type(text.replace(" ", ""))
    if text.startswith(("varchar", "char")):
        return STRING
    return SqlType(text) if text in _SPARK_NAMES else SqlType("other")


def _wider_integral(a: SqlType, b: SqlType) -> SqlType:
    return max(a, b, key=lambda t: _INTEGRAL_ORDER.index(t.name))


def _wider_decimal(a: SqlType, b: SqlType) -> SqlType | None:
    """Spark's ``widerDecimalType``: room for both integer parts and both scales, or
    ``None`` beyond 38 digits (where Spark would drop digits)."""
    a, b = a.as_decimal(), b.as_decimal()
    scale = max(a.scale, b.scale)
    whole = max(a.precision - a.scale, b.precision - b.scale)
    if whole + scale > MAX_PRECISION:
        return None
    return SqlType("decimal", whole + scale, scale)


def common_type(a: SqlType, b: SqlType, *, ansi: bool = True) -> SqlType | None:
    """The type Spark compares ``a`` and ``b`` in (and unifies ``IN`` lists, ``CASE``
    branches and ``coalesce`` arguments to): ``None`` when deltasink does not take
    Spark's implicit conversion between them (a string and a number, a date and an
    instant: their meaning depends on ANSI mode or the session's time zone). ``ansi``:
    Spark's ANSI mode (off, a float and an integer meet in FLOAT)."""
    if a == b:
        return a
    if a.name == "void":
        return b
    if b.name == "void":
        return a
    if a.numeric and b.numeric:
        if a.name == "double" or b.name == "double":
            return DOUBLE
        if (a.name == "float" or b.name == "float") and not ansi and (a.integral or b.integral):
            return SqlType("float")  # without ANSI mode, Spark's numeric precedence
        if a.name == "float" or b.name == "float":
            # ANSI mode's least common type skips FLOAT (precision): a float and an
            # integer or decimal meet in DOUBLE (differential suite, seed 15583695:
            # CAST(2147483647 AS FLOAT) <= an int column of 2147483647 is false)
            return DOUBLE
        if a.integral and b.integral:
            return _wider_integral(a, b)
        return _wider_decimal(a, b)
    if a.name == b.name == "decimal":
        return _wider_decimal(a, b)
    return None


def arithmetic_type(op: str, a: SqlType, b: SqlType, *, ansi: bool = True) -> SqlType | None:
    """The result type of ``a <op> b`` for ``op`` in ``+ - * %`` (Spark's rules), or
    ``None`` when Spark would round (a decimal result wider than 38 digits) or the
    operands are not numbers. ``ansi``: as :func:`common_type`."""
    if not (a.numeric and b.numeric):
        return None
    if a.integral and b.integral:
        return _wider_integral(a, b)
    if a.fractional or b.fractional:
        both = a.name == b.name == "float"
        floats = not ansi and "float" in (a.name, b.name) and (a.integral or b.integral)
        return SqlType("float") if both or floats else DOUBLE
    a, b = a.as_decimal(), b.as_decimal()
    whole_a, whole_b = a.precision - a.scale, b.precision - b.scale
    if op in ("+", "-"):
        scale = max(a.scale, b.scale)
        precision = max(whole_a, whole_b) + scale + 1
    elif op == "*":
        scale = a.scale + b.scale
        precision = a.precision + b.precision + 1
    elif op == "%":
        scale = max(a.scale, b.scale)
        precision = min(whole_a, whole_b) + scale
    else:
        return None
    if precision > MAX_PRECISION:
        return None
    return SqlType("decimal", precision, scale)
