"""Fencing on Spark: the writer epoch is the staging table property
``deltasink.epoch``, claimed with ``ALTER TABLE ... SET TBLPROPERTIES`` (a metadata
change, which Delta makes conflict with every concurrent staging commit) together with a
random token in ``deltasink.epochOwner`` that tells two claimers of one epoch apart.
"""

from __future__ import annotations

import logging
import uuid

from deltasink.core.guards import claim_exhausted
from deltasink.errors import FencedError
from deltasink.ops.history import user_metadata
from deltasink.ops.layout import PROP_EPOCH
from deltasink.retry import retry

from .errors import is_conflict
from .logs import SparkLogs
from .session import SparkSql
from .tables import Tables

__all__ = ["PROP_EPOCH_OWNER", "Fence"]

logger = logging.getLogger("deltasink")

#: Staging table property: the token of the writer that claimed the current epoch.
PROP_EPOCH_OWNER = "deltasink.epochOwner"
_CLAIM_ATTEMPTS = 20


class _ClaimLost(Exception):
    """Two claimers wrote the same epoch and the other one's token stayed."""


class Fence:
    """One writer's epoch on the staging table: claimed on first use, checked after.

    Args:
        sql: The session.
        logs: Reads the staging properties.
        tables: The writer's tables.
    """

    def __init__(self, sql: SparkSql, logs: SparkLogs, tables: Tables) -> None:
        self._sql = sql
        self._logs = logs
        self.tables = tables
        self._epoch: int | None = None
        self._owner: str | None = None

    @property
    def epoch(self) -> int | None:
        """This writer's epoch, once claimed."""
        return self._epoch

    def claim(self) -> None:
        """Take over the writer role now; a no-op if this writer already holds the
        current epoch, or if nothing is staged yet."""
        if self._epoch is None:
            self.fence()
        else:
            self.check()

    def fence(self) -> int | None:
        """Claim an epoch on first use, check it afterwards; ``None``: no staging table,
        so nothing to fence."""
        if self._epoch is None:
            if self._logs.staging_props() is not None:
                self._epoch = self._claim_epoch()
        else:
            self.check()
        return self._epoch

    def check(self) -> None:
        """Raise :class:`FencedError` if a newer writer claimed the staging table."""
        if self._epoch is None:
            return
        t = self.tables
        props = self._logs.staging_props() or {}
        current = int(props.get(PROP_EPOCH, "0"))
        if current != self._epoch or props.get(PROP_EPOCH_OWNER) != self._owner:
            raise FencedError(
                f"app {t.app_id!r} on {t.target}: another writer with the same app_id "
                f"took over the staging table (epoch {current}; this sink holds epoch "
                f"{self._epoch}). This sink must stop; the newer writer carries on. If that "
                "one is gone, create a new DeltaSink to take over.",
                epoch=self._epoch,
                current_epoch=current,
                table=t.staging,
                app_id=t.app_id,
            )

    def _claim_epoch(self) -> int:
        """Set ``deltasink.epoch`` to the next value, with this writer's token in
        ``deltasink.epochOwner``. A Spark ``ALTER TABLE`` reads the table when it starts,
        not when the epoch was read, so two claimers may write the same epoch; the token
        tells them apart (the last one wins, the other claims again)."""
        t = self.tables
        token = uuid.uuid4().hex

        def once() -> int:
            props = self._logs.staging_props()
            assert props is not None
            epoch = int(props.get(PROP_EPOCH, "0")) + 1
            self._sql.set_props(
                t.staging_ref,
                {PROP_EPOCH: str(epoch), PROP_EPOCH_OWNER: token},
                user_metadata("claim-epoch", t.app_id, None),
            )
            now = self._logs.staging_props() or {}
            if now.get(PROP_EPOCH) == str(epoch) and now.get(PROP_EPOCH_OWNER) == token:
                return epoch
            raise _ClaimLost(epoch)  # another claimer wrote the same epoch after us

        epoch = retry(
            once,
            attempts=_CLAIM_ATTEMPTS,
            # another writer claimed at the same time
            retryable=lambda exc: isinstance(exc, _ClaimLost) or is_conflict(exc),
            exhausted=lambda n, _exc: claim_exhausted(t.staging, t.app_id, n),
            what=f"claiming an epoch on {t.staging}",
            cap=0.0,
        )
        logger.debug("app %r claimed staging epoch %s", t.app_id, epoch)
        self._owner = token
        return epoch
