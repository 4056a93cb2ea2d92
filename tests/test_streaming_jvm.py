"""Streaming on classic JVM PySpark: ``writeStream.foreachBatch(sink.foreach_batch)``,
the job killed hard (SIGKILL to its process group, the JVM included) after a few
micro-batches, then restarted from the same checkpoint: every row exactly once.

The job (``tests/jvm/stream_job.py``) runs in its own processes: a classic session
cannot share a process with the embedded engine's Spark Connect session. It uses the
embedded backend (``engine="embedded"``; delta-rs makes the commits, the micro-batches
arrive as classic DataFrames), so no Delta jars are needed. Its append MergeSpec makes a
replayed batch visible as duplicate rows, were it applied twice.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from deltasink import DeltaSink, MergeSpec
from tests import support
from tools.stream_soak import job_env

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17 for classic PySpark"),
]

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jvm" / "stream_job.py"
APP = "stream"
FILES = 8
ROWS_PER_FILE = 3


def events(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"event"')]


def group_alive(pgid: int, *, within: float) -> bool:
    """Whether processes of group ``pgid`` remain after ``within`` seconds (killed
    processes linger briefly until they are reaped)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    return True


def write_input(directory: Path) -> list[int]:
    directory.mkdir()
    ids = []
    for batch in range(FILES):
        lines = []
        for row in range(ROWS_PER_FILE):
            key = batch * 10 + row
            ids.append(key)
            lines.append(json.dumps({"id": key, "value": f"b{batch}"}))
        path = directory / f"part-{batch:02d}.json"
        path.write_text("\n".join(lines) + "\n")
        stamp = 1_700_000_000 + batch  # the file source takes files oldest first
        os.utime(path, (stamp, stamp))
    return ids


@pytest.mark.delta_spark_full  # a JVM of its own, killed and restarted: make test-delta-spark
def test_hard_kill_mid_stream_then_restart_from_the_checkpoint(tmp_path: Path) -> None:
    # The same job on the spark engine over real delta-spark, killed three times at
    # planned instants: tests/test_stream_soak.py (and tools/stream_soak.py for the soak).
    engine = "embedded"
    env = job_env(engine)
    source, checkpoint = tmp_path / "input", tmp_path / "checkpoint"
    target = str(tmp_path / "lake" / "events")
    expected_ids = write_input(source)
    command = [sys.executable, str(JOB), str(source), str(checkpoint), target, APP]

    # Run 1: slowed down (0.5 s after each batch) and SIGKILLed, JVM and all, as soon as
    # the third micro-batch is committed to the target.
    first = subprocess.Popen(
        [*command, "0.5"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )
    deadline = time.monotonic() + 240
    try:
        while (support.marker(target, APP) or -1) < 2:
            assert first.poll() is None, "the job ended before it could be killed"
            assert time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        out, _ = first.communicate(timeout=60)
    assert first.returncode == -signal.SIGKILL
    assert not group_alive(first.pid, within=30)  # nothing of the job survived, JVM included
    killed_at = support.marker(target, APP)
    assert killed_at is not None
    assert 2 <= killed_at < FILES - 1, "the kill must land in the middle of the stream"
    run1 = events(out)
    assert run1[0]["event"] == "started"
    assert not any(e["event"] == "done" for e in run1)
    assert support.ids(target) == sorted(expected_ids[: (killed_at + 1) * ROWS_PER_FILE])

    # Run 2: the same job and checkpoint, to the end of the input.
    second = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert second.returncode == 0, second.stderr[-3000:]
    run2 = events(second.stdout)
    started = run2[0]
    assert started["session"] == "pyspark.sql.session"  # classic, not connect
    assert started["auto"] == [
        "spark",
        "auto: a Spark session with delta-spark's DeltaSparkSessionExtension",
    ]
    assert (started["engine"], started["engine_reason"]) == (engine, f"engine='{engine}' was given")
    replayed = [e["batch"] for e in run2 if e["event"] == "batch"]
    assert replayed[0] <= killed_at + 1  # Spark re-runs the batch it had not recorded
    assert replayed == list(range(replayed[0], FILES))
    assert all(e["frame"] == "pyspark.sql.classic.dataframe" for e in run2 if e["event"] == "batch")
    assert run2[-1] == {"event": "done", "committed": FILES - 1, "pending": []}

    # No loss, no duplicate: every row once, every version committed in one commit.
    assert support.ids(target) == sorted(expected_ids)
    assert support.rows(target)[:3] == [
        {"id": 0, "value": "b0"},
        {"id": 1, "value": "b0"},
        {"id": 2, "value": "b0"},
    ]
    assert support.marker(target, APP) == FILES - 1
    assert {v: len(c) for v, c in support.txn_commits(target, APP).items()} == dict.fromkeys(
        range(FILES), 1
    )
    sink = DeltaSink(target, APP, MergeSpec(mode="append"))
    assert sink.status().pending_versions == []
    assert support.staged_versions(sink.staging) == []

    # deltasink.backends.spark.conf on a classic session (checked by the job, reported here).
    assert started["conf"] == {
        "before": None,
        "inside": "inside",
        "after": None,
        "txn_inside": ["app", "5", "deltasink commit app=app version=5"],
        "txn_after": ["someone-else", None, None],
        "registered_inside": "3",
        "registered_after": "1",
        "static_error": "AnalysisException",
        "after_static_error": None,
    }
