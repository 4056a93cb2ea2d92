"""``DeltaSink``: the public facade."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from deltasink.backends import Engine, connect
from deltasink.backends.ports import CommitPort
from deltasink.checks import Check
from deltasink.core.committables import GcResult
from deltasink.core.protocol import CommitReport, Committable, Progress, TwoPhaseCommit
from deltasink.errors import InvalidInputError
from deltasink.failures import named_storage_errors
from deltasink.hooks import PostCommitHook
from deltasink.inputs import Batch
from deltasink.locations import default_staging
from deltasink.observe import observed
from deltasink.operations import Operations
from deltasink.ops.history import HistoryEntry
from deltasink.ops.origin import BatchOrigin, encode
from deltasink.outcomes import AfterCall
from deltasink.resolve import resolve
from deltasink.settings import AuditChecks, StoreOptions, Timeouts
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec
from deltasink.status import SinkStatus
from deltasink.stream.origins import StreamOrigins
from deltasink.stream.resume import ResumePoint
from deltasink.stream.writer import StreamWriter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["DeltaSink", "SinkStatus", "default_staging"]


def documented_by(part: Callable[..., Any]) -> Callable[[F], F]:
    """A facade method's docstring: the contract of the part's method it delegates to."""

    def document(method: F) -> F:
        method.__doc__ = part.__doc__
        return method

    return document


class DeltaSink:
    """Exactly-once, idempotent writes of batches into one Delta table.

    Each batch has a ``version``: an int ≥ 0 that increases per ``app_id`` (the
    foreachBatch ``batch_id``, a run number, or a date as ``yyyymmdd``). Phase one,
    :meth:`pre_commit`, durably stages the batch in the staging table (one Delta commit
    tagged ``txn(app_id, version)``); phase two, :meth:`commit`, MERGEs every staged
    version up to a number into the target, each in one Delta commit that also carries
    the ``txn(app_id, version)`` marker, so replaying it is a no-op. :meth:`recover`
    finishes whatever a crash left staged. The two Delta logs are the only state: a
    sink object can be dropped and re-created at any point.

    Args:
        target: Location of the target Delta table (created on the first commit if
            absent).
        app_id: This writer's identity, the Delta ``txnAppId``; letters, digits, ``.``,
            ``_`` and ``-``. Keep it stable across restarts of the same job.
        merge: How rows are applied (:class:`MergeSpec`). ``None`` uses the spec
            recorded in the staging table (what the CLI does).
        staging: Location of the staging table. Default:
            ``<target>_deltasink_staging/<app_id>``.
        timeouts: The transaction timeout (:class:`~deltasink.Timeouts`): the age
            after which a staged version counts as timed out, whether :meth:`recover`
            then abandons (drops, with a warning) a version that fails to commit
            instead of raising (its rows never reach the target), and from which age a
            pending version is warned about (``timeout * warning_ratio``).
        transaction_timeout, ignore_failures_after_timeout, timeout_warning_ratio: The
            flat spellings of ``timeouts`` (``Timeouts(transaction_timeout=...,
            ignore_failures_after_timeout=..., warning_ratio=...)``), accepted in this
            release, removed in the next.
        coalesce: When several versions are pending, commit them in one target commit
            (the marker of the highest version; the same result as committing them one
            by one). Falls back to one by one if that commit fails. Specs whose
            versions cannot be folded into one (``update_columns``/``except_columns``,
            ``when_not_matched_by_source="delete"``, ``mode="replace"``: see
            :attr:`MergeSpec.coalescable`) always commit one by one.
        on_stale: A ``write``/``pre_commit`` of a version *below* the committed one
            (an old batch sent again, or versions that went backwards; a replay of the
            last committed version is normal after a crash: nothing written, with a
            :class:`~deltasink.ReplayWarning`): ``"skip"`` it, writing nothing, with a
            ``ReplayWarning`` (default), or ``"raise"`` ``AlreadyCommittedError``.
        max_commit_attempts: Attempts per target commit when concurrent writers
            conflict (Delta optimistic concurrency), with jittered backoff.
        engine: Who makes the Delta commits: ``"embedded"`` (delta-rs; any Spark
            session or Arrow input), ``"spark"`` (the Spark session itself, with
            Delta's idempotent writes; Databricks or delta-spark), or ``"auto"``
            (default): ``spark`` for a Delta-enabled session (Databricks, or the
            DeltaSparkSessionExtension) or a catalog table name, else ``embedded``.
            ``status()`` reports the choice and why.
        spark: The session for the ``spark`` engine (default: the active session).
        audit: Write-audit-publish (:class:`~deltasink.AuditChecks`): pre-commit
            checks run on each staged version before it is published
            (:mod:`deltasink.checks`; a failing version is quarantined), what a sink
            without checks does with recorded ones it cannot run, whether a quarantine
            raises :class:`~deltasink.errors.QuarantinedError` after the call, and
            whether a failing check may quote rows. A check that cannot work is a
            :class:`~deltasink.errors.ConfigurationError`, never a quarantine: here
            (not a callable of one argument, a SQL text that does not parse), or at
            the first batch, before anything is staged (a column the batch does not
            have, a SQL check that does not analyse).
        checks, unverifiable_checks, on_quarantine, check_samples: The flat spellings
            of ``audit``, accepted in this release, removed in the next.
        post_commit: Hooks run after each call that committed something
            (:mod:`deltasink.hooks`): compaction, notifications.
        store: How the store is reached (:class:`~deltasink.StoreOptions`): delta-rs
            storage options, and the opt-in to a store without put-if-absent commits
            (refused with :class:`~deltasink.errors.UnsafeStoreError` otherwise).
        storage_options, allow_unsafe_commits: The flat spellings of ``store``,
            accepted in this release, removed in the next.
        table: How the target is created on the first publish (partitioning,
            clustering, properties, comment; :class:`~deltasink.shapes.table.TableSpec`). An
            existing target that contradicts it is refused with
            :class:`~deltasink.errors.TableDefinitionError` before anything is written.
        clock: Seconds since the epoch (default :func:`time.time`); for tests.

    A sink claims a writer *epoch* in the staging table on its first write; if another
    sink with the same ``app_id`` claims a newer one, this sink's next pre-commit,
    commit or abort raises :class:`~deltasink.errors.FencedError` (Kafka's zombie
    fencing). Create one sink per job and keep it.

    Raises:
        ConfigurationError: Invalid arguments (a check that is not a check included).
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        app_id: str,
        merge: MergeSpec | None = None,
        staging: str | None = None,
        *,
        transaction_timeout: timedelta | float | None = None,
        ignore_failures_after_timeout: bool = False,
        timeout_warning_ratio: float | None = None,
        coalesce: bool = True,
        on_stale: Literal["skip", "raise"] = "skip",
        max_commit_attempts: int = 8,
        engine: Engine = "auto",
        spark: SparkSession | None = None,
        checks: Sequence[Check] | None = None,
        unverifiable_checks: Literal["refuse", "skip"] = "refuse",
        on_quarantine: Literal["continue", "raise"] = "continue",
        check_samples: bool = False,
        post_commit: Sequence[PostCommitHook] = (),
        storage_options: Mapping[str, str] | None = None,
        allow_unsafe_commits: bool = False,
        table: TableSpec | None = None,
        clock: Callable[[], float] = time.time,
        timeouts: Timeouts | None = None,
        audit: AuditChecks | None = None,
        store: StoreOptions | None = None,
    ) -> None:
        # Every argument, by name, to the one step that checks and resolves them.
        arguments = {name: value for name, value in locals().items() if name != "self"}
        settings = self.settings = resolve(**arguments)
        self.target, self.staging, self.app_id = settings.target, settings.staging, app_id
        self.engine_reason = settings.engine_reason
        parts = connect(settings.engine, settings.config())
        self._backend: CommitPort = parts.commit
        self._spark = spark
        self._core: TwoPhaseCommit[object] = TwoPhaseCommit(
            self._backend,
            app_id=app_id,
            timeouts=settings.timeouts,
            clock=settings.clock,
            coalesce=settings.coalesce,
            on_stale=settings.on_stale,
            table=self.target,
        )
        origins = StreamOrigins(
            target=self.target,
            app_id=app_id,
            history=parts.maintenance.history,
            staged_origin=self._backend.staged_origin,
        )
        self._after = AfterCall(
            hooks=settings.post_commit,
            on_quarantine=settings.audit.on_quarantine,
            sink=self,
            target=self.target,
            app_id=app_id,
        )
        self._stream = StreamWriter(
            target=self.target, app_id=app_id, origins=origins, core=self._core, after=self._after
        )
        self._operations = Operations(
            target=self.target,
            staging=self.staging,
            app_id=app_id,
            engine_reason=self.engine_reason,
            backend=self._backend,
            maintenance=parts.maintenance,
            core=self._core,
            origins=origins,
            spark=spark,
        )

    def __reduce__(self) -> Any:
        """Refuse to be pickled, by name: Spark Connect (serverless, standard access
        mode) pickles a ``foreachBatch`` function to run it in a Python worker of the
        server, and a bound ``sink.foreach_batch`` would carry this sink's session and
        open tables into another process."""
        raise self._stream.pickling_refused(self._spark)

    def __repr__(self) -> str:
        return (
            f"DeltaSink(target={self.target!r}, app_id={self.app_id!r}, staging={self.staging!r})"
        )

    @observed("pre_commit")
    @named_storage_errors
    def pre_commit(self, df: Batch, version: int) -> Committable:
        """Phase one: durably stage ``df`` as ``version``.

        Validates the batch first (a named :class:`~deltasink.errors.InvalidInputError`
        before anything is written), then appends it to the staging table in one Delta
        commit. Idempotent: a version already staged or committed stages nothing (see
        :attr:`Committable.state`). Acknowledge source progress only after it returns.

        Args:
            df: A PySpark DataFrame (classic or Connect) or a ``pyarrow.Table``.
            version: The batch version.

        Raises:
            InvalidVersionError: Invalid version, or lower than a pending one.
            InvalidInputError: The batch does not fit (schema, keys, duplicates).
            ConfigurationError: Staging or target is unusable.
        """
        return self._core.pre_commit(df, version)

    @observed("commit")
    @named_storage_errors
    def commit(self, version: int, *, progress: Progress | None = None) -> CommitReport:
        """Phase two: commit every staged version ≤ ``version``, in ascending order.

        Each version (or each run of pending versions, when coalescing) becomes one
        target commit carrying ``txn(app_id, version)``. A no-op for versions already
        committed. With ``checks``, each version is audited first: a failing one is
        quarantined and stops the call (``report.quarantined_versions``; no
        exception). Then staging data of committed versions is removed and the
        post-commit hooks run.

        Args:
            version: Commit every staged version up to this one.
            progress: Called with each :class:`CommitResult` as it happens.

        Raises:
            CommitError: A version failed; earlier ones stay committed, it and later
                ones stay staged for :meth:`recover`.
            FencedError: A newer writer with the same app_id took over.
        """
        return self._after(self._core.commit(version, progress=progress))

    @observed("write")
    @named_storage_errors
    def write(self, df: Batch, version: int, *, position: Any = None) -> CommitReport:
        """Both phases for one batch, for a caller that acknowledges its source only
        after this returns (``foreach_batch``, a batch job's run).

        With nothing staged for this writer, the validated (and checked) batch is
        published straight into the target with ``txn(app_id, version)`` in that
        commit, without a staging write (*direct publish*): a retry of the version is a
        no-op. It is staged only when needed: a failing check quarantines it (as
        :meth:`commit` does; no exception), a failing publish leaves it staged for
        :meth:`recover` and raises. With versions pending, it is ``pre_commit(df,
        version)`` then ``commit(version)``: the pending ones go first, coalesced with
        it where possible.

        Safe to repeat with the same version after a crash (it changes nothing twice).

        Args:
            df: The batch.
            version: Its version.
            position: What the batch covers in its source (a date, a file list, an
                offset: any JSON value), recorded as the ``origin`` of the target
                commit whose marker is ``version``, in that same commit; shown by
                :meth:`history`, :meth:`offsets` and the CLI.

        Raises:
            InvalidInputError: ``position`` is not JSON-serialisable (nothing written).
            DeltaSinkError: Otherwise as :meth:`pre_commit` and :meth:`commit`.
        """
        if position is None:
            return self._after(self._core.write(df, version, replays_last_only=False))
        try:
            encoded = encode(BatchOrigin(position=position))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"position must be a JSON value (a date string, a list of files, ...): {exc}",
                table=self.target,
                app_id=self.app_id,
            ) from exc
        return self._after(self._core.write(df, version, replays_last_only=False, origin=encoded))

    @named_storage_errors
    def abort(self, version: int) -> bool:
        """Drop staged, uncommitted ``version``; ``False`` if it was not staged.

        Raises:
            AlreadyCommittedError: The version is already committed.
        """
        return self._core.abort(version)

    @observed("recover")
    @named_storage_errors
    def recover(self, *, progress: Progress | None = None) -> CommitReport:
        """Commit every staged, uncommitted version, in order (run at start-up).

        Claims the writer role first (an older writer with the same app_id is fenced).
        Safe at any time, any number of times. Also removes leftover staging data of
        committed versions. Stops at a quarantined version, as :meth:`commit` does.

        Raises:
            CommitError: As for :meth:`commit`.
        """
        return self._after(self._core.recover(progress=progress))

    # -- the stream writer -------------------------------------------------------------

    @observed("foreach_batch")
    @named_storage_errors
    @documented_by(StreamWriter.foreach_batch)
    def foreach_batch(
        self,
        df: Batch,
        batch_id: int,
        *,
        resume: bool = False,
        checkpoint: str | os.PathLike[str] | None = None,
    ) -> CommitReport:
        return self._stream.foreach_batch(df, batch_id, resume=resume, checkpoint=checkpoint)

    # -- the operations part -----------------------------------------------------------

    @property
    def engine(self) -> str:
        """The backend doing the Delta writes (``embedded`` or ``spark``)."""
        return self._backend.name

    @named_storage_errors
    @documented_by(Operations.offsets)
    def offsets(self) -> ResumePoint:
        return self._operations.offsets()

    @named_storage_errors
    @documented_by(Operations.status)
    def status(self, *, with_origin: bool = False) -> SinkStatus:
        return self._operations.status(with_origin=with_origin)

    @named_storage_errors
    @documented_by(Operations.gc)
    def gc(
        self, retention: timedelta | float = timedelta(days=7), *, dry_run: bool = False
    ) -> GcResult:
        return self._operations.gc(retention, dry_run=dry_run)

    @named_storage_errors
    @documented_by(Operations.optimize)
    def optimize(self, *, z_order_by: Sequence[str] = ()) -> None:
        self._operations.optimize(z_order_by=z_order_by)

    @named_storage_errors
    @documented_by(Operations.commits_since_optimize)
    def commits_since_optimize(self, limit: int = 1000) -> int:
        return self._operations.commits_since_optimize(limit)

    @documented_by(Operations.ledger)
    def ledger(self, spark: SparkSession | None = None, *, limit: int | None = None) -> DataFrame:
        return self._operations.ledger(spark, limit=limit)

    @named_storage_errors
    @documented_by(Operations.history)
    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        return self._operations.history(limit)
