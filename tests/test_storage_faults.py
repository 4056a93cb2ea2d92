"""Storage faults: staging or target not writable, staging deleted or corrupted by
hand, a target rewritten by another tool between batches.

Each case gets a named error or a safe, documented outcome (docs/reliability.md), and
nothing committed is lost. Tests run as root, so ``chmod`` cannot make a path
unwritable; "not writable" is simulated the way it fails for real: a directory the
writer must create is occupied by a regular file (``ENOTDIR``), or a table location
lies under a regular file. The findings this suite
turned up were fixed; they stay as regression tests. A case still marked
``xfail(strict=True)`` is a known gap, listed in docs/reliability.md.
"""

from __future__ import annotations

import http.server
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, write_deltalake

from deltasink import (
    CommitError,
    ConfigurationError,
    DeltaSink,
    DeltaSinkError,
    MarkerLostError,
    MergeSpec,
    NotADeltaTableError,
    SchemaMismatchError,
    StorageAccessError,
    StorageError,
)
from deltasink._faults import EXIT_CODE, armed
from tests import support

APPEND = MergeSpec(mode="append")
UPSERT = MergeSpec(keys=["id"])


def batch(*ids: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": pa.array([f"v{i}" for i in ids], pa.string())}
    )


def raise_(exc: BaseException) -> Callable[..., None]:
    def _raise(**_: Any) -> None:
        raise exc

    return _raise


def raised(call: Callable[[], object]) -> DeltaSinkError | None:
    """The named error ``call`` raised, or ``None`` if it returned (other errors
    propagate)."""
    try:
        call()
    except DeltaSinkError as exc:
        return exc
    return None


def log_files(table: str) -> list[Path]:
    return sorted(Path(table, "_delta_log").glob("*.json"))


@pytest.fixture
def pending(target: str) -> DeltaSink:
    """Versions 0 and 1 committed (ids 1, 2); versions 2 and 3 staged (ids 3, 4)."""
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    sink.write(batch(2), 1)
    sink.pre_commit(batch(3), 2)
    sink.pre_commit(batch(4), 3)
    assert support.staged_versions(sink.staging) == [2, 3]
    return sink


def assert_untouched(sink: DeltaSink, ids: list[int], marker: int) -> None:
    assert support.ids(sink.target) == ids
    assert support.marker(sink.target, sink.app_id) == marker


# -- not writable -------------------------------------------------------------------------


def test_staging_not_writable_fails_the_pre_commit_and_stages_nothing(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    blocker = Path(sink.staging, "_deltasink_version=1")
    blocker.write_text("a regular file where the version's directory must go")
    with pytest.raises(
        StorageError, match=r"(?s)_deltasink_version=1.*(Not a directory|non-directory)"
    ):
        sink.pre_commit(batch(2), 1)
    assert support.staged_versions(sink.staging) == []  # nothing half-staged
    assert not any("=1/" in f for f in support.staged_files_on_disk(sink.staging))
    assert sink.status().pending_versions == []
    assert_untouched(sink, [1], 0)

    blocker.unlink()  # storage writable again: the job retries the same version
    assert sink.pre_commit(batch(2), 1).state == "staged"
    assert sink.commit(1).committed_versions == [1]
    assert_untouched(sink, [1, 2], 1)


@pytest.mark.parametrize("where", ["under_a_file", "is_a_file"])
def test_staging_location_that_cannot_be_created_gives_a_storage_or_named_error(
    tmp_path: Path, target: str, where: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    staging = str(blocker / "staging") if where == "under_a_file" else str(blocker)
    sink = DeltaSink(target, "job", APPEND, staging=staging)
    with pytest.raises((OSError, DeltaSinkError), match=re.escape(str(blocker))):
        sink.pre_commit(batch(1), 0)
    assert not support.exists(target)
    assert blocker.read_text() == "x"


def test_target_not_writable_fails_the_commit_and_keeps_the_version_staged(
    tmp_path: Path,
) -> None:
    target = str(tmp_path / "partitioned")
    write_deltalake(
        target, batch(0).append_column("region", pa.array(["us"])), partition_by=["region"]
    )
    sink = DeltaSink(target, "job", APPEND)
    blocker = Path(target, "region=eu")
    blocker.write_text("a regular file where the partition directory must go")
    rows = batch(1).append_column("region", pa.array(["eu"]))
    sink.pre_commit(rows, 0)
    with pytest.raises(CommitError, match=r"(?s)committing version 0 .*Not a directory") as info:
        sink.commit(0)
    assert info.value.version == 0
    assert info.value.report.committed_versions == []  # type: ignore[attr-defined]
    assert sink.status().pending_versions == [0]
    assert support.ids(target) == [0]
    assert support.marker(target, "job") is None

    blocker.unlink()
    assert sink.recover().committed_versions == [0]
    assert support.rows(target) == [
        {"id": 0, "value": "v0", "region": "us"},
        {"id": 1, "value": "v1", "region": "eu"},
    ]
    assert support.txn_commits(target, "job") == {0: [1]}


def test_target_location_under_a_regular_file_fails_the_commit(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = str(blocker / "orders")
    sink = DeltaSink(target, "job", APPEND, staging=str(tmp_path / "staging"))
    assert sink.pre_commit(batch(1), 0).state == "staged"
    with pytest.raises(CommitError, match=r"(?s)version 0 .*orders.*Not a directory") as info:
        sink.commit(0)
    assert info.value.version == 0
    assert sink.status().pending_versions == [0]

    blocker.unlink()
    blocker.mkdir()
    assert DeltaSink(
        target, "job", staging=str(tmp_path / "staging")
    ).recover().committed_versions == [0]
    assert support.ids(target) == [1]
    assert support.marker(target, "job") == 0


def test_a_read_only_target_during_recovery_applies_nothing(pending: DeltaSink) -> None:
    """The target rejects writes (EROFS, simulated at the fault point right before the
    target commit): nothing is applied, the versions stay staged, the next recovery
    after the fault clears applies each exactly once."""
    read_only = raise_(OSError(30, "Read-only file system"))
    restarted = DeltaSink(pending.target, "job")
    with (
        armed("publish.before_target_commit", read_only),
        pytest.raises(CommitError, match="Read-only file system") as info,
    ):
        restarted.recover()
    assert info.value.version == 2  # the coalesced run failed, then version 2 alone
    assert restarted.status().pending_versions == [2, 3]
    assert_untouched(pending, [1, 2], 1)
    assert DeltaSink(pending.target, "job").recover().committed_versions == [2, 3]
    assert_untouched(pending, [1, 2, 3, 4], 3)
    assert support.txn_commits(pending.target, "job") == {0: [0], 1: [1], 3: [2]}  # 2+3 coalesced


def test_failed_staging_clean_up_only_leaves_leftovers(
    target: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.pre_commit(batch(1), 0)
    with (
        caplog.at_level(logging.WARNING, "deltasink"),
        armed("discard.before_log_commit", raise_(OSError(28, "No space left on device"))),
    ):
        report = sink.commit(0)
    assert report.committed_versions == [0]
    assert report.cleaned_versions == ()
    assert any("No space left on device" in r.getMessage() for r in caplog.records)
    assert sink.status().leftover_versions == [0]
    assert support.staged_versions(sink.staging) == [0]
    sink.write(batch(2), 1)  # the next commit removes them
    assert support.staged_versions(sink.staging) == []
    assert support.ids(target) == [1, 2]


# -- staging deleted by hand ----------------------------------------------------------------


def test_staging_deleted_without_pending_versions_is_recreated(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    sink.write(batch(2), 1)
    shutil.rmtree(sink.staging)

    restarted = DeltaSink(target, "job", APPEND)
    assert restarted.status().committed_version == 1  # from the target's txn marker
    assert restarted.recover().results == ()
    assert restarted.pre_commit(batch(2), 1).state == "already_committed"  # a replay
    restarted.write(batch(3), 2)
    assert support.ids(target) == [1, 2, 3]
    assert support.txn_commits(target, "job") == {0: [0], 1: [1], 2: [2]}
    assert support.staged_versions(restarted.staging) == []


def test_staging_deleted_with_pending_versions_loses_them_until_the_source_replays(
    pending: DeltaSink,
) -> None:
    """The staged batches lived only in the staging table: deleting it deletes them.
    deltasink cannot notice; the source must replay them (same versions)."""
    shutil.rmtree(pending.staging)
    restarted = DeltaSink(pending.target, "job", APPEND)
    assert restarted.status().pending_versions == []
    assert restarted.recover().results == ()
    assert_untouched(pending, [1, 2], 1)

    assert restarted.pre_commit(batch(3), 2).state == "staged"
    assert restarted.pre_commit(batch(4), 3).state == "staged"
    assert restarted.commit(3).committed_versions == [2, 3]
    assert_untouched(pending, [1, 2, 3, 4], 3)


def test_staging_deleted_under_a_running_sink(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    sink.write(batch(2), 1)
    shutil.rmtree(sink.staging)
    error = raised(lambda: sink.write(batch(3), 2))
    if error is not None:  # a named error ...
        assert error.table == sink.staging
        assert support.ids(target) == [1, 2]
    else:  # ... or the sink carries on
        assert support.ids(target) == [1, 2, 3]
        assert support.txn_commits(target, "job") == {0: [0], 1: [1], 2: [2]}


# -- staging corrupted by hand ----------------------------------------------------------------


def garbage(path: Path) -> None:
    path.write_text("this is not JSON {\n")


def truncate(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def remove(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(
    ("damage", "which"),
    [(garbage, -1), (truncate, -1), (garbage, 1), (remove, -2)],
    ids=["garbage-last", "torn-last", "garbage-early", "missing-middle"],
)
def test_corrupt_staging_log_gives_a_named_error(
    pending: DeltaSink, damage: Callable[[Path], None], which: int
) -> None:
    damage(log_files(pending.staging)[which])
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(DeltaSinkError, match=re.escape(str(pending.staging))) as info:
        restarted.recover()
    assert info.value.table == pending.staging
    assert_untouched(pending, [1, 2], 1)  # nothing committed is touched


@pytest.mark.parametrize(
    ("damage", "which", "found"),
    [
        (truncate, -1, "is not valid JSON (truncated or overwritten)"),
        (garbage, 1, "is not valid JSON (truncated or overwritten)"),
        (remove, -2, "is missing (the log goes from commit"),
    ],
    ids=["torn-last", "garbage-early", "missing-middle"],
)
def test_a_damaged_staging_log_is_one_line_naming_the_file_and_keeping_pending_versions(
    pending: DeltaSink, damage: Callable[[Path], None], which: int, found: str
) -> None:
    damaged = log_files(pending.staging)[which]
    original = damaged.read_bytes()
    damage(damaged)
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(StorageError) as info:
        restarted.recover()
    message = str(info.value)
    assert info.value.table == pending.staging
    assert message.startswith(f"the Delta log of {pending.staging} cannot be read: ")
    assert "\n" not in message
    for debug in ("ParsedLogPath", "FileMeta", "Url {", "<unknown>", "pthread", " 0: "):
        assert debug not in message
    assert f"The commit file {damaged} {found}" in message
    assert "Restore that file from a backup" in message
    assert "another location" not in message  # that would orphan versions 2 and 3
    assert "Keep the table" in message
    assert len(message) < 700
    assert_untouched(pending, [1, 2], 1)

    # The advice works: with the file restored, the pending versions are published.
    damaged.write_bytes(original)
    assert DeltaSink(pending.target, "job", APPEND).recover().committed_versions == [2, 3]
    assert_untouched(pending, [1, 2, 3, 4], 3)


def test_an_empty_staging_commit_file_does_not_silently_drop_a_staged_version(
    pending: DeltaSink,
) -> None:
    log_files(pending.staging)[-1].write_text("")  # the commit that staged version 3
    restarted = DeltaSink(pending.target, "job", APPEND)
    error = raised(restarted.recover)
    if error is not None:  # a named error ...
        assert error.table == pending.staging
        assert_untouched(pending, [1, 2], 1)
    else:  # ... or version 3 is still found and committed
        assert_untouched(pending, [1, 2, 3, 4], 3)


def test_a_missing_staged_data_file_fails_that_version_until_it_is_aborted(
    pending: DeltaSink,
) -> None:
    (data_file,) = Path(pending.staging, "_deltasink_version=2").glob("*.parquet")
    data_file.unlink()
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(CommitError, match=rf"(?s)version 2 .*{data_file.name}.*not found") as info:
        restarted.recover()
    assert info.value.version == 2
    assert restarted.status().pending_versions == [2, 3]  # 3 never lands before 2
    assert_untouched(pending, [1, 2], 1)

    # The batch's data is gone: abort it (and what follows) and replay from the source.
    assert restarted.abort(3) is True
    assert restarted.abort(2) is True
    restarted.pre_commit(batch(3), 2)
    restarted.pre_commit(batch(4), 3)
    assert restarted.commit(3).committed_versions == [2, 3]
    assert_untouched(pending, [1, 2, 3, 4], 3)


def test_a_staging_table_without_its_log_is_refused(pending: DeltaSink) -> None:
    shutil.rmtree(Path(pending.staging, "_delta_log"))
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(NotADeltaTableError, match="is not a Delta table") as info:
        restarted.recover()
    assert info.value.table == pending.staging
    with pytest.raises(NotADeltaTableError):
        restarted.pre_commit(batch(5), 4)
    assert_untouched(pending, [1, 2], 1)


def half_created(location: Path, model: Path, *, with_data: bool) -> None:
    """The state a crash during a table's first commit leaves: the commit's temporary
    file (object_store writes ``<name>#<n>`` and renames it) and maybe a data file."""
    write_deltalake(str(model), batch(0))
    log = location / "_delta_log"
    log.mkdir(parents=True)
    shutil.copy(
        model / "_delta_log" / "00000000000000000000.json", log / "00000000000000000000.json#1"
    )
    if with_data:
        (data_file,) = model.glob("*.parquet")
        shutil.copy(data_file, location / data_file.name)


@pytest.mark.parametrize("table", ["staging", "target"])
def test_a_crash_while_creating_a_table_does_not_block_the_restart(
    target: str, tmp_path: Path, table: str
) -> None:
    sink = DeltaSink(target, "job", APPEND)
    if table == "staging":
        half_created(Path(sink.staging), tmp_path / "model", with_data=False)
        restarted = DeltaSink(target, "job", APPEND)
        restarted.recover()
        assert restarted.pre_commit(batch(1), 0).state == "staged"
        assert restarted.commit(0).committed_versions == [0]
    else:
        sink.pre_commit(batch(1), 0)  # then the first commit dies creating the target
        half_created(Path(target), tmp_path / "model", with_data=True)
        assert DeltaSink(target, "job").recover().committed_versions == [0]
    assert support.ids(target) == [1]  # the orphan data file's row 0 is not visible
    assert support.marker(target, "job") == 0


# -- the target rewritten by another tool ------------------------------------------------------


def test_target_overwritten_by_another_tool_keeps_its_markers(pending: DeltaSink) -> None:
    write_deltalake(pending.target, batch(7, 8), mode="overwrite")
    assert support.marker(pending.target, "job") == 1  # txn actions survive an overwrite
    assert pending.commit(3).committed_versions == [2, 3]
    assert pending.write(batch(2), 1).results == ()  # a replay is still a no-op
    assert support.ids(pending.target) == [3, 4, 7, 8]
    assert support.marker(pending.target, "job") == 3


def test_target_compacted_and_vacuumed_by_another_tool(target: str) -> None:
    sink = DeltaSink(target, "job", UPSERT)
    for version in range(3):
        sink.write(batch(version), version)
    DeltaTable(target).optimize.compact()
    DeltaTable(target).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert sink.write(batch(2), 2).results == ()
    sink.write(batch(3), 3)
    assert support.ids(target) == [0, 1, 2, 3]
    assert support.marker(target, "job") == 3


def test_target_restored_by_another_tool_keeps_the_markers_of_later_versions(
    target: str,
) -> None:
    """RESTORE rolls back data, not ``txn`` markers: versions after the restore point
    are not applied again by a replay (documented)."""
    sink = DeltaSink(target, "job", APPEND)
    for version in range(3):
        sink.write(batch(version), version)
    DeltaTable(target).restore(0)
    assert support.ids(target) == [0]
    assert support.marker(target, "job") == 2
    assert sink.write(batch(1), 1).results == ()
    sink.write(batch(3), 3)
    assert support.ids(target) == [0, 3]


@pytest.mark.parametrize("recreate", [True, False], ids=["recreated", "dropped"])
def test_target_dropped_by_another_tool_gets_pending_versions_but_no_replays(
    pending: DeltaSink, caplog: pytest.LogCaptureFixture, recreate: bool
) -> None:
    shutil.rmtree(pending.target)
    if recreate:
        write_deltalake(pending.target, batch(1, 2))  # rebuilt from a copy, no markers
    restarted = DeltaSink(pending.target, "job", APPEND)
    with caplog.at_level(logging.WARNING, "deltasink"):
        report = restarted.recover()
    assert any("rewritten or its txn markers expired" in r.getMessage() for r in caplog.records)
    assert report.committed_versions == [2, 3]
    assert restarted.write(batch(2), 1).results == ()  # guarded by the staging's mark
    assert support.ids(pending.target) == ([1, 2, 3, 4] if recreate else [3, 4])
    assert support.marker(pending.target, "job") == 3


def test_rebuilt_target_is_not_given_a_committed_version_twice(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(0), 0)
    sink.write(batch(1), 1)
    sink.pre_commit(batch(2), 2)
    with armed("discard.before_log_commit", raise_(OSError("clean-up failed"))):
        assert sink.commit(2).committed_versions == [2]  # committed; clean-up failed
    rows = DeltaTable(target).to_pyarrow_table()
    shutil.rmtree(target)
    write_deltalake(target, rows)  # another tool rebuilds it from a copy: ids 0, 1, 2
    error = raised(DeltaSink(target, "job", APPEND).recover)
    assert error is None or error.table in (target, sink.staging)
    assert support.ids(target) == [0, 1, 2]
    # The refusal is named, and the runbook's way out works: the copy holds version 2,
    # so the operator aborts it; the writer then carries on after the mark.
    assert isinstance(error, CommitError)
    assert isinstance(error.__cause__, MarkerLostError)
    assert (error.__cause__.marker, error.__cause__.mark, error.version) == (None, 1, 2)
    operator = DeltaSink(target, "job", APPEND)
    assert operator.abort(2)
    operator.write(batch(3), 3)
    assert support.ids(target) == [0, 1, 2, 3]
    assert support.marker(target, "job") == 3


def test_delta_rs_drops_expired_txn_markers_when_it_loads_a_snapshot(target: str) -> None:
    """Pins the engine behaviour the guard exists for (deltalake 1.6.6): with
    ``delta.setTransactionRetentionDuration`` set, a marker whose ``lastUpdated`` is
    older is gone from every newly loaded snapshot, no checkpoint needed."""
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(0), 0)
    sink.write(batch(1), 1)
    assert support.marker(target, "job") == 1
    DeltaTable(target).alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": "interval 1 seconds"}
    )
    time.sleep(1.5)
    assert support.marker(target, "job") is None  # expired on load
    restarted = DeltaSink(target, "job", APPEND)
    assert restarted.status().committed_version == 1  # the staging's mark still knows
    assert restarted.write(batch(1), 1).committed_versions == []  # a replay: no-op
    restarted.write(batch(2), 2)
    assert support.ids(target) == [0, 1, 2]
    assert support.marker(target, "job") == 2


def test_expired_markers_with_nothing_pending_go_on_from_the_staging_mark(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(0), 0)
    sink.write(batch(1), 1)
    rows = DeltaTable(target).to_pyarrow_table()
    shutil.rmtree(target)
    write_deltalake(target, rows)  # markers gone, every committed version cleaned up
    restarted = DeltaSink(target, "job", APPEND)
    assert restarted.recover().committed_versions == []
    assert restarted.write(batch(0), 0).committed_versions == []  # still a replay
    # Version 1 was published directly, its outcome recorded only by the target (and
    # the next write's intent): with the target's history gone, its replay is refused
    # by name, never applied twice. The runbook's way out: the copy holds it, abort it.
    with pytest.raises(CommitError, match="may already be in the target") as info:
        restarted.write(batch(1), 1)
    assert isinstance(info.value.__cause__, MarkerLostError)
    assert restarted.abort(1)
    restarted.write(batch(2), 2)
    assert support.ids(target) == [0, 1, 2]


def test_target_dropped_under_a_running_sink(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    sink.write(batch(2), 1)
    shutil.rmtree(target)
    error = raised(lambda: sink.write(batch(3), 2))
    if error is not None:  # a named error ...
        assert error.table == target
        assert not support.exists(target)
    else:  # ... or the sink re-reads the target (dropped: only the new version)
        assert support.ids(target) == [3]
        assert support.marker(target, "job") == 2


def test_target_schema_changed_by_another_tool_fails_with_the_column_named(
    pending: DeltaSink,
) -> None:
    changed = pa.table({"id": pa.array([1, 2], pa.int32()), "value": ["v1", "v2"]})
    write_deltalake(pending.target, changed, mode="overwrite", schema_mode="overwrite")
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(CommitError, match=r"version 2 .*'id' has type int64 .*int32") as info:
        restarted.recover()
    assert info.value.version == 2
    assert isinstance(info.value.__cause__, SchemaMismatchError)
    assert info.value.__cause__.column == "id"
    assert restarted.status().pending_versions == [2, 3]
    with pytest.raises(SchemaMismatchError, match="'id' has type int64"):
        restarted.pre_commit(batch(5), 4)
    assert support.staged_versions(pending.staging) == [2, 3]
    assert support.marker(pending.target, "job") == 1


def test_target_column_added_by_another_tool_is_filled_with_nulls(pending: DeltaSink) -> None:
    note = Field.from_arrow(pa.field("note", pa.string(), nullable=True))
    DeltaTable(pending.target).alter.add_columns([note])
    assert pending.commit(3).committed_versions == [2, 3]
    assert support.rows(pending.target) == [
        {"id": i, "value": f"v{i}", "note": None} for i in (1, 2, 3, 4)
    ]


def test_target_replaced_by_a_regular_file_is_not_a_delta_table(pending: DeltaSink) -> None:
    shutil.rmtree(pending.target)
    Path(pending.target).write_text("id,value\n1,v1\n")
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(NotADeltaTableError, match="is not a Delta table") as info:
        restarted.recover()
    assert info.value.table == pending.target
    assert support.staged_versions(pending.staging) == [2, 3]


def test_corrupt_target_log_gives_a_named_error(pending: DeltaSink) -> None:
    garbage(log_files(pending.target)[-1])
    restarted = DeltaSink(pending.target, "job", APPEND)
    with pytest.raises(DeltaSinkError, match=re.escape(str(pending.target))) as info:
        restarted.recover()
    assert info.value.table == pending.target
    assert support.staged_versions(pending.staging) == [2, 3]


# -- retention ---------------------------------------------------------------------------------

CRASHING_STAGER = (
    "import sys, pyarrow as pa\n"
    "from deltasink import DeltaSink, MergeSpec\n"
    "sink = DeltaSink(sys.argv[1], 'job', MergeSpec(mode='append'))\n"
    "sink.pre_commit(pa.table({'id': [2], 'value': ['v2']}), 1)\n"
)


def test_gc_removes_the_orphan_file_of_a_crashed_staging(target: str) -> None:
    """A writer dies between writing a staged file and committing it: the file is in
    no log. gc removes it once it is older than the retention."""
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    crash = subprocess.run(
        [sys.executable, "-c", CRASHING_STAGER, target],
        env={**os.environ, "DELTASINK_FAULTS": "stage.after_files=exit"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert crash.returncode == EXIT_CODE, crash.stderr
    (orphan,) = [f for f in support.staged_files_on_disk(sink.staging) if "=1/" in f]
    assert support.staged_versions(sink.staging) == []  # never reached the log
    two_hours_ago = time.time() - 2 * 3600
    os.utime(Path(sink.staging, orphan), (two_hours_ago, two_hours_ago))

    result = DeltaSink(target, "job").gc(retention=timedelta(hours=1))
    assert orphan in result.files
    assert not any("=1/" in f for f in support.staged_files_on_disk(sink.staging))


def test_gc_keeps_files_younger_than_a_sub_hour_retention(target: str) -> None:
    """The retention is rounded up to whole hours, never down."""
    sink = DeltaSink(target, "job", APPEND)
    sink.pre_commit(batch(1), 0)
    assert sink.abort(0) is True
    assert sink.gc(retention=timedelta(minutes=30)).files == ()
    assert len(support.staged_files_on_disk(sink.staging)) == 1


def test_gc_with_zero_retention_spares_a_staging_in_flight(target: str) -> None:
    sink = DeltaSink(target, "job", APPEND)
    sink.write(batch(1), 0)
    refused: list[ConfigurationError] = []

    def operator_runs_gc() -> None:  # in another process, at the worst moment
        try:
            DeltaSink(target, "job").gc(retention=0)
        except ConfigurationError as exc:  # refusing a zero retention is fine too
            refused.append(exc)

    with armed("stage.after_files", operator_runs_gc):
        assert sink.pre_commit(batch(2), 1).state == "staged"
    assert sink.commit(1).committed_versions == [1]
    assert support.ids(target) == [1, 2]


# -- object stores that refuse or cannot be reached ------------------------------------


class _DenyingStore(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request 403 AccessDenied (a bad credential)."""

    def _deny(self) -> None:
        body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _deny

    def log_message(self, *args: Any) -> None:
        pass


def _s3_options(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
    }


@pytest.fixture
def denying_store() -> Iterator[dict[str, str]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DenyingStore)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield _s3_options(f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


def test_a_refused_credential_is_named_as_such_not_as_a_damaged_table(
    denying_store: dict[str, str],
) -> None:
    uri = "s3://bucket/silver/orders"
    sink = DeltaSink(uri, "orders", MergeSpec(keys=["id"]), storage_options=denying_store)
    for call in (lambda: sink.write(pa.table({"id": [1]}), 0), sink.status, sink.recover):
        with pytest.raises(StorageAccessError) as raised:
            call()
        message = str(raised.value)
        assert "refused access" in message
        assert "credentials and permissions" in message
        assert "backup" not in message
        assert "403" in message  # the store's own words are kept
    from typer.testing import CliRunner

    from deltasink.cli import app

    options = [arg for k, v in denying_store.items() for arg in ("-o", f"{k}={v}")]
    result = CliRunner().invoke(app, ["status", uri, "--app", "orders", *options])
    assert result.exit_code == 1
    said = " ".join(result.output.split())
    assert said.startswith("StorageAccessError: the storage refused access to " + uri)
    assert "backup" not in said


def test_an_unreachable_store_is_not_called_a_permission_problem() -> None:
    options = _s3_options("http://127.0.0.1:9") | {"max_retries": "1", "retry_timeout": "2s"}
    sink = DeltaSink(
        "s3://bucket/orders", "orders", MergeSpec(keys=["id"]), storage_options=options
    )
    with pytest.raises(StorageError) as raised:
        sink.status()
    assert not isinstance(raised.value, StorageAccessError)
    assert "could not be used" in str(raised.value)
    assert "network" in str(raised.value)


def test_torn_commits_are_looked_for_after_the_last_checkpoint_only(target: str) -> None:
    """The torn-write check probes the commits a snapshot is read from (after the last
    checkpoint) by name: its cost does not grow with the table's history."""
    sink = DeltaSink(target, "job", APPEND)
    for version in range(3):
        sink.write(batch(version), version)
    DeltaTable(target).create_checkpoint()
    sink.write(batch(3), 3)
    sink.write(batch(4), 4)
    commits = sorted(Path(target, "_delta_log").glob("*.json"))
    checkpointed = int(
        json.loads(Path(target, "_delta_log", "_last_checkpoint").read_text())["version"]
    )
    before = [c for c in commits if int(c.stem) <= checkpointed]
    after = [c for c in commits if int(c.stem) > checkpointed]
    before[1].write_text("")  # read from the checkpoint, never from this file
    assert DeltaSink(target, "job", APPEND).status().committed_version == 4
    after[0].write_text("")  # a torn commit that the snapshot would read as empty
    error = raised(DeltaSink(target, "job", APPEND).status)
    assert isinstance(error, StorageError), error
    assert error.table == target
    assert after[0].name in str(error)
    assert before[1].name not in str(error)
