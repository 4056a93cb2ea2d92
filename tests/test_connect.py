"""The spark engine through a real Spark Connect server (Delta 4.4 on PySpark 4.2's own
server, started on 127.0.0.1 by :mod:`tests.connect_server`): what Databricks
serverless and standard access mode run, minus Unity Catalog.

The client side is a Spark Connect session in this process. It coexists with the
embedded engine's session (Sail, another Connect server): ``builder.remote(url).create()``
replaces neither the default nor the active session, and every sink here is given its
session explicitly. What needs ``SparkSession.builder.getOrCreate()`` to be the
server's session (the CLI ``--spark``) runs in a child process with ``SPARK_REMOTE``.

``make test-connect`` runs this module; it skips, with the reason, without Java or the
Delta jars.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deltasink import ConfigurationError, DeltaSink, MergeSpec, foreach_batch_writer
from deltasink.backends.spark import SparkBackend
from deltasink.backends.spark.conf import (
    ENGINE_CONFS,
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    require_settable,
    session_conf,
)
from deltasink.backends.spark.errors import error_types, is_missing
from tests import support
from tests.connect_server import ROOT, ConnectServer, unavailable
from tests.contract import Harness, SinkContract, spark_harness

# The classic suite's engine tests, run here on the Connect session: a test function
# imported into this module uses this module's ``delta_spark`` fixture below.
from tests.test_contract_spark import (
    test_a_newer_writer_fences_the_older_one,
    test_abort_then_restage_an_empty_version,
    test_an_empty_batch_is_one_commit_without_files,
    test_auto_selects_spark_for_a_delta_session,
    test_gc_and_optimize,
    test_schema_evolution_and_batches_that_omit_columns,
    test_staging_and_target_commits_carry_txn_and_user_metadata,
    test_switching_engines_both_ways,
    test_the_zero_row_arrow_form_without_a_job_equals_to_arrow_s,
    test_txn_confs_are_restored_after_each_commit,
    test_write_audit_publish,
)

__all__ = [
    "test_a_newer_writer_fences_the_older_one",
    "test_abort_then_restage_an_empty_version",
    "test_an_empty_batch_is_one_commit_without_files",
    "test_auto_selects_spark_for_a_delta_session",
    "test_gc_and_optimize",
    "test_schema_evolution_and_batches_that_omit_columns",
    "test_staging_and_target_commits_carry_txn_and_user_metadata",
    "test_switching_engines_both_ways",
    "test_the_zero_row_arrow_form_without_a_job_equals_to_arrow_s",
    "test_txn_confs_are_restored_after_each_commit",
    "test_write_audit_publish",
]

REASON = unavailable()
pytestmark = [
    pytest.mark.jvm,
    pytest.mark.connect,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    # gRPC calls can be interrupted safely (unlike py4j), but a cold server on a busy
    # machine makes the first test slow.
    pytest.mark.timeout(600),
]
UPSERT = MergeSpec(keys=["id"])


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = ConnectServer(tmp_path_factory.mktemp("connect-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def connect_spark(connect_server: ConnectServer) -> Iterator[Any]:
    """A Spark Connect session on the server (stopped before the server is)."""
    session = connect_server.session()
    assert type(session).__module__ == "pyspark.sql.connect.session"
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def delta_spark(connect_spark: Any) -> Any:
    """The classic suite's fixture name, for its tests imported above."""
    return connect_spark


class TestSparkEngineOverConnect(SinkContract):
    """The SPEC contract on the spark engine through Spark Connect, the logs read by
    Spark (``DESCRIBE HISTORY``, a ``GROUP BY`` over the staging table), as for catalog
    tables and serverless; coalesced."""

    @pytest.fixture
    def harness(self, target: str, connect_spark: Any, monkeypatch: pytest.MonkeyPatch) -> Harness:
        monkeypatch.setattr(SparkBackend, "default_log_reader", "spark")
        return spark_harness(connect_spark, target, "contract-connect")

    # The staging table holds one Delta schema: a changed type is refused at the staging
    # write (DELTA_FAILED_TO_MERGE_FIELDS), so no version can get stuck with one (as on
    # classic sessions, test_contract_spark.py).
    test_a_stuck_changed_type_read_back_aborted_and_sent_again_loses_nothing = None


# -- what Spark Connect does differently --------------------------------------------------


def test_the_session_is_a_connect_session_beside_the_embedded_one(
    connect_spark: Any, spark: Any
) -> None:
    """Two Connect sessions to two servers in one process: the embedded engine's (Sail)
    and the Delta server's; each keeps its own endpoint and confs."""
    assert connect_spark.client._builder.endpoint != spark.client._builder.endpoint
    with session_conf(connect_spark, {TXN_APP_ID: "only-there"}):
        assert connect_spark.conf.get(TXN_APP_ID, None) == "only-there"
        assert spark.conf.get(TXN_APP_ID, None) is None
    assert connect_spark.conf.get(TXN_APP_ID, None) is None
    assert spark.range(3).count() == 3
    assert connect_spark.range(4).count() == 4


def test_confs_round_trip_and_are_restored(connect_spark: Any) -> None:
    """``spark.conf`` on Connect is a round trip per call: set, read back, unset."""
    keys = (TXN_APP_ID, TXN_VERSION, USER_METADATA)
    assert [connect_spark.conf.get(k, None) for k in keys] == [None, None, None]
    connect_spark.conf.set(TXN_VERSION, "7")
    try:
        with session_conf(connect_spark, {TXN_APP_ID: "a", TXN_VERSION: 1, USER_METADATA: "m"}):
            assert [connect_spark.conf.get(k, None) for k in keys] == ["a", "1", "m"]
        assert [connect_spark.conf.get(k, None) for k in keys] == [None, "7", None]
    finally:
        connect_spark.conf.unset(TXN_VERSION)
    assert connect_spark.conf.get(TXN_VERSION, None) is None


def test_connect_errors_carry_conditions_but_no_jvm_object(connect_spark: Any) -> None:
    """A Connect exception has the error condition and the JVM class name as text (no
    ``java_exception``): the classifier reads the condition."""
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="DELTA_TABLE_ONLY_OPERATION") as caught:
        connect_spark.sql("DESCRIBE HISTORY delta.`/nonexistent/deltasink-connect`").collect()
    exc = caught.value
    assert type(exc).__module__ == "pyspark.errors.exceptions.connect"
    assert getattr(exc, "java_exception", None) is None
    assert next(iter(error_types(exc))) == "DELTA_TABLE_ONLY_OPERATION"
    assert is_missing(exc)


def test_a_conf_the_server_refuses_is_refused_by_name(connect_spark: Any, target: str) -> None:
    """Before its first statement the engine sets and restores each conf it needs on a
    Connect session (Databricks serverless refuses most confs: CONFIG_NOT_AVAILABLE).
    A conf this server refuses (a static one) shows the refusal; the engine's own pass."""
    require_settable(connect_spark)  # the txn confs: settable here
    assert [connect_spark.conf.get(k, None) for k in ENGINE_CONFS] == [None, None, None]
    key = "spark.sql.warehouse.dir"
    before = connect_spark.conf.get(key)
    with pytest.raises(
        ConfigurationError, match=rf"cannot set the Spark conf {key} .*\(CANNOT_MODIFY_"
    ):
        require_settable(connect_spark, (key,), table=target, app_id="app")
    assert connect_spark.conf.get(key) == before


def test_a_micro_batch_without_checkpoint_has_no_identity_on_connect(
    connect_spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No SparkContext on Connect, so no ``sql.streaming.queryId``: without
    ``checkpoint=`` no origin, and a warning that names the fix."""
    from deltasink.stream import checkpoint as origin

    frame = connect_spark.range(1)
    monkey_warned = set(origin._warned)
    origin._warned.clear()
    try:
        with caplog.at_level("WARNING", logger="deltasink"):
            assert origin.stream_origin(frame, 0) is None
    finally:
        origin._warned.clear()
        origin._warned.update(monkey_warned)
    assert "foreach_batch_writer(..., checkpoint=" in caplog.text


def test_a_writer_that_cannot_identify_its_query_is_refused_on_connect(
    connect_spark: Any, tmp_path: Path
) -> None:
    """Without ``checkpoint=`` nothing on Connect tells a reset checkpoint from a replay:
    refused when built on a Connect driver, and at the first micro-batch of a writer
    built elsewhere, nothing written; ``identify_query=False`` opts out by name."""
    from pyspark.sql import SparkSession

    from deltasink import ForeachBatchWriter

    target = tmp_path / "orders"
    if SparkSession.getActiveSession() is not connect_spark:
        pytest.skip("the active session is another one here (run the module alone)")
    with pytest.raises(ConfigurationError, match=r"checkpoint=.*identify_query=False"):
        foreach_batch_writer(target, "orders-stream", UPSERT, engine="spark")
    opted_out = foreach_batch_writer(
        target, "orders-stream", UPSERT, engine="spark", identify_query=False
    )
    assert opted_out.identify_query is False
    shipped = ForeachBatchWriter(str(target), "orders-stream", UPSERT, {"engine": "spark"})
    with pytest.raises(ConfigurationError, match="checkpoint="):
        shipped(connect_spark.range(1), 0)
    assert not support.exists(str(target))


def test_the_readme_streaming_example_runs_as_written_on_connect(
    connect_spark: Any, tmp_path: Path
) -> None:
    """The README's streaming block (``<!-- snippet: stream -->``), unchanged, on a Spark
    Connect session: the function runs in the server's Python worker; the driver's
    sink and the worker's are two processes' sinks of one writer."""
    from tests.test_docs import places_in, streaming_example

    _, stream = streaming_example()
    places = places_in(tmp_path)
    exec(
        compile(stream.moved(places), stream.where, "exec"),
        {"__name__": "readme", "spark": connect_spark},
    )
    target = places["/tmp/deltasink-stream"] + "/silver/orders"
    assert support.rows(target, sort_by="order_id") == [
        {"order_id": 1, "status": "created"},
        {"order_id": 2, "status": "created"},
    ]
    assert list(support.txn_commits(target, "orders-stream")) == [0]


def test_no_spark_context_on_connect(connect_spark: Any) -> None:
    from pyspark.errors import PySparkAttributeError

    with pytest.raises(PySparkAttributeError) as caught:
        _ = connect_spark.sparkContext
    assert caught.value.getCondition() == "JVM_ATTRIBUTE_NOT_SUPPORTED"


# -- foreachBatch on a Connect session: the function runs in a server-side worker ---------


def _write_json(folder: Path, name: str, ids: list[int], value: str = "v") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i, "value": f"{value}{i}"}) + "\n" for i in ids))
    tmp.rename(folder / name)  # the file source must not see a half-written file


def _run_stream(session: Any, source: Path, checkpoint: Path, write: Any) -> Any:
    query = (
        session.readStream.schema("id LONG, value STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout=300)
    assert query.exception() is None, query.exception()
    return query


def test_foreach_batch_writer_on_connect_is_exactly_once_across_restarts(
    connect_spark: Any, tmp_path: Path
) -> None:
    """``foreach_batch_writer`` in a Connect ``foreachBatch``: the server pickles the
    function and runs it in a Python worker of its own (which imports deltasink from the
    server's PYTHONPATH). Each file is one micro-batch, one target commit; a restart
    from the checkpoint continues; a batch replayed after its commit (the checkpoint's
    commit file lost, as in a crash between the two) changes nothing."""
    target, source, checkpoint = tmp_path / "orders", tmp_path / "in", tmp_path / "checkpoint"
    write = foreach_batch_writer(
        target, "orders-stream", UPSERT, engine="spark", checkpoint=checkpoint
    )
    _write_json(source, "a.json", [1, 2])
    _write_json(source, "b.json", [2, 3], value="w")
    _run_stream(connect_spark, source, checkpoint, write)
    assert support.rows(target) == [
        {"id": 1, "value": "v1"},
        {"id": 2, "value": "w2"},
        {"id": 3, "value": "w3"},
    ]
    assert support.txn_commits(str(target), "orders-stream") == {0: [0], 1: [1]}

    # a restart from the checkpoint: only the new file, as batch 2
    _write_json(source, "c.json", [4])
    _run_stream(connect_spark, source, checkpoint, write)
    assert support.txn_commits(str(target), "orders-stream") == {0: [0], 1: [1], 2: [2]}

    # a crash after the sink's commit of batch 2, before Spark's: the batch runs again
    for lost in ("2", ".2.crc"):  # the commit file and Hadoop's checksum beside it
        (checkpoint / "commits" / lost).unlink(missing_ok=True)
    before = support.table_version(str(target))
    _run_stream(connect_spark, source, checkpoint, write)
    assert support.table_version(str(target)) == before  # the replay wrote nothing
    assert support.marker(str(target), "orders-stream") == 2
    assert support.ids(str(target)) == [1, 2, 3, 4]
    # the origin names the checkpoint's query (read from checkpoint=, no SparkContext)
    query_id = json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    assert f'"query":"{query_id}"' in support.commit_info(str(target), 2)["userMetadata"]
    staging = DeltaSink(target, "orders-stream", engine="spark", spark=connect_spark).staging
    assert support.staged_versions(staging) == []


def test_a_bound_foreach_batch_is_refused_by_name_on_connect(
    connect_spark: Any, tmp_path: Path
) -> None:
    """Connect pickles the ``foreachBatch`` function when the query is defined: a bound
    ``sink.foreach_batch`` would ship the sink (its session, its open tables) to the
    server's worker; the sink refuses to be pickled and says what to use instead."""
    from pyspark.errors import PySparkPicklingError

    s = DeltaSink(tmp_path / "t", "app", UPSERT, engine="spark", spark=connect_spark)
    stream = connect_spark.readStream.schema("id LONG").json(str(tmp_path)).writeStream
    with pytest.raises(PySparkPicklingError, match="STREAMING_CONNECT_SERIALIZATION_ERROR") as e:
        stream.foreachBatch(s.foreach_batch)
    cause = e.value.__context__
    assert cause is not None
    assert "cannot be pickled" in str(cause)
    assert "foreach_batch_writer" in str(cause)
    assert not support.exists(str(tmp_path / "t"))


# -- the CLI with SPARK_REMOTE --------------------------------------------------------------


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONNECT_MODE_ENABLED",)}
    env["SPARK_REMOTE"] = url
    paths = [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(
        [sys.executable, "-c", "from deltasink.cli import main; main()", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_cli_with_spark_against_a_connect_server(
    connect_server: ConnectServer, connect_spark: Any, target: str
) -> None:
    """``SPARK_REMOTE=sc://... deltasink --spark ...``: ``getOrCreate()`` is then a
    Connect session to the server, which reads the logs and recovers."""
    s = DeltaSink(target, "orders", UPSERT, engine="spark", spark=connect_spark)
    s.write(connect_spark.createDataFrame([(1, "a")], "id long, value string"), 0)
    s.pre_commit(connect_spark.createDataFrame([(2, "b")], "id long, value string"), 1)

    shown = _cli(connect_server.url, "--spark", "status", target, "--app", "orders", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    status = json.loads(shown.stdout)
    assert (status["engine"], status["committed_version"], status["pending_versions"]) == (
        "spark",
        0,
        [1],
    )
    recovered = _cli(connect_server.url, "--spark", "recover", target, "--app", "orders", "--json")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert json.loads(recovered.stdout)["committed_versions"] == [1]
    assert support.ids(target) == [1, 2]
    assert support.marker(target, "orders") == 1
    history = _cli(connect_server.url, "--spark", "history", target, "--app", "orders")
    assert history.returncode == 0, history.stdout + history.stderr
