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
# Four JVM starts: `make test-delta-spark`. `make test` keeps a SIGKILLed stream restarted
# from its checkpoint (tests/test_streaming_jvm.py) and this checker's own tests below.
@pytest.mark.delta_spark_full
@pytest.mark.timeout(660)  # the run's own limit below, not the suite's 300 s default
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
    assert (summary["trials"], summary["files_checked"], summary["missed"]) == (1, 5, 0)
    assert (summary["lost"], summary["duplicated"]) == (0, 0)
    assert (summary["violations"], summary["errors"]) == ([], [])
    # Replays happened (the sink-done kill makes Spark run that batch again).
    assert summary["batches_run"] > 5
    assert run.stdout.rstrip().endswith("result: OK")


# -- the checker and the plan ------------------------------------------------------------


def ids(*files: int) -> list[int]:
    return sorted(i for n in files for i in stream_soak.file_ids(n))


#: Micro-batch -> input files, as Spark planned them (batch 1 replanned after a kill
#: read two files).
BATCHES = {0: [0], 1: [1, 2], 2: [3], 3: [4]}


def test_the_checker_accepts_a_consistent_state() -> None:
    obs = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1, 2), staged=[2])
    assert check(obs, BATCHES, files=5, final=False) == (set(), set(), [])
    done = Observed(marker=3, ledger=dict.fromkeys(range(4), 1), ids=ids(*range(5)), staged=[])
    assert check(done, BATCHES, files=5, final=True) == (set(), set(), [])


def test_the_checker_finds_duplicates_losses_and_rows_above_the_marker() -> None:
    twice = Observed(marker=1, ledger={0: 1, 1: 2}, ids=ids(0, 1, 2), staged=[])
    assert check(twice, BATCHES, files=5, final=False) == (set(), {1}, [])
    repeated_rows = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1, 2, 2), staged=[])
    assert check(repeated_rows, BATCHES, files=5, final=False) == (set(), {1}, [])
    no_commit = Observed(marker=1, ledger={1: 1}, ids=ids(1, 2), staged=[])
    assert check(no_commit, BATCHES, files=5, final=False) == ({0}, set(), [])
    half_a_batch = Observed(marker=1, ledger={0: 1, 1: 1}, ids=ids(0, 1), staged=[])
    assert check(half_a_batch, BATCHES, files=5, final=False) == ({1}, set(), [])
    above = Observed(marker=0, ledger={0: 1}, ids=ids(0, 1), staged=[])
    assert check(above, BATCHES, files=5, final=False) == (
        set(),
        set(),
        ["versions [1] are visible above the marker 0"],
    )
    unplanned = Observed(marker=4, ledger=dict.fromkeys(range(5), 1), ids=ids(*range(5)), staged=[])
    assert check(unplanned, BATCHES, files=5, final=False)[2] == [
        "version 4 is committed but Spark never planned it"
    ]


def test_the_checker_wants_the_whole_stream_at_the_end() -> None:
    short = Observed(marker=2, ledger={0: 1, 1: 1, 2: 1}, ids=ids(0, 1, 2, 3), staged=[2])
    lost, duplicated, violations = check(short, BATCHES, files=6, final=True)
    assert (lost, duplicated) == (set(), set())
    assert violations == [
        "the marker is 2, Spark's last batch 3",
        "Spark never read files [5]",
        "staging still holds versions [2]",
    ]


def test_the_files_of_each_micro_batch_come_from_spark_s_checkpoint(tmp_path: Path) -> None:
    sources, offsets = tmp_path / "sources" / "0", tmp_path / "offsets"
    sources.mkdir(parents=True)
    offsets.mkdir()
    for entry, numbers in enumerate([[0], [1], [2]]):
        lines = [
            json.dumps({"path": f"file:///in/part-{n:04d}.json", "batchId": entry}) for n in numbers
        ]
        (sources / str(entry)).write_text("v1\n" + "\n".join(lines) + "\n")
        (sources / f".{entry}.crc").write_bytes(b"\xea\x00")  # Hadoop's checksums: skipped
    for batch, end in enumerate([0, 2]):  # batch 1 was replanned over two log entries
        (offsets / str(batch)).write_text(
            'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"logOffset": end}) + "\n"
        )
    (offsets / "2").write_text("v1\n")  # half-written by a killed driver
    assert stream_soak.spark_batches(tmp_path) == {0: [0], 1: [1, 2]}


def test_kills_are_planned_in_the_form_they_are_reported() -> None:
    for text in [*PLAN.split(","), "timer:2.5", "in-batch:1+0.25"]:
        assert Kill.parse(text).describe() == text
    assert Kill.parse("fault:stage.after_files") == Kill("fault", nth=1, point="stage.after_files")
    for bad in ("fault:nowhere@1", "in-batch:x", "explode:1"):
        with pytest.raises(ValueError, match="not a kill"):
            Kill.parse(bad)


def test_the_reset_checker_finds_lost_and_repeated_rows_and_gaps(tmp_path: Path) -> None:
    """``--reset`` trials check rows and commits, not Spark's batches (two queries)."""

    def checked(obs: Observed) -> tuple[set[int], set[int], list[str]]:
        trial = stream_soak.StreamTrial(tmp_path, 0, 1, 4, 1, "embedded", {}, reset=True)
        trial.check_rows(obs)
        return trial.lost, trial.duplicated, trial.violations

    whole = dict.fromkeys(range(4), 1)
    assert checked(Observed(3, whole, ids(0, 1, 2, 3), [])) == (set(), set(), [])
    assert checked(Observed(3, whole, ids(0, 1, 3), [])) == ({2}, set(), [])
    assert checked(Observed(3, whole, ids(0, 1, 1, 2, 3), [])) == (set(), {1}, [])
    assert checked(Observed(3, {0: 1, 1: 1, 2: 2, 3: 1}, ids(0, 1, 2, 3), [])) == (
        set(),
        {2},
        [],
    )
    assert checked(Observed(3, {0: 1, 1: 1, 3: 1}, ids(0, 1, 2, 3), [4])) == (
        set(),
        set(),
        ["versions [0, 1, 3] are not 0..3", "staging still holds versions [4]"],
    )
