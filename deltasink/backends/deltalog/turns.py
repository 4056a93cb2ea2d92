"""Taking turns: the writers of one machine commit to a local target one at a time, in
the order they asked, instead of racing.

Delta's optimistic concurrency lets every writer plan its MERGE on the snapshot it read
and throws the work away when another commit landed first; with many writers on one
target most attempts lose, the losers back off and try again, and the wait of an
unlucky writer grows without bound (measured: 8 writer processes on overlapping keys
took 1.5x the wall time of one writer doing all their versions, the slowest writer's
p99 wait 9.5x the mean). Here a writer about to commit queues behind the writers of
this machine that asked before it and commits when they are done: no attempt is
thrown away among them, and the wait is first come, first served.

The queue is a lock queue of files (one per waiting writer) in ``/dev/shm`` (else the
temporary directory), keyed by the target's location: a writer takes an exclusive ``flock`` on
its own file, appends its name to the queue's tail under a short lock, and waits until
it can take a shared lock on the file of the writer before it (released when that
writer is done, or by the kernel when its process dies: a crashed writer never blocks
the queue). Only correctness-free ordering: every commit is still Delta's optimistic
commit with its ``txn`` marker, so writers on other machines, Spark jobs and a writer
whose wait timed out race as before and lose nothing.

Local targets only (an object store's writers share no machine); off with
``DELTASINK_TURNS=off``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from deltasink.locations import is_catalog_name, is_local, location_key

__all__ = ["turn"]

#: How long a writer waits for the writers before it, at most; then it commits anyway
#: (optimistically, as without the queue).
WAIT_LIMIT_S = 120.0

_held = threading.local()  # the targets whose turn this thread holds


def _queue_dir(uri: str) -> Path:
    """Where the target's queue lives: ``/dev/shm`` (memory, shared by the machine's
    processes whatever their ``TMPDIR``, never a job's temporary directory), else the
    temporary directory; ``DELTASINK_TURNS_DIR`` chooses."""
    key = hashlib.sha256(location_key(uri).encode()).hexdigest()[:32]
    base = os.environ.get("DELTASINK_TURNS_DIR")
    if not base:
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir()
    return Path(base) / "deltasink-turns" / key


def _released(path: Path, limit_s: float) -> None:
    """Wait until the writer whose file is ``path`` is done (or gone, or ``limit_s``
    passed): a blocking shared ``flock`` in a thread of its own, so the wait ends the
    moment that writer releases its lock (no polling) and can still be given up."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return  # done already
    done = threading.Event()

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            pass
        finally:
            os.close(fd)
            done.set()

    threading.Thread(target=wait, name="deltasink-turn", daemon=True).start()
    done.wait(limit_s)  # given up after the limit: the thread ends with that writer


@contextlib.contextmanager
def turn(uri: str) -> Iterator[None]:
    """Hold this writer's turn at the local target ``uri`` for the block (nothing for a
    remote target, when off, or when this thread holds it already)."""
    held: set[str] = getattr(_held, "targets", None) or set()
    _held.targets = held
    key = location_key(uri)
    if (
        is_catalog_name(uri)
        or not is_local(uri)
        or os.environ.get("DELTASINK_TURNS", "").lower() == "off"
        or key in held
    ):
        yield
        return
    queue = _queue_dir(uri)
    try:
        queue.mkdir(parents=True, exist_ok=True)
        mine = queue / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.turn"
        fd = os.open(mine, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:  # no usable temporary directory: race, as without the queue
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # taken before anyone can queue behind it
        tail = os.open(queue / "tail", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(tail, fcntl.LOCK_EX)
            before = os.pread(tail, 256, 0).decode(errors="replace").strip()
            os.ftruncate(tail, 0)
            os.pwrite(tail, mine.name.encode(), 0)
        finally:
            os.close(tail)  # closing releases its lock
        if before:
            _released(queue / before, WAIT_LIMIT_S)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        with contextlib.suppress(OSError):
            mine.unlink()
        os.close(fd)  # releases this writer's lock: the next one goes
