"""The three paths of issue 37 that dropped a micro-batch's rows with no error, each now
ending with every input row in the target exactly once, or a named refusal with
nothing written; and resuming in one step (rows of files the target holds left out).

Checkpoints in Spark's own layout and order (``tests/streams.py``), micro-batches as
Arrow tables with Spark's ``_metadata`` column, the embedded engine. The model over
every interleaving is ``tests/test_stream_lifecycle.py``; real streams are
``tests/test_stream_reset_jvm.py``.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from deltasink import (
    CheckpointResetError,
    CommitError,
    DeltaSink,
    MergeSpec,
    ReplayMismatchError,
    _faults,
)
from deltasink.cli import app
from deltasink.ops.origin import normal_path, origin_for
from tests import support
from tests.streams import FileStream, Landing, micro_batch

APPEND = MergeSpec(mode="append")
APP = "paths"


def run(
    sink: DeltaSink, stream: FileStream, *, resume: bool = False
) -> list[tuple[int, int | None]]:
    """Spark running the query until nothing is new: (batch id, committed version)."""
    done = []
    while (planned := stream.next_batch()) is not None:
        batch, files = planned
        report = sink.foreach_batch(
            micro_batch(stream.landing, files), batch, resume=resume, checkpoint=stream.root
        )
        stream.commit(batch)
        done.append((batch, report.committed_version))
    return done


def job_rows(ids: list[int]) -> pa.Table:
    """A batch job's rows, in the stream's columns (its own ids)."""
    paths = pa.array(["job:2026-11-26"] * len(ids), pa.string())
    metadata = pa.StructArray.from_arrays([paths], names=["file_path"])
    return pa.table(
        {"id": pa.array(ids, pa.int64()), "value": ["job"] * len(ids), "_metadata": metadata}
    )


def unchanged(target: str, sink: DeltaSink) -> tuple[int, list[int]]:
    """What must not move when a batch is refused: the target's Delta version and the
    staged versions."""
    return support.table_version(target), support.staged_versions(sink.staging)


def test_resume_while_a_version_is_pending(tmp_path: Path, target: str) -> None:
    """Path 1: query A's batch 2 is staged (its target commit failed), its checkpoint is
    lost, a file lands. A new query is refused, naming the pending version; resumed, it
    publishes A's version 2 first and goes after it, leaving out A's files."""
    landing = Landing(tmp_path / "in")
    a = FileStream(tmp_path / "ck", landing, max_files=1)
    for _ in range(3):
        landing.add(2)
    sink = DeltaSink(target, APP, APPEND)
    for version in (0, 1):
        batch, files = a.next_batch() or (-1, [])
        report = sink.foreach_batch(micro_batch(landing, files), batch, checkpoint=a.root)
        assert report.committed_version == version
        a.commit(batch)
    batch, files = a.next_batch() or (-1, [])
    with _faults.armed("publish.before_target_commit"), pytest.raises(CommitError):
        sink.foreach_batch(micro_batch(landing, files), batch, checkpoint=a.root)
    assert DeltaSink(target, APP).status().pending_versions == [2]

    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.pending, point.through, point.exact) == (1, (2,), 2, True)
    assert point.origin is not None
    assert point.origin.batch_id == 2
    text = CliRunner().invoke(app, ["offsets", target, "--app", APP])
    assert "pending versions [2]" in text.output, text.output
    shown = json.loads(CliRunner().invoke(app, ["offsets", target, "--app", APP, "--json"]).output)
    assert (shown["pending"], shown["through"]) == ([2], 2)
    assert len(shown["starting"][0]["files"]) == 3  # the pending version's file included

    shutil.rmtree(tmp_path / "ck")  # the checkpoint is lost; a file lands
    landing.add(2)
    b = FileStream(tmp_path / "ck", landing, max_files=None)
    fresh = DeltaSink(target, APP, APPEND)
    before = unchanged(target, fresh)
    with pytest.raises(CheckpointResetError, match=r"Versions \[2\] are staged") as refused:
        run(fresh, b)
    assert refused.value.committed_by == a.query_id
    assert unchanged(target, fresh) == before

    assert run(DeltaSink(target, APP, APPEND), b, resume=True) == [(0, 3)]
    assert support.ids(target) == landing.ids()  # every row exactly once
    # One commit published both (coalesced); each version's origin stays on record.
    (entry,) = [e for e in DeltaSink(target, APP).history() if 3 in e.versions]
    assert entry.versions == (2, 3)
    two, three = (origin_for(entry.origin, v, last=entry.version) for v in (2, 3))
    assert (two and two.query_id, two and two.batch_id) == (a.query_id, 2)
    assert (three and three.query_id, three and three.base) == (b.query_id, 3)
    # B's restart, without resume, maps its batches from the log; a new file goes on.
    landing.add(1)
    assert run(DeltaSink(target, APP, APPEND), b) == [(1, 4)]
    assert support.ids(target) == landing.ids()


def test_a_checkpoint_restored_one_batch_old_with_another_file_list(
    tmp_path: Path, target: str
) -> None:
    """Path 2: a checkpoint restored from a backup one batch old re-plans batch 2 with
    the same logOffset but files part-02 and part-03 instead of part-02: refused by
    name (the positions include the files), nothing written; ``resume`` writes part-03
    alone as the next version."""
    landing = Landing(tmp_path / "in")
    stream = FileStream(tmp_path / "ck", landing, max_files=None)
    sink = DeltaSink(target, APP, APPEND)
    for n in range(2):
        landing.add(2)
        assert run(sink, stream) == [(n, n)]
    stream.copy_to(tmp_path / "backup")
    landing.add(2)
    assert run(sink, stream) == [(2, 2)]

    shutil.rmtree(stream.root)
    shutil.copytree(tmp_path / "backup", stream.root)
    landing.add(2)  # part-00003 lands: the restored query plans batch 2 = part-02, part-03
    restarted = DeltaSink(target, APP, APPEND)
    before = unchanged(target, restarted)
    with pytest.raises(ReplayMismatchError, match="differ from the ones version 2 recorded"):
        run(restarted, stream)
    assert unchanged(target, restarted) == before
    assert support.ids(target) == landing.ids()[:6]

    assert run(DeltaSink(target, APP, APPEND), stream, resume=True) == [(2, 3)]
    assert support.ids(target) == landing.ids()
    landing.add(1)
    assert run(DeltaSink(target, APP, APPEND), stream) == [(3, 4)]
    assert support.ids(target) == landing.ids()


def test_a_restored_checkpoint_that_replans_the_same_files_goes_on(
    tmp_path: Path, target: str
) -> None:
    """A checkpoint restored from an older copy whose batches re-plan the same files:
    every replay is silent, even below the committed version, then new files go on."""
    landing = Landing(tmp_path / "in")
    stream = FileStream(tmp_path / "ck", landing, max_files=1)
    for _ in range(2):
        landing.add(2)
    sink = DeltaSink(target, APP, APPEND, on_stale="raise")
    assert run(sink, stream) == [(0, 0), (1, 1)]
    stream.copy_to(tmp_path / "backup")
    for _ in range(2):
        landing.add(2)
    assert run(sink, stream) == [(2, 2), (3, 3)]
    shutil.rmtree(stream.root)
    shutil.copytree(tmp_path / "backup", stream.root)
    landing.add(1)
    restarted = DeltaSink(target, APP, APPEND, on_stale="raise")
    assert run(restarted, stream) == [(2, 3), (3, 3), (4, 4)]
    assert support.ids(target) == landing.ids()


def test_a_batch_job_version_between_a_streams_batches(tmp_path: Path, target: str) -> None:
    """Path 3: a batch job writes version 2 (with a position) between the stream's
    batches: the stream's batch 2 is refused by name, nothing written; resumed, it
    becomes version 3."""
    landing = Landing(tmp_path / "in")
    stream = FileStream(tmp_path / "ck", landing, max_files=1)
    for _ in range(2):
        landing.add(2)
    assert run(DeltaSink(target, APP, APPEND), stream) == [(0, 0), (1, 1)]
    job = job_rows([9000, 9001])
    DeltaSink(target, APP, APPEND).write(job, 2, position={"date": "2026-11-26"})
    landing.add(2)
    sink = DeltaSink(target, APP, APPEND)
    before = unchanged(target, sink)
    with pytest.raises(CheckpointResetError, match="a batch job"):
        run(sink, stream)
    assert unchanged(target, sink) == before
    assert run(DeltaSink(target, APP, APPEND), stream, resume=True) == [(2, 3)]
    assert support.ids(target) == sorted([*landing.ids(), 9000, 9001])


def test_resume_leaves_out_held_files_counted_and_logged(
    tmp_path: Path, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A new checkpoint resumed re-plans the input from its start: the rows of the
    files the target holds are left out (by ``_metadata.file_path``), counted and
    logged, in its first batch and its later ones; a batch of held files only becomes
    an empty version (the query's identity and base are on record)."""
    landing = Landing(tmp_path / "in")
    stream = FileStream(tmp_path / "ck", landing, max_files=2)
    for _ in range(3):
        landing.add(3)
    assert run(DeltaSink(target, APP, APPEND), stream) == [(0, 0), (1, 1)]
    shutil.rmtree(stream.root)
    landing.add(2)
    resumed = FileStream(tmp_path / "ck", landing, max_files=1)
    with caplog.at_level(logging.INFO, logger="deltasink"):
        done = run(DeltaSink(target, APP, APPEND), resumed, resume=True)
    assert done == [(0, 2), (1, 3), (2, 4), (3, 5)]
    assert support.ids(target) == landing.ids()
    left = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(left) == 3, left
    assert all("left out 3 row(s) of 1 file(s)" in m for m in left), left
    entries = {e.version: e for e in DeltaSink(target, APP).history()}
    assert [entries[v].rows_inserted or 0 for v in (2, 3, 4, 5)] == [0, 0, 0, 2]


def auto_loader_checkpoint(root: Path, batches: int) -> Path:
    """An Auto Loader checkpoint: its offsets (``seqNum``...), no readable file list."""
    import uuid

    (root / "offsets").mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    (root / "sources" / "0" / "rocksdb").mkdir(parents=True)
    for n in range(batches):
        offset = {
            "seqNum": n + 1,
            "sourceVersion": 1,
            "lastBackfillStartTimeMs": 1795700000000,
            "lastBackfillFinishTimeMs": 1795700000500,
        }
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795700001000, "conf": {}}
        (root / "offsets" / str(n)).write_text(f"v1\n{json.dumps(meta)}\n{json.dumps(offset)}")
    return root


def test_auto_loader_files_come_from_the_rows(tmp_path: Path, target: str) -> None:
    """Auto Loader keeps its files out of reach: each micro-batch's files are read from
    its rows' ``_metadata.file_path`` and recorded, so a resumed query (a new checkpoint
    that lists every file again) leaves the held ones out; without the file metadata
    it is refused by name, nothing written."""
    landing = Landing(tmp_path / "in")
    files = [landing.add(2) for _ in range(3)]
    old = auto_loader_checkpoint(tmp_path / "old", 2)
    sink = DeltaSink(target, APP, APPEND)
    for n in (0, 1):
        sink.foreach_batch(micro_batch(landing, [files[n]]), n, checkpoint=old)
    (held,) = DeltaSink(target, APP).offsets().starting
    assert held["kind"] == "files"
    assert sorted(map(normal_path, held["files"])) == sorted(map(normal_path, files[:2]))

    new = auto_loader_checkpoint(tmp_path / "new", 1)
    everything = micro_batch(landing, files)
    before = unchanged(target, sink)
    with pytest.raises(CheckpointResetError, match="Auto Loader"):
        DeltaSink(target, APP, APPEND).foreach_batch(
            everything.drop_columns(["_metadata"]), 0, resume=True, checkpoint=new
        )
    assert unchanged(target, sink) == before
    report = DeltaSink(target, APP, APPEND).foreach_batch(
        everything, 0, resume=True, checkpoint=new
    )
    assert report.committed_versions == [2]
    assert support.ids(target) == landing.ids()
