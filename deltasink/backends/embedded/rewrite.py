"""Rewriting a target's small files without changing its rows: the compaction commits
of the embedded engine (auto compaction, ``optimize()``, Z-ORDER), made so that none can
commit on a snapshot whose files another compaction or writer removed since it planned.

Why not delta-rs's own ``optimize``: its conflict checker ignores removes with
``dataChange=false``, so two compactions planned on one snapshot both commit, each
removing the same files and adding a copy of their rows (every row twice; and once a
MERGE rewrote the first copy, the second brings the old values back). ``optimize``
also drops ``max_commit_retries`` and ``txn`` actions from the commit properties it is
given, so neither can make such a commit conflict. docs/design-notes.md has the
reproduction.

So the rewrite makes its own commit, and checks the one condition that matters itself:

1. the caller picks the files (:func:`files_of`) on the snapshot ``table`` holds;
2. their rows are read from Parquet (aligned to the table's schema, INT96 timestamps
   as microseconds) and written by delta-rs into a scratch table partitioned like the
   target, with the target's statistics settings (Z-ORDER: delta-rs's ``z_order`` runs
   there), so each new file, its statistics and its partition values are delta-rs's;
3. those files are put into the target's directory, not yet referenced by its log;
4. one commit (:mod:`.swap`, an ``OPTIMIZE`` in the history) removes the old files and
   adds the new ones, all ``dataChange=false``: it lands on exactly the version after
   the snapshot it was checked against, or fails. After a failure the table is read
   again and the commit is tried on the new snapshot only if every file it removes is
   still there unchanged (no deletion vector added) and the schema, partitioning,
   protocol and readable features are as planned; otherwise the rewrite is
   :class:`Lost`: its new files are deleted and nothing was committed.

What it refuses to read (:func:`unreadable`): tables with column mapping (physical
column names) or deletion vectors (rows a file holds that the table does not).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.fs import DeltaStorageHandler

from deltasink import _faults
from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.locations import is_local, normalize_uri

from .files import File, Lost, files_of, unreadable
from .swap import commit_swap as _commit
from .swap import parameters

__all__ = ["File", "Lost", "Rewritten", "files_of", "rewrite", "unreadable"]

#: The table properties that decide which columns get statistics, copied to the scratch.
_STATS_PROPERTIES = ("delta.dataSkippingNumIndexedCols", "delta.dataSkippingStatsColumns")


@dataclass(frozen=True)
class Rewritten:
    """A rewrite that committed.

    Attributes:
        version: The Delta version of its commit.
        removed: Files removed.
        added: Files added.
    """

    version: int
    removed: int
    added: int


def rewrite(
    table: DeltaTable,
    files: Sequence[File],
    *,
    uri: str,
    storage_options: Mapping[str, str] | None,
    target_size: int,
    metadata: Mapping[str, str],
    z_order_by: Sequence[str] = (),
    auto: bool = False,
) -> Rewritten:
    """Replace ``files`` (of the snapshot ``table`` holds) with new files holding the
    same rows, in one commit of ``dataChange=false`` actions carrying ``metadata``.

    Args:
        table: The target at the snapshot ``files`` were chosen on; moved to the
            version of the commit (or to the latest one read, when lost).
        files: The files to rewrite, grouped by partition in the new files.
        uri: The target's location.
        storage_options: delta-rs storage options.
        target_size: The size new files aim at (bytes).
        metadata: Commit metadata.
        z_order_by: Columns to Z-ORDER the rows of each partition by.
        auto: An auto compaction (``OPTIMIZE``'s ``auto`` parameter in the history).

    Raises:
        Lost: Another commit removed or changed one of ``files`` (or changed the
            table) first.
    """
    store = _Store(uri, storage_options)
    # Local tables: the scratch sits in the table's directory (hidden from readers and
    # VACUUM by its leading dot), so the new files move in by a rename on one filesystem.
    scratch = tempfile.mkdtemp(
        prefix=".deltasink-rewrite-", dir=store.root if store.local else None
    )
    placed: list[str] = []
    try:
        try:
            adds = _write_scratch(table, files, scratch, store, target_size, z_order_by)
        except Exception:
            # A file it reads is gone (removed by another commit and vacuumed since)?
            # delta-rs reports a failed read of the rows it consumes as its own error.
            table.update_incremental()
            if not {f.path for f in files} <= {f.path for f in files_of(table)}:
                raise Lost(f"files being compacted were removed, at {table.version()}") from None
            raise
        for add in adds:
            store.put(os.path.join(scratch, unquote(add["path"])), unquote(add["path"]))
            placed.append(unquote(add["path"]))
        _faults.point("rewrite.before_commit", files=[f.path for f in files])
        version = _commit(
            table,
            files,
            adds,
            metadata,
            local_root=store.root if store.local else None,
            operation_parameters=parameters(auto=auto, z_order_by=z_order_by),
        )
    except BaseException:
        if placed and not _landed(table, adds):  # a failure after the commit keeps them
            for path in placed:
                store.delete(path)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Rewritten(version=version, removed=len(files), added=len(adds))


def _landed(table: DeltaTable, adds: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the latest snapshot references any of the new files (the commit landed,
    and something after it failed: its post-commit hooks); ``True`` when that cannot be
    read, so that no file a commit may reference is ever deleted."""
    try:
        table.update_incremental()
        live = {f.path for f in files_of(table)}
    except Exception:
        return True
    return any(a["path"] in live for a in adds)


def _write_scratch(
    table: DeltaTable,
    files: Sequence[File],
    scratch: str,
    store: _Store,
    target_size: int,
    z_order_by: Sequence[str],
) -> list[dict[str, Any]]:
    """Write the rows of ``files`` into a new scratch table at ``scratch`` with delta-rs;
    its live add actions. The scratch table's columns carry no metadata: a generated
    or identity column's rows are copied, never computed or checked again (delta-rs
    would check ``x / 4`` with DataFusion's integer division and refuse Spark's rows)."""
    schema = pa.schema([f.remove_metadata() for f in arrow_schema(table)])
    columns = list(table.metadata().partition_columns)
    config = table.metadata().configuration
    if store.local:
        sources = [os.path.join(store.root, unquote(f.path)) for f in files]
    else:
        # Fetched first: delta-rs's store cannot be read from inside the writer that
        # consumes the rows (one async runtime inside another).
        fetched = os.path.join(scratch, "_sources")
        os.makedirs(fetched)
        sources = [
            store.fetch(unquote(f.path), os.path.join(fetched, str(i))) for i, f in enumerate(files)
        ]
    write_deltalake(
        scratch,
        pa.RecordBatchReader.from_batches(schema, _rows(files, sources, schema, columns)),
        partition_by=columns or None,
        mode="error",
        configuration={k: config[k] for k in _STATS_PROPERTIES if k in config} or None,
        target_file_size=target_size,
    )
    if z_order_by:
        DeltaTable(scratch).optimize.z_order(list(z_order_by), target_size=target_size)
    return _live_adds(scratch)


def _rows(
    files: Sequence[File], sources: Sequence[str], schema: pa.Schema, columns: list[str]
) -> Iterator[pa.RecordBatch]:
    """The rows of ``files`` (read from the local ``sources``) in ``schema``: each file's
    columns cast to the table's types (columns a file lacks are null), its partition
    values as columns."""
    stored = [f for f in schema if f.name not in columns]
    for file, path in zip(files, sources, strict=True):
        with open(path, "rb") as source:
            parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            names = {n.lower(): n for n in parquet.schema_arrow.names}
            for batch in parquet.iter_batches(batch_size=65_536, use_threads=False):
                n = batch.num_rows
                values: dict[str, pa.Array[Any]] = {}
                for field in stored:
                    name = names.get(field.name.lower())
                    if name is None:
                        values[field.name] = pa.nulls(n, field.type)
                    else:
                        column = batch.column(name)
                        values[field.name] = (
                            column if column.type == field.type else column.cast(field.type)
                        )
                for name, value in zip(columns, file.partition, strict=True):
                    values[name] = pa.array([value] * n, schema.field(name).type)
                yield pa.RecordBatch.from_arrays([values[f.name] for f in schema], schema=schema)


def _live_adds(scratch: str) -> list[dict[str, Any]]:
    """The add actions live at the scratch table's last version, read from its log."""
    log = os.path.join(scratch, "_delta_log")
    live: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in os.listdir(log) if n.endswith(".json")):
        with open(os.path.join(log, name), encoding="utf-8") as f:
            for line in f:
                action = json.loads(line) if line.strip() else {}
                if "add" in action:
                    live[action["add"]["path"]] = action["add"]
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
    return list(live.values())


class _Store:
    """The target's storage, rooted at the table: local paths directly, object stores
    through delta-rs's storage handler."""

    def __init__(self, uri: str, options: Mapping[str, str] | None) -> None:
        self.local = is_local(uri)
        self.root = normalize_uri(uri) if self.local else uri
        self._fs: pafs.FileSystem | None = None
        self._options = dict(options or {})

    def fs(self) -> pafs.FileSystem:
        if self._fs is None:
            self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.root, self._options))
        return self._fs

    def fetch(self, path: str, destination: str) -> str:
        """Copy ``path`` of the (remote) table to the local ``destination``."""
        pafs.copy_files(
            path,
            destination,
            source_filesystem=self.fs(),
            destination_filesystem=pafs.LocalFileSystem(),
        )
        return destination

    def put(self, source: str, path: str) -> None:
        """Move the local file ``source`` to ``path`` in the table."""
        if self.local:
            destination = os.path.join(self.root, path)
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.move(source, destination)
            return
        pafs.copy_files(
            source, path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs()
        )

    def delete(self, path: str) -> None:
        """Delete ``path`` in the table, if it is there (best effort)."""
        try:
            if self.local:
                os.remove(os.path.join(self.root, path))
            else:
                self.fs().delete_file(path)
        except OSError:
            pass
