"""Reading the staging table: what is staged, what is recorded, and the staged rows.

One :class:`StagingLog` holds the table's latest snapshot; the embedded engine's writers
of the staging table (:mod:`deltasink.backends.embedded.fencing`, ``.stage``, ``.gc``)
and the spark engine's delta-rs reader (:mod:`deltasink.backends.spark.readers`) refresh
and read it through this object, so one call of the sink reads the log once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import NamedTuple

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from deltasink.core.guards import check_owner
from deltasink.core.protocol import StagedVersion
from deltasink.errors import StorageError
from deltasink.locations import is_local
from deltasink.ops.layout import (
    COMMITTED_SUFFIX,
    INTENT_SUFFIX,
    PROP_CHECKS,
    PROP_EPOCH,
    PROP_SPEC,
    VERSION_COLUMN,
    Quarantine,
)
from deltasink.ops.origin import ORIGIN_KEY
from deltasink.shapes.spec import MergeSpec

from .history import commits
from .tables import arrow_schema, plain, refresh, txn_version

__all__ = ["StagingLog", "StagingSnapshot"]


class StagingSnapshot(NamedTuple):
    """What one read of the staging log says (:meth:`StagingLog.snapshot`)."""

    #: The staged versions, ascending.
    staged: tuple[StagedVersion, ...]
    #: Quarantined versions and why.
    quarantined: dict[int, str]
    #: The committed mark (the highest version this writer saw committed), if any.
    mark: int | None
    #: The publish intent (the highest version whose target commit was attempted).
    intent: int | None


class StagingLog:
    """The staging Delta table of one ``(target, app_id)``, as read with delta-rs.

    Args:
        uri: Location of the staging table.
        target: Normalised location of the target it belongs to.
        app_id: The writer it belongs to.
        storage_options: delta-rs storage options (object-store credentials).
    """

    def __init__(
        self,
        uri: str,
        *,
        target: str,
        app_id: str,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        self.uri = uri
        self.target = target
        self.app_id = app_id
        self.options = dict(storage_options or {})
        self._table: DeltaTable | None = None
        self._fs: pafs.FileSystem | None = None

    def open(self, *, fresh: bool = True) -> DeltaTable | None:
        """The staging table, or ``None`` if not created yet.

        Args:
            fresh: Bring it to the latest version (one log read). ``False`` reuses the
                state read last, for a caller that just refreshed it in the same call.

        Raises:
            StagingOwnershipError: The table belongs to another target or app.
        """
        if not fresh and self._table is not None:
            return self._table
        table = refresh(self._table, self.uri, self.options)
        if table is not None and table is not self._table:
            config = table.metadata().configuration
            check_owner(config, staging=self.uri, target=self.target, app_id=self.app_id)
        self._table = table
        return table

    # -- state ---------------------------------------------------------------------

    def versions(self) -> tuple[StagedVersion, ...]:
        """Every staged version, ascending, with its row count and staging time."""
        table = self.open()
        return () if table is None else staged_versions(table)

    def snapshot(self, *, fresh: bool = True) -> StagingSnapshot:
        """Staged versions, quarantined versions, the committed mark and the publish
        intent, from ONE read of the log (none with ``fresh=False``: the state read or
        committed last, for a caller that just did, see :meth:`open`)."""
        table = self.open(fresh=fresh)
        if table is None:
            return StagingSnapshot((), {}, None, None)
        intent = txn_version(table, self.app_id + INTENT_SUFFIX)
        quarantine = Quarantine.from_props(table.metadata().configuration)
        return StagingSnapshot(
            staged_versions(table), quarantine.reasons(), self.mark(table), intent
        )

    def quarantine(self, *, fresh: bool = True) -> Quarantine:
        """The quarantine records (none when the table does not exist)."""
        table = self.open(fresh=fresh)
        return Quarantine() if table is None else Quarantine.from_props(props(table))

    def epoch(self) -> int | None:
        """The current writer epoch, or ``None`` if the table does not exist."""
        table = self.open()
        return None if table is None else epoch_of(table)

    def committed_mark(self) -> int | None:
        """The highest committed version recorded by a clean-up commit, if any."""
        table = self.open()
        return None if table is None else self.mark(table)

    def mark(self, table: DeltaTable) -> int | None:
        """``table``'s committed mark (``txn("<app_id>#committed", v)``), if any."""
        return txn_version(table, self.app_id + COMMITTED_SUFFIX)

    def recorded_spec(self, *, fresh: bool = True) -> MergeSpec | None:
        """The MergeSpec recorded in the table, or ``None``."""
        table = self.open(fresh=fresh)
        text = None if table is None else props(table).get(PROP_SPEC)
        return MergeSpec.from_json(text) if text else None

    def recorded_checks(self, *, fresh: bool = True) -> str | None:
        """The job's checks as recorded (:func:`deltasink.checks.encode`), or ``None``."""
        table = self.open(fresh=fresh)
        return None if table is None else props(table).get(PROP_CHECKS)

    # -- data ----------------------------------------------------------------------

    def origin_of(self, version: int) -> str | None:
        """The encoded origin the stage commit of ``version`` recorded, if any (read
        from the staging history, newest first, down to that commit: for publishing a
        version staged by an earlier process, ``recover()``). Reads commit files by
        number from the snapshot held (:func:`~.history.commits`), so a ``gc`` or log
        trim deleting older commit files meanwhile cannot fail it; a stage commit that
        retention already removed has no origin to give (``None``)."""
        table = self.open(fresh=False)
        if table is None:
            return None
        for commit in commits(table):
            if commit.get("deltasink.operation") in ("stage", "restage") and str(
                commit.get("deltasink.batchVersion")
            ) == str(version):
                found = commit.get(ORIGIN_KEY)
                return None if found is None else str(found)
        return None

    def read(self, version: int) -> pa.Table:
        """The rows staged for ``version``, with the schema they were staged with."""
        return self.read_many([version])[version]

    def read_many(self, versions: Sequence[int], *, fresh: bool = True) -> dict[int, pa.Table]:
        """The rows staged for each of ``versions``, from one read of the log.

        Raises:
            StorageError: A staged file is gone or unreadable.
        """
        table = self.open(fresh=fresh)
        if table is None:
            raise FileNotFoundError(f"staging table {self.uri} does not exist")
        actions = pa.table(table.get_add_actions(flatten=True)).select(
            [f"partition.{VERSION_COLUMN}", "path", "size_bytes"]
        )
        paths: dict[int, list[str]] = {}
        sizes: dict[int, int] = {}
        for row in actions.to_pylist():
            version = int(row[f"partition.{VERSION_COLUMN}"])
            paths.setdefault(version, []).append(str(row["path"]))
            sizes[version] = sizes.get(version, 0) + int(row["size_bytes"] or 0)
        for version in versions:
            if version not in paths:
                raise FileNotFoundError(f"version {version} is not staged in {self.uri}")
        filesystem = self.filesystem()
        zones = _zoned_timestamps(table)

        many = len(versions) > 1
        local = is_local(self.uri)

        def read(version: int) -> pa.Table:
            files = paths[version]
            try:
                if many and local and len(files) == 1 and sizes[version] <= _SMALL_VERSION:
                    # One of many small versions: one plain file read, on this thread.
                    with filesystem.open_input_file(files[0]) as source:
                        parquet = pq.ParquetFile(
                            source, pre_buffer=False, coerce_int96_timestamp_unit=_INT96_UNIT
                        )
                        data = parquet.read(use_threads=False)
                else:
                    dataset = ds.dataset(files, filesystem=filesystem, format=_PARQUET)
                    data = dataset.to_table()
            except OSError as exc:
                raise self._unreadable(version, exc) from exc
            # Files the spark engine staged may carry the partition column too.
            if VERSION_COLUMN in data.column_names:
                data = data.drop_columns([VERSION_COLUMN])
            return _with_zones(data, zones)

        if not many or local:
            # Local files: serial single-file reads beat a thread pool of datasets
            # (100 staged 1k-row versions: 15 ms against 44 ms), whose set-up dominates.
            return {v: read(v) for v in versions}
        # Remote storage: many small versions side by side, the reads release the GIL;
        # one read per version keeps each version's own schema.
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
            return dict(zip(versions, pool.map(read, versions), strict=True))

    def _unreadable(self, version: int, exc: OSError) -> StorageError:
        """The error for a staged file of ``version`` that is gone or unreadable."""
        return StorageError(
            f"the staged data of version {version} in {self.uri} cannot be read "
            f"({plain(exc)}): file not found or unreadable (removed by hand?). "
            f"Abort version {version} (`deltasink abort`) and let the source send "
            "it again.",
            table=self.uri,
            app_id=self.app_id,
            version=version,
        )

    def schemas(self, versions: Sequence[int], *, fresh: bool = True) -> dict[int, pa.Schema]:
        """The schema each of ``versions`` was staged with, from its first file's
        footer (a version's files share one schema); no data is read.

        Raises:
            StorageError: A staged file is gone or unreadable.
        """
        table = self.open(fresh=fresh)
        if table is None or not versions:
            return {}
        actions = pa.table(table.get_add_actions(flatten=True)).select(
            [f"partition.{VERSION_COLUMN}", "path"]
        )
        first: dict[int, str] = {}
        for row in actions.to_pylist():
            first.setdefault(int(row[f"partition.{VERSION_COLUMN}"]), str(row["path"]))
        filesystem = self.filesystem()
        found: dict[int, pa.Schema] = {}
        for version in versions:
            if version not in first:
                continue  # an empty version: no file, no columns to fold
            try:
                with filesystem.open_input_file(first[version]) as source:
                    schema = pq.ParquetFile(
                        source, coerce_int96_timestamp_unit=_INT96_UNIT
                    ).schema_arrow
            except OSError as exc:
                raise self._unreadable(version, exc) from exc
            names = [n for n in schema.names if n != VERSION_COLUMN]
            found[version] = pa.schema([schema.field(n) for n in names])
        return found

    def filesystem(self) -> pafs.FileSystem:
        """The table's storage, rooted at the table (pyarrow's own for local paths:
        no Python in the I/O path)."""
        if self._fs is None:
            if is_local(self.uri):
                self._fs = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
            else:
                self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.options))
        return self._fs


def _zoned_timestamps(table: DeltaTable) -> dict[str, pa.DataType]:
    """The staging table's ``TIMESTAMP`` columns (instants, UTC) by name."""
    schema = arrow_schema(table)
    return {f.name: f.type for f in schema if pa.types.is_timestamp(f.type) and f.type.tz}


def _with_zones(data: pa.Table, zones: Mapping[str, pa.DataType]) -> pa.Table:
    """``data`` with each zone-less timestamp column the staging table types as an
    instant read as one: Parquet INT96 (Spark's default) carries no zone, but holds
    UTC instants, so this only labels the values."""
    for i, field in enumerate(data.schema):
        wanted = zones.get(field.name)
        if wanted is not None and pa.types.is_timestamp(field.type) and not field.type.tz:
            kind = pa.timestamp(field.type.unit, wanted.tz)  # type: ignore[attr-defined]
            data = data.set_column(i, field.with_type(kind), data.column(i).cast(kind))
    return data


#: Spark (the spark engine before it set ``TIMESTAMP_MICROS``, or any Spark job) writes
#: ``TIMESTAMP`` as Parquet INT96, which Arrow reads as nanoseconds by default and wraps
#: outside 1677-2262 (``0001-01-01`` read as 1754): read as microseconds, Delta's
#: precision, exact for every instant Spark writes.
_INT96_UNIT = "us"
_PARQUET = ds.ParquetFileFormat(
    read_options=ds.ParquetReadOptions(None, coerce_int96_timestamp_unit=_INT96_UNIT)
)
#: A staged version up to this size (one file) is read on the calling thread when
#: several are read together: a plain file read costs less than a dataset's set-up.
_SMALL_VERSION = 8 << 20


def props(table: DeltaTable) -> dict[str, str]:
    """The table's properties."""
    config: dict[str, str] = table.metadata().configuration
    return config


def epoch_of(table: DeltaTable) -> int:
    """The writer epoch recorded in ``table`` (0 before the first claim)."""
    return int(props(table).get(PROP_EPOCH, "0"))


def staged_versions(table: DeltaTable) -> tuple[StagedVersion, ...]:
    """The staged versions of ``table``'s snapshot: its partitions, ascending."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return ()
    grouped = (
        actions.select([f"partition.{VERSION_COLUMN}", "num_records", "modification_time"])
        .group_by(f"partition.{VERSION_COLUMN}")
        .aggregate([("num_records", "sum"), ("modification_time", "min")])
        .sort_by(f"partition.{VERSION_COLUMN}")
    )
    return tuple(
        StagedVersion(
            version=int(row[f"partition.{VERSION_COLUMN}"]),
            rows=int(row["num_records_sum"] or 0),
            staged_at=datetime.fromtimestamp(row["modification_time_min"] / 1000, timezone.utc),
        )
        for row in grouped.to_pylist()
    )
