"""Maintenance beside writers on the embedded engine: compactions that cannot change
rows (deltasink/backends/embedded/rewrite.py), raced deterministically at the moment
that matters (a compaction's new files are in place, its commit not made yet), and a
short real race of two writers with auto compaction beside an ``optimize()`` loop.

delta-rs itself is the other implementation: plain ``DeltaTable.optimize.compact()``
planned on the same snapshot is shown to duplicate every row it compacts (the behaviour
these tests guard against), while deltasink's compaction commits nothing instead.
``tools/maintenance_race.py`` runs the long version (50+ trials with processes)."""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import CommitError, DeltaSink, MergeSpec, TableSpec, UnsupportedTableFeatureError
from deltasink._faults import armed
from deltasink.backends.embedded import maintenance
from deltasink.backends.embedded import rewrite as rewrite_module
from deltasink.ops.history import is_compaction
from tests import generated, support
from tools import maintenance_race

SPEC = MergeSpec(keys=["id"])


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "v": pa.array([f"{tag}{i}" for i in ids], pa.string())}
    )


def five_small_files(target: str) -> DeltaSink:
    sink = DeltaSink(target, "writer", SPEC)
    for k in range(5):
        sink.write(rows([k], "old"), k)  # one small file each (insert-only appends)
    assert support.table_version(target) == 4
    return sink


def compactions(uri: str) -> list[int]:
    last = support.table_version(uri) or 0
    return [v for v in range(last + 1) if is_compaction(support.commit_info(uri, v))]


def compact_once(target: str, compactor: str, spec: MergeSpec) -> Any:
    """A fault-point callback: the first call compacts ``target`` with plain delta-rs
    (``compactor == "delta-rs"``) or deltasink's ``optimize()``; later calls do nothing."""
    done: list[int] = []

    def compaction() -> None:
        if not done:
            done.append(1)
            if compactor == "delta-rs":
                DeltaTable(target).optimize.compact()
            else:
                DeltaSink(target, "operator", spec, engine="embedded").optimize()

    return compaction


def parquet_on_disk(uri: str) -> int:
    return len([p for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts])


def test_delta_rs_lets_two_compactions_of_one_snapshot_both_commit(tmp_path: Path) -> None:
    """The behaviour deltasink's compactions must not have (deltalake 1.6): if this
    starts failing, delta-rs fixed it (docs/design-notes.md names the test)."""
    uri = str(tmp_path / "t")
    for k in range(5):
        write_deltalake(uri, pa.table({"id": [k]}), mode="append")
    first, second = DeltaTable(uri), DeltaTable(uri)
    first.optimize.compact()
    second.optimize.compact()  # planned on the same snapshot: commits too
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 10


def test_two_compactions_planned_on_one_snapshot_one_commits(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = five_small_files(target)
    other = DeltaSink(target, "operator", SPEC)
    raced: list[int] = []

    def concurrent_optimize() -> None:
        if not raced:  # the inner optimize passes this point too
            raced.append(1)
            other.optimize()

    with (
        caplog.at_level(logging.INFO, "deltasink"),
        armed("rewrite.before_commit", concurrent_optimize),
    ):
        sink.optimize()  # loses: logged, planned again, nothing left to compact
    assert raced == [1]
    assert [r for r in caplog.records if "conflicted" in r.getMessage()]
    assert support.rows(target) == rows(list(range(5)), "old").to_pylist()
    assert compactions(target) == [5]  # the other's; this one planned again: nothing left
    assert support.table_version(target) == 5
    assert DeltaTable(target).get_add_actions().num_rows == 1
    assert parquet_on_disk(target) == 6  # the loser's new file was deleted


def test_a_compaction_after_a_foreign_one_commits_nothing(target: str) -> None:
    sink = five_small_files(target)

    def foreign_compaction() -> None:  # plain delta-rs: another tool's OPTIMIZE
        DeltaTable(target).optimize.compact()

    with armed("rewrite.before_commit", foreign_compaction):
        sink.optimize()  # loses, plans again: one file left, nothing to do
    assert support.rows(target) == rows(list(range(5)), "old").to_pylist()
    assert compactions(target) == [5]
    assert support.commit_info(target, 5)["operation"] == "OPTIMIZE"  # delta-rs's own
    assert DeltaTable(target).get_add_actions().num_rows == 1
    assert parquet_on_disk(target) == 6


def test_optimize_losing_every_round_is_a_named_error_and_changes_nothing(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = five_small_files(target)
    monkeypatch.setattr(maintenance, "OPTIMIZE_ATTEMPTS", 2)
    deleted: list[int] = []

    def concurrent_delete() -> None:  # a writer rewrites a file it planned on, each round
        key = len(deleted)
        deleted.append(key)
        DeltaTable(target).delete(f"id = {key}")

    with armed("rewrite.before_commit", concurrent_delete), pytest.raises(CommitError) as raised:
        sink.optimize()
    assert raised.value.table == target
    assert "lost its files to concurrent commits 2 times" in str(raised.value)
    assert deleted == [0, 1]
    assert support.rows(target) == rows([2, 3, 4], "old").to_pylist()
    assert compactions(target) == []
    assert parquet_on_disk(target) == 5  # four of the five, and no compacted file left


def test_a_compaction_whose_files_were_vacuumed_meanwhile_is_lost(target: str) -> None:
    five_small_files(target)
    planned = DeltaTable(target)  # the snapshot a compaction plans on
    files = rewrite_module.files_of(planned)
    DeltaTable(target).optimize.compact()  # another tool's, then its VACUUM
    DeltaTable(target).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(rewrite_module.Lost):
        rewrite_module.rewrite(
            planned, files, uri=target, storage_options=None, target_size=1 << 27, metadata={}
        )
    assert support.rows(target) == rows(list(range(5)), "old").to_pylist()
    assert parquet_on_disk(target) == 1
    assert [p.name for p in Path(target).iterdir() if p.name.startswith(".")] == []


def test_a_failure_after_the_compaction_commit_keeps_the_files_it_references(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = five_small_files(target)
    real = rewrite_module._commit

    def commit_then_fail(*args: Any, **kwargs: Any) -> int:
        real(*args, **kwargs)
        raise RuntimeError("a post-commit hook failed")  # e.g. the checkpoint write

    monkeypatch.setattr(rewrite_module, "_commit", commit_then_fail)
    with pytest.raises(RuntimeError, match="post-commit"):
        sink.optimize()
    assert compactions(target) == [5]
    referenced = DeltaTable(target).file_uris()
    assert len(referenced) == 1
    assert all(Path(uri.removeprefix("file://")).exists() for uri in referenced)
    assert support.rows(target) == rows(list(range(5)), "old").to_pylist()


def test_a_compaction_never_brings_back_rows_a_merge_rewrote(target: str) -> None:
    sink = five_small_files(target)
    writer = DeltaSink(target, "other-writer", SPEC)

    def concurrent_merge() -> None:
        if support.table_version(target) == 4:
            writer.write(rows([2], "new"), 0)  # rewrites the file holding key 2

    with armed("rewrite.before_commit", concurrent_merge):
        sink.optimize()  # loses once, then compacts the snapshot after the MERGE
    expected = {k: f"old{k}" for k in range(5)} | {2: "new2"}
    assert support.rows(target) == [{"id": k, "v": v} for k, v in sorted(expected.items())]
    assert compactions(target) == [6]


@pytest.mark.parametrize("compactor", ["delta-rs", "deltasink"])
def test_a_merge_after_a_compaction_of_the_files_it_read_is_redone(
    target: str, compactor: str
) -> None:
    """The other direction: our MERGE read the five files, a compaction replaced them
    before the MERGE committed. delta-rs's conflict checker sees the compaction's new
    file (not a blind append) among the files the MERGE would read: the MERGE
    conflicts and is redone on the compacted snapshot."""
    sink = five_small_files(target)
    compaction = compact_once(target, compactor, SPEC)

    # an upsert of keys 1 and 3 beside a new key 9: a MERGE, not the insert-only append
    with armed("publish.before_target_commit", compaction):
        report = sink.write(rows([1, 3, 9], "new"), 5)
    assert report.committed_versions == [5]
    expected = {k: f"old{k}" for k in range(5)} | {1: "new1", 3: "new3", 9: "new9"}
    assert support.rows(target) == [{"id": k, "v": v} for k, v in sorted(expected.items())]
    assert compactions(target) == [5]
    assert support.marker(target, "writer") == 5


@pytest.mark.parametrize("compactor", ["delta-rs", "deltasink"])
@pytest.mark.parametrize("micros", [0, 999, 123456])
def test_a_timestamp_key_merge_after_a_compaction_of_its_file_is_redone(
    tmp_path: Path, compactor: str, micros: int
) -> None:
    """As above with a timestamp key below the millisecond: Delta's statistics keep
    milliseconds, and delta-rs's conflict checker, given the MERGE's filter of the
    source's keys, saw no conflict with the compaction; the key was inserted beside its
    compacted row (the writers model, seed 865641963)."""
    utc = datetime.timezone.utc
    key = datetime.datetime(2024, 5, 1, 12, 0, 0, micros, tzinfo=utc)
    schema = pa.schema([("k", pa.timestamp("us", "UTC")), ("v", pa.string())])
    target = str(tmp_path / "t")
    others = [datetime.datetime(2020, 1, day, tzinfo=utc) for day in range(1, 5)]
    for k, v in [*((o, "x") for o in others), (key, "old")]:
        write_deltalake(target, pa.table({"k": [k], "v": [v]}, schema=schema), mode="append")
    spec = MergeSpec(keys=["k"])
    sink = DeltaSink(target, "writer", spec, engine="embedded")
    compaction = compact_once(target, compactor, spec)

    with armed("publish.before_target_commit", compaction):
        sink.write(pa.table({"k": [key], "v": ["new"]}, schema=schema), 0)
    found = DeltaTable(target).to_pyarrow_table().to_pylist()
    assert sorted((r["k"], r["v"]) for r in found) == [*((o, "x") for o in others), (key, "new")]
    assert len(compactions(target)) == 1


def test_a_writer_losing_only_to_compactions_does_not_use_up_its_attempts(
    target: str,
) -> None:
    five_small_files(target)
    sink = DeltaSink(target, "writer", SPEC, max_commit_attempts=2)  # the same writer
    operator = DeltaSink(target, "operator", SPEC)
    rounds: list[int] = []

    def compaction() -> None:  # before each of the first five attempts: a Z-ORDER
        if len(rounds) < 5:  # (it rewrites even one file): a compaction-only commit
            rounds.append(1)
            operator.optimize(z_order_by=["v"])

    with armed("publish.before_target_commit", compaction):
        report = sink.write(rows([1, 3, 9], "new"), 5)
    assert report.committed_versions == [5]
    assert len(rounds) == 5  # five attempts lost, more than max_commit_attempts
    expected = {k: f"old{k}" for k in range(5)} | {1: "new1", 3: "new3", 9: "new9"}
    assert support.rows(target) == [{"id": k, "v": v} for k, v in sorted(expected.items())]
    assert compactions(target) == [5, 6, 7, 8, 9]
    assert support.marker(target, "writer") == 5


def test_a_replace_after_a_compaction_of_its_slice_is_redone(target: str) -> None:
    for k in range(6):  # six small files, days alternating
        day = "d1" if k % 2 else "d2"
        write_deltalake(target, pa.table({"id": [k], "day": [day]}), mode="append")
    sink = DeltaSink(target, "writer", MergeSpec(mode="replace", replace_by=["day"]))
    done: list[int] = []

    def compaction() -> None:
        if not done:
            done.append(1)
            DeltaSink(target, "operator", SPEC).optimize()

    with armed("publish.before_target_commit", compaction):
        report = sink.write(pa.table({"id": [10, 11], "day": ["d1", "d1"]}), 0)
    assert report.committed_versions == [0]
    found = sorted((r["id"], r["day"]) for r in DeltaTable(target).to_pyarrow_table().to_pylist())
    assert found == [(0, "d2"), (2, "d2"), (4, "d2"), (10, "d1"), (11, "d1")]
    assert compactions(target) == [6]


def test_optimize_refuses_a_table_whose_files_it_cannot_rewrite_row_for_row(
    target: str,
) -> None:
    for k in range(3):  # column mapping: the files' column names are not the table's
        data = rows([k], "x")
        write_deltalake(
            target, data, mode="append", configuration={"delta.columnMapping.mode": "name"}
        )
    before = support.table_version(target)
    with pytest.raises(UnsupportedTableFeatureError, match="columnMapping") as raised:
        DeltaSink(target, "writer", SPEC).optimize()
    assert raised.value.features == ["columnMapping"]
    assert support.table_version(target) == before


def test_optimize_z_orders_each_partition_without_changing_rows(target: str) -> None:
    table = TableSpec(partition_by=["p"])
    sink = DeltaSink(target, "writer", MergeSpec(mode="append"), table=table)
    expected = []
    for version in range(6):
        data = pa.table(
            {
                "id": pa.array([version, 100 + version], pa.int64()),
                "x": pa.array([float(-version), float(version)], pa.float64()),
                "p": pa.array(["a", None if version % 2 else ""], pa.string()),
            }
        )
        sink.write(data, version)
        expected += [(version, float(-version), "a"), (100 + version, float(version), None)]
    sink.optimize(z_order_by=["x", "id"])
    found = DeltaTable(target).to_pyarrow_table().to_pylist()
    assert sorted((r["id"], r["x"], r["p"]) for r in found) == sorted(expected)
    parts = pa.table(DeltaTable(target).get_add_actions()).column("partition").to_pylist()
    assert Counter((p or {})["p"] for p in parts) == {"a": 1, None: 1}  # '' and null: one
    (last,) = compactions(target)
    assert support.commit_info(target, last)["deltasink.zOrderBy"] == "x,id"


@pytest.mark.generated
def test_two_auto_compacting_writers_beside_an_optimize_loop(tmp_path: Path) -> None:
    """A real race, in threads: two writers with auto compaction on one target and an
    operator's ``optimize()`` loop; the end state is the oracle's, every key once."""
    seed = generated.SEED
    batches = generated.count(sample=16, ci=100)
    target = str(tmp_path / "t")
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(app: str) -> None:
        try:
            table = TableSpec(properties={"delta.autoOptimize.autoCompact": "true"})
            sink = DeltaSink(target, app, SPEC, table=table, engine="embedded")
            for version in range(batches):
                data = maintenance_race.batch_rows(seed, app, version)
                sink.write(pa.Table.from_pylist(data, schema=maintenance_race.SCHEMA), version)
        except BaseException as exc:
            errors.append(exc)

    def operator() -> None:
        while not stop.wait(0.05):
            if support.exists(target):
                with contextlib.suppress(CommitError):  # lost every round: named
                    DeltaSink(target, "operator", SPEC, engine="embedded").optimize()

    threads = [threading.Thread(target=writer, args=(app,)) for app in maintenance_race.APPS]
    loop = threading.Thread(target=operator)
    for thread in [*threads, loop]:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    loop.join()
    assert errors == []
    found = DeltaTable(target).to_pyarrow_table().to_pylist()
    counts = Counter(r["id"] for r in found)
    assert [k for k, n in counts.items() if n > 1] == []
    assert {r["id"]: r["v"] for r in found} == maintenance_race.oracle(seed, batches)
    assert compactions(target)  # the race did compact
    assert DeltaTable(target).get_add_actions().num_rows < batches
