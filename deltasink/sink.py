"""``DeltaSink``: the public facade."""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar, get_args

from deltasink.backends import Engine, connect, select_engine
from deltasink.backends.ports import CommitPort, MaintenancePort, SinkConfig
from deltasink.batch import spark_frame
from deltasink.checks import Check
from deltasink.checks import validate as validate_checks
from deltasink.committables import GcResult
from deltasink.errors import ConfigurationError, InvalidInputError, QuarantinedError
from deltasink.failures import storage_failure
from deltasink.history import HistoryEntry, ledger_table
from deltasink.hooks import PostCommit, PostCommitHook, run_hooks
from deltasink.inputs import Batch
from deltasink.locations import default_staging, is_catalog_name, normalize_uri, same_location
from deltasink.origin import (
    BatchOrigin,
    ResumePoint,
    batch_files,
    check_resume_start,
    encode,
    resolve,
    resume_point,
    stream_origin,
)
from deltasink.protocol import (
    CommitReport,
    Committable,
    Progress,
    Timeouts,
    TwoPhaseCommit,
)
from deltasink.spec import MergeSpec
from deltasink.status import SinkStatus
from deltasink.stores import checked_options
from deltasink.table import TableSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DeltaSink", "SinkStatus", "default_staging"]

_APP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _named_storage_errors(
    method: Callable[Concatenate[DeltaSink, _P], _R],
) -> Callable[Concatenate[DeltaSink, _P], _R]:
    """A storage failure an engine reports as a bare ``OSError`` (delta-rs, for
    object stores) leaves the facade as a :class:`~deltasink.errors.StorageError` or
    :class:`~deltasink.errors.StorageAccessError` naming the target."""

    @functools.wraps(method)
    def wrapper(self: DeltaSink, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise storage_failure(exc, self.target) from exc

    return wrapper


def _active_spark() -> Any:
    """The active Spark session (classic or Connect), or ``None``."""
    try:
        from pyspark.sql import SparkSession

        return SparkSession.getActiveSession()
    except Exception:  # pyspark missing or no usable session
        return None


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
            last committed version is normal after a crash and always a silent no-op):
            ``"skip"`` it, writing nothing, with a warning (default), or ``"raise"``
            :class:`~deltasink.errors.AlreadyCommittedError`, also writing nothing.
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
            clustering, properties, comment; :class:`~deltasink.table.TableSpec`). An
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
        if not isinstance(target, str | os.PathLike):
            raise ConfigurationError(f"target must be a path or URI string, got {target!r}.")
        if not isinstance(app_id, str) or not _APP_ID.match(app_id):
            raise ConfigurationError(
                f"app_id must be 1-200 characters of letters, digits, '.', '_' or '-', "
                f"starting with a letter or digit; got {app_id!r}.",
                app_id=app_id if isinstance(app_id, str) else None,
            )
        if merge is not None and not isinstance(merge, MergeSpec):
            raise ConfigurationError(f"merge must be a MergeSpec or None, got {merge!r}.")
        if table is not None and not isinstance(table, TableSpec):
            raise ConfigurationError(f"table must be a TableSpec or None, got {table!r}.")
        checks = validate_checks(checks)
        if on_quarantine not in ("continue", "raise"):
            raise ConfigurationError(
                f"on_quarantine must be 'continue' or 'raise', got {on_quarantine!r}."
            )
        self._on_quarantine = on_quarantine
        if on_stale not in ("skip", "raise"):
            raise ConfigurationError(f"on_stale must be 'skip' or 'raise', got {on_stale!r}.")
        if engine not in get_args(Engine):
            raise ConfigurationError(
                f"engine must be one of {list(get_args(Engine))}, got {engine!r}."
            )
        chosen, self.engine_reason = select_engine(engine, spark, os.fspath(target))
        catalog = is_catalog_name(os.fspath(target))
        self.target = os.fspath(target) if catalog else normalize_uri(target)
        self.app_id = app_id
        if staging:
            self.staging = staging if is_catalog_name(staging) else normalize_uri(staging)
        elif catalog:
            self.staging = (
                f"{self.target}__deltasink_staging_{app_id.replace('-', '_').replace('.', '_')}"
            )
        else:
            self.staging = default_staging(self.target, app_id)
        if same_location(self.staging, self.target):
            raise ConfigurationError(
                "staging must be a different location than target.", table=self.target
            )
        timeouts = Timeouts(
            transaction_timeout=transaction_timeout,
            ignore_failures_after_timeout=ignore_failures_after_timeout,
            warning_ratio=timeout_warning_ratio,
        )
        if not isinstance(max_commit_attempts, int) or max_commit_attempts < 1:
            raise ConfigurationError(
                f"max_commit_attempts must be an int ≥ 1, got {max_commit_attempts!r}."
            )
        if chosen == "embedded" and catalog:
            raise ConfigurationError(
                f"target {self.target!r} is a catalog table name; the embedded engine "
                "writes Delta tables by path. Pass a path, or use engine='spark' with a "
                "Delta-enabled session.",
                table=self.target,
            )
        # The spark engine commits through Spark's LogStore: its options only read.
        storage_options = checked_options(
            [self.target, self.staging],
            storage_options,
            allow_unsafe_commits=bool(allow_unsafe_commits) or chosen != "embedded",
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
        # The origin of the newest origin-recording commit this sink made or read:
        # (committed version it was read at, origin); saves a history read per batch.
        self._origin_seen: tuple[int, BatchOrigin | None] | None = None
        self._core: TwoPhaseCommit[object] = TwoPhaseCommit(
            self._backend,
            app_id=app_id,
            timeouts=timeouts,
            clock=clock,
            coalesce=coalesce,
            on_stale=on_stale,
        )

    def __repr__(self) -> str:
        return (
            f"DeltaSink(target={self.target!r}, app_id={self.app_id!r}, staging={self.staging!r})"
        )

    @property
    def engine(self) -> str:
        """The backend doing the Delta writes."""
        return self._backend.name

    @_named_storage_errors
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

    @_named_storage_errors
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

    @_named_storage_errors
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
            As :meth:`pre_commit` and :meth:`commit` otherwise.
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
        version_of: Callable[[int | None], int] | None = None,
    ) -> CommitReport:
        # When it stages, the stage commit records the publish intent too.
        self._backend.write_through = version
        if origin is not None and isinstance(version, int):
            self._backend.origin = (version, origin)
        try:
            return self._after(
                self._core.write(
                    df, version, replays_last_only=replays_last_only, version_of=version_of
                )
            )
        finally:
            self._backend.write_through = None
            self._backend.origin = None

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

    @_named_storage_errors
    def foreach_batch(
        self,
        df: Batch,
        batch_id: int,
        *,
        resume: bool = False,
        checkpoint: str | os.PathLike[str] | None = None,
    ) -> CommitReport:
        """``writeStream.foreachBatch(sink.foreach_batch)``: micro-batch ``batch_id``
        of one streaming query, written exactly once.

        :meth:`write` with Spark's replay rule, from one read of the Delta logs; returns
        its report (Spark ignores it; a wrapping function can log it).

        A stream is an identity, not a counter: the target commit of each batch records
        its *origin* (:mod:`deltasink.origin`): the query's stable id (the one in
        ``<checkpointLocation>/metadata``), the batch id and the source positions Spark
        wrote to ``<checkpointLocation>/offsets/<batch_id>``. The version is ``base +
        batch_id``, ``base`` being 0 unless the query resumed after another one.

        * A batch of the query that committed the current version: Spark replays only
          its last batch, so the same batch again is a silent no-op (provided it covers
          the same source positions, else :class:`~deltasink.errors.ReplayMismatchError`),
          and a lower one is :class:`~deltasink.errors.InvalidVersionError`.
        * A batch of another query (the checkpoint was deleted, reset or changed; a
          new one restarts batch ids at 0): :class:`~deltasink.errors.CheckpointResetError`,
          nothing written, unless ``resume``: the batch becomes the version right after
          the committed one, and that base is recorded, so a restart of the resumed
          query maps its batches the same way. Start such a query from the positions
          :meth:`offsets` gives, or its rows are read again.

        The query is identified from ``checkpoint`` when given, else from a classic
        session (the local property ``sql.streaming.queryId``, the checkpoint through
        the driver's running query). Without an identity (Spark Connect without
        ``checkpoint``, a ``pyarrow.Table``) nothing is recorded and ``batch_id`` is the
        version, as before origins existed; likewise after versions committed by a
        writer that recorded no query (old versions, ``recover()``, batch jobs).

        Args:
            df: The micro-batch.
            batch_id: Spark's batch id.
            resume: Continue right after the committed version when the current version
                was committed by another query (see above).
            checkpoint: The query's ``checkpointLocation`` (needed on Spark Connect and
                serverless to know the query and its positions).

        Raises:
            CheckpointResetError: Another query committed the current version.
            ReplayMismatchError: A replay of the committed batch with other positions.
            InvalidVersionError: ``batch_id`` maps below the committed version.
            ConfigurationError: ``checkpoint`` holds no offsets for ``batch_id``, or
                ``resume`` without a way to identify the query.
            As :meth:`write` otherwise.
        """
        origin = stream_origin(
            df, batch_id, checkpoint=None if checkpoint is None else os.fspath(checkpoint)
        )
        if origin is None:
            if resume:
                raise ConfigurationError(
                    "resume=True needs the streaming query's identity: pass "
                    "checkpoint=<the query's checkpointLocation> (Spark Connect and "
                    "serverless do not expose it to foreachBatch).",
                    table=self.target,
                    app_id=self.app_id,
                )
            return self._write(df, batch_id, replays_last_only=True)
        chosen: list[tuple[int, BatchOrigin]] = []

        def version_of(committed: int | None) -> int:
            seen = self._committed_origin(committed)
            version, recorded = resolve(
                origin,
                committed=committed,
                committed_origin=seen,
                resume=resume,
                app_id=self.app_id,
                table=self.target,
            )
            if (
                committed is not None
                and batch_files(origin)
                and (seen is None or seen.query_id != origin.query_id)
            ):
                # Resuming (or a stream taking over a legacy target): never re-read a
                # file the target holds.
                check_resume_start(
                    origin,
                    self._committed_files(),
                    committed=committed,
                    app_id=self.app_id,
                    table=self.target,
                )
            self._backend.write_through = version
            self._backend.origin = (version, encode(recorded))
            chosen.append((version, recorded))
            return version

        report = self._write(df, batch_id, replays_last_only=True, version_of=version_of)
        if chosen and report.committed_version == chosen[0][0]:
            self._origin_seen = chosen[0]
        return report

    def _committed_files(self) -> set[str]:
        """Every file a file source delivered to this writer's committed versions."""
        return {f for e in self.history() if e.origin is not None for f in batch_files(e.origin)}

    def _committed_origin(self, committed: int | None) -> BatchOrigin | None:
        """The origin recorded by the newest of this writer's target commits that
        recorded one (versions ``recover()`` published record none); ``None`` if none
        did. Remembered between calls while the committed version stays."""
        if committed is None:
            return None
        seen = self._origin_seen
        if seen is not None and seen[0] == committed:
            return seen[1]
        found: BatchOrigin | None = None
        for limit in (64, None):
            entries = self._maintenance.history(limit)
            found = next((e.origin for e in entries if e.origin is not None), None)
            if found is not None or limit is None or len(entries) == 0:
                break
        self._origin_seen = (committed, found)
        return found

    @_named_storage_errors
    def offsets(self) -> ResumePoint:
        """The committed version's origin and where a new streaming query starts from
        to continue right after it (``deltasink offsets``): per source, Kafka
        ``startingOffsets`` JSON, a Delta source's ``startingVersion``, or the files a
        file source already delivered (every commit's, so the new query can leave them
        out). ``exact`` is false when versions after the last recorded origin were
        committed without one (by ``recover()``): the positions are then older than the
        committed version.
        """
        committed = self._core.state().committed_version
        entries = self.history()
        origins = [e for e in entries if e.origin is not None]
        if committed is None or not origins:
            return resume_point(committed, None, None)
        last = origins[0]
        point = resume_point(
            committed,
            last.target_version,
            last.origin,
            [e.origin for e in origins[1:] if e.origin is not None],
        )
        if last.version != committed:
            return ResumePoint(
                point.version, point.target_version, point.origin, point.starting, exact=False
            )
        return point

    @_named_storage_errors
    def abort(self, version: int) -> bool:
        """Drop staged, uncommitted ``version``; ``False`` if it was not staged.

        Raises:
            AlreadyCommittedError: The version is already committed.
        """
        return self._core.abort(version)

    @_named_storage_errors
    def recover(self, *, progress: Progress | None = None) -> CommitReport:
        """Commit every staged, uncommitted version, in order (run at start-up).

        Claims the writer role first (an older writer with the same app_id is fenced).
        Safe at any time, any number of times. Also removes leftover staging data of
        committed versions. Stops at a quarantined version, as :meth:`commit` does.

        Raises:
            CommitError: As for :meth:`commit`.
        """
        return self._after(self._core.recover(progress=progress))

    @_named_storage_errors
    def status(self, *, with_origin: bool = False) -> SinkStatus:
        """The committed version and the pending versions, from the Delta logs.

        Args:
            with_origin: Also read the origin of the newest commit that recorded one
                (:attr:`SinkStatus.origin`; one read of the target's recent history).
        """
        state = self._core.state()
        return SinkStatus(
            target=self.target,
            staging=self.staging,
            app_id=self.app_id,
            engine=self.engine,
            engine_reason=self.engine_reason,
            committed_version=state.committed_version,
            pending_versions=[s.version for s in state.pending],
            pending=state.pending,
            leftover_versions=[s.version for s in state.leftovers],
            target_exists=self._backend.target_exists(),
            merge=self._backend.recorded_spec(),
            quarantined=dict(state.quarantined),
            origin=self._committed_origin(state.committed_version) if with_origin else None,
        )

    @_named_storage_errors
    def gc(
        self, retention: timedelta | float = timedelta(days=7), *, dry_run: bool = False
    ) -> GcResult:
        """Expire staging data nothing needs any more, and compact the staging log.

        Removes files of committed, aborted and abandoned versions (and orphans of
        failed stagings) older than ``retention``, then checkpoints the staging log
        and drops expired log files. Staged, pending versions are never touched.
        Safe to run while the job runs.

        Args:
            retention: Keep unreferenced files younger than this (timedelta or
                seconds), for time travel and forensics.
            dry_run: Only list what would be removed.
        """
        seconds = retention.total_seconds() if isinstance(retention, timedelta) else retention
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise ConfigurationError(f"retention must be ≥ 0, got {retention!r}.")
        return self._maintenance.gc(timedelta(seconds=seconds), dry_run=dry_run)

    @_named_storage_errors
    def optimize(self, *, z_order_by: Sequence[str] = ()) -> None:
        """Compact the target's small files (OPTIMIZE; Z-ORDER by ``z_order_by``)."""
        self._maintenance.optimize(z_order_by)

    @_named_storage_errors
    def commits_since_optimize(self, limit: int = 1000) -> int:
        """This writer's target commits since the target's last OPTIMIZE (up to
        ``limit``), from the Delta history."""
        return self._maintenance.commits_since_optimize(limit)

    def ledger(self, spark: SparkSession | None = None, *, limit: int | None = None) -> DataFrame:
        """The commit ledger as a Spark DataFrame, one row per committed version.

        Columns: ``app_id``, ``version``, ``target_version`` (the Delta version to
        time-travel to), ``committed_at``, ``operation``, ``rows_inserted``,
        ``rows_updated``, ``rows_deleted``, ``execution_ms``, ``staged_rows``,
        ``commit_versions`` (all versions of that target commit, when coalesced).
        Register it as a view for SQL users: ``sink.ledger().createOrReplaceTempView(
        "orders_ledger")``.

        Args:
            spark: The session to build it on (default: the sink's session, else the
                active one, as on a cluster; the embedded engine only when there is
                none).
            limit: Read at most this many recent target commits.
        """
        session = spark or self._spark or _active_spark()
        if session is None:
            from deltasink.backends.embedded import embedded_spark

            session = embedded_spark()
        frame: DataFrame = spark_frame(session, ledger_table(self.app_id, self.history(limit)))
        return frame

    @_named_storage_errors
    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """This writer's commits to the target, newest first, from the Delta history.

        Args:
            limit: Look at most at this many of the target's most recent commits.
        """
        return self._maintenance.history(limit)
