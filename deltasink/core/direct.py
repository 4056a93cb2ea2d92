"""Direct publish, the protocol core's shortcut for ``write()`` (engine-free).

``write()`` runs both phases before its caller acknowledges the source. With nothing
staged, the target commit's ``txn(app_id, version)`` marker alone makes a retry of the
version a no-op, so the validated batch may go straight into the target. It is staged
only when needed: a failing check (the core then quarantines it through its gate) or a
failing publish (staged here, so ``recover()`` finishes it, and the error raised).
See ``SPEC.md``, "Direct publish".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timezone

from deltasink import _faults
from deltasink.core.committables import (
    CommitReport,
    CommitResult,
    LogState,
    Prepared,
    StagedVersion,
)
from deltasink.core.guards import check_publish
from deltasink.core.participant import SupportsDirectPublish
from deltasink.core.telemetry import recording
from deltasink.errors import CommitError, DeltaSinkError, FencedError, UnverifiableChecksError

__all__ = ["audit_passes", "landed_despite", "publish_directly", "record_mark_softly"]

logger = logging.getLogger("deltasink")


def audit_passes(participant: SupportsDirectPublish, prepared: Prepared) -> bool:
    """Whether the prepared batch passes its pre-commit checks. A raising check
    counts as failing (the core's gate then records why, as for a staged version)."""
    try:
        return participant.audit_prepared(prepared) is None
    except (FencedError, UnverifiableChecksError):
        raise
    except Exception:
        return False


def publish_directly(
    participant: SupportsDirectPublish,
    prepared: Prepared,
    state: LogState,
    *,
    app_id: str,
    clock: Callable[[], float],
    phases: Mapping[str, float] | None = None,
) -> CommitResult:
    """Publish ``prepared`` straight into the target (``phases``: the seconds the call
    spent validating it, for the commit's telemetry).

    Raises:
        FencedError: A newer writer holds the role (nothing staged, nothing written).
        CommitError: The publish failed and did not land; the batch is staged now
            (or, if staging failed too, nothing of it was written), as the message says.
    """
    version = prepared.version
    try:
        _faults.point("commit.before_publish", versions=[version])
        check_publish(state, version, app_id=app_id)
        with recording(app_id, [version], phases) as recorder:
            result = participant.publish_prepared(prepared)
        result = replace(result, telemetry=recorder.telemetry())
    except FencedError:
        raise
    except Exception as exc:
        staged = StagedVersion(
            version, prepared.rows, datetime.fromtimestamp(clock(), timezone.utc)
        )
        landed = landed_despite(participant.read_state, staged, exc, app_id)
        if landed is None:
            raise _staged_after_failure(participant, prepared, state, exc, app_id) from exc
        result = landed
    _faults.point("commit.after_publish", versions=[version])
    return result


def record_mark_softly(record: Callable[[], None], *, app_id: str, version: int) -> None:
    """Run ``record`` (an engine's commit of the committed mark after a direct
    publish) as a clean-up: the target commit landed, so a failure is logged, not
    raised (the next commit records a higher mark), except :class:`FencedError`."""
    try:
        record()
    except FencedError:
        raise
    except Exception as exc:
        logger.warning(
            "app %r: recording version %s as committed in the staging table failed "
            "(%s); the next commit records it",
            app_id,
            version,
            exc,
        )


def landed_despite(
    read_state: Callable[[], LogState], staged: StagedVersion, exc: Exception, app_id: str
) -> CommitResult | None:
    """After a failed publish, whether the target commit landed anyway (the error
    came after it; ``read_state`` reads the participant's state): then the version
    is committed, and must be reported so."""
    try:
        landed = read_state().is_committed(staged.version)
    except Exception:
        return None
    if not landed:
        return None
    logger.warning(
        "app %r: publishing version %s raised (%s) after its target commit landed; "
        "the version is committed",
        app_id,
        staged.version,
        exc,
    )
    return CommitResult(
        staged.version,
        "committed",
        rows=staged.rows,
        message=f"committed; an error was raised after the commit landed: {exc}",
    )


def _staged_after_failure(
    participant: SupportsDirectPublish,
    prepared: Prepared,
    state: LogState,
    exc: Exception,
    app_id: str,
) -> CommitError:
    """Stage a batch whose direct publish failed, so ``recover()`` can finish it; the
    error to raise either way."""
    version = prepared.version
    try:
        participant.stage_prepared(prepared)
        where = (
            f"version {version} is staged now: fix the cause and run recover() "
            "(or `deltasink recover`)"
        )
    except Exception as stage_exc:
        logger.warning(
            "app %r: staging version %s after its failed publish failed too: %s",
            app_id,
            version,
            stage_exc,
        )
        where = (
            f"staging it failed too ({stage_exc}), so nothing of it was written: send "
            f"version {version} again"
        )
    return CommitError(
        f"committing version {version} of app {app_id!r} failed: {exc}. {where}.",
        report=CommitReport(app_id, (), state.committed_version),
        table=exc.table if isinstance(exc, DeltaSinkError) else None,
        app_id=app_id,
        version=version,
    )
