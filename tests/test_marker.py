"""The target marker read from the last checkpoint and the commits after it
(``backends/embedded/marker.py``), checked against delta-rs reading the same log."""

from __future__ import annotations

import json
import os
from typing import Any

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltasink import DeltaSink, MergeSpec
from deltasink.backends.deltalog.marker import MarkerRead, read_marker
from tests import support
from tests.test_optimizations import LogReads

APPS = ("a", "b")


def commit(path: str, app: str | None, version: int = 0) -> None:
    txns = [] if app is None else [Transaction(app, version, 1_700_000_000_000)]
    write_deltalake(
        path,
        pa.table({"id": [version]}),
        mode="append",
        commit_properties=CommitProperties(app_transactions=txns),
    )


def delta_rs(path: str, app: str) -> MarkerRead:
    table = DeltaTable(path)
    return MarkerRead(table.version(), table.transaction_version(app))


# Each step: a commit with a marker of one app (or none), or a checkpoint.
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([*APPS, None]), st.integers(0, 1_000)),
        st.just(("checkpoint", 0)),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps)
def test_the_marker_agrees_with_delta_rs_after_any_commits_and_checkpoints(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, int]]
) -> None:
    path = str(tmp_path_factory.mktemp("marker") / "t")
    commit(path, None)
    checkpointed = False
    for what, version in steps:
        if what == "checkpoint":
            DeltaTable(path).create_checkpoint()
            checkpointed = True
        else:
            commit(path, what, version)
        for app in (*APPS, "never"):
            read = read_marker(path, app)
            if not checkpointed:
                assert read is None  # no checkpoint: delta-rs's listing is short anyway
            else:
                assert read == delta_rs(path, app)


def checkpointed_table(path: str) -> None:
    """Versions 0-2: markers 1 and 2 in the checkpoint at version 1, marker 3 after it."""
    commit(path, "a", 1)
    commit(path, "a", 2)
    DeltaTable(path).create_checkpoint()
    commit(path, "a", 3)


def test_a_multi_part_checkpoint_is_read_part_by_part(tmp_path: Any) -> None:
    # delta-rs writes single-file checkpoints: split one in two by rows, as Spark
    # would write it with parts, and point _last_checkpoint at them.
    import pyarrow.parquet as pq

    path = str(tmp_path / "t")
    checkpointed_table(path)
    log = os.path.join(path, "_delta_log")
    single = os.path.join(log, f"{1:020d}.checkpoint.parquet")
    rows = pq.read_table(single)
    txn_rows = [i for i, t in enumerate(rows.column("txn").to_pylist()) if t is not None]
    cut = txn_rows[0]  # the marker's row goes in part 2
    pq.write_table(
        rows.slice(0, cut), os.path.join(log, f"{1:020d}.checkpoint.{1:010d}.{2:010d}.parquet")
    )
    pq.write_table(
        rows.slice(cut), os.path.join(log, f"{1:020d}.checkpoint.{2:010d}.{2:010d}.parquet")
    )
    os.remove(single)
    with open(os.path.join(log, "_last_checkpoint"), "w", encoding="utf-8") as f:
        json.dump({"version": 1, "size": rows.num_rows, "parts": 2}, f)
    # Commit 2 holds the newest marker; the parts hold marker 2.
    assert read_marker(path, "a") == MarkerRead(2, 3)
    os.remove(os.path.join(log, f"{2:020d}.json"))
    assert read_marker(path, "a") == MarkerRead(1, 2)


@pytest.mark.parametrize(
    "change",
    ["v2-checkpoint", "torn-commit", "missing-checkpoint", "txn-retention", "garbled-hint"],
)
def test_what_the_reader_does_not_judge_is_left_to_delta_rs(tmp_path: Any, change: str) -> None:
    path = str(tmp_path / "t")
    checkpointed_table(path)
    log = os.path.join(path, "_delta_log")
    assert read_marker(path, "a") == MarkerRead(2, 3)
    if change == "v2-checkpoint":
        with open(os.path.join(log, "_last_checkpoint"), "w", encoding="utf-8") as f:
            json.dump({"version": 1, "size": 4, "v2Checkpoint": {"path": "x.json"}}, f)
    elif change == "torn-commit":
        open(os.path.join(log, f"{3:020d}.json"), "w").close()
    elif change == "missing-checkpoint":
        os.remove(os.path.join(log, f"{1:020d}.checkpoint.parquet"))
    elif change == "txn-retention":
        DeltaTable(path).alter.set_table_properties(
            {"delta.setTransactionRetentionDuration": "interval 1 days"}
        )
    else:
        with open(os.path.join(log, "_last_checkpoint"), "w", encoding="utf-8") as f:
            f.write("{not json")
    assert read_marker(path, "a") is None


def test_no_table_is_no_answer(tmp_path: Any) -> None:
    assert read_marker(str(tmp_path / "nothing"), "a") is None


def test_status_of_a_checkpointed_target_does_not_list_its_log(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = DeltaSink(target, "job", MergeSpec(keys=["id"]))
    for version in range(3):
        sink.write(pa.table({"id": [version], "v": ["x"]}), version)
    DeltaTable(target).create_checkpoint()
    commit_version = support.table_version(target)
    reads = LogReads(monkeypatch)
    status = DeltaSink(target, "job", MergeSpec(keys=["id"])).status()
    assert status.committed_version == 2
    assert reads.of(target) == 0, reads.counts
    assert support.table_version(target) == commit_version
