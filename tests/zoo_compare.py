"""The table zoo's read-back (issue 43): each case's tables as Spark and as delta-rs read
them, their change feed and their history's operations, compared writer by writer with
the oracle's (plain delta-spark's) table.

Spark reads many tables in one query (a ``UNION ALL`` of ``to_json`` rows, microseconds
and nulls kept, in the reading session's UTC), so a run of hundreds of cases costs a few
Spark jobs. Identity columns are compared by their rule (non-null, distinct), not their
values: Delta allocates them per task, so two delta-spark writes of the same rows may
differ.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from tests import support
from tests.table_zoo import Case
from tests.zoo_driver import ENGINES, Run, release

__all__ = ["Report", "compare"]

OPTIONS = (
    "map('ignoreNullFields', 'false', 'timestampFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX\", "
    "'timestampNTZFormat', \"yyyy-MM-dd'T'HH:mm:ss.SSSSSS\")"
)
CHUNK = 40


@dataclass
class Report:
    """Outcomes per matrix cell ((feature, mode, engine) -> outcome -> cases), and the
    differences (kind -> descriptions)."""

    #: What plain delta-spark failed on (CHECK violations, what Delta refuses).
    oracle_failures: Counter[str] = field(default_factory=Counter)
    cells: dict[tuple[str, str, str], Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    outcomes: Counter[str] = field(default_factory=Counter)
    #: What was accepted on the way: steps refused as delta-spark refused them, optimize
    #: refused by name, tables delta-rs cannot read even as delta-spark wrote them.
    notes: Counter[str] = field(default_factory=Counter)
    differences: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: Why each refused run was refused (engine, error, the message's first sentence).
    refusals: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "outcomes": dict(self.outcomes),
            "oracle failures": dict(self.oracle_failures),
            "notes": dict(self.notes),
            "refusals": dict(self.refusals.most_common()),
            "differences": {k: len(v) for k, v in sorted(self.differences.items())},
            "examples": {k: v[0] for k, v in sorted(self.differences.items())},
            "cells": [
                {"feature": f, "mode": m, "engine": e, **dict(c)}
                for (f, m, e), c in sorted(self.cells.items())
            ],
        }


def _union(spark: Any, parts: list[tuple[str, str]]) -> dict[str, list[Any]]:
    """Run ``parts`` (key, query of ``(k, j)`` rows) as few queries; per key its rows, or
    the error text when its own query fails."""
    out: dict[str, list[Any]] = {k: [] for k, _ in parts}
    for start in range(0, len(parts), CHUNK):
        chunk = parts[start : start + CHUNK]
        try:
            rows = spark.sql(" UNION ALL ".join(q for _, q in chunk)).collect()
        except Exception:
            rows = []
            for key, query in chunk:
                try:
                    rows += spark.sql(query).collect()
                except Exception as exc:
                    out[key] = [f"unreadable: {str(exc).splitlines()[0][:300]}"]
        for row in rows:
            out[row[0]].append(tuple(row[1:]))
        release(spark)
    return out


def _columns(path: str, identity: bool) -> str:
    """The table's columns (``sk`` left out for identity tables), quoted for Spark."""
    names = [f.name for f in DeltaTable(path).schema().fields]
    return ", ".join(f"`{n}`" for n in names if not (identity and n == "sk"))


def _spark_rows(spark: Any, tables: list[tuple[str, bool]]) -> dict[str, list[Any]]:
    parts = []
    for path, identity in tables:
        row = f"to_json(struct({_columns(path, identity)}), {OPTIONS})"
        parts.append((path, f"SELECT '{path}' AS k, {row} FROM delta.`{path}`"))
        if identity:
            rule = "CAST(count(DISTINCT sk) = count(*) AND count(sk) = count(*) AS STRING)"
            parts.append((path, f"SELECT '{path}', concat('identity ok: ', {rule}) "
                                f"FROM delta.`{path}`"))  # fmt: skip
    found = _union(spark, parts)
    return {k: sorted(map(str, v)) for k, v in found.items()}


def _changes(spark: Any, tables: list[tuple[str, bool, int]]) -> dict[str, list[Any]]:
    """Per table its change feed from version ``start``: per data commit (in order), its
    sorted ``(change type, row)`` s."""
    parts = []
    for path, identity, start in tables:
        row = f"to_json(struct({_columns(path, identity)}), {OPTIONS})"
        query = (
            f"SELECT '{path}' AS k, _commit_version, _change_type, {row} "
            f"FROM table_changes_by_path('{path}', {start})"
        )
        parts.append((path, query))
    out: dict[str, list[Any]] = {}
    for path, rows in _union(spark, parts).items():
        commits: dict[int, list[Any]] = defaultdict(list)
        for row in rows:
            if isinstance(row, str):
                out[path] = [row]
                break
            commits[row[0]].append(tuple(row[1:]))
        else:
            out[path] = [sorted(commits[v]) for v in sorted(commits)]
    return out


def _rs_rows(path: str, identity: bool) -> list[str]:
    try:
        table = DeltaTable(path).to_pyarrow_table()
        if identity:
            table = table.drop_columns(["sk"])
        rows = table.to_pylist()  # a value out of Python's range fails here
    except Exception as exc:
        return [f"unreadable: {type(exc).__name__}: {str(exc)[:200]}"]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


#: Commits deltasink makes by design where plain delta-spark makes none, left out of an
#: engine's history before it is compared: the spark engine's ``ALTER TABLE ADD COLUMNS``
#: before a MERGE with ``schema_evolution`` (the MERGE carrying the marker follows; a
#: crash between leaves a column the retried MERGE fills), and a commit of the ``txn``
#: marker alone where the batch changed no row (Delta's MERGE then commits nothing, but
#: the version must count: docs/guarantees.md). The embedded engine's insert-only fast
#: path (a batch of keys the target does not hold) is a ``WRITE`` where Delta's is a
#: ``MERGE``: the same rows, change feed and marker.
DESIGNED = ("ADD COLUMNS", "marker only")


def operations(path: str, start: int) -> list[str]:
    """The history's operations after version ``start - 1``, oldest first (``marker
    only`` for a commit of a ``txn`` action without data)."""
    out = []
    for log in sorted(Path(path, "_delta_log").glob("*.json")):
        if not re.fullmatch(r"\d{20}\.json", log.name) or int(log.stem) < start:
            continue  # a v2 checkpoint's sidecar is not a commit
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        kinds = {k for a in actions for k in a}
        marker_only = "txn" in kinds and not kinds & {"add", "remove", "cdc", "metaData"}
        # The embedded compaction committed by delta-rs (an object store, or a writer
        # feature deltasink does not write itself, e.g. v2 checkpoints) is a WRITE
        # carrying OPTIMIZE's parameters: by design (docs/deploy.md), an OPTIMIZE here.
        compaction = "zOrderBy" in (info.get("operationParameters") or {})
        operation = "OPTIMIZE" if compaction else str(info.get("operation"))
        out.append("marker only" if marker_only else operation)
    return out


def compare(
    spark: Any,
    cases: list[Case],
    root: Any,
    runs: dict[tuple[int, str], Run],
    bases: dict[str, int],
) -> Report:
    """Read every case's tables back and count each engine's outcome per feature and mode."""
    report = Report()
    tables, owners = [], []  # only what a comparison reads: a refused run's table is not
    for case in cases:
        compared = [e for e in ENGINES if runs[case.number, e].status == "writes"]
        for writer in ("oracle", *compared) if compared else ():
            tables.append((str(root / case.name / writer), case.definition.has("identity column")))
            owners.append(case)
    spark_rows = _spark_rows(spark, tables)
    feeds = [
        (path, identity, bases[c.definition.name] + 1)
        for c, (path, identity) in zip(owners, tables, strict=True)
        if c.definition.has("change data feed")
        and (support.table_version(path) or 0) >= bases[c.definition.name] + 1
    ]
    changes = _changes(spark, feeds)
    for case in cases:
        oracle = str(root / case.name / "oracle")
        identity = case.definition.has("identity column")
        start = bases[case.definition.name] + 1
        for text in runs[case.number, "spark"].oracle_failed.values():
            report.oracle_failures[f"{case.mode}: {text[:120]}"] += 1
        for engine in ENGINES:
            run = runs[case.number, engine]
            path = str(root / case.name / engine)
            try:
                found = _differences(case, run, oracle, path, identity, start, spark_rows, changes)
            except Exception as exc:  # the read-back itself failed: a defect, shown
                found = [("read-back failed", f"{type(exc).__name__}: {exc}"[:600])]
            outcome = (
                "differs" if found else
                f"refused: {run.error}" if run.status == "refused" else "writes"
            )  # fmt: skip
            report.outcomes[f"{engine} {outcome}"] += 1
            if run.status == "refused":
                report.refusals[f"{engine} {run.error}: {_reason(run.detail)}"] += 1
            for note in run.notes:
                report.notes[f"{engine}: {note.partition(':')[0]}"] += 1
            for label in case.definition.labels():
                report.cells[label, case.mode, engine][outcome] += 1
            for kind, text in found:
                report.differences[f"{engine}: {kind}"].append(
                    f"case {case.name} {case.definition.features} partition "
                    f"{case.definition.partition} zone {case.definition.zone}: {text}"
                )
    return report


def _differences(
    case: Case,
    run: Run,
    oracle: str,
    path: str,
    identity: bool,
    start: int,
    spark_rows: dict[str, list[Any]],
    changes: dict[str, list[Any]],
) -> list[tuple[str, str]]:
    if run.status == "defect":
        return [(f"error {run.error}", f"step {run.step}: {run.detail}")]
    if run.status == "refused":
        return []
    found = []
    if spark_rows[path] != spark_rows[oracle]:
        found.append(("rows as Spark reads them", _diff(spark_rows[oracle], spark_rows[path])))
    rs_oracle, rs_engine = _rs_rows(oracle, identity), _rs_rows(path, identity)
    if _unreadable(rs_oracle):  # delta-rs cannot read delta-spark's own table: no reference
        run.notes.append(f"delta-rs cannot read delta-spark's table: {rs_oracle[0][:160]}")
    elif rs_engine != rs_oracle:
        found.append(("rows as delta-rs reads them", _diff(rs_oracle, rs_engine)))
    # A table without a commit after its base has no feed read: the same as an empty one
    # (the engine's commit of the marker alone changes no row).
    if case.definition.has("change data feed") and changes.get(path, []) != changes.get(oracle, []):
        found.append(("change feed", _diff(changes.get(oracle, []), changes.get(path, []))))
    expected = operations(oracle, start)
    got = [op for op in operations(path, start) if op not in DESIGNED or op in expected]
    if expected.count("OPTIMIZE") != got.count("OPTIMIZE"):
        # Each writer compacts its own files: where one wrote a partition as one file,
        # its compaction has nothing to do and commits nothing (and a refused one none):
        # compared without them, a compaction recorded as another operation still shows.
        expected, got = ([op for op in ops if op != "OPTIMIZE"] for ops in (expected, got))
    if len(got) == len(expected):  # the embedded engine's insert-only fast path appends
        got = [e if (e, g) == ("MERGE", "WRITE") else g for e, g in zip(expected, got, strict=True)]
    if got != expected:
        found.append(("history operations", f"delta-spark {expected}, engine {got}"))
    return found


def _reason(detail: str) -> str:
    """A refusal message's first sentence with the table, quoted values and numbers left
    out and the features' names kept (so the same reason on two tables counts once)."""
    text = detail.partition(": ")[2] or detail
    text = re.sub(r"(?:\w+://)?/\S+", "<table>", text)
    text = re.sub(r"'([^']*)'", lambda m: "…" if re.search(r"[/=%:]", m[1]) else m[0], text)
    return re.sub(r"\b\d+\b", "N", text).split(". ")[0][:200]


def _unreadable(rows: list[Any]) -> bool:
    return bool(rows) and isinstance(rows[0], str) and rows[0].startswith("unreadable")


def _diff(expected: list[Any], got: list[Any]) -> str:
    missing = [r for r in expected if r not in got][:2]
    extra = [r for r in got if r not in expected][:2]
    return f"delta-spark only: {missing}; engine only: {extra}"[:900]
