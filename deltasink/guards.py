"""Checks every backend makes the same way: who owns a staging table, whether the
MergeSpec may change, and the committed-version guard against lost txn markers."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from deltasink.errors import ConfigurationError, StagingOwnershipError
from deltasink.protocol import StagedVersion
from deltasink.spec import MergeSpec

__all__ = ["PROP_APP", "PROP_TARGET", "MarkGuard", "check_owner", "refuse_spec_change"]

logger = logging.getLogger("deltasink")

PROP_TARGET = "deltasink.target"
PROP_APP = "deltasink.appId"


def check_owner(props: Mapping[str, str], *, staging: str, target: str, app_id: str) -> None:
    """Raise unless the staging table's properties name ``target`` and ``app_id``.

    Raises:
        StagingOwnershipError: deltasink did not create the table, or it belongs to
            another target or app.
    """
    owner_target, owner_app = props.get(PROP_TARGET), props.get(PROP_APP)
    if owner_target is None or owner_app is None:
        raise StagingOwnershipError(
            f"{staging} is a Delta table that deltasink did not create (no "
            f"{PROP_TARGET}/{PROP_APP} properties); refusing to use it as staging. "
            "Choose another staging location.",
            table=staging,
            app_id=app_id,
        )
    if owner_target != target or owner_app != app_id:
        raise StagingOwnershipError(
            f"staging table {staging} belongs to target {owner_target!r} and app "
            f"{owner_app!r}, not to target {target!r} and app {app_id!r}. Each (target, "
            "app_id) needs its own staging table: pass another staging= location.",
            table=staging,
            app_id=app_id,
        )


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


class MarkGuard:
    """The committed-version guard: the higher of the target's ``txn`` marker and the
    staging table's committed mark, with one warning per new discrepancy."""

    def __init__(self, app_id: str, target: str) -> None:
        self.app_id = app_id
        self.target = target
        self._warned: int | None = None

    def committed(self, marker: int | None, mark: int | None) -> int | None:
        """The committed version to trust, given the target ``marker`` and ``mark``."""
        if mark is None or (marker is not None and marker >= mark):
            return marker
        if self._warned != mark:
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
        return mark
