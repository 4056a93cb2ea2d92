"""Auto compaction on the embedded engine: Delta's ``delta.autoOptimize.autoCompact``
honoured after a target commit (deltasink/backends/embedded/compaction.py), on real
tables. A compaction never carries or moves the ``txn`` marker, never fails the write, and
leaves the rows a sink without it leaves."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import ConfigurationError, DeltaSink, MergeSpec, TableSpec
from deltasink._faults import armed
from deltasink.backends.deltalog.commits import now_ms
from deltasink.backends.deltalog.marker import read_marker
from deltasink.backends.embedded.compaction import (
    AUTO_COMPACT,
    MAX_FILE_SIZE,
    MIN_NUM_FILES,
    TARGET_FILE_SIZE,
    AutoCompact,
    auto_compact,
    plan,
)
from deltasink.backends.embedded.rewrite import files_of, rewrite
from deltasink.ops.history import is_compaction
from tests import support

APP = "orders-ingest"
SPEC = MergeSpec(keys=["id"])
MIB = 1024 * 1024


def batch(ids: list[int], tag: str) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array([f"{tag}{i}" for i in ids], pa.string())}
    )


def in_partition(ids: list[int], part: str | None) -> pa.Table:
    return batch(ids, "p").append_column("p", pa.array([part] * len(ids), pa.string()))


def history(version: int) -> pa.Table:
    """Batch ``version``: 0 inserts keys 0-99; 1-49 insert 10 new keys each (one new small
    file each); later ones upsert 5 keys of batch 0 and 5 new keys."""
    if version == 0:
        return batch(list(range(100)), "v0-")
    if version < MIN_NUM_FILES:
        return batch(list(range(version * 100, version * 100 + 10)), f"v{version}-")
    ids = list(range(version, version + 5)) + list(range(version * 100, version * 100 + 5))
    return batch(ids, f"v{version}-")


def files(uri: str) -> int:
    return DeltaTable(uri).get_add_actions().num_rows


def optimize_commits(uri: str) -> dict[int, list[dict[str, Any]]]:
    """The compaction commits: Delta's OPTIMIZE, or the embedded engine's own."""
    return {
        v: actions
        for v, actions in support.log_commits(uri).items()
        if is_compaction(support.commit_info(uri, v))
    }


@pytest.mark.parametrize("value", ["true", "false"])
def test_auto_compaction_follows_the_table_property(target: str, value: str) -> None:
    # checkpoint interval 17: the compaction commit (Delta version 50) writes a checkpoint
    props = {AUTO_COMPACT: value, "delta.checkpointInterval": "17"}
    sink = DeltaSink(target, APP, SPEC, table=TableSpec(properties=props))
    expected: dict[int, str] = {}
    for version in range(MIN_NUM_FILES + 1):
        data = history(version)
        report = sink.write(data, version)
        assert report.committed_versions == [version]
        expected.update(zip(data["id"].to_pylist(), data["v"].to_pylist(), strict=True))

    assert support.rows(target) == [{"id": k, "v": v} for k, v in sorted(expected.items())]
    compactions = optimize_commits(target)
    if value == "false":
        assert compactions == {}
        assert files(target) == MIN_NUM_FILES  # 1 + 49 inserts; the upsert rewrote one
        assert support.txn_commits(target, APP) == {v: [v] for v in range(51)}
    else:
        # the 50th small file (batch 49) triggered one compaction, its own commit
        assert list(compactions) == [50]
        actions = compactions[50]
        assert not [a for a in actions if "txn" in a]
        changes = [a.get("add") or a.get("remove") for a in actions if {"add", "remove"} & a.keys()]
        assert len(changes) == MIN_NUM_FILES + 1
        assert not [c for c in changes if c["dataChange"]]
        info = support.commit_info(target, 50)
        assert info["deltasink.operation"] == "autoCompact"
        assert info["operation"] == "OPTIMIZE"  # what DESCRIBE HISTORY shows (issue 43)
        assert info["operationParameters"]["auto"] is True
        assert info["operationMetrics"]["numRemovedFiles"] == str(MIN_NUM_FILES)
        assert files(target) == 1  # the upsert after it rewrote the one compacted file
        assert support.txn_commits(target, APP) == {v: [v] for v in range(50)} | {50: [51]}
        assert (Path(target) / "_delta_log" / f"{50:020d}.checkpoint.parquet").exists()

    # the marker, read by delta-rs, from the checkpoint on, and by the sink
    assert support.marker(target, APP) == 50
    read = read_marker(target, APP)
    assert read is not None
    assert read.marker == 50
    assert sink.status().committed_version == 50
    # a replay, by this sink or a new one, is a no-op
    before = support.table_version(target)
    assert sink.write(history(50), 50).committed_versions == []
    assert DeltaSink(target, APP, SPEC).write(history(50), 50).committed_versions == []
    assert support.table_version(target) == before
    assert support.rows(target) == [{"id": k, "v": v} for k, v in sorted(expected.items())]


def test_only_partitions_the_commit_wrote_to_are_compacted(target: str) -> None:
    # another writer (a backfill) leaves 50 small files in the null partition
    for i in range(MIN_NUM_FILES):
        data = in_partition([10_000 + i], None)
        write_deltalake(
            target,
            data,
            mode="append",
            partition_by=["p"],
            configuration={AUTO_COMPACT: "TRUE"} if i == 0 else None,
        )
    sink = DeltaSink(target, APP, SPEC)

    def per_partition() -> dict[str | None, int]:
        table = pa.table(DeltaTable(target).get_add_actions(flatten=True))
        parts = table.column("partition.p").to_pylist()
        return {p: parts.count(p) for p in sorted(set(parts), key=str)}

    for version in range(MIN_NUM_FILES - 1):
        sink.write(in_partition([version], "a"), version)
    assert per_partition() == {"a": 49, None: 50}  # nothing due where the sink wrote
    sink.write(in_partition([49], "a"), 49)  # partition a's 50th small file
    assert per_partition() == {"a": 1, None: 50}  # the null partition was not touched
    sink.write(in_partition([50], None), 50)
    assert per_partition() == {"a": 1, None: 1}
    assert len(optimize_commits(target)) == 2
    assert support.marker(target, APP) == 50
    expected = (
        [(i, "a") for i in range(50)] + [(50, None)] + [(10_000 + i, None) for i in range(50)]
    )
    assert [(r["id"], r["p"]) for r in support.rows(target)] == expected


def test_a_commit_that_writes_no_file_compacts_nothing(target: str) -> None:
    for i in range(MIN_NUM_FILES):
        write_deltalake(
            target,
            batch([1000 + i], "x"),
            mode="append",
            configuration={AUTO_COMPACT: "true"} if i == 0 else None,
        )
    sink = DeltaSink(target, APP, SPEC)
    sink.write(batch([], "x"), 0)  # the marker alone: no file added
    assert (files(target), optimize_commits(target)) == (MIN_NUM_FILES, {})
    sink.write(batch([1], "x"), 1)
    assert files(target) == 1
    assert list(optimize_commits(target)) == [52]
    assert support.marker(target, APP) == 1


def test_a_failed_compaction_is_a_warning_and_a_lost_one_plans_again(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = DeltaSink(target, APP, SPEC, table=TableSpec(properties={AUTO_COMPACT: "true"}))
    with (
        caplog.at_level(logging.WARNING, "deltasink"),
        armed("rewrite.before_commit", "raise"),  # the compaction's files are in place
    ):
        for version in range(MIN_NUM_FILES):
            assert sink.write(history(version), version).committed_versions == [version]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "auto compaction of" in warnings[0]
    assert "FaultInjected" in warnings[0]
    assert "the commit of version 49 is durable" in warnings[0]
    assert (optimize_commits(target), files(target)) == ({}, MIN_NUM_FILES)
    assert support.marker(target, APP) == 49
    # the compacted file it had put in place is gone again: only the table's own files
    assert len(list(Path(target).rglob("*.parquet"))) == MIN_NUM_FILES

    # the next commit compacts; its compaction loses once to a writer that deletes a
    # row from a file it rewrites (so it must not commit on its snapshot), plans again
    lost: list[int] = []

    def concurrent_delete() -> None:
        if not lost:
            lost.append(support.table_version(target) or 0)
            DeltaTable(target).delete("id = 0")

    caplog.clear()
    with (
        caplog.at_level(logging.INFO, "deltasink"),
        armed("rewrite.before_commit", concurrent_delete),
    ):
        sink.write(batch([7], "again"), 50)
    assert lost == [50]
    assert [r for r in caplog.records if "lost to a concurrent commit" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert list(optimize_commits(target)) == [52]  # after the delete (51)
    assert files(target) == 1
    assert support.marker(target, APP) == 50
    assert support.ids(target) == sorted(  # key 7 upserted, key 0 deleted
        list(range(1, 100)) + [v * 100 + k for v in range(1, 50) for k in range(10)]
    )
    # + the upsert's file, the delete's, the compaction's; the lost one's is gone
    assert len(list(Path(target).rglob("*.parquet"))) == MIN_NUM_FILES + 3


def test_the_plan_names_each_due_partition(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")

    def add(day: int | None, name: str) -> None:
        data = pa.table({"d": pa.array([day], pa.int32()), "s": [name], "x": [1]})
        write_deltalake(uri, data, mode="append", partition_by=["d", "s"])

    for _ in range(2):
        add(1, "a")
        add(None, "b")
        add(2, "c")
    time.sleep(0.01)
    since = now_ms()
    add(1, "a")
    add(None, "b")  # (2, "c") holds as many files, none written since
    table = DeltaTable(uri)
    due = plan(table, AutoCompact(target_size=MAX_FILE_SIZE, min_num_files=3), since_ms=since)
    assert due is not None
    assert sorted(due, key=str) == [(1, "a"), (None, "b")]
    assert (
        plan(table, AutoCompact(target_size=MAX_FILE_SIZE, min_num_files=4), since_ms=since) is None
    )
    smallest = min(pa.table(table.get_add_actions()).column("size_bytes").to_pylist())
    none_small = AutoCompact(target_size=2 * smallest, min_num_files=3)  # small: below half
    assert plan(table, none_small, since_ms=since) is None
    # the partitions are the files' own values: rewriting the files in them compacts them
    wanted = set(due)
    done = rewrite(
        table,
        [f for f in files_of(table) if f.partition in wanted],
        uri=uri,
        storage_options=None,
        target_size=MAX_FILE_SIZE,
        metadata={},
    )
    assert (done.removed, done.added) == (6, 2)
    parts = pa.table(DeltaTable(uri).get_add_actions()).column("partition").to_pylist()
    assert Counter((p["d"], p["s"]) for p in parts) == {(1, "a"): 1, (None, "b"): 1, (2, "c"): 2}


@pytest.mark.parametrize("column", ["string", "int"])
def test_an_empty_string_partition_is_the_null_partition_and_is_compacted(
    target: str, column: str
) -> None:
    # one-row writes into p = '' (a string column) or p = null (an int column), every
    # other one beside a file plain delta-rs adds with the same value (it keeps "" in the
    # log as given): 51 small files of one partition, as the protocol reads it
    kind = pa.string() if column == "string" else pa.int32()
    table = TableSpec(partition_by=["p"], properties={AUTO_COMPACT: "true"})
    sink = DeltaSink(target, APP, MergeSpec(mode="append"), table=table)
    empty: Any = "" if column == "string" else None
    for version in range(34):
        data = pa.table({"id": pa.array([version], pa.int64()), "p": pa.array([empty], kind)})
        sink.write(data, version)
        if version % 2 == 0:
            other = pa.table({"id": pa.array([1000 + version], pa.int64()), "p": data["p"]})
            write_deltalake(target, other, mode="append")
    stored = {
        json.dumps(a["add"]["partitionValues"])
        for actions in support.log_commits(target).values()
        for a in actions
        if "add" in a
    }
    assert ('{"p": ""}' in stored) == (column == "string")
    compactions = optimize_commits(target)
    assert len(compactions) == 1
    assert files(target) < 5
    rows = DeltaTable(target).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(34)) + [
        1000 + v for v in range(0, 34, 2)
    ]
    assert rows.column("p").null_count == rows.num_rows  # '' reads as null, as before
    added = [a["add"] for a in compactions[max(compactions)] if "add" in a]
    assert [a["partitionValues"] for a in added] == [{"p": None}]  # the protocol's null


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, None),
        ({AUTO_COMPACT: "false"}, None),
        ({AUTO_COMPACT: "FALSE", TARGET_FILE_SIZE: "not read when off"}, None),
        ({AUTO_COMPACT: "true"}, MAX_FILE_SIZE),
        ({AUTO_COMPACT: " True "}, MAX_FILE_SIZE),
        ({AUTO_COMPACT: "auto"}, MAX_FILE_SIZE),  # Databricks' values
        ({AUTO_COMPACT: "LEGACY"}, MAX_FILE_SIZE),
        ({"delta.autooptimize.autocompact": "true"}, MAX_FILE_SIZE),  # names in any case
        ({"delta.autoOptimize": "true"}, MAX_FILE_SIZE),  # deprecated, as in Delta
        ({"delta.autoOptimize": "false", AUTO_COMPACT: "true"}, MAX_FILE_SIZE),
        ({"delta.autoOptimize": "false"}, None),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "1048576"}, MIB),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "64mb"}, 64 * MIB),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "1 G"}, 1024 * MIB),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "512k"}, MIB // 2),
    ],
)
def test_the_properties_read(config: dict[str, str], expected: int | None) -> None:
    found = auto_compact(config, table="t")
    assert found == (None if expected is None else AutoCompact(target_size=expected))
    if found is not None:
        assert (found.small_below, found.min_num_files) == (expected // 2, 50)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({AUTO_COMPACT: "yes"}, "delta.autoOptimize.autoCompact='yes'"),
        ({AUTO_COMPACT: ""}, "delta.autoOptimize.autoCompact=''"),
        ({"delta.autoOptimize": "auto"}, "delta.autoOptimize='auto'"),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "big"}, "delta.targetFileSize='big'"),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "0"}, "delta.targetFileSize='0'"),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "-5mb"}, "delta.targetFileSize='-5mb'"),
        ({AUTO_COMPACT: "true", TARGET_FILE_SIZE: "3 parsecs"}, "delta.targetFileSize"),
    ],
)
def test_a_value_delta_refuses_is_named(config: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named.replace(".", r"\.")):
        auto_compact(config, table="t")


def test_an_invalid_value_fails_when_the_sink_is_built_or_at_its_first_write(
    target: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match=r"delta\.autoOptimize\.autoCompact='sometimes'"):
        DeltaSink(target, APP, SPEC, table=TableSpec(properties={AUTO_COMPACT: "sometimes"}))
    assert not support.exists(target)

    # a target another tool created with it: refused before anything is staged or written
    write_deltalake(target, batch([1], "x"), configuration={AUTO_COMPACT: "sometimes"})
    staging = str(tmp_path / "staging")
    sink = DeltaSink(target, APP, SPEC, staging=staging)
    with pytest.raises(ConfigurationError, match=r"autoCompact='sometimes'") as raised:
        sink.write(batch([2], "x"), 0)
    assert raised.value.table == target
    assert support.table_version(target) == 0
    assert support.marker(target, APP) is None
    assert support.staged_versions(staging) == []


def test_a_value_set_under_a_running_writer_is_a_warning_a_new_writer_an_error(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = DeltaSink(target, APP, SPEC, table=TableSpec(properties={AUTO_COMPACT: "true"}))
    sink.write(batch([1], "x"), 0)  # creates the target
    sink.write(batch([2], "x"), 1)  # checks the existing target, once per writer
    DeltaTable(target).alter.set_table_properties({AUTO_COMPACT: "sometimes"})
    with caplog.at_level(logging.WARNING, "deltasink"):
        assert sink.write(batch([3], "x"), 2).committed_versions == [2]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "autoCompact='sometimes'" in warning
    assert "the commit of version 2 is durable" in warning
    assert support.marker(target, APP) == 2
    with pytest.raises(ConfigurationError, match=r"autoCompact='sometimes'"):
        DeltaSink(target, APP, SPEC).write(batch([4], "x"), 3)
    assert support.ids(target) == [1, 2, 3]
