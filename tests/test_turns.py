"""Taking turns (:mod:`deltasink.backends.embedded.turns`): the writers of one machine
commit to a local target first come, first served; none of them redoes a commit for
another one's, and a writer that dies holding its turn does not block the rest."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa

from bench.fanin import Case, checks
from deltasink.backends.deltalog.turns import _queue_dir, turn
from tests import forks
from tests.test_fanin import run_writers


def _tail(target: str) -> str:
    path = _queue_dir(target) / "tail"
    return path.read_text() if path.exists() else ""


def test_turns_are_granted_in_the_order_they_were_asked(tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    granted: list[int] = []
    release = threading.Event()

    def writer(n: int) -> None:
        with turn(target):
            granted.append(n)
            if n == 0:
                release.wait(30)

    threads = []
    for n in range(6):
        before = _tail(target)
        thread = threading.Thread(target=writer, args=(n,))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 10
        while _tail(target) == before and time.monotonic() < deadline:
            time.sleep(0.001)  # queued: the next one asks after it
    assert granted == [0]  # the first holds its turn: nobody else is in
    release.set()
    for thread in threads:
        thread.join(30)
    assert granted == [0, 1, 2, 3, 4, 5]


def _hold_and_die(target: str) -> None:
    ctx = turn(target)
    ctx.__enter__()
    print("holding", flush=True)
    os._exit(3)  # dies holding its turn: no release, no clean-up


def test_a_writer_that_dies_holding_its_turn_does_not_block_the_next(tmp_path: Path) -> None:
    target = str(tmp_path / "t")
    code, output = forks.run(_hold_and_die, target)
    assert code == 3, output
    assert "holding" in output
    start = time.monotonic()
    with turn(target):
        waited = time.monotonic() - start
    assert waited < 5  # the kernel released the dead writer's lock (the limit is 120 s)


def test_writer_processes_taking_turns_redo_no_commit(tmp_path: Path) -> None:
    """Four processes on overlapping keys: every write lands on its first attempt (no
    conflict among them), the target equals the oracle, each version in one commit."""
    case = Case("embedded", 4, "overlap", 3, rows=40, keys=60, seed=7)
    target = str(tmp_path / "orders")
    results = run_writers(case, target)
    assert checks(case, target, results) == {
        "oracle": True,
        "one_commit_each": True,
        "nobody_starved": True,
    }
    attempts = [a for r in results for a in r["attempts"]]
    assert attempts == [1] * (4 * 3), attempts


def test_a_remote_target_takes_no_turn(tmp_path: Path) -> None:
    with turn("s3://bucket/table"):
        pass
    assert not _queue_dir("s3://bucket/table").exists()


def test_a_thread_holding_its_turn_writes_again_without_waiting_for_itself(
    tmp_path: Path,
) -> None:
    target = str(tmp_path / "t")
    with turn(target), turn(target):  # a hook of the writer's own commit: no deadlock
        pa.table({"x": [1]})
