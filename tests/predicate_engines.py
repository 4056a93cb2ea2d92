"""The evaluators of the differential predicate suite, each batched: many predicates in
one job over the grammar's rows (``tests/predicate_grammar.py``).

* :func:`spark_batched`: a Spark session (classic PySpark: the oracle; or Sail, the
  embedded engine's) evaluates predicate texts as boolean columns of one ``select``.
  A job that fails (Spark's ANSI mode raises on overflow, division by zero, a bad
  conversion) is split in halves until each failing predicate stands alone.
* :func:`datafusion_batched`: delta-rs's DataFusion (``QueryBuilder`` over a Delta table
  of the rows) evaluates the DataFusion texts the same way.

Results are per predicate: a list of ``True``/``False``/``None`` in ``Id`` order, or the
error's type name. ``python -m tests.predicate_engines spark IN OUT`` runs
:func:`spark_batched` in a process of its own (classic or embedded session, as asked).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

Result = list[bool | None] | str
CHUNK = 150


def bisect(
    evaluate: Callable[[Sequence[str]], list[list[bool | None]]],
    exprs: Sequence[str],
    *,
    chunk: int = CHUNK,
) -> list[Result]:
    """``evaluate`` over ``exprs`` in chunks; a failing chunk is split until the failing
    expressions stand alone (their result is the error's type name)."""
    out: list[Result] = []
    for start in range(0, len(exprs), chunk):
        out.extend(_split(evaluate, list(exprs[start : start + chunk])))
    return out


def _split(
    evaluate: Callable[[Sequence[str]], list[list[bool | None]]], exprs: list[str]
) -> list[Result]:
    if not exprs:
        return []
    try:
        return list(evaluate(exprs))
    except Exception as exc:  # an engine error: find whose
        if len(exprs) == 1:
            return [_error(exc)]
        suspects = _suspects(exc, exprs)
    if suspects and len(suspects) < len(exprs):
        # Spark names the failing fragment: those holding it alone, the rest together
        alone = {i: _split(evaluate, [exprs[i]])[0] for i in suspects}
        rest = [i for i in range(len(exprs)) if i not in alone]
        others = dict(zip(rest, _split(evaluate, [exprs[i] for i in rest]), strict=False))
        return [alone[i] if i in alone else others[i] for i in range(len(exprs))]
    middle = len(exprs) // 2
    return _split(evaluate, exprs[:middle]) + _split(evaluate, exprs[middle:])


def _error(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0][:160] if text else ""
    return f"error: {type(exc).__name__}: {first}"


def _suspects(exc: BaseException, exprs: list[str]) -> list[int]:
    """The expressions holding the fragment a classic Spark error names (its query
    context); none when it names none (Sail and DataFusion do not)."""
    try:
        contexts = exc.getQueryContext()  # type: ignore[attr-defined]
        fragments = [c.fragment() for c in contexts if c.fragment()]
    except Exception:
        return []
    return [i for i, e in enumerate(exprs) if any(f in e for f in fragments)]


def spark_batched(
    spark: Any, table: pa.Table, exprs: Sequence[str], *, alias: str | None = None
) -> list[Result]:
    """Evaluate each of ``exprs`` on ``table``'s rows with ``spark``."""
    from deltasink.input.arrow import spark_frame

    frame = spark_frame(spark, table)
    if alias:
        frame = frame.alias(alias)
    ids = list(table.column("Id").to_pylist())

    def evaluate(chunk: Sequence[str]) -> list[list[bool | None]]:
        selected = frame.selectExpr(
            "Id AS _id", *[f"({e}) AS c{i}" for i, e in enumerate(chunk)]
        ).collect()
        by_id = {row["_id"]: row for row in selected}
        return [[_bool(by_id[i][f"c{j}"]) for i in ids] for j in range(len(chunk))]

    return bisect(evaluate, exprs)


def datafusion_batched(table: pa.Table, exprs: Sequence[str]) -> list[Result]:
    """Evaluate each DataFusion text of ``exprs`` on ``table``'s rows (a Delta table
    registered as ``t``) with delta-rs's ``QueryBuilder``."""
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    with tempfile.TemporaryDirectory(prefix="deltasink-predicates-") as folder:
        write_deltalake(folder, table)
        delta = DeltaTable(folder)
        ids = table.column("Id").to_pylist()

        def evaluate(chunk: Sequence[str]) -> list[list[bool | None]]:
            columns = ", ".join(f"({e}) AS c{i}" for i, e in enumerate(chunk))
            query = f"SELECT t.`Id` AS _id, {columns} FROM t"
            found = pa.table(QueryBuilder().register("t", delta).execute(query))
            by_id = {row["_id"]: row for row in found.to_pylist()}
            return [[_bool(by_id[i][f"c{j}"]) for i in ids] for j in range(len(chunk))]

        return bisect(evaluate, exprs)


def _bool(value: object) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    return bool(value)  # pragma: no cover - a predicate is a boolean


def selected(result: Result, ids: Sequence[int]) -> set[int] | str:
    """The ``Id``s a result selects (true), or its error."""
    if isinstance(result, str):
        return result
    return {i for i, v in zip(ids, result, strict=False) if v is True}


def _classic() -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    return spark


def main(argv: list[str]) -> None:
    """``classic|embedded IN OUT``: with the session asked for, evaluate ``IN``'s
    ``exprs`` on the grammar's rows (:func:`spark_batched`) and run the
    real fields of each of ``rounds`` on the embedded engine
    (``tests/predicate_fields.py``); write ``{"exprs": [...], "rounds": [...]}`` to
    ``OUT``."""
    which, source, target = argv
    from tests import predicate_fields, predicate_grammar

    payload = json.loads(Path(source).read_text())
    spark = _classic() if which == "classic" else __import__("deltasink").embedded_spark()
    table = predicate_grammar.rows()
    out: dict[str, Any] = {"exprs": spark_batched(spark, table, payload["exprs"], alias="t")}
    out["rounds"] = [
        predicate_fields.run(
            "embedded",
            predicate_fields.grouped_rows(spec["groups"]),
            spec["plain"],
            spec["qualified"],
            set(spec["chosen"]),
        )
        for spec in payload.get("rounds", [])
    ]
    with open(target, "w") as written:
        json.dump(out, written)


if __name__ == "__main__":
    main(sys.argv[1:])
