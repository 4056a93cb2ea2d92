"""The embedded engine's commit port: staging and target written with delta-rs.

Used with the embedded engine (Sail) and with any Spark session whose Delta writes
cannot carry ``txn`` markers. Data arrives as Arrow; every Delta commit is made here,
so the staging append and the target MERGE each carry ``txn(app_id, version)``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Literal

import pyarrow as pa

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.checks import Check
from deltasink.core.coalesce import coalesce
from deltasink.core.committables import CommitMarks
from deltasink.core.guards import spec_for_new_versions
from deltasink.core.participant import DiscardReason
from deltasink.core.pending import schema_after
from deltasink.core.protocol import CommitResult, LogState, Prepared, StagedVersion
from deltasink.errors import CommitError
from deltasink.ops.origin import ORIGIN_KEY, combine
from deltasink.shapes.spec import MergeSpec

from .audit import Auditor
from .cache import StagedCache
from .claims import Claims
from .features import definition_takes, refuse_timestamp_partitions
from .fencing import Fence
from .generated import check_generated
from .maintenance import target_history
from .publish import TargetWriter
from .schemas import SchemaFit
from .stage import StagingWriter

__all__ = ["EmbeddedBackend"]


def _order(version: int | None) -> int:
    """Versions ordered with ``None`` (nothing) below every version."""
    return -1 if version is None else version


logger = logging.getLogger("deltasink")


class EmbeddedBackend:
    """The embedded engine's :class:`~deltasink.backends.ports.CommitPort`: a
    :class:`~deltasink.core.participant.Participant` over delta-rs, with fencing,
    coalescing and write-audit-publish.

    Fencing: the first write of a backend object claims a new epoch in the staging
    table; every later write checks it is still current (:mod:`.fencing`, :mod:`.claims`).

    Args:
        target: The target table.
        staging: The staging table's reader; its writer and fencing are built on it.
        app_id: The writer.
        spec: The MergeSpec for new versions; ``None`` means the one recorded in the
            staging table.
        checks: Pre-commit checks (write-audit-publish), see :mod:`deltasink.checks`;
            recorded in the staging table when versions are staged. ``None``: run the
            checks recorded there (an operator's sink).
        unverifiable_checks: With ``checks=None``, what to do when the recorded checks
            include callables: ``"refuse"`` to publish (default) or ``"skip"`` them.
        check_samples: Whether failing checks may quote rows of the batch.
    """

    name = "embedded"
    reason = "delta-rs makes every Delta commit"

    def __init__(
        self,
        *,
        target: TargetWriter,
        staging: StagingLog,
        app_id: str,
        spec: MergeSpec | None,
        checks: Sequence[Check] | None = (),
        unverifiable_checks: Literal["refuse", "skip"] = "refuse",
        check_samples: bool = False,
    ) -> None:
        self.target = target
        self.log = staging
        self.epochs = Fence(staging)
        self.writer = StagingWriter(staging, self.epochs)
        self.app_id = app_id
        self._spec = spec
        self._auditor = Auditor(
            staging,
            target=target.uri,
            checks=checks,
            unverifiable=unverifiable_checks,
            samples=check_samples,
            data=self._data,
            history=lambda limit: target_history(target, app_id, limit),
        )
        # The batches staged here, kept so that write() publishes the one it just
        # validated, and commit() the ones pre-committed before it, without reading them.
        self._staged = StagedCache()
        # The writer role: the epoch claimed, the publish intent recorded.
        self._claims = Claims(
            app_id=app_id,
            log=staging,
            writer=self.writer,
            epochs=self.epochs,
            auditor=self._auditor,
            spec=spec,
            spec_for_new_versions=self.spec_for_new_versions,
            started_over=self._started_over,
        )
        self._state: LogState | None = None  # as read last (read_state)
        # A foreign intent settled from the target's history, and this app's newest
        # commit found there (read once per intent: it only changes by this writer).
        self._settled: tuple[int, int | None] | None = None
        # The origins of the batches staged here (None: staged without one), until they
        # are published: what their stage commits recorded, kept so that publishing
        # does not read the staging history for them.
        self._origins: dict[int, str | None] = {}
        # What a batch must fit; it keeps the schemas of staged versions read from their
        # files' footers (not in _staged).
        self._fit = SchemaFit(
            app_id=app_id,
            target=self.target,
            log=self.log,
            staged=self._staged,
            state=lambda: self._state if self._state is not None else self.read_state(),
            spec_for_staged=self.spec_for_staged,
        )

    # -- configuration -------------------------------------------------------------

    def spec_for_new_versions(self) -> MergeSpec:
        """The spec new versions are staged with."""
        return spec_for_new_versions(
            self._spec,
            lambda: self.log.recorded_spec(fresh=False),
            app_id=self.app_id,
            table=self.target.uri,
        )

    def spec_for_staged(self) -> MergeSpec:
        """The spec staged versions are committed with (the one they were staged with)."""
        return self.log.recorded_spec(fresh=False) or self.spec_for_new_versions()

    # -- Participant -------------------------------------------------------------------

    def read_state(self) -> LogState:
        # Right after a claim (recover()), its commit is the state: see Claims.claim.
        snap = self.log.snapshot(fresh=not self._claims.take_claimed_state())
        intent = self._claims.foreign(snap.intent)
        marker = self.target.committed_version(self.app_id)
        mark = snap.mark
        if intent is not None and max(_order(marker), _order(mark)) < intent:
            # Another process attempted a target commit of versions up to the intent and
            # recorded no outcome (a direct publish's is recorded by the next intent; or
            # it crashed), and the target's marker does not show it (it did not land, or
            # the marker is lost). The target's history tells: this app's newest commit
            # there is committed, and versions above it did not land. Without history
            # (a rebuilt target) the versions above the mark stay ambiguous, and the core
            # refuses them by name (guards.check_publish).
            if self._settled is None or self._settled[0] != intent:
                self._settled = (intent, self.target.last_commit_of(self.app_id))
            landed = self._settled[1]
            if landed is not None:
                mark, intent = max(_order(mark), landed), min(intent, landed)
        marks = CommitMarks(marker, mark, intent, table=self.target.uri)
        self._state = LogState.read(marks, snap.staged, snap.quarantined)
        return self._state

    def refresh(self) -> None:
        self.target.forget_own_commit()
        self._claims.take_claimed_state()

    def _started_over(self) -> None:
        """The staging table was deleted under the sink: what was kept of it goes too."""
        self._staged.clear()
        self._fit.forget()

    def claim(self) -> None:
        """Take over the writer role now (``recover()``): :meth:`Claims.claim`."""
        self._claims.claim()

    def _committed(self) -> int | None:
        """The committed version of the state read last (the mark a publish intent
        records)."""
        return None if self._state is None else self._state.committed_version

    def stage(self, batch: object, version: int) -> StagedVersion:
        return self.stage_prepared(self.prepare(batch, version))

    # -- SupportsDirectPublish ---------------------------------------------------------

    def prepare(self, batch: object, version: int) -> Prepared:
        spec = self.spec_for_new_versions()
        data = self._fit.prepare(batch, spec, self._fit.schema_before(version), version)
        self.target.check_writable(data.column_names)
        if self.target.table_spec is not None and not self.target.exists():
            partition_by = self.target.table_spec.partition_by or ()
            refuse_timestamp_partitions(data.schema, partition_by, self.target.uri, creating=True)
        self.target.check_values(spec)
        check_generated(self.target.open(fresh=False), data, spec, self.target.uri)
        self.target.check_condition(spec)
        table = self.target.open(fresh=False)  # the definition refuses what it never takes
        if table is not None:
            definition_takes(table, data, spec, self.target.uri)
            self.target.constraints.check(table, data, spec, versions=[version], app_id=self.app_id)
        self._auditor.validate(data)
        return Prepared(version, data.num_rows, data)

    def stage_prepared(self, prepared: Prepared) -> StagedVersion:
        version, data = prepared.version, prepared.payload
        # On the state read in this call: the stage commit, made on it, fails if anyone
        # claimed since (a metadata change), and the epoch is then checked freshly.
        epoch = self._claims.claim_for(prepared, fresh=False)
        intent, origin = prepared.through, prepared.origin
        staged = self.writer.append(
            version, data, epoch=epoch, verified=True, intent=intent, origin=origin
        )
        if intent:
            self._claims.intent = version
        self._origins[version] = origin
        self._staged.put(version, data)
        return staged

    def audit_prepared(self, prepared: Prepared) -> str | None:
        self._staged.put(prepared.version, prepared.payload)
        staged = StagedVersion(prepared.version, prepared.rows, datetime.now(timezone.utc))
        return self._auditor.audit(staged)

    def publish_prepared(self, prepared: Prepared) -> CommitResult:
        """Publish without staging: the publish intent (a staging commit without data,
        with the committed mark of the state ``write()`` read) durable before the
        target commit, then the fencing check (a claim since the intent); on an object
        store both go out while the target is read (:meth:`~.claims.Claims.publishing`).
        The intent is made on the state ``write()`` read: a claim since fails it
        (:meth:`~.stage.StagingWriter.record_intent`). An intent without a recorded
        outcome is settled from the target's history (:meth:`read_state`)."""
        version = prepared.version
        epoch = self._claims.claim_for(prepared, fresh=False)
        result = self._claims.publishing(
            version,
            epoch=epoch,
            mark=self._committed(),
            apply=lambda check: self.target.apply(
                prepared.payload,
                spec=self.spec_for_new_versions(),
                app_id=self.app_id,
                version=version,
                metadata=self._metadata(version, prepared.rows, origin=prepared.origin),
                before_attempt=check,
            ),
        )
        self._staged.drop([version])
        return result

    def _metadata(
        self, version: int, rows: int, *, origin: str | None = None, staged: bool = False
    ) -> dict[str, object]:
        """The commit metadata of the target commit whose marker is ``version``: with
        ``origin`` (the batch being published directly), else, for a ``staged`` version,
        the one its stage commit recorded (kept when ``write()`` staged it here, read
        otherwise, e.g. in ``recover()``)."""
        metadata: dict[str, object] = {"deltasink.staging": self.log.uri, "deltasink.rows": rows}
        if origin is None and staged:
            origin = self.staged_origin(version)
        if origin is not None:
            metadata[ORIGIN_KEY] = origin
        return metadata

    def _data(self, version: int) -> pa.Table:
        kept = self._staged.get(version)
        return kept if kept is not None else self.log.read(version)

    def publish(self, staged: StagedVersion) -> CommitResult:
        data, spec = self._data(staged.version), self.spec_for_staged()
        # A version staged by an earlier release may not fit: refused by name, with the
        # way out (the publish would refuse it too, without saying how to get past it).
        schema_after(
            self.target.schema(fresh=False),
            [(staged.version, data.schema)],
            spec,
            table=self.target.uri,
            app_id=self.app_id,
            check=True,
        )
        self._claims.announce(staged.version, mark=self._committed())
        result = self.target.apply(
            data,
            spec=spec,
            app_id=self.app_id,
            version=staged.version,
            metadata=self._metadata(staged.version, staged.rows, staged=True),
            before_attempt=self._claims.fence,
        )
        self._staged.drop([staged.version])
        self._origins.pop(staged.version, None)
        return result

    def can_coalesce(self) -> bool:
        return self.spec_for_staged().coalescable

    def publish_many(self, staged: Sequence[StagedVersion]) -> CommitResult:
        self._claims.announce(staged[-1].version, mark=self._committed())
        spec = self.spec_for_staged()
        cached = {s.version: t for s in staged if (t := self._staged.get(s.version)) is not None}
        missing = [s.version for s in staged if s.version not in cached]
        cached.update(self.log.read_many(missing, fresh=False) if missing else {})
        tables = [(s.version, cached[s.version]) for s in staged]
        # Coalesced ≡ one by one: a version the ones before it leave no room for is
        # refused here too (the core then goes one by one and stops at it).
        schema_after(
            self.target.schema(fresh=False),
            [(v, t.schema) for v, t in tables],
            spec,
            table=self.target.uri,
            app_id=self.app_id,
            check=True,
        )
        columns = {tuple(sorted(t.column_names)) for _, t in tables}
        if len(columns) > 1 and spec.mode != "append":
            # A version that omits a column leaves it alone on update; a coalesced
            # batch would have to fill it with nulls. The core goes one by one.
            raise CommitError(
                "the coalesced versions were staged with different columns",
                table=self.target.uri,
                app_id=self.app_id,
                version=staged[-1].version,
            )
        data = coalesce(tables, spec)
        result = self.target.apply(
            data,
            spec=spec,
            app_id=self.app_id,
            version=staged[-1].version,
            versions=[s.version for s in staged],
            metadata=self._metadata(
                staged[-1].version,
                sum(s.rows for s in staged),
                origin=combine([self.staged_origin(s.version) for s in staged]),
            ),
            before_attempt=self._claims.fence,
        )
        self._staged.drop(s.version for s in staged)
        for s in staged:
            self._origins.pop(s.version, None)
        return replace(result, rows=sum(s.rows for s in staged))

    def discard(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        self._staged.drop(versions)
        for version in versions:
            self._origins.pop(version, None)
        for version in versions:
            self._fit.forget([version])
        # The epoch on the state read in this call (the drop commit fails on a claim since)
        self.writer.drop(
            versions, reason=reason, epoch=self._claims.fence(fresh=False), verified=True
        )

    # -- status ---------------------------------------------------------------------

    def recorded_spec(self) -> MergeSpec | None:
        return self.log.recorded_spec(fresh=False)

    def target_exists(self) -> bool:
        return self.target.exists()

    def staged_origin(self, version: int) -> str | None:
        if version in self._origins:  # staged here: what its stage commit recorded
            return self._origins[version]
        return self.log.origin_of(version)  # staged by an earlier process (recover)

    # -- SupportsQuarantine (write-audit-publish) ----------------------------------------

    def audit(self, staged: StagedVersion) -> str | None:
        return self._auditor.audit(staged)

    def quarantine(self, version: int, reason: str) -> None:
        self.writer.set_quarantine(version, reason, epoch=self._claims.fence())

    def restage(self, batch: object, version: int) -> StagedVersion:
        data = self._fit.prepare(
            batch, self.spec_for_staged(), self._fit.schema_before(version), version
        )
        self._auditor.validate(data)
        epoch = self._claims.fence(data.schema)
        assert epoch is not None
        self._staged.drop([version])  # whatever happens next, never the old rows
        self._origins.pop(version, None)
        self._fit.forget([version])
        staged = self.writer.replace(version, data, epoch=epoch)
        self._origins[version] = None  # a restage commit records no origin
        self._staged.put(version, data)
        return staged
