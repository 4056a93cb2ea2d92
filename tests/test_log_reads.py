"""What a writer reads of a Delta log does not need files that retention may remove
(deltasink/backends/deltalog/history.py): history is read by commit number from the
snapshot held, newest first, and ends where retention removed the older commits, even
when they go while it is being read. And a writer beside a ``gc`` loop that trims the
staging log as hard as it can finishes (``tools/maintenance_race.py gc`` runs the long
version: 400 versions, 20 runs)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import CommitError, DeltaSink, MergeSpec
from deltasink._faults import armed
from deltasink.backends.deltalog.history import commits, history
from deltasink.backends.embedded import retention
from deltasink.ops.origin import ORIGIN_KEY
from tests import support


def ten_commits(uri: str) -> None:
    for k in range(10):
        write_deltalake(uri, pa.table({"id": [k]}), mode="append")


def test_history_is_read_newest_first_by_number_with_exact_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    ten_commits(uri)
    found = history(DeltaTable(uri))
    assert [c["version"] for c in found] == list(range(9, -1, -1))
    # the same records delta-rs gives, versions included
    assert found == DeltaTable(uri).history()
    assert [c["version"] for c in history(DeltaTable(uri), 3)] == [9, 8, 7]
    # a snapshot reads its own history, not the commits made after it
    old = DeltaTable(uri, version=4)
    write_deltalake(uri, pa.table({"id": [10]}), mode="append")
    assert [c["version"] for c in history(old)] == [4, 3, 2, 1, 0]


def test_history_ends_where_retention_removed_commits_even_while_it_reads(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")
    ten_commits(uri)
    table = DeltaTable(uri)
    table.create_checkpoint()
    log = Path(uri) / "_delta_log"
    for v in range(3):  # retention removed the oldest commits (a checkpoint covers them)
        (log / f"{v:020d}.json").unlink()
    assert [c["version"] for c in history(table)] == [9, 8, 7, 6, 5, 4, 3]

    reading = commits(table)
    assert [next(reading)["version"], next(reading)["version"]] == [9, 8]
    for v in range(3, 8):  # a gc beside the reader removes more, oldest first
        (log / f"{v:020d}.json").unlink()
    assert [c["version"] for c in reading] == []  # ends there, no error


def test_recover_reads_the_origin_of_a_pending_version_past_a_trimmed_log(
    target: str, tmp_path: Path
) -> None:
    staging = str(tmp_path / "staging")
    sink = DeltaSink(target, "app", MergeSpec(mode="append"), staging=staging)
    for version in range(5):
        sink.write(pa.table({"id": [version]}), version)
    with armed("publish.before_target_commit", "raise"), pytest.raises(CommitError):
        sink.write(pa.table({"id": [5]}), 5, position="2026-11-26")  # staged, not published
    staged_at = support.table_version(staging)
    assert staged_at is not None
    DeltaTable(staging).create_checkpoint()
    log = Path(staging) / "_delta_log"
    for v in range(staged_at - 1):  # everything before the stage commit's neighbour goes
        (log / f"{v:020d}.json").unlink(missing_ok=True)

    report = DeltaSink(target, "app", MergeSpec(mode="append"), staging=staging).recover()
    assert report.committed_versions == [5]
    info = support.commit_info(target, support.table_version(target) or 0)
    assert '"2026-11-26"' in str(info[ORIGIN_KEY])
    assert support.ids(target) == list(range(6))


def test_a_writer_beside_a_gc_loop_trimming_its_staging_log_finishes(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the staging log kept by count as short as it goes: every gc trims what it may
    monkeypatch.setattr(retention, "KEEP_COMMITS", 2)
    spec = MergeSpec(mode="append")
    sink = DeltaSink(target, "app", spec)
    sink.write(pa.table({"id": pa.array([0], pa.int64())}), 0)
    stop = threading.Event()
    errors: list[BaseException] = []
    runs = [0]

    def gc_loop() -> None:
        operator = DeltaSink(target, "app", spec)
        while not stop.is_set():
            try:
                operator.gc(0)
                runs[0] += 1
            except BaseException as exc:  # a conflict with the writer is retried inside
                errors.append(exc)

    loop = threading.Thread(target=gc_loop)
    loop.start()
    try:
        for version in range(1, 19):
            data = pa.table({"id": pa.array([version], pa.int64())})
            if version % 3:
                sink.pre_commit(data, version)
                sink.commit(version)
            else:  # staged, then published by a restarted job's recover()
                sink.pre_commit(data, version)
                sink = DeltaSink(target, "app", spec)  # reads the origin from the log
                assert sink.recover().committed_versions == [version]
    finally:
        stop.set()
        loop.join()
    assert errors == []
    assert runs[0] > 0
    assert support.ids(target) == list(range(19))
    assert support.marker(target, "app") == 18
