"""What a newcomer meets first (issue 44), on the embedded engine fed with Arrow: a batch
lacking a target column refused by name unless the spec says the batches carry a
subset (``MergeSpec.allow_missing_columns``); a write of a committed version that
warns (:class:`~deltasink.ReplayWarning`) where logging is not configured; what
``keys="order_id"`` means; a Ctrl-C that says what it interrupted. The spark engine's
twin of the missing-column refusal is in tests/test_any_writer.py."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from deltasink import (
    ConfigurationError,
    DeltaSink,
    MergeSpec,
    ReplayWarning,
    SchemaMismatchError,
)
from deltasink._faults import armed
from deltasink.ops.layout import PROP_SPEC
from tests import support


def rows(**columns: Any) -> pa.Table:
    return pa.table(columns)


def table_rows(target: str) -> list[dict[str, Any]]:
    return support.rows(target)


# -- a batch lacking a target column ----------------------------------------------------

KEYED = {
    "upsert": MergeSpec(keys=["id"]),
    "insert": MergeSpec(keys=["id"], mode="insert"),
    "scd2": MergeSpec(keys=["id"], mode="scd2", sequence_by="seq"),
}


@pytest.mark.parametrize("mode", sorted(KEYED))
def test_a_merge_batch_lacking_a_target_column_is_refused_by_name_nothing_staged(
    target: str, mode: str
) -> None:
    """Delta's MERGE refuses a source without a target column (no schema evolution):
    so does every MERGE mode, naming the column and the way out, before staging."""
    sink = DeltaSink(target, "a", KEYED[mode])
    sink.write(rows(id=[1, 2], seq=[1, 1], v=["a", "b"]), 0)
    before = support.table_version(target)
    with pytest.raises(SchemaMismatchError) as raised:
        sink.write(rows(id=[2, 3], seq=[2, 2]), 1)
    message = str(raised.value)
    assert message.startswith(f"the batch lacks column(s) ['v'] of target {target}: ")
    assert f"MergeSpec(mode={mode!r})" in message
    assert message.endswith(
        "Nothing was staged. Add the column(s) to the batch, or, if the batches carry a "
        "subset of the columns on purpose, set MergeSpec(allow_missing_columns=True)."
    )
    assert raised.value.column == "v"
    assert support.staged_versions(sink.staging) == []
    assert support.table_version(target) == before
    assert sink.status().committed_version == 0


def test_allow_missing_columns_inserts_null_and_keeps_the_matched_rows_values(
    target: str,
) -> None:
    spec = MergeSpec(keys=["id"], allow_missing_columns=True)
    sink = DeltaSink(target, "a", spec)
    sink.write(rows(id=[1, 2], a=["a1", "a2"], b=["b1", "b2"]), 0)
    sink.write(rows(id=[2, 3], a=["A2", "A3"]), 1)
    assert table_rows(target) == [
        {"id": 1, "a": "a1", "b": "b1"},
        {"id": 2, "a": "A2", "b": "b2"},
        {"id": 3, "a": "A3", "b": None},
    ]


@pytest.mark.parametrize(
    "spec",
    [MergeSpec(mode="append"), MergeSpec(mode="replace", replace_by=["id"])],
    ids=["append", "replace"],
)
def test_append_and_replace_take_a_subset_as_deltas_writes_do(target: str, spec: MergeSpec) -> None:
    """A Delta DataFrame write (append, replaceWhere) fills a column it lacks with null:
    the write modes do the same, without the flag."""
    sink = DeltaSink(target, "a", spec)
    sink.write(rows(id=[1, 2], v=["a", "b"]), 0)
    sink.write(rows(id=[2, 3]), 1)
    expected = [(1, "a"), (2, "b"), (2, None), (3, None)]
    if spec.mode == "replace":
        expected = [(1, "a"), (2, None), (3, None)]
    assert sorted(((r["id"], r["v"]) for r in table_rows(target)), key=str) == sorted(
        expected, key=str
    )


def test_schema_evolution_takes_a_subset_as_deltas_merge_with_evolution_does(
    target: str,
) -> None:
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"], schema_evolution=True))
    sink.write(rows(id=[1, 2], v=["a", "b"]), 0)
    sink.write(rows(id=[2, 3], w=[20, 30]), 1)
    assert table_rows(target) == [
        {"id": 1, "v": "a", "w": None},
        {"id": 2, "v": "b", "w": 20},
        {"id": 3, "v": None, "w": 30},
    ]


def test_a_spec_recorded_without_the_field_loads_with_it_off_and_is_written_so() -> None:
    """An older release recorded no ``allow_missing_columns``: it loads as ``False``, and
    a spec with it off records the same JSON (older releases read it)."""
    old = json.loads(MergeSpec(keys=["id"]).to_json())
    assert "allow_missing_columns" not in old
    assert MergeSpec.from_json(json.dumps(old)).allow_missing_columns is False
    on = MergeSpec(keys=["id"], allow_missing_columns=True)
    assert json.loads(on.to_json())["allow_missing_columns"] is True
    assert MergeSpec.from_json(on.to_json()) == on
    with pytest.raises(ConfigurationError, match="allow_missing_columns must be True or False"):
        MergeSpec(keys=["id"], allow_missing_columns="yes")  # type: ignore[arg-type]


def test_a_subset_version_an_older_release_staged_is_still_recovered(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version staged without the check (an older release: its recorded spec has no
    field) is published by ``recover()`` as it was staged, by a sink given the spec
    without the flag and by an operator's sink (``merge=None``) alike; the check is on
    new batches only."""
    import deltasink.input.batch as batch_module

    spec = MergeSpec(keys=["id"])
    DeltaSink(target, "a", spec).write(rows(id=[1, 2], a=["a1", "a2"], b=["b1", "b2"]), 0)
    with monkeypatch.context() as patched:  # the older release: no check
        patched.setattr(batch_module, "check_missing_columns", lambda *a, **k: None)
        job = DeltaSink(target, "a", spec)
        job.pre_commit(rows(id=[2, 3], a=["A2", "A3"]), 1)
    staging = DeltaTable(job.staging).metadata().configuration
    assert "allow_missing_columns" not in json.loads(staging[PROP_SPEC])
    report = DeltaSink(target, "a").recover()
    assert report.committed_versions == [1]
    assert table_rows(target) == [
        {"id": 1, "a": "a1", "b": "b1"},
        {"id": 2, "a": "A2", "b": "b2"},
        {"id": 3, "a": "A3", "b": None},
    ]
    with pytest.raises(SchemaMismatchError, match=r"lacks column\(s\) \['b'\]"):
        DeltaSink(target, "a", spec).write(rows(id=[4], a=["a4"]), 2)


def test_turning_allow_missing_columns_on_with_versions_pending_is_not_a_spec_change(
    target: str,
) -> None:
    """The flag decides which batches are staged, not how staged ones are published:
    a job that sets it while versions are pending goes on (any other change of the
    spec is refused until they are committed)."""
    DeltaSink(target, "a", MergeSpec(keys=["id"])).pre_commit(rows(id=[1], a=["a"], b=["b"]), 0)
    job = DeltaSink(target, "a", MergeSpec(keys=["id"], allow_missing_columns=True))
    report = job.write(rows(id=[2], a=["c"]), 1)
    assert report.committed_versions == [0, 1]
    assert table_rows(target) == [{"id": 1, "a": "a", "b": "b"}, {"id": 2, "a": "c", "b": None}]


# -- a write of a committed version -------------------------------------------------------


def test_rewriting_a_committed_version_with_other_rows_warns_where_logging_is_silent(
    target: str,
) -> None:
    """The README's snippet configures no logging: the replay says so through
    :mod:`warnings`, attributed to the caller's line, and writes nothing."""
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    sink.write(rows(id=[1], v=["first"]), 0)
    with pytest.warns(ReplayWarning) as caught:
        report = sink.write(rows(id=[1, 2], v=["second", "x"]), 0)
    assert report.results == ()
    assert [str(w.message) for w in caught] == [
        "version 0 of app 'a' is already committed (the target's marker); nothing was "
        "written. A re-run after a crash is this case. If this batch holds new rows, "
        "write it as a new version: a version is never applied twice, whatever rows it "
        "carries."
    ]
    assert caught[0].filename == __file__
    assert table_rows(target) == [{"id": 1, "v": "first"}]


def test_an_older_version_sent_again_warns_and_writes_nothing(target: str) -> None:
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    sink.write(rows(id=[1], v=["a"]), 0)
    sink.write(rows(id=[2], v=["b"]), 1)
    with pytest.warns(ReplayWarning, match="below the committed version 1") as caught:
        assert sink.pre_commit(rows(id=[3], v=["c"]), 0).state == "already_committed"
    assert str(caught[0].message).startswith(
        "version 0 of app 'a' is below the committed version 1: an older batch sent again, "
        "or versions that went backwards; nothing was written (on_stale='skip')."
    )
    assert support.ids(target) == [1, 2]


def test_a_streams_replay_of_its_last_batch_does_not_warn(target: str) -> None:
    """A ``foreachBatch`` replay of the last batch after a restart is the stream's
    normal course: no warning."""
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    sink.write(rows(id=[1], v=["a"]), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReplayWarning)
        assert sink._stream._write(rows(id=[1], v=["a"]), 0).results == ()


# -- keys as one string -------------------------------------------------------------------


def test_keys_given_as_one_string_is_that_one_key(target: str) -> None:
    spec = MergeSpec(keys="order_id")
    assert spec == MergeSpec(keys=["order_id"])
    assert spec.keys == ("order_id",)
    sink = DeltaSink(target, "a", spec)
    sink.write(rows(order_id=[1, 2], v=["a", "b"]), 0)
    sink.write(rows(order_id=[2], v=["B"]), 1)
    assert support.rows(target, sort_by="order_id") == [
        {"order_id": 1, "v": "a"},
        {"order_id": 2, "v": "B"},
    ]


def test_keys_given_as_one_string_with_a_comma_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError) as raised:
        MergeSpec(keys="order_id, line")
    assert str(raised.value) == (
        "MergeSpec(keys='order_id, line') is one string, so one key column named "
        "'order_id, line'. For several keys pass a list: keys=['order_id', 'line'] (for "
        "one column whose name holds a comma: keys=['order_id, line'])."
    )
    assert MergeSpec(keys=["order_id, line"]).keys == ("order_id, line",)


# -- Ctrl-C -------------------------------------------------------------------------------


def interrupt(**_: object) -> None:
    raise KeyboardInterrupt


def test_ctrl_c_after_the_commit_says_the_version_is_committed(target: str) -> None:
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    with (
        armed("publish.after_target_commit", interrupt),
        pytest.raises(KeyboardInterrupt) as raised,
    ):
        sink.write(rows(id=[1], v=["a"]), 0)
    assert raised.value.__notes__ == [
        "deltasink: interrupted in write() of app 'a', version 0. As read right after the "
        "interrupt, version 0 is committed (the target's txn marker says so) (a commit "
        "still in flight on the engine may land after this). Re-running write(batch, 0) "
        "with the same batch is safe: a no-op if committed, a resume if staged."
    ]
    with pytest.warns(ReplayWarning):
        assert sink.write(rows(id=[1], v=["a"]), 0).results == ()
    assert table_rows(target) == [{"id": 1, "v": "a"}]


def test_ctrl_c_before_the_commit_says_what_is_staged(target: str) -> None:
    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    sink.write(rows(id=[1], v=["a"]), 0)
    sink.pre_commit(rows(id=[2], v=["b"]), 1)
    with (
        armed("publish.before_target_commit", interrupt),
        pytest.raises(KeyboardInterrupt) as raised,
    ):
        sink.commit(1)
    (note,) = raised.value.__notes__
    assert "version 1 is staged, not committed yet" in note
    assert note.endswith("Re-running commit(1) or recover() is safe.")
    with armed("stage.before_write", interrupt), pytest.raises(KeyboardInterrupt) as raised:
        sink.write(rows(id=[3], v=["c"]), 2)
    assert "version 2 is neither staged nor committed" in raised.value.__notes__[0]
    assert sink.write(rows(id=[3], v=["c"]), 2).committed_versions == [1, 2]
    assert support.ids(target) == [1, 2, 3]


def test_system_exit_from_a_sigterm_handler_carries_the_note_too(target: str) -> None:
    def exit_now(**_: object) -> None:
        raise SystemExit(143)

    sink = DeltaSink(target, "a", MergeSpec(keys=["id"]))
    with armed("publish.after_target_commit", exit_now), pytest.raises(SystemExit) as raised:
        sink.write(rows(id=[1], v=["a"]), 0)
    assert raised.value.code == 143
    assert "version 0 is committed" in raised.value.__notes__[0]
