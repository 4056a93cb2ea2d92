"""Timestamps delta-rs cannot read back: Parquet INT96 values outside 1677-2262.

Spark writes ``TIMESTAMP`` columns as Parquet INT96 unless
``spark.sql.parquet.outputTimestampType`` says otherwise (plain delta-spark jobs, and
the spark engine before it set ``TIMESTAMP_MICROS`` for its own writes). delta-rs 1.6
reads INT96 as nanoseconds since the epoch, which wrap outside roughly 1677-09-21 to
2262-04-11: when the embedded engine's MERGE (or overwrite, or SCD2 rebuild) rewrites
such a file, the rows it did not match are written back with other values and no
error (``0001-01-01`` becomes ``1754-08-30 22:43:41.128655``); SCD2 end dates such as
``9999-12-31`` are in that range. delta-rs offers no option to read INT96 otherwise.

So before a write that may rewrite target files, :class:`Int96Guard` finds the files
that may hold such values and refuses the write by name
(:class:`~deltasink.errors.UnsupportedTableFeatureError`, nothing written): a file is
suspect when a timestamp column's statistics in the Delta log reach outside the range
(or are missing); its Parquet footer then tells whether it stores INT96, and, without
statistics, its values are read (as microseconds, exactly). INT64 timestamps (the
protocol's, which delta-rs and the spark engine write) hold every instant from 0001 to
9999 and pass. Verdicts are kept per file (files never change) and per clean table
version, so a steady writer reads only the log's statistics, once per target version,
for a target with timestamp columns.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.errors import UnsupportedTableFeatureError
from deltasink.locations import is_local

__all__ = ["HIGH", "INT96_FEATURE", "LOW", "Int96Guard"]

UTC = dt.timezone.utc
#: The instants a nanosecond count in an int64 holds (delta-rs's reading of INT96),
#: narrowed by a millisecond: Delta truncates timestamp statistics to milliseconds.
LOW = dt.datetime(1677, 9, 21, 0, 12, 44, 146000, tzinfo=UTC)
HIGH = dt.datetime(2262, 4, 11, 23, 47, 15, 854000, tzinfo=UTC)
#: The exact range, in microseconds, for the values read from a file's INT96 columns
#: (the writers model found values in the last millisecond refused).
VALUE_LOW = dt.datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=UTC)
VALUE_HIGH = dt.datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)
#: How the refusal names what the embedded engine cannot write.
INT96_FEATURE = "INT96 timestamps outside 1677-2262"


class Int96Guard:
    """The target files a delta-rs rewrite would corrupt, found and refused.

    Args:
        uri: The target's location.
        storage_options: delta-rs storage options.
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._options = dict(storage_options or {})
        self._fs: pafs.FileSystem | None = None
        #: file path -> whether it holds INT96 values delta-rs reads wrapped
        self._verdicts: dict[str, bool] = {}
        #: The table (id, version) last found clean (a snapshot's files never change).
        self._clean: tuple[str, int] | None = None

    def concerns(self, table: DeltaTable) -> bool:
        """Whether ``table``'s schema has a timestamp (only then can a file hold INT96)."""
        return any(_has_timestamp(field.type) for field in arrow_schema(table))

    def check(self, table: DeltaTable) -> None:
        """Refuse a write that may rewrite a file of ``table`` holding INT96 timestamps
        outside the range delta-rs reads (see the module doc).

        Raises:
            UnsupportedTableFeatureError: Such a file is in the snapshot.
        """
        snapshot = (str(table.metadata().id), table.version())
        if snapshot == self._clean:
            return
        if not any(_has_timestamp(field.type) for field in arrow_schema(table)):
            return
        actions = pa.table(table.get_add_actions(flatten=True))
        bad = [path for path in self._suspects(actions) if self._holds_wrapped(path)]
        if not bad:
            self._clean = snapshot
        else:
            raise UnsupportedTableFeatureError(
                f"the target {self.uri} holds timestamps stored as Parquet INT96 outside "
                f"1677-09-21..2262-04-11 (in {len(bad)} file(s), e.g. {bad[0]}), written by "
                "Spark with its default spark.sql.parquet.outputTimestampType. The embedded "
                "engine (delta-rs) reads INT96 as nanoseconds and would rewrite those "
                "values wrapped, so nothing was written. Write this target with "
                "engine='spark', or rewrite its files once with Spark under "
                "spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS (e.g. read the "
                "table and overwrite it with .option('dataChange', 'false')).",
                table=self.uri,
                features=[INT96_FEATURE],
            )

    def _suspects(self, actions: pa.Table) -> list[str]:
        """The files whose timestamp statistics reach outside [:data:`LOW`,
        :data:`HIGH`] or are missing for non-null values, and the files judged bad
        before (files judged good are not read again)."""
        columns = [
            name[4:]
            for name in actions.column_names
            if name.startswith("min.") and pa.types.is_timestamp(actions.schema.field(name).type)
        ]
        suspect: Any = pa.array([not columns] * actions.num_rows, pa.bool_())  # none: unknown
        records: Any = (
            actions.column("num_records") if "num_records" in actions.column_names else None
        )
        for column in columns:
            low: Any = actions.column(f"min.{column}")
            high: Any = (
                actions.column(f"max.{column}") if f"max.{column}" in actions.column_names else low
            )
            outside = pc.or_(
                pc.less(low, pa.scalar(LOW, low.type)), pc.greater(high, pa.scalar(HIGH, high.type))
            )
            unknown = pc.or_(pc.is_null(low), pc.is_null(high))
            count = f"null_count.{column}"
            if count in actions.column_names and records is not None:  # all null: nothing to wrap
                unknown = pc.and_(unknown, pc.not_equal(actions.column(count), records))
            suspect = pc.or_(suspect, pc.fill_null(pc.or_(outside, unknown), True))
        flagged = suspect.to_pylist()
        paths = [str(p) for p in actions.column("path").to_pylist()]
        return [p for p, s in zip(paths, flagged, strict=True) if self._verdicts.get(p, bool(s))]

    def _holds_wrapped(self, path: str) -> bool:
        """Whether the file at ``path`` stores INT96 values outside the range."""
        verdict = self._verdicts.get(path)
        if verdict is None:
            verdict = self._verdicts[path] = self._read_verdict(path)
        return verdict

    def _read_verdict(self, path: str) -> bool:
        with self._filesystem().open_input_file(path) as source:
            parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            int96 = sorted(
                {
                    parquet.schema.column(i).path.split(".")[0]
                    for i in range(parquet.metadata.num_columns)
                    if parquet.schema.column(i).physical_type == "INT96"
                }
            )
            if not int96:
                return False
            values = parquet.read(columns=int96)
        return any(_outside(values.column(name)) for name in int96)

    def _filesystem(self) -> pafs.FileSystem:
        if self._fs is None:
            if is_local(self.uri):
                self._fs = pafs.SubTreeFileSystem(self.uri, pafs.LocalFileSystem())
            else:
                self._fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, self._options))
        return self._fs


def _has_timestamp(kind: pa.DataType) -> bool:
    """Whether ``kind`` is or holds a timestamp (in a struct, list or map)."""
    if pa.types.is_timestamp(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_timestamp(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _has_timestamp(kind.value_type)
    if pa.types.is_map(kind):
        return _has_timestamp(kind.key_type) or _has_timestamp(kind.item_type)
    return False


def _outside(column: Any) -> bool:
    """Whether any timestamp in ``column`` (read as microseconds) is outside the range."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        if column.null_count == len(column):
            return False
        bounds = pc.min_max(column.cast(pa.timestamp("us", "UTC")))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        return bool(low is not None and (low < VALUE_LOW or high > VALUE_HIGH))
    if pa.types.is_struct(kind):
        fields = [
            pa.chunked_array([c.field(i) for c in column.chunks]) for i in range(kind.num_fields)
        ]
        return any(_outside(f) for f in fields)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _outside(pa.chunked_array([c.flatten() for c in column.chunks]))
    if pa.types.is_map(kind):
        keys = pa.chunked_array([c.keys for c in column.chunks])
        items = pa.chunked_array([c.items for c in column.chunks])
        return _outside(keys) or _outside(items)
    return False
