"""A lost checkpoint on real streams (issue 24): classic PySpark Structured Streaming
(``tests/jvm/stream_job.py``'s query), ``foreachBatch`` into an ``append`` target (a
batch applied twice shows as repeated ids).

The checkpoint is deleted between runs: the new query's batch 0 is refused with
``CheckpointResetError``, nothing written; then the same run with ``resume=True``
continues right after the target (the file source: no file moved, the rows of the files
the target holds left out by ``input_file_name()``; the Delta source: from the
``startingVersion`` ``sink.offsets()`` gives), and every input row reaches the target
exactly once, also across a restart of the resumed query.

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
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from deltasink import DeltaSink, MergeSpec
from tests import generated, support
from tests.jvm.stream_job import run_query
from tests.test_contract_spark import DELTA_SPARK_MODULE, delta_spark, sliced

pytestmark = DELTA_SPARK_MODULE
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
            max_files=int(env.get("DELTASINK_STREAM_MAX_FILES", "1")),
        )
        return code, json.loads(json.dumps(said)), ""

    return run


def add_file(directory: Path, n: int) -> list[int]:
    directory.mkdir(parents=True, exist_ok=True)
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
    tmp_path: Path, engine: str, run_job: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "input"
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

    # The checkpoint is deleted; new input arrives; the new query re-reads everything
    # (up to ten files a batch: its batch 0 holds the three committed files and the two
    # new ones).
    shutil.rmtree(checkpoint)
    expected += [i for n in (3, 4) for i in add_file(source, n)]
    before = support.table_version(target)
    code, run2, err = run_job(engine, source, checkpoint, target, DELTASINK_STREAM_MAX_FILES="10")
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

    # Resume in one step: the same command with resume, no file moved. The refused
    # batch 0 runs again (all five files); the rows of the three the target holds are
    # left out by their file (input_file_name() on the micro-batch), counted and logged.
    point = DeltaSink(target, APP).offsets()
    assert (point.version, point.exact, point.pending) == (2, True, ())
    (files,) = point.starting
    assert files["kind"] == "files"
    assert files["files"] == [(source / f"part-0{n}.json").resolve().as_uri() for n in range(3)]
    with caplog.at_level(logging.INFO, logger="deltasink"):
        code, run3, err = run_job(
            engine,
            source,
            checkpoint,
            target,
            DELTASINK_STREAM_RESUME="1",
            DELTASINK_STREAM_MAX_FILES="10",
        )
    assert code == 0, err
    assert committed(run3) == [(0, 3)]
    assert any("left out 9 row(s) of 3 file(s)" in r.getMessage() for r in caplog.records)
    assert support.ids(target) == sorted(expected)
    # The resumed query restarts (without resume) with one more file: batch 1 -> 4.
    expected += add_file(source, 5)
    code, run4, err = run_job(engine, source, checkpoint, target)
    assert code == 0, err
    assert committed(run4) == [(1, 4)]

    assert support.ids(target) == sorted(expected)  # every row exactly once
    assert support.marker(target, APP) == 4
    assert {v: len(c) for v, c in support.txn_commits(target, APP).items()} == dict.fromkeys(
        range(5), 1
    )
    origins = {e.version: e.origin for e in DeltaSink(target, APP).history()}
    assert [(o.batch_id, o.base, o.resumed) for v, o in sorted(origins.items()) if o] == [
        (0, 0, False),
        (1, 0, False),
        (2, 0, False),
        (0, 3, True),
        (1, 3, True),
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


# -- the model's checkpoint is Spark's (issue 37) ---------------------------------------


def checkpoint_files(root: Path) -> dict[str, list[Any]]:
    """A checkpoint's files as parsed lines (``.crc`` files left out): the header,
    then each JSON line."""
    out: dict[str, list[Any]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_dir() or path.name.endswith(".crc") or path.name.startswith("."):
            continue
        lines = path.read_text().splitlines()
        if path.name == "metadata":  # one JSON line, no header
            out["metadata"] = [json.loads(lines[0])]
            continue
        out[str(path.relative_to(root))] = [lines[0]] + [
            "-" if line == "-" else json.loads(line) for line in lines[1:]
        ]
    return out


def test_the_lifecycle_model_writes_the_checkpoint_spark_writes(
    tmp_path: Path, delta_spark: Any
) -> None:
    """The same landing files through classic PySpark 4.2's file source and through
    ``tests/streams.py``: the same checkpoint files line by line (metadata, offsets,
    the file source's log with its compaction at batch 9, commits), the same batches
    read back by :func:`~deltasink.stream.checkpoint.read_checkpoint`, and the micro-batch's
    ``_metadata.file_path`` spelled as the model's Arrow batches spell it."""

    from deltasink.input.files import file_rows
    from deltasink.ops.origin import normal_path
    from deltasink.stream.checkpoint import read_checkpoint
    from tests.streams import FileStream, Landing, micro_batch

    landing = Landing(tmp_path / "landing")
    for n in range(11):
        landing.add(2)
        stamp = 1_700_000_000 + n  # oldest first, as the model plans them
        os.utime(landing.order[-1].removeprefix("file://"), (stamp, stamp))
    seen: dict[int, dict[str, Any]] = {}

    def handle(df: Any, batch_id: int) -> None:
        if batch_id not in (0, 9):  # two looks are enough; each costs Spark jobs
            return
        split = file_rows(df.drop("_metadata"))  # input_file_name() on a plain batch
        assert split is not None
        paths = [r[0] for r in df.select("_metadata.file_path").distinct().collect()]
        seen[batch_id] = {"counts": split.counts, "metadata_paths": sorted(paths)}

    real = tmp_path / "spark-checkpoint"
    query = (
        delta_spark.readStream.schema("id long, value string")
        .option("maxFilesPerTrigger", 1)
        .json(str(landing.root))
        .select("*", "_metadata")
        .writeStream.foreachBatch(handle)
        .option("checkpointLocation", str(real))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    model = FileStream(tmp_path / "model-checkpoint", landing, max_files=1)
    while (planned := model.next_batch()) is not None:
        batch, files = planned
        if batch in seen:  # Spark's _metadata.file_path spelled as the model's batches
            arrow = micro_batch(landing, files).column("_metadata").combine_chunks()
            paths = sorted(set(arrow.field("file_path").to_pylist()))
            assert paths == seen[batch]["metadata_paths"]
        model.commit(batch)

    spark_files, model_files = checkpoint_files(real), checkpoint_files(model.root)
    # Spark keeps the plain log entries the compaction covers for its clean-up delay
    # (10 minutes); the model deletes them at once (the state after that delay).
    kept = {
        k: v
        for k, v in spark_files.items()
        if not k.startswith("sources/0/") or k.endswith(".compact") or int(k.split("/")[-1]) > 9
    }
    assert sorted(kept) == sorted(model_files)
    for name, lines in model_files.items():
        theirs = kept[name]
        if name == "metadata":
            assert set(theirs[0]) == set(lines[0]) == {"id"}
            continue
        assert theirs[0] == lines[0] == "v1", name
        if name.startswith("offsets/"):
            assert set(lines[1]) <= set(theirs[1])  # Spark's conf holds more
            assert theirs[2:] == lines[2:], name
        elif name.startswith("sources/"):
            strip = [{k: v for k, v in e.items() if k != "timestamp"} for e in theirs[1:]]
            assert strip == [{k: v for k, v in e.items() if k != "timestamp"} for e in lines[1:]], (
                name
            )
        else:
            assert theirs == lines, name
    for batch in range(11):
        assert read_checkpoint(str(real), batch)[1] == read_checkpoint(str(model.root), batch)[1]
    for batch, found in seen.items():
        files = read_checkpoint(str(real), batch)[1][0]["files"]
        assert {normal_path(f) for f in found["counts"]} == {normal_path(f) for f in files}


# -- lifecycles on real streams (issue 37) ------------------------------------------------

#: The rules of ``tests/test_stream_lifecycle.py`` a real stream can take here (a crash is
#: an error raised inside foreachBatch at a fault point: the query fails).
REAL_RULES = ("land", "run", "crash", "delete", "back_up", "restore", "batch_job", "recover")


def real_lifecycle(
    spark: Any, root: Path, engine: str, rng: Any, steps: int
) -> tuple[list[str], list[int]]:
    """One generated lifecycle through classic PySpark's file source and
    ``foreachBatch`` (``tests/jvm/stream_job.py``): the rules drawn from ``rng``, the
    invariants of the in-process model after each, then drained as the messages say
    (run; refused: run with ``resume``). Returns the rules taken and the target's ids."""
    from deltasink import _faults

    source, checkpoint, target = root / "input", root / "checkpoint", str(root / "target")
    expected: set[int] = set()
    job: set[int] = set()
    taken: list[str] = []
    wrote: list[Any] = []
    backups: list[Path] = []
    files = [0]

    def land() -> None:
        expected.update(add_file(source, files[0]))
        files[0] += 1

    def run(*, resume: bool, fault: str | None = None) -> int:
        staging = DeltaSink(target, APP, engine="embedded").staging

        def now() -> tuple[int | None, int | None]:
            return support.table_version(target), support.table_version(staging)

        before: list[tuple[int | None, int | None]] = []

        def say(event: str, **fields: Any) -> None:  # inside foreachBatch: no raising
            if event == "batch":  # the sink is about to get a micro-batch
                before[:] = [now()]
            elif event == "refused" and now() != before[0]:
                wrote.append((list(taken), fields))  # refused by name, yet wrote

        def query() -> int:
            return run_query(
                spark,
                str(source),
                str(checkpoint),
                target,
                APP,
                engine=engine,
                say=say,
                resume=resume,
                max_files=rng.choice([1, 2, 10]),
            )

        if fault is None:
            return query()
        try:
            with _faults.armed(fault):
                return query()
        except Exception:  # the query failed at the fault: Spark records no progress
            return 1

    land()
    for _ in range(steps):
        rule = rng.choice(REAL_RULES)
        taken.append(rule)
        if rule == "land":
            land()
        elif rule == "run":
            run(resume=rng.random() < 0.3)
        elif rule == "crash":
            land()
            run(resume=False, fault=rng.choice(_faults.POINTS))
        elif rule == "delete":
            shutil.rmtree(checkpoint, ignore_errors=True)
        elif rule == "back_up" and checkpoint.exists():
            backups.append(root / f"backup-{len(backups)}")
            shutil.copytree(checkpoint, backups[-1])
        elif rule == "restore" and backups:
            shutil.rmtree(checkpoint, ignore_errors=True)
            shutil.copytree(rng.choice(backups), checkpoint)
        elif rule == "batch_job":
            sink = DeltaSink(target, APP, MergeSpec(mode="append"), engine=engine, spark=spark)
            status = sink.status()
            held = [
                v for v in (status.committed_version, *status.pending_versions) if v is not None
            ]
            version = max(held, default=-1) + 1
            ids = [10_000 + version]
            rows = pa.table({"id": pa.array(ids, pa.int64()), "value": ["job"]})
            sink.write(rows, version, position={"run": version})
            job.update(ids)
        elif rule == "recover":
            DeltaSink(target, APP, MergeSpec(mode="append"), engine=engine, spark=spark).recover()
        found = support.ids(target) if support.exists(target) else []
        assert len(found) == len(set(found)), (taken, sorted(found))  # at most once
        assert not wrote, wrote
    resume = False
    for _ in range(4):  # drained as the messages say
        if run(resume=resume) == 0:
            break
        resume = True
    found = support.ids(target)
    assert len(found) == len(set(found)), (taken, sorted(found))
    assert set(found) == expected | job, (taken, sorted(expected | job - set(found)))
    return taken, found


@pytest.mark.generated
@pytest.mark.parametrize("engine", sliced(["embedded", "spark"], keep=("embedded",)))
def test_lifecycles_on_real_streams(tmp_path: Path, engine: str, delta_spark: Any) -> None:
    """A subset of the lifecycle model's rules through real classic streams, on both
    engines: ``make test`` one short lifecycle (embedded), ``make test-generated``
    more, both engines, a fresh seed."""
    rng = generated.rng(f"stream-lifecycle-jvm-{engine}")
    for case in range(generated.count(sample=1, ci=2)):
        steps = generated.count(sample=5, ci=8)
        real_lifecycle(delta_spark, tmp_path / f"case-{case}", engine, rng, steps)
