"""The writer role on the embedded engine: the epoch claimed in the staging table on first
use and verified before every write (a staging table deleted under a running sink is
started over), and the publish intent recorded before a target commit."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from deltasink.backends.deltalog.staging import StagingLog
from deltasink.core.protocol import Prepared
from deltasink.locations import is_local
from deltasink.shapes.spec import MergeSpec

from .attempt import Gate, GateError
from .audit import Auditor
from .fencing import Fence
from .stage import StagingWriter

__all__ = ["Claims", "foreign_intent"]

logger = logging.getLogger("deltasink")
_T = TypeVar("_T")


def foreign_intent(
    read: int | None, own: int | None, last_foreign: int | None
) -> tuple[int | None, int | None]:
    """The publish intent that can make staged versions ambiguous (the ``intent`` of
    :class:`~deltasink.core.committables.CommitMarks`), and the foreign intent to
    remember: the one ``read`` from the staging log, unless it is this writer's ``own``
    announcement, which makes nothing ambiguous; then the last intent read that was not
    its own (``last_foreign``) stands."""
    if read is not None and read == own:
        return last_foreign, last_foreign
    return read, read


class Claims:
    """The writer role of one embedded backend: a part of :class:`EmbeddedBackend` that
    owns the epoch it claimed, the publish intent it recorded, and whether the staging
    state held is the one its last claim committed.

    Args:
        app_id: The writer (for messages).
        log: The staging log.
        writer: The staging table's writer (spec, checks and intents recorded).
        epochs: The epoch claims and checks on the staging table.
        auditor: The writer's checks (recorded with new versions).
        spec: The spec the sink was given (``None``: the recorded one).
        spec_for_new_versions: The spec new versions are staged with.
        started_over: Called when the staging table was deleted under the sink (what
            the backend kept of staged versions is gone with it).
    """

    def __init__(
        self,
        *,
        app_id: str,
        log: StagingLog,
        writer: StagingWriter,
        epochs: Fence,
        auditor: Auditor,
        spec: MergeSpec | None,
        spec_for_new_versions: Callable[[], MergeSpec],
        started_over: Callable[[], None],
    ) -> None:
        self.app_id = app_id
        self.log = log
        self.writer = writer
        self.epochs = epochs
        self._auditor = auditor
        self._spec = spec
        self._spec_for_new_versions = spec_for_new_versions
        self._started_over = started_over
        self._epoch: int | None = None
        #: The highest publish intent this writer recorded.
        self.intent: int | None = None
        #: The staging state held is the one a claim just committed (see :meth:`claim`).
        self._claimed_state = False
        self._foreign: int | None = None  # the last intent read that was not ours

    def foreign(self, read: int | None) -> int | None:
        """The publish intent ``read`` from the staging log that can make staged
        versions ambiguous (:func:`foreign_intent`: not this writer's own)."""
        intent, self._foreign = foreign_intent(read, self.intent, self._foreign)
        return intent

    def take_claimed_state(self) -> bool:
        """Whether the staging state held is the one the last claim committed (so the
        next read may use it without reading the log); forgotten once asked."""
        claimed, self._claimed_state = self._claimed_state, False
        return claimed

    @property
    def epoch(self) -> int | None:
        """This writer's epoch, once claimed."""
        return self._epoch

    def claim(self) -> None:
        """Take over the writer role now (``recover()`` calls this first); a no-op if
        this backend already holds the current epoch, or if nothing is staged yet.

        A claim leaves the staging table object at the claim's own commit, which was
        the latest version when it succeeded, so the state read that follows
        (``recover()``'s) is taken from it without reading the log again (on an object
        store, a listing and ``_last_checkpoint``). Safe: a later claim fences this
        writer at its next staging commit or fencing check (every target commit is
        preceded by one), and no other writer's commit after it can stage or publish
        a version of this app."""
        held = self._epoch
        self.fence()
        self._claimed_state = held is None and self._epoch is not None

    def fence(self, schema: pa.Schema | None = None, *, fresh: bool = True) -> int | None:
        """Claim an epoch on first use, verify it afterwards: one read of the staging
        log (none with ``fresh=False``: verified on the state read last, for a caller
        whose next step is a staging commit, see :meth:`Fence.check`). ``None``: no
        staging table exists and none is being created (``schema`` is ``None``), so
        there is nothing to fence.

        A staging table deleted under a running sink is started over (what was staged
        there and not committed is gone with it)."""
        if self._epoch is not None:
            if self.epochs.check(self._epoch, fresh=fresh) is not None:
                return self._epoch
            logger.warning(
                "app %r: the staging table %s was deleted while this sink ran; versions "
                "staged there and not committed are lost (the source must send them "
                "again). A new staging table is created.",
                self.app_id,
                self.log.uri,
            )
            self._epoch = None
            self._started_over()
        spec = self._spec or self.log.recorded_spec()
        self._epoch = self.epochs.claim(schema, spec) if spec is not None else None
        return self._epoch

    def claim_for(self, prepared: Prepared, *, fresh: bool = True) -> int:
        """Claim (or verify, on the state read last unless ``fresh``) the epoch and
        record the spec and checks new versions carry; creates the staging table on
        first use."""
        data: pa.Table = prepared.payload
        epoch = self.fence(data.schema, fresh=fresh)
        assert epoch is not None
        spec = self._spec_for_new_versions()
        recorded = self.log.recorded_spec(fresh=False)
        if recorded is not None and recorded != spec:
            self.writer.record_spec(spec)
            self.epochs.check(epoch)
        if self._auditor.own_checks:
            self.writer.record_checks(self._auditor.encoded())
        return epoch

    def announce(self, version: int, *, epoch: int | None = None, mark: int | None = None) -> None:
        """Record the publish intent for ``version`` unless already recorded (the stage
        commit of ``write()`` carries it; other paths pay one staging commit).

        ``epoch``: already verified in this call (else checked here, on the state read
        last in this call: every caller read the state first). The commit is made on
        that state; a claim since then fails it, and the epoch is then checked freshly
        (:meth:`~.stage.StagingWriter.record_intent`). ``mark``: the committed version
        to record in the same commit (a direct publish's)."""
        if self.intent is not None and self.intent >= version:
            return
        if epoch is None:
            epoch = self.fence(fresh=False)
        if epoch is not None:
            self.writer.record_intent(version, epoch=epoch, verified=True, mark=mark)
            self.intent = version

    def publishing(
        self,
        version: int,
        *,
        epoch: int,
        mark: int | None,
        apply: Callable[[Callable[[], object]], _T],
    ) -> _T:
        """Record the publish intent for ``version`` (:meth:`announce`), then run
        ``apply`` (the target commit) with the fencing check to make before each of its
        attempts; returns what ``apply`` returns.

        On an object store the intent and the check right after it are round trips of
        their own, which the target commit's first attempt does not wait for: they go
        out on a pool thread while the attempt reads the target (and a MERGE the
        target's files), and the attempt waits for them right before it commits
        (:class:`~.attempt.Gate`). The order that matters is kept: the intent is
        durable and the check passed before the target commit, and a failure of
        either stops the attempt before it (raised as the intent's or the check's own
        error, e.g. :class:`~deltasink.errors.FencedError`)."""
        if is_local(self.log.target):
            self.announce(version, epoch=epoch, mark=mark)
            return apply(self.fence)

        def checks() -> None:
            self.announce(version, epoch=epoch, mark=mark)
            self.fence()

        gate = Gate(checks, self.fence)
        try:
            result = apply(gate)
            gate.wait()
            return result
        except GateError as failed:
            raise failed.error  # noqa: B904 - the checks' own error, as announce raised it
        finally:
            gate.settle()  # never leave the checks running behind the caller
