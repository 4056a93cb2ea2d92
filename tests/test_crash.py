"""Hard crashes (``os._exit``) at every fault point, then restart: no loss, no duplicate."""

from __future__ import annotations

import signal
import subprocess

import pytest

from deltasink import DeltaSink, MergeSpec
from deltasink._faults import EXIT_CODE, POINTS
from tests import forks, support

FULL = pytest.mark.delta_spark_full  # make test-delta-spark (see tests/test_contract_spark.py)

#: The fault points each path crosses on every version.
DIRECT_POINTS = (
    "stage.before_write",
    "commit.before_publish",
    "publish.before_target_commit",
    "publish.after_target_commit",
    "commit.after_publish",
)
CASES = [("staged", p) for p in POINTS] + [("direct", p) for p in DIRECT_POINTS]


def run_job(target: str, path: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    """The writer (:func:`tests.forks.append_job`) in a process of its own."""
    code, output = forks.run(forks.append_job, target, path, faults=faults)
    return subprocess.CompletedProcess(path, code, output, output)


@pytest.mark.parametrize(("path", "point"), CASES)
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_hard_crash_then_restart(target: str, path: str, point: str, nth: int) -> None:
    crashed = run_job(target, path, f"{point}=exit@{nth}")
    assert crashed.returncode == EXIT_CODE, (crashed.stdout, crashed.stderr)
    # After the crash the logs are consistent: every marker is in exactly one commit.
    markers = support.txn_commits(target, "crashy")
    assert all(len(v) == 1 for v in markers.values()), markers
    if path == "direct":  # nothing was staged: a crash leaves the target or nothing
        staging = DeltaSink(target, "crashy", MergeSpec(mode="append")).staging
        assert support.staged_versions(staging) == []

    # Restart: recover, then the job runs again from the start (replays are no-ops).
    report = DeltaSink(target, "crashy", MergeSpec(mode="append")).recover()
    assert all(r.outcome == "committed" for r in report.results)
    rerun = run_job(target, path)
    assert rerun.returncode == 0, rerun.stderr

    assert support.ids(target) == [1, 2, 3, 4, 5]  # each row exactly once
    assert support.marker(target, "crashy") == 2
    assert {v: len(c) for v, c in support.txn_commits(target, "crashy").items()} == {
        0: 1,
        1: 1,
        2: 1,
    }
    sink = DeltaSink(target, "crashy", MergeSpec(mode="append"))
    assert sink.status().pending_versions == []
    assert support.staged_versions(sink.staging) == []


@pytest.mark.parametrize(
    ("signum", "point", "left"),
    [
        # SIGTERM (a scheduler stopping the job) once version 1 is staged: the process
        # ends there; version 1 waits staged, the restart's recover() commits it.
        (signal.SIGTERM, "stage.after_log_commit", {"committed": 0, "pending": [1]}),
        # Ctrl-C right after version 1's target commit: KeyboardInterrupt reaches the
        # job after the version committed; it is not undone, only not yet cleaned up.
        (signal.SIGINT, "publish.after_target_commit", {"committed": 1, "pending": []}),
        pytest.param(
            signal.SIGINT,
            "stage.after_log_commit",
            {"committed": 0, "pending": [1]},
            marks=FULL,
        ),
        pytest.param(
            signal.SIGTERM,
            "publish.after_target_commit",
            {"committed": 1, "pending": []},
            marks=FULL,
        ),
    ],
)
def test_ctrl_c_and_sigterm_leave_what_docs_stopping_says(
    target: str, signum: int, point: str, left: dict[str, object]
) -> None:
    """docs/stopping.md: what Ctrl-C and SIGTERM leave behind, and what a restart does."""
    code, output = forks.run(forks.signalled_job, target, "staged", point, int(signum))
    if signum == signal.SIGTERM:
        assert code == -signal.SIGTERM, output  # killed by the signal: no clean-up ran
    else:
        assert code == 1, output
        assert "KeyboardInterrupt" in output
    status = DeltaSink(target, "crashy").status()
    assert {"committed": status.committed_version, "pending": status.pending_versions} == left
    assert support.ids(target) == ([1, 2, 3] if left["committed"] == 1 else [1, 2])

    rerun = run_job(target, "staged")  # the restart: recover(), then the same versions
    assert rerun.returncode == 0, rerun.stderr
    assert support.ids(target) == [1, 2, 3, 4, 5]  # each row exactly once
    assert {v: len(c) for v, c in support.txn_commits(target, "crashy").items()} == {
        0: 1,
        1: 1,
        2: 1,
    }
    assert DeltaSink(target, "crashy").status().pending_versions == []
