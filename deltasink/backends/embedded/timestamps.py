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
(:class:`~deltasink.errors.UnsupportedTableFeatureError`, nothing written) only when one
does. A file is suspect when a timestamp column's statistics in the Delta log reach
outside the range or are missing, and every file is when some timestamp has no
statistics at all: inside an array or a map (Delta keeps none there), or a column the
table's statistics leave out (``delta.dataSkippingNumIndexedCols``, 32 columns by
default, or ``delta.dataSkippingStatsColumns``). A suspect file's Parquet footer then
tells whether it stores INT96, and if it does, its INT96 columns are read (as
microseconds, exactly; nested values too) and it is refused only if a value lies
outside. Partition columns do not count: their values are the log's (Spark 4 also
stores them in its files, as INT96, but delta-rs reads the log's). INT64 timestamps
(the protocol's, which delta-rs and the spark engine write) hold every instant from
0001 to 9999 and pass. Verdicts are kept per file (files never change) and per clean
table version, so a steady writer reads only the log's statistics, once per target
version, and each file's footer at most once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

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
        """Whether ``table``'s schema has a timestamp outside its partition columns (only
        then can a file hold INT96 values delta-rs reads)."""
        leaves, hidden = _timestamp_leaves(table)
        return bool(leaves) or hidden

    def check(self, table: DeltaTable) -> None:
        """Refuse a write that may rewrite a file of ``table`` holding INT96 timestamps
        outside the range delta-rs reads (see the module doc).

        Raises:
            UnsupportedTableFeatureError: Such a file is in the snapshot.
        """
        snapshot = (str(table.metadata().id), table.version())
        if snapshot == self._clean:
            return
        leaves, hidden = _timestamp_leaves(table)
        if not leaves and not hidden:
            return
        partitions = frozenset(c.lower() for c in table.metadata().partition_columns)
        actions = pa.table(table.get_add_actions(flatten=True))
        suspects = self._suspects(actions, leaves, hidden)
        bad = [path for path in suspects if self._holds_wrapped(path, partitions)]
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

    def _suspects(self, actions: pa.Table, leaves: list[str], hidden: bool) -> list[str]:
        """The files whose statistics of the timestamp columns ``leaves`` reach outside
        [:data:`LOW`, :data:`HIGH`] or are missing for non-null values (every file when
        a timestamp has no statistics: ``hidden`` ones, or a leaf the log's statistics
        leave out), and the files judged bad before (files judged good are not read
        again)."""
        paths = [str(p) for p in actions.column("path").to_pylist()]
        names = set(actions.column_names)
        if hidden or any(f"min.{leaf}" not in names for leaf in leaves):
            return [p for p in paths if self._verdicts.get(p, True)]
        suspect: Any = pa.array([False] * actions.num_rows, pa.bool_())
        records: Any = (
            actions.column("num_records") if "num_records" in actions.column_names else None
        )
        for column in leaves:
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
        return [p for p, s in zip(paths, flagged, strict=True) if self._verdicts.get(p, bool(s))]

    def _holds_wrapped(self, path: str, partitions: frozenset[str]) -> bool:
        """Whether the file at ``path`` stores INT96 values outside the range (outside
        the ``partitions`` columns, lower case)."""
        verdict = self._verdicts.get(path)
        if verdict is None:
            verdict = self._verdicts[path] = self._read_verdict(path, partitions)
        return verdict

    def _read_verdict(self, path: str, partitions: frozenset[str]) -> bool:
        # The log's paths are URI-encoded (a partition directory's escapes, escaped once
        # more): the file's name is the path decoded exactly once.
        with self._filesystem().open_input_file(unquote(path)) as source:
            parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
            int96 = sorted(
                {
                    parquet.schema.column(i).path.split(".")[0]
                    for i in range(parquet.metadata.num_columns)
                    if parquet.schema.column(i).physical_type == "INT96"
                    and parquet.schema.column(i).path.split(".")[0].lower() not in partitions
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


def _timestamp_leaves(table: DeltaTable) -> tuple[list[str], bool]:
    """The timestamp columns of ``table`` outside its partition columns that Delta
    statistics can describe (dotted paths through structs, as delta-rs flattens them),
    and whether a timestamp sits where no statistics reach (in an array or a map)."""
    partitions = {c.lower() for c in table.metadata().partition_columns}
    leaves: list[str] = []
    hidden = False

    def walk(prefix: str, kind: pa.DataType) -> None:
        nonlocal hidden
        if pa.types.is_timestamp(kind):
            leaves.append(prefix)
        elif pa.types.is_struct(kind):
            for i in range(kind.num_fields):
                walk(f"{prefix}.{kind.field(i).name}", kind.field(i).type)
        elif _has_timestamp(kind):  # a list or a map holding one
            hidden = True

    for field in arrow_schema(table):
        if field.name.lower() not in partitions:
            walk(field.name, field.type)
    return leaves, hidden


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
