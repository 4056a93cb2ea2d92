"""The table zoo (issue 43): generated tables of every feature combination users make
with delta-spark (``tests/table_zoo.py``), each case's batches sent through each
deltasink mode on each engine and through plain delta-spark (the oracle,
``tests/zoo_driver.py``), compactions and checkpoints interleaved; then the rows as
Spark and as delta-rs read them, the change feed and the history's operations compared
(``tests/zoo_compare.py``).

For each case an engine either writes exactly what delta-spark writes, or refuses by
name (a :class:`~deltasink.errors.ConfigurationError` or
:class:`~deltasink.errors.InvalidInputError` kind) with nothing staged and the target
untouched; a refusal is counted per feature and mode. Anything else (a difference, an
error after staging, an unreadable table, another error) is a defect.

``make test`` runs a fixed-seed sample of :data:`COUNT` cases in the delta-spark suite's
process (``CHILD_MODULES``); ``make test-generated`` (CI) a fresh seed and 40 cases,
the share of CI's hour it can take (about 3 s of CPU a case, three writers each); ``make
test-zoo`` a fresh seed and 300 cases (``DELTASINK_ZOO_CASES``), the issue's count.
``DELTASINK_ZOO_REPORT=<file>`` writes the counts and every difference as JSON, which
``python -m tools.zoo_matrix`` turns into docs/deploy.md's matrix.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests import generated, table_zoo
from tests.test_contract_spark import DELTA_SPARK_MODULE, delta_spark
from tests.zoo_compare import compare
from tests.zoo_driver import SUITE, run_all

pytestmark = [pytest.mark.generated, *DELTA_SPARK_MODULE]
__all__ = ["delta_spark"]

#: Cases per run: (table definition, mode, steps), each through both engines.
COUNT = int(os.environ.get("DELTASINK_ZOO_CASES", "0")) or generated.count(sample=1, ci=40)
#: ``DELTASINK_ZOO_ONLY=198,221``: of the seed's :data:`COUNT` cases, run only these
#: (a difference's case number, repeated with its seed in seconds, not the whole run).
ONLY = {int(n) for n in os.environ.get("DELTASINK_ZOO_ONLY", "").split(",") if n.strip()}


def cpu_seconds() -> float:
    """CPU time of this process, its reaped children and its live ones (the JVM, which
    PySpark never reaps): the measure that holds on a shared machine."""
    import resource

    import psutil

    used = sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            used += times.user + times.system
        except psutil.Error:
            continue
    return used


def zoo(spark: Any, root: Path, count: int) -> dict[str, Any]:
    """Draw ``count`` cases, run and compare them: the report (JSON-ready), with the
    run's seed, the wall time of each phase and the CPU time of the whole."""
    cpu = cpu_seconds()
    clock = {"start": time.perf_counter()}
    laps: dict[str, float] = {}

    def lap(name: str) -> None:
        now = time.perf_counter()
        laps[name] = round(now - clock["start"], 1)
        clock["start"] = now

    cases = table_zoo.draw_cases(generated.rng(SUITE), count)
    if ONLY:  # a found case again, alone: the seed's draw, then only these numbers
        cases = [c for c in cases if c.number in ONLY]
    quiet = [logging.getLogger(n) for n in ("SQLQueryContextLogger", "py4j", "deltasink")]
    for logger in quiet:
        logger.disabled = True
    try:
        runs, bases = run_all(spark, cases, root, lap)
        report = compare(spark, cases, root, runs, bases)
    finally:
        for logger in quiet:
            logger.disabled = False
    lap("compare")
    out = report.as_json()
    out["all_differences"] = dict(sorted(report.differences.items()))
    total = sum(laps.values())
    out["run"] = {
        "seed": generated.SEED,
        "cases": len(cases),
        "definitions": len({c.definition.name for c in cases}),
        "seconds": laps,
        "seconds per case": round(total / max(1, len(cases)), 2),
        "cpu seconds": round(cpu_seconds() - cpu, 1),
        "load average": os.getloadavg(),
    }
    return out


def test_every_engine_writes_what_delta_spark_writes_or_refuses_by_name(
    delta_spark: Any, tmp_path: Path
) -> None:
    report = zoo(delta_spark, tmp_path, COUNT)
    where = os.environ.get("DELTASINK_ZOO_REPORT")
    if where:
        Path(where).write_text(json.dumps(report, indent=1, default=str))
    summary = {k: report[k] for k in ("run", "outcomes", "refusals", "differences", "examples")}
    print(json.dumps(summary, indent=1, default=str))
    assert report["run"]["cases"] == (len(ONLY) if ONLY else COUNT)
    assert not report["differences"], (
        f"{sum(report['differences'].values())} defect(s), {generated.banner()}:\n"
        + json.dumps(report["examples"], indent=1)
    )
