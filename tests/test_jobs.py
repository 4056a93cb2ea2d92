"""The job templates in jobs/ run locally on the embedded engine and do what their
docstrings say (exact target contents, markers, exit codes, idempotent re-runs, crash
windows); databricks.yml parses and matches the templates' command lines."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest
import yaml
from typer.testing import CliRunner

from deltasink import DeltaSink, MergeSpec, checks
from deltasink._faults import EXIT_CODE, armed
from deltasink.cli import app as cli_app
from deltasink.cli.exits import EXIT_FENCED, EXIT_REFUSED
from tests import support

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "jobs"


def clean_environ() -> dict[str, str]:
    """This environment without the Spark Connect markers the embedded engine of the
    test process set (a child must be free to start a classic JVM session)."""
    drop = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    # The package under test, not whichever checkout the interpreter has installed.
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environ.get("PYTHONPATH")]))
    return environ


def run(
    script: str, *args: str, faults: str = "", timeout: float = 180, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run a job template in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, str(JOBS / script), *args],
        env={**clean_environ(), "PYTHONUNBUFFERED": "1", "DELTASINK_FAULTS": faults, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def lines(result: subprocess.CompletedProcess[str], prefix: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(prefix)]


def contents(target: str) -> list[tuple[int, str, float]]:
    return [
        (r["order_id"], r["status"], r["amount"]) for r in support.rows(target, sort_by="order_id")
    ]


def each_version_once(target: str, app_id: str) -> dict[int, int]:
    """batch version -> number of target commits carrying its marker."""
    return {v: len(c) for v, c in support.txn_commits(target, app_id).items()}


# -- jobs/streaming_upsert.py: the local micro-batch loop --------------------------------

STREAM_AFTER_3_FILES = [
    (1, "shipped", 10.0),
    (2, "shipped", 20.0),
    (4, "created", 40.0),
    (5, "shipped", 50.0),
]


def test_streaming_upsert_runs_reruns_and_picks_up_new_files(tmp_path: Path) -> None:
    target = str(tmp_path / "silver" / "orders")
    first = run("streaming_upsert.py", "--lake", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert lines(first, "batch ") == [
        "batch 0: ['events-00000.json'] committed versions [0]: +4 ~0 -0 rows "
        "-> target table version 0",
        "batch 1: ['events-00001.json'] committed versions [1]: +1 ~1 -1 rows "
        "-> target table version 1",
        "batch 2: ['events-00002.json'] committed versions [2]: +0 ~2 -0 rows "
        "-> target table version 2",
    ]
    assert "target: 1=shipped/10, 2=shipped/20, 4=created/40, 5=shipped/50" in first.stdout
    assert contents(target) == STREAM_AFTER_3_FILES
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1, 2: 1}
    assert support.staged_versions(DeltaSink(target, "orders-stream").staging) == []

    again = run("streaming_upsert.py", "--lake", str(tmp_path))  # nothing new: no-op
    assert again.returncode == 0, again.stderr
    assert lines(again, "batch ") == []
    source = (tmp_path / "landing" / "orders").absolute()
    assert lines(again, "nothing new") == [
        f"nothing new: every file in {source} is in a committed batch (last 2)"
    ]
    assert support.table_version(target) == 2

    more = run("streaming_upsert.py", "--lake", str(tmp_path), "--demo-files", "4")
    assert more.returncode == 0, more.stderr
    assert lines(more, "batch ") == [
        "batch 3: ['events-00003.json'] committed versions [3]: +1 ~1 -0 rows "
        "-> target table version 3"
    ]
    assert contents(target) == [
        (1, "shipped", 10.0),
        (2, "shipped", 20.0),
        (4, "repriced", 43.0),
        (5, "shipped", 50.0),
        (13, "created", 130.0),
    ]
    assert support.marker(target, "orders-stream") == 3

    # A new checkpoint under the same app id numbers batches from 0 again: its first
    # batch is refused (issue 24), nothing written; --resume continues right after the
    # target, leaving out the files it holds, and the resumed query's restart goes on.
    shutil.rmtree(tmp_path / "_checkpoints")
    reset = run("streaming_upsert.py", "--lake", str(tmp_path), "--demo-files", "5")
    assert reset.returncode == EXIT_REFUSED  # the deltasink command's code
    assert reset.stderr.splitlines()[0].startswith("CheckpointResetError: micro-batch 0 of")
    assert "versions up to 3 were committed by streaming query" in reset.stderr
    assert "run again with --resume" in reset.stderr
    assert lines(reset, "batch ") == []
    assert support.table_version(target) == 3
    resumed = run("streaming_upsert.py", "--lake", str(tmp_path), "--demo-files", "5", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming after version 3: 4 file(s) already committed" in resumed.stdout
    assert lines(resumed, "batch ") == [
        "batch 0: ['events-00004.json'] committed versions [4]: +1 ~1 -0 rows "
        "-> target table version 4"
    ]
    restarted = run("streaming_upsert.py", "--lake", str(tmp_path), "--demo-files", "6")
    assert restarted.returncode == 0, restarted.stderr
    assert lines(restarted, "batch ") == [
        "batch 1: ['events-00005.json'] committed versions [5]: +1 ~1 -0 rows "
        "-> target table version 5"
    ]
    assert each_version_once(target, "orders-stream") == dict.fromkeys(range(6), 1)
    origins = [e.origin for e in DeltaSink(target, "orders-stream").history()]
    assert [(o.batch_id, o.base) for o in origins if o is not None] == [
        (1, 4),
        (0, 4),
        (3, 0),
        (2, 0),
        (1, 0),
        (0, 0),
    ]


@pytest.mark.parametrize(
    ("point", "restart_lines"),
    [
        # Crash after the sink commit, before the source progress (seed 001, window 1):
        # the batch is replayed with the same id and changes nothing.
        (
            "commit.after_publish",
            ["batch 1: ['events-00001.json'] already committed, nothing changed (replay)"],
        ),
        # Crash inside the sink after the target commit landed: a replay as well.
        (
            "publish.after_target_commit",
            ["batch 1: ['events-00001.json'] already committed, nothing changed (replay)"],
        ),
        # Crash before the target commit: foreachBatch published directly, so nothing
        # was staged or committed; the batch simply runs again.
        (
            "commit.before_publish",
            [
                "batch 1: ['events-00001.json'] committed versions [1]: +1 ~1 -1 rows "
                "-> target table version 1"
            ],
        ),
    ],
)
def test_streaming_upsert_crash_then_restart(
    tmp_path: Path, point: str, restart_lines: list[str]
) -> None:
    target = str(tmp_path / "silver" / "orders")
    crashed = run("streaming_upsert.py", "--lake", str(tmp_path), faults=f"{point}=exit@2")
    assert crashed.returncode == EXIT_CODE, (crashed.stdout, crashed.stderr)
    assert not (tmp_path / "_checkpoints" / "orders_stream" / "commits" / "1").exists()

    restarted = run("streaming_upsert.py", "--lake", str(tmp_path))
    assert restarted.returncode == 0, restarted.stderr
    assert [
        line for line in restarted.stdout.splitlines() if line.startswith(("batch 1", "recov"))
    ] == restart_lines
    assert contents(target) == STREAM_AFTER_3_FILES
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1, 2: 1}
    assert DeltaSink(target, "orders-stream").status().pending_versions == []


def test_the_two_streaming_templates_have_their_own_local_defaults(tmp_path: Path) -> None:
    """Run one after the other with the same --lake: neither finds the other's app,
    target or checkpoint (they used to share all three)."""
    first = run("streaming_upsert.py", "--lake", str(tmp_path))
    assert first.returncode == 0, first.stderr
    spark_template = load_template("streaming_upsert_databricks").parse_args(
        ["--lake", str(tmp_path), "--demo-files", "0"]
    )
    local = {
        "target": str((tmp_path / "silver" / "orders").absolute()),
        "checkpoint": str((tmp_path / "_checkpoints" / "orders_stream").absolute()),
        "source": str((tmp_path / "landing" / "orders").absolute()),
    }
    for name, taken in local.items():
        chosen = getattr(spark_template, name)
        assert chosen != taken, name
        assert not Path(chosen).exists(), name  # nothing of the first template's run
    assert support.marker(spark_template.target, spark_template.app_id) is None


def test_every_template_has_its_own_default_target(tmp_path: Path) -> None:
    """One --lake holds every template's tables (docs/deploy.md says the defaults do
    not collide): no two templates default to the same target, so none mixes its rows
    into another's (daily_batch.py and streaming_upsert.py both used silver/orders)."""
    lake = ["--lake", str(tmp_path)]
    targets = {
        "streaming_upsert": load_template("streaming_upsert").parse_args(lake).target,
        "streaming_upsert_databricks": load_template("streaming_upsert_databricks")
        .parse_args([*lake, "--demo-files", "0"])
        .target,
        "daily_batch": load_template("daily_batch").parse_args(lake).target,
        "quickstart": tmp_path / load_template("quickstart").DEFAULT_TARGET,
        "maintenance": tmp_path / load_template("maintenance").DEFAULT_TARGET,
    }
    resolved = {name: Path(target).resolve() for name, target in targets.items()}
    assert len(set(resolved.values())) == len(resolved), resolved
    assert all(p.parent == tmp_path.resolve() / "silver" for p in resolved.values())


def test_two_copies_of_the_streaming_template_end_as_the_cli_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second copy of the job takes the app id over while the first writes batch 0:
    the first ends with the CLI's exit code for FencedError (7) and its one line on
    stderr, not a traceback and exit 1; the second copy finishes the run."""
    template = load_template("streaming_upsert")
    target = str(tmp_path / "silver" / "orders")
    claimed: list[int] = []

    def second_copy_starts() -> None:
        if not claimed:
            claimed.append(1)
            DeltaSink(target, "orders-stream", template.MERGE).recover()  # claims the role

    with armed("publish.before_target_commit", second_copy_starts):
        code = template.main(["--lake", str(tmp_path), "--demo-files", "2"])
    out, err = capsys.readouterr()
    assert code == EXIT_FENCED
    assert err.splitlines()[-1].startswith("FencedError: ")
    assert "Traceback" not in err
    assert "status:" not in out  # the fenced copy stopped at once
    # The fenced copy staged batch 0 before the claim; the second copy's recover()
    # published it, once.
    assert support.marker(target, "orders-stream") == 0
    assert template.main(["--lake", str(tmp_path), "--demo-files", "2"]) == 0  # the other copy
    assert contents(target) == [
        (1, "created", 10.0),
        (2, "shipped", 20.0),
        (4, "created", 40.0),
        (5, "created", 50.0),
    ]
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1}


def test_the_spark_template_leaves_py4js_log_of_a_deltasink_error_out() -> None:
    """On classic compute py4j logs the foreachBatch function's exception with its
    traceback, before Spark's own log of the failed query: a deltasink error, which the
    template prints once, last, is left out of it; any other error stays."""
    import logging

    from deltasink import CheckpointResetError

    template = load_template("streaming_upsert_databricks")
    logger = logging.getLogger("py4j.clientserver")
    before = list(logger.filters)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    try:
        template.quiet_query_errors(object())  # a session without a JVM: py4j's log only
        for exc in (CheckpointResetError("refused"), RuntimeError("Spark's own")):
            try:
                raise exc
            except Exception:
                logger.exception("There was an exception while executing the Python Proxy")
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before
    assert [str(r.exc_info[1]) for r in records if r.exc_info] == ["Spark's own"]


def test_the_daily_batch_leaves_out_row_counts_its_engine_did_not_report() -> None:
    """spark-submit's run printed ``(+None ~None -None rows)``."""
    from deltasink import CommitResult

    template = load_template("daily_batch")
    unknown = CommitResult(
        20250102, "committed", rows=4, target_version=3, versions=(20250101, 20250102)
    )
    assert template.committed_line(unknown) == (
        "committed versions [20250101, 20250102] -> target table version 3"
    )
    known = CommitResult(
        20250103, "committed", 4, 4, rows_inserted=2, rows_updated=1, rows_deleted=1
    )
    assert template.committed_line(known) == (
        "committed versions [20250103] -> target table version 4 (+2 ~1 -1 rows)"
    )


def docstring_commands(script: str) -> list[list[str]]:
    """The ``python jobs/<script> ...`` lines of a template's docstring, as argv lists
    (comments dropped)."""
    doc = load_template(script.removesuffix(".py")).__doc__ or ""
    return [
        line.split("#")[0].split()[2:]
        for line in (raw.strip() for raw in doc.splitlines())
        if line.startswith(f"python jobs/{script}")
    ]


def leftover_temp_dirs(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("deltasink-"))


# -- jobs/daily_batch.py -------------------------------------------------------------------


def test_daily_batch_docstring_sequence_runs(tmp_path: Path) -> None:
    """The docstring's own example commands, in order, as a user would paste them."""
    commands = docstring_commands("daily_batch.py")
    assert len(commands) == 4
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    results = []
    for argv in commands:
        argv = [str(tmp_path / "lake") if a == "/tmp/lake" else a for a in argv]
        result = run("daily_batch.py", *argv, TMPDIR=str(tmp))
        assert result.returncode == 0, (argv, result.stdout, result.stderr)
        results.append(result)
    assert leftover_temp_dirs(tmp) == []  # the run without --lake cleaned up after itself
    target = str(tmp_path / "lake" / "silver" / "orders_daily")
    assert support.marker(target, "orders-daily") == 20250108
    assert lines(results[3], "day ") == [
        f"day 2025-01-02: already committed (target table version "
        f"{support.txn_commits(target, 'orders-daily')[20250107][0]})"
    ]
    # Each day adds orders <day>1 and <day>2, ships the day before's first order (an
    # upsert: 2024-12-31's arrives with January 1st) and cancels (deletes) its second one.
    days = ["20241231"] + [f"202501{d:02d}" for d in range(1, 9)]
    expected = [int(d + "1") for d in days] + [int(days[-1] + "2")]
    assert sorted(r["order_id"] for r in support.rows(target)) == sorted(expected)


@pytest.mark.parametrize("script", ["streaming_upsert.py", "maintenance.py"])
def test_a_run_without_lake_removes_its_temp_dir(tmp_path: Path, script: str) -> None:
    result = run(script, TMPDIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "deltasink-" in result.stdout  # it printed where its demo lake was
    assert leftover_temp_dirs(tmp_path) == []


def test_daily_batch_days_backfill_reruns_and_refusals(tmp_path: Path) -> None:
    lake = ["--lake", str(tmp_path)]
    target = str(tmp_path / "silver" / "orders_daily")

    backfill = run("daily_batch.py", *lake, "--from-date", "2025-01-01", "--to-date", "2025-01-02")
    assert backfill.returncode == 0, backfill.stderr
    assert lines(backfill, "day ") == [
        "day 2025-01-01: staged as version 20250101: 4 rows (staged)",
        "day 2025-01-02: staged as version 20250102: 4 rows (staged)",
    ]
    assert lines(backfill, "committed ") == [
        "committed versions [20250101, 20250102] -> target table version 0 (+4 ~0 -0 rows)"
    ]
    assert contents(target) == [
        (202412311, "shipped", 10.0),  # day 1 ships an order of the day before
        (202501011, "shipped", 10.0),
        (202501021, "created", 10.0),
        (202501022, "created", 20.0),
    ]  # 202501012 was created on day 1 and cancelled on day 2
    assert support.txn_commits(target, "orders-daily") == {20250102: [0]}

    rerun = run("daily_batch.py", *lake, "--date", "2025-01-02")
    assert rerun.returncode == 0, rerun.stderr
    assert lines(rerun, "day ") == ["day 2025-01-02: already committed (target table version 0)"]
    assert support.table_version(target) == 0

    skip = run("daily_batch.py", *lake, "--today", "2025-01-05")  # loads the day before
    assert skip.returncode == 0, skip.stderr
    assert lines(skip, "day ") == ["day 2025-01-04: staged as version 20250104: 4 rows (staged)"]
    assert support.marker(target, "orders-daily") == 20250104

    late = run("daily_batch.py", *lake, "--date", "2025-01-03")  # older than the marker
    assert late.returncode == EXIT_REFUSED
    assert "REFUSED" in late.stderr
    assert "--app-id orders-daily-restate-20250103" in late.stderr
    assert support.table_version(target) == 1

    missing = run(
        "daily_batch.py",
        *lake,
        "--source",
        str(tmp_path / "landing" / "order_events"),  # not generated: a real source
        "--date",
        "2025-01-05",
    )
    assert missing.returncode == 4
    assert "day 2025-01-05: no source rows; stopping" in missing.stdout
    assert support.marker(target, "orders-daily") == 20250104
    assert DeltaSink(target, "orders-daily").status().pending_versions == []

    restate = run(
        "daily_batch.py", *lake, "--date", "2025-01-03", "--app-id", "orders-daily-restate-20250103"
    )
    assert restate.returncode == 0, restate.stderr
    assert contents(target) == [
        (202412311, "shipped", 10.0),
        (202501011, "shipped", 10.0),
        (202501021, "shipped", 10.0),
        (202501031, "shipped", 10.0),  # day 3's older "created" lost to day 4's "shipped"
        # Cancelled on day 4, back from day 3's "created": a delete leaves no row for
        # sequence_by to compare with (docs/guarantees.md, restating old days).
        (202501032, "created", 20.0),
        (202501041, "created", 10.0),
        (202501042, "created", 20.0),
    ]
    assert support.marker(target, "orders-daily") == 20250104
    assert support.marker(target, "orders-daily-restate-20250103") == 20250103


# -- jobs/maintenance.py -------------------------------------------------------------------


def test_maintenance_recovers_reports_and_cleans(tmp_path: Path) -> None:
    demo = run("maintenance.py", "--lake", str(tmp_path), "--gc-retention-hours", "0")
    assert demo.returncode == 0, demo.stderr
    out = demo.stdout
    assert "  committed version 0; pending [1] (1 staged " in out
    assert "  txn markers: kept forever" in out
    assert "  recovered versions [1]: committed" in out
    assert "  gc: 1 staging files removed" in out  # version 0 was published unstaged
    assert "RESULT app=orders-demo-writer exit=0" in out
    target = str(tmp_path / "silver" / "orders_maintenance_demo")
    assert [(r["order_id"], r["status"]) for r in support.rows(target, sort_by="order_id")] == [
        (1, "created"),
        (2, "shipped"),
        (3, "created"),
    ]
    assert support.marker(target, "orders-demo-writer") == 1
    assert support.staged_files_on_disk(DeltaSink(target, "orders-demo-writer").staging) == []

    args = ["--target", target, "--app-id", "orders-demo-writer"]
    idle = run("maintenance.py", *args)
    assert idle.returncode == 0, idle.stderr
    assert "  recover: nothing to do" in idle.stdout

    # A writer that is still running has a young pending version: left alone.
    DeltaSink(target, "orders-demo-writer").pre_commit(
        pa.table({"order_id": [4], "status": ["created"]}), 2
    )
    live = run("maintenance.py", *args)
    assert live.returncode == 0, live.stderr
    assert "  recover: skipped, the writer looks live" in live.stdout
    assert DeltaSink(target, "orders-demo-writer").status().pending_versions == [2]

    failing = run(
        "maintenance.py", *args, "--idle-minutes", "0", faults="publish.before_target_commit=raise"
    )
    assert failing.returncode == 4
    assert "commit failed: committing version 2" in failing.stderr
    assert "RESULT app=orders-demo-writer exit=4" in failing.stdout
    assert DeltaSink(target, "orders-demo-writer").status().pending_versions == [2]

    abandoned = run(
        "maintenance.py",
        *args,
        "--idle-minutes",
        "0",
        "--abandon-after-timeout",
        "--transaction-timeout-hours",
        "0.000001",
        faults="publish.before_target_commit=raise",
    )
    assert abandoned.returncode == 6
    assert "  recovered versions [2]: abandoned" in abandoned.stdout
    assert support.marker(target, "orders-demo-writer") == 1
    assert [r["order_id"] for r in support.rows(target, sort_by="order_id")] == [1, 2, 3]
    assert DeltaSink(target, "orders-demo-writer").status().pending_versions == []


def test_maintenance_reports_a_quarantined_version(target: str) -> None:
    audited = DeltaSink(
        target, "audited", MergeSpec(keys=["id"]), checks=[checks.row_count_between(0, 1)]
    )
    audited.write(pa.table({"id": [1]}), 0)
    audited.write(pa.table({"id": [2, 3]}), 1)  # fails the check: quarantined
    result = run("maintenance.py", "--target", target, "--app-id", "audited", "--idle-minutes", "0")
    assert result.returncode == 6
    assert (
        "  QUARANTINED version 1: check row_count_between(0, 1) failed: 2 rows, expected "
        "between 0 and 1" in result.stdout
    )
    assert "  recovered versions [1]: quarantined" in result.stdout
    assert support.ids(target) == [1]
    assert support.marker(target, "audited") == 0


def test_maintenance_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "not_delta").mkdir()
    (tmp_path / "not_delta" / "data.csv").write_text("a\n1\n")
    result = run("maintenance.py", "--target", str(tmp_path / "not_delta"), "--app-id", "x")
    assert result.returncode == 3
    assert "is not a Delta table" in result.stderr
    assert "RESULT app=x exit=3" in result.stdout


def test_maintenance_refuses_a_writer_that_does_not_exist(tmp_path: Path) -> None:
    demo = run("maintenance.py", "--lake", str(tmp_path), "--no-gc")
    assert demo.returncode == 0, demo.stderr
    target = str(tmp_path / "silver" / "orders_maintenance_demo")
    # A mistyped app id on an existing target: exit 3, naming the writers there are.
    typo = run("maintenance.py", "--target", target, "--app-id", "orders-demo-writr")
    assert typo.returncode == 3, typo.stdout
    assert "RESULT app=orders-demo-writr exit=3" in typo.stdout
    assert "  configuration error: no writer 'orders-demo-writr' on " in typo.stderr
    assert "the target exists" in typo.stderr
    assert "Writers found for this target: orders-demo-writer." in typo.stderr
    assert "recover:" not in typo.stdout  # nothing was reported as healthy
    # A mistyped target: exit 3, and nothing is created there.
    missing = tmp_path / "nowhere" / "orders"
    gone = run("maintenance.py", "--target", str(missing), "--app-id", "orders-demo-writer")
    assert gone.returncode == 3, gone.stdout
    assert "the target does not exist" in gone.stderr
    assert not missing.parent.exists()
    # The real writer is untouched (the demo recovered its version 1).
    assert support.marker(target, "orders-demo-writer") == 1
    assert [r["order_id"] for r in support.rows(target, sort_by="order_id")] == [1, 2, 3]


# -- databricks.yml ------------------------------------------------------------------------


def load_template(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"jobs_{name}", JOBS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bundle_is_valid_and_matches_the_templates() -> None:
    text = (ROOT / "databricks.yml").read_text()
    bundle: dict[str, Any] = yaml.safe_load(text)
    assert bundle["bundle"]["name"] == "deltasink-jobs"
    variables = bundle["variables"]
    assert set(re.findall(r"\$\{var\.(\w+)\}", text)) <= set(variables)
    assert {"dev", "prod"} <= set(bundle["targets"])
    artifact = bundle["artifacts"]["deltasink_wheel"]
    assert (ROOT / artifact["path"] / "pyproject.toml").is_file()
    assert artifact["build"].startswith("rm -rf dist && ")  # no stale wheel matches *.whl
    assert bundle["targets"]["prod"]["run_as"] == {
        "service_principal_name": "${var.service_principal}"
    }

    jobs = bundle["resources"]["jobs"]
    assert set(jobs) == {"orders_stream", "orders_daily", "deltasink_maintenance"}
    scripts = set()
    for job in jobs.values():
        assert job["max_concurrent_runs"] == 1  # one writer per app id
        assert job["schedule"]["quartz_cron_expression"]
        clusters = {c["job_cluster_key"] for c in job["job_clusters"]}
        params = {p["name"]: p["default"] for p in job.get("parameters", [])}
        for task in job["tasks"]:
            assert task["job_cluster_key"] in clusters
            assert task["libraries"] == [{"whl": "./dist/*.whl"}]
            python_file = task["spark_python_task"]["python_file"]
            assert (ROOT / python_file).is_file(), python_file
            scripts.add(Path(python_file).stem)

            # The task's command line must parse with the template's own parser.
            argv = []
            for arg in task["spark_python_task"]["parameters"]:
                assert isinstance(arg, str), arg  # the Jobs API takes strings only
                arg = re.sub(r"\$\{var\.(\w+)\}", lambda m: variables[m[1]]["default"], arg)
                for name in re.findall(r"\{\{job\.parameters\.(\w+)\}\}", arg):
                    value = params[name]  # KeyError: an undefined job parameter
                    value = "2025-01-02" if value.startswith("{{") else value
                    arg = arg.replace(f"{{{{job.parameters.{name}}}}}", value)
                argv.append(arg)
            args = load_template(Path(python_file).stem).parse_args(argv)
            assert args.target.startswith("main.sales.")
    assert scripts == {"streaming_upsert_databricks", "daily_batch", "maintenance"}
    daily = jobs["orders_daily"]
    assert {p["name"]: p["default"] for p in daily["parameters"]}["app_id"] == "orders-daily"
    command = daily["tasks"][0]["spark_python_task"]["parameters"]
    assert command[command.index("--app-id") + 1] == "{{job.parameters.app_id}}"


# -- jobs/streaming_upsert_databricks.py on classic PySpark (the one JVM test) -------------


#: A classic PySpark start takes ~10 s, and minutes on a loaded shared machine.
JVM_TIMEOUT_S = 900


def template_engine() -> str:
    """The engine the template test runs: ``spark`` on PySpark 3.5 with Delta 3.3.3's
    jars (``make test-spark35``: Spark makes the commits, as on Databricks 14.3-15.4
    LTS), else ``embedded`` (no Delta jars in the session: delta-rs makes them; the
    spark engine's ``foreachBatch`` on PySpark 4 is tests/test_stream_soak.py's)."""
    from tests.test_contract_spark import REASON, pyspark_35

    return "spark" if pyspark_35() and REASON is None else "embedded"


def template_submit_args(engine: str) -> str:
    """``PYSPARK_SUBMIT_ARGS`` for the template's session: with Delta's jars, extension
    and catalog on the spark engine (what ``--packages io.delta:...`` gives a cluster)."""
    args = (
        "--master local[1] --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false"
    )
    args += " --driver-java-options -XX:TieredStopAtLevel=1"  # JIT: start faster
    if engine == "spark":
        from tests.test_contract_spark import delta_jars

        args += f" --jars {','.join(delta_jars())}"
        args += " --conf spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension"
        args += " --conf spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"
        args += " --conf spark.databricks.delta.snapshotPartitions=1"
        args += " --conf spark.sql.shuffle.partitions=1"
    return args + " pyspark-shell"


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.delta_spark_full  # a JVM of its own for 40 s: make test-delta-spark and make test-spark35
@pytest.mark.timeout(3600)
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17 for classic PySpark")
@pytest.mark.parametrize("engine", [template_engine()])
def test_databricks_streaming_template_on_classic_pyspark(tmp_path: Path, engine: str) -> None:
    """Real writeStream.foreachBatch with a Spark checkpoint: a crash after the sink
    committed batch 1, before Spark recorded it, replays batch 1 as a no-op."""
    env = {"PYSPARK_SUBMIT_ARGS": template_submit_args(engine)}
    args = ["--lake", str(tmp_path), "--max-files", "1"]
    target = str(tmp_path / "silver" / "orders_spark")
    commits = tmp_path / "_checkpoints" / "orders_stream_spark" / "commits"

    crashed = run(
        "streaming_upsert_databricks.py",
        *args,
        faults="commit.after_publish=exit@2",
        timeout=JVM_TIMEOUT_S,
        **env,
    )
    assert crashed.returncode == EXIT_CODE, (crashed.stdout, crashed.stderr)
    assert sorted(p.name for p in commits.iterdir() if p.name.isdigit()) == ["0"]
    assert support.marker(target, "orders-stream") == 1  # the sink got further than Spark

    restarted = run("streaming_upsert_databricks.py", *args, timeout=JVM_TIMEOUT_S, **env)
    assert restarted.returncode == 0, restarted.stderr
    assert {
        "embedded": "engine: embedded (auto: no Delta-enabled Spark session",
        "spark": "engine: spark (auto: a Spark session with delta-spark's DeltaSparkSessionExtension)",
    }[engine] in restarted.stdout
    assert lines(restarted, "batch ") == [
        "batch 1: already committed as version 1 (a replay)",
        "batch 2: committed as version 2",
    ]
    assert sorted(p.name for p in commits.iterdir() if p.name.isdigit()) == ["0", "1", "2"]
    assert contents(target) == [(1, "shipped", 10.0), (2, "shipped", 20.0), (4, "created", 40.0)]
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1, 2: 1}

    # The checkpoint is lost and a new file lands: two commands (issue 37). The new
    # query's batch 0 (every file: the template reads up to 1,000 a batch) is refused,
    # nothing written; the same command with --resume, no file moved, writes the new
    # file's rows alone (the three files the target holds are left out by their rows'
    # input_file_name()).
    shutil.rmtree(commits.parent)
    again = ["--lake", str(tmp_path), "--demo-files", "4"]
    reset = run("streaming_upsert_databricks.py", *again, timeout=JVM_TIMEOUT_S, **env)
    assert reset.returncode == EXIT_REFUSED, (reset.stdout, reset.stderr)
    # The refusal once, last (not inside py4j's and Spark's logs of the failed query):
    # the error's line, then what to do.
    error, hint = reset.stderr.splitlines()[-2:]
    assert error.startswith("CheckpointResetError: micro-batch 0 of streaming query ")
    assert reset.stderr.count("CheckpointResetError") == 1
    assert "Traceback" not in reset.stderr
    assert "run the same command again with --resume" in hint
    assert lines(reset, "batch ") == []
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1, 2: 1}
    offsets = CliRunner().invoke(cli_app, ["offsets", target, "--app", "orders-stream", "--json"])
    assert offsets.exit_code == 0, offsets.output
    (files,) = json.loads(offsets.output)["starting"]
    landing = tmp_path / "landing" / "orders_spark"  # the template's own default
    assert files["files"] == [(landing / f"events-0000{n}.json").as_uri() for n in range(3)]
    resumed = run(
        "streaming_upsert_databricks.py", *again, "--resume", timeout=JVM_TIMEOUT_S, **env
    )
    assert resumed.returncode == 0, resumed.stderr
    assert lines(resumed, "batch ") == ["batch 0: committed as version 3"]
    assert "left out 8 row(s) of 3 file(s)" in resumed.stderr
    assert contents(target) == [
        (1, "shipped", 10.0),
        (2, "shipped", 20.0),
        (4, "created", 40.0),
        (13, "created", 3.0),
    ]
    assert each_version_once(target, "orders-stream") == {0: 1, 1: 1, 2: 1, 3: 1}
