"""The benchmark report states a goal met or missed only from a quiet run: a run whose
load average exceeded 1.5 on 2 cores (0.75 per core) at its start or end is noise, and
its goal rows say so (a fan-in "met" from a run at load 20 was published once)."""

from __future__ import annotations

import pytest

from bench.report import _honest, _steady, baseline_spread, noisy

ROWS = [["fan-in", "≥ 0.9x", "1.47x", "**met**"], ["telemetry", "≤ 1%", "3.6%", "**missed**"]]
COUNTED = [["16 writers: failed or lost writes", "0, equal", "0, equal", "**met**"]]


def run(start: float, end: float, cores: int = 2) -> dict[str, object]:
    return {
        "machine": {"loadavg": [start, 1.0, 1.0], "cores": cores},
        "config": {"loadavg_end": [end, 1.0, 1.0]},
    }


def test_a_run_beside_other_work_gives_no_verdict() -> None:
    results = run(20.8, 10.1)
    assert noisy(results) == "load 20.8"
    assert [r[-1] for r in _honest(ROWS, results)] == ["noisy (load 20.8), not a measurement"] * 2
    assert noisy(run(0.4, 1.7)) == "load 1.7"  # the end counts, when nothing else tells
    # the run's own processes raised the load at its end; other processes used little
    quiet_others = {**run(0.4, 6.0), "config": {"loadavg_end": [6.0], "other_cores": 0.05}}
    assert noisy(quiet_others) is None
    busy = {**run(0.4, 6.0), "config": {"loadavg_end": [6.0], "other_cores": 0.9}}
    assert noisy(busy) == "other work used 0.90 cores"
    assert _honest(COUNTED, results) == COUNTED  # a count the load does not move


def test_a_quiet_run_keeps_its_verdicts() -> None:
    assert noisy(run(0.3, 1.2)) is None
    assert _honest(ROWS, run(0.3, 1.2)) == ROWS
    assert noisy(run(2.5, 2.9, cores=8)) is None  # 0.75 per core


def test_a_measurement_whose_baseline_moved_gives_no_verdict() -> None:
    """A quiet run whose bare MERGE took 1.0 s in one run and 1.6 s in another measured
    nothing: the ratio to it is not a verdict (the fan-in rows' serial baseline once
    moved tenfold between rows)."""
    steady = {
        "bare": {"min": 1.0, "max": 1.2, "median": 1.1},
        "sink": {"min": 1.0, "max": 3.0, "median": 1.1},
    }
    moved = {"bare": {"min": 1.0, "max": 1.6, "median": 1.1}, "sink": steady["sink"]}
    row = [["Overhead, 1M target, 10k batch, random keys", "≤ 1.15x", "1.05x", "**met**"]]
    assert baseline_spread({"random": steady}) == 1.2  # ours may move: not the baseline
    assert _steady(row, {"sections": {"p1": {"random": steady}}}) == row
    assert _steady(row, {"sections": {"p1": {"random": moved}}})[0][-1] == (
        "noisy (baseline moved 1.60x), not a measurement"
    )
    assert _steady(COUNTED, {"sections": {"p1": {"random": moved}}}) == COUNTED


def test_a_fan_in_case_beside_other_work_or_with_a_moving_serial_twin_gives_no_verdict() -> None:
    from bench.fanin import _summary, goal_rows

    def runs(serial: list[float], load: float) -> dict[str, object]:
        return {
            "case": {
                "engine": "embedded",
                "layout": "overlap",
                "writers": 8,
                "placement": "processes",
            },
            "runs": [
                {
                    "ratio": 0.95,
                    "rate": 10 * s * 0.95,
                    "serial_rate": 10 * s,
                    "wait_mean_s": 0.1,
                    "wait_p99_slowest_s": 0.3,
                    "attempts_mean": 1.0,
                    "attempts_max": 1,
                    "conflicts": 0,
                    "failed": 0,
                    "checks": {"oracle": True},
                    "loadavg_start": [load],
                    "loadavg": [load],
                }
                for s in serial
            ],
        }

    def verdicts(case: dict[str, object]) -> list[str]:
        return [r[-1] for r in goal_rows({"cases": [_summary(case)]})]

    assert verdicts(runs([1.0, 1.1, 1.2, 1.0, 1.1], 0.4)) == ["**met**"] * 3
    assert (
        verdicts(runs([1.0, 1.1, 1.2, 1.0, 1.1], 3.0))[1:]
        == ["noisy (load 3.0), not a measurement"] * 2
    )
    # the writers' own processes raised the load; other processes used next to nothing
    measured = runs([1.0, 1.1, 1.2, 1.0, 1.1], 6.0)
    for r in measured["runs"]:  # type: ignore[attr-defined]
        r["other_cores"] = 0.05
    assert verdicts(measured) == ["**met**"] * 3
    for r in measured["runs"]:  # type: ignore[attr-defined]
        r["other_cores"] = 0.8
    assert verdicts(measured)[1:] == ["noisy (other work used 0.80 cores), not a measurement"] * 2
    assert (
        verdicts(runs([1.0, 10.0, 1.2, 1.0, 1.1], 0.4))[1:]
        == ["noisy (serial baseline moved 10.00x), not a measurement"] * 2
    )


def size_mode(
    sink: list[float], native: list[float], *, other: float = 0.05, same: bool = True
) -> dict[str, object]:
    """A mode of ``bench.size``'s section: the sides' seconds per repetition."""

    def trials(times: list[float], jvm: int) -> list[dict[str, object]]:
        return [
            {"seconds": t, "rss_peak": {"jvm": jvm, "python": 2**27}, "heap_peak": 2**28}
            for t in times
        ]

    def stat(xs: list[float]) -> dict[str, float]:
        return {"min": min(xs), "max": max(xs), "median": sorted(xs)[len(xs) // 2]}

    return {
        "mode": "upsert",
        "target_rows": 10_000_000,
        "batch_rows": 1_000_000,
        "updates": 500_000,
        "stats": {"sink": stat(sink), "native": stat(native)},
        "time_ratios": [a / b for a, b in zip(sink, native, strict=True)],
        "jvm_ratios": [1.1] * len(sink),
        "same": [same] * len(sink),
        "trials": {"sink": trials(sink, 1100 * 2**20), "native": trials(native, 1000 * 2**20)},
        "loadavg_start": [0.3],
        "loadavg": [2.0],
        "other_cores": other,
        "cores": 2,
    }


def test_a_size_mode_gives_a_time_verdict_only_when_quiet_steady_and_equal() -> None:
    """bench.size: the time row is noise when other processes worked meanwhile or the
    native MERGE's time moved, and missed whatever the noise when the two targets
    differ; the driver's peak RSS row keeps its verdict (memory, not time)."""
    from bench.size import goal_rows

    def verdicts(mode: dict[str, object]) -> list[str]:
        return [r[-1] for r in goal_rows({"modes": [mode]})]

    quiet = size_mode([11.0, 12.0, 11.5, 11.0, 12.0], [10.0, 10.5, 10.2, 10.0, 10.4])
    assert verdicts(quiet) == ["**met**", "**met**"]
    busy = size_mode([11.0, 12.0, 11.5], [10.0, 10.5, 10.2], other=0.9)
    assert verdicts(busy) == ["noisy (other work used 0.90 cores), not a measurement", "**met**"]
    moved = size_mode([11.0, 12.0, 11.5], [10.0, 16.0, 10.2])
    assert verdicts(moved)[0] == "noisy (baseline moved 1.60x), not a measurement"
    differ = size_mode([11.0, 12.0, 11.5], [10.0, 10.5, 10.2], other=0.9, same=False)
    assert verdicts(differ)[0] == "**missed**"
    slow = size_mode([13.0, 14.0, 13.5], [10.0, 10.5, 10.2])
    assert verdicts(slow)[0] == "**missed**"


def test_the_size_section_is_spliced_into_a_report() -> None:
    """``--only size --splice`` adds the size section and its goal rows to a report and
    keeps the rest; a second splice replaces them."""
    from bench.report import splice
    from bench.size import render

    section = {
        "settings": {"target_rows": 10_000_000, "batch_rows": 1_000_000, "runs": 5},
        "conf": {"spark.executor.memory": "3g", "spark.driver.memory": "2g"},
        "modes": [size_mode([11.0, 12.0, 11.5], [10.0, 10.5, 10.2])],
    }
    section["settings"]["updates"] = 0.5  # type: ignore[index]
    results = {**run(0.3, 1.0), "sections": {"size": section}}
    results["machine"]["date"] = "2026-11-29 16:00 UTC"  # type: ignore[index]
    report = "# r\n\n## Goals\n\n| a | b | c | d |\n|---|---|---|---|\n| P1 | x | y | z |\n"
    report += "\n## P1\n\nbody\n"
    once = splice(report, results, command="make bench BENCH_ARGS='--only size --splice'")
    twice = splice(once, results, command="make bench BENCH_ARGS='--only size --splice'")
    assert once == twice
    assert "| P1 | x | y | z |" in once
    assert "## P1\n\nbody" in once
    assert once.count("| Size on a cluster:") == 2
    assert render(section) in once


def test_the_size_benchmark_sizes_its_cluster_without_changing_the_tests_one() -> None:
    """``bench.size`` passes its memory and optimizer settings to the tests' cluster;
    without them the drivers' defaults stay the tests' (small JVMs, cheap plans)."""
    from bench.size import Settings, cluster_conf
    from tests.cluster import app_conf

    tests = app_conf("spark://127.0.0.1:7077", ["a.jar"])
    assert tests["spark.executor.memory"] == "512m"
    assert tests["spark.sql.adaptive.enabled"] == "false"
    bench = app_conf("spark://127.0.0.1:7077", ["a.jar"], cluster_conf(Settings()))
    assert bench["spark.executor.memory"] == "3g"
    assert bench["spark.driver.memory"] == "2g"
    assert bench["spark.sql.adaptive.enabled"] == "true"
    assert bench["spark.executor.extraJavaOptions"] == "-XX:+UseG1GC"  # the full JIT
    assert {k: v for k, v in bench.items() if k not in cluster_conf(Settings())} == {
        k: v for k, v in tests.items() if k not in cluster_conf(Settings())
    }


def test_a_splice_of_a_part_without_its_own_section_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--only stores --splice`` re-rendered the size section under the stores run's
    command and left the stores section as it was; it is refused before anything runs."""
    from bench import run

    with pytest.raises(SystemExit):
        run.main(["--only", "stores", "--splice"])
    assert "--splice replaces only the sections of" in capsys.readouterr().err
