"""Every commit observable, on the embedded engine: the write's report, OpenTelemetry's
metrics and spans (read from the SDK's in-memory reader and exporter) and the commit's
own metadata (``deltasink history``), after a real write, a conflict lost to another
app and a recovery. The spark engine's twin is ``tests/test_telemetry_jvm.py``, which
also reads an embedded-engine commit with Spark's ``DESCRIBE HISTORY``."""

from __future__ import annotations

import io
import json
import socket
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from rich.console import Console
from rich.progress import Progress
from typer.testing import CliRunner

from deltasink import DeltaSink, MergeSpec
from deltasink._faults import armed
from deltasink.cli import RecoverProgress
from deltasink.cli import app as cli_app
from deltasink.core import telemetry
from deltasink.observe import INSTRUMENTS
from tests import forks, support
from tests.otel import Collected, collected
from tests.test_docs import of_kind

UPSERT = MergeSpec(keys=["id"])


def commit_of(target: str, app_id: str, version: int) -> int:
    """The Delta version of the target commit carrying ``txn(app_id, version)``."""
    (delta_version,) = support.txn_commits(target, app_id)[version]
    return delta_version


def bytes_added(target: str, delta_version: int) -> int:
    """The bytes of the files commit ``delta_version`` added (its raw log entry)."""
    actions = support.log_commits(target)[delta_version]
    return sum(int(a["add"]["size"]) for a in actions if "add" in a)


def batch(*ids: int, value: str = "v") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "value": [value] * len(ids)})


def sink(target: str, app_id: str) -> DeltaSink:
    return DeltaSink(target, app_id, UPSERT, engine="embedded")


def conflicting(rival: DeltaSink, *, ids: tuple[int, ...]) -> Any:
    """A fault-point action that, the first time it runs, lets ``rival`` commit a MERGE
    of ``ids`` first: the attempt under way read the target before it and loses."""
    fired: list[bool] = []

    def action() -> None:
        if not fired:
            fired.append(True)
            rival.write(batch(*ids, value="rival"), 0)

    return action


def test_a_write_a_conflict_and_a_recovery_are_observable(tmp_path: Path) -> None:
    target = str(tmp_path / "orders")
    a, b = sink(target, "a"), sink(target, "b")
    with collected() as otel:
        first = a.write(batch(1, 2, 3, 4), 0)
        rival = conflicting(b, ids=(1,))
        store = {"GET": 3, "PUT": 2}  # a store instrumentation would report these
        with (
            armed("publish.before_target_commit", rival),
            armed("publish.after_target_commit", lambda: telemetry.count_requests(store)),
        ):
            lost = a.write(batch(2, 5, value="a1"), 1)
        a.pre_commit(batch(3, value="a2"), 2)
        staged = a.commit(2)  # validated and staged by this sink: both phases counted
        a.pre_commit(batch(4, value="a3"), 3)
        a.pre_commit(batch(1, value="a4"), 4)
        waiting = a.status()
        # another process, one commit per version: no stage phase, a span per commit
        recovered = DeltaSink(target, "a", engine="embedded", coalesce=False).recover()
        assert_reports(target, first.results[0], lost.results[0], recovered.results[0])
        assert set(staged.results[0].telemetry.phases) == {"validate", "stage", "publish", "retry"}
        assert waiting.pending_versions == [3, 4]
        assert recovered.committed_versions == [3, 4]
        assert recovered.pending_versions == ()
        assert recovered.lag_s is None
        assert_metrics(otel, rival_version=commit_of(target, "b", 0))
        assert_spans(otel)
    assert_history(target)


def assert_reports(target: str, first: Any, lost: Any, recovered: Any) -> None:
    assert first.telemetry.attempts == 1
    assert first.telemetry.conflicts == ()
    assert set(first.telemetry.phases) == {"validate", "publish", "retry"}
    assert (first.telemetry.files_added, first.telemetry.files_removed) == (1, 0)
    assert first.telemetry.bytes_added == bytes_added(target, first.target_version)
    cost = lost.telemetry
    assert cost.attempts == 2
    (conflict,) = cost.conflicts
    assert conflict.attempt == 1
    assert conflict.winner_app == "b"
    assert conflict.winner_version == commit_of(target, "b", 0)
    assert conflict.winner_version == lost.target_version - 1
    assert cost.phases["retry"] > 0
    assert (cost.files_added, cost.files_removed) == (1, 1)
    assert cost.bytes_removed == bytes_added(target, conflict.winner_version)  # b rewrote it
    assert dict(cost.requests) == {"GET": 3, "PUT": 2}
    assert set(recovered.telemetry.phases) == {"publish", "retry"}  # staged by another call
    assert recovered.telemetry.attempts == 1


def assert_metrics(otel: Collected, *, rival_version: int) -> None:
    found = otel.metrics()
    assert sorted(found) == sorted(INSTRUMENTS)
    assert otel.value("deltasink.commits", app_id="a", outcome="committed") == 5
    assert otel.value("deltasink.commits", app_id="b", outcome="committed") == 1
    assert otel.value("deltasink.commit.attempts", app_id="a")[0] == 5  # commits
    assert otel.value("deltasink.commit.attempts", app_id="a")[1] == 6  # attempts
    assert otel.value("deltasink.commit.conflicts", app_id="a", winner_app="b") == 1
    for phase in ("validate", "stage", "publish", "retry"):
        count, seconds = otel.value("deltasink.commit.duration", app_id="a", phase=phase)
        assert count >= 1
        assert seconds >= 0
    assert otel.value("deltasink.rows", app_id="a", change="inserted") == 5
    assert otel.value("deltasink.rows", app_id="a", change="updated") == 4
    assert otel.value("deltasink.files", app_id="a", change="added") == 5
    assert otel.value("deltasink.files", app_id="a", change="removed") == 4
    assert otel.value("deltasink.bytes", app_id="a", change="added") > 0
    assert otel.value("deltasink.bytes", app_id="a", change="removed") > 0
    assert otel.value("deltasink.store.requests", app_id="a", verb="GET") == 3
    assert otel.value("deltasink.store.requests", app_id="b", verb="PUT") == 2
    assert otel.value("deltasink.target.version", app_id="a") == rival_version + 4
    assert otel.value("deltasink.committed.version", app_id="a") == 4
    assert otel.value("deltasink.pending.versions", app_id="a") == 0
    assert otel.value("deltasink.pending.age", app_id="a") == 0


def assert_spans(otel: Collected) -> None:
    """A call that made one commit describes it on its own span (the conflict as an
    event); one that made several has a child span per commit."""
    calls = [s.name for s in otel.exporter.get_finished_spans() if s.name != "deltasink.publish"]
    assert sorted(calls) == sorted(
        ["deltasink.write"] * 3
        + ["deltasink.pre_commit"] * 3
        + ["deltasink.commit", "deltasink.recover"]
    )
    (lost,) = [s for s in otel.spans("deltasink.write") if s.events]
    assert lost.attributes is not None
    assert lost.attributes["deltasink.app_id"] == "a"
    assert lost.attributes["deltasink.attempts"] == 2
    assert lost.attributes["deltasink.versions"] == (1,)
    (event,) = lost.events
    assert event.name == "deltasink.conflict"
    assert event.attributes is not None
    assert event.attributes["deltasink.winner_app"] == "b"
    (recover,) = otel.spans("deltasink.recover")
    children = otel.spans("deltasink.publish")
    assert [c.attributes["deltasink.versions"] for c in children if c.attributes] == [(3,), (4,)]
    assert {c.parent.span_id for c in children if c.parent} == {recover.context.span_id}


def assert_history(target: str) -> None:
    """The commit records what it cost (the key delta-rs writes, the ``userMetadata``
    Spark shows) and ``deltasink history`` reads it back."""
    info = support.commit_info(target, commit_of(target, "a", 1))
    recorded = info["deltasink"]
    assert recorded["app"] == "a"
    assert recorded["versions"] == [1]
    assert recorded["attempt"] == 2
    assert recorded["conflicts"][0]["winner_app"] == "b"
    assert set(recorded["phases"]) == {"validate", "retry"}
    text = info["userMetadata"]
    assert text.startswith("deltasink commit app=a version=1 deltasink={")
    assert json.loads(text.partition(" deltasink=")[2]) == recorded
    result = CliRunner().invoke(cli_app, ["history", target, "--app", "a", "--json"])
    assert result.exit_code == 0, result.output
    entries = {tuple(e["versions"]): e for e in json.loads(result.output)}
    assert entries[(1,)]["telemetry"] == recorded
    assert entries[(1,)]["files_added"] == 1
    assert entries[(1,)]["files_removed"] == 1
    table = CliRunner().invoke(cli_app, ["history", target, "--app", "a", "--wide"])
    assert table.exit_code == 0, table.output
    assert "att" in table.output  # the attempts: --wide's column


@pytest.mark.parametrize("setting", ["off", "0"])
def test_telemetry_off_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    """``DELTASINK_TELEMETRY=off``: no metrics, no spans, no cost in the commit."""
    monkeypatch.setenv("DELTASINK_TELEMETRY", setting)
    target = str(tmp_path / "orders")
    with collected() as otel:
        report = sink(target, "a").write(batch(1), 0)
    assert otel.metrics() == {}
    assert otel.exporter.get_finished_spans() == ()
    assert "deltasink" not in support.commit_info(target, 0)
    assert report.results[0].telemetry.attempts == 1


def test_recover_on_a_terminal_shows_what_a_coalesced_commit_applies(tmp_path: Path) -> None:
    """``deltasink recover``'s progress: before the coalesced commit of three pending
    versions it names them and their rows; then all three are counted."""
    target = str(tmp_path / "orders")
    a = sink(target, "a")
    for version in range(3):
        a.pre_commit(batch(version, 10 + version), version)
    seen: list[str] = []

    class Watched(RecoverProgress):
        def starting(self, staged: Any) -> None:
            super().starting(staged)
            seen.append(str(self.bar.tasks[0].description))

    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with Progress(console=console) as bar:
        report = sink(target, "a").recover(progress=Watched(bar, 3))
        done = bar.tasks[0].completed
    assert report.committed_versions == [0, 1, 2]
    assert seen == ["committing versions 0..2 in one commit (6 rows)"]
    assert done == 3


def _scrape_job(setup: str, port: int, target: str) -> None:
    """docs/deploy.md's set-up as written (its port replaced), a job's writes, a scrape."""
    exec(compile(setup.replace("9464", str(port)), "deploy.md", "exec"), {})
    writer = DeltaSink(target, "orders-ingest", UPSERT, engine="embedded")
    writer.write(batch(1, 2), 0)
    writer.pre_commit(batch(3), 1)
    writer.status()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        print(response.read().decode())


def test_the_prometheus_scrape_of_the_deployment_guide(tmp_path: Path) -> None:
    """docs/deploy.md's Prometheus set-up, run in a process of its own (it sets the
    global meter provider) and scraped over HTTP: the names the guide promises; its
    ``prometheus.yml`` scrapes the port the set-up serves."""
    setup, config = (b.code for b in of_kind("otel"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, text = forks.run(_scrape_job, setup, port, str(tmp_path / "orders"))
    assert code == 0, text
    app = 'deltasink_app_id="orders-ingest"'
    lines = [line for line in text.splitlines() if app in line]
    assert any(
        line.startswith("deltasink_commits_total{") and 'deltasink_outcome="committed"' in line
        for line in lines
    ), text
    assert any(line.startswith("deltasink_commit_duration_seconds_bucket{") for line in lines)
    (pending,) = [line for line in lines if line.startswith("deltasink_pending_versions")]
    assert pending.endswith(" 1.0")
    assert any(line.startswith("deltasink_pending_age_seconds{") for line in lines)
    (scrape,) = yaml.safe_load(config)["scrape_configs"]
    assert scrape["static_configs"][0]["targets"][0].endswith(":9464")


def test_a_streaming_micro_batch_is_observed(tmp_path: Path) -> None:
    """``foreach_batch`` (what a stream calls) is a span of its own, and its commit is
    counted like a write's."""
    writer = sink(str(tmp_path / "orders"), "stream")
    with collected() as otel:
        writer.foreach_batch(batch(1, 2), 0)
        writer.foreach_batch(batch(3), 1)
    assert [s.name for s in otel.exporter.get_finished_spans()] == ["deltasink.foreach_batch"] * 2
    assert otel.value("deltasink.commits", app_id="stream", outcome="committed") == 2
    assert otel.value("deltasink.committed.version", app_id="stream") == 1
