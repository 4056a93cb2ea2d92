"""Spark's grammar where sqlglot's is wider: Spark takes one predicate (``IS NULL``,
``IN (...)``, ``LIKE 'p'``, ``BETWEEN a AND b``) after a value and nothing after it, so
``x LIKE 'a%' IS NULL`` or ``a IS NULL = b`` do not parse in Spark; sqlglot reads them
(adding parentheses). Such a text is refused, not given a meaning Spark does not have."""

from __future__ import annotations

from sqlglot.dialects.spark import Spark

__all__ = ["chained"]

_PREDICATE_STARTS = {"IS", "LIKE", "ILIKE", "RLIKE", "IN", "BETWEEN"}
_AFTER = _PREDICATE_STARTS | {"EQ", "NEQ", "LT", "LTE", "GT", "GTE", "NULLSAFE_EQ"}
_SIMPLE = {"NUMBER", "STRING", "VAR", "NULL", "TRUE", "FALSE"}


def chained(text: str) -> str | None:
    """The token that follows a complete predicate (``IS NULL``, ``IN (...)``, ``LIKE
    'p'``, ``BETWEEN a AND b``) at the same depth and starts another predicate or a
    comparison, which Spark's grammar does not take (sqlglot does); ``None`` if none."""
    tokens = [t.token_type.name for t in Spark().tokenize(text)]
    texts = [t.text.upper() for t in Spark().tokenize(text)]
    i = 0
    while i < len(tokens):
        end = _predicate_end(tokens, i)
        if end is not None:
            following = end
            if following < len(tokens):
                kind = tokens[following]
                if kind == "NOT" and following + 1 < len(tokens):
                    kind = tokens[following + 1]
                if kind in _AFTER:
                    return texts[following]
        i += 1
    return None


def _predicate_end(tokens: list[str], i: int) -> int | None:
    """Where the predicate starting at token ``i`` ends (the index after it), for the
    forms whose end is plain; ``None`` otherwise."""
    kind = tokens[i]
    if kind == "IS":
        j = i + 1
        if j < len(tokens) and tokens[j] == "NOT":
            j += 1
        if j < len(tokens) and tokens[j] in ("NULL", "TRUE", "FALSE", "UNKNOWN"):
            return j + 1
        return None
    if kind == "IN" and i + 1 < len(tokens) and tokens[i + 1] == "L_PAREN":
        depth, j = 0, i + 1
        while j < len(tokens):
            depth += {"L_PAREN": 1, "R_PAREN": -1}.get(tokens[j], 0)
            if depth == 0:
                return j + 1
            j += 1
        return None
    if kind in ("LIKE", "ILIKE", "RLIKE") and i + 1 < len(tokens) and tokens[i + 1] == "STRING":
        j = i + 2
        if j + 1 < len(tokens) and tokens[j] == "ESCAPE" and tokens[j + 1] == "STRING":
            j += 2
        return j
    simple = i + 4 <= len(tokens) and tokens[i + 1] in _SIMPLE and tokens[i + 3] in _SIMPLE
    if kind == "BETWEEN" and simple and tokens[i + 2] == "AND":
        return i + 4
    return None
