"""The spark engine on a real Spark standalone cluster (``make test-cluster``): a master
and two workers on 127.0.0.1 (:mod:`tests.cluster`), each application with two executor
JVMs whose Python workers cannot import deltasink. Every case is checked against the
independent oracle (:class:`tests.oracle.Fold`), reading the tables with delta-rs and
the raw Delta log, never through the sink:

* every merge mode, SCD2, coalesced commits, a quarantined version, a crash and
  recovery (one driver application, ``tests/jvm/cluster_job.py cases``);
* recovery by an operator: ``deltasink --spark recover``, its session from the
  cluster's ``spark-defaults.conf``;
* two applications racing into one target on the same new keys;
* a ``foreachBatch`` stream whose driver is SIGKILLed and restarted
  (``tools/stream_soak.py`` with a planned kill, its own checker).

The cluster is started once for the module and always stopped (also on failure).
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

from deltasink.locations import default_staging
from tests import support
from tests.cluster import BLOCKED, StandaloneCluster, die_with_parent, unavailable
from tests.cluster_data import RACE_KEYS, RACE_VERSIONS, rows
from tests.oracle import Fold

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jvm" / "cluster_job.py"
REASON = unavailable()

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.cluster,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def drive(cluster: StandaloneCluster, *command: str) -> subprocess.Popen[str]:
    """A driver process on the cluster: ``python`` with ``command`` (by default
    ``tests/jvm/cluster_job.py``'s; each driver is a Spark application of its own)."""
    if command[0] in ("cases", "race"):
        command = (str(JOB), *command)
    return subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=cluster.driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent,  # and its JVM (stdin closed), and its executors
    )


def finish(cluster: StandaloneCluster, driver: subprocess.Popen[str], timeout: float = 420) -> str:
    """The driver's stdout once it exited 0."""
    try:
        stdout, stderr = driver.communicate(timeout=timeout)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, stdout[-3000:] + stderr[-6000:] + cluster.logs()
    return stdout


def result(cluster: StandaloneCluster, driver: subprocess.Popen[str]) -> dict[str, Any]:
    done: dict[str, Any] = json.loads(finish(cluster, driver).strip().splitlines()[-1])
    assert done["master"] == cluster.master
    return done


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tables")


#: The stream's planned kill: 0.5 s after its second micro-batch began (in the sink).
STREAM_PLAN = "in-batch:2+0.50"


@pytest.fixture(scope="module")
def started(
    cluster: StandaloneCluster, work: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The cases' driver and the killed stream, side by side (two applications: the
    workers' cores fit both); the tests wait for their results."""
    soak = tmp_path_factory.mktemp("stream")
    stream = ["tools/stream_soak.py", "--engine", "spark", "--files", "3", "--plan", STREAM_PLAN]
    stream += ["--workdir", str(soak), "--json", str(soak / "summary.json")]
    drivers = {"cases": drive(cluster, "cases", str(work)), "stream": drive(cluster, *stream)}
    yield {**drivers, "summary": soak / "summary.json"}
    for driver in drivers.values():
        if driver.poll() is None:
            driver.kill()
            driver.communicate()


@pytest.fixture(scope="module")
def cases(cluster: StandaloneCluster, started: dict[str, Any]) -> dict[str, Any]:
    return result(cluster, started["cases"])


def table(work: Path, case: str) -> list[dict[str, Any]]:
    return support.rows(str(work / case))


def oracle(fold: Fold, batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    for batch in batches:
        fold.apply(batch)
    return fold.expected()


def same_rows(actual: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    def order(row: dict[str, Any]) -> str:
        return repr(sorted(row.items()))

    assert sorted(actual, key=order) == sorted(expected, key=order)


def ledger(work: Path, case: str, app_id: str = "") -> dict[int, int]:
    """Version -> how many target commits carry its ``txn`` marker."""
    commits = support.txn_commits(str(work / case), app_id or case)
    return {version: len(deltas) for version, deltas in sorted(commits.items())}


def staged(work: Path, case: str, app_id: str = "") -> list[int]:
    return support.staged_versions(default_staging(str(work / case), app_id or case))


@pytest.mark.timeout(900)
def test_each_application_has_two_executor_jvms_that_cannot_import_deltasink(
    cases: dict[str, Any],
) -> None:
    probe = cases["probe"]
    assert probe["executors"] == 2
    assert probe["daemons"] == 2  # a Python worker daemon per executor JVM
    assert probe["imports"] == [f"ImportError: {BLOCKED}"]
    # the driver's PYTHONPATH (this repository) did not travel to the executors
    assert [str(ROOT) in path.split(os.pathsep) for path in probe["paths"]] == [False]


CASES: dict[str, tuple[dict[str, Any], list[int], dict[int, int]]] = {
    # case: (the oracle's Fold, the versions it applies, target commits per marker)
    "upsert": (
        {"mode": "upsert", "keys": ("id",), "sequence_by": "seq", "delete_column": "op"},
        [0, 1, 2, 3, 4, 5],
        {0: 1, 1: 1, 3: 1, 4: 1, 5: 1},
    ),
    "append": ({"mode": "append", "keys": ()}, [0, 1, 2], {0: 1, 2: 1}),
    "insert": ({"mode": "insert", "keys": ("id",)}, [0, 1, 2], {0: 1, 2: 1}),
    "replace": (
        {"mode": "replace", "keys": (), "replace_by": ("day",)},
        [0, 1, 2],
        {0: 1, 1: 1, 2: 1},
    ),
    "scd2": (
        {
            "mode": "scd2",
            "keys": ("id",),
            "sequence_by": "seq",
            "delete_column": "op",
            "history": ("valid_from", "valid_to", "is_current"),
        },
        [0, 1, 2],
        {0: 1, 2: 1},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_mode_leaves_the_rows_and_commits_of_the_oracle(
    cases: dict[str, Any], work: Path, case: str
) -> None:
    fold, versions, commits = CASES[case]
    same_rows(table(work, case), oracle(Fold(**fold), [rows(case, v) for v in versions]))
    assert ledger(work, case) == commits  # one commit per marker: 1+2 (2+3) coalesced
    assert (cases[case]["pending"], staged(work, case)) == ([], [])
    if case == "upsert":
        assert cases[case]["recovered"] == [2, 3]
    elif case != "replace":
        assert cases[case]["committed"] == [1, 2]


def test_replace_where_reloads_its_slice_of_a_seeded_target(
    cases: dict[str, Any], work: Path
) -> None:
    fold = Fold("replace", (), replace_where=lambda row: row["region"] == "EU")
    batches = [rows("seed", 0)] + [rows("replace_where", v) for v in range(3)]
    same_rows(table(work, "replace_where"), oracle(fold, batches))
    assert ledger(work, "replace_where", "seed") == {0: 1}
    assert ledger(work, "replace_where") == {0: 1, 1: 1, 2: 1}


def test_a_quarantined_version_is_kept_out_then_aborted(cases: dict[str, Any], work: Path) -> None:
    done = cases["quarantine"]
    assert (done["reported"], done["quarantined"], done["aborted"]) == ([1], [1], True)
    expected = oracle(Fold("upsert", ("id",)), [rows("quarantine", v) for v in (0, 2)])
    same_rows(table(work, "quarantine"), expected)
    assert ledger(work, "quarantine") == {0: 1, 2: 1}
    assert (done["pending"], staged(work, "quarantine")) == ([], [])


@pytest.mark.timeout(600)
def test_the_cli_recovers_a_crashed_version_through_the_cluster(
    cluster: StandaloneCluster, cases: dict[str, Any], work: Path
) -> None:
    assert cases["cli"]["pending"] == [1]
    target = str(work / "cli")
    command = ["--spark", "recover", target, "--app", "cli", "--json"]
    cli = drive(cluster, "-c", "from deltasink.cli import main; main()", *command)
    report = json.loads(finish(cluster, cli))
    assert report["committed_version"] == 1
    assert support.marker(target, "cli") == 1
    same_rows(table(work, "cli"), oracle(Fold("upsert", ("id",)), [rows("cli", 0), rows("cli", 1)]))
    assert ledger(work, "cli") == {0: 1, 1: 1}
    assert staged(work, "cli") == []


@pytest.mark.timeout(900)
def test_a_stream_whose_driver_is_killed_restarts_and_applies_every_batch_once(
    cluster: StandaloneCluster, started: dict[str, Any]
) -> None:
    """``tools/stream_soak.py``: a start SIGKILLed (driver and its JVM) at the plan's
    instant, then restarted from its checkpoint to the end; its checker reads the
    target's rows and ``txn`` commits against Spark's own record of each micro-batch."""
    finish(cluster, started["stream"], timeout=840)
    summary = json.loads(started["summary"].read_text())
    assert summary["kills_done"] == [STREAM_PLAN]
    assert (summary["trials"], summary["files_checked"], summary["missed"]) == (1, 3, 0)
    assert (summary["lost"], summary["duplicated"]) == (0, 0)
    assert (summary["violations"], summary["errors"]) == ([], [])


@pytest.mark.timeout(600)
def test_two_applications_racing_on_the_same_new_keys_lose_and_duplicate_nothing(
    cluster: StandaloneCluster, tmp_path: Path
) -> None:
    target = tmp_path / "race"
    racers = ["racer-0", "racer-1"]
    drivers = [drive(cluster, "race", str(tmp_path), str(target), app) for app in racers]
    for driver in drivers:
        assert result(cluster, driver)["pending"] == []
    # The oracle applies the versions in the order their commits landed in the log.
    landed = sorted(
        (delta, app, version)
        for app in racers
        for version, deltas in support.txn_commits(str(target), app).items()
        for delta in deltas
    )
    assert len(landed) == 2 * RACE_VERSIONS  # one commit per version and app
    fold = Fold("insert", ("id",))
    expected = oracle(fold, [rows("race", version, app) for _, app, version in landed])
    same_rows(support.rows(str(target)), expected)
    assert sorted(r["id"] for r in expected) == list(range(RACE_VERSIONS * RACE_KEYS))
    for app in racers:
        assert support.marker(str(target), app) == RACE_VERSIONS - 1
