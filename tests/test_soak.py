"""The soak harness (``tools/soak.py``): a short run in CI, and its checker catching
lost and duplicated batches (a harness that cannot fail proves nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import write_deltalake

from deltasink import DeltaSink, MergeSpec
from tools import soak

ROOT = Path(__file__).resolve().parents[1]
SEED = 5


@pytest.mark.slow
def test_a_short_soak_run_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    command = [sys.executable, "tools/soak.py", "--trials", "4", "--seed", str(SEED)]
    command += ["--min-batches", "4", "--max-batches", "6", "--max-kills", "2"]
    command += ["--workdir", str(tmp_path)]
    command += ["--json", str(out)]
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads(out.read_text())
    assert summary["trials"] == 4
    assert (summary["lost"], summary["duplicated"]) == (0, 0)
    assert (summary["violations"], summary["errors"]) == ([], [])
    assert summary["ok"] is True
    # This seed lands 7 kills: 4 timed, 3 at fault points the starts passed (a start
    # that writes with write() publishes directly and passes no staging point).
    assert summary["kills"] >= 3, summary
    assert summary["kills_by_kind"].get("fault", 0) >= 1, summary
    assert sum(summary["kills_by_phase"].values()) == summary["kills"]
    assert "lost batches              0" in run.stdout
    assert "duplicated batches        0" in run.stdout
    assert run.stdout.rstrip().endswith("result: OK")
    assert list(tmp_path.glob("deltasink-soak-*")) == []  # nothing kept when all is well


# -- the checker ------------------------------------------------------------------------


def rows_of(trial_seed: int, mode: str, *versions: int) -> list[dict[str, Any]]:
    rows = [r for v in versions for r in soak.source_rows(trial_seed, v, mode)]
    if mode == "upsert":  # the target holds one "latest" row: the newest one
        latest = [r for r in rows if r["row"] < 0]
        rows = [r for r in rows if r["row"] >= 0] + latest[-1:]
    return rows


def nonempty_seed(mode: str, versions: int) -> int:
    """A source seed whose first ``versions`` batches all have rows."""
    return next(
        s for s in range(1000) if all(soak.source_rows(s, v, mode) for v in range(versions))
    )


def observed(**kwargs: Any) -> soak.Observed:
    values: dict[str, Any] = {"staged": frozenset(), "progress": -1}
    values.update(kwargs)
    return soak.Observed(**values)


def verdict(obs: soak.Observed, seed: int, mode: str = "append", final: int | None = None) -> Any:
    return soak.check(obs, trial_seed=seed, mode=mode, final_version=final)


def test_the_checker_passes_a_correct_end_state() -> None:
    seed = nonempty_seed("append", 3)
    obs = observed(
        marker=2, ledger={0: 1, 1: 1, 2: 1}, rows=rows_of(seed, "append", 0, 1, 2), progress=2
    )
    assert verdict(obs, seed, final=2) == soak.Verdict((), (), ())


def test_the_checker_counts_a_version_applied_twice() -> None:
    seed = nonempty_seed("append", 3)
    twice = observed(marker=2, ledger={0: 1, 1: 2, 2: 1}, rows=rows_of(seed, "append", 0, 1, 2))
    assert verdict(twice, seed, final=2).duplicated == (1,)
    repeated = observed(
        marker=2, ledger={0: 1, 1: 1, 2: 1}, rows=rows_of(seed, "append", 0, 1, 1, 2)
    )
    assert verdict(repeated, seed, final=2).duplicated == (1,)


def test_the_checker_counts_lost_versions() -> None:
    seed = nonempty_seed("append", 3)
    missing_rows = observed(
        marker=2, ledger={0: 1, 1: 1, 2: 1}, rows=rows_of(seed, "append", 0, 2), progress=2
    )
    assert verdict(missing_rows, seed, final=2).lost == (1,)
    no_commit = observed(marker=2, ledger={0: 1, 2: 1}, rows=rows_of(seed, "append", 0, 1, 2))
    assert verdict(no_commit, seed, final=2).lost == (1,)
    # After a crash: version 2 was acknowledged to the source, so it must be staged.
    acknowledged = {"marker": 1, "ledger": {0: 1, 1: 1}, "rows": rows_of(seed, "append", 0, 1)}
    assert verdict(observed(**acknowledged, progress=2), seed).lost == (2,)
    staged = observed(**acknowledged, progress=2, staged=frozenset({2}))
    assert verdict(staged, seed) == soak.Verdict((), (), ())


def test_the_checker_flags_rows_above_the_marker_and_a_bad_end_state() -> None:
    seed = nonempty_seed("append", 3)
    early = observed(marker=0, ledger={0: 1}, rows=rows_of(seed, "append", 0, 1))
    assert verdict(early, seed).violations == ("rows of version 1 are visible above the marker 0",)
    unfinished = observed(
        marker=1,
        ledger={0: 1, 1: 1},
        rows=rows_of(seed, "append", 0, 1),
        staged=frozenset({1, 2}),
        progress=2,
    )
    assert verdict(unfinished, seed, final=2).violations == (
        "the marker is 1, expected 2",
        "staging still holds committed versions [1]",
    )


def test_the_checker_follows_the_latest_row_in_upsert_mode() -> None:
    seed = nonempty_seed("upsert", 3)
    good = rows_of(seed, "upsert", 0, 1, 2)
    obs = observed(marker=2, ledger={0: 1, 1: 1, 2: 1}, rows=good, progress=2)
    assert verdict(obs, seed, "upsert", final=2) == soak.Verdict((), (), ())
    stale = [r if r["row"] >= 0 else {**r, "version": 1} for r in good]
    obs = observed(marker=2, ledger={0: 1, 1: 1, 2: 1}, rows=stale, progress=2)
    assert verdict(obs, seed, "upsert", final=2).violations == (
        "the latest row holds versions [1], expected [2]",
    )


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_observe_reads_coalesced_commits_and_catches_a_replay_by_another_tool(
    tmp_path: Path, mode: str
) -> None:
    seed = nonempty_seed(mode, 3)
    target = tmp_path / "target"
    sink = DeltaSink(str(target), soak.APP_ID, soak.merge_spec(mode))
    sink.write(soak.source_batch(seed, 0, mode), 0)
    for version in (1, 2):
        sink.pre_commit(soak.source_batch(seed, version, mode), version)
    assert sink.commit(2).results[0].versions == (1, 2)  # one coalesced target commit
    progress = tmp_path / "progress"
    soak.write_progress(progress, 2)
    staging = Path(sink.staging)
    obs = soak.observe(target, staging, progress)
    assert (obs.marker, obs.ledger, obs.progress, obs.staged) == (2, {0: 1, 1: 1, 2: 1}, 2, set())
    assert verdict(obs, seed, mode, final=2) == soak.Verdict((), (), ())

    # Another tool appends version 1's rows again: the checker must see it.
    write_deltalake(str(target), soak.source_batch(seed, 1, mode), mode="append")
    found = verdict(soak.observe(target, staging, progress), seed, mode, final=2)
    if mode == "append":
        assert found.duplicated == (1,)
    else:  # an upsert target now holds a second "latest" row and repeated keys
        assert found.duplicated == (1,)
        assert found.violations == ("the latest row holds versions [1, 2], expected [2]",)


def test_the_writer_resumes_from_the_recorded_progress(tmp_path: Path) -> None:
    """The child's job loop, in-process: a crash after the progress write but before
    the commit leaves a staged version that the next start recovers."""
    seed = nonempty_seed("append", 4)
    config = {
        "target": str(tmp_path / "target"),
        "mode": "append",
        "batches": 4,
        "trial_seed": seed,
        "progress": str(tmp_path / "progress"),
        "launch_seed": 1,
        "policy": "pile",
    }
    sink = DeltaSink(config["target"], soak.APP_ID, MergeSpec(mode="append"))
    sink.pre_commit(soak.source_batch(seed, 0, "append"), 0)
    soak.write_progress(Path(config["progress"]), 0)  # then the "crash"
    assert soak.writer(config) == 0
    obs = soak.observe(Path(config["target"]), Path(sink.staging), Path(config["progress"]))
    assert verdict(obs, seed, final=3) == soak.Verdict((), (), ())
    assert obs.ledger == {0: 1, 1: 1, 2: 1, 3: 1}
