"""Checks every backend makes the same way: who owns a staging table, whether the
MergeSpec may change, and the committed-version guard against lost txn markers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from deltasink.core.committables import LostMarker, StagedVersion
from deltasink.errors import (
    CommitError,
    ConfigurationError,
    MarkerLostError,
    StagingFormatError,
    StagingOwnershipError,
)
from deltasink.locations import same_location
from deltasink.ops.layout import FORMAT, PROP_APP, PROP_FORMAT, PROP_TARGET
from deltasink.shapes.spec import MergeSpec

__all__ = [
    "Committed",
    "MarkGuard",
    "check_owner",
    "check_publish",
    "claim_exhausted",
    "decide_committed",
    "foreign_intent",
    "refuse_spec_change",
    "spec_for_new_versions",
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
    table: str,
    version: int,
) -> None:
    """Refuse staging with ``spec`` while versions staged with another one are pending
    (they are committed with the spec they were staged with)."""
    if recorded is None or recorded == spec or not pending:
        return
    raise ConfigurationError(
        f"versions {[s.version for s in pending]} of app {app_id!r} were staged with "
        f"{recorded} and are not committed yet; commit or recover them (or abort them) "
        f"before staging with {spec}.",
        table=table,
        app_id=app_id,
        version=version,
    )


class Committed(NamedTuple):
    """The committed version to trust, and the lost marker it was decided over."""

    version: int | None
    lost: LostMarker | None = None


def decide_committed(marker: int | None, mark: int | None, intent: int | None) -> Committed:
    """The committed version to trust: the higher of the target's ``txn`` ``marker`` and
    the staging table's committed ``mark``.

    A ``mark`` above the marker also makes staged versions above the mark ambiguous: the
    clean-up that advances the mark runs *after* a target commit, so such a version may
    have been committed to the target before it lost its marker. The staging table's
    publish ``intent`` (recorded before each target commit) bounds them: the result's
    ``lost`` names them for :func:`check_publish`. Without an intent record (``None``: an
    engine that does not keep one) nothing is refused."""
    if mark is None or (marker is not None and marker >= mark):
        return Committed(marker)
    return Committed(mark, None if intent is None else LostMarker(marker, mark, intent))


def foreign_intent(
    read: int | None, own: int | None, last_foreign: int | None
) -> tuple[int | None, int | None]:
    """The publish intent that can make staged versions ambiguous (for
    :func:`decide_committed`), and the foreign intent to remember: the one ``read`` from
    the staging log, unless it is this writer's ``own`` announcement, which makes nothing
    ambiguous; then the last intent read that was not its own (``last_foreign``) stands."""
    if read is not None and read == own:
        return last_foreign, last_foreign
    return read, read


def check_publish(lost: LostMarker | None, version: int, *, app_id: str, target: str) -> None:
    """Refuse to publish ``version`` when the state read showed the target's marker below
    the staging mark (``lost``) and ``version`` lies above the mark, at or below the
    intent.

    Raises:
        MarkerLostError: The version may already be in the target.
    """
    if lost is None:
        return
    marker, mark, intent = lost
    if not mark < version <= intent:
        return
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
    """The committed-version guard of one writer: :func:`decide_committed`, with one
    warning per new discrepancy between the target's marker and the staging mark."""

    def __init__(self, app_id: str, target: str) -> None:
        self.app_id = app_id
        self.target = target
        self._warned: int | None = None

    def committed(
        self, marker: int | None, mark: int | None, intent: int | None = None
    ) -> Committed:
        """:func:`decide_committed`, warning when the staging ``mark`` wins (once per
        mark)."""
        decided = decide_committed(marker, mark, intent)
        if decided.version != marker and self._warned != mark:
            logger.warning(
                "app %r: the target %s records version %s as committed but the staging "
                "table saw %s committed; the target was rewritten or its txn markers "
                "expired (delta.setTransactionRetentionDuration). Versions ≤ %s are not "
                "applied again.",
                self.app_id,
                self.target,
                marker,
                mark,
                mark,
            )
            self._warned = mark
        return decided


def claim_exhausted(staging: str, app_id: str, attempts: int) -> CommitError:
    """The error of a writer-epoch claim that lost to concurrent claims ``attempts``
    times in a row (both engines' fencing)."""
    return CommitError(
        f"could not claim a writer epoch on {staging} after {attempts} attempts: other "
        "writers with the same app_id keep claiming it. Run one writer per app_id.",
        table=staging,
        app_id=app_id,
    )
