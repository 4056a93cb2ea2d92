"""What a :class:`~deltasink.DeltaSink` does with the report of each call that may
commit (``write``, ``foreach_batch``, ``commit``, ``recover``): its post-commit hooks
run, then its ``on_quarantine`` policy decides whether a quarantined version stops the
caller."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from deltasink.core.committables import CommitReport
from deltasink.errors import QuarantinedError
from deltasink.hooks import OperatedSink, PostCommit, PostCommitHook, run_hooks

__all__ = ["AfterCall"]


class AfterCall:
    """A sink's handling of a call's report.

    Args:
        hooks: Run after each call that committed something (:mod:`deltasink.hooks`).
        on_quarantine: ``"raise"``: a report with a quarantined version raises
            :class:`~deltasink.errors.QuarantinedError`; ``"continue"``: it is returned.
        sink: What the hooks receive as :attr:`PostCommit.sink` (the sink itself).
        target: The target (for messages).
        app_id: The writer (for messages).
    """

    def __init__(
        self,
        *,
        hooks: Sequence[PostCommitHook],
        on_quarantine: Literal["continue", "raise"],
        sink: OperatedSink,
        target: str,
        app_id: str,
    ) -> None:
        self._hooks = tuple(hooks)
        self._on_quarantine = on_quarantine
        self._sink = sink
        self.target = target
        self.app_id = app_id

    def __call__(self, report: CommitReport) -> CommitReport:
        """``report``, after the hooks ran on it.

        Raises:
            QuarantinedError: With ``on_quarantine="raise"``, the call quarantined a
                version or stopped at one.
        """
        if self._hooks:
            run_hooks(self._hooks, PostCommit(report=report, sink=self._sink))
        if self._on_quarantine == "raise":
            stopped = [r for r in report.results if r.outcome == "quarantined"]
            if stopped:
                version, reason = stopped[0].version, stopped[0].message or "a check failed"
                raise QuarantinedError(
                    f"version {version} of app {self.app_id!r} is quarantined ({reason}); "
                    f"it and later versions wait. Abort it (sink.abort({version}) or "
                    f"`deltasink abort {self.target} --app {self.app_id} {version}`) or "
                    "re-stage it with fixed data, then restart.",
                    reason=reason,
                    report=report,
                    table=self.target,
                    app_id=self.app_id,
                    version=version,
                )
        return report
