"""The spark engine's S3 LogStore check (:func:`deltasink.stores.check_spark_log_store`):
Delta's default ``S3SingleDriverLogStore`` makes commit files only-if-absent within one
driver, so two writers on two clusters can both commit one version; it is refused by
name, with the way out (``S3DynamoDBLogStore``), as the embedded engine refuses unsafe
S3 options. Unit level: the session's confs, no S3 (the hadoop-aws jars are not
installed here)."""

from __future__ import annotations

import pytest

from deltasink import ConfigurationError, UnsafeStoreError
from deltasink.stores import check_spark_log_store, spark_log_store_reasons

DYNAMODB = "io.delta.storage.S3DynamoDBLogStore"


class Conf:
    """A session's ``conf`` (``RuntimeConfig.get(key, default)``)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class Session:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = Conf(conf)


def session(conf: dict[str, str] | None = None) -> Session:
    return Session(conf or {})


URIS = ["s3a://bucket/silver/orders", "s3a://bucket/silver/_deltasink_staging/orders"]


def test_the_default_s3_log_store_is_refused_by_name_with_the_way_out() -> None:
    with pytest.raises(UnsafeStoreError) as refused:
        check_spark_log_store(session(), URIS, env={})
    assert isinstance(refused.value, ConfigurationError)  # CLI exit code 3
    assert refused.value.table == URIS[0]
    assert str(refused.value) == (
        "the spark engine would commit to s3a://bucket/silver/orders through a "
        "single-driver Delta LogStore: spark.delta.logStore.s3a.impl is unset (Delta's "
        "default: S3SingleDriverLogStore): it creates a commit file only-if-absent within "
        "one Spark driver, so two drivers (two clusters, or a restarted job beside its "
        "zombie) can both commit one table version. deltasink's exactly-once and fencing "
        "need each Delta commit file created only if absent. Configure Delta's "
        "multi-cluster LogStore (spark.delta.logStore.s3a.impl="
        "io.delta.storage.S3DynamoDBLogStore, with spark.io.delta.storage."
        "S3DynamoDBLogStore.ddb.tableName and .ddb.region, and the "
        "delta-storage-s3-dynamodb jar), or, if exactly one Spark driver ever writes these "
        "tables, accept the risk with allow_unsafe_commits=True (CLI: -o "
        "deltasink.allow_unsafe_commits=true)."
    )


@pytest.mark.parametrize(
    ("uri", "conf"),
    [
        ("s3://b/t", {"spark.delta.logStore.s3.impl": "io.delta.storage.S3SingleDriverLogStore"}),
        ("s3n://b/t", {}),
        (
            "s3a://b/t",
            {
                "spark.delta.logStore.class": "org.apache.spark.sql.delta.storage.S3SingleDriverLogStore"
            },
        ),
        # the multi-cluster store for another scheme leaves s3a on the default
        ("s3a://b/t", {"spark.delta.logStore.s3.impl": DYNAMODB}),
    ],
)
def test_every_spelling_of_the_single_driver_store_is_refused(
    uri: str, conf: dict[str, str]
) -> None:
    with pytest.raises(UnsafeStoreError, match="S3SingleDriverLogStore"):
        check_spark_log_store(session(conf), [uri], env={})


@pytest.mark.parametrize(
    ("uris", "conf", "env", "allow"),
    [
        (URIS, {"spark.delta.logStore.s3a.impl": DYNAMODB}, {}, False),
        (URIS, {"spark.delta.logStore.class": DYNAMODB}, {}, False),
        (URIS, {}, {}, True),  # the user's opt-in: one driver only
        (URIS, {}, {"DATABRICKS_RUNTIME_VERSION": "17.3"}, False),  # Databricks' own commits
        (["/lake/orders", "abfss://c@a.dfs.core.windows.net/t", "gs://b/t"], {}, {}, False),
        (["main.sales.orders"], {}, {}, False),  # a catalog name: its location is Spark's
    ],
)
def test_safe_set_ups_and_the_opt_in_pass(
    uris: list[str], conf: dict[str, str], env: dict[str, str], allow: bool
) -> None:
    check_spark_log_store(session(conf), uris, allow_unsafe_commits=allow, env=env)


def test_the_reasons_alone() -> None:
    assert spark_log_store_reasons("s3a://b/t", {}.get) != []
    assert (
        spark_log_store_reasons("s3a://b/t", {"spark.delta.logStore.s3a.impl": DYNAMODB}.get) == []
    )
    assert spark_log_store_reasons("file:///tmp/t", {}.get) == []


def test_a_spark_engine_sink_on_such_a_store_is_refused_when_it_is_made() -> None:
    """The check runs when the sink resolves its settings, before any table is opened
    (the session here has no tables to open: only the refusal can come first)."""
    from deltasink import DeltaSink, MergeSpec

    with pytest.raises(UnsafeStoreError, match="S3DynamoDBLogStore"):
        DeltaSink(URIS[0], "app", MergeSpec(mode="append"), engine="spark", spark=session())


@pytest.mark.parametrize("opt_in", ["true", "TRUE", " yes "])
def test_the_storage_option_opts_in_as_the_keyword_does(opt_in: str) -> None:
    """``-o deltasink.allow_unsafe_commits=true`` (the CLI's only way, which the refusal
    names) lets the spark engine's sink be made, as ``allow_unsafe_commits=True`` does."""
    from deltasink import DeltaSink, MergeSpec

    options = {"deltasink.allow_unsafe_commits": opt_in}
    made = DeltaSink(
        URIS[0],
        "app",
        MergeSpec(mode="append"),
        engine="spark",
        spark=session(),
        storage_options=options,
    )
    assert made.settings.storage_options == {}  # deltasink's own key stays out of delta-rs


def test_a_storage_option_opt_out_or_a_bad_value_is_not_an_opt_in() -> None:
    from deltasink import DeltaSink, MergeSpec

    for value, error in (("false", UnsafeStoreError), ("maybe", ConfigurationError)):
        with pytest.raises(error):
            DeltaSink(
                URIS[0],
                "app",
                MergeSpec(mode="append"),
                engine="spark",
                spark=session(),
                storage_options={"deltasink.allow_unsafe_commits": value},
            )
