"""The table zoo's driver (issue 43): makes each definition's table once with delta-spark,
copies it per case and writer, and runs each case's steps through plain delta-spark (the
oracle: Delta's own ``MERGE``/``INSERT``/``replaceWhere``, ``OPTIMIZE``, a checkpoint)
and through deltasink on each engine (``embedded``: delta-rs commits, fed ``pyarrow``
tables; ``spark``: the classic delta-spark session).

An engine's run of a case ends as ``writes`` (every step done), ``refused`` (a named
error of :mod:`deltasink.errors`'s refusal kinds, nothing staged for that version and
the target untouched: accepted) or ``defect`` (any other error, or a refusal after
something was staged or written). A batch plain delta-spark fails on (a CHECK
violation) must be refused by name by the engine, which then goes on with the next one.
Spark work runs on ``newSession()`` s of one JVM (one per case: its own time zone and
temp views), a few cases at a time.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from deltasink import DeltaSink, MergeSpec
from deltasink.errors import ConfigurationError, DeltaSinkError, InvalidInputError
from tests import support
from tests.table_zoo import Case, Definition

__all__ = ["Run", "create_bases", "run_all", "spark_ddl"]

APP = "zoo"
ROOT = Path(__file__).resolve().parent.parent
#: The generated suite's name (its ``random.Random``, tests/generated.py).
SUITE = "table-zoo"
ENGINES = ("embedded", "spark")
#: The error kinds a refusal may be (named, raised before anything is staged).
REFUSALS = (InvalidInputError, ConfigurationError)
#: Cases in flight at once on the JVM (each on a session of its own).
WORKERS = 3


@dataclass
class Run:
    """One writer's run of a case: its outcome and notes."""

    status: str = "writes"  # writes | refused | defect
    error: str = ""  # the error's name (refused, defect)
    detail: str = ""
    step: int = -1
    #: Steps refused where delta-spark failed too (CHECK violations), and optimize
    #: steps refused by name.
    notes: list[str] = field(default_factory=list)
    oracle_failed: dict[int, str] = field(default_factory=dict)


def spark_ddl(schema: pa.Schema) -> str:
    """``schema`` as a Spark DDL string (timestamps without zone as ``TIMESTAMP_NTZ``)."""

    def kind(t: pa.DataType) -> str:
        if pa.types.is_timestamp(t):
            return "timestamp" if t.tz else "timestamp_ntz"
        if pa.types.is_struct(t):
            return "struct<" + ", ".join(f"{f.name}: {kind(f.type)}" for f in t) + ">"
        if pa.types.is_map(t):
            return f"map<{kind(t.key_type)}, {kind(t.item_type)}>"
        if pa.types.is_list(t):
            return f"array<{kind(t.value_type)}>"
        names = {pa.int64(): "bigint", pa.int32(): "int", pa.string(): "string"}
        return names.get(t, "date")

    return ", ".join(f"`{f.name}` {kind(f.type)}" for f in schema)


def frame(session: Any, batch: pa.Table) -> Any:
    return session.createDataFrame(batch, schema=spark_ddl(batch.schema))


_SESSIONS = threading.local()


def zoned(spark: Any, zone: str) -> Any:
    """This thread's session in ``zone`` (one per worker and zone, reused: a session per
    case would fill the driver's heap with their states)."""
    cache = _SESSIONS.__dict__.setdefault("by_zone", {})
    if zone not in cache:
        cache[zone] = spark.newSession()
        cache[zone].conf.set("spark.sql.session.timeZone", zone)
    return cache[zone]


def release(spark: Any) -> None:
    """Drop what a finished case left in the driver: Delta's cached logs of its tables
    and the Python side's handles of JVM objects."""
    import gc

    gc.collect()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def create_bases(spark: Any, cases: list[Case], root: Path) -> dict[str, int]:
    """Each definition's table, made once by delta-spark (its DDL, then its cases' first
    rows by ``INSERT``): definition name -> the table's version after that."""
    firsts = {c.definition.name: c for c in cases}

    def make(case: Case) -> tuple[str, int]:
        d = case.definition
        path = str(root / "base" / d.name)
        session = zoned(spark, d.zone)
        for statement in d.ddl(path):
            session.sql(statement)
        frame(session, case.seed_rows).createOrReplaceTempView("seed")
        cols = ", ".join(f"`{c}`" for c in case.seed_rows.schema.names)
        session.sql(f"INSERT INTO delta.`{path}` ({cols}) SELECT {cols} FROM seed")
        return d.name, int(DeltaTable(path).version())

    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(pool.map(make, firsts.values()))


def spec(case: Case) -> MergeSpec:
    d = case.definition
    return {
        "upsert": MergeSpec(keys=["id"]),
        "insert": MergeSpec(keys=["id"], mode="insert"),
        "append": MergeSpec(mode="append"),
        "replace": MergeSpec(mode="replace", replace_by=[replace_column(d)]),
        "upsert+delete": MergeSpec(keys=["id"], delete_when="v = 'D'"),
        "upsert+evolve": MergeSpec(keys=["id"], schema_evolution=True),
    }[case.mode]


def replace_column(d: Definition) -> str:
    return "p" if d.partition in ("string", "date") else "n"


# -- the oracle: plain delta-spark ------------------------------------------------------


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if hasattr(value, "isoformat") and not isinstance(value, int):
        return f"DATE'{value.isoformat()}'"
    return str(value)


def oracle_step(session: Any, case: Case, path: str, batch: pa.Table) -> None:
    """``batch`` applied the way a delta-spark user writes ``case.mode``."""
    t = f"delta.`{path}`"
    frame(session, batch).createOrReplaceTempView("batch")
    names = list(batch.schema.names)
    cols = ", ".join(f"`{c}`" for c in names)
    values = ", ".join(f"s.`{c}`" for c in names)
    sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in names if c != "id")
    insert = f"WHEN NOT MATCHED THEN INSERT ({cols}) VALUES ({values})"
    on = f"MERGE INTO {t} t USING batch s ON t.id = s.id"
    if case.mode == "upsert":
        session.sql(f"{on} WHEN MATCHED THEN UPDATE SET {sets} {insert}")
    elif case.mode == "insert":
        session.sql(f"{on} {insert}")
    elif case.mode == "append":
        session.sql(f"INSERT INTO {t} ({cols}) SELECT {cols} FROM batch")
    elif case.mode == "upsert+delete":
        session.sql(
            f"{on} WHEN MATCHED AND s.v = 'D' THEN DELETE WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT (s.v <=> 'D') THEN INSERT ({cols}) VALUES ({values})"
        )
    elif case.mode == "upsert+evolve":
        session.sql(
            f"MERGE WITH SCHEMA EVOLUTION INTO {t} t USING batch s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    else:  # replace: the rows whose replace_by values the batch has, in one commit
        column = replace_column(case.definition)
        found = sorted({v for v in batch.column(column).to_pylist() if v is not None})
        where = f"`{column}` IN ({', '.join(map(_literal, found))})" if found else "false"
        out = session.table("batch")
        if case.definition.has("default column"):
            out = out.selectExpr("*", "7 AS d")
        out.write.format("delta").mode("overwrite").option("replaceWhere", where).save(path)


def checkpoint(session: Any, path: str, engine: str) -> None:
    """A checkpoint as the writer's own library makes one (delta-rs or delta-spark)."""
    if engine == "embedded":
        DeltaTable(path).create_checkpoint()
        return
    log = session._jvm.org.apache.spark.sql.delta.DeltaLog
    log.forTable(session._jsparkSession, path).checkpoint()


def run_oracle(spark: Any, case: Case, path: str) -> dict[int, str]:
    """The case through plain delta-spark; the steps it failed -> the error's first line."""
    session = zoned(spark, case.definition.zone)
    failed = {}
    for i, step in enumerate(case.steps):
        if step == "optimize":
            session.sql(f"OPTIMIZE delta.`{path}`")
        elif step == "checkpoint":
            checkpoint(session, path, "spark")
        else:
            try:
                oracle_step(session, case, path, step)
            except Exception as exc:
                failed[i] = _first_error(exc)
    return failed


# -- deltasink ----------------------------------------------------------------------------


def _staged(path: str) -> list[int]:
    return support.staged_versions(f"{path}_deltasink_staging/{APP}")


def run_steps(engine: str, spark: Any, case: Case, path: str) -> list[str]:
    """The case through deltasink on ``engine``: per step ``ok``, ``refused <Name>``
    (named, nothing staged, the target untouched: the run goes on with the next batch,
    at the same version) or ``defect <Name>: <detail>`` (the run stops)."""
    session = zoned(spark, case.definition.zone) if engine == "spark" else None
    extra = {"spark": session} if session is not None else {}
    log: list[str] = []
    version = 0
    try:
        sink = DeltaSink(path, APP, spec(case), engine=engine, **extra)  # type: ignore[arg-type]
    except DeltaSinkError as exc:
        kind = "refused" if isinstance(exc, REFUSALS) else "defect"
        return [f"{kind} {type(exc).__name__}: {_text(exc)}"]
    for step in case.steps:
        before = support.table_version(path)
        staged = _staged(path)
        try:
            if step == "optimize":
                sink.optimize()
            elif step == "checkpoint":
                checkpoint(session, path, engine)
            else:
                sink.write(step if engine == "embedded" else frame(session, step), version)
                version += 1
            log.append("ok")
        except Exception as exc:
            name = type(exc).__name__
            if step == "checkpoint":
                log.append(f"checkpoint failed {name}: {_text(exc)}")
            elif not isinstance(exc, REFUSALS) or support.table_version(path) != before:
                log.append(f"defect {name}: {_text(exc)}")
                break
            elif _staged(path) != staged:
                log.append(f"defect {name}: refused after staging: {_text(exc)}")
                break
            else:
                log.append(f"refused {name}: {_text(exc)}")
    return log


def classify(case: Case, log: list[str], oracle_failed: dict[int, str]) -> Run:
    """An engine's step log judged against the oracle's failed steps."""
    run = Run(oracle_failed=oracle_failed)
    for i, entry in enumerate(log):
        run.step = i
        kind, _, rest = entry.partition(" ")
        name, _, detail = rest.partition(": ")
        if kind == "defect":
            run.status, run.error, run.detail = "defect", name, detail
            return run
        step = case.steps[i] if i < len(case.steps) else "open"
        if isinstance(step, str):
            if kind != "ok":
                run.notes.append(f"{step} {kind} {name}".strip())
        elif i in oracle_failed and kind == "ok":
            run.status, run.error = "defect", "accepted"
            run.detail = "a batch delta-spark refuses was written"
            return run
        elif i in oracle_failed:
            run.notes.append(f"refused what delta-spark refuses: {name}")
        elif kind == "refused" and run.status == "writes":
            run.status, run.error, run.detail = "refused", name, detail
    return run


def _first_error(exc: BaseException) -> str:
    """Delta's error class and message (``[DELTA_...] ...``), else the first line."""
    text = str(exc)
    found = re.search(r"\[[A-Z][A-Z0-9_.]+\][^\n]*", text)
    return (found.group(0) if found else text.strip().splitlines()[0])[:200]


def _text(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip().replace("\n", " ")[:600]


def _embedded_child(cases: list[Case], root: Path) -> subprocess.Popen[str]:
    """The embedded engine's runs in a process of their own (a ``delete_when`` on Arrow
    input starts Sail, which cannot share a process with the classic session), beside
    the oracle's and the spark engine's runs here."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
    }
    (root / "cases.pickle").write_bytes(pickle.dumps(cases))
    command = [sys.executable, "-m", "tests.zoo_driver", str(root)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def main(argv: list[str]) -> int:
    """The child: ``python -m tests.zoo_driver <root>`` runs the cases of
    ``<root>/cases.pickle`` and writes ``<root>/embedded.json`` (case number -> step
    log)."""
    root = Path(argv[0])
    logging.getLogger("deltasink").disabled = True
    cases = pickle.loads((root / "cases.pickle").read_bytes())
    logs = {
        c.number: run_steps("embedded", None, c, str(root / c.name / "embedded")) for c in cases
    }
    (root / "embedded.json").write_text(json.dumps(logs))
    return 0


def run_all(
    spark: Any, cases: list[Case], root: Path, lap: Callable[[str], None]
) -> tuple[dict[tuple[int, str], Run], dict[str, int]]:
    """Every case through the oracle and both engines: (case number, engine) -> its
    run, and each definition's version once made (the cases start after it). Tables at
    ``root/<case>/{oracle,embedded,spark}``."""
    bases = create_bases(spark, cases, root)
    release(spark)
    lap("create")
    for case in cases:
        base = root / "base" / case.definition.name
        for writer in ("oracle", *ENGINES):
            shutil.copytree(base, root / case.name / writer)
    lap("copy")
    child = _embedded_child(cases, root)

    def oracle(case: Case) -> dict[int, str]:
        failed = run_oracle(spark, case, str(root / case.name / "oracle"))
        if case.number % WORKERS == 0:
            release(spark)
        return failed

    def on_spark(case: Case) -> list[str]:
        log = run_steps("spark", spark, case, str(root / case.name / "spark"))
        if case.number % WORKERS == 0:
            release(spark)
        return log

    with ThreadPoolExecutor(WORKERS) as pool:
        failed = dict(zip([c.number for c in cases], pool.map(oracle, cases), strict=True))
        lap("oracle")
        spark_logs = list(pool.map(on_spark, cases))
    lap("spark")
    _, errors = child.communicate(timeout=1800)
    assert child.returncode == 0, errors[-3000:]
    lap("embedded (its own process, beside oracle and spark)")
    (root / "spark.json").write_text(json.dumps(spark_logs))
    (root / "oracle.json").write_text(json.dumps(failed))
    embedded = json.loads((root / "embedded.json").read_text())
    runs: dict[tuple[int, str], Run] = {}
    for case, log in zip(cases, spark_logs, strict=True):
        runs[case.number, "spark"] = classify(case, log, failed[case.number])
        runs[case.number, "embedded"] = classify(
            case, embedded[str(case.number)], failed[case.number]
        )
    return runs, bases


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
