"""Literals: the Spark type and value of each literal a predicate may hold, conversions of
a literal Spark evaluates once (``DATE '2024-1-5'``, ``CAST('3' AS INT)``, a string
compared with a date), and each value written for Spark and for DataFusion.

A literal's value is computed here, in Python, under Spark's rules (ANSI mode: a string
that does not convert is an error, so it is refused). Each engine then receives the
value already typed (``CAST('0.1' AS DECIMAL(1,1))``, a timestamp as microseconds in
UTC), never a text it would type by rules of its own (DataFusion reads ``0.1`` as a
float and ``TIMESTAMP '...'`` in nanoseconds without a zone).
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Literal

from .types import INTEGRAL, MAX_PRECISION, SqlType

__all__ = ["Dialect", "Refusal", "convert", "decimal_type", "emit", "number", "zone_info"]

#: Who reads an emitted expression: Spark SQL (Spark and the embedded engine's Sail
#: Spark), or DataFusion's SQL parser (delta-rs).
Dialect = Literal["spark", "datafusion"]

_INT_RANGE = {
    "tinyint": 2**7,
    "smallint": 2**15,
    "int": 2**31,
    "bigint": 2**63,
}
_DATE = re.compile(r"^\s*([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})\s*$")
_TIMESTAMP = re.compile(
    r"^\s*([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})[ T]([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})"
    r"(?:\.([0-9]{1,6}))?)?\s*(Z|[+-][0-9]{2}:[0-9]{2})?\s*$"
)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Refusal(Exception):
    """A construct deltasink does not give an engine: ``construct`` names it, ``why``
    says what would differ, ``way_out`` what to write instead."""

    def __init__(self, construct: str, why: str, way_out: str) -> None:
        super().__init__(f"{construct}: {why}")
        self.construct, self.why, self.way_out = construct, why, way_out


def decimal_type(value: Decimal) -> SqlType:
    """Spark's type of the decimal literal ``value`` (``0.1`` is ``decimal(1,1)``)."""
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(0, -exponent)
    significant = len(digits) + max(0, exponent)
    precision = max(significant, scale, 1)
    if precision > MAX_PRECISION:
        raise Refusal(
            f"the number literal {value}",
            "it has more than 38 digits, which Spark reads as a double",
            "write it with at most 38 digits",
        )
    return SqlType("decimal", precision, scale)


def number(text: str, negative: bool = False) -> tuple[object, SqlType]:
    """A number literal as Spark types it: an integer (``int``, else ``bigint``), a
    decimal (``1.5``: ``decimal(2,1)``) or, with an exponent, a double."""
    text = ("-" if negative else "") + text
    if re.fullmatch(r"-?[0-9]+", text):
        value = int(text)
        for name in ("int", "bigint"):
            if -_INT_RANGE[name] <= value < _INT_RANGE[name]:
                return value, SqlType(name)
        return Decimal(value), decimal_type(Decimal(value))
    if "e" in text.lower():
        return float(text), SqlType("double")
    try:
        parsed = Decimal(text)
    except InvalidOperation:  # pragma: no cover - sqlglot gave a number
        raise Refusal(f"the literal {text}", "it is not a number", "write a number") from None
    return parsed, decimal_type(parsed)


def _bad(value: object, target: SqlType) -> Refusal:
    return Refusal(
        f"the literal {value!r} as {target}",
        f"Spark cannot convert it to {target} (an error in ANSI mode, null otherwise)",
        f"write a valid {target} literal",
    )


def _date(text: str) -> datetime.date:
    found = _DATE.match(text)
    if not found:
        raise _bad(text, SqlType("date"))
    try:
        return datetime.date(*(int(g) for g in found.groups()))
    except ValueError:
        raise _bad(text, SqlType("date")) from None


_OFFSET = re.compile(r"^([+-])([0-9]{2}):([0-9]{2})$")


def zone_info(zone: str) -> datetime.tzinfo:
    """The session time zone ``zone`` (``UTC``, ``+05:30``, a region of the time zone
    database such as ``Europe/Paris``) as Python reads it, or a :class:`Refusal`."""
    found = _OFFSET.match(zone)
    if zone in ("UTC", "Z"):
        return datetime.timezone.utc
    if found and int(found.group(2)) <= 18 and int(found.group(3)) < 60:
        offset = datetime.timedelta(hours=int(found.group(2)), minutes=int(found.group(3)))
        return datetime.timezone(-offset if found.group(1) == "-" else offset)
    if "/" in zone:
        import zoneinfo

        try:
            return zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    raise Refusal(
        f"the time zone {zone!r}",
        "deltasink reads UTC, an offset (+05:30) or a region of the time zone database "
        "(Europe/Paris), which Spark, Sail and DataFusion read alike",
        "set spark.sql.session.timeZone or time_zone to one of those",
    )


def _timestamp(
    text: str, target: SqlType, session: Callable[[], str] | None = None
) -> datetime.datetime:
    found = _TIMESTAMP.match(text)
    if not found:
        raise Refusal(
            f"the literal {text!r} as {target}",
            "deltasink reads a timestamp literal only as 'yyyy-mm-dd hh:mm[:ss[.ffffff]]'"
            + (" with its zone (Z or +hh:mm)" if target.name == "timestamp" else ""),
            "write it in that form",
        )
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    micros = int((fraction or "0").ljust(6, "0"))
    try:
        value = datetime.datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros
        )
    except ValueError:
        raise _bad(text, target) from None
    if target.name == "timestamp_ntz":
        if zone:
            raise Refusal(
                f"the literal {text!r} as timestamp_ntz",
                "a timestamp without time zone has no zone",
                "drop the zone",
            )
        return value
    if not zone:
        if session is None:
            raise Refusal(
                f"the timestamp literal {text!r} without a zone",
                "Spark reads it in the session's time zone, and this setting has no recorded one",
                f"give the zone: TIMESTAMP '{text.strip()}Z' (UTC) or +hh:mm",
            )
        # Spark: the wall-clock time in the session's zone (in a gap, moved forward by
        # the gap; in an overlap, the earlier offset: Python's fold=0 alike)
        local = value.replace(tzinfo=zone_info(session()))
        return local.astimezone(datetime.timezone.utc)
    offset = (
        datetime.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])) if zone != "Z" else None
    )
    if offset is not None and zone[0] == "-":
        offset = -offset
    tz = datetime.timezone(offset) if offset is not None else datetime.timezone.utc
    return value.replace(tzinfo=tz).astimezone(datetime.timezone.utc)


def convert(
    value: object, source: SqlType, target: SqlType, zone: Callable[[], str] | None = None
) -> object:
    """``CAST(value AS target)`` of a literal, under Spark's ANSI rules, or a
    :class:`Refusal` where Spark would fail or deltasink does not follow; ``zone`` gives
    the session time zone a zone-less timestamp is read in (``None``: refused)."""
    if value is None or source == target:
        return value
    if source.name == "string":
        assert isinstance(value, str)
        if target.name == "date":
            return _date(value)
        if target.name in ("timestamp", "timestamp_ntz"):
            return _timestamp(value, target, zone)
        if target.integral:
            if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
                raise _bad(value, target)
            return convert(int(value), SqlType("decimal", 38, 0), target)
        if target.name == "decimal" or target.fractional:
            try:
                parsed = Decimal(value.strip())
            except InvalidOperation:
                raise _bad(value, target) from None
            if not parsed.is_finite():
                if target.fractional:
                    return float(parsed)
                raise _bad(value, target)
            source = decimal_type(parsed)
            value = parsed
        elif target.name == "boolean":
            lowered = value.strip().lower()
            if lowered in ("t", "true", "y", "yes", "1"):
                return True
            if lowered in ("f", "false", "n", "no", "0"):
                return False
            raise _bad(value, target)
        else:
            raise _bad(value, target)
    if target.name == "string":
        return _as_string(value, source)
    if target.integral:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
            raise _bad(value, target)
        number_value = int(value)  # type: ignore[call-overload]  # toward zero, as Spark
        if not -_INT_RANGE[target.name] <= number_value < _INT_RANGE[target.name]:
            raise _bad(value, target)
        return number_value
    if target.name == "decimal":
        if isinstance(value, float):
            raise _bad(value, target)
        exact = Decimal(value)  # type: ignore[arg-type]
        rounded = exact.quantize(Decimal(1).scaleb(-target.scale), rounding="ROUND_HALF_UP")
        if abs(rounded) >= Decimal(10) ** (target.precision - target.scale):
            raise _bad(value, target)
        return rounded
    if target.fractional:
        if isinstance(value, bool):
            raise _bad(value, target)
        result = float(value)  # type: ignore[arg-type]
        if target.name == "float":
            import struct

            result = struct.unpack("f", struct.pack("f", result))[0]
        return result
    if target.name == "boolean" and source.numeric:
        return value != 0
    if target.name == "timestamp_ntz" and source.name == "date":
        assert isinstance(value, datetime.date)
        return datetime.datetime(value.year, value.month, value.day)
    raise Refusal(
        f"CAST of a {source} literal AS {target}",
        "deltasink does not evaluate this conversion",
        "write the literal in the type you compare it with",
    )


def _as_string(value: object, source: SqlType) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if source.integral or source.name == "decimal":
        return str(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    raise Refusal(
        f"CAST of a {source} literal AS string",
        "Spark's text for it differs from the other engines'",
        "write the string literal itself",
    )


def _string(value: str, dialect: Dialect) -> str:
    if dialect == "spark":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + value.replace("'", "''") + "'"


def emit(value: object, kind: SqlType, dialect: Dialect) -> str:
    """``value`` of type ``kind`` as an expression of exactly that type for
    ``dialect``."""
    if value is None:
        return (
            "NULL" if kind.name in ("void", "unknown") else f"CAST(NULL AS {_type(kind, dialect)})"
        )
    if kind.name == "boolean":
        return "TRUE" if value else "FALSE"
    if kind.name == "string":
        assert isinstance(value, str)
        return _string(value, dialect)
    if kind.name == "binary":
        assert isinstance(value, bytes)
        return (
            f"X'{value.hex().upper()}'" if dialect == "spark" else f"decode('{value.hex()}', 'hex')"
        )
    if kind.integral or kind.name == "decimal":
        return (
            # plain digits: the engines do not read 0E-10 (differential suite, seed 1683972181)
            f"CAST({_string(format(Decimal(value), 'f'), dialect)} AS {_type(kind, dialect)})"  # type: ignore[arg-type]
            if kind.name == "decimal"
            else f"CAST({value} AS {_type(kind, dialect)})"
        )
    if kind.fractional:
        assert isinstance(value, float)
        text = (
            "NaN"
            if math.isnan(value)
            else (
                "Infinity"
                if value == math.inf
                else ("-Infinity" if value == -math.inf else repr(value))
            )
        )
        if dialect == "datafusion" and "Infinity" in text:
            text = text.replace("Infinity", "inf")
        return f"CAST('{text}' AS {_type(kind, dialect)})"
    if kind.name == "date":
        assert isinstance(value, datetime.date)
        return f"CAST('{value.isoformat()}' AS DATE)"
    if kind.name in ("timestamp", "timestamp_ntz"):
        assert isinstance(value, datetime.datetime)
        return timestamp_literal(value, kind, dialect)
    raise Refusal(f"a literal of type {kind}", "it has no literal here", "compare with a column")


def timestamp_literal(value: datetime.datetime, kind: SqlType, dialect: Dialect) -> str:
    """A timestamp value at microsecond precision: an instant (UTC) or a wall-clock time."""
    text = value.replace(tzinfo=None).isoformat(timespec="microseconds")
    if kind.name == "timestamp":
        if dialect == "spark":
            return f"CAST('{text}Z' AS TIMESTAMP)"
        return f"arrow_cast('{text}Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    if dialect == "spark":
        return f"CAST('{text}' AS TIMESTAMP_NTZ)"
    return f"arrow_cast('{text}', 'Timestamp(Microsecond, None)')"


def _type(kind: SqlType, dialect: Dialect) -> str:
    if dialect == "spark":
        return (
            str(kind).upper()
            if kind.name != "decimal"
            else f"DECIMAL({kind.precision},{kind.scale})"
        )
    return kind.datafusion()


def integral_bounds(kind: SqlType) -> tuple[int, int]:
    """The smallest and largest value of an integral type."""
    assert kind.name in INTEGRAL
    return -_INT_RANGE[kind.name], _INT_RANGE[kind.name] - 1
