"""The staged rows of one or more versions as one Spark SQL query (:func:`source_sql`;
several versions coalesced as :func:`deltasink.core.coalesce.coalesce` does), and the
``MERGE INTO`` of them compiled from the embedded engine's
:class:`~deltasink.shapes.merge.MergePlan` (:func:`merge_sql`), written in this engine's dialect (:data:`DIALECT`,
:func:`target_sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN, quote
from deltasink.ops.layout import VERSION_COLUMN
from deltasink.reserved import RANK_COLUMN, column
from deltasink.shapes.merge import compile_merge
from deltasink.shapes.predicates import Dialect
from deltasink.shapes.sparksql.fields import types_of
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.target_sql import TargetSql

__all__ = ["DIALECT", "guarded", "merge_sql", "source_sql", "target_sql"]

#: The SQL this engine's target statements are written in: Spark's.
DIALECT: Dialect = "spark"


def guarded(spec: MergeSpec, versions: Sequence[int]) -> bool:
    """Whether :func:`source_sql` of ``versions`` carries the sequence guard column
    (several versions coalesced, ``upsert`` with ``sequence_by`` and ``delete_when``)."""
    return (
        len(versions) > 1
        and spec.mode == "upsert"
        and spec.sequence_by is not None
        and spec.delete_when is not None
    )


def source_sql(
    staging_ref: str, versions: Sequence[int], columns: Sequence[str], spec: MergeSpec
) -> str:
    """The staged rows of ``versions`` as one query; several versions are coalesced
    as :func:`deltasink.core.coalesce.coalesce` does (upsert: the latest row per key, by
    ``sequence_by`` then version; insert: the earliest version's row; upsert with
    ``sequence_by`` and deletes: the fold's row and its guard, see :func:`guarded`)."""
    cols = [quote(c) for c in columns]
    if spec.delete_when:
        cols.append(f"coalesce({quote(DELETE_COLUMN)}, false) AS {quote(DELETE_COLUMN)}")
    listed = ", ".join(str(v) for v in versions)
    where = f"{quote(VERSION_COLUMN)} IN ({listed})"
    if len(versions) == 1 or spec.mode in ("append", "replace"):
        return f"SELECT {', '.join(cols)} FROM {staging_ref} WHERE {where}"
    partition = ", ".join(quote(k) for k in spec.event_columns)
    if guarded(spec, versions):
        assert spec.sequence_by is not None
        return _folded_sql(staging_ref, where, cols, partition, quote(spec.sequence_by))
    order = (
        [f"{quote(spec.sequence_by)} DESC"] if spec.mode == "upsert" and spec.sequence_by else []
    )
    latest = spec.mode in ("upsert", "scd2")  # scd2: the latest version's event wins
    order.append(f"{quote(VERSION_COLUMN)} {'DESC' if latest else 'ASC'}")
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY {', '.join(order)}) "
        f"AS {quote(RANK_COLUMN)} FROM {staging_ref} WHERE {where}"
    )
    return f"SELECT {', '.join(cols)} FROM ({ranked}) WHERE {quote(RANK_COLUMN)} = 1"


_LATER = quote(column("later"))  # a row's highest sequence in later versions


def _folded_sql(staging_ref: str, where: str, cols: Sequence[str], partition: str, seq: str) -> str:
    """:func:`deltasink.core.coalesce.coalesce`'s fold for ``sequence_by`` with deletes, in SQL:
    the *records* of a key are its rows whose sequence is above every later version's;
    the row kept is the first record that is not a delete (else the first record), and
    the guard is the key's highest sequence."""
    version, delete = quote(VERSION_COLUMN), quote(DELETE_COLUMN)
    later = (
        f"max({seq}) OVER (PARTITION BY {partition} ORDER BY {version} "
        "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
    )
    scored = (
        f"SELECT *, max({seq}) OVER (PARTITION BY {partition}) AS {quote(GUARD_COLUMN)}, "
        f"{later} AS {_LATER} FROM {staging_ref} WHERE {where}"
    )
    records = f"SELECT * FROM ({scored}) WHERE {_LATER} IS NULL OR {seq} > {_LATER}"
    ranked = (
        f"SELECT *, row_number() OVER (PARTITION BY {partition} ORDER BY "
        f"CASE WHEN coalesce({delete}, false) THEN 1 ELSE 0 END, {version}) "
        f"AS {quote(RANK_COLUMN)} FROM ({records})"
    )
    selected = [*cols, quote(GUARD_COLUMN)]
    return f"SELECT {', '.join(selected)} FROM ({ranked}) WHERE {quote(RANK_COLUMN)} = 1"


def merge_sql(
    target_ref: str,
    spec: MergeSpec,
    columns: Sequence[str],
    source: str,
    *,
    prune: str | None = None,
    has_guard: bool = False,
    empty_as_null: Sequence[str] = (),
    sql: TargetSql | None = None,
) -> str:
    """The ``MERGE INTO`` of ``source`` (a query) into the target, from the same
    :class:`~deltasink.shapes.merge.MergePlan` the embedded engine runs; ``prune`` (see
    :func:`.prune.key_prune`) is added to its join condition; ``has_guard``: the source
    carries the sequence guard (:func:`guarded`); ``empty_as_null``: see
    :func:`.definition.string_partitions`; ``sql``: how the statement is written
    (:func:`target_sql`; default: the predicates as written)."""
    plan = compile_merge(
        spec,
        columns,
        has_delete=spec.delete_when is not None,
        prune=prune,
        has_guard=has_guard,
        sql=sql or TargetSql(DIALECT),
        empty_as_null=empty_as_null,
    )
    return plan.to_sql(target_ref, f"({source})")


def target_sql(spec: MergeSpec, target: Any) -> TargetSql:
    """How a statement on ``target`` (a Spark DataFrame) is written: Spark SQL, with the
    target's column types when ``spec`` records a session time zone: its predicates are
    then given to Spark translated (:mod:`deltasink.shapes.sparksql`), a zone-less
    timestamp literal and ``hour(ts)`` read in the recorded zone, not the session's;
    else re-emitted as written (the session's ANSI mode is the recorded one,
    :func:`.conf.require_ansi`)."""
    types = None if spec.time_zone is None or target is None else types_of(target.schema)
    return TargetSql(DIALECT, types)
