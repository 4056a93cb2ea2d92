"""What a batch must fit on the spark engine: the schema the target will have once the
versions pending before it are published (:mod:`deltasink.core.pending`), the batch
validated against it, and staged versions checked before a publish."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from deltasink import _faults
from deltasink.core.committables import LogState
from deltasink.core.pending import pending_context, schema_after
from deltasink.errors import SchemaMismatchError
from deltasink.input.arrow import spark_empty
from deltasink.shapes.partitions import string_partitions as blank_columns
from deltasink.shapes.spec import MergeSpec

from .computed import check_computed, computed_of
from .constraints import check_constraints
from .definition import string_partitions
from .logs import SparkLogs
from .publish import TargetWriter
from .session import SparkSql
from .validate import (
    Expected,
    PreparedFrame,
    as_dataframe,
    check_condition,
    prepare_frame,
    require_dataframe,
)

__all__ = ["SchemaFit"]


class SchemaFit:
    """What a batch must fit on the spark engine: a part of :class:`SparkBackend`.

    Args:
        app_id: The writer (for messages).
        target: The target (for messages).
        staging_ref: The staging table as Spark SQL names it.
        sql: The engine's session.
        logs: Its reads of both logs.
        target_writer: The target's writer (its definition, its tables).
        state: The writer's state as read last (read now when there is none).
        spec_for_staged: The spec staged versions are committed with.
        validate_checks: Validates the writer's checks on a prepared batch.
    """

    def __init__(
        self,
        *,
        app_id: str,
        target: str,
        staging_ref: str,
        sql: SparkSql,
        logs: SparkLogs,
        target_writer: TargetWriter,
        state: Callable[[], LogState],
        spec_for_staged: Callable[[], MergeSpec],
        validate_checks: Callable[[PreparedFrame], None],
    ) -> None:
        self.app_id = app_id
        self.target = target
        self.staging_ref = staging_ref
        self._sql = sql
        self._logs = logs
        self._target_writer = target_writer
        self._state = state
        self._spec_for_staged = spec_for_staged
        self._validate_checks = validate_checks

    def prepare(self, batch: object, spec: MergeSpec, version: int) -> PreparedFrame:
        """``batch`` validated on Spark for ``spec`` against the schema the target will
        have when ``version`` is published (lazy: nothing runs but analysis).

        Raises:
            InvalidInputError: The batch does not fit.
            ConfigurationError: A check that cannot work on it.
        """
        df = as_dataframe(batch, self._sql)
        self._sql.session(df)
        target = self._logs.target_frame()
        expected = self.expected(version, target)
        computed = computed_of(self._sql.session(), self._target_writer.tables, target)
        try:
            prepared = prepare_frame(
                require_dataframe(df),
                spec,
                target,
                table=self.target,
                expected=expected,
                blank=self._blank_keys(spec, target, df),
                computed=tuple(c.name for c in computed),
            )
        except SchemaMismatchError as exc:
            if expected is None:
                raise
            raise pending_context(
                exc, expected.pending, table=self.target, app_id=self.app_id, version=version
            ) from exc
        check_condition(spec, target, table=self.target)
        check_computed(prepared.frame, prepared.columns, computed, target, spec, table=self.target)
        self._validate_checks(prepared)
        self._target_writer.check_definition(prepared.columns)
        if target is not None:  # rows the table's definition would refuse at commit
            props = self._logs.target_properties()
            check_constraints(
                prepared.frame,
                prepared.columns,
                spec,
                target,
                props,
                computed,
                table=self.target,
                version=version,
                app_id=self.app_id,
            )
        _faults.point("stage.before_write")
        return prepared

    def _blank_keys(self, spec: MergeSpec, target: Any | None, df: Any) -> tuple[str, ...]:
        """With ``null_safe_keys``, the key columns that are string partition columns
        of the target (the ``TableSpec``'s for a new one), whose null is the key ``''``
        (:mod:`deltasink.shapes.partitions`); without it a null key is refused anyway."""
        if not spec.null_safe_keys or not spec.keys:
            return ()
        if target is not None:
            ref = self._target_writer.tables.target_ref
            return tuple(string_partitions(self._sql, ref, spec.keys, target))
        table = self._target_writer.table_spec
        if table is None or not table.partition_by:
            return ()
        schema = spark_empty(df).schema
        return tuple(k for k in blank_columns(schema, table.partition_by) if k in spec.keys)

    def expected(self, version: int, target: Any | None) -> Expected | None:
        """The schema the target will have when ``version`` is published, when versions
        are pending before it (on the state read last; the caller, the core, has just
        read it); ``None``: none are, the target's own schema applies. Accepted means
        publishable (:mod:`deltasink.core.pending`).

        Raises:
            SchemaMismatchError: A pending version before it does not fit (stuck).
        """
        before = self._state().pending_before(version)
        if not before:
            return None
        staging = self._sql.session().sql(f"SELECT * FROM {self.staging_ref} LIMIT 0")
        schema = self._schema_after(before, staging, target)
        if schema is None:
            return None
        types = {f.name: f.dataType for f in staging.schema.fields}
        if target is not None:
            types.update({f.name: f.dataType for f in target.schema.fields})
        return Expected(schema, types, tuple(before))

    def _schema_after(
        self, versions: Sequence[int], staging: Any, target: Any | None
    ) -> pa.Schema | None:
        """:func:`~deltasink.core.pending.schema_after` (checking each version) for staged
        ``versions``, from the staging table's schema and each version's columns."""
        arrow = spark_empty(staging).schema
        # (a column of an empty version may be absent: Spark wrote no file for it)
        staged = [
            (v, pa.schema([arrow.field(c) for c in self._logs.columns(v) if c in arrow.names]))
            for v in versions
        ]
        return schema_after(
            None if target is None else spark_empty(target).schema,
            staged,
            self._spec_for_staged(),
            table=self.target,
            app_id=self.app_id,
            check=True,
        )

    def check_fits(self, versions: Sequence[int]) -> None:
        """Before a publish: the staged ``versions`` fit the target one after the other,
        by the check ``pre_commit`` makes (a version staged by an earlier release may
        not), so the error names the way out. Costs nothing beyond two schema reads
        when every staged column is a target column of the same type.

        Raises:
            SchemaMismatchError: A version does not fit.
        """
        target = self._logs.target_frame()
        if target is None:
            return  # the first version creates it; the others: publish_many's rule
        staging = self._sql.session().sql(f"SELECT * FROM {self.staging_ref} LIMIT 0")
        found = {f.name: f.dataType for f in target.schema.fields}
        staged = {f.name: f.dataType for f in staging.schema.fields}
        columns = {c for v in versions for c in self._logs.columns(v)}
        if all(found.get(c) == staged.get(c) for c in columns):
            return
        self._schema_after(versions, staging, target)
