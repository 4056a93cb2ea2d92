"""The constructs a predicate may use: the allow-list's table, one row per construct.

Each row names a construct as users write it, an example over :data:`EXAMPLE_COLUMNS`,
and what deltasink does for Sail and delta-rs besides what the walker decides. The
status columns of ``docs/predicates.md`` are not written by hand: ``tools/predicate_table.py``
runs each example through :func:`~.fields.check`/:func:`~.fields.translate` for each
engine and prints the outcome (the text DataFusion gets, or the refusal), and a test
fails when the committed table differs. The differential suite's grammar
(``tests/predicate_grammar.py``) has a rule for every row (a test checks the keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["CONSTRUCTS", "EXAMPLE_COLUMNS", "Construct"]

#: The columns the examples use (Spark types through Arrow, as in a Delta table).
EXAMPLE_COLUMNS = pa.schema(
    [  # type: ignore[arg-type]  # pyarrow-stubs: a list of (name, DataType) pairs
        ("qty", pa.int32()),
        ("big", pa.int64()),
        ("price", pa.float64()),
        ("amount", pa.decimal128(10, 2)),
        ("name", pa.string()),
        ("Zone", pa.string()),
        ("flag", pa.bool_()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("data", pa.binary()),
    ]
)


@dataclass(frozen=True)
class Construct:
    """One row: ``key`` (the grammar's rule), ``example`` (a predicate), ``note`` (how
    deltasink keeps Spark's meaning, or why it refuses, in a few words)."""

    key: str
    example: str
    note: str


CONSTRUCTS: tuple[Construct, ...] = (
    Construct(
        "column", "flag", "columns resolve case-insensitively, as in Spark (`zone` is `Zone`)"
    ),
    Construct("boolean literal", "flag = true", ""),
    Construct("null literal", "name <=> NULL", ""),
    Construct("comparison", "qty >= 3", "operands converted to the type Spark compares them in"),
    Construct(
        "and / or",
        "qty > 1 AND (flag OR name = 'x')",
        "an operand that can fail is evaluated only when Spark would",
    ),
    Construct("not", "NOT (qty = 3)", ""),
    Construct("is null", "name IS NOT NULL", ""),
    Construct("is true / false", "(qty > 1) IS NOT TRUE", ""),
    Construct(
        "in", "qty IN (1, 2, 3)", "written as `=` joined by OR: -0.0 is in (0.0) as in Spark"
    ),
    Construct("between", "day BETWEEN DATE '2024-01-01' AND DATE '2024-12-31'", ""),
    Construct("like", "name LIKE 'a\\\\_%'", "pattern read by Spark's rules, escapes written out"),
    Construct("startswith / endswith / contains", "startswith(name, 'ab')", ""),
    Construct("case", "CASE WHEN qty > 2 THEN flag ELSE false END", ""),
    Construct("if", "if(qty > 2, flag, false)", ""),
    Construct("coalesce / nvl / ifnull", "coalesce(flag, false)", ""),
    Construct("isnan", "isnan(price)", "false for null, as in Spark"),
    Construct("integer column", "qty = 3", ""),
    Construct("integer literal", "big = 3000000000", "typed as Spark types it (int, else bigint)"),
    Construct(
        "+ - * of integers",
        "qty + 1 > 10",
        "computed exactly; an overflow fails, as in Spark's ANSI mode",
    ),
    Construct("div", "qty div 2 = 1", "integer division, truncating"),
    Construct("% (modulo)", "qty % 2 = 1", "sign of the dividend; the divisor a non-zero literal"),
    Construct("unary -", "-qty < 0", "an overflow fails"),
    Construct("abs", "abs(qty) > 1", "an overflow fails"),
    Construct("length", "length(name) > 3", "characters, not bytes"),
    Construct(
        "year / month / day",
        "year(day) = 2024",
        "of a date (a string literal: converted to a date, as in Spark)",
    ),
    Construct("floor / ceil", "floor(price) = 1", "a bigint; NaN is 0, beyond the range its ends"),
    Construct("cast to integer", "CAST(amount AS INT) = 1", "truncates; out of range fails"),
    Construct("case (integer)", "CASE WHEN flag THEN qty ELSE 0 END > 1", ""),
    Construct("coalesce (integer)", "coalesce(qty, 0) > 1", ""),
    Construct("nullif", "nullif(qty, 0) IS NULL", ""),
    Construct("double column", "price > 1.5D", "NaN is one value, above every number, as in Spark"),
    Construct("double literal", "price = 1e3", "1e3 and 1.5D are doubles in Spark"),
    Construct(
        "/ (division)",
        "qty / 2 = 1.5",
        "divides as doubles (3 / 2 is 1.5); the divisor a non-zero literal",
    ),
    Construct("+ - * of doubles", "price * 2 > 3", ""),
    Construct("cast to double / float", "CAST(qty AS DOUBLE) > 1", ""),
    Construct("if (number)", "if(flag, price, 0.0D) > 1", ""),
    Construct("decimal column", "amount >= 10", ""),
    Construct("decimal literal", "qty * 0.1 = 0.3", "0.1 is a decimal in Spark: exact arithmetic"),
    Construct("+ - * of decimals", "amount * 2 > 10", "Spark's result precision and scale"),
    Construct("round", "round(amount, 1) = 1.5", "of decimals and integers: half up"),
    Construct(
        "bround",
        "bround(amount, 1) = 2.6",
        "of decimals and integers: half even (2.55 is 2.6, 2.65 is 2.6)",
    ),
    Construct("cast to decimal", "CAST(qty AS DECIMAL(12,2)) > 1", "half up; out of range fails"),
    Construct("string column", "name = 'abc'", ""),
    Construct("string literal", "name = 'it\\'s'", "escapes read as Spark reads them"),
    Construct("concat / ||", "concat(name, Zone) IS NULL", "null when any argument is null"),
    Construct("lower / upper", "lower(name) = 'abc'", ""),
    Construct(
        "substring / substr",
        "substring(name, 0, 2) = 'ab'",
        "Spark's positions: 0 is 1, negative from the end",
    ),
    Construct("trim / ltrim / rtrim", "trim(name) = 'abc'", "spaces only"),
    Construct(
        "date_format",
        "date_format(day, 'yyyy-MM') = '2024-01'",
        "pattern letters yyyy MM dd HH mm ss",
    ),
    Construct(
        "cast to string", "CAST(qty AS STRING) = '3'", "of integers, decimals, dates and booleans"
    ),
    Construct("case (string)", "CASE WHEN flag THEN name END = 'x'", ""),
    Construct("coalesce (string)", "coalesce(name, '') = ''", ""),
    Construct(
        "date column",
        "day >= '2024-01-01'",
        "a string compared with a date is converted as Spark converts it",
    ),
    Construct("date literal", "day = DATE '2024-1-5'", ""),
    Construct(
        "timestamp column", "ts >= TIMESTAMP '2024-01-01 00:00:00Z'", "microseconds, an instant"
    ),
    Construct(
        "timestamp literal",
        "ts < TIMESTAMP '2024-01-01 12:00:00+01:00'",
        "with its zone (Z or +hh:mm), an instant",
    ),
    Construct(
        "timestamp literal without zone",
        "ts < TIMESTAMP '2024-01-01 12:00:00'",
        "read in the recorded session time zone (`time_zone`), as Spark reads it",
    ),
    Construct(
        "year / month / day / hour of a timestamp",
        "hour(ts) = 12",
        "in the recorded session time zone, whichever session evaluates it",
    ),
    Construct(
        "RLIKE",
        "name RLIKE '(?i)^a.c$'",
        "Java's pattern written so Rust reads it alike: `.`, `\\d \\w \\s`, a final `$` "
        "and `(?i)` spelled out",
    ),
    Construct(
        "round of a double",
        "round(price, 2) = 1.01",
        "Spark's: the shortest decimal text rounded half up (round(1.005, 2) is 1.01)",
    ),
    Construct(
        "bround of a double",
        "bround(price, 2) = 0.12",
        "Spark's: the shortest decimal text rounded half even (bround(0.125, 2) is 0.12)",
    ),
    Construct(
        "/ by a column",
        "qty / big > 1",
        "a zero divisor fails, as in Spark's ANSI mode (DataFusion: infinity)",
    ),
    Construct(
        "try_cast",
        "try_cast(name AS INT) = 1",
        "of a string or number to an integer: null where Spark's conversion fails",
    ),
    Construct("binary column", "data = X'00'", ""),
    Construct("binary literal", "data <> X'6162'", ""),
    # refused: the examples show why, in the table
    Construct(
        "RLIKE a construct Java and Rust read apart",
        "name RLIKE '(?<=a)b'",
        "look-around, back-references, possessive, \\Q...\\E, \\p{..}, \\b, $ before more",
    ),
    Construct("ILIKE", "name ILIKE 'a%'", ""),
    Construct("/ of a decimal", "amount / 3 > 0.3", "Sail and DataFusion round to other scales"),
    Construct(
        "CAST of a double to decimal",
        "CAST(price AS DECIMAL(10,2)) = 1.01",
        "Spark converts the decimal text",
    ),
    Construct("CAST of a double to string", "CAST(price AS STRING) = '1.0'", "1.0E10 in Spark"),
    Construct("string compared with a number", "name = 3", "ANSI mode decides"),
    Construct("current_date", "day = current_date()", "not deterministic: a recovery would differ"),
    Construct("other functions", "array_contains(array(1, 2), qty)", "not in this table"),
)
