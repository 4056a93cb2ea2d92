"""Every predicate means on every engine what it means in Spark SQL, proven against
Spark itself: generated predicates (``tests/predicate_grammar.py``) over rows of every
column type, evaluated by classic PySpark (the oracle) and by every evaluator a
predicate field reaches, in every field, on both engines.

For each generated predicate and each field it is either refused when the spec or check
is built or at the first batch (a :class:`~deltasink.ConfigurationError`), or:

* batched, over the grammar's rows: the text Sail gets (the embedded engine's Spark, in
  a process of its own) and the text DataFusion gets (delta-rs's ``QueryBuilder``)
  select exactly the rows the oracle selects (``tests/predicate_engines.py``);
* through the real fields, for a sample joined into one predicate per field
  (``tests/predicate_fields.py``): on the ``spark`` engine (delta-spark, this process's
  classic session), on the embedded engine with Arrow input (Sail checks the rows,
  delta-rs publishes; the worker process) and with classic DataFrames (Spark checks the
  rows, delta-rs publishes); the targets hold exactly what the oracle's selection implies.

Every setting is proven twice: with Spark's ANSI mode on and off (:data:`MODES`; the
texts translated for the mode, the oracle run in it, one batched job per mode; the real
fields run with ANSI mode on).

Where Spark fails (ANSI mode: an overflow, a value out of a type's range) the others
must fail too; where Spark's own failure depends on what its optimizer keeps (a failing
operand beside ``OR TRUE``) and an engine answers, the case is counted as
``spark-fails``, reported, and not a mismatch. Refusals and outcomes are counted per
construct; ``DELTASINK_PREDICATE_REPORT=<file>`` writes the counts as JSON.

``make test`` runs a fixed-seed sample (this module runs in the delta-spark suite's
process, ``CHILD_MODULES``); ``make test-generated`` a fresh seed and
:data:`COUNT`'s CI size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from deltasink.errors import ConfigurationError, InvalidInputError
from deltasink.shapes.sparksql.fields import FIELDS, check, translate, types_of
from tests import generated, predicate_fields, predicate_grammar
from tests.predicate_engines import Result, datafusion_batched, spark_batched
from tests.test_contract_spark import REASON, delta_spark

pytestmark = [
    pytest.mark.generated,
    pytest.mark.jvm,
    pytest.mark.delta_spark,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    pytest.mark.timeout(0),  # as in the delta-spark suite (its run is bounded)
]
__all__ = ["delta_spark"]

ROOT = Path(__file__).resolve().parent.parent
#: Predicates per run, and how many of them go through the real fields.
COUNT = generated.count(sample=150, ci=2400)
FIELD_SAMPLE = generated.count(sample=8, ci=12)
#: Predicates joined into one per setting and real-field run.
ROUND = 12


#: The ANSI settings proven: Spark's default (on) and off (``spark.sql.ansi.enabled``):
#: each setting's texts are translated for that mode, and the oracle runs in it.
MODES = {"": True, " (ANSI off)": False}


@contextmanager
def utc(spark: Any, ansi: bool = True) -> Any:
    """The session in the suite's time zone (:data:`~tests.predicate_grammar.ZONE`, the
    one its specs record) and ANSI mode ``ansi`` while the block runs: the oracle reads
    a zone-less timestamp literal and ``hour(ts)`` in it."""
    confs = {"spark.sql.session.timeZone": predicate_grammar.ZONE}
    confs["spark.sql.ansi.enabled"] = "true" if ansi else "false"
    before = {key: spark.conf.get(key) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


def _texts(drawn: predicate_grammar.Drawn) -> dict[str, tuple[str, str | None, str | None] | str]:
    """Per setting and ANSI mode (the setting's name, `` (ANSI off)`` added): (the
    user's text, Sail's text, DataFusion's text: ``None`` where the setting does not
    reach that engine), or why it is refused."""
    columns = types_of(predicate_grammar.SCHEMA)
    zone = predicate_grammar.ZONE
    out: dict[str, tuple[str, str | None, str | None] | str] = {}
    for suffix, ansi in MODES.items():
        for name, field in FIELDS.items():
            text = drawn.qualified if field.scope.qualifier == "required" else drawn.plain
            try:
                check(text, name, zone, ansi)
                sail = (
                    translate(text, name, columns, "spark", zone, ansi)
                    if "sail" in field.evaluators
                    else None
                )
                fusion = (
                    translate(text, name, columns, "delta-rs", zone, ansi)
                    if "delta-rs" in field.evaluators
                    else None
                )
            except (ConfigurationError, InvalidInputError) as exc:
                out[name + suffix] = f"refused: {type(exc).__name__}: {exc}"
                continue
            out[name + suffix] = (text, sail, fusion)
    return out


def _compare(oracle: Result, found: Result) -> str:
    """``equal``, ``both fail``, ``spark-fails`` (Spark failed, the engine answered) or
    ``mismatch`` (other values, or the engine failed where Spark answered: accepted, then
    unpublishable)."""
    if found == oracle:
        return "equal"
    if isinstance(oracle, str) and isinstance(found, str):
        return "both fail"
    if isinstance(oracle, str):
        return "spark-fails"
    return "mismatch"


def _shrunk(spark: Any, text: str, name: str, ansi: bool = True) -> str | None:
    """The smallest boolean part of ``text`` on which DataFusion (this process) and Spark
    still differ, for a failure's message; ``None`` if no smaller one does (or the search
    fails: it never hides the mismatch it was asked about)."""
    try:
        return _shrink(spark, text, name, ansi)
    except Exception:
        return None


def _shrink(spark: Any, text: str, name: str, ansi: bool) -> str | None:
    import sqlglot

    columns = types_of(predicate_grammar.SCHEMA)
    rows = predicate_grammar.rows()
    parts = sorted(
        {n.sql("spark") for n in sqlglot.parse_one(text, read="spark").walk()} - {text}, key=len
    )
    for part in parts:
        try:
            check(part, name, predicate_grammar.ZONE, ansi)  # type: ignore[arg-type]
            fusion = translate(part, name, columns, "delta-rs", predicate_grammar.ZONE, ansi)  # type: ignore[arg-type]
        except Exception:  # not a predicate of its own, or refused
            continue
        with utc(spark, ansi):
            expected = spark_batched(spark, rows, [part])[0]
        if _compare(expected, datafusion_batched(rows, [fusion])[0]) == "mismatch":
            return f"{part!r} (DataFusion: {fusion})"
    return None


def _worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The embedded engine's part (Sail) in a process of its own: a classic session and
    Sail's Spark Connect session cannot share one."""
    with tempfile.TemporaryDirectory(prefix="deltasink-sail-worker-") as folder:
        source, target = Path(folder) / "in.json", Path(folder) / "out.json"
        source.write_text(json.dumps(payload))
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
        }
        done = subprocess.run(
            [sys.executable, "-m", "tests.predicate_engines", "embedded", str(source), str(target)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result: dict[str, Any] = json.loads(target.read_text())
        return result


def _rounds(
    sample: list[predicate_grammar.Drawn], oracle: dict[str, Result], ids: list[int]
) -> list[dict[str, Any]]:
    """The real-field sample in rounds of at most :data:`ROUND` predicates, each joined
    into one predicate per setting (Spark's analysis of a much longer one takes minutes),
    with the grouped ``Id`` s Spark's selections pick."""
    out = []
    for start in range(0, len(sample), ROUND):
        part = sample[start : start + ROUND]
        selections = [
            {i for i, v in zip(ids, oracle[d.plain], strict=True) if v is True} for d in part
        ]
        out.append(
            {
                "groups": len(part),
                "plain": predicate_fields.combined([d.plain for d in part]),
                "qualified": predicate_fields.combined([d.qualified for d in part], qualified=True),
                "chosen": sorted(predicate_fields.selected_ids(selections)),
            }
        )
    return out


def _real_fields(spark: Any, rounds: list[dict[str, Any]], folder: Path) -> dict[str, list[Any]]:
    """The classic-session runs of each round: the spark engine, and the embedded engine
    with classic DataFrames."""
    out: dict[str, list[Any]] = {"spark": [], "embedded-classic": []}
    with utc(spark):
        for n, spec in enumerate(rounds):
            grouped = predicate_fields.grouped_rows(spec["groups"])
            for engine in out:
                out[engine].append(
                    predicate_fields.run(
                        engine,
                        grouped,
                        spec["plain"],
                        spec["qualified"],
                        set(spec["chosen"]),
                        spark=spark,
                        folder=str(folder / f"{engine}-{n}"),
                    )
                )
    return out


def test_generated_predicates_mean_on_every_engine_what_they_mean_in_spark(
    delta_spark: Any, tmp_path: Path
) -> None:
    import logging
    import time

    quiet = logging.getLogger("SQLQueryContextLogger")  # logs each failure of the oracle
    quiet.disabled = True
    try:
        _differential(delta_spark, tmp_path, time.perf_counter)
    finally:
        quiet.disabled = False


def _differential(delta_spark: Any, tmp_path: Path, now: Any) -> None:
    clock = {"start": now()}

    def lap(name: str) -> None:
        clock[name] = round(now() - clock.pop("start"), 2)
        clock["start"] = now()

    drawn = predicate_grammar.draw(generated.rng("predicate-grammar"), COUNT)
    rows = predicate_grammar.rows()
    ids = rows.column("Id").to_pylist()
    texts = [_texts(d) for d in drawn]
    plain = [d.plain for d in drawn]
    oracles: dict[bool, dict[str, Result]] = {}
    for ansi in MODES.values():
        with utc(delta_spark, ansi):
            oracles[ansi] = dict(zip(plain, spark_batched(delta_spark, rows, plain), strict=True))
    oracle = oracles[True]
    lap("oracle")
    fusion_texts = sorted(
        {t[2] for case in texts for t in case.values() if isinstance(t, tuple) and t[2]}
    )
    fusion = dict(zip(fusion_texts, datafusion_batched(rows, fusion_texts), strict=True))
    lap("datafusion")

    # the sample through the real fields (ANSI on): accepted in every setting, a value;
    # drawn, not pinned (their long texts slow Spark's analysis; batched above)
    pinned = {text for _, text in predicate_grammar.PINNED}
    sample = [
        d
        for d, case in zip(drawn, texts, strict=True)
        if all(isinstance(t, tuple) for n, t in case.items() if "(" not in n)
        and not isinstance(oracle[d.plain], str)
        and d.plain not in pinned
    ][:FIELD_SAMPLE]
    rounds = _rounds(sample, oracle, ids)
    sail_texts = sorted(
        {t[1] for case in texts for t in case.values() if isinstance(t, tuple) and t[1]}
    )
    worker = _worker({"exprs": sail_texts, "rounds": rounds})
    sail = dict(zip(sail_texts, worker["exprs"], strict=True))
    lap("sail worker")
    real = _real_fields(delta_spark, rounds, tmp_path)
    real["embedded"] = worker["rounds"]
    lap("real fields")

    counts: dict[str, Counter[str]] = defaultdict(Counter)
    problems: list[str] = []
    for d, case in zip(drawn, texts, strict=False):
        for name, found in case.items():
            ansi = MODES[name[name.find(" ") :] if " " in name else ""]
            expected = oracles[ansi][d.plain]
            if isinstance(found, str):
                counts[name]["refused"] += 1
                for construct in d.constructs:
                    counts[f"construct {construct}"][f"refused in {name}"] += 1
                continue
            for construct in d.constructs:
                counts[f"construct {construct}"][f"accepted in {name}"] += 1
            results = {}
            if found[1] is not None:
                results["sail"] = sail[found[1]]
            if found[2] is not None:
                results["delta-rs"] = fusion[found[2]]
            for evaluator, result in results.items():
                outcome = _compare(expected, result)
                counts[name][f"{evaluator} {outcome}"] += 1
                if outcome == "mismatch":  # values differ, or the engine fails alone
                    smaller = (
                        _shrunk(delta_spark, found[0], name.split(" ")[0], ansi)
                        if evaluator == "delta-rs"
                        else None
                    )
                    problems.append(
                        f"{name} on {evaluator}: {found[0]!r}\n  sail: {found[1]}\n  "
                        f"datafusion: {found[2]}\n  spark:  {expected}\n  engine: {result}"
                        + (f"\n  shrunk: {smaller}" if smaller else "")
                    )
    for n, spec in enumerate(rounds):
        want = predicate_fields.expected(
            predicate_fields.grouped_rows(spec["groups"]), set(spec["chosen"])
        )
        for engine, outcomes in real.items():
            for field, value in outcomes[n].items():
                ok = predicate_fields.comparable(value) == want[field]
                counts[f"fields {engine}"]["equal" if ok else "mismatch"] += 1
                if not ok:
                    problems.append(
                        f"real field {field} on {engine}, round {n}: {str(value)[:600]}\n"
                        f"  expected: {str(want[field])[:600]}\n  predicate: {spec['plain'][:600]}"
                    )
    report = {k: dict(v) for k, v in sorted(counts.items())}
    clock.pop("start")
    report["run"] = {
        "seed": generated.SEED,
        "predicates": len(drawn),
        "field sample": len(sample),
        **clock,
    }  # type: ignore[dict-item]
    print(json.dumps(report, indent=1, sort_keys=True))
    if os.environ.get("DELTASINK_PREDICATE_REPORT"):
        report["problems"] = problems  # type: ignore[assignment]
        report["sample"] = [d.plain for d in sample]  # type: ignore[assignment]
        Path(os.environ["DELTASINK_PREDICATE_REPORT"]).write_text(json.dumps(report, indent=1))
    real_problems = [p for p in problems if p.startswith("real field")]
    assert not problems, f"{len(problems)} mismatch(es), {generated.banner()}:\n" + "\n\n".join(
        (real_problems + problems)[:20]
    )
    assert len(sample) >= min(FIELD_SAMPLE, 8), "too few predicates for the real fields"
