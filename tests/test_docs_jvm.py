"""The README's streaming example, run as written on a classic local session: its two
blocks (``<!-- snippet: classic -->`` makes the session, ``<!-- snippet: stream -->``
runs the query) in a Python process of their own, with a JVM, as a user on a fresh
clone runs them: no Delta jars, so deltasink commits with delta-rs.

Listed in ``CHILD_MODULES`` (tests/test_contract_spark.py): in ``make test`` it runs in
the delta-spark suite's process, beside the rest of the suite; its own JVM starts there
while that process waits for it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import support
from tests.test_docs import places_in, streaming_example

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17 for classic PySpark"),
]


def test_the_streaming_example_runs_as_written_on_a_classic_local_session(
    tmp_path: Path,
) -> None:
    classic, stream = streaming_example()
    places = places_in(tmp_path)
    script = tmp_path / "readme_stream.py"
    script.write_text(classic.moved(places) + "\n" + stream.moved(places))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    }
    env.update(PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    target = places["/tmp/deltasink-stream"] + "/silver/orders"
    assert support.rows(target, sort_by="order_id") == [
        {"order_id": 1, "status": "created"},
        {"order_id": 2, "status": "created"},
    ]
    commits = support.txn_commits(target, "orders-stream")
    assert list(commits) == [0]
    assert len(commits[0]) == 1  # micro-batch 0 in one target commit, once
