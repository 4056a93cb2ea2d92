"""Deterministic fault points, for crash tests.

Production code calls :func:`point` between the steps of pre-commit, commit, recovery
and clean-up. Nothing happens unless a test arms the point, either in-process with
:func:`armed` or, for a child process that must die hard, through the environment
variable ``DELTASINK_FAULTS`` (``"stage.after_files=exit,commit.after_publish=raise@2"``;
``@n`` fires on the n-th pass instead of the first).

Actions: ``raise`` raises :class:`FaultInjected`; ``exit`` ends the process at once with
``os._exit(EXIT_CODE)`` (no clean-up, no ``finally`` blocks: a crash); or a callable,
which receives the point's context as keyword arguments if it takes any (e.g.
``versions=[...]`` at the commit points).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["EXIT_CODE", "MAINTENANCE_POINTS", "POINTS", "FaultInjected", "armed", "point"]

#: Every fault point, in the order a write passes them.
POINTS = (
    "stage.before_write",  # batch validated, nothing written yet
    "stage.after_files",  # staging data files written, staging log not committed
    "stage.after_log_commit",  # staging commit done, pre_commit has not returned
    "commit.before_publish",  # state read, target not touched for this version
    "publish.before_target_commit",  # target state read and checked, MERGE not run yet
    "publish.after_target_commit",  # target MERGE + marker committed, not yet reported
    "commit.after_publish",  # version published, staging clean-up not yet done
    "discard.before_log_commit",  # about to remove staged versions from staging
)

#: Fault points off a lone writer's path: maintenance beside the writer, and a group
#: commit of several sinks of one process.
MAINTENANCE_POINTS = (
    "rewrite.before_commit",  # a compaction's new files are in place, not yet committed
    "group.formed",  # a group commit's versions taken from the queue, nothing committed
)

EXIT_CODE = 77

Action = Callable[..., None]

_armed: dict[str, Action] = {}


class FaultInjected(RuntimeError):
    """Raised by an armed fault point with the ``raise`` action."""


def _action(name: str, how: str) -> Action:
    if how == "exit":
        return lambda **_: os._exit(EXIT_CODE)
    if how == "raise":

        def _raise(**_: object) -> None:
            raise FaultInjected(f"fault injected at {name}")

        return _raise
    raise ValueError(f"unknown fault action {how!r}; use 'raise' or 'exit'")


def _check(name: str) -> None:
    if name not in POINTS + MAINTENANCE_POINTS:
        known = ", ".join(POINTS + MAINTENANCE_POINTS)
        raise ValueError(f"unknown fault point {name!r}; known: {known}")


def _on_pass(n: int, action: Action) -> Action:
    """``action`` on the n-th call (1-based) and after; earlier calls pass."""
    seen = [0]
    takes_context = bool(inspect.signature(action).parameters)

    def fire(**context: object) -> None:
        seen[0] += 1
        if seen[0] >= n:
            if takes_context:
                action(**context)
            else:
                action()

    return fire


def _load_env() -> None:
    spec = os.environ.get("DELTASINK_FAULTS", "")
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, how = item.partition("=")
        how, _, nth = how.partition("@")
        _check(name)
        _armed[name] = _on_pass(int(nth or 1), _action(name, how or "raise"))


def point(name: str, **context: object) -> None:
    """Mark a fault point; runs the armed action for ``name``, if any."""
    action = _armed.get(name)
    if action is not None:
        action(**context)


@contextmanager
def armed(name: str, how: str | Action = "raise", *, after: int = 0) -> Iterator[None]:
    """Arm ``name`` for the duration of the ``with`` block.

    Args:
        name: One of :data:`POINTS` or :data:`MAINTENANCE_POINTS`.
        how: ``"raise"``, ``"exit"`` or a callable to run.
        after: Let the point pass this many times before the action fires.
    """
    _check(name)
    action = _action(name, how) if isinstance(how, str) else how
    previous = _armed.get(name)
    _armed[name] = _on_pass(after + 1, action)
    try:
        yield
    finally:
        if previous is None:
            _armed.pop(name, None)
        else:
            _armed[name] = previous


_load_env()
