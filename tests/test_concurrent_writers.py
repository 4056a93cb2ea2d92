"""Two processes, two app ids, one target, the same new keys at the same time.

Before the fix, the insert-only fast path appended blindly (Delta checks an append
against nothing) and two concurrent creations of the target both landed: 40 of 152 keys
duplicated in one run. Now every key must be there exactly once, in every mode.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

VERSIONS = 8
KEYS_PER_VERSION = 10


def _writer(target: str, app_id: str, mode: str, start: float) -> None:
    from deltasink import DeltaSink, MergeSpec

    sink = DeltaSink(target, app_id, MergeSpec(keys=["id"], mode=mode), max_commit_attempts=30)
    while time.time() < start:  # both begin together
        time.sleep(0.001)
    for version in range(VERSIONS):
        ids = list(range(version * KEYS_PER_VERSION, (version + 1) * KEYS_PER_VERSION))
        batch = pa.table({"id": pa.array(ids, pa.int64()), "writer": [app_id] * len(ids)})
        sink.write(batch, version)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["upsert", "insert"])
def test_two_app_ids_inserting_the_same_new_keys_leave_one_row_per_key(
    tmp_path: Path, mode: str
) -> None:
    target = str(tmp_path / "orders")
    context = mp.get_context("spawn")
    start = time.time() + 5  # after both interpreters have imported deltasink
    writers = [
        context.Process(target=_writer, args=(target, f"writer-{i}", mode, start)) for i in range(2)
    ]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=120)
    assert [p.exitcode for p in writers] == [0, 0]
    table = DeltaTable(target)
    ids = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    duplicated = {k: n for k, n in Counter(ids).items() if n > 1}
    assert duplicated == {}
    assert sorted(ids) == list(range(VERSIONS * KEYS_PER_VERSION))
    assert table.transaction_version("writer-0") == VERSIONS - 1
    assert table.transaction_version("writer-1") == VERSIONS - 1


def _history_writer(target: str, index: int, start: float) -> None:
    from deltasink import DeltaSink, MergeSpec

    spec = MergeSpec(mode="scd2", keys=["id"], sequence_by="seq")
    sink = DeltaSink(target, f"writer-{index}", spec, max_commit_attempts=30)
    while time.time() < start:
        time.sleep(0.001)
    for version in range(VERSIONS):
        ids = list(range(KEYS_PER_VERSION))  # every version: an event of every key
        seqs = [2 * version + index] * len(ids)  # the writers' events interleave
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "seq": pa.array(seqs, pa.int64()),
                "v": [f"w{index}v{version}"] * len(ids),
            }
        )
        sink.write(batch, version)


@pytest.mark.slow
def test_two_app_ids_writing_history_of_the_same_keys_leave_the_oracles_history(
    tmp_path: Path,
) -> None:
    """scd2: a MERGE lands only on the snapshot it read the history from; with two
    writers racing on the same keys, each key ends with every event of both, in
    sequence order (the history depends only on the set of events)."""
    from tests.oracle import Fold

    target = str(tmp_path / "customers")
    context = mp.get_context("spawn")
    start = time.time() + 5
    writers = [context.Process(target=_history_writer, args=(target, i, start)) for i in range(2)]
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=180)
    assert [p.exitcode for p in writers] == [0, 0]
    fold = Fold("scd2", ("id",), "seq", history=("valid_from", "valid_to", "is_current"))
    for version in range(VERSIONS):
        for index in range(2):
            rows = [
                {"id": k, "seq": 2 * version + index, "v": f"w{index}v{version}"}
                for k in range(KEYS_PER_VERSION)
            ]
            fold.apply(rows)
    table = DeltaTable(target)
    actual = sorted(repr(sorted(r.items())) for r in table.to_pyarrow_table().to_pylist())
    expected = sorted(repr(sorted(r.items())) for r in fold.expected())
    assert len(actual) == 2 * VERSIONS * KEYS_PER_VERSION
    assert actual == expected
    assert table.transaction_version("writer-0") == VERSIONS - 1
    assert table.transaction_version("writer-1") == VERSIONS - 1
