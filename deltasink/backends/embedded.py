"""The embedded backend: staging and target written with delta-rs.

Used with the embedded engine (Sail) and with any Spark session whose Delta writes
cannot carry ``txn`` markers. Data arrives as Arrow; every Delta commit is made here,
so the staging append and the target MERGE each carry ``txn(app_id, version)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from deltasink import _faults
from deltasink.batch import collect, prepare
from deltasink.errors import ConfigurationError
from deltasink.protocol import CommitResult, DiscardReason, LogState, StagedVersion
from deltasink.spec import MergeSpec
from deltasink.staging import StagingTable
from deltasink.target import TargetTable

__all__ = ["EmbeddedBackend"]


class EmbeddedBackend:
    """:class:`~deltasink.protocol.Participant` over delta-rs.

    Args:
        target: The target table.
        staging: The staging table of ``(target, app_id)``.
        app_id: The writer.
        spec: The MergeSpec for new versions; ``None`` means the one recorded in the
            staging table.
    """

    name = "embedded"

    def __init__(
        self,
        *,
        target: TargetTable,
        staging: StagingTable,
        app_id: str,
        spec: MergeSpec | None,
    ) -> None:
        self.target = target
        self.staging = staging
        self.app_id = app_id
        self._spec = spec
        # The last staged batch, kept so that write() publishes without re-reading it.
        self._last: tuple[int, pa.Table] | None = None

    def spec_for_new_versions(self) -> MergeSpec:
        """The spec new versions are staged with."""
        spec = self._spec or self.staging.recorded_spec()
        if spec is None:
            raise ConfigurationError(
                f"no MergeSpec given for app {self.app_id!r} on {self.target.uri} and none "
                "is recorded in its staging table; pass merge=MergeSpec(...).",
                table=self.target.uri,
                app_id=self.app_id,
            )
        return spec

    def spec_for_staged(self) -> MergeSpec:
        """The spec staged versions are committed with (the one they were staged with)."""
        return self.staging.recorded_spec() or self.spec_for_new_versions()

    def read_state(self) -> LogState:
        return LogState(self.target.committed_version(self.app_id), self.staging.versions())

    def stage(self, batch: object, version: int) -> StagedVersion:
        spec = self.spec_for_new_versions()
        recorded = self.staging.recorded_spec()
        if recorded is not None and recorded != spec:
            pending = self.read_state().pending
            if pending:
                raise ConfigurationError(
                    f"versions {[s.version for s in pending]} of app {self.app_id!r} were "
                    f"staged with {recorded} and are not committed yet; commit or recover "
                    f"them (or abort them) before staging with {spec}.",
                    table=self.target.uri,
                    app_id=self.app_id,
                    version=version,
                )
        data = prepare(collect(batch, spec), spec, self.target.schema(), target=self.target.uri)
        _faults.point("stage.before_write")
        if recorded is not None and recorded != spec:
            self.staging.record_spec(spec)
        staged = self.staging.append(version, data, spec)
        self._last = (version, data)
        return staged

    def publish(self, staged: StagedVersion) -> CommitResult:
        if self._last is not None and self._last[0] == staged.version:
            data = self._last[1]
        else:
            data = self.staging.read(staged.version)
        result = self.target.apply(
            data,
            spec=self.spec_for_staged(),
            app_id=self.app_id,
            version=staged.version,
            metadata={"deltasink.staging": self.staging.uri, "deltasink.rows": staged.rows},
        )
        self._last = None
        return result

    def discard(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        self.staging.drop(versions, reason=reason)
        if self._last is not None and self._last[0] in versions:
            self._last = None
