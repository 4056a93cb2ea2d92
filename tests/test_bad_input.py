"""SPEC "What bad input gets": a named error before anything is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from deltasink import (
    ConfigurationError,
    DeltaSink,
    DuplicateKeyError,
    InvalidInputError,
    InvalidVersionError,
    KeyColumnError,
    MergeSpec,
    NotADeltaTableError,
    SchemaMismatchError,
    StagingFormatError,
    StagingOwnershipError,
)
from deltasink.core.guards import check_owner
from deltasink.locations import location_key, normalize_uri
from deltasink.ops.layout import PROP_APP, PROP_TARGET
from tests import support

UPSERT = MergeSpec(keys=["id"])


def orders(**columns: Any) -> pa.Table:
    return pa.table(columns)


@pytest.fixture
def existing(target: str) -> DeltaSink:
    """A sink whose target exists with (id long, value string) and version 0 committed."""
    sink = DeltaSink(target, "bad-input", UPSERT)
    sink.write(orders(id=[1, 2], value=["a", "b"]), 0)
    return sink


def assert_nothing_written(sink: DeltaSink, target_version: int | None) -> None:
    assert support.staged_versions(sink.staging) == []
    assert support.table_version(sink.target) == target_version
    assert sink.status().pending_versions == []


def test_incompatible_type_is_rejected(existing: DeltaSink) -> None:
    with pytest.raises(SchemaMismatchError, match="'value' has type int64 but target") as info:
        existing.pre_commit(orders(id=[3], value=[7]), 1)
    assert info.value.column == "value"
    assert info.value.table == existing.target
    assert_nothing_written(existing, 0)


def test_unknown_column_is_rejected_without_schema_evolution(existing: DeltaSink) -> None:
    with pytest.raises(SchemaMismatchError, match=r"'extra'.*schema_evolution=True"):
        existing.pre_commit(orders(id=[3], value=["c"], extra=[1.5]), 1)
    assert_nothing_written(existing, 0)


def test_column_name_case_mismatch_is_named(existing: DeltaSink) -> None:
    with pytest.raises(SchemaMismatchError, match="the target has 'value'"):
        existing.pre_commit(orders(id=[3], Value=["c"]), 1)


def test_lossy_cast_is_rejected_but_widening_is_accepted(existing: DeltaSink) -> None:
    with pytest.raises(SchemaMismatchError, match="could lose data"):
        existing.pre_commit(orders(id=pa.array([3.5]), value=["c"]), 1)
    existing.write(orders(id=pa.array([3], pa.int32()), value=["c"]), 1)  # int32 -> long
    assert support.ids(existing.target) == [1, 2, 3]


def test_missing_key_column(existing: DeltaSink) -> None:
    with pytest.raises(KeyColumnError, match="key column 'id' is missing") as info:
        existing.pre_commit(orders(value=["c"]), 1)
    assert info.value.column == "id"
    assert_nothing_written(existing, 0)


def test_null_key(existing: DeltaSink) -> None:
    with pytest.raises(KeyColumnError, match="'id' is null in 1 row"):
        existing.pre_commit(orders(id=pa.array([3, None], pa.int64()), value=["c", "d"]), 1)
    assert_nothing_written(existing, 0)


def test_null_sequence_by(target: str) -> None:
    sink = DeltaSink(target, "seq", MergeSpec(keys=["id"], sequence_by="ts"))
    with pytest.raises(KeyColumnError, match="sequence_by column 'ts' is null"):
        sink.pre_commit(orders(id=[1], ts=pa.array([None], pa.int64())), 0)
    assert_nothing_written(sink, None)


def test_duplicate_keys_without_sequence_by(existing: DeltaSink) -> None:
    with pytest.raises(DuplicateKeyError, match=r"\{'id': 3\} \(2 times\).*sequence_by"):
        existing.pre_commit(orders(id=[3, 3, 4], value=["c", "C", "d"]), 1)
    assert_nothing_written(existing, 0)


def test_duplicate_composite_keys(target: str) -> None:
    sink = DeltaSink(target, "composite", MergeSpec(keys=["region", "id"]))
    batch = orders(region=["eu", "us", "eu"], id=[1, 1, 1], value=["a", "b", "c"])
    with pytest.raises(DuplicateKeyError, match="'region': 'eu', 'id': 1"):
        sink.pre_commit(batch, 0)
    sink.write(orders(region=["eu", "us"], id=[1, 1], value=["a", "b"]), 0)  # distinct pairs
    assert len(support.rows(sink.target)) == 2


def test_duplicate_keys_with_sequence_by_keep_the_latest(target: str) -> None:
    sink = DeltaSink(target, "seq", MergeSpec(keys=["id"], sequence_by="ts"))
    sink.write(orders(id=[1, 1, 2, 1], ts=[5, 9, 1, 7], value=["a", "b", "c", "d"]), 0)
    assert support.rows(target) == [
        {"id": 1, "ts": 9, "value": "b"},
        {"id": 2, "ts": 1, "value": "c"},
    ]


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (-1, "between 0 and"),
        (2**63, "between 0 and"),
        (2**63 - 1, "between 0 and 9223372036854775806"),
        (1.0, "must be an int"),
        ("7", "must be an int"),
        (True, "must be an int"),
        (None, "must be an int"),
    ],
)
def test_invalid_versions(existing: DeltaSink, version: Any, message: str) -> None:
    with pytest.raises(InvalidVersionError, match=message):
        existing.pre_commit(orders(id=[3], value=["c"]), version)
    with pytest.raises(InvalidVersionError, match=message):
        existing.commit(version)
    assert_nothing_written(existing, 0)


def test_numpy_integer_versions_are_accepted(existing: DeltaSink) -> None:
    existing.write(orders(id=[3], value=["c"]), np.int64(1))
    assert support.marker(existing.target, "bad-input") == 1


def test_version_going_backwards(existing: DeltaSink) -> None:
    existing.pre_commit(orders(id=[3], value=["c"]), 5)
    with pytest.raises(InvalidVersionError, match=r"goes backwards.*staged version 5") as info:
        existing.pre_commit(orders(id=[4], value=["d"]), 4)
    assert info.value.version == 4
    assert support.staged_versions(existing.staging) == [5]


def test_a_version_at_or_below_the_committed_one_stages_nothing(existing: DeltaSink) -> None:
    committable = existing.pre_commit(orders(id=[9], value=["z"]), 0)
    assert committable.state == "already_committed"
    assert_nothing_written(existing, 0)


def test_staging_of_another_app_is_refused(existing: DeltaSink) -> None:
    other = DeltaSink(existing.target, "other-app", UPSERT, staging=existing.staging)
    with pytest.raises(StagingOwnershipError, match=r"belongs to target .* and app 'bad-input'"):
        other.pre_commit(orders(id=[3], value=["c"]), 0)
    with pytest.raises(StagingOwnershipError):
        other.status()
    assert support.table_version(existing.target) == 0


def test_a_staging_table_of_a_newer_layout_format_is_refused(existing: DeltaSink) -> None:
    """The compatibility policy (docs/guarantees.md, "Compatibility"): a release reads
    every layout format up to its own and refuses a newer one, writing nothing."""
    from deltalake import DeltaTable

    from deltasink.ops.layout import FORMAT, PROP_FORMAT

    existing.pre_commit(orders(id=[3], value=["c"]), 1)
    staging = DeltaTable(existing.staging)
    assert staging.metadata().configuration[PROP_FORMAT] == FORMAT == "1"
    staging.alter.set_table_properties({PROP_FORMAT: "2"}, raise_if_not_exists=False)
    before = support.table_version(existing.staging)
    again = DeltaSink(existing.target, "bad-input", UPSERT)
    for call in (again.status, again.recover, lambda: again.write(orders(id=[4], value=["d"]), 2)):
        with pytest.raises(StagingFormatError, match=r"layout format '2'.*up to '1'") as info:
            call()
        assert isinstance(info.value, ConfigurationError)
    assert support.table_version(existing.staging) == before
    assert support.marker(existing.target, "bad-input") == 0


def test_staging_of_another_target_is_refused(existing: DeltaSink, tmp_path: Path) -> None:
    other = DeltaSink(str(tmp_path / "elsewhere"), "bad-input", UPSERT, staging=existing.staging)
    with pytest.raises(StagingOwnershipError, match="belongs to target"):
        other.write(orders(id=[3], value=["c"]), 1)
    assert not support.exists(str(tmp_path / "elsewhere"))


def test_staging_of_another_target_says_how_to_keep_its_pending_versions(
    existing: DeltaSink, tmp_path: Path
) -> None:
    existing.pre_commit(orders(id=[3], value=["c"]), 1)  # pending in that staging table
    other = DeltaSink(str(tmp_path / "elsewhere"), "bad-input", UPSERT, staging=existing.staging)
    with pytest.raises(StagingOwnershipError) as info:
        other.recover()
    message = str(info.value)
    assert "pass another staging=" not in message  # that advice orphaned versions
    assert f"pass target={existing.target!r} and app_id='bad-input'" in message
    assert f"`deltasink status {existing.target} --app bad-input`" in message
    assert existing.status().pending_versions == [1]


def test_one_local_table_through_a_symlink_and_a_trailing_slash_is_one_location(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    job = DeltaSink(str(real / "orders"), "app", UPSERT, staging=str(real / "stage"))
    job.write(orders(id=[1], value=["a"]), 0)
    job.pre_commit(orders(id=[2], value=["b"]), 1)  # then the job stops
    # The next run spells the same tables through the symlink, with trailing slashes.
    again = DeltaSink(
        f"{tmp_path / 'link' / 'orders'}/", "app", UPSERT, staging=f"{tmp_path / 'link' / 'stage'}/"
    )
    assert (again.target, again.staging) == (job.target, job.staging)
    assert again.status().pending_versions == [1]
    assert again.recover().committed_versions == [1]
    assert support.rows(job.target, sort_by="id") == [
        {"id": 1, "value": "a"},
        {"id": 2, "value": "b"},
    ]
    assert support.marker(job.target, "app") == 1
    # The default staging table is found through a symlinked target too.
    linked_target = tmp_path / "orders_link"
    linked_target.symlink_to(real / "orders", target_is_directory=True)
    by_default = DeltaSink(str(real / "orders"), "dflt", UPSERT)
    by_default.pre_commit(orders(id=[3], value=["c"]), 0)
    assert DeltaSink(str(linked_target), "dflt", UPSERT).recover().committed_versions == [0]
    assert support.marker(job.target, "dflt") == 0
    assert support.ids(job.target) == [1, 2, 3]


@pytest.mark.parametrize(
    ("recorded", "given"),
    [
        ("s3://lake/silver/orders", "s3a://lake/silver/orders/"),
        ("s3a://lake/silver/orders", "s3://lake/silver/orders"),
        ("s3n://Lake/silver/orders/", "s3://lake/silver/orders"),
        (
            "abfss://lake@acct.dfs.core.windows.net/silver/orders",
            "wasbs://lake@acct.blob.core.windows.net/silver/orders/",
        ),
        (
            "abfs://lake@acct.dfs.core.windows.net/silver/orders",
            "abfss://lake@acct.dfs.core.windows.net/silver/orders",
        ),
    ],
)
def test_object_store_spellings_of_one_target_own_the_same_staging(
    recorded: str, given: str
) -> None:
    props = {PROP_TARGET: recorded, PROP_APP: "app"}
    check_owner(props, staging="s3://lake/stage", target=normalize_uri(given), app_id="app")
    assert location_key(recorded) == location_key(given)


@pytest.mark.parametrize(
    ("recorded", "given"),
    [
        ("s3://lake/silver/orders", "s3://lake/silver/orders2"),
        ("s3://lake/silver/orders", "gs://lake/silver/orders"),
        (
            "abfss://lake@acct.dfs.core.windows.net/silver/orders",
            "abfss://lake@other.dfs.core.windows.net/silver/orders",
        ),
    ],
)
def test_other_object_store_locations_stay_other_targets(recorded: str, given: str) -> None:
    props = {PROP_TARGET: recorded, PROP_APP: "app"}
    with pytest.raises(StagingOwnershipError, match="belongs to target"):
        check_owner(props, staging="s3://lake/stage", target=given, app_id="app")


def test_a_foreign_delta_table_is_refused_as_staging(target: str, tmp_path: Path) -> None:
    foreign = str(tmp_path / "foreign")
    write_deltalake(foreign, orders(id=[1]))
    sink = DeltaSink(target, "app", UPSERT, staging=foreign)
    with pytest.raises(StagingOwnershipError, match="deltasink did not create"):
        sink.pre_commit(orders(id=[3], value=["c"]), 0)
    assert DeltaTable(foreign).version() == 0


def test_target_that_is_not_a_delta_table(tmp_path: Path) -> None:
    target = tmp_path / "csv_dir"
    target.mkdir()
    (target / "part-0.csv").write_text("id\n1\n")
    sink = DeltaSink(str(target), "app", UPSERT)
    with pytest.raises(NotADeltaTableError, match="is not a Delta table") as info:
        sink.pre_commit(orders(id=[1], value=["a"]), 0)
    assert info.value.table == str(target)
    assert support.staged_versions(sink.staging) == []
    assert sorted(p.name for p in target.iterdir()) == ["part-0.csv"]


def test_unsupported_batch_type() -> None:
    sink = DeltaSink("/nonexistent/never-written", "app", UPSERT)
    with pytest.raises(InvalidInputError, match=r"got builtins.list"):
        sink.pre_commit([{"id": 1}], 0)


def test_reserved_and_duplicate_column_names(target: str) -> None:
    sink = DeltaSink(target, "app", UPSERT)
    with pytest.raises(SchemaMismatchError, match="reserves"):
        sink.pre_commit(orders(id=[1], _deltasink_version=[3]), 0)
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["id", "id"])
    with pytest.raises(SchemaMismatchError, match="duplicate column names"):
        sink.pre_commit(dup, 0)
    assert support.staged_versions(sink.staging) == []


def test_invalid_delete_when_is_named_before_writing(target: str, spark: Any) -> None:
    sink = DeltaSink(target, "app", MergeSpec(keys=["id"], delete_when="no_such_column = 'D'"))
    df = spark.createDataFrame([(1, "U")], "id long, op string")
    with pytest.raises(InvalidInputError, match=r"delete_when .*no_such_column.* is not a valid"):
        sink.pre_commit(df, 0)
    assert support.staged_versions(sink.staging) == []


def test_not_null_target_column(tmp_path: Path) -> None:
    target = str(tmp_path / "strict")
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string(), False)])
    DeltaTable.create(target, schema)
    sink = DeltaSink(target, "app", UPSERT)
    with pytest.raises(SchemaMismatchError, match="'name' is NOT NULL"):
        sink.pre_commit(pa.table({"id": [1], "name": pa.array([None], pa.string())}), 0)
    with pytest.raises(SchemaMismatchError, match=r"NOT NULL column\(s\) \['name'\]"):
        sink.pre_commit(pa.table({"id": [1]}), 0)
    assert_nothing_written(sink, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"keys": []}, "needs keys"),
        ({"keys": ["id"], "mode": "overwrite"}, "mode must be one of"),
        ({"mode": "append", "keys": ["id"]}, "takes no keys"),
        ({"keys": ["id", "id"]}, "duplicates"),
        ({"keys": ["id"], "sequence_by": "id"}, "is a key column"),
        ({"keys": ["id"], "mode": "insert", "delete_when": "x"}, "only valid with mode='upsert'"),
        ({"keys": ["id"], "delete_when": "  "}, "non-empty Spark SQL predicate"),
        ({"keys": ["_deltasink_x"]}, "reserved prefix"),
    ],
)
def test_invalid_merge_specs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        MergeSpec(**kwargs)


@pytest.mark.parametrize("app_id", ["", "has space", "a/b", "-leading", "x" * 201, 7])
def test_invalid_app_ids(target: str, app_id: Any) -> None:
    with pytest.raises(ConfigurationError, match="app_id must be"):
        DeltaSink(target, app_id, UPSERT)


def test_invalid_timeouts(target: str) -> None:
    with pytest.raises(ConfigurationError, match="needs transaction_timeout"):
        DeltaSink(target, "app", UPSERT, ignore_failures_after_timeout=True)
    with pytest.raises(ConfigurationError, match="positive and finite"):
        DeltaSink(target, "app", UPSERT, transaction_timeout=0)
    with pytest.raises(ConfigurationError, match=r"warning_ratio must be in \(0, 1\]"):
        DeltaSink(target, "app", UPSERT, transaction_timeout=10, timeout_warning_ratio=1.5)


def test_no_merge_spec_anywhere(target: str) -> None:
    sink = DeltaSink(target, "app")
    with pytest.raises(ConfigurationError, match="no MergeSpec given"):
        sink.pre_commit(orders(id=[1]), 0)


def test_changing_the_merge_spec_with_pending_versions_is_refused(target: str) -> None:
    DeltaSink(target, "app", UPSERT).pre_commit(orders(id=[1], value=["a"]), 0)
    changed = DeltaSink(target, "app", MergeSpec(keys=["id"], mode="insert"))
    with pytest.raises(ConfigurationError, match=r"versions \[0\].*staged with"):
        changed.pre_commit(orders(id=[2], value=["b"]), 1)
    # recover with the new sink commits v0 with the spec it was staged with (upsert)
    assert changed.recover().committed_versions == [0]
    changed.write(orders(id=[1, 2], value=["x", "b"]), 1)  # insert-if-absent now
    assert support.rows(target) == [{"id": 1, "value": "a"}, {"id": 2, "value": "b"}]
