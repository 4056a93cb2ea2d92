"""deltasink's own compaction on tables delta-spark made (issue 43), proven against
delta-spark: partition values that need escaping keep a readable table (each path in
the log escaped once), a compaction racing a plain delta-spark commit that enables
deletion vectors and deletes a row never brings the row back, and the compaction is an
``OPTIMIZE`` in ``DESCRIBE HISTORY``. Rows are read back by Spark and by delta-rs.
The spark engine's ``optimize()`` (Delta's own ``OPTIMIZE``) is run on the same tables
(its twin cases are marked ``FULL``).

Every test runs on the delta-spark suite's classic session (the ``delta_spark``
fixture), beside the embedded engine fed with ``pyarrow`` tables; inside the full suite
these tests run in that suite's own process (``CHILD_MODULES``).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from deltasink import DeltaSink, MergeSpec, UnsupportedTableFeatureError
from deltasink._faults import armed
from deltasink.backends.embedded import rewrite as rewrite_module
from deltasink.backends.spark.conf import session_conf
from tests import support
from tests.test_contract_spark import DELTA_SPARK_MODULE, FULL, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
__all__ = ["delta_spark"]

#: The issue's session time zone: a TIMESTAMP partition value read in it must not move.
ZONE = {"spark.sql.session.timeZone": "America/Los_Angeles"}
#: String partition values that need escaping in a path, and the null ones.
STRINGS = ["US East", "a:b", "100%", "k=v", "x/y", "ü", "", None]


def sink(engine: str, spark: Any, target: str, app: str = "op") -> DeltaSink:
    extra = {"spark": spark} if engine == "spark" else {}
    return DeltaSink(target, app, MergeSpec(keys=["id"]), engine=engine, **extra)


def read_both(spark: Any, target: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The target's rows as delta-spark and as delta-rs read them, by id; timestamps as
    UTC instants."""

    def norm(v: Any) -> Any:
        # a naive datetime from PySpark is in this process's local zone
        return v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) else v

    by_spark = [
        tuple(norm(v) for v in r) for r in spark.read.format("delta").load(target).collect()
    ]
    # delta-rs's query engine (its pyarrow reader refuses deletion vectors)
    table = QueryBuilder().register("t", DeltaTable(target)).execute("SELECT * FROM t").read_all()
    by_rs = [tuple(norm(v) for v in r.values()) for r in pa.table(table).to_pylist()]
    return sorted(by_spark), sorted(by_rs)


def live_paths(target: str) -> list[str]:
    """The paths of the live files as the log holds them."""
    live: dict[str, None] = {}
    for actions in support.log_commits(target).values():
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = None
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return list(live)


def escaped_partitions(spark: Any, target: str) -> None:
    """A table plain delta-spark makes in two appends (two small files per partition),
    partitioned by a string with every awkward value, a DATE and a TIMESTAMP."""
    values = ", ".join(
        f"({i}, {'NULL' if s is None else repr(s)})" for i, s in enumerate(STRINGS, start=1)
    )
    with session_conf(spark, ZONE):
        for k in (0, 100):
            spark.sql(
                f"SELECT CAST(id + {k} AS BIGINT) AS id, p, DATE'2024-02-29' AS d, "
                "TIMESTAMP'2024-01-01 10:00:00' AS ts, 'v' AS v "
                f"FROM VALUES {values} AS t(id, p)"
            ).write.format("delta").mode("append").partitionBy("p", "d", "ts").save(target)


# make test-delta-spark (make test's time): tests/test_compaction_paths.py covers the
# escaping in make test, without Spark
@FULL
@pytest.mark.parametrize("engine", ["embedded", "spark"])
def test_a_compaction_of_partition_values_that_need_escaping_keeps_the_table_readable(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """Issue 43, item 1: ``optimize()`` on a delta-spark table partitioned by strings
    with ' ', ':', '%', '=', '/', non-ASCII, '' and null, a DATE and a TIMESTAMP (session
    time zone America/Los_Angeles). Every live path in the log, decoded once, is a file
    on disk; Spark and delta-rs read the rows they read before; a MERGE then works."""
    target = str(tmp_path / "t")
    escaped_partitions(delta_spark, target)
    with session_conf(delta_spark, ZONE):
        before = read_both(delta_spark, target)
        assert before[0] == before[1]
        assert len(before[0]) == 2 * len(STRINGS)
        sink(engine, delta_spark, target).optimize()
        compacted = support.table_version(target)
        assert compacted == 2
        paths = live_paths(target)
        assert len(paths) == len(STRINGS) - 1  # '' and null are one partition
        assert all(os.path.isfile(os.path.join(target, unquote(p))) for p in paths), paths
        assert read_both(delta_spark, target) == before
        # the next MERGE, plain delta-spark's (the embedded engine's INT96 guard reads
        # the files of a table without timestamp statistics by their log paths: left
        # to that guard's owner)
        delta_spark.sql(
            f"MERGE INTO delta.`{target}` t USING (SELECT * FROM VALUES (1, 'US East'), "
            "(2, 'a:b') AS s(id, p)) s ON t.id = s.id AND t.p = s.p "
            "WHEN MATCHED THEN UPDATE SET v = 'w'"
        )
        after = read_both(delta_spark, target)
    assert after[0] == after[1]
    changed = {r[0]: r for r in after[0]}
    assert [changed[1][-1], changed[2][-1], changed[3][-1]] == ["w", "w", "v"]
    assert len(after[0]) == len(before[0])


def four_files(spark: Any, target: str) -> None:
    """ids 1..8 in four appends of small files, written by plain delta-spark."""
    for k in range(4):
        rows = [(2 * k + 1, "v"), (2 * k + 2, "v")]
        frame = spark.createDataFrame(rows, "id long, v string")
        frame.coalesce(1).write.format("delta").mode("append").save(target)


def enable_deletion_vectors_and_delete(spark: Any, target: str) -> Any:
    """A fault-point callback: the first call, plain delta-spark enables deletion vectors
    and deletes id 3 (a deletion vector on its file); later calls do nothing."""
    done: list[int] = []

    def race() -> None:
        if not done:
            done.append(1)
            spark.sql(
                f"ALTER TABLE delta.`{target}` "
                "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
            )
            spark.sql(f"DELETE FROM delta.`{target}` WHERE id = 3")

    return race


def ids(spark: Any, target: str) -> tuple[list[int], list[int]]:
    by_spark, by_rs = read_both(spark, target)
    return [r[0] for r in by_spark], [r[0] for r in by_rs]


def test_a_compaction_losing_to_deletion_vectors_and_a_delete_brings_no_row_back(
    delta_spark: Any, tmp_path: Path
) -> None:
    """Issue 43, item 2: ``optimize()`` loses its commit to plain delta-spark enabling
    deletion vectors and deleting id 3 by one. Its next round plans on the new snapshot,
    whose files it cannot rewrite row for row: refused by name, nothing committed, no
    file of its own left, and id 3 stays deleted for Spark and delta-rs."""
    target = str(tmp_path / "t")
    four_files(delta_spark, target)
    spark_files = sorted(Path(target).rglob("*.parquet"))
    race = enable_deletion_vectors_and_delete(delta_spark, target)
    with armed("rewrite.before_commit", race), pytest.raises(UnsupportedTableFeatureError) as err:
        sink("embedded", delta_spark, target).optimize()
    assert "deletionVectors" in str(err.value)
    assert "engine='spark'" in str(err.value)
    right = [1, 2, 4, 5, 6, 7, 8]
    assert ids(delta_spark, target) == (right, right)
    history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()
    assert [r.operation for r in history][:2] == ["DELETE", "SET TBLPROPERTIES"]
    assert len(history) == 6
    assert sorted(Path(target).rglob("*.parquet")) == spark_files  # none of its own left


@FULL
def test_a_rewrite_planned_before_a_deletion_vector_was_added_is_lost(
    delta_spark: Any, tmp_path: Path
) -> None:
    """Issue 43, item 2, the commit's own check: a rewrite planned before the race
    re-reads the table when its version is taken and finds the protocol changed and a
    removed file changed (a deletion vector on it): it commits nothing. The spark
    engine's ``optimize()`` (Delta's OPTIMIZE) then compacts it, rows unchanged."""
    target = str(tmp_path / "t")
    four_files(delta_spark, target)
    spark_files = sorted(Path(target).rglob("*.parquet"))
    planned = DeltaTable(target)
    files = rewrite_module.files_of(planned)
    race = enable_deletion_vectors_and_delete(delta_spark, target)
    with armed("rewrite.before_commit", race), pytest.raises(rewrite_module.Lost):
        rewrite_module.rewrite(
            planned, files, uri=target, storage_options=None, target_size=1 << 27, metadata={}
        )
    now = rewrite_module.files_of(DeltaTable(target))
    assert {f.path for f in now} == {f.path for f in files}
    assert set(now) != set(files)  # one of them has a deletion vector now
    right = [1, 2, 4, 5, 6, 7, 8]
    assert ids(delta_spark, target) == (right, right)
    assert sorted(Path(target).rglob("*.parquet")) == spark_files
    # the spark engine's twin: Delta's OPTIMIZE compacts the table, DVs and all
    sink("spark", delta_spark, target).optimize()
    assert ids(delta_spark, target) == (right, right)


@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], ("embedded",)))
def test_a_compaction_is_an_optimize_in_describe_history(
    delta_spark: Any, tmp_path: Path, engine: str
) -> None:
    """Issue 43, item 7: the compaction ``optimize()`` makes on a delta-spark table is an
    ``OPTIMIZE`` in Spark's ``DESCRIBE HISTORY``, with Delta's parameters and metrics,
    its actions ``dataChange=false``; the rows are unchanged."""
    target = str(tmp_path / "t")
    four_files(delta_spark, target)
    small = len(DeltaTable(target).file_uris())
    sink(engine, delta_spark, target).optimize()
    last = delta_spark.sql(f"DESCRIBE HISTORY delta.`{target}` LIMIT 1").collect()[0]
    assert last.version == 4
    assert last.operation == "OPTIMIZE"
    assert last.operationParameters["predicate"] == "[]"
    assert last.operationParameters["zOrderBy"] == "[]"
    assert last.operationParameters["auto"] == "false"
    metrics = last.operationMetrics
    assert (metrics["numRemovedFiles"], metrics["numAddedFiles"]) == (str(small), "1")
    sizes = [int(metrics[k]) for k in ("minFileSize", "p50FileSize", "maxFileSize")]
    assert sizes[0] == sizes[1] == sizes[2] == int(metrics["numAddedBytes"]) > 0
    assert int(metrics["numRemovedBytes"]) > 0
    actions = support.log_commits(target)[4]
    changes = [a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a]
    assert changes == [False] * (small + 1)
    right = list(range(1, 9))
    assert ids(delta_spark, target) == (right, right)


def test_a_compaction_copies_generated_columns_without_computing_them_again(
    delta_spark: Any, tmp_path: Path
) -> None:
    """``g DOUBLE GENERATED ALWAYS AS (n / 4)`` made and filled by delta-spark (7.5 for
    ``n = 30``): the embedded engine's ``optimize()`` copies the rows (delta-rs, given
    the column's expression, would check them with DataFusion's integer division and
    refuse the compaction; found by the table zoo, seed 225664660); Spark and delta-rs
    read the same rows after."""
    target = str(tmp_path / "t")
    delta_spark.sql(
        f"CREATE TABLE delta.`{target}` (id BIGINT, n BIGINT, "
        "g DOUBLE GENERATED ALWAYS AS (n / 4)) USING delta"
    )
    for i in (1, 2, 3):
        delta_spark.sql(f"INSERT INTO delta.`{target}` (id, n) VALUES ({i}, {i * 10})")
    sink("embedded", delta_spark, target).optimize()
    assert support.commit_info(target, 4)["operation"] == "OPTIMIZE"
    assert len(DeltaTable(target).file_uris()) == 1
    expected = [(1, 10, 2.5), (2, 20, 5.0), (3, 30, 7.5)]
    by_spark = sorted(tuple(r) for r in delta_spark.read.format("delta").load(target).collect())
    by_rs = sorted(tuple(r.values()) for r in DeltaTable(target).to_pyarrow_table().to_pylist())
    assert (by_spark, by_rs) == (expected, expected)


def test_a_compaction_of_a_table_with_a_feature_delta_rs_cannot_write_is_refused_by_name(
    delta_spark: Any, tmp_path: Path
) -> None:
    """A liquid-clustered table delta-spark made (writer features ``clustering``,
    ``domainMetadata``): the embedded engine's ``optimize()`` is refused by name,
    nothing committed (delta-rs refused each commit, which was taken for a lost race six
    times in a row: found by the table zoo, seed 1145714201)."""
    target = str(tmp_path / "t")
    delta_spark.sql(
        f"CREATE TABLE delta.`{target}` (id BIGINT, v STRING) USING delta CLUSTER BY (id)"
    )
    for i in (1, 2):
        delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES ({i}, 'x')")
    with pytest.raises(UnsupportedTableFeatureError, match="clustering") as info:
        sink("embedded", delta_spark, target).optimize()
    assert "clustering" in info.value.features
    assert support.table_version(target) == 2
