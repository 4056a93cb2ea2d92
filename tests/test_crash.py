"""Hard crashes (``os._exit``) at every fault point, then restart: no loss, no duplicate."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from deltasink import DeltaSink, MergeSpec
from deltasink._faults import EXIT_CODE, POINTS
from tests import support

JOB = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    from deltasink import DeltaSink, MergeSpec

    target, path = sys.argv[1], sys.argv[2]
    sink = DeltaSink(target, "crashy", MergeSpec(mode="append"))
    sink.recover()
    for version, ids in enumerate([[1, 2], [3], [4, 5]]):
        if path == "direct":  # write(): published without staging
            sink.write(pa.table({"id": ids}), version)
        else:  # the two phases: staged, then committed and cleaned up
            sink.pre_commit(pa.table({"id": ids}), version)
            sink.commit(version)
    print("done")
    """
)
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
    env = {**os.environ, "DELTASINK_FAULTS": faults}
    return subprocess.run(
        [sys.executable, "-c", JOB, target, path],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


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
