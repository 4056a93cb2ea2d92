"""String functions and patterns in a predicate (part of :class:`~.walker.Walker`).

``LIKE`` patterns are read with Spark's rules (``_`` one character, ``%`` any, the
escape character only before ``_``, ``%`` or itself; anything else is Spark's error,
refused here) and written out again with ``\\`` escapes, which all three engines read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import sqlglot.expressions as exp

from .base import Base, Typed
from .literals import Refusal, emit, integral_bounds
from .types import BOOLEAN, INT, STRING, SqlType

__all__ = ["Strings", "like_tokens"]


def like_tokens(pattern: str, escape: str = "\\") -> list[tuple[str, str]]:
    """``pattern`` as Spark reads it: ``("lit", c)``, ``("one", "")`` or ``("any", "")``.

    Raises:
        Refusal: Spark refuses the pattern (an escape before another character, or at
            the end).
    """
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 >= len(pattern) or pattern[i + 1] not in ("_", "%", escape):
                raise Refusal(
                    f"the LIKE pattern {pattern!r}",
                    f"Spark refuses the escape character {escape!r} before anything but "
                    "_, % or itself, and at the end",
                    f"escape only _, % and {escape}",
                )
            tokens.append(("lit", pattern[i + 1]))
            i += 2
            continue
        tokens.append(("one", "") if c == "_" else ("any", "") if c == "%" else ("lit", c))
        i += 1
    return tokens


def _like_text(tokens: list[tuple[str, str]]) -> str:
    out = []
    for kind, char in tokens:
        if kind == "one":
            out.append("_")
        elif kind == "any":
            out.append("%")
        else:
            out.append("\\" + char if char in ("_", "%", "\\") else char)
    return "".join(out)


class Strings(Base):
    """String rules of the walker."""

    def text(self, node: exp.Expr | None, name: str) -> Typed:
        assert node is not None
        part = self.walk(node)
        if part.type.name not in ("string", "void", "unknown"):
            raise Refusal(
                f"{name} of a {part.type}",
                "Spark would convert it to text first, by rules that differ per engine",
                f"apply {name} to a string column",
            )
        return part

    def case_map(self, node: exp.Lower | exp.Upper) -> Typed:
        name = "lower" if isinstance(node, exp.Lower) else "upper"
        part = self.text(node.this, name)
        return Typed(f"{name}({part.sql})", STRING)

    def length(self, node: exp.Length) -> Typed:
        part = self.walk(node.this)
        if part.type.name == "binary":
            sql = f"length({part.sql})" if self.dialect == "spark" else f"octet_length({part.sql})"
            return Typed(sql, INT)
        part = self.text(node.this, "length")
        if self.dialect == "spark":
            return Typed(f"length({part.sql})", INT)
        return Typed(f"character_length({part.sql})", INT)

    def substring(self, node: exp.Substring) -> Typed:
        part = self.text(node.this, "substring")
        start, count = node.args.get("start"), node.args.get("length")
        values: list[int | None] = []
        for arg in (start, count):
            if arg is None:
                values.append(None)
                continue
            typed = self.walk(arg)
            if not (typed.literal and isinstance(typed.value, int)):
                raise Refusal(
                    "substring with a position or length that is not an integer literal",
                    "deltasink translates Spark's substring for literal positions",
                    "write substring(s, 2, 3)",
                )
            values.append(typed.value)
        pos, length = values
        assert pos is not None
        # Spark's meaning spelled out with positions >= 1, for Sail as well (it reads
        # negative positions and lengths its own way)
        return Typed(_substr(part.sql, pos, length), STRING)

    def concat(self, node: exp.Concat | exp.DPipe) -> Typed:
        if isinstance(node, exp.DPipe):
            args = [node.this, node.expression]
        else:
            args = list(node.expressions)
            if not args:
                raise Refusal("concat()", "it takes arguments", "concat strings")
        parts = [self.text(a, "concat") for a in args]
        if self.dialect == "spark":
            return Typed("concat(" + ", ".join(p.sql for p in parts) + ")", STRING)
        return Typed("(" + " || ".join(p.sql for p in parts) + ")", STRING)

    def trim(self, node: exp.Trim) -> Typed:
        if node.args.get("expression") is not None or node.args.get("collation"):
            raise Refusal(
                "trim of given characters", "deltasink trims spaces only", "write trim(s)"
            )
        position = str(node.args.get("position") or "BOTH").upper()
        name = {"LEADING": "ltrim", "TRAILING": "rtrim"}.get(position, "trim")
        part = self.text(node.this, name)
        return Typed(f"{name}({part.sql})", STRING)

    def affix(self, node: exp.StartsWith | exp.EndsWith | exp.Contains) -> Typed:
        name = {exp.StartsWith: "startswith", exp.EndsWith: "endswith"}.get(type(node), "contains")
        left, right = self.text(node.this, name), self.text(node.expression, name)
        if self.dialect == "spark":
            return Typed(f"{name}({left.sql}, {right.sql})", BOOLEAN)
        if name == "contains":
            return Typed(f"(strpos({left.sql}, {right.sql}) > 0)", BOOLEAN)
        function = "starts_with" if name == "startswith" else "ends_with"
        return Typed(f"{function}({left.sql}, {right.sql})", BOOLEAN)

    def like(self, node: exp.Like | exp.Escape) -> Typed:
        escape = "\\"
        if isinstance(node, exp.Escape):
            marker = self.walk(node.expression)
            if not (marker.literal and isinstance(marker.value, str) and len(marker.value) == 1):
                raise Refusal("LIKE ... ESCAPE", "the escape must be one character", "ESCAPE '!'")
            escape, node = marker.value, node.this
            if not isinstance(node, exp.Like):
                raise Refusal("ESCAPE", "only LIKE takes it", "write x LIKE 'p' ESCAPE '!'")
        assert isinstance(node, exp.Like)
        if isinstance(node.expression, (exp.Any, exp.All)):
            raise Refusal(
                "LIKE ANY / ALL", "deltasink translates LIKE 'pattern' only", "join LIKEs with OR"
            )
        self.no_chain(node)
        value = self.text(node.this, "LIKE")
        pattern = self.walk(node.expression)
        if not (pattern.literal and isinstance(pattern.value, str)):
            raise Refusal(
                "LIKE with a pattern that is not a string literal",
                "deltasink reads the pattern by Spark's rules before handing it over",
                "write x LIKE 'abc%'",
            )
        text = _like_text(like_tokens(pattern.value, escape))
        sql = f"({value.sql} LIKE {emit(text, STRING, self.dialect)})"
        if node.args.get("negate"):
            sql = f"(NOT {sql})"
        return Typed(sql, BOOLEAN)

    def no_chain(self, node: exp.Expr) -> None:  # pragma: no cover - the walker's
        raise NotImplementedError

    def nullif(self, node: exp.Nullif) -> Typed:
        left = self.walk(node.this)
        a, b = (self.nan_safe(p) for p in self.unify([left, self.walk(node.expression)], "nullif"))
        null = emit(None, left.type, self.dialect)
        return Typed(f"(CASE WHEN ({a.sql} = {b.sql}) THEN {null} ELSE {left.sql} END)", left.type)

    def rlike(self, node: exp.RegexpLike) -> Typed:
        """``RLIKE``: the pattern rewritten so that Java (Spark) and Rust (Sail,
        DataFusion) read it alike (:mod:`.regex`), or refused."""
        from .regex import translate_regex

        if node.args.get("flag") is not None:
            raise Refusal("regexp_like with flags", "not Spark SQL", "write (?i) in the pattern")
        self.no_chain(node)
        value = self.text(node.this, "RLIKE")
        pattern = self.walk(node.expression)
        if not (pattern.literal and isinstance(pattern.value, str)):
            raise Refusal(
                "RLIKE with a pattern that is not a string literal",
                "deltasink rewrites the pattern before handing it over",
                "write x RLIKE '^ab+c'",
            )
        rewritten = emit(translate_regex(pattern.value), STRING, self.dialect)
        op = "RLIKE" if self.dialect == "spark" else "~"
        return Typed(f"({value.sql} {op} {rewritten})", BOOLEAN)

    def refuse_regex(self, node: exp.ILike) -> Typed:
        raise Refusal(
            "ILIKE",
            "case-insensitive matching differs between the engines for some letters",
            "write LIKE patterns, lower(x) LIKE 'abc%', or startswith",
        )

    def parse_integer(self, sql: str, target: SqlType) -> str:
        """Spark's ``try_cast`` of the string ``sql`` to the integer type ``target``."""
        space = "[\\x{0}-\\x{20}\\x{7F}]"
        match = "RLIKE" if self.dialect == "spark" else "~"
        flags = "" if self.dialect == "spark" else ", 'g'"
        shape = emit(f"^{space}*[+-]?[0-9]{{1,38}}{space}*\\z", STRING, self.dialect)
        longer = emit(f"^{space}*[+-]?[0-9]+{space}*\\z", STRING, self.dialect)
        wide = SqlType("decimal", 38, 0)
        digits = f"regexp_replace({sql}, {emit(space, STRING, self.dialect)}, ''{flags})"
        value = self.cast_sql(digits, STRING, wide)
        low, high = (emit(v, wide, self.dialect) for v in integral_bounds(target))
        inside = f"(CASE WHEN {value} BETWEEN {low} AND {high} THEN {self.cast_sql(value, wide, target)} END)"
        skip = " OR ".join(f"({s})" for s in self.skips if s)
        fails = self.cast_sql(f"({sql} || ' has over 38 digits')", STRING, target)
        if skip:
            fails = f"(CASE WHEN {skip} THEN {emit(None, target, self.dialect)} ELSE {fails} END)"
        return (
            f"(CASE WHEN {sql} {match} {shape} THEN {inside} "
            f"WHEN {sql} {match} {longer} THEN {fails} END)"
        )

    HANDLERS: ClassVar[dict[type, Any]] = {}


def _substr(text: str, pos: int, length: int | None) -> str:
    """Spark's ``substring(text, pos[, length])`` for DataFusion, whose ``substr`` is the
    SQL standard's (a window over positions ``pos .. pos + length - 1``, 1-based)."""
    empty = f"substr({text}, 1, 0)"
    if length is not None and length <= 0:
        return empty
    if pos >= 0:
        first = max(pos, 1)
        return (
            f"substr({text}, {first})" if length is None else f"substr({text}, {first}, {length})"
        )
    size = f"character_length({text})"
    if length is None:
        return f"(CASE WHEN {size} + ({pos}) >= 0 THEN substr({text}, {size} + ({pos + 1})) ELSE {text} END)"
    return (
        f"(CASE WHEN {size} + ({pos}) >= 0 THEN substr({text}, {size} + ({pos + 1}), {length}) "
        f"WHEN {size} + ({pos + length}) > 0 THEN substr({text}, 1, {size} + ({pos + length})) "
        f"ELSE {empty} END)"
    )


Strings.HANDLERS = {
    exp.Lower: Strings.case_map,
    exp.Upper: Strings.case_map,
    exp.Length: Strings.length,
    exp.Substring: Strings.substring,
    exp.Concat: Strings.concat,
    exp.DPipe: Strings.concat,
    exp.Trim: Strings.trim,
    exp.StartsWith: Strings.affix,
    exp.EndsWith: Strings.affix,
    exp.Contains: Strings.affix,
    exp.Like: Strings.like,
    exp.Escape: Strings.like,
    exp.Nullif: Strings.nullif,
    exp.RegexpLike: Strings.rlike,
    exp.ILike: Strings.refuse_regex,
}
