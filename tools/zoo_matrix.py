"""docs/deploy.md's feature matrix, from a table zoo run (``tests/test_table_zoo.py``).

    python -m tools.zoo_matrix                 # run the zoo (CI size, fresh seed), rewrite the matrix
    python -m tools.zoo_matrix report.json     # the matrix of a run's report
    python -m tools.zoo_matrix a.json b.json   # of several runs (counts added up)
    DELTASINK_SEED=<n> python -m tools.zoo_matrix   # a given seed

A run writes its report with ``DELTASINK_ZOO_REPORT=<file>``. Each row is a feature (or
a partitioning, or a session time zone) and a mode; each engine's cell says how the
cases with that feature and mode ended: ``writes (N cases)`` (exactly what plain
delta-spark writes), ``refused: ErrorName`` (by name, nothing staged) or ``differs``
(a defect: see the report's ``all_differences``). A case has several features, so a
refusal counts under each of its features (the embedded engine refuses a table for its
one feature outside the set it writes, e.g. identity columns). The matrix replaces what
lies between the ``zoo-matrix`` markers of docs/deploy.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "deploy.md"
START, END = "<!-- zoo-matrix:start -->", "<!-- zoo-matrix:end -->"
ENGINES = ("embedded", "spark")


def cell(counts: dict[str, int]) -> str:
    """``{"writes": 3, "refused: X": 1}`` -> ``writes (3 cases), refused: `X` (1)``."""
    parts = []
    if counts.get("differs"):
        parts.append(f"**differs** ({counts['differs']})")
    if counts.get("writes"):
        parts.append(f"writes ({counts['writes']} case{'s' * (counts['writes'] != 1)})")
    for key in sorted(k for k in counts if k.startswith("refused: ")):
        parts.append(f"refused: `{key.removeprefix('refused: ')}` ({counts[key]})")
    return ", ".join(parts) or "(no case)"


def merged(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Several runs' reports as one: cells and refusal reasons added up, the runs listed."""
    cells: dict[tuple[str, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    refusals: dict[str, int] = defaultdict(int)
    for report in reports:
        for entry in report["cells"]:
            key = (entry["feature"], entry["mode"], entry["engine"])
            for k, v in entry.items():
                if k not in ("feature", "mode", "engine"):
                    cells[key][k] += v
        for reason, n in report.get("refusals", {}).items():
            refusals[reason] += n
    return {
        "runs": [r["run"] for r in reports],
        "cells": [{"feature": f, "mode": m, "engine": e, **c} for (f, m, e), c in cells.items()],
        "refusals": dict(sorted(refusals.items(), key=lambda kv: -kv[1])),
        "differences": {
            k: sum(r["differences"].get(k, 0) for r in reports)
            for k in {k for r in reports for k in r["differences"]}
        },
    }


def matrix(report: dict[str, Any]) -> str:
    """The markdown table of ``report`` (per feature and mode, per engine; one run's
    report or :func:`merged`'s), then why the engines refused."""
    rows: dict[tuple[str, str], dict[str, dict[str, int]]] = defaultdict(dict)
    for entry in report["cells"]:
        counts = {k: v for k, v in entry.items() if k not in ("feature", "mode", "engine")}
        rows[entry["feature"], entry["mode"]][entry["engine"]] = counts
    runs = report.get("runs") or [report["run"]]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    cases = sum(r["cases"] for r in runs)
    tables = sum(r["definitions"] for r in runs)
    lines = [
        f"Seed{'s' * (len(runs) > 1)} {seeds}: {cases} cases (table, mode, batches) over "
        f"{tables} tables, each through both engines and plain delta-spark; "
        f"{sum(report['differences'].values())} differences.",
        "",
        "| feature (table made by delta-spark) | mode | embedded engine | spark engine |",
        "|---|---|---|---|",
    ]
    for (feature, mode), engines in sorted(rows.items()):
        cells = " | ".join(cell(engines.get(e, {})) for e in ENGINES)
        lines.append(f"| {feature} | {mode} | {cells} |")
    if report.get("refusals"):
        lines += ["", "Why (the refusal's message, cases):", ""]
        for reason, n in report["refusals"].items():
            lines.append(f"- {reason.replace('|', '/')} ({n})")
    return "\n".join(lines)


def write_doc(text: str, doc: Path = DOC) -> None:
    """Put ``text`` between the markers of ``doc``."""
    content = doc.read_text()
    head, found, rest = content.partition(START)
    if not found or END not in rest:
        raise SystemExit(f"{doc} has no {START} ... {END} section")
    doc.write_text(f"{head}{START}\n{text}\n{END}{rest.partition(END)[2]}")


def run_zoo() -> dict[str, Any]:
    """The zoo at its CI size (a fresh seed unless ``DELTASINK_SEED``), its report."""
    with tempfile.TemporaryDirectory(prefix="deltasink-zoo-matrix-") as folder:
        where = Path(folder) / "report.json"
        env = {**os.environ, "DELTASINK_GENERATED": "ci", "DELTASINK_ZOO_REPORT": str(where)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", ""]
        subprocess.run([*command, "tests/test_table_zoo.py"], cwd=ROOT, env=env, check=False)
        if not where.exists():
            raise SystemExit("the zoo wrote no report (see its output above)")
        report: dict[str, Any] = json.loads(where.read_text())
        return report


def main(argv: list[str]) -> int:
    reports = [json.loads(Path(a).read_text()) for a in argv] or [run_zoo()]
    report = reports[0] if len(reports) == 1 else merged(reports)
    text = matrix(report)
    write_doc(text)
    print(text)
    return 1 if report["differences"] else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
