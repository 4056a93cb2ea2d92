"""Every commit observable, on the spark engine (delta-spark's session, in the delta-spark
suite's process: ``CHILD_MODULES``): OpenTelemetry's metrics and spans after a real
write, conflicts between two writers and a recovery; and Spark's ``DESCRIBE HISTORY``
of an embedded-engine commit showing what it cost (``userMetadata``)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import DeltaSink, MergeSpec
from deltasink._faults import armed
from deltasink.core import telemetry
from deltasink.observe import INSTRUMENTS
from tests import support
from tests.otel import collected
from tests.test_contract_spark import REASON, delta_spark
from tests.test_telemetry import conflicting

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.delta_spark,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
]

__all__ = ["delta_spark"]  # the delta-spark suite's session fixture, shared

UPSERT = MergeSpec(keys=["id"])
#: Rounds of two writers updating the same keys at once, until one loses a conflict.
ROUNDS = 8


def frame(session: Any, *ids: int, value: str) -> Any:
    return session.createDataFrame([(i, value) for i in ids], "id long, value string")


def test_describe_history_shows_what_an_embedded_commit_cost(
    delta_spark: Any, tmp_path: Path
) -> None:
    """An embedded-engine commit that lost a conflict: Spark's ``DESCRIBE HISTORY``
    shows its ``deltasink`` record (attempt, the conflict and who won it, phases) in
    ``userMetadata`` beside Delta's own ``operationMetrics`` (rows, files)."""
    target = str(tmp_path / "orders")
    a = DeltaSink(target, "a", UPSERT, engine="embedded")
    b = DeltaSink(target, "b", UPSERT, engine="embedded")
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "value": ["a", "a"]})
    a.write(batch, 0)
    with armed("publish.before_target_commit", conflicting(b, ids=(1,))):
        report = a.write(batch.slice(1), 1)
    landed = report.results[0]
    history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{target}`")
    (row,) = history.where(f"version = {landed.target_version}").collect()
    text = row["userMetadata"]
    assert text.startswith("deltasink commit app=a version=1 deltasink=")
    recorded = json.loads(text.partition(" deltasink=")[2])
    assert recorded["attempt"] == 2
    assert recorded["versions"] == [1]
    (conflict,) = recorded["conflicts"]
    assert conflict["winner_app"] == "b"
    assert conflict["winner_version"] == landed.target_version - 1
    assert set(recorded["phases"]) == {"validate", "retry"}
    metrics = row["operationMetrics"]
    assert int(metrics["num_target_rows_updated"]) == 1
    assert int(metrics["num_target_files_added"]) == landed.telemetry.files_added


def test_a_write_conflicts_and_a_recovery_are_observable_on_the_spark_engine(
    delta_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers (app ids), each a thread with a session of its own on one JVM, update
    the same keys at once until one loses a conflict; then a version staged by one is
    recovered by a new sink. Every instrument is read back from the SDK. (The writers
    race: taking turns at a local target, they would never conflict.)"""
    monkeypatch.setenv("DELTASINK_TURNS", "off")
    target = str(tmp_path / "orders")
    sessions = {app: delta_spark.newSession() for app in ("a", "b")}
    sinks = {
        app: DeltaSink(target, app, UPSERT, engine="spark", spark=session)
        for app, session in sessions.items()
    }
    with collected() as otel:
        sinks["a"].write(frame(sessions["a"], 1, 2, 3, value="a0"), 0)
        lost = []
        for version in range(1, ROUNDS + 1):
            reports = race(sinks, sessions, version)
            lost = [r for r in reports if r.results[0].telemetry.conflicts]
            if lost:  # the first round, in every run so far
                break
        assert lost, f"no conflict in {ROUNDS} rounds of two writers on the same keys"
        a = sinks["a"]
        store = {"GET": 4}
        with armed("publish.after_target_commit", lambda: telemetry.count_requests(store)):
            a.pre_commit(frame(sessions["a"], 9, value="staged"), version + 1)
            recovered = DeltaSink(target, "a", engine="spark", spark=sessions["a"]).recover()
        metrics = otel.metrics()
        spans = otel.exporter.get_finished_spans()
    assert sorted(metrics) == sorted(INSTRUMENTS)
    (result,) = recovered.results
    assert result.outcome == "committed"
    assert result.telemetry.requests == {"GET": 4}
    assert (result.telemetry.files_added, result.telemetry.bytes_added or 0) >= (1, 1)
    loser = lost[0]
    (conflict, *_) = loser.results[0].telemetry.conflicts
    assert conflict.winner_app in ("a", "b")
    assert conflict.winner_version is not None
    assert (
        otel.value(
            "deltasink.commit.conflicts", app_id=loser.app_id, winner_app=conflict.winner_app
        )
        >= 1
    )
    assert otel.value("deltasink.committed.version", app_id="a") == version + 1
    assert otel.value("deltasink.pending.versions", app_id="a") == 0
    assert otel.value("deltasink.store.requests", app_id="a", verb="GET") == 4
    assert otel.value("deltasink.bytes", app_id="a", change="added") > 0
    writes = [s for s in spans if s.name == "deltasink.write"]
    assert any(e.name == "deltasink.conflict" for s in writes for e in s.events)
    assert {s.name for s in spans} == {
        "deltasink.write",
        "deltasink.pre_commit",
        "deltasink.recover",
    }


@pytest.mark.delta_spark_full
def test_spark_engine_writers_of_one_machine_take_turns(delta_spark: Any, tmp_path: Path) -> None:
    """The same two writers as above, taking turns at the local target (the default):
    every commit lands on its first attempt, both markers at the last version."""
    target = str(tmp_path / "orders")
    sessions = {app: delta_spark.newSession() for app in ("a", "b")}
    sinks = {
        app: DeltaSink(target, app, UPSERT, engine="spark", spark=session)
        for app, session in sessions.items()
    }
    sinks["a"].write(frame(sessions["a"], 1, 2, 3, value="a0"), 0)
    reports = [r for version in (1, 2, 3) for r in race(sinks, sessions, version)]
    assert [
        (r.results[0].telemetry.attempts, r.results[0].telemetry.conflicts) for r in reports
    ] == [(1, ())] * 6
    assert support.marker(target, "a") == support.marker(target, "b") == 3


def race(sinks: dict[str, DeltaSink], sessions: dict[str, Any], version: int) -> list[Any]:
    """Both sinks write ``version`` of the same keys at the same moment."""
    start = threading.Barrier(len(sinks))
    reports: list[Any] = []
    errors: list[BaseException] = []

    def run(app: str) -> None:
        batch = frame(sessions[app], 1, 2, 3, value=f"{app}{version}")
        start.wait()
        try:
            reports.append(sinks[app].write(batch, version))
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(app,)) for app in sinks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return reports
