"""The streaming soak (``tools/stream_soak.py``): a planned run on the spark engine over
real delta-spark in CI (a kill between Spark's offset log and the sink, one between the
sink's commit and Spark's commit log, one inside the sink), and its checker catching
lost, duplicated and half-visible batches (a harness that cannot fail proves nothing)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import stream_soak
from tools.stream_soak import Kill, Observed, check

ROOT = Path(__file__).resolve().parents[1]
PLAN = "in-batch:2,sink-done:1,fault:publish.after_target_commit@1"


@pytest.mark.jvm
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java 17 for classic PySpark")
def test_a_planned_streaming_soak_on_delta_spark_applies_every_batch_once(tmp_path: Path) -> None:
    from tests.test_contract_spark import REASON

    if REASON is not None:
        pytest.skip(REASON)
    out = tmp_path / "summary.json"
    command = [sys.executable, "tools/stream_soak.py", "--engine", "spark", "--files", "5"]
    command += ["--plan", PLAN, "--workdir", str(tmp_path), "--json", str(out)]
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["kills_done"] == PLAN.split(",")  # every planned kill landed
    assert summary["kills_by_moment"] == {
        "in the sink": 1,
        "sink committed, Spark's commit log not written": 1,
        "fault publish.after_target_commit": 1,
    }
    assert (summary["trials"], summary["versions_checked"], summary["missed"]) == (1, 5, 0)
    assert (summary["lost"], summary["duplicated"]) == (0, 0)
    assert (summary["violations"], summary["errors"]) == ([], [])
    # Replays happened (the sink-done kill makes Spark run that batch again).
    assert summary["batches_run"] > 5
    assert run.stdout.rstrip().endswith("result: OK")


# -- the checker and the plan ------------------------------------------------------------


def ids(*versions: int) -> list[int]:
    return sorted(v * 100 + r for v in versions for r in range(stream_soak.ROWS_PER_FILE))


def test_the_checker_accepts_a_consistent_state() -> None:
    obs = Observed(marker=2, ledger={0: 1, 1: 1, 2: 1}, ids=ids(0, 1, 2), staged=[3])
    assert check(obs, files=5, final=False) == (set(), set(), [])
    done = Observed(marker=4, ledger=dict.fromkeys(range(5), 1), ids=ids(*range(5)), staged=[])
    assert check(done, files=5, final=True) == (set(), set(), [])


def test_the_checker_finds_duplicates_losses_and_rows_above_the_marker() -> None:
    twice = Observed(marker=1, ledger={0: 1, 1: 2}, ids=ids(0, 1), staged=[])
    assert check(twice, files=3, final=False) == (set(), {1}, [])
    repeated_rows = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1, 1), staged=[])
    assert check(repeated_rows, files=3, final=False) == (set(), {1}, [])
    no_commit = Observed(marker=1, ledger={1: 1}, ids=ids(1), staged=[])
    assert check(no_commit, files=3, final=False) == ({0}, set(), [])
    missing_row = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1)[1:], staged=[])
    assert check(missing_row, files=3, final=False) == ({0}, set(), [])
    above = Observed(marker=0, ledger={0: 1}, ids=ids(0, 1), staged=[])
    assert check(above, files=3, final=False) == (
        set(),
        set(),
        ["versions [1] are visible above the marker 0"],
    )


def test_the_checker_wants_the_whole_stream_at_the_end() -> None:
    short = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1), staged=[1])
    lost, duplicated, violations = check(short, files=3, final=True)
    assert (lost, duplicated) == ({2}, set())
    assert violations == ["the marker is 1, expected 2", "staging still holds versions [1]"]


def test_kills_are_planned_in_the_form_they_are_reported() -> None:
    for text in [*PLAN.split(","), "timer:2.5", "in-batch:1+0.25"]:
        assert Kill.parse(text).describe() == text
    assert Kill.parse("fault:stage.after_files") == Kill("fault", nth=1, point="stage.after_files")
    for bad in ("fault:nowhere@1", "in-batch:x", "explode:1"):
        with pytest.raises(ValueError, match="not a kill"):
            Kill.parse(bad)
