"""The ``deltasink`` command, on real tables: output, JSON and exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from deltasink import DeltaSink, FencedError, MergeSpec, cli
from deltasink.cli import EXIT_COMMIT, EXIT_CONFIG, EXIT_QUARANTINED, EXIT_REFUSED, app
from tests import support

runner = CliRunner()


@pytest.fixture
def job(target: str) -> DeltaSink:
    """A writer with version 0 committed (staged first) and versions 1, 2 pending."""
    sink = DeltaSink(target, "orders", MergeSpec(keys=["id"]))
    sink.pre_commit(pa.table({"id": [1, 2], "value": ["a", "b"]}), 0)
    sink.commit(0)
    sink.pre_commit(pa.table({"id": [3], "value": ["c"]}), 1)
    sink.pre_commit(pa.table({"id": [4, 5], "value": ["d", "e"]}), 2)
    return sink


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_status_table(job: DeltaSink) -> None:
    code, output = invoke("status", job.target, "--app", "orders")
    assert code == 0
    assert "committed version" in output
    assert "│ 0" in output
    assert "pending (staged, not committed)" in output
    lines = [line for line in output.splitlines() if line.startswith("│")]
    assert any(line.split("│")[1].strip() == "2" and "2" in line.split("│")[2] for line in lines)
    rows = {c[1].strip(): c[2].strip() for c in (line.split("│") for line in lines) if len(c) > 3}
    assert rows["pending versions"] == "[1, 2]"  # a list, as status().pending_versions
    assert rows["merge"] == "upsert keys=['id']"


def test_status_shows_every_merge_setting_and_no_pending_as_none(target: str) -> None:
    spec = MergeSpec(keys=["id"], sequence_by="ts", delete_when="op = 'D'")
    DeltaSink(target, "cdc", spec).write(pa.table({"id": [1], "ts": [5], "op": ["U"]}), 0)
    code, output = invoke("status", target, "--app", "cdc")
    assert code == 0
    data = json.loads(invoke("status", target, "--app", "cdc", "--json")[1])
    assert data["pending_versions"] == []
    from deltasink.cli.output import merge_text

    assert merge_text(spec) == "upsert keys=['id'] sequence_by='ts' delete_when=\"op = 'D'\""
    cells = [c.strip() for line in output.splitlines() for c in line.split("│")]
    assert cells[cells.index("pending versions") + 1] == "none"
    assert "sequence_by='ts'" in " ".join(output.split())


def test_status_json(job: DeltaSink) -> None:
    code, output = invoke("status", job.target, "--app", "orders", "--json")
    assert code == 0
    data = json.loads(output)
    assert data["committed_version"] == 0
    assert data["pending_versions"] == [1, 2]
    assert [p["rows"] for p in data["pending"]] == [1, 2]
    assert data["merge"]["keys"] == ["id"]
    assert data["engine"] == "embedded"


def test_status_finds_every_app(job: DeltaSink) -> None:
    DeltaSink(job.target, "other", MergeSpec(mode="append")).write(pa.table({"id": [9]}), 4)
    code, output = invoke("status", job.target, "--json")
    assert code == 0
    assert [(s["app_id"], s["committed_version"]) for s in json.loads(output)] == [
        ("orders", 0),
        ("other", 4),
    ]


def test_recover_commits_pending_versions(job: DeltaSink) -> None:
    code, output = invoke("recover", job.target, "--app", "orders", "--json")
    assert code == 0
    data = json.loads(output)
    assert data["committed_versions"] == [1, 2]
    assert data["committed_version"] == 2
    assert support.ids(job.target) == [1, 2, 3, 4, 5]
    code, output = invoke("recover", job.target, "--app", "orders")
    assert code == 0
    assert "nothing to recover; committed version is 2" in output


def test_recover_human_output(job: DeltaSink) -> None:
    code, output = invoke("recover", job.target, "--app", "orders")
    assert code == 0
    assert "committed version is now 2" in output


def test_abort(job: DeltaSink) -> None:
    code, output = invoke("abort", job.target, "2", "--app", "orders", "--json")
    assert code == 0
    assert json.loads(output) == {"aborted": [2], "not_staged": []}
    assert job.status().pending_versions == [1]
    code, output = invoke("abort", job.target, "0", "--app", "orders")
    assert code == EXIT_REFUSED
    assert "AlreadyCommittedError" in output


def test_abort_of_a_version_that_is_not_staged_is_refused(job: DeltaSink) -> None:
    # A mistyped version: exit 5 saying so, never a silent exit 0.
    result = runner.invoke(app, ["abort", job.target, "99", "--app", "orders"])
    assert result.exit_code == EXIT_REFUSED
    assert " ".join(result.output.split()) == (
        "not staged: version(s) [99] of app 'orders': nothing to abort "
        "(pending versions [1, 2], committed version 0)."
    )
    # With versions that are staged too: those are aborted, the exit code still says 5.
    code, output = invoke("abort", job.target, "2", "99", "--app", "orders", "--json")
    assert code == EXIT_REFUSED
    assert json.loads(output) == {"aborted": [2], "not_staged": [99]}
    assert job.status().pending_versions == [1]
    assert job.status().committed_version == 0
    # Aborting it again is refused the same way (it is no longer staged).
    code, output = invoke("abort", job.target, "2", "--app", "orders", "--json")
    assert code == EXIT_REFUSED
    assert json.loads(output) == {"aborted": [], "not_staged": [2]}
    DeltaSink(job.target, "orders").recover()  # the CLI's abort took the writer role
    assert support.ids(job.target) == [1, 2, 3]


def test_history(job: DeltaSink) -> None:
    job.recover()
    code, output = invoke("history", job.target, "--app", "orders", "--json")
    assert code == 0
    assert [(e["versions"], e["target_version"]) for e in json.loads(output)] == [
        ([1, 2], 1),  # the two pending versions were coalesced into one commit
        ([0], 0),
    ]
    code, output = invoke("history", job.target, "--app", "orders")
    assert code == 0
    assert "WRITE" in output  # inserts of new keys take the append fast path


def test_config_error_exit_code(tmp_path: Path) -> None:
    code, output = invoke("status", str(tmp_path / "nothing"), "--json")
    assert code == EXIT_CONFIG
    assert json.loads(output)["error"] == "ConfigurationError"


@pytest.mark.parametrize("command", ["status", "recover", "history", "gc", "abort"])
def test_a_writer_that_does_not_exist_is_an_error_not_nothing_pending(
    job: DeltaSink, tmp_path: Path, command: str
) -> None:
    extra = ["1"] if command == "abort" else []
    # A mistyped app on an existing target: exit 3, naming the writers there are.
    code, output = invoke(command, job.target, *extra, "--app", "orderz", "--json")
    assert code == EXIT_CONFIG, output
    message = json.loads(output)["message"]
    assert message.startswith("no writer 'orderz' on ")
    assert "the target exists" in message
    assert "Writers found for this target: orders." in message
    # A mistyped target: exit 3, and nothing is created there.
    missing = tmp_path / "nowhere" / "orders"
    code, output = invoke(command, str(missing), *extra, "--app", "orders", "--json")
    assert code == EXIT_CONFIG, output
    assert "the target does not exist" in json.loads(output)["message"]
    assert not missing.parent.exists()


def test_version_json() -> None:
    from importlib import metadata

    code, output = invoke("version", "--json")
    assert code == 0
    data = json.loads(output)
    assert data["deltasink"] == metadata.version("deltasink")
    assert data["deltalake"] == metadata.version("deltalake")
    assert data["python"] == ".".join(map(str, sys.version_info[:3]))
    code, output = invoke("version")
    assert (code, output.strip()) == (0, data["deltasink"])
    code, output = invoke("--version")  # as every command-line tool spells it
    assert (code, output.strip()) == (0, f"deltasink {data['deltasink']}")


def test_commit_failure_exit_code(job: DeltaSink) -> None:
    # Another tool changed the target's column type: the pending versions no longer fit.
    shutil.rmtree(job.target)
    from deltalake import write_deltalake

    write_deltalake(job.target, pa.table({"id": [1], "value": [1.5]}))
    code, output = invoke("recover", job.target, "--app", "orders", "--json")
    assert code == EXIT_COMMIT
    data = json.loads(output)
    assert data["error"] == "CommitError"
    assert "version 1" in data["message"]
    assert job.status().pending_versions == [1, 2]


def test_entry_point_is_installed(job: DeltaSink) -> None:
    exe = Path(sys.executable).with_name("deltasink")
    result = subprocess.run(
        [str(exe), "status", job.target, "--app", "orders", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["pending_versions"] == [1, 2]


def test_quarantined_versions_in_status_and_recover(target: str) -> None:
    from deltasink import checks

    sink = DeltaSink(target, "wap", MergeSpec(keys=["id"]), checks=[checks.row_count_between(1)])
    sink.write(pa.table({"id": [1], "value": ["a"]}), 0)
    sink.pre_commit(
        pa.table({"id": pa.array([], pa.int64()), "value": pa.array([], pa.string())}), 1
    )
    sink.pre_commit(pa.table({"id": [3], "value": ["c"]}), 2)
    assert sink.commit(2).quarantined_versions == [1]
    code, output = invoke("status", target, "--app", "wap", "--json")
    assert code == EXIT_QUARANTINED  # the status is printed, and the exit code says so
    data = json.loads(output)
    assert data["pending_versions"] == [1, 2]
    assert data["quarantined"] == [
        {
            "version": 1,
            "reason": "check row_count_between(1, None) failed: 0 rows, expected "
            "between 1 and None",
        }
    ]
    code, output = invoke("status", target, "--app", "wap")
    assert code == EXIT_QUARANTINED
    assert "quarantined" in output
    assert "row_count_betw" in output  # the reason (wrapped by the 80-column table)
    code, output = invoke("recover", target, "--app", "wap", "--json")
    assert code == EXIT_QUARANTINED
    assert json.loads(output)["quarantined_versions"] == [1]
    code, _ = invoke("abort", target, "1", "--app", "wap")
    assert code == 0
    code, output = invoke("recover", target, "--app", "wap", "--json")
    assert code == 0
    assert json.loads(output)["committed_versions"] == [2]


def test_gc(job: DeltaSink) -> None:
    job.recover()
    code, output = invoke("gc", job.target, "--app", "orders", "--dry-run", "--json")
    assert code == 0
    assert json.loads(output)["dry_run"] is True
    assert json.loads(output)["files"] == []  # younger than the default 168 h
    code, output = invoke("gc", job.target, "--app", "orders", "--retention-hours", "0")
    assert code == 0
    assert "removed 3 file(s) older than 0 h" in output
    assert support.staged_files_on_disk(job.staging) == []


def test_gc_negative_retention_is_a_usage_error(job: DeltaSink) -> None:
    job.recover()
    files = support.staged_files_on_disk(job.staging)
    assert len(files) == 3
    result = runner.invoke(app, ["gc", job.target, "--app", "orders", "--retention-hours", "-5"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--retention-hours'" in result.output
    assert support.staged_files_on_disk(job.staging) == files  # nothing removed


def run_at_80_columns(*args: str) -> str:
    """The command's output in a fresh process on an 80-column terminal."""
    env = {**os.environ, "COLUMNS": "80", "LINES": "50"}
    env.pop("TERMINAL_WIDTH", None)
    result = subprocess.run(
        [sys.executable, "-c", "from deltasink.cli import main; main()", *args],
        cwd=Path(__file__).resolve().parents[1],  # this checkout's package
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_output_fits_80_columns_without_losing_text(job: DeltaSink) -> None:
    helps = run_at_80_columns("recover", "--help")
    assert "--skip-unverifiable-checks" in helps  # not cut to "--skip-unverifiable-che…"
    assert all(len(line) <= 80 for line in helps.splitlines())
    assert "quarantined, exit 6); refuses (exit 5)" in " ".join(helps.split())

    # The staging path is long: it wraps inside the table, never cut with "…".
    status = run_at_80_columns("status", job.target, "--app", "orders")
    assert "…" not in status
    rows = [line.split("│") for line in status.splitlines() if line.startswith("│")]
    start = next(i for i, cells in enumerate(rows) if cells[1].strip() == "staging")
    pieces = [rows[start][2].strip()]
    for cells in rows[start + 1 :]:
        if cells[1].strip():
            break
        pieces.append(cells[2].strip())
    assert "".join(pieces) == job.staging

    # gc lists each file name whole, on one line (copied and pasted by operators);
    # a daily job's yyyymmdd versions make them longer than the terminal.
    daily = DeltaSink(job.target, "daily", MergeSpec(keys=["id"]))
    daily.pre_commit(pa.table({"id": [7], "value": ["g"]}), 20250101)
    daily.pre_commit(pa.table({"id": [8], "value": ["h"]}), 20250102)
    daily.recover()
    gc_out = run_at_80_columns(
        "gc", job.target, "--app", "daily", "--retention-hours", "0", "--dry-run"
    )
    assert gc_out.splitlines()[0] == "would remove 2 file(s) older than 0 h"
    listed = [line.strip() for line in gc_out.splitlines()[1:]]
    assert sorted(listed) == support.staged_files_on_disk(daily.staging)
    assert all(len(name) > 78 for name in listed)  # longer than the terminal


@pytest.mark.jvm
@pytest.mark.delta_spark_full  # a JVM of its own: make test-delta-spark
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17 for classic PySpark")
def test_spark_status_on_a_session_without_delta_is_one_configuration_error() -> None:
    """``deltasink --spark`` opens a classic session (here: local, no Delta jars or
    confs): exit 3 with one line naming the missing Delta configuration, before any
    statement (it was an 80-line traceback of a Spark parse error, exit 1)."""
    drop = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    command = ["--spark", "status", "cat.sch.tbl", "--app", "orders", "--json"]
    result = subprocess.run(
        [sys.executable, "-c", "from deltasink.cli import main; main()", *command],
        cwd=Path(__file__).resolve().parents[1],  # this checkout's package
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=240,
    )
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    error = json.loads(result.stdout)
    assert error["error"] == "ConfigurationError"
    assert error["message"] == (
        "the spark engine needs a Delta-enabled Spark session, and this one has no Delta "
        "configuration: spark.sql.extensions is unset (needs "
        "io.delta.sql.DeltaSparkSessionExtension) and spark.sql.catalog.spark_catalog is "
        "unset (needs org.apache.spark.sql.delta.catalog.DeltaCatalog). Start the session "
        "with delta-spark configured (e.g. delta.configure_spark_with_delta_pip), run on "
        "Databricks, or write a path table with the embedded engine."
    )


def test_fenced_exit_code(job: DeltaSink) -> None:
    job.recover()  # this object now holds the writer role ...
    code, _ = invoke("recover", job.target, "--app", "orders")  # ... an operator takes over
    assert code == 0
    with pytest.raises(FencedError):
        job.pre_commit(pa.table({"id": [9], "value": ["z"]}), 5)


# -- issue 11, defect 4: the operator's recover runs the job's checks ---------------------


def _quarantine_candidate(target: str, checks_: list[Any]) -> DeltaSink:
    job = DeltaSink(target, "job", MergeSpec(keys=["id"]), checks=checks_)
    job.write(pa.table({"id": [1], "amount": [5]}), 0)
    job.pre_commit(pa.table({"id": [2], "amount": [-1]}), 1)  # fails the checks
    return job  # ... and the job dies before committing


def test_cli_recover_quarantines_what_the_jobs_recover_would(target: str) -> None:
    from deltasink import checks

    _quarantine_candidate(target, [checks.no_nulls("id"), checks.expect("amount >= 0")])
    code, output = invoke("recover", target, "--app", "job")
    assert code == 6  # quarantined, not published
    assert "quarantined" in output
    assert support.ids(target) == [1]
    assert DeltaSink(target, "job").status().quarantined == {
        1: "check expect('amount >= 0') failed: returned 1 row(s) (rows not quoted; "
        "DeltaSink(..., check_samples=True) quotes them)"
    }


def test_cli_recover_refuses_checks_it_cannot_run_unless_told(target: str) -> None:
    from deltasink import checks

    def positive(batch: Any) -> str | None:
        return None if pc.min(batch.to_arrow().column("amount")).as_py() >= 0 else "negative"

    _quarantine_candidate(target, [checks.no_nulls("id"), positive])
    code, output = invoke("recover", target, "--app", "job")
    assert code == 5
    assert "UnverifiableChecksError" in output
    assert "positive" in output
    assert support.ids(target) == [1]
    assert DeltaSink(target, "job").status().pending_versions == [1]
    code, output = invoke("recover", target, "--app", "job", "--skip-unverifiable-checks")
    assert code == 0  # the operator's explicit choice: the built-in checks pass
    assert support.ids(target) == [1, 2]


def test_the_recorded_checks_round_trip() -> None:
    from deltasink import checks

    jobs = [
        checks.no_nulls("a", "b"),
        checks.unique("id"),
        checks.row_count_between(1, 10),
        checks.row_count_within(50),
        checks.expect("x > 0", label="positive"),
        checks.sql("SELECT 1 FROM staged WHERE false"),
    ]
    built, opaque = checks.decode(checks.encode([*jobs, len]))
    assert built == tuple(jobs)
    assert opaque == ("len",)


def test_recover_asks_before_fencing_a_live_writer_on_a_terminal(
    job: DeltaSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    result = runner.invoke(app, ["recover", job.target, "--app", "orders"], input="n\n")
    assert result.exit_code == EXIT_REFUSED  # declined: nothing done, not a storage error
    said = " ".join(result.output.split())
    assert "a job still running with this app id is fenced" in said
    assert said.endswith("Continue? [y/N]: n declined: nothing done")
    assert job.status().pending_versions == [1, 2]  # nothing recovered, nobody fenced
    job.pre_commit(pa.table({"id": [6], "value": ["f"]}), 3)
    result = runner.invoke(app, ["recover", job.target, "--app", "orders"], input="y\n")
    assert result.exit_code == 0
    assert support.marker(job.target, "orders") == 3
    with pytest.raises(FencedError):
        job.pre_commit(pa.table({"id": [9], "value": ["z"]}), 5)
    code, _ = invoke("recover", job.target, "--app", "orders", "--yes")  # never asks
    assert code == 0


def test_a_catalog_name_without_spark_says_how_to_open_it() -> None:
    result = CliRunner().invoke(cli.app, ["status", "main.sales.orders", "--app", "a"])
    assert result.exit_code == 3
    assert "catalog table name" in result.output
    assert "deltasink --spark" in result.output


def test_history_is_readable_at_80_columns(target: str) -> None:
    """``deltasink history`` at 80 columns: every header whole (they were cut to
    "vers…" and "targ…"), no cell cut with "…", coalesced daily versions wrapped in
    their cell; ``--wide`` adds the cost and origin columns."""
    from rich.console import Console

    from deltasink.cli.history import HISTORY_COLUMNS, WIDE_COLUMNS, history_table

    daily = DeltaSink(target, "daily", MergeSpec(keys=["id"]))
    daily.write(pa.table({"id": [1], "value": ["a"]}), 20250101)
    daily.pre_commit(pa.table({"id": [1, 2], "value": ["b", "c"]}), 20250102)
    daily.pre_commit(pa.table({"id": [3], "value": ["d"]}), 20250103)
    daily.recover()  # 20250102 and 20250103 coalesced into one commit
    shown = run_at_80_columns("history", target, "--app", "daily")
    assert "…" not in shown
    assert all(len(line) <= 80 for line in shown.splitlines())
    header, *_ = (line for line in shown.splitlines() if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == list(HISTORY_COLUMNS)
    rows = [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in shown.splitlines()
        if line.startswith("│")
    ]
    assert (rows[0][1], rows[0][4]) == ("1", "+2 ~1 -0")  # Delta version 1
    assert "".join(r[0] for r in rows[:-1]).replace(",", ", ") == "20250102, 20250103"
    assert (rows[-1][0], rows[-1][1], rows[-1][4]) == ("20250101", "0", "+1")
    console = Console(width=160, record=True)
    console.print(history_table(daily.history(), "wide", wide=True))
    (wide_header,) = (line for line in console.export_text().splitlines() if "┃" in line)
    names = [cell.strip() for cell in wide_header.strip("┃").split("┃")]
    assert names == list(HISTORY_COLUMNS + WIDE_COLUMNS)
    assert invoke("history", target, "--app", "daily", "--wide")[0] == 0
