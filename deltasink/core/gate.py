"""The write-audit-publish gate of the protocol core (Flink's pre-commit topology):
before a run of staged versions is published, each one's checks run; the first that
fails is quarantined and stops the run. Engine-free."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from deltasink.core.committables import CommitResult, LogState, StagedVersion
from deltasink.core.participant import SupportsQuarantine
from deltasink.errors import FencedError, UnverifiableChecksError

__all__ = ["audit_group"]

logger = logging.getLogger("deltasink")


def audit_group(
    participant: object, group: Sequence[StagedVersion], state: LogState, app_id: str
) -> tuple[list[StagedVersion], CommitResult | None]:
    """The versions of ``group`` that may be published, and the quarantine result
    that stops the run (a version quarantined now or before), if any."""
    if not isinstance(participant, SupportsQuarantine):
        return list(group), None
    passing: list[StagedVersion] = []
    for staged in group:
        reason = state.quarantined.get(staged.version)
        if reason is None:
            try:
                reason = participant.audit(staged)
            except (FencedError, UnverifiableChecksError):
                raise
            except Exception as exc:
                reason = f"a check raised {type(exc).__name__}: {exc}"
            if reason is not None:
                participant.quarantine(staged.version, reason)
        if reason is not None:
            logger.error(
                "app %r: version %s is quarantined (%s); it and later versions wait "
                "until it is aborted or re-staged",
                app_id,
                staged.version,
                reason,
            )
            return passing, CommitResult(
                staged.version, "quarantined", rows=staged.rows, message=reason
            )
        passing.append(staged)
    return passing, None
