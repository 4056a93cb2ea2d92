"""A target's data files as a compaction (:mod:`.rewrite`) plans on them and checks them
again before its commit, and the table features whose files it cannot read."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable

__all__ = ["File", "Lost", "files_of", "unreadable"]


class File(NamedTuple):
    """A data file of the target, as its log names it. Two are equal when the log holds
    the same file unchanged (a deletion vector added to it makes another one)."""

    #: The path as the log holds it (URI-encoded once, relative to the table).
    path: str
    size: int
    #: Its partition values, one per partition column (``''`` read as null).
    partition: tuple[Any, ...]
    #: A digest of the rows its deletion vector deletes (``None``: none).
    deletion_vector: str | None = None


class Lost(Exception):
    """Another commit removed or changed a file the rewrite read, or changed the table's
    schema, partitioning or protocol, before the rewrite could commit: nothing was
    committed (its new files are deleted); plan again on a fresh snapshot."""


def unreadable(table: DeltaTable) -> list[str]:
    """The table features whose files the rewrite cannot read as the table's rows
    (``[]``: none): column mapping, deletion vectors."""
    found = []
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode.strip().lower() != "none":
        found.append("columnMapping")
    protocol = table.protocol()
    if "deletionVectors" in set(protocol.reader_features or ()) | set(
        protocol.writer_features or ()
    ):
        found.append("deletionVectors")
    return found


def files_of(table: DeltaTable) -> list[File]:
    """The data files of the snapshot ``table`` holds, in log order. Partition values
    are compared as the protocol reads them: an empty string is null, whichever way a
    writer stored it. Files named by an absolute URI (outside the table) are left out."""
    actions = pa.table(table.get_add_actions(flatten=False))
    columns = list(table.metadata().partition_columns)
    paths: list[str] = [str(p) for p in actions.column("path").to_pylist()]
    sizes: list[int] = [int(n or 0) for n in actions.column("size_bytes").to_pylist()]
    parts = actions.column("partition").to_pylist() if columns else [None] * actions.num_rows
    vectors = _deletion_vectors(table)
    found = []
    for path, size, part in zip(paths, sizes, parts, strict=True):
        if "://" in path or path.startswith("/"):
            continue
        values = tuple(_null_if_empty((part or {}).get(c)) for c in columns)
        found.append(File(path, size, values, vectors.get(unquote(path))))
    return found


def _deletion_vectors(table: DeltaTable) -> dict[str, str]:
    """The files with a deletion vector (paths decoded, relative to the table), each with
    a digest of the rows it deletes; ``{}`` when the protocol has no deletion vectors
    (delta-rs's add actions do not show them)."""
    protocol = table.protocol()
    if "deletionVectors" not in set(protocol.reader_features or ()):
        return {}
    root = unquote(table.table_uri.rstrip("/") + "/")
    found = {}
    for batch in table.deletion_vectors():
        vectors = pa.record_batch(batch)
        uris = [unquote(str(u)) for u in vectors.column("filepath").to_pylist()]
        keeps = vectors.column("selection_vector").to_pylist()
        for uri, keep in zip(uris, keeps, strict=True):
            relative = uri[len(root) :] if uri.startswith(root) else uri
            found[relative] = hashlib.sha256(bytes(bool(k) for k in keep or ())).hexdigest()
    return found


def _null_if_empty(value: Any) -> Any:
    return None if value == "" else value
