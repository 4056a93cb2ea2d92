"""The source file of each row of a micro-batch, for leaving out the rows of files a
target already holds (a resumed file-source stream) and for Auto Loader, whose
checkpoint keeps its file list in RocksDB, where deltasink cannot read it.

A file source's rows say which file they came from through Spark's
``_metadata.file_path`` (on a micro-batch only when the stream selected it:
``.select("*", "_metadata")``), or else ``input_file_name()`` (classic Spark and Spark
Connect, rows read straight from the files: not after a shuffle, not on Unity Catalog
shared compute).
A ``pyarrow`` batch tells it through a ``_metadata`` struct column with a
``file_path`` field, the shape ``df.select("*", "_metadata").toArrow()`` has. Which
expression was used is read from the batch itself; when neither works, or some rows
have no file, :func:`file_rows` says so (``None``) and the caller refuses by name.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .arrow import is_spark_dataframe

__all__ = ["FileRows", "empty_like", "file_rows", "row_count"]

#: The column (Spark's hidden file metadata, or selected) and its file-path field.
METADATA = "_metadata"
FILE_PATH = "file_path"


@dataclass(frozen=True)
class FileRows:
    """A batch's rows counted per source file.

    Attributes:
        batch: The batch (a ``RecordBatchReader`` read into a table).
        counts: Rows per file, the path spelled as the batch spells it.
        without: The batch without the rows of the given paths (spelled as in
            ``counts``).
    """

    batch: Any
    counts: dict[str, int]
    without: Callable[[Collection[str]], Any]


def file_rows(batch: Any) -> FileRows | None:
    """The batch's rows per source file, or ``None`` when the batch cannot tell (no
    ``_metadata.file_path``, no ``input_file_name()``, or rows without a file)."""
    if is_spark_dataframe(batch):
        return _spark_rows(batch)
    table = _arrow(batch)
    if table is None or METADATA not in table.column_names:
        return None
    column = table.column(METADATA)
    if not pa.types.is_struct(column.type) or column.type.get_field_index(FILE_PATH) < 0:
        return None
    paths = pc.struct_field(column, FILE_PATH)
    counts: dict[str, int] = {}
    for value in paths.to_pylist():
        if not value:
            return None
        counts[value] = counts.get(value, 0) + 1

    def without(drop: Collection[str]) -> pa.Table:
        keep = pc.invert(pc.is_in(paths, value_set=pa.array(sorted(drop), pa.string())))
        return table.filter(keep)

    return FileRows(table, counts, without)


def _arrow(batch: Any) -> pa.Table | None:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, pa.RecordBatchReader):
        return batch.read_all()
    return None


def _spark_rows(df: Any) -> FileRows | None:
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    # A ``_metadata`` the stream selected; else the file the scan reads each row from.
    # (A hidden ``_metadata`` does not reach a micro-batch: Spark hands foreachBatch a
    # plan of the query's output columns only.)
    candidates = [F.expr("input_file_name()")]
    if METADATA in df.columns:
        candidates.insert(0, F.col(f"{METADATA}.{FILE_PATH}"))
    for column in candidates:
        try:
            found = df.groupBy(column.alias("f")).count().collect()
        except PySparkException:  # not resolvable, or not supported on this compute
            continue
        counts = {row[0]: int(row[1]) for row in found}
        if any(not path for path in counts):
            return None  # rows without a file: after a shuffle, or not from a file
        chosen = column

        def without(drop: Collection[str], chosen: Any = chosen) -> Any:
            return df.filter(~chosen.isin(sorted(drop))) if drop else df

        return FileRows(df, counts, without)
    return None


def row_count(batch: Any) -> tuple[Any, int]:
    """The batch (a reader read into a table) and its number of rows."""
    if is_spark_dataframe(batch):
        return batch, int(batch.count())
    table = _arrow(batch)
    assert table is not None
    return table, table.num_rows


def empty_like(batch: Any) -> Any:
    """A batch of no rows with ``batch``'s columns (a version that leaves out every row
    is still written: it records the batch and advances the marker)."""
    if is_spark_dataframe(batch):
        return batch.limit(0)
    table = _arrow(batch)
    assert table is not None
    return table.slice(0, 0)
