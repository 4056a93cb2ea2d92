"""``foreach_batch_writer``: a ``foreachBatch`` function that survives pickling into
another process (Spark Connect, serverless) and builds its sink there, lazily."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.errors import PySparkPicklingError

from deltasink import (
    ConfigurationError,
    DeltaSink,
    ForeachBatchWriter,
    MergeSpec,
    checks,
    foreach_batch_writer,
    streaming,
)
from tests import support

UPSERT = MergeSpec(keys=["id"])


def batch(rows: list[tuple[int, str | None]]) -> pa.Table:
    """A micro-batch as a worker process would get it (the embedded session has no
    foreachBatch, so no Spark session here: its batches are Arrow)."""
    return pa.table({"id": [r[0] for r in rows], "value": [r[1] for r in rows]})


@pytest.fixture
def classic_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build writers as on a driver whose session is not the embedded one (this test
    process hosts it, and foreach_batch_writer refuses to be built there)."""
    monkeypatch.setattr(streaming, "active_session", lambda: None)


@pytest.mark.usefixtures("classic_driver")
def test_the_writer_pickles_and_builds_one_sink_per_process(target: str) -> None:
    writer = foreach_batch_writer(target, "stream", UPSERT, checks=[checks.no_nulls("value")])
    shipped: ForeachBatchWriter = cloudpickle.loads(cloudpickle.dumps(writer))
    assert shipped == writer
    first = shipped(batch([(1, "a"), (2, "b")]), 0)
    assert first.committed_versions == [0]
    assert shipped(batch([(2, "B"), (3, "c")]), 1).committed_versions == [1]
    replay = shipped(batch([(2, "B"), (3, "c")]), 1)  # Spark's replay: a no-op
    assert (replay.results, replay.committed_version) == ((), 1)
    assert shipped.sink() is writer.sink()  # one sink (one writer epoch) per process
    assert shipped.sink().engine == "embedded"
    assert support.rows(target) == [
        {"id": 1, "value": "a"},
        {"id": 2, "value": "B"},
        {"id": 3, "value": "c"},
    ]
    assert support.marker(target, "stream") == 1
    bad = shipped(batch([(4, None)]), 2)  # the checks travelled with it
    assert bad.quarantined_versions == [2]


@pytest.mark.usefixtures("classic_driver")
def test_the_writer_runs_in_another_process(tmp_path: Path, target: str) -> None:
    writer = foreach_batch_writer(target, "remote", UPSERT)
    DeltaSink(target, "remote", UPSERT).write(pa.table({"id": [1], "value": ["a"]}), 0)
    payload = tmp_path / "writer.pkl"
    payload.write_bytes(cloudpickle.dumps(writer))
    script = (
        "import sys, pyarrow as pa\n"
        "from pyspark import cloudpickle\n"
        "write = cloudpickle.loads(open(sys.argv[1], 'rb').read())\n"
        "for v in (1, 2, 2):\n"
        "    r = write(pa.table({'id': [v + 1], 'value': [f'v{v}']}), v)\n"
        "    print(v, r.committed_versions)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(payload)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1 [1]", "2 [2]", "2 []"]
    assert support.ids(target) == [1, 2, 3]
    assert support.marker(target, "remote") == 2


@pytest.mark.usefixtures("classic_driver")
def test_bad_arguments_fail_on_the_driver_before_the_query_starts(spark: Any, target: str) -> None:
    with pytest.raises(ConfigurationError, match="takes no spark="):
        foreach_batch_writer(target, "stream", UPSERT, spark=spark)
    with pytest.raises(ConfigurationError, match="app_id"):
        foreach_batch_writer(target, "bad app id", UPSERT)
    with pytest.raises(TypeError, match="no_such_option"):
        foreach_batch_writer(target, "stream", UPSERT, no_such_option=1)
    assert not Path(target).exists()


def test_the_embedded_session_has_no_foreach_batch_and_says_which_session_to_use(
    spark: Any, tmp_path: Path, target: str
) -> None:
    """Sail runs no foreachBatch: every way into one is a ConfigurationError naming the
    sessions that do, before anything is written."""
    assert streaming.active_session() is spark
    with pytest.raises(ConfigurationError, match=r"has no foreachBatch.*classic Spark session"):
        foreach_batch_writer(target, "stream", UPSERT, checkpoint=tmp_path / "ck")
    writer = ForeachBatchWriter(target, "stream", UPSERT)  # built elsewhere, shipped here
    with pytest.raises(ConfigurationError, match="embedded session"):
        writer.sink(spark).recover()
    with pytest.raises(ConfigurationError, match="embedded session"):
        writer(spark.createDataFrame([(1, "a")], "id long, value string"), 0)
    sink = DeltaSink(target, "stream", UPSERT)
    stream = spark.readStream.schema("id LONG").json(str(tmp_path)).writeStream
    with pytest.raises(PySparkPicklingError) as caught:
        stream.foreachBatch(sink.foreach_batch)  # Connect pickles the function here
    causes = []
    cause: BaseException | None = caught.value
    while cause is not None:
        causes.append(cause)
        cause = cause.__context__
    assert any(isinstance(c, ConfigurationError) for c in causes), causes
    assert "the embedded session (embedded_spark(), Sail) has no foreachBatch" in str(causes[-1])
    assert not Path(target).exists()
    assert not Path(sink.staging).exists()


class _ConnectSession:
    """Stands for a Spark Connect session of a real Spark server (serverless, standard
    access mode): test_connect.py runs the same rule on one (make test-connect)."""


_ConnectSession.__module__ = "pyspark.sql.connect.session"


def test_on_spark_connect_a_writer_without_checkpoint_is_refused_unless_opted_out(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "active_session", _ConnectSession)
    with pytest.raises(ConfigurationError, match=r"checkpoint=.*identify_query=False"):
        foreach_batch_writer(target, "stream", UPSERT)
    assert foreach_batch_writer(target, "stream", UPSERT, checkpoint=tmp_path / "ck")
    opted_out = foreach_batch_writer(target, "stream", UPSERT, identify_query=False)
    assert opted_out.identify_query is False
    with pytest.raises(ConfigurationError, match="identify_query=False"):
        foreach_batch_writer(target, "stream", UPSERT, resume=True, identify_query=False)
    # built where no session told (a driver without one): refused at the first batch
    monkeypatch.setattr(streaming, "active_session", lambda: None)
    unknown = foreach_batch_writer(target, "stream", UPSERT)
    micro_batch = type("Frame", (), {"sparkSession": _ConnectSession()})()
    with pytest.raises(ConfigurationError, match="checkpoint="):
        unknown(micro_batch, 0)
    assert not Path(target).exists()
