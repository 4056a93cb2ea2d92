"""The embedded engine hands a Spark DataFrame's rows to Arrow through Parquet files it
writes itself (deltasink.backends.embedded.transfer): the same table as ``toArrow``,
its row order when asked, no files left behind, the DataFrame's own errors."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import DeltaSink, MergeSpec
from deltasink.backends.embedded import transfer
from deltasink.backends.embedded.sail import serves
from tests import support

#: One column per type a batch may hold, each with a value and a null.
TYPED = {
    "l": "1L",
    "i": "1",
    "s": "CAST(1 AS SMALLINT)",
    "t": "CAST(1 AS TINYINT)",
    "d": "CAST('NaN' AS DOUBLE)",
    "f": "CAST(-0.0 AS FLOAT)",
    "dec": "CAST(1.5 AS DECIMAL(12, 3))",
    "dec38": "CAST('12345678901234567890.123456789012345678' AS DECIMAL(38, 18))",
    "str": "'héllo'",
    "empty": "''",
    "bin": "X'0001'",
    "b": "true",
    "day": "DATE'1582-10-04'",
    "ts": "TIMESTAMP'2026-01-01 12:34:56.123456'",
    "old": "TIMESTAMP'1500-01-01 00:00:00'",
    "ntz": "TIMESTAMP_NTZ'2026-01-01 00:00:00.000001'",
    "dt": "INTERVAL '1 02:03:04' DAY TO SECOND",
    "arr": "array(1, NULL, 2)",
    "m": "map('a', 1, 'b', NULL)",
    "st": "named_struct('a', 1, 'b', 'x')",
    "nested": "array(named_struct('k', 'v', 'm', map(1, array(2.5D))))",
    "`sp ace`": "1",
    "`ünï`": "3",
}


def _no_to_arrow(df: Any) -> pa.Table:
    raise AssertionError("the engine route fell back to toArrow")


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the transfer writes in, private to the test."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def test_the_embedded_session_is_served_in_this_process(spark: Any) -> None:
    assert serves(spark)
    assert not serves(object())


@pytest.mark.parametrize("column", sorted(TYPED))
def test_the_files_give_to_arrow_s_table_for_every_type(
    spark: Any, scratch: Path, monkeypatch: pytest.MonkeyPatch, column: str
) -> None:
    df = spark.sql(f"SELECT {TYPED[column]} AS {column}, 0 AS n UNION ALL SELECT NULL, 1")
    expected = df.toArrow().sort_by("n")
    monkeypatch.setattr(transfer, "spark_arrow", _no_to_arrow)
    got = transfer.engine_arrow(df, False).sort_by("n")
    assert got.schema == expected.schema
    # NaN != NaN: compare the values as Python objects rendered as text.
    assert str(got.to_pylist()) == str(expected.to_pylist())
    assert list(scratch.iterdir()) == []


def test_ordered_rows_come_in_the_dataframe_s_order(
    spark: Any, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order of the DataFrame's partitions, then of the rows in each: ``range``'s
    ascending ids. (Sail's ``toArrow`` returns partitions as they finish.)"""
    df = spark.range(0, 200_000, numPartitions=8).selectExpr("id", "id % 7 AS k")
    expected = df.toArrow().sort_by("id")
    monkeypatch.setattr(transfer, "spark_arrow", _no_to_arrow)
    assert transfer.engine_arrow(df, True).equals(expected)
    assert transfer.engine_arrow(df, False).sort_by("id").equals(expected)


def test_zero_rows_give_the_typed_empty_table(spark: Any, scratch: Path) -> None:
    df = spark.sql("SELECT 1L AS id, 'x' AS value, DATE'2026-01-01' AS day").limit(0)
    got = transfer.engine_arrow(df, True)
    assert got.num_rows == 0
    assert got.schema == df.toArrow().schema


def test_a_sequence_tie_goes_to_the_later_row_across_the_engine_s_files(
    spark: Any, target: str, scratch: Path
) -> None:
    """Within one batch a ``sequence_by`` tie goes to the later row (docs/guarantees.md):
    the rows of sixteen partitions, written to a few files, keep the DataFrame's order
    (the last partition holds every key's winner)."""
    df = spark.range(0, 160_000, numPartitions=16).selectExpr("id % 10 AS k", "0 AS seq", "id AS v")
    DeltaSink(target, "ties", MergeSpec(keys=["k"], sequence_by="seq")).write(df, 0)
    assert support.rows(target, sort_by="k") == [
        {"k": k, "seq": 0, "v": 160_000 - 10 + k} for k in range(10)
    ]
    assert list(scratch.iterdir()) == []


def test_a_large_spark_batch_lands_whole_through_the_files(
    spark: Any, target: str, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transfer, "spark_arrow", _no_to_arrow)
    df = spark.range(0, 300_000, numPartitions=4).selectExpr(
        "id", "CAST(id AS STRING) AS value", "CAST(id % 3 = 0 AS BOOLEAN) AS gone"
    )
    sink = DeltaSink(target, "big", MergeSpec(keys=["id"], delete_when="gone"))
    sink.write(spark.range(0, 10).selectExpr("id", "'old' AS value", "false AS gone"), 0)
    sink.write(df, 1)
    ids = support.ids(target)
    assert ids == [i for i in range(300_000) if i % 3]
    assert support.marker(target, "big") == 1


def test_the_dataframe_s_own_error_is_raised_and_nothing_is_left(
    spark: Any, target: str, scratch: Path
) -> None:
    df = spark.sql("SELECT id, raise_error('boom') AS value FROM range(3)")
    with pytest.raises(Exception, match="boom"):
        DeltaSink(target, "errors", MergeSpec(keys=["id"])).write(df, 0)
    assert not support.exists(target)
    assert list(scratch.iterdir()) == []
