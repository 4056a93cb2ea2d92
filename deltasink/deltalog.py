"""Small helpers over delta-rs shared by the staging and target tables."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from deltasink._version import __version__
from deltasink.errors import NotADeltaTableError
from deltasink.history import user_metadata

__all__ = [
    "arrow_schema",
    "commit_properties",
    "is_local",
    "normalize_uri",
    "now_ms",
    "open_table",
]


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a local filesystem path (no scheme, or ``file://``)."""
    scheme = urlparse(uri).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def normalize_uri(path: str | os.PathLike[str]) -> str:
    """An absolute, comparable form of a table location (local paths made absolute,
    ``file://`` removed, trailing slashes dropped)."""
    text = os.fspath(path)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if is_local(text):
        return os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/")


def open_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable | None:
    """Open the Delta table at ``uri``; ``None`` when nothing is there yet.

    Raises:
        NotADeltaTableError: ``uri`` is a local directory with files but no Delta log.
    """
    try:
        return DeltaTable(uri, storage_options=dict(storage_options or {}))
    except TableNotFoundError:
        entries = sorted(os.listdir(uri))[:5] if is_local(uri) and os.path.isdir(uri) else []
        if entries:
            raise NotADeltaTableError(
                f"{uri} exists but is not a Delta table (no _delta_log; it holds "
                f"{entries}). Point the sink at a Delta table or an empty/new location, "
                "or convert the data first (deltalake.convert_to_deltalake).",
                table=uri,
            ) from None
        return None


def arrow_schema(table: DeltaTable) -> pa.Schema:
    """The table's schema as a ``pyarrow.Schema``."""
    arrow: Any = table.schema().to_arrow()
    return pa.schema(arrow)


def now_ms() -> int:
    """Milliseconds since the epoch (Delta's timestamp unit)."""
    return int(time.time() * 1000)


def commit_properties(
    *,
    app_id: str,
    version: int | None,
    operation: str,
    extra: Mapping[str, Any] | None = None,
    versions: Sequence[int] = (),
) -> CommitProperties:
    """Commit properties for a deltasink commit: the ``txn`` marker (when ``version``
    is given) and commit metadata naming the library, the app and the batch."""
    metadata: dict[str, Any] = {
        "userMetadata": user_metadata(operation, app_id, version, versions),
        "deltasink.operation": operation,
        "deltasink.appId": app_id,
        "deltasink.libraryVersion": __version__,
    }
    if version is not None:
        metadata["deltasink.batchVersion"] = version
    if len(versions) > 1:
        metadata["deltasink.versions"] = list(versions)
    metadata.update(extra or {})
    # lastUpdated matters: Delta on Spark treats a txn without it as expired as soon as
    # delta.setTransactionRetentionDuration is set, and drops it from checkpoints.
    transactions = (
        [Transaction(app_id=app_id, version=version, last_updated=now_ms())]
        if version is not None
        else None
    )
    return CommitProperties(custom_metadata=metadata, app_transactions=transactions)
