"""What a batch must fit on the embedded engine: the schema the target will have once the
versions pending before it are published (:mod:`deltasink.core.pending`), and the batch
collected and validated against it."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa

from deltasink import _faults
from deltasink.backends.deltalog.staging import StagingLog
from deltasink.core.committables import LogState
from deltasink.core.pending import pending_context, schema_after
from deltasink.errors import SchemaMismatchError
from deltasink.input.batch import collect, prepare
from deltasink.shapes.computed import computed_columns
from deltasink.shapes.spec import MergeSpec

from .cache import StagedCache
from .publish import TargetWriter
from .transfer import engine_arrow

__all__ = ["SchemaFit"]


class SchemaFit:
    """What a batch must fit on the embedded engine: a part of :class:`EmbeddedBackend`,
    which owns the schemas of staged versions read from their files' footers (those not
    in the staged cache).

    Args:
        app_id: The writer (for messages).
        target: The target's writer (its schema, generated columns, blank partitions).
        log: The staging log (the schemas of staged versions).
        staged: The batches staged in this process.
        state: The writer's state as read last (read now when there is none).
        spec_for_staged: The spec staged versions are committed with.
    """

    def __init__(
        self,
        *,
        app_id: str,
        target: TargetWriter,
        log: StagingLog,
        staged: StagedCache,
        state: Callable[[], LogState],
        spec_for_staged: Callable[[], MergeSpec],
    ) -> None:
        self.app_id = app_id
        self.target = target
        self.log = log
        self._staged = staged
        self._state = state
        self._spec_for_staged = spec_for_staged
        self._schemas: dict[int, pa.Schema] = {}

    def forget(self, versions: Iterable[int] | None = None) -> None:
        """Drop what was read of ``versions``' schemas (all: ``None``)."""
        if versions is None:
            self._schemas.clear()
        for version in versions or ():
            self._schemas.pop(version, None)

    def _pending_before(self, version: int) -> list[int]:
        """The versions pending before ``version``, on the state read last."""
        return self._state().pending_before(version)

    def schema_before(self, version: int) -> pa.Schema | None:
        """The schema the target will have when ``version`` is published: the target's,
        after the versions pending before it (on the state read last; the caller, the
        core, has just read it). Accepted means publishable: a batch is checked
        against this, by the check the publish makes.

        Raises:
            SchemaMismatchError: A pending version before it does not fit (stuck).
        """
        target = self.target.schema(fresh=False)
        before = self._pending_before(version)
        if not before:
            return target
        kept = {v: t.schema for v in before if (t := self._staged.get(v)) is not None}
        kept.update({v: self._schemas[v] for v in before if v not in kept and v in self._schemas})
        missing = [v for v in before if v not in kept]
        if missing:
            read = self.log.schemas(missing, fresh=False)
            self._schemas.update(read)
            kept.update(read)
        return schema_after(
            target,
            [(v, kept[v]) for v in before if v in kept],
            self._spec_for_staged(),
            table=self.target.uri,
            app_id=self.app_id,
            check=True,
        )

    def _computed(self) -> tuple[str, ...]:
        """The target's generated, default and identity columns (as read last)."""
        table = self.target.open(fresh=False)
        if table is None:
            return ()
        return tuple(
            c.name for c in computed_columns((f.name, f.metadata) for f in table.schema().fields)
        )

    def prepare(
        self, batch: object, spec: MergeSpec, expected: pa.Schema | None, version: int
    ) -> pa.Table:
        """``batch`` collected to Arrow and validated against ``expected`` (the schema
        the target will have, :meth:`schema_before`) for ``spec``.

        Raises:
            InvalidInputError: The batch does not fit (named by what the versions
                pending before it make of the target).
        """
        collected = collect(batch, spec, to_arrow=engine_arrow)
        try:
            blank = self.target.blank(collected.schema if expected is None else expected)
            data = prepare(
                collected,
                spec,
                expected,
                target=self.target.uri,
                blank=blank,
                computed=self._computed(),
            )
        except SchemaMismatchError as exc:
            before = self._pending_before(version)
            if not before:
                raise
            raise pending_context(
                exc, before, table=self.target.uri, app_id=self.app_id, version=version
            ) from exc
        _faults.point("stage.before_write")
        return data
