"""PySpark 3.5 (Databricks 14.3 to 15.4 LTS): what works without Delta's JVM jars.

Run by ``make test-spark35`` in ``.venv-spark35/`` (pyspark 3.5.9, classic sessions;
PySpark 3.5 has no ``DataFrame.toArrow``). In the main environment (PySpark 4) the
module skips. Covered: 3.5 DataFrames into the embedded (delta-rs) engine, batch and
``foreachBatch``; ``delete_when`` evaluated by the 3.5 session; the spark engine's
coalescing SQL run by Spark 3.5 against the embedded engine's fold; the conf scoping
of Delta's idempotent-write confs on a 3.5 session.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

pyspark = pytest.importorskip("pyspark")
if not pyspark.__version__.startswith("3.5"):
    pytest.skip(
        f"PySpark {pyspark.__version__} here; the 3.5 suite runs in `make test-spark35`",
        allow_module_level=True,
    )
if shutil.which("java") is None:
    pytest.skip("no Java: a classic PySpark session needs a JVM", allow_module_level=True)

from pyspark.sql import SparkSession  # noqa: E402

from deltasink import DeltaSink, MergeSpec  # noqa: E402
from deltasink.backends.spark.conf import TXN_APP_ID, TXN_VERSION, delta_txn  # noqa: E402
from deltasink.backends.spark.publish import source_sql  # noqa: E402
from deltasink.core.coalesce import coalesce  # noqa: E402
from deltasink.input.arrow import spark_arrow  # noqa: E402
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN  # noqa: E402
from deltasink.ops.layout import VERSION_COLUMN  # noqa: E402

# py4j in PySpark 3.5 leaves gateway sockets to the garbage collector: its warning, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SEQ_DEL = MergeSpec(keys=["id"], sequence_by="seq", delete_when="op = 'D'")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = (
        SparkSession.builder.master("local[1]")
        .appName("deltasink-pyspark35")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield session
    session.stop()


def rows(target: str) -> list[dict[str, Any]]:
    return sorted(DeltaTable(target).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])


def test_the_session_is_pyspark_35_without_to_arrow(spark: Any) -> None:
    assert spark.version.startswith("3.5")
    assert not hasattr(spark.range(1), "toArrow")


def test_every_column_type_of_a_35_dataframe_reaches_the_target(spark: Any, tmp_path: Path) -> None:
    df = spark.sql(
        """
        SELECT * FROM VALUES
          (1L, 'a', 1.5D, CAST(1.250 AS DECIMAL(18,3)), DATE'2024-01-01',
           TIMESTAMP'2024-01-01 00:00:00.000123', true, 7, array(1, 2)),
          (2L, NULL, -0.0D, CAST(2.5 AS DECIMAL(18,3)), DATE'1969-12-31',
           TIMESTAMP'1969-12-31 23:59:59.999900', false, NULL, array())
        AS t(id, name, score, price, day, ts, flag, small, tags)
        """
    )
    target = str(tmp_path / "orders")
    sink = DeltaSink(target, "spark35", MergeSpec(keys=["id"]), engine="embedded")
    assert sink.engine == "embedded"
    sink.write(df, 0)
    utc = dt.timezone.utc
    assert rows(target) == [
        {
            "id": 1,
            "name": "a",
            "score": 1.5,
            "price": Decimal("1.250"),
            "day": dt.date(2024, 1, 1),
            "ts": dt.datetime(2024, 1, 1, 0, 0, 0, 123, tzinfo=utc),
            "flag": True,
            "small": 7,
            "tags": [1, 2],
        },
        {
            "id": 2,
            "name": None,
            "score": -0.0,
            "price": Decimal("2.500"),
            "day": dt.date(1969, 12, 31),
            "ts": dt.datetime(1969, 12, 31, 23, 59, 59, 999900, tzinfo=utc),
            "flag": False,
            "small": None,
            "tags": [],
        },
    ]
    assert DeltaTable(target).transaction_version("spark35") == 0


def test_an_empty_35_dataframe_still_advances_the_marker(spark: Any, tmp_path: Path) -> None:
    target = str(tmp_path / "orders")
    sink = DeltaSink(target, "spark35", MergeSpec(keys=["id"]), engine="embedded")
    sink.write(spark.createDataFrame([(1, "a")], "id long, v string"), 0)
    sink.write(spark.createDataFrame([], "id long, v string"), 1)
    assert rows(target) == [{"id": 1, "v": "a"}]
    assert DeltaTable(target).transaction_version("spark35") == 1


def test_delete_when_on_the_35_session_coalesced_equals_one_by_one(
    spark: Any, tmp_path: Path
) -> None:
    schema = "id long, seq long, op string"
    batches = [
        spark.createDataFrame([(1, 1, "U")], schema),
        spark.createDataFrame([(1, 5, "D"), (3, 5, "D")], schema),
        spark.createDataFrame([(1, 3, "U"), (3, 3, "U")], schema),
    ]
    one = DeltaSink(str(tmp_path / "one"), "app", SEQ_DEL, engine="embedded")
    for version, df in enumerate(batches):
        one.write(df, version)
    together = DeltaSink(str(tmp_path / "together"), "app", SEQ_DEL, engine="embedded")
    together.write(batches[0], 0)
    together.pre_commit(batches[1], 1)
    together.pre_commit(batches[2], 2)
    assert together.commit(2).committed_versions == [1, 2]
    expected = [{"id": 1, "seq": 3, "op": "U"}, {"id": 3, "seq": 3, "op": "U"}]
    assert rows(one.target) == expected
    assert rows(together.target) == expected


def test_foreach_batch_of_a_35_stream(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "landing"
    source.mkdir()
    for i in range(3):
        lines = [json.dumps({"id": i * 10 + j, "v": f"b{i}"}) for j in range(2)]
        (source / f"part-{i}.json").write_text("\n".join(lines) + "\n")
    target = str(tmp_path / "orders")
    sink = DeltaSink(target, "stream35", MergeSpec(keys=["id"]), engine="embedded")
    query = (
        spark.readStream.schema("id long, v string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(sink.foreach_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert [r["id"] for r in rows(target)] == [0, 1, 10, 11, 20, 21]
    assert DeltaTable(target).transaction_version("stream35") == 2


def test_spark_arrow_collects_a_35_dataframe_without_row_objects(spark: Any) -> None:
    df = spark.createDataFrame([(1, "x"), (2, None)], "id long, v string")
    table = spark_arrow(df)
    assert table.schema == pa.schema([("id", pa.int64()), ("v", pa.string())])
    assert table.to_pylist() == [{"id": 1, "v": "x"}, {"id": 2, "v": None}]
    assert spark_arrow(df.limit(0)).num_rows == 0


def test_the_spark_engines_coalescing_sql_on_35_equals_the_embedded_fold(
    spark: Any, tmp_path: Path
) -> None:
    staged = [
        (1, pa.table({"id": [1, 2, 3], "seq": [4, 4, 9], "op": ["U", "U", "U"]})),
        (2, pa.table({"id": [1, 2, 3], "seq": [4, 6, 2], "op": ["D", "D", "D"]})),
        (3, pa.table({"id": [1, 2, 3], "seq": [2, 1, 8], "op": ["U", "U", "U"]})),
        (4, pa.table({"id": [1, 2, 4], "seq": [2, 1, 1], "op": ["D", "U", "D"]})),
    ]
    flagged = [
        (v, t.append_column(DELETE_COLUMN, pc.equal(t.column("op"), "D"))) for v, t in staged
    ]
    rows_ = []
    for version, table in flagged:
        for row in table.to_pylist():
            rows_.append({**row, VERSION_COLUMN: version})
    view = spark.createDataFrame(
        rows_, f"id long, seq long, op string, {DELETE_COLUMN} boolean, {VERSION_COLUMN} long"
    )
    view.createOrReplaceTempView("staged35")
    query = source_sql("staged35", [1, 2, 3, 4], ["id", "seq", "op"], SEQ_DEL)
    from_spark = sorted(spark_arrow(spark.sql(query)).to_pylist(), key=lambda r: r["id"])
    embedded = sorted(coalesce(flagged, SEQ_DEL).to_pylist(), key=lambda r: r["id"])
    assert from_spark == embedded
    assert [(r["id"], r[DELETE_COLUMN], r[GUARD_COLUMN]) for r in embedded] == [
        (1, True, 4),
        (2, False, 6),
        (3, False, 9),
        (4, True, 1),
    ]


def test_delta_txn_confs_are_scoped_on_a_35_session(spark: Any) -> None:
    assert spark.conf.get(TXN_APP_ID, None) is None
    spark.conf.set(TXN_VERSION, "3")
    with delta_txn(spark, "app", 7, user_metadata="deltasink"):
        assert spark.conf.get(TXN_APP_ID) == "app"
        assert spark.conf.get(TXN_VERSION) == "7"
    assert spark.conf.get(TXN_APP_ID, None) is None
    assert spark.conf.get(TXN_VERSION) == "3"
    with pytest.raises(ZeroDivisionError), delta_txn(spark, "app", 8):
        raise ZeroDivisionError
    assert spark.conf.get(TXN_APP_ID, None) is None
    spark.conf.unset(TXN_VERSION)
