"""Which Spark errors mean a concurrency conflict (worth another attempt) or a table
that does not exist (yet), told by the error's type, not by its message.

The type is read, in this order, from:

1. the Spark error condition (``getCondition()``, PySpark ≥ 4; ``getErrorClass()``
   before), which classic and Spark Connect exceptions carry;
2. the JVM exception behind a ``Py4JJavaError`` (Delta's concurrency exceptions reach
   classic PySpark unconverted): its error condition, else its class name, e.g.
   ``io.delta.exceptions.ConcurrentAppendException``;
3. for an exception that carries neither (re-raised as text by some layer), the
   condition or exception class its message *starts* with (``[DELTA_CONCURRENT_APPEND]
   ...`` or ``io.delta.exceptions.ConcurrentAppendException: ...``), never free text.

Causes and contexts are followed (an error wrapped by another still counts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["CONFLICT_CONDITIONS", "MISSING_CONDITIONS", "error_types", "is_conflict", "is_missing"]

#: Delta's optimistic-concurrency conflicts (prefixes of error conditions).
CONFLICT_CONDITIONS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")
#: The same, as JVM exception classes (``io.delta.exceptions.*``, simple names).
_CONFLICT_CLASSES = re.compile(
    r"^(Concurrent\w*Exception|MetadataChangedException|ProtocolChangedException|"
    r"DeltaConcurrentModificationException)$"
)
#: A table or path that does not exist, or is not a Delta table (yet).
MISSING_CONDITIONS = (
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "DELTA_TABLE_ONLY_OPERATION",
    "DELTA_PATH_DOES_NOT_EXIST",
    "PATH_NOT_FOUND",
    "TABLE_OR_VIEW_NOT_FOUND",
)
_LEADING = re.compile(r"^\s*(?:\[(?P<condition>[A-Z][A-Z0-9_.]+)\]|(?P<cls>[\w.$]+):)")


def _condition(error: object) -> str | None:
    for name in ("getCondition", "getErrorClass"):
        get = getattr(error, name, None)
        if callable(get):
            try:
                value = get()
            except Exception:  # a JVM object without it, a closed gateway
                continue
            if value:
                return str(value)
    return None


def _java_class(java: object) -> str | None:
    try:
        return str(java.getClass().getName())  # type: ignore[attr-defined]
    except Exception:
        return None


def error_types(exc: BaseException) -> Iterator[str]:
    """The error conditions and exception class names of ``exc`` and its causes."""
    seen: BaseException | None = exc
    while seen is not None:
        typed = False
        condition = _condition(seen)
        if condition:
            typed = True
            yield condition
        java = getattr(seen, "java_exception", None)  # py4j.protocol.Py4JJavaError
        if java is not None:
            for value in (_condition(java), _java_class(java)):
                if value:
                    typed = True
                    yield value
        if not typed:
            match = _LEADING.match(str(seen))
            if match:
                yield match["condition"] or match["cls"]
        seen = seen.__cause__ or seen.__context__


def _simple(name: str) -> str:
    return name.rsplit(".", 1)[-1].split("$")[-1]


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a Delta optimistic-concurrency conflict (worth retrying)."""
    return any(
        t.startswith(CONFLICT_CONDITIONS) or _CONFLICT_CLASSES.match(_simple(t))
        for t in error_types(exc)
    )


def is_missing(exc: BaseException) -> bool:
    """Whether ``exc`` says the table does not exist (yet)."""
    return any(t.split(".")[0] in MISSING_CONDITIONS for t in error_types(exc))
