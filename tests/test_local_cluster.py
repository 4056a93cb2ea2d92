"""The spark engine with separate executor JVMs (``local-cluster[2,1,1024]``): staging,
the MERGE and recovery run on executors, and the table equals an independent
one-by-one oracle (the contract suite runs the same engine on ``local[2]``).

Measured here: ``local[2]`` and ``local-cluster`` runs of the job gave identical rows,
markers and commits (about 60 s each); CI runs the cluster one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_contract_spark import REASON, delta_jars
from tools.stream_soak import job_env

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jvm" / "cluster_job.py"

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.delta_spark,
    # three JVMs (a driver, two executors): `make test-delta-spark`, not `make test`
    pytest.mark.delta_spark_full,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]


def run(master: str, work: Path) -> dict[str, Any]:
    work.mkdir()
    done = subprocess.run(
        [sys.executable, str(JOB), master, ",".join(delta_jars()), str(work)],
        env=job_env("spark"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def expected_rows() -> list[list[Any]]:
    """The oracle: versions 0-5 applied one by one (latest seq wins, deletes remove)."""
    state: dict[int, list[Any]] = {}
    for version in range(6):
        for key in range(version * 120, version * 120 + 200):
            if key % 13 == 0:
                state.pop(key, None)
            else:
                state[key] = [key, version, "U", f"v{version}-{key}"]
    return [state[k] for k in sorted(state)]


@pytest.mark.timeout(900)
def test_executors_produce_the_table_of_the_one_by_one_oracle(tmp_path: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("needs Java 17")
    cluster = run("local-cluster[2,1,1024]", tmp_path / "cluster")
    assert cluster["executors"] == 2  # two executor JVMs ran the tasks
    assert cluster["rows"] == expected_rows()
    assert cluster["marker"] == 5
    assert cluster["pending"] == []
    # One target commit per marker: 2 and 3 were recovered in one coalesced commit.
    assert cluster["commits"] == {"0": 1, "1": 1, "3": 1, "4": 1, "5": 1}
