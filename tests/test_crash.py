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

    target = sys.argv[1]
    sink = DeltaSink(target, "crashy", MergeSpec(mode="append"))
    sink.recover()
    for version, ids in enumerate([[1, 2], [3], [4, 5]]):
        sink.write(pa.table({"id": ids}), version)
    print("done")
    """
)


def run_job(target: str, faults: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DELTASINK_FAULTS": faults}
    return subprocess.run(
        [sys.executable, "-c", JOB, target],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_hard_crash_then_restart(target: str, point: str, nth: int) -> None:
    crashed = run_job(target, f"{point}=exit@{nth}")
    assert crashed.returncode == EXIT_CODE, (crashed.stdout, crashed.stderr)
    # After the crash the logs are consistent: every marker is in exactly one commit.
    markers = support.txn_commits(target, "crashy")
    assert all(len(v) == 1 for v in markers.values()), markers

    # Restart: recover, then the job runs again from the start (replays are no-ops).
    report = DeltaSink(target, "crashy", MergeSpec(mode="append")).recover()
    assert all(r.outcome == "committed" for r in report.results)
    rerun = run_job(target)
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
