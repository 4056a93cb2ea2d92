""":class:`SparkBackend`, the spark engine's commit port
(:class:`~deltasink.backends.ports.CommitPort`): the protocol's participant with
fencing, coalescing, write-audit-publish and direct publish, wired from the parts of
this package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal

from deltasink import _faults
from deltasink.checks import Check, StagedBatch, needs_validation, run_checks, validate_on
from deltasink.core.direct import record_mark_softly
from deltasink.core.guards import spec_for_new_versions
from deltasink.core.participant import DiscardReason
from deltasink.core.protocol import CommitResult, LogState, Prepared, StagedVersion
from deltasink.errors import CommitError
from deltasink.input.arrow import spark_arrow
from deltasink.ops.history import history_from_commits, previous_rows, user_metadata
from deltasink.ops.layout import PROP_SPEC
from deltasink.ops.origin import combine
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec

from .conf import require_ansi
from .fencing import Fence
from .logs import LogReader, SparkLogs
from .maintenance import SparkMaintenance
from .publish import TargetWriter
from .schemas import SchemaFit
from .session import SparkSql
from .sources import source_sql
from .stage import StagingWriter
from .tables import Tables
from .validate import (
    PreparedFrame,
)

__all__ = ["SparkBackend"]


class SparkBackend:
    """:class:`~deltasink.core.protocol.Participant` whose Delta commits are made by Spark
    (with fencing, coalescing, write-audit-publish and direct publish).

    Every method may be called again after a crash: state is read back from the two
    Delta logs, and every target commit is tagged ``txn(app_id, version)``, which Delta
    checks before committing.

    Args:
        spark: The session (default: the active session, or the batch's own).
        target: Target path/URI or catalog name (``catalog.schema.table``).
        staging: Staging path/URI or catalog name.
        app_id: The writer.
        spec: The MergeSpec for new versions; ``None`` means the recorded one.
        max_attempts: Attempts per target commit when concurrent writers conflict.
        storage_options: delta-rs storage options, for reading the logs of tables on
            object stores through delta-rs.
        checks: Pre-commit checks (write-audit-publish).
        check_samples: Whether failing checks may quote rows of the batch.
        log_reader: Who reads the logs: ``"delta-rs"``, ``"spark"``, or ``"auto"``
            (default, :attr:`default_log_reader`): delta-rs for local paths (except
            on Databricks, where a bare path means DBFS) and for remote paths when
            ``storage_options`` are given, Spark otherwise.
        table: The target's definition (:class:`~deltasink.shapes.table.TableSpec`).
    """

    name = "spark"
    reason = "Spark makes every target commit, with Delta's own txn idempotency"
    default_log_reader: ClassVar[LogReader] = "auto"

    def __init__(
        self,
        *,
        spark: Any,
        target: str,
        staging: str,
        app_id: str,
        spec: MergeSpec | None,
        max_attempts: int = 8,
        storage_options: Mapping[str, str] | None = None,
        checks: Sequence[Check] = (),
        check_samples: bool = False,
        log_reader: LogReader | None = None,
        table: TableSpec | None = None,
    ) -> None:
        self.target = target
        self.staging = staging
        self.app_id = app_id
        self.max_attempts = max_attempts
        self.checks = tuple(checks)
        self.check_samples = check_samples
        self._validated: str | None = None  # the batch schema the checks were validated on
        self._spec = spec
        self.tables = Tables(target, staging, app_id)
        self._state: LogState | None = None  # as read last (read_state)
        self.target_ref = self.tables.target_ref
        self.staging_ref = self.tables.staging_ref
        self._sql = SparkSql(spark, self.tables)
        self._logs = SparkLogs(
            self._sql,
            self.tables,
            reader=log_reader or self.default_log_reader,
            storage_options=storage_options,
        )
        self.log_reader: Literal["delta-rs", "spark"] = self._logs.reader
        self._fence = Fence(self._sql, self._logs, self.tables)
        # The origins of the batches write() staged here, until they are published (the
        # ones their stage commits recorded, kept so that publishing does not read them).
        self._origins: dict[int, str] = {}
        self._staging_writer = StagingWriter(self._sql, self._logs, self._fence, self.tables)
        self._target_writer = TargetWriter(
            self._sql, self._logs, self._fence, self.tables, max_attempts=max_attempts, table=table
        )
        self._fit = SchemaFit(
            app_id=app_id,
            target=target,
            staging_ref=self.staging_ref,
            sql=self._sql,
            logs=self._logs,
            target_writer=self._target_writer,
            state=lambda: self._state if self._state is not None else self.read_state(),
            spec_for_staged=self.spec_for_staged,
            validate_checks=self._validate_checks,
        )

    def maintenance(self) -> SparkMaintenance:
        """The maintenance port over this backend's session and logs."""
        return SparkMaintenance(self._sql, self._logs, self.tables)

    # -- configuration -------------------------------------------------------------------

    def recorded_spec(self) -> MergeSpec | None:
        """The MergeSpec recorded in the staging table, if any."""
        return self._logs.recorded_spec()

    def spec_for_new_versions(self) -> MergeSpec:
        """The spec new versions are staged with."""
        return spec_for_new_versions(
            self._spec, self.recorded_spec, app_id=self.app_id, table=self.target
        )

    def spec_for_staged(self) -> MergeSpec:
        """The spec staged versions are committed with (the one they were staged with)."""
        return self.recorded_spec() or self.spec_for_new_versions()

    # -- state and fencing ---------------------------------------------------------------

    def read_state(self) -> LogState:
        """The committed version and the staged versions, from the two logs.

        Staged versions are the staging partitions plus the empty versions the staging
        history records (Spark writes no file for an empty batch).
        """
        self._state = self._logs.state()
        return self._state

    def refresh(self) -> None:
        """Nothing to forget: every ``read_state`` reads the target's marker."""

    def target_exists(self) -> bool:
        return self._logs.target_exists()

    @property
    def epoch(self) -> int | None:
        """This writer's epoch, once claimed."""
        return self._fence.epoch

    def claim(self) -> None:
        """Take over the writer role now (``recover()`` calls this first); a no-op if
        this backend already holds the current epoch, or if nothing is staged yet."""
        self._fence.claim()

    # -- staging -------------------------------------------------------------------------

    def _validate_checks(self, prepared: PreparedFrame) -> None:
        """Validate the checks against the prepared batch before it is staged
        (:func:`~deltasink.checks.validate_on`; SQL checks analysed on this session,
        no job), on the first batch and whenever the schema changes.

        Raises:
            ConfigurationError: A check that cannot work on this batch.
        """
        if not needs_validation(self.checks):
            return
        frame = prepared.frame.select(*prepared.columns)
        key = frame.schema.simpleString()
        if key == self._validated:
            return
        validate_on(self.checks, prepared.columns, lambda: frame.limit(0))
        self._validated = key

    def stage(self, batch: object, version: int) -> StagedVersion:
        """Validate ``batch`` on Spark, then append it to the staging table in one commit
        tagged ``txn(app_id, version)``; the first stage creates the table.

        A failure before that commit leaves nothing staged (Spark removes the files of a
        failed write job; anything left is unreferenced and goes with ``VACUUM``).
        """
        return self.stage_prepared(self.prepare(batch, version))

    # -- SupportsDirectPublish -------------------------------------------------------------

    def prepare(self, batch: object, version: int) -> Prepared:
        """Validate ``batch`` for ``version`` on Spark without writing anything (the
        frame stays lazy); the named errors of :meth:`stage`."""
        spec = self.spec_for_new_versions()
        require_ansi(self._sql.session(batch), spec)
        prepared = self._fit.prepare(batch, spec, version)
        return Prepared(version, prepared.rows, prepared)

    def _claim_for(self, prepared: PreparedFrame) -> int:
        """Create the staging table on first use, claim (or check) the epoch, and record
        the spec new versions carry when it changed."""
        spec = self.spec_for_new_versions()
        props = self._logs.staging_props()
        if props is None:
            self._staging_writer.create(prepared, spec)
        epoch = self._fence.fence()
        assert epoch is not None
        # A claim does not change the spec: the properties read above say it, unless
        # the table was only just created (by this writer, or a concurrent one).
        recorded = self._logs.recorded_spec(props)
        if recorded is not None and recorded != spec:
            self._fence.check()
            self._sql.set_props(
                self.staging_ref,
                {PROP_SPEC: spec.to_json()},
                user_metadata("spec", self.app_id, None),
            )
        return epoch

    def stage_prepared(self, prepared: Prepared) -> StagedVersion:
        """Stage a batch :meth:`prepare` validated, as :meth:`stage` does."""
        frame: PreparedFrame = prepared.payload
        self._claim_for(frame)
        staged = self._staging_writer.append(
            prepared.version, frame, operation="stage", origin=prepared.origin
        )
        if prepared.origin is not None:
            self._origins[prepared.version] = prepared.origin
        return staged

    def audit_prepared(self, prepared: Prepared) -> str | None:
        """Run the pre-commit checks on the prepared (unstaged) frame."""
        if not self.checks:
            return None
        frame: PreparedFrame = prepared.payload
        data = frame.frame.select(*frame.columns)
        return self._audit(prepared.version, prepared.rows, lambda: data)

    def publish_prepared(self, prepared: Prepared) -> CommitResult:
        """MERGE (or append) the prepared frame straight into the target in one commit
        carrying ``txn(app_id, version)``, then record the committed mark in the staging
        table (one commit without data, ``txn("<app_id>#committed", version)``).

        The staging table is created and the epoch claimed on first use, as by
        :meth:`stage`; the epoch is checked before the target commit. A failure of the
        mark's commit is logged, not raised: the target commit landed, and the next
        clean-up or direct publish records a higher mark."""
        frame: PreparedFrame = prepared.payload
        version = prepared.version
        self._claim_for(frame)
        result = self._target_writer.apply_frame(
            version, frame, self.spec_for_new_versions(), prepared.rows, origin=prepared.origin
        )
        if result.outcome == "committed":
            record_mark_softly(
                lambda: self._staging_writer.record_mark(version),
                app_id=self.app_id,
                version=version,
            )
        return result

    # -- publishing ----------------------------------------------------------------------

    def publish(self, staged: StagedVersion) -> CommitResult:
        """MERGE (or append) version ``staged`` into the target in one commit carrying
        ``txn(app_id, version)``; a no-op returning ``already_committed`` when the
        target's marker covers it (checked here, and by Delta itself in the commit)."""
        self._fence.fence()
        spec = self.spec_for_staged()
        columns = self._logs.columns(staged.version)
        self._fit.check_fits([staged.version])
        origin = self.staged_origin(staged.version)
        result = self._target_writer.apply(
            [staged.version], columns, spec, staged.rows, origin=origin
        )
        self._origins.pop(staged.version, None)
        return result

    def staged_origin(self, version: int) -> str | None:
        """The origin the stage commit of ``version`` recorded: kept when ``write()``
        staged it here, read from the staging log otherwise (e.g. in ``recover()``)."""
        kept = self._origins.get(version)
        return kept if kept is not None else self._logs.origin(version)

    def can_coalesce(self) -> bool:
        return self.spec_for_staged().coalescable

    def publish_many(self, staged: Sequence[StagedVersion]) -> CommitResult:
        """One commit for ``staged`` (coalesced, the marker of the highest version).

        Raises:
            CommitError: The versions were staged with different columns (committing
                them together could null the columns some of them left out), or the
                marker moved inside the run; the caller then goes one by one.
        """
        self._fence.fence()
        spec = self.spec_for_staged()
        versions = [s.version for s in staged]
        columns = {self._logs.columns(v) for v in versions}
        if len(columns) != 1:
            raise CommitError(
                f"versions {versions} were staged with different columns; committing them "
                "one by one",
                table=self.target,
                app_id=self.app_id,
            )
        self._fit.check_fits(versions)
        rows = sum(s.rows for s in staged)
        origin = combine([self.staged_origin(v) for v in versions])
        result = self._target_writer.apply(versions, columns.pop(), spec, rows, origin=origin)
        for version in versions:
            self._origins.pop(version, None)
        return replace(result, versions=tuple(versions)) if len(versions) > 1 else result

    def discard(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        """Remove the staged data of ``versions`` in one ``DELETE`` (by partition, a
        metadata-only commit); empty versions, which have no data, get a commit that
        records their discard. Files stay for time travel until ``VACUUM``."""
        for version in versions:
            self._origins.pop(version, None)
        if not versions or self._logs.staging_props() is None:
            return
        self._fence.fence()
        _faults.point("discard.before_log_commit")
        self._staging_writer.drop(versions, reason=reason)

    # -- write-audit-publish ---------------------------------------------------------------

    def audit(self, staged: StagedVersion) -> str | None:
        """Run the pre-commit checks on ``staged`` (SQL checks on this session)."""
        if not self.checks:
            return None
        version = staged.version
        spec = self.spec_for_staged()
        plain = replace(spec, delete_when=None) if spec.delete_when else spec

        def dataframe() -> Any:
            spark = self._sql.session()
            columns = self._logs.columns(version)
            return spark.sql(source_sql(self.staging_ref, [version], columns, plain))

        return self._audit(version, staged.rows, dataframe)

    def _audit(self, version: int, rows: int, dataframe: Callable[[], Any]) -> str | None:
        if not self.checks:
            return None
        batch = StagedBatch(
            app_id=self.app_id,
            version=version,
            rows=rows,
            target=self.target,
            _arrow=lambda: spark_arrow(dataframe()),
            _dataframe=dataframe,
            _previous_rows=lambda: previous_rows(
                history_from_commits(self._logs.target_commits(20), self.app_id)
            ),
            samples=self.check_samples,
        )
        return run_checks(self.checks, batch)

    def quarantine(self, version: int, reason: str) -> None:
        """Record the quarantine of ``version`` in the staging table's properties."""
        self._fence.fence()
        self._staging_writer.quarantine(version, reason)

    def restage(self, batch: object, version: int) -> StagedVersion:
        """Replace the staged data of quarantined ``version`` in one commit
        (``replaceWhere`` on its partition), lifting the quarantine first (after a crash
        in between, the old data is audited, and quarantined, again)."""
        prepared = self._fit.prepare(batch, self.spec_for_staged(), version)
        self._fence.fence()
        self._origins.pop(version, None)
        self._staging_writer.lift_quarantine([version])
        return self._staging_writer.append(version, prepared, operation="restage")
