"""The predicate grammar of the differential suite: rows of every column type the docs
support, and random Spark SQL predicates over them, written as users write them.

Everything here is plain Python (no engine): :func:`rows` gives the rows (NULLs, signed
zeros, NaN and infinities, integer extremes, unicode, empty strings, escapes), and
:class:`Grammar` draws predicates from ``random.Random`` for each construct of
:data:`deltasink.shapes.sparksql.constructs.CONSTRUCTS` (a test checks that every
construct has a rule here), with column names in mixed case.
"""

from __future__ import annotations

import datetime
import math
import random
from collections.abc import Callable
from decimal import Decimal
from typing import NamedTuple

import pyarrow as pa

UTC = datetime.timezone.utc
#: Marks where a column's qualifier goes: :meth:`Drawn.plain` drops it,
#: :meth:`Drawn.qualified` writes ``t.``.
QUALIFIER = "\x01"


class Drawn(NamedTuple):
    """A drawn predicate and the grammar rules (constructs) it used."""

    raw: str
    constructs: frozenset[str]

    @property
    def plain(self) -> str:
        return self.raw.replace(QUALIFIER, "")

    @property
    def qualified(self) -> str:
        return self.raw.replace(QUALIFIER, "t.")


#: (name as stored, Arrow type, kind the grammar draws it as)
COLUMNS: list[tuple[str, pa.DataType, str]] = [
    ("Id", pa.int64(), "bigint"),
    ("tiny", pa.int8(), "tinyint"),
    ("Small", pa.int16(), "smallint"),
    ("qty", pa.int32(), "int"),
    ("BIG", pa.int64(), "bigint"),
    ("f32", pa.float32(), "float"),
    ("Price", pa.float64(), "double"),
    ("amt", pa.decimal128(10, 2), "decimal"),
    ("name", pa.string(), "string"),
    ("Zone", pa.string(), "string"),
    ("flag", pa.bool_(), "boolean"),
    ("d", pa.date32(), "date"),
    ("ts", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("bin", pa.binary(), "binary"),
]
KINDS = {name: kind for name, _, kind in COLUMNS}
SCHEMA = pa.schema([pa.field(n, t) for n, t, _ in COLUMNS])

_NAMES = [
    "",
    "abc",
    "ab",
    "Abc",
    "a",
    "é",
    "ß",
    "İ",
    "👍ab",
    "a_b",
    "a%b",
    "a\\b",
    "O'Brien",
    " pad ",
    "line\nbreak",
    "ΣΑΣ",
    "tab\t",
    "EU",
    "10",
    "2024-01-05",
    "AbC\n",
    " -12 ",
    "\u212a\u017f",  # the Kelvin sign and a long s: (?i) folds them in Rust, not in Java
    "abc\r\n",
]
_ZONES = ["EU", "eu", "US", "", "Eu", None]
_DATES = [
    datetime.date(2024, 1, 5),
    datetime.date(2024, 2, 29),
    datetime.date(1970, 1, 1),
    datetime.date(1969, 12, 31),
    datetime.date(2000, 1, 1),
    datetime.date(9999, 12, 31),
    datetime.date(1000, 1, 1),
    datetime.date(2024, 12, 31),
]
_TIMES = [
    datetime.datetime(2024, 1, 1, 12, 0, 0, 1, tzinfo=UTC),
    datetime.datetime(2024, 1, 1, 11, 59, 59, 999999, tzinfo=UTC),
    datetime.datetime(1970, 1, 1, tzinfo=UTC),
    datetime.datetime(2024, 2, 29, 23, 30, tzinfo=UTC),
    datetime.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC),
    datetime.datetime(2024, 3, 10, 7, 30, tzinfo=UTC),  # New York: after the spring gap
    datetime.datetime(2024, 11, 3, 5, 30, tzinfo=UTC),  # New York: in the autumn overlap
]
#: The session time zone the suite records (a spec's ``time_zone``) and the oracle's.
ZONE = "America/New_York"
_DOUBLES = [  # rows 7 and 19 (indexes 6 and 18) hold null
    1.005,
    -0.0,
    0.0,
    math.nan,
    math.inf,
    -math.inf,
    0.1,
    1e300,
    2.5,
    3.0,
    -2.5,
    0.1,
    1e-7,
    1.015,
    0.5,  # ties of bround (half even) and round (half up)
    1.5,
    0.125,
    -0.125,
    3.0,
    2.675,
    1e15 + 0.5,
]
_FLOATS = [1.5, -0.0, math.nan, 0.1, -3.25, math.inf, 100.0]
_AMOUNTS = ["1.00", "-2.55", "99999999.99", "0.00", "1.01", "2.50", "-0.50", "10.00"]


def rows(count: int = 24) -> pa.Table:
    """The rows every predicate is evaluated on: ``Id`` 1..count, each column cycling
    through its edge values, with nulls (``Id`` is never null)."""
    data: dict[str, list[object]] = {n: [] for n, _, _ in COLUMNS}
    for i in range(count):
        null = (i % 7) == 3
        data["Id"].append(i + 1)
        data["tiny"].append(None if i % 9 == 4 else [0, 1, -1, 127, -128, 5, 10][i % 7])
        data["Small"].append(None if null else [0, 7, -300, 32767, 2, 12][i % 6])
        data["qty"].append(None if i % 8 == 5 else [3, 2, 0, -7, 10, 1, 2147483647, 4, -1][i % 9])
        data["BIG"].append(
            None
            if i % 10 == 7
            else [0, 9223372036854775807, -9223372036854775808, 10**12, 3, -5][i % 6]
        )
        data["f32"].append(None if i % 11 == 2 else _FLOATS[i % len(_FLOATS)])
        data["Price"].append(None if i % 12 == 6 else _DOUBLES[i % len(_DOUBLES)])
        data["amt"].append(None if i % 6 == 4 else Decimal(_AMOUNTS[i % len(_AMOUNTS)]))
        data["name"].append(None if i % 13 == 11 else _NAMES[i % len(_NAMES)])
        data["Zone"].append(_ZONES[i % len(_ZONES)])
        data["flag"].append([True, False, None][i % 3])
        data["d"].append(None if i % 9 == 8 else _DATES[i % len(_DATES)])
        data["ts"].append(None if i % 7 == 6 else _TIMES[i % len(_TIMES)])
        data["bin"].append([b"", b"\x00", b"ab", None, b"\xff\x01"][i % 5])
    return pa.table(data, schema=SCHEMA)


def spark_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (backslash escapes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


Rule = Callable[["Grammar", int], str]


class Grammar:
    """Random predicates: ``Grammar(rng).predicate()`` is one Spark SQL boolean text.

    Each rule draws an expression of one kind (``boolean``, ``integer``, ``number``,
    ``decimal``, ``string``, ``date``, ``timestamp``, ``binary``); :data:`RULES` maps each
    construct of the allow-list (and a few refused ones) to the rule that writes it.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def pick(self, *options: str) -> str:
        return self.rng.choice(options)

    def name(self, column: str) -> str:
        """``column`` as a user might write it: as stored, lower or upper case, quoted;
        after :data:`QUALIFIER` (where ``t.`` goes in a MERGE condition)."""
        form = self.rng.random()
        if form < 0.5:
            text = column
        elif form < 0.7:
            text = column.lower()
        elif form < 0.85:
            text = column.upper()
        else:
            text = f"`{column.swapcase()}`"
        return QUALIFIER + text

    def column(self, *kinds: str) -> str | None:
        names = [n for n, k in KINDS.items() if k in kinds and n != "Id"]
        return self.name(self.rng.choice(names)) if names else None

    def expr(self, kind: str, depth: int) -> str:
        """An expression of ``kind``; leaves when ``depth`` runs out."""
        rules = [r for r in KIND_RULES[kind] if depth > 0 or r[2]]
        weights = [w for _, w, _ in rules]
        key, _, _ = self.rng.choices(rules, weights=weights)[0]
        self.used.add(key)
        return RULES[key](self, depth - 1)

    def predicate(self, depth: int = 3) -> Drawn:
        self.used = set()
        text = self.expr("boolean", depth)
        return Drawn(text, frozenset(self.used))


# -- rules: each returns Spark SQL text -------------------------------------------------


def _int_literal(g: Grammar) -> str:
    return str(g.rng.choice([0, 1, 2, 3, -1, 5, 10, 127, -128, 2147483647, 100000, 7]))


def _decimal_literal(g: Grammar) -> str:
    return g.rng.choice(["0.1", "2.50", "1.01", "-2.55", "0.3", "99999999.99", "1.0", "0.005"])


def _double_literal(g: Grammar) -> str:
    return g.rng.choice(
        [
            "1.005D",
            "2.5D",
            "1e300",
            "-0.0D",
            "0.0D",
            "CAST('NaN' AS DOUBLE)",
            "1E-7",
            "CAST('Infinity' AS DOUBLE)",
            "3.0D",
            "0.1D",
            "0.125D",
            "1.5D",
        ]
    )


def _string_literal(g: Grammar) -> str:
    return spark_string(g.rng.choice([*_NAMES, "EU", "eu", "abd", "ä", "Σ", "x"]))


def _date_literal(g: Grammar) -> str:
    day = g.rng.choice(_DATES)
    form = g.rng.random()
    if form < 0.6:
        return f"DATE '{day.isoformat()}'"
    if form < 0.8:
        return f"DATE'{day.year}-{day.month}-{day.day}'"
    return f"'{day.isoformat()}'"  # a string Spark converts when compared with a date


def _timestamp_literal(g: Grammar) -> str:
    moment = g.rng.choice(_TIMES).replace(tzinfo=None)
    text = moment.isoformat(sep=" ")
    zone = g.pick("Z", "+00:00", "+01:00", "-05:30", "Z")
    return f"TIMESTAMP '{text}{zone}'"


def _zoneless_literal(g: Grammar) -> str:
    """A timestamp literal without its zone: read in the session's (:data:`ZONE`): the
    rows' instants as New York's wall clock, and its gap and overlap."""
    local = [t.astimezone(_zone()).replace(tzinfo=None) for t in _TIMES]
    moment = g.rng.choice([*local, *_TIMES, datetime.datetime(2024, 3, 10, 2, 30)])
    text = moment.replace(tzinfo=None).isoformat(sep=" ")
    return f"{g.pick('TIMESTAMP ', 'timestamp')}'{text}'"


def _zone() -> datetime.tzinfo:
    import zoneinfo

    return zoneinfo.ZoneInfo(ZONE)


def _compare(g: Grammar, depth: int) -> str:
    kind = g.rng.choice(
        ["integer", "integer", "number", "decimal", "string", "string", "date", "timestamp"]
    )
    op = g.pick("=", "<>", "!=", "<", "<=", ">", ">=", "<=>", "==")
    return f"{g.expr(kind, depth)} {op} {g.expr(kind, depth)}"


def _logic(g: Grammar, depth: int) -> str:
    op = g.pick("AND", "OR", "and", "or")
    return f"({g.expr('boolean', depth)} {op} {g.expr('boolean', depth)})"


def _not(g: Grammar, depth: int) -> str:
    return f"NOT ({g.expr('boolean', depth)})"


def _is_null(g: Grammar, depth: int) -> str:
    kind = g.rng.choice(["integer", "string", "number", "date", "boolean", "binary"])
    value = g.expr(kind, depth)  # a predicate before IS needs parentheses in Spark
    return f"{f'({value})' if kind == 'boolean' else value} IS {g.pick('', 'NOT ')}NULL"


def _is_true(g: Grammar, depth: int) -> str:
    return f"({g.expr('boolean', depth)}) IS {g.pick('TRUE', 'FALSE', 'NOT TRUE', 'NOT FALSE')}"


def _in(g: Grammar, depth: int) -> str:
    kind = g.rng.choice(["integer", "string", "number", "date", "decimal"])
    items = ", ".join(g.expr(kind, 0) for _ in range(g.rng.randint(1, 4)))
    if g.rng.random() < 0.2:
        items += ", NULL"
    return f"{g.expr(kind, depth)} {g.pick('IN', 'NOT IN')} ({items})"


def _between(g: Grammar, depth: int) -> str:
    kind = g.rng.choice(["integer", "number", "date", "string", "decimal"])
    return f"{g.expr(kind, depth)} {g.pick('BETWEEN', 'NOT BETWEEN')} {g.expr(kind, 0)} AND {g.expr(kind, 0)}"


def _like(g: Grammar, depth: int) -> str:
    pattern = g.rng.choice(
        [
            "a%",
            "%b",
            "_b%",
            "%\\\\%",
            "a\\\\_b",
            "%",
            "",
            "_",
            "A%",
            "%é%",
            "line%",
            "__",
            "%\\\\%%",
        ]
    )
    return f"{g.expr('string', depth)} {g.pick('LIKE', 'NOT LIKE', 'like')} '{pattern}'"


def _affix(g: Grammar, depth: int) -> str:
    name = g.pick("startswith", "endswith", "contains")
    return f"{name}({g.expr('string', depth)}, {g.expr('string', 0)})"


def _case(kind: str) -> Rule:
    def rule(g: Grammar, depth: int) -> str:
        if g.rng.random() < 0.3:
            subject = g.rng.choice(["integer", "string"])
            whens = " ".join(
                f"WHEN {g.expr(subject, 0)} THEN {g.expr(kind, depth)}"
                for _ in range(g.rng.randint(1, 2))
            )
            tail = f" ELSE {g.expr(kind, depth)}" if g.rng.random() < 0.7 else ""
            return f"CASE {g.expr(subject, depth)} {whens}{tail} END"
        whens = " ".join(
            f"WHEN {_condition(g, depth)} THEN {g.expr(kind, depth)}"
            for _ in range(g.rng.randint(1, 2))
        )
        tail = f" ELSE {g.expr(kind, depth)}" if g.rng.random() < 0.7 else ""
        return f"CASE {whens}{tail} END"

    return rule


def _condition(g: Grammar, depth: int) -> str:
    """A CASE condition: Spark refuses ``WHEN NULL`` (the table)."""
    text = g.expr("boolean", depth)
    return g.name("flag") if text == "NULL" else text


def _if(kind: str) -> Rule:
    return lambda g, depth: (
        f"if({g.expr('boolean', depth)}, {g.expr(kind, depth)}, {g.expr(kind, depth)})"
    )


def _coalesce(kind: str) -> Rule:
    def rule(g: Grammar, depth: int) -> str:
        name = g.pick("coalesce", "nvl", "ifnull")
        count = 2 if name != "coalesce" else g.rng.randint(2, 3)
        return f"{name}(" + ", ".join(g.expr(kind, depth) for _ in range(count)) + ")"

    return rule


def _nullif(kind: str) -> Rule:
    return lambda g, depth: f"nullif({g.expr(kind, depth)}, {g.expr(kind, 0)})"


def _arith(g: Grammar, depth: int) -> str:
    op = g.pick("+", "-", "*")
    return f"({g.expr('integer', depth)} {op} {g.expr('integer', depth)})"


def _arith_number(g: Grammar, depth: int) -> str:
    op = g.pick("+", "-", "*")
    return f"({g.expr('number', depth)} {op} {g.expr(g.pick('number', 'integer'), depth)})"


def _arith_decimal(g: Grammar, depth: int) -> str:
    op = g.pick("+", "-", "*")
    return f"({g.expr('decimal', depth)} {op} {g.expr(g.pick('decimal', 'integer'), 0)})"


def _divide(g: Grammar, depth: int) -> str:
    divisor = g.rng.choice(["2", "3", "-4", "0.5D", "7", "2.0D"])
    return f"({g.expr(g.pick('integer', 'number'), depth)} / {divisor})"


def _modulo(g: Grammar, depth: int) -> str:
    divisor = g.rng.choice(["2", "3", "-4", "7", "2.5D"])
    return f"({g.expr(g.pick('integer', 'integer', 'number'), depth)} {g.pick('%', '%')} {divisor})"


def _int_divide(g: Grammar, depth: int) -> str:
    return f"({g.expr('integer', depth)} div {g.rng.choice(['2', '3', '-4', '10'])})"


def _negate(g: Grammar, depth: int) -> str:
    return f"-({g.expr(g.pick('integer', 'number', 'decimal'), depth)})"


def _abs(g: Grammar, depth: int) -> str:
    return f"abs({g.expr(g.pick('integer', 'number', 'decimal'), depth)})"


def _round(g: Grammar, depth: int) -> str:
    return f"round({g.expr(g.pick('decimal', 'integer'), depth)}, {g.rng.choice([0, 1, 2, 3])})"


def _floor(g: Grammar, depth: int) -> str:
    return f"{g.pick('floor', 'ceil', 'ceiling')}({g.expr(g.pick('number', 'integer'), depth)})"


def _length(g: Grammar, depth: int) -> str:
    return f"{g.pick('length', 'char_length', 'character_length')}({g.expr('string', depth)})"


def _date_part(g: Grammar, depth: int) -> str:
    return f"{g.pick('year', 'month', 'day', 'dayofmonth')}({g.expr('date', depth)})"


def _zoned_part(g: Grammar, depth: int) -> str:
    name = g.pick("year", "month", "day", "dayofmonth", "hour")
    return f"{name}({g.expr('timestamp', depth)})"


#: Regular expressions as users write them (classes, anchors, quantifiers, alternation,
#: inline flags), over the rows' names (line breaks, \r\n, the Kelvin sign...).
_REGEXES = [
    "(?i)^abc$",
    "^a.c$",
    "^a",
    "b$",
    "c$",
    "\\\\d+",
    "^\\\\d{2}$",
    "\\\\w\\\\s",
    "^\\\\s*-?\\\\d+\\\\s*$",
    "[a-c]{2}",
    "[^a-z]",
    "(?i)[a-c]+$",
    "(?i)k",
    "(?i)s$",
    "ab|^e",
    "(ab|bc)+",
    "a.*b",
    "(?s)line.break",
    "line.break",
    "^.$",
    "^..$",
    ".$",
    "\\\\.",
    "(?i:a)B",
    "^(?:[0-9]{4})-[0-9]{2}",
    "",
    "é|ß",
    "\\\\W",
    "^\\\\S+$",
    "a?b??c*?",
    "^\\\\x{41}",
]


def _rlike(g: Grammar, depth: int) -> str:
    op = g.pick("RLIKE", "REGEXP", "rlike", "NOT RLIKE")
    return f"{g.expr('string', depth)} {op} '{g.rng.choice(_REGEXES)}'"


def _try_cast(g: Grammar, depth: int) -> str:
    target = g.pick("INT", "BIGINT", "TINYINT", "SMALLINT")
    source = g.pick("string", "string", "number", "decimal")
    return f"try_cast({g.expr(source, depth)} AS {target})"


def _round_double(g: Grammar, depth: int) -> str:
    value = g.expr("number", depth)
    if "f32" in value.lower() or "float" in value.lower():  # round of a float: refused
        value = f"CAST({value} AS DOUBLE)"
    return f"round({value}, {g.rng.choice([0, 1, 2, 3, 4])})"


def _bround_double(g: Grammar, depth: int) -> str:
    value = g.expr("number", depth)
    if "f32" in value.lower() or "float" in value.lower():  # bround of a float: refused
        value = f"CAST({value} AS DOUBLE)"
    return f"bround({value}, {g.rng.choice([0, 1, 2, 3, 4])})"


def _bround(g: Grammar, depth: int) -> str:
    places = g.rng.choice([", 0", ", 1", ", 2", ", 3", ""])
    return f"{g.pick('bround', 'BROUND')}({g.expr(g.pick('decimal', 'integer'), depth)}{places})"


def _divide_column(g: Grammar, depth: int) -> str:
    divisor = g.column("tinyint", "smallint", "int", "bigint", "double") or "qty"
    return f"({g.expr(g.pick('integer', 'number'), depth)} / {divisor})"


def _cast_to_int(g: Grammar, depth: int) -> str:
    source = g.pick("integer", "number", "decimal", "boolean")
    return f"CAST({g.expr(source, depth)} AS {g.pick('INT', 'BIGINT', 'SMALLINT', 'TINYINT')})"


def _cast_to_double(g: Grammar, depth: int) -> str:
    source = g.pick("integer", "number", "decimal")
    target = "DOUBLE" if source == "decimal" else g.pick("DOUBLE", "FLOAT")  # decimal to
    return f"CAST({g.expr(source, depth)} AS {target})"  # float: refused (table)


def _cast_to_decimal(g: Grammar, depth: int) -> str:
    source = g.pick("integer", "decimal")
    return (
        f"CAST({g.expr(source, depth)} AS DECIMAL({g.rng.choice(['12,3', '5,1', '38,10', '4,0'])}))"
    )


def _cast_to_string(g: Grammar, depth: int) -> str:
    source = g.pick("integer", "decimal", "date", "boolean")
    return f"CAST({g.expr(source, depth)} AS STRING)"


def _concat(g: Grammar, depth: int) -> str:
    if g.rng.random() < 0.4:
        return f"({g.expr('string', depth)} || {g.expr('string', depth)})"
    return "concat(" + ", ".join(g.expr("string", depth) for _ in range(g.rng.randint(2, 3))) + ")"


def _case_map(g: Grammar, depth: int) -> str:
    return f"{g.pick('lower', 'upper', 'lcase', 'ucase')}({g.expr('string', depth)})"


def _substring(g: Grammar, depth: int) -> str:
    pos = g.rng.choice([0, 1, 2, -1, -2, -5, 3, 10])
    if g.rng.random() < 0.3:
        return f"{g.pick('substring', 'substr')}({g.expr('string', depth)}, {pos})"
    return f"{g.pick('substring', 'substr')}({g.expr('string', depth)}, {pos}, {g.rng.choice([0, 1, 2, 3, -1, 100])})"


def _trim(g: Grammar, depth: int) -> str:
    return f"{g.pick('trim', 'ltrim', 'rtrim')}({g.expr('string', depth)})"


def _date_format(g: Grammar, depth: int) -> str:
    pattern = g.rng.choice(
        ["yyyy-MM", "yyyy-MM-dd", "yyyy", "MM/dd/yyyy", "dd", "yyyy-MM-dd HH:mm:ss"]
    )
    return f"date_format({g.expr('date', depth)}, '{pattern}')"


def _isnan(g: Grammar, depth: int) -> str:
    return f"isnan({g.expr('number', depth)})"


# constructs refused on some engine: the suite checks they are refused there (at
# construction or at the first batch), never evaluated differently
REFUSED: dict[str, Rule] = {
    "RLIKE a construct Java and Rust read apart": lambda g, d: (
        f"{g.expr('string', d)} RLIKE '"
        + g.pick(
            "(?<=a)b",
            "(a)\\\\1",
            "a*+",
            "\\\\Qa.\\\\E",
            "\\\\p{L}",
            "\\\\bab",
            "a$b",
            "(?m)^b",
            "a\\\\\\\\b",
        )
        + "'"
    ),
    "ILIKE": lambda g, d: f"{g.expr('string', d)} ILIKE 'a%'",
    "/ of a decimal": lambda g, d: f"{g.expr('decimal', d)} / 3 > 0.3",
    "CAST of a double to decimal": lambda g, d: (
        f"CAST({g.expr('number', d)} AS DECIMAL(10,2)) = 1.01"
    ),
    "CAST of a double to string": lambda g, d: f"CAST({g.expr('number', d)} AS STRING) = '1.0'",
    "string compared with a number": lambda g, d: f"{g.column('string')} = {g.expr('integer', 0)}",
    "current_date": lambda g, d: f"{g.column('date')} = current_date()",
    "other functions": lambda g, d: f"array_contains(array(1, 2), {g.column('int')})",
}


def _refused(g: Grammar, depth: int) -> str:
    key = g.rng.choice(sorted(REFUSED))
    g.used.add(key)
    return REFUSED[key](g, depth)


RULES: dict[str, Rule] = {
    "column": lambda g, depth: g.column("boolean") or "flag",
    "boolean literal": lambda g, depth: g.pick("true", "FALSE", "True"),
    "null literal": lambda g, depth: "NULL",
    "comparison": _compare,
    "and / or": _logic,
    "not": _not,
    "is null": _is_null,
    "is true / false": _is_true,
    "in": _in,
    "between": _between,
    "like": _like,
    "startswith / endswith / contains": _affix,
    "case": _case("boolean"),
    "if": _if("boolean"),
    "coalesce / nvl / ifnull": _coalesce("boolean"),
    "isnan": _isnan,
    "RLIKE": _rlike,
    "refused": _refused,
    # integers
    "integer column": lambda g, depth: g.column("tinyint", "smallint", "int", "bigint") or "qty",
    "integer literal": lambda g, depth: _int_literal(g),
    "+ - * of integers": _arith,
    "div": _int_divide,
    "% (modulo)": _modulo,
    "unary -": _negate,
    "abs": _abs,
    "length": _length,
    "year / month / day": _date_part,
    "year / month / day / hour of a timestamp": _zoned_part,
    "try_cast": _try_cast,
    "floor / ceil": _floor,
    "cast to integer": _cast_to_int,
    "case (integer)": _case("integer"),
    "coalesce (integer)": _coalesce("integer"),
    "nullif": _nullif("integer"),
    # doubles
    "double column": lambda g, depth: g.column("float", "double") or "Price",
    "double literal": lambda g, depth: _double_literal(g),
    "/ (division)": _divide,
    "/ by a column": _divide_column,
    "round of a double": _round_double,
    "bround of a double": _bround_double,
    "+ - * of doubles": _arith_number,
    "cast to double / float": _cast_to_double,
    "if (number)": _if("number"),
    # decimals
    "decimal column": lambda g, depth: g.column("decimal") or "amt",
    "decimal literal": lambda g, depth: _decimal_literal(g),
    "+ - * of decimals": _arith_decimal,
    "round": _round,
    "bround": _bround,
    "cast to decimal": _cast_to_decimal,
    # strings
    "string column": lambda g, depth: g.column("string") or "name",
    "string literal": lambda g, depth: _string_literal(g),
    "concat / ||": _concat,
    "lower / upper": _case_map,
    "substring / substr": _substring,
    "trim / ltrim / rtrim": _trim,
    "date_format": _date_format,
    "cast to string": _cast_to_string,
    "case (string)": _case("string"),
    "coalesce (string)": _coalesce("string"),
    # dates, timestamps, binary
    "date column": lambda g, depth: g.column("date") or "d",
    "date literal": lambda g, depth: _date_literal(g),
    "timestamp column": lambda g, depth: g.column("timestamp") or "ts",
    "timestamp literal": lambda g, depth: _timestamp_literal(g),
    "timestamp literal without zone": lambda g, depth: _zoneless_literal(g),
    "binary column": lambda g, depth: g.column("binary") or "bin",
    "binary literal": lambda g, depth: g.pick("X'00'", "X''", "X'6162'"),
}

#: kind -> (rule, weight, leaf?)
KIND_RULES: dict[str, list[tuple[str, float, bool]]] = {
    "boolean": [
        ("comparison", 10, False),
        ("and / or", 4, False),
        ("not", 1.5, False),
        ("is null", 2, False),
        ("is true / false", 0.5, False),
        ("in", 3, False),
        ("between", 2, False),
        ("like", 3, False),
        ("startswith / endswith / contains", 1, False),
        ("case", 0.7, False),
        ("if", 0.7, False),
        ("coalesce / nvl / ifnull", 0.7, False),
        ("isnan", 0.5, False),
        ("RLIKE", 2, False),
        ("refused", 0.07, False),
        ("column", 1, True),
        ("boolean literal", 0.3, True),
        ("null literal", 0.1, True),
    ],
    "integer": [
        ("integer column", 6, True),
        ("integer literal", 4, True),
        ("+ - * of integers", 2, False),
        ("div", 0.7, False),
        ("% (modulo)", 0.8, False),
        ("unary -", 0.5, False),
        ("abs", 0.5, False),
        ("length", 1, False),
        ("year / month / day", 1, False),
        ("year / month / day / hour of a timestamp", 0.8, False),
        ("try_cast", 0.6, False),
        ("floor / ceil", 0.6, False),
        ("cast to integer", 0.8, False),
        ("case (integer)", 0.4, False),
        ("coalesce (integer)", 0.6, False),
        ("nullif", 0.3, False),
        ("null literal", 0.1, True),
    ],
    "number": [
        ("double column", 5, True),
        ("double literal", 3, True),
        ("/ (division)", 1.5, False),
        ("/ by a column", 0.8, False),
        ("round of a double", 0.6, False),
        ("bround of a double", 0.6, False),
        ("+ - * of doubles", 1, False),
        ("cast to double / float", 0.8, False),
        ("if (number)", 0.4, False),
        ("integer column", 1, True),
    ],
    "decimal": [
        ("decimal column", 5, True),
        ("decimal literal", 4, True),
        ("+ - * of decimals", 1.2, False),
        ("round", 1, False),
        ("bround", 0.8, False),
        ("cast to decimal", 0.8, False),
    ],
    "string": [
        ("string column", 6, True),
        ("string literal", 4, True),
        ("concat / ||", 1.2, False),
        ("lower / upper", 1, False),
        ("substring / substr", 1.5, False),
        ("trim / ltrim / rtrim", 0.8, False),
        ("date_format", 0.6, False),
        ("cast to string", 0.6, False),
        ("case (string)", 0.4, False),
        ("coalesce (string)", 0.6, False),
        ("null literal", 0.1, True),
    ],
    "date": [("date column", 4, True), ("date literal", 3, True)],
    "timestamp": [
        ("timestamp column", 4, True),
        ("timestamp literal", 3, True),
        ("timestamp literal without zone", 1.5, True),
    ],
    "binary": [("binary column", 3, True), ("binary literal", 2, True)],
}


#: Drawn first in every run (constructs, the predicate): the ties of ``bround`` (half
#: even) and ``round`` (half up) of doubles and decimals, large values, NaN and null.
PINNED: list[tuple[str, str]] = [
    *(
        ("bround of a double", f"bround(Price, {d}) {op} round(Price, {d})")
        for d in range(5)
        for op in ("=", "<")
    ),
    ("bround of a double", "bround(Price, 0) IN (0.0D, 2.0D, -2.0D, 1000000000000000.0D)"),
    ("bround of a double", "bround(Price, 2) IN (0.12D, -0.12D, 2.68D, 1.0D, 1.02D)"),
    ("bround of a double", "bround(Price, 1) IN (0.5D, 1.5D, 2.5D, 0.1D, 1.0D, 2.7D)"),
    ("bround of a double", "isnan(bround(Price, 3)) OR bround(Price, 3) IS NULL"),
    ("bround of a double", "bround(Price, 4) = Price"),
    ("bround of a double", "bround(Price * 1e15, 0) > 1e300 OR bround(Price, 0) = 1e300"),
    ("bround", "bround(amt, 1) IN (2.5, -2.6, -0.5, 1.0, 0.0, 10.0)"),
    ("bround", "bround(amt, 0) IN (2, -2, 0, -1, 1, 100000000)"),
    ("bround", "bround(amt) = round(amt) OR bround(amt, 1) < round(amt, 1)"),
    ("round of a double", "round(Price, 0) IN (1.0D, 2.0D, 3.0D, -3.0D, 1000000000000001.0D)"),
]


def draw(rng: random.Random, count: int) -> list[Drawn]:
    """``count`` distinct predicates, each reading a column (the :data:`PINNED` ones
    first): one of constants only is refused by name (tests/test_predicate_meaning.py),
    and no one writes it."""
    grammar = Grammar(rng)
    pinned = [
        Drawn(
            t.replace("Price", QUALIFIER + "Price").replace("amt", QUALIFIER + "amt"),
            frozenset({c}),
        )
        for c, t in PINNED
    ]
    found: dict[str, Drawn] = {d.raw: d for d in pinned}
    attempts = 0
    while len(found) < count and attempts < count * 20:
        attempts += 1
        drawn = grammar.predicate(depth=rng.choice([1, 2, 2, 3, 3, 4]))
        if _reads_columns(drawn.plain):
            found.setdefault(drawn.raw, drawn)
    return list(found.values())


def _reads_columns(text: str) -> bool:
    import sqlglot

    from deltasink.shapes.sparksql.base import reads_columns

    try:
        return reads_columns(sqlglot.parse_one(text, read="spark"))
    except sqlglot.errors.ParseError:
        return True  # refused when built, by name
