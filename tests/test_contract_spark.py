"""The SPEC contract, and the Spark backend's own guarantees, on a Delta-enabled classic
session (delta-spark's JVM jars): Delta itself honours ``txnAppId``/``txnVersion``.

These tests need the jars and skip quickly without them (nothing is downloaded unless
asked). To run them where Maven is reachable::

    pip install -e '.[spark,dev]'
    DELTASINK_DELTA_SPARK=maven python -m pytest tests/test_contract_spark.py

(``configure_spark_with_delta_pip`` fetches ``io.delta:delta-spark_2.13`` once into
``~/.ivy2``), or point ``DELTASINK_DELTA_JARS`` at the jar files (``os.pathsep``
separated). A classic session cannot share a process with the embedded engine's Spark
Connect session, so inside the full suite (where that session exists) the module is run
again in a process of its own by :func:`test_delta_spark_suite_in_its_own_process`.

Under PySpark 3.5 (``make test-spark35``, Databricks 14.3-15.4 LTS) the same module runs
on Delta 3.3.3's Scala 2.12 jars (``../shared/delta-spark-3.5/``, see :func:`delta_jars`).
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import (
    CheckpointResetError,
    CommitError,
    DeltaSink,
    FencedError,
    MergeSpec,
    TableDefinitionError,
    TableSpec,
    UnsupportedTableFeatureError,
    checks,
)
from deltasink._faults import POINTS, FaultInjected, armed
from deltasink.backends.spark import SparkBackend
from deltasink.backends.spark.conf import TXN_APP_ID, TXN_VERSION, USER_METADATA
from deltasink.input.arrow import spark_arrow, spark_empty
from tests import support
from tests.contract import Harness, SinkContract, spark_harness

ROOT = Path(__file__).resolve().parent.parent
CHILD = "DELTASINK_SPARK_CONTRACT_CHILD"
#: Set by conftest.py when this run hosts the embedded engine and so deselected the
#: module's tests: they then run in a child process.
RUN_IN_CHILD = False
UPSERT = MergeSpec(keys=["id"])
APPEND = MergeSpec(mode="append")
#: The modules the child process runs: this one and those that use its session
#: (``delta_spark``), so the whole run starts one JVM for them.
CHILD_MODULES = (
    "tests/test_contract_spark.py",
    "tests/test_stream_reset_jvm.py",
    "tests/test_docs_jvm.py",
    "tests/test_telemetry_jvm.py",
    "tests/test_predicate_differential.py",
    "tests/test_any_writer.py",
    "tests/test_migrating.py",
    "tests/test_table_constraints.py",
    "tests/test_compaction_spark.py",
    "tests/test_computed_columns.py",
    "tests/test_timestamps_jvm.py",
    "tests/test_predicates_jvm.py",
    "tests/test_table_zoo.py",
)
#: Tests ``make test`` leaves to ``make test-delta-spark`` (see pyproject.toml's addopts):
#: ``make test`` keeps a slice of each kind (docs/reliability.md, "The test suite's time").
FULL = pytest.mark.delta_spark_full


def sliced(values: list[Any], keep: tuple[Any, ...]) -> list[Any]:
    """``values`` as parameters, those not in ``keep`` marked :data:`FULL` (their ids
    unchanged)."""
    return [
        v if v in keep else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=FULL)
        for v in values
    ]


def pyspark_35() -> bool:
    """Whether this interpreter's PySpark is 3.5 (``make test-spark35``): Delta 3.x, whose
    jars are built for Scala 2.12, where PySpark 4 takes Delta 4.x for Scala 2.13."""
    try:
        import pyspark
    except ImportError:
        return False
    return pyspark.__version__.startswith("3.5.")


def delta_jar_names() -> tuple[str, str]:
    """``(folder beside the repository, jar name prefix)`` for this PySpark: Delta 3.3.3
    for Scala 2.12 under PySpark 3.5, Delta 4.4 for Scala 2.13 under PySpark 4."""
    if pyspark_35():
        return "delta-spark-3.5", "delta-spark_2.12-"
    return "delta-spark", "delta-spark_2.13-"


def delta_jars() -> list[str]:
    """delta-spark's jars: ``DELTASINK_DELTA_JARS``, else ``../shared/delta-spark/``
    beside the repository (``../shared/delta-spark-3.5/`` under PySpark 3.5), else where
    a previous download or an admin left them."""
    listed = os.environ.get("DELTASINK_DELTA_JARS")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    folder, prefix = delta_jar_names()
    shared = sorted(glob.glob(str(ROOT.parent / "shared" / folder / "*.jar")))
    if any(os.path.basename(p).startswith(prefix) for p in shared):
        return shared  # built from Delta's source beside the repo (CI and this machine)
    import pyspark

    roots = [
        *glob.glob(os.path.expanduser("~/.ivy2*/jars")),
        os.path.join(os.environ.get("SPARK_HOME", "/nonexistent"), "jars"),
        os.path.join(os.path.dirname(pyspark.__file__), "jars"),
    ]
    found = []
    for root in roots:
        found += glob.glob(os.path.join(root, f"*{prefix}*.jar"))
        found += glob.glob(os.path.join(root, "*delta-storage-*.jar"))
    spark_ok = any("delta-spark" in os.path.basename(p) for p in found)
    return sorted(found) if spark_ok else []


def unavailable() -> str | None:
    """Why a Delta-enabled session cannot start here, or ``None``."""
    if shutil.which("java") is None:
        return "needs Java 17 for a classic Spark session"
    if delta_jars():
        return None
    if os.environ.get("DELTASINK_DELTA_SPARK") == "maven":
        try:
            import delta  # noqa: F401
        except ImportError:
            return "DELTASINK_DELTA_SPARK=maven needs the delta-spark package: pip install -e '.[spark]'"
        return None
    return (
        "no delta-spark JVM jars here and Maven is unreachable; where it is reachable: "
        "pip install -e '.[spark,dev]' && DELTASINK_DELTA_SPARK=maven python -m pytest "
        "tests/test_contract_spark.py (or set DELTASINK_DELTA_JARS to the jar files)"
    )


REASON = unavailable()
#: The marks of a module of the delta-spark suite (``pytestmark = DELTA_SPARK_MODULE``,
#: plus its own): no per-test timeout, which would break the shared session's py4j call
#: in flight (the suite's run as a whole is bounded).
DELTA_SPARK_MODULE = [
    pytest.mark.jvm,
    pytest.mark.delta_spark,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    pytest.mark.timeout(0),
]
#: No per-test timeout here: pytest-timeout interrupts the py4j call in flight and leaves
#: its answer unread, which breaks the shared session for every later test. The run as a
#: whole is bounded instead (test_delta_spark_suite_in_its_own_process).
pytestmark = list(DELTA_SPARK_MODULE)
if pyspark_35():  # py4j 0.10.9.7 leaves gateway sockets to the GC: its warning, not ours
    pytestmark += [
        pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
        pytest.mark.filterwarnings(
            "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
        ),
    ]


def connect_mode() -> bool:
    """Whether this process already hosts a Spark Connect session (classic is then out)."""
    return "SPARK_CONNECT_MODE_ENABLED" in os.environ or "SPARK_REMOTE" in os.environ


#: The module's run in its own process, started by :func:`start_child`.
_child: tuple[subprocess.Popen[str], Path] | None = None
#: The child run's bound (the whole module, about 6 minutes alone, 7-8 beside the suite).
CHILD_TIMEOUT_S = 1500


def start_child(markexpr: str | None = None) -> None:
    """Start the module's tests in a process of their own, now: conftest.py calls this
    at collection, so the JVM suite runs beside the rest of the suite (the runner test,
    moved to the end, collects its results). ``markexpr`` is the parent run's ``-m``
    (``make test-generated`` selects ``generated``), so the child runs the same
    selection. Idempotent."""
    global _child
    if _child is not None:
        return
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    }
    env[CHILD] = "1"
    fd, name = tempfile.mkstemp(prefix="deltasink-delta-spark-suite-", suffix=".log")
    with os.fdopen(fd, "w") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-rA",
                "-p",
                "no:cacheprovider",
                *(["-m", markexpr] if markexpr else []),
                *CHILD_MODULES,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    _child = (process, Path(name))
    atexit.register(_stop_child)


def _stop_child() -> None:
    if _child is not None and _child[0].poll() is None:
        os.killpg(_child[0].pid, signal.SIGKILL)


@pytest.mark.timeout(CHILD_TIMEOUT_S + 60)
def test_delta_spark_suite_in_its_own_process(capsys: pytest.CaptureFixture[str]) -> None:
    """The module in a process of its own; its per-test results are echoed to this
    run's output (here the module's other tests are deselected, see conftest.py)."""
    if os.environ.get(CHILD) or not (connect_mode() or RUN_IN_CHILD):
        pytest.skip("this process can host the classic session: the tests run here directly")
    start_child()
    assert _child is not None
    process, log = _child
    try:
        returncode = process.wait(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_child()
        raise
    output = log.read_text()
    log.unlink()
    results = [
        line
        for line in output.splitlines()
        if line.startswith(("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"))
        or re.match(r"^=* ?\d+ (passed|failed|error)", line)
    ]
    with capsys.disabled():
        print("\n[delta-spark suite, own process]\n" + "\n".join(results), flush=True)
    assert returncode == 0, output[-9000:]
    assert not any(line.startswith("SKIPPED") for line in results), "nothing may skip here"


@pytest.fixture(scope="session")
def delta_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A classic local session with Delta's extension and catalog."""
    if connect_mode():
        pytest.skip("runs in its own process: see test_delta_spark_suite_in_its_own_process")
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("warehouse")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("deltasink-delta-contract")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.sql.warehouse.dir", str(warehouse))
        # Small tables, 2 cores: Delta's state reconstruction defaults to 50 partitions
        # (a 50-task job per snapshot), shuffles to 200; neither pays here.
        .config("spark.default.parallelism", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # VACUUM lists files in a job of this many tasks (default 10,000: minutes here).
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in support.CHEAP_SPARK_CONF.items():  # no generated code, no AQE
        builder = builder.config(key, value)
    jars = delta_jars()
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    else:
        from delta import configure_spark_with_delta_pip

        builder = configure_spark_with_delta_pip(builder)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _full(name: str) -> Any:
    """``SinkContract``'s test ``name`` for one class, marked :data:`FULL` there only
    (the contract's own function stays unmarked for the other classes)."""
    inherited = getattr(SinkContract, name)

    def test(self: Any, harness: Harness) -> None:
        inherited(self, harness)

    test.__name__, test.__doc__ = name, inherited.__doc__
    return FULL(test)


class TestSparkBackendDeltaRsLogs(SinkContract):
    """Spark makes the commits; delta-rs reads the logs (local paths). Coalesced. The
    column-selection and mode tests below also run here in ``make test-delta-spark``
    (``make test``'s time: docs/reliability.md)."""

    test_update_columns_update_only_those_columns_one_commit_per_version = _full(
        "test_update_columns_update_only_those_columns_one_commit_per_version"
    )
    test_except_columns_leave_those_columns_alone = _full(
        "test_except_columns_leave_those_columns_alone"
    )
    test_delete_rows_absent_from_each_version = _full("test_delete_rows_absent_from_each_version")
    test_replace_by_reloads_each_slice_exactly_once = _full(
        "test_replace_by_reloads_each_slice_exactly_once"
    )
    test_null_safe_keys_match_null_with_null = _full("test_null_safe_keys_match_null_with_null")
    test_scd2_keeps_history_exactly_once_late_rows_and_deletes_included = _full(
        "test_scd2_keeps_history_exactly_once_late_rows_and_deletes_included"
    )

    @pytest.fixture
    def harness(self, target: str, delta_spark: Any) -> Harness:
        return spark_harness(delta_spark, target, "contract-spark")

    # The staging table holds one Delta schema: a changed type is refused at the staging
    # write (DELTA_FAILED_TO_MERGE_FIELDS), so no version can get stuck with one.
    test_a_stuck_changed_type_read_back_aborted_and_sent_again_loses_nothing = None


@FULL  # the contract again, with Spark reading the logs: `make test-delta-spark`
class TestSparkBackendSparkLogs(SinkContract):
    """Spark makes the commits and reads the logs (DESCRIBE HISTORY, staging GROUP BY),
    as for catalog tables or remote paths; one target commit per version."""

    @pytest.fixture
    def harness(self, target: str, delta_spark: Any, monkeypatch: pytest.MonkeyPatch) -> Harness:
        monkeypatch.setattr(SparkBackend, "default_log_reader", "spark")
        return spark_harness(delta_spark, target, "contract-spark-logs", coalesce=False)

    # The merge shapes publish through the same MERGE/replaceWhere whichever engine
    # reads the logs, and are never coalesced: the class above covers them on this
    # engine; left out here to keep the delta-spark suite's time in check.
    test_update_columns_update_only_those_columns_one_commit_per_version = None
    test_except_columns_leave_those_columns_alone = None
    test_update_columns_missing_from_the_batch_is_refused_before_writing = None
    test_delete_rows_absent_from_each_version = None
    test_replace_by_reloads_each_slice_exactly_once = None
    test_replace_where_replaces_the_rows_it_selects = None
    test_null_safe_keys_match_null_with_null = None
    test_scd2_keeps_history_exactly_once_late_rows_and_deletes_included = None
    test_target_predicate_prunes_and_refuses_rows_outside_it = None
    test_scd2_refuses_a_target_without_history_columns_before_writing = None
    test_user_predicates_reach_the_engine_parsed_and_reemitted = None
    test_injected_predicates_are_refused_before_anything_is_written = None
    test_a_broken_check_is_a_configuration_error_not_a_quarantine = None
    test_a_stuck_changed_type_read_back_aborted_and_sent_again_loses_nothing = None


# -- the Spark backend's own guarantees -----------------------------------------------------


def df(session: Any, *ids: int, value: str = "v") -> Any:
    return session.createDataFrame([(i, f"{value}{i}") for i in ids], "id long, value string")


def sink(target: str, session: Any, merge: MergeSpec = UPSERT, **kwargs: Any) -> DeltaSink:
    return DeltaSink(target, "app", merge, engine="spark", spark=session, **kwargs)


def actions(uri: str, kind: str) -> dict[int, list[dict[str, Any]]]:
    """Delta version -> its ``kind`` actions (``txn``, ``add``, ``commitInfo``)."""
    return {v: [a[kind] for a in acts if kind in a] for v, acts in support.log_commits(uri).items()}


def staging_commits(staging: str, app: str = "app") -> list[tuple[int, str]]:
    """``(txn version, userMetadata)`` of the staging commits tagged with ``app``."""
    found = []
    for _, acts in sorted(support.log_commits(staging).items()):
        txns = [a["txn"] for a in acts if "txn" in a and a["txn"]["appId"] == app]
        info = next(a["commitInfo"] for a in acts if "commitInfo" in a)
        found += [(int(t["version"]), str(info.get("userMetadata"))) for t in txns]
    return found


def test_auto_selects_spark_for_a_delta_session(delta_spark: Any, target: str) -> None:
    auto = DeltaSink(target, "app", UPSERT, spark=delta_spark)
    assert (auto.engine, auto.engine_reason) == (
        "spark",
        "auto: a Spark session with delta-spark's DeltaSparkSessionExtension",
    )
    assert auto.status().engine == "spark"


def test_staging_and_target_commits_carry_txn_and_user_metadata(
    delta_spark: Any, target: str
) -> None:
    s = sink(target, delta_spark)
    s.pre_commit(df(delta_spark, 1, 2), 0)
    s.commit(0)
    s.write(df(delta_spark, 2, 3, value="w"), 1)  # direct publish: nothing staged
    assert staging_commits(s.staging) == [
        (0, 'deltasink stage app=app version=0 columns=["id", "value"]'),
    ]
    assert staging_commits(s.staging, "app#committed") == [
        (1, "deltasink committed app=app version=1"),  # the mark, a commit without files
    ]
    (mark,) = support.txn_commits(s.staging, "app#committed")[1]
    assert actions(s.staging, "add")[mark] == []
    assert support.txn_commits(target, "app") == {0: [0], 1: [1]}
    text, _, cost = support.commit_info(target, 1)["userMetadata"].partition(" deltasink=")
    assert text == "deltasink commit app=app version=1"
    assert json.loads(cost)["versions"] == [1]  # what the commit cost, after the prefix
    assert support.commit_info(target, 1)["operation"] == "MERGE"
    assert support.rows(target) == [
        {"id": 1, "value": "v1"},
        {"id": 2, "value": "w2"},
        {"id": 3, "value": "w3"},
    ]
    history = s.history()
    assert [(h.version, h.target_version, h.operation) for h in history] == [
        (1, 1, "MERGE"),
        (0, 0, "WRITE"),
    ]
    assert (history[0].rows_inserted, history[0].rows_updated) == (1, 1)


def test_txn_confs_are_restored_after_each_commit(delta_spark: Any, target: str) -> None:
    delta_spark.conf.set(TXN_APP_ID, "users-own")
    delta_spark.conf.set(TXN_VERSION, "3")
    try:
        s = sink(target, delta_spark)
        s.write(df(delta_spark, 1), 0)
        s.write(df(delta_spark, 2), 1)
        assert delta_spark.conf.get(TXN_APP_ID, None) == "users-own"
        assert delta_spark.conf.get(TXN_VERSION, None) == "3"
        assert delta_spark.conf.get(USER_METADATA, None) is None
        # The user's own idempotent statement still runs under the user's identity.
        delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (9, 'user')")
        assert support.marker(target, "users-own") == 3
        assert support.marker(target, "app") == 1
    finally:
        delta_spark.conf.unset(TXN_APP_ID)
        delta_spark.conf.unset(TXN_VERSION)
    assert support.ids(target) == [1, 2, 9]


def test_an_empty_batch_is_one_commit_without_files(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark)
    s.write(df(delta_spark, 1), 0)
    assert s.pre_commit(df(delta_spark), 1).state == "staged"
    assert staging_commits(s.staging)[-1] == (
        1,
        'deltasink stage-empty app=app version=1 columns=["id", "value"]',
    )
    (version,) = support.txn_commits(s.staging, "app")[1]
    assert actions(s.staging, "add")[version] == []  # no file: Spark writes none
    fresh = sink(target, delta_spark)  # a new process: found from the staging history
    assert fresh.status().pending_versions == [1]
    assert fresh.pre_commit(df(delta_spark), 1).state == "duplicate"
    assert fresh.commit(1).committed_versions == [1]
    assert support.marker(target, "app") == 1
    assert support.ids(target) == [1]
    assert fresh.status().pending_versions == []


def test_abort_then_restage_an_empty_version(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark)
    s.pre_commit(df(delta_spark), 0)
    assert s.abort(0) is True
    assert s.status().pending_versions == []
    assert sink(target, delta_spark).status().pending_versions == []  # recorded durably
    s.pre_commit(df(delta_spark, 5), 0)  # Delta would skip txn(app, 0) now: not skipped
    assert s.status().pending_versions == [0]
    s.commit(0)
    assert support.ids(target) == [5]


def test_the_marker_check_is_delta_s_own(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark)
    s.write(df(delta_spark, 1), 0)
    s.pre_commit(df(delta_spark, 2), 1)
    s.commit(1)
    backend = SparkBackend(
        spark=delta_spark, target=target, staging=s.staging, app_id="app", spec=UPSERT
    )
    before = support.table_version(target)
    backend._logs.committed = lambda: None  # type: ignore[method-assign]  # as if unreadable
    publisher = backend._target_writer
    publisher.apply_once([1], ("id", "value"), UPSERT)  # the MERGE runs: Delta skips it
    assert support.table_version(target) == before
    assert publisher.result(1, 1, 0.0).target_version == 1  # the original commit


def test_a_newer_writer_fences_the_older_one(delta_spark: Any, target: str) -> None:
    old = sink(target, delta_spark, APPEND)
    old.pre_commit(df(delta_spark, 1), 0)
    new = sink(target, delta_spark, APPEND)
    new.pre_commit(df(delta_spark, 2), 1)
    with pytest.raises(FencedError, match="took over the staging table"):
        old.pre_commit(df(delta_spark, 3), 2)
    with pytest.raises(FencedError):
        old.commit(1)
    assert support.staged_versions(new.staging) == [0, 1]
    assert new.commit(1).committed_versions == [0, 1]
    assert support.ids(target) == [1, 2]


def test_switching_engines_both_ways(delta_spark: Any, target: str) -> None:
    embedded = DeltaSink(target, "app", UPSERT, engine="embedded")
    embedded.pre_commit(pa.table({"id": [1], "value": ["e1"]}), 0)
    spark_side = sink(target, delta_spark)
    assert spark_side.status().pending_versions == [0]
    assert spark_side.commit(0).committed_versions == [0]
    spark_side.pre_commit(df(delta_spark, 2), 1)
    back = DeltaSink(target, "app", engine="embedded")
    assert back.recover().committed_versions == [1]
    assert support.rows(target) == [{"id": 1, "value": "e1"}, {"id": 2, "value": "v2"}]
    assert support.txn_commits(target, "app") == {0: [0], 1: [1]}


def test_hand_over_between_engines_keeps_markers_and_pending_versions(
    delta_spark: Any, target: str
) -> None:
    """Develop on the embedded engine, deploy on Spark, and back: the same tables and
    app_id, each engine honouring the other's ``txn`` markers."""

    def arrow(*ids: int, value: str = "v") -> pa.Table:
        return pa.table({"id": ids, "value": [f"{value}{i}" for i in ids]})

    local = DeltaSink(target, "orders", UPSERT, engine="embedded")
    local.write(arrow(1, 2), 0)
    local.write(arrow(2, 3, value="w"), 1)  # delta-rs writes txn(orders, 1)
    local.pre_commit(arrow(4), 2)  # pending when the job moves to the cluster
    local.pre_commit(arrow(1, value="x"), 3)

    cluster = DeltaSink(target, "orders", engine="spark", spark=delta_spark)
    assert cluster.status().committed_version == 1
    assert cluster.status().pending_versions == [2, 3]
    writer = cluster._backend._target_writer  # type: ignore[attr-defined]
    before = support.table_version(target)
    writer.apply_once([1], ("id", "value"), UPSERT)  # Delta sees delta-rs's marker: skipped
    assert support.table_version(target) == before
    assert cluster.recover().committed_versions == [2, 3]
    assert cluster.pre_commit(df(delta_spark, 9), 1).state == "already_committed"
    cluster.write(df(delta_spark, 5), 4)  # delta-spark writes txn(orders, 4)
    cluster.pre_commit(df(delta_spark, 6), 5)  # pending when the job moves back

    back = DeltaSink(target, "orders", engine="embedded")
    assert back.status().committed_version == 4
    assert back.write(arrow(7), 4).committed_versions == []  # replayed: nothing changes
    assert back.recover().committed_versions == [5]
    assert support.rows(target) == [
        {"id": 1, "value": "x1"},
        {"id": 2, "value": "w2"},
        {"id": 3, "value": "w3"},
        {"id": 4, "value": "v4"},
        {"id": 5, "value": "v5"},
        {"id": 6, "value": "v6"},
    ]
    # Every version in exactly one target commit, whichever engine made it.
    commits = support.txn_commits(target, "orders")
    assert sorted(commits) == [0, 1, 3, 4, 5]  # 2 and 3 were one coalesced commit
    assert all(len(c) == 1 for c in commits.values())
    assert support.staged_versions(back.staging) == []


def test_schema_evolution_and_batches_that_omit_columns(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark, MergeSpec(keys=["id"], schema_evolution=True))
    s.write(delta_spark.createDataFrame([(1, "x")], "id long, a string"), 0)
    s.write(delta_spark.createDataFrame([(2, "y", 2.5)], "id long, a string, b double"), 1)
    s.write(delta_spark.createDataFrame([(1, 7.5)], "id long, b double"), 2)
    assert support.rows(target) == [
        {"id": 1, "a": "x", "b": 7.5},  # the update left the omitted column alone
        {"id": 2, "a": "y", "b": 2.5},
    ]
    assert support.marker(target, "app") == 2


#: Failures the core absorbs: after the target commit landed the version is reported
#: committed (the marker is re-read); a failed clean-up is logged and retried later.
ABSORBED = ("publish.after_target_commit", "discard.before_log_commit")
#: The fault points ``write()``'s direct publish crosses (nothing pending, no check).
DIRECT = (
    "stage.before_write",
    "commit.before_publish",
    "publish.before_target_commit",
    "publish.after_target_commit",
    "commit.after_publish",
)


@pytest.mark.parametrize(
    ("path", "point"),
    sliced(
        [("staged", p) for p in POINTS] + [("direct", p) for p in DIRECT],
        # make test: a landed commit whose clean-up failed; a failed direct publish
        keep=(("staged", "publish.after_target_commit"), ("direct", "commit.before_publish")),
    ),
)
def test_a_failure_at_every_step_is_recovered(
    delta_spark: Any, target: str, path: str, point: str
) -> None:
    first = sink(target, delta_spark, APPEND)
    first.write(df(delta_spark, 1), 0)
    failed: BaseException | None = None
    with armed(point, "raise"):
        try:
            if path == "direct":
                first.write(df(delta_spark, 2, 3), 1)
            else:
                first.pre_commit(df(delta_spark, 2, 3), 1)
                first.commit(1)
        except Exception as exc:
            failed = exc
    if point in ABSORBED:
        assert failed is None
    else:
        assert isinstance(failed, FaultInjected) or isinstance(failed.__cause__, FaultInjected)
    if path == "direct":  # a failed publish is staged for recover(); a landed one is not
        landed = point in ("publish.after_target_commit", "commit.after_publish")
        failed_publish = point in ("commit.before_publish", "publish.before_target_commit")
        assert support.marker(target, "app") == (1 if landed else 0)
        assert support.staged_versions(first.staging) == ([1] if failed_publish else [])
    again = sink(target, delta_spark, APPEND)
    again.recover()
    again.write(df(delta_spark, 2, 3), 1)  # the job replays the batch
    assert support.ids(target) == [1, 2, 3]
    assert {v: len(c) for v, c in support.txn_commits(target, "app").items()} == {0: 1, 1: 1}
    assert again.status().pending_versions == []
    assert support.staged_versions(again.staging) == []


def test_write_publishes_directly_and_a_replay_is_a_no_op(delta_spark: Any, target: str) -> None:
    """``write()`` with nothing pending MERGEs the validated frame straight into the
    target: no staged data, one target commit per version, the committed mark in the
    staging table; a replay changes nothing, and a version staged meanwhile is published
    first, coalesced with the new one."""
    s = sink(target, delta_spark)
    assert s.write(df(delta_spark, 1, 2), 0).committed_versions == [0]
    assert s.write(df(delta_spark, 2, 3, value="w"), 1).committed_versions == [1]
    assert support.staged_versions(s.staging) == []
    assert not any(actions(s.staging, "add").values())  # no file ever staged
    assert support.marker(s.staging, "app#committed") == 1
    before = support.table_version(target)
    replay = s.write(df(delta_spark, 9), 1)
    assert replay.committed_versions == []
    assert support.table_version(target) == before
    s.pre_commit(df(delta_spark, 4), 2)  # pending: the next write goes through staging
    report = sink(target, delta_spark).write(df(delta_spark, 1, value="x"), 3)
    assert report.committed_versions == [2, 3]
    # txn version -> target commits: 2 and 3 in one (the target's third commit)
    assert support.txn_commits(target, "app") == {0: [0], 1: [1], 3: [2]}
    assert support.rows(target) == [
        {"id": 1, "value": "x1"},
        {"id": 2, "value": "w2"},
        {"id": 3, "value": "w3"},
        {"id": 4, "value": "v4"},
    ]
    assert sink(target, delta_spark).status().pending_versions == []


def test_stream_origins_on_delta_spark(delta_spark: Any, target: str, tmp_path: Path) -> None:
    """Issue 24 on the spark engine: the origin rides in the target commit's
    ``userMetadata``; a staged version keeps it through ``recover()``; another query's
    batch is refused, nothing written; resume continues after the committed version."""
    from tests.test_origin import Checkpoint

    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    old.offsets(0, {"t": {"0": 1}})
    sink(target, delta_spark).foreach_batch(df(delta_spark, 1), 0, checkpoint=old.root)
    info = support.commit_info(target, max(support.txn_commits(target, "app")[0]))
    text = info["userMetadata"]
    assert text.startswith("deltasink commit app=app version=0 deltasink={")
    assert ' origin={"' in text  # the origin last, after what the commit cost
    old.offsets(1, {"t": {"0": 2}})
    with armed("publish.before_target_commit"), pytest.raises(CommitError):
        sink(target, delta_spark).foreach_batch(df(delta_spark, 2), 1, checkpoint=old.root)
    assert sink(target, delta_spark).recover().committed_versions == [1]
    point = sink(target, delta_spark).offsets()
    assert (point.version, point.exact) == (1, True)
    assert point.starting == ({"kind": "kafka", "source": 0, "startingOffsets": '{"t":{"0":2}}'},)
    new.offsets(0, {"t": {"0": 3}})
    before = support.table_version(target)
    with pytest.raises(CheckpointResetError, match=old.query_id):
        sink(target, delta_spark).foreach_batch(df(delta_spark, 3), 0, checkpoint=new.root)
    assert support.table_version(target) == before
    resumed = sink(target, delta_spark).foreach_batch(
        df(delta_spark, 3), 0, resume=True, checkpoint=new.root
    )
    assert resumed.committed_versions == [2]
    assert support.ids(target) == [1, 2, 3]
    origins = [e.origin for e in sink(target, delta_spark).history()]
    assert [(o.query_id, o.batch_id, o.base) for o in origins if o is not None] == [
        (new.query_id, 0, 2),
        (old.query_id, 1, 0),
        (old.query_id, 0, 0),
    ]


@pytest.mark.parametrize("maker", sliced(["delta-rs", "spark", "spark-fallback"], keep=("spark",)))
def test_direct_writes_leave_a_mark_that_survives_a_rebuilt_target(
    delta_spark: Any, target: str, monkeypatch: pytest.MonkeyPatch, maker: str
) -> None:
    """The committed mark a direct publish records guards against a target rebuilt
    without its markers: a replayed version is not applied again, whichever log reader
    reads it. The mark is made by delta-rs when delta-rs reads the logs, by Spark when
    Spark does, or when delta-rs cannot commit (``spark-fallback``)."""
    if maker == "spark":
        monkeypatch.setattr(SparkBackend, "default_log_reader", "spark")
    if maker == "spark-fallback":

        def refuse(*_args: Any, **_kwargs: Any) -> None:
            raise OSError("delta-rs cannot write this table")

        monkeypatch.setattr("deltasink.backends.spark.stage.log_commit", refuse)
    s = sink(target, delta_spark, APPEND)
    s.write(df(delta_spark, 1), 0)
    s.write(df(delta_spark, 2), 1)
    marks = support.txn_commits(s.staging, "app#committed")
    assert sorted(marks) == [0, 1]
    for (version,) in marks.values():  # no data, no metadata: conflicts with no append
        assert actions(s.staging, "add")[version] == []
        assert actions(s.staging, "metaData")[version] == []
        info = support.commit_info(s.staging, version)
        assert info["userMetadata"].startswith("deltasink committed app=app version=")
        assert ("engineInfo" in info and "Apache-Spark" in info["engineInfo"]) == (
            maker != "delta-rs"
        )
    monkeypatch.undo()
    shutil.rmtree(target)  # the target is rebuilt (here: lost) without its markers
    for reader in ("delta-rs", "spark"):
        monkeypatch.setattr(SparkBackend, "default_log_reader", reader)
        fresh = sink(target, delta_spark, APPEND)
        assert fresh.status().committed_version == 1, reader
    monkeypatch.undo()
    again = sink(target, delta_spark, APPEND)
    assert again.write(df(delta_spark, 2), 1).committed_versions == []  # a replay
    assert not os.path.exists(target)
    assert again.write(df(delta_spark, 3), 2).committed_versions == [2]
    assert support.ids(target) == [3]
    assert support.txn_commits(target, "app") == {2: [0]}


@pytest.mark.parametrize(
    "key_type", sliced(["long", "int", "date", "string"], keep=("long", "string"))
)
def test_a_direct_merge_is_pruned_by_the_bounds_its_validation_found(
    delta_spark: Any, target: str, key_type: str
) -> None:
    """The direct publish bounds the MERGE's keys to the batch's range from the
    validating aggregation (no aggregation of its own), as the staged path bounds them
    from the staging table: integer and date keys, not strings. An int batch key into a
    long target is bounded too (same kind)."""

    def batch(*ids: int, kind: str = key_type) -> Any:
        column = f"CAST(id AS {kind})"
        if kind == "date":
            column = "date_add(DATE'2026-01-01', CAST(id AS INT))"
        frame = delta_spark.createDataFrame([(i, f"v{i}") for i in ids], "id long, value string")
        return frame.selectExpr(f"{column} AS k", "value")

    s = sink(target, delta_spark, MergeSpec(keys=["k"]))
    first = "long" if key_type == "int" else key_type  # int batches into a long target
    s.write(batch(1, 2, 3, 4, 5, kind=first), 0)  # creates the target
    s.write(batch(2, 3), 1)  # direct: bounds from the validation
    s.pre_commit(batch(4, 5), 2)
    s.commit(2)  # staged: bounds from the staging table

    def predicate(delta_version: int) -> str:  # "(((k = k) AND (k >= 2)) AND (k <= 3))"
        found = support.commit_info(target, delta_version)["operationParameters"]["predicate"]
        return re.sub(r"#\d+L?", "", str(found))

    direct, staged = predicate(1), predicate(2)
    lows = {"date": ("2026-01-03", "2026-01-04", "2026-01-05", "2026-01-06")}
    a, b, c, d = lows.get(key_type, ("2", "3", "4", "5"))
    if key_type == "string":
        assert ">=" not in direct
        assert ">=" not in staged
    else:
        assert f"(k >= {a})) AND (k <= {b}))" in direct, direct
        assert f"(k >= {c})) AND (k <= {d}))" in staged, staged
    assert len(support.rows(target)) == 5


@pytest.mark.parametrize("large", ["false", "true"])
def test_the_zero_row_arrow_form_without_a_job_equals_to_arrow_s(
    delta_spark: Any, large: str
) -> None:
    """Validation reads a classic DataFrame's Arrow schema from its Spark schema, as
    ``toArrow`` builds its table, instead of running a job over zero rows: the same
    schema for every type a batch may hold, whatever the large-types setting."""
    frame = delta_spark.sql(
        "SELECT 1L AS l, 1 AS i, CAST(1 AS SMALLINT) AS s, CAST(1 AS TINYINT) AS t, "
        "1.5D AS d, CAST(1.5 AS FLOAT) AS f, CAST(1.5 AS DECIMAL(12, 3)) AS dec, "
        "'x' AS str, X'01' AS bin, true AS b, DATE'2026-01-01' AS day, "
        "TIMESTAMP'2026-01-01 00:00:00' AS ts, TIMESTAMP_NTZ'2026-01-01 00:00:00' AS ntz, "
        "array(1, 2) AS arr, map('a', 1) AS m, named_struct('a', 1, 'b', 'x') AS st, "
        "array(named_struct('k', 'v')) AS nested"
    )
    if pyspark_35():  # no toArrow to build like: the zero-row form is a job's, as the right side
        from deltasink.input.arrow import spark_arrow_schema

        assert spark_arrow_schema(frame) is None
    key = "spark.sql.execution.arrow.useLargeVarTypes"
    before = delta_spark.conf.get(key, None)
    delta_spark.conf.set(key, large)
    try:
        assert spark_empty(frame).schema == spark_arrow(frame.limit(0)).schema
        assert spark_empty(frame).num_rows == 0
    finally:
        delta_spark.conf.unset(key) if before is None else delta_spark.conf.set(key, before)


def test_a_foreach_batch_micro_batch_is_published_from_its_own_session(
    delta_spark: Any, target: str, tmp_path: Path
) -> None:
    """A ``foreachBatch`` DataFrame belongs to the streaming query's session, whose
    temporary views the sink's session does not see: the direct publish reads the
    batch in the batch's session."""
    s = sink(target, delta_spark)
    source = tmp_path / "source"
    delta_spark.range(0, 5).selectExpr("id", "concat('v', id) AS value").write.format("delta").save(
        str(source)
    )
    query = (
        delta_spark.readStream.format("delta")
        .load(str(source))
        .writeStream.foreachBatch(s.foreach_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert support.ids(target) == [0, 1, 2, 3, 4]
    assert support.txn_commits(target, "app") == {0: [0]}
    assert support.staged_versions(s.staging) == []
    assert support.marker(s.staging, "app#committed") == 0


@FULL  # make test keeps a catalog table: test_table_spec_on_a_catalog_table_with_liquid_...
def test_catalog_table_names(delta_spark: Any) -> None:
    delta_spark.sql("CREATE SCHEMA IF NOT EXISTS sales")
    name = "spark_catalog.sales.orders"
    # One target commit per version (the crash below falls between them).
    s = DeltaSink(name, "orders-ingest", UPSERT, spark=delta_spark, coalesce=False)
    assert (s.engine, s.engine_reason) == (
        "spark",
        "auto: a Spark session with delta-spark's DeltaSparkSessionExtension",
    )
    assert s._backend.log_reader == "spark"  # type: ignore[attr-defined]
    s.write(df(delta_spark, 1, 2), 0)
    s.pre_commit(df(delta_spark), 1)  # empty: found through DESCRIBE HISTORY
    s.pre_commit(df(delta_spark, 2, value="w"), 2)
    assert DeltaSink(name, "orders-ingest", spark=delta_spark).status().pending_versions == [1, 2]
    with armed("commit.after_publish", "raise"), pytest.raises(FaultInjected):
        s.commit(2)  # dies after committing version 1
    report = DeltaSink(name, "orders-ingest", spark=delta_spark).recover()
    assert report.committed_version == 2
    rows = delta_spark.table(name).orderBy("id").collect()
    assert [(r.id, r.value) for r in rows] == [(1, "v1"), (2, "w2")]
    assert delta_spark.catalog.tableExists(
        "spark_catalog.sales.orders__deltasink_staging_orders_ingest"
    )
    assert [h.version for h in s.history()] == [2, 1, 0]
    assert s.status().committed_version == 2
    assert s.status().pending_versions == []

    # the operator's CLI on the same catalog table, through the active session
    from typer.testing import CliRunner

    from deltasink import cli

    args = ["--spark", "status", name, "--app", "orders-ingest", "--json"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["committed_version"], shown["pending_versions"]) == (2, [])
    result = CliRunner().invoke(cli.app, ["--spark", "history", name, "--app", "orders-ingest"])
    assert result.exit_code == 0, result.output


def test_table_spec_on_a_catalog_table_with_liquid_clustering(delta_spark: Any) -> None:
    delta_spark.sql("CREATE SCHEMA IF NOT EXISTS sales")
    name = "spark_catalog.sales.clustered_orders"
    spec = TableSpec(
        cluster_by=["id"],
        properties={"delta.enableChangeDataFeed": "true"},
        comment="orders by id",
    )
    DeltaSink(name, "clustered", UPSERT, spark=delta_spark, table=spec).write(
        df(delta_spark, 1, 2), 0
    )
    detail = delta_spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]
    assert list(detail.clusteringColumns) == ["id"]
    assert detail.properties["delta.enableChangeDataFeed"] == "true"
    assert detail.description == "orders by id"
    rows = delta_spark.table(name).orderBy("id").collect()
    assert [(r.id, r.value) for r in rows] == [(1, "v1"), (2, "v2")]
    other = DeltaSink(
        name, "clustered", UPSERT, spark=delta_spark, table=TableSpec(cluster_by=["value"])
    )
    with pytest.raises(TableDefinitionError, match=r"clustered by \['id'\], the spec says"):
        other.write(df(delta_spark, 3), 1)
    assert delta_spark.table(name).count() == 2


def test_a_target_the_embedded_engine_cannot_write_goes_to_the_spark_engine(
    delta_spark: Any, target: str
) -> None:
    delta_spark.sql(
        f"CREATE TABLE delta.`{target}` (id BIGINT, value STRING) USING DELTA "
        "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"
    )
    delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (1, 'a')")
    embedded = DeltaSink(target, "orders", UPSERT, engine="embedded")
    with pytest.raises(UnsupportedTableFeatureError, match="rowTracking"):
        embedded.write(df(delta_spark, 1, 2), 0)
    assert not support.exists(embedded.staging)
    DeltaSink(target, "orders", UPSERT, engine="spark", spark=delta_spark).write(
        df(delta_spark, 1, 2), 0
    )
    assert (support.ids(target), support.marker(target, "orders")) == ([1, 2], 0)


def test_the_ledger_uses_the_active_session_and_never_starts_the_embedded_engine(
    delta_spark: Any, target: str
) -> None:
    from deltasink.backends.embedded import sail as embedded

    sink(target, delta_spark).write(df(delta_spark, 1), 0)
    ledger = DeltaSink(target, "app").ledger()  # no spark=: the cluster's session
    assert ledger.sparkSession is delta_spark
    assert [(r.app_id, r.version) for r in ledger.collect()] == [("app", 0)]
    assert embedded._server is None


#: The oracle property suite on this engine: a bounded profile here (each history runs
#: twice, every step several Spark jobs); ``DELTASINK_SPARK_PROPERTY_EXAMPLES=N`` and
#: ``DELTASINK_SPARK_PROPERTY_SHAPES=all`` for a longer run.
SPARK_PROPERTY_SHAPES = (
    "append",
    "insert",
    "upsert-sequence-delete",
    # one of each newer MergeSpec shape, combined with sequence_by and deletes
    "upsert-sequence-delete-update-columns",
    "upsert-sequence-delete-absent-condition",
    "upsert-sequence-delete-null-safe",
    "replace-by-where",
    "scd2-delete",
)
if os.environ.get("DELTASINK_SPARK_PROPERTY_SHAPES") == "all":
    from tests.test_property import SHAPES as _ALL_SHAPES

    SPARK_PROPERTY_SHAPES = tuple(sorted(_ALL_SHAPES))


@pytest.mark.parametrize(
    "shape", sliced(list(SPARK_PROPERTY_SHAPES), keep=("upsert-sequence-delete",))
)
def test_the_target_equals_the_oracle_on_spark(delta_spark: Any, shape: str) -> None:
    from hypothesis import HealthCheck, given, settings

    from tests import test_property as prop

    engine = {"engine": "spark", "spark": delta_spark}

    @settings(
        max_examples=int(os.environ.get("DELTASINK_SPARK_PROPERTY_EXAMPLES", "2")),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(prop.histories(shape))
    def check(history: tuple[str, list[tuple[Any, ...]]]) -> None:
        kind, steps = history
        coalesced = prop.run_history(shape, kind, steps, coalesce=True, sink_kwargs=engine)
        one_by_one = prop.run_history(shape, kind, steps, coalesce=False, sink_kwargs=engine)
        assert sorted(map(prop._canon, coalesced.fold.expected())) == sorted(
            map(prop._canon, one_by_one.fold.expected())
        )

    check()


@pytest.mark.parametrize("deletes", [True, False], ids=["deletes", "upserts"])
def test_the_spark_history_rebuild_gives_the_arrow_rebuilds_rows(
    delta_spark: Any, deletes: bool
) -> None:
    """scd2 on Spark (:func:`~deltasink.backends.spark.scd2.history_changes`: window
    functions over a lazy DataFrame, no row on the driver) gives exactly the rows of the
    engine-free Arrow rebuild it replaced (:func:`deltasink.shapes.scd2.changes`, the
    embedded engine's): batch after batch over 40 keys (late and out-of-order events,
    corrections, deletes, tombstones, an empty batch), into a new target and then the
    history the earlier batches left, each batch's change rows compared row for row."""
    import random

    from deltasink.backends.spark.scd2 import history_changes
    from deltasink.input.arrow import spark_frame
    from deltasink.input.sql import DELETE_COLUMN
    from deltasink.shapes.scd2 import changes

    spec = MergeSpec(
        mode="scd2", keys=["k"], sequence_by="seq", delete_when="op = 'D'" if deletes else None
    )
    start = spec.history[0]
    rng = random.Random(29)
    history: dict[tuple[int, int], dict[str, Any]] = {}  # the target, by (key, valid_from)
    schema: pa.Schema | None = None
    seen = {"removed": 0, "tombstones": 0, "kept": 0}  # what the steps covered
    for step in range(5):
        rows = [
            {"k": k, "v": f"b{step}.{k}.{s}", "seq": s, "op": "D" if rng.random() < 0.35 else "U"}
            for k in range(40)
            for s in rng.sample(range(8), rng.choice([0, 1, 1, 2, 3]))
        ]
        if step == 3:
            rows = []
        batch = pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [("k", pa.int64()), ("v", pa.string()), ("seq", pa.int64()), ("op", pa.string())]
            ),
        )
        if deletes:
            flags = pa.array([r["op"] == "D" for r in rows], pa.bool_())
            batch = batch.append_column(DELETE_COLUMN, flags)
        current = None
        if schema is not None:
            current = pa.Table.from_pylist(list(history.values()), schema=schema)
        expected = changes(current, batch, spec)
        spark_frame(delta_spark, batch).createOrReplaceTempView("scd2_batch")
        frame = None if current is None else spark_frame(delta_spark, current)
        got = spark_arrow(history_changes(delta_spark, "SELECT * FROM scd2_batch", frame, spec))
        assert got.column_names == expected.column_names
        key = lambda r: repr(sorted(r.items()))  # noqa: E731
        assert sorted(got.to_pylist(), key=key) == sorted(expected.to_pylist(), key=key)
        if current is not None:  # target rows left out of the changes: their interval stays
            changed = {(r["k"], r[start]) for r in got.to_pylist()}
            seen["kept"] += len(history.keys() - changed)
        for row in expected.to_pylist():  # applied as the MERGE on (keys, valid_from) does
            where = (row["k"], row[start])
            if row.pop(DELETE_COLUMN):
                del history[where]
                seen["removed"] += 1
            else:
                history[where] = row
                seen["tombstones"] += row["v"] is None
        if schema is None:
            schema = expected.schema.remove(expected.schema.get_field_index(DELETE_COLUMN))
    assert seen["kept"] > 0
    assert (seen["removed"] > 0 and seen["tombstones"] > 0) == deletes


@pytest.mark.parametrize(
    ("kwargs", "rows", "not_null", "bounded", "floats"),
    [
        (
            {"keys": ["id"]},
            [(1, "a"), (1, "b"), (None, "c"), (2, None), (None, None)],
            ["v"],
            ["id"],
            [],
        ),
        (
            {"keys": ["id", "v"], "null_safe_keys": True},
            [(1, None), (1, None), (None, None), (2, "x")],
            [],
            [],
            [],
        ),
        (
            {"keys": ["id", "v"]},
            [(1, None), (1, None), (None, "y"), (2, "x"), (2, "x")],
            [],
            ["id"],
            [],
        ),
        ({"keys": ["f"]}, [(1, "a"), (2, "b"), (3, "c")], [], [], ["f"]),
        (
            {"keys": ["id"], "sequence_by": "s", "mode": "scd2"},
            [(1, "a"), (1, "a"), (1, "b")],
            [],
            ["id"],
            [],
        ),
        (
            {"keys": ["id"], "delete_when": "v = 'D'"},
            [(1, "D"), (2, None), (3, "D")],
            ["v"],
            ["id"],
            [],
        ),
        ({"mode": "append"}, [(1, None), (None, "b")], ["v", "id"], [], []),
        ({"keys": ["id"]}, [], ["v"], ["id"], []),
        ({"mode": "append"}, [], ["v"], [], []),
    ],
    ids=[
        "dups-nulls",
        "null-safe",
        "two-keys",
        "nan-float",
        "scd2",
        "deletes",
        "append",
        "empty",
        "empty-append",
    ],
)
def test_the_observed_validation_counts_what_the_collected_aggregation_counts(
    delta_spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    kwargs: dict[str, Any],
    rows: list[tuple[Any, ...]],
    not_null: list[str],
    bounded: list[str],
    floats: list[str],
) -> None:
    """The validating aggregation on a classic session (one pass, observed metrics,
    the batch grouped by its event columns) against the one aggregation collected that
    Spark Connect runs: the same counts of rows, nulls, NOT NULL violations, NaN keys
    and distinct keys (null keys, null-safe keys, two keys, scd2's key and sequence),
    and the same bounds, for a batch with every such case and for an empty one."""
    from deltasink.backends.spark import validate
    from deltasink.input.sql import DELETE_COLUMN

    spec = MergeSpec(**kwargs)
    nan = float("nan")
    frame = delta_spark.createDataFrame(
        [(i, v, float(i or 0) if i != 3 else nan, i) for i, v in rows],
        "id long, v string, f double, s long",
    )
    if spec.delete_when:
        frame = frame.selectExpr("*", f"coalesce(v = 'D', false) AS {DELETE_COLUMN}")
    observed = validate._batch_stats(frame, spec, not_null, bounded, floats)
    monkeypatch.setattr(validate, "_observed", validate._collected)
    assert observed == validate._batch_stats(frame, spec, not_null, bounded, floats)


def test_write_audit_publish(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark, checks=[checks.row_count_between(1, 10)])
    s.write(df(delta_spark, 1), 0)
    report = s.write(df(delta_spark), 1)  # empty: fails the check
    assert report.quarantined_versions == [1]
    assert list(s.status().quarantined) == [1]
    assert s.pre_commit(df(delta_spark, 2), 1).state == "restaged"
    assert s.commit(1).committed_versions == [1]
    assert support.ids(target) == [1, 2]


def test_gc_and_optimize(delta_spark: Any, target: str) -> None:
    s = sink(target, delta_spark, APPEND)
    for version in range(3):  # staged, then committed (write() would stage nothing)
        s.pre_commit(df(delta_spark, version), version)
        s.commit(version)
    assert s.commits_since_optimize() == 3
    dry = s.gc(retention=0, dry_run=True)
    assert dry.dry_run
    parquet = [f for f in dry.files if f.endswith(".parquet")]
    assert len(parquet) >= 3  # the staged files of the three committed versions
    assert all("_deltasink_version=" in f for f in parquet)
    assert sorted(s.gc(retention=0).files) == sorted(dry.files)
    assert support.staged_files_on_disk(s.staging) == []
    s.optimize()
    assert s.commits_since_optimize() == 0
    assert support.ids(target) == [0, 1, 2]


#: A history whose first commit coalesces two versions into a target that does not
#: exist yet, with late rows, deletes, a crash after the target commit, a second app
#: and a replay (fixed, so every run covers it).
FIXED_HISTORY = [
    ("stage", [(0, 0, False), (3, 1, False)], 0, "commit.before_publish"),
    ("write", [(0, 2, True), (1, 1, True)], 0, "commit.before_publish"),
    ("stage", [(0, 1, False), (1, 0, False), (3, 1, True)], 0, "commit.before_publish"),
    ("crash", [], 0, "publish.after_target_commit"),
    ("other", [(1, 3, False)], 0, "commit.before_publish"),
    ("stage", [(2, 3, False)], 0, "commit.before_publish"),
    ("stage", [(2, 3, True), (2, 1, False)], 0, "commit.before_publish"),
    ("commit", [], 0, "commit.before_publish"),
    ("replay", [(0, 3, False)], 1, "commit.before_publish"),
]


@pytest.mark.parametrize(
    "shape", sliced(["upsert-sequence-delete", "scd2-delete"], keep=("upsert-sequence-delete",))
)
def test_a_fixed_history_with_zone_less_timestamp_keys_equals_the_oracle(
    delta_spark: Any, shape: str
) -> None:
    """Regressions: the coalesced run that created the target wrote the sequence guard
    column into it; zone-less Arrow timestamps became session-zone TIMESTAMPs."""
    from tests import test_property as prop

    engine = {"engine": "spark", "spark": delta_spark}
    # coalesced only (the guard appears there); one by one = oracle: the property test
    run = prop.run_history(shape, "timestamp-us", FIXED_HISTORY, coalesce=True, sink_kwargs=engine)
    schema = pa.schema(DeltaTable(run.target).schema().to_arrow())
    assert "_deltasink_sequence_guard" not in schema.names
    assert schema.field("k").type == pa.timestamp("us")


# The float key rule on this engine stays in make test through the contract's
# test_float_keys_have_one_rule_in_every_mode and ..._in_scd2_keep_one_current_row.
@FULL
@pytest.mark.parametrize("shape", ["upsert", "upsert-sequence-delete", "scd2-delete"])
def test_signed_zero_and_nan_keys_equal_the_oracle_on_spark(delta_spark: Any, shape: str) -> None:
    """The float key rule on the spark engine (-0.0 is the key 0.0, stored as 0.0; NaN
    refused by name), coalesced and one by one, against the oracle."""
    from tests import test_property as prop

    engine = {"engine": "spark", "spark": delta_spark}
    for coalesce in (True, False):
        run = prop.run_history(
            shape, "float", prop.FLOAT_HISTORY, coalesce=coalesce, sink_kwargs=engine
        )
        keys = [str(r["k"]) for r in DeltaTable(run.target).to_pyarrow_table().to_pylist()]
        assert "-0.0" not in keys
        assert "0.0" in keys


def test_arrow_input_with_an_empty_record_batch_keeps_every_row(
    delta_spark: Any, target: str
) -> None:
    """Regression: classic PySpark's createDataFrame(pyarrow.Table) dropped the rows
    after an empty record batch."""
    parts = [pa.table({"id": pa.array(ids, pa.int64())}) for ids in ([1, 2], [], [3], [4])]
    batch = pa.concat_tables(parts)
    assert [b.num_rows for b in batch.to_batches()] == [2, 0, 1, 1]
    sink(target, delta_spark).write(batch, 0)
    assert support.ids(target) == [1, 2, 3, 4]


def test_an_arrow_table_becomes_a_dataframe_value_for_value(delta_spark: Any) -> None:
    """``spark_frame``: PySpark 4's ``createDataFrame(pyarrow.Table)``; on classic 3.5,
    which has none, the record batches sent to the JVM as an Arrow stream. The same
    values either way: NaN apart from null, -0.0 kept, nanoseconds floored, a zone-less
    timestamp a TIMESTAMP_NTZ, a large string a string; zero rows and no given schema."""
    import datetime as dt
    import math
    from decimal import Decimal

    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import TimestampNTZType

    from deltasink.input.arrow import spark_frame

    table = pa.table(
        {
            "f": pa.array([float("nan"), None, -0.0], pa.float64()),
            "ts": pa.array([1_000_000_001_999, None, 0], pa.timestamp("ns", tz="UTC")),
            "ntz": pa.array([1, 2, None], pa.timestamp("us")),
            "d": pa.array([Decimal("1.25"), None, Decimal("-2.50")], pa.decimal128(5, 2)),
            "s": pa.array(["a", None, ""], pa.large_string()),
            "l": pa.array([[1], [], None], pa.list_(pa.int32())),
        }
    )
    schema = from_arrow_schema(table.schema, prefer_timestamp_ntz=True)
    frame = spark_frame(delta_spark, table, schema)
    assert frame.schema["ntz"].dataType == TimestampNTZType()
    rows = sorted(spark_arrow(frame).to_pylist(), key=lambda r: r["s"] is None)
    assert math.isnan(rows[0]["f"])
    assert (str(rows[1]["f"]), rows[2]["f"]) == ("-0.0", None)
    utc = dt.timezone.utc
    assert [r["ts"] for r in rows] == [
        dt.datetime(1970, 1, 1, 0, 16, 40, 1, tzinfo=utc),
        dt.datetime(1970, 1, 1, tzinfo=utc),
        None,
    ]
    assert [r["ntz"] for r in rows] == [
        dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        None,
        dt.datetime(1970, 1, 1, 0, 0, 0, 2),
    ]
    assert [(r["d"], r["s"], r["l"]) for r in rows] == [
        (Decimal("1.25"), "a", [1]),
        (Decimal("-2.50"), "", None),
        (None, None, []),
    ]
    assert spark_frame(delta_spark, table.slice(0, 0), schema).count() == 0
    inferred = spark_frame(delta_spark, pa.table({"a": [2, 1], "b": ["x", "y"]}))
    assert [tuple(r) for r in inferred.orderBy("a").collect()] == [(1, "y"), (2, "x")]
