"""The embedded engine's judge of a target's ``CHECK`` constraints
(:mod:`deltasink.shapes.constraints`): the batch's rows are evaluated by delta-rs's
DataFusion twice, once with each constraint translated to keep Spark's meaning
(:mod:`deltasink.shapes.sparksql`), once as written, which is what delta-rs itself
evaluates at commit. A row Spark's meaning breaks is refused by name
(:class:`~deltasink.errors.ConstraintViolationError`); a constraint delta-rs cannot
evaluate, or reads otherwise for this batch, is refused with the way out
(:class:`~deltasink.errors.UnsupportedTableFeatureError`, ``engine='spark'``). Both before
the version is staged, and again on the snapshot each commit is made on, unless the
version was judged by the same constraints already.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from deltasink.backends.deltalog.tables import arrow_schema
from deltasink.errors import (
    ConfigurationError,
    ConstraintViolationError,
    UnsupportedTableFeatureError,
)
from deltasink.input.sql import DELETE_COLUMN
from deltasink.reserved import is_reserved
from deltasink.shapes.constraints import Constraint, constraints_of, judged, violation
from deltasink.shapes.sparksql.fields import translate, types_of
from deltasink.shapes.spec import MergeSpec

from .generated import Generated, fill, plan

__all__ = ["ConstraintJudge"]

_BATCH = "batch"


class ConstraintJudge:
    """Judges batches bound for one target by its ``CHECK`` constraints.

    Args:
        uri: The target, for messages.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._judged: dict[int, frozenset[Constraint]] = {}

    def check(
        self,
        table: DeltaTable | None,
        data: pa.Table,
        spec: MergeSpec,
        *,
        versions: Sequence[int],
        app_id: str,
    ) -> None:
        """Judge ``data`` (one version, or several coalesced; with deltasink's delete
        flag where ``delete_when`` applies) by the constraints of snapshot ``table``.
        Idempotent: versions judged by the same constraints are not judged again.

        Raises:
            ConstraintViolationError: A row breaks a constraint.
            UnsupportedTableFeatureError: delta-rs cannot evaluate a constraint as
                Spark does for this batch.
            ConfigurationError: An upsert writes part of a constraint's columns.
        """
        if table is None:
            return
        constraints = constraints_of(table.metadata().configuration)
        if not constraints:
            return
        key = frozenset(constraints)
        if versions and all(self._judged.get(v) == key for v in versions):
            return
        schema = arrow_schema(table)
        columns = [c for c in data.column_names if not is_reserved(c)]
        generated = plan(table, self.uri)
        chosen = judged(
            constraints,
            spec,
            columns,
            schema.names,
            table=self.uri,
            generated=[g.name for g in generated],
        )
        rows = _written_rows(data, schema, chosen, generated)
        version = versions[-1] if versions else None
        if chosen and rows.num_rows:
            try:
                self._evaluate(chosen, rows, version=version, app=app_id)
            except ConstraintViolationError:
                if spec.mode != "insert" or not spec.keys:
                    raise
                # An insert writes only the rows whose key the target lacks: judge those.
                rows = _written_rows(_new_keys(data, table, spec.keys), schema, chosen, generated)
                if rows.num_rows:
                    self._evaluate(chosen, rows, version=version, app=app_id)
        for v in versions:
            self._judged[v] = key

    def _evaluate(
        self, constraints: Sequence[Constraint], rows: pa.Table, *, version: int | None, app: str
    ) -> None:
        types = types_of(rows.schema)
        meant = []
        for c in constraints:
            try:
                meant.append(translate(c.expression, "check_constraint", types, "delta-rs"))
            except ConfigurationError as exc:
                why = f"it uses a construct delta-rs reads otherwise ({exc})"
                raise self._unsupported(c, why) from exc
        with tempfile.TemporaryDirectory(prefix="deltasink-constraints-") as folder:
            write_deltalake(folder, rows)
            table = DeltaTable(folder)
            broken = _count(table, meant)
            assert broken is not None  # Spark's meaning, translated: DataFusion runs it
            for c, n in zip(constraints, broken, strict=True):
                if n:
                    raise violation(c, n, table=self.uri, version=version, app_id=app)
            for c in constraints:  # what delta-rs will evaluate at commit: the text as is
                raw = _count(table, [c.expression])
                if raw is None:
                    raise self._unsupported(c, "delta-rs cannot evaluate it (every commit fails)")
                if raw[0]:
                    raise self._unsupported(
                        c, f"delta-rs breaks {raw[0]} row(s) of this batch that Spark keeps"
                    )

    def _unsupported(self, constraint: Constraint, why: str) -> UnsupportedTableFeatureError:
        return UnsupportedTableFeatureError(
            f"the target {self.uri} has the {constraint.what}, and {why}. Write it with "
            "engine='spark' (a Delta-enabled Spark session evaluates it as Delta does). "
            "Nothing was staged.",
            table=self.uri,
            features=["checkConstraints"],
        )


def _new_keys(data: pa.Table, table: DeltaTable, keys: Sequence[str]) -> pa.Table:
    """The rows of ``data`` whose key ``table`` does not hold (a null key holds none)."""
    held = table.to_pyarrow_table(columns=list(keys))
    held = (
        held.cast(pa.schema([data.schema.field(k) for k in keys]))
        .group_by(list(keys))
        .aggregate([])
    )
    return data.join(held, list(keys), join_type="left anti")


def _written_rows(
    data: pa.Table,
    schema: pa.Schema,
    constraints: Sequence[Constraint],
    generated: Sequence[Generated],
) -> pa.Table:
    """The rows a commit of ``data`` writes (deleted ones left out), as the columns the
    ``constraints`` read: a generated column the batch lacks computed as the commit
    computes it (:mod:`.generated`), null for another target column it lacks."""
    if DELETE_COLUMN in data.column_names:
        data = data.filter(pc.invert(data.column(DELETE_COLUMN)))  # never null
    data = data.drop_columns([c for c in data.column_names if is_reserved(c)])
    wanted = set().union(*(c.columns for c in constraints)) if constraints else set()
    needed = [g for g in generated if g.name.lower() in wanted]
    if needed and data.num_rows:
        data = fill(needed, data, schema)
    have = {name.lower(): name for name in data.column_names}
    arrays, fields = [], []
    for f in schema:
        if f.name.lower() not in wanted:
            continue
        if f.name.lower() in have:
            column = data.column(have[f.name.lower()])
            arrays.append(column.cast(f.type) if column.type != f.type else column)
        else:
            arrays.append(pa.nulls(data.num_rows, f.type))
        fields.append(pa.field(f.name, f.type, True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _count(table: DeltaTable, predicates: Sequence[str]) -> list[int] | None:
    """Rows of ``table`` each predicate breaks (false or null); ``None`` if DataFusion
    cannot run them."""
    sums = ", ".join(
        f"CAST(sum(CASE WHEN coalesce(({p}), false) THEN 0 ELSE 1 END) AS BIGINT) AS c{i}"
        for i, p in enumerate(predicates)
    )
    try:
        result = QueryBuilder().register(_BATCH, table).execute(f"SELECT {sums} FROM {_BATCH}")
        row = pa.table(result.read_all()).to_pylist()[0]
    except Exception:
        return None
    return [int(row[f"c{i}"] or 0) for i in range(len(predicates))]
