"""``MergeSpec`` compiled to one engine-neutral plan, rendered for each engine.

The plan is the single source of truth for what a commit does to the target. It is
rendered to a delta-rs ``TableMerger`` (embedded backend) and to Spark SQL
``MERGE INTO`` (Spark backend). Conditions are written in the SQL both engines parse:
backtick-quoted identifiers, ``s``/``t`` aliases, ``AND``/``OR``/``NOT``/``IS NULL``.
The user's predicates enter them re-emitted from their parse for the engine's parser
(:class:`~deltasink.shapes.target_sql.TargetSql`), never as written.

For ``upsert`` the clauses are, in order (first matching clause wins)::

    WHEN MATCHED AND s.delete [AND newer] THEN DELETE
    WHEN MATCHED [AND NOT s.delete] [AND newer] THEN UPDATE SET <columns>
    WHEN NOT MATCHED [AND NOT s.delete] THEN INSERT <columns>
    [WHEN NOT MATCHED BY SOURCE [AND <condition>] THEN DELETE]

(the last one with ``when_not_matched_by_source="delete"``, never with a key-range
pruning predicate in ``ON``), where ``newer`` is ``t.seq IS NULL OR s.seq >= t.seq`` when ``sequence_by`` is set (a
coalesced batch compares ``s.<guard>`` instead of ``s.seq``: see
:func:`deltasink.core.coalesce.coalesce`).
``insert`` has only the last clause; ``append`` is not a MERGE at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN, quote
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.target_sql import TargetSql, literal

__all__ = ["Clause", "MergePlan", "compile_merge", "key_ranges", "replace_predicate"]

SOURCE, TARGET = "s", "t"


@dataclass(frozen=True)
class Clause:
    """One ``WHEN`` clause of a MERGE."""

    when: Literal["matched", "not_matched", "not_matched_by_source"]
    action: Literal["update", "delete", "insert"]
    condition: str | None = None


@dataclass(frozen=True)
class MergePlan:
    """An engine-neutral MERGE: join condition, clauses and the columns written.

    Attributes:
        on: The join condition between target ``t`` and source ``s``.
        clauses: ``WHEN`` clauses, in evaluation order.
        insert_columns: Columns written by ``INSERT``.
        update_columns: Columns written by ``UPDATE SET``: the non-key columns, or
            those :meth:`MergeSpec.updated` keeps (``update_columns`` /
            ``except_columns``).
    """

    on: str
    clauses: tuple[Clause, ...]
    insert_columns: tuple[str, ...]
    update_columns: tuple[str, ...]
    #: String partition columns, whose ``''`` is written as null (the protocol's rule,
    #: :mod:`deltasink.shapes.partitions`).
    blank: tuple[str, ...] = ()

    def assignments(self, columns: Sequence[str]) -> dict[str, str]:
        """``{quoted target column: source expression}`` for ``columns`` (``nullif(s.c,
        '')`` for a string partition column: its ``''`` is written as null)."""
        return {quote(c): self._value(c) for c in columns}

    def _value(self, column: str) -> str:
        value = f"{SOURCE}.{quote(column)}"
        return f"nullif({value}, '')" if column in self.blank else value

    def apply_to(self, merger: Any) -> Any:
        """Add the clauses to a delta-rs ``TableMerger`` and return it."""
        for clause in self.clauses:
            if clause.when == "not_matched_by_source":
                merger = merger.when_not_matched_by_source_delete(predicate=clause.condition)
            elif clause.action == "delete":
                merger = merger.when_matched_delete(predicate=clause.condition)
            elif clause.action == "update":
                if not self.update_columns:
                    continue
                merger = merger.when_matched_update(
                    updates=self.assignments(self.update_columns), predicate=clause.condition
                )
            else:
                merger = merger.when_not_matched_insert(
                    updates=self.assignments(self.insert_columns), predicate=clause.condition
                )
        return merger

    def to_sql(self, target: str, source: str) -> str:
        """Render as Spark SQL ``MERGE INTO target AS t USING source AS s ...``.

        Args:
            target: A table reference, e.g. ``delta.`/path``` or ``cat.db.tbl``.
            source: A table or view reference holding the staged rows.
        """
        lines = [f"MERGE INTO {target} AS {TARGET}", f"USING {source} AS {SOURCE}", f"ON {self.on}"]
        for clause in self.clauses:
            head = {
                "matched": "WHEN MATCHED",
                "not_matched": "WHEN NOT MATCHED",
                "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
            }[clause.when]
            if clause.condition:
                head += f" AND ({clause.condition})"
            if clause.action == "delete":
                lines.append(f"{head} THEN DELETE")
            elif clause.action == "update":
                if not self.update_columns:
                    continue
                sets = ", ".join(
                    f"{TARGET}.{k} = {v}" for k, v in self.assignments(self.update_columns).items()
                )
                lines.append(f"{head} THEN UPDATE SET {sets}")
            else:
                cols = ", ".join(quote(c) for c in self.insert_columns)
                vals = ", ".join(self._value(c) for c in self.insert_columns)
                lines.append(f"{head} THEN INSERT ({cols}) VALUES ({vals})")
        return "\n".join(lines)


def _and(*parts: str | None) -> str | None:
    present = [p for p in parts if p]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return " AND ".join(f"({p})" for p in present)


def replace_predicate(
    spec: MergeSpec,
    values: pa.Table,
    *,
    sql: TargetSql,
    empty_as_null: Sequence[str] = (),
) -> str | None:
    """The predicate selecting the target rows a ``replace`` version replaces, over
    unqualified target columns: the ``replace_by`` value combinations of ``values``
    (its distinct rows), and ``replace_where``. ``None``: the version replaces nothing
    (``replace_by`` and no rows).

    Args:
        spec: A ``replace`` spec.
        values: The batch (or its distinct ``replace_by`` rows).
        sql: The target statement's dialect and column types (``replace_where`` is
            translated for them; the values become its literals).
        empty_as_null: The target's string partition columns, whose ``''`` is null
            (:mod:`deltasink.shapes.partitions`): ``''`` selects the null partition
            (and a ``""`` another writer recorded).

    Raises:
        ValueError: A ``replace_by`` value of a type without a literal here (the batch
            is checked for such types before it is staged).
    """
    literal = sql.literal
    where = sql.predicate(spec, "replace_where")
    parts = [f"({where})"] if where else []
    if spec.replace_by:
        columns = list(spec.replace_by)
        distinct = values.select(columns).group_by(columns).aggregate([]).to_pylist()
        if not distinct:
            return None
        alternatives = []
        for row in distinct:
            terms = []
            for column in columns:
                text = literal(row[column])
                if text is None:
                    raise ValueError(f"replace_by value {row[column]!r} has no SQL literal")
                if column in empty_as_null and row[column] == "":
                    terms.append(f"({quote(column)} = {text} OR {quote(column)} IS NULL)")
                else:
                    terms.append(f"{quote(column)} = {text}")
            alternatives.append(" AND ".join(terms))
        parts.append("(" + " OR ".join(f"({a})" for a in alternatives) + ")")
    return " AND ".join(parts)


def key_ranges(batch: pa.Table, keys: Sequence[str], *, skip: Sequence[str] = ()) -> str | None:
    """A predicate on the target restricting each key to the batch's [min, max].

    Added to the MERGE condition it lets the engine skip target files whose key
    statistics cannot match (file pruning), which a plain ``t.k = s.k`` does not do
    for a streamed source. Only for integer, string and date keys, and not for the
    keys in ``skip`` (string partition columns: their stored null is the key ``''``,
    which no range over ``t.k`` selects).
    """
    parts = []
    for key in keys:
        if key in skip:
            continue
        column = batch.column(key)
        if not (
            pa.types.is_integer(column.type)
            or pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
            or pa.types.is_date(column.type)
        ):
            continue
        bounds = pc.min_max(column)
        low, high = literal(bounds["min"].as_py()), literal(bounds["max"].as_py())
        if low is None or high is None:
            continue
        parts.append(f"{TARGET}.{quote(key)} >= {low} AND {TARGET}.{quote(key)} <= {high}")
    return " AND ".join(parts) if parts else None


def compile_merge(
    spec: MergeSpec,
    columns: Sequence[str],
    *,
    has_delete: bool,
    sql: TargetSql,
    prune: str | None = None,
    has_guard: bool = False,
    empty_as_null: Sequence[str] = (),
) -> MergePlan:
    """Compile ``spec`` for a staged batch with ``columns``.

    Args:
        spec: An ``upsert`` or ``insert`` spec.
        columns: The batch's data columns (without deltasink's system columns).
        has_delete: Whether the staged batch carries the delete flag column.
        prune: A target-only predicate true for every target row that can match
            (see :func:`key_ranges`), added to the join condition.
        has_guard: Whether the batch carries :data:`~deltasink.input.sql.GUARD_COLUMN`
            (a coalesced batch with ``sequence_by`` and deletes), the sequence value
            a target row is compared with.
        sql: The statement's dialect and the target's column types, which the
            user's predicates (``target_predicate``, ``not_matched_by_source_condition``)
            are rendered for (:class:`~deltasink.shapes.target_sql.TargetSql`): re-emitted
            from their parse, never spliced as written.
        empty_as_null: The target's string partition columns, whose ``''`` is null
            (:mod:`deltasink.shapes.partitions`): a key there matches with
            ``coalesce(t.k, '') = coalesce(s.k, '')`` (``''`` and null are the one null
            partition, in either mode), and a value written there is ``nullif(s.c, '')``.
    """
    if spec.mode in ("append", "replace"):
        raise ValueError(f"{spec.mode} is not a MERGE; write the rows instead")

    def equal(k: str) -> str:
        t, s = f"{TARGET}.{quote(k)}", f"{SOURCE}.{quote(k)}"
        if k in empty_as_null:  # '' and null: the one null partition
            return f"coalesce({t}, '') = coalesce({s}, '')"
        if spec.null_safe_keys:  # both engines parse it; parenthesised, DataFusion binds
            # `a IS NOT DISTINCT FROM b AND c` as `a IS NOT DISTINCT FROM (b AND c)`
            return f"({t} IS NOT DISTINCT FROM {s})"
        return f"{t} = {s}"

    on = " AND ".join(equal(k) for k in spec.keys)
    if prune and not spec.prunable:
        # Every target row outside the pruned range would be "not matched by source".
        raise ValueError("a MERGE that deletes rows absent from the batch cannot be pruned")
    target_predicate = sql.predicate(spec, "target_predicate")
    if target_predicate:  # the user's pruning predicate, checked on every batch row
        on = f"{on} AND ({target_predicate})"
    if prune:
        on = f"{on} AND {prune}"
    data_columns = tuple(c for c in columns if c not in (DELETE_COLUMN, GUARD_COLUMN))
    updates = spec.updated(data_columns)
    is_delete = f"{SOURCE}.{quote(DELETE_COLUMN)}" if has_delete else None
    not_delete = f"NOT {SOURCE}.{quote(DELETE_COLUMN)}" if has_delete else None
    newer = None
    if spec.sequence_by:
        seq = quote(spec.sequence_by)
        against = quote(GUARD_COLUMN) if has_guard else seq
        newer = f"{TARGET}.{seq} IS NULL OR {SOURCE}.{against} >= {TARGET}.{seq}"
    clauses: list[Clause] = []
    if spec.mode == "upsert":
        if is_delete:
            clauses.append(Clause("matched", "delete", _and(is_delete, newer)))
        clauses.append(Clause("matched", "update", _and(not_delete, newer)))
    clauses.append(Clause("not_matched", "insert", not_delete if spec.mode == "upsert" else None))
    if spec.when_not_matched_by_source == "delete":
        clauses.append(
            Clause(
                "not_matched_by_source",
                "delete",
                sql.predicate(spec, "not_matched_by_source_condition"),
            )
        )
    blank = tuple(c for c in data_columns if c in empty_as_null)
    return MergePlan(on, tuple(clauses), data_columns, updates, blank)
