"""The protocol core's port: what a backend must do for the two-phase commit of one
writer (Flink's ``TwoPhaseCommittingSink`` parts), and the optional capabilities the
core uses when a backend has them. Engine-free."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

from deltasink.core.committables import CommitResult, LogState, Prepared, StagedVersion

if TYPE_CHECKING:
    from deltasink.shapes.spec import MergeSpec

__all__ = [
    "DiscardReason",
    "Participant",
    "SupportsCoalescing",
    "SupportsDirectPublish",
    "SupportsFencing",
    "SupportsQuarantine",
    "SupportsSpecs",
]

B = TypeVar("B", contravariant=True)
#: Why staged data is dropped: committed (clean-up), aborted, or abandoned (timed out).
DiscardReason = Literal["committed", "aborted", "abandoned"]


class Participant(Protocol[B]):
    """The backend port: the durable side of the two-phase commit for one writer.

    Implementations hold no state that matters across a crash: everything is read
    back from storage by :meth:`read_state`.
    """

    def read_state(self) -> LogState:
        """Read the committed version and the staged versions from durable storage.

        An engine that keeps a committed mark beside the target's ``txn`` marker hands
        the plain values it read to the core, :meth:`LogState.read
        <deltasink.core.committables.LogState.read>` with
        :class:`~deltasink.core.committables.CommitMarks`: the core decides the
        committed version and, before every publish, whether a lost marker forbids it
        (:func:`deltasink.core.guards.check_publish`); the engine does neither.
        """
        ...

    def stage(self, batch: B, version: int) -> StagedVersion:
        """Validate ``batch`` and durably stage it as ``version``, atomically.

        Called only for a version that is neither staged nor committed. Must raise an
        :class:`~deltasink.errors.InvalidInputError` *before writing anything* when the
        batch is invalid. A failure leaves nothing staged (orphan files may remain for
        retention to clean up).
        """
        ...

    def publish(self, staged: StagedVersion) -> CommitResult:
        """Apply one staged version to the target together with its marker.

        The data change and the ``(app_id, version)`` marker must land in one atomic
        commit. Must be idempotent: when the target's marker already covers the
        version, change nothing and return outcome ``already_committed``. A failure
        leaves the target without any part of the version.
        """
        ...

    def discard(self, versions: Sequence[int], *, reason: DiscardReason) -> None:
        """Remove the staged data of ``versions`` (already absent ones are ignored)."""
        ...


@runtime_checkable
class SupportsFencing(Protocol):
    """Optional capability: claim the writer role for an ``app_id`` (Kafka's
    ``initTransactions``): afterwards, older holders fail their next write with
    :class:`~deltasink.errors.FencedError`. Called by ``recover()`` before anything
    else, and by the participant itself on its first write."""

    def claim(self) -> None:
        """Take over the writer role; idempotent for the same participant object."""
        ...


@runtime_checkable
class SupportsSpecs(Protocol):
    """Optional capability: the :class:`~deltasink.shapes.spec.MergeSpec` of a writer's
    versions. The core refuses to stage a version with another spec than the pending
    versions were staged with (:func:`~deltasink.core.guards.refuse_spec_change`),
    before the participant validates or writes anything."""

    def recorded_spec(self) -> MergeSpec | None:
        """The spec recorded in the staging table (the pending versions'), if any."""
        ...

    def spec_for_new_versions(self) -> MergeSpec:
        """The spec a version staged now is staged with."""
        ...


@runtime_checkable
class SupportsQuarantine(Protocol):
    """Optional capability: write-audit-publish (Flink's ``SupportsPreCommitTopology``).

    Before a staged version is published, ``audit`` runs the pre-commit checks on it.
    A failing version is quarantined: recorded durably with the reason, kept staged,
    never published; later versions wait behind it. ``abort`` (``discard`` with
    reason ``"aborted"``) or ``restage`` lifts the quarantine.
    """

    def audit(self, staged: StagedVersion) -> str | None:
        """Run the checks on ``staged``: ``None`` if it may be published, else why not."""
        ...

    def quarantine(self, version: int, reason: str) -> None:
        """Record durably that ``version`` failed a check (idempotent)."""
        ...

    def restage(self, batch: Any, version: int) -> StagedVersion:
        """Replace the staged data of quarantined ``version`` atomically and lift the
        quarantine; validation as in ``stage``."""
        ...


@runtime_checkable
class SupportsCoalescing(Protocol):
    """Optional capability: publish several pending versions in ONE target commit.

    The result must equal publishing them one by one, in order (the latest version
    wins per key, deletes and inserts in version order), and the commit carries the
    marker of the highest version. All or nothing: a failure leaves the target
    without any part of any of them.
    """

    def can_coalesce(self) -> bool:
        """Whether the staged versions' :class:`~deltasink.shapes.spec.MergeSpec` allows one
        commit for several of them (:attr:`~deltasink.shapes.spec.MergeSpec.coalescable`);
        when not, the core publishes them one by one."""
        ...

    def publish_many(self, staged: Sequence[StagedVersion]) -> CommitResult:
        """Apply ``staged`` (ascending, ≥ 2 versions) in one commit; idempotent."""
        ...


@runtime_checkable
class SupportsDirectPublish(Protocol):
    """Optional capability: publish a batch straight into the target, unstaged.

    Used only by ``write()`` (both phases in one call, before its caller is
    acknowledged) when nothing is staged: the ``txn(app_id, version)`` marker in the
    target commit alone makes a retry of the version a no-op. The core stages the
    prepared batch instead when a check fails (quarantine) or the publish fails (so
    ``recover()`` finishes it). Fencing holds: a publish by a fenced writer raises
    :class:`~deltasink.errors.FencedError`.
    """

    def read_state(self) -> LogState:
        """As :meth:`Participant.read_state`."""
        ...

    def prepare(self, batch: Any, version: int) -> Prepared:
        """Validate ``batch`` for ``version`` without writing anything; the same
        named errors as ``stage``."""
        ...

    def audit_prepared(self, prepared: Prepared) -> str | None:
        """Run the pre-commit checks on the prepared batch: ``None`` or why not."""
        ...

    def publish_prepared(self, prepared: Prepared) -> CommitResult:
        """Apply the prepared batch to the target with its marker in one commit;
        idempotent, all or nothing, as ``publish``."""
        ...

    def stage_prepared(self, prepared: Prepared) -> StagedVersion:
        """Stage the prepared batch, as ``stage`` would have."""
        ...
