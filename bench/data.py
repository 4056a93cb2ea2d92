"""Deterministic test data: the orders schema, target tables and batches.

Key layout (the same for every benchmark, see bench/README.md):

* The **target** holds keys ``0 .. N-1``, written sorted by key as ``N / file_rows``
  append commits of ``file_rows`` rows each (one Parquet file per commit, so every file
  covers one contiguous key range), then checkpointed. That is the shape of a table
  ingested in key order: ids that grow with time, like order numbers.
* A **batch** of ``B`` rows is half updates, half inserts, shuffled. The inserts are the
  new keys ``N .. N + B/2 - 1``. The updates are ``B/2`` distinct existing keys drawn
  either from the most recent ``max(file_rows, B)`` keys (layout ``recent``: late
  updates to recent orders, so a MERGE rewrites few files) or uniformly from all
  ``N`` keys (layout ``uniform``: the worst case, every file is rewritten).
* Every non-key value is random from a seeded generator, so updated rows differ from
  the target's rows.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.common import Config, Trial, clone, log, remove, stopwatch

__all__ = [
    "APP_ID",
    "KEY",
    "SCHEMA",
    "Layout",
    "batch_ids",
    "fresh_target",
    "make_batch",
    "make_rows",
    "p2_batches",
    "parquet_batch",
    "steady_sink",
    "steady_write",
    "target_template",
]

Layout = Literal["recent", "uniform"]

KEY = "id"
APP_ID = "bench"
#: Bumped whenever the generated data change; part of every cache key.
DATA_FORMAT = "1"
_STATUS = pa.array(["new", "paid", "shipped", "delivered", "returned"])
_EPOCH_US = 1_700_000_000_000_000

_FIELDS: list[pa.Field[Any]] = [
    pa.field(KEY, pa.int64()),
    pa.field("customer_id", pa.int64()),
    pa.field("status", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("quantity", pa.int32()),
    pa.field("updated_at", pa.timestamp("us", tz="UTC")),
    pa.field("note", pa.string()),
]
SCHEMA = pa.schema(_FIELDS)


def make_rows(ids: np.ndarray[Any, np.dtype[np.int64]], rng: np.random.Generator) -> pa.Table:
    """Rows of the orders schema for ``ids`` (in that order), values from ``rng``."""
    n = len(ids)
    status = _STATUS.take(pa.array(rng.integers(0, len(_STATUS), n), pa.int32()))
    join: Any = pc.binary_join_element_wise  # pyarrow-stubs lack the scalar overload
    stamps = _EPOCH_US + ids * 1_000 + rng.integers(0, 1_000_000, n)
    note = join("order-", pc.cast(pa.array(rng.integers(0, 1 << 40, n)), pa.string()), "")
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.int64()),
            pa.array(rng.integers(0, 100_000, n), pa.int64()),
            status,
            pa.array(np.round(rng.random(n) * 1000, 2), pa.float64()),
            pa.array(rng.integers(1, 10, n, dtype=np.int32), pa.int32()),
            pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            note,
        ],
        schema=SCHEMA,
    )


def batch_ids(
    target_rows: int, batch_rows: int, layout: Layout, *, window: int, seed: int
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Keys of a batch: ``batch_rows // 2`` updates (by ``layout``), the rest inserts."""
    rng = np.random.default_rng([seed, target_rows, batch_rows, 1])
    updates = batch_rows // 2
    if layout == "recent":
        span = min(target_rows, max(window, batch_rows))
        picked = target_rows - span + rng.choice(span, updates, replace=False)
    else:
        picked = rng.choice(target_rows, updates, replace=False)
    inserts = np.arange(target_rows, target_rows + batch_rows - updates, dtype=np.int64)
    ids = np.concatenate([picked.astype(np.int64), inserts])
    rng.shuffle(ids)
    return ids


def make_batch(config: Config, target_rows: int, batch_rows: int, layout: Layout) -> pa.Table:
    """The batch for a MERGE benchmark (see the module docstring)."""
    ids = batch_ids(
        target_rows, batch_rows, layout, window=config.sizes.file_rows, seed=config.seed
    )
    return make_rows(ids, np.random.default_rng([config.seed, target_rows, batch_rows, 2]))


def p2_batches(config: Config, target_rows: int) -> list[pa.Table]:
    """P2's small batches. Batch ``i`` inserts the next ``rows/2`` new keys and updates
    ``rows/2`` keys drawn from the most recent ``file_rows`` keys *including the keys
    inserted by earlier batches*, so later batches overwrite rows of earlier ones and
    coalescing has to keep the latest version of each key."""
    sizes = config.sizes
    half = sizes.p2_batch_rows // 2
    out = []
    for i in range(sizes.p2_batches):
        rng = np.random.default_rng([config.seed, 2, i])
        top = target_rows + half * i
        window = np.arange(top - sizes.file_rows, top, dtype=np.int64)
        ids = np.concatenate(
            [rng.choice(window, half, replace=False), np.arange(top, top + half, dtype=np.int64)]
        )
        rng.shuffle(ids)
        out.append(make_rows(ids, rng))
    return out


def _stamp(**parts: object) -> str:
    import deltalake

    text = json.dumps({"format": DATA_FORMAT, "deltalake": deltalake.__version__, **parts})
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def target_template(config: Config, rows: int) -> Path:
    """A prepared target table of ``rows`` rows (cached under ``bench/out/cache``).

    Written by delta-rs alone, so the cache never holds anything deltasink wrote.
    """
    from deltalake import DeltaTable, write_deltalake

    file_rows = min(config.sizes.file_rows, rows)
    path = (
        config.cache / f"target-{rows}-{_stamp(rows=rows, file_rows=file_rows, seed=config.seed)}"
    )
    table, done = path / "target", path / "DONE"
    if done.exists():
        return table
    remove(path)
    log(f"building a {rows:,}-row target template in {file_rows:,}-row files (cached)")
    for start in range(0, rows, file_rows):
        ids = np.arange(start, min(rows, start + file_rows), dtype=np.int64)
        chunk = make_rows(ids, np.random.default_rng([config.seed, 0, start]))
        write_deltalake(table, chunk, mode="append")
    DeltaTable(table).create_checkpoint()
    done.write_text("ok\n")
    return table


def fresh_target(template: Path, work: Path) -> Path:
    """Empty ``work``, copy the template table to ``work/target`` and return that.

    The sink's staging table then goes next to it (``work/target_deltasink_staging``),
    so each trial starts from nothing but the byte-identical template.
    """
    remove(work)
    return clone(template, work / "target")


def steady_sink(target: Path, *, coalesce: bool = True) -> Any:
    """A sink on ``target`` in its steady state, without touching the target's data.

    A job's sink has a staging table and holds the writer epoch before it writes a
    batch; a first ``pre_commit`` creates the one and claims the other. Here an empty
    version 0 is staged and aborted (untimed), so the table stays byte-identical to
    the template and the measured ``write`` is a steady-state one.
    """
    from deltasink import DeltaSink, MergeSpec

    sink = DeltaSink(target, APP_ID, MergeSpec(keys=[KEY]), coalesce=coalesce)
    sink.pre_commit(SCHEMA.empty_table(), 0)
    sink.abort(0)
    return sink


def steady_write(template: Path, work: Path, batch: pa.Table) -> Trial:
    """The ``sink`` side of P1 and P7: ``write(batch, 1)`` of a steady-state sink on a
    fresh copy of ``template`` in ``work`` (only the write is timed)."""

    def trial(rep: int) -> float:
        sink = steady_sink(fresh_target(template, work))
        with stopwatch() as t:
            sink.write(batch, 1)
        return t[0]

    return trial


def parquet_batch(config: Config, target_rows: int, batch_rows: int, layout: Layout) -> Path:
    """The batch of :func:`make_batch` as one Parquet file (cached), for Spark to read."""
    stamp = _stamp(target=target_rows, batch=batch_rows, layout=layout, seed=config.seed)
    path = config.cache / f"batch-{target_rows}-{batch_rows}-{layout}-{stamp}.parquet"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        pq.write_table(make_batch(config, target_rows, batch_rows, layout), tmp)
        tmp.rename(path)
    return path
