"""What a Ctrl-C (``KeyboardInterrupt``) or a ``SystemExit`` raised by a signal handler
(SIGTERM) in the middle of a call leaves behind, told on the exception itself: a note
(:meth:`BaseException.add_note`, Python 3.11+) naming the version and app, what the logs
say of it right after the interrupt, and that repeating the call is safe. The exception
is raised again unchanged otherwise: the process still stops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from deltasink.core.committables import LogState

__all__ = ["Interrupted", "noted_interrupt"]


@dataclass
class Interrupted:
    """The call in progress: its name, app and version (set again when a call maps its
    batch to another version)."""

    call: str
    app_id: str
    version: int | None


def _what_is_known(call: Interrupted, read: Callable[[], LogState]) -> str:
    version = call.version
    if version is None:
        return "Re-running it is safe."
    again = (
        f"Re-running {call.call}(batch, {version}) with the same batch is safe: a no-op "
        "if committed, a resume if staged."
        if call.call in ("write", "pre_commit")
        else f"Re-running {call.call}({version}) or recover() is safe."
    )
    try:
        state = read()
    except BaseException:  # a second Ctrl-C, or the storage: say what is certain
        return f"Its state could not be read. {again}"
    if state.is_committed(version):
        found = f"version {version} is committed (the target's txn marker says so)"
    elif state.find(version) is not None:
        found = f"version {version} is staged, not committed yet"
    else:
        found = f"version {version} is neither staged nor committed"
    return (
        f"As read right after the interrupt, {found} (a commit still in flight on the "
        f"engine may land after this). {again}"
    )


@contextmanager
def noted_interrupt(call: Interrupted, read: Callable[[], LogState]) -> Iterator[Interrupted]:
    """Add the note to a ``KeyboardInterrupt`` or ``SystemExit`` raised inside the block
    (``read``: the writer's state, read once then), and raise it again."""
    try:
        yield call
    except (KeyboardInterrupt, SystemExit) as exc:
        note = (
            f"deltasink: interrupted in {call.call}() of app {call.app_id!r}"
            + (f", version {call.version}. " if call.version is not None else ". ")
            + _what_is_known(call, read)
        )
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(note)
        raise
