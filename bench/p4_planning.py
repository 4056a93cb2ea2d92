"""P4: planning cost after many committed batches, and commit cost against history.

A *history* is a target plus its staging table after ``n`` tiny batches written one by
one with ``sink.write``, exactly as a streaming job leaves them (no ``gc()``): batch 0
inserts 1,000 keys and every later batch updates 10 of them, so the target's data stay
the same size and only the two Delta logs grow with ``n``. Building 10,000 takes minutes, so histories
are cached under ``bench/out/cache/history-<stamp>`` where the stamp covers the data
format, the batch size, deltasink's version and staging format, and deltalake's
version; snapshots of the same build are taken at every requested size.

Measured per history size, on a copy of the snapshot (at the path it was built at: a staging table records
its target's absolute path):

* ``status``: ``DeltaSink(...).status()`` on a new sink (what ``deltasink status``
  does: both Delta logs read from storage), and again on the same sink (``warm``).
* ``recover``: ``DeltaSink(...).recover()`` with nothing pending: the planning part
  of recovery (it also claims the writer epoch, one small Delta commit).
* ``status_after_gc``: ``status`` again after ``sink.gc(0)`` (staging files expired,
  staging log checkpointed and compacted): what periodic ``gc()`` buys.
* ``write``: ``sink.write`` of one more tiny batch against a bare delta-rs MERGE of
  the same batch on an identical copy (its ``DeltaTable`` opened before timing): how
  commit cost grows with history. ``sink_warm`` (the goal's side) is a sink that
  wrote before, as in a running stream, so it holds both tables open as the bare side
  does; ``sink`` is a new sink after ``recover()`` (it opens the target inside the
  write: what the first batch after a restart pays).
* ``write_maintained``: the same three sides on copies whose target log was trimmed as
  its own ``delta.logRetentionDuration`` trims a long-running job's
  (:func:`maintain_target`). delta-rs lists the whole ``_delta_log`` of a local table
  when it brings a snapshot up to date, also inside its own commits (measured at 10,000
  commits: 12 ms for an update that finds nothing new, a MERGE without post-commit
  hooks 35 ms against 14 ms at 100), so on local disk every writer's commit grows with
  the target's log; this side shows what deltasink's own parts add once it is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench.baselines import bare_merge, open_table
from bench.common import Config, Stats, clone, compare, log, ratio, remove, stats_dict, stopwatch
from bench.data import APP_ID, DATA_FORMAT, KEY, make_rows

__all__ = ["ensure_histories", "history_batch", "run"]

HISTORY_FORMAT = "2"
HISTORY_KEYS = 1_000


def history_batch(version: int, rows: int, seed: int) -> pa.Table:
    """Batch ``version`` of a history: version 0 inserts the ``HISTORY_KEYS`` keys,
    every later one updates ``rows`` distinct keys among them (uniformly drawn).

    The target therefore stays at ``HISTORY_KEYS`` rows in one small file, and each
    MERGE costs the same whatever the history: only the Delta logs grow, which is
    what P4 is about.
    """
    rng = np.random.default_rng([seed, 4, version])
    if version == 0:
        ids = np.arange(HISTORY_KEYS, dtype=np.int64)
    else:
        ids = rng.choice(HISTORY_KEYS, rows, replace=False).astype(np.int64)
    return make_rows(ids, rng)


def _stamp(config: Config, sizes: tuple[int, ...]) -> str:
    import hashlib

    import deltalake

    import deltasink
    from deltasink.ops.layout import FORMAT

    text = json.dumps(
        {
            "history": HISTORY_FORMAT,
            "data": DATA_FORMAT,
            "rows": config.sizes.p4_batch_rows,
            "sizes": list(sizes),
            "seed": config.seed,
            "deltasink": deltasink.__version__,
            "staging_format": FORMAT,
            "deltalake": deltalake.__version__,
        }
    )
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _base(config: Config) -> Path:
    sizes = tuple(sorted(config.sizes.p4_histories))
    return config.cache / f"history-{_stamp(config, sizes)}"


def work_dir(config: Config) -> Path:
    """Where histories are built, and where a snapshot must be copied to be used by a
    sink: the staging table records its target's absolute path (ownership check)."""
    return _base(config) / "work"


def ensure_histories(config: Config, *, rebuild: bool = False) -> dict[int, Path]:
    """The cached history snapshots ``{n: root}`` (``root/target`` and its staging),
    building them (one build, snapshots on the way) if missing."""
    from deltasink import DeltaSink, MergeSpec

    sizes = tuple(sorted(config.sizes.p4_histories))
    base = _base(config)
    snapshots = {n: base / f"n{n}" for n in sizes}
    _wait_for_other_build(base)
    if not rebuild and all((p / "DONE").exists() for p in snapshots.values()):
        return snapshots
    if base.exists():
        shutil.rmtree(base)
    work = work_dir(config)
    base.mkdir(parents=True)
    (base / "BUILDING").write_text(f"{os.getpid()}\n")
    sink = DeltaSink(work / "target", APP_ID, MergeSpec(keys=[KEY]))
    log(f"building a history of {sizes[-1]:,} batches with sink.write (cached in {base.name})")
    seconds: list[float] = []
    start = time.perf_counter()
    for version in range(sizes[-1]):
        batch = history_batch(version, config.sizes.p4_batch_rows, config.seed)
        t0 = time.perf_counter()
        sink.write(batch, version)
        seconds.append(time.perf_counter() - t0)
        done = version + 1
        if done in snapshots:
            clone(work, snapshots[done])
            (snapshots[done] / "DONE").write_text("ok\n")
        if done % 500 == 0:
            log(f"history: {done:,}/{sizes[-1]:,} batches ({time.perf_counter() - start:.0f} s)")
    windows = {
        str(end): float(np.median(seconds[max(0, end - 100) : end]))
        for end in sorted({*sizes, *range(1000, sizes[-1] + 1, 1000)})
        if end <= len(seconds)
    }
    meta = {"build_s": time.perf_counter() - start, "write_median_s_last_100": windows}
    (base / "build.json").write_text(json.dumps(meta, indent=1))
    shutil.rmtree(work)
    (base / "BUILDING").unlink()
    return snapshots


def _wait_for_other_build(base: Path) -> None:
    """Wait while another live process builds the same history (``BUILDING`` holds
    its pid), instead of deleting its work."""
    lock = base / "BUILDING"
    while lock.exists():
        try:
            pid = int(lock.read_text().strip())
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError, FileNotFoundError):
            return  # stale lock: its builder is gone
        log(f"waiting for process {pid} to finish building {base.name}")
        time.sleep(30)


def build_info(config: Config) -> dict[str, Any]:
    """The build's timings (sink.write median over the 100 batches before each size)."""
    path = _base(config) / "build.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    return data


def _planning(config: Config, root: Path, n: int) -> dict[str, Stats]:
    from deltasink import DeltaSink

    work = clone(root, work_dir(config))
    target = work / "target"
    warm = DeltaSink(target, APP_ID)
    warm.status()

    def status_cold(rep: int) -> float:
        with stopwatch() as t:
            status = DeltaSink(target, APP_ID).status()
        assert status.committed_version == n - 1
        assert not status.pending_versions
        return t[0]

    def status_warm(rep: int) -> float:
        with stopwatch() as t:
            warm.status()
        return t[0]

    def recover(rep: int) -> float:
        with stopwatch() as t:
            report = DeltaSink(target, APP_ID).recover()
        assert not report.results
        return t[0]

    sides = {"status": status_cold, "status_warm": status_warm, "recover": recover}
    stats = compare(sides, config.runs, label=f"P4 planning n={n}")
    # The mitigation a job can apply: gc() expires staging files and compacts its log.
    DeltaSink(target, APP_ID).gc(0)
    stats |= compare({"status_after_gc": status_cold}, config.runs, label=f"P4 gc n={n}")
    remove(work)
    return stats


def maintain_target(target: Path) -> None:
    """Leave ``target``'s log as its own log retention leaves a long-running job's: the
    commits before its latest checkpoint expired and removed (what delta-rs and Delta do
    at a checkpoint once ``delta.logRetentionDuration`` has passed; here the duration is
    set to 0 for that one clean-up and put back). Rows, markers and the latest commits
    stay; only the old commit files go."""
    from deltalake import DeltaTable

    table = DeltaTable(str(target))
    before = table.metadata().configuration.get("delta.logRetentionDuration", "interval 30 days")
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table.create_checkpoint()
    table.cleanup_metadata()
    table.alter.set_table_properties({"delta.logRetentionDuration": before})


def _write_growth(
    config: Config, root: Path, n: int, *, maintained: bool = False
) -> dict[str, Stats]:
    from deltasink import DeltaSink

    rows = config.sizes.p4_batch_rows
    batches = [history_batch(n + rep, rows, config.seed) for rep in range(config.runs)]
    # Sinks only work at the path the history was built at (the staging table records
    # its target's): the new sinks and the running one take turns there.
    bare_copy = clone(root, config.scratch / "p4w")
    if maintained:
        maintain_target(bare_copy / "target")

    def at_work() -> Path:
        copy = clone(root, work_dir(config))
        if maintained:
            maintain_target(copy / "target")
        return copy / "target"

    def bare(rep: int) -> float:
        table = open_table(bare_copy / "target")
        with stopwatch() as t:
            bare_merge(table, batches[rep])
        return t[0]

    target = at_work()

    def sink(rep: int) -> float:
        s = DeltaSink(target, APP_ID)
        s.recover()
        with stopwatch() as t:
            s.write(batches[rep], n + rep)
        return t[0]

    label = f"P4 write n={n}" + (" (target log maintained)" if maintained else "")
    stats = compare({"sink": sink, "bare": bare}, config.runs, label=label)
    remove(target.parent)
    # A running stream's sink: it wrote before (untimed), so it holds both tables open
    # as the bare side holds its DeltaTable.
    target = at_work()
    warm = DeltaSink(target, APP_ID)
    warm.write(history_batch(n + config.runs, rows, config.seed), n)

    def sink_warm(rep: int) -> float:
        with stopwatch() as t:
            warm.write(batches[rep], n + 1 + rep)
        return t[0]

    stats |= compare({"sink_warm": sink_warm}, config.runs, label=label + " running")
    remove(target.parent)
    remove(bare_copy)
    return stats


def run(config: Config, *, rebuild: bool = False) -> dict[str, Any]:
    """Measure P4 at every history size (``rebuild``: rebuild the cached histories)."""
    start = time.perf_counter()
    histories = ensure_histories(config, rebuild=rebuild)
    out: dict[str, Any] = {
        "sizes": {},
        "build": build_info(config),
        "prepare_s": time.perf_counter() - start,  # building or waiting for the cache
    }
    for n, root in sorted(histories.items()):
        planning = _planning(config, root, n)
        writes = _write_growth(config, root, n)
        maintained = _write_growth(config, root, n, maintained=True)
        out["sizes"][str(n)] = {
            "planning": stats_dict(planning),
            "write": stats_dict(writes),
            "write_ratio": ratio(writes, "sink", "bare"),
            "write_maintained": stats_dict(maintained),
        }
    return out
