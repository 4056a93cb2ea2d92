"""A classic Spark 3.5 session with Delta 3.3.3 and Hadoop's S3A connector, pointed at a
moto S3 server on 127.0.0.1 (:mod:`tests.s3server`), for ``make test-s3``
(``tests/test_s3_spark.py``) and its racing drivers.

The S3A jars of Spark 3.5's Hadoop line (``hadoop-aws-3.3.1.jar``,
``aws-java-sdk-bundle-1.11.901.jar``) are shipped inside the PyPI package
``sagemaker-pyspark`` 1.4.5: ``make test-s3`` downloads it (hash pinned) and unpacks
the two jars into ``build/s3a-jars/`` (git-ignored); ``DELTASINK_S3A_JARS`` (jar files,
``os.pathsep``-separated) names others. Spark reads ``s3a://`` and, mapped to the same
connector (``fs.s3.impl``, as EMR does), ``s3://``: both spellings of one table.

Delta's ``S3DynamoDBLogStore`` (the ``delta-storage-s3-dynamodb`` jar) ships in no
registry package reachable here; ``DELTASINK_S3_DYNAMODB_JAR`` names one built
elsewhere (:data:`DYNAMODB_JAR`).
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path
from typing import Any

from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY

__all__ = [
    "DYNAMODB_JAR",
    "DYNAMODB_LOG_STORE",
    "DYNAMODB_TABLE",
    "s3a_jars",
    "session",
    "session_conf",
    "unavailable",
]

ROOT = Path(__file__).resolve().parent.parent
#: Where ``make test-s3`` unpacks the S3A jars.
S3A_JARS = ROOT / "build" / "s3a-jars"
#: A ``delta-storage-s3-dynamodb`` jar for Delta 3.x, if the environment names one.
DYNAMODB_JAR = os.environ.get("DELTASINK_S3_DYNAMODB_JAR") or None
DYNAMODB_LOG_STORE = "io.delta.storage.S3DynamoDBLogStore"
DYNAMODB_TABLE = "delta_log"


def s3a_jars() -> list[str]:
    """hadoop-aws and the AWS SDK bundle: ``DELTASINK_S3A_JARS``, else
    ``build/s3a-jars/*.jar`` (empty: neither has them)."""
    listed = os.environ.get("DELTASINK_S3A_JARS")
    if listed:
        return [p for p in listed.split(os.pathsep) if p]
    return sorted(glob.glob(str(S3A_JARS / "*.jar")))


def unavailable() -> str | None:
    """Why the S3A session cannot start here, or ``None``."""
    try:
        import pyspark
    except ImportError:
        return "needs PySpark 3.5 (make test-s3 runs in .venv-spark35/)"
    if not pyspark.__version__.startswith("3.5."):
        return (
            f"PySpark {pyspark.__version__} here: the S3A jars on registries fit Spark 3.5's "
            "Hadoop 3.3 line, so the S3 suite runs on PySpark 3.5 (make test-s3)"
        )
    if shutil.which("java") is None:
        return "needs Java 17 for a classic Spark session"
    from tests.test_contract_spark import REASON

    if REASON is not None:
        return REASON
    names = [os.path.basename(p) for p in s3a_jars()]
    if not all(any(n.startswith(want) for n in names) for want in ("hadoop-aws-", "aws-java-sdk")):
        return (
            "no hadoop-aws / aws-java-sdk-bundle jars: `make test-s3` downloads them into "
            "build/s3a-jars/ (or set DELTASINK_S3A_JARS to the jar files)"
        )
    return None


def session_conf(endpoint: str, *, dynamodb: bool = False) -> dict[str, str]:
    """The session's confs: Delta, S3A on ``endpoint`` (path-style, plain HTTP, the
    server's dummy credentials), ``s3://`` through S3A too, and the small-table settings
    of the delta-spark suite. ``dynamodb``: Delta's multi-cluster LogStore for both
    schemes (:data:`DYNAMODB_JAR` must be on the class path)."""
    from tests import support
    from tests.test_contract_spark import delta_jars

    jars = [*delta_jars(), *s3a_jars(), *([DYNAMODB_JAR] if dynamodb and DYNAMODB_JAR else [])]
    conf = {
        "spark.jars": ",".join(jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "1",
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        **support.CHEAP_SPARK_CONF,
        "spark.hadoop.fs.s3a.endpoint": endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
        "spark.hadoop.fs.s3a.access.key": ACCESS_KEY,
        "spark.hadoop.fs.s3a.secret.key": SECRET_KEY,
        "spark.hadoop.fs.s3a.directory.marker.retention": "keep",
        "spark.hadoop.fs.s3a.fast.upload.buffer": "bytebuffer",
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    if dynamodb:
        for scheme in ("s3a", "s3"):
            conf[f"spark.delta.logStore.{scheme}.impl"] = DYNAMODB_LOG_STORE
        prefix = "spark.io.delta.storage.S3DynamoDBLogStore"
        conf[f"{prefix}.ddb.tableName"] = DYNAMODB_TABLE
        conf[f"{prefix}.ddb.region"] = REGION
    return conf


def session(endpoint: str, app_name: str, *, dynamodb: bool = False) -> Any:
    """A local classic session with :func:`session_conf`."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in session_conf(endpoint, dynamodb=dynamodb).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
