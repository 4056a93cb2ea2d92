"""A batch's keys on Spark, for :func:`.validate.prepare_frame`: float keys normalised,
string partition keys' null carried as ``''``, the keys a MERGE may bound to the batch's
range, and one row per key (the latest by ``sequence_by``, else duplicates refused), each
in the plan: no row reaches the driver (but a refused duplicate's example)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deltasink.errors import DuplicateKeyError
from deltasink.input.batch import SCD2_DUPLICATES
from deltasink.input.sql import quote
from deltasink.reserved import RANK_COLUMN, ROW_COLUMN
from deltasink.shapes.spec import MergeSpec

from .prune import prunable_keys
from .tables import ddl_type

__all__ = ["blank_keys", "bounded_keys", "normalise_keys", "one_row_per_key"]

_ROW = ROW_COLUMN
_HINT = "Deduplicate in the job, or set MergeSpec(sequence_by=...) to keep the latest row per key."


def normalise_keys(frame: Any, keys: Sequence[str]) -> tuple[Any, list[str]]:
    """:func:`deltasink.input.keys.normalise_keys` in the plan: each float key's -0.0
    becomes 0.0 (its type kept), so the duplicate check, the staged rows and every
    later MERGE see one key. Returns the frame and its float keys (whose NaN values
    the validating aggregation counts)."""
    types = {f.name: f.dataType for f in frame.schema.fields}
    floats = [k for k in keys if types[k].typeName() in ("float", "double")]
    if not floats:
        return frame, []
    select = []
    for name in frame.columns:
        if name in floats:
            zero = f"CAST(0 AS {ddl_type(types[name])})"
            column = quote(name)
            select.append(f"CASE WHEN {column} = {zero} THEN {zero} ELSE {column} END AS {column}")
        else:
            select.append(quote(name))
    return frame.selectExpr(*select), floats


def blank_keys(frame: Any, blank: Sequence[str]) -> Any:
    """``frame`` with the null of each ``blank`` key (a string partition column of the
    target) as ``''``: one key, carried as ``''`` (:mod:`deltasink.shapes.partitions`)."""
    if not blank:
        return frame
    return frame.selectExpr(
        *(
            f"coalesce({quote(c)}, '') AS {quote(c)}" if c in blank else quote(c)
            for c in frame.columns
        )
    )


def bounded_keys(spec: MergeSpec, target: Any | None, frame: Any) -> list[str]:
    """The keys the MERGE may bound to the batch's range: pruned by range in the target
    (:func:`~.prune.prunable_keys`) and of the same kind in the batch (integers, or
    dates), so the batch's bounds are the bounds of the values it merges."""
    if target is None or not spec.keys or not spec.prunable:
        return []
    batch = set(prunable_keys(spec.keys, frame.schema))
    target_types = {f.name: f.dataType.typeName() for f in target.schema.fields}
    batch_types = {f.name: f.dataType.typeName() for f in frame.schema.fields}
    return [
        k
        for k in prunable_keys(spec.keys, target.schema)
        if k in batch and (target_types[k] == "date") == (batch_types[k] == "date")
    ]


def one_row_per_key(frame: Any, spec: MergeSpec, stats: Mapping[str, int]) -> tuple[Any, int]:
    """The batch with one row per key (SCD2: per key and sequence value) and the rows it
    then holds, from the validating aggregation's counts ``stats`` (``n`` rows, ``keys``
    distinct event columns): with ``sequence_by``, the latest row per key (ties: the
    later row in the DataFrame's order).

    Raises:
        DuplicateKeyError: A key appears twice (SCD2: a key and sequence value).
    """
    rows = stats["n"]
    if spec.mode == "scd2":  # one event per key and sequence value
        if stats["keys"] != stats["n"]:
            _raise_duplicates(
                frame, spec.event_columns, stats["n"] - stats["keys"], SCD2_DUPLICATES
            )
    elif spec.keys:
        if spec.sequence_by:
            frame = _latest_per_key(frame, spec.keys, spec.sequence_by)
            rows = stats["keys"]
        elif stats["keys"] != stats["n"]:
            _raise_duplicates(frame, spec.keys, stats["n"] - stats["keys"], _HINT)
    return frame, rows


def _latest_per_key(frame: Any, keys: Sequence[str], sequence_by: str) -> Any:
    partition = ", ".join(quote(k) for k in keys)
    return (
        frame.selectExpr("*", f"monotonically_increasing_id() AS {quote(_ROW)}")
        .selectExpr(
            "*",
            f"row_number() OVER (PARTITION BY {partition} ORDER BY {quote(sequence_by)} DESC, "
            f"{quote(_ROW)} DESC) AS {quote(RANK_COLUMN)}",
        )
        .where(f"{quote(RANK_COLUMN)} = 1")
        .drop(RANK_COLUMN, _ROW)
    )


def _raise_duplicates(frame: Any, keys: Sequence[str], extra: int, hint: str = _HINT) -> None:
    counted = frame.groupBy(*keys).count().where("`count` > 1")
    dup = counted.selectExpr("count(1) AS n").collect()[0]["n"]
    example = counted.limit(1).collect()[0].asDict()
    times = example.pop("count")
    raise DuplicateKeyError(
        f"{dup} key(s) appear more than once in the batch, e.g. {example} ({times} times). " + hint,
        column=keys[0],
    )
