"""``RLIKE``: a Java regular expression (Spark's) rewritten as one that Java and Rust's
``regex`` crate (Sail's and DataFusion's) read alike, or refused.

Spark evaluates ``s RLIKE p`` as Java's ``Pattern.compile(p).matcher(s).find()``; Sail
and DataFusion as Rust's ``Regex::new(p).is_match(s)``. Both find a match anywhere and
agree on alternation, groups, quantifiers (greedy and lazy) and ``^`` (the start of the
text), but not on these, which the rewrite spells out as explicit classes and anchors:

* ``.`` excludes the line terminators ``\\n \\r \\u0085 \\u2028 \\u2029`` in Java, only
  ``\\n`` in Rust (``(?s)``: every character in both);
* ``\\d \\w \\s`` are ASCII in Java, Unicode in Rust;
* ``$`` (and ``\\Z``) match at the end or before a final line terminator in Java, at the
  end only in Rust: written as an optional terminator then ``\\z``, which only a ``$``
  ending the pattern allows (and only after what cannot end with ``\\r``: Java does not
  match between ``\\r`` and ``\\n``);
* ``(?i)`` folds ASCII letters only in Java, every letter in Rust (``k`` matches the
  Kelvin sign): written as classes of both ASCII cases.

Refused: look-around, back-references, possessive quantifiers and atomic groups (Rust
has none), ``\\Q...\\E``, Unicode classes (``\\p{...}``), ``\\b``, ``\\R`` and the like,
nested classes and class intersections, the flags other than ``i`` and ``s``, a ``$``
before more pattern, counts above 100.
"""

from __future__ import annotations

from dataclasses import dataclass

from .literals import Refusal

__all__ = ["translate_regex"]

_MAX = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)
_TERMINATORS = [(0x0A, 0x0A), (0x0D, 0x0D), (0x85, 0x85), (0x2028, 0x2029)]
_CLASSES = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "a": 0x07, "e": 0x1B}
_END = "(?:\\x{D}\\x{A}|[\\x{A}\\x{D}\\x{85}\\x{2028}\\x{2029}])?\\z"
_MAX_COUNT = 100
_WHY = {
    "b": "word boundaries (\\b, \\B) follow other word characters in Java and Rust",
    "Q": "Rust's regex has no \\Q...\\E quoting",
    "p": "Java's and Rust's Unicode classes differ",
    "P": "Java's and Rust's Unicode classes differ",
    "k": "Rust's regex has no back-references",
    "G": "Rust's regex has no \\G",
}


def _negate(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, low = [], 0
    for a, b in _merge(ranges):
        if a > low:
            out.append((low, a - 1))
        low = b + 1
    if low <= _MAX:
        out.append((low, _MAX))
    return out


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _fold(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` with the other case of each ASCII letter in them (Java's
    ``CASE_INSENSITIVE`` without ``UNICODE_CASE``)."""
    extra = []
    for a, b in ranges:
        for c in range(max(a, 0x41), min(b, 0x7A) + 1):
            if chr(c).isalpha():
                extra.append((ord(chr(c).swapcase()),) * 2)
    return _merge(ranges + extra)


def _char(c: int) -> str:
    if chr(c).isascii() and chr(c).isalnum():
        return chr(c)
    return f"\\x{{{c:X}}}"


def _emit_set(ranges: list[tuple[int, int]]) -> str:
    parts = []
    for a, b in _merge(ranges):
        for lo, hi in _without_surrogates(a, b):
            parts.append(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}")
    if not parts:
        raise Refusal("an empty character class", "it matches nothing", "drop it")
    return "[" + "".join(parts) + "]"


def _without_surrogates(a: int, b: int) -> list[tuple[int, int]]:
    low, high = _SURROGATES
    if b < low or a > high:
        return [(a, b)]
    return [(x, y) for x, y in ((a, low - 1), (high + 1, b)) if x <= y]


@dataclass
class _Part:
    """A translated piece: its text, whether it can match nothing, whether its last
    character can be ``\\r``, whether it is ``$`` (or holds one), and whether it anchors
    at the start."""

    text: str
    empty: bool = False
    cr: bool = False
    dollar: bool = False
    start: bool = False
    chars: list[tuple[int, int]] | None = None


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p, self.i = pattern, 0

    def fail(self, what: str, why: str) -> Refusal:
        return Refusal(
            f"the regular expression {self.p!r} ({what})",
            why,
            "write it with classes, anchors ^ and a final $, quantifiers, groups, "
            "alternation and the flags (?i) and (?s)",
        )

    def peek(self, n: int = 0) -> str:
        return self.p[self.i + n] if self.i + n < len(self.p) else ""

    def alternation(self, flags: set[str], depth: int) -> _Part:
        branches = [self.sequence(flags, depth)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(flags, depth))
        return _Part(
            "|".join(b.text for b in branches),
            empty=any(b.empty for b in branches),
            cr=any(b.cr for b in branches),
            dollar=any(b.dollar for b in branches),
        )

    def sequence(self, flags: set[str], depth: int) -> _Part:
        items: list[_Part] = []
        while self.peek() and self.peek() not in "|)":
            if items and items[-1].dollar:
                raise self.fail("$ before more pattern", "Java's $ and Rust's differ there")
            item = self.atom(flags, depth)
            if item is None:
                continue
            item = self.quantified(item)
            if item.dollar:
                if depth:
                    raise self.fail("$ in a group", "Java's $ and Rust's differ there")
                if self.ends_with_cr(items):
                    raise self.fail(
                        "$ after what can end with \\r",
                        "Java's $ does not match between \\r and \\n; Rust's rewrite would",
                    )
            items.append(item)
        empty = all(i.empty for i in items)
        return _Part(
            "".join(i.text for i in items) or "(?:)",
            empty=empty,
            cr=self.ends_with_cr(items),
            dollar=bool(items) and items[-1].dollar,
        )

    @staticmethod
    def ends_with_cr(items: list[_Part]) -> bool:
        for item in reversed(items):
            if item.cr:
                return True
            if item.start or not item.empty:
                return False
        return False

    def quantified(self, item: _Part) -> _Part:
        c = self.peek()
        if c not in ("*", "+", "?", "{"):
            return item
        if item.dollar or item.start or item.text == "\\z":
            raise self.fail("a quantified anchor", "deltasink does not repeat anchors")
        if c == "{":
            end = self.p.find("}", self.i)
            body = self.p[self.i + 1 : end] if end > 0 else ""
            low, _, high = body.partition(",")
            if not low.isdigit() or (high and not high.isdigit()):
                raise self.fail("a { that is no count", "Java refuses it")
            if max(int(low), int(high or 0)) > _MAX_COUNT:
                raise self.fail("a count above 100", "Rust's regex refuses large programs")
            if high and int(high) < int(low):
                raise self.fail("a count whose maximum is below its minimum", "Java refuses it")
            text, self.i, minimum = "{" + body + "}", end + 1, int(low)
        else:
            text, self.i, minimum = c, self.i + 1, 0 if c in "*?" else 1
        if self.peek() == "+":
            raise self.fail("a possessive quantifier", "Rust's regex has no possessive quantifiers")
        if self.peek() == "?":
            text, self.i = text + "?", self.i + 1
        # an unbounded repetition of a class holding \n as well as \r: where it ends at a
        # \r before a final \n, Java's match takes the \n too (\s*$)
        unbounded = c in "*+" or text.rstrip("?").endswith(",}")
        newline = item.chars is not None and any(a <= 0x0A <= b for a, b in item.chars)
        cr = item.cr and not (unbounded and newline)
        return _Part(f"(?:{item.text}){text}", empty=item.empty or minimum == 0, cr=cr)

    def atom(self, flags: set[str], depth: int) -> _Part | None:
        c = self.peek()
        self.i += 1
        if c == "(":
            return self.group(flags, depth)
        if c == "[":
            return self.charset(self.klass(flags), flags)
        if c == ".":
            dot = [(0, _MAX)] if "s" in flags else _negate(_TERMINATORS)
            return self.charset(dot, set())
        if c == "^":
            return _Part("^", empty=True, start=True)
        if c == "$":
            return _Part(_END, empty=True, dollar=True)
        if c in ("*", "+", "?", "{"):
            raise self.fail(f"a {c} with nothing to repeat", "Java refuses it")
        if c == "\\":
            return self.escape(flags)
        return self.charset([(ord(c), ord(c))], flags)

    def charset(self, ranges: list[tuple[int, int]], flags: set[str]) -> _Part:
        folded = _fold(ranges) if "i" in flags else _merge(ranges)
        if any(a <= 0x5C <= b for a, b in folded) and not any(a < 0x5C < b for a, b in folded):
            raise self.fail(
                "a backslash",
                "DataFusion's regex reads one apart (measured: 'a\\\\b' matched 'ab', "
                "differential suite, seed 1116029113)",
            )
        if len(folded) == 1 and folded[0][0] == folded[0][1]:
            text = _char(folded[0][0])
        else:
            text = _emit_set(folded)
        return _Part(text, cr=any(a <= 0x0D <= b for a, b in folded), chars=folded)

    def escape(self, flags: set[str]) -> _Part:
        c = self.peek()
        if c == "A":
            self.i += 1
            return _Part("^", empty=True, start=True)
        if c == "z":
            self.i += 1
            return _Part("\\z", empty=True)
        if c == "Z":
            self.i += 1
            return _Part(_END, empty=True, dollar=True)
        return self.charset(self.class_escape(), flags)

    def class_escape(self) -> list[tuple[int, int]]:
        """The characters of the escape at ``self.i`` (after its backslash)."""
        c = self.peek()
        self.i += 1
        if c.lower() in _CLASSES:
            ranges = _CLASSES[c.lower()]
            return _negate(ranges) if c.isupper() else list(ranges)
        if c in _ESCAPES:
            return [(_ESCAPES[c],) * 2]
        if c == "x" or c == "u":
            if c == "x" and self.peek() == "{":
                end = self.p.find("}", self.i)
                digits, self.i = self.p[self.i + 1 : end], end + 1
            else:
                size = 2 if c == "x" else 4
                digits, self.i = self.p[self.i : self.i + size], self.i + size
            try:
                point = int(digits, 16)
            except ValueError:
                raise self.fail(f"\\{c}{digits}", "it is no character code") from None
            if point > _MAX or _SURROGATES[0] <= point <= _SURROGATES[1]:
                raise self.fail(f"\\{c}{digits}", "deltasink takes Unicode scalar values")
            return [(point, point)]
        if c and not c.isalnum() and c.isascii():
            return [(ord(c), ord(c))]
        raise self.fail(
            f"\\{c}",
            _WHY.get(
                c,
                "back-references, \\R, \\X, \\h, \\v, octal and control escapes "
                "differ or are missing between Java and Rust",
            ),
        )

    def klass(self, flags: set[str]) -> list[tuple[int, int]]:
        negated = self.peek() == "^"
        self.i += negated
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise self.fail("an unclosed class", "Java refuses it")
            if c == "]" and not first:
                self.i += 1
                break
            if c in "[]" or self.p.startswith("&&", self.i):
                raise self.fail(
                    "a nested class, intersection or leading ]", "Java and Rust read them apart"
                )
            first = False
            found, single = self.class_atom()
            if single and self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                if self.peek() == "[":
                    raise self.fail("a range to a class", "Java and Rust read it apart")
                upper, one = self.class_atom()
                if not one or upper[0][0] < found[0][0]:
                    raise self.fail("a range whose ends are not characters in order", "-")
                ranges.append((found[0][0], upper[0][0]))
            else:
                ranges.extend(found)
        if "i" in flags:
            ranges = _fold(ranges)
        return _negate(ranges) if negated else ranges

    def class_atom(self) -> tuple[list[tuple[int, int]], bool]:
        """The characters of one item of a class, and whether it is one character
        (which may start a range; ``\\d`` may not)."""
        c = self.peek()
        self.i += 1
        if c != "\\":
            return [(ord(c), ord(c))], True
        shorthand = self.peek() in "dDwWsS"
        return self.class_escape(), not shorthand

    def group(self, flags: set[str], depth: int) -> _Part | None:
        inner = set(flags)
        if self.peek() == "?":
            self.i += 1
            c = self.peek()
            if c == "<" and self.peek(1) not in ("=", "!"):
                end = self.p.find(">", self.i)
                self.i = end + 1  # a named group: only grouping here
            elif c in ("=", "!", "<", ">"):
                raise self.fail(
                    "look-around or an atomic group",
                    "Rust's regex has no look-around nor atomic groups",
                )
            else:
                on = True
                while self.peek() and self.peek() not in ":)":
                    flag = self.peek()
                    self.i += 1
                    if flag == "-":
                        on = False
                    elif flag in ("i", "s"):
                        (inner.add if on else inner.discard)(flag)
                    else:
                        raise self.fail(f"the flag {flag}", "deltasink reads (?i) and (?s) only")
                if self.peek() == ")":  # the flags hold for the rest of the group
                    self.i += 1
                    flags.clear()
                    flags.update(inner)
                    return None
                if not self.peek():
                    raise self.fail("an unclosed group", "Java refuses it")
                self.i += 1
        body = self.alternation(inner, depth + 1)
        if self.peek() != ")":
            raise self.fail("an unclosed group", "Java refuses it")
        self.i += 1
        return _Part(f"(?:{body.text})", empty=body.empty, cr=body.cr)


def translate_regex(pattern: str) -> str:
    """``pattern`` (Java's syntax) as a regular expression Java and Rust read alike.

    Raises:
        Refusal: A construct they read apart, or one Java refuses.
    """
    parser = _Parser(pattern)
    body = parser.alternation(set(), 0)
    if parser.i < len(pattern):
        raise parser.fail("an unbalanced )", "Java refuses it")
    return body.text
