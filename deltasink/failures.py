"""Storage failures told apart, so that the advice fits: a refused credential or
permission is not a damaged table, and an unreachable store is neither.

The engines report object-store failures as plain :class:`OSError` (delta-rs) with the
store's own words; :func:`storage_failure` turns one into a
:class:`~deltasink.errors.StorageAccessError` (credentials, permissions) or a
:class:`~deltasink.errors.StorageError` (anything else: path, network, outage).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from deltasink.errors import StorageAccessError, StorageError

__all__ = ["named_storage_errors", "plain", "storage_failure"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

#: How object stores and delta-rs word a refused credential or permission.
_ACCESS = re.compile(
    r"lacked the necessary privileges|permission denied|access ?denied|forbidden|"
    r"unauthori[sz]ed|unauthenticated|\b40[13]\b|invalid ?access ?key|"
    r"signature ?does ?not ?match|expired ?token|authorization ?failure|no credentials",
    re.IGNORECASE,
)


#: The first frame of a Rust backtrace appended to a message ("   0: <unknown>").
_BACKTRACE = re.compile(r"\n\s*(?:Stack backtrace|0: )")
#: A Rust ``Debug`` structure's opening: ``ParsedLogPath {``.
_STRUCT = re.compile(r"\b[A-Z][A-Za-z0-9_]* \{")
#: The fields that name what a structure is about, most telling first.
_NAMING_FIELDS = ("filename", "path", "location", "name")


def plain(exc: BaseException) -> str:
    """An engine error's message without terminal colour codes, backtraces and the
    indentation of its cause chain, on one line; a Rust debug structure is shown as
    the file or name it is about (``ParsedLogPath { ... filename: "3.json" ... }`` as
    ``3.json``)."""
    text = _ANSI.sub("", str(exc))
    text = _BACKTRACE.split(text, maxsplit=1)[0]
    return _collapse_structs(" ".join(text.replace("↳", ":").split()))


def _collapse_structs(text: str) -> str:
    """``text`` with each outermost ``Name { ... }`` replaced by the quoted value of its
    first naming field (or left as it is when it has none)."""
    out, pos = [], 0
    while (match := _STRUCT.search(text, pos)) is not None:
        end = _closing_brace(text, match.end() - 1)
        if end is None:
            break  # unbalanced: leave the rest as it is
        body = text[match.end() : end]
        name = next(
            (m.group(1) for f in _NAMING_FIELDS if (m := re.search(rf'\b{f}: "([^"]*)"', body))),
            None,
        )
        out.append(text[pos : match.start()])
        out.append(name if name is not None else text[match.start() : end + 1])
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def _closing_brace(text: str, start: int) -> int | None:
    """The index of the ``}`` closing the ``{`` at ``start``, or ``None``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return None


def storage_failure(exc: OSError, table: str | None) -> StorageError:
    """The named error for a storage call on ``table`` that failed with ``exc``."""
    text = plain(exc)
    where = table or "the table"
    if isinstance(exc, PermissionError) or _ACCESS.search(text):
        return StorageAccessError(
            f"the storage refused access to {where}: {text}. Check the credentials and "
            "permissions deltasink runs with (storage_options, the cluster's identity, "
            "grants on the location); the table itself is not damaged.",
            table=table,
        )
    return StorageError(
        f"the storage of {where} could not be used: {text}. Check the location, the "
        "network and storage_options, then retry; nothing committed is lost.",
        table=table,
    )


class _Located(Protocol):
    target: str


_S = TypeVar("_S", bound=_Located)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def named_storage_errors(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """A storage failure an engine reports as a bare ``OSError`` (delta-rs, for
    object stores) leaves the facade as a :class:`~deltasink.errors.StorageError` or
    :class:`~deltasink.errors.StorageAccessError` naming the target."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise storage_failure(exc, self.target) from exc

    return wrapper
