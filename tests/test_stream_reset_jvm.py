"""A lost checkpoint on real streams (issue 24): classic PySpark Structured Streaming
(``tests/jvm/stream_job.py``'s query), ``foreachBatch`` into an ``append`` target (a
batch applied twice shows as repeated ids).

The checkpoint is deleted between runs: the new query's batch 0 is refused with
``CheckpointResetError``, nothing written; then a new checkpoint resumes with
``resume=True`` from the positions ``sink.offsets()`` gives (the file source's committed
files moved out of its input; the Delta source's ``startingVersion``), and every input
row reaches the target exactly once, also across a restart of the resumed query.

Both engines for the file source (embedded: delta-rs commits, the identity read from the
classic session; spark: delta-spark commits), the spark engine for the Delta source.

Each run is a new streaming query on the delta-spark suite's classic session (the
``delta_spark`` fixture): a restart from a checkpoint is a new query, so no run needs a
JVM of its own. Inside the full suite these tests run in that suite's process (see
``tests/conftest.py``); a killed JVM is ``tests/test_streaming_jvm.py``'s and
``tests/test_stream_soak.py``'s.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import DeltaSink
from tests import support
from tests.jvm.stream_job import run_query
from tests.test_contract_spark import REASON, delta_spark

pytestmark = [
    pytest.mark.jvm,
    pytest.mark.delta_spark,
    pytest.mark.skipif(REASON is not None, reason=REASON or ""),
    # As in the delta-spark suite: no per-test timeout (it would break the shared
    # session's py4j call in flight); the suite's run as a whole is bounded.
    pytest.mark.timeout(0),
]
__all__ = ["delta_spark"]  # the delta-spark suite's session fixture, shared

APP = "reset"
ROWS = 3


@pytest.fixture
def run_job(delta_spark: Any) -> Any:
    """One run of the streaming job on the shared session: (exit code, events, "")."""

    def run(
        engine: str, source: Path, checkpoint: Path, target: str, **env: str
    ) -> tuple[int, list[dict[str, Any]], str]:
        said: list[dict[str, Any]] = []
        code = run_query(
            delta_spark,
            str(source),
            str(checkpoint),
            target,
            APP,
            engine=engine,
            say=lambda event, **fields: said.append({"event": event, **fields}),
            source_format=env.get("DELTASINK_STREAM_SOURCE", "json"),
            starting_version=env.get("DELTASINK_STREAM_STARTING_VERSION"),
            resume=env.get("DELTASINK_STREAM_RESUME") == "1",
        )
        return code, json.loads(json.dumps(said)), ""

    return run


def add_file(directory: Path, n: int) -> list[int]:
    directory.mkdir(exist_ok=True)
    ids = [n * 10 + r for r in range(ROWS)]
    path = directory / f"part-{n:02d}.json"
    path.write_text("".join(json.dumps({"id": i, "value": f"f{n}"}) + "\n" for i in ids))
    stamp = 1_700_000_000 + n  # the file source takes files oldest first
    os.utime(path, (stamp, stamp))
    return ids


def committed(events_: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(e["batch"], e["version"]) for e in events_ if e["event"] == "committed"]


@pytest.mark.parametrize("engine", ["embedded", "spark"])
def test_file_source_checkpoint_deleted_refused_then_resumed(
    tmp_path: Path, engine: str, run_job: Any
) -> None:
    source, archive = tmp_path / "input", tmp_path / "archive"
    checkpoint = tmp_path / "checkpoint"
    target = str(tmp_path / "lake" / "events")
    expected = [i for n in range(3) for i in add_file(source, n)]

    code, run1, err = run_job(engine, source, checkpoint, target)
    assert code == 0, err
    assert committed(run1) == [(0, 0), (1, 1), (2, 2)]
    first_query = DeltaSink(target, APP).history()[0].origin
    assert first_query is not None
    assert first_query.query_id == json.loads((checkpoint / "metadata").read_text())["id"]
    assert first_query.sources[0]["logOffset"] == 2
    assert first_query.sources[0]["files"] == [(source / "part-02.json").resolve().as_uri()]

    # The checkpoint is deleted; new input arrives; the new query re-reads everything.
    shutil.rmtree(checkpoint)
    expected += [i for n in (3, 4) for i in add_file(source, n)]
    before = support.table_version(target)
    code, run2, err = run_job(engine, source, checkpoint, target)
    assert code == 3, err
    refused = [e for e in run2 if e["event"] == "refused"]
    assert refused == [
        {
            "event": "refused",
            "batch": 0,
            "committed_by": first_query.query_id,
            "query": json.loads((checkpoint / "metadata").read_text())["id"],
        }
    ]
    assert committed(run2) == []
    assert support.table_version(target) == before  # nothing written
    assert support.ids(target) == sorted(expected[: 3 * ROWS])

    # Resume: the files already committed leave the input, a new checkpoint continues.
    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.exact) == (2, True)
    (files,) = point.starting
    assert files["kind"] == "files"
    assert files["files"] == [(source / f"part-0{n}.json").resolve().as_uri() for n in range(3)]
    archive.mkdir()
    for uri in files["files"]:
        name = Path(uri.removeprefix("file://")).name
        (source / name).rename(archive / name)
    shutil.rmtree(checkpoint)
    code, run3, err = run_job(engine, source, checkpoint, target, DELTASINK_STREAM_RESUME="1")
    assert code == 0, err
    assert committed(run3) == [(0, 3), (1, 4)]
    # The resumed query restarts (without resume) with one more file: batch 2 -> 5.
    expected += add_file(source, 5)
    code, run4, err = run_job(engine, source, checkpoint, target)
    assert code == 0, err
    assert committed(run4) == [(2, 5)]

    assert support.ids(target) == sorted(expected)  # every row exactly once
    assert support.marker(target, APP) == 5
    assert {v: len(c) for v, c in support.txn_commits(target, APP).items()} == dict.fromkeys(
        range(6), 1
    )
    origins = {e.version: e.origin for e in DeltaSink(target, APP).history()}
    assert [(o.batch_id, o.base) for v, o in sorted(origins.items()) if o] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (0, 3),
        (1, 3),
        (2, 3),
    ]


def test_delta_source_checkpoint_deleted_refused_then_resumed(tmp_path: Path, run_job: Any) -> None:
    from deltalake import write_deltalake

    source = tmp_path / "bronze"
    checkpoint = tmp_path / "checkpoint"
    target = str(tmp_path / "lake" / "silver")
    expected: list[int] = []

    def append(n: int) -> None:
        ids = [n * 10 + r for r in range(ROWS)]
        expected.extend(ids)
        data = pa.table({"id": pa.array(ids, pa.int64()), "value": [f"d{n}"] * ROWS})
        write_deltalake(str(source), data, mode="append")

    for n in range(3):
        append(n)  # source versions 0, 1, 2
    code, run1, err = run_job("spark", source, checkpoint, target, DELTASINK_STREAM_SOURCE="delta")
    assert code == 0, err
    assert [v for _, v in committed(run1)] == [0, 1, 2]

    shutil.rmtree(checkpoint)
    append(3)  # source version 3
    before = support.table_version(target)
    code, run2, err = run_job("spark", source, checkpoint, target, DELTASINK_STREAM_SOURCE="delta")
    assert code == 3, err
    assert [e["batch"] for e in run2 if e["event"] == "refused"] == [0]
    assert support.table_version(target) == before
    assert support.ids(target) == sorted(expected[: 3 * ROWS])

    point = DeltaSink(target, APP).offsets()
    (delta,) = point.starting
    assert delta["kind"] == "delta"
    assert delta["startingVersion"] == 3, point
    shutil.rmtree(checkpoint)
    code, run3, err = run_job(
        "spark",
        source,
        checkpoint,
        target,
        DELTASINK_STREAM_SOURCE="delta",
        DELTASINK_STREAM_RESUME="1",
        DELTASINK_STREAM_STARTING_VERSION=str(delta["startingVersion"]),
    )
    assert code == 0, err
    assert committed(run3) == [(0, 3)]
    assert support.ids(target) == sorted(expected)  # every row exactly once
    assert support.marker(target, APP) == 3
