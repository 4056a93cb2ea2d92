"""Accepted means publishable: the schema the target will have once the pending
versions are published, one by one, in order. Engine-free.

A version is checked at ``pre_commit`` against this schema (by
:func:`deltasink.input.batch.prepare`, the one check the publish makes too), not against
the target alone: on a new target the first pending version defines the table, and
with ``schema_evolution`` each pending version may add columns. A coalesced commit
folds its versions the same way first (:func:`schema_after` with ``check=True``), so
it refuses exactly what committing them one by one would.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from deltasink.errors import SchemaMismatchError
from deltasink.input.sql import DELETE_COLUMN, GUARD_COLUMN
from deltasink.reserved import VERSION_COLUMN
from deltasink.shapes.scd2 import changes
from deltasink.shapes.schema import align_to_target, nullable_schema
from deltasink.shapes.spec import MergeSpec

__all__ = ["pending_context", "schema_after", "stuck_advice"]


def _data(schema: pa.Schema) -> pa.Schema:
    """``schema`` without deltasink's system columns (delete flag, sequence guard)."""
    return pa.schema([f for f in schema if f.name not in (DELETE_COLUMN, GUARD_COLUMN)])


def _created(data: pa.Schema, spec: MergeSpec) -> pa.Schema:
    """The schema a target created by a version staged as ``data`` has."""
    if spec.mode != "scd2":
        return nullable_schema(data)
    rows = changes(None, data.empty_table(), spec)
    return nullable_schema(_data(rows.schema))


def _evolved(current: pa.Schema, data: pa.Schema, spec: MergeSpec) -> pa.Schema:
    """``current`` after a version staged as ``data`` is published into it."""
    if not spec.schema_evolution:
        return current
    new = [pa.field(f.name, f.type, True) for f in nullable_schema(data)]
    return pa.schema([*current, *(f for f in new if f.name not in current.names)])


def stuck_advice(version: int, *, app_id: str, target: str) -> str:
    """The way out for a staged ``version`` whose schema the target refuses: nothing is
    lost, it stays staged until the target takes it or it is sent again."""
    return (
        f"Staged version {version} cannot be published as it is (it was accepted by a "
        "deltasink release that did not check it against the versions pending before it, "
        "or the target's schema changed since). Nothing is lost: it stays staged. Either "
        "make the target take it (a missing column: add it to the target, e.g. "
        f"ALTER TABLE ... ADD COLUMNS, then run recover()), or send it again in a shape "
        f"that fits: read its rows from the staging table (version column "
        f"{VERSION_COLUMN} = {version}), then sink.abort({version}) (or `deltasink "
        f"abort {target} {version} --app {app_id}`) and sink.pre_commit(fixed_rows, "
        f"{version}). See the runbook, 'a staged version does not fit the target'."
    )


def pending_context(
    exc: SchemaMismatchError, pending: Sequence[int], *, table: str, app_id: str, version: int
) -> SchemaMismatchError:
    """``exc`` (a batch refused against :func:`schema_after`) saying which schema it was
    checked against, when versions are pending before it."""
    return SchemaMismatchError(
        f"{exc} (Checked against the schema {table} will have once the "
        f"pending versions {list(pending)} of app {app_id!r} are published: a staged version must be "
        "publishable. Nothing was staged.)",
        table=exc.table,
        column=exc.column,
        app_id=app_id,
        version=version,
    )


def schema_after(
    target: pa.Schema | None,
    staged: Sequence[tuple[int, pa.Schema]],
    spec: MergeSpec,
    *,
    table: str,
    app_id: str,
    check: bool = False,
) -> pa.Schema | None:
    """The target's schema once the ``staged`` versions are published one by one.

    Args:
        target: The target's Arrow schema, or ``None`` if it does not exist yet.
        staged: ``(version, staged schema)`` of the versions to publish, ascending.
        spec: The MergeSpec they are published with.
        table: The target, for messages.
        app_id: The writer, for messages.
        check: Also check that each version after the first one creating the target
            fits the schema the ones before it leave (the publish's own check,
            :func:`~deltasink.shapes.schema.align_to_target`, on the column types).

    Returns:
        The schema, or ``None`` when the target does not exist and nothing is staged.

    Raises:
        SchemaMismatchError: With ``check``, a version does not fit (the message names
            it and the way out, :func:`stuck_advice`).
    """
    current = target
    previous: pa.Schema | None = None
    for version, schema in staged:
        data = _data(schema)
        if previous is not None and data.equals(previous):
            continue  # the same schema again: it fits, and adds nothing
        previous = data
        if current is None:
            current = _created(data, spec)
            continue
        if check:
            try:
                align_to_target(
                    data.empty_table(), current, evolve=spec.schema_evolution, table=table
                )
            except SchemaMismatchError as exc:
                raise SchemaMismatchError(
                    f"{exc} {stuck_advice(version, app_id=app_id, target=table)}",
                    table=table,
                    column=exc.column,
                    app_id=app_id,
                    version=version,
                ) from exc
        current = _evolved(current, data, spec)
    return current
