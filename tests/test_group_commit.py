"""Group commit: sinks of one process that publish to one target at the same moment
share one Delta commit carrying each one's ``txn`` marker
(:mod:`deltasink.backends.embedded.grouping`).

The oracle is serial: the commits' order is read back from the target's log (the app a
commit names first, then the apps it carried, in the order they were folded), and the
same versions applied one by one in that order, by one sink each, to a second target
must leave the same rows. Each ``(app, version)`` is in exactly one commit; a crash at
each step of a group commit, then a restart, loses and duplicates nothing."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec
from deltasink._faults import EXIT_CODE, armed
from deltasink.backends.embedded.grouping import GROUP_KEY, queue_for
from tests import forks, generated, support

APPS = 3
VERSIONS = 3

SPECS = {
    "append": MergeSpec(mode="append"),
    "insert": MergeSpec(mode="insert", keys=["k"]),
    "upsert": MergeSpec(keys=["k"]),
    "upsert-sequenced": MergeSpec(keys=["k"], sequence_by="seq"),
    "upsert-deletes": MergeSpec(keys=["k"], sequence_by="seq", delete_when="op = 'D'"),
    "scd2": MergeSpec(mode="scd2", keys=["k"], sequence_by="seq"),
}


#: Group commit is the embedded engine's: pinned, since "auto" picks the spark engine
#: when an earlier test in the process left a Delta-enabled classic session active.
EMBEDDED = "embedded"


def batch(rng: random.Random, app: int, version: int, keys: int) -> pa.Table:
    """Distinct keys drawn from a small shared range (the apps overlap), sequences
    unique across apps and versions, a few deletes."""
    ks = rng.sample(range(keys), rng.randint(1, keys // 2))
    return pa.table(
        {
            "k": pa.array(ks, pa.int64()),
            "seq": pa.array([(version * 8 + app) * 100 + i for i in range(len(ks))], pa.int64()),
            "op": [rng.choice("UUUD") for _ in ks],
            "v": [f"a{app}v{version}" for _ in ks],
        }
    )


def commit_order(target: str) -> list[list[tuple[str, int]]]:
    """Each deltasink commit's ``(app, version)`` pairs in the order they were folded:
    the app the commit names, then the ones it carried."""
    order = []
    for path in sorted(Path(target, "_delta_log").glob("*.json")):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and "deltasink.appId" in info and "deltasink.batchVersion" in info:
                first = (info["deltasink.appId"], int(info["deltasink.batchVersion"]))
                carried = [(a, int(v[0])) for a, v in (info.get(GROUP_KEY) or {}).items()]
                order.append([first, *carried])
    return order


def rows(target: str) -> list[tuple[Any, ...]]:
    """The table's rows, sorted (every column, the history columns of scd2 included)."""
    table = DeltaTable(target).to_pyarrow_table()
    return sorted(tuple(r.values()) for r in table.to_pylist())


def run_grouped(target: str, spec: MergeSpec, batches: dict[tuple[int, int], pa.Table]) -> None:
    """Every app in a thread of its own, its versions in order; the first commit of each
    round waits until the other apps are queued behind it, so groups are formed."""
    sinks = [DeltaSink(target, f"app-{a}", spec, engine=EMBEDDED) for a in range(APPS)]
    queue = queue_for(target)
    gated: list[bool] = []
    rounds = threading.Barrier(APPS, action=gated.clear)

    def gate(**_: object) -> None:
        if gated:  # the round's first commit waited: the rest pass
            return
        gated.append(True)
        deadline = time.monotonic() + 30
        while len(queue._waiting) < APPS - 1 and time.monotonic() < deadline:
            time.sleep(0.002)

    def run(app: int) -> None:
        for version in range(VERSIONS):
            rounds.wait()
            sinks[app].write(batches[(app, version)], version)

    with armed("publish.before_target_commit", gate, after=0):
        threads = [threading.Thread(target=run, args=(a,)) for a in range(APPS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


@pytest.mark.generated
@pytest.mark.parametrize("mode", sorted(SPECS))
def test_a_group_commit_equals_its_versions_applied_one_by_one(tmp_path: Path, mode: str) -> None:
    spec = SPECS[mode]
    rng = generated.rng(f"group-commit-{mode}")
    for case in range(generated.count(sample=1, ci=3)):
        keys = rng.randint(4, 12)
        batches = {(a, v): batch(rng, a, v, keys) for a in range(APPS) for v in range(VERSIONS)}
        grouped = str(tmp_path / f"grouped-{case}")
        run_grouped(grouped, spec, batches)

        order = commit_order(grouped)
        flat = [pair for commit in order for pair in commit]
        assert sorted(flat) == sorted((f"app-{a}", v) for a in range(APPS) for v in range(VERSIONS))
        assert any(len(commit) > 1 for commit in order), order  # a group was formed
        assert {k: len(c) for k, c in support.txn_commits_all(grouped).items()} == dict.fromkeys(
            flat, 1
        )

        serial = str(tmp_path / f"serial-{case}")
        sinks = {
            f"app-{a}": DeltaSink(serial, f"app-{a}", spec, engine=EMBEDDED) for a in range(APPS)
        }
        for app, version in flat:
            sinks[app].write(batches[(int(app[-1]), version)], version)
        assert rows(grouped) == rows(serial), (mode, order)


def test_a_carried_version_committed_meanwhile_is_left_out(tmp_path: Path) -> None:
    """A plain Delta writer commits app-1's version with Delta's own txn marker while the
    group that carries it is being committed: the group re-forms without it (delta-rs
    refuses two concurrent commits of one app id), the version lands once."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    target = str(tmp_path / "t")
    spec = MergeSpec(mode="append")
    sinks = [DeltaSink(target, f"app-{a}", spec, engine=EMBEDDED) for a in range(3)]
    sinks[0].write(pa.table({"id": pa.array([0], pa.int64())}), 0)
    queue = queue_for(target)
    fired: list[bool] = []

    def rival(**_: object) -> None:
        if threading.current_thread().name == "leader":  # its own commit: wait for the rest
            deadline = time.monotonic() + 30
            while len(queue._waiting) < 2 and time.monotonic() < deadline:
                time.sleep(0.002)
        elif not fired:  # the group's commit: app-1's version lands first, elsewhere
            fired.append(True)
            write_deltalake(
                target,
                pa.table({"id": pa.array([101], pa.int64())}),
                mode="append",
                commit_properties=CommitProperties(app_transactions=[Transaction("app-1", 1)]),
            )

    results: dict[int, Any] = {}

    def run(app: int) -> None:
        results[app] = sinks[app].write(pa.table({"id": pa.array([app * 100 + 1], pa.int64())}), 1)

    with armed("publish.before_target_commit", rival):
        threads = [threading.Thread(target=run, args=(0,), name="leader")]
        threads[0].start()
        time.sleep(0.05)
        threads += [threading.Thread(target=run, args=(a,)) for a in (1, 2)]
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join()
    assert fired
    assert results[1].results[0].outcome == "already_committed"
    assert sorted(support.ids(target)) == [0, 1, 101, 201]
    assert support.marker(target, "app-1") == 1
    assert all(len(c) == 1 for c in support.txn_commits_all(target).values())


@pytest.mark.parametrize("crash", ["formed", "before", "after"])
def test_a_crash_in_a_group_commit_then_restart_loses_and_duplicates_nothing(
    tmp_path: Path, crash: str
) -> None:
    target = str(tmp_path / "t")
    code, output = forks.run(forks.group_job, target, crash)
    assert code == EXIT_CODE, output
    # after the crash: each marker in at most one commit
    assert all(len(c) == 1 for c in support.txn_commits_all(target).values())
    code, output = forks.run(forks.group_job, target, "", False)  # the job again
    assert code == 0, output
    expected = sorted(w * 100 + v * 10 + i for w in range(3) for v in range(2) for i in range(3))
    assert sorted(support.ids(target)) == expected
    counts = support.txn_commits_all(target)
    assert sorted(counts) == sorted((f"app-{w}", v) for w in range(3) for v in range(2))
    assert all(len(c) == 1 for c in counts.values()), counts


def test_two_sinks_of_one_thread_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """A write made from inside another sink's commit (a hook of that thread) is
    published alone, not queued behind the commit it is called from."""
    target = str(tmp_path / "t")
    a, b = (
        DeltaSink(target, "a", MergeSpec(mode="append"), engine=EMBEDDED),
        DeltaSink(target, "b", MergeSpec(mode="append"), engine=EMBEDDED),
    )
    a.write(pa.table({"id": pa.array([1], pa.int64())}), 0)
    fired: list[bool] = []

    def inner() -> None:
        if not fired:
            fired.append(True)
            b.write(pa.table({"id": pa.array([2], pa.int64())}), 0)

    with armed("publish.before_target_commit", inner):
        a.write(pa.table({"id": pa.array([3], pa.int64())}), 1)
    assert sorted(support.ids(target)) == [1, 2, 3]
    assert support.marker(target, "b") == 0
