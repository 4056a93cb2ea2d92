"""Writer jobs in processes of their own, forked from a server process that imported
deltasink once (``multiprocessing``'s forkserver): a fresh interpreter's start and
imports were most of each crash test's CPU (about 0.8 s of a 1 s job).

A job is still a process of its own: it gets the test process's environment as it is
when the job starts and reads ``DELTASINK_FAULTS`` from it, as a new process does, and
dies as the fault says (``os._exit`` or ``SIGKILL``: no clean-up, no ``finally``). The
jobs live here, in a module the server has imported, so a fork imports nothing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from deltasink import DeltaSink, MergeSpec, _faults

FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["tests.forks"])  # deltasink, pyarrow and the jobs below


def append_job(target: str, path: str, options: dict[str, str] | None = None) -> None:
    """Three versions of an append writer, each staged then committed (or written
    directly with ``write()``); a restart recovers first and replays them (no-ops)."""
    sink = DeltaSink(target, "crashy", MergeSpec(mode="append"), storage_options=options)
    sink.recover()
    for version, ids in enumerate([[1, 2], [3], [4, 5]]):
        if path == "direct":  # write(): published without staging
            sink.write(pa.table({"id": ids}), version)
        else:  # the two phases: staged, then committed and cleaned up
            sink.pre_commit(pa.table({"id": ids}), version)
            sink.commit(version)
    print("done")


def sigkilled_job(target: str, path: str, options: dict[str, str], point: str) -> None:
    """:func:`append_job`, SIGKILLing itself at the second pass of ``point`` (version 1)."""
    kill = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731
    armed = _faults.armed(point, kill, after=1) if point else contextlib.nullcontext()
    with armed:
        append_job(target, path, options)


def signalled_job(target: str, path: str, point: str, signum: int) -> None:
    """:func:`append_job`, sending itself ``signum`` at the second pass of ``point``
    (version 1) with Python's own handlers: SIGINT is Ctrl-C (``KeyboardInterrupt``
    where the interpreter next runs Python code), SIGTERM ends the process at once as
    its default action does (no ``finally``)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal's job
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    send = lambda: os.kill(os.getpid(), signum)  # noqa: E731
    with _faults.armed(point, send, after=1):
        append_job(target, path)


def _forked(job: Callable[..., None], args: tuple[Any, ...], env: dict[str, str], log: str) -> None:
    with open(log, "w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()  # the test process's environment now, as a new process gets it
    os.environ.update(env)
    _faults._armed.clear()
    _faults._load_env()  # what importing deltasink does in a new process
    job(*args)


def run(
    job: Callable[..., None], *args: Any, faults: str = "", timeout: float = 120
) -> tuple[int, str]:
    """Run ``job(*args)`` in a forked process: its exit code (negative: the signal that
    killed it) and its output."""
    with tempfile.NamedTemporaryFile("r", suffix=".log") as log:
        env = {**os.environ, "DELTASINK_FAULTS": faults}
        process = FORKS.Process(target=_forked, args=(job, args, env, log.name))
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise AssertionError(f"the job did not end in {timeout} s: {log.read()[-3000:]}")
        return process.exitcode, log.read()


def group_job(target: str, crash: str = "", gate: bool = True) -> None:
    """Three append writers in threads of one process, writing versions 0 and 1: the
    first commit waits (``gate``) until the other two are queued behind it, so they are
    published in one group commit. ``crash``: ``formed`` (the group taken, nothing
    committed), ``before`` (its commit about to be made) or ``after`` (made, not yet
    reported) ends the process there with ``os._exit``."""
    import threading
    import time

    from deltasink.backends.embedded.grouping import queue_for

    sinks = [DeltaSink(target, f"app-{w}", MergeSpec(mode="append")) for w in range(3)]
    queue = queue_for(target)
    in_group: list[bool] = []

    def before(**_: object) -> None:
        if gate and not in_group and not getattr(before, "passed", False):
            before.passed = True  # type: ignore[attr-defined]
            deadline = time.monotonic() + 60
            while len(queue._waiting) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
        elif in_group and crash == "before":
            os._exit(_faults.EXIT_CODE)

    def formed(**_: object) -> None:
        in_group.append(True)
        if crash == "formed":
            os._exit(_faults.EXIT_CODE)

    def after(**_: object) -> None:
        if in_group and crash == "after":
            os._exit(_faults.EXIT_CODE)

    def run(w: int) -> None:
        for version in range(2):
            ids = [w * 100 + version * 10 + i for i in range(3)]
            sinks[w].write(pa.table({"id": pa.array(ids, pa.int64())}), version)

    with (
        _faults.armed("publish.before_target_commit", before),
        _faults.armed("group.formed", formed),
        _faults.armed("publish.after_target_commit", after),
    ):
        first = threading.Thread(target=run, args=(0,))
        first.start()
        time.sleep(0.05) if gate else None
        rest = [threading.Thread(target=run, args=(w,)) for w in (1, 2)]
        for t in rest:
            t.start()
        for t in [first, *rest]:
            t.join()
    print("grouped" if in_group else "not grouped")
