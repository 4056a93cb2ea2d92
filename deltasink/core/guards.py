"""Checks every backend makes the same way: who owns a staging table and the spec new
versions use; and, called by the core itself, whether the MergeSpec may change
(:func:`same_spec`), the ``on_stale`` policy (:func:`stale`) and the committed-version
guard against lost txn markers (:class:`MarkGuard`, :func:`check_publish`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Literal

from deltasink.core.committables import LogState, StagedVersion
from deltasink.core.participant import SupportsSpecs
from deltasink.errors import (
    AlreadyCommittedError,
    CommitError,
    ConfigurationError,
    MarkerLostError,
    StagingFormatError,
    StagingOwnershipError,
)
from deltasink.locations import same_location
from deltasink.notices import ReplayWarning, warn_caller
from deltasink.ops.layout import FORMAT, PROP_APP, PROP_FORMAT, PROP_TARGET
from deltasink.shapes.spec import MergeSpec

__all__ = [
    "MarkGuard",
    "check_owner",
    "check_publish",
    "claim_exhausted",
    "refuse_spec_change",
    "same_spec",
    "spec_for_new_versions",
    "stale",
]

logger = logging.getLogger("deltasink")


def check_owner(props: Mapping[str, str], *, staging: str, target: str, app_id: str) -> None:
    """Raise unless the staging table's properties name ``target`` and ``app_id``.

    The target is compared as a location (:func:`~deltasink.locations.same_location`):
    a symlink, a trailing slash, ``s3a://`` for ``s3://`` or ``wasbs://`` for
    ``abfss://`` is the same target, so the writer takes over its own pending versions.

    Raises:
        StagingFormatError: The table's layout format is newer than this release's.
        StagingOwnershipError: deltasink did not create the table, or it belongs to
            another target or app.
    """
    layout = props.get(PROP_FORMAT, FORMAT)
    if not layout.isdigit() or int(layout) > int(FORMAT):
        raise StagingFormatError(
            f"staging table {staging} has layout format {layout!r}, and this deltasink "
            f"release reads formats up to {FORMAT!r}: a newer release wrote it. Nothing was "
            "read or written. Upgrade deltasink here (every job and operator of this app "
            "must run a release that reads the table's format).",
            table=staging,
            app_id=app_id,
        )
    owner_target, owner_app = props.get(PROP_TARGET), props.get(PROP_APP)
    if owner_target is None or owner_app is None:
        raise StagingOwnershipError(
            f"{staging} is a Delta table that deltasink did not create (no "
            f"{PROP_TARGET}/{PROP_APP} properties); refusing to use it as staging. "
            "Choose another staging location.",
            table=staging,
            app_id=app_id,
        )
    if not same_location(owner_target, target) or owner_app != app_id:
        raise StagingOwnershipError(
            f"staging table {staging} belongs to target {owner_target!r} and app "
            f"{owner_app!r}, not to target {target!r} and app {app_id!r}; it may hold "
            "that writer's pending versions, so it is left as it is. If this sink is "
            f"that writer under another spelling of the location, pass target="
            f"{owner_target!r} and app_id={owner_app!r} (its pending versions are "
            "recovered there). Otherwise give this sink a staging= location of its own "
            "(each (target, app_id) has its own staging table); do not delete this one "
            f"before `deltasink status {owner_target} --app {owner_app}` shows nothing "
            "pending.",
            table=staging,
            app_id=app_id,
        )


def spec_for_new_versions(
    given: MergeSpec | None,
    recorded: Callable[[], MergeSpec | None],
    *,
    app_id: str,
    table: str,
) -> MergeSpec:
    """The spec new versions are staged with: the one the sink was given, else the one
    recorded in the staging table (read only then), on both engines. (Staged versions
    are committed with the recorded one, else this one.)

    Raises:
        ConfigurationError: Neither exists.
    """
    spec = given or recorded()
    if spec is None:
        raise ConfigurationError(
            f"no MergeSpec given for app {app_id!r} on {table} and none is recorded in its "
            "staging table; pass merge=MergeSpec(...).",
            table=table,
            app_id=app_id,
        )
    return spec


def refuse_spec_change(
    recorded: MergeSpec | None,
    spec: MergeSpec,
    pending: Sequence[StagedVersion],
    *,
    app_id: str,
    table: str | None,
    version: int,
) -> None:
    """Refuse staging with ``spec`` while versions staged with another one are pending
    (they are committed with the spec they were staged with). ``allow_missing_columns``
    alone may change: it decides which batches are staged, not how staged versions
    are published."""
    if recorded is None or not pending:
        return
    if replace(recorded, allow_missing_columns=spec.allow_missing_columns) == spec:
        return
    raise ConfigurationError(
        f"versions {[s.version for s in pending]} of app {app_id!r} were staged with "
        f"{recorded} and are not committed yet; commit or recover them (or abort them) "
        f"before staging with {spec}.",
        table=table,
        app_id=app_id,
        version=version,
    )


def same_spec(
    participant: SupportsSpecs,
    pending: Sequence[StagedVersion],
    *,
    app_id: str,
    table: str | None,
    version: int,
) -> None:
    """Before the participant validates or writes ``version``: the core's one check that
    it is staged with the spec the ``pending`` versions were staged with (read only
    when versions are pending; a direct publish has none). As
    :func:`refuse_spec_change`."""
    if not pending:
        return
    recorded = participant.recorded_spec()
    if recorded is not None:
        spec = participant.spec_for_new_versions()
        if recorded != spec:
            refuse_spec_change(recorded, spec, pending, app_id=app_id, table=table, version=version)


def stale(
    version: int,
    committed: int | None,
    *,
    on_stale: Literal["skip", "raise"],
    app_id: str,
    warn: bool = True,
) -> None:
    """The ``on_stale`` policy for a ``version`` the target's marker (``committed``)
    already covers, and the :class:`~deltasink.ReplayWarning` (with ``warn``) saying
    nothing was written.

    Raises:
        AlreadyCommittedError: ``version`` is below ``committed`` and ``on_stale`` is
            ``"raise"``.
    """
    if committed is None or version >= committed:
        # a replay of the last committed version: normal after a crash
        logger.info("version %s of app %r is already committed; nothing written", version, app_id)
        if warn:
            warn_caller(
                f"version {version} of app {app_id!r} is already committed (the "
                "target's marker); nothing was written. A re-run after a crash is this "
                "case. If this batch holds new rows, write it as a new version: a "
                "version is never applied twice, whatever rows it carries.",
                ReplayWarning,
            )
        return
    message = (
        f"version {version} of app {app_id!r} is below the committed version "
        f"{committed}: an older batch sent again, or versions that went backwards"
    )
    if on_stale == "raise":
        raise AlreadyCommittedError(
            message + "; nothing was written.", app_id=app_id, version=version
        )
    logger.warning("%s; dropped without writing (on_stale='skip')", message)
    if warn:
        warn_caller(
            f"{message}; nothing was written (on_stale='skip'). If this batch holds new "
            "rows, write it as a new version above the committed one.",
            ReplayWarning,
        )


def check_publish(state: LogState, version: int, *, app_id: str) -> None:
    """Refuse to publish ``version`` when ``state`` (the state read before the publish)
    showed the target's marker below the staging mark (its ``lost``) and ``version``
    lies above the mark, at or below the intent. The core calls this before every
    publish (:class:`~deltasink.core.protocol.TwoPhaseCommit`), on both engines.

    Raises:
        MarkerLostError: The version may already be in the target.
    """
    lost = state.lost
    if lost is None:
        return
    marker, mark, intent = lost
    if not mark < version <= intent:
        return
    target = state.marks.table if state.marks is not None else None
    raise MarkerLostError(
        f"the target {target} holds txn version {marker} for app {app_id!r} "
        f"but its staging table recorded version {mark} as committed: the target was "
        f"rebuilt, restored or its txn markers expired. Staged version {version} may "
        f"already be in the target (a commit of versions up to {intent} was attempted "
        "and its clean-up did not run), so it is not published. Check the target: abort each staged version it already "
        "holds (`deltasink abort`); a version it lacks must be aborted and sent again "
        "by the source. See the runbook, 'target lost its markers'.",
        marker=marker,
        mark=mark,
        table=target,
        app_id=app_id,
        version=version,
    )


class MarkGuard:
    """The committed-version guard of one writer, in the core: one warning per new
    discrepancy between the target's marker and the staging mark that won over it."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self._warned: int | None = None

    def observe(self, state: LogState) -> LogState:
        """Warn when ``state``'s committed version is the staging mark, not the target's
        marker (once per mark); ``state`` unchanged."""
        marks = state.marks
        if (
            marks is None
            or not marks.exact
            or marks.mark is None
            or state.committed_version == marks.marker
            or self._warned == marks.mark
        ):
            return state
        logger.warning(
            "app %r: the target %s records version %s as committed but the staging "
            "table saw %s committed; the target was rewritten or its txn markers "
            "expired (delta.setTransactionRetentionDuration). Versions ≤ %s are not "
            "applied again.",
            self.app_id,
            marks.table,
            marks.marker,
            marks.mark,
            marks.mark,
        )
        self._warned = marks.mark
        return state


def claim_exhausted(staging: str, app_id: str, attempts: int) -> CommitError:
    """The error of a writer-epoch claim that lost to concurrent claims ``attempts``
    times in a row (both engines' fencing)."""
    return CommitError(
        f"could not claim a writer epoch on {staging} after {attempts} attempts: other "
        "writers with the same app_id keep claiming it. Run one writer per app_id.",
        table=staging,
        app_id=app_id,
    )
