"""docs/runbook.md: every command of every section, run against the situation it is for."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from deltasink import CheckpointResetError, DeltaSink, FencedError, MergeSpec, checks
from tests import support

RUNBOOK = Path(__file__).resolve().parents[1] / "docs" / "runbook.md"
DOC_TARGET = "/lake/silver/orders"
UPSERT = MergeSpec(keys=["id"])


def sections() -> dict[str, list[str]]:
    """Heading -> the deltasink commands of its ```bash blocks."""
    found: dict[str, list[str]] = {}
    heading = ""
    in_bash = False
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("```bash"):
            in_bash = True
        elif line.startswith("```"):
            in_bash = False
        elif in_bash and line.startswith("deltasink "):
            found.setdefault(heading, []).append(line)
    return found


def run(command: str, target: str) -> tuple[int, str]:
    from deltasink.cli import app

    args = shlex.split(command.replace(DOC_TARGET, target))[1:]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.output


def batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "value": [f"v{i}" for i in ids]})


def test_every_section_is_covered() -> None:
    assert set(sections()) == {
        "The job crashed",
        "A version is quarantined",
        "Two writers with the same app_id",
        "I need to re-run a day",
        "I lost or changed my checkpoint",
        "Housekeeping",
        "Retiring an app id",
        "The target lost its markers (`MarkerLostError`)",
        "A staged version does not fit the target",
    }


def test_the_job_crashed(target: str) -> None:
    job = DeltaSink(target, "orders-ingest", UPSERT)
    job.write(batch(1), 0)
    job.pre_commit(batch(2), 1)
    job.pre_commit(batch(3), 2)  # ... and the job dies
    status, recover = sections()["The job crashed"]
    code, output = run(status, target)
    assert code == 0
    assert "pending versions" in output
    code, output = run(recover, target)
    assert code == 0
    assert "committed version is now 2" in output
    assert support.ids(target) == [1, 2, 3]


def test_i_lost_my_checkpoint(tmp_path: Path, target: str) -> None:
    """A Kafka-fed stream's checkpoint (Spark's format) is lost: offsets say where the
    new query starts; it resumes right after the committed version."""
    from tests.test_origin import Checkpoint

    old, new = Checkpoint(tmp_path / "old"), Checkpoint(tmp_path / "new")
    job = DeltaSink(target, "orders-ingest", UPSERT)
    for n in (0, 1):
        old.offsets(n, {"orders": {"0": 10 * (n + 1)}})
        job.foreach_batch(batch(n), n, checkpoint=old.root)
    new.offsets(0, {"orders": {"0": 20}})
    with pytest.raises(CheckpointResetError, match="up to 1"):
        job.foreach_batch(batch(2), 0, checkpoint=new.root)
    (offsets,) = sections()["I lost or changed my checkpoint"]
    code, output = run(offsets, target)
    assert code == 0
    assert "committed version 1" in output
    assert """startingOffsets", '{"orders":{"0":20}}'""" in output
    code, output = run(offsets + " --json", target)
    assert code == 0
    assert json.loads(output)["starting"][0]["startingOffsets"] == '{"orders":{"0":20}}'
    job.foreach_batch(batch(2), 0, resume=True, checkpoint=new.root)
    assert support.ids(target) == [0, 1, 2]
    assert support.marker(target, "orders-ingest") == 2


def test_i_lost_my_file_source_checkpoint(tmp_path: Path, target: str) -> None:
    """A file source: the same run again with resume, no file moved, every row once."""
    import shutil

    from tests.streams import FileStream, Landing, micro_batch

    landing = Landing(tmp_path / "in")
    for _ in range(2):
        landing.add(2)
    job = DeltaSink(target, "orders-ingest", MergeSpec(mode="append"))

    def run_stream(resume: bool) -> None:
        stream = FileStream(tmp_path / "ck", landing, max_files=None)
        while (planned := stream.next_batch()) is not None:
            n, files = planned
            job.foreach_batch(micro_batch(landing, files), n, resume=resume, checkpoint=stream.root)
            stream.commit(n)

    run_stream(resume=False)
    shutil.rmtree(tmp_path / "ck")
    landing.add(2)
    with pytest.raises(CheckpointResetError, match="up to 0"):
        run_stream(resume=False)
    run_stream(resume=True)
    assert support.ids(target) == landing.ids()


def test_a_version_is_quarantined(target: str) -> None:
    job = DeltaSink(target, "orders-ingest", UPSERT, checks=[checks.row_count_between(1)])
    job.write(batch(1), 6)
    job.pre_commit(batch(), 7)  # empty: fails the check
    job.pre_commit(batch(8), 8)
    assert job.commit(8).quarantined_versions == [7]
    status, abort, recover = sections()["A version is quarantined"]
    code, output = run(status, target)
    assert code == 6  # status says so in its exit code too
    assert "quarantined" in output
    assert run(abort, target)[0] == 0
    code, output = run(recover, target)
    assert code == 0
    assert support.ids(target) == [1, 8]


def test_two_writers(target: str) -> None:
    old = DeltaSink(target, "orders-ingest", UPSERT)
    old.write(batch(1), 0)
    (status,) = sections()["Two writers with the same app_id"]
    assert run(status, target)[0] == 0  # looking does not take over
    old.write(batch(2), 1)
    new = DeltaSink(target, "orders-ingest", UPSERT)
    new.recover()
    with pytest.raises(FencedError):
        old.write(batch(3), 2)
    new.write(batch(3), 2)
    assert support.ids(target) == [1, 2, 3]


def test_rerun_a_day(target: str) -> None:
    daily = DeltaSink(target, "orders-daily", UPSERT)
    daily.write(batch(1, 2), 20261121)
    assert daily.write(batch(1, 2), 20261121).results == ()  # a plain re-run: no-op
    backfill = DeltaSink(target, "orders-backfill", UPSERT)
    backfill.write(pa.table({"id": [1, 2], "value": ["fixed", "fixed"]}), 20261121)
    history, status = sections()["I need to re-run a day"]
    code, output = run(history + " --json", target)
    assert code == 0
    assert [e["version"] for e in json.loads(output)] == [20261121]
    code, output = run(status + " --json", target)
    assert code == 0
    assert json.loads(output)["committed_version"] == 20261121
    assert support.rows(target) == [{"id": 1, "value": "fixed"}, {"id": 2, "value": "fixed"}]


def test_housekeeping(target: str) -> None:
    job = DeltaSink(target, "orders-ingest", UPSERT)
    job.pre_commit(batch(1), 0)  # staged (write() would publish it directly)
    job.commit(0)
    (gc,) = sections()["Housekeeping"]
    code, output = run(gc, target)
    assert code == 0
    assert re.search(r"removed 0 file\(s\) older than 168 h", output)
    code, output = run(gc.replace("168", "0") + " --dry-run", target)
    assert code == 0
    assert "would remove 1 file(s)" in output


def test_the_target_lost_its_markers(target: str) -> None:
    import shutil

    from deltalake import DeltaTable, write_deltalake

    from deltasink._faults import armed

    def clean_up_fails(**_: object) -> None:
        raise OSError("clean-up failed")

    job = DeltaSink(target, "orders-ingest", UPSERT)
    job.write(batch(1), 40)
    job.write(batch(2), 41)
    job.pre_commit(batch(3), 42)
    with armed("discard.before_log_commit", clean_up_fails):
        assert job.commit(42).committed_versions == [42]  # its clean-up did not run
    rows = DeltaTable(target).to_pyarrow_table()
    shutil.rmtree(target)
    write_deltalake(target, rows)  # rebuilt from a copy: holds version 42, no markers
    code, output = run(f"deltasink recover {DOC_TARGET} --app orders-ingest", target)
    assert code == 4
    assert "may already be in the target" in output
    assert support.ids(target) == [1, 2, 3]
    abort, recover = sections()["The target lost its markers (`MarkerLostError`)"]
    assert run(abort, target)[0] == 0  # the copy holds it
    assert run(recover, target)[0] == 0
    DeltaSink(target, "orders-ingest", UPSERT).write(batch(4), 43)
    assert support.ids(target) == [1, 2, 3, 4]


def test_a_staged_version_does_not_fit_the_target(target: str) -> None:
    from deltalake import DeltaTable, Field

    from tests.contract import stage_as_an_old_release

    job = DeltaSink(target, "orders-ingest", UPSERT)
    job.pre_commit(batch(1), 6)
    extra = pa.table({"id": pa.array([2], pa.int64()), "value": ["v2"], "b": [20]})
    stage_as_an_old_release(job, extra, 7)  # staged by a release without the check
    (recover,) = sections()["A staged version does not fit the target"]
    code, output = run(recover, target)
    assert code == 4
    flat = " ".join(output.split())
    assert "column 'b' (int64) is not in target" in flat
    assert "Staged version 7 cannot be published as it is" in flat
    assert support.marker(target, "orders-ingest") == 6
    DeltaTable(target).alter.add_columns(Field("b", "long", nullable=True))
    code, output = run(recover, target)
    assert code == 0
    assert "committed version is now 7" in output
    assert [(r["id"], r["b"]) for r in support.rows(target)] == [(1, None), (2, 20)]


def test_retiring_an_app_id(target: str) -> None:
    from tests.test_docs import blocks

    job = DeltaSink(target, "orders-ingest", UPSERT)
    job.write(batch(1), 0)
    job.pre_commit(batch(2), 1)  # ... and the job is stopped for good
    status, recover, as_json = sections()["Retiring an app id"]
    code, output = run(status, target)
    assert (code, "pending versions" in output) == (0, True)
    assert run(recover, target)[0] == 0
    code, output = run(as_json, target)
    data = json.loads(output)
    assert (code, data["pending_versions"], data["quarantined"]) == (0, [], [])
    (remove,) = [b for b in blocks() if b.marker.get("situation") == "retire"]
    assert data["staging"] == target + "_deltasink_staging/orders-ingest"
    remove.run_shell({DOC_TARGET: target})
    assert not Path(data["staging"]).exists()
    assert support.ids(target) == [1, 2]  # the rows stay, and the marker with them
    assert support.marker(target, "orders-ingest") == 1
    code, output = run(status, target)
    assert code == 0  # still known by its marker; an app id that comes back continues
    DeltaSink(target, "orders-ingest", UPSERT).write(batch(3), 2)
    assert support.ids(target) == [1, 2, 3]
