"""The embedded backend on real Delta tables: MERGE semantics, logs and metadata."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from deltasink import DeltaSink, InvalidVersionError, MergeSpec, __version__
from deltasink.core.guards import PROP_APP, PROP_TARGET
from deltasink.ops.layout import PROP_SPEC
from tests import support

SCHEMA = "id long, value string, ts long"


def sql_rows(spark: Any, target: str, order: str = "id") -> Any:
    return spark.sql(f"SELECT * FROM delta.`{target}` ORDER BY {order}")


def test_upsert_from_spark_is_visible_to_spark_sql(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.write(spark.createDataFrame([(1, "a", 1), (2, "b", 1)], SCHEMA), 0)
    sink.write(spark.createDataFrame([(2, "B", 2), (3, "c", 2)], SCHEMA), 1)
    expected = spark.createDataFrame([(1, "a", 1), (2, "B", 2), (3, "c", 2)], SCHEMA)
    assert_df_equality(sql_rows(spark, target), expected, ignore_nullable=True)


def test_insert_mode_never_changes_existing_rows(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"], mode="insert"))
    sink.write(spark.createDataFrame([(1, "first", 1)], SCHEMA), 0)
    report = sink.write(spark.createDataFrame([(1, "second", 2), (2, "new", 2)], SCHEMA), 1)
    assert (report.results[0].rows_inserted, report.results[0].rows_updated) == (1, 0)
    expected = spark.createDataFrame([(1, "first", 1), (2, "new", 2)], SCHEMA)
    assert_df_equality(sql_rows(spark, target), expected, ignore_nullable=True)


def test_insert_mode_with_nothing_new_still_advances_the_marker(target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"], mode="insert"))
    sink.write(pa.table({"id": [1], "value": ["a"]}), 0)
    sink.write(pa.table({"id": [1], "value": ["b"]}), 1)
    assert support.marker(target, "orders") == 1
    assert support.rows(target) == [{"id": 1, "value": "a"}]


def test_append_mode_appends_each_version_once(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "events", MergeSpec(mode="append"))
    batch = spark.createDataFrame([(1, "x", 1), (1, "x", 1)], SCHEMA)  # duplicates are data
    sink.write(batch, 0)
    sink.write(batch, 0)  # a replay
    sink.write(batch, 1)
    assert support.ids(target) == [1, 1, 1, 1]
    assert support.marker(target, "events") == 1


def test_sequence_by_ignores_older_updates_across_batches(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "cdc", MergeSpec(keys=["id"], sequence_by="ts"))
    sink.write(spark.createDataFrame([(1, "v5", 5), (2, "v5", 5)], SCHEMA), 0)
    sink.write(spark.createDataFrame([(1, "v3", 3), (2, "v9", 9), (3, "v1", 1)], SCHEMA), 1)
    assert support.rows(target) == [
        {"id": 1, "value": "v5", "ts": 5},  # the late, older update is ignored
        {"id": 2, "value": "v9", "ts": 9},
        {"id": 3, "value": "v1", "ts": 1},
    ]
    assert support.marker(target, "cdc") == 1


def test_sequence_by_replaces_a_null_target_sequence(target: str) -> None:
    sink = DeltaSink(target, "cdc", MergeSpec(keys=["id"], sequence_by="ts"))
    sink.write(pa.table({"id": [1], "value": ["old"], "ts": pa.array([0], pa.int64())}), 0)
    DeltaTable(target).update(updates={"ts": "NULL"})  # another tool cleared it
    sink.write(pa.table({"id": [1], "value": ["new"], "ts": [1]}), 1)
    assert support.rows(target) == [{"id": 1, "value": "new", "ts": 1}]


def test_delete_when_deletes_matched_rows_and_never_inserts(spark: Any, target: str) -> None:
    spec = MergeSpec(keys=["id"], delete_when="op = 'D'")
    sink = DeltaSink(target, "cdc", spec)
    schema = "id long, value string, op string"
    sink.write(spark.createDataFrame([(1, "a", "I"), (2, "b", "I")], schema), 0)
    report = sink.write(spark.createDataFrame([(1, None, "D"), (3, "c", "D")], schema), 1)
    assert report.results[0].rows_deleted == 1
    assert support.rows(target) == [{"id": 2, "value": "b", "op": "I"}]


def test_delete_when_respects_sequence_by(target: str) -> None:
    spec = MergeSpec(keys=["id"], sequence_by="ts", delete_when="op = 'D'")
    sink = DeltaSink(target, "cdc", spec)
    sink.write(pa.table({"id": [1, 2], "ts": [5, 5], "op": ["I", "I"]}), 0)
    sink.write(pa.table({"id": [1, 2], "ts": [4, 6], "op": ["D", "D"]}), 1)  # 1's delete is old
    assert support.rows(target) == [{"id": 1, "ts": 5, "op": "I"}]


def test_delete_when_with_arrow_input_uses_the_embedded_engine(target: str) -> None:
    sink = DeltaSink(target, "cdc", MergeSpec(keys=["id"], delete_when="op = 'D'"))
    sink.write(pa.table({"id": [1, 2], "op": ["I", "I"]}), 0)
    sink.write(pa.table({"id": [1], "op": ["D"]}), 1)
    assert support.rows(target) == [{"id": 2, "op": "I"}]


def test_schema_evolution_adds_columns(target: str) -> None:
    sink = DeltaSink(target, "evolving", MergeSpec(keys=["id"], schema_evolution=True))
    sink.write(pa.table({"id": [1], "a": ["x"]}), 0)
    sink.write(pa.table({"id": [2], "a": ["y"], "b": [2.5]}), 1)
    assert support.rows(target) == [
        {"id": 1, "a": "x", "b": None},
        {"id": 2, "a": "y", "b": 2.5},
    ]


def test_batch_may_omit_nullable_target_columns(target: str) -> None:
    sink = DeltaSink(target, "partial", MergeSpec(keys=["id"], allow_missing_columns=True))
    sink.write(pa.table({"id": [1], "a": ["x"], "b": [1]}), 0)
    sink.write(pa.table({"id": [1, 2], "b": [5, 6]}), 1)
    assert support.rows(target) == [
        {"id": 1, "a": "x", "b": 5},  # an update leaves the missing column alone
        {"id": 2, "a": None, "b": 6},
    ]


def test_rich_types_round_trip(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "types", MergeSpec(keys=["id"]))
    df = spark.sql(
        "SELECT 1L AS id, timestamp'2024-03-01 12:00:00' AS ts, date'2024-03-01' AS d, "
        "CAST(12.34 AS DECIMAL(10,2)) AS amount, named_struct('city', 'Oslo', 'zip', 150) AS addr, "
        "array(1, 2) AS tags, 'æøå ✓' AS note"
    )
    sink.write(df, 0)
    row = support.rows(target)[0]
    assert row["ts"] == dt.datetime(2024, 3, 1, 12, tzinfo=dt.timezone.utc)
    assert row["d"] == dt.date(2024, 3, 1)
    assert row["amount"] == Decimal("12.34")
    assert row["addr"] == {"city": "Oslo", "zip": 150}
    assert row["tags"] == [1, 2]
    assert row["note"] == "æøå ✓"
    sink.write(df.selectExpr("id", "ts", "d", "amount", "addr", "array(3) AS tags", "note"), 1)
    assert support.rows(target)[0]["tags"] == [3]


def test_target_created_by_the_sink_is_nullable_and_readable(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.write(spark.sql("SELECT 1L AS id, 'a' AS value"), 0)  # literals are NOT NULL in Spark
    schema = pa.schema(DeltaTable(target).schema().to_arrow())
    assert all(f.nullable for f in schema)
    assert spark.sql(f"SELECT count(*) AS n FROM delta.`{target}`").collect()[0].n == 1


def test_readers_see_whole_batches_at_every_table_version(spark: Any, target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]), coalesce=False)
    batches = [[1, 2, 3], [4, 5], [6]]
    for version, ids in enumerate(batches):
        sink.pre_commit(pa.table({"id": ids, "value": ["x"] * len(ids)}), version)
    sink.commit(2)
    commits = support.txn_commits(target, "orders")
    for version in range(3):
        (delta_version,) = commits[version]
        seen = spark.sql(
            f"SELECT id FROM delta.`{target}` VERSION AS OF {delta_version} ORDER BY id"
        ).collect()
        assert [r.id for r in seen] == sorted(i for b in batches[: version + 1] for i in b)


def test_staging_commit_carries_txn_and_metadata(target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.pre_commit(pa.table({"id": [1, 2], "value": ["a", "b"]}), 7)
    commits = support.log_commits(sink.staging)
    (stage_version,) = [v for v, acts in commits.items() if any("txn" in a for a in acts)]
    actions = commits[stage_version]
    assert [a["txn"]["version"] for a in actions if "txn" in a] == [7]
    assert [a["add"]["partitionValues"] for a in actions if "add" in a] == [
        {"_deltasink_version": "7"}
    ]
    info = support.commit_info(sink.staging, stage_version)
    assert info["deltasink.operation"] == "stage"
    assert info["deltasink.appId"] == "orders"
    assert info["deltasink.batchVersion"] == 7
    assert info["deltasink.rows"] == 2
    assert info["deltasink.libraryVersion"] == __version__


def test_target_commit_carries_txn_and_metadata(target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.write(pa.table({"id": [1], "value": ["a"]}), 3)
    sink.write(pa.table({"id": [1], "value": ["b"]}), 4)
    commits = support.txn_commits(target, "orders")
    assert commits == {3: [0], 4: [1]}
    info = support.commit_info(target, 1)
    assert info["operation"] == "MERGE"
    text, _, cost = info["userMetadata"].partition(" deltasink=")
    assert text == "deltasink commit app=orders version=4"
    assert json.loads(cost) == info["deltasink"]  # what the commit cost, shown by Spark too
    assert info["deltasink"]["versions"] == [4]
    assert info["deltasink.batchVersion"] == 4
    assert info["deltasink.libraryVersion"] == __version__
    assert info["deltasink.staging"] == sink.staging


def test_staging_records_its_owner_and_merge_spec(target: str) -> None:
    spec = MergeSpec(keys=["id"], sequence_by="ts")
    sink = DeltaSink(target, "orders", spec)
    sink.pre_commit(pa.table({"id": [1], "ts": [1]}), 0)
    config = DeltaTable(sink.staging).metadata().configuration
    assert config[PROP_TARGET] == target
    assert config[PROP_APP] == "orders"
    assert MergeSpec.from_json(config[PROP_SPEC]) == spec
    assert json.loads(config[PROP_SPEC])["sequence_by"] == "ts"
    assert sink.staging == f"{target}_deltasink_staging/orders"


def test_recover_without_the_jobs_merge_spec_uses_the_recorded_one(target: str) -> None:
    DeltaSink(target, "orders", MergeSpec(keys=["id"], mode="insert")).pre_commit(
        pa.table({"id": [1], "value": ["a"]}), 0
    )
    operator = DeltaSink(target, "orders")  # what `deltasink recover` builds
    assert operator.recover().committed_versions == [0]
    assert support.rows(target) == [{"id": 1, "value": "a"}]


def test_committed_staging_data_is_removed(target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    for version in range(3):
        sink.pre_commit(pa.table({"id": [version], "value": ["x"]}), version)
    report = sink.commit(1)
    assert report.cleaned_versions == (0, 1)
    assert support.staged_versions(sink.staging) == [2]
    assert sink.status().leftover_versions == []


def test_two_apps_on_one_target_keep_separate_markers(target: str) -> None:
    a = DeltaSink(target, "app-a", MergeSpec(keys=["id"]))
    b = DeltaSink(target, "app-b", MergeSpec(keys=["id"]))
    a.write(pa.table({"id": [1], "value": ["a"]}), 10)
    b.write(pa.table({"id": [2], "value": ["b"]}), 0)
    a.write(pa.table({"id": [3], "value": ["a"]}), 11)
    assert support.marker(target, "app-a") == 11
    assert support.marker(target, "app-b") == 0
    assert support.ids(target) == [1, 2, 3]
    assert a.staging != b.staging
    assert b.pre_commit(pa.table({"id": [2], "value": ["b"]}), 0).state == "already_committed"


def test_status_and_history(target: str) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    status = sink.status()
    assert (status.committed_version, status.pending_versions, status.target_exists) == (
        None,
        [],
        False,
    )
    sink.write(pa.table({"id": [1, 2], "value": ["a", "b"]}), 0)
    sink.write(pa.table({"id": [2, 3], "value": ["B", "c"]}), 1)
    sink.pre_commit(pa.table({"id": [4], "value": ["d"]}), 2)
    status = sink.status()
    assert status.committed_version == 1
    assert status.pending_versions == [2]
    assert [(p.version, p.rows) for p in status.pending] == [(2, 1)]
    assert status.engine == "embedded"
    assert status.to_dict()["pending"][0]["rows"] == 1
    history = sink.history()
    assert [(h.version, h.target_version, h.operation) for h in history] == [
        (1, 1, "MERGE"),
        (0, 0, "WRITE"),
    ]
    assert (history[0].rows_inserted, history[0].rows_updated) == (1, 1)


@pytest.mark.parametrize("batch_rows", [0, 1, 2500])
def test_staged_rows_are_exactly_the_batch(target: str, batch_rows: int) -> None:
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    table = pa.table(
        {
            "id": pa.array(range(batch_rows), pa.int64()),
            "value": pa.array([str(i) for i in range(batch_rows)], pa.string()),
        }
    )
    committable = sink.pre_commit(table, 0)
    assert committable.rows == batch_rows
    staged = sink._backend.log.read(0)  # type: ignore[attr-defined]
    assert staged.num_rows == batch_rows
    assert sorted(staged.column("id").to_pylist()) == list(range(batch_rows))


def test_empty_arrow_batch_with_delete_when(target: str) -> None:
    sink = DeltaSink(target, "cdc", MergeSpec(keys=["id"], delete_when="op = 'D'"))
    sink.write(pa.table({"id": [1], "op": ["I"]}), 0)
    empty = pa.table({"id": pa.array([], pa.int64()), "op": pa.array([], pa.string())})
    assert sink.write(empty, 1).committed_versions == [1]
    assert support.marker(target, "cdc") == 1
    assert support.rows(target) == [{"id": 1, "op": "I"}]


def test_foreach_batch_refuses_a_reset_checkpoint(target: str) -> None:
    sink = DeltaSink(target, "stream", MergeSpec(mode="append"))
    for batch_id in range(3):
        sink.foreach_batch(pa.table({"id": [batch_id]}), batch_id)
    sink.foreach_batch(pa.table({"id": [2]}), 2)  # Spark replays the last batch: a no-op
    with pytest.raises(InvalidVersionError, match="checkpoint was reset"):
        sink.foreach_batch(pa.table({"id": [0]}), 0)  # a new checkpoint, same app_id
    assert support.ids(target) == [0, 1, 2]


def test_foreach_batch_reads_the_logs_once_and_returns_its_report(target: str) -> None:
    sink = DeltaSink(target, "stream", MergeSpec(keys=["id"]))
    backend = sink._backend  # a counting spy around the real backend's one log read
    real_read = backend.read_state
    reads: list[int] = []

    def counted() -> Any:
        reads.append(1)
        return real_read()

    backend.read_state = counted  # type: ignore[method-assign]
    first = sink.foreach_batch(pa.table({"id": [1], "v": ["a"]}), 0)
    assert (first.committed_versions, len(reads)) == ([0], 1)
    reads.clear()
    replay = sink.foreach_batch(pa.table({"id": [1], "v": ["a"]}), 0)
    assert (replay.results, replay.committed_version) == ((), 0)
    assert support.rows(target) == [{"id": 1, "v": "a"}]


def test_an_empty_target_with_timestamps_takes_an_upsert(target: str) -> None:
    """The INT96 check over a target without files (a date partition, a timestamp
    column: statistics columns but no rows) finds nothing to refuse (found by the
    writers model: it failed on Arrow's null-typed empty array)."""
    from deltalake import write_deltalake

    schema = pa.schema([("p", pa.date32()), ("k", pa.int64()), ("ts", pa.timestamp("us", "UTC"))])
    write_deltalake(target, pa.Table.from_pylist([], schema), partition_by=["p"])
    row = {"p": dt.date(1, 1, 1), "k": 1, "ts": dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)}
    DeltaSink(target, "a", MergeSpec(keys=["p", "k"])).write(pa.Table.from_pylist([row], schema), 0)
    assert support.rows(target, sort_by="k") == [row]


def live_partition_values(target: str) -> list[dict[str, Any]]:
    """The partition values of the target's live files, as its log records them."""
    live: dict[str, dict[str, Any]] = {}
    for actions in support.log_commits(target).values():
        for action in actions:
            if "add" in action:
                live[action["add"]["path"]] = action["add"]["partitionValues"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return list(live.values())


def test_a_timestamp_partition_column_is_refused_by_name_before_anything_is_staged(
    target: str, tmp_path: Path
) -> None:
    """delta-rs records a ``TIMESTAMP`` partition value without a zone, which Spark reads
    in its session zone: a target partitioned by one (existing, or one a ``TableSpec``
    would create) is refused by name, nothing staged; ``TIMESTAMP_NTZ`` (zone-less by
    definition) is written (issue 43, item 5; with Spark: tests/test_timestamps_jvm.py)."""
    from deltalake import write_deltalake

    from deltasink import TableSpec, UnsupportedTableFeatureError

    schema = pa.schema(
        [("id", pa.int64()), ("ts", pa.timestamp("us", "UTC")), ("ntz", pa.timestamp("us"))]
    )
    utc = dt.timezone.utc
    rows = [
        {"id": 1, "ts": dt.datetime(1, 1, 1, tzinfo=utc), "ntz": dt.datetime(1, 1, 1)},
        {"id": 2, "ts": dt.datetime(2024, 11, 3, 8, 30, 0, 1, tzinfo=utc), "ntz": None},
    ]
    batch = pa.Table.from_pylist(rows, schema)
    layout = TableSpec(partition_by=["ts", "ntz"])
    creating = DeltaSink(target, "a", MergeSpec(keys=["id"]), table=layout)
    with pytest.raises(UnsupportedTableFeatureError, match=r"would partition by the TIMESTAMP"):
        creating.write(batch, 0)
    assert not support.exists(target)
    assert creating.status().pending_versions == []
    existing = str(tmp_path / "existing")
    write_deltalake(existing, batch, partition_by=["ts"])
    sink = DeltaSink(existing, "a", MergeSpec(keys=["id"]))
    with pytest.raises(UnsupportedTableFeatureError, match="engine='spark'") as info:
        sink.pre_commit(batch, 0)
    assert info.value.features == ["timestampPartitionColumn"]
    assert sink.status().pending_versions == []
    assert support.table_version(existing) == 0
    ntz = DeltaSink(target, "a", MergeSpec(keys=["id"]), table=TableSpec(partition_by=["ntz"]))
    ntz.write(batch, 0)
    rows[1]["ntz"] = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    ntz.write(pa.Table.from_pylist(rows[1:], schema), 1)
    assert support.rows(target) == rows
    assert sorted(v["ntz"] for v in live_partition_values(target)) == [
        "0001-01-01 00:00:00.000000",
        "9999-12-31 23:59:59.999999",
    ]


def test_int96_in_an_array_beside_indexed_timestamps_is_read_not_trusted(target: str) -> None:
    """A file (as Spark writes them) storing INT96 timestamps in an array, beside a
    timestamp column whose statistics are in range: the statistics cannot show the
    array, so the INT96 guard reads it. In range, an upsert rewrites the file and keeps
    the values exactly; with 0001-01-01 there, the upsert is refused by name and nothing
    is written (issue 43, item 3; with Spark: tests/test_timestamps_jvm.py)."""
    import os

    import pyarrow.parquet as pq
    from deltalake import write_deltalake
    from deltalake.transaction import AddAction

    from deltasink import UnsupportedTableFeatureError

    utc = dt.timezone.utc
    kind = pa.timestamp("us", "UTC")
    schema = pa.schema([("id", pa.int64()), ("s", kind), ("h", pa.list_(kind)), ("v", pa.string())])
    write_deltalake(target, schema.empty_table())
    stamp = dt.datetime(2020, 1, 1, tzinfo=utc)

    def spark_file(name: str, rows: list[tuple[int, dt.datetime]]) -> AddAction:
        table = pa.Table.from_pylist(
            [{"id": i, "s": stamp, "h": [h], "v": "a"} for i, h in rows], schema
        )
        pq.write_table(table, os.path.join(target, name), use_deprecated_int96_timestamps=True)
        low, high = min(i for i, _ in rows), max(i for i, _ in rows)
        stats = {
            "numRecords": len(rows),
            "minValues": {"id": low, "s": "2020-01-01T00:00:00.000Z", "v": "a"},
            "maxValues": {"id": high, "s": "2020-01-01T00:00:00.000Z", "v": "a"},
            "nullCount": {"id": 0, "s": 0, "h": 0, "v": 0},
        }
        size = os.path.getsize(os.path.join(target, name))
        return AddAction(name, size, {}, 0, True, json.dumps(stats))

    edge = dt.datetime(1677, 9, 22, 0, 0, 0, 1, tzinfo=utc)
    first = spark_file("a.parquet", [(1, edge), (2, stamp)])
    DeltaTable(target).create_write_transaction([first], mode="append", schema=schema)
    sink = DeltaSink(target, "up", MergeSpec(keys=["id"]))
    sink.write(pa.Table.from_pylist([{"id": 2, "s": None, "h": None, "v": "b"}], schema), 0)
    assert support.rows(target) == [
        {"id": 1, "s": stamp, "h": [edge], "v": "a"},
        {"id": 2, "s": None, "h": None, "v": "b"},
    ]
    old = dt.datetime(1, 1, 1, tzinfo=utc)
    second = spark_file("b.parquet", [(3, old), (4, stamp)])
    DeltaTable(target).create_write_transaction([second], mode="append", schema=schema)
    version = support.table_version(target)
    with pytest.raises(UnsupportedTableFeatureError, match="INT96"):
        sink.write(pa.Table.from_pylist([{"id": 4, "s": None, "h": None, "v": "c"}], schema), 1)
    assert support.table_version(target) == version
