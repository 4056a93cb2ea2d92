"""What deltasink is compared against: the same work done directly.

* :func:`bare_merge`: one delta-rs MERGE, the way the delta-rs docs write an upsert
  (``when_matched_update_all`` + ``when_not_matched_insert_all``, default options).
* :func:`sail_merge`: the embedded engine's own ``MERGE INTO delta.`path```.
* :func:`parquet_write`: the physical floor, writing the rows once with
  ``pyarrow.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.data import KEY

__all__ = ["MERGE_SQL", "bare_merge", "open_table", "parquet_write", "read_sorted", "sail_merge"]

MERGE_SQL = (
    "MERGE INTO delta.`{target}` AS t USING {view} AS s ON t.{key} = s.{key} "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)


def open_table(path: Path) -> Any:
    """``deltalake.DeltaTable`` at ``path``."""
    from deltalake import DeltaTable

    return DeltaTable(str(path))


def bare_merge(table: Any, batch: pa.Table, *, streamed_exec: bool = True) -> dict[str, Any]:
    """Upsert ``batch`` into an open ``DeltaTable`` by key with one delta-rs MERGE.

    Args:
        table: An open ``deltalake.DeltaTable``.
        batch: The source rows.
        streamed_exec: delta-rs's default (``True``) streams the source and therefore
            cannot prune target files by the source's key range; ``False`` does.
    """
    metrics: dict[str, Any] = (
        table.merge(
            batch,
            f"t.{KEY} = s.{KEY}",
            source_alias="s",
            target_alias="t",
            streamed_exec=streamed_exec,
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    return metrics


def sail_merge(spark: Any, target: Path, view: str) -> None:
    """``MERGE INTO delta.`target` USING view`` on the engine (Sail)."""
    spark.sql(MERGE_SQL.format(target=target, view=view, key=KEY)).collect()


def parquet_write(table: pa.Table, path: Path) -> None:
    """Write ``table`` once as one Parquet file (snappy, pyarrow's defaults)."""
    pq.write_table(table, path)


def read_sorted(path: Path) -> pa.Table:
    """A Delta table's current rows sorted by key (for equality checks)."""
    table: pa.Table = open_table(path).to_pyarrow_table()
    return table.sort_by(KEY)


def same_rows(a: Path, b: Path) -> bool:
    """Whether two Delta tables hold the same rows (compared sorted by key, with the
    second cast to the first's schema)."""
    left, right = read_sorted(a), read_sorted(b)
    if left.num_rows != right.num_rows or left.column_names != right.column_names:
        return False
    try:
        right = right.cast(left.schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return bool(left.equals(right))
