"""``DeltaSink``: the public facade."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from deltasink.backends import ENGINES, Engine, connect, select_engine
from deltasink.backends.ports import CommitPort, MaintenancePort, SinkConfig
from deltasink.checks import Check
from deltasink.core.committables import LogState, Placement
from deltasink.core.protocol import (
    CommitReport,
    Committable,
    Progress,
    Timeouts,
    TwoPhaseCommit,
)
from deltasink.errors import ConfigurationError, InvalidInputError, QuarantinedError
from deltasink.failures import named_storage_errors
from deltasink.hooks import PostCommit, PostCommitHook, run_hooks
from deltasink.inputs import Batch
from deltasink.locations import default_staging
from deltasink.observe import observed
from deltasink.ops.origin import BatchOrigin, encode
from deltasink.ops.status import SinkStatus
from deltasink.resuming import StreamOrigins, StreamWriting
from deltasink.shapes.spec import MergeSpec
from deltasink.shapes.table import TableSpec
from deltasink.sink_args import check_arguments, check_engine_fit, locate
from deltasink.sink_ops import SinkOperations
from deltasink.stores import checked_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DeltaSink", "SinkStatus", "default_staging"]


class DeltaSink(StreamWriting, SinkOperations):
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
        transaction_timeout: Age (timedelta or seconds) after which a staged version
            counts as timed out.
        ignore_failures_after_timeout: In :meth:`recover`, abandon (drop, with a
            warning) a version that fails to commit and is older than the timeout,
            instead of raising. Its rows never reach the target.
        timeout_warning_ratio: Warn when a pending version is older than
            ``transaction_timeout * ratio``.
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
        checks: Pre-commit checks run on each staged version before it is published
            (write-audit-publish, :mod:`deltasink.checks`); a failing version is
            quarantined. They are recorded in the staging table, and a sink created
            without ``checks`` (``None``: an operator's sink, the CLI) runs the recorded
            built-in ones, so it never publishes what the job would not. Pass ``()``
            for a job without checks. A check that cannot work is a
            :class:`~deltasink.errors.ConfigurationError`, never a quarantine: here
            (not a callable of one argument, a SQL text that does not parse), or at
            the first batch, before anything is staged (a column the batch does not
            have, a SQL check that does not analyse).
        unverifiable_checks: For a sink without ``checks``: when the recorded checks
            include plain callables (which only the job can run), ``"refuse"``
            (default: :class:`~deltasink.errors.UnverifiableChecksError`, nothing
            published) or ``"skip"`` them (run the recorded built-ins only).
        on_quarantine: When a call (``write``, ``foreach_batch``, ``commit``,
            ``recover``) quarantines a version or stops at one: ``"continue"``
            (default: the report says so, with an error logged; a stream goes on
            staging later batches behind it) or ``"raise"``
            :class:`~deltasink.errors.QuarantinedError` after the call, which stops a
            streaming query until the version is aborted or re-staged.
        check_samples: Let a failing check quote rows of the batch in its message
            (kept in the staging table, logged, shown by ``status``). Off by default,
            since rows may hold personal data: the message then gives counts only.
        post_commit: Hooks run after each call that committed something
            (:mod:`deltasink.hooks`): compaction, notifications.
        storage_options: delta-rs storage options for object stores. Options that
            declare an S3 store without put-if-absent commits
            (``AWS_S3_ALLOW_UNSAFE_RENAME=true``, ``AWS_S3_LOCKING_PROVIDER``,
            ``AWS_CONDITIONAL_PUT=disabled``; :mod:`deltasink.stores`) are refused with
            :class:`~deltasink.errors.UnsafeStoreError` unless the user opts in.
        allow_unsafe_commits: Opt in to such a store (also the storage option
            ``deltasink.allow_unsafe_commits=true``): two writers may then both win one
            table version, which loses a batch or lets a fenced writer go on.
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
    ) -> None:
        checks = check_arguments(
            target,
            app_id,
            merge=merge,
            table=table,
            checks=checks,
            on_quarantine=on_quarantine,
            on_stale=on_stale,
            engine=engine,
        )
        self._on_quarantine = on_quarantine
        chosen, self.engine_reason = select_engine(engine, spark, os.fspath(target))
        self.target, self.staging, catalog = locate(target, staging, app_id)
        self.app_id = app_id
        timeouts = Timeouts(
            transaction_timeout=transaction_timeout,
            ignore_failures_after_timeout=ignore_failures_after_timeout,
            warning_ratio=timeout_warning_ratio,
        )
        check_engine_fit(
            chosen, max_commit_attempts=max_commit_attempts, catalog=catalog, target=self.target
        )
        # The spark engine commits through Spark's LogStore: its options only read.
        storage_options = checked_options(
            [self.target, self.staging],
            storage_options,
            allow_unsafe_commits=bool(allow_unsafe_commits)
            or not ENGINES[chosen].commits_through_storage_options,
        )
        parts = connect(
            chosen,
            SinkConfig(
                target=self.target,
                staging=self.staging,
                app_id=app_id,
                merge=merge,
                max_commit_attempts=max_commit_attempts,
                storage_options=storage_options,
                checks=checks,
                unverifiable_checks=unverifiable_checks,
                check_samples=bool(check_samples),
                table=table,
                spark=spark,
            ),
        )
        self._backend: CommitPort = parts.commit
        self._maintenance: MaintenancePort = parts.maintenance
        self._post_commit = tuple(post_commit)
        self._spark = spark
        self._origins = StreamOrigins(
            target=self.target,
            app_id=app_id,
            history=self._maintenance.history,
            staged_origin=self._backend.staged_origin,
        )
        self._core: TwoPhaseCommit[object] = TwoPhaseCommit(
            self._backend,
            app_id=app_id,
            timeouts=timeouts,
            clock=clock,
            coalesce=coalesce,
            on_stale=on_stale,
            table=self.target,
        )

    def __reduce__(self) -> Any:
        """Refuse to be pickled, by name: Spark Connect (serverless, standard access
        mode) pickles a ``foreachBatch`` function to run it in a Python worker of the
        server, and a bound ``sink.foreach_batch`` would carry this sink's session and
        open tables into another process."""
        from deltasink.backends import active_session, embedded_session

        if embedded_session(self._spark if self._spark is not None else active_session()):
            from deltasink.resuming import no_foreach_batch_on_the_embedded_session

            raise no_foreach_batch_on_the_embedded_session(self.target, self.app_id)
        raise ConfigurationError(
            f"a DeltaSink (app {self.app_id!r}) cannot be pickled: on Spark Connect "
            "(serverless, standard access mode) foreachBatch pickles its function, so pass "
            "foreach_batch_writer(target, app_id, merge, checkpoint=...) instead of "
            "sink.foreach_batch.",
            table=self.target,
            app_id=self.app_id,
        )

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
            return self._write(df, version, replays_last_only=False)
        try:
            encoded = encode(BatchOrigin(position=position))
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"position must be a JSON value (a date string, a list of files, ...): {exc}",
                table=self.target,
                app_id=self.app_id,
            ) from exc
        return self._write(df, version, replays_last_only=False, origin=encoded)

    def _write(
        self,
        df: Batch,
        version: int,
        *,
        replays_last_only: bool,
        origin: str | None = None,
        place: Callable[[LogState], Placement] | None = None,
    ) -> CommitReport:
        return self._after(
            self._core.write(
                df,
                version,
                replays_last_only=replays_last_only,
                origin=origin,
                place=place,
            )
        )

    def _after(self, report: CommitReport) -> CommitReport:
        if self._post_commit:
            run_hooks(self._post_commit, PostCommit(report=report, sink=self))
        if self._on_quarantine == "raise":
            stopped = [r for r in report.results if r.outcome == "quarantined"]
            if stopped:
                version, reason = stopped[0].version, stopped[0].message or "a check failed"
                raise QuarantinedError(
                    f"version {version} of app {self.app_id!r} is quarantined ({reason}); "
                    f"it and later versions wait. Abort it (sink.abort({version}) or "
                    f"`deltasink abort {self.target} --app {self.app_id} {version}`) or "
                    "re-stage it with fixed data, then restart.",
                    reason=reason,
                    report=report,
                    table=self.target,
                    app_id=self.app_id,
                    version=version,
                )
        return report

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
