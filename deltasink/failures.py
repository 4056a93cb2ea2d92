"""Storage failures told apart, so that the advice fits: a refused credential or
permission is not a damaged table, and an unreachable store is neither.

The engines report object-store failures as plain :class:`OSError` (delta-rs) with the
store's own words; :func:`storage_failure` turns one into a
:class:`~deltasink.errors.StorageAccessError` (credentials, permissions) or a
:class:`~deltasink.errors.StorageError` (anything else: path, network, outage).
"""

from __future__ import annotations

import re

from deltasink.errors import StorageAccessError, StorageError

__all__ = ["plain", "storage_failure"]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

#: How object stores and delta-rs word a refused credential or permission.
_ACCESS = re.compile(
    r"lacked the necessary privileges|permission denied|access ?denied|forbidden|"
    r"unauthori[sz]ed|unauthenticated|\b40[13]\b|invalid ?access ?key|"
    r"signature ?does ?not ?match|expired ?token|authorization ?failure|no credentials",
    re.IGNORECASE,
)


def plain(exc: BaseException) -> str:
    """An engine error's message without terminal colour codes, backtraces and the
    indentation of its cause chain, on one line."""
    text = _ANSI.sub("", str(exc))
    text = text.split("\nStack backtrace:")[0].split("\n\nStack backtrace")[0]
    return " ".join(text.replace("↳", ":").split())


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
