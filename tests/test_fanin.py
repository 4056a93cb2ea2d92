"""Fan-in: many writers (app ids) into one target at once, each in a process of its own.
Not timed (``bench/fanin.py`` measures): the target must equal the oracle (the highest
sequence per key), every ``(app, version)`` must be in exactly one commit, and every
writer must finish all its versions (nobody starved by the others' conflicts). And the
retry never re-runs what cannot conflict: a commit beside a concurrent one on other
files lands on its first attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bench.fanin import Case, checks
from deltasink import DeltaSink, MergeSpec
from deltasink._faults import armed
from tests import generated
from tests.forks import FORKS


def _writer(target: str, case: Case, writer: int, ready: Any, go: Any, out: Any) -> None:
    sink = DeltaSink(
        target,
        f"writer-{writer}",
        MergeSpec(keys=["id"], sequence_by="seq"),
        max_commit_attempts=64,
    )
    ready.put(writer)
    go.wait()
    done, failures, attempts = [], [], []
    for version in range(case.versions):
        try:
            report = sink.write(case.batch(writer, version), version)
            done.append(version)
            attempts += [r.telemetry.attempts for r in report.results]
        except Exception as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
    out.put({"writer": writer, "waits": done, "failures": failures, "attempts": attempts})


def run_writers(case: Case, target: str) -> list[dict[str, Any]]:
    ready, out, go = FORKS.Queue(), FORKS.Queue(), FORKS.Event()
    procs = [
        FORKS.Process(target=_writer, args=(target, case, w, ready, go, out))
        for w in range(case.writers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    go.set()  # all at once
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return results


@pytest.mark.generated
@pytest.mark.slow
def test_writers_into_one_target_leave_the_oracles_table(tmp_path: Path) -> None:
    rng = generated.rng("fanin")
    for n in range(generated.count(sample=1, ci=4)):
        layout = "overlap" if n % 2 == 0 else "disjoint"
        writers = rng.randint(3, 4) if generated.mode() == "sample" else rng.randint(4, 12)
        versions = 3 if generated.mode() == "sample" else rng.randint(5, 12)
        case = Case(
            "embedded", writers, layout, versions, rows=40, keys=60, seed=rng.randrange(2**31)
        )
        target = str(tmp_path / f"orders-{n}")
        results = run_writers(case, target)
        found = checks(case, target, results)
        assert found == {"oracle": True, "one_commit_each": True, "nobody_starved": True}, (
            case,
            [r["failures"] for r in results],
        )


def test_a_commit_beside_one_on_other_files_lands_on_its_first_attempt(tmp_path: Path) -> None:
    """Disjoint keys in different files: delta-rs commits on top of the other writer's
    commit (no conflict), so nothing is redone; the same keys conflict and are redone."""
    target = str(tmp_path / "orders")
    spec = MergeSpec(keys=["id"])
    a, b = DeltaSink(target, "a", spec), DeltaSink(target, "b", spec)
    a.write(pa.table({"id": pa.array(range(100), pa.int64()), "v": [0] * 100}), 0)
    b.write(pa.table({"id": pa.array(range(1000, 1100), pa.int64()), "v": [0] * 100}), 0)

    def rival(ids: list[int], version: int) -> Any:
        fired: list[bool] = []

        def action() -> None:
            if not fired:
                fired.append(True)
                b.write(
                    pa.table({"id": pa.array(ids, pa.int64()), "v": [2] * len(ids)}),
                    version,
                )

        return action

    update = pa.table({"id": pa.array([1, 2], pa.int64()), "v": [1, 1]})
    with armed("publish.before_target_commit", rival([1001], 1)):
        beside = a.write(update, 1).results[0].telemetry
    assert (beside.attempts, beside.conflicts) == (1, ())
    with armed("publish.before_target_commit", rival([3], 2)):
        same = a.write(update, 2).results[0].telemetry
    assert same.attempts == 2
    assert same.conflicts[0].winner_app == "b"
