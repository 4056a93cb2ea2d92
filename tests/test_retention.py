"""The embedded engine's staging log kept by commit count (issue 29, P4):
``deltasink.backends.embedded.retention``. Real staging tables in ``tmp_path``, with a
checkpoint every 10 commits and a window of 20 commits so that a few hundred commits
cross many checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from deltasink import DeltaSink, MergeSpec
from deltasink.backends.deltalog.commits import commit_properties
from deltasink.backends.embedded import retention
from tests import support

SPEC = MergeSpec(keys=["id"])
KEEP, INTERVAL = 20, 10


@pytest.fixture(autouse=True)
def keep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention, "KEEP_COMMITS", KEEP)


def batch(version: int) -> pa.Table:
    return pa.table({"id": [version], "v": [f"v{version}"]})


def sink_with(target: str, **props: str) -> DeltaSink:
    """A sink that wrote version 0, its staging table checkpointing every INTERVAL
    commits (and ``props`` set)."""
    sink = DeltaSink(target, "job", SPEC)
    sink.write(batch(0), 0)
    DeltaTable(sink.staging).alter.set_table_properties(
        {"delta.checkpointInterval": str(INTERVAL), **props}
    )
    return sink


def log_files(staging: str) -> tuple[list[int], list[int], set[str]]:
    """The staging log's commit versions, checkpoint versions and other files."""
    commits, checkpoints, other = [], [], set()
    for path in (Path(staging) / "_delta_log").iterdir():
        if path.name.endswith(".json"):
            commits.append(int(path.name[:20]))
        elif path.name.endswith(".checkpoint.parquet"):
            checkpoints.append(int(path.name[:20]))
        else:
            other.add(path.name)
    return sorted(commits), sorted(checkpoints), other


def last_checkpoint(staging: str) -> int:
    text = (Path(staging) / "_delta_log" / "_last_checkpoint").read_text()
    return int(json.loads(text)["version"])


def test_a_steady_state_staging_log_keeps_a_bounded_number_of_commits(target: str) -> None:
    sink = sink_with(target)
    for version in range(1, 101):
        sink.write(batch(version), version)
    staging = DeltaTable(sink.staging)
    latest = staging.version()
    commits, checkpoints, other = log_files(sink.staging)
    newest = last_checkpoint(sink.staging)
    assert latest > 3 * (KEEP + INTERVAL)  # so files were deleted, many times over
    assert commits == list(range(commits[0], latest + 1))  # no gap, up to the tip
    assert newest in checkpoints
    assert newest > latest - INTERVAL
    # The checkpoint commit trimmed on the state it was made on (the write's state,
    # one commit back, or two when a write makes two): KEEP commits before that
    # state's next version stay.
    assert newest - KEEP - 1 <= commits[0] <= newest - KEEP
    assert checkpoints[0] >= commits[0]
    assert len(commits) <= KEEP + INTERVAL + 1
    assert other == {"_last_checkpoint"}
    # The state is whole: markers (the committed mark rides on the next intent),
    # epoch, nothing pending.
    assert staging.transaction_version("job#committed") == 99
    assert staging.transaction_version("job#publishing") == 100
    assert staging.metadata().configuration["deltasink.epoch"] == "1"
    status = sink.status()
    assert (status.committed_version, status.pending_versions) == (100, [])
    assert [c["version"] for c in staging.history()][-1] == commits[0]
    # A new sink takes over: nothing to recover, then it writes on.
    successor = DeltaSink(target, "job", SPEC)
    report = successor.recover()
    assert (report.committed_version, report.results) == (100, ())
    successor.write(batch(101), 101)
    staging = DeltaTable(sink.staging)
    assert staging.metadata().configuration["deltasink.epoch"] == "2"
    assert staging.transaction_version("job#publishing") == 101
    assert support.marker(target, "job") == 101
    assert support.ids(target) == list(range(102))


def test_checkpoints_written_by_claims_trim_too(target: str) -> None:
    """A job started afresh for every batch (recover(), then write()): two staging
    commits per run, and here every checkpoint lands on a claim."""
    sink = sink_with(target)
    sink.write(batch(1), 1)  # from here on, claims fall on the checkpoint versions
    for version in range(2, 42):
        run = DeltaSink(target, "job", SPEC)
        run.recover()
        run.write(batch(version), version)
    newest = last_checkpoint(sink.staging)
    commit = (Path(sink.staging) / "_delta_log" / f"{newest:020d}.json").read_text()
    info = json.loads(commit.splitlines()[0])["commitInfo"]
    assert info["deltasink.operation"] == "claim-epoch"
    commits, _, _ = log_files(sink.staging)
    assert commits == list(range(newest + 1 - KEEP, DeltaTable(sink.staging).version() + 1))
    assert DeltaSink(target, "job", SPEC).status().committed_version == 41


def test_a_trim_deletes_exactly_what_lies_before_the_checkpoint_and_the_window(
    target: str,
) -> None:
    sink = sink_with(target, **{"delta.enableExpiredLogCleanup": "false"})
    for version in range(1, 41):
        sink.write(batch(version), version)
    before, checkpoints, _ = log_files(sink.staging)
    assert before == list(range(before[-1] + 1))  # clean-up off: every commit kept
    DeltaTable(sink.staging).alter.set_table_properties({"delta.enableExpiredLogCleanup": "true"})
    table = DeltaTable(sink.staging)
    latest, newest = table.version(), last_checkpoint(sink.staging)
    cutoff = min(newest, latest + 1 - KEEP)
    assert 0 < cutoff < newest
    deleted = retention.trim_log(table)
    assert sorted(deleted) == sorted(
        [f"{v:020d}.json" for v in range(cutoff)]
        + [f"{c:020d}.checkpoint.parquet" for c in checkpoints if c < cutoff]
    )
    commits, kept, other = log_files(sink.staging)
    assert commits == list(range(cutoff, latest + 1))
    assert kept == [c for c in checkpoints if c >= cutoff]
    assert other == {"_last_checkpoint"}
    assert retention.trim_log(DeltaTable(sink.staging)) == []  # nothing more to do
    assert DeltaSink(target, "job", SPEC).status().committed_version == 40


def test_nothing_is_deleted_while_a_version_is_pending(target: str) -> None:
    sink = sink_with(target)
    for version in range(1, 41):  # 40 stage commits, every version pending
        sink.pre_commit(batch(version), version)
    commits, checkpoints, _ = log_files(sink.staging)
    latest = DeltaTable(sink.staging).version()
    assert latest + 1 - KEEP > INTERVAL  # the window alone would allow deleting
    assert commits == list(range(latest + 1))  # all kept, the stage commits too
    assert len(checkpoints) >= 4
    assert retention.trim_log(DeltaTable(sink.staging)) == []
    # Committed, nothing pending: the next checkpoints trim again.
    assert sink.commit(40).committed_version == 40
    for version in range(41, 41 + 2 * INTERVAL):
        sink.write(batch(version), version)
    commits, _, _ = log_files(sink.staging)
    assert len(commits) <= KEEP + INTERVAL + 1
    assert support.ids(target) == list(range(41 + 2 * INTERVAL))


def test_a_version_staged_without_files_counts_as_pending(target: str) -> None:
    """The app's stage marker above its committed mark (an aborted version here, an
    empty batch the spark engine staged there) holds the trim until a later version
    is committed."""
    sink = sink_with(target)
    for version in range(1, 41):
        sink.write(batch(version), version)
    sink.pre_commit(batch(41), 41)
    assert sink.abort(41)
    staging = DeltaTable(sink.staging)
    assert support.staged_versions(sink.staging) == []
    assert (staging.transaction_version("job"), staging.transaction_version("job#committed")) == (
        41,
        39,
    )
    assert retention.trim_log(staging) == []
    sink.write(batch(42), 42)  # its intent carries the mark of 40
    assert retention.trim_log(DeltaTable(sink.staging)) == []
    sink.write(batch(43), 43)  # ... this one's, of 42
    assert retention.trim_log(DeltaTable(sink.staging)) != []


@pytest.mark.parametrize(
    "props",
    [
        {"delta.enableExpiredLogCleanup": "false"},
        # a retention someone chose (the spark engine's tables keep Delta's default)
        {"delta.logRetentionDuration": "interval 7 days"},
    ],
    ids=["cleanup-off", "retention-chosen"],
)
def test_a_log_whose_clean_up_is_off_or_chosen_keeps_every_commit(
    target: str, props: dict[str, str]
) -> None:
    sink = sink_with(target, **props)
    for version in range(1, 41):
        sink.write(batch(version), version)
    sink.gc(retention=0)
    commits, _, _ = log_files(sink.staging)
    assert commits == list(range(DeltaTable(sink.staging).version() + 1))
    assert DeltaTable(sink.staging).transaction_version("job#publishing") == 40


def test_gc_keeps_the_log_by_the_same_rule(target: str) -> None:
    sink = sink_with(target, **{"delta.enableExpiredLogCleanup": "false"})
    for version in range(1, 41):
        sink.write(batch(version), version)
    DeltaTable(sink.staging).alter.set_table_properties({"delta.enableExpiredLogCleanup": "true"})
    sink.gc(retention=0)  # checkpoints the latest version, then trims
    latest = DeltaTable(sink.staging).version()
    commits, checkpoints, _ = log_files(sink.staging)
    assert last_checkpoint(sink.staging) == latest
    assert commits == list(range(latest + 1 - KEEP, latest + 1))
    assert checkpoints[0] >= latest + 1 - KEEP
    # And with zero-second retention and clean-up off, gc now deletes nothing either
    # (delta-rs's cleanup_metadata alone ignores the flag).
    DeltaTable(sink.staging).alter.set_table_properties(
        {
            "delta.enableExpiredLogCleanup": "false",
            "delta.logRetentionDuration": "interval 0 seconds",
        }
    )
    before, _, _ = log_files(sink.staging)
    sink.gc(retention=0)
    after, _, _ = log_files(sink.staging)
    assert after[0] == before[0]


def test_a_commit_on_a_snapshot_the_log_moved_past_is_a_conflict(target: str) -> None:
    sink = sink_with(target)
    stale = DeltaTable(sink.staging)
    for version in range(1, 41):
        sink.write(batch(version), version)
    assert not (Path(sink.staging) / "_delta_log" / f"{stale.version():020d}.json").exists()
    props = commit_properties(app_id="job", version=None, operation="test")
    with pytest.raises(CommitFailedError, match="moved on past the snapshot"):
        retention.log_commit(stale, [], props)
    # The sink holding it is fenced as usual by a newer writer, whatever its lag.
    DeltaSink(target, "job", SPEC).recover()
    with pytest.raises(Exception, match="another writer"):
        sink.write(batch(41), 41)
