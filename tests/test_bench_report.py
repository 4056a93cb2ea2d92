"""The benchmark report states a goal met or missed only from a quiet run: a run whose
load average exceeded 1.5 on 2 cores (0.75 per core) at its start or end is noise, and
its goal rows say so (a fan-in "met" from a run at load 20 was published once)."""

from __future__ import annotations

from bench.report import _honest, noisy

ROWS = [["fan-in", "≥ 0.9x", "1.47x", "**met**"], ["telemetry", "≤ 1%", "3.6%", "**missed**"]]
COUNTED = [["16 writers: failed or lost writes", "0, equal", "0, equal", "**met**"]]


def run(start: float, end: float, cores: int = 2) -> dict[str, object]:
    return {
        "machine": {"loadavg": [start, 1.0, 1.0], "cores": cores},
        "config": {"loadavg_end": [end, 1.0, 1.0]},
    }


def test_a_run_beside_other_work_gives_no_verdict() -> None:
    results = run(20.8, 10.1)
    assert noisy(results) == 20.8
    assert [r[-1] for r in _honest(ROWS, results)] == ["noisy (load 20.8), not a measurement"] * 2
    assert noisy(run(0.4, 1.7)) == 1.7  # the end counts too
    assert _honest(COUNTED, results) == COUNTED  # a count the load does not move


def test_a_quiet_run_keeps_its_verdicts() -> None:
    assert noisy(run(0.3, 1.2)) is None
    assert _honest(ROWS, run(0.3, 1.2)) == ROWS
    assert noisy(run(2.5, 2.9, cores=8)) is None  # 0.75 per core
