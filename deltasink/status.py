"""``SinkStatus``: what one writer has staged and committed, as ``status()`` reports
it (and the CLI prints it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from deltasink.committables import StagedVersion
from deltasink.origin import BatchOrigin
from deltasink.spec import MergeSpec

__all__ = ["SinkStatus", "json_spec"]


@dataclass(frozen=True)
class SinkStatus:
    """What one writer has staged and committed, read from the two Delta logs.

    Attributes:
        target: The target table location.
        staging: The staging table location.
        app_id: The writer.
        engine: The backend doing the Delta writes (``embedded`` or ``spark``).
        engine_reason: Why that backend was chosen.
        committed_version: The target's committed ``txn`` version, or ``None``.
        pending_versions: Staged, uncommitted versions, ascending.
        pending: The same, with rows and staging time.
        leftover_versions: Committed versions whose staging data is not yet removed.
        target_exists: Whether the target table exists yet.
        merge: The MergeSpec recorded in the staging table, if any.
        quarantined: Quarantined versions and the failed check, if any.
        origin: The origin recorded by the writer's newest target commit that recorded
            one (streaming query, batch, source positions; or a batch job's position),
            when asked for (``status(with_origin=True)``, the CLI).
    """

    target: str
    staging: str
    app_id: str
    engine: str
    engine_reason: str
    committed_version: int | None
    pending_versions: list[int]
    pending: tuple[StagedVersion, ...] = ()
    leftover_versions: list[int] = field(default_factory=list)
    target_exists: bool = False
    merge: MergeSpec | None = None
    quarantined: dict[int, str] = field(default_factory=dict)
    origin: BatchOrigin | None = None

    def to_dict(self, *, now: datetime | None = None) -> dict[str, Any]:
        """A JSON-ready dict (the CLI's ``--json`` output)."""
        now = now or datetime.now(timezone.utc)
        return {
            "target": self.target,
            "staging": self.staging,
            "app_id": self.app_id,
            "engine": self.engine,
            "engine_reason": self.engine_reason,
            "target_exists": self.target_exists,
            "committed_version": self.committed_version,
            "pending_versions": self.pending_versions,
            "pending": [
                {
                    "version": s.version,
                    "rows": s.rows,
                    "staged_at": s.staged_at.isoformat(),
                    "age_s": round((now - s.staged_at).total_seconds(), 3),
                }
                for s in self.pending
            ],
            "leftover_versions": self.leftover_versions,
            "quarantined": [
                {"version": v, "reason": r} for v, r in sorted(self.quarantined.items())
            ],
            "merge": None if self.merge is None else json_spec(self.merge),
            "origin": None if self.origin is None else self.origin.to_dict(),
        }


def json_spec(spec: MergeSpec) -> dict[str, Any]:
    """A MergeSpec as a plain dict."""
    data: dict[str, Any] = json.loads(spec.to_json())
    return data
