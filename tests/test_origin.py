"""A stream is an identity, not a counter (issue 24): each version's target commit
records the streaming query, batch and source positions it came from; a batch of another
query (a deleted, reset or changed checkpoint) is refused, nothing written, unless it
resumes, which continues right after the committed version, also across restarts.

The checkpoints here are directories in Spark's own format (``metadata``,
``offsets/<batch>``, a file source's ``sources/0/<n>``), as Spark writes them before a
micro-batch runs; the micro-batches are Arrow tables, written through the embedded
engine. Real streams: ``tests/test_stream_reset_jvm.py``.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from deltasink import (
    CheckpointResetError,
    CommitError,
    ConfigurationError,
    DeltaSink,
    InvalidInputError,
    InvalidVersionError,
    MergeSpec,
    ReplayMismatchError,
    _faults,
    foreach_batch_writer,
)
from deltasink.cli import app
from deltasink.ops.history import ledger_table
from deltasink.ops.origin import BatchOrigin, decode
from deltasink.stream.checkpoint import read_checkpoint
from deltasink.stream.placing import Decision, Held, resolve
from deltasink.stream.resume import resume_point
from tests import support

APPEND = MergeSpec(mode="append")
APP = "orders-stream"


class Checkpoint:
    """A streaming checkpoint in Spark's format: one query id, one offsets file per
    batch (one source), and a file source's metadata log when it reads files."""

    def __init__(self, root: Path, *, query_id: str | None = None) -> None:
        self.root = root
        self.query_id = query_id or str(uuid.uuid4())
        (root / "offsets").mkdir(parents=True)
        (root / "metadata").write_text(json.dumps({"id": self.query_id}) + "\n")

    def offsets(self, batch: int, *sources: Any) -> None:
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795639411905, "conf": {}}
        lines = ["v1", json.dumps(meta)] + [json.dumps(s) for s in sources]
        (self.root / "offsets" / str(batch)).write_text("\n".join(lines))

    def files(self, batch: int, log_offset: int, files: list[str]) -> None:
        self.offsets(batch, {"logOffset": log_offset})
        log = self.root / "sources" / "0"
        log.mkdir(parents=True, exist_ok=True)
        entries = [
            json.dumps({"path": f, "timestamp": 1_700_000_000_000, "batchId": log_offset})
            for f in files
        ]
        (log / str(log_offset)).write_text("\n".join(["v1", *entries]))


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "value": [f"v{i}" for i in ids]})


def kafka(batch: int) -> dict[str, dict[str, int]]:
    return {"orders": {"0": 10 * (batch + 1), "1": 5 * (batch + 1)}}


def test_a_new_checkpoint_is_refused_and_writes_nothing(tmp_path: Path, target: str) -> None:
    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    sink = DeltaSink(target, APP, APPEND)
    old.offsets(0, kafka(0))
    assert sink.foreach_batch(rows(1, 2), 0, checkpoint=old.root).committed_versions == [0]
    before = support.table_version(target)
    new.offsets(0, kafka(0))
    with pytest.raises(CheckpointResetError, match=old.query_id) as caught:
        sink.foreach_batch(rows(3, 4), 0, checkpoint=new.root)
    error = caught.value
    assert (error.committed_by, error.query_id, error.version) == (old.query_id, new.query_id, 0)
    assert "up to 0" in str(error)
    assert "resume=True" in str(error)
    assert f"deltasink offsets {target} --app {APP}" in str(error)
    assert isinstance(error, InvalidVersionError)  # a refused version, as before
    # A fresh sink (a restarted job) refuses it too: the identity is read from the log.
    with pytest.raises(CheckpointResetError):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(3, 4), 0, checkpoint=new.root)
    new.offsets(1, kafka(1))
    with pytest.raises(CheckpointResetError):  # any batch id of the other query
        DeltaSink(target, APP, APPEND).foreach_batch(rows(5), 1, checkpoint=new.root)
    assert support.table_version(target) == before
    assert support.ids(target) == [1, 2]
    assert support.marker(target, APP) == 0
    assert support.staged_versions(sink.staging) == []


def test_the_origin_is_recorded_in_the_commit_of_the_marker(tmp_path: Path, target: str) -> None:
    ck = Checkpoint(tmp_path / "ck")
    ck.offsets(0, kafka(0))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 0, checkpoint=ck.root)
    commits = support.log_commits(target)
    (version,) = [v for v, actions in commits.items() if any("txn" in a for a in actions)]
    actions = commits[version]
    assert [a["txn"]["version"] for a in actions if "txn" in a] == [0]
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert json.loads(info["deltasink.origin"]) == {
        "query": ck.query_id,
        "batch": 0,
        "base": 0,
        "sources": [kafka(0)],
        "checkpoint": str(ck.root),
    }
    (entry,) = DeltaSink(target, APP).history()
    assert entry.origin == BatchOrigin(query_id=ck.query_id, batch_id=0, sources=(kafka(0),))
    assert entry.to_dict()["origin"]["query"] == ck.query_id
    ledger = ledger_table(APP, DeltaSink(target, APP).history()).to_pylist()
    assert [json.loads(r["origin"])["query"] for r in ledger] == [ck.query_id]


def test_deterministic_replays_never_raise(tmp_path: Path, target: str) -> None:
    ck = Checkpoint(tmp_path / "ck")
    for batch in range(4):
        ck.offsets(batch, kafka(batch))
        data = rows(10 * batch, 10 * batch + 1)
        sink = DeltaSink(target, APP, APPEND)  # each batch on a restarted job
        assert sink.foreach_batch(data, batch, checkpoint=ck.root).committed_versions == [batch]
        for again in (sink, DeltaSink(target, APP, APPEND)):  # Spark's replay, twice
            replay = again.foreach_batch(data, batch, checkpoint=ck.root)
            assert (replay.committed_versions, replay.committed_version) == ([], batch)
    assert support.ids(target) == [0, 1, 10, 11, 20, 21, 30, 31]
    commits = support.txn_commits(target, APP)
    assert sorted(commits) == [0, 1, 2, 3]
    assert all(len(c) == 1 for c in commits.values())
    assert support.marker(target, APP) == 3


def test_a_replay_with_other_positions_is_refused(tmp_path: Path, target: str) -> None:
    ck = Checkpoint(tmp_path / "ck")
    ck.offsets(0, kafka(0))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 0, checkpoint=ck.root)
    ck.offsets(0, kafka(3))  # the checkpoint's offsets were edited
    with pytest.raises(ReplayMismatchError, match="differ from the ones version 0 recorded"):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(1, 9), 0, checkpoint=ck.root)
    assert support.ids(target) == [1]
    assert support.marker(target, APP) == 0


def test_resume_continues_after_the_committed_version_across_restarts(
    tmp_path: Path, target: str
) -> None:
    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    for batch in (0, 1):
        old.offsets(batch, kafka(batch))
        DeltaSink(target, APP, APPEND).foreach_batch(rows(batch), batch, checkpoint=old.root)
    # The checkpoint is lost; a new query starts from `deltasink offsets`' positions.
    new.offsets(0, kafka(2))
    sink = DeltaSink(target, APP, APPEND)
    first = sink.foreach_batch(rows(2), 0, resume=True, checkpoint=new.root)
    assert first.committed_versions == [2]
    new.offsets(1, kafka(3))
    assert sink.foreach_batch(rows(3), 1, checkpoint=new.root).committed_versions == [3]
    # The resumed query restarts (a new process): its replay is a no-op, with or
    # without resume, and its next batch maps past it, from the log alone.
    for resume in (False, True):
        restarted = DeltaSink(target, APP, APPEND)
        replay = restarted.foreach_batch(rows(3), 1, resume=resume, checkpoint=new.root)
        assert (replay.committed_versions, replay.committed_version) == ([], 3)
    new.offsets(2, kafka(4))
    nxt = DeltaSink(target, APP, APPEND).foreach_batch(rows(4), 2, checkpoint=new.root)
    assert nxt.committed_versions == [4]
    assert support.ids(target) == [0, 1, 2, 3, 4]
    assert support.marker(target, APP) == 4
    origins = {e.version: e.origin for e in DeltaSink(target, APP).history()}
    assert {v: (o.query_id, o.batch_id, o.base) for v, o in origins.items() if o} == {
        0: (old.query_id, 0, 0),
        1: (old.query_id, 1, 0),
        2: (new.query_id, 0, 2),
        3: (new.query_id, 1, 2),
        4: (new.query_id, 2, 2),
    }
    # The old query, were it to come back, is now the other query.
    old.offsets(2, kafka(2))
    with pytest.raises(CheckpointResetError, match=new.query_id):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(99), 2, checkpoint=old.root)
    assert support.ids(target) == [0, 1, 2, 3, 4]


def test_resume_survives_a_version_published_by_recover(tmp_path: Path, target: str) -> None:
    """A resumed query's batch staged after a failed publish keeps its origin (``base``
    included); ``recover()`` publishes it with it, so the restart maps the same way."""
    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    old.offsets(0, kafka(0))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(0), 0, checkpoint=old.root)
    new.offsets(0, kafka(1))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 0, resume=True, checkpoint=new.root)
    new.offsets(1, kafka(2))
    with _faults.armed("publish.before_target_commit"), pytest.raises(CommitError):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(2), 1, checkpoint=new.root)
    assert DeltaSink(target, APP).recover().committed_versions == [2]
    replay = DeltaSink(target, APP, APPEND).foreach_batch(rows(2), 1, checkpoint=new.root)
    assert (replay.committed_versions, replay.committed_version) == ([], 2)
    new.offsets(2, kafka(3))
    nxt = DeltaSink(target, APP, APPEND).foreach_batch(rows(3), 2, checkpoint=new.root)
    assert nxt.committed_versions == [3]
    assert support.ids(target) == [0, 1, 2, 3]
    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.exact, point.origin and point.origin.batch_id) == (3, True, 2)


def test_a_version_without_origin_between_batches_is_refused(tmp_path: Path, target: str) -> None:
    """A version staged or written without an origin (``pre_commit``, a batch job's
    ``write()``) is nobody's replay: the stream's next batch is refused, nothing
    written, until it resumes after it."""
    ck = Checkpoint(tmp_path / "ck")
    ck.offsets(0, kafka(0))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(0), 0, checkpoint=ck.root)
    sink = DeltaSink(target, APP, APPEND)
    sink.pre_commit(rows(1), 1)
    sink.recover()
    ck.offsets(1, kafka(1))
    before = support.table_version(target)
    with pytest.raises(CheckpointResetError, match="no stream identity"):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(11), 1, checkpoint=ck.root)
    assert support.table_version(target) == before
    report = DeltaSink(target, APP, APPEND).foreach_batch(
        rows(11), 1, resume=True, checkpoint=ck.root
    )
    assert report.committed_versions == [2]
    assert support.ids(target) == [0, 1, 11]


def test_a_batch_staged_after_a_failed_publish_keeps_its_origin(
    tmp_path: Path, target: str
) -> None:
    """A micro-batch whose publish failed is staged with its origin; ``recover()``
    (another process) publishes it with that origin, so the positions stay exact."""
    ck = Checkpoint(tmp_path / "ck")
    ck.offsets(0, kafka(0))
    DeltaSink(target, APP, APPEND).foreach_batch(rows(0), 0, checkpoint=ck.root)
    ck.offsets(1, kafka(1))
    with (
        _faults.armed("publish.before_target_commit"),
        pytest.raises(CommitError, match="staged now"),
    ):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 1, checkpoint=ck.root)
    assert support.marker(target, APP) == 0
    assert DeltaSink(target, APP).recover().committed_versions == [1]
    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.exact) == (1, True)
    assert point.origin == BatchOrigin(query_id=ck.query_id, batch_id=1, sources=(kafka(1),))
    replay = DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 1, checkpoint=ck.root)
    assert (replay.committed_versions, replay.committed_version) == ([], 1)
    assert support.ids(target) == [0, 1]


def test_versions_without_origin_keep_the_old_rule(tmp_path: Path, target: str) -> None:
    """A target written before origins existed (or by plain write()s): batch id =
    version, the first recorded batch takes over."""
    DeltaSink(target, APP, APPEND).write(rows(0), 0)
    ck = Checkpoint(tmp_path / "ck")
    ck.offsets(0, kafka(0))
    replay = DeltaSink(target, APP, APPEND).foreach_batch(rows(0), 0, checkpoint=ck.root)
    assert replay.committed_versions == []
    ck.offsets(1, kafka(1))
    done = DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 1, checkpoint=ck.root)
    assert done.committed_versions == [1]
    assert support.ids(target) == [0, 1]


def test_offsets_give_where_a_new_query_starts(tmp_path: Path, target: str) -> None:
    ck = Checkpoint(tmp_path / "ck")
    delta_end = {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 7, "index": -1}
    ck.offsets(0, kafka(0), delta_end)
    sink = DeltaSink(target, APP, APPEND)
    sink.foreach_batch(rows(1), 0, checkpoint=ck.root)
    ck.offsets(1, kafka(1), {**delta_end, "reservoirVersion": 9, "index": 2})
    sink.foreach_batch(rows(2), 1, checkpoint=ck.root)
    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.exact) == (1, True)
    assert point.starting == (
        {"kind": "kafka", "source": 0, "startingOffsets": '{"orders":{"0":20,"1":10}}'},
        {
            "kind": "delta",
            "source": 1,
            "startingVersion": 10,
            "note": "the last batch ended inside version 9 (file index 2); "
            "startingVersion 10 skips that version's later files",
        },
    )
    result = CliRunner().invoke(app, ["offsets", target, "--app", APP, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["version"] == 1
    assert payload["origin"]["query"] == ck.query_id
    assert payload["starting"][0]["startingOffsets"] == '{"orders":{"0":20,"1":10}}'
    text = CliRunner().invoke(app, ["offsets", target, "--app", APP])
    assert text.exit_code == 0, text.output
    assert "startingOffsets" in text.output
    assert "startingVersion" in text.output
    status = CliRunner().invoke(app, ["status", target, "--app", APP, "--json"])
    assert json.loads(status.output)["origin"]["batch"] == 1
    history = CliRunner().invoke(app, ["history", target, "--app", APP, "--json"])
    assert [e["origin"]["batch"] for e in json.loads(history.output)] == [1, 0]


def test_file_source_offsets_list_every_committed_file(tmp_path: Path, target: str) -> None:
    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    old.files(0, 0, ["file:///in/a.json"])
    old.files(1, 1, ["file:///in/b.json", "file:///in/c.json"])
    assert read_checkpoint(str(old.root), 1) == (
        old.query_id,
        ({"logOffset": 1, "files": ["file:///in/b.json", "file:///in/c.json"]},),
    )
    for batch in (0, 1):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(batch), batch, checkpoint=old.root)
    new.files(0, 0, ["file:///in/d.json"])
    DeltaSink(target, APP, APPEND).foreach_batch(rows(2), 0, resume=True, checkpoint=new.root)
    (files,) = DeltaSink(target, APP).offsets().starting
    assert files == {
        "kind": "files",
        "source": 0,
        "files": [f"file:///in/{n}.json" for n in "abcd"],
    }


def test_batch_jobs_record_their_position(target: str) -> None:
    sink = DeltaSink(target, "daily", APPEND)
    sink.write(rows(1), 20261124, position={"date": "2026-11-24", "files": ["a.csv"]})
    sink.write(rows(2), 20261125, position="2026-11-25")
    assert [e.origin.position if e.origin else None for e in sink.history()] == [
        "2026-11-25",
        {"date": "2026-11-24", "files": ["a.csv"]},
    ]
    with pytest.raises(InvalidInputError, match="JSON value"):
        sink.write(rows(3), 20261126, position=object())
    assert support.ids(target) == [1, 2]
    assert sink.offsets().origin == BatchOrigin(position="2026-11-25")


def test_resume_needs_an_identity(target: str) -> None:
    with pytest.raises(Exception, match="checkpoint="):
        DeltaSink(target, APP, APPEND).foreach_batch(rows(1), 0, resume=True)
    assert not support.exists(target)


def test_the_writer_carries_resume_and_checkpoint(
    tmp_path: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deltasink import streaming

    monkeypatch.setattr(streaming, "active_session", lambda: None)  # not the embedded one
    old, new = Checkpoint(tmp_path / "ck-a"), Checkpoint(tmp_path / "ck-b")
    old.offsets(0, kafka(0))
    foreach_batch_writer(target, APP, APPEND, checkpoint=old.root)(rows(1), 0)
    new.offsets(0, kafka(1))
    plain = foreach_batch_writer(target, APP, APPEND, checkpoint=new.root)
    with pytest.raises(CheckpointResetError):
        plain(rows(2), 0)
    resumed = foreach_batch_writer(target, APP, APPEND, resume=True, checkpoint=new.root)
    assert resumed(rows(2), 0).committed_versions == [1]
    assert support.ids(target) == [1, 2]


def held(
    committed: int | None,
    last: BatchOrigin | None,
    *,
    pending: tuple[int, ...] = (),
    recorded: bool = True,
    at: dict[int, BatchOrigin] | None = None,
) -> Held:
    return Held(committed, pending, last, recorded, lambda v: (at or {}).get(v))


def test_resolve_is_the_rule() -> None:
    a = BatchOrigin(query_id="a", batch_id=3, sources=(kafka(3),))
    kw: dict[str, Any] = {"app_id": APP, "table": "t", "resume": False}
    assert resolve(a, held(None, None), **kw).version == 3
    assert resolve(a, held(3, a), **kw) == Decision(3, a, replay=True)
    based = BatchOrigin(query_id="a", batch_id=1, base=7)
    assert resolve(a, held(8, based), **kw) == Decision(
        10, BatchOrigin(query_id="a", batch_id=3, base=7, sources=(kafka(3),))
    )
    other = BatchOrigin(query_id="b", batch_id=0)
    with pytest.raises(CheckpointResetError):
        resolve(a, held(0, other), **kw)
    resumed = resolve(a, held(5, other), **{**kw, "resume": True})
    assert (resumed.version, resumed.origin.base, resumed.origin.resumed) == (6, 3, True)
    # The newest version held is a pending one: resume goes after it, not onto it.
    assert resolve(a, held(5, other, pending=(6, 7)), **{**kw, "resume": True}).version == 8
    # A batch job's version (a position, no query) or one without any origin: refused.
    job = BatchOrigin(position={"date": "2026-11-25"})
    with pytest.raises(CheckpointResetError, match="a batch job"):
        resolve(a, held(3, job), **kw)
    with pytest.raises(CheckpointResetError, match="no stream identity"):
        resolve(a, held(3, None), **kw)
    # No version records any origin (a target older than origins): the batch id.
    assert resolve(a, held(3, None, recorded=False), **kw).version == 3
    # A replay must be this very batch with these positions (files included).
    moved = BatchOrigin(query_id="a", batch_id=3, sources=(kafka(4),))
    with pytest.raises(ReplayMismatchError):
        resolve(a, held(3, moved), **kw)
    files = BatchOrigin(query_id="a", batch_id=1, sources=({"logOffset": 1, "files": ["p2"]},))
    more = BatchOrigin(query_id="a", batch_id=1, sources=({"logOffset": 1, "files": ["p2", "p3"]},))
    with pytest.raises(ReplayMismatchError, match="resume=True"):
        resolve(more, held(1, files), **kw)
    again = resolve(more, held(1, files), **{**kw, "resume": True})
    assert (again.version, again.leave_out_held, again.origin.base) == (2, True, 1)
    # A lower batch of the same query (a checkpoint restored from an older copy) is a
    # replay of the version it wrote, when that version recorded it.
    older = BatchOrigin(query_id="a", batch_id=1, sources=(kafka(1),))
    assert resolve(older, held(3, a, at={1: older}), **kw).replay
    assert decode("not json") is None
    assert decode('{"query": "q", "batch": 2}') == BatchOrigin(query_id="q", batch_id=2)


def test_checkpoint_formats_spark_writes(tmp_path: Path) -> None:
    """A file source's compacted log (``<n>.compact`` every 10 batches), a source with
    no offset yet (``-``), Delta's end-of-version index, and a source of unknown kind."""
    ck = Checkpoint(tmp_path / "ck")
    log = ck.root / "sources" / "0"
    log.mkdir(parents=True)
    entries = [
        json.dumps({"path": f"file:///in/{n}.json", "timestamp": 0, "batchId": n})
        for n in range(10)
    ]
    (log / "9.compact").write_text("\n".join(["v1", *entries]))
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})
    delta = {"sourceVersion": 1, "reservoirId": "r", "reservoirVersion": 4, "index": 2**63 - 1}
    lines = ["v1", meta, json.dumps({"logOffset": 9}), "-", json.dumps(delta), "17"]
    (ck.root / "offsets" / "9").write_text("\n".join(lines))
    query, sources = read_checkpoint(str(ck.root), 9)
    assert query == ck.query_id
    assert sources == (
        {"logOffset": 9, "files": ["file:///in/9.json"]},
        None,
        delta,
        17,
    )
    origin = BatchOrigin(query_id=query, batch_id=9, sources=sources)
    point = resume_point(9, 3, origin)
    assert point.starting == (
        {"kind": "files", "source": 0, "files": ["file:///in/9.json"]},
        {"kind": "unknown", "source": 1, "offset": None},
        {"kind": "delta", "source": 2, "startingVersion": 5},
        {"kind": "unknown", "source": 3, "offset": 17},
    )
    with pytest.raises(ConfigurationError, match="no streaming checkpoint for micro-batch 10"):
        read_checkpoint(str(ck.root), 10)
    assert read_checkpoint(ck.root.as_uri(), 9)[0] == ck.query_id  # file: URIs too


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.sampled_from(["batch", "replay", "restart"]), min_size=1, max_size=9))
def test_deterministic_replays_never_raise_property(steps: list[str]) -> None:
    """Any interleaving of new micro-batches, Spark's replays of the last one (same
    offsets, same rows) and restarts (a new sink) never raises and applies every batch
    exactly once."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        target = str(root / "target")
        ck = Checkpoint(root / "ck")
        sink = DeltaSink(target, APP, APPEND)
        last = -1
        for step in steps:
            if step == "restart":
                sink = DeltaSink(target, APP, APPEND)
                continue
            if step == "batch" or last < 0:
                last += 1
                ck.offsets(last, kafka(last))
            report = sink.foreach_batch(rows(10 * last, 10 * last + 1), last, checkpoint=ck.root)
            assert report.committed_version == last
        assert support.ids(target) == sorted(
            i for b in range(last + 1) for i in (10 * b, 10 * b + 1)
        )
        assert support.marker(target, APP) == (None if last < 0 else last)
